"""The time model (verlfit.plan.time): counts against a hand computation, the fit, the labels."""

import dataclasses
import json
from pathlib import Path

import pytest

from verlfit.plan import fit as plan_fit
from verlfit.plan import memory as plan_memory
from verlfit.plan import request as plan_request
from command_lines import run_plan
from verlfit.plan import time as plan_time
from verlfit.cards import CARDS, card_for_gpu_name, get_card
from verlfit.errors import VerlfitError
from verlfit.model_shape import shape_from_config
from verlfit.patch_switches import PatchSwitches, speed_switches
from verlfit.plan.request import resolve_plan_run, time_inputs_for_options
from verlfit.plan.train_estimate import for_train
from verlfit.profiles import load_profile
from verlfit.resolved_run import run_switches

ROOT = Path(__file__).resolve().parents[2]

# hidden 8, 2 heads of 4, 1 KV head, intermediate 16, 2 layers, vocab 32
TINY = shape_from_config(
    dict(
        model_type="qwen2",
        num_hidden_layers=2,
        hidden_size=8,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=16,
        vocab_size=32,
        tie_word_embeddings=True,
    )
)


def tiny_request(**fields):
    base = dict(
        shape=TINY,
        gpu_memory_bytes=2**30,
        train_batch_size=2,
        ppo_mini_batch_size=1,
        actor_micro_batch_size=1,
        log_prob_micro_batch_size=2,
        critic_micro_batch_size=1,
        max_prompt_length=3,
        max_response_length=2,
        gradient_checkpointing=False,
    )
    base.update(fields)
    return plan_memory.PlanRequest(**base)


def test_layer_matmul_parameters_by_hand():
    # q 8x8 + k 8x4 + v 8x4 + o 8x8 + gate/up 8x16 x2 + down 16x8 = 64+32+32+64+384
    assert plan_time.layer_matmul_parameters(TINY) == 576


def test_forward_flops_by_hand():
    # 2 sequences x 5 columns = 10 tokens; layers: 2*10*2*576 = 23040; attention 4*10*5*8*2 = 3200; head 2*2*5*8*32 =
    # 5120
    assert plan_time.forward_flops(TINY, 2, 5, 32) == (26240.0, 5120.0)


def test_actor_update_work_by_hand():
    work = plan_time.phase_work(tiny_request())["update_actor"]
    # full fine-tuning, no checkpointing: layers x3 (forward + 2 backward), head x3
    assert work.flops == 26240 * 3 + 5120 * 3
    assert work.passes == 2 * 3  # 2 micro-batches of 1, 3 passes each
    assert work.passes_x_layers == 2 * 3 * 2
    params = TINY.actor_parameters
    logits = 2 * 5 * 32 * 4 + 2 * 2 * 2 * 32 * 4
    assert work.bytes == 2 * params * 4 * 3 + 2 * params * 4 + 2 * params * 32 + logits * 2


def test_checkpointing_adds_a_forward_of_the_layers_and_lora_drops_weight_gradients():
    ckpt = plan_time.phase_work(tiny_request(gradient_checkpointing=True))["update_actor"]
    assert ckpt.flops == 26240 * 4 + 5120 * 3
    lora = plan_time.phase_work(tiny_request(), plan_time.TimeInputs(lora_rank=8))["update_actor"]
    # the frozen base: forward + input gradients (2x); the adapters, rank 8 on the 7 linears of 2 layers:
    # 8 x (q 16 + k 12 + v 12 + o 16 + gate 24 + up 24 + down 24) x 2 = 2048 parameters, 2 x 10 tokens x 2048
    # forward FLOPs, 3x with their input and weight gradients
    assert lora.flops == 26240 * 2 + 5120 * 2 + 3 * 2 * 10 * 2048
    assert (lora.passes, lora.adapter_passes) == (2 * 2, 2 * 2 * 14)


def test_lora_rank_is_read_from_the_request():
    work = plan_time.phase_work(tiny_request(lora_rank=16))
    assert work["update_actor"].flops == 26240 * 2 + 5120 * 2 + 3 * 2 * 10 * 4096  # rank 16: 4096 adapter parameters
    # the critic takes the actor's rank unless its own is set (PlanRequest.lora_rank_of)
    assert (
        work["update_critic"].flops
        == plan_time.phase_work(tiny_request(), plan_time.TimeInputs(lora_rank=16, critic_lora_rank=16))[
            "update_critic"
        ].flops
    )
    full_critic = plan_time.phase_work(tiny_request(lora_rank=16, critic_lora_rank=0))["update_critic"]
    assert full_critic.flops == plan_time.phase_work(tiny_request())["update_critic"].flops


def test_packed_sequences_use_the_mean_lengths():
    work = plan_time.phase_work(
        tiny_request(), plan_time.TimeInputs(pack_sequences=True, mean_prompt_length=1, mean_response_length=1)
    )["old_log_prob"]
    layers, head = plan_time.forward_flops(TINY, 2, 2, 32)
    assert work.flops == layers + head


def test_trimmed_training_passes_run_on_the_window_by_hand():
    # prompt <= 6, response 2: padded 8 columns; the window: longest prompt 2 + longest response 2 = 4 columns
    request = tiny_request(max_prompt_length=6)
    work = plan_time.phase_work(request, plan_time.TimeInputs(trim_padding=True, window_prompt_length=2))
    # 2 sequences x 4 columns = 8 tokens; layers 2*8*2*576 = 18432; attention 4*8*4*8*2 = 2048; head 2*2*4*8*32 = 4096
    assert work["old_log_prob"].flops == 18432 + 2048 + 4096
    # one micro-batch of 2: weights once; logits 2*4*32*4 (compute) + 2*2*2*32*4 (log-softmax over the 2 response
    # columns)
    assert work["old_log_prob"].bytes == TINY.actor_parameters * 4 + 2 * 4 * 32 * 4 + 2 * 2 * 2 * 32 * 4
    assert work["update_actor"].flops == (18432 + 2048) * 3 + 4096 * 3
    # the critic's head is 1 wide: 2*2*4*8*1 = 128
    assert work["values"].flops == 18432 + 2048 + 128
    # the default window: min(GSM8K_WINDOW_PROMPT_TOKENS, max_prompt_length) + max_response_length
    assert plan_time.training_columns(request, plan_time.TimeInputs(trim_padding=True), "actor") == (8.0, 2.0)
    big = tiny_request(max_prompt_length=512, max_response_length=256)
    assert plan_time.training_columns(big, plan_time.TimeInputs(trim_padding=True), "critic") == (
        plan_time.GSM8K_WINDOW_PROMPT_TOKENS + 256.0,
        256.0,
    )
    assert plan_time.training_columns(big, plan_time.TimeInputs(), "critic") == (768.0, 256.0)


def test_training_trim_is_per_role():
    request = tiny_request(max_prompt_length=6, use_reference=True)
    full = plan_time.phase_work(request)
    critic_only = plan_time.phase_work(request, plan_time.TimeInputs(trim_padding=("critic",), window_prompt_length=2))
    assert (
        critic_only["old_log_prob"] == full["old_log_prob"]
        and critic_only["update_actor"] == full["update_actor"]
        and critic_only["ref"] == full["ref"]
    )
    assert critic_only["values"].flops == 18432 + 2048 + 128
    ref_only = plan_time.phase_work(request, plan_time.TimeInputs(trim_padding=("ref",), window_prompt_length=2))
    assert ref_only["ref"].flops == 18432 + 2048 + 4096 and ref_only["old_log_prob"] == full["old_log_prob"]
    assert plan_time.TimeInputs(trim_padding=True).trim_padding == ("actor", "ref", "critic")
    with pytest.raises(VerlfitError, match=r"trim_padding role\(s\) \['rollout'\] unknown"):
        plan_time.TimeInputs(trim_padding=("rollout",))


def test_generation_work_by_hand():
    work = plan_time.phase_work(tiny_request())["gen"]
    # prefill: 2 sequences x 3 columns, head on the last position only
    assert work.flops == 2 * 6 * 2 * 576 + 4 * 6 * 3 * 8 * 2 + 2 * 2 * 1 * 8 * 32
    assert work.decode_steps == 2 and work.decode_layer_steps == 4 and work.graph_steps == 0
    matmul = 2 * 576 + 32 * 8
    context = 3 + 1
    assert work.decode_flops == 2 * (2 * 2 * matmul + 4 * 2 * context * 8 * 2)
    # KV cache 2 rows x 2 layers x (k, v) x kv_dim 4 x context x 4 B, moved 7 times: repeat_kv reads it and writes
    # 2 copies (2 query heads per KV head), SDPA reads them, torch.cat reads and writes it
    assert plan_time.kv_cache_passes(TINY, static=False) == 7 and plan_time.kv_cache_passes(TINY, static=True) == 5
    assert work.decode_bytes == 2 * (matmul * 4 + 2 * 2 * 2 * 4 * context * 4 * 7 + 2 * 32 * 28)


def test_rollout_trim_generates_from_the_longest_prompt_by_hand():
    request = tiny_request(max_prompt_length=6)
    work = plan_time.phase_work(request, plan_time.TimeInputs(rollout_trim_padding=True, rollout_prompt_length=2))[
        "gen"
    ]
    # prefill over 2 columns: layers 2*4*2*576 = 9216, attention 4*4*2*8*2 = 512, head 2*2*1*8*32 = 1024
    assert work.flops == 9216 + 512 + 1024
    matmul = 2 * 576 + 32 * 8
    context = 2 + 1  # the cache grows from the cut prompt
    assert work.decode_flops == 2 * (2 * 2 * matmul + 4 * 2 * context * 8 * 2)
    untrimmed = plan_time.phase_work(request)["gen"]
    assert untrimmed.flops == 2 * 12 * 2 * 576 + 4 * 12 * 6 * 8 * 2 + 1024
    # the default width: GSM8K's measured longest prompt of a batch of 32, capped at max_prompt_length
    assert plan_time.rollout_prompt_columns(request, plan_time.TimeInputs(rollout_trim_padding=True)) == 6.0
    assert (
        plan_time.rollout_prompt_columns(
            tiny_request(max_prompt_length=512), plan_time.TimeInputs(rollout_trim_padding=True)
        )
        == plan_time.GSM8K_ROLLOUT_PROMPT_TOKENS
    )


def test_cuda_graph_decode_by_hand():
    # 4 decode steps: the eager warm-up and the capture through the HF loop, 2 replays; the StaticCache holds
    # max_prompt_length + max_response_length = 3 + 4 columns, attended in full every step, moved 5 times
    request = tiny_request(max_response_length=4)
    work = plan_time.phase_work(request, plan_time.TimeInputs(cuda_graph=True))["gen"]
    matmul = 2 * 576 + 32 * 8
    flops = 2 * 2 * matmul + 4 * 2 * 7 * 8 * 2
    bytes_ = matmul * 4 + 2 * 2 * 2 * 4 * 7 * 4 * 5 + 2 * 32 * 28
    assert (work.decode_steps, work.decode_layer_steps, work.graph_steps, work.graph_layer_steps) == (2, 4, 2, 4)
    assert (work.decode_flops, work.decode_bytes, work.graph_flops, work.graph_bytes) == (
        2 * flops,
        2 * bytes_,
        2 * flops,
        2 * bytes_,
    )
    # replays pay the decode step's GPU side only; the HF loop's steps pay its CPU side too
    f = plan_time.FACTORS
    h200 = CARDS["h200"]
    assert plan_time.phase_seconds(
        plan_time.PhaseWork(graph_steps=10, graph_layer_steps=20), h200.rates("float32")
    ) == pytest.approx(20 * f["decode_gpu_per_layer_s"])
    assert plan_time.phase_seconds(
        plan_time.PhaseWork(decode_steps=10, decode_layer_steps=20), h200.rates("float32")
    ) == pytest.approx(
        20 * f["decode_gpu_per_layer_s"] + 10 * f["decode_overhead_s"] + 20 * f["decode_overhead_per_layer_s"]
    )
    one = plan_time.PhaseWork(graph_steps=1, graph_flops=67e12)
    assert plan_time.phase_seconds(one, h200.rates("float32")) == pytest.approx(1 / f["decode_efficiency"])


def test_speed_switches_from_overrides():
    five = [
        "+actor_rollout_ref.actor.trim_padding=True",
        "+actor_rollout_ref.ref.trim_padding=True",
        "+critic.trim_padding=True",
        "+actor_rollout_ref.rollout.trim_padding=True",
        "+actor_rollout_ref.rollout.cuda_graph=True",
    ]
    assert speed_switches(five) == {
        "trim_padding": ("actor", "ref", "critic"),
        "rollout_trim_padding": True,
        "cuda_graph": True,
    }
    assert speed_switches(["data.max_prompt_length=512", "+critic.trim_padding=true"]) == {"trim_padding": ("critic",)}
    # the last one wins; ~key deletes it (verl then reads the absent key as False)
    assert speed_switches([*five, "actor_rollout_ref.rollout.cuda_graph=False", "~critic.trim_padding"]) == {
        "trim_padding": ("actor", "ref"),
        "rollout_trim_padding": True,
    }
    assert speed_switches([]) == {}
    with pytest.raises(VerlfitError, match=r"override 'critic.trim_padding=\[' does not parse"):
        speed_switches(["critic.trim_padding=["])


def test_offload_moves_bytes_over_pcie():
    work = plan_time.phase_work(tiny_request(actor_optimizer_offload=True, critic_param_offload=True))
    assert work["update_actor"].pcie_bytes == 16 * TINY.actor_parameters
    assert work["values"].pcie_bytes == 8 * TINY.critic_parameters
    assert work["update_critic"].pcie_bytes == 8 * TINY.critic_parameters
    assert work["old_log_prob"].pcie_bytes == 0


def test_seconds_follow_the_card_rates():
    work = plan_time.PhaseWork(flops=67e12, bytes=0.0)
    factors = dict(plan_time.FACTORS, train_efficiency_float32=0.5)
    assert plan_time.phase_seconds(work, CARDS["h200"].rates("float32"), factors) == pytest.approx(2.0)
    assert plan_time.phase_seconds(work, CARDS["p40"].rates("float32"), factors) == pytest.approx(67 / 11.76 * 2)
    pcie = plan_time.PhaseWork(pcie_bytes=15.75e9)
    assert plan_time.phase_seconds(pcie, CARDS["p40"].rates("float32")) == pytest.approx(1.0)


def test_bf16_on_the_p40_is_refused():
    with pytest.raises(VerlfitError, match="no bf16 hardware"):
        plan_time.estimate(tiny_request(dtype="bfloat16"), "p40")


def test_cards_match_nvml_names():
    assert card_for_gpu_name("Tesla P40").key == "p40"
    assert card_for_gpu_name("NVIDIA A10").key == "a10"
    assert card_for_gpu_name("NVIDIA A100-SXM4-80GB") is None
    assert card_for_gpu_name("NVIDIA L4").key == "l4"
    assert card_for_gpu_name("NVIDIA H200").key == "h200"
    # compute capability 7.x (issue 27): NVML's names for them
    assert card_for_gpu_name("Tesla T4").key == "t4"
    assert card_for_gpu_name("Tesla V100-SXM2-32GB").key == "v100"
    assert card_for_gpu_name("Tesla V100-SXM2-16GB").key == "v100"
    assert card_for_gpu_name("Tesla V100-PCIE-32GB").key == "v100-pcie"
    assert card_for_gpu_name("Tesla V100S-PCIE-32GB") is None  # faster than the V100: not matched to it
    assert card_for_gpu_name("NVIDIA GeForce RTX 2080 Ti").key == "rtx2080ti"
    with pytest.raises(VerlfitError, match="use one of: p40, t4, v100, v100-pcie, rtx2080ti, a10, l4, h200"):
        get_card("k80")


def test_estimate_lines_label_and_run():
    est = plan_time.estimate(tiny_request(), "p40")
    lines = plan_time.estimate_lines(est, 100)
    assert lines[0] == "time on Tesla P40 (datasheet-based estimate, unverified on a real card):"
    assert est.step_seconds * 100 < 120
    assert lines[-1] == f"  run of 100 steps: {round(est.step_seconds * 100)} s"


def test_run_time_shows_seconds_or_minutes_below_an_hour():
    # a new-user trial read "2 steps = 0.00 h"
    assert [plan_time.format_run_seconds(s) for s in (0.4, 69.2, 119.4, 120, 1830, 3599, 3600, 6840)] == [
        "0 s",
        "69 s",
        "119 s",
        "2 min",
        "30 min",
        "60 min",
        "1.0 h",
        "1.9 h",
    ]
    assert plan_time.estimate_lines(plan_time.estimate(tiny_request(), "h200"), None)[0].endswith(
        "(estimate calibrated on recorded H200 runs (benchmarks/calibrate_time.py)):"
    )


def test_run_steps_from_dataset_size():
    assert plan_time.run_steps(steps=50) == 50
    assert plan_time.run_steps(epochs=2, dataset_rows=7473, train_batch_size=32) == 2 * 233
    assert plan_time.run_steps() is None


def test_calibration_fit_reproduces_the_stored_factors():
    import calibrate_time  # benchmarks/ is on sys.path (tests/conftest.py)

    card = get_card("h200")
    records = calibrate_time.stored_records()
    benches = calibrate_time.decode_benches()
    assert calibrate_time.fit(records, card, benches) == plan_time.FACTORS
    assert calibrate_time.window_prompt_tokens(records, card, plan_time.FACTORS) == plan_time.GSM8K_WINDOW_PROMPT_TOKENS
    assert calibrate_time.rollout_prompt_tokens(records) == plan_time.GSM8K_ROLLOUT_PROMPT_TOKENS
    _, results = calibrate_time.table(records, card, plan_time.FACTORS)
    assert len(results) == 26
    session3 = "2026-12-01-h200-p40-lora-resume-faster-path-alone/speed-trims-alone/"
    assert [r["record"] for r in results][12:18] == [
        "2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench/speed-today",
        "2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench/speed-all",
        *(session3 + n for n in ("speed-today", "speed-trims", "speed-all", "lora-speed-trims_unwrap")),
    ]
    # every record within +-25% a step but one: the 4B T4 target with CUDA graphs off (not the default since issue
    # 43) generates 1.8x slower than the model says (docs/benchmarks.md section 4.7)
    t4_off = "2026-12-03-h200-t4-lora-graphs-side-by-side/lora16-qwen3-4b-grpo-t4-graphs-off"
    assert [(r["record"], r["error"]) for r in results if abs(r["error"]) > 0.25] == [(t4_off, -0.4309)]
    by_name = {r["record"]: r for r in results}
    assert by_name[t4_off]["phases"]["gen"] == [70.865, 125.316]
    # the one efficiency of fp32 and 16-bit passes (calibrate_time.fit ties them), below the datasheet peak
    assert plan_time.FACTORS["train_efficiency_float32"] == plan_time.FACTORS["train_efficiency_bfloat16"] < 1
    # a 16-bit LoRA pass costs each adapted Linear 3.9x an fp32 one's fixed cost
    assert plan_time.FACTORS["adapter_pass_overhead_16bit_s"] / plan_time.FACTORS[
        "adapter_pass_overhead_s"
    ] == pytest.approx(3.86, abs=0.01)
    # the records the fit never saw (the Qwen2.5 family in fp16; the 7B A10 target as verlfit ran it before patch
    # 0027, on another machine than its fitted twins; the 4B T4 target as verlfit runs it and as before, on a third
    # machine; the Llama-3.1-8B on an NF4 base; the Qwen2.5-7B on an NF4 base on the p40 and a10 paths, and its bf16
    # twin): as computed from their metrics, within +-25% but the 4B as before (graphs off, the adapters FSDP units:
    # the fitted 4B graphs-off run's miss, milder)
    _, checks = calibrate_time.table(calibrate_time.check_records(), card, plan_time.FACTORS)
    t4_4b = "2026-12-05-h200-t4-4b-lora-graphs-before-after/lora16-qwen3-4b-grpo-t4-graphs-"
    nf4_7b = "2026-12-05-h200-nf4-7b-p40-14b-a10-learning-check/"
    assert [(r["record"], r["measured_step_s"], r["error"]) for r in checks] == [
        ("2026-12-04-h200-lora16-time-calibration-learning-check/lora16-qwen2.5-3b-grpo-t4-graphs-on", 26.083, -0.1115),
        ("2026-12-04-h200-lora-adapters-outside-fsdp-7b-a10/lora16-qwen2.5-7b-grpo-a10-graphs-before", 68.017, -0.1284),
        (t4_4b + "on", 39.311, -0.0602),
        (t4_4b + "before", 142.56, -0.2641),
        ("2026-12-05-h200-t4-nf4-llama-8b/nf4-llama-3.1-8b-grpo-t4", 27.945, -0.0468),
        (nf4_7b + "p40-7b-alone/nf4-qwen2.5-7b-grpo-p40", 72.053, 0.0265),
        (nf4_7b + "a10-7b-nf4-beside-bfloat16/nf4-qwen2.5-7b-grpo-a10", 16.782, -0.14),
        (nf4_7b + "a10-7b-nf4-beside-bfloat16/lora16-qwen2.5-7b-grpo-a10-graphs-on", 25.002, 0.0414),
    ]
    # the adapters outside FSDP (patch 0027) cost less per adapted Linear than the 16-bit FSDP units did
    assert plan_time.FACTORS["adapter_pass_overhead_outside_s"] < plan_time.FACTORS["adapter_pass_overhead_16bit_s"]
    assert not {rel for rel, *_ in calibrate_time.CHECK_RECORDS} & {r.name for r in records}
    _, bench_results = calibrate_time.bench_table(benches, card, plan_time.FACTORS)
    assert [b["bench"] for b in bench_results] == [
        "2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench/decode_bench.json batch 32",
        "2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench/decode_bench.json batch 64",
    ]
    assert all(abs(b["error"]) <= 0.25 for b in bench_results), bench_results


def test_calibration_reads_the_speed_keys_and_excludes_shared_runs():
    import calibrate_time  # benchmarks/ is on sys.path (tests/conftest.py)

    records = {r.name: r for r in calibrate_time.stored_records()}
    all_keys = records["2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench/speed-all"]
    assert (all_keys.inputs.trim_padding, all_keys.inputs.rollout_trim_padding, all_keys.inputs.cuda_graph) == (
        ("actor", "ref", "critic"),
        True,
        True,
    )
    assert all_keys.fitted == ("gen",)
    # one rollout micro-batch of 32 per step: its width is the batch's longest prompt as verl recorded it (steps 2-10)
    assert all_keys.inputs.rollout_prompt_length == pytest.approx(
        (232 + 239 + 217 + 293 + 249 + 209 + 219 + 207 + 203) / 9
    )
    today = records["2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench/speed-today"]
    assert (today.inputs.trim_padding, today.inputs.rollout_trim_padding, today.inputs.cuda_graph) == ((), False, False)
    assert today.measured["gen"] == pytest.approx(7.40, abs=0.005) and all_keys.measured["gen"] == pytest.approx(
        3.70, abs=0.005
    )
    excluded = {rel for rel, _ in calibrate_time.EXCLUDED_RECORDS}
    assert {
        "2026-12-01-h200-p40-faster-path-lora-export/learn-speed-keys-export-eval/learn-grpo-lr1e-5-fast",
        "2026-12-01-h200-p40-faster-path-lora-export/lora-1p5b-ppo-3b-grpo-shared/lora-1p5b-ppo",
    } <= excluded
    assert not excluded & set(records)
    assert (
        "the fp32-compute ones set adapter_pass_overhead_s, the 16-bit ones adapter_pass_overhead_16bit_s"
        in calibrate_time.notes()
    )
    # the third session's records: the switches from their overrides, the StaticCache sized to the trimmed width
    session3 = "2026-12-01-h200-p40-lora-resume-faster-path-alone/speed-trims-alone/"
    trims, new_all, lora = (
        records[session3 + "speed-trims"],
        records[session3 + "speed-all"],
        records[session3 + "lora-speed-trims_unwrap"],
    )
    assert (
        trims.inputs.trim_padding,
        trims.inputs.rollout_trim_padding,
        trims.inputs.cuda_graph,
        trims.inputs.unwrap_fsdp,
    ) == (("actor", "ref", "critic"), True, False, False)
    assert (
        new_all.inputs.cuda_graph,
        new_all.inputs.unwrap_fsdp,
        new_all.inputs.static_cache_untrimmed,
        all_keys.inputs.static_cache_untrimmed,
    ) == (True, True, False, True)
    assert trims.fitted == new_all.fitted == ("gen",) and lora.fitted == calibrate_time.MEASURED
    # the 3-step LoRA run: steps 2-3, the Qwen2.5-1.5B shape (make_model.py's), LoRA rank 32 on actor and critic
    assert (
        lora.steps_used,
        lora.request.shape.num_layers,
        lora.request.shape.hidden_size,
        lora.request.lora_rank_of("actor"),
        lora.request.lora_rank_of("critic"),
    ) == (2, 28, 1536, 32, 32)
    assert (lora.inputs.unwrap_fsdp, lora.inputs.cuda_graph, lora.request.has_reference) == (True, False, False)


def test_plan_prints_the_labelled_estimate_for_the_emulated_p40():
    status, out = run_plan(["--emulate", "p40", "--steps", "200"])
    request = plan_request.request_from_options(_options(["--emulate", "p40"]))[0]
    from verlfit.profiles import load_profile

    # plan sizes the run as train does (auto-fit) and reads the profile's speed keys (the trims and the CUDA graph
    # on in p40)
    switches = speed_switches(load_profile("p40").overrides)
    assert switches == {"trim_padding": ("actor", "ref", "critic"), "rollout_trim_padding": True, "cuda_graph": True}
    # plan's --save-freq defaults to train's 25 (a checkpoint save every 25 steps is part of the step time)
    est = plan_time.estimate(plan_fit.auto_fit(request).request, "p40", plan_time.TimeInputs(**switches, save_freq=25))
    assert status == 0
    assert "card: --emulate p40\n" in out
    assert "time on Tesla P40 (datasheet-based estimate, unverified on a real card):\n" in out
    assert f"  {'step':<30} {est.step_seconds:8.2f} s\n" in out
    assert f"  run of 200 steps: {est.step_seconds * 200 / 3600:.1f} h ({est.step_seconds * 200:.0f} s)\n" in out


def _parsed(argv):
    import argparse

    from verlfit.commands import plan as command

    parser = argparse.ArgumentParser()
    command.register(parser.add_subparsers())
    return parser.parse_args(["plan", *argv])


def _options(argv):
    """``verlfit plan ARGV``'s typed options (verlfit.commands.plan.plan_options), as the planner reads them."""
    from verlfit.commands import plan as command

    return command.plan_options(_parsed(argv))


def test_plan_json_time_for_the_detected_gpu_and_dataset_epochs():
    from fakes import FakeNvml

    nvml = FakeNvml(gpus=[("NVIDIA H200", (9, 0), 141 * 2**30)])
    status, out = run_plan(
        ["--profile", "p40", "--gpu-memory", "22.5", "--dataset-size", "7473", "--epochs", "2", "--json"], nvml=nvml
    )
    data = json.loads(out)["time"]
    assert data["card"] == "h200" and data["card_source"] == "GPU 0: NVIDIA H200"
    assert data["label"] == "estimate calibrated on recorded H200 runs (benchmarks/calibrate_time.py)"
    assert data["steps"] == 2 * (7473 // 32)
    assert data["run_h"] == round(data["step_s"] * data["steps"] / 3600, 3)
    # --save-freq defaults to train's 25: the checkpoint save is a phase
    assert list(data["phases_s"]) == [
        "gen",
        "old_log_prob",
        "values",
        "update_critic",
        "update_actor",
        "save_checkpoint",
        "other",
    ]


def test_plan_unknown_gpu_falls_back_to_the_profile_card():
    from fakes import FakeNvml

    nvml = FakeNvml(gpus=[("NVIDIA A100-SXM4-80GB", (8, 0), 80 * 2**30)])
    run = resolve_plan_run(_options(["--profile", "a10"]), nvml)
    assert run.card.key == "a10"
    assert run.card_source == "no datasheet facts for NVIDIA A100-SXM4-80GB: estimating for the a10 profile's card"


def _for_train(settings, profile):
    """``verlfit train``'s time lines and seconds for ``settings`` with ``profile``, the switches resolved as
    train resolves them (:func:`verlfit.resolved_run.run_switches`), 10 steps."""
    return for_train(settings, profile, None, 10, run_switches(profile, settings))


FIVE_KEYS = [
    "+actor_rollout_ref.actor.trim_padding=True",
    "+actor_rollout_ref.ref.trim_padding=True",
    "+critic.trim_padding=True",
    "+actor_rollout_ref.rollout.trim_padding=True",
    "+actor_rollout_ref.rollout.cuda_graph=True",
]


def _train_estimate(capsys, extra):
    import re
    import tempfile

    from fakes import write_raw_gsm8k
    from verlfit import cli

    with tempfile.TemporaryDirectory() as folder:  # raw GSM8K files: what a real launch prepares, no hub needed
        assert (
            cli.main(
                ["train", "--emulate", "p40", "--dry-run", "--steps", "200", "--data", write_raw_gsm8k(folder), *extra]
            )
            == 0
        )
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if "plan: estimated time on Tesla P40" in line]
    return float(re.search(r"([0-9.]+) s/step", line).group(1)), out


def _train_request(settings, profile):
    from verlfit.model_shape import load_model_shape
    from verlfit.plan.request import request_from_settings

    return request_from_settings(settings, profile, 24 * 1024**3, shape=load_model_shape(settings.model))


def test_train_dry_run_estimate_follows_the_speed_keys(capsys, monkeypatch):
    import argparse

    from verlfit.profiles import load_profile
    from verlfit.commands.train import prepare_launch, register

    monkeypatch.delenv("VERLFIT_PROFILE", raising=False)
    # the p40 profile turns the four trims and the CUDA graph on; `key=False` after -- turns each off again (today's
    # path); `+...cuda_graph=True` after -- repeats the profile's
    today, off = _train_estimate(capsys, ["--", *(key.replace("=True", "=False") for key in FIVE_KEYS)])
    assert (
        "+actor_rollout_ref.rollout.cuda_graph=False" in off and "+actor_rollout_ref.rollout.trim_padding=False" in off
    )
    with_keys, out = _train_estimate(capsys, ["--", FIVE_KEYS[-1]])
    assert "+actor_rollout_ref.rollout.cuda_graph=True" in out  # the keys do reach verl's command
    assert with_keys < today
    # the printed figures are the model's for the planned settings with and without the three switches
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    settings = prepare_launch(
        parser.parse_args(["train", "--emulate", "p40", "--dry-run", "--steps", "200", "--", *FIVE_KEYS]), environ={}
    ).settings
    request = _train_request(settings, load_profile("p40"))
    expected = {
        keys: (
            plan_time.estimate(
                request,
                "p40",
                plan_time.TimeInputs(save_freq=25, trim_padding=keys, rollout_trim_padding=keys, cuda_graph=keys),
            ).step_seconds
        )
        for keys in (False, True)
    }
    assert (f"{today:.1f}", f"{with_keys:.1f}") == (f"{expected[False]:.1f}", f"{expected[True]:.1f}")


def test_train_reads_speed_keys_from_the_profile_too():
    from verlfit.run_settings import TrainSettings
    from verlfit.profiles import load_profile

    shipped = load_profile("p40")  # carries the four trims and the CUDA graph
    assert [key in shipped.overrides for key in FIVE_KEYS] == [True, True, True, True, True]
    profile = dataclasses.replace(shipped, overrides=tuple(o for o in shipped.overrides if o not in FIVE_KEYS))
    switched = dataclasses.replace(profile, overrides=(*profile.overrides, *FIVE_KEYS))
    settings = TrainSettings(steps=10, save_freq=-1)
    request = _train_request(settings, profile)

    def model(**switches):
        return plan_time.estimate(request, "p40", plan_time.TimeInputs(**switches)).step_seconds

    plain = _for_train(settings, profile)[1]
    from_profile = _for_train(settings, switched)[1]
    from_user = _for_train(dataclasses.replace(settings, extra_overrides=list(FIVE_KEYS)), profile)[1]
    # the user's ~key after -- turns the profile's switch back off
    undone = _for_train(
        dataclasses.replace(settings, extra_overrides=["~actor_rollout_ref.rollout.cuda_graph"]), switched
    )[1]
    assert plain == model()
    assert from_profile == from_user == model(trim_padding=True, rollout_trim_padding=True, cuda_graph=True) < plain
    assert undone == model(trim_padding=True, rollout_trim_padding=True) != from_profile


def test_plan_flags_set_the_speed_switches():
    options = _options(
        [
            "--emulate",
            "p40",
            "--trim-padding",
            "--rollout-trim-padding",
            "--cuda-graph",
            "--window-prompt-length",
            "180",
            "--rollout-prompt-length",
            "300",
        ]
    )
    inputs = time_inputs_for_options(options, resolve_plan_run(options))
    assert (
        inputs.trim_padding,
        inputs.rollout_trim_padding,
        inputs.cuda_graph,
        inputs.window_prompt_length,
        inputs.rollout_prompt_length,
    ) == (("actor", "ref", "critic"), True, True, 180.0, 300.0)
    # unset flags follow the profile's overrides; --no-... turns a profile's switch off
    assert all(key in load_profile("p40").overrides for key in FIVE_KEYS)
    p40 = _options(["--emulate", "p40"])
    assert time_inputs_for_options(p40, resolve_plan_run(p40)).cuda_graph is True
    switched_off = _options(["--emulate", "p40", "--no-cuda-graph", "--no-trim-padding"])
    off = time_inputs_for_options(switched_off, resolve_plan_run(switched_off))
    assert (off.trim_padding, off.rollout_trim_padding, off.cuda_graph) == ((), True, False)
    status, out = run_plan(
        ["--emulate", "p40", "--steps", "200", "--trim-padding", "--rollout-trim-padding", "--cuda-graph"]
    )
    est = plan_time.estimate(
        plan_fit.auto_fit(plan_request.request_from_options(_options(["--emulate", "p40"]))[0]).request,
        "p40",
        plan_time.TimeInputs(trim_padding=True, rollout_trim_padding=True, cuda_graph=True, save_freq=25),
    )
    assert status == 0
    assert f"  {'step':<30} {est.step_seconds:8.2f} s\n" in out


def test_train_estimate_with_lora_models_the_profiles_cuda_graph_and_the_unwrapped_generation():
    # a new-user trial found the estimate modelling CUDA graphs while build_overrides turned them off with LoRA; since
    # issue 43 LoRA keeps the profile's graphs, and the estimate models what the run gets: graphs on, unwrap_fsdp on.
    # The profile's switches are stated here (the five keys on), not read from the p40 profile's defaults
    from verlfit.run_settings import TrainSettings
    from verlfit.profiles import load_profile

    profile = dataclasses.replace(load_profile("p40"), overrides=tuple(FIVE_KEYS))
    settings = TrainSettings(steps=10, save_freq=-1, lora_rank=32)
    request = _train_request(settings, profile)

    def model(**switches):
        return plan_time.estimate(request, "p40", plan_time.TimeInputs(**switches)).step_seconds

    lines, seconds = _for_train(settings, profile)
    graphs_off = model(trim_padding=True, rollout_trim_padding=True, unwrap_fsdp=True)
    graphs_on = model(trim_padding=True, rollout_trim_padding=True, cuda_graph=True, unwrap_fsdp=True)
    assert seconds == graphs_on != graphs_off
    # LoRA on one GPU: build_overrides adds +...unwrap_fsdp=True, whose generation the estimate models
    assert (
        lines[-1]
        == "plan: LoRA terms of the time estimate (generation through patch 0023's unwrap_fsdp, training passes) rest"
        " on few records alone on the H200: Qwen2.5-1.5B PPO (fp32), the Qwen3-4B, Qwen2.5-7B and Qwen2.5-3B targets"
        " (16-bit bases), the adapters outside FSDP on the 7B alone (docs/benchmarks.md sections 1.6 and 4.8)"
    )
    # the user's unwrap_fsdp=False after -- : generation through FSDP's hooks, not modelled
    wrapped = _for_train(
        dataclasses.replace(settings, extra_overrides=["+actor_rollout_ref.rollout.unwrap_fsdp=False"]), profile
    )[0]
    assert (
        wrapped[-1]
        == "plan: LoRA generation is not modelled: through FSDP's hooks it measured 7-9x slower than this model's"
        " figure on the H200 (docs/benchmarks.md section 4.1); with patch 0023's unwrap_fsdp, which verlfit turns on"
        " for LoRA on one GPU, 2.5x faster than that, measured only while sharing the GPU (section 4.2)"
    )
    # the final override list, when given, is what is read: a later cuda_graph=True wins over an earlier False
    assert for_train(
        settings,
        profile,
        None,
        10,
        PatchSwitches.from_overrides(
            [
                *profile.overrides,
                "+actor_rollout_ref.rollout.cuda_graph=False",
                "+actor_rollout_ref.rollout.cuda_graph=True",
            ]
        ),
    )[1] == model(trim_padding=True, rollout_trim_padding=True, cuda_graph=True)
    full = _for_train(dataclasses.replace(settings, lora_rank=0), profile)[0]
    assert not any("LoRA" in line for line in full)


def test_lora_checkpoints_count_the_frozen_base_and_the_adapters_optimizer_state():
    # verl 0.4.1 FSDPCheckpointManager.save_checkpoint saves model.state_dict() (base + adapters, fp32) and
    # optimizer.state_dict() (AdamW's two states of the trained adapters): Qwen2.5-0.5B, rank 32, all-linear
    from verlfit.model_shape import load_model_shape

    request = plan_memory.PlanRequest(
        shape=load_model_shape("Qwen/Qwen2.5-0.5B-Instruct"), gpu_memory_bytes=24 * 2**30, lora_rank=32
    )
    assert plan_time.checkpoint_bytes(request, "actor") == 4 * (494_032_768 + 17_596_416) + 8 * 17_596_416
    assert plan_time.checkpoint_bytes(request, "actor", rank=0) == 12 * 494_032_768
    work = plan_time.phase_work(request, plan_time.TimeInputs(save_freq=25))
    critic = plan_time.checkpoint_bytes(request, "critic")
    assert critic == 4 * (request.shape.critic_parameters + 17_597_313) + 8 * 17_597_313
    assert work["save_checkpoint"].save_bytes == (plan_time.checkpoint_bytes(request, "actor") + critic) / 25


def test_plan_save_freq_defaults_to_trains_and_takes_its_type(capsys):
    assert _parsed(["--emulate", "p40"]).save_freq == 25
    assert _parsed(["--emulate", "p40", "--save-freq", "-1"]).save_freq == -1
    never = _options(["--emulate", "p40", "--save-freq", "0"])
    assert time_inputs_for_options(never, resolve_plan_run(never)).save_freq is None
    with pytest.raises(SystemExit):
        _parsed(["--emulate", "p40", "--save-freq", "-2"])
    assert "-2 must be a number of steps (1 or more), or 0 or -1 for never" in capsys.readouterr().err


def test_plan_and_train_dry_run_give_the_same_step_time(capsys, monkeypatch, tmp_path):
    # a new-user trial: plan --emulate p40 --steps 200 said 34.11 s (no saves), train --dry-run 34.8 s (a save every 25)
    import re

    from fakes import write_raw_gsm8k

    from verlfit import cli

    monkeypatch.delenv("VERLFIT_PROFILE", raising=False)
    status, out = run_plan(["--emulate", "p40", "--steps", "200"])
    planned = float(re.search(r"  step +([0-9.]+) s\n", out).group(1))
    assert (
        cli.main(
            ["train", "--dry-run", "--emulate", "p40", "--steps", "200", "--data", write_raw_gsm8k(tmp_path / "raw")]
        )
        == 0
    )
    trained = float(re.search(r"plan: estimated time on Tesla P40: ([0-9.]+) s/step", capsys.readouterr().out).group(1))
    assert f"{planned:.1f}" == f"{trained:.1f}"


def test_plan_with_fewer_rows_than_a_batch_says_no_step():
    status, out = run_plan(["--emulate", "p40", "--dataset-size", "10"])
    assert "  run: 10 rows are fewer than one batch of 32: no step\n" in out
    assert "pass --steps" not in out


@pytest.mark.parametrize("value", ["0", "-1", "1.5"])
@pytest.mark.parametrize("flag", ["--window-prompt-length", "--window-response-length", "--rollout-prompt-length"])
def test_window_lengths_are_whole_numbers(flag, value, capsys):
    with pytest.raises(SystemExit):
        _parsed(["--emulate", "p40", flag, value])
    assert f"argument {flag}:" in capsys.readouterr().err


def test_window_lengths_above_the_maximum_are_refused_and_without_their_switch_noted():
    with pytest.raises(VerlfitError, match=r"--window-prompt-length 100000 is more than --max-prompt-length 512"):
        run_plan(["--emulate", "p40", "--window-prompt-length", "100000"])
    with pytest.raises(VerlfitError, match=r"--rollout-prompt-length 513 is more than --max-prompt-length 512"):
        run_plan(["--emulate", "p40", "--rollout-prompt-length", "513"])
    with pytest.raises(VerlfitError, match=r"--window-response-length 300 is more than --max-response-length 256"):
        run_plan(["--emulate", "p40", "--max-response-length", "256", "--window-response-length", "300"])
    status, out = run_plan(
        ["--emulate", "p40", "--no-trim-padding", "--window-prompt-length", "100", "--rollout-prompt-length", "100"]
    )
    assert (
        "note: --window-prompt-length 100 has no effect: --trim-padding is off (the profile's keys or"
        " --no-trim-padding)\n" in out
    )
    assert "rollout-prompt-length 100 has no effect" not in out  # the p40 profile turns the rollout trim on
    status, out = run_plan(["--emulate", "p40", "--window-prompt-length", "100"])
    assert "has no effect" not in out


def test_the_a10_profiles_vllm_path_is_said_to_be_unmodelled(capsys, tmp_path):
    from fakes import write_raw_gsm8k
    from verlfit import cli

    # --skip-checks: this Python may lack vllm, which a real launch's checks refuse
    assert (
        cli.main(
            [
                "train",
                "--dry-run",
                "--profile",
                "a10",
                "--steps",
                "10",
                "--skip-checks",
                "--data",
                write_raw_gsm8k(tmp_path / "raw"),
            ]
        )
        == 0
    )
    assert f"note: plan: {plan_time.VLLM_NOTE}" in " ".join(
        capsys.readouterr().out.split()
    )  # the dry run wraps its notes
    assert (
        cli.main(
            [
                "train",
                "--dry-run",
                "--profile",
                "a10",
                "--rollout",
                "hf",
                "--attention",
                "sdpa",
                "--steps",
                "10",
                "--data",
                str(tmp_path / "raw"),
            ]
        )
        == 0
    )
    assert plan_time.VLLM_NOTE not in capsys.readouterr().out
    status, out = run_plan(["--profile", "a10"])
    assert plan_time.VLLM_NOTE + "\n" in out


def test_lora_update_counts_the_frozen_base_the_adapters_and_their_fixed_costs_on_the_1p5b_shape():
    # Qwen2.5-1.5B (28 layers, hidden 1536, q 1536, KV 256, intermediate 8960, vocab 151936), LoRA rank 32 on all
    # linear layers: per layer 32 x (q 3072 + k 1792 + v 1792 + o 3072 + gate 10496 + up 10496 + down 10496)
    from verlfit.model_shape import load_model_shape

    shape = load_model_shape("Qwen/Qwen2.5-1.5B-Instruct")
    adapter = 32 * (3072 + 1792 + 1792 + 3072 + 3 * 10496) * 28
    assert (
        plan_memory.lora_adapter_work(shape, "actor", 32)
        == plan_memory.lora_adapter_work(shape, "critic", 32)
        == (adapter, 7 * 28)
        == (36_929_536, 196)
    )
    assert plan_memory.lora_adapter_work(shape, "actor", 0) == (0, 0)
    # PPO, 32 responses of 512 + 256 columns (untrimmed), actor micro-batch 4, gradient checkpointing
    full_request = plan_memory.PlanRequest(
        shape=shape,
        gpu_memory_bytes=24 * 2**30,
        train_batch_size=32,
        ppo_mini_batch_size=16,
        actor_micro_batch_size=4,
        log_prob_micro_batch_size=8,
        critic_micro_batch_size=16,
        max_prompt_length=512,
        max_response_length=256,
        gradient_checkpointing=True,
    )
    lora_request = dataclasses.replace(full_request, lora_rank=32)
    tokens, columns = 32 * 768, 768
    layer_params = 1536 * 1536 * 2 + 2 * 1536 * 256 + 3 * 1536 * 8960  # q, o; k, v; gate, up, down
    layers = 2 * tokens * 28 * layer_params + 4 * tokens * columns * 1536 * 28
    head = 2 * tokens * 1536 * 151936
    full = plan_time.phase_work(full_request)["update_actor"]
    lora = plan_time.phase_work(lora_request)["update_actor"]
    # full: forward + 2x backward + the recompute of the layers, the head without recompute
    assert full.flops == 4 * layers + 3 * head
    # LoRA: the frozen base's backward is input gradients only (2x the forward, + the recompute); the adapters'
    # forward 2 x tokens x adapter parameters, 3x with their input and weight gradients, + the recompute
    assert lora.flops == 3 * layers + 2 * head + 4 * 2 * tokens * adapter
    # fixed costs: 8 micro-batches x 3 passes (forward, input-gradient backward, recompute) x 196 adapted Linears
    assert (full.passes, lora.passes, full.adapter_passes, lora.adapter_passes) == (8 * 4, 8 * 3, 0, 8 * 3 * 196)
    # bytes: the base and the adapters read per pass, gradients and AdamW over the adapters only (full: every parameter)
    logits = tokens * 151936 * 4 + 2 * 32 * 256 * 151936 * 4
    params = shape.actor_parameters
    assert lora.bytes == 8 * (params + adapter) * 4 * 3 + 8 * adapter * 4 + 2 * adapter * 32 + 2 * logits
    assert full.bytes == 8 * params * 4 * 4 + 8 * params * 4 + 2 * params * 32 + 2 * logits
    # seconds: the adapters' fixed cost is adapter_pass_overhead_s per adapted Linear per pass
    card = get_card("h200")
    f = plan_time.FACTORS
    bare = dataclasses.replace(lora, adapter_passes=0)
    assert plan_time.phase_seconds(lora, card.rates("float32")) - plan_time.phase_seconds(
        bare, card.rates("float32")
    ) == pytest.approx(8 * 3 * 196 * f["adapter_pass_overhead_s"])
    # no ref model: with LoRA the ref log-prob is the actor with its adapter disabled, a base forward
    grpo = dataclasses.replace(lora_request, algorithm="grpo", rollout_n=4, train_batch_size=8, ppo_mini_batch_size=4)
    work = plan_time.phase_work(grpo)
    ref, old = work["ref"], work["old_log_prob"]
    assert (ref.flops, ref.adapter_passes) == (layers + head, 0)
    assert (old.flops, old.adapter_passes) == (layers + head + 2 * tokens * adapter, 4 * 196)
    # generation: 256 decode steps through the HF loop, each paying every adapted Linear's fixed cost
    assert plan_time.phase_work(lora_request)["gen"].adapter_decode_steps == 256 * 196
    assert plan_time.phase_work(full_request)["gen"].adapter_decode_steps == 0
    # patch 0027 (the adapters outside FSDP): the same passes, counted at adapter_pass_overhead_outside_s; the
    # roles without the key, the ref (the adapter disabled) and generation are unchanged
    critic_lora = dataclasses.replace(lora_request, critic_lora_rank=32)
    units = plan_time.phase_work(critic_lora)
    outside = plan_time.phase_work(critic_lora, plan_time.TimeInputs(adapters_outside_fsdp=("actor",)))
    for phase in ("old_log_prob", "update_actor"):
        assert (outside[phase].adapter_passes, outside[phase].adapter_passes_outside) == (
            0,
            units[phase].adapter_passes,
        )
        assert (
            dataclasses.replace(outside[phase], adapter_passes=units[phase].adapter_passes, adapter_passes_outside=0)
            == units[phase]
        )
    for phase in ("values", "update_critic", "gen"):
        assert outside[phase] == units[phase]
    both = plan_time.phase_work(critic_lora, plan_time.TimeInputs(adapters_outside_fsdp=("actor", "critic")))
    assert (both["update_critic"].adapter_passes, both["update_critic"].adapter_passes_outside) == (
        0,
        units["update_critic"].adapter_passes,
    )
    seconds = plan_time.phase_seconds(outside["update_actor"], card.rates("bfloat16"))
    assert seconds - plan_time.phase_seconds(
        dataclasses.replace(outside["update_actor"], adapter_passes_outside=0), card.rates("bfloat16")
    ) == pytest.approx(8 * 3 * 196 * f["adapter_pass_overhead_outside_s"])
    with pytest.raises(VerlfitError, match=r"adapters_outside_fsdp role\(s\) \['ref'\] unknown"):
        plan_time.TimeInputs(adapters_outside_fsdp=("ref",))


def test_speed_switches_read_unwrap_fsdp():
    assert speed_switches(["+actor_rollout_ref.rollout.unwrap_fsdp=True"]) == {"unwrap_fsdp": True}
    assert (
        speed_switches(["+actor_rollout_ref.rollout.unwrap_fsdp=True", "+actor_rollout_ref.rollout.unwrap_fsdp=False"])
        == {}
    )


def test_benchmarks_time_model_section_holds_the_scripts_table_and_the_p40_graph_figures():
    # docs/benchmarks.md section 1.6 is calibrate_time.py's output with the stored factors, regenerated by hand
    import calibrate_time  # benchmarks/ is on sys.path (tests/conftest.py)

    text = (ROOT / "docs" / "benchmarks.md").read_text()
    section = text[text.index("### 1.6 Time-model calibration") : text.index("## 2. Memory and the planner")]
    card = get_card("h200")
    table, _ = calibrate_time.table(calibrate_time.stored_records(), card, plan_time.FACTORS)
    assert table in section
    assert calibrate_time.notes() in section
    assert "factors: " + json.dumps(plan_time.FACTORS) in section
    # the P40 paragraph's figures: the main job (the p40 profile's request), switches stated, a save every 25 steps
    request = plan_fit.auto_fit(plan_request.request_from_options(_options(["--emulate", "p40"]))[0]).request
    trims = plan_time.estimate(
        request, "p40", plan_time.TimeInputs(trim_padding=True, rollout_trim_padding=True, save_freq=25)
    )
    graph = plan_time.estimate(
        request,
        "p40",
        plan_time.TimeInputs(trim_padding=True, rollout_trim_padding=True, cuda_graph=True, save_freq=25),
    )
    assert (
        f"it gives {trims.step_seconds:.1f} s a step with the four trims and {graph.step_seconds:.1f} s with the trims"
        " + cuda_graph" in " ".join(section.split())
    )
    assert (
        f"generation {trims.phases['gen']:.1f} -> {graph.phases['gen']:.1f} s"
        f" ({graph.phases['gen'] / trims.phases['gen'] - 1:.0%})" in " ".join(section.split())
    )


def test_plan_estimates_the_adapters_outside_fsdp_where_train_would_set_it():
    # patch 0027: a 16-bit LoRA plan on the HF rollout, one GPU, counts the adapters outside FSDP (verlfit train sets
    # the key there); --dtype float32 keeps them FSDP units (train sets it for 16-bit compute only), as does the p40
    run = plan_request.resolve_plan_run(_options(["--emulate", "t4", "--lora-rank", "32"]))
    assert run.switches.adapters_outside_fsdp == ("actor", "critic")
    assert run.switches_for_time.adapters_outside_fsdp == ("actor", "critic")
    fp32 = plan_request.resolve_plan_run(_options(["--emulate", "t4", "--lora-rank", "32", "--dtype", "float32"]))
    assert fp32.switches_for_time.adapters_outside_fsdp == ()
    p40 = plan_request.resolve_plan_run(_options(["--emulate", "p40", "--lora-rank", "32"]))
    assert p40.switches_for_time.adapters_outside_fsdp == ()
