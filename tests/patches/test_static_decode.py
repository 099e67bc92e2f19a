"""Patch 0022 (rollout.cuda_graph): the static-cache decoder the HF rollout replays as a CUDA graph, run
eagerly on CPU (the capture/replay layer is tested on a GPU by tests/gpu/test_cuda_graph_decode.py).

The probe (speed_probe.py static) compares the patched StaticDecoder with transformers' generate on a tiny
random Qwen2 (eager and sdpa), prompts of 5, 10 and 7 tokens left-padded to 16 columns, 32 new tokens.
"""

import os
import shutil

import pytest

from speed_probes import run_speed_probe

pytestmark = pytest.mark.skipif(shutil.which("patch") is None and not os.environ.get("CI"), reason="GNU patch not installed")

TENSORS = {"prompts": True, "responses": True, "input_ids": True, "attention_mask": True, "position_ids": True}


@pytest.fixture(scope="module")
def static(trees):
    return run_speed_probe(trees["patched"], "static")


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_greedy_tokens_equal_generate(static, attn):
    res = static[attn]
    assert res["greedy_equal"] is True and res["greedy_len"] == 16 + 32


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_eos_as_generate_pad_after_and_stop_when_all_finished(static, attn):
    res = static[attn]
    assert res["eos_equal"] is True
    assert res["eos_pad_after"] > 0  # rows really finished early and were padded
    assert res["eos_len"][0] == res["eos_len"][1] < 16 + 32
    # every row ends at step 2 or earlier: 3 tokens at most, as generate
    assert res["all_eos_len"][0] == res["all_eos_len"][1] <= 16 + 3


def test_warped_scores_are_generates(static):
    warp = static["warpers"]
    assert warp["t0.7_k20_p0.8"] == {"max_diff": 0.0, "processors": ["TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper"]}
    assert warp["t1_k0_p1"] == {"max_diff": 0.0, "processors": []}
    assert warp["t1.3_k0_p0.9"] == {"max_diff": 0.0, "processors": ["TemperatureLogitsWarper", "TopPLogitsWarper"]}


def test_gumbel_max_samples_the_warped_distribution(static):
    gumbel = static["gumbel"]
    # 400000 draws: a frequency's standard deviation is at most 0.0008; 0.004 is 5 of them
    assert gumbel["max_abs_freq_diff"] < 0.004
    assert gumbel["kept"] == 6 and gumbel["filtered_drawn"] == 0
    assert static["zero_temperature"] == "ValueError: sampling needs a temperature > 0, got 0.0; use do_sample=False for greedy"


def test_hf_rollout_with_cuda_graph_key_returns_what_generate_returns(static):
    roll = static["rollout"]
    assert roll["generate_calls"] == 2  # the key really switched generate off
    assert roll["static"] == TENSORS
    assert roll["static_trim"] == TENSORS


def test_fsdp_wrapped_module_decodes_unwrapped_and_is_restored(static):
    roll = static["rollout"]
    assert roll["fsdp_static"] == TENSORS
    assert roll["fsdp_restored"] == 3  # root + 2 decoder layers, FSDP wrappers back in place


def test_sampled_rollout_respects_top_k_top_p(static):
    roll = static["rollout"]
    assert roll["sampled_shape"] == [6, 16 + 32]
    assert roll["sampled_valid_tokens"] > 100
    assert roll["sampled_tokens_outside_top_k_top_p"] == 0
