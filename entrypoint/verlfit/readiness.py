"""Is this machine ready to train? The checks ``verlfit doctor`` (:mod:`verlfit.commands.doctor`) shows as its
lines, each a :class:`verlfit.checks.result.CheckResult` (PASS / WARN / FAIL / SKIP, with a one-line fix), and the
blocking subset ``verlfit train`` runs before a launch.

Checks (name: what it looks at):

* ``driver``: NVIDIA driver new enough for the images' CUDA 11.8 (>= 520.61.05; 450.80.02 and newer
  run it through CUDA minor-version compatibility: WARN; older: FAIL) (:mod:`verlfit.gpu`). The images'
  ``NVIDIA_REQUIRE_CUDA`` (:data:`IMAGE_DRIVER_REQUIREMENT`) lets the container toolkit start them on exactly the
  drivers this check does not FAIL.
* ``gpu``: compute capability against the profile (``--profile`` or ``VERLFIT_PROFILE``) and what
  follows from it: bf16, FlashAttention-2, vLLM, Triton; for a 6.0 or 7.x card on the p40 profile, why and what
  the profile leaves off (:func:`verlfit.profiles.profile_choice_note`). No GPU: FAIL (training cannot run).
* ``topology``: the GPUs a CUDA process sees (``CUDA_VISIBLE_DEVICES``, read in PCI bus order: :mod:`verlfit.gpu`)
  are of one kind (else FAIL, naming each kind and the ``CUDA_VISIBLE_DEVICES`` that keeps it); one line per pair:
  PCIe level (nvidia-smi topo's PIX/PXB/PHB/NODE/SYS) or NVLink, and whether NVML allows peer-to-peer reads; the
  NCCL settings the workers get (yours, verlfit train's ``NCCL_P2P_DISABLE=1`` where a pair lacks P2P, verl's own).
* ``torch-arch``: torch's compiled architectures cover the GPU. A ``sm_XY`` cubin runs on compute
  capability X.Z for Z >= Y (same major), so ``sm_60`` covers the P40's 6.1.
* ``triton-shared-memory``: ``TRITON_MAX_SHARED_MEMORY`` within the card's per-block limit.
* ``environment``: the profile named by ``--profile`` / ``VERLFIT_PROFILE`` exists, and the knobs the image's
  entrypoint sets are values ``verlfit train`` accepts for it: ``VLLM_DTYPE`` a torch dtype name (no bf16 below
  compute capability 8.0: the GPU's, or the profile's cards without one), ``TRITON_MAX_SHARED_MEMORY`` a whole
  number of bytes, ``PYTORCH_CUDA_ALLOC_CONF`` option:value pairs. Runs without a GPU.
* ``engines``: the Python packages the profile's rollout and attention import, after ``--rollout`` / ``--attention``
  (:func:`verlfit.profiles.customize`): vllm for the vLLM rollout, flash_attn for FlashAttention-2
  (:func:`verlfit.checks.engines.missing_engine_packages`, found without importing them). One missing: FAIL (blocking:
  verl would fail a minute in, after Ray starts), with ``--rollout hf`` / ``--attention sdpa`` or the profile's image as
  the fix. Runs without a GPU when the profile is named.
* ``shm``: ``/dev/shm`` against Ray's default object store (:func:`ray_object_store_bytes`: 30% of the available
  RAM, at most 10 GB unless /dev/shm is bigger). Ray keeps the store in /dev/shm only when /dev/shm has that
  much free; otherwise it moves it to /tmp with "This will harm performance!" (ray 2.46
  ``_private/services.py:2136-2170``). Below that: FAIL (blocking: ``verlfit train`` refuses), with the size to
  give the container (compose ``shm_size``, ``docker run --shm-size``); Docker's default is 64 MiB.
* ``disk``: free space where checkpoints go (``--run-dir``) against the checkpoints a run holds at once
  (:func:`verlfit.checks.disk.checkpoint_space`): one checkpoint's size is
  :func:`verlfit.plan.time.checkpoint_disk_bytes` of ``--model``, ``--algo``, ``--lora-rank`` and
  ``--critic-lora-rank`` (all-linear targets) at train's defaults;
  ``--keep-checkpoints`` of them (train's default 2) must fit: WARN below that, FAIL below one.
* ``data``: ``train.parquet`` and ``test.parquet`` readable with verl's columns; raw GSM8K files in ``--data`` (a WARN:
  train prepares them into ``--data/verl``); neither: a WARN when the datasets cache or the hub has GSM8K, else a FAIL.
* ``model``: a local model directory with config, readable weights of the config's size and a tokenizer
  (:mod:`verlfit.model_files`; a Git LFS pointer: run ``git lfs pull``), the local hub cache, or the hub /
  ``HF_ENDPOINT`` reachable (:mod:`verlfit.hub`).
* ``cuda``: torch sees CUDA and can allocate on the GPU.
* ``patches``: the installed verl carries this verlfit's patch series (``verl/.verlfit-patches``,
  written by ``patches/apply.py``).

:func:`run_checks` runs them all against a :class:`DoctorContext` (every outside dependency --
NVML, torch, the filesystem, the network -- is a field, so tests pass fakes); :func:`blocking_checks`
is the fast subset ``verlfit train`` runs before it launches.

The checks other commands need too live beside this module in :mod:`verlfit.checks`, one module per thing checked
(data folder, model folder, patch series, engine packages, checkpoint space); this module gives each its line
(``check_data``, ``check_model``, ``check_patches`` read their inputs from the :class:`DoctorContext`) and returns
the results: ``verlfit doctor`` prints them as PASS/WARN/FAIL. It stays one module of machine checks: each check is
short, and the list (:data:`CHECKS`) is the doctor's report.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from verlfit import gsm8k
from verlfit.arguments import refuse_lora_options_without_lora
from verlfit.checks.data_folder import check_data_folder, datasets_cache_folder
from verlfit.checks.disk import GIB, checkpoint_space, checkpoints_held, existing_parent
from verlfit.checks.engines import ENGINE_PACKAGES, missing_engine_packages
from verlfit.checks.model_folder import check_model_folder, hub_cache_file
from verlfit.checks.patches import check_patches as check_patch_series, default_series, installed_verl_dir
from verlfit.checks.result import CheckResult, FAIL, PASS, SKIP, WARN
from verlfit.data_folder import DataKeys, data_folder_state
from verlfit.errors import VerlfitError
from verlfit.gpu import cuda_visible_gpus, links_among, nccl_environment, query_gpus, refuse_mixed_cards
from verlfit.hub import NETWORK_TIMEOUT_S, http_head
from verlfit.model_shape import load_model_shape
from verlfit.run_settings import TrainSettings
from verlfit.plan.fit import fit_memory
from verlfit.plan.memory import NF4
from verlfit.plan.request import frozen_base_storage, request_from_settings
from verlfit.plan.time import checkpoint_disk_bytes
from verlfit.profiles import (
    PROFILE_NAMES,
    check_rollout_dtype,
    customize,
    load_profile,
    profile_choice_note,
    profile_for_capability,
    resolve_environment,
)
from verlfit.resolved_run import run_switches
from verlfit.reward_function import (
    RewardFunction,
    check_reward_function,
    check_verl_scores,
    describe_printed,
    describe_scores,
    verl_ground_truth_note,
)

DRIVER_MINIMUM = (520, 61, 5)  # CUDA 11.8 release notes, table 3 (Linux)
DRIVER_COMPAT_MINIMUM = (450, 80, 2)  # CUDA minor-version compatibility floor for 11.x
# The images' NVIDIA_REQUIRE_CUDA (Dockerfile.p40/.a10, runtime stage; tests hold them equal), the rule the NVIDIA
# container toolkit applies before it starts a container: terms separated by a space are ORed, conditions separated by
# a comma ANDed (libnvidia-container src/cli/dsl.c; nvidia-container-toolkit internal/requirements). A driver whose
# CUDA is 11.8 or newer, or any driver from DRIVER_COMPAT_MINIMUM on: exactly the drivers check_driver does not FAIL.
# The CUDA base image's own value accepts, below CUDA 11.8, only the R450/R470 windows of NVIDIA's forward
# compatibility package (by card brand), so it refused a Tesla on R510 or R515 that check_driver WARNs about.
# 450.80.2 without the leading zero: newer toolkits compare versions as semver, which refuses "02".
IMAGE_DRIVER_REQUIREMENT = "cuda>=11.8 driver>=" + ".".join(str(part) for part in DRIVER_COMPAT_MINIMUM)
# Ray 2.46's default object store size (ray/_private/ray_constants.py:76-79 and :117; resource_spec.py:225-265)
RAY_OBJECT_STORE_PROPORTION = (
    0.3  # DEFAULT_OBJECT_STORE_MEMORY_PROPORTION, env RAY_DEFAULT_OBJECT_STORE_MEMORY_PROPORTION
)
RAY_SHM_CAP_FLOOR_BYTES = 10**10  # REQUIRE_SHM_SIZE_THRESHOLD: the /dev/shm cap never goes below 10 GB
RAY_OBJECT_STORE_MAX_BYTES = (
    200 * 10**9
)  # DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES, env RAY_DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES
VERL_COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info")
CHECK_NAMES = (
    "driver",
    "gpu",
    "topology",
    "torch-arch",
    "triton-shared-memory",
    "environment",
    "engines",
    "shm",
    "disk",
    "data",
    "reward",
    "model",
    "cuda",
    "patches",
)
# patches: stock verl 0.4.1 breaks on the P40 path (FAIL: not patched, or another series); its WARNs (series not
# found to compare, a patch changed since applied) and SKIP (no verl) do not block.
BLOCKING = ("driver", "gpu", "triton-shared-memory", "engines", "shm", "data", "model", "cuda", "patches")


@dataclass(frozen=True)
class TorchInfo:
    """What the torch probe found. ``error`` is set when torch imports but CUDA does not work."""

    version: str
    cuda_version: str | None
    arch_list: tuple[str, ...]
    cuda_available: bool
    allocation_ok: bool
    error: str | None = None


def probe_torch() -> TorchInfo | None:
    """Import torch and try a tiny allocation on the GPU; None when torch is not installed."""
    try:
        import torch  # lazy: seconds to import; only where tensors are made
    except ImportError:
        return None
    arch = tuple(torch.cuda.get_arch_list()) if torch.version.cuda else ()
    available = bool(torch.cuda.is_available())
    ok, error = False, None
    if available:
        try:
            x = torch.ones(1024, device="cuda")
            ok = float((x * 2).sum().item()) == 2048.0
            torch.cuda.synchronize()
        except Exception as exc:  # a driver/runtime mismatch shows up here
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return TorchInfo(torch.__version__, torch.version.cuda, arch, available, ok, error)


@dataclass
class DoctorContext:
    """Everything the checks look at; defaults read the real machine.

    Attributes:
        profile_name: ``"p40"``, ``"a10"`` or None (then ``VERLFIT_PROFILE``, else chosen by the GPU).
        rollout, attention: ``--rollout`` / ``--attention`` (None: the profile's), for the engines check.
        frozen_base: a LoRA run's base storage as train planned it (``--frozen-base-dtype``; ``"nf4"`` needs
            bitsandbytes; None: the profile's), for the engines check and the disk check's checkpoint size.
        frozen_base_planned: ``frozen_base`` is what train's planner would choose (:func:`planned_frozen_base`), not
            given: the engines line says so.
        find_spec: ``importlib.util.find_spec``-like lookup of a package by name (None: the real one; tests pass fakes).
        environ: environment variables (default ``os.environ``).
        nvml: passed to :func:`verlfit.gpu.query_gpus` (a fake in tests).
        torch_probe: returns :class:`TorchInfo` or None without torch.
        data_dir: where ``train.parquet`` and ``test.parquet`` are expected.
        model: a model directory or hub id.
        checkpoint_dir: where checkpoints will be written (the nearest existing parent is measured).
        shm_path: Ray's shared-memory directory.
        disk_usage: ``shutil.disk_usage``-like function.
        shm_size: bytes free in the filesystem at ``shm_path`` (None when absent), as Ray measures them.
        available_memory: ``f() -> bytes`` of available RAM, as Ray measures it (:func:`available_memory_bytes`).
        algorithm, keep_checkpoints, lora_rank, critic_lora_rank: the run the disk check sizes (``--algo``,
            ``--keep-checkpoints``, ``--lora-rank``, ``--critic-lora-rank``; train's defaults ``ppo``, 2, 0 (full
            fine-tuning) and None (the actor's rank)).
        verl_dir: the installed verl package (found on demand without importing it).
        series_path: the patch series file (``VERLFIT_PATCHES_DIR`` or the repository's).
        head: ``f(url, timeout, headers) -> status``; raises OSError when unreachable.
        hub_cache_lookup: ``f(repo_id, filename) -> path | None`` (no network).
        dataset_cache_lookup: ``f(dataset_id) -> folder | None``: where ``datasets`` keeps a loaded hub dataset
            (no network).
        timeout: seconds for the network check.
        data_keys: the data keys the run uses (``data.prompt_key`` / ``data.reward_fn_key`` after ``--``).
        reward_function: the run's reward function (``--reward-function``), None: verl's scorer for each data_source.
    """

    profile_name: str | None = None
    rollout: str | None = None
    attention: str | None = None
    frozen_base: str | None = None
    frozen_base_planned: bool = False
    find_spec: Callable | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    nvml: object | None = None
    torch_probe: Callable[[], TorchInfo | None] = probe_torch
    data_dir: str = "data/gsm8k"
    model: str = "Qwen/Qwen2.5-0.5B-Instruct"
    checkpoint_dir: str = "runs"
    shm_path: str = "/dev/shm"
    disk_usage: Callable = shutil.disk_usage
    shm_size: Callable[[str], int | None] | None = None
    available_memory: Callable[[], int] | None = None
    algorithm: str = "ppo"
    keep_checkpoints: int = 2
    lora_rank: int = 0
    critic_lora_rank: int | None = None
    verl_dir: Path | None | str = "auto"
    series_path: Path | None | str = "auto"
    head: Callable = http_head
    hub_cache_lookup: Callable | None = hub_cache_file
    dataset_cache_lookup: Callable[[str], str | None] | None = datasets_cache_folder
    timeout: float = NETWORK_TIMEOUT_S
    data_keys: DataKeys = field(default_factory=DataKeys)
    reward_function: RewardFunction | None = None
    _gpu_report: object = field(default=None, repr=False)
    _torch: object = field(default="unprobed", repr=False)

    def gpu_report(self):
        if self._gpu_report is None:
            self._gpu_report = query_gpus(self.nvml)
        return self._gpu_report

    def torch(self) -> TorchInfo | None:
        if self._torch == "unprobed":
            self._torch = self.torch_probe()
        return self._torch

    def profile(self) -> str | None:
        return self.profile_name or self.environ.get("VERLFIT_PROFILE") or None


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _version_text(version: tuple[int, ...]) -> str:
    return ".".join(f"{part:02d}" if i == 2 else str(part) for i, part in enumerate(version))


NO_GPU_FIX = "install the NVIDIA driver and run the container with --gpus all (check CUDA_VISIBLE_DEVICES)"


def _no_gpu(name: str, report) -> CheckResult:
    if name == "driver":
        return CheckResult(name, FAIL, report.error or "no NVIDIA GPU visible", NO_GPU_FIX)
    what = {"gpu": "training cannot run", "cuda": "CUDA from torch not tried"}[name]
    return CheckResult(name, FAIL, f"no NVIDIA GPU visible: {what}", NO_GPU_FIX)


def check_driver(ctx: DoctorContext) -> CheckResult:
    report = ctx.gpu_report()
    if report.driver_version is None:
        return _no_gpu("driver", report)
    version = _version_tuple(report.driver_version)
    cuda = (
        f" (CUDA {report.cuda_driver_version[0]}.{report.cuda_driver_version[1]})" if report.cuda_driver_version else ""
    )
    if version >= DRIVER_MINIMUM:
        return CheckResult(
            "driver",
            PASS,
            f"driver {report.driver_version}{cuda} runs CUDA 11.8 (needs >= {_version_text(DRIVER_MINIMUM)})",
        )
    if version >= DRIVER_COMPAT_MINIMUM:
        return CheckResult(
            "driver",
            WARN,
            f"driver {report.driver_version}{cuda} is older than CUDA 11.8's {_version_text(DRIVER_MINIMUM)}: it runs "
            "only through minor-version compatibility (no PTX JIT of newer code); the images accept it "
            f"(NVIDIA_REQUIRE_CUDA={IMAGE_DRIVER_REQUIREMENT})",
            f"upgrade the NVIDIA driver to >= {_version_text(DRIVER_MINIMUM)}",
        )
    return CheckResult(
        "driver",
        FAIL,
        f"driver {report.driver_version}{cuda} cannot run CUDA 11.8 (needs >= {_version_text(DRIVER_MINIMUM)}, at "
        f"least {_version_text(DRIVER_COMPAT_MINIMUM)}): the NVIDIA container toolkit refuses to start the images on "
        f"it (NVIDIA_REQUIRE_CUDA={IMAGE_DRIVER_REQUIREMENT})",
        f"upgrade the NVIDIA driver to >= {_version_text(DRIVER_MINIMUM)}",
    )


def _features(gpu) -> str:
    yes = lambda flag: "yes" if flag else "no"  # noqa: E731
    return (
        f"bf16 {yes(gpu.supports_bf16)}, FlashAttention-2 {yes(gpu.supports_flash_attention_2)}, vLLM "
        f"{yes(gpu.supports_vllm)}, Triton {yes(gpu.supports_triton)}"
    )


def _left_unused(running, suited) -> str:
    """What the card's own profile ``suited`` uses that ``running`` does not, in words ("bf16, FlashAttention-2 and
    vLLM" for p40 on an A10; "fp16 tensor cores" for p40 on a T4); empty when both run the same code paths."""
    words = []
    if suited.dtype != running.dtype:
        words.append({"bfloat16": "bf16", "float16": "fp16 tensor cores"}.get(suited.dtype, suited.dtype))
    if suited.attention != running.attention and suited.attention == "flash_attention_2":
        words.append("FlashAttention-2")
    if suited.rollout != running.rollout and suited.rollout == "vllm":
        words.append("vLLM")
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


def check_gpu(ctx: DoctorContext) -> CheckResult:

    report = ctx.gpu_report()
    if not report.gpus:
        return _no_gpu("gpu", report)
    gpu = min(report.gpus, key=lambda g: g.compute_capability)
    many = f" (lowest of {report.count} GPUs)" if report.count > 1 else ""
    described = f"GPU {gpu.index}: {gpu.name}, compute capability {gpu.compute_capability_text}{many}: {_features(gpu)}"
    try:
        suited = profile_for_capability(gpu.compute_capability)
    except VerlfitError as error:
        return CheckResult("gpu", FAIL, f"{described}; {error.message}", "use a GPU of compute capability 6.0 or newer")
    name = ctx.profile()
    if not name or name == "auto":
        note = profile_choice_note(suited, gpu)
        return CheckResult(
            "gpu",
            PASS,
            f"{described} -> profile {suited} (image {load_profile(suited).image})" + (f"; {note}" if note else ""),
        )
    if name not in PROFILE_NAMES:
        return CheckResult(
            "gpu",
            FAIL,
            f"{described}; unknown profile {name!r}",
            f"set VERLFIT_PROFILE (or --profile) to one of {', '.join(PROFILE_NAMES)}",
        )
    profile = load_profile(name)
    if gpu.compute_capability < profile.min_compute_capability:
        need = ".".join(map(str, profile.min_compute_capability))
        return CheckResult(
            "gpu",
            FAIL,
            f"{described}; profile {name} needs compute capability >= {need} ({profile.dtype}, {profile.attention}, "
            f"{profile.rollout} rollout)",
            f"use the {load_profile(suited).image} image (--profile {suited})",
        )
    if suited != name:
        unused = _left_unused(profile, load_profile(suited))
        if not unused:  # t4 on a V100 or v100 on a T4: the same code paths, another card's memory figures
            note = profile_choice_note(name, gpu)
            return CheckResult(
                "gpu",
                PASS,
                f"{described}; profile {name} runs the same code paths as {suited}, this card's profile"
                + (f"; {note}" if note else ""),
            )
        return CheckResult(
            "gpu",
            WARN,
            f"{described}; profile {name} runs here but leaves {unused} unused",
            f"use the {load_profile(suited).image} image (--profile {suited}) for speed, or keep {name} to rehearse a "
            "P40",
        )
    note = profile_choice_note(name, gpu)
    return CheckResult("gpu", PASS, f"{described}; matches profile {name}" + (f"; {note}" if note else ""))


# verl 0.4.1's main_ppo.py:42-45 starts Ray with runtime_env env_vars that replace these in every worker
VERL_WORKER_NCCL = {"NCCL_DEBUG": "WARN"}


def nccl_in_force(environ: Mapping[str, str], added: Mapping[str, str]) -> str:
    """The NCCL variables verl's workers get, each with where it comes from, as one line."""
    parts = []
    for name in sorted({*(k for k in environ if k.startswith("NCCL_")), *added, *VERL_WORKER_NCCL}):
        if name in VERL_WORKER_NCCL:
            mine = (
                f", yours ({environ[name]}) is replaced"
                if name in environ and environ[name] != VERL_WORKER_NCCL[name]
                else ""
            )
            parts.append(f"{name}={VERL_WORKER_NCCL[name]} (verl's main_ppo sets it for its workers{mine})")
        elif name in added:
            parts.append(f"{name}={added[name]} (verlfit train sets it: a pair without P2P)")
        else:
            parts.append(f"{name}={environ[name]} (yours)")
    return "; ".join(parts)


def check_topology(ctx: DoctorContext) -> CheckResult:

    report = ctx.gpu_report()
    if not report.gpus:
        return CheckResult("topology", SKIP, "no NVIDIA GPU visible: topology not read")
    try:
        visible = cuda_visible_gpus(report.gpus, ctx.environ)
        refuse_mixed_cards(report.gpus, visible, ctx.environ)
    except VerlfitError as error:
        return CheckResult("topology", FAIL, error.message, error.fix)
    if not visible:
        return CheckResult(
            "topology",
            FAIL,
            f"CUDA_VISIBLE_DEVICES={ctx.environ.get('CUDA_VISIBLE_DEVICES')} hides all {report.count} GPUs NVML sees",
            "unset CUDA_VISIBLE_DEVICES, or list GPUs by index (nvidia-smi's, with CUDA_DEVICE_ORDER=PCI_BUS_ID) or "
            "UUID",
        )
    links = links_among(report.links, visible)
    added, notes = nccl_environment(links, len(visible), ctx.environ)
    details = (*(link.describe() for link in links), "NCCL settings in force: " + nccl_in_force(ctx.environ, added))
    indices = ", ".join(str(g.index) for g in visible)
    if len(visible) == 1:
        return CheckResult(
            "topology",
            PASS,
            f"1 GPU visible (GPU {indices}, {visible[0].name}): no traffic between GPUs",
            details=details,
        )
    shown = f"{len(visible)} x {visible[0].name} visible (GPU {indices})"
    direct = sum(link.p2p_read for link in links)
    if direct == len(links):
        return CheckResult(
            "topology", PASS, f"{shown}: every pair reads the other's memory directly (P2P)", details=details
        )
    if not added:  # the user's NCCL_P2P_DISABLE or NCCL_P2P_LEVEL is kept
        return CheckResult(
            "topology",
            WARN,
            f"{shown}: {len(links) - direct} of {len(links)} pairs without P2P; {notes[0].split('; ', 1)[1]}",
            "unset it, so verlfit train sets NCCL_P2P_DISABLE=1, unless that path is known to work",
            details=details,
        )
    return CheckResult(
        "topology",
        PASS,
        f"{shown}: {len(links) - direct} of {len(links)} pairs without P2P: verlfit train sets NCCL_P2P_DISABLE=1 "
        "(NCCL through host memory)",
        details=details,
    )


def arch_covers(arch_list, compute_capability: tuple[int, int]) -> str | None:
    """How torch's arch list covers a GPU: ``"sm_XY"`` (a cubin that runs natively: same major,
    minor <= the GPU's), ``"compute_XY"`` (PTX the driver can JIT), or None."""
    major, minor = compute_capability
    native, ptx = [], []
    for arch in arch_list:
        match = re.fullmatch(r"(sm|compute)_(\d+?)(\d)[a-z]?", arch)
        if not match:
            continue
        kind, a_major, a_minor = match.group(1), int(match.group(2)), int(match.group(3))
        if kind == "sm" and a_major == major and a_minor <= minor:
            native.append((a_minor, arch))
        if kind == "compute" and (a_major, a_minor) <= (major, minor):
            ptx.append(((a_major, a_minor), arch))
    if native:
        return max(native)[1]
    return max(ptx)[1] if ptx else None


def check_torch_arch(ctx: DoctorContext) -> CheckResult:
    report = ctx.gpu_report()
    if not report.gpus:
        return CheckResult("torch-arch", SKIP, "no NVIDIA GPU visible: nothing to compare torch's architectures with")
    info = ctx.torch()
    if info is None:
        return CheckResult(
            "torch-arch",
            SKIP,
            "torch is not installed here: architectures not checked (run the doctor inside the verlfit image)",
        )
    if not info.arch_list:
        return CheckResult(
            "torch-arch",
            FAIL,
            f"torch {info.version} is a CPU-only build",
            "install the CUDA 11.8 build: pip install torch==2.6.0 --index-url https://download.pytorch.org/whl/cu118",
        )
    for gpu in report.gpus:
        covered = arch_covers(info.arch_list, gpu.compute_capability)
        if covered is None:
            return CheckResult(
                "torch-arch",
                FAIL,
                f"torch {info.version} (CUDA {info.cuda_version}) has no kernels for {gpu.name} (compute capability "
                f"{gpu.compute_capability_text}): arch list {list(info.arch_list)}",
                "use a torch build that includes this architecture (the image's torch 2.6.0+cu118 covers sm_60 and "
                "newer)",
            )
        if covered.startswith("compute_"):
            return CheckResult(
                "torch-arch",
                WARN,
                f"torch {info.version} covers {gpu.name} ({gpu.compute_capability_text}) only through {covered} PTX, "
                "compiled at first use",
                "use a torch build with native kernels for this GPU",
            )
    gpu = report.gpus[0]
    return CheckResult(
        "torch-arch",
        PASS,
        f"torch {info.version} (CUDA {info.cuda_version}) runs on compute capability {gpu.compute_capability_text} "
        f"via {arch_covers(info.arch_list, gpu.compute_capability)} (same major, minor <= "
        f"{gpu.compute_capability[1]})",
    )


def check_triton_shared_memory(ctx: DoctorContext) -> CheckResult:

    report = ctx.gpu_report()
    if not report.gpus:
        return CheckResult("triton-shared-memory", SKIP, "no NVIDIA GPU visible: no per-block limit to compare with")
    gpu = min(report.gpus, key=lambda g: g.max_shared_memory_per_block)
    limit = gpu.max_shared_memory_per_block
    raw = ctx.environ.get("TRITON_MAX_SHARED_MEMORY")
    source = "TRITON_MAX_SHARED_MEMORY"
    if not raw:
        name = ctx.profile()
        if name in PROFILE_NAMES:
            raw, source = (
                load_profile(name).environment["TRITON_MAX_SHARED_MEMORY"],
                f"profile {name}'s TRITON_MAX_SHARED_MEMORY",
            )
        else:
            return CheckResult(
                "triton-shared-memory",
                PASS if not gpu.supports_triton else WARN,
                f"TRITON_MAX_SHARED_MEMORY is unset; {gpu.name} allows {limit} B per block",
                None if not gpu.supports_triton else f"export TRITON_MAX_SHARED_MEMORY={limit}",
            )
    try:
        value = int(raw)
    except ValueError:
        return CheckResult(
            "triton-shared-memory",
            FAIL,
            f"{source}={raw!r} is not a number of bytes",
            f"export TRITON_MAX_SHARED_MEMORY={limit}",
        )
    if value < 1:
        return CheckResult(
            "triton-shared-memory",
            FAIL,
            f"{source}={value}: Triton needs some shared memory per block",
            f"export TRITON_MAX_SHARED_MEMORY={limit}",
        )
    if value > limit:
        return CheckResult(
            "triton-shared-memory",
            FAIL,
            f"{source}={value} exceeds {gpu.name}'s {limit} B per block: Triton kernels sized for it fail with 'out "
            "of resource: shared memory'",
            f"export TRITON_MAX_SHARED_MEMORY={limit}",
        )
    return CheckResult(
        "triton-shared-memory",
        PASS,
        f"{source}={value} <= {gpu.name}'s {limit} B per block"
        + ("" if gpu.supports_triton else " (Triton does not run below compute capability 7.0 anyway)"),
    )


def check_environment(ctx: DoctorContext) -> CheckResult:

    report = ctx.gpu_report()
    gpu = min(report.gpus, key=lambda g: g.compute_capability) if report.gpus else None
    name = ctx.profile()
    name = None if name == "auto" else name  # --profile auto: the GPU's profile, as train does
    if name is not None and name not in PROFILE_NAMES:
        return CheckResult(
            "environment",
            FAIL,
            f"VERLFIT_PROFILE (or --profile) is {name!r}, not a profile",
            f"set it to one of {', '.join(PROFILE_NAMES)} (or unset it: the image's own profile, or the GPU's, "
            "applies)",
        )
    chosen = name or (profile_for_capability(gpu.compute_capability) if gpu is not None else None)
    if chosen is None:
        # no profile to hold the values against: their form can still be checked (any profile's rules do)
        resolve_environment(
            load_profile(PROFILE_NAMES[0]),
            {
                key: ctx.environ[key]
                for key in ("TRITON_MAX_SHARED_MEMORY", "PYTORCH_CUDA_ALLOC_CONF")
                if ctx.environ.get(key)
            },
        )
        return CheckResult(
            "environment",
            SKIP,
            "no profile given (VERLFIT_PROFILE, --profile) and no GPU to choose one by; TRITON_MAX_SHARED_MEMORY and "
            "PYTORCH_CUDA_ALLOC_CONF are well formed",
        )
    profile = load_profile(chosen)
    how = "given" if name else f"chosen by {gpu.name}"
    # malformed values and bf16 below 8.0 raise VerlfitError, which run_checks reports as a FAIL with its fix
    environment = resolve_environment(profile, ctx.environ)
    capability = gpu.compute_capability if gpu is not None else profile.min_compute_capability
    card = gpu.name if gpu is not None else f"the {chosen} profile's cards"
    check_rollout_dtype(profile, environment, capability, f"{card} (compute capability below 8.0)")
    triton, card_limit = (
        int(environment["TRITON_MAX_SHARED_MEMORY"]),
        int(profile.environment["TRITON_MAX_SHARED_MEMORY"]),
    )
    if gpu is None and not 0 < triton <= card_limit:
        # with a GPU the triton-shared-memory check compares with the card itself
        return CheckResult(
            "environment",
            FAIL,
            f"TRITON_MAX_SHARED_MEMORY={triton} is outside 1..{card_limit}, the shared memory per block of the "
            f"{chosen} profile's cards",
            f"unset it (the {chosen} profile uses {card_limit})",
        )
    values = ", ".join(f"{key}={environment[key]}" for key in ("VLLM_DTYPE", "TRITON_MAX_SHARED_MEMORY"))
    return CheckResult("environment", PASS, f"profile {chosen} ({how}); {values}")


def run_profile_name(ctx: DoctorContext) -> tuple[str | None, str]:
    """(the run's profile name, how it was found): ``ctx.profile()`` (``"given"``), else the one train's ``auto`` takes
    for the GPU of the lowest compute capability (``"chosen by <GPU>"``); (None, "") with neither."""
    name = ctx.profile()
    if name and name != "auto":
        return name, "given"
    report = ctx.gpu_report()
    if not report.gpus:
        return None, ""
    gpu = min(report.gpus, key=lambda g: g.compute_capability)
    return profile_for_capability(gpu.compute_capability), f"chosen by {gpu.name}"


def _run_settings(ctx: DoctorContext, frozen_base: str | None, rollout: str | None = None) -> TrainSettings:
    """The run the checks size, as verlfit train's defaults with the doctor's options."""
    return TrainSettings(
        model=ctx.model,
        algorithm=ctx.algorithm,
        lora_rank=ctx.lora_rank,
        critic_lora_rank=ctx.critic_lora_rank if ctx.algorithm == "ppo" else None,
        frozen_base_dtype=frozen_base,
        rollout=rollout,
    )


def _customized_profile(ctx: DoctorContext, name: str):
    """Profile ``name`` (a known one) with the doctor's ``--rollout`` and ``--attention``; None where the profile
    refuses them (vLLM on the p40 and the like: the engines check reports it)."""
    try:
        return customize(load_profile(name), rollout=ctx.rollout, attention=ctx.attention)
    except VerlfitError:
        return None


def planned_frozen_base(ctx: DoctorContext) -> tuple[str | None, bool]:
    """(the LoRA base storage the checks should assume, whether verlfit train's planner chose it): ``ctx.frozen_base``
    as given, checked as train checks it; else, for a LoRA run whose profile and model shape are known, the storage
    :func:`verlfit.plan.fit.fit_memory` gives the run at train's default sizes on the profile's usable memory (nf4
    where nothing else fits one GPU with the HF rollout, patch 0028), None for the profile's 16-bit base.

    Raises:
        VerlfitError (exit status 2): a given storage train refuses: without LoRA
            (:func:`verlfit.arguments.refuse_lora_options_without_lora`), another 16-bit dtype than the profile's, nf4
            with the vLLM rollout (:func:`verlfit.plan.request.frozen_base_storage`).
    """
    if not _run_settings(ctx, ctx.frozen_base).has_lora:
        refuse_lora_options_without_lora({"--frozen-base-dtype": ctx.frozen_base})
        return ctx.frozen_base, False
    name, _ = run_profile_name(ctx)
    profile = _customized_profile(ctx, name) if name in PROFILE_NAMES else None
    if profile is None:
        return ctx.frozen_base, False
    if ctx.frozen_base is not None:
        frozen_base_storage(_run_settings(ctx, ctx.frozen_base, profile.rollout), profile)
        return ctx.frozen_base, False
    try:
        shape = load_model_shape(ctx.model, hub_cache_lookup=ctx.hub_cache_lookup)
    except VerlfitError:  # no local config.json: the model check says so
        return None, False
    settings = _run_settings(ctx, None, profile.rollout)
    request = request_from_settings(
        settings,
        profile,
        int(profile.gpu_memory_gib * GIB),
        shape=shape,
        switches=run_switches(profile, settings),
    )
    chosen = fit_memory(request).request.frozen_base_dtype
    return (NF4, True) if chosen == NF4 else (None, False)


def check_engines(ctx: DoctorContext) -> CheckResult:
    """The profile's rollout and attention, after ``ctx.rollout`` / ``ctx.attention``, against the packages they
    import (:func:`verlfit.checks.engines.missing_engine_packages`). The profile: ``ctx.profile()``, else the GPU's
    (as train's ``auto``)."""

    name, how = run_profile_name(ctx)
    if name is None:
        return CheckResult(
            "engines",
            SKIP,
            "no profile given (VERLFIT_PROFILE, --profile) and no GPU to choose one by: the rollout's and "
            "attention's packages not checked",
        )
    # an unknown profile, vLLM on p40, FlashAttention-2 in fp32 raise VerlfitError: run_checks reports its FAIL and fix
    profile = customize(load_profile(name), rollout=ctx.rollout, attention=ctx.attention)
    engines = f"profile {name} ({how}) with rollout {profile.rollout} and attention {profile.attention}"
    if ctx.frozen_base_planned:
        engines += f", the LoRA base in {ctx.frozen_base} as verlfit train plans it with its default sizes"
    missing = missing_engine_packages(
        profile.rollout, profile.attention, find_spec=ctx.find_spec, frozen_base=ctx.frozen_base
    )
    if missing:
        needs = " and ".join(f"{package} for {what}" for package, what, _ in missing)
        packages = [package for package, _, _ in missing]
        has = f"no {packages[0]}" if len(packages) == 1 else "neither"
        return CheckResult(
            "engines",
            FAIL,
            f"{engines} needs {needs}; this Python ({sys.executable}) has {has}: verl would fail a minute in, after "
            "Ray starts",
            f"pass {' '.join(option for _, _, option in missing)} to verlfit train (it then runs without "
            f"{' and '.join(packages)}), or run in the verlfit:{profile.name} image ("
            + ("both images have bitsandbytes" if "bitsandbytes" in packages else "it has vLLM and flash-attn")
            + ")",
        )
    needed = [
        ENGINE_PACKAGES[choice][0]
        for choice in (("rollout", profile.rollout), ("attention", profile.attention), ("frozen_base", ctx.frozen_base))
        if choice in ENGINE_PACKAGES
    ]
    if not needed:
        return CheckResult("engines", PASS, f"{engines}: no vllm or flash_attn needed")
    return CheckResult("engines", PASS, f"{engines}: {' and '.join(needed)} importable")


def _statvfs_free(path: str) -> int | None:
    """Bytes free at ``path`` as Ray counts them (``f_bsize * f_bavail``, ray 2.46 ``_private/utils.py:708-727``)."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    return stat.f_bsize * stat.f_bavail


def available_memory_bytes() -> int:
    """Available RAM as Ray estimates it when it sizes its object store:
    ``ray._private.utils.estimate_available_memory`` (total minus used, cgroup-aware); without ray, ``MemAvailable`` of
    ``/proc/meminfo`` read through psutil."""
    try:
        from ray._private.utils import estimate_available_memory  # lazy: only where Ray is asked
    except ImportError:
        import psutil  # lazy: only where memory is measured

        return int(psutil.virtual_memory().available)
    return int(estimate_available_memory())


def _ray_number(environ: Mapping[str, str], name: str, kind: type, default):
    """``name``'s value read as Ray reads it (ray 2.46 ``_private/ray_constants.py``: ``env_float`` is ``float()``,
    ``env_integer`` is ``int()`` of the text), or ``default`` when unset or empty.

    Raises:
        VerlfitError (exit status 2): a value Ray's own ``float()``/``int()`` refuses, which stops ``ray.init()``.
    """
    text = environ.get(name)
    if not text:
        return default
    try:
        return kind(text)
    except ValueError:
        unit = "a number (a fraction of the RAM, e.g. 0.3)" if kind is float else "a whole number of bytes"
        raise VerlfitError(
            f"{name}={text!r} is not {unit}: Ray reads it with {kind.__name__}() when it starts and fails on it",
            fix=f"unset {name}, or set it to {unit}",
            exit_code=2,
        ) from None


def ray_object_store_bytes(available_memory: int, shm_free: int, environ: Mapping[str, str] | None = None) -> int:
    """The object store size ``ray.init()`` picks by default on Linux (ray 2.46 ``_private/resource_spec.py:225-265``):
    ``RAY_DEFAULT_OBJECT_STORE_MEMORY_PROPORTION`` (0.3) x the available memory, capped at
    ``min(RAY_DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES (200 GB), max(10 GB, 0.95 x /dev/shm free))``. Ray then puts it in
    /dev/shm when /dev/shm has that many bytes free, else in /tmp (``_private/services.py:2136-2170``).

    With /dev/shm under 10 GB the store is min(30% of the RAM, 10 GB): 10 GB on any host with more than 33 GB free.

    Raises:
        VerlfitError (exit status 2): either variable holds what Ray cannot read (:func:`_ray_number`).
    """
    environ = os.environ if environ is None else environ
    proportion = _ray_number(environ, "RAY_DEFAULT_OBJECT_STORE_MEMORY_PROPORTION", float, RAY_OBJECT_STORE_PROPORTION)
    ceiling = _ray_number(environ, "RAY_DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES", int, RAY_OBJECT_STORE_MAX_BYTES)
    cap = min(ceiling, max(RAY_SHM_CAP_FLOOR_BYTES, int(shm_free * 0.95)))
    return min(int(available_memory * proportion), cap)


def check_shm(ctx: DoctorContext) -> CheckResult:
    free = (ctx.shm_size or _statvfs_free)(ctx.shm_path)
    if free is None:
        return CheckResult(
            "shm",
            FAIL,
            f"{ctx.shm_path} is missing: Ray reads its size when it starts "
            "(ray._private.utils.get_shared_memory_bytes) and fails without it",
            "run the container with a /dev/shm (Docker gives one; compose.yaml's shm_size: 11gb, or docker run "
            "--shm-size=11g)",
        )
    available = (ctx.available_memory or available_memory_bytes)()
    try:
        store = ray_object_store_bytes(available, free, ctx.environ)
    except VerlfitError as refused:  # a Ray variable Ray itself cannot read
        return CheckResult("shm", FAIL, refused.message, refused.fix)
    need_gib = math.ceil(store * 1.1 / GIB)  # Ray's own advice: the store x 1.1 (services.py:2170)
    what = (
        f"Ray's object store here is {store / 1e9:.1f} GB (30% of the {available / GIB:.1f} GiB available RAM, at "
        "most 10 GB)"
    )
    if free < store:
        return CheckResult(
            "shm",
            FAIL,
            f"{ctx.shm_path} has {free / 2**20:.0f} MiB free (Docker's default /dev/shm is 64 MiB); {what}: Ray "
            'would move it to /tmp, on disk ("This will harm performance!")',
            f"give the container {need_gib} GiB of shared memory: compose.yaml's shm_size: {need_gib}gb, or docker "
            f"run --shm-size={need_gib}g (or --ipc=host); "
            f"or cap Ray's store to fit: export RAY_DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES={int(free * 0.9)}",
        )
    return CheckResult("shm", PASS, f"{ctx.shm_path} has {free / GIB:.1f} GiB free; {what}: it fits")


def check_disk(ctx: DoctorContext) -> CheckResult:

    try:
        shape = load_model_shape(ctx.model, hub_cache_lookup=ctx.hub_cache_lookup)
    except VerlfitError:
        where = existing_parent(ctx.checkpoint_dir)
        return CheckResult(
            "disk",
            SKIP,
            f"model {ctx.model!r} has no local config.json that sizes a checkpoint (see the model line; free space "
            f"at {where} not judged)",
        )
    # the size depends on the profile through its 16-bit base dtype (2 bytes a parameter in every profile) and its
    # rollout (nf4 only with the HF one: sized with the a10 profile's vLLM default, an NF4 base was refused and counted
    # at 16 bits); with no profile known, the first stands in
    name, _ = run_profile_name(ctx)
    name = name if name in PROFILE_NAMES else PROFILE_NAMES[0]
    profile = _customized_profile(ctx, name) or load_profile(name)
    settings = _run_settings(ctx, ctx.frozen_base, profile.rollout)
    try:
        frozen_base_storage(settings, profile)
    except VerlfitError:  # a 16-bit dtype of another profile than the stand-in one: the same 2 bytes a parameter
        settings = _run_settings(ctx, None, profile.rollout)
    request = request_from_settings(settings, profile, 24 * GIB, shape=shape, switches=run_switches(profile, settings))
    return checkpoint_space(
        ctx.checkpoint_dir, checkpoint_disk_bytes(request), checkpoints_held(ctx.keep_checkpoints), ctx.disk_usage
    )


def check_cuda(ctx: DoctorContext) -> CheckResult:
    report = ctx.gpu_report()
    if not report.gpus:
        return _no_gpu("cuda", report)
    info = ctx.torch()
    if info is None:
        return CheckResult(
            "cuda",
            SKIP,
            "torch is not installed here: CUDA from torch not checked (run the doctor inside the verlfit image)",
        )
    if not info.cuda_version:
        return CheckResult(
            "cuda", FAIL, f"torch {info.version} is a CPU-only build", "install the CUDA 11.8 build of torch 2.6.0"
        )
    if not info.cuda_available:
        return CheckResult(
            "cuda",
            FAIL,
            f"torch {info.version} (CUDA {info.cuda_version}) sees no usable GPU although NVML does",
            "check the driver against CUDA 11.8 and that the container got the GPU (--gpus all); see the driver check",
        )
    if not info.allocation_ok:
        return CheckResult(
            "cuda",
            FAIL,
            f"torch {info.version} could not compute on the GPU: {info.error or 'wrong result'}",
            "check the driver (>= 520.61.05) and that no other process holds the GPU's memory",
        )
    return CheckResult(
        "cuda", PASS, f"torch {info.version} (CUDA {info.cuda_version}) allocated and computed on the GPU"
    )


def check_data(ctx: DoctorContext) -> CheckResult:
    """The ``data`` line: :func:`verlfit.checks.data_folder.check_data_folder` of ``ctx.data_dir`` with
    ``ctx.data_keys``."""
    return check_data_folder(
        ctx.data_dir, ctx.environ, ctx.timeout, ctx.head, ctx.dataset_cache_lookup, keys=ctx.data_keys
    )


def check_reward(ctx: DoctorContext) -> CheckResult:
    """The ``reward`` line: the checks ``verlfit train`` makes before launch on every row of ``train.parquet`` and
    ``test.parquet`` (:func:`verlfit.reward_function.check_reward_function` of ``ctx.reward_function``, or without
    one :func:`verlfit.reward_function.check_verl_scores`: every data_source scorable by verl); SKIP while the data
    is not prepared (the ``data`` line says why). A refusal (exit status 2 in train) is a FAIL with its fix."""

    prepared, _ = gsm8k.training_data(Path(ctx.data_dir))
    if not data_folder_state(prepared, ctx.data_keys).prepared:
        return CheckResult(
            "reward",
            SKIP,
            f"{prepared} holds no prepared data to score (see the data line)"
            + (f"; {ctx.reward_function} is checked once it does" if ctx.reward_function else ""),
        )
    if ctx.reward_function is not None:
        checked = check_reward_function(ctx.reward_function, prepared, ctx.data_keys)
        return CheckResult(
            "reward",
            PASS,
            f"{ctx.reward_function.name} in {ctx.reward_function.path} scores every row (called in a scratch"
            f" directory): {describe_scores(checked.scores)}{describe_printed(checked.printed)}",
        )
    scored = check_verl_scores(prepared, ctx.data_keys)
    return CheckResult(
        "reward",
        PASS,
        f"verl's default_compute_score scores every {ctx.data_keys.reward_fn_key} of {prepared}:"
        f" {describe_scores(scored)}{verl_ground_truth_note(scored)}",
    )


def check_model(ctx: DoctorContext) -> CheckResult:
    """The ``model`` line: :func:`verlfit.checks.model_folder.check_model_folder` of ``ctx.model``."""
    return check_model_folder(ctx.model, ctx.environ, ctx.timeout, ctx.head, ctx.hub_cache_lookup)


def check_patches(ctx: DoctorContext) -> CheckResult:
    """The ``patches`` line: :func:`verlfit.checks.patches.check_patches` of the installed verl (``ctx.verl_dir``,
    ``"auto"``: found) against the series (``ctx.series_path``, ``"auto"``: ``VERLFIT_PATCHES_DIR`` or the
    repository's)."""
    verl_dir = installed_verl_dir() if ctx.verl_dir == "auto" else ctx.verl_dir
    series = default_series(ctx.environ) if ctx.series_path == "auto" else ctx.series_path
    return check_patch_series(verl_dir, series)


CHECKS: dict[str, Callable[[DoctorContext], CheckResult]] = {
    "driver": check_driver,
    "gpu": check_gpu,
    "topology": check_topology,
    "torch-arch": check_torch_arch,
    "triton-shared-memory": check_triton_shared_memory,
    "environment": check_environment,
    "engines": check_engines,
    "shm": check_shm,
    "disk": check_disk,
    "data": check_data,
    "reward": check_reward,
    "model": check_model,
    "cuda": check_cuda,
    "patches": check_patches,
}


def run_checks(context: DoctorContext | None = None, names=CHECK_NAMES) -> list[CheckResult]:
    """Run the named checks (default: all, in :data:`CHECK_NAMES` order) against ``context``.

    A check that raises unexpectedly becomes a FAIL naming the exception, so the doctor never crashes.
    """
    context = context or DoctorContext()
    results = []
    for name in names:
        try:
            results.append(CHECKS[name](context))
        except VerlfitError as error:
            results.append(CheckResult(name, FAIL, error.message, error.fix))
        except Exception as error:  # the doctor reports; it does not crash
            results.append(
                CheckResult(
                    name,
                    FAIL,
                    f"the check itself failed: {type(error).__name__}: {error}",
                    "report this as a verlfit bug",
                )
            )
    return results


def blocking_checks(
    profile_name: str | None = None,
    data_dir: str | None = None,
    model: str | None = None,
    environment: Mapping[str, str] | None = None,
    context: DoctorContext | None = None,
    rollout: str | None = None,
    attention: str | None = None,
    data_keys: DataKeys | None = None,
    frozen_base: str | None = None,
) -> list[CheckResult]:
    """Run the fast checks ``verlfit train`` needs to pass before it starts Ray, and return the
    FAILs only (an empty list means: launch).

    The subset (:data:`BLOCKING`): driver, gpu (capability against ``profile_name``),
    triton-shared-memory, engines (vllm / flash_attn for ``rollout`` / ``attention``), shm, data, model, cuda,
    patches (a FAIL only: verl unpatched or carrying another
    series; its WARNs do not block). Missing data is a WARN, not a FAIL, when train can prepare it (raw
    files in ``data_dir``, the datasets cache or a reachable hub); a FAIL when nothing can give it.

    Args:
        profile_name: the profile train resolved.
        rollout, attention: train's rollout and attention (``--rollout`` / ``--attention``; None: the profile's).
        frozen_base: train's LoRA base storage as planned (``"nf4"``: bitsandbytes needed).
        data_dir, model: train's settings.
        data_keys: the data keys of train's overrides (``data.prompt_key``, ``data.reward_fn_key``).
        environment: the resolved knobs (e.g. ``TRITON_MAX_SHARED_MEMORY``); laid over ``os.environ``.
        context: a prepared :class:`DoctorContext` (tests); the other arguments then override its fields.
    """
    ctx = context or DoctorContext()
    if profile_name is not None:
        ctx.profile_name = profile_name
    if data_dir is not None:
        ctx.data_dir = data_dir
    if model is not None:
        ctx.model = model
    if rollout is not None:
        ctx.rollout = rollout
    if data_keys is not None:
        ctx.data_keys = data_keys
    if attention is not None:
        ctx.attention = attention
    if frozen_base is not None:
        ctx.frozen_base = frozen_base
    if environment:
        ctx.environ = {**ctx.environ, **environment}
    return [result for result in run_checks(ctx, BLOCKING) if result.status == FAIL]
