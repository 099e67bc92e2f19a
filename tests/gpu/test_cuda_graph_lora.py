"""Patch 0022's CUDA-graph decoding with a LoRA adapter active (issue 43 items 1 and 2), on the GPU.

Skipped without CUDA or without a patched verl (static_decode.py and frozen_base.py come with patches/verl-0.4.1). On
the device, benchmarks/device_run.py gputests runs it. Tiny random models of the three families verlfit trains, each
with its family's own layers (Qwen2.5: q/k/v biases; Qwen3: per-head q/k RMSNorm; Llama 3.2: llama3 RoPE scaling,
tied embeddings), 4 layers, hidden 128; a PEFT LoRA adapter (rank 8, all-linear) whose lora_B is not zero, so the
adapter changes the tokens (asserted). Generation goes through verl's HFRollout as a run uses it (autocast from
``rollout.dtype``, patch 0026's fp32 compute of a 16-bit base with autocast off), with ``cuda_graph`` on against
``cuda_graph`` off (HF ``generate``), greedy, left-padded prompts, 48 new tokens, for the frozen-base storage and
rollout dtype of each profile: fp32 and 16-bit bases in fp32 (p40), fp16 (t4, v100) and bf16 (a10 with --rollout hf).

The adapter changes every step: after an in-place update of its weights (an optimizer step on the adapter's own
tensors, as verl's actor update makes them), the same HFRollout object decodes with the new adapter (tokens change,
and equal ``generate`` with it); and through FSDP with verl's LoRA wrap policy, after a real AdamW step of the wrapped
model, as the actor's update_policy and the rollout share one module.
"""

import importlib.util

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
for module in ("verl.workers.rollout.static_decode", "verl.utils.frozen_base"):
    if importlib.util.find_spec("verl") is None or importlib.util.find_spec(module) is None:
        pytest.skip("needs verl patched with patches/verl-0.4.1 (0022, 0026)", allow_module_level=True)

from omegaconf import OmegaConf  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import (  # noqa: E402
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)  # noqa: E402

from verl import DataProto  # noqa: E402
from verl.utils.frozen_base import store_frozen_base, upcast_for_compute  # noqa: E402
from verl.workers.rollout.hf_rollout import HFRollout  # noqa: E402
from verl.workers.rollout.static_decode import StaticDecoder  # noqa: E402

from test_cuda_graph_decode import prompts as left_padded_prompts  # noqa: E402

PAD, EOS, VOCAB, STEPS, BATCH, WIDTH = 0, 499, 500, 48, 8, 24
COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    initializer_range=0.2,
    eos_token_id=EOS,
    pad_token_id=PAD,
    attn_implementation="sdpa",
)
FAMILIES = {
    "qwen2.5": (Qwen2Config, Qwen2ForCausalLM, dict(tie_word_embeddings=True)),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, dict(head_dim=32, tie_word_embeddings=True)),
    "llama3.2": (
        LlamaConfig,
        LlamaForCausalLM,
        dict(
            head_dim=32,
            tie_word_embeddings=True,
            rope_theta=500000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 128,
            },
        ),
    ),
}
# (frozen base storage, rollout.dtype): each profile's pairs. p40: fp32 rollout over an fp32 or a 16-bit base (the
# planner picks); t4/v100: fp16 autocast over an fp32 or fp16 base; a10 --rollout hf: bf16 autocast over fp32 or bf16
CASES = [
    ("float32", "float32"),
    ("bfloat16", "float32"),
    ("float16", "float32"),
    ("float32", "float16"),
    ("float16", "float16"),
    ("float32", "bfloat16"),
    ("bfloat16", "bfloat16"),
]


def lora_model(family, base="float32", seed=0):
    """A tiny random model of ``family`` with a LoRA adapter (rank 8, all-linear, lora_B drawn, not zero) on the GPU;
    its frozen base stored in ``base`` as patch 0026 stores it, adapters fp32."""
    config_class, model_class, extra = FAMILIES[family]
    torch.manual_seed(seed)
    model = model_class(config_class(**COMMON, **extra))
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0))
    for name, param in peft_model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.05)
    if base != "float32":
        store_frozen_base(peft_model, getattr(torch, base))
    return peft_model.cuda()


def prompts(seed=0):
    """BATCH left-padded prompts of up to WIDTH tokens: test_cuda_graph_decode's, whose PAD and EOS are these."""
    return left_padded_prompts(BATCH, WIDTH, seed)


def rollout(module, dtype, cuda_graph):
    cfg = {
        "name": "hf",
        "do_sample": False,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "n": 1,
        "response_length": STEPS,
        "dtype": dtype,
        "micro_batch_size": BATCH,
        "cuda_graph": cuda_graph,
        "unwrap_fsdp": True,
        "trim_padding": False,
        "val_kwargs": {"do_sample": False, "temperature": 0, "top_p": 1.0, "top_k": -1, "n": 1},
    }
    return HFRollout(module, OmegaConf.create(cfg))


def generate(roll, ids, mask):
    pos = torch.clip(torch.cumsum(mask, -1) - 1, min=0)
    data = DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": pos},
        meta_info={"eos_token_id": EOS, "pad_token_id": PAD, "do_sample": False},
    )
    return roll.generate_sequences(data).batch["input_ids"]


def first_difference(got, expected):
    """(row, response position) of the first token that differs, or None."""
    diff = (got != expected).nonzero()
    return None if diff.numel() == 0 else (int(diff[0, 0]), int(diff[0, 1]) - WIDTH)


def compute_context(model, dtype):
    """What HFRollout decodes under for ``rollout.dtype``: bf16/fp16 autocast, or with autocast off a 16-bit base
    computed in fp32 (patch 0026's upcast_for_compute, a no-op on an fp32 model)."""
    import contextlib

    stack = contextlib.ExitStack()
    stack.enter_context(torch.no_grad())
    if dtype == "float32":
        stack.enter_context(upcast_for_compute(model, torch.float32))
    else:
        stack.enter_context(torch.autocast("cuda", dtype=getattr(torch, dtype)))
    return stack


def eager_static(model, ids, mask, dtype):
    """The graph decoder's own steps run eagerly (use_cuda_graph=False), as HFRollout builds it."""
    with compute_context(model, dtype):
        decoder = StaticDecoder(
            model,
            BATCH,
            WIDTH + STEPS,
            do_sample=False,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            eos_token_id=EOS,
            pad_token_id=PAD,
            use_cuda_graph=False,
            cache_dtype=torch.float32 if dtype == "float32" else None,
        )
        return decoder.generate(ids, mask, STEPS)


def generate_logits(model, ids, mask, dtype):
    """HF generate as HFRollout calls it, with its logits: (sequences, (batch, steps, vocab) float32 logits)."""
    from transformers import GenerationConfig

    cfg = GenerationConfig(do_sample=False, num_beams=1, repetition_penalty=1.0)
    with compute_context(model, dtype):
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=STEPS,
            eos_token_id=EOS,
            pad_token_id=PAD,
            generation_config=cfg,
            use_model_defaults=False,
            return_dict_in_generate=True,
            output_logits=True,
            use_cache=True,
        )
    return out.sequences, torch.stack(out.logits, dim=1).float()


def assert_greedy_as_generate(got, expected, model, ids, mask, dtype):
    """``got`` (graph decoding) equals ``expected`` (HFRollout with generate) in fp32; in 16 bits up to the first
    step where generate's chosen token and the graph's are tied in generate's own logits within 2 units in the last
    place of the dtype at that magnitude (the rounding of a 16-bit logit), and the graph equals the eager decoder."""
    where = first_difference(got, expected)
    if dtype != "float32":
        assert first_difference(got, eager_static(model, ids, mask, dtype)) is None, (
            "graph replay differs from its eager steps"
        )
    if where is None:
        return
    assert dtype != "float32", f"fp32: the graph's tokens differ from generate's at (row, step) {where}"
    row, step = where
    sequences, logits = generate_logits(model, ids, mask, dtype)
    assert first_difference(sequences[:, : expected.size(1)], expected[:, : sequences.size(1)]) is None
    chosen, other = int(expected[row, WIDTH + step]), int(got[row, WIDTH + step])
    row_logits = logits[row, step]
    gap = float(row_logits[chosen] - row_logits[other])
    ulp = torch.finfo(getattr(torch, dtype)).eps * 2.0 ** torch.floor(torch.log2(row_logits[chosen].abs())).item()
    assert 0 <= gap <= 2 * ulp, (
        f"{dtype}: the graph's token {other} and generate's {chosen} at (row, step) {where} are {gap} apart in"
        f" generate's logits ({row_logits[chosen]:.6g}), more than 2 units in the last place ({ulp:g}): not a"
        " 16-bit tie"
    )


def update_adapter(model, seed):
    """One SGD step on the adapter's own tensors (in place, as an optimizer step: same storage, new values) with a
    drawn gradient large enough to change the greedy tokens."""
    params = [p for n, p in model.named_parameters() if "lora_" in n]
    g = torch.Generator(device="cuda").manual_seed(seed)
    pointers = [p.data_ptr() for p in params]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g, device=p.device, dtype=p.dtype)
    torch.optim.SGD(params, lr=0.05).step()
    for p in params:
        p.grad = None
    assert [p.data_ptr() for p in params] == pointers  # the same tensors, updated in place


@pytest.mark.parametrize("base,dtype", CASES)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_graph_decoding_with_lora_equals_generate_and_follows_adapter_updates(family, base, dtype):
    model = lora_model(family, base)
    ids, mask = prompts()
    graph, plain = rollout(model, dtype, True), rollout(model, dtype, False)
    expected = generate(plain, ids, mask)
    got = generate(graph, ids, mask)
    assert graph.static_decode_captures == 1 and plain.static_decode_captures == 0
    assert_greedy_as_generate(got, expected, model, ids, mask, dtype)
    with model.disable_adapter():
        base_tokens = generate(plain, ids, mask)
    assert first_difference(base_tokens, expected) is not None  # the adapter changes what is generated
    # the actor's update between two steps: the same rollout objects decode with the new adapter
    update_adapter(model, seed=1)
    expected_after = generate(plain, ids, mask)
    got_after = generate(graph, ids, mask)
    assert graph.static_decode_captures == 2
    assert first_difference(expected_after, expected) is not None  # the update changes the tokens ...
    assert first_difference(got_after, got) is not None
    assert_greedy_as_generate(
        got_after, expected_after, model, ids, mask, dtype
    )  # ... and the graph decoder follows it


# (frozen base storage, compute dtype, adapters): the p40 profile's fp32 compute with an fp32 and a bf16 base, the
# adapters FSDP units (verl's LoRA wrap policy); the a10 and t4 paths' 16-bit compute with the adapters outside FSDP
# (patch 0027, as verlfit sets it there)
FSDP_CASES = [
    ("float32", "float32", "units"),
    ("bfloat16", "float32", "units"),
    ("bfloat16", "bfloat16", "outside"),
    ("float16", "float16", "outside"),
]


@pytest.mark.parametrize("base,compute,adapters", FSDP_CASES)
def test_fsdp_lora_actor_after_an_adamw_step_decodes_with_the_new_adapter(base, compute, adapters):
    # the run's arrangement on one GPU: the PEFT model in FSDP1 with verl's LoRA wrap policy (patch 0009; every
    # adapter Linear a unit of its own, or with patch 0027 left out of FSDP), the profile's mixed precision, the
    # rollout on the same FSDP module (unwrapped for decoding, patches 0022-0023), the update a real backward and
    # AdamW step of the FSDP module under the profile's autocast
    import os
    import tempfile

    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision, ShardingStrategy

    from verl.utils.adapters_outside_fsdp import adapters_outside_fsdp, place_adapters
    from verl.utils.fsdp_utils import get_fsdp_wrap_policy

    if not dist.is_initialized():
        fd, path = tempfile.mkstemp()
        os.close(fd)
        os.unlink(path)
        dist.init_process_group("nccl", init_method=f"file://{path}", rank=0, world_size=1)
    model = lora_model("qwen2.5", base)
    policy = get_fsdp_wrap_policy(model, config={}, is_lora=True)
    dtype = getattr(torch, compute)
    precision = MixedPrecision(param_dtype=dtype, reduce_dtype=torch.float32, buffer_dtype=torch.float32)
    outside = adapters_outside_fsdp(adapters == "outside", model, 1, "fsdp")
    wrapped = FSDP(
        model,
        auto_wrap_policy=policy,
        mixed_precision=precision,
        sharding_strategy=ShardingStrategy.NO_SHARD,
        device_id=torch.cuda.current_device(),
        use_orig_params=False,
        ignored_states=outside,
    )
    place_adapters(outside, wrapped.compute_device)
    trainable_units = [u for u in FSDP.fsdp_modules(wrapped) if u._handle and u._handle.flat_param.requires_grad]
    assert (len(trainable_units) == 0) == (adapters == "outside")
    ids, mask = prompts()
    graph, plain = rollout(wrapped, compute, True), rollout(wrapped, compute, False)
    before = generate(graph, ids, mask)
    assert_graph_as_generate_through_fsdp(before, generate(plain, ids, mask), wrapped, ids, mask, compute)
    optimizer = torch.optim.AdamW([p for p in wrapped.parameters() if p.requires_grad], lr=0.02)
    wrapped.train()
    with torch.autocast("cuda", dtype=dtype, enabled=compute != "float32"):
        logits = wrapped(input_ids=ids, attention_mask=mask).logits.float()
    torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1), reduction="mean"
    ).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    after_plain = generate(plain, ids, mask)
    after_graph = generate(graph, ids, mask)
    assert graph.static_decode_captures == 2
    assert first_difference(after_plain, before) is not None
    assert_graph_as_generate_through_fsdp(after_graph, after_plain, wrapped, ids, mask, compute)


def assert_graph_as_generate_through_fsdp(got, expected, wrapped, ids, mask, dtype):
    """:func:`assert_greedy_as_generate` for an FSDP-wrapped model: its 16-bit tie check runs the HF model's own
    forward through the module as the rollout unwraps it (patch 0023's ``_unwrapped_module``)."""
    from verl.workers.rollout.hf_rollout import _unwrapped_module

    if dtype == "float32" or first_difference(got, expected) is None:
        assert first_difference(got, expected) is None
        return
    with _unwrapped_module(wrapped) as module:
        assert_greedy_as_generate(got, expected, module, ids, mask, dtype)
