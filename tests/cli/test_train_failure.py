"""verlfit train after verl fails: the diagnosis printed, recorded in run.json, and a cut-short checkpoint removed;
a full disk under train.log and run.json met without a traceback; verl stopped when verlfit itself fails."""

import builtins
import collections
import errno
import json
import os
import shutil
import time

import pytest

from command_lines import parse_train as parse
from fakes import DIED_LOG, DISK_LOG, OOM_LOG, P40, STEP, fake_checkpoint, fake_verl_plan
from verlfit.metrics import read_metrics
from verlfit.train.run_directory import create_run_directory
from verlfit.commands.train import prepare_launch
from verlfit.train.supervise import launch, report_failure


def _run(tmp_path, *extra):
    argv = ["--profile", "p40", "--plan", "off", "--run-dir", str(tmp_path / "r"), *extra]
    plan = prepare_launch(parse(argv), environ={}, gpu=P40)
    return plan, create_run_directory(plan, None)


def test_an_out_of_memory_step_is_explained_and_recorded_as_failed(tmp_path, capsys):
    plan, run_dir = _run(tmp_path, "--micro-batch-size", "16")
    (run_dir / "train.log").write_text("\n".join(OOM_LOG) + "\n")
    outcome = report_failure(plan, run_dir, 1)
    said = capsys.readouterr().err
    assert (
        "verlfit: verl ran out of GPU memory in the actor update (verl's actor_rollout_update_actor): torch asked for"
        " 2.32 GiB with 1.05 GiB of 22.50 GiB free; the planner predicts" in said
    )
    assert "the planner predicts 26.1 GiB for this phase against 22.5 GiB usable" in said
    assert (
        "fix: auto-fit picks actor micro-batch 4, log-prob micro-batch 8: drop --plan off so verlfit train sizes the"
        " run (or set --micro-batch-size 4 yourself)" in said
    )
    record = json.loads((run_dir / "run.json").read_text())
    assert record["outcome"] == outcome
    assert (outcome["status"], outcome["exit_status"], outcome["reason"], outcome["phase"]) == (
        "failed",
        1,
        "out_of_memory",
        "actor_update",
    )


def test_a_full_disk_keeps_the_complete_checkpoint_and_removes_the_cut_short_one(tmp_path, capsys):
    plan, run_dir = _run(tmp_path)
    fake_checkpoint(run_dir, 25)
    partial = run_dir / "checkpoints" / "global_step_50" / "actor"
    partial.mkdir(parents=True)
    (partial / "model_world_size_1_rank_0.pt").write_bytes(b"half")
    (run_dir / "train.log").write_text("\n".join(DISK_LOG) + "\n")
    outcome = report_failure(plan, run_dir, 1)
    said = capsys.readouterr().err
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "global_step_25",
        "latest_checkpointed_iteration.txt",
    ]
    assert f"removed {run_dir / 'checkpoints' / 'global_step_50'}" in said
    assert (
        "the disk filled up during a checkpoint save (verl's actor_rollout_save_checkpoint):"
        f" {run_dir / 'checkpoints'} has " in said
    )
    assert "; one checkpoint of this run needs about 11.1 GiB; the checkpoint of step 25 is complete and kept" in said
    assert f"then verlfit train --resume {run_dir} continues from step 25" in said
    assert outcome["reason"] == "disk_full"


def test_a_dead_worker_names_the_role_and_an_unknown_failure_is_still_recorded(tmp_path, capsys):
    plan, run_dir = _run(tmp_path)
    outcome = report_failure(plan, run_dir, 1, log_lines=DIED_LOG)
    assert (
        "a verl worker process died during the critic's value pass, in the critic worker (verl's critic_compute_values)"
        in capsys.readouterr().err
    )
    assert (outcome["reason"], outcome["phase"], outcome["worker_method"]) == (
        "worker_died",
        "values",
        "critic_compute_values",
    )
    outcome = report_failure(plan, run_dir, 2, log_lines=["KeyError: 'x'"])
    assert (outcome["status"], outcome["exit_status"], outcome["reason"]) == ("failed", 2, None)
    assert json.loads((run_dir / "run.json").read_text())["outcome"]["exit_status"] == 2


# verl's output when its checkpoint save meets a full disk (the shape of DISK_LOG, without the ENOSPC line: torch's
# PytorchStreamWriter error does not always carry it); the log file fills after its first two lines
FULL_DISK_VERL = "\n".join(
    [
        STEP.format(n=1),
        STEP.format(n=2),
        "print('(TaskRunner pid=1) local_global_step_folder: checkpoints/global_step_4', flush=True)",
        (
            "print('ray.exceptions.RayTaskError(RuntimeError): ray::WorkerDict.actor_rollout_save_checkpoint()"
            " (pid=2402, ip=10.0.0.2)', flush=True)"
        ),
        (
            "print('RuntimeError: [enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file"
            " data/12: file write failed', flush=True)"
        ),
        "raise SystemExit(1)",
    ]
)
NO_SPACE = OSError(errno.ENOSPC, "No space left on device")


class FullAfter:
    """train.log on a disk that fills after ``lines`` lines: later writes raise ENOSPC, and so does the close (the
    flush of the line cut short), as on the H200's tmpfs
    (benchmarks/results/2026-12-01-h200-p40-lora-graph-memory-faults/lora-3b-learn-lora-soak).
    """

    def __init__(self, file, lines):
        self.file, self.left = file, lines

    def write(self, text):
        if self.left == 0:
            raise NO_SPACE
        self.left -= 1
        return self.file.write(text)

    def close(self):
        self.file.close()
        if self.left == 0:
            raise NO_SPACE


@pytest.fixture
def full_disk(monkeypatch, tmp_path):
    """A stand-in verl that fails its step-4 save, a run directory with step 2's checkpoint and run.json, a
    train.log that fills after two lines, and a file system with 0 bytes free."""
    from verlfit import progress

    monkeypatch.setattr(
        progress, "open", lambda *args, **kwargs: FullAfter(builtins.open(*args, **kwargs), 2), raising=False
    )
    monkeypatch.setattr(
        shutil, "disk_usage", lambda path: collections.namedtuple("usage", "total used free")(16 * 2**30, 16 * 2**30, 0)
    )
    run_dir = tmp_path / "run"
    fake_checkpoint(run_dir, 2)
    (run_dir / "checkpoints" / "global_step_4" / "actor").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"verlfit_run": 1}))
    return fake_verl_plan(tmp_path, FULL_DISK_VERL), run_dir


def test_a_full_disk_under_train_log_is_said_once_and_diagnosed_from_the_lines_kept_in_memory(full_disk, capsys):
    plan, run_dir = full_disk
    assert launch(plan, run_dir, poll_seconds=0.1) == 1
    out, err = capsys.readouterr()
    checkpoints = run_dir / "checkpoints"
    assert out.splitlines() == [
        "step 1/3 | 1.0 s/step | 100 tok/s | ETA 2s | ppo_kl 0.000",
        "step 2/3 | 1.0 s/step | 100 tok/s | ETA 1s | ppo_kl 0.000",
        (
            f"verlfit: {run_dir / 'train.log'} is incomplete from here on: the disk is full (No space left on device; 0"
            f" bytes free in {run_dir}); verlfit stops writing it and keeps verl's last 4000 lines in memory for the"
            " diagnosis"
        ),
    ]
    message = (
        f"the disk filled up during a checkpoint save (verl's actor_rollout_save_checkpoint): {checkpoints} has 0.0 GiB"
        " free; one checkpoint of this run needs about 11.1 GiB; the checkpoint of step 2 is complete and kept"
    )
    fix = (
        f"free space (or lower --keep-checkpoints, raise --save-freq), then verlfit train --resume {run_dir} continues"
        " from step 2"
    )
    assert err.splitlines()[-4:] == [
        (
            f"verlfit: removed {checkpoints / 'global_step_4'}: a checkpoint the full disk cut short (verl had not"
            " marked it complete)"
        ),
        f"verlfit: {message}",
        f"  fix: {fix}",
        (
            f"verlfit: verl exited with status 1; the log {run_dir / 'train.log'} is incomplete (writing it failed:"
            " [Errno 28] No space left on device)"
        ),
    ]
    assert "Traceback" not in err
    assert (run_dir / "train.log").read_text().splitlines() == [
        line.split("'")[1] for line in (STEP.format(n=1), STEP.format(n=2))
    ]
    assert [r["step"] for r in read_metrics(run_dir)] == [1, 2]
    outcome = json.loads((run_dir / "run.json").read_text())["outcome"]
    assert {key: value for key, value in outcome.items() if key != "at"} == {
        "status": "failed",
        "exit_status": 1,
        "reason": "disk_full",
        "phase": "checkpoint",
        "worker_method": "actor_rollout_save_checkpoint",
        "message": message,
        "fix": fix,
        "log_line": f"verlfit could not write to {run_dir}: [Errno 28] No space left on device",
    }
    assert sorted(p.name for p in checkpoints.iterdir()) == ["global_step_2", "latest_checkpointed_iteration.txt"]


def test_a_run_json_the_full_disk_cannot_take_is_said_and_left_as_it_was(full_disk, monkeypatch, capsys):

    from verlfit import output_files

    plan, run_dir = full_disk

    class NoSpace:  # the temporary file opens; writing into it fails, as on a full disk
        def __init__(self, path, mode):
            self.file = open(path, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def write(self, data):
            raise NO_SPACE

    monkeypatch.setattr(output_files, "open", NoSpace, raising=False)  # the one atomic writer's open
    assert launch(plan, run_dir, poll_seconds=0.1) == 1
    err = capsys.readouterr().err
    assert (
        f"verlfit: could not update {run_dir / 'run.json'} with the outcome: [Errno 28] No space left on device; it is"
        " unchanged\n" in err
    )
    assert "Traceback" not in err
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "checkpoints",
        "metrics.jsonl",
        "run.json",
        "train.log",
    ]  # no .run.json.* left
    assert json.loads((run_dir / "run.json").read_text()) == {"verlfit_run": 1}


def test_an_error_in_verlfit_itself_stops_verl_before_its_traceback(tmp_path, monkeypatch, capsys):
    from verlfit.progress import StepWatcher

    pid_file = tmp_path / "verl.pid"
    script = (
        f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        + STEP.format(n=1)
        + "\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    raise SystemExit(1)"
    )
    monkeypatch.setattr(
        StepWatcher, "feed", lambda self, line: (_ for _ in ()).throw(RuntimeError("a bug in the watcher"))
    )
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="a bug in the watcher"):
        launch(fake_verl_plan(tmp_path, script), tmp_path / "run", poll_seconds=0.1)
    assert time.monotonic() - started < 30  # SIGINT stopped it, not the 60 s sleep
    with pytest.raises(ProcessLookupError):  # stopped and reaped: no orphan
        os.kill(int(pid_file.read_text()), 0)
    assert "verlfit: stopping verl after an error in verlfit itself (its traceback follows)" in capsys.readouterr().err
