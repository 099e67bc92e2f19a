"""Model shapes (verlfit.model_shape): exact parameter counts, by hand and against transformers, and config errors."""

import json

import pytest

from plan_helpers import QWEN, SMALL, SMALL_CONFIG
from verlfit.errors import VerlfitError
from verlfit.model_shape import load_model_shape, shape_from_config


def test_small_parameter_count_by_hand():
    q = 64 * 64 + 64  # q_proj weight + bias
    kv = 2 * (64 * 32 + 32)  # k_proj, v_proj (2 KV heads x 16) with biases
    o = 64 * 64  # o_proj, no bias
    mlp = 3 * 64 * 128
    norms = 2 * 64
    layer = q + kv + o + mlp + norms
    assert layer == 37120 == SMALL.layer_parameters
    assert SMALL.actor_parameters == 1000 * 64 + 2 * layer + 64 == 138304
    assert SMALL.critic_parameters == 138304 + 64 + 1  # score = Linear(hidden, 1) with bias, no lm_head
    untied = shape_from_config({**SMALL_CONFIG, "tie_word_embeddings": False})
    assert untied.actor_parameters == 138304 + 1000 * 64


def test_small_count_matches_transformers():
    import torch  # both in tests/requirements-ci.txt: this comparison always runs
    import transformers

    config = transformers.Qwen2Config(**{k: v for k, v in SMALL_CONFIG.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.Qwen2ForCausalLM(config)
    assert model.num_parameters() == SMALL.actor_parameters


def test_qwen25_05b_parameter_count():
    assert QWEN.actor_parameters == 494_032_768
    assert (QWEN.num_layers, QWEN.hidden_size, QWEN.vocab_size, QWEN.tie_word_embeddings) == (24, 896, 151936, True)


def test_config_file_and_dir_and_missing(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMALL_CONFIG))
    assert load_model_shape(str(tmp_path)).actor_parameters == 138304
    assert load_model_shape(str(tmp_path / "config.json")).actor_parameters == 138304
    with pytest.raises(VerlfitError, match="no config.json for model 'nobody/nothing'"):
        load_model_shape("nobody/nothing", hub_cache_lookup=lambda repo, name: None)
    with pytest.raises(VerlfitError, match="model '/no/such/dir': no such file or directory") as error:
        load_model_shape("/no/such/dir", hub_cache_lookup=lambda repo, name: None)
    assert error.value.fix.startswith("check the path, or pass a hub id such as Qwen/Qwen2.5-0.5B-Instruct")
    (tmp_path / "string.json").write_text(json.dumps({**SMALL_CONFIG, "hidden_size": "64"}))
    with pytest.raises(VerlfitError, match=r"hidden_size='64' must be a positive whole number"):
        load_model_shape(str(tmp_path / "string.json"))
    (tmp_path / "heads.json").write_text(json.dumps({**SMALL_CONFIG, "num_attention_heads": 3}))
    with pytest.raises(VerlfitError, match="hidden_size=64 is not a multiple of num_attention_heads=3, and no head_dim is given"):
        load_model_shape(str(tmp_path / "heads.json"))
    (tmp_path / "kv.json").write_text(json.dumps({**SMALL_CONFIG, "num_key_value_heads": 3}))
    with pytest.raises(VerlfitError, match="num_attention_heads=4 is not a multiple of num_key_value_heads=3"):
        load_model_shape(str(tmp_path / "kv.json"))
    (tmp_path / "bad.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(VerlfitError, match="missing num_hidden_layers, num_attention_heads, intermediate_size, vocab_size"):
        load_model_shape(str(tmp_path / "bad.json"))
