"""The step-time estimate of a ``verlfit train`` run (:mod:`verlfit.plan.time`'s model on the run's request): what
``verlfit train`` prints beside the memory verdict (:func:`step_time_lines`, from
:func:`verlfit.plan.fit.plan_for_train`, and :func:`for_train` of a run's settings), the seconds a step of a recorded
run (:func:`recorded_step_seconds`: a resume's ETA, the record's own figure or the same estimate of what it records),
and what ``verlfit bench`` compares with a recorded run (:func:`train_step_estimate`).

The run's patch switches come resolved (:attr:`verlfit.resolved_run.ResolvedRun.switches`), or, for a recorded run,
read once from its final override list (:meth:`verlfit.patch_switches.PatchSwitches.from_overrides`).
"""

from __future__ import annotations

from verlfit.cards import CARDS, Card, get_card
from verlfit.errors import VerlfitError
from verlfit.model_shape import ModelShape
from verlfit.run_settings import TrainSettings
from verlfit.patch_switches import PatchSwitches
from verlfit.plan.memory import PlanRequest
from verlfit.plan.request import inputs_for_train, request_from_settings
from verlfit.plan.time import (
    MeasuredLengths,
    StepEstimate,
    TimeInputs,
    VLLM_NOTE,
    estimate,
    format_run_seconds,
    lora_generation_note,
    measured_lengths,
)
from verlfit.profiles import Profile, load_profile
from verlfit.resolved_run import running_card


def train_step_estimate(
    settings: TrainSettings,
    profile: Profile,
    card: Card | str,
    switches: PatchSwitches,
    lengths: MeasuredLengths | None = None,
    shape: ModelShape | None = None,
) -> StepEstimate:
    """The step-time estimate of ``verlfit train``'s settings on ``card`` with the run's patch ``switches``: the
    one ``verlfit train`` prints (:func:`step_time_lines` of the same request) and ``verlfit bench`` compares with
    what it measured. The
    planner's request as train builds it (:func:`verlfit.plan.request.request_from_settings`, 24 GiB: memory does not
    enter the time), and with ``lengths`` the run's measured lengths (:func:`verlfit.plan.time.measured_lengths`)
    instead of GSM8K's; ``shape``: the model's, when ``settings.model`` cannot be read.

    Raises:
        VerlfitError: the model's shape cannot be read.
    """
    request = request_from_settings(settings, profile, 24 * 1024**3, shape=shape, switches=switches)
    inputs = inputs_for_train(settings, switches)
    if lengths is not None:
        inputs = measured_lengths(inputs, lengths)
    return estimate(request, card, inputs)


def for_train(
    settings: TrainSettings,
    profile: Profile,
    gpu_name: str | None,
    steps: int | None,
    switches: PatchSwitches,
    emulate: str | None = None,
) -> tuple[list[str], float | None]:
    """(lines to print beside the memory verdict, estimated seconds per step on the GPU the run uses) for
    ``verlfit train``'s settings with the run's patch ``switches``. The run's card is the detected GPU (NVML name
    ``gpu_name``), else the profile's card (:func:`verlfit.resolved_run.running_card`); under ``--emulate`` the
    emulated card's estimate is printed too (the run itself goes at the real GPU's speed). The lines are
    :func:`step_time_lines`'.

    Raises:
        VerlfitError: the model's shape cannot be read (:func:`verlfit.model_shape.load_model_shape`).
    """
    inputs = inputs_for_train(settings, switches)
    request = request_from_settings(settings, profile, 24 * 1024**3, switches=switches)  # as train_step_estimate's
    running = running_card(profile, gpu_name)
    cards = [running] + ([get_card(emulate)] if emulate and emulate in CARDS and get_card(emulate) != running else [])
    return step_time_lines(request, inputs, cards, steps, switches)


def step_time_lines(
    request: PlanRequest, inputs: TimeInputs, cards: list[Card], steps: int | None, switches: PatchSwitches
) -> tuple[list[str], float | None]:
    """(lines, seconds per step on ``cards[0]``) of a ``verlfit train`` run's planner ``request`` (its
    ``gpu_memory_bytes`` does not enter the time) with its :class:`TimeInputs` and patch ``switches``: one line per
    card (the GPU the run goes at first, then an emulated card), with the run's time over ``steps`` when known; with an
    actor LoRA what the estimate says of LoRA generation (:func:`verlfit.plan.time.lora_generation_note`); on the vLLM
    rollout :data:`verlfit.plan.time.VLLM_NOTE`."""
    lines, eta = [], None
    for card in cards:
        est = estimate(request, card, inputs)
        eta = est.step_seconds if eta is None else eta
        run = f", {steps} steps = {format_run_seconds(est.step_seconds * steps)}" if steps else ""
        lines.append(f"plan: estimated time on {card.name}: {est.step_seconds:.1f} s/step{run} ({est.label})")
    if request.lora_rank_of("actor") > 0:
        lines.append(f"plan: {lora_generation_note(request.rollout, switches.unwrap_fsdp, request.frozen_base_dtype)}")
    if request.rollout == "vllm":
        lines.append(f"plan: {VLLM_NOTE}")
    return lines, eta


def recorded_step_seconds(record: dict, settings: TrainSettings, overrides: list[str]) -> float | None:
    """Seconds per step of a recorded run (its ``run.json`` as a dict), the ETA before a resumed run's first step: what
    the record holds (``estimated_step_seconds``, the launch plan's
    :attr:`verlfit.train.launch_plan.LaunchPlan.estimated_step_seconds`, which a resume's overrides do not change);
    for a record without that number (a run started by a verlfit that did not record it), the time model's estimate
    of what it records instead (:func:`train_step_estimate`, the figure :func:`for_train` gives): ``settings`` (the
    recorded :class:`verlfit.run_settings.TrainSettings`) with the record's ``profile`` (by name), on the card the run
    goes at (the record's ``gpu`` description, its NVML name first, else the profile's card:
    :func:`verlfit.resolved_run.running_card`) and with the switches of the final ``overrides``, what verl gets. None
    when neither is known (the profile or the model's shape cannot be read: the ETA then waits for the first step)."""
    seconds = record.get("estimated_step_seconds")
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        return float(seconds)

    try:
        profile = load_profile(record["profile"])
        card = running_card(profile, record["gpu"])
        return train_step_estimate(settings, profile, card, PatchSwitches.from_overrides(overrides)).step_seconds
    except VerlfitError:
        return None
