"""benchmarks/collect.py on the recorded device runs: numbers equal a direct computation from metrics.jsonl."""

import json
import statistics
from pathlib import Path

import collect

CALL_2 = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "2026-11-29-h200" / "call-2"


def steps_of(run):
    rows = [json.loads(line) for line in (CALL_2 / run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "timing_s/step" in r]


def test_public_recipe_summary_equals_direct_computation():
    rows = steps_of("public-recipe")
    result = collect.summarise(CALL_2 / "public-recipe")
    assert result["steps"] == len(rows) == 8
    assert result["tokens_per_second"] == statistics.mean(r["perf/total_num_tokens"] / r["timing_s/step"] for r in rows[1:])
    assert result["peak_allocated_gib"] == max(r["perf/max_memory_allocated_gb"] for r in rows)
    assert (result["batch"], result["micro_batch"]["actor"], result["attention"], result["memory_limit_gib"]) == (1, 1, "eager", 22.5)
    assert result["losses_finite"] is True


def test_tuned_beats_public_by_the_recorded_factor_and_table_has_a_row_per_run():
    tuned = collect.summarise(CALL_2 / "tuned-p40")
    public = collect.summarise(CALL_2 / "public-recipe")
    assert tuned["tokens_per_second"] / public["tokens_per_second"] > 8
    assert tuned["peak_allocated_gib"] / tuned["memory_limit_gib"] < 0.85
    table = collect.markdown([tuned, public]).splitlines()
    assert len(table) == 4 and table[2].startswith("| tuned-p40 | ppo | 32 x 1 | 8/16/8/32 | 256/256 |")
