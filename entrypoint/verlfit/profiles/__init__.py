"""Hardware profiles as data: one YAML file per profile in this folder, validated on load.

A profile says how verl must run on one class of GPU: the environment defaults
(``VLLM_DTYPE``, ``TRITON_MAX_SHARED_MEMORY`` in bytes, ``PYTORCH_CUDA_ALLOC_CONF``), the dtype,
the attention implementation, the rollout engine, and the verl overrides that follow.

* ``p40``: compute capability 6.x. fp32, SDPA, HF rollout, no Triton. A 7.x card can still run it
  (``--profile p40``: fp32, the reference path); :func:`profile_choice_note` says what it then leaves off.
* ``t4`` and ``v100``: compute capability 7.x (T4 and RTX 20xx 7.5; V100 7.0). fp16 compute with fp32 master
  weights and dynamic loss scaling (patch 0024), SDPA, HF rollout in fp16: the cards have fp16 tensor cores but
  no bf16 and no FlashAttention-2 (both need 8.0). The two differ only in their reference card (usable memory,
  the ``--emulate`` cap) and its shared memory per block (64 KiB on 7.5 keeps Triton-backed features off,
  96 KiB on 7.0 allows them); their verl overrides are the same.
* ``a10``: compute capability >= 8.0 (A10, L4). bf16, FlashAttention-2, vLLM rollout.
* ``auto``: ``p40`` for 6.x, ``v100`` for 7.0-7.4, ``t4`` for 7.5-7.x, ``a10`` from 8.0 (:func:`select_profile`).

The options that pick a profile's card and its memory are checked here too, for ``verlfit train`` and ``verlfit plan``
alike: :func:`check_card_options` (``--emulate`` with another ``--profile`` or more memory than its card),
:func:`memory_limit_gib` (the per-worker cap a run's environment sets: :data:`MEMORY_LIMIT_VARIABLE`) and
:func:`beyond_the_card_note` (a run sized beyond the profile's card).

The ``verlfit profiles`` subcommand (:mod:`verlfit.commands.profiles`) lists them and prints a profile's environment
for the container entrypoint (``--env-shell``, :func:`environment_shell`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from importlib import resources

import yaml

from verlfit.cards import largest_memory_card
from verlfit.errors import VerlfitError
from verlfit.overrides import TRITON_MIN_SHARED_MEMORY

# the per-worker GPU memory cap in GiB that the patched verl applies with torch.cuda.set_per_process_memory_fraction
MEMORY_LIMIT_VARIABLE = "VERLFIT_GPU_MEMORY_LIMIT_GIB"

PROFILE_NAMES = ("p40", "t4", "v100", "a10")
FP16_PROFILES = ("t4", "v100")  # fp16 with loss scaling, for compute capability 7.x
ENVIRONMENT_KEYS = ("VLLM_DTYPE", "TRITON_MAX_SHARED_MEMORY", "PYTORCH_CUDA_ALLOC_CONF")
DEFAULTED_VARIABLE = "VERLFIT_PROFILE_DEFAULTS"  # knobs the entrypoint set from the image's profile
DTYPES = ("float32", "bfloat16", "float16")
ATTENTION = ("sdpa", "eager", "flash_attention_2")
ROLLOUTS = ("hf", "vllm")
FROZEN_BASE_DTYPES = ("bfloat16", "float16")  # a LoRA base's 16-bit storage (patch 0026); float32 is stock verl
_KEYS = {
    "name",
    "description",
    "image",
    "compute_capability",
    "gpu_memory_gib",
    "environment",
    "dtype",
    "attention",
    "rollout",
    "frozen_base_dtype",
    "overrides",
    "vllm",
    "fallbacks",
}
_REQUIRED = _KEYS - {"vllm", "fallbacks"}
_FALLBACKS = ("hf_rollout", "padded_training")


@dataclass(frozen=True)
class Profile:
    """One hardware profile (see the YAML files beside this module).

    Attributes:
        name: ``"p40"``, ``"t4"``, ``"v100"`` or ``"a10"``.
        description: one line for ``verlfit profiles``.
        image: the image built for it, e.g. ``"verlfit:p40"``.
        min_compute_capability: lowest ``(major, minor)`` that can run it.
        gpu_memory_gib: usable memory of the reference card in GiB (P40 and A10 24 GB, T4 16 GB, V100 32 GB;
            plan default and ``--emulate`` limit).
        environment: defaults for ``VLLM_DTYPE``, ``TRITON_MAX_SHARED_MEMORY`` (bytes, as
            text) and ``PYTORCH_CUDA_ALLOC_CONF``; user-set values win.
        dtype: torch dtype name of parameters and compute.
        attention: HF ``attn_implementation`` for actor, ref and critic.
        rollout: ``"hf"`` or ``"vllm"``.
        frozen_base_dtype: how a LoRA run stores its frozen base weights (patch 0026): ``"bfloat16"`` (p40, a10) or
            ``"float16"`` (t4, v100), 2 bytes a parameter; the run computes in ``dtype`` all the same.
        overrides: verl Hydra overrides (``key=value``, ``+key=value`` for keys absent from
            ``ppo_trainer.yaml``) that follow from the above.
        vllm_gpu_memory_utilization: vLLM's fraction of the card (vLLM profiles only).
        hf_rollout_overrides: added by :func:`customize` when a run falls back from the profile's vLLM to the HF
            rollout (``--rollout hf``): what the HF rollout needs that vLLM does not (the YAML's
            ``fallbacks.hf_rollout``).
        padded_training_overrides: added by :func:`customize` when a run leaves FlashAttention-2's packed sequences
            for padded ones (``--attention sdpa|eager``; the YAML's ``fallbacks.padded_training``).
    """

    name: str
    description: str
    image: str
    min_compute_capability: tuple[int, int]
    gpu_memory_gib: float
    environment: dict[str, str]
    dtype: str
    attention: str
    rollout: str
    frozen_base_dtype: str
    overrides: tuple[str, ...]
    vllm_gpu_memory_utilization: float | None = None
    hf_rollout_overrides: tuple[str, ...] = ()
    padded_training_overrides: tuple[str, ...] = ()
    source: str = field(default="", compare=False)


def _parse_capability(text: str, where: str) -> tuple[int, int]:
    try:
        major, minor = str(text).split(".")
        return int(major), int(minor)
    except ValueError:
        raise VerlfitError(f'{where}: compute_capability.min must look like "6.0", got {text!r}') from None


def parse_profile(data: dict, source: str) -> Profile:
    """Validate one profile's parsed YAML and return it.

    Raises:
        VerlfitError: naming ``source`` and the offending key, for a missing or unknown key,
            an environment default that is not one of the three knobs, or a value outside
            the allowed set.
    """
    if not isinstance(data, dict):
        raise VerlfitError(f"{source}: a profile must be a mapping, got {type(data).__name__}")
    missing = sorted(_REQUIRED - data.keys())
    unknown = sorted(data.keys() - _KEYS)
    if missing:
        raise VerlfitError(f"{source}: missing keys {missing}")
    if unknown:
        raise VerlfitError(f"{source}: unknown keys {unknown} (allowed: {sorted(_KEYS)})")
    environment = data["environment"]
    if not isinstance(environment, dict) or set(environment) != set(ENVIRONMENT_KEYS):
        raise VerlfitError(
            f"{source}: environment must set exactly {list(ENVIRONMENT_KEYS)}, got {sorted(environment or {})}"
        )
    try:
        int(environment["TRITON_MAX_SHARED_MEMORY"])
    except (TypeError, ValueError):
        raise VerlfitError(
            f"{source}: TRITON_MAX_SHARED_MEMORY must be a number of bytes, got "
            f"{environment['TRITON_MAX_SHARED_MEMORY']!r}"
        ) from None
    checked = (
        ("dtype", DTYPES),
        ("attention", ATTENTION),
        ("rollout", ROLLOUTS),
        ("frozen_base_dtype", FROZEN_BASE_DTYPES),
    )
    for key, allowed in checked:
        if data[key] not in allowed:
            raise VerlfitError(f"{source}: {key} must be one of {list(allowed)}, got {data[key]!r}")
    if environment["VLLM_DTYPE"] not in DTYPES:
        raise VerlfitError(f"{source}: VLLM_DTYPE must be one of {list(DTYPES)}, got {environment['VLLM_DTYPE']!r}")
    overrides = data["overrides"]
    if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
        raise VerlfitError(f"{source}: overrides must be a list of 'key=value' strings")
    fallbacks = data.get("fallbacks") or {}
    if not isinstance(fallbacks, dict) or set(fallbacks) - set(_FALLBACKS):
        raise VerlfitError(
            f"{source}: fallbacks must be a mapping with the keys {list(_FALLBACKS)}, got "
            f"{sorted(fallbacks) if isinstance(fallbacks, dict) else fallbacks!r}"
        )
    for name, listed in fallbacks.items():
        if not isinstance(listed, list) or not all(isinstance(o, str) and "=" in o for o in listed):
            raise VerlfitError(f"{source}: fallbacks.{name} must be a list of 'key=value' strings")
    vllm = data.get("vllm") or {}
    utilization = vllm.get("gpu_memory_utilization")
    if data["rollout"] == "vllm" and not (isinstance(utilization, (int, float)) and 0 < utilization < 1):
        raise VerlfitError(f"{source}: a vllm profile needs vllm.gpu_memory_utilization in (0, 1), got {utilization!r}")
    return Profile(
        name=data["name"],
        description=data["description"],
        image=data["image"],
        min_compute_capability=_parse_capability(data["compute_capability"].get("min"), source),
        gpu_memory_gib=float(data["gpu_memory_gib"]),
        environment={key: str(value) for key, value in environment.items()},
        dtype=data["dtype"],
        attention=data["attention"],
        rollout=data["rollout"],
        frozen_base_dtype=data["frozen_base_dtype"],
        overrides=tuple(overrides),
        vllm_gpu_memory_utilization=float(utilization) if utilization is not None else None,
        hf_rollout_overrides=tuple(fallbacks.get("hf_rollout") or ()),
        padded_training_overrides=tuple(fallbacks.get("padded_training") or ()),
        source=source,
    )


def load_profile(name: str) -> Profile:
    """Load and validate the profile ``name`` (one of :data:`PROFILE_NAMES`).

    Raises:
        VerlfitError: for an unknown name (listing the known ones) or an invalid file.
    """
    if name not in PROFILE_NAMES:
        raise VerlfitError(
            f"unknown profile {name!r}", fix=f"use one of: {', '.join(PROFILE_NAMES)}, auto", exit_code=2
        )
    source = f"profiles/{name}.yaml"
    text = resources.files(__name__).joinpath(f"{name}.yaml").read_text()
    profile = parse_profile(yaml.safe_load(text), source)
    if profile.name != name:
        raise VerlfitError(f"{source}: name is {profile.name!r}, expected {name!r}")
    return profile


def profile_for_capability(compute_capability: tuple[int, int]) -> str:
    """Name the profile for a compute capability: ``p40`` for 6.x, ``v100`` for 7.0-7.4 (V100 7.0, Jetson Xavier
    7.2), ``t4`` for 7.5 and above below 8.0 (T4, RTX 20xx), ``a10`` from 8.0.

    Raises:
        VerlfitError: below 6.0 (torch 2.6.0+cu118 has no kernels for it before sm_50, and
            verlfit has no profile for 5.x).
    """
    if compute_capability < (6, 0):
        raise VerlfitError(
            f"compute capability {compute_capability[0]}.{compute_capability[1]} is below 6.0: no verlfit profile "
            "runs on it"
        )
    if compute_capability < (7, 0):
        return "p40"
    if compute_capability < (8, 0):
        return "v100" if compute_capability < (7, 5) else "t4"
    return "a10"


# the card a profile was made for (README.md's card table: Tesla P40 6.1; T4 7.5; V100 7.0)
REFERENCE_CAPABILITY = {"p40": (6, 1), "t4": (7, 5), "v100": (7, 0)}
REFERENCE_CARD = {"p40": "Tesla P40", "t4": "T4 (16 GB)", "v100": "V100 (32 GB)"}


def profile_choice_note(profile_name: str, gpu) -> str | None:
    """Why ``profile_name`` runs on ``gpu`` (a :class:`verlfit.gpu.GpuInfo`), when that needs saying: a card the
    profile was not made for, and what it could use that the profile leaves off; for the fp16 profiles (t4, v100)
    on any 7.x card, why fp16 and what it changes. None for the p40 profile on 6.1, a10 on 8.0 and newer, and a card
    the profile cannot run.

    Facts (:class:`verlfit.gpu.GpuInfo`'s supports_* properties, which name their sources): bf16 and FlashAttention-2
    need compute capability 8.0; Triton (torch.compile's Inductor, Triton kernels) and vLLM need 7.0; fp16 tensor cores
    from 7.0 (cards.py: T4 65 TFLOP/s fp16 against 8.1 fp32, V100 125 against 15.7). Printed by ``verlfit train`` at
    launch (and in its dry run) and by ``verlfit doctor``'s gpu check.
    """
    capability = tuple(gpu.compute_capability)
    where = f"{gpu.name} (compute capability {gpu.compute_capability_text})"
    if profile_name in FP16_PROFILES:
        if not (7, 0) <= capability < (8, 0):
            return None
        note = (
            f"profile {profile_name} for {where}: fp16 tensor cores but no bf16 and no FlashAttention-2 (both need "
            "8.0), so fp16 compute "
            "with fp32 master weights and dynamic loss scaling (an overflowing update is skipped and shows in the "
            "progress line); "
            "--profile p40 runs it in fp32"
        )
        if capability != REFERENCE_CAPABILITY[profile_name]:
            note += (
                f"; the {profile_name} profile is made for the {REFERENCE_CARD[profile_name]} (compute capability "
                f"{'.'.join(map(str, REFERENCE_CAPABILITY[profile_name]))}): same code paths, its shared memory "
                "per block decides Triton"
            )
        return note
    if profile_name != "p40" or capability == REFERENCE_CAPABILITY["p40"] or not (6, 0) <= capability < (8, 0):
        return None
    why = (
        f"profile p40 for {where}: below 8.0 there is no bf16 and no FlashAttention-2, which the a10 profile is "
        "built on"
    )
    if capability[0] == 7:
        shared = load_profile("p40").environment["TRITON_MAX_SHARED_MEMORY"]
        return why + (
            f"; this card could also run fp16 on its tensor cores (the {profile_for_capability(capability)} profile, "
            "which auto picks), "
            "Triton (torch.compile, Triton kernels) and vLLM (both need 7.0), which the p40 profile leaves off (its "
            f"TRITON_MAX_SHARED_MEMORY={shared}, "
            f"under the {TRITON_MIN_SHARED_MEMORY} B verlfit asks for Triton, keeps torch.compile, liger and fused "
            "kernels off; HF rollout)"
        )
    return why + "; it has the P40's other limits too (Triton and vLLM need 7.0), so the profile leaves nothing off"


def select_profile(name: str, gpu=None) -> Profile:
    """Resolve ``name`` (one of :data:`PROFILE_NAMES`, or ``auto``) against the visible GPU.

    Args:
        name: the requested profile.
        gpu: a :class:`verlfit.gpu.GpuInfo` or None when no GPU is visible (dry runs).

    Raises:
        VerlfitError: ``auto`` with no GPU; or a profile the GPU cannot run, naming the GPU,
            its compute capability and the profile/image to use instead.
    """
    if name == "auto":
        if gpu is None:
            raise VerlfitError(
                "--profile auto needs a visible GPU to choose by compute capability",
                fix=f"pass --profile with one of {', '.join(PROFILE_NAMES)}",
            )
        name = profile_for_capability(gpu.compute_capability)
    profile = load_profile(name)
    if gpu is not None and gpu.compute_capability < profile.min_compute_capability:
        instead = profile_for_capability(gpu.compute_capability)
        need = ".".join(map(str, profile.min_compute_capability))
        raise VerlfitError(
            f"profile {profile.name!r} needs compute capability >= {need} "
            f"({'fp16 tensor cores' if profile.name in FP16_PROFILES else 'bf16, FlashAttention-2, vLLM'}), "
            f"but GPU {gpu.index} is a {gpu.name} with compute capability {gpu.compute_capability_text}",
            fix=f"use --profile {instead} (image {load_profile(instead).image})",
        )
    return profile


_ATTENTION_KEYS = ("+actor_rollout_ref.model.attn_implementation", "+critic.model.attn_implementation")
_PADDING_KEYS = ("actor_rollout_ref.model.use_remove_padding", "critic.model.use_remove_padding")
# vLLM-only keys of a vllm profile, dropped when its rollout becomes HF generate
_VLLM_ONLY_KEYS = ("actor_rollout_ref.rollout.enforce_eager", "actor_rollout_ref.rollout.free_cache_engine")


def customize(profile: Profile, rollout: str | None = None, attention: str | None = None) -> Profile:
    """``profile`` with another rollout engine or attention implementation (pure; None keeps the profile's).

    Used by ``verlfit train --rollout/--attention``: e.g. an A10 without vLLM (``--rollout hf``), or eager
    attention to compare against the public P40 recipe. The overrides follow: ``rollout.name``; for HF, the
    vLLM-only keys dropped and no vLLM memory share; ``attn_implementation`` for actor/ref and critic; and
    ``use_remove_padding`` on only with FlashAttention-2 (verl packs sequences for FA2's varlen kernel; with
    SDPA or eager packed sequences would attend across each other); and the profile's ``fallbacks``: for a run
    that leaves vLLM for the HF rollout, the HF rollout's speed keys (patches 0021-0022), and for one that leaves
    packed sequences, the padded path's trimming (patch 0020).

    Raises:
        VerlfitError: a value that is not a rollout/attention name; vLLM on a profile whose cards are below
            compute capability 7.0 (vLLM's minimum); FlashAttention-2 with an fp32 profile (FA2 runs only
            fp16/bf16) or below compute capability 8.0.
    """
    if rollout is not None and rollout not in ROLLOUTS:
        raise VerlfitError(f"rollout {rollout!r} is not one of {', '.join(ROLLOUTS)}", exit_code=2)
    if attention is not None and attention not in ATTENTION:
        raise VerlfitError(f"attention {attention!r} is not one of {', '.join(ATTENTION)}", exit_code=2)
    rollout = rollout or profile.rollout
    attention = attention or profile.attention
    if rollout == profile.rollout and attention == profile.attention:
        return profile
    if rollout == "vllm" and profile.min_compute_capability < (7, 0):
        raise VerlfitError(
            f"--rollout vllm with the {profile.name} profile: vLLM needs compute capability 7.0 and the "
            f"verlfit:{profile.name} image has no vLLM",
            fix="use --rollout hf (the profile's HF generate rollout)",
            exit_code=2,
        )
    if rollout == "vllm" and profile.rollout != "vllm":
        raise VerlfitError(
            f"--rollout vllm with the {profile.name} profile: it runs in the {profile.image} image, which has no "
            "vLLM, and verlfit has no vLLM settings for it (docs/fp16.md has an unmeasured recipe with the a10 "
            "image's vLLM on compute capability 7.x)",
            fix="use --rollout hf (the profile's HF generate rollout)",
            exit_code=2,
        )
    if attention == "flash_attention_2" and (profile.dtype == "float32" or profile.min_compute_capability < (8, 0)):
        raise VerlfitError(
            f"--attention flash_attention_2 with the {profile.name} profile: FlashAttention-2 needs compute "
            f"capability 8.0 and fp16/bf16 (the profile computes in {profile.dtype})",
            fix="use --attention sdpa or eager",
            exit_code=2,
        )
    overrides = []
    for override in profile.overrides:
        key = override.split("=", 1)[0]
        if key in _ATTENTION_KEYS:
            override = f"{key}={attention}"
        elif key in _PADDING_KEYS:
            override = f"{key}={attention == 'flash_attention_2'}"
        elif key == "actor_rollout_ref.rollout.name":
            override = f"{key}={rollout}"
        elif key in _VLLM_ONLY_KEYS and rollout == "hf":
            continue
        overrides.append(override)
    if rollout == "hf" and profile.rollout != "hf":
        overrides += profile.hf_rollout_overrides
    if attention != "flash_attention_2" and profile.attention == "flash_attention_2":
        overrides += profile.padded_training_overrides
    changed = [
        f"{what} {value}"
        for what, value, old in (("rollout", rollout, profile.rollout), ("attention", attention, profile.attention))
        if value != old
    ]
    return replace(
        profile,
        description=f"{profile.description} (with {', '.join(changed)})",
        rollout=rollout,
        attention=attention,
        overrides=tuple(overrides),
        vllm_gpu_memory_utilization=profile.vllm_gpu_memory_utilization if rollout == "vllm" else None,
    )


# one option of PYTORCH_CUDA_ALLOC_CONF: name:value, where a value may be a bracketed list with commas
# (roundup_power2_divisions:[256:1,512:2]); the option names themselves are torch's to check
_ALLOCATOR_OPTION = re.compile(r"\s*(?P<name>[A-Za-z_]\w*)\s*:\s*(?P<value>\[[^\]]*\]|[^,\[\]\s:]+)\s*")


def run_profile(
    name: str, gpu=None, rollout: str | None = None, attention: str | None = None
) -> tuple[Profile, Profile]:
    """(the profile ``name`` chosen against ``gpu``, the same after ``--rollout``/``--attention``): how ``verlfit
    train`` and ``verlfit bench`` resolve a run's profile (:func:`select_profile`, then
    :func:`customize`). ``name``: a profile name or ``auto``; ``gpu``: a
    :class:`verlfit.gpu.GpuInfo`, or None (no GPU looked for or visible).

    Raises:
        VerlfitError: ``auto`` without a GPU, a profile the GPU cannot run, a rollout or attention the profile
            cannot run.
    """
    profile = select_profile(name, gpu)
    return profile, customize(profile, rollout=rollout, attention=attention)


# The options torch 2.6.0 (the images' torch) reads from PYTORCH_CUDA_ALLOC_CONF: c10/cuda/CUDAAllocatorConfig.cpp,
# CUDAAllocatorConfig::parseArgs, whose last branch is TORCH_CHECK(false, "Unrecognized CachingAllocator option: ").
ALLOCATOR_OPTIONS = (
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "garbage_collection_threshold",
    "roundup_power2_divisions",
    "backend",
    "expandable_segments",
    "release_lock_on_cudamalloc",
    "pinned_use_cuda_host_register",
    "pinned_num_register_threads",
    "pinned_use_background_threads",
)


def allocator_config_is_well_formed(text: str) -> bool:
    """Whether ``text`` has the syntax torch's ``CUDAAllocatorConfig`` parses: ``option:value`` entries
    separated by commas. Option names are not checked (they differ between torch versions)."""
    position = 0
    while True:
        match = _ALLOCATOR_OPTION.match(text, position)
        if match is None:
            return False
        position = match.end()
        if position == len(text):
            return True
        if text[position] != ",":
            return False
        position += 1


def allocator_option_names(text: str) -> list[str]:
    """The option names of a well-formed ``PYTORCH_CUDA_ALLOC_CONF`` (:func:`allocator_config_is_well_formed`), in
    order: ``["expandable_segments", "roundup_power2_divisions"]`` for
    ``expandable_segments:True,roundup_power2_divisions:[256:1,512:2]``."""
    names, position = [], 0
    while position < len(text):
        match = _ALLOCATOR_OPTION.match(text, position)
        if match is None:
            break
        names.append(match["name"])
        position = match.end() + 1  # past the comma
    return names


def allocator_options(text: str) -> list[tuple[str, str]]:
    """The ``(name, value)`` pairs of a well-formed ``PYTORCH_CUDA_ALLOC_CONF``
    (:func:`allocator_config_is_well_formed`), in order, each value without the spaces torch's lexer drops:
    ``[("max_split_size_mb", "256"), ("roundup_power2_divisions", "[256:1,512:2]")]``."""
    pairs, position = [], 0
    while position < len(text):
        match = _ALLOCATOR_OPTION.match(text, position)
        if match is None:
            break
        pairs.append((match["name"], match["value"].replace(" ", "")))
        position = match.end() + 1  # past the comma
    return pairs


# What torch 2.6.0 (the images' torch) takes as each option's value, and an example for the fix. Source:
# c10/cuda/CUDAAllocatorConfig.cpp of torch 2.6.0, CUDAAllocatorConfig::parseArgs and its parse* functions, which
# TORCH_CHECK each value (checked against that release's own parser: the torch-2.6.0 wheel's libc10_cuda.so, its
# CUDAAllocatorConfig::parseArgs called on each value of tests/test_profiles.py's TORCH_2_6_ANSWERS):
# * expandable_segments, release_lock_on_cudamalloc, pinned_use_cuda_host_register, pinned_use_background_threads:
#   exactly "True" or "False" ("Expected a single True/False argument for ...");
# * garbage_collection_threshold: std::stod, then 0 < value < 1 ("garbage_collect_threshold too small/too big");
# * max_split_size_mb, max_non_split_rounding_mb: std::stoi (its leading whole number, an int), as a size_t above
#   kLargeBuffer / 1 MiB = 20 ("CachingAllocator option ... too small, must be > 20");
# * roundup_power2_divisions: std::stoi, a power of 2; or a bracketed list of SIZE:DIVISIONS, SIZE a power of 2
#   (std::stoul) or ">", DIVISIONS 0 or a power of 2 ("For roundups, the divisons has to be power of 2 ...");
# * backend: "native" or "cudaMallocAsync" ("Unknown allocator backend, options are native and cudaMallocAsync");
# * pinned_num_register_threads: std::stoi, a power of 2 up to 128 (pinned_max_register_threads()).
ALLOCATOR_VALUES = {
    "expandable_segments": ("True or False (capitalised)", "True"),
    "release_lock_on_cudamalloc": ("True or False (capitalised)", "False"),
    "pinned_use_cuda_host_register": ("True or False (capitalised)", "False"),
    "pinned_use_background_threads": ("True or False (capitalised)", "False"),
    "garbage_collection_threshold": ("a number between 0 and 1, both excluded (e.g. 0.6)", "0.6"),
    "max_split_size_mb": ("a whole number of MiB above 20", "256"),
    "max_non_split_rounding_mb": ("a whole number of MiB above 20", "256"),
    "roundup_power2_divisions": (
        "a power of 2, or a bracketed list of SIZE:DIVISIONS with SIZE a power of 2 or > and DIVISIONS 0 or a power"
        " of 2 (e.g. [256:1,512:2,>:4])",
        "4",
    ),
    "backend": ("native or cudaMallocAsync", "native"),
    "pinned_num_register_threads": ("a power of 2 from 1 to 128", "8"),
}
_SIZE_T = 2**64  # torch stores stoi's int in a size_t: a negative number wraps
_INT_RANGE = range(-(2**31), 2**31)  # std::stoi's: beyond it, std::out_of_range


def _leading_int(text: str, unsigned: bool = False) -> int | None:
    """What ``std::stoi`` (``std::stoul``: ``unsigned``) reads from ``text``, as the ``size_t`` torch stores it; None
    where it throws (no leading whole number, or one out of its range)."""
    match = re.match(r"[+-]?\d+", text)
    if match is None:
        return None
    number = int(match.group())
    if not unsigned and number not in _INT_RANGE or unsigned and abs(number) >= _SIZE_T:
        return None
    return number % _SIZE_T


def _leading_float(text: str) -> float | None:
    """What ``std::stod`` reads from ``text`` (a leading decimal number, inf or nan); None where it throws."""
    match = re.match(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|nan)", text, flags=re.I)
    return float(match.group()) if match else None


def _power_of_two(number: int | None) -> bool:
    return number is not None and number > 0 and number & (number - 1) == 0


def allocator_value_accepted(name: str, value: str) -> bool:
    """Whether torch 2.6.0 takes ``value`` (spaces removed) for the allocator option ``name`` (:data:`ALLOCATOR_VALUES`
    says what it takes); True for an option without a rule here."""
    if name in (
        "expandable_segments",
        "release_lock_on_cudamalloc",
        "pinned_use_cuda_host_register",
        "pinned_use_background_threads",
    ):
        return value in ("True", "False")
    if name == "garbage_collection_threshold":
        threshold = _leading_float(value)
        return threshold is not None and 0 < threshold < 1
    if name in ("max_split_size_mb", "max_non_split_rounding_mb"):
        size = _leading_int(value)
        return size is not None and size > 20
    if name == "backend":
        return value in ("native", "cudaMallocAsync")
    if name == "pinned_num_register_threads":
        threads = _leading_int(value)
        return _power_of_two(threads) and threads <= 128
    if name == "roundup_power2_divisions":
        if not value.startswith("["):
            return _power_of_two(_leading_int(value))
        for item in filter(None, value[1:-1].split(",")):
            size, colon, divisions = item.partition(":")
            number = _leading_int(divisions)
            if not colon or number is None or number != 0 and not _power_of_two(number):
                return False
            if size != ">" and not _power_of_two(_leading_int(size, unsigned=True)):
                return False
        return True
    return True


def resolve_environment(profile: Profile, environ: dict[str, str]) -> dict[str, str]:
    """Return the three knobs' values: the user's where set (an empty value too), else the profile's.

    An empty ``PYTORCH_CUDA_ALLOC_CONF`` is how a user switches the profile's allocator settings off (torch's own
    defaults then apply); an empty ``VLLM_DTYPE`` or ``TRITON_MAX_SHARED_MEMORY`` has no meaning and is refused.

    ``environ`` is typically ``os.environ``. Only the keys in ``ENVIRONMENT_KEYS`` are returned. A knob whose
    ``KEY=VALUE`` is in ``$VERLFIT_PROFILE_DEFAULTS`` still holds what the container entrypoint set from the
    image's profile, not a user's value, and is replaced by ``profile``'s value.

    Raises:
        VerlfitError (exit status 2, a usage error like every bad environment value): for a ``VLLM_DTYPE`` that is
            not a torch dtype name verl's rollout accepts,
            a ``TRITON_MAX_SHARED_MEMORY`` that is not a whole number of bytes, or a
            ``PYTORCH_CUDA_ALLOC_CONF`` that is not a comma-separated list of ``option:value``, names an option torch
            does not have (:data:`ALLOCATOR_OPTIONS`) or gives one a value torch 2.6 refuses
            (:func:`allocator_value_accepted`): torch reads it only when a worker first touches CUDA, minutes into a
            run, and stops there.
    """
    # knobs the image's entrypoint filled in from the image's own profile are defaults, not the user's choice:
    # with another profile (--emulate p40 in the a10 image) that profile's values apply
    # (KEY=VALUE pairs: a value the user exported afterwards differs from the recorded one and stays the user's)
    defaulted = dict(token.split("=", 1) for token in environ.get(DEFAULTED_VARIABLE, "").split() if "=" in token)
    resolved = {
        key: environ[key] if key in environ and environ[key] != defaulted.get(key) else profile.environment[key]
        for key in ENVIRONMENT_KEYS
    }
    if resolved["VLLM_DTYPE"] not in DTYPES:
        raise VerlfitError(
            f"VLLM_DTYPE={resolved['VLLM_DTYPE']!r} is not a rollout dtype",
            fix=f"unset it (the {profile.name} profile uses {profile.environment['VLLM_DTYPE']}) or set one of: "
            f"{', '.join(DTYPES)}",
            exit_code=2,
        )
    if resolved["PYTORCH_CUDA_ALLOC_CONF"] and not allocator_config_is_well_formed(resolved["PYTORCH_CUDA_ALLOC_CONF"]):
        raise VerlfitError(
            f"PYTORCH_CUDA_ALLOC_CONF={resolved['PYTORCH_CUDA_ALLOC_CONF']!r} is not a comma-separated list of "
            "option:value",
            fix=f"unset it (the {profile.name} profile uses {profile.environment['PYTORCH_CUDA_ALLOC_CONF']}) or "
            "write e.g. expandable_segments:True,max_split_size_mb:256",
            exit_code=2,
        )
    unknown = [
        name for name in allocator_option_names(resolved["PYTORCH_CUDA_ALLOC_CONF"]) if name not in ALLOCATOR_OPTIONS
    ]
    if unknown:
        raise VerlfitError(
            f"PYTORCH_CUDA_ALLOC_CONF={resolved['PYTORCH_CUDA_ALLOC_CONF']!r} names {', '.join(map(repr, unknown))}, "
            'not an option of torch\'s CUDA allocator: torch stops with "Unrecognized CachingAllocator option" when a '
            "worker first touches CUDA, minutes into the run",
            fix=f"unset it (the {profile.name} profile uses {profile.environment['PYTORCH_CUDA_ALLOC_CONF']!r}) or use "
            f"torch's options: {', '.join(ALLOCATOR_OPTIONS)}",
            exit_code=2,
        )
    refused = [
        (name, value)
        for name, value in allocator_options(resolved["PYTORCH_CUDA_ALLOC_CONF"])
        if not allocator_value_accepted(name, value)
    ]
    if refused:
        name, value = refused[0]
        accepted, example = ALLOCATOR_VALUES[name]
        raise VerlfitError(
            f"PYTORCH_CUDA_ALLOC_CONF={resolved['PYTORCH_CUDA_ALLOC_CONF']!r} sets {name} to {value!r}: torch 2.6 "
            f"takes {accepted} there, and stops on any other value when a worker first touches CUDA, minutes into "
            "the run",
            fix=f"unset it (the {profile.name} profile uses {profile.environment['PYTORCH_CUDA_ALLOC_CONF']!r}) or "
            f"write {name}:{example}",
            exit_code=2,
        )
    if not resolved["TRITON_MAX_SHARED_MEMORY"].isdigit():
        raise VerlfitError(
            f"TRITON_MAX_SHARED_MEMORY={resolved['TRITON_MAX_SHARED_MEMORY']!r} is not a number of bytes",
            fix=f"unset it (the {profile.name} profile uses {profile.environment['TRITON_MAX_SHARED_MEMORY']}) or set "
            "e.g. 49152 (48 KiB)",
            exit_code=2,
        )
    return resolved


def check_rollout_dtype(
    profile: Profile, environment: dict[str, str], compute_capability: tuple[int, int], where: str
) -> None:
    """Refuse ``VLLM_DTYPE=bfloat16`` below compute capability 8.0 (bf16 needs Ampere).

    ``environment`` is :func:`resolve_environment`'s result; ``where`` names the card for the message
    (e.g. ``"Tesla P40 (compute capability 6.1)"``). Used by ``verlfit train`` and ``verlfit doctor``.

    Raises:
        VerlfitError: naming ``where`` and the profile's own rollout dtype as the fix.
    """
    if environment["VLLM_DTYPE"] == "bfloat16" and compute_capability < (8, 0):
        raise VerlfitError(
            f"VLLM_DTYPE=bfloat16 on {where}: bf16 needs 8.0",
            fix=f"unset VLLM_DTYPE (the {profile.name} profile uses {profile.environment['VLLM_DTYPE']})",
            exit_code=2,
        )


def check_card_options(emulate: str | None, profile: str | None, memory_gib: float | None, memory_option: str) -> None:
    """Refuse card options that do not go together, for ``verlfit train`` and ``verlfit plan`` alike: ``--emulate``
    with another ``--profile``, and ``--emulate`` with a memory (``memory_option``: train's ``--gpu-memory-limit``,
    plan's ``--gpu-memory``; GiB) above the emulated card's usable memory (its profile's ``gpu_memory_gib``), which
    would no longer be that card. A smaller memory is a tighter card and stays allowed.

    Raises:
        VerlfitError (exit status 2): naming both options, with the one that expresses what was meant.
    """
    if emulate and profile not in (None, "auto", emulate):
        raise VerlfitError(
            f"--profile {profile} and --emulate {emulate} disagree",
            fix=f"--emulate {emulate} already selects the {emulate} profile: drop --profile",
            exit_code=2,
        )
    if emulate and memory_gib is not None:
        card = load_profile(emulate).gpu_memory_gib
        if memory_gib > card:
            raise VerlfitError(
                f"{memory_option} {memory_gib:g} with --emulate {emulate}: more than the {emulate} card's "
                f"{card:g} GiB usable, so it would no longer emulate that card",
                fix=f"drop {memory_option} (--emulate {emulate} caps each worker at {card:g} GiB), or use "
                f"--profile {emulate} {memory_option} {memory_gib:g} for the {emulate} profile's code "
                f"paths with {memory_gib:g} GiB",
                exit_code=2,
            )


def beyond_the_card_note(profile, memory_gib: float | None) -> str | None:
    """The label of a plan or run sized for more memory (GiB) than the profile's own card has (its
    ``gpu_memory_gib``: ``--profile p40 --gpu-memory-limit 100``): the profile's code paths, not its card; None
    otherwise."""
    if memory_gib is None or memory_gib <= profile.gpu_memory_gib:
        return None
    return (
        f"more than the {profile.name} profile's card has ({profile.gpu_memory_gib:g} GiB usable): the "
        f"{profile.name} profile's code paths with {memory_gib:g} GiB, no longer a {profile.name} card"
    )


def memory_above_every_card(text: str, value: float) -> str | None:
    """Why ``value`` GiB (``text`` as given) is no GPU memory: more than the largest card verlfit knows
    (:func:`verlfit.cards.largest_memory_card`), with the unit the value takes, the range, and what it would be read as
    bytes (from 2**20) or MiB (from 2**10); None within the range. For ``--gpu-memory-limit``, ``plan --gpu-memory``
    and ``VERLFIT_GPU_MEMORY_LIMIT_GIB``."""
    largest = largest_memory_card()
    if value <= largest.memory_gb:
        return None
    if value >= 2**20:  # a mebibyte or more, read as bytes
        read_as = f"; read as bytes, {text} would be {value / 2**30:.2g} GiB"
    elif value >= 2**10:
        read_as = f"; read as MiB, {text} would be {value / 2**10:g} GiB"
    else:
        read_as = ""
    return (
        f"is more than any GPU verlfit knows has (the largest, {largest.name}, {largest.memory_gb:g} GB): the value is "
        f"in GiB (2**30 bytes) per GPU, from 1 to {largest.memory_gb:g} (a P40 leaves 22.5){read_as}"
    )


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
        too_much = memory_above_every_card(text, value)
        if too_much:
            raise VerlfitError(
                f"{MEMORY_LIMIT_VARIABLE}={text!r} {too_much}",
                fix=f"unset it, or use --gpu-memory-limit GIB (e.g. {MEMORY_LIMIT_VARIABLE}=22.5)",
                exit_code=2,
            )
        return value
    return None


def environment_shell(profile: Profile) -> str:
    """Shell lines that set each knob to the profile default unless the user set it.

    Example line: ``export VLLM_DTYPE="${VLLM_DTYPE-float32}"`` (``-``, not ``:-``: a value the user set empty, such as
    ``-e PYTORCH_CUDA_ALLOC_CONF=`` to switch the allocator settings off, stays empty); the first lines list the knobs
    the user left unset, with the values given them, in ``$VERLFIT_PROFILE_DEFAULTS`` (see :func:`resolve_environment`).
    Used by ``entrypoint/entrypoint.sh`` through ``verlfit profiles --env-shell NAME``.
    """
    # first record which knobs the user left unset (their values below are the profile's, not the user's)
    lines = [f'{DEFAULTED_VARIABLE}="${{{DEFAULTED_VARIABLE}:-}}"']  # an outer entrypoint's list stays
    for key in ENVIRONMENT_KEYS:
        if not re.fullmatch(r"[A-Za-z0-9_.:,=+\-]+", profile.environment[key]):
            raise VerlfitError(
                f"profile {profile.name}: {key}={profile.environment[key]!r} holds characters the entrypoint cannot "
                "record",
                fix="use letters, digits and _ . : , = + - in profile environment values",
            )
    lines += [
        f'[ -n "${{{key}+set}}" ] || {DEFAULTED_VARIABLE}="${{{DEFAULTED_VARIABLE}}} {key}={profile.environment[key]}"'
        for key in ENVIRONMENT_KEYS
    ]
    lines.append(f"export {DEFAULTED_VARIABLE}")
    for key in ENVIRONMENT_KEYS:
        default = profile.environment[key]
        lines.append(
            f'export {key}="${{{key}-{default}}}"'
            if not any(c in default for c in '"$`\\}')
            else f"export {key}=${{{key}-{shlex.quote(default)}}}"
        )
    return "\n".join(lines)
