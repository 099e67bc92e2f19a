"""Patch 0028's NF4 frozen base (bitsandbytes Linear4bit, QLoRA) in the HF rollout with the CUDA-graph decoder, on the
GPU (issue 46 items 1 and 5).

Skipped without CUDA, without a patched verl (frozen_base_nf4.py, static_decode.py and frozen_base.py come with
patches/verl-0.4.1: 0022, 0026, 0028) or without bitsandbytes. On the device: ``python3 -m pytest
tests/gpu/test_frozen_base_nf4_gpu.py`` (pytest's default import mode puts tests/gpu on sys.path: it imports
test_cuda_graph_lora's models and rollout helpers). The tiny LoRA models of test_cuda_graph_lora (Qwen2.5, Qwen3,
Llama 3.2; 4 layers, hidden 128, rank-8 all-linear adapter with lora_B drawn) get their frozen base quantised by
``quantize_frozen_base`` as the worker does it (the decoder layers' 28 Linears NF4 with double quantisation, packed
as ``param_dtype``; quantised on the GPU), for each profile's ``param_dtype`` and rollout dtype: fp32/fp32 (p40),
fp16/fp16 (t4), bf16/bf16 (a10 with --rollout hf). Then, through verl's HFRollout, greedy, 48 new tokens:

* ``cuda_graph`` on against off: the captured step holds bitsandbytes' dequantisation (its CUDA kernels launch on
  the current stream, no host sync), and decodes as ``generate`` (fp32: identical; 16 bits: identical, or up to a
  16-bit tie in generate's logits with the graph equal to its own eager steps: test_cuda_graph_lora's check).
* exactness: a twin model holding, in plain nn.Linear, bitsandbytes' own dequantisation of each NF4 weight (in
  ``param_dtype``) and every other parameter as the NF4 model stores it gives identical tokens, graph on and off.
  With batch 8 every 4-bit matmul (prefill and each decode step: more than one row) is bitsandbytes' MatMul4Bit,
  i.e. ``F.linear(x, dequantize_4bit(W).to(x.dtype), bias)``, the call nn.Linear makes, on a weight of the same
  dtype and layout; the single-row gemv_4bit kernel (not bit-identical) is taken only for ``x.numel() ==
  x.shape[-1]``, never here.
* the quantisation is visible: the unquantised model (0026's storage of the same dtype) decodes other tokens.
* the adapter changes every step: after an in-place optimizer step on the adapter, the same HFRollout objects decode
  other tokens, graph as generate, and the packed NF4 weights are untouched.
"""

import importlib.util

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
for module in ("verl.utils.frozen_base_nf4", "verl.workers.rollout.static_decode", "verl.utils.frozen_base"):
    if importlib.util.find_spec("verl") is None or importlib.util.find_spec(module) is None:
        pytest.skip("needs verl patched with patches/verl-0.4.1 (0022, 0026, 0028)", allow_module_level=True)
pytest.importorskip("bitsandbytes")

from bitsandbytes.functional import dequantize_4bit  # noqa: E402

from verl.utils.frozen_base_nf4 import (  # noqa: E402
    nf4_layer_class_names,
    nf4_linears,
    place_quant_states,
    quantize_frozen_base,
)

from test_cuda_graph_lora import (  # noqa: E402
    COMMON,
    FAMILIES,
    assert_greedy_as_generate,
    first_difference,
    generate,
    lora_model,
    prompts,
    rollout,
    update_adapter,
)

# (param_dtype: the NF4 packing and the layers' norms and biases, rollout.dtype) of each profile on the HF rollout
PROFILES = [("float32", "float32"), ("float16", "float16"), ("bfloat16", "bfloat16")]  # p40, t4, a10
LINEARS = COMMON["num_hidden_layers"] * 7  # q, k, v, o, gate, up, down in each decoder layer


def nf4_model(family, storage, seed=0):
    """lora_model(family, seed) with its frozen base quantised as patch 0028's worker does it, on the GPU."""
    model = lora_model(family, seed=seed)
    device = torch.device("cuda", torch.cuda.current_device())
    counts = quantize_frozen_base(model, getattr(torch, storage), nf4_layer_class_names(model), device)
    assert counts["nf4"] > 0 and len(nf4_linears(model)) == LINEARS
    assert place_quant_states(model, device) == LINEARS  # already there: quantised on the device
    return model


def dequantised_twin(nf4, family, seed=0):
    """The same LoRA model (same seed) in plain nn.Linear, holding bitsandbytes' own dequantisation of each of
    ``nf4``'s NF4 weights (cast to the dtype it is packed as, param_dtype) and each other parameter as ``nf4`` stores
    it (layer norms and biases in param_dtype, the root in 16 bits, adapters fp32)."""
    twin = lora_model(family, seed=seed)
    stored = dict(nf4.named_parameters())
    for name, param in twin.named_parameters():
        source = stored[name]
        if type(source).__name__ == "Params4bit":
            value = dequantize_4bit(source.data, source.quant_state).to(source.dtype)
            assert value.shape == param.shape
        else:
            value = source.detach()
        param.data = value.clone()
    assert not nf4_linears(twin)
    return twin


def packed(model):
    """The packed NF4 weights' bytes (as param_dtype elements some are NaN patterns, which torch.equal rejects)."""
    return [linear.weight.data.view(torch.uint8).clone() for linear in nf4_linears(model)]


@pytest.mark.parametrize("storage,dtype", PROFILES)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_nf4_base_graph_decodes_as_generate_and_as_its_dequantised_twin(family, storage, dtype):
    model = nf4_model(family, storage)
    ids, mask = prompts()
    graph, plain = rollout(model, dtype, True), rollout(model, dtype, False)
    expected = generate(plain, ids, mask)
    got = generate(graph, ids, mask)
    assert graph.static_decode_captures == 1 and plain.static_decode_captures == 0
    assert_greedy_as_generate(got, expected, model, ids, mask, dtype)

    twin = dequantised_twin(model, family)
    twin_graph, twin_plain = rollout(twin, dtype, True), rollout(twin, dtype, False)
    where = first_difference(generate(twin_graph, ids, mask), got)
    assert where is None, f"graph: the dequantised twin's tokens differ from the NF4 model's at (row, step) {where}"
    where = first_difference(generate(twin_plain, ids, mask), expected)
    assert where is None, f"generate: the dequantised twin's tokens differ from the NF4 model's at (row, step) {where}"

    # patch 0026's base of the same dtype, not quantised (fp32: all fp32, where NF4 also keeps the root in bf16)
    unquantised = lora_model(family, storage)
    assert first_difference(generate(rollout(unquantised, dtype, False), ids, mask), expected) is not None, (
        "NF4 decodes the unquantised model's tokens: the equality above says nothing"
    )


@pytest.mark.parametrize("storage,dtype", PROFILES)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_nf4_base_graph_decoding_follows_adapter_updates(family, storage, dtype):
    model = nf4_model(family, storage)
    ids, mask = prompts()
    graph, plain = rollout(model, dtype, True), rollout(model, dtype, False)
    before_plain, before_graph = generate(plain, ids, mask), generate(graph, ids, mask)
    weights = packed(model)
    update_adapter(model, seed=1)  # the actor's update between two steps, in place
    after_plain, after_graph = generate(plain, ids, mask), generate(graph, ids, mask)
    assert graph.static_decode_captures == 2
    assert first_difference(after_plain, before_plain) is not None  # the update changes the tokens ...
    assert first_difference(after_graph, before_graph) is not None
    assert_greedy_as_generate(after_graph, after_plain, model, ids, mask, dtype)  # ... and the graph follows it
    assert all(torch.equal(a, b) for a, b in zip(packed(model), weights))  # the NF4 base is frozen
