"""verlfit train's issue-17 parts on CPU: --stall-timeout stops a stand-in verl that stops printing and records the
run as stalled; a resumed launch records each step once; the pre-launch warning when checkpoints will not fit."""

import json
import shutil
import time

import pytest

from command_lines import parse_train as parse
from fakes import P40, STEP, fake_checkpoint, fake_verl_plan
from verlfit import cli
from verlfit.metrics import read_metrics
from verlfit.train.preflight import checkpoint_space_warning
from verlfit.commands.train import prepare_launch
from verlfit.train.supervise import STALLED_STATUS, launch

GIB = 1024**3


def test_stall_timeout_stops_verl_and_records_the_run_as_stalled(tmp_path, capsys):
    script = (
        STEP.format(n=1)
        + "\nimport time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('verl got SIGINT',"
        " flush=True)\n    raise SystemExit(1)"
    )
    plan = fake_verl_plan(tmp_path, script)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"verlfit_run": 1}))
    started = time.monotonic()
    assert launch(plan, run_dir, stall_timeout=1.5, poll_seconds=0.1) == STALLED_STATUS
    assert time.monotonic() - started < 30  # SIGINT was enough: no 60 s wait
    assert [r["step"] for r in read_metrics(run_dir)] == [1]
    assert "verl got SIGINT" in (run_dir / "train.log").read_text()
    outcome = json.loads((run_dir / "run.json").read_text())["outcome"]
    assert (outcome["status"], outcome["reason"], outcome["step"], outcome["limit_seconds"], outcome["phase"]) == (
        "stalled",
        "stall",
        2,
        1.5,
        "step 2: the rollout, log-prob passes and updates",
    )
    assert outcome["seconds_without_a_step"] >= 1.5
    err = capsys.readouterr().err
    assert (
        "verlfit: stopped verl: no step has finished for 2s (limit 2s: --stall-timeout 1.5); step 2 is in progress"
        in err
    )
    assert "stopped before the first checkpoint (--save-freq 25): nothing to resume; start a new run" in err


def test_without_stall_timeout_a_quiet_verl_is_not_stopped(tmp_path):
    plan = fake_verl_plan(tmp_path, STEP.format(n=1) + "\nimport time\ntime.sleep(1)\n" + STEP.format(n=2))
    assert launch(plan, tmp_path / "run", poll_seconds=0.1) == 0
    assert [r["step"] for r in read_metrics(tmp_path / "run")] == [1, 2]


def test_a_resumed_launch_drops_the_steps_verl_trains_again(tmp_path):
    run_dir = tmp_path / "run"
    fake_checkpoint(run_dir, 1)
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": n, "timing_s/step": 1.0, "first": True}) + "\n" for n in (1, 2))
    )
    plan = fake_verl_plan(tmp_path, STEP.format(n=2) + "\n" + STEP.format(n=3))
    plan.settings.resume, plan.resume_step = True, 1  # what resume_plan finds: the checkpoint of step 1
    assert launch(plan, run_dir, poll_seconds=0.1) == 0
    assert [(r["step"], r.get("first", False)) for r in read_metrics(run_dir)] == [(1, True), (2, False), (3, False)]


def plan_for(tmp_path, *argv):
    return prepare_launch(
        parse(["--profile", "p40", "--plan", "off", "--run-dir", str(tmp_path / "runs" / "r"), *argv]),
        environ={},
        gpu=P40,
    )


def free(gib):
    return lambda path: shutil._ntuple_diskusage(0, 0, int(gib * GIB))


ROLE = 32 * 2**20  # tokenizer/config files a role
ONE = (
    494_032_768 * 12 + ROLE + 494_033_665 * 12 + ROLE
)  # one Qwen2.5-0.5B PPO checkpoint: actor + critic (tests/test_failure.py)


@pytest.mark.parametrize(
    "argv, free_gib, resumed_from, held",
    [
        (["--steps", "100"], 15, None, 2),  # keep 2 (train's default)
        (["--steps", "100"], 30, None, None),  # room for both
        (["--steps", "30"], 15, None, 2),  # a save at 25 and one at the last step
        (["--steps", "20"], 15, None, None),  # one save: the last step's
        (["--steps", "100", "--keep-checkpoints", "0"], 40, None, 4),  # keep all: every save of the run
        (["--steps", "100"], 15, 75, None),  # resumed at 75: one save left (step 100)
        (["--steps", "100", "--save-freq", "-1"], 1, None, None),  # no checkpoints
    ],
)
def test_checkpoint_space_warning(tmp_path, argv, free_gib, resumed_from, held):
    (tmp_path / "runs").mkdir()
    warning = checkpoint_space_warning(plan_for(tmp_path, *argv), resumed_from=resumed_from, disk_usage=free(free_gib))
    if held is None:
        assert warning is None
        return
    fits = int(free_gib * GIB) // ONE
    keep = f", keep {fits} (--keep-checkpoints {fits})" if 2 <= fits < held else ""
    assert (
        warning
        == f"WARN disk: {free_gib:.1f} GiB free at {tmp_path / 'runs'}; this run holds {held} checkpoints of 11.1 GiB"
        f" at once ({held * ONE / GIB:.1f} GiB): only {fits} fit{'s' if fits == 1 else ''}, the save after that"
        f" fails with a full disk; not blocking: the run starts anyway (fix: free disk space at {tmp_path / 'runs'},"
        f" point --run-dir at a bigger disk{keep} or save at most {fits} time{'s' if fits > 1 else ''} in the run"
        " (--save-freq))"
    )


def test_a_disk_for_less_than_one_checkpoint_is_a_warn_in_train_as_the_run_still_launches(tmp_path):
    (tmp_path / "runs").mkdir()
    warning = checkpoint_space_warning(plan_for(tmp_path, "--steps", "100"), disk_usage=free(4))
    assert (
        warning
        == f"WARN disk: 4.0 GiB free at {tmp_path / 'runs'}; this run holds 2 checkpoints of 11.1 GiB at once (22.2"
        " GiB): not even one checkpoint fits; not blocking: the run starts anyway (fix: free disk space at"
        f" {tmp_path / 'runs'} or point --run-dir at a bigger disk)"
    )


def test_the_disk_fix_suggests_keeping_fewer_only_when_that_changes_something(tmp_path):
    (tmp_path / "runs").mkdir()
    # keep all, 4 saves, room for 3: keeping 3 helps
    warning = checkpoint_space_warning(
        plan_for(tmp_path, "--steps", "100", "--keep-checkpoints", "0"), disk_usage=free(35)
    )
    assert warning.endswith(
        f"(fix: free disk space at {tmp_path / 'runs'}, point --run-dir at a bigger disk, keep 3 (--keep-checkpoints 3)"
        " or save at most 3 times in the run (--save-freq))"
    )
    # a resume holding one checkpoint that does not fit (the recorded lora-1p5b-ppo.console.gz): no --keep-checkpoints
    # (2 already, the least), no --run-dir or --save-freq (a resume keeps them): only more space
    warning = checkpoint_space_warning(
        plan_for(tmp_path, "--steps", "100"), resumed_from=75, disk_usage=free(4), resume=True
    )
    assert (
        warning
        == f"WARN disk: 4.0 GiB free at {tmp_path / 'runs'}; this run holds 1 checkpoint of 11.1 GiB at once (11.1"
        " GiB): not even one checkpoint fits; not blocking: the run starts anyway (fix: free disk space at"
        f" {tmp_path / 'runs'})"
    )
    # keep 2, room for 1: keeping fewer cannot help (2 is the least), saving once can
    warning = checkpoint_space_warning(plan_for(tmp_path, "--steps", "100"), disk_usage=free(15))
    assert "--keep-checkpoints" not in warning and warning.endswith("or save at most 1 time in the run (--save-freq))")


def test_stall_timeout_argument(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--dry-run", "--stall-timeout", "-5"])
    assert "argument --stall-timeout: -5 must be 0 (never stop) or a number of seconds" in capsys.readouterr().err
    assert parse(["--stall-timeout", "900"]).stall_timeout == 900.0 and parse([]).stall_timeout is None


def test_stall_timeout_may_be_given_with_resume(tmp_path, capsys):
    status = cli.main(["train", "--resume", str(tmp_path), "--stall-timeout", "600", "--dry-run"])
    err = capsys.readouterr().err
    assert status == 2 and "cannot be given with it" not in err and "is not a verlfit run directory" in err


def test_dry_run_shows_the_stall_timeout_and_help_names_the_startup_allowance(capsys, tmp_path):
    from fakes import write_raw_gsm8k

    raw = write_raw_gsm8k(tmp_path / "raw")
    assert cli.main(["train", "--dry-run", "--profile", "p40", "--stall-timeout", "60", "--data", raw]) == 0
    out = capsys.readouterr().out
    assert (
        "stall timeout: stop verl after 60 s without a finished step (--stall-timeout; + 30 min of startup before the"
        " first record)" in out
    )
    assert cli.main(["train", "--dry-run", "--profile", "p40", "--data", raw]) == 0
    assert "stall timeout" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    assert "30 min of startup allowance" in " ".join(capsys.readouterr().out.split())
