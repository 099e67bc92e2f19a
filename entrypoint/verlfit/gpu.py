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
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    """

    index: int
    name: str
    compute_capability: tuple[int, int]
    total_memory_bytes: int
    free_memory_bytes: int

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


@dataclass(frozen=True)
class GpuReport:
    """What NVML says about this machine.

    Attributes:
        gpus: visible GPUs (empty when none or when NVML failed).
        driver_version: e.g. ``"535.183.01"``; None without a driver.
        cuda_driver_version: highest CUDA version the driver supports as ``(major, minor)``.
        error: None when NVML answered; otherwise a one-line reason starting with
            ``"no NVIDIA GPU visible"``.
    """

    gpus: list[GpuInfo] = field(default_factory=list)
    driver_version: str | None = None
    cuda_driver_version: tuple[int, int] | None = None
    error: str | None = None

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
        return GpuReport(error=f"no NVIDIA GPU visible: NVML could not start ({error}); is the NVIDIA driver installed and the GPU passed to this container (docker run --gpus all)")
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        cuda = nvml.nvmlSystemGetCudaDriverVersion()  # e.g. 12020 for 12.2
        cuda_version = (cuda // 1000, (cuda % 1000) // 10)
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            gpus.append(
                GpuInfo(
                    index=index,
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    compute_capability=(int(major), int(minor)),
                    total_memory_bytes=int(memory.total),
                    free_memory_bytes=int(memory.free),
                )
            )
    finally:
        nvml.nvmlShutdown()
    if not gpus:
        return GpuReport(driver_version=driver, cuda_driver_version=cuda_version, error="no NVIDIA GPU visible: the driver is loaded but reports 0 devices (check CUDA_VISIBLE_DEVICES and --gpus)")
    return GpuReport(gpus=gpus, driver_version=driver, cuda_driver_version=cuda_version)
