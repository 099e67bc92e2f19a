"""Patch 0021 (rollout.trim_padding): the HF rollout generates each micro-batch without the left padding
all its prompts share, and returns exactly what the untrimmed rollout returns.

The probe (speed_probe.py rollout) runs verl's HFRollout from the patched copy with a tiny random Qwen2
(sdpa), prompts of 5, 10 and 7 tokens left-padded to 16 columns, micro-batches of 2 prompts (the last one
a single prompt), 24 new tokens.
"""

import pytest

from speed_probes import run_speed_probe

pytestmark = pytest.mark.needs_gnu_patch

TENSORS = {"prompts": True, "responses": True, "input_ids": True, "attention_mask": True, "position_ids": True}


@pytest.fixture(scope="module")
def rollout(trees):
    return run_speed_probe(trees["patched"], "rollout")


def test_generate_sees_prompts_cut_to_the_longest_of_each_micro_batch(rollout):
    # untrimmed: 16 columns each time; trimmed: longest prompt 10 (rows 5, 10), then 7 (the last row)
    assert rollout["generate_widths"] == {"False": [16, 16], "True": [10, 7]}


def test_greedy_output_identical_and_correct(rollout):
    assert rollout["greedy_same"] == TENSORS
    assert rollout["greedy_matches_manual"] is True


def test_sampled_output_with_n_2_identical_from_the_same_seed(rollout):
    assert rollout["sampled_same"] == TENSORS
    assert rollout["sampled_shape"] == [6, 16 + 24]
    assert rollout["sampled_prompts_restored"] is True
