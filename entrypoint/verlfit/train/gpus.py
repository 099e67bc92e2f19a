"""The GPUs of a ``verlfit train`` launch, asked of NVML once (:func:`find_gpu`): the first visible card, and NCCL's
peer-to-peer fallback where two of the visible cards cannot reach each other. (The per-worker memory cap is the
profile's: :func:`verlfit.profiles.memory_limit_gib`.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verlfit.errors import VerlfitError
from verlfit.gpu import (
    GpuInfo,
    GpuReport,
    cuda_visible_gpus,
    links_among,
    nccl_environment,
    query_gpus,
    refuse_mixed_cards,
    refuse_too_few,
)


@dataclass(frozen=True)
class FoundGpu:
    """What :func:`find_gpu` found.

    Attributes:
        gpu: the first GPU a CUDA process sees (:class:`verlfit.gpu.GpuInfo`), or None when none is visible.
        report: NVML's report (:class:`verlfit.gpu.GpuReport`).
        nccl_environment: NCCL's peer-to-peer fallback to add to the run's environment (``NCCL_P2P_DISABLE=1``
            where NVML says two of the visible GPUs cannot reach each other and the user set no NCCL variable of
            their own; :func:`verlfit.gpu.nccl_environment`); empty otherwise.
        nccl_notes: what the dry run says of it.
    """

    gpu: GpuInfo | None
    report: GpuReport
    nccl_environment: dict[str, str] = field(default_factory=dict)
    nccl_notes: list[str] = field(default_factory=list)


def find_gpu(
    need: bool, profile_named: bool = False, environ=None, report=None, gpus: int = 1, nodes: int = 1
) -> FoundGpu:
    """The first GPU a CUDA process sees (``CUDA_VISIBLE_DEVICES``, PCI bus order), NVML's report and NCCL's
    peer-to-peer fallback for ``gpus`` GPUs a node on ``nodes`` nodes, as a :class:`FoundGpu` (its ``gpu`` None when
    none is visible and ``need`` is False).

    ``profile_named``: a profile was chosen (``--profile p40|a10``, ``--emulate``, ``VERLFIT_PROFILE``), so the
    GPU was needed only because this is not a dry run: the fix then points to ``--dry-run``. ``report``: NVML's
    answer when the caller has it (tests), else :func:`verlfit.gpu.query_gpus` asks.

    Raises:
        VerlfitError: no GPU (when ``need``); visible cards of several kinds, or fewer than ``gpus``
            (:func:`verlfit.gpu.refuse_mixed_cards`, :func:`verlfit.gpu.refuse_too_few`).
    """

    report = report if report is not None else query_gpus()
    if report.error:
        if need:
            dry_run = (
                "for a dry run without a GPU add --dry-run"
                if profile_named
                else "for a dry run without a GPU pass --dry-run with --profile p40 or --profile a10"
            )
            raise VerlfitError(report.error, fix=f"run `verlfit doctor`; {dry_run}")
        return FoundGpu(None, report)
    environ = {} if environ is None else environ
    visible = cuda_visible_gpus(report.gpus, environ)
    refuse_mixed_cards(report.gpus, visible, environ)  # before the profile is chosen from the first of them
    if need:
        refuse_too_few(visible, gpus, environ)
    added, notes = nccl_environment(links_among(report.links, visible), gpus, environ) if report.gpus else ({}, [])
    if added and nodes > 1:
        notes.append(
            "with --nodes, the workers of a running Ray cluster take their environment from `ray start`, "
            "not from verlfit: start every node with NCCL_P2P_DISABLE=1 too"
        )
    return FoundGpu(visible[0] if visible else None, report, added, notes)
