"""Datasheet facts of the GPUs the time estimate (``verlfit.plan.time``) knows, as data, each number with its source.

Units: TFLOP/s (10**12 floating-point operations per second, dense: the datasheets' "with sparsity" figures are
halved), GB/s (10**9 bytes per second), PCIe rate per direction in GB/s. Half-precision tensor rates are dense
figures with fp32 accumulation (what PyTorch's fp16/bf16 matmuls use).

Sources:

* ``nvidia-p40``: NVIDIA Tesla P40 datasheet (2016): 12 TFLOPS single precision "with GPU Boost", 346 GB/s,
  24 GB GDDR5, PCIe 3.0 x16. 11.76 TFLOP/s = 3840 CUDA cores x 2 x 1531 MHz boost (the figure the datasheet
  rounds to 12); the same 11.76 TFLOPS, 3840 cores, 1531 MHz and PCIe 3.0 x16 on third-party spec pages
  (sysrqmts.com/gpus/nvidia/tesla/p40, gpuark.com/en/gpu/nvidia-tesla-p40). No fast fp16/bf16: fp16 runs at 1/64
  of fp32 (same pages), so the card is fp32-only.
* ``t4``: NVIDIA T4 Tensor Core GPU datasheet: FP32 8.1 TFLOPS, mixed precision (FP16/FP32) 65 TFLOPS, 320 GB/s
  GDDR6, 16 GB, PCIe Gen3 x16, 70 W. Compute capability 7.5 (CUDA programming guide, compute capabilities table).
  No bf16 hardware.
* ``v100``: NVIDIA Tesla V100 datasheet, SXM2 column: double 7.8, single 15.7, Tensor 125 TFLOPS, 900 GB/s HBM2,
  16 or 32 GB (the rates are the same for both sizes), NVLink 300 GB/s between GPUs, host PCIe Gen3 x16. Compute
  capability 7.0. No bf16 hardware. ``v100-pcie``: the same datasheet's PCIe column: single 14, Tensor 112 TFLOPS,
  900 GB/s. (The V100S, 16.4 / 130 TFLOPS and 1134 GB/s, is a different card: not matched.)
* ``rtx2080ti``: NVIDIA Turing architecture whitepaper (2018), GeForce RTX 2080 Ti reference (boost 1545 MHz,
  4352 CUDA cores): FP32 13.4 TFLOPS, FP16 Tensor 107.6 TFLOPS with FP16 accumulate and 53.8 with FP32 accumulate
  (GeForce cards run FP32 accumulation at half rate; PyTorch's fp16 matmuls accumulate in FP32, so 53.8 is the
  figure here), 616 GB/s GDDR6, 11 GB, PCIe 3.0 x16. Compute capability 7.5.
* ``nvidia-a10``: NVIDIA A10 Tensor Core GPU datasheet: FP32 31.2 TFLOPS, BF16 Tensor Core 125 TFLOPS (250 with
  sparsity), 600 GB/s GDDR6, PCIe Gen4 64 GB/s (bidirectional, so 32 per direction). Cross-check: 31.24 TFLOPS and
  600.2 GB/s, PCIe 4.0 x16 (sysrqmts.com A10 PCIe page).
* ``nvidia-l4``: NVIDIA L4 Tensor Core GPU datasheet: FP32 30.3 TFLOPS, BF16 Tensor Core 242 TFLOPS with sparsity
  (121 dense), 300 GB/s, PCIe Gen4 x16 64 GB/s. Cross-check: 30.29 TFLOPS, 300.1 GB/s, PCIe 4.0 x16
  (fpsbench.com L4 page); 242 TFLOPS FP16 tensor with sparsity (grokipedia.com NVIDIA_L4_vs_L40S).
* ``nvidia-h200``: NVIDIA H200 Tensor Core GPU datasheet, SXM column: FP32 67 TFLOPS (non-tensor), BF16 Tensor Core
  1,979 TFLOPS with sparsity (989 dense), 4.8 TB/s HBM3e, PCIe Gen5 128 GB/s (bidirectional, so 64 per direction).
  Cross-check: 66.91 TFLOPS FP32 (hmc-tech.com H200 SXM page), ~989 TFLOPS BF16 dense and 4.8 TB/s
  (itkb.uw.cz H200 vs B300, dense figures).

Memory (``memory_gb``), GB as the same datasheets give it: P40 24, T4 16, V100 (SXM2 and PCIe) 16 or 32 (32 here),
RTX 2080 Ti 11, A10 24, L4 24, H200 141. NVML reports 143,771 MiB (140.4 GiB) for the H200 (docs/benchmarks.md).

PCIe per direction: PCI-SIG rates x16 lanes, 128b/130b encoding: Gen3 8 GT/s -> 15.75 GB/s, Gen4 -> 31.5,
Gen5 -> 63.0 (the datasheets' bidirectional 32/64/128 GB/s halved, rounded).

The NVIDIA datasheet PDFs themselves were not reachable from where this table was written; every P40, A10, L4 and
H200 figure above was checked against the third-party spec pages named, which agree with the datasheet values
quoted. The T4, V100 and RTX 2080 Ti figures are the datasheet and Turing-whitepaper values as commonly quoted, not
cross-checked against spec pages here; none of them has been checked on a card.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verlfit.errors import VerlfitError


@dataclass(frozen=True)
class Card:
    """One GPU model's datasheet peak rates.

    Attributes:
        key: short name used by ``--emulate``/profiles and ``verlfit plan --card`` (``"p40"``, ``"t4"``, ``"v100"``,
            ``"v100-pcie"``, ``"rtx2080ti"``, ``"a10"``, ``"l4"``, ``"h200"``).
        name: marketing name, as NVML reports it (matched by substring, case-insensitive).
        fp32_tflops: peak fp32 (non-tensor) rate, TFLOP/s. On the H200 this is what fp32 matmuls run at with TF32
            off (torch's default ``torch.backends.cuda.matmul.allow_tf32 = False``).
        bf16_tflops: peak dense bf16 tensor-core rate, TFLOP/s; None where the card has no bf16 hardware.
        fp16_tflops: peak dense fp16 tensor-core rate with fp32 accumulation, TFLOP/s; None where the card has no
            fast fp16 (the P40: 1/64 of fp32); for the cards with bf16 the same as ``bf16_tflops`` (their datasheets
            give one figure for both).
        memory_gbps: peak device-memory bandwidth, GB/s.
        pcie_gbps: host link rate per direction, GB/s (FSDP offload traffic).
        pcie: the link, e.g. ``"PCIe 3.0 x16"``.
        measured: a verlfit run on this very card calibrated the time model (see ``verlfit.plan.time.FACTORS``); False
            means the estimate for it is datasheet-based and unverified.
        memory_gb: the card's memory as its datasheet gives it, GB (the larger size where there are two: V100 16 or
            32). Card memory comes in powers of two, so NVML reports about as many GiB, a little less: the H200's
            141 GB is 143,771 MiB = 140.4 GiB (docs/benchmarks.md's machine). Bounds ``--gpu-memory-limit``
            (:func:`largest_memory_card`).
        sources: what each number rests on (module docstring has the full list).
    """

    key: str
    name: str
    fp32_tflops: float
    bf16_tflops: float | None
    memory_gbps: float
    pcie_gbps: float
    pcie: str
    fp16_tflops: float | None = None
    measured: bool = False
    sources: dict = field(default_factory=dict)
    memory_gb: float = 0.0

    def peak_flops(self, dtype: str) -> float:
        """Peak FLOP/s for the compute dtype (``"float32"``, ``"bfloat16"`` or ``"float16"``).

        Raises:
            VerlfitError: bf16 on a card without bf16 hardware; fp16 on a card without fast fp16 (P40).
        """
        if dtype == "float32":
            return self.fp32_tflops * 1e12
        if dtype == "float16":
            if self.fp16_tflops is None:
                raise VerlfitError(
                    f"{self.name} has no fast fp16 (no tensor cores): no time estimate for --dtype float16",
                    fix="plan with --dtype float32",
                    exit_code=2,
                )
            return self.fp16_tflops * 1e12
        if self.bf16_tflops is None:
            raise VerlfitError(
                f"{self.name} has no bf16 hardware: no time estimate for --dtype bfloat16",
                fix="plan with --dtype float32",
                exit_code=2,
            )
        return self.bf16_tflops * 1e12

    def rates(self, dtype: str) -> Rates:
        """The card's datasheet rates for a run computing in ``dtype``, in bytes and FLOPs per second
        (:class:`Rates`): what the time model divides one step's work by.

        Raises:
            VerlfitError: what :meth:`peak_flops` raises for ``dtype``.
        """
        return Rates(dtype, self.peak_flops(dtype), self.memory_gbps * 1e9, self.pcie_gbps * 1e9)


@dataclass(frozen=True)
class Rates:
    """A card's peak rates for one compute dtype (:meth:`Card.rates`).

    Attributes:
        dtype: the compute dtype (``"float32"``, ``"bfloat16"`` or ``"float16"``).
        flops: peak FLOP/s in ``dtype``.
        memory: device-memory bandwidth, bytes/s.
        pcie: host link rate per direction, bytes/s.
    """

    dtype: str
    flops: float
    memory: float
    pcie: float


CARDS: dict[str, Card] = {
    "p40": Card(
        "p40",
        "Tesla P40",
        11.76,
        None,
        346.0,
        15.75,
        "PCIe 3.0 x16",
        memory_gb=24.0,
        sources={
            "fp32_tflops": "3840 cores x 2 x 1531 MHz (NVIDIA P40 datasheet: 12 TFLOPS with boost)",
            "memory_gbps": "NVIDIA P40 datasheet",
            "pcie_gbps": "PCIe 3.0 x16, 8 GT/s, 128b/130b",
            "memory_gb": "NVIDIA P40 datasheet: 24 GB GDDR5",
        },
    ),
    "t4": Card(
        "t4",
        "T4",
        8.1,
        None,
        320.0,
        15.75,
        "PCIe 3.0 x16",
        fp16_tflops=65.0,
        memory_gb=16.0,
        sources={
            "fp32_tflops": "NVIDIA T4 datasheet",
            "fp16_tflops": "NVIDIA T4 datasheet (mixed precision FP16/FP32)",
            "memory_gbps": "NVIDIA T4 datasheet",
            "pcie_gbps": "PCIe 3.0 x16, 8 GT/s, 128b/130b",
            "memory_gb": "NVIDIA T4 datasheet: 16 GB GDDR6",
        },
    ),
    "v100": Card(
        "v100",
        "V100-SXM2",
        15.7,
        None,
        900.0,
        15.75,
        "PCIe 3.0 x16 (NVLink between GPUs)",
        fp16_tflops=125.0,
        memory_gb=32.0,
        sources={
            "fp32_tflops": "NVIDIA V100 datasheet, SXM2",
            "fp16_tflops": "NVIDIA V100 datasheet, SXM2, Tensor Performance",
            "memory_gbps": "NVIDIA V100 datasheet",
            "pcie_gbps": "PCIe 3.0 x16, 8 GT/s, 128b/130b",
            "memory_gb": "NVIDIA V100 datasheet: 16 or 32 GB HBM2",
        },
    ),
    "v100-pcie": Card(
        "v100-pcie",
        "V100-PCIE",
        14.0,
        None,
        900.0,
        15.75,
        "PCIe 3.0 x16",
        fp16_tflops=112.0,
        memory_gb=32.0,
        sources={
            "fp32_tflops": "NVIDIA V100 datasheet, PCIe",
            "fp16_tflops": "NVIDIA V100 datasheet, PCIe, Tensor Performance",
            "memory_gbps": "NVIDIA V100 datasheet",
            "pcie_gbps": "PCIe 3.0 x16, 8 GT/s, 128b/130b",
            "memory_gb": "NVIDIA V100 datasheet: 16 or 32 GB HBM2",
        },
    ),
    "rtx2080ti": Card(
        "rtx2080ti",
        "GeForce RTX 2080 Ti",
        13.4,
        None,
        616.0,
        15.75,
        "PCIe 3.0 x16",
        fp16_tflops=53.8,
        memory_gb=11.0,
        sources={
            "fp32_tflops": "NVIDIA Turing architecture whitepaper, RTX 2080 Ti reference",
            "fp16_tflops": "Turing whitepaper: FP16 Tensor with FP32 accumulate (107.6 with FP16 accumulate)",
            "memory_gbps": "Turing whitepaper",
            "pcie_gbps": "PCIe 3.0 x16, 8 GT/s, 128b/130b",
            "memory_gb": "Turing whitepaper: 11 GB GDDR6",
        },
    ),
    "a10": Card(
        "a10",
        "A10",
        31.2,
        125.0,
        600.0,
        31.5,
        "PCIe 4.0 x16",
        fp16_tflops=125.0,
        memory_gb=24.0,
        sources={
            "fp32_tflops": "NVIDIA A10 datasheet",
            "bf16_tflops": "NVIDIA A10 datasheet (250 with sparsity, halved)",
            "memory_gbps": "NVIDIA A10 datasheet",
            "pcie_gbps": "PCIe Gen4 64 GB/s bidirectional (datasheet)",
            "memory_gb": "NVIDIA A10 datasheet: 24 GB GDDR6",
        },
    ),
    "l4": Card(
        "l4",
        "L4",
        30.3,
        121.0,
        300.0,
        31.5,
        "PCIe 4.0 x16",
        fp16_tflops=121.0,
        memory_gb=24.0,
        sources={
            "fp32_tflops": "NVIDIA L4 datasheet",
            "bf16_tflops": "NVIDIA L4 datasheet (242 with sparsity, halved)",
            "memory_gbps": "NVIDIA L4 datasheet",
            "pcie_gbps": "PCIe Gen4 x16 64 GB/s bidirectional (datasheet)",
            "memory_gb": "NVIDIA L4 datasheet: 24 GB GDDR6",
        },
    ),
    "h200": Card(
        "h200",
        "H200",
        67.0,
        989.0,
        4800.0,
        63.0,
        "PCIe 5.0 x16",
        fp16_tflops=989.0,
        measured=True,
        memory_gb=141.0,
        sources={
            "fp32_tflops": "NVIDIA H200 datasheet, SXM, FP32",
            "bf16_tflops": "NVIDIA H200 datasheet, SXM (1,979 with sparsity, halved)",
            "memory_gbps": "NVIDIA H200 datasheet, 4.8 TB/s",
            "pcie_gbps": "PCIe Gen5 128 GB/s bidirectional (datasheet)",
            "memory_gb": "NVIDIA H200 datasheet: 141 GB HBM3e",
        },
    ),
}

# an NVML name that contains the left string is that card; the order matters ("A100" must not match "A10")
_NAME_MATCH = (
    ("P40", "p40"),
    ("A100", None),
    ("A10G", None),
    ("A10", "a10"),
    ("L40", None),
    ("L4", "l4"),
    ("H200", "h200"),
    ("V100S", None),
    ("V100-PCIE", "v100-pcie"),
    ("V100", "v100"),
    ("TESLA T4", "t4"),
    ("NVIDIA T4", "t4"),
    ("2080 TI", "rtx2080ti"),
)


def card_for_gpu_name(name: str) -> Card | None:
    """The :class:`Card` whose NVML name ``name`` is (e.g. ``"NVIDIA H200"``, ``"Tesla P40"``), or None when unknown."""
    upper = name.upper()
    for fragment, key in _NAME_MATCH:
        if fragment in upper:
            return CARDS[key] if key else None
    return None


def largest_memory_card() -> Card:
    """The card of :data:`CARDS` with the most memory (:attr:`Card.memory_gb`; the H200, 141 GB): no GPU verlfit knows
    gives a worker more, so a ``--gpu-memory-limit`` above it is a unit mistake (bytes or MiB for GiB)."""
    return max(CARDS.values(), key=lambda card: card.memory_gb)


def get_card(key: str) -> Card:
    """The card named ``key`` (a key of :data:`CARDS`: ``p40``, ``t4``, ``v100``, ``v100-pcie``, ``rtx2080ti``,
    ``a10``, ``l4``, ``h200``).

    Raises:
        VerlfitError: naming the known keys.
    """
    try:
        return CARDS[key.lower()]
    except KeyError:
        raise VerlfitError(f"no datasheet facts for card {key!r}", fix=f"use one of: {', '.join(CARDS)}") from None
