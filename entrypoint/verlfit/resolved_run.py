"""The run a command plans or launches, resolved once at the command's edge: :class:`ResolvedRun`.

``verlfit train`` (:func:`verlfit.train.settings.build_launch`) and ``verlfit plan``
(:func:`verlfit.plan.request.resolve_plan_run`) each build one from the user's options: the profile after
``--rollout``/``--attention`` (:func:`verlfit.profiles.run_profile`), the card NVML reported (asked once), the usable
memory per GPU the planner sizes for, the card the time is estimated on, and the patch switches
(:class:`verlfit.patch_switches.PatchSwitches`) parsed once from the profile's overrides, verlfit's forcing and the
user's. The memory and time models read it and ask nothing of the machine; :func:`verlfit.overrides.build_overrides`
turns the run into Hydra strings at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

from verlfit.cards import CARDS, Card, card_for_gpu_name, get_card
from verlfit.gpu import GpuInfo
from verlfit.patch_switches import PatchSwitches, forced_switches, run_switches
from verlfit.profiles import Profile


# CUDA context and what the driver keeps back: usable = card - this when memory is detected.
# derived: profiles/a10.yaml (~0.5 GiB context on a 22.5 GiB A10).
CUDA_CONTEXT_BYTES = int(0.5 * 1024**3)
# Kept back on a detected card for fragmentation, as profiles/p40.yaml's 22.5 GiB keeps 0.5 GiB of a
# P40's ~23 GiB usable: so `train --emulate p40` on a big GPU plans within 0.4 GiB of a real P40.
FRAGMENTATION_RESERVE_BYTES = int(0.5 * 1024**3)


def usable_memory_bytes(gpu) -> int:
    """Bytes one process may plan for on a detected :class:`verlfit.gpu.GpuInfo`.

    The card's total (or free memory plus a CUDA context, when other processes use it) less the CUDA
    context (:data:`CUDA_CONTEXT_BYTES`) and a fragmentation reserve (:data:`FRAGMENTATION_RESERVE_BYTES`).
    A Tesla P40 (24451 MiB) gives 22.88 GiB.
    """
    return (
        min(gpu.total_memory_bytes, gpu.free_memory_bytes + CUDA_CONTEXT_BYTES)
        - CUDA_CONTEXT_BYTES
        - FRAGMENTATION_RESERVE_BYTES
    )


def plan_memory(profile, gpu, limit_gib: float | None, emulate: str | None = None) -> tuple[int, str]:
    """The usable memory per GPU, bytes, that the planner sizes a run for, and where it came from: the memory cap
    (``limit_gib``: ``--gpu-memory-limit``, ``--emulate``'s card or ``VERLFIT_GPU_MEMORY_LIMIT_GIB``), else the
    detected card's usable memory (:func:`usable_memory_bytes`; not under ``emulate``), else the
    profile's card (``gpu_memory_gib``)."""
    if limit_gib is not None:
        return int(limit_gib * 1024**3), f"a cap of {limit_gib:g} GiB per worker"
    if gpu is not None and not emulate:
        return usable_memory_bytes(gpu), f"{gpu.name}, less the CUDA context and a fragmentation reserve"
    return (
        int(profile.gpu_memory_gib * 1024**3),
        f"the {profile.name} profile's card ({profile.gpu_memory_gib:g} GiB usable)",
    )


@dataclass(frozen=True)
class ResolvedRun:
    """One run's resolved facts, read-only.

    Attributes:
        profile: the hardware profile as the run uses it (:func:`verlfit.profiles.customize` applied to
            ``--rollout``/``--attention``).
        gpu: the first visible GPU as NVML reported it (:class:`verlfit.gpu.GpuInfo`), or None (none asked for, as
            in a dry run with a named profile, or none visible).
        memory_bytes: usable memory per GPU, bytes, that the planner sizes for.
        memory_source: where ``memory_bytes`` came from, in words (``verlfit plan`` prints it).
        card: the card the time is estimated on (:mod:`verlfit.cards`).
        card_source: why that card, in words.
        switches: patches 0020-0023's switches as the run's override list sets them.
        user_overrides: the verl overrides the user gave after ``--`` (they win over verlfit's).
        emulate: ``--emulate``'s profile name, or None.
        time_switches: the switches the time estimate assumes where they differ from ``switches`` (``verlfit plan
            --dtype float32`` on a FlashAttention-2 profile: estimated on the profile's SDPA path); None: ``switches``.
        forced_overrides: what verlfit sets over the profile's patch switches for this run
            (:func:`verlfit.patch_switches.forced_switches`), decided once: ``switches`` read them and
            :func:`verlfit.overrides.build_overrides` writes them.
        running_card: under ``verlfit train --emulate``, the card the run goes at (:func:`running_card`, the detected
            GPU's, even when it is the emulated card); None: ``card``.
    """

    profile: Profile
    gpu: GpuInfo | None
    memory_bytes: int
    memory_source: str
    card: Card
    card_source: str
    switches: PatchSwitches
    user_overrides: tuple[str, ...] = ()
    emulate: str | None = None
    time_switches: PatchSwitches | None = None
    forced_overrides: tuple[str, ...] = ()
    running_card: Card | None = None

    @property
    def switches_for_time(self) -> PatchSwitches:
        """The switches the time estimate assumes: ``time_switches``, else ``switches``."""
        return self.time_switches or self.switches

    @property
    def goes_at(self) -> Card:
        """The card the run goes at: ``running_card``, else ``card``."""
        return self.running_card or self.card


def train_run(
    profile: Profile,
    gpu: GpuInfo | None,
    limit_gib: float | None,
    settings,
    emulate: str | None = None,
) -> ResolvedRun:
    """The :class:`ResolvedRun` of a ``verlfit train`` run: ``profile`` after ``--rollout``/``--attention``, the
    ``gpu`` NVML reported (None: none asked for or visible), the usable memory per GPU (bytes) and its source in
    words, read once here (:func:`plan_memory` of ``limit_gib``, the memory cap in GiB or None), the card the time
    is estimated on (:func:`card_for_train`; under ``emulate`` also the card the run goes at, :func:`running_card`)
    and the patch switches of ``settings`` (:class:`verlfit.run_settings.TrainSettings`, its user overrides included:
    :func:`verlfit.patch_switches.run_switches`) with what verlfit forces over the profile's.

    Raises:
        VerlfitError: a user override Hydra cannot parse.
    """
    memory_bytes, memory_source = plan_memory(profile, gpu, limit_gib, emulate)
    gpu_name = gpu.name if gpu is not None else None
    card = card_for_train(profile, gpu_name, emulate)
    running = running_card(profile, gpu_name) if emulate else None
    if emulate:
        card_source = f"--emulate {emulate}"
    else:
        card_source = gpu.name if gpu is not None else f"the {profile.name} profile's card"
    forced = forced_switches(settings, profile)
    return ResolvedRun(
        profile=profile,
        gpu=gpu,
        memory_bytes=memory_bytes,
        memory_source=memory_source,
        card=card,
        card_source=card_source,
        switches=run_switches(profile, settings, forced),
        user_overrides=tuple(settings.extra_overrides),
        emulate=emulate,
        forced_overrides=tuple(forced),
        running_card=running,
    )


def card_for_train(profile: Profile, gpu_name: str | None, emulate: str | None = None) -> Card:
    """The card ``verlfit train`` estimates time on: ``--emulate``'s card (the run stands in for it), else the
    detected GPU's (NVML name, :func:`verlfit.cards.card_for_gpu_name`), else the profile's card (the P40's for a
    profile without one in :data:`verlfit.cards.CARDS`)."""
    if emulate and emulate in CARDS:
        return get_card(emulate)
    detected = card_for_gpu_name(gpu_name) if gpu_name else None
    return detected or get_card(profile.name if profile.name in CARDS else "p40")


def running_card(profile: Profile, gpu_name: str | None) -> Card:
    """The card a ``verlfit train`` run goes at: the detected GPU's (NVML name), else the profile's card (the P40's
    for a profile without one): :func:`card_for_train` without ``--emulate``."""
    return card_for_train(profile, gpu_name)
