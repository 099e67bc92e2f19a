"""One meaning for each verdict and each refusal across verlfit plan and verlfit train (issue 28, item 4): a tight
plan exits 1 with or without auto-fit; --emulate refuses another --profile and more memory than its card in both
commands; more memory than a profile's card is labelled; --plan off says what the planner thinks of the sizes given;
the dry run says what the real run would refuse; --steps with --epochs says which wins."""

import argparse
import json

import pytest

from verlfit import cli
from verlfit.gpu import GpuInfo
from verlfit.commands.train import prepare_launch, register

H200 = GpuInfo(
    index=0,
    name="NVIDIA H200",
    compute_capability=(9, 0),
    total_memory_bytes=150_754_820_096,
    free_memory_bytes=150_000_000_000,
)
# 1.5B GRPO with LoRA rank 32 as given (micro-batches 4/8, 32 prompts a generate call) on an emulated P40: 21.7 of
# 22.5 GiB, above the 90% margin and within the card
# the fp32 base (stock verl): with the 16-bit base of patch 0026 the same sizes fit
TIGHT = [
    "--emulate",
    "p40",
    "--model",
    "Qwen/Qwen2.5-1.5B-Instruct",
    "--algo",
    "grpo",
    "--lora-rank",
    "32",
    "--frozen-base-dtype",
    "float32",
    "--plan",
    "off",
]


def train_parse(argv):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["train", *argv])


def test_a_tight_plan_exits_1_as_every_plan_that_train_would_not_choose(capsys):
    # before: "tight" exited 0 under --plan off and 1 where auto-fit found nothing within the margin
    assert cli.main(["plan", *TIGHT, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "tight"
    assert (
        data["notes"][1]
        == "above the 90% margin: fragmentation or a longer-than-modelled sequence can still run out of memory (verlfit"
        " train's planner does not choose a tight plan; verlfit plan exits 1 for it)"
    )
    # the same sizes auto-fitted fit, and exit 0; a hopeless one exits 1
    assert cli.main(["plan", *TIGHT[:-2]]) == 0
    assert "verdict: fits" in capsys.readouterr().out
    assert cli.main(["plan", "--emulate", "p40", "--model", "Qwen/Qwen2.5-1.5B-Instruct", "--plan", "off"]) == 1
    assert "verdict: does not fit" in capsys.readouterr().out


def test_plan_refuses_emulate_with_another_profile_as_train_does(capsys):
    # before: plan --emulate p40 --profile a10 planned the a10 profile on the P40's memory (and failed on bf16 timing)
    assert cli.main(["plan", "--emulate", "p40", "--profile", "a10"]) == 2
    plan_error = capsys.readouterr().err
    assert cli.main(["train", "--emulate", "p40", "--profile", "a10", "--dry-run"]) == 2
    assert (
        capsys.readouterr().err
        == plan_error
        == "verlfit: error: --profile a10 and --emulate p40 disagree\n  fix: --emulate p40 already selects the p40"
        " profile: drop --profile\n"
    )


@pytest.mark.parametrize("command, option", [("plan", "--gpu-memory"), ("train", "--gpu-memory-limit")])
def test_emulating_with_more_memory_than_the_card_is_refused(command, option, capsys, tmp_path):
    from fakes import write_raw_gsm8k

    argv = [command, "--emulate", "p40", option, "40"] + (["--dry-run"] if command == "train" else [])
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert (
        f"verlfit: error: {option} 40 with --emulate p40: more than the p40 card's 22.5 GiB usable, so it would no"
        " longer emulate that card\n" in err
    )
    assert (
        f"fix: drop {option} (--emulate p40 caps each worker at 22.5 GiB), or use --profile p40 {option} 40 for the p40"
        " profile's code paths with 40 GiB" in err
    )
    # a smaller cap is a tighter card: still an emulation
    assert cli.main(
        [command, "--emulate", "p40", option, "20"]
        + (["--dry-run", "--data", write_raw_gsm8k(tmp_path / "raw")] if command == "train" else [])
    ) in (0, 1)
    assert "no longer" not in capsys.readouterr().err


def test_a_profile_with_more_memory_than_its_card_is_labelled(capsys):
    # 100 GiB: more than a P40, less than the largest card verlfit knows (above it, the parser refuses)
    label = (
        "more than the p40 profile's card has (22.5 GiB usable): the p40 profile's code paths with 100 GiB, no longer a"
        " p40 card"
    )
    assert cli.main(["plan", "--profile", "p40", "--gpu-memory", "100", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory_source"] == f"--gpu-memory 100 GiB ({label})"
    plan = prepare_launch(
        train_parse(["--profile", "p40", "--gpu-memory-limit", "100", "--dry-run"]), environ={}, detect_gpu=False
    )
    assert f"--gpu-memory-limit 100 GiB is {label}" in plan.notes
    plan = prepare_launch(
        train_parse(["--profile", "p40", "--gpu-memory-limit", "22", "--dry-run"]), environ={}, detect_gpu=False
    )
    assert not [note for note in plan.notes if "no longer" in note]


def test_plan_off_with_sizes_that_do_not_fit_says_the_planners_warning():
    from verlfit.plan.fit import auto_fit
    from verlfit.plan.memory import predict
    from verlfit.plan.request import request_from_settings
    from verlfit.profiles import load_profile

    plan = prepare_launch(train_parse(TIGHT + ["--dry-run"]), environ={}, gpu=H200)
    request = request_from_settings(plan.settings, load_profile("p40"), int(22.5 * 1024**3))
    predicted = predict(request)
    assert predicted.verdict == "tight"
    chosen = auto_fit(request).request
    (warning,) = [note for note in plan.notes if note.startswith("plan: WARN")]
    assert (
        warning
        == f"plan: WARN --plan off: {predicted.notes[0]} -> tight: verl may run out of memory; without --plan off the"
        f" planner would choose: micro-batches actor {chosen.actor_micro_batch_size}, log-prob"
        f" {chosen.log_prob_micro_batch_size}; gradient checkpointing on; offload none"
    )
    # hopeless: the smallest change instead
    plan = prepare_launch(
        train_parse(["--emulate", "p40", "--model", "Qwen/Qwen2.5-1.5B-Instruct", "--plan", "off", "--dry-run"]),
        environ={},
        gpu=H200,
    )
    (warning,) = [note for note in plan.notes if note.startswith("plan: WARN")]
    assert (
        "-> does not fit: verl may run out of memory; smallest changes that would fit, each on its own: --lora-rank 32"
        in warning
    )
    # sizes that fit: no warning
    plan = prepare_launch(
        train_parse(["--emulate", "p40", "--plan", "off", "--micro-batch-size", "2", "--dry-run"]), environ={}, gpu=H200
    )
    assert not [note for note in plan.notes if "WARN" in note]


def test_the_dry_run_says_what_the_real_run_would_refuse(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # no hub request: offline and no datasets cache
    monkeypatch.setattr("verlfit.checks.data_folder.datasets_cache_folder", lambda dataset_id: None)
    run_dir = tmp_path / "taken"
    run_dir.mkdir()
    data = tmp_path / "nothing-here"
    # issue 32 item 15: it was 0
    assert cli.main(["train", "--profile", "p40", "--dry-run", "--run-dir", str(run_dir), "--data", str(data)]) == 2
    out, err = capsys.readouterr()
    # the run directory is the run's input: refused; GSM8K not reachable from here (no hub, no cache) is a note
    assert (
        err
        == f"verlfit: error: a real launch would refuse this run: run directory {run_dir} exists (the notes above say"
        " why)\n  fix: do what those notes say, then dry-run again\n"
    )
    out = " ".join(out.split())  # the dry run wraps its notes at 110 columns
    assert f"note: {run_dir} exists: a real run would refuse it (use --resume, or another --run-dir)" in out
    assert (
        f"note: a real run would refuse its data: FAIL data: {data} does not exist: verlfit train would prepare GSM8K"
        " into it, but cannot here (openai/gsm8k is not in the datasets cache while HF_DATASETS_OFFLINE is set:"
        " verlfit train has nothing to prepare from) (fix: check the path; for your own task make the folder first:"
        " verlfit prepare-data" in out
    )
    # raw GSM8K files: the real run prepares them first, and the dry run says so
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "test"):
        (raw / f"{split}.jsonl").write_text(json.dumps({"question": "1 + 1?", "answer": "1 + 1 = 2\n#### 2"}) + "\n")
    assert cli.main(["train", "--profile", "p40", "--dry-run", "--data", str(raw)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        f"note: a real run would first prepare its data: {raw} holds raw GSM8K files, not prepared yet: verlfit train"
        f" prepares verl's files from them into {raw / 'verl'}" in out
    )


def test_the_dry_run_refuses_raw_gsm8k_files_with_a_broken_json_line_naming_the_file_and_line(tmp_path, capsys):
    # new-user trial: the dry run passed where prepare-gsm8k --input refuses the file
    raw = tmp_path / "raw"
    raw.mkdir()
    row = json.dumps({"question": "1 + 1?", "answer": "1 + 1 = 2\n#### 2"}) + "\n"
    (raw / "train.jsonl").write_text(row)
    (raw / "test.jsonl").write_text(row + row + "{'question': 'single quotes'}\n")
    assert (
        cli.main(["train", "--profile", "p40", "--dry-run", "--data", str(raw), "--run-dir", str(tmp_path / "run")])
        == 2
    )
    out, err = capsys.readouterr()
    assert (
        err == f"verlfit: error: a real launch would refuse this run: data {raw / 'verl'} (the notes above say why)\n"
        "  fix: do what those notes say, then dry-run again\n"
    )
    assert (
        f"note: a real run would refuse its data: FAIL data: cannot read {raw / 'test.jsonl'} line 3: not JSON"
        " (Expecting property name enclosed in double quotes at character 2) (fix: repair or remove that line (each"
        " line of a .jsonl file is one JSON object; download the file again if it was cut), then run the command"
        " again)" in " ".join(out.split())
    )


def test_steps_with_epochs_says_steps_wins(capsys):
    plan = prepare_launch(
        train_parse(["--profile", "p40", "--steps", "5", "--epochs", "3", "--dry-run"]), environ={}, detect_gpu=False
    )
    assert (
        "--steps 5 and --epochs 3: --steps wins: the run stops after 5 steps, however many epochs that is (--epochs"
        " counts only without --steps)" in plan.notes
    )
    assert "trainer.total_training_steps=5" in plan.overrides
    alone = prepare_launch(
        train_parse(["--profile", "p40", "--epochs", "3", "--dry-run"]), environ={}, detect_gpu=False
    )
    assert alone.settings.epochs == 3 and not [note for note in alone.notes if "wins" in note]
    assert (
        prepare_launch(train_parse(["--profile", "p40", "--dry-run"]), environ={}, detect_gpu=False).settings.epochs
        == 1
    )
    assert cli.main(["plan", "--emulate", "p40", "--steps", "5", "--epochs", "3"]) == 0
    assert (
        "note: --steps 5 and --epochs 3: --steps wins: the run's time is of 5 steps (--epochs counts only without"
        " --steps)" in capsys.readouterr().out
    )


def test_the_dry_runs_notes_are_wrapped_and_lose_no_word(capsys, tmp_path):
    # a new-user trial: the dry run's longest lines were 255-389 characters of patch numbers and doc references
    from verlfit.overrides import LORA_UNWRAP_NOTE
    from verlfit.train.describe import NOTE_WIDTH

    from fakes import write_raw_gsm8k

    assert (
        cli.main(
            ["train", "--profile", "p40", "--dry-run", "--lora-rank", "32", "--data", write_raw_gsm8k(tmp_path / "raw")]
        )
        == 0
    )
    out = capsys.readouterr().out
    text = out.split("\nenvironment:\n")[0]
    notes = [line for line in text.splitlines() if line.startswith(("note:", "      "))]
    assert len(notes) > len([line for line in notes if line.startswith("note:")]) and max(map(len, notes)) <= NOTE_WIDTH
    flat = " ".join(text.split())
    assert f"note: {LORA_UNWRAP_NOTE}" in flat and "CUDA-graph decoding (patch 0022) is off" not in flat
    # the command is never wrapped: one override a line
    assert "    +actor_rollout_ref.rollout.unwrap_fsdp=True \\\n" in out
