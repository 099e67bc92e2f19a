"""The GPUs of a ``verlfit train`` launch: the first visible card (:func:`find_gpu`), NCCL's peer-to-peer fallback
where two cards cannot reach each other (:func:`nccl_settings`) and the per-worker memory cap
(:func:`memory_limit_gib`).
"""

from __future__ import annotations

from verlfit.errors import VerlfitError
from verlfit.train.launch_plan import MEMORY_LIMIT_VARIABLE


def find_gpu(need: bool, profile_named: bool = False, environ=None, report=None, gpus: int = 1):
    """Return the first GPU a CUDA process sees (``CUDA_VISIBLE_DEVICES``, PCI bus order) and NVML's report, or
    (None, report) when none is visible and ``need`` is False.

    ``profile_named``: a profile was chosen (``--profile p40|a10``, ``--emulate``, ``VERLFIT_PROFILE``), so the
    GPU was needed only because this is not a dry run: the fix then points to ``--dry-run``. ``report``: NVML's
    answer when the caller has it (tests), else :func:`verlfit.gpu.query_gpus` asks.

    Raises:
        VerlfitError: no GPU (when ``need``); visible cards of several kinds, or fewer than ``gpus``
            (:func:`verlfit.gpu.refuse_mixed_cards`, :func:`verlfit.gpu.refuse_too_few`).
    """
    from verlfit.gpu import cuda_visible_gpus, query_gpus, refuse_mixed_cards, refuse_too_few

    report = report if report is not None else query_gpus()
    if report.error:
        if need:
            dry_run = (
                "for a dry run without a GPU add --dry-run"
                if profile_named
                else "for a dry run without a GPU pass --dry-run with --profile p40 or --profile a10"
            )
            raise VerlfitError(report.error, fix=f"run `verlfit doctor`; {dry_run}")
        return None, report
    environ = {} if environ is None else environ
    visible = cuda_visible_gpus(report.gpus, environ)
    refuse_mixed_cards(report.gpus, visible, environ)  # before the profile is chosen from the first of them
    if need:
        refuse_too_few(visible, gpus, environ)
    return (visible[0] if visible else None), report


def nccl_settings(report, environ, environment: dict[str, str], gpus: int, nodes: int) -> list[str]:
    """Add NCCL's peer-to-peer fallback to ``environment`` where NVML says two of the visible GPUs cannot reach
    each other (:func:`verlfit.gpu.nccl_environment`; the user's NCCL variables win); return the notes."""
    from verlfit.gpu import cuda_visible_gpus, links_among, nccl_environment

    added, notes = nccl_environment(links_among(report.links, cuda_visible_gpus(report.gpus, environ)), gpus, environ)
    environment.update(added)
    if added and nodes > 1:
        notes.append(
            "with --nodes, the workers of a running Ray cluster take their environment from `ray start`, "
            "not from verlfit: start every node with NCCL_P2P_DISABLE=1 too"
        )
    return notes


def memory_limit_gib(
    given_gib: float | None, emulate: str | None, profile, environ: dict[str, str] | None = None
) -> float | None:
    """The per-worker memory cap in GiB: ``given_gib`` (``--gpu-memory-limit``), else the emulated card's usable
    memory (``emulate``: ``--emulate``'s profile name), else a ``VERLFIT_GPU_MEMORY_LIMIT_GIB`` the user set
    (validated here, so the planner sizes for it)."""
    if given_gib is not None:  # checked by its argparse type (verlfit.arguments.memory_gib)
        return given_gib
    if emulate:
        if environ and environ.get(MEMORY_LIMIT_VARIABLE):
            raise VerlfitError(
                f"--emulate {emulate} sets {MEMORY_LIMIT_VARIABLE}={profile.gpu_memory_gib:g} (the card's "
                f"usable memory), but {MEMORY_LIMIT_VARIABLE}={environ[MEMORY_LIMIT_VARIABLE]} is set",
                fix=f"unset {MEMORY_LIMIT_VARIABLE}, or use --profile {emulate} --gpu-memory-limit GIB",
                exit_code=2,
            )
        return profile.gpu_memory_gib
    if environ and environ.get(MEMORY_LIMIT_VARIABLE):
        text = environ[MEMORY_LIMIT_VARIABLE]
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not 1 <= value < float("inf"):  # also false for nan
            raise VerlfitError(
                f"{MEMORY_LIMIT_VARIABLE}={text!r} is not a number of GiB from 1 up",
                fix=f"unset it, or use --gpu-memory-limit GIB (e.g. {MEMORY_LIMIT_VARIABLE}=22.5)",
                exit_code=2,
            )
        return value
    return None
