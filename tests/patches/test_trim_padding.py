"""Patch 0020 (trim_padding): the actor, ref and critic run each micro-batch on only the columns it uses,
and log-probs, entropy, values and one PPO update of each equal the untrimmed path (fp32, eager and sdpa).

The probe (speed_probe.py trim) runs verl's own DataParallelPPOActor / DataParallelPPOCritic methods
(compute_log_prob, update_policy, compute_values, update_critic) from the patched copy of verl, on a tiny
random Qwen2 and a batch of 4 rows with prompt lengths 5, 9, 3, 7 of 12 and response lengths 4, 7, 2, 6 of
10, in micro-batches of 2 (gradient accumulation over 2 micro-batches, SGD lr 1, so a parameter's change is
minus its accumulated gradient).
"""

import pytest
import torch

from speed_probes import run_speed_probe
from verl_patch_helpers import load_module_from

pytestmark = pytest.mark.needs_gnu_patch


@pytest.fixture(scope="module")
def trim(trees):
    return run_speed_probe(trees["patched"], "trim")


@pytest.fixture(scope="module")
def window_module(trees):
    return load_module_from(trees["patched"] / "verl" / "utils" / "padding_window.py", "verlfit_padding_window")


def test_window_is_first_to_last_used_column(window_module):
    # prompt 4 + response 4 columns; row 0 uses prompt columns 2-3 and response column 4; row 1 columns 1-3, 4-5
    mask = torch.tensor([[0, 0, 1, 1, 1, 0, 0, 0], [0, 1, 1, 1, 1, 1, 0, 0]])
    assert window_module.padding_window(mask, 4) == (1, 6)
    # the window always keeps the last prompt column and the first response column
    assert window_module.padding_window(torch.zeros(2, 8, dtype=torch.long), 4) == (3, 4)
    assert window_module.padding_window(torch.ones(2, 8, dtype=torch.bool), 4) == (0, 8)
    with pytest.raises(ValueError, match="response_length 8 must be between 1 and seqlen - 1 = 7"):
        window_module.padding_window(mask, 8)


def test_response_outputs_and_pad_back_match_verl_slice(window_module):
    full = torch.arange(2 * 8, dtype=torch.float32).reshape(2, 8)  # outputs of the untrimmed model per column
    start, stop = 1, 6
    window = full[:, start:stop]
    picked = window_module.response_outputs(window, start, stop, prompt_length=4)
    # verl: outputs[:, -response_length - 1 : -1] = columns 3..6; the window holds the 2 of them (3, 4) that predict
    # response columns 4 and 5
    assert picked.tolist() == full[:, 3:5].tolist()
    restored = window_module.pad_response(picked, 4)
    assert restored.tolist() == [[3.0, 4.0, 0.0, 0.0], [11.0, 12.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="5 response columns exceed response_length 4"):
        window_module.pad_response(torch.zeros(2, 5), 4)


def test_probe_batch_really_has_padding_to_trim(trim):
    # [start, stop) per micro-batch, of 22 columns: both sides trimmed
    assert trim["windows"] == [[3, 19], [5, 18]]


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_log_probs_entropy_and_values_equal_untrimmed(trim, attn):
    res = trim[attn]
    assert res["logp_max_diff"] < 1e-5
    assert res["entropy_max_diff"] < 1e-5
    assert res["values_max_diff"] < 1e-5
    # right of the window the trimmed path returns 0 where the untrimmed one has a padding token's value
    assert res["logp_outside_window_zero"] and res["entropy_outside_window_zero"]
    assert res["untrimmed_outside_window_nonzero"]


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_ppo_and_value_updates_equal_untrimmed(trim, attn):
    res = trim[attn]
    assert res["actor_step_max"] > 0.1 and res["critic_step_max"] > 0.1  # the updates really moved the weights
    assert res["actor_step_max_diff"] < 1e-5 * res["actor_step_max"]
    assert res["critic_step_max_diff"] < 1e-5 * res["critic_step_max"]
    for name, (untrimmed, trimmed) in {**res["metrics"], **res["cmetrics"]}.items():
        assert trimmed == pytest.approx(untrimmed, rel=1e-5), name


def test_key_absent_is_stock_and_fused_kernels_refused(trim):
    assert trim["absent_key"] == {"actor": False, "critic": False}
    assert (
        trim["fused_refused"]
        == "ValueError: trim_padding supports the padded path without fused kernels: set use_fused_kernels=False or"
        " trim_padding=False"
    )
