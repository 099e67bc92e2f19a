"""The memory model (verlfit.plan.memory): hand-computed bytes for a small config, the earlier device measurements
(docs/plan.md section 5), verdicts and refusals."""

from dataclasses import replace

import pytest

from plan_inputs import QWEN, SMALL, qwen_request, small_request
from verlfit.errors import VerlfitError
from verlfit.plan import memory
from verlfit.plan.memory import GIB, predict


def test_weights_gradients_optimizer_bytes_fp32():
    actor, critic = 138304, 138369
    p = predict(small_request())
    rollout = p.phase("rollout")
    assert rollout.weights == 4 * actor + 4 * critic == 1_106_692
    assert rollout.optimizer == 8 * actor + 8 * critic == 2_213_384
    assert rollout.gradients == 0  # zero_grad() ends every update
    moments = memory.update_moments(small_request(), "actor")
    assert moments["end of backward"].weights == 4 * actor + 4 * critic  # fp32 on one GPU: no second copy for compute
    # end of backward: the whole-model FSDP unit's gradients buffered + concatenated (8 B/param)
    # on top of the earlier micro-batch's (4 B/param; 2 micro-batches per optimizer step)
    assert moments["end of backward"].gradients == 4 * actor + 8 * actor
    step = moments["optimizer step"]
    assert (step.gradients, step.optimizer) == (
        4 * actor,
        8 * actor + 8 * critic + 4 * actor,
    )  # + foreach AdamW's sqrt temporary
    assert p.phase("actor_update").total == max(m.total for m in moments.values())


def test_weights_gradients_optimizer_bytes_bf16():
    actor, critic = 138304, 138369
    p = predict(small_request(dtype="bfloat16"))
    assert p.phase("rollout").weights == 4 * actor + 4 * critic  # fp32 masters (fsdp_workers.py:216, 905)
    assert (
        p.phase("old_log_prob").weights == 4 * actor + 4 * critic + 2 * actor
    )  # + FSDP's bf16 copy of the whole (unwrapped) actor
    end = memory.update_moments(small_request(dtype="bfloat16"), "actor")["end of backward"]
    assert end.gradients == 4 * actor + 6 * actor  # bf16 concatenated 2 + its fp32 cast 4, per param
    assert end.optimizer == 8 * actor + 8 * critic
    assert end.weights == 4 * actor + 4 * critic + 2 * actor


def test_two_gpus_shard_states():
    one, two = predict(small_request()), predict(small_request(gpus=2))
    assert two.phase("values").optimizer == memory._shard(138304, 2) * 8 + memory._shard(138369, 2) * 8
    assert two.phase("values").optimizer < one.phase("values").optimizer


def test_activation_and_logits_by_hand():
    # per token per layer, fp32, SDPA: 44*h + 8*kv + 16*I + 2*q_dim*4 (repeat_kv'd K and V)
    per_token = 44 * 64 + 8 * 32 + 16 * 128 + 2 * 64 * 4
    assert per_token == 5632
    tokens = 2 * 64  # micro-batch 2 x (32 prompt + 32 response)
    layer = tokens * per_token
    assert memory.layer_activation_bytes(SMALL, tokens, 64, "float32", "sdpa") == layer == 720_896
    final_norm = tokens * 64 * 12
    mask = 2 * 64 * 64 * 4
    saved = 2 * layer + final_norm + mask
    # the backward's workspace: 0.16 of a layer (memory.BACKWARD_WORKSPACE_LAYERS, measured on the CPU)
    assert (
        memory.training_activation_bytes(SMALL, 2, 64, "float32", "sdpa", checkpointing=False)
        == (
            saved,
            saved + int(0.16 * layer),
        )
        == (1_572_864, 1_688_207)
    )
    checkpointed = 2 * tokens * 64 * 4 + final_norm + mask
    # checkpointed: each layer's input saved; in the backward one layer recomputed, then its workspace
    assert (
        memory.training_activation_bytes(SMALL, 2, 64, "float32", "sdpa", checkpointing=True)
        == (
            checkpointed,
            checkpointed + layer + int(0.16 * layer),
        )
        == (196_608, 1_032_847)
    )
    # old log-prob logits: (2, 64, 1000) fp32 + 2 fp32 tensors over (2, 32, 1000) for the eager entropy
    # (the softmax, and logsumexp's one temporary or the product pd * logits)
    assert predict(small_request()).phase("old_log_prob").logits == 2 * 1000 * (64 * 4 + 32 * 8) == 1_024_000


def test_bf16_logits_by_hand_without_fused_kernels():
    bf16 = small_request(dtype="bfloat16")
    # old log-prob: (2, 64, 1000) bf16 logits + 10 B per (response token, vocab entry) for the eager entropy
    # (8 B derived, 10 calibrated); larger than the ref path's row loop (2 rows of (32, 1000) fp32)
    assert predict(bf16).phase("old_log_prob").logits == 2 * 1000 * (64 * 2 + 32 * 10) == 896_000
    # actor update: bf16 logits + the rows' saved fp32 log_softmax outputs, or after them the slice's and
    # the division's bf16 gradients over the whole sequence: equal here, 512,000 either way
    logits = memory.update_moments(bf16, "actor")["backward through the logits"].logits
    assert logits == max(2 * 1000 * (64 * 2 + 32 * 4), 2 * 1000 * 64 * 4) == 512_000


def test_phases_by_algorithm():
    assert [p.phase for p in predict(small_request()).phases] == [
        "rollout",
        "old_log_prob",
        "values",
        "critic_update",
        "actor_update",
    ]
    grpo = predict(small_request(algorithm="grpo", rollout_n=4))
    assert [p.phase for p in grpo.phases] == ["rollout", "old_log_prob", "ref_log_prob", "actor_update"]
    assert (
        grpo.phase("rollout").kv_cache == 2 * 2 * (8 * 4) * 64 * 32 * 4
    )  # K,V x layers x sequences x tokens x kv_dim x fp32


@pytest.mark.parametrize(
    "fields, measured_gib",
    [
        (
            dict(
                train_batch_size=1,
                ppo_mini_batch_size=1,
                actor_micro_batch_size=1,
                critic_micro_batch_size=1,
                log_prob_micro_batch_size=1,
            ),
            14.8,
        ),
        (
            dict(
                train_batch_size=8,
                ppo_mini_batch_size=8,
                actor_micro_batch_size=2,
                critic_micro_batch_size=2,
                log_prob_micro_batch_size=2,
                gradient_checkpointing=True,
            ),
            16.6,
        ),
        (
            dict(
                train_batch_size=16,
                ppo_mini_batch_size=16,
                actor_micro_batch_size=4,
                critic_micro_batch_size=4,
                log_prob_micro_batch_size=4,
                gradient_checkpointing=True,
                actor_optimizer_offload=True,
                critic_optimizer_offload=True,
            ),
            13.0,
        ),
    ],
)
def test_earlier_trial_fp32_ppo_measurements(fields, measured_gib):
    """the earlier H200 trial's measurements (docs/plan.md section 5) (H200 under a P40 cap, Qwen2.5-0.5B shape, fp32,
    PPO): max allocated within 3%."""
    predicted = predict(qwen_request(**fields)).peak.total / GIB
    assert abs(predicted - measured_gib) / measured_gib < 0.03, predicted


def test_reference_model_stays_on_one_gpu():
    """FSDP1 NO_SHARD + CPUOffload (one GPU, fsdp_workers.py:319): the views of each unit's GPU copy keep the whole
    ref model on the GPU after its forward, in the compute dtype, for every later phase (docs/memory.md section 2.0)."""
    actor = 138304
    grpo = small_request(algorithm="grpo", rollout_n=4)
    p = predict(grpo)
    ref = 4 * actor  # the whole fp32 ref, not just root unit + layers in flight
    assert p.phase("rollout").weights == 4 * actor + ref == 1_106_432
    assert p.phase("old_log_prob").weights == 4 * actor + ref
    assert p.phase("ref_log_prob").weights == ref + 4 * actor
    assert all(m.weights == 4 * actor + ref for m in memory.update_moments(grpo, "actor").values())
    assert (
        predict(replace(grpo, dtype="bfloat16")).phase("rollout").weights == 4 * actor + 2 * actor
    )  # bf16 ref (verl's default model_dtype)
    assert predict(small_request()).phase("rollout").weights == 4 * actor + 4 * 138369  # PPO: no ref
    # several GPUs: FULL_SHARD frees the units after forward and verl reshards the root (fsdp_workers.py:756-758)
    two = replace(grpo, gpus=2)
    assert predict(two).phase("rollout").weights == predict(replace(two, use_reference=False)).phase("rollout").weights


@pytest.mark.parametrize(
    "fields, measured_gib",
    [
        # the earlier H200 trial (docs/plan.md section 5): GRPO 8 x 4, micro 4, checkpointing, optimizer offload, fp32
        # ref
        (
            dict(
                max_prompt_length=256,
                train_batch_size=8,
                ppo_mini_batch_size=8,
                actor_micro_batch_size=4,
                log_prob_micro_batch_size=4,
                gradient_checkpointing=True,
                actor_optimizer_offload=True,
            ),
            13.0,
        ),
        # benchmarks/results/2026-11-29-h200-p40-main-job-learning-planner/public-recipe-tuned-grpo/main-grpo: 8 x 4,
        # mini 4, micro 8/8, prompt 512 (docs/benchmarks.md section 2.1)
        (
            dict(
                max_prompt_length=512,
                train_batch_size=8,
                ppo_mini_batch_size=4,
                actor_micro_batch_size=8,
                log_prob_micro_batch_size=8,
                gradient_checkpointing=True,
            ),
            16.796,
        ),
    ],
)
def test_fp32_grpo_measurements(fields, measured_gib):
    """fp32 GRPO with a KL loss and a separate fp32 ref on one GPU: max allocated within 3% (the resident ref is 1.84
    GiB of it)."""
    predicted = predict(qwen_request(algorithm="grpo", rollout_n=4, **fields)).peak.total / GIB
    assert abs(predicted - measured_gib) / measured_gib < 0.03, predicted


def test_verdicts():
    request = qwen_request(
        train_batch_size=1,
        ppo_mini_batch_size=1,
        actor_micro_batch_size=1,
        critic_micro_batch_size=1,
        log_prob_micro_batch_size=1,
    )
    peak = predict(request).peak.total
    need = peak + memory.ALLOCATOR_HEADROOM_BYTES
    assert predict(replace(request, gpu_memory_bytes=int(need / 0.9) + 1)).verdict == "fits"
    assert predict(replace(request, gpu_memory_bytes=need)).verdict == "tight"
    assert predict(replace(request, gpu_memory_bytes=need - 1)).verdict == "does not fit"
    unsupported = predict(replace(request, actor_param_offload=True))
    assert unsupported.verdict == "unsupported"
    assert "fsdp_workers.py:648-680" in unsupported.notes[-1]


def test_invalid_micro_batch_is_refused():
    with pytest.raises(VerlfitError, match="actor micro-batch 3 does not divide the per-GPU mini-batch of 4 responses"):
        predict(small_request(actor_micro_batch_size=3))


def test_rollout_note_counts_one_prompt_in_the_singular():
    # a new-user trial read "1 prompts x 1 per generate call = 1 sequences" for the public recipe's batch 1
    one = predict(
        small_request(
            train_batch_size=1,
            ppo_mini_batch_size=1,
            actor_micro_batch_size=1,
            critic_micro_batch_size=1,
            log_prob_micro_batch_size=1,
        )
    )
    assert one.phase("rollout").detail[-1].startswith("1 prompt x 1 per generate call = 1 sequence of ")
    four = predict(small_request(algorithm="grpo", rollout_n=4))
    assert four.phase("rollout").detail[-1].startswith("8 prompts x 4 per generate call = 32 sequences of ")


def test_cuda_graph_rollout_counts_the_static_cache_in_fp32_and_the_decoders_buffers():
    # patch 0022's StaticDecoder: transformers' StaticCache of prompt + response columns, allocated whole, in the
    # dtype of the parameters it decodes with (the fp32 actor also under bf16 mixed precision), plus its buffers
    import torch
    from transformers import Qwen2Config, StaticCache

    from plan_inputs import SMALL_CONFIG

    config = Qwen2Config(**{key: value for key, value in SMALL_CONFIG.items() if key != "model_type"})
    sequences, cache_len = 8, 64  # the small request's 8 prompts in one generate call, 32 prompt + 32 response columns
    cache = StaticCache(
        config=config, max_batch_size=sequences, max_cache_len=cache_len, device="cpu", dtype=torch.float32
    )
    static = sum(t.numel() * t.element_size() for t in (*cache.key_cache, *cache.value_cache))
    assert static == 2 * 2 * 8 * 64 * 32 * 4 == 262_144  # K,V x layers x sequences x columns x kv_dim x fp32
    buffers = 8 * 64 * 8 + 8 * (3 * 8 + 1)  # mask (int64); tokens, positions, captured token (int64); finished (bool)
    for dtype in ("float32", "bfloat16"):
        graph = predict(small_request(dtype=dtype, cuda_graph=True)).phase("rollout")
        assert graph.kv_cache == static + buffers == 266_440, dtype
        assert (
            graph.logits == predict(small_request(dtype=dtype)).phase("rollout").logits == 8 * 1000 * 28
        )  # one step's sampling, as generate
        assert (
            graph.detail[-2]
            == "CUDA-graph decoding (patch 0022): a static KV cache of 64 columns in fp32, 0.0 GiB with the decoder's"
            " buffers"
        )
    assert (
        predict(small_request(dtype="bfloat16")).phase("rollout").kv_cache == static // 2
    )  # generate's DynamicCache in bf16
    # prefill over 8 x 32 tokens attends over all 64 cache columns: one layer's no-grad working set (fp32 20 h + 12 I),
    # K and V repeated to the 4 heads over 64 columns, the mask (8, 1, 32, 64); no torch.cat copy while decoding
    fp32 = predict(small_request(cuda_graph=True)).phase("rollout")
    prefill = 8 * 32 * (20 * 64 + 12 * 128) + 8 * 64 * 2 * 64 * 4 + 8 * 32 * 64 * 4
    assert fp32.activations == prefill == 1_048_576
    assert (
        predict(small_request()).phase("rollout").activations
        == 8 * 32 * (20 * 64 + 12 * 128 + 2 * 64 * 4) + 8 * 32 * 32 * 4
        == 884_736
    )
    # bf16: the fp32 cache repeated (4 B), then autocast's bf16 copies for SDPA (2 B)
    bf16 = predict(small_request(dtype="bfloat16", cuda_graph=True)).phase("rollout")
    assert bf16.activations == 8 * 32 * (14 * 64 + 6 * 128) + 8 * 64 * 2 * 64 * (4 + 2) + 8 * 32 * 64 * 2 == 851_968


def test_the_static_cache_is_in_the_dtype_the_rollout_computes_its_keys_in():
    # patch 0022's StaticCache takes the first parameter's dtype (the embedding: frozen, so 16-bit with a 16-bit LoRA
    # base), and patch 0026 makes it fp32 where the rollout computes in fp32 (the P40's upcast of a 16-bit base)
    t4_lora = qwen_request(dtype="float16", lora_rank=32, frozen_base_dtype="float16", cuda_graph=True)
    assert memory.static_cache_dtype(t4_lora) == "float16"
    assert memory.static_cache_dtype(replace(t4_lora, frozen_base_dtype=None)) == "float32"  # fp32 masters
    assert memory.static_cache_dtype(replace(t4_lora, lora_rank=0, frozen_base_dtype=None)) == "float32"
    p40_lora = qwen_request(dtype="float32", lora_rank=32, frozen_base_dtype="bfloat16", cuda_graph=True)
    assert memory.static_cache_dtype(p40_lora) == "float32"
    # (held bytes, K/V bytes per element attention gets): 2 x 24 layers x 8 rows x 512 columns x kv_dim, the decoder's
    # mask (8 bytes a column a row) and rows
    sequences, columns = 8, 512
    buffers = sequences * columns * memory.STATIC_DECODE_MASK_BYTES + sequences * memory.STATIC_DECODE_ROW_BYTES
    cache = 2 * QWEN.num_layers * sequences * columns * QWEN.kv_dim
    assert memory.static_decode_bytes(QWEN, sequences, columns, "float16", "sdpa", "float16") == (
        2 * cache + buffers,
        2,
    )
    assert memory.static_decode_bytes(QWEN, sequences, columns, "float16", "sdpa") == (4 * cache + buffers, 4 + 2)
    assert memory.static_decode_bytes(QWEN, sequences, columns, "float32", "sdpa") == (4 * cache + buffers, 4)
    rollout = {phase.phase: phase for phase in predict(t4_lora).phases}["rollout"]
    assert "a static KV cache of 512 columns in fp16" in " ".join(rollout.detail)
