"""GPU half of patch 0022: the CUDA-graph capture/replay layer of the static-cache decoder.

Skipped without CUDA or without a patched verl (static_decode.py comes with patches/verl-0.4.1). On the
device, benchmarks/device_run.sh gputests runs it. A tiny random Qwen2 (4 layers, hidden 128), left-padded
prompts, 48 new tokens: graph replay against HF generate on the same GPU, fp32 and bf16, a second batch size,
without an EOS or pad id (issue 29), and an FSDP-wrapped module through verl's HFRollout.
"""

import importlib.util

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
if importlib.util.find_spec("verl") is None or importlib.util.find_spec("verl.workers.rollout.static_decode") is None:
    pytest.skip("needs verl patched with patches/verl-0.4.1 (0022)", allow_module_level=True)

from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM  # noqa: E402

from verl.workers.rollout.static_decode import StaticDecoder  # noqa: E402

PAD, EOS, VOCAB, STEPS = 0, 499, 500, 48


def tiny_model(dtype=torch.float32):
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.2,
        tie_word_embeddings=False,
        eos_token_id=EOS,
        pad_token_id=PAD,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).to("cuda", dtype).eval()


def prompts(batch, width=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(4, width + 1, (batch,), generator=g)
    ids = torch.full((batch, width), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths.tolist()):
        ids[i, width - n :] = torch.randint(1, EOS, (n,), generator=g)
        mask[i, width - n :] = 1
    return ids.cuda(), mask.cuda()


def hf_greedy(model, ids, mask, eos=EOS):
    cfg = GenerationConfig(
        max_new_tokens=STEPS, do_sample=False, eos_token_id=eos, pad_token_id=PAD, repetition_penalty=1.0
    )
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg, use_model_defaults=False)


def decoder(model, batch, width, eos=EOS, **sampling):
    settings = dict(do_sample=False, temperature=1.0, top_k=0, top_p=1.0)
    settings.update(sampling)
    return StaticDecoder(model, batch, width + STEPS, eos_token_id=eos, pad_token_id=PAD, **settings)


@pytest.mark.parametrize("batch", [8, 3])
def test_graph_replay_greedy_equals_generate_fp32(batch):
    model = tiny_model()
    ids, mask = prompts(batch)
    dec = decoder(model, batch, ids.size(1))
    got = dec.generate(ids, mask, STEPS)
    assert dec.captures == 1 and dec.graph is not None
    assert got.tolist() == hf_greedy(model, ids, mask).tolist()
    # the same decoder again (new prefill, a fresh capture) gives the same tokens
    assert dec.generate(ids, mask, STEPS).tolist() == got.tolist() and dec.captures == 2


def test_graph_replay_with_early_eos_equals_generate():
    model = tiny_model()
    ids, mask = prompts(6)
    ref = hf_greedy(model, ids, mask)
    eos = [int(ref[0, ids.size(1) + 4]), int(ref[2, ids.size(1) + 9])]
    got = decoder(model, 6, ids.size(1), eos=eos).generate(ids, mask, STEPS)
    expected = hf_greedy(model, ids, mask, eos=eos)
    assert got.tolist() == expected.tolist()
    assert int((got[:, ids.size(1) :] == PAD).sum()) > 0


def _generate_as_hf_rollout(model, ids, mask, eos, pad):
    """generate() as verl's HFRollout calls it: eos/pad as keywords (None allowed), next to a GenerationConfig."""
    cfg = GenerationConfig(do_sample=False, num_beams=1, repetition_penalty=1.0)
    with torch.no_grad():
        return model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=STEPS,
            eos_token_id=eos,
            pad_token_id=pad,
            generation_config=cfg,
            use_model_defaults=False,
        )


def test_graph_replay_without_eos_or_pad_id_equals_generate():
    # issue 29: a generation config without eos_token_id gives the rollout None; generate decodes every row to
    # STEPS tokens, and so does the replayed graph (no EOS handling captured); an EOS with pad None pads with it
    model = tiny_model()
    ids, mask = prompts(6)
    dec = StaticDecoder(
        model,
        6,
        ids.size(1) + STEPS,
        do_sample=False,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        eos_token_id=None,
        pad_token_id=None,
    )
    got = dec.generate(ids, mask, STEPS)
    assert dec.captures == 1
    assert got.size(1) == ids.size(1) + STEPS
    assert got.tolist() == _generate_as_hf_rollout(model, ids, mask, None, None).tolist()
    eos = [int(got[0, ids.size(1) + 4]), int(got[2, ids.size(1) + 9])]
    early = StaticDecoder(
        model,
        6,
        ids.size(1) + STEPS,
        do_sample=False,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        eos_token_id=eos,
        pad_token_id=None,
    ).generate(ids, mask, STEPS)
    assert early.tolist() == _generate_as_hf_rollout(model, ids, mask, eos, None).tolist()
    assert bool((early[0, ids.size(1) + 5 :] == eos[0]).all())  # row 0 ended by step 4: padded with the first EOS id


def test_graph_replay_bf16_autocast_matches_eager_static_decode():
    # bf16 under autocast (the a10 rollout): replay equals the same decoder run eagerly (no graph)
    model = tiny_model()
    ids, mask = prompts(8)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        graph = decoder(model, 8, ids.size(1)).generate(ids, mask, STEPS)
        eager_dec = decoder(model, 8, ids.size(1))
        eager_dec.use_cuda_graph = False
        eager = eager_dec.generate(ids, mask, STEPS)
    assert graph.tolist() == eager.tolist()
    # bf16 parameters (FSDP bf16 param dtype) decode in a bf16 cache
    model16 = tiny_model(torch.bfloat16)
    dec16 = decoder(model16, 8, ids.size(1))
    out16 = dec16.generate(ids, mask, STEPS)
    assert dec16.cache.key_cache[0].dtype == torch.bfloat16 and out16.shape == (8, ids.size(1) + STEPS)


def test_graph_sampling_draws_fresh_noise_each_replay():
    model = tiny_model()
    ids, mask = prompts(4)
    torch.manual_seed(1)
    a = decoder(model, 4, ids.size(1), do_sample=True, temperature=1.0).generate(ids, mask, STEPS)
    torch.manual_seed(2)
    b = decoder(model, 4, ids.size(1), do_sample=True, temperature=1.0).generate(ids, mask, STEPS)
    # different seeds give different samples, and within a run the replays do not repeat one token column
    assert a.tolist() != b.tolist()
    new = a[:, ids.size(1) :]
    assert len({tuple(new[:, t].tolist()) for t in range(new.size(1))}) > STEPS // 2


def test_fsdp_wrapped_module_through_hf_rollout():
    import os
    import tempfile

    import torch.distributed as dist
    from omegaconf import OmegaConf
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

    from verl import DataProto
    from verl.workers.rollout.hf_rollout import HFRollout

    if not dist.is_initialized():
        fd, path = tempfile.mkstemp()
        os.close(fd)
        os.unlink(path)
        dist.init_process_group("nccl", init_method=f"file://{path}", rank=0, world_size=1)
    model = tiny_model()
    wrapped = FSDP(
        tiny_model(), auto_wrap_policy=ModuleWrapPolicy({Qwen2DecoderLayer}), device_id=torch.cuda.current_device()
    )
    ids, mask = prompts(8)
    pos = torch.clip(torch.cumsum(mask, -1) - 1, min=0)
    cfg = {
        "name": "hf",
        "do_sample": False,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "n": 1,
        "response_length": STEPS,
        "dtype": "float32",
        "micro_batch_size": 8,
        "cuda_graph": True,
        "trim_padding": True,
        "val_kwargs": {"do_sample": False, "temperature": 0, "top_p": 1.0, "top_k": -1, "n": 1},
    }
    rollout = HFRollout(wrapped, OmegaConf.create(cfg))
    out = rollout.generate_sequences(
        DataProto.from_dict(
            tensors={"input_ids": ids, "attention_mask": mask, "position_ids": pos},
            meta_info={"eos_token_id": EOS, "pad_token_id": PAD, "do_sample": False},
        )
    )
    assert rollout.static_decode_captures == 1
    expected = hf_greedy(model, ids, mask)
    expected = torch.cat([expected, torch.full((8, ids.size(1) + STEPS - expected.size(1)), PAD, device="cuda")], dim=1)
    assert out.batch["input_ids"].tolist() == expected.tolist()
    assert sum(isinstance(m, FSDP) for m in wrapped.modules()) == 5  # root + 4 layers, restored


def test_repeated_captures_leave_no_allocated_memory_behind():
    # HFRollout builds a fresh StaticDecoder for every micro-batch of every step. Before capture_stream, each
    # capture warmed up on a new stream and cuBLAS kept a workspace per stream (~30 MB a step in the main job,
    # benchmarks/results/2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench/speed-all): allocated
    # memory after the second call must equal
    # the first's for the next calls.
    import gc

    model = tiny_model()
    ids, mask = prompts(8)
    allocated = []
    for _ in range(5):
        decoder(model, 8, ids.size(1)).generate(ids, mask, STEPS)
        gc.collect()
        torch.cuda.synchronize()
        allocated.append(torch.cuda.memory_allocated())
    assert allocated[2:] == [allocated[1]] * 3, allocated
