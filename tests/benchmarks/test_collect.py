"""benchmarks/collect.py on the recorded device runs: numbers equal a direct computation from metrics.jsonl."""

import json
import statistics
from pathlib import Path

import pytest

import collect

CALL_2 = (
    Path(__file__).resolve().parents[2]
    / "benchmarks"
    / "results"
    / "2026-11-29-h200-p40-main-job-learning-planner"
    / "public-recipe-tuned-grpo"
)


def steps_of(run):
    rows = [json.loads(line) for line in (CALL_2 / run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "timing_s/step" in r]


def test_public_recipe_summary_equals_direct_computation():
    rows = steps_of("public-recipe")
    result = collect.summarise(CALL_2 / "public-recipe")
    assert result["steps"] == len(rows) == 8
    assert result["tokens_per_second"] == statistics.mean(
        r["perf/total_num_tokens"] / r["timing_s/step"] for r in rows[1:]
    )
    assert result["peak_allocated_gib"] == max(r["perf/max_memory_allocated_gb"] for r in rows)
    assert (result["batch"], result["micro_batch"]["actor"], result["attention"], result["memory_limit_gib"]) == (
        1,
        1,
        "eager",
        22.5,
    )
    assert result["losses_finite"] is True


def test_tuned_beats_public_by_the_recorded_factor_and_table_has_a_row_per_run():
    tuned = collect.summarise(CALL_2 / "tuned-p40")
    public = collect.summarise(CALL_2 / "public-recipe")
    assert tuned["tokens_per_second"] / public["tokens_per_second"] > 8
    assert tuned["peak_allocated_gib"] / tuned["memory_limit_gib"] < 0.85
    table = collect.markdown([tuned, public]).splitlines()
    assert len(table) == 4 and table[2].startswith("| tuned-p40 | ppo | 32 x 1 | 8/16/8/32 | 256/256 |")


CALL_5 = CALL_2.parent / "learning-check"


def validation_scores(run):
    """(step, score) of every validation line in the raw metrics, step 0 (before training) included."""
    rows = [json.loads(line) for line in (CALL_5 / run / "metrics.jsonl").read_text().splitlines()]
    key = "val-core/openai/gsm8k/reward/mean@1"
    return {r["step"]: r[key] for r in rows if key in r}


def test_learning_check_curves_equal_the_raw_validation_lines_and_rise_by_the_target():
    results = [collect.summarise(CALL_5 / run) for run in ("learn-grpo-lr1e-5", "learn-ppo-lr1e-5")]
    for result in results:
        curve = dict(result["validation"]["val-core/openai/gsm8k/reward/mean@1"])
        assert curve == validation_scores(result["run"])
        assert sorted(curve) == list(range(0, 201, 20))
        assert curve[200] - curve[0] >= 0.10  # issue 6's learning target, on the recorded device run
    table = collect.validation_markdown(results).splitlines()
    assert table[3] == "| step | learn-grpo-lr1e-5 | learn-ppo-lr1e-5 |"
    assert table[5] == "| 0 | 0.320 | 0.320 |"
    assert table[-1] == "learn-grpo-lr1e-5: 0.320 -> 0.520 (best 0.520); learn-ppo-lr1e-5: 0.320 -> 0.469 (best 0.469)"


def test_runs_without_validation_add_no_second_table():
    assert collect.validation_markdown([collect.summarise(CALL_2 / "tuned-p40")]) == ""


# The planner's calibration points (docs/benchmarks.md section 2.1): recorded device runs of the Qwen2.5-0.5B shape.
CALIBRATION = [
    ("smoke-tuned", "tuned-p40", 17.96),
    ("public-recipe-tuned-grpo", "public-recipe", 14.79),
    ("public-recipe-tuned-grpo", "main-grpo", 16.80),
    ("main-grpo-learn-a10-shared", "main-grpo", 16.80),
    ("main-grpo-learn-a10-shared", "a10-like", 16.74),
    ("main-ppo-resumed-to-39", "main-ppo", 16.90),
    ("main-ppo-resumed-to-50-gputests", "main-ppo", 16.90),  # the full 50 steps (25, then --resume --steps 50)
    # no memory limit (issue 4: under a limit the allocator's reserve grows to it); the two a10 micro-16 runs
    # calibrated plan.LOGPROB_LOGIT_BYTES' eager bf16 entry, the others check it
    ("grpo-calibration-uncapped", "cal-p40-ppo-m4-512", 16.90),
    ("grpo-calibration-uncapped", "cal-p40-ppo-m8-opt", 13.03),
    ("grpo-calibration-uncapped", "cal-p40-grpo-m4", 13.03),
    ("grpo-calibration-uncapped", "cal-a10-ppo-m8", 21.55),
    ("grpo-calibration-uncapped", "cal-a10-ppo-m4-nockpt", 17.66),
    ("grpo-calibration-uncapped", "cal-a10-grpo-m8", 16.95),
    ("grpo-calibration-uncapped", "main-grpo", 16.80),
    ("calibration-check-bf16", "cal-a10-grpo-m16-256", 25.06),  # uncapped, after the fit: an independent check (-3.0%)
]


@pytest.mark.parametrize("call, run, measured", CALIBRATION)
def test_planner_predicts_each_recorded_device_peak_within_15_percent(call, run, measured):
    directory = CALL_2.parent / call / run
    steps = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    assert (
        round(max(r["perf/max_memory_allocated_gb"] for r in steps if "perf/max_memory_allocated_gb" in r), 2)
        == measured
    )
    predicted = collect.predicted_peak_gib(json.loads((directory / "run.json").read_text()))
    assert abs(predicted - measured) / measured <= 0.15, (predicted, measured)  # the issue's bound
    assert -0.035 <= (predicted - measured) / measured <= 0.06, (predicted, measured)  # what the model reaches today


def test_calibration_covers_what_issue_4_asks_without_a_memory_limit():
    """At least 5 uncapped points: fp32 and bf16, PPO and GRPO, more than one micro-batch and length."""
    uncapped = []
    for call, run, _ in CALIBRATION:
        record = json.loads((CALL_2.parent / call / run / "run.json").read_text())
        if "VERLFIT_GPU_MEMORY_LIMIT_GIB" not in record["environment"]:
            settings = record["settings"]
            uncapped.append(
                (
                    record["profile"],
                    settings["algorithm"],
                    settings["actor_micro_batch_size"],
                    settings["max_prompt_length"],
                    settings["max_response_length"],
                )
            )
    assert len(uncapped) == 7
    assert {(profile, algorithm) for profile, algorithm, *_ in uncapped} == {
        ("p40", "ppo"),
        ("p40", "grpo"),
        ("a10", "ppo"),
        ("a10", "grpo"),
    }
    assert {micro for _, _, micro, _, _ in uncapped} == {4, 8, 16}
    assert {(prompt, response) for *_, prompt, response in uncapped} == {(512, 256), (256, 128), (256, 256)}


SESSION_3_CALL_5 = CALL_2.parents[1] / "2026-12-01-h200-p40-lora-resume-faster-path-alone" / "speed-trims-alone"


@pytest.mark.parametrize(
    "run, predicted, predicted_then",
    [("lora-speed-trims_unwrap", 19.0, 19.7), ("lora-3b-grpo", 19.1, 19.1), ("speed-all", 17.3, 17.3)],
)
def test_the_larger_random_weight_shapes_get_their_prediction_off_the_device(run, predicted, predicted_then):
    """The device's $WORK/qwen2.5-1.5b-random and -3b-random have the built-in Instruct shapes; collect.py knew only
    the 0.5B's, so run here its table said n/a where the device's results.md says 19.7 and 19.1. The 1.5B PPO's
    19.7 was its critic's backward through the layers, which the planner counts lower since the backward workspace
    was measured (0.16 of a layer, not 1.0: plan/memory.py BACKWARD_WORKSPACE_LAYERS): its old log-prob's 19.0 is
    the peak now."""
    result = collect.summarise(SESSION_3_CALL_5 / run)
    assert "predicted_peak_gib_error" not in result
    assert round(result["predicted_peak_gib"], 1) == predicted
    row = next(
        line for line in (SESSION_3_CALL_5 / "results.md").read_text().splitlines() if line.startswith(f"| {run} |")
    )
    assert row.replace(f"| {predicted_then} |", f"| {predicted} |") in collect.markdown([result])


def test_a_model_made_on_the_device_says_where_to_run_collect():
    result = collect.summarise(SESSION_3_CALL_5 / "learn-lora-ppo-lr1e-4")
    assert (
        result["predicted_peak_gib_error"]
        == "model small-sft: its config.json is not on this machine (run collect.py where the model is)"
    )


# Runs with the p40 profile's trims (patches 0020-0021), predicted at the prompt columns they ran on (their steps'
# longest prompt, verl's prompt_length/max): docs/benchmarks.md section 2.2. (directory, run, measured peak GiB,
# longest prompt, predicted GiB). Each process once: not the resumed ones (their peak includes loading a checkpoint)
# nor the 3B's step after a save made before patch 0012.
TRIMMED = [
    ("2026-12-01-h200-p40-lora-graph-memory-faults/graph-memory-lora-fault-oom", "lora-1p5b-ppo", 17.20, 293, 17.76),
    (
        "2026-12-01-h200-p40-lora-resume-faster-path-alone/gputests-learn-lora-lora-3b",
        "lora-3b-grpo",
        16.48,
        217,
        17.30,
    ),
    (
        "2026-12-01-h200-p40-lora-resume-faster-path-alone/speed-today-all-lora-speed-alone",
        "lora-speed-trims_unwrap",
        16.95,
        239,
        17.45,
    ),
    ("2026-12-01-h200-fp16-noeos-own-task/own-task", "own-grpo-lora-qwen3-1p7b", 15.49, 103, 16.33),
    ("2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench", "speed-all", 16.98, 293, 16.56),
    ("2026-12-01-h200-p40-lora-resume-faster-path-alone/speed-trims-alone", "speed-trims", 16.63, 293, 16.56),
    (
        "2026-12-01-h200-p40-optimisations-alone-soak/speed-trim-train-alone-soak-faults",
        "speed-trim_train",
        16.66,
        293,
        16.56,
    ),
    ("2026-12-01-h200-fp16-noeos-own-task/fp16-noeos-learn-fp16", "fp16-t4", 11.14, 293, 11.35),
    ("2026-12-01-h200-fp16-noeos-own-task/fp16-noeos-learn-fp16", "fp16-v100", 20.58, 293, 20.62),
    ("2026-12-01-h200-fp16-noeos-own-task/own-task", "own-ppo-qwen3-0p6b", 13.42, 103, 13.32),
]


@pytest.mark.parametrize("directory, run, measured, longest, predicted", TRIMMED)
def test_trimmed_runs_are_predicted_at_the_prompt_columns_they_ran_on(directory, run, measured, longest, predicted):
    result = collect.summarise(CALL_2.parents[1] / directory / run)
    assert (
        round(result["peak_allocated_gib"], 2),
        result["longest_prompt_measured"],
        round(result["predicted_peak_gib_at_measured_prompts"], 2),
    ) == (measured, longest, predicted)
    assert -0.03 <= (predicted - measured) / measured <= 0.06  # LoRA +2.9% to +5.5%, full-parameter -2.5% to +1.9%
    assert (
        result["predicted_peak_gib"] >= result["predicted_peak_gib_at_measured_prompts"]
    )  # at the prompt limit: as much or more


def test_the_one_trimmed_run_with_parameter_offload_is_under_predicted():
    """Known gap (docs/benchmarks.md section 2.2): the p40 profile on a 14 GiB budget (critic parameters and both
    optimizers offloaded) peaked at 12.98 GiB from its first step; the planner says 11.12 at the prompt limit and
    11.04 at the prompt columns it ran on (-14.9%)."""
    result = collect.summarise(
        CALL_2.parents[1] / "2026-12-01-h200-fp16-noeos-own-task/fp16-noeos-learn-fp16/fp16-p40_t4_budget"
    )
    assert (
        round(result["peak_allocated_gib"], 2),
        round(result["predicted_peak_gib"], 2),
        round(result["predicted_peak_gib_at_measured_prompts"], 2),
    ) == (12.98, 11.12, 11.04)
