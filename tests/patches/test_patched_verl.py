"""Behaviour of the patched verl, driven through its own classes in subprocesses (verl_probe.py).

Each test also looks at an unpatched copy (pristine, or 0001-0003 only for the HF-rollout fixes) and asserts
the defect is visible there, so every test can fail.
"""

import pytest

# CI (.ci/run) installs GNU patch, so there a missing patch fails instead of skipping
pytestmark = pytest.mark.needs_gnu_patch

FALLBACK = "verl.utils.bert_padding_fallback"


# ---------------------------------------------------------------------------------------------- 0001


def test_actor_and_critic_import_without_flash_attn(probe):
    patched = probe("patched", "imports")
    assert patched["flash_attn_importable"] is False
    for module in ("verl.workers.actor.dp_actor", "verl.workers.critic.dp_critic"):
        assert patched[module]["ok"], patched[module]
        assert set(patched[module]["sources"].values()) == {FALLBACK}
    pristine = probe("pristine", "imports")
    for module in ("verl.workers.actor.dp_actor", "verl.workers.critic.dp_critic"):
        assert not pristine[module]["ok"] and "flash_attn" in pristine[module]["error"]


# ---------------------------------------------------------------------------------------------- 0002


def test_attn_implementation_keys_reach_model_loading(probe):
    patched = probe("patched", "wiring")
    # absent key: stock flash_attention_2; +actor_rollout_ref.model.attn_implementation=sdpa: sdpa
    assert patched["actor_attn"] == {"absent": "flash_attention_2", "sdpa": "sdpa"}
    # +critic.model.attn_implementation reaches both AutoConfig and the value-head loader
    assert patched["critic_attn"]["absent"] == {"config": "flash_attention_2", "loader": "flash_attention_2"}
    assert patched["critic_attn"]["eager"] == {"config": "eager", "loader": "eager"}
    assert patched["valuehead_eager"] == {"class": "Qwen2ForTokenClassification", "attn": "eager"}
    pristine = probe("pristine", "wiring")
    assert pristine["actor_attn"]["sdpa"] == "flash_attention_2"
    assert pristine["critic_attn"]["eager"]["config"] == "flash_attention_2"


# ---------------------------------------------------------------------------------------------- 0003


@pytest.mark.parametrize(
    "label,expected",
    [
        ("absent", [True, "bfloat16"]),
        ("bf16", [True, "bfloat16"]),
        ("fp16", [True, "float16"]),
        ("fp32", [False, "float32"]),
        ("float32", [False, "float32"]),
        ("32", [False, "float32"]),
    ],
)
def test_actor_ref_and_critic_forward_autocast_follows_config(probe, label, expected):
    result = probe("patched", "autocast")
    assert result["actor"][label]["autocast"] == expected  # same class serves actor and ref
    assert result["critic"][label]["autocast"] == expected


def test_fp32_actor_forward_equals_plain_fp32_and_bf16_does_not(probe):
    actor = probe("patched", "autocast")["actor"]
    assert actor["fp32"]["max_diff_vs_fp32"] < 1e-5
    assert actor["bf16"]["max_diff_vs_fp32"] > 1e-3  # the stock bf16 path really is different


def test_hf_rollout_autocast_follows_rollout_dtype(probe):
    rollout = probe("patched", "autocast")["rollout"]
    assert rollout["absent"]["autocast"] == [True, "bfloat16"]
    assert rollout["bfloat16"]["autocast"] == [True, "bfloat16"]
    assert rollout["fp16"]["autocast"] == [True, "float16"]
    assert rollout["float32"]["autocast"] == [False, "float32"]
    assert rollout["invalid"].startswith("ValueError")


# ---------------------------------------------------------------------------------------------- 0004


def _first_divergence(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def test_hf_rollout_greedy_equals_manual_decode_with_correct_positions(probe):
    greedy = probe("patched", "rollout")["greedy"]
    assert len(greedy["rollout"]) == 2 and all(len(row) == 24 for row in greedy["rollout"])
    assert greedy["rollout"] == greedy["manual"]
    assert greedy["position_ids_continue"]


def test_without_0004_the_rollout_decodes_at_stuck_positions(probe):
    greedy = probe("partial", "rollout")["greedy"]
    diverged = [_first_divergence(r, m) for r, m in zip(greedy["rollout"], greedy["manual"])]
    assert any(d is not None for d in diverged), "the unpatched rollout should differ from the correct decode"


def test_hf_rollout_samples_exactly_the_configured_distribution(probe):
    result = probe("patched", "rollout")
    # the checkpoint really carries sampling defaults that transformers would merge in
    ckpt = result["checkpoint_generation_config"]
    assert (ckpt["temperature"], ckpt["top_p"], ckpt["top_k"], ckpt["repetition_penalty"]) == (0.7, 0.8, 20, 1.05)
    sampling = result["sampling"]
    assert sampling["generate_kwargs"].get("use_model_defaults") is False
    assert "position_ids" not in sampling["generate_kwargs"]
    effective = sampling["effective_generation_config"]
    assert effective["temperature"] == 1.0 and effective["top_p"] == 1.0 and effective["top_k"] in (0, None)
    assert effective["repetition_penalty"] == 1.0 and effective["do_sample"] is True
    assert sampling["valid_tokens"] >= 64
    # per sampled token and over the whole vocabulary: generate's distribution == forward pass at T=1.0
    assert sampling["max_token_logprob_diff"] < 1e-4
    assert sampling["max_l1_distribution_diff"] < 1e-4
    # and PPO's own scoring (DataParallelPPOActor._forward_micro_batch, fp32) agrees with what was sampled
    assert result["actor"]["max_logprob_diff_vs_generate"] < 1e-4


def test_without_0004_sampling_uses_the_checkpoint_defaults(probe):
    result = probe("partial", "rollout")
    effective = result["sampling"]["effective_generation_config"]
    assert (effective["temperature"], effective["top_p"], effective["repetition_penalty"]) == (0.7, 0.8, 1.05)
    assert result["sampling"]["max_token_logprob_diff"] > 0.05
    assert result["actor"]["max_logprob_diff_vs_generate"] > 0.05


def test_base_sharding_manager_has_timing(probe):
    assert probe("patched", "wiring")["timing"] == {}
    assert probe("pristine", "wiring")["timing"] == "missing"


# ---------------------------------------------------------------------------------------------- 0005


def test_triton_cross_entropy_not_used_below_cc_7(probe):
    patched = probe("patched", "triton")
    assert patched["flash_attn_ce_available"] is True  # the fake flash_attn imports ...
    assert patched["fake_kernel_calls_on_cpu"] == 0  # ... but its Triton kernel is never called on CPU
    assert patched["cpu_logprobs_match"] is True
    assert patched["gate"] == {"6.1": False, "7.0": True, "8.6": True, "cpu": False}
    pristine = probe("pristine", "triton")
    assert pristine["fake_kernel_calls_on_cpu"] == 1
