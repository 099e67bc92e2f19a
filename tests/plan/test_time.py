"""The time model (verlfit.plan.time): counts against a hand computation, the fit, the labels."""

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from verlfit import plan
from verlfit.plan import time as plan_time
from verlfit.cards import CARDS, card_for_gpu_name, get_card
from verlfit.errors import VerlfitError
from verlfit.model_shape import shape_from_config

ROOT = Path(__file__).resolve().parents[2]

# hidden 8, 2 heads of 4, 1 KV head, intermediate 16, 2 layers, vocab 32
TINY = shape_from_config(dict(model_type="qwen2", num_hidden_layers=2, hidden_size=8, num_attention_heads=2, num_key_value_heads=1, intermediate_size=16, vocab_size=32, tie_word_embeddings=True))


def tiny_request(**fields):
    base = dict(shape=TINY, gpu_memory_bytes=2**30, train_batch_size=2, ppo_mini_batch_size=1, actor_micro_batch_size=1, log_prob_micro_batch_size=2, critic_micro_batch_size=1, max_prompt_length=3, max_response_length=2, gradient_checkpointing=False)
    base.update(fields)
    return plan.PlanRequest(**base)


def test_layer_matmul_parameters_by_hand():
    # q 8x8 + k 8x4 + v 8x4 + o 8x8 + gate/up 8x16 x2 + down 16x8 = 64+32+32+64+384
    assert plan_time.layer_matmul_parameters(TINY) == 576


def test_forward_flops_by_hand():
    # 2 sequences x 5 columns = 10 tokens; layers: 2*10*2*576 = 23040; attention 4*10*5*8*2 = 3200; head 2*2*5*8*32 = 5120
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
    assert lora.flops == 26240 * 2 + 5120 * 2


def test_lora_rank_is_read_from_the_request():
    work = plan_time.phase_work(tiny_request(lora_rank=16))
    assert work["update_actor"].flops == 26240 * 2 + 5120 * 2
    # the critic takes the actor's rank unless its own is set (PlanRequest.lora_rank_of)
    assert work["update_critic"].flops == plan_time.phase_work(tiny_request(), plan_time.TimeInputs(lora_rank=16, critic_lora_rank=16))["update_critic"].flops
    full_critic = plan_time.phase_work(tiny_request(lora_rank=16, critic_lora_rank=0))["update_critic"]
    assert full_critic.flops == plan_time.phase_work(tiny_request())["update_critic"].flops


def test_trimmed_padding_uses_the_mean_lengths():
    work = plan_time.phase_work(tiny_request(), plan_time.TimeInputs(trim_padding=True, mean_prompt_length=1, mean_response_length=1))["old_log_prob"]
    layers, head = plan_time.forward_flops(TINY, 2, 2, 32)
    assert work.flops == layers + head


def test_generation_work_by_hand():
    work = plan_time.phase_work(tiny_request())["gen"]
    # prefill: 2 sequences x 3 columns, head on the last position only
    assert work.flops == 2 * 6 * 2 * 576 + 4 * 6 * 3 * 8 * 2 + 2 * 2 * 1 * 8 * 32
    assert work.decode_steps == 2 and work.decode_layer_steps == 4
    matmul = 2 * 576 + 32 * 8
    context = 3 + 1
    assert work.decode_flops == 2 * (2 * 2 * matmul + 4 * 2 * context * 8 * 2)
    assert work.decode_bytes == 2 * (matmul * 4 + 2 * 2 * 2 * 4 * context * 4 * 3 + 2 * 32 * 28)


def test_offload_moves_bytes_over_pcie():
    work = plan_time.phase_work(tiny_request(actor_optimizer_offload=True, critic_param_offload=True))
    assert work["update_actor"].pcie_bytes == 16 * TINY.actor_parameters
    assert work["values"].pcie_bytes == 8 * TINY.critic_parameters
    assert work["update_critic"].pcie_bytes == 8 * TINY.critic_parameters
    assert work["old_log_prob"].pcie_bytes == 0


def test_seconds_follow_the_card_rates():
    work = plan_time.PhaseWork(flops=67e12, bytes=0.0)
    factors = dict(plan_time.FACTORS, train_efficiency_float32=0.5)
    assert plan_time.phase_seconds(work, CARDS["h200"], "float32", factors) == pytest.approx(2.0)
    assert plan_time.phase_seconds(work, CARDS["p40"], "float32", factors) == pytest.approx(67 / 11.76 * 2)
    pcie = plan_time.PhaseWork(pcie_bytes=15.75e9)
    assert plan_time.phase_seconds(pcie, CARDS["p40"], "float32") == pytest.approx(1.0)


def test_bf16_on_the_p40_is_refused():
    with pytest.raises(VerlfitError, match="no bf16 hardware"):
        plan_time.estimate(tiny_request(dtype="bfloat16"), "p40")


def test_cards_match_nvml_names():
    assert card_for_gpu_name("Tesla P40").key == "p40"
    assert card_for_gpu_name("NVIDIA A10").key == "a10"
    assert card_for_gpu_name("NVIDIA A100-SXM4-80GB") is None
    assert card_for_gpu_name("NVIDIA L4").key == "l4"
    assert card_for_gpu_name("NVIDIA H200").key == "h200"
    with pytest.raises(VerlfitError, match="use one of: p40, a10, l4, h200"):
        get_card("v100")


def test_estimate_lines_label_and_run():
    est = plan_time.estimate(tiny_request(), "p40")
    lines = plan_time.estimate_lines(est, 100)
    assert lines[0] == "time on Tesla P40 (datasheet-based estimate, unverified on a real card):"
    assert lines[-1] == f"  run of 100 steps: {est.step_seconds * 100:.0f} s = {est.step_seconds * 100 / 3600:.2f} h"
    assert plan_time.estimate_lines(plan_time.estimate(tiny_request(), "h200"), None)[0].endswith("(estimate calibrated on recorded H200 runs (benchmarks/calibrate_time.py)):")


def test_run_steps_from_dataset_size():
    assert plan_time.run_steps(steps=50) == 50
    assert plan_time.run_steps(epochs=2, dataset_rows=7473, train_batch_size=32) == 2 * 233
    assert plan_time.run_steps() is None


def test_calibration_fit_reproduces_the_stored_factors():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import calibrate_time

    card = get_card("h200")
    records = calibrate_time.stored_records()
    assert calibrate_time.fit(records, card) == plan_time.FACTORS
    _, results = calibrate_time.table(records, card, plan_time.FACTORS)
    assert len(results) == 12
    assert all(abs(r["error"]) <= 0.25 for r in results), [(r["record"], r["error"]) for r in results]


def _run_plan(argv, nvml=None):
    import io

    from verlfit.plan import command

    out = io.StringIO()
    status = command._run(_parsed(argv), nvml=nvml, out=out)
    return status, out.getvalue()


def test_plan_prints_the_labelled_estimate_for_the_emulated_p40():
    status, out = _run_plan(["--emulate", "p40", "--steps", "200"])
    request = plan.request_from_args(_parsed(["--emulate", "p40"]))[0]
    est = plan_time.estimate(plan.auto_fit(request).request, "p40")  # plan sizes the run as train does (auto-fit)
    assert status == 0
    assert "card: --emulate p40\n" in out
    assert "time on Tesla P40 (datasheet-based estimate, unverified on a real card):\n" in out
    assert f"  {'step':<30} {est.step_seconds:8.2f} s\n" in out
    assert f"  run of 200 steps: {est.step_seconds * 200:.0f} s = {est.step_seconds * 200 / 3600:.2f} h\n" in out


def _parsed(argv):
    import argparse

    from verlfit.plan import command

    parser = argparse.ArgumentParser()
    command.register(parser.add_subparsers())
    return parser.parse_args(["plan", *argv])


def test_plan_json_time_for_the_detected_gpu_and_dataset_epochs():
    from fakes import FakeNvml

    nvml = FakeNvml(gpus=[("NVIDIA H200", (9, 0), 141 * 2**30)])
    status, out = _run_plan(["--profile", "p40", "--gpu-memory", "22.5", "--dataset-size", "7473", "--epochs", "2", "--json"], nvml=nvml)
    data = json.loads(out)["time"]
    assert data["card"] == "h200" and data["card_source"] == "GPU 0: NVIDIA H200"
    assert data["label"] == "estimate calibrated on recorded H200 runs (benchmarks/calibrate_time.py)"
    assert data["steps"] == 2 * (7473 // 32)
    assert data["run_h"] == round(data["step_s"] * data["steps"] / 3600, 3)
    assert list(data["phases_s"]) == ["gen", "old_log_prob", "values", "update_critic", "update_actor", "other"]


def test_plan_unknown_gpu_falls_back_to_the_profile_card():
    from fakes import FakeNvml

    nvml = FakeNvml(gpus=[("NVIDIA A100-SXM4-80GB", (8, 0), 80 * 2**30)])
    card, why = plan_time.card_for_args(_parsed(["--profile", "a10"]), nvml)
    assert card.key == "a10"
    assert why == "no datasheet facts for NVIDIA A100-SXM4-80GB: estimating for the a10 profile's card"
