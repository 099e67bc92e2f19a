"""benchmarks/qwen3_no_eos_model.py: the Qwen3-0.6B-shaped random model without an EOS id of issue 29's device check."""

import json
import os

import qwen3_no_eos_model

SMALL = dict(
    num_hidden_layers=1,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)


def test_the_shape_is_qwen3_0p6b_with_596m_parameters():
    import torch
    from transformers import Qwen3ForCausalLM
    from verlfit.model_shape import shape_from_config

    config = qwen3_no_eos_model.qwen3_config()
    with torch.device("meta"):
        model = Qwen3ForCausalLM(config)
    # Qwen3-0.6B: 0.44 B parameters besides the 151936 x 1024 tied embedding; the planner counts the same
    assert sum(p.numel() for p in model.parameters()) == 596049920
    assert shape_from_config(json.loads(config.to_json_string())).actor_parameters == 596049920
    assert (config.eos_token_id, config.pad_token_id, config.bos_token_id) == (None, None, None)


def test_the_model_has_no_eos_id_but_its_tokenizer_has(tmp_path, qwen_style_tokenizer_dir):
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    out = tmp_path / "m"
    qwen3_no_eos_model.make(
        str(out),
        qwen_style_tokenizer_dir,
        vocab_size=len(AutoTokenizer.from_pretrained(qwen_style_tokenizer_dir)),
        **SMALL,
    )
    with open(out / "generation_config.json") as f:
        assert json.load(f) == {"_from_model_config": True, "transformers_version": "4.51.3"}
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "qwen3" and "eos_token_id" not in config and "pad_token_id" not in config
    assert AutoConfig.from_pretrained(out).eos_token_id is None
    assert (
        GenerationConfig.from_pretrained(out).eos_token_id is None
    )  # verl's get_generation_config: what the rollout gets
    assert AutoTokenizer.from_pretrained(out).eos_token == "<|im_end|>"
    assert sorted(os.listdir(tmp_path)) == ["m"]  # no temporary folder left


def test_an_existing_output_or_a_missing_tokenizer_is_refused_and_nothing_written(
    tmp_path, qwen_style_tokenizer_dir, capsys
):
    (tmp_path / "taken").mkdir()
    assert (
        qwen3_no_eos_model.main(["--output", str(tmp_path / "taken"), "--tokenizer-dir", qwen_style_tokenizer_dir]) == 2
    )
    assert f"--output {tmp_path / 'taken'} exists; give a new folder" in capsys.readouterr().err
    assert qwen3_no_eos_model.main(["--output", str(tmp_path / "new"), "--tokenizer-dir", str(tmp_path / "taken")]) == 2
    assert f"--tokenizer-dir {tmp_path / 'taken'} has no tokenizer.json" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["taken"] and not os.listdir(tmp_path / "taken")
