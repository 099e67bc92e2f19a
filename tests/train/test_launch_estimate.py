"""The step-time estimate a launch plan carries (LaunchPlan.estimated_step_seconds, the ETA before the first step):
the planner's, computed once when the launch is built, equals the estimate of what the plan records (the profile by
name, the GPU as described, the switches of the final override list), which the launch loop computed before."""

import pytest

from command_lines import parse_train as parse
from fakes import H200, P40
from verlfit.commands.train import prepare_launch
from verlfit.plan.train_estimate import launch_step_seconds


@pytest.mark.parametrize(
    "argv, gpu",
    [
        (["--profile", "p40", "--plan", "off"], P40),
        (["--profile", "p40"], P40),
        (["--profile", "p40", "--lora-rank", "32", "--algo", "ppo"], P40),
        (["--emulate", "p40"], H200),
        (["--profile", "a10", "--rollout", "hf", "--attention", "sdpa", "--gpu-memory-limit", "24"], H200),
        (["--profile", "a10", "--dry-run"], None),
        (["--profile", "t4", "--dry-run", "--lora-rank", "16", "--plan", "off"], None),
    ],
)
def test_launch_plan_carries_the_estimate_of_what_it_records(argv, gpu):
    plan = prepare_launch(parse(argv), environ={}, gpu=gpu, detect_gpu=False)
    recorded = launch_step_seconds(plan.settings, plan.profile_name, plan.gpu_description, plan.overrides)
    assert recorded is not None and recorded > 0
    assert plan.estimated_step_seconds == recorded


def test_a_resumed_plan_carries_the_estimate_of_its_record(tmp_path):
    from fakes import fake_checkpoint
    from verlfit.train.run_directory import create_run_directory, resume_plan

    argv = ["--profile", "p40", "--plan", "off", "--run-dir", str(tmp_path / "r1"), "--steps", "4"]
    plan = prepare_launch(parse(argv), environ={}, gpu=P40)
    run_dir = create_run_directory(plan, "data: {}\n")
    fake_checkpoint(run_dir, 2)
    resumed = resume_plan(run_dir)
    assert resumed.estimated_step_seconds is not None
    assert resumed.estimated_step_seconds == plan.estimated_step_seconds  # the resume changes no switch of the time
