"""The step-time estimate a launch plan carries (LaunchPlan.estimated_step_seconds, the ETA before the first step):
the planner's, computed once when the launch is built, equals the estimate of what the plan records (the profile by
name, the GPU as described, the switches of the final override list), which the launch loop computed before; a
resumed run carries the estimate its run.json recorded when it started."""

import json

import pytest

from command_lines import parse_train as parse
from fakes import H200, P40
from verlfit.commands.train import prepare_launch
from verlfit.patch_switches import PatchSwitches
from verlfit.plan.train_estimate import for_train
from verlfit.profiles import load_profile


def estimate_of_the_record(plan) -> float | None:
    """The reference computation: the time model's seconds a step of what the launch plan records, as the launch
    loop computed it before the plan carried it."""
    switches = PatchSwitches.from_overrides(plan.overrides)
    return for_train(plan.settings, load_profile(plan.profile_name), plan.gpu_description, None, switches)[1]


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
    recorded = estimate_of_the_record(plan)
    assert recorded is not None and recorded > 0
    assert plan.estimated_step_seconds == recorded


def _started_run(tmp_path):
    from fakes import fake_checkpoint
    from verlfit.train.run_directory import create_run_directory

    argv = ["--profile", "p40", "--plan", "off", "--run-dir", str(tmp_path / "r1"), "--steps", "4"]
    plan = prepare_launch(parse(argv), environ={}, gpu=P40)
    run_dir = create_run_directory(plan, "data: {}\n")
    fake_checkpoint(run_dir, 2)
    return plan, run_dir


def test_a_resumed_plan_carries_the_estimate_its_run_recorded(tmp_path):
    from verlfit.train.run_directory import resume_plan

    plan, run_dir = _started_run(tmp_path)
    record = json.loads((run_dir / "run.json").read_text())
    assert record["estimated_step_seconds"] == plan.estimated_step_seconds
    resumed = resume_plan(run_dir)
    assert resumed.estimated_step_seconds is not None
    assert resumed.estimated_step_seconds == plan.estimated_step_seconds
    assert resumed.estimated_step_seconds == estimate_of_the_record(resumed)  # the resume changes no switch of the time


@pytest.mark.parametrize("recorded", [None, "12.5", True, 12.5, 7])
def test_a_resumed_plan_carries_a_recorded_number_else_the_estimate_of_its_record(tmp_path, recorded):
    from verlfit.train.run_directory import resume_plan

    plan, run_dir = _started_run(tmp_path)
    record = json.loads((run_dir / "run.json").read_text())
    if recorded is None:
        del record["estimated_step_seconds"]  # a run started by a verlfit that did not record it
    else:
        record["estimated_step_seconds"] = recorded
    (run_dir / "run.json").write_text(json.dumps(record))
    resumed = resume_plan(run_dir)
    if isinstance(recorded, (int, float)) and not isinstance(recorded, bool):
        assert resumed.estimated_step_seconds == float(recorded)
    else:  # no number recorded: the time model's estimate of the record, as before the plan carried one
        assert resumed.estimated_step_seconds == estimate_of_the_record(resumed) == plan.estimated_step_seconds
