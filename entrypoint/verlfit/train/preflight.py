"""What ``verlfit train`` checks and prepares before it launches (:func:`start_run`, the run directory created or
the resume recorded last): the doctor's blocking checks (:func:`verlfit.readiness.blocking_checks`, any FAIL
the launch's error), the run's data and reward (:func:`verlfit.train.inputs.check_run_data`: prepared when missing,
at least one batch, the reward on every row), and a warning when the disk cannot hold the checkpoints kept
(:func:`checkpoint_space_warning`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from verlfit.checks.disk import checkpoint_space, checkpoints_held
from verlfit.checks.result import PASS
from verlfit.checks.stack import require
from verlfit.errors import VerlfitError
from verlfit.plan.time import checkpoint_disk_bytes
from verlfit.readiness import blocking_checks
from verlfit.train.inputs import check_run_data
from verlfit.train.launch_plan import LaunchPlan, plan_request, total_steps
from verlfit.train.reward import reward_python_path
from verlfit.train.run_directory import check_run_directory, create_run_directory, record_resume


def start_run(plan: LaunchPlan, skip_checks: bool = False) -> Path:
    """Make ``plan`` ready to launch and return its run directory. A resume: recorded in its ``run.json``
    (:func:`verlfit.train.run_directory.record_resume`), the disk checked for the checkpoints it keeps. A new run, each
    step before the next so nothing is written for a run that cannot start: the Python stack
    (:func:`verlfit.checks.stack.require`), the run directory's place, the doctor's fast blocking checks (unless
    ``skip_checks``; :func:`verlfit.readiness.blocking_checks`, among them the engines check of the plan's
    rollout, attention and LoRA base storage, after ``--rollout`` / ``--attention`` / ``--frozen-base-dtype`` and the
    planner's choice: a hopeless launch stops in seconds), the data
    prepared and sized, the reward checked on every row, the disk checked, the notes printed, then the run directory
    created whole (:func:`verlfit.train.run_directory.create_run_directory`), with the config the overrides composed
    to when the plan was built (:attr:`verlfit.train.launch_plan.LaunchPlan.config_yaml`, validated once there).

    Raises:
        VerlfitError: a check that fails, with its fix (nothing written then); the blocking checks' FAILs as one
            error, ``"pre-flight checks failed:"`` then ``"  FAIL name: message"`` and its fix under each.
    """

    if plan.settings.resume:
        run_dir = Path(plan.settings.run_dir)
        record_resume(run_dir, plan)
        warning = checkpoint_space_warning(plan, resumed_from=plan.resume_step, resume=True)
        if warning:
            print(f"verlfit: {warning}")
        return run_dir

    settings = plan.settings
    require("train")  # the same words as export and eval
    # before anything is prepared: where the run may not go is said first
    check_run_directory(settings.run_dir, settings.model, settings.data_dir, settings.raw_data_dir)
    if not skip_checks:  # the doctor's fast blocking checks: a hopeless launch stops in seconds
        failures = blocking_checks(
            profile_name=plan.profile_name,
            data_dir=settings.data_dir,
            model=settings.model,
            environment=plan.environment,
            rollout=settings.rollout,
            attention=settings.attention,
            data_keys=plan.data_keys,
            frozen_base=settings.frozen_base_dtype,
        )
        if failures:
            raise VerlfitError(
                "pre-flight checks failed:\n"
                + "\n".join(
                    f"  FAIL {f.name}: {f.message}" + (f"\n       fix: {f.fix}" if f.fix else "") for f in failures
                ),
                fix="run `verlfit doctor` for the full report, or --skip-checks to launch anyway",
            )
    # the data prepared where missing, at least a batch of it, the reward on every row
    note, plan.reward_function = check_run_data(settings, plan.data_keys, plan.reward_function, prepare=True)
    plan.notes.append(note)
    if plan.reward_function is not None and plan.reward_function.modules:
        # the modules it imports from its folder are copied beside it into the run directory's reward folder, where
        # verl's workers (Ray's, started from verl's process with its environment) import them
        plan.environment["PYTHONPATH"] = reward_python_path(settings.run_dir, os.environ.get("PYTHONPATH"))
    # counted again now that the data is there (an --epochs run's train.parquet may have been prepared just now): the
    # total the disk check below and the launch's progress display read from the plan
    plan.total_steps = total_steps(settings)
    warning = checkpoint_space_warning(plan)
    if warning:
        plan.notes.append(warning)
    for note in plan.notes:
        print(f"verlfit: {note}")
    run_dir = create_run_directory(plan, plan.config_yaml)
    print(f"verlfit: run directory {run_dir}")
    return run_dir


def checkpoint_space_warning(
    plan: LaunchPlan, resumed_from: int | None = None, disk_usage=None, resume: bool = False
) -> str | None:
    """A pre-launch warning when the run directory's file system cannot hold the checkpoints this run keeps at once;
    None when it can, when the run saves none, or when the model's shape cannot be read.

    One checkpoint is :func:`verlfit.plan.time.checkpoint_disk_bytes` of the run's plan request; the run holds
    :func:`verlfit.checks.disk.checkpoints_held` of them (``--keep-checkpoints`` K: K at the peak, since verl deletes
    the oldest before writing the next; never more than the saves this session makes: one every ``--save-freq`` steps
    and one at the last step, ``ray_trainer.py:1158-1160``, of the plan's ``total_steps``). ``resumed_from``: the
    checkpoint step a resume continues from (the saves counted start after it; the checkpoints already there are
    pruned by verlfit as new ones complete, so counting K more is generous: a resumed run holds at most K + 1 at once);
    ``resume``: a ``--resume`` (its fix then names only what a resume can change:
    :func:`verlfit.checks.disk.checkpoint_space`).
    Always a WARN, even where ``verlfit doctor`` says FAIL (not even one fits): the run launches after it.
    Text: ``"WARN disk: 30.0 GiB free at /runs; this run holds 2 checkpoints of 11.1 GiB at once (22.2 GiB) ...;
    not blocking: the run starts anyway (fix: ...)"``.
    """

    settings = plan.settings
    if settings.save_freq <= 0:
        return None
    try:
        one = checkpoint_disk_bytes(plan_request(plan))
    except (VerlfitError, OSError, ValueError):
        return None
    total, start = plan.total_steps, resumed_from or 0
    saves = (
        None
        if total is None
        else max(0, total // settings.save_freq - start // settings.save_freq)
        + (1 if total % settings.save_freq and total > start else 0)
    )
    if saves == 0:
        return None
    result = checkpoint_space(
        settings.run_dir,
        one,
        checkpoints_held(settings.keep_checkpoints, saves),
        disk_usage or shutil.disk_usage,
        resume=resume,
    )
    if result.status == PASS:
        return None
    # WARN whatever the doctor's verdict: the run launches after it (doctor's FAIL means blocking; this check is not)
    return f"WARN disk: {result.message}; not blocking: the run starts anyway (fix: {result.fix})"
