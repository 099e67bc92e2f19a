"""benchmarks/fits_table.py: the README's "What fits on a 24 GB card" table is the planner's, row by row."""

from pathlib import Path

import pytest

import fits_table  # benchmarks/ is on sys.path (tests/conftest.py)
from verlfit.model_shape import load_model_shape
from verlfit.plan.fit import auto_fit
from verlfit.plan.memory import GIB, format_gib
from verlfit.plan.request import request_for_profile
from verlfit.profiles import load_profile

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_table_is_the_scripts_output():
    assert fits_table.readme_table(README.read_text(encoding="utf-8")) == fits_table.table()
    assert fits_table.main(["--check", str(README)]) == 0


@pytest.mark.parametrize(
    "card, size, algorithm, lora",
    [("p40", "3B", "grpo", True), ("p40", "1.5B", "ppo", False), ("a10", "1.5B", "ppo", True)],
)
def test_a_row_is_auto_fit_at_verlfit_trains_defaults(card, size, algorithm, lora):
    # the speed pick on that card, with the run's patch switches (the profile's, and verlfit's for LoRA: unwrap_fsdp;
    # the profile's CUDA graphs stay on with LoRA, and the static cache they decode into counts in the rollout)
    from verlfit.cards import get_card
    from verlfit.run_settings import TrainSettings
    from verlfit.plan.request import inputs_for_train
    from verlfit.resolved_run import run_switches

    profile = load_profile(card)
    run = TrainSettings(model="m", algorithm=algorithm, lora_rank=32 if lora else 0)
    switches = run_switches(profile, run)
    request = request_for_profile(
        profile,
        load_model_shape(f"Qwen/Qwen2.5-{size}-Instruct"),
        int(profile.gpu_memory_gib * GIB),
        algorithm=algorithm,
        rollout_n=4 if algorithm == "grpo" else 1,
        train_batch_size=32,
        ppo_mini_batch_size=16,
        max_prompt_length=512,
        max_response_length=256,
        gradient_checkpointing=True,
        lora_rank=32 if lora else 0,
        frozen_base_dtype=profile.frozen_base_dtype if lora else None,
        cuda_graph=profile.rollout == "hf" and switches.cuda_graph,
    )
    inputs = inputs_for_train(run, switches)
    decision = auto_fit(request, card=get_card(card), inputs=inputs)
    cells = fits_table.row(card, size, algorithm, lora)
    assert cells[:4] == [
        card.upper(),
        f"Qwen2.5-{size}",
        f"{algorithm.upper()} 32{' x 4' if algorithm == 'grpo' else ''}",
        "LoRA r32" if lora else "full",
    ]
    assert cells[4].startswith("fits (micro-batch") == decision.fits
    assert cells[5] == (
        format_gib(decision.plan.peak.total) if decision.fits else f"> {format_gib(decision.plan.peak.total)}"
    )
    assert cells[6:] == list(
        fits_table.MEASURED.get((card, size, algorithm, "LoRA r32" if lora else "full"), ("not run", "not run"))
    )


def test_check_and_write_on_a_stale_table(tmp_path, capsys):
    stale = tmp_path / "README.md"
    stale.write_text(
        f"intro\n{fits_table.START}\n| old"
        f" |\n{fits_table.END}\nmiddle\n{fits_table.BIG_START}\n{fits_table.BIG_END}\noutro\n",
        encoding="utf-8",
    )
    assert fits_table.main(["--check", str(stale)]) == 1
    assert "table differs from the planner's" in capsys.readouterr().err
    assert fits_table.main(["--write", str(stale)]) == 0
    assert (
        stale.read_text(encoding="utf-8")
        == "intro\n" + fits_table.table() + "middle\n" + fits_table.big_table() + "outro\n"
    )
    (tmp_path / "empty.md").write_text("no table\n")
    assert fits_table.main(["--check", str(tmp_path / "empty.md")]) == 1


def test_measured_cells_come_from_the_records_table():
    # the 1.5B LoRA PPO cell is that run's record: the largest running peak of steps 1-5 (its first process) and of all
    # ten steps (steps 6-10 ran in the process resumed from the step-5 checkpoint), and its mean s/step after step 1
    # (benchmarks/results/2026-12-01-h200-p40-lora-graph-memory-faults)
    import json

    records = (
        Path(__file__).resolve().parents[2]
        / "benchmarks"
        / "results"
        / "2026-12-01-h200-p40-lora-graph-memory-faults"
        / "lora-resume-soak-faults-bench"
        / "lora-1p5b-ppo"
        / "metrics.jsonl"
    )
    steps = [
        row for row in map(json.loads, records.read_text().splitlines()) if row.get("step") and "timing_s/step" in row
    ]
    peak = lambda rows: max(row["perf/max_memory_allocated_gb"] for row in rows)  # noqa: E731
    mean_step = sum(row["timing_s/step"] for row in steps[1:]) / len(
        steps[1:]
    )  # collect.py leaves out step 1 (start-up)
    assert [row["step"] for row in steps] == list(range(1, 11))
    # its s/step alone: the same configuration (trims and unwrap_fsdp on) run alone for 3 steps
    # (benchmarks/results/2026-12-01-h200-p40-lora-resume-faster-path-alone)
    alone_records = (
        records.parents[3]
        / "2026-12-01-h200-p40-lora-resume-faster-path-alone"
        / "speed-trims-alone"
        / "lora-speed-trims_unwrap"
        / "metrics.jsonl"
    )
    alone = [
        row
        for row in map(json.loads, alone_records.read_text().splitlines())
        if row.get("step") and "timing_s/step" in row
    ]
    assert [row["step"] for row in alone] == [1, 2, 3]
    alone_step = sum(row["timing_s/step"] for row in alone[1:]) / len(alone[1:])
    assert fits_table.row("p40", "1.5B", "ppo", True)[6:] == [
        # before patch 0026
        f"fp32 base: {peak(steps[:5]):.2f} GiB ({peak(steps):.2f} after a resume's checkpoint load)",
        f"{alone_step:.1f} alone (section 4.3); {mean_step:.1f} sharing the GPU (section 4.2; 10 of 10 steps)",
    ]
    # the 3B LoRA GRPO: steps 1-3 in one process, saved at step 3, then resumed (patch 0012's load) for steps 4-5
    grpo_records = alone_records.parents[1] / "lora-3b-grpo" / "metrics.jsonl"
    grpo = [
        row
        for row in map(json.loads, grpo_records.read_text().splitlines())
        if row.get("step") and "timing_s/step" in row
    ]
    assert [row["step"] for row in grpo] == [1, 2, 3, 4, 5]
    assert fits_table.row("p40", "3B", "grpo", True)[6:] == [
        (
            f"fp32 base: {peak(grpo[:3]):.2f} GiB at 8 x 4; {peak(grpo[3:]):.2f} after a resume's checkpoint load with"
            " patch 0012"
        ),
        (
            f"{sum(row['timing_s/step'] for row in grpo[1:]) / 4:.1f} at 8 x 4, shared GPU (section 4.3; 5 of 5 steps,"
            " resumed at step 3)"
        ),
    ]
    assert fits_table.row("p40", "1.5B", "ppo", False)[6:] == ["not run", "not run"]


def test_the_big_lora_rows_are_auto_fit_at_16_prompts_and_read_their_records():
    # the 7B A10 row, recomputed: the a10 profile with the HF rollout and SDPA, GRPO 16 x 4, LoRA rank 32 at verlfit
    # train's other defaults, auto-fit's speed pick on the A10; its measured cells are the two runs' records
    import json

    from verlfit.cards import get_card
    from verlfit.run_settings import TrainSettings
    from verlfit.plan.request import inputs_for_train, request_from_settings
    from verlfit.profiles import customize
    from verlfit.resolved_run import run_switches

    profile = customize(load_profile("a10"), rollout="hf", attention="sdpa")
    settings = TrainSettings(
        model="Qwen/Qwen2.5-7B-Instruct", algorithm="grpo", lora_rank=32, train_batch_size=16, ppo_mini_batch_size=8
    )
    settings.rollout, settings.attention = "hf", "sdpa"
    shape = load_model_shape("Qwen/Qwen2.5-7B-Instruct")
    request = request_from_settings(settings, profile, int(22.0 * GIB), shape)
    decision = auto_fit(
        request, card=get_card("a10"), inputs=inputs_for_train(settings, run_switches(profile, settings))
    )
    assert decision.fits and decision.request.frozen_base_dtype == "bfloat16"
    folder = Path(fits_table.RESULTS) / "2026-12-04-h200-lora-adapters-outside-fsdp-7b-a10"
    on, off = (
        [json.loads(line) for line in (folder / name / "metrics.jsonl").read_text().splitlines()]
        for name in ("lora16-qwen2.5-7b-grpo-a10-graphs-on", "lora16-qwen2.5-7b-grpo-a10-graphs-before")
    )
    assert fits_table.big_row(*fits_table.BIG_LORA[1]) == [
        "A10 `--rollout hf --attention sdpa`",
        "Qwen2.5-7B",
        "GRPO 16 x 4",
        f"fits (micro-batch {decision.request.actor_micro_batch_size}; bf16 base)",
        format_gib(decision.plan.peak.total),
        "17.63 GiB",  # steps 1 and 2 peaked at 17.27 and 17.63 GiB allocated
        "26.9",
        "68.0",  # step 2 of each run
        f"{decision.speed[0][1]:.0f}",
    ]
    assert round(on[1]["perf/max_memory_allocated_gb"], 2) == 17.63
    assert round(on[1]["timing_s/step"], 1) == 26.9 and round(off[1]["timing_s/step"], 1) == 68.0


def test_a_record_without_a_timed_step_is_refused(tmp_path, monkeypatch):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text('{"step": 2}\n')
    monkeypatch.setattr(fits_table, "RESULTS", tmp_path)
    with pytest.raises(ValueError, match="metrics.jsonl: no timed step"):
        fits_table.measured_run("run")
