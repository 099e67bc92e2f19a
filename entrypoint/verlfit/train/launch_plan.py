"""What ``verlfit train`` launches: :class:`LaunchPlan` (settings, command, environment, notes) and the facts every
part of the launch reads from it: the settings a run recorded (:func:`recorded_settings`), the steps the run will take
(:func:`total_steps`), the planner's request of the run
(:func:`plan_request`) and Hydra's run-directory override (:func:`hydra_run_dir_override`).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from verlfit.data_folder import DataKeys
from verlfit.overrides import quote_value
from verlfit.run_settings import TrainSettings
from verlfit.patch_switches import PatchSwitches
from verlfit.plan.request import request_from_settings
from verlfit.profiles import MEMORY_LIMIT_VARIABLE, load_profile
from verlfit.reward_function import RewardFunction


@dataclasses.dataclass
class LaunchPlan:
    """Everything needed to start verl: the command, its environment additions and the record."""

    settings: TrainSettings
    profile_name: str
    gpu_description: str
    environment: dict[str, str]
    overrides: list[str]
    command: list[str]
    notes: list[str]
    # the reward function the run was given (the user's file; verl loads its copy in the run directory), None: verl's
    reward_function: RewardFunction | None = None
    # the columns verl reads the prompt and the reward's key from (data.prompt_key, data.reward_fn_key), read once
    data_keys: DataKeys = dataclasses.field(default_factory=DataKeys)
    # the training steps the run will take (:func:`total_steps` of ``settings``, computed when the plan is built, and
    # for a new run again by :func:`verlfit.train.preflight.start_run` once its data is prepared); None: not known (a
    # run sized by --epochs whose train.parquet cannot be read yet)
    total_steps: int | None = None
    # the estimated seconds of one training step before the first step is timed; None: no estimate
    estimated_step_seconds: float | None = None
    # a resume: the step of the checkpoint verl continues from (read once, by the resume's plan); None: a new run
    resume_step: int | None = None
    # verl's config as the overrides compose it, in YAML: validated once, as the plan is built (Hydra against the
    # installed verl's ppo_trainer.yaml), and recorded as the run directory's config.yaml; None: not validated
    # (--no-validate) or a resume
    config_yaml: str | None = None


def hydra_run_dir_override(run_dir) -> str:
    """``hydra.run.dir=RUN_DIR/hydra``, quoted for Hydra's override grammar (a path with ``,`` ``=`` ``(`` ``'``
    or a space would otherwise be read as a sweep or fail to parse when verl starts)."""

    return f"hydra.run.dir={quote_value(str(Path(run_dir) / 'hydra'))}"


def training_rows(settings: TrainSettings) -> int | None:
    """Rows (prompts) of ``settings.data_dir/train.parquet`` from its metadata, or None when it cannot be read."""
    try:
        import pyarrow  # lazy: only where parquet is read or written
        import pyarrow.parquet as pq  # lazy: only where parquet is read or written

        return pq.ParquetFile(Path(settings.data_dir) / "train.parquet").metadata.num_rows
    except ImportError:
        return None
    except (OSError, pyarrow.ArrowException):  # not parquet: check_data_size refuses it with its fix
        return None


def total_steps(settings: TrainSettings) -> int | None:
    """Training steps the run will take: ``--steps``, else epochs x whole batches of the prompts verl keeps
    (``settings.train_prompts_kept`` where its ``filter_overlong_prompts`` drops some, else train.parquet's rows; verl's
    dataloader drops the last partial batch, ``drop_last=True``, ``ray_trainer.py:507``)."""
    if settings.steps is not None:
        return settings.steps
    rows = settings.train_prompts_kept if settings.train_prompts_kept is not None else training_rows(settings)
    if rows is None:
        return None
    return settings.epochs * (rows // settings.train_batch_size)


def recorded_settings(record: dict, **changes) -> TrainSettings:
    """The :class:`TrainSettings` a run recorded in ``run.json`` (its ``settings``; fields this verlfit does not know
    are left out, ``loggers`` back to a tuple; a record without ``frozen_base_dtype`` predates patch 0026 and gets
    ``"float32"``, what it ran with), with ``changes`` applied: what a resume continues and what
    ``verlfit bench`` estimates a recorded run from."""
    known = {f.name for f in dataclasses.fields(TrainSettings)}
    values = {k: v for k, v in record["settings"].items() if k in known}
    # a run recorded before patch 0026 (no frozen_base_dtype setting) kept its LoRA base in fp32
    values.setdefault("frozen_base_dtype", "float32")
    return TrainSettings(**{**values, "loggers": tuple(values.get("loggers", ("console",))), **changes})


def plan_request(plan: LaunchPlan):
    """The planner's :class:`verlfit.plan.PlanRequest` of a launch plan, sized for its memory limit (else its card's).

    Raises:
        VerlfitError: the model's shape cannot be read; ValueError: a malformed memory limit.
    """

    profile = load_profile(plan.profile_name)
    limit = plan.environment.get(MEMORY_LIMIT_VARIABLE) or os.environ.get(MEMORY_LIMIT_VARIABLE)
    memory = int(float(limit) * 1024**3) if limit else int(profile.gpu_memory_gib * 1024**3)
    # the patch switches as the launch's final override list sets them (what verl gets)
    return request_from_settings(plan.settings, profile, memory, switches=PatchSwitches.from_overrides(plan.overrides))
