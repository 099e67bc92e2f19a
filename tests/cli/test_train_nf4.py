"""verlfit train with an NF4 frozen base (patch 0028): the planner's choice reaches verl's overrides, and what
cannot run is refused before Ray starts (exit status 2)."""

import argparse

import pytest

from verlfit.commands.train import prepare_launch, register
from verlfit.errors import VerlfitError
from verlfit.train.describe import _lora_line

SEVEN_B_ON_A_P40 = ["--emulate", "p40", "--model", "Qwen/Qwen2.5-7B-Instruct", "--algo", "grpo", "--lora-rank", "32"]


def launch(argv):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return prepare_launch(parser.parse_args(["train", *argv, "--dry-run"]), environ={}, detect_gpu=False)


def _frozen_base_keys(plan):
    return [o for o in plan.overrides if "frozen_base_dtype" in o]


def test_a_7b_on_a_p40_is_planned_with_the_nf4_base_and_verl_is_told():
    plan = launch(SEVEN_B_ON_A_P40)
    assert _frozen_base_keys(plan) == ["+actor_rollout_ref.model.frozen_base_dtype=nf4"]
    assert plan.settings.frozen_base_dtype == "nf4"
    assert _lora_line(plan.settings).endswith(
        "; frozen base in NF4 (4 bits, patch 0028: the adapter learns against the quantised base)"
    )
    assert (
        "plan: frozen base in NF4 (patch 0028), chosen because the bfloat16 base does not fit: even with every "
        "saving on, actor update at actor micro-batch 1 would need 22.4 GiB of 20.2 GiB (90% of 22.5 GiB); the adapter "
        "then learns against a 4-bit quantisation of the model" in plan.notes
    )


def test_a_critic_only_nf4_base_runs_with_vllm():
    # the rollout generates with the actor; only the critic's base is in NF4
    plan = launch(
        [
            "--profile",
            "a10",
            "--algo",
            "ppo",
            "--lora-rank",
            "0",
            "--critic-lora-rank",
            "16",
            "--frozen-base-dtype",
            "nf4",
        ]
    )
    assert _frozen_base_keys(plan) == ["+critic.model.frozen_base_dtype=nf4"]


def test_asked_for_the_nf4_base_is_kept_and_the_3b_is_not_quantised_unasked():
    three_b = ["--emulate", "p40", "--model", "Qwen/Qwen2.5-3B-Instruct", "--algo", "grpo", "--lora-rank", "32"]
    assert _frozen_base_keys(launch(three_b)) == ["+actor_rollout_ref.model.frozen_base_dtype=bf16"]
    assert _frozen_base_keys(launch([*three_b, "--frozen-base-dtype", "nf4"])) == [
        "+actor_rollout_ref.model.frozen_base_dtype=nf4"
    ]
    # written as the papers write it
    assert _frozen_base_keys(launch([*three_b, "--frozen-base-dtype", "NF4"])) == [
        "+actor_rollout_ref.model.frozen_base_dtype=nf4"
    ]


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--frozen-base-dtype", "nf4", "--gpus", "2"],
            "--frozen-base-dtype nf4 on 2 GPUs: patch 0028 stores the quantisation constants beside FSDP's parameters,"
            " so it runs on one GPU only",
        ),
        (
            ["--profile", "a10", "--frozen-base-dtype", "nf4"],
            "--frozen-base-dtype nf4 with the vllm rollout: verl hands vLLM the FSDP model's weights, and vLLM cannot"
            " load bitsandbytes' packed 4-bit ones",
        ),
    ],
)
def test_what_nf4_cannot_run_is_refused_before_ray_starts(extra, message):
    argv = ["--model", "Qwen/Qwen2.5-3B-Instruct", "--algo", "grpo", "--lora-rank", "32", *extra]
    if "--profile" not in extra:
        argv = ["--profile", "p40", *argv]
    with pytest.raises(VerlfitError) as error:
        launch(argv)
    assert (error.value.message, error.value.exit_code) == (message, 2)
