"""Patch 0023 (rollout.unwrap_fsdp): the HF rollout generates through the unwrapped module, so no FSDP unit's
hooks run per decode token, and returns exactly what it returns without the key.

The probe (speed_probe.py unwrap) builds two identical LoRA actors with verl's ActorRolloutRefWorker
(the P40 profile's keys, lora_rank 8, all-linear, the LoRA FSDP wrap policy patch 0009 keeps: 14 adapter
Linears and 1 decoder layer per layer as FSDP units, plus the root) on a tiny random Qwen2 (2 layers,
hidden 64) with a NONZERO adapter (verl_probe._cpu_worker_shims), one of them with the key; FSDP1 on CPU,
gloo, world size 1. It also runs 0022's StaticDecoder on the PEFT model directly against generate() of the
same adapter merged with PEFT's merge_and_unload. The same probe on the series without 0023 shows the
defect: the key is ignored and every decode token runs the FSDP units' forwards.
"""

import pytest

from speed_probes import run_speed_probe
from verl_patch_helpers import copy_verl, partial_series, run_apply, series_names

pytestmark = pytest.mark.needs_gnu_patch

TENSORS = {"prompts": True, "responses": True, "input_ids": True, "attention_mask": True, "position_ids": True}
LAYERS = 2
FSDP_UNITS = 1 + LAYERS * (1 + 2 * 7)  # root + per layer: the decoder layer, lora_A and lora_B of 7 Linears
RESPONSE_STEPS = 24  # verl_probe.RESPONSE_STEPS


@pytest.fixture(scope="module")
def unwrap(trees):
    return run_speed_probe(trees["patched"], "unwrap")


@pytest.fixture(scope="module")
def before(tmp_path_factory):
    """The probe on the series up to 0022 (the patch before this one)."""
    names = series_names()
    base = tmp_path_factory.mktemp("before_unwrap")
    root = copy_verl(base / "tree")
    run_apply(
        "--series", partial_series(base / "series", names.index("0023-hf-rollout-unwrap-fsdp.patch")), root, check_rc=0
    )
    return run_speed_probe(root, "unwrap")


def test_key_is_read_and_generation_runs_no_fsdp_unit_forward(unwrap, before):
    assert unwrap["key_read"] == {"plain": False, "unwrap": True}
    assert unwrap["fsdp_units"] == FSDP_UNITS == 31
    assert unwrap["lora_b_nonzero"] is True
    # without the key every nested unit (all but the root, which generate() bypasses) runs per decode step:
    # 30 units x 24 steps; with it none
    assert unwrap["fsdp_forwards_greedy"] == {"plain": (FSDP_UNITS - 1) * RESPONSE_STEPS, "unwrap": 0}
    assert unwrap["fsdp_forwards_cuda_graph"] == 0
    # without 0023 the key does nothing
    assert before["key_read"] == {"plain": None, "unwrap": None}
    assert before["fsdp_forwards_greedy"] == {"plain": 720, "unwrap": 720}


def test_greedy_and_sampled_rollouts_identical_to_the_wrapped_module(unwrap):
    assert unwrap["greedy_same"] == TENSORS
    assert unwrap["sampled_same"] == TENSORS  # n=2, temperature 0.9, top-k 30, top-p 0.9, torch.manual_seed(5)
    assert unwrap["sampled_shape"] == [4, 10 + RESPONSE_STEPS]
    assert unwrap["cuda_graph_greedy_same"] == TENSORS  # 0022's decoder on the unwrapped PEFT model too


def test_rollout_is_the_adapted_model_not_merged_into_the_base(unwrap):
    assert unwrap["greedy_equals_merged_manual"] is True
    assert unwrap["greedy_rows_ended_by_eos"] == 1  # one row stops early: pad after its EOS, as generate
    assert unwrap["greedy_differs_from_base"] is True


def test_fsdp_wrappers_back_and_training_after_generation_unchanged(unwrap):
    assert unwrap["tree_restored"] is True  # the same module objects, by id, in the same places
    assert unwrap["tree_fsdp_units_after"] == FSDP_UNITS
    assert unwrap["old_log_probs_same"] is True
    assert unwrap["update_metrics_same"] == {"actor/pg_loss": True, "actor/kl_loss": True, "actor/grad_norm": True}
    assert unwrap["params_after_update_same"] is True
    assert unwrap["changed_only_adapter"] is True  # the frozen base did not move
    assert unwrap["log_probs_after_update_same"] is True
    assert unwrap["log_probs_moved"] > 1e-3  # the update really changed the policy ...
    assert unwrap["greedy_after_update_same"] == TENSORS  # ... and the unwrapped rollout sees the new adapter


def test_static_decoder_on_a_peft_model_equals_generate_of_the_merged_model(unwrap):
    static = unwrap["static_peft"]
    assert static["module"] == "PeftModelForCausalLM"
    assert static["greedy_equal_merged"] is True and static["greedy_len"] == 16 + 32
    assert static["greedy_equal_peft_generate"] is True
    assert static["differs_from_base"] is True
    assert static["eos_equal_merged"] is True and static["eos_pad_after"] > 0
