"""A ``verlfit train`` run directory: created atomically with its records (:func:`create_run_directory`: ``run.json``,
``command.sh``, ``config.yaml``, ``checkpoints/``; built whole beside its path and renamed in,
:func:`verlfit.output_files.build_new_folder`), read back (:func:`resumable_record`), resumed (:func:`resume_plan`,
:func:`record_resume`) and given its outcome (:func:`record_outcome`). Every later write of ``run.json`` goes through
a temporary file and a rename (:func:`verlfit.output_files.write_file`).
"""

from __future__ import annotations

import shutil
import dataclasses
import os
import shlex
import sys
import time
from pathlib import Path

from verlfit.checkpoints import TRACKER, checkpoints_to_prune, latest_checkpoint
from verlfit.data_folder import file_digest
from verlfit.errors import VerlfitError
from verlfit.output_files import build_new_folder, check_output, write_file
from verlfit.overrides import keep_checkpoints_overrides, merge_overrides, override_values, quote_value
from verlfit.plan.train_estimate import recorded_step_seconds
from verlfit.run_files import (
    CHECKPOINTS_DIR,
    COMMAND_FILE,
    CONFIG_FILE,
    NOT_A_RECORD_FIX,
    NoRunRecord,
    RUN_FILE,
    TENSORBOARD_DIR,
    load_run,
    process_alive,
    record_text,
)
from verlfit.train.describe import shell_command
from verlfit.train.launch_plan import LaunchPlan, hydra_run_dir_override, recorded_settings, total_steps
from verlfit.train.reward import data_keys, reward_copy_path


def check_run_directory(
    run_dir: str | os.PathLike, model: str | None = None, data_dir: str | None = None, raw_data_dir: str | None = None
):
    """Check that ``--run-dir`` may be created: it does not exist, lies in no other run directory, in neither the
    ``model`` nor the ``data_dir`` folder the run reads, nor ``raw_data_dir``, the raw GSM8K files that data is
    prepared from (:attr:`verlfit.run_settings.TrainSettings.raw_data_dir`; a hub id is no folder), and has no file
    among its parents
    (:func:`verlfit.output_files.check_output`); return the checked output.

    Raises:
        VerlfitError: naming ``--run-dir`` and the fix (an existing run: ``--resume``).
    """

    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise VerlfitError(
            f"--run-dir {run_dir} is a file, not a directory",
            fix="pass a directory path that does not exist yet",
            exit_code=2,
        )
    if run_dir.exists():
        resume = f"verlfit train --resume {shlex.quote(str(run_dir))}"
        raise VerlfitError(
            f"run directory {run_dir} already exists",
            fix=f"continue it with `{resume}`, or pass another --run-dir",
            exit_code=2,
        )
    # the folders the run reads: the model, verl's data, and the raw GSM8K files --data DIR named (DIR/verl's source)
    named = (("--model", model), ("--data", data_dir), ("--data", raw_data_dir))
    reads = [(flag, folder) for flag, folder in named if folder]
    return check_output(run_dir, "verlfit train", flag="--run-dir", kind="new-folder", force_flag=None, reads=reads)


def create_run_directory(plan: LaunchPlan, config_yaml: str | None) -> Path:
    """Create the run directory atomically: build it under a hidden name beside it, then rename
    (:func:`verlfit.output_files.build_new_folder`).

    Raises:
        VerlfitError: when the directory already exists (use --resume), lies inside another run, or cannot be
            created (:func:`check_run_directory`, :func:`verlfit.output_files.write_error`).
    """

    run_dir = Path(plan.settings.run_dir)
    # the folder's own state again (another process may have made it since the pre-launch checks); where it lies
    # against --model and --data cannot change, and the pre-launch checks refused it there (train/preflight.py)
    output = check_run_directory(run_dir)

    def build(staging: Path) -> None:
        record = {
            "verlfit_run": 1,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "pid": os.getpid(),  # the verlfit process watching verl; `verlfit report` tells running from interrupted
            "profile": plan.profile_name,
            "gpu": plan.gpu_description,
            "settings": dataclasses.asdict(plan.settings),
            "total_steps": plan.settings.steps,
            # the time model's seconds a step (LaunchPlan.estimated_step_seconds): a resume's ETA before its first step
            "estimated_step_seconds": plan.estimated_step_seconds,
            "environment": plan.environment,
            "overrides": plan.overrides,
            "command": plan.command,
            "notes": plan.notes,
        }
        if plan.reward_function is not None:
            record["reward_function"] = copy_reward_function(plan.reward_function, staging, run_dir)
        (staging / RUN_FILE).write_text(record_text(record))
        exports = "".join(f"export {key}={shlex.quote(value)}\n" for key, value in plan.environment.items())
        (staging / COMMAND_FILE).write_text(
            "#!/usr/bin/env bash\n# The exact verl launch of this run (written by verlfit train).\n"
            + exports
            + shell_command(plan.command, indent="  ")
            + "\n"
        )
        if config_yaml is not None:
            (staging / CONFIG_FILE).write_text(config_yaml)
        (staging / CHECKPOINTS_DIR).mkdir()

    build_new_folder(output, build)
    return run_dir


def copy_reward_function(reward, staging: Path, run_dir: Path) -> dict:
    """Copy the reward function's file, and the modules it imports from its folder (``reward.modules``, found by the
    check: :func:`verlfit.train.inputs.check_run_data`; each at its place relative to the file's folder), into the run
    directory being built (``staging``, renamed to ``run_dir`` after), at :func:`verlfit.train.reward.reward_copy_path`,
    and return run.json's ``reward_function`` record: ``{"path": the copy (absolute, under run_dir), "name",
    "source": the user's file, "sha256": of the copy}``, with ``"modules"`` (their paths relative to the reward
    folder) where it imports any.

    Raises:
        VerlfitError: a file cannot be read (it was checked moments before: it moved or lost its permissions).
    """

    copy = reward_copy_path(staging, reward)
    copy.parent.mkdir()
    modules = [module.relative_to(reward.path.parent) for module in reward.modules]
    for source, target in [(reward.path, copy)] + [(reward.path.parent / name, copy.parent / name) for name in modules]:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        except OSError as error:
            raise VerlfitError(
                f"cannot copy the reward function file {source} into the run directory: {error}",
                fix="check that the file is readable and pass --reward-function again",
                exit_code=2,
            ) from error
    return {
        "path": str(reward_copy_path(run_dir, reward)),
        "name": reward.name,
        "source": str(reward.path),
        "sha256": file_digest(copy),
    } | ({"modules": [str(name) for name in modules]} if modules else {})


def resumable_record(run_dir: Path) -> dict:
    """``run.json`` of a run directory (:func:`verlfit.run_files.load_run`) with the fields a resume relaunches from:
    ``overrides`` (a list of strings), ``settings`` and ``environment`` (objects), ``profile`` and ``gpu`` (strings).

    Raises:
        VerlfitError: when ``run_dir`` is not a verlfit run directory (what ``load_run`` raises), or its record lacks
            one of those fields (naming them).
    """
    record = load_run(run_dir)
    required = {"overrides": list, "settings": dict, "environment": dict, "profile": str, "gpu": str}
    missing = [key for key, kind in required.items() if not isinstance(record.get(key), kind)]
    if not missing and not all(isinstance(o, str) for o in record["overrides"]):
        missing = ["overrides"]
    if missing:
        raise VerlfitError(
            f"{Path(run_dir) / RUN_FILE} is not a verlfit run record (missing or wrong: {', '.join(missing)})",
            fix=NOT_A_RECORD_FIX,
            exit_code=2,
        )
    return record


def resume_plan(run_dir: Path, steps: int | None = None, keep_checkpoints: int | None = None) -> LaunchPlan:
    """The launch plan of a stopped run: its recorded overrides with ``trainer.resume_mode=auto``.

    ``keep_checkpoints`` (0: all) replaces the recorded ``--keep-checkpoints``, e.g. to keep fewer when the disk fills.

    The plan's notes say the checkpoint it continues from and those its first check removes (``--keep-checkpoints``).
    The run directory's own path replaces the recorded one in ``trainer.default_local_dir``, so a run
    moved or resumed from another working directory still finds its checkpoints. ``steps`` extends
    (or shortens) the run's total training steps. The step-time estimate is the one the run recorded when it
    started, else the time model's estimate of the record (:func:`verlfit.plan.train_estimate.recorded_step_seconds`).
    """

    run_dir = Path(run_dir).resolve()
    record = resumable_record(run_dir)
    pid = record.get("pid")
    if pid != os.getpid() and process_alive(pid, "verlfit"):
        raise VerlfitError(
            f"{run_dir} is still being trained by process {pid} (verlfit train): a second run would write "
            "the same checkpoints and metrics",
            fix=f"stop it first (Ctrl-C in its terminal, or kill -INT {pid}), then resume",
            exit_code=2,
        )
    settings = recorded_settings(record, resume=True, run_dir=str(run_dir))
    # the recorded settings' total: their --steps, else epochs x batches of train.parquet, as verl counts them
    settings_total = total_steps(settings)
    hydra_dir = hydra_run_dir_override(run_dir)
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        save_freq = record["settings"].get("save_freq")
        when = (
            f"the first is saved at step {save_freq}"
            if isinstance(save_freq, int) and save_freq > 0
            else f"this run saves none (--save-freq {save_freq if isinstance(save_freq, int) else -1})"
        )
        raise VerlfitError(
            f"{run_dir} has no complete checkpoint ({run_dir / CHECKPOINTS_DIR / TRACKER} is missing or "
            f"names no checkpoint; {when}): verl would start again from step 0",
            fix="start a new run with another --run-dir (or delete this one)",
            exit_code=2,
        )
    if keep_checkpoints is not None:
        settings.keep_checkpoints = keep_checkpoints
    # what the resume's first check removes (CheckpointKeeper in launch), said by the dry run
    doomed = checkpoints_to_prune(run_dir / CHECKPOINTS_DIR, settings.keep_checkpoints)
    recorded_total = record.get("total_steps")
    if recorded_total is None and settings.steps is None:
        recorded_total = settings_total  # a run sized by --epochs
    if (
        steps is None
        and isinstance(recorded_total, int)
        and record["settings"].get("steps") not in (None, recorded_total)
        and checkpoint < recorded_total
    ):
        # extended by an earlier --resume --steps in a run.json written before it kept the settings too
        steps = recorded_total
    if steps is None and isinstance(recorded_total, int) and checkpoint >= recorded_total:
        raise VerlfitError(
            f"{run_dir} has finished: its newest checkpoint is step {checkpoint} of its {recorded_total} "
            "steps, and verl would train one more and stop",
            fix=f"pass --steps above {checkpoint} to train further, e.g. `verlfit train --resume "
            f"{shlex.quote(str(run_dir))} --steps {checkpoint + recorded_total}`",
            exit_code=2,
        )
    changes = ["trainer.resume_mode=auto", f"trainer.default_local_dir={quote_value(str(run_dir / CHECKPOINTS_DIR))}"]
    if steps is not None:
        if steps <= checkpoint:
            if (
                isinstance(recorded_total, int) and checkpoint >= recorded_total
            ):  # finished: without --steps it is refused too
                fix = (
                    f"pass --steps above {checkpoint} (the run's new total; it has finished its "
                    f"{recorded_total} steps), e.g. `verlfit train --resume {shlex.quote(str(run_dir))} "
                    f"--steps {checkpoint + recorded_total}`"
                )
            else:
                fix = (
                    f"pass --steps above {checkpoint} (the run's new total), or leave it out to finish the run's own "
                    + (f"{recorded_total} steps" if isinstance(recorded_total, int) else "steps")
                )
            raise VerlfitError(
                f"--steps {steps} with --resume: the newest checkpoint of {run_dir} is already at step {checkpoint}",
                fix=fix,
                exit_code=2,
            )
        changes += [f"trainer.total_training_steps={steps}", f"trainer.total_epochs={steps}"]
    if keep_checkpoints is not None:
        changes += keep_checkpoints_overrides(keep_checkpoints)
    overrides = merge_overrides(record["overrides"] + changes)
    keys = data_keys(override_values(overrides))
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides, hydra_dir]
    environment = dict(record["environment"])
    if "TENSORBOARD_DIR" in environment:
        environment["TENSORBOARD_DIR"] = str(run_dir / TENSORBOARD_DIR)
    if steps is not None:
        settings.steps = steps
    notes = [f"resuming from the checkpoint of step {checkpoint}"]
    if doomed:
        notes.append(
            f"the resume would first remove {', '.join(f'global_step_{step}' for step in doomed)} "
            f"(--keep-checkpoints {settings.keep_checkpoints}; verl keeps only its own session's saves, so verlfit"
            " prunes the rest)"
        )
    return LaunchPlan(
        settings,
        record["profile"],
        record["gpu"],
        environment,
        overrides,
        command,
        notes,
        data_keys=keys,
        resume_step=checkpoint,
        total_steps=steps if steps is not None else settings_total,
        estimated_step_seconds=recorded_step_seconds(record, settings, overrides),
    )


def record_resume(run_dir: Path, plan: LaunchPlan) -> None:
    """Note a resume in ``run.json`` (atomically): this process's pid, the time, and what the resume changed.

    ``--steps`` and ``--keep-checkpoints`` given with ``--resume`` become the run's own settings and overrides, so
    a later ``--resume`` without them keeps the extended total instead of going back to the first one.
    """
    record = resumable_record(run_dir)
    record["pid"] = os.getpid()
    if plan.settings.steps is not None:
        record["total_steps"] = plan.settings.steps
        record["settings"]["steps"] = plan.settings.steps
    record["settings"]["keep_checkpoints"] = plan.settings.keep_checkpoints
    record["overrides"] = list(plan.overrides)
    record["command"] = list(plan.command)
    record.setdefault("resumed", []).append(time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    write_file(Path(run_dir) / RUN_FILE, record_text(record))


def record_outcome(run_dir: Path, outcome: dict) -> bool:
    """Set ``outcome`` in ``run_dir/run.json`` (atomically); nothing when there is no run.json. Return whether it was
    recorded: a write that fails (a full disk) is said on stderr, run.json stays as it was and no temporary file is
    left (:func:`verlfit.output_files.write_file`), since the run's failure, already explained, is what the user needs
    to see."""
    record_path = run_dir / RUN_FILE
    try:
        record = load_run(run_dir)
    except NoRunRecord:
        return False
    except VerlfitError as error:  # a damaged run.json: the run's failure is still what the user needs to see
        print(f"verlfit: could not update {record_path} with the outcome: {error.message}", file=sys.stderr)
        return False
    try:
        write_file(record_path, record_text({**record, "outcome": outcome}))
    except OSError as error:
        print(f"verlfit: could not update {record_path} with the outcome: {error}; it is unchanged", file=sys.stderr)
        return False
    return True
