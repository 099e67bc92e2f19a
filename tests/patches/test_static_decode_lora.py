"""Issue 43 items 1-2 on CPU: patch 0022's decoder (its steps run eagerly without CUDA) through verl's HFRollout on a
PEFT LoRA model, against generate, with the frozen base stored as patch 0026 stores it, and after an in-place update
of the adapter's tensors (what the actor's optimizer step does between two rollouts). The graph capture and replay
of the same contract: tests/gpu/test_cuda_graph_lora.py.

The probe (speed_probe.py lora_graph): a tiny random Qwen2, LoRA rank 8 all-linear with lora_B drawn, rollout.dtype
float32 (the p40 path: a 16-bit base is computed in fp32), greedy, prompts of 5, 10 and 7 tokens, 20 new tokens.
"""

import pytest

from speed_probes import run_speed_probe

pytestmark = pytest.mark.needs_gnu_patch


@pytest.fixture(scope="module")
def lora_graph(trees):
    return run_speed_probe(trees["patched"], "lora_graph")


@pytest.mark.parametrize("base", ["float32", "bfloat16", "float16"])
def test_static_decoder_with_lora_equals_generate_and_follows_an_adapter_update(lora_graph, base):
    assert lora_graph[base] == {
        "equal": True,
        "adapter_changes_tokens": True,
        "updated_in_place": True,
        "update_changes_tokens": True,
        "equal_after_update": True,
        # the keys and values are computed in fp32 from a 16-bit base too: the cache holds them so (patch 0026's
        # cache_dtype; with the embedding's 16-bit dtype SDPA refused fp32 queries against 16-bit keys)
        "cache_dtypes": ["torch.float32"],
    }
