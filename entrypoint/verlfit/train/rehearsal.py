"""``verlfit train --dry-run``'s rehearsal: what the real launch would say or refuse of the run's inputs, as notes
(:func:`rehearse`): its run directory, the engines, its model folder, its data folder, one batch of data and its
reward. Nothing is prepared or written.
"""

from __future__ import annotations

import os
from pathlib import Path

from verlfit import gsm8k
from verlfit.checks.data_folder import check_data_folder
from verlfit.checks.engines import missing_engine_packages
from verlfit.checks.model_folder import check_model_folder
from verlfit.checks.result import FAIL, PASS
from verlfit.errors import VerlfitError
from verlfit.train.inputs import check_run_data
from verlfit.train.launch_plan import LaunchPlan
from verlfit.train.run_directory import check_run_directory


def rehearse(plan: LaunchPlan, skip_checks: bool = False) -> list[str]:
    """The dry run's checks of ``plan``: what the real launch would say or refuse, added to ``plan.notes``; returns
    the refusals (empty: the real launch would start), for the dry run's exit status 2.

    A resume: nothing more (:func:`verlfit.train.run_directory.resume_plan` says what it removes). A new run, each
    step said as a note in this order:

    * its run directory: exists, or inside another run, the model folder or the data folder (a refusal);
    * the engines a real launch's checks ask for (unless ``skip_checks``);
    * a local model folder (unless ``skip_checks``; a hub name is not checked: no network in a dry run, ``verlfit
      doctor`` checks it): the ``model`` check's FAIL
      (:func:`verlfit.checks.model_folder.check_model_folder`: config.json, weights, tokenizer files) as the refusal
      the run would make;
    * its data folder: nothing when verl's files are there (the run's data check below counts them); else the ``data``
      check a real launch runs (:func:`verlfit.checks.data_folder.check_data_folder` under the run's data keys, one
      HEAD request to the hub at most, none offline): its FAIL as the refusal the run would make, its WARN as the
      preparing it would do (a FAIL of raw GSM8K files, a line that is not JSON, a refusal too). A FAIL of an absent
      or empty folder otherwise says only that GSM8K cannot be fetched from this machine (no hub, no cache), so it
      stays a note, not a refusal;
    * then, as the launch checks them, one batch of data and its reward on every row once the data is prepared
      (:func:`verlfit.train.inputs.check_run_data`).

    What depends on this machine (engines not installed here, GSM8K not reachable from here) stays a note: a dry run is
    often made on another machine than the run.

    Raises:
        VerlfitError: exit status 2: a train.parquet that does not read or holds less than a batch, a reward that
            fails on a row (the refusals a real launch makes, as the dry run's failure).
    """

    settings = plan.settings
    if settings.resume:  # its notes (the checkpoint it continues from, those it removes) are the resume plan's
        return []
    refusals = []
    if Path(settings.run_dir).exists():
        plan.notes.append(f"{settings.run_dir} exists: a real run would refuse it (use --resume, or another --run-dir)")
        refusals.append(f"run directory {settings.run_dir} exists")
    else:
        try:
            check_run_directory(settings.run_dir, settings.model, settings.data_dir, settings.raw_data_dir)
        except VerlfitError as refusal:  # inside another run, the model or the data: a real run refuses it
            plan.notes.append(f"a real run would refuse --run-dir: {refusal.message} ({refusal.fix})")
            refusals.append(f"--run-dir {settings.run_dir}: {refusal.message}")
    missing = missing_engine_packages(settings.rollout, settings.attention, frozen_base=settings.frozen_base_dtype)
    if missing and not skip_checks:
        # the engines check a real launch makes (verlfit doctor's), said here so a rehearsal does not hide it
        plan.notes.append(
            f"this Python has no {' and no '.join(package for package, _, _ in missing)}: a real run would refuse it "
            f"(FAIL engines; {', '.join(option for _, _, option in missing)}, or the verlfit:a10 image)"
        )
    # what the real run's checks would say: the model check of a local folder, the data check
    if not skip_checks and Path(settings.model).is_dir():
        result = check_model_folder(settings.model, os.environ)
        if result.status == FAIL:
            plan.notes.append(
                f"a real run would refuse its model: FAIL model: {result.message}"
                + (f" (fix: {result.fix})" if result.fix else "")
            )
            refusals.append(f"model {settings.model}")
    keys = plan.data_keys
    result = check_data_folder(settings.data_dir, os.environ, keys=keys)
    if result.status == FAIL:
        plan.notes.append(
            f"a real run would refuse its data: FAIL data: {result.message}"
            + (f" (fix: {result.fix})" if result.fix else "")
        )
        folder = Path(settings.data_dir)
        raw_source = gsm8k.training_data(folder)[1]  # --data/verl's raw GSM8K files: a broken line is in the input
        if (raw_source is not None and raw_source.exists()) or (
            folder.exists() and not (folder.is_dir() and not any(folder.iterdir()))
        ):  # not just GSM8K missing here
            refusals.append(f"data {settings.data_dir}")
    elif result.status != PASS:
        plan.notes.append(f"a real run would first prepare its data: {result.message}")
    # the batch and the reward the real launch checks, its refusals as the dry run's failure (exit 2): no plan
    # verdict for a run that cannot start; nothing is prepared
    note, plan.reward_function = check_run_data(settings, keys, plan.reward_function)
    if note:
        plan.notes.append(note)
    return refusals
