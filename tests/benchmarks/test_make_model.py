"""benchmarks/make_model.py and verlfit.synthetic_model (the code it wraps): the local Qwen2.5-style tokenizer and
random Qwen2 checkpoints."""

import json
import os
from pathlib import Path

import pytest

import make_model

EXPECTED_ONE_MESSAGE = (
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n"
    "<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def tok(qwen_style_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen_style_tokenizer_dir)


def test_tokenizer_is_qwen2_fast_with_files(tok, qwen_style_tokenizer_dir):
    from transformers import PreTrainedTokenizerFast, Qwen2TokenizerFast

    assert isinstance(tok, PreTrainedTokenizerFast)
    assert isinstance(tok, Qwen2TokenizerFast)
    for name in make_model.TOKENIZER_FILES:
        assert os.path.isfile(os.path.join(qwen_style_tokenizer_dir, name)), name
    with open(os.path.join(qwen_style_tokenizer_dir, "tokenizer_config.json")) as f:
        cfg = json.load(f)
    assert cfg["chat_template"] == make_model.QWEN25_CHAT_TEMPLATE
    assert cfg["tokenizer_class"] == "Qwen2Tokenizer"
    assert cfg["eos_token"] == "<|im_end|>" and cfg["pad_token"] == "<|endoftext|>"
    assert cfg["bos_token"] is None and cfg["add_bos_token"] is False


def test_chat_template_one_message(tok):
    msgs = [{"role": "user", "content": "What is 2 + 3?"}]
    assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == EXPECTED_ONE_MESSAGE
    without = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False)
    assert without == EXPECTED_ONE_MESSAGE[: -len("<|im_start|>assistant\n")]


def test_chat_template_system_and_assistant_turns(tok):
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
    ]
    assert (
        tok.apply_chat_template(msgs, tokenize=False)
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello<|im_end|>\n"
    )


def test_special_tokens_are_single_ids_and_fit_qwen_vocab(tok):
    ids = {t: tok.convert_tokens_to_ids(t) for t in make_model.SPECIAL_TOKENS}
    n = len(tok)
    # appended after the BPE vocabulary, in Qwen's order
    assert ids == {"<|endoftext|>": n - 3, "<|im_start|>": n - 2, "<|im_end|>": n - 1}
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == ids["<|im_end|>"]
    assert tok.pad_token == "<|endoftext|>" and tok.pad_token_id == ids["<|endoftext|>"]
    assert tok.bos_token is None
    assert max(ids.values()) < make_model.QWEN_VOCAB_ROWS
    enc = tok("<|im_start|>user\nhi<|im_end|>", add_special_tokens=True)["input_ids"]
    assert enc[0] == ids["<|im_start|>"] and enc[-1] == ids["<|im_end|>"]
    assert tok.decode(enc, skip_special_tokens=True) == "user\nhi"


def test_digits_are_tokenized_individually(tok):
    pieces = tok.tokenize("He paid 1234567 dollars, then 1,600 more: #### 1,890")
    digit_pieces = [p for p in pieces if any(c.isdigit() for c in p)]
    assert digit_pieces and all(len(p) == 1 for p in digit_pieces), digit_pieces
    assert "".join(p for p in digit_pieces) == "123456716001890"
    text = "Maria has 12 + 7 = <<12+7=19>>19 apples.\n#### 19"
    assert tok.decode(tok(text)["input_ids"]) == text


def test_tokenizer_training_is_deterministic(tmp_path, qwen_style_tokenizer_dir):
    make_model.train_tokenizer(str(tmp_path))
    for name in make_model.TOKENIZER_FILES:
        with open(tmp_path / name, "rb") as a, open(os.path.join(qwen_style_tokenizer_dir, name), "rb") as b:
            assert a.read() == b.read(), name


def test_qwen25_05b_config_is_exact(tok):
    cfg = make_model.model_config("qwen2.5-0.5b", tok).to_dict()
    expected = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 32768,
        "max_window_layers": 21,
        "sliding_window": 32768,
        "use_sliding_window": False,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": "bfloat16",
        "bos_token_id": tok.convert_tokens_to_ids("<|endoftext|>"),
        "eos_token_id": tok.convert_tokens_to_ids("<|im_end|>"),
    }
    assert {k: cfg[k] for k in expected} == expected


def test_tiny_model_loads_and_gives_logits(tiny_qwen2_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_qwen2_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.config.vocab_size == len(tok)
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
    batch = tok(["What is 2 + 3?", "#### 5"], return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model(**batch)
    b, s = batch["input_ids"].shape
    assert out.logits.shape == (b, s, len(tok))
    assert torch.isfinite(out.logits).all()


def test_generation_config_has_no_sampling_fields(tiny_qwen2_dir):
    with open(os.path.join(tiny_qwen2_dir, "generation_config.json")) as f:
        gen = json.load(f)
    for k in ("temperature", "top_p", "top_k", "repetition_penalty", "do_sample"):
        assert k not in gen, k
    with open(os.path.join(tiny_qwen2_dir, "config.json")) as f:
        cfg = json.load(f)
    assert gen["eos_token_id"] == [cfg["eos_token_id"], cfg["bos_token_id"]]
    assert gen["pad_token_id"] == cfg["bos_token_id"]


def test_no_eos_model_has_no_eos_or_pad_id_but_its_tokenizer_does(tiny_qwen2_no_eos_dir, tiny_qwen2_dir):
    from transformers import AutoTokenizer, GenerationConfig

    with open(os.path.join(tiny_qwen2_no_eos_dir, "generation_config.json")) as f:
        gen = json.load(f)
    with open(os.path.join(tiny_qwen2_no_eos_dir, "config.json")) as f:
        cfg = json.load(f)
    tok = AutoTokenizer.from_pretrained(tiny_qwen2_no_eos_dir)
    assert gen == {"bos_token_id": cfg["bos_token_id"], "transformers_version": "4.51.3"}
    assert "eos_token_id" not in cfg and "pad_token_id" not in cfg
    assert GenerationConfig.from_pretrained(tiny_qwen2_no_eos_dir).eos_token_id is None  # what verl passes the rollout
    assert (tok.eos_token, tok.pad_token) == ("<|im_end|>", "<|endoftext|>")
    # the same weights as the model with EOS: only the ids differ
    assert (Path(tiny_qwen2_no_eos_dir) / "model.safetensors").read_bytes() == (
        Path(tiny_qwen2_dir) / "model.safetensors"
    ).read_bytes()
    with open(os.path.join(tiny_qwen2_dir, "config.json")) as f:
        with_eos = json.load(f)
    assert {k: v for k, v in with_eos.items() if k != "eos_token_id"} == cfg


def test_cli_no_eos(tmp_path, qwen_style_tokenizer_dir):
    assert (
        make_model.main(
            [
                "--shape",
                "tiny",
                "--output",
                str(tmp_path / "m"),
                "--tokenizer-dir",
                qwen_style_tokenizer_dir,
                "--no-eos",
            ]
        )
        == 0
    )
    with open(tmp_path / "m" / "generation_config.json") as f:
        assert "eos_token_id" not in json.load(f)


def test_cli_sampling_defaults_and_determinism(tmp_path, qwen_style_tokenizer_dir):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        assert (
            make_model.main(
                [
                    "--shape",
                    "tiny",
                    "--output",
                    str(d),
                    "--tokenizer-dir",
                    qwen_style_tokenizer_dir,
                    "--generation-sampling-defaults",
                    "--seed",
                    "3",
                ]
            )
            == 0
        )
    with open(a / "generation_config.json") as f:
        gen = json.load(f)
    assert {k: gen[k] for k in make_model.SAMPLING_DEFAULTS} == {
        "do_sample": True,
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
        "repetition_penalty": 1.05,
    }
    for name in ["model.safetensors", "config.json", "generation_config.json"] + make_model.TOKENIZER_FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_cli_tokenizer_only(tmp_path):
    out = tmp_path / "tok"
    assert make_model.main(["--tokenizer-only", "--output", str(out), "--vocab-size", "1000"]) == 0
    assert (out / "tokenizer.json").is_file() and not (out / "config.json").exists()
    from transformers import AutoTokenizer

    assert len(AutoTokenizer.from_pretrained(str(out))) <= 1000


def _qwen2_parameter_count(hidden, intermediate, layers, heads, kv_heads, vocab):
    """Parameters of a Qwen2ForCausalLM with tied embeddings: q/k/v projections with bias, o without, SwiGLU MLP,
    two RMSNorms per layer and a final one."""
    kv = hidden // heads * kv_heads
    attention = (hidden * hidden + hidden) + 2 * (hidden * kv + kv) + hidden * hidden
    per_layer = attention + 3 * hidden * intermediate + 2 * hidden
    return vocab * hidden + layers * per_layer + hidden


@pytest.mark.parametrize(
    "shape,dims,params",
    [
        (
            "qwen2.5-1.5b",
            dict(
                hidden_size=1536,
                intermediate_size=8960,
                num_hidden_layers=28,
                num_attention_heads=12,
                num_key_value_heads=2,
            ),
            1_543_714_304,
        ),
        (
            "qwen2.5-3b",
            dict(
                hidden_size=2048,
                intermediate_size=11008,
                num_hidden_layers=36,
                num_attention_heads=16,
                num_key_value_heads=2,
            ),
            3_085_938_688,
        ),
    ],
)
def test_qwen25_larger_configs_are_exact_and_count_their_parameters(tok, shape, dims, params):
    import torch
    from transformers import Qwen2ForCausalLM

    config = make_model.model_config(shape, tok)
    cfg = config.to_dict()
    expected = dict(
        dims,
        vocab_size=151936,
        tie_word_embeddings=True,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        max_position_embeddings=32768,
        use_sliding_window=False,
        hidden_act="silu",
        torch_dtype="bfloat16",
        model_type="qwen2",
    )
    assert {k: cfg[k] for k in expected} == expected
    formula = _qwen2_parameter_count(
        dims["hidden_size"],
        dims["intermediate_size"],
        dims["num_hidden_layers"],
        dims["num_attention_heads"],
        dims["num_key_value_heads"],
        151936,
    )
    assert formula == params
    with torch.device("meta"):  # the shape only: no memory for 1.5B/3B random weights in a CPU test
        model = Qwen2ForCausalLM(config)
    assert sum(p.numel() for p in model.parameters()) == params


def test_the_script_is_a_thin_command_line_over_the_package():
    from verlfit import synthetic_model

    assert make_model.synthetic_model is synthetic_model
    assert [getattr(make_model, name) is getattr(synthetic_model, name) for name in synthetic_model.__all__] == [
        True
    ] * len(synthetic_model.__all__)
