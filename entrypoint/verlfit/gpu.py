"""GPU facts from NVML (the ``nvidia-ml-py`` library), never from parsing ``nvidia-smi``.

:func:`query_gpus` returns a :class:`GpuReport`; with no driver or no GPU it returns a report
whose ``error`` says "no NVIDIA GPU visible" and why, instead of raising. Commands that need no
GPU (``prepare-gsm8k``, ``train --dry-run``) never call it.

Hardware numbers used by the profiles and the doctor, with their sources:

* shared memory per block: 48 KiB (49152 B) on compute capability 6.x (Pascal, CUDA C
  Programming Guide, "Compute Capabilities" table: max shared memory per block 48 KB); 99 KiB
  (101376 B) opt-in on 8.6 and 8.9 (same table); 227 KiB on 9.0.
* CUDA 11.8 needs driver >= 520.61.05 on Linux (CUDA 11.8 release notes, table 3); with
  CUDA minor-version compatibility 450.80.02 runs most of it, so the doctor FAILs under 450.80.02
  and WARNs under 520.61.05.

Several GPUs (:func:`cuda_visible_gpus`, :func:`refuse_mixed_cards`, :func:`nccl_environment`): NVML numbers the
GPUs in its own order and ignores ``CUDA_VISIBLE_DEVICES``; CUDA numbers them fastest first unless
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (CUDA C Programming Guide, "CUDA Environment Variables"). verlfit therefore puts
the GPUs in PCI bus order itself (NVML's PCI domain, bus and device numbers) and reads the indices of
``CUDA_VISIBLE_DEVICES`` in that order, which is exactly CUDA's order under ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and,
for cards of one kind, also under the default order (the fastest-first heuristic cannot tell identical cards
apart and keeps them in PCI order: an assumption, not documented by NVIDIA). With cards of several kinds and
the default order the indices cannot be mapped: verlfit refuses and asks for ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
Entries ``GPU-<uuid prefix>`` are matched against NVML's UUIDs, in any order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

from verlfit.errors import VerlfitError

GIB = 1024**3

# compute capability major -> max shared memory per block in bytes (CUDA programming guide)
_SHARED_MEMORY_PER_BLOCK = {
    (6, 0): 49152,
    (6, 1): 49152,
    (6, 2): 49152,
    (7, 0): 98304,
    (7, 5): 65536,
    (8, 0): 166912,
    (8, 6): 101376,
    (8, 7): 166912,
    (8, 9): 101376,
    (9, 0): 232448,
}


def max_shared_memory_per_block(compute_capability: tuple[int, int]) -> int:
    """Return the opt-in maximum shared memory per block in bytes for a compute capability.

    Source: CUDA C Programming Guide, "Technical Specifications per Compute Capability".
    Unknown capabilities fall back to 48 KiB (49152 B), the limit every CUDA GPU since
    Kepler guarantees without opt-in.
    """
    return _SHARED_MEMORY_PER_BLOCK.get(tuple(compute_capability), 49152)


@dataclass(frozen=True)
class GpuInfo:
    """One visible GPU.

    Attributes:
        index: NVML device index.
        name: marketing name as NVML reports it, e.g. ``"Tesla P40"``.
        compute_capability: ``(major, minor)``, e.g. ``(6, 1)``.
        total_memory_bytes: device memory in bytes (NVML ``memory.total``).
        free_memory_bytes: unused device memory in bytes at query time.
        uuid: NVML's UUID, ``"GPU-<hex>"`` (what ``CUDA_VISIBLE_DEVICES`` and ``nvidia-smi -L`` show).
        pci_bus_id: NVML's PCI bus id text, e.g. ``"00000000:3B:00.0"``.
        pci_order: ``(domain, bus, device)`` from NVML: the key of CUDA's ``PCI_BUS_ID`` order.
    """

    index: int
    name: str
    compute_capability: tuple[int, int]
    total_memory_bytes: int
    free_memory_bytes: int
    uuid: str = ""
    pci_bus_id: str = ""
    pci_order: tuple[int, int, int] = (0, 0, 0)

    @property
    def kind(self) -> tuple[str, tuple[int, int], int]:
        """What makes two cards interchangeable for one run: name, compute capability and memory (bytes)."""
        return (self.name, self.compute_capability, self.total_memory_bytes)

    @property
    def compute_capability_text(self) -> str:
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    @property
    def supports_bf16(self) -> bool:
        """bf16 arithmetic needs compute capability >= 8.0 (Ampere).

        Not ``torch.cuda.is_bf16_supported()``, which returns True on Pascal in torch >= 2.4.
        """
        return self.compute_capability[0] >= 8

    @property
    def supports_flash_attention_2(self) -> bool:
        """FlashAttention-2 kernels are built for sm80 and sm90 only (flash-attn README)."""
        return self.compute_capability[0] >= 8

    @property
    def supports_triton(self) -> bool:
        """Triton and torch.compile's Inductor need compute capability >= 7.0."""
        return self.compute_capability[0] >= 7

    @property
    def supports_vllm(self) -> bool:
        """vLLM needs compute capability >= 7.0 (vLLM installation docs)."""
        return self.compute_capability[0] >= 7

    @property
    def max_shared_memory_per_block(self) -> int:
        return max_shared_memory_per_block(self.compute_capability)


# NVML_TOPOLOGY_* level -> (nvidia-smi topo -m's label, what it means): nvml.h, nvmlGpuTopologyLevel_t
TOPOLOGY_LEVELS = {
    0: ("internal", "the same board (a dual-GPU card)"),
    10: ("PIX", "one PCIe switch"),
    20: ("PXB", "several PCIe switches, no host bridge"),
    30: ("PHB", "a PCIe host bridge (the CPU's root complex)"),
    40: ("NODE", "host bridges within one NUMA node"),
    50: ("SYS", "the link between CPU sockets (QPI/UPI, Infinity Fabric)"),
}


@dataclass(frozen=True)
class PeerLink:
    """How two GPUs reach each other, from NVML.

    Attributes:
        first, second: NVML indices (``first < second``).
        level: ``nvmlDeviceGetTopologyCommonAncestor``'s ``NVML_TOPOLOGY_*`` value (0 internal ... 50 system), None
            when NVML could not say (``level_error`` holds its error).
        p2p_read: ``nvmlDeviceGetP2PStatus(..., NVML_P2P_CAPS_INDEX_READ)`` is ``NVML_P2P_STATUS_OK``: one GPU can
            read the other's memory directly (over PCIe or NVLink); NCCL's P2P transport needs it.
        p2p_status: the status NVML gave for the read capability (``NVML_P2P_STATUS_*`` number).
        nvlink: the NVLink capability's status is OK.
    """

    first: int
    second: int
    level: int | None
    p2p_read: bool
    p2p_status: int
    nvlink: bool = False
    level_error: str | None = None

    def describe(self) -> str:
        """One line, e.g. ``"GPU 0 - GPU 1: PHB (a PCIe host bridge (the CPU's root complex)), P2P no (NVML status
        2: ...)"``."""
        if self.nvlink:
            path = "NVLink"
        elif self.level in TOPOLOGY_LEVELS:
            label, meaning = TOPOLOGY_LEVELS[self.level]
            path = f"PCIe {label} ({meaning})"
        else:
            path = f"path unknown ({self.level_error or f'NVML level {self.level}'})"
        p2p = (
            "P2P yes"
            if self.p2p_read
            else f"P2P no (NVML status {self.p2p_status}: {P2P_STATUS_TEXT.get(self.p2p_status, 'unknown')})"
        )
        return f"GPU {self.first} - GPU {self.second}: {path}, {p2p}"


# NVML_P2P_STATUS_* -> what it means (nvml.h, nvmlGpuP2PStatus_t)
P2P_STATUS_TEXT = {
    0: "ok",
    1: "the chipset does not support it",
    2: "the GPU does not support it",
    3: "the PCIe topology does not support it",
    4: "disabled by a driver registry key",
    5: "not supported",
    6: "unknown",
}


@dataclass(frozen=True)
class GpuReport:
    """What NVML says about this machine.

    Attributes:
        gpus: visible GPUs (empty when none or when NVML failed).
        driver_version: e.g. ``"535.183.01"``; None without a driver.
        cuda_driver_version: highest CUDA version the driver supports as ``(major, minor)``.
        error: None when NVML answered; otherwise a one-line reason starting with
            ``"no NVIDIA GPU visible"``.
        links: every pair of ``gpus`` (:class:`PeerLink`), in NVML index order.
    """

    gpus: list[GpuInfo] = field(default_factory=list)
    driver_version: str | None = None
    cuda_driver_version: tuple[int, int] | None = None
    error: str | None = None
    links: list[PeerLink] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.gpus)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def query_gpus(nvml=None) -> GpuReport:
    """Ask NVML for the driver and every visible GPU.

    Args:
        nvml: the ``pynvml`` module (from nvidia-ml-py); tests pass a fake with the same
            functions. Default: ``import pynvml``.

    Returns:
        A :class:`GpuReport`. Never raises for a missing driver, library or GPU: ``error``
        then holds "no NVIDIA GPU visible: <reason>".
    """
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError:
            return GpuReport(error="no NVIDIA GPU visible: nvidia-ml-py is not installed (pip install nvidia-ml-py)")
    try:
        nvml.nvmlInit()
    except Exception as error:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return GpuReport(
            error=f"no NVIDIA GPU visible: NVML could not start ({error}); is the NVIDIA driver installed and the GPU "
            "passed to this container (docker run --gpus all)"
        )
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        cuda = nvml.nvmlSystemGetCudaDriverVersion()  # e.g. 12020 for 12.2
        cuda_version = (cuda // 1000, (cuda % 1000) // 10)
        gpus, handles = [], []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            handles.append(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            pci = nvml.nvmlDeviceGetPciInfo(handle)
            gpus.append(
                GpuInfo(
                    index=index,
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    compute_capability=(int(major), int(minor)),
                    total_memory_bytes=int(memory.total),
                    free_memory_bytes=int(memory.free),
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    pci_bus_id=_text(pci.busId),
                    pci_order=(int(pci.domain), int(pci.bus), int(pci.device)),
                )
            )
        links = [_peer_link(nvml, a, b, handles[a], handles[b]) for a, b in combinations(range(len(gpus)), 2)]
    finally:
        nvml.nvmlShutdown()
    if not gpus:
        return GpuReport(
            driver_version=driver,
            cuda_driver_version=cuda_version,
            error="no NVIDIA GPU visible: the driver is loaded but reports 0 devices (check CUDA_VISIBLE_DEVICES and "
            "--gpus)",
        )
    return GpuReport(gpus=gpus, driver_version=driver, cuda_driver_version=cuda_version, links=links)


def _p2p_index(nvml, name: str) -> int:
    """``nvml.<name>`` as the int NVML takes. nvidia-ml-py (13.615.71 and earlier) defines
    ``NVML_P2P_CAPS_INDEX_READ = 0,`` with a stray comma, a tuple that ctypes refuses to pass
    ("Don't know how to convert parameter 3")."""
    value = getattr(nvml, name)
    return int(value[0] if isinstance(value, tuple) else value)


def _peer_link(nvml, first: int, second: int, handle_a, handle_b) -> PeerLink:
    """Ask NVML how GPUs ``first`` and ``second`` reach each other (both directions must allow P2P reads)."""
    read = _p2p_index(nvml, "NVML_P2P_CAPS_INDEX_READ")
    status = nvml.nvmlDeviceGetP2PStatus(handle_a, handle_b, read)
    if status == nvml.NVML_P2P_STATUS_OK:
        status = nvml.nvmlDeviceGetP2PStatus(handle_b, handle_a, read)
    nvlink = (
        nvml.nvmlDeviceGetP2PStatus(handle_a, handle_b, _p2p_index(nvml, "NVML_P2P_CAPS_INDEX_NVLINK"))
        == nvml.NVML_P2P_STATUS_OK
    )
    level, level_error = None, None
    try:
        level = int(nvml.nvmlDeviceGetTopologyCommonAncestor(handle_a, handle_b))
    except (
        nvml.NVMLError
    ) as error:  # NVML_ERROR_NOT_SUPPORTED on some platforms: the path stays unknown, P2P is still known
        level_error = f"NVML: {error}"
    return PeerLink(first, second, level, status == nvml.NVML_P2P_STATUS_OK, int(status), nvlink, level_error)


def pci_ordered(gpus: list[GpuInfo]) -> list[GpuInfo]:
    """``gpus`` in CUDA's ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` order: by PCI domain, bus, device (then NVML index)."""
    return sorted(gpus, key=lambda g: (g.pci_order, g.index))


def _one_kind(gpus: list[GpuInfo]) -> bool:
    return len({g.kind for g in gpus}) <= 1


def cuda_visible_gpus(gpus: list[GpuInfo], environ) -> list[GpuInfo]:
    """The GPUs a CUDA process started with ``environ`` sees, in its CUDA device order.

    ``CUDA_VISIBLE_DEVICES`` unset: all of them; empty: none. Each comma-separated entry is an index in CUDA's
    order (PCI bus order, see the module docstring) or ``GPU-<uuid prefix>``; like CUDA, the list ends at the first
    entry that names no GPU (CUDA C Programming Guide: "only the devices whose index is present in the sequence
    are visible ... if one of the indices is invalid, only the devices whose index precedes the invalid index are
    visible").

    Raises:
        VerlfitError: indices with cards of several kinds and ``CUDA_DEVICE_ORDER`` not ``PCI_BUS_ID`` (CUDA's
            fastest-first order is then unknown here); a ``GPU-`` prefix that matches several GPUs.
    """
    ordered = pci_ordered(gpus)
    text = environ.get("CUDA_VISIBLE_DEVICES")
    if text is None:
        return ordered
    entries = [entry.strip() for entry in text.split(",")] if text.strip() else []
    pci_bus_order = environ.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST") == "PCI_BUS_ID"
    visible: list[GpuInfo] = []
    for entry in entries:
        if entry.upper().startswith("GPU-"):
            matches = [g for g in ordered if g.uuid.upper().startswith(entry.upper())]
            if len(matches) > 1:
                raise VerlfitError(
                    f"CUDA_VISIBLE_DEVICES entry {entry} matches {len(matches)} GPUs "
                    f"({', '.join(g.uuid for g in matches)})",
                    fix="give more of the UUID (nvidia-smi -L lists them)",
                    exit_code=2,
                )
            found = matches[0] if matches else None
        elif entry.isdigit():
            if not pci_bus_order and not _one_kind(gpus):
                kinds = " and ".join(sorted({g.name for g in gpus}))
                raise VerlfitError(
                    f"CUDA_VISIBLE_DEVICES={text} numbers the GPUs in CUDA's default fastest-first order, which is "
                    f"not nvidia-smi's on this machine of {kinds} cards",
                    fix="also set CUDA_DEVICE_ORDER=PCI_BUS_ID (then the indices are nvidia-smi's), or name the GPUs "
                    "by UUID (nvidia-smi -L)",
                    exit_code=2,
                )
            found = ordered[int(entry)] if int(entry) < len(ordered) else None
        else:
            found = None
        if found is None or found in visible:
            break
        visible.append(found)
    return visible


def _selection(gpus: list[GpuInfo], ordered: list[GpuInfo]) -> str:
    """``CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=i,j`` picking ``gpus`` by their PCI-order indices."""
    return "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=" + ",".join(str(ordered.index(g)) for g in gpus)


def refuse_mixed_cards(all_gpus: list[GpuInfo], visible: list[GpuInfo], environ) -> None:
    """Refuse a run over cards of several kinds (:attr:`GpuInfo.kind`): the profile, the memory plan and FSDP's
    equal shards assume one kind, and Ray may place a worker on any visible GPU.

    Raises:
        VerlfitError: naming each kind with its GPUs and the ``CUDA_VISIBLE_DEVICES`` that keeps only that kind
            (indices in PCI bus order, with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, as :func:`cuda_visible_gpus` reads them).
    """
    if _one_kind(visible):
        return
    ordered = pci_ordered(all_gpus)
    kinds: dict[tuple, list[GpuInfo]] = {}
    for g in visible:
        kinds.setdefault(g.kind, []).append(g)
    named = "; ".join(
        f"{group[0].name} (compute capability {group[0].compute_capability_text}, "
        f"{group[0].total_memory_bytes / GIB:.1f} GiB): GPU {', '.join(str(g.index) for g in group)}"
        for group in kinds.values()
    )
    picks = " or ".join(
        f"{_selection(group, ordered)} for the {group[0].name}{'s' if len(group) > 1 else ''}"
        for group in kinds.values()
    )
    where = (
        f"CUDA_VISIBLE_DEVICES={environ['CUDA_VISIBLE_DEVICES']} shows"
        if environ.get("CUDA_VISIBLE_DEVICES") is not None
        else "this machine has"
    )
    raise VerlfitError(
        f"{where} GPUs of {len(kinds)} kinds (NVML indices, as nvidia-smi numbers them): {named}; one run needs cards "
        "of one kind (one profile, one memory plan, equal FSDP shards)",
        fix=f"run on one kind: {picks}",
        exit_code=2,
    )


def refuse_too_few(visible: list[GpuInfo], gpus: int, environ) -> None:
    """Refuse ``--gpus`` above the GPUs this process sees.

    Raises:
        VerlfitError: naming both counts and what limited them (``CUDA_VISIBLE_DEVICES`` or the machine).
    """
    if gpus <= len(visible):
        return
    where = (
        f"CUDA_VISIBLE_DEVICES={environ['CUDA_VISIBLE_DEVICES']} leaves {len(visible)} visible"
        if environ.get("CUDA_VISIBLE_DEVICES") is not None
        else f"this machine has {len(visible)}"
    )
    raise VerlfitError(
        f"--gpus {gpus} asks for more GPUs than are visible: {where}",
        fix=f"use --gpus {len(visible)} or less"
        + (", or widen CUDA_VISIBLE_DEVICES" if environ.get("CUDA_VISIBLE_DEVICES") is not None else ""),
        exit_code=2,
    )


def links_among(links: list[PeerLink], gpus: list[GpuInfo]) -> list[PeerLink]:
    """The links of ``links`` whose both ends are in ``gpus``."""
    indices = {g.index for g in gpus}
    return [link for link in links if link.first in indices and link.second in indices]


NCCL_P2P_VARIABLES = ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL")


def nccl_environment(links: list[PeerLink], gpus: int, environ) -> tuple[dict[str, str], list[str]]:
    """The NCCL settings a run over ``gpus`` GPUs of one host needs, and the notes that say why.

    ``links``: the pairs among the GPUs the run may use (every visible GPU: Ray may place a worker on any).
    When any pair cannot read the other's memory directly (NVML P2P read status not OK), NCCL's P2P transport is
    turned off with ``NCCL_P2P_DISABLE=1``, so NCCL goes through host shared memory (its SHM transport) instead of a
    path that can hang or fail (NCCL environment variables documentation: NCCL_P2P_DISABLE). A user's own
    ``NCCL_P2P_DISABLE`` or ``NCCL_P2P_LEVEL`` wins: nothing is set, and the note says so.

    Returns:
        (variables to add to the workers' environment, notes).
    """
    if gpus < 2:
        return {}, []
    blocked = [link for link in links if not link.p2p_read]
    if not blocked:
        return {}, []
    pairs = ", ".join(f"GPU {link.first}-{link.second}" for link in blocked)
    user = [name for name in NCCL_P2P_VARIABLES if environ.get(name) is not None]
    if user:
        return {}, [
            f"NVML reports no peer-to-peer access between {pairs}; your "
            f"{', '.join(f'{name}={environ[name]}' for name in user)} is kept (verlfit would set NCCL_P2P_DISABLE=1)"
        ]
    return {"NCCL_P2P_DISABLE": "1"}, [
        f"NVML reports no peer-to-peer access between {pairs}: NCCL_P2P_DISABLE=1 for the workers, so NCCL goes "
        "through host memory (slower, but no hang); set NCCL_P2P_DISABLE or NCCL_P2P_LEVEL yourself to override"
    ]
