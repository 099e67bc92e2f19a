"""Are the Python packages there that a run's rollout, attention and LoRA base storage import (vllm for the vLLM
rollout, flash_attn for FlashAttention-2, bitsandbytes for an NF4 frozen base)? Found without importing them, so
``verlfit train`` (before a launch and in a dry run), ``verlfit bench`` (before it makes anything) and the doctor's
``engines`` line ask in milliseconds.
"""

from __future__ import annotations

import importlib.util
from typing import Callable

# The Python package an engine choice imports, what it is, and the option that runs without it. Sources: verl 0.4.1
# imports vllm for rollout.name=vllm (verl/workers/fsdp_workers.py:417-419, verl/trainer/main_ppo.py:92-93 ->
# verl/utils/vllm_utils.py:18-23); transformers' attn_implementation=flash_attention_2 needs the flash_attn package
# (transformers/utils/import_utils.py is_flash_attn_2_available, a find_spec of "flash_attn"). Patch 0001 lets the
# other attentions run without flash_attn. Patch 0028 (verl/utils/frozen_base_nf4.py) imports bitsandbytes for
# frozen_base_dtype=nf4.
ENGINE_PACKAGES = {
    ("rollout", "vllm"): ("vllm", "the vLLM rollout", "--rollout hf"),
    ("attention", "flash_attention_2"): ("flash_attn", "FlashAttention-2 attention", "--attention sdpa"),
    ("frozen_base", "nf4"): (
        "bitsandbytes",
        "the NF4 frozen base (patch 0028)",
        "--frozen-base-dtype with the profile's 16-bit dtype (or pip install bitsandbytes)",
    ),
}


def missing_engine_packages(
    rollout: str | None, attention: str | None, find_spec: Callable | None = None, frozen_base: str | None = None
) -> list[tuple[str, str, str]]:
    """The packages that ``rollout`` ("hf"/"vllm"), ``attention`` ("sdpa"/"eager"/"flash_attention_2") and a LoRA
    base's storage ``frozen_base`` ("nf4"; None, "bfloat16", "float16", "float32": none) need and this Python cannot
    import, as (package, what needs it, the option that runs without it), in that order; [] when all are there.
    Found with ``importlib.util.find_spec`` (``find_spec``: a stand-in for tests): nothing is imported, so it takes
    milliseconds where importing vLLM takes seconds. Facts: :data:`ENGINE_PACKAGES`.
    """

    find_spec = find_spec or importlib.util.find_spec
    missing = []
    for choice in (("rollout", rollout), ("attention", attention), ("frozen_base", frozen_base)):
        if choice in ENGINE_PACKAGES:
            package, what, option = ENGINE_PACKAGES[choice]
            try:
                found = find_spec(package) is not None
            except (ImportError, ValueError):  # a broken parent package or a module without a spec
                found = False
            if not found:
                missing.append((package, what, option))
    return missing
