"""verlfit train's notes and run.json say what its verl command runs (issue 28, item 5: a new user's trial): the a10
dry run's LoRA note speaks of the rollout its command runs; a PPO run's run.json records the one response per prompt
it samples."""

import argparse
import json

import pytest

from verlfit import cli
from verlfit.plan import time as plan_time
from verlfit.commands.train import prepare_launch, register
from verlfit.train.run_directory import create_run_directory


def parse(argv):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["train", *argv])


@pytest.mark.parametrize(
    "argv, note",
    [
        # the a10 profile's own vLLM rollout: patch 0023's unwrap_fsdp (the HF rollout's) is not in its command
        (["--profile", "a10"], plan_time.LORA_VLLM_GENERATION_NOTE),
        # its HF fallback on one GPU: verlfit turns unwrap_fsdp on, and the command has it
        (["--profile", "a10", "--rollout", "hf", "--attention", "sdpa"], plan_time.LORA_UNWRAPPED_GENERATION_NOTE),
        (["--profile", "p40"], plan_time.LORA_UNWRAPPED_GENERATION_NOTE),
    ],
)
def test_the_lora_generation_note_matches_the_command(argv, note):
    plan = prepare_launch(parse([*argv, "--lora-rank", "32", "--dry-run"]), environ={}, detect_gpu=False)
    unwrapped = "+actor_rollout_ref.rollout.unwrap_fsdp=True" in plan.command
    assert unwrapped == (note is plan_time.LORA_UNWRAPPED_GENERATION_NOTE)
    lora_notes = [
        n for n in plan.notes if n.startswith("plan: LoRA generation") or n.startswith("plan: LoRA terms of the time")
    ]
    assert lora_notes == [f"plan: {note}"]


def test_the_plan_command_says_the_same_for_vllm(capsys):
    assert cli.main(["plan", "--profile", "a10", "--lora-rank", "32"]) == 0
    assert plan_time.LORA_VLLM_GENERATION_NOTE in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    "argv, n", [(["--algo", "ppo"], 1), (["--algo", "grpo"], 4), (["--algo", "grpo", "--samples", "8"], 8)]
)
def test_run_json_records_the_rollout_n_the_run_samples(tmp_path, argv, n):
    # a soak record said rollout_n 4 for a PPO run whose override was actor_rollout_ref.rollout.n=1
    plan = prepare_launch(
        parse(["--profile", "p40", "--plan", "off", "--run-dir", str(tmp_path / "run"), "--dry-run", *argv]),
        environ={},
        detect_gpu=False,
    )
    record = json.loads((create_run_directory(plan, None) / "run.json").read_text())
    assert record["settings"]["rollout_n"] == n
    assert f"actor_rollout_ref.rollout.n={n}" in record["overrides"]
