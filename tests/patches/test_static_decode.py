"""Patch 0022 (rollout.cuda_graph): the static-cache decoder the HF rollout replays as a CUDA graph, run
eagerly on CPU (the capture/replay layer is tested on a GPU by tests/gpu/test_cuda_graph_decode.py).

The probe (speed_probe.py static) compares the patched StaticDecoder with transformers' generate on a tiny
random Qwen2 (eager and sdpa), prompts of 5, 10 and 7 tokens left-padded to 16 columns, 32 new tokens. The
no_eos probe (issue 29, patches 0022 and 0025) covers the EOS and pad ids verl may pass: none at all, an EOS
without a pad id, an EOS list, and a checkpoint whose EOS is only in its tokenizer.
"""

import pytest

from speed_probes import run_speed_probe
from verl_patch_helpers import copy_verl, partial_series, run_apply, series_names

pytestmark = pytest.mark.needs_gnu_patch

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
    assert warp["t0.7_k20_p0.8"] == {
        "max_diff": 0.0,
        "processors": ["TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper"],
    }
    assert warp["t1_k0_p1"] == {"max_diff": 0.0, "processors": []}
    assert warp["t1.3_k0_p0.9"] == {"max_diff": 0.0, "processors": ["TemperatureLogitsWarper", "TopPLogitsWarper"]}


def test_gumbel_max_samples_the_warped_distribution(static):
    gumbel = static["gumbel"]
    # 400000 draws: a frequency's standard deviation is at most 0.0008; 0.004 is 5 of them
    assert gumbel["max_abs_freq_diff"] < 0.004
    assert gumbel["kept"] == 6 and gumbel["filtered_drawn"] == 0
    assert (
        static["zero_temperature"]
        == "ValueError: sampling needs a temperature > 0, got 0.0; use do_sample=False for greedy"
    )


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


# Issue 29: a checkpoint whose generation config has no eos_token_id (a random Qwen3 saved by transformers 4.51.3).
# verl passes the generation config's eos/pad ids to the rollout (fsdp_workers.py:654-657), so the rollout gets
# None; generate then decodes every row to max_new_tokens. The probe compares StaticDecoder with generate called as
# HFRollout calls it, on tiny random models of each family verlfit supports (Qwen2; Qwen3), 32 new tokens after
# prompts of 16 columns.
NO_EOS_MODELS = ["qwen2_no_eos", "qwen3_no_eos", "qwen2_model_eos"]


@pytest.fixture(scope="module")
def no_eos(trees, tiny_qwen2_no_eos_dir):
    return run_speed_probe(trees["patched"], "no_eos", tiny_qwen2_no_eos_dir)


def test_special_tokens_read_eos_and_pad_as_generate(no_eos):
    # (EOS ids, pad): no EOS -> no ids, pad unused; pad None with an EOS -> the first EOS id (generate's
    # _prepare_special_tokens: "Setting `pad_token_id` to `eos_token_id`")
    assert no_eos["special_tokens"] == {
        "none_none": [[], None],
        "none_pad": [[], 0],
        "empty_pad": [[], 0],
        "int_none": [[7], 7],
        "list_none": [[9, 7], 9],
        "list_pad": [[9, 7], 0],
    }


@pytest.mark.parametrize("model", NO_EOS_MODELS)
@pytest.mark.parametrize("case", ["no_eos_no_pad", "no_eos_pad"])
def test_no_eos_decodes_every_row_to_full_length_as_generate(no_eos, model, case):
    res = no_eos["cases"][model][case]
    assert res.get("error") is None, res
    assert res["equal"] is True
    assert res["len"] == [16 + 32, 16 + 32]  # no early stop


def test_no_eos_models_have_no_eos_in_their_generation_config(no_eos):
    # the no-EOS variants really lack one; the third model has an EOS of its own (299) that the rollout's
    # eos_token_id=None overrides in generate as in StaticDecoder: it too decodes to full length above
    assert {m: no_eos["cases"][m]["model_generation_config_eos"] for m in NO_EOS_MODELS} == {
        "qwen2_no_eos": None,
        "qwen3_no_eos": None,
        "qwen2_model_eos": 299,
    }


@pytest.mark.parametrize("model", NO_EOS_MODELS)
@pytest.mark.parametrize("case", ["eos_list_no_pad", "eos_int_no_pad"])
def test_eos_without_pad_id_pads_with_the_first_eos_as_generate(no_eos, model, case):
    res = no_eos["cases"][model][case]
    assert res.get("error") is None, res
    assert res["equal"] is True
    after, first_eos = res["after_eos"]
    assert after > 0 and first_eos == after  # rows finished early; every token after their EOS is the first EOS id


def test_verl_worker_takes_eos_from_the_generation_config_and_decodes_without_one(no_eos):
    worker = no_eos["worker"]
    # the project's tiny Qwen2 without EOS: the tokenizer has an EOS and a pad token, the generation config has
    # neither, and verl's worker passes the generation config's (None) to the rollout: no EOS, with and without
    # rollout.cuda_graph
    assert worker["tokenizer_eos_pad"] == ["<|im_end|>", "<|endoftext|>"]
    assert worker["generation_config_json_keys"] == ["bos_token_id"]
    for key in ("cuda_graph_False", "cuda_graph_True"):
        assert worker[key] == {"responses_shape": [3, 32], "response_mask_ones": 3 * 32}  # every response token counts
    assert worker["same"] == TENSORS
    assert worker["generate_equal"] is True


@pytest.fixture(scope="module")
def no_eos_before_0025(tmp_path_factory, tiny_qwen2_no_eos_dir):
    """The no_eos probe on the series up to 0024 (patch 0025 left out; 0022 as it is now)."""
    names = series_names()
    base = tmp_path_factory.mktemp("before_no_eos")
    root = copy_verl(base / "tree")
    run_apply(
        "--series", partial_series(base / "series", names.index("0025-hf-rollout-no-eos.patch")), root, check_rc=0
    )
    return run_speed_probe(root, "no_eos", tiny_qwen2_no_eos_dir)


def test_rollout_with_eos_and_no_pad_fills_with_the_first_eos_as_generate(no_eos):
    roll = no_eos["rollout_eos_no_pad"]
    for key in ("cuda_graph_False", "cuda_graph_True"):
        after, first_eos = roll[key]["after_eos"]
        # every row stopped by its third token; all later columns are the first EOS id, masked out
        assert roll[key]["responses_shape"] == [3, 32]
        assert after == first_eos >= 3 * (32 - 3)
        assert roll[key]["response_mask_ones"] == 3 * 32 - after
    assert roll["same"] == TENSORS


def test_without_0025_verl_hf_rollout_itself_fails_without_eos_or_pad(no_eos_before_0025):
    # stock verl: generate decodes to full length, then get_response_mask(eos_token=None) runs torch.tensor(None);
    # with an EOS and no pad id the columns after an early stop are None * tensor
    worker = no_eos_before_0025["worker"]
    assert (
        worker["cuda_graph_False"]
        == worker["cuda_graph_True"]
        == {"error": "RuntimeError: Could not infer dtype of NoneType"}
    )
    roll = no_eos_before_0025["rollout_eos_no_pad"]
    assert (
        roll["cuda_graph_False"]
        == roll["cuda_graph_True"]
        == {"error": "TypeError: unsupported operand type(s) for *: 'NoneType' and 'Tensor'"}
    )
    # the decoder itself (patch 0022) equals generate there already
    assert no_eos_before_0025["cases"]["qwen3_no_eos"]["no_eos_no_pad"]["equal"] is True
