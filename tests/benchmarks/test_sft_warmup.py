"""benchmarks/sft_warmup.py: prompt/target rendering, verl's strict score, a short CPU warm-up."""

import json
import os

import pytest

import gsm8k_synthetic
import sft_warmup


def test_instruction_matches_prepare_gsm8k():
    from verlfit import gsm8k as verlfit_gsm8k

    assert sft_warmup.INSTRUCTION == verlfit_gsm8k.INSTRUCTION


def test_encode_example_takes_another_instruction(qwen_style_tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen_style_tokenizer_dir)
    ex = sft_warmup.encode_example(tok, "Q?", "1 + 1 = 2.\n#### 2", instruction='Give "Answer: N".')
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": 'Q? Give "Answer: N".'}], add_generation_prompt=True, tokenize=False
    )
    n_prompt = len(tok(prompt, add_special_tokens=False)["input_ids"])
    assert ex["input_ids"][:n_prompt] == tok(prompt, add_special_tokens=False)["input_ids"]
    assert ex["labels"][:n_prompt] == [-100] * n_prompt


def test_encode_example_masks_the_prompt(qwen_style_tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen_style_tokenizer_dir)
    q = "Leo has 3 cards. He buys 2 more cards and then gives 1 cards to Ben. How many cards does Leo have now?"
    a = (
        "After buying, Leo has 3 + 2 = <<3+2=5>>5 cards.\nAfter giving some to Ben, he has 5 - 1 = <<5-1=4>>4"
        " cards.\n#### 4"
    )
    ex = sft_warmup.encode_example(tok, q, a)
    prompt = (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n"
        + q
        + ' Let\'s think step by step and output the final answer after "####".<|im_end|>\n<|im_start|>assistant\n'
    )
    n_prompt = len(tok(prompt, add_special_tokens=False)["input_ids"])
    assert tok.decode(ex["input_ids"][:n_prompt]) == prompt
    assert ex["labels"][:n_prompt] == [-100] * n_prompt
    target = ex["labels"][n_prompt:]
    assert target == ex["input_ids"][n_prompt:]
    assert target[-1] == tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.decode(target) == a + "<|im_end|>"


@pytest.mark.parametrize(
    "response,truth,score",
    [
        ("so 3 + 4 = 7\n#### 7", "7", 1.0),
        ("#### 1,600", "1600", 1.0),
        ("#### $1,600", "1600", 0.0),  # the strict regex needs a digit right after '#### '
        ("#### 5 then #### 7", "7", 1.0),  # the last one counts
        ("#### 18.00", "18", 0.0),
        ("#### -17", "-17", 1.0),
        ("the answer is 7", "7", 0.0),
    ],
)
def test_strict_score(response, truth, score):
    assert sft_warmup.compute_score(response, truth) == score
    assert sft_warmup._compute_score_fallback(response, truth) == score


def test_short_warmup_lowers_loss_and_checkpoint_reloads(tmp_path, tiny_qwen2_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rows = gsm8k_synthetic.generate_split(200, seed=0, split="train")
    out = tmp_path / "sft"
    res = sft_warmup.train_sft(
        tiny_qwen2_dir, str(out), rows, steps=30, batch=8, lr=3e-3, seed=0, device="cpu", warmup=5, log=None
    )
    losses = res["losses"]
    assert len(losses) == 30
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5, losses
    # a usable --model directory: weights, config, tokenizer, the source's generation config (no sampling fields)
    tok = AutoTokenizer.from_pretrained(str(out))
    model = AutoModelForCausalLM.from_pretrained(str(out))
    assert model.config.vocab_size == len(tok)
    with open(os.path.join(tiny_qwen2_dir, "generation_config.json")) as f1, open(out / "generation_config.json") as f2:
        assert json.load(f1) == json.load(f2)
    test = tmp_path / "test.jsonl"
    gsm8k_synthetic.write_jsonl(gsm8k_synthetic.generate_split(4, seed=0, split="test"), str(test))
    ev = sft_warmup.evaluate_greedy(str(out), str(test), n=3, max_new_tokens=16, device="cpu")
    assert ev["n"] == 3 and 0.0 <= ev["accuracy"] <= 1.0 and len(ev["samples"]) == 3


def test_cli_end_to_end_on_cpu(tmp_path, qwen_style_tokenizer_dir):
    out = tmp_path / "ckpt"
    assert (
        sft_warmup.main(
            [
                "--output",
                str(out),
                "--shape",
                "tiny",
                "--tokenizer-dir",
                qwen_style_tokenizer_dir,
                "--steps",
                "3",
                "--batch",
                "4",
                "--train-size",
                "50",
                "--test-size",
                "5",
                "--eval-n",
                "2",
                "--max-new-tokens",
                "8",
                "--device",
                "cpu",
                "--log-every",
                "0",
            ]
        )
        == 0
    )
    summary = json.loads((out / "sft_warmup.json").read_text())
    assert summary["steps"] == 3 and len(summary["losses"]) == 3 and summary["eval_n"] == 2
    assert (out / "data" / "train.jsonl").is_file() and (out / "model.safetensors").is_file()
