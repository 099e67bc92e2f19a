"""A short supervised warm-up so that RL on GSM8K-format problems has something to reinforce.

A random model earns no GSM8K reward, so GRPO advantages are all zero and PPO has nothing to learn from
(an earlier device trial). This script fine-tunes a small Qwen2 (``make_model.py --shape small`` by default) on the
synthetic
problems of ``gsm8k_synthetic.py``, rendered exactly as verl's RL loop will see them:

* prompt = the chat template with ``add_generation_prompt=True`` over one user message, the question + " " +
  ``Let's think step by step and output the final answer after "####".`` (verl's GSM8K preprocessing, and
  ``verlfit prepare-gsm8k``), tokenized on its own as verl's RLHFDataset does;
* target = the answer text + ``<|im_end|>`` (the eos verl's HF rollout stops on), tokenized on its own;
* loss on the target tokens only.

``evaluate_greedy(model_dir, jsonl, n)`` scores greedy completions with verl's strict GSM8K reward
(``verl.utils.reward_score.gsm8k.compute_score``; a verbatim copy when verl is not installed): the last
``#### N`` of the response, commas and ``$`` removed, equal to the ground truth (the first ``#### N`` of the
reference answer, commas removed).

CLI (CUDA if available, else CPU)::

    python benchmarks/sft_warmup.py --output ckpt/sft     # batch 64, lr 3e-4, stop once dev accuracy >= 0.25
    python benchmarks/sft_warmup.py --output ckpt/sft --eval-every 0 --steps 325      # a fixed step count
    python benchmarks/sft_warmup.py --output ckpt/sft --init-model some/qwen2/dir --data-dir data/synth

With no ``--data-dir`` the train/test problems are generated (``--train-size``/``--test-size``, the same seed) and
written next to the checkpoint under ``OUTPUT/data/``. The checkpoint directory works as ``--model`` for verl
(fp32 safetensors, config, generation_config without sampling fields, tokenizer files); ``sft_warmup.json`` in it
records the arguments, the loss curve and the accuracy.

The target is a greedy accuracy of about 0.2–0.4, so RL has room to improve. Measured on the H200 (shape small,
batch 64, seed 0, 200 test problems): lr 3e-4 gave 0.035 / 0.205 / 0.39 / 0.45 / 0.83 after 200 / 300 / 350 /
400 / 800 steps; lr 1e-3 gave 0.16 / 0.415 / 0.755 after 450 / 500 / 800. A fixed 325 steps gave 0.325 with
seed 0 but 0.06 with seed 1: accuracy climbs steeply there and the seed moves the climb by ~100 steps. Hence the
default: evaluate a separate generated dev split every 25 steps and stop once it reaches 0.25 (seed 2 stopped at
step 450, dev 0.38, test 0.34; ~30 s of training on the H200).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import gsm8k_synthetic  # noqa: E402
import make_model  # noqa: E402

INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
END_TOKEN = "<|im_end|>"

__all__ = [
    "INSTRUCTION",
    "user_message",
    "prompt_text",
    "encode_example",
    "compute_score",
    "ground_truth",
    "read_jsonl",
    "train_sft",
    "evaluate",
    "evaluate_greedy",
    "main",
]


# --- verl's strict GSM8K reward --------------------------------------------------------------------------------


def _compute_score_fallback(solution_str, ground_truth, method="strict", format_score=0.0, score=1.0):
    """verl 0.4.1 ``verl/utils/reward_score/gsm8k.py`` compute_score, strict method, verbatim logic."""
    solutions = re.findall("#### (\\-?[0-9\\.\\,]+)", solution_str)
    if len(solutions) == 0:
        return 0
    answer = solutions[-1].replace(",", "").replace("$", "")
    return score if answer == ground_truth else format_score


try:  # the real one when verl is installed
    from verl.utils.reward_score.gsm8k import compute_score  # type: ignore
except Exception:  # pragma: no cover - depends on the environment
    compute_score = _compute_score_fallback


def ground_truth(answer: str) -> str:
    """verl's GSM8K preprocessing: the first ``#### N`` of the reference answer, commas removed."""
    return gsm8k_synthetic.answer_value(answer)


# --- data ------------------------------------------------------------------------------------------------------


def user_message(question: str, instruction: str = INSTRUCTION) -> List[Dict[str, str]]:
    return [{"role": "user", "content": question + " " + instruction}]


def prompt_text(tokenizer, question: str, instruction: str = INSTRUCTION) -> str:
    return tokenizer.apply_chat_template(
        user_message(question, instruction), add_generation_prompt=True, tokenize=False
    )


def encode_example(
    tokenizer, question: str, answer: str, max_len: int = 1024, instruction: str = INSTRUCTION
) -> Dict[str, List[int]]:
    """``input_ids`` = prompt ids + target ids; ``labels`` = -100 over the prompt, the target ids after it."""
    p = tokenizer(prompt_text(tokenizer, question, instruction), add_special_tokens=False)["input_ids"]
    t = tokenizer(answer + END_TOKEN, add_special_tokens=False)["input_ids"]
    ids = (p + t)[:max_len]
    labels = ([-100] * len(p) + t)[:max_len]
    return {"input_ids": ids, "labels": labels}


def read_jsonl(path: str, n: Optional[int] = None) -> List[Dict[str, str]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
                if n is not None and len(rows) >= n:
                    break
    return rows


def _collate(examples: Sequence[Dict[str, List[int]]], pad_id: int):
    import torch

    width = max(len(e["input_ids"]) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for i, e in enumerate(examples):
        n = len(e["input_ids"])
        ids[i, :n] = torch.tensor(e["input_ids"])
        labels[i, :n] = torch.tensor(e["labels"])
        mask[i, :n] = 1
    return ids, mask, labels


def _device(device: Optional[str]) -> str:
    import torch

    if device:
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


# --- training --------------------------------------------------------------------------------------------------


def train_sft(
    model_dir: str,
    output_dir: str,
    rows: Sequence[Dict[str, str]],
    steps: int = 250,
    batch: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
    device: Optional[str] = None,
    warmup: int = 10,
    weight_decay: float = 0.0,
    log_every: int = 10,
    eval_rows: Optional[Sequence[Dict[str, str]]] = None,
    eval_every: int = 0,
    eval_n: int = 100,
    stop_at_accuracy: Optional[float] = None,
    log=print,
    instruction: str = INSTRUCTION,
) -> Dict:
    """Fine-tune the model in ``model_dir`` on ``rows`` (question/answer) and save it to ``output_dir``.

    AdamW, linear warm-up over ``warmup`` steps then constant ``lr``, gradient clipping at 1.0, fp32. Batches are
    drawn from a seeded shuffle of ``rows`` (epochs repeat with a new shuffle). Returns a dict with ``losses`` (one
    per step), ``evals`` (``[(step, accuracy)]`` when ``eval_every``), ``seconds``, ``stopped_at`` (the step
    training ended at: ``steps``, or earlier when ``stop_at_accuracy`` is set and a periodic evaluation on
    ``eval_rows`` reached it).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev = _device(device)
    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).to(dev)
    model.train()
    examples = [encode_example(tok, r["question"], r["answer"], instruction=instruction) for r in rows]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, warmup)))
    rng = random.Random(f"sft:{seed}")
    order: List[int] = []
    losses: List[float] = []
    evals = []
    t0 = time.time()
    stopped_at = steps
    for step in range(1, steps + 1):
        picked = []
        while len(picked) < batch:
            if not order:
                order = list(range(len(examples)))
                rng.shuffle(order)
            picked.append(examples[order.pop()])
        ids, mask, labels = (x.to(dev) for x in _collate(picked, tok.pad_token_id))
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        loss = out.loss
        if not torch.isfinite(loss):
            raise RuntimeError(f"non-finite loss at step {step}: {loss.item()}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if log and log_every and (step % log_every == 0 or step == 1 or step == steps):
            log(f"step {step}/{steps} loss {losses[-1]:.4f} ({time.time() - t0:.1f}s)")
        if eval_rows and eval_every and step % eval_every == 0 and step != steps:
            res = evaluate(model, tok, eval_rows[:eval_n], device=dev, instruction=instruction)
            evals.append((step, res["accuracy"]))
            if log:
                log(f"step {step}: greedy accuracy {res['accuracy']:.3f} on {res['n']}")
            if stop_at_accuracy is not None and res["accuracy"] >= stop_at_accuracy:
                stopped_at = step
                if log:
                    log(f"step {step}: accuracy {res['accuracy']:.3f} >= {stop_at_accuracy}: stopping")
                break
            model.train()
    seconds = time.time() - t0
    save_checkpoint(model, model_dir, output_dir)
    return {"losses": losses, "evals": evals, "seconds": seconds, "device": dev, "stopped_at": stopped_at}


def save_checkpoint(model, source_dir: str, output_dir: str) -> None:
    """fp32 safetensors + config, the source's generation_config.json and tokenizer files copied verbatim (so no
    sampling field appears that the source did not have)."""
    os.makedirs(output_dir, exist_ok=True)
    model = model.to("cpu")
    model.config.torch_dtype = "float32"
    model.save_pretrained(output_dir, safe_serialization=True)
    for name in ["generation_config.json", "added_tokens.json"] + make_model.TOKENIZER_FILES:
        src = os.path.join(source_dir, name)
        if os.path.exists(src) and os.path.abspath(src) != os.path.abspath(os.path.join(output_dir, name)):
            shutil.copyfile(src, os.path.join(output_dir, name))


# --- evaluation ------------------------------------------------------------------------------------------------


def evaluate(
    model,
    tokenizer,
    rows: Sequence[Dict[str, str]],
    batch_size: int = 64,
    max_new_tokens: int = 256,
    device: Optional[str] = None,
    instruction: str = INSTRUCTION,
) -> Dict:
    """Greedy completions for ``rows`` scored with verl's strict GSM8K reward."""
    import torch

    dev = device or next(model.parameters()).device
    model.eval()
    eos = [tokenizer.convert_tokens_to_ids(END_TOKEN), tokenizer.convert_tokens_to_ids("<|endoftext|>")]
    old_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    scores: List[float] = []
    formatted = 0
    samples = []
    try:
        for i in range(0, len(rows), batch_size):
            chunk = rows[i : i + batch_size]
            texts = [prompt_text(tokenizer, r["question"], instruction) for r in chunk]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(dev)
            with torch.no_grad():
                out = model.generate(
                    **enc,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    temperature=None,
                    top_p=None,
                    top_k=None,
                    repetition_penalty=None,
                    eos_token_id=eos,
                    pad_token_id=tokenizer.pad_token_id,
                )
            gen = out[:, enc["input_ids"].shape[1] :]
            for r, g in zip(chunk, gen):
                resp = tokenizer.decode(g, skip_special_tokens=True)
                s = float(compute_score(resp, ground_truth(r["answer"])))
                scores.append(s)
                formatted += "#### " in resp
                if len(samples) < 3:
                    samples.append({"question": r["question"], "response": resp, "score": s})
    finally:
        tokenizer.padding_side = old_side
    n = len(scores)
    return {
        "accuracy": sum(scores) / n if n else 0.0,
        "n": n,
        "format_rate": formatted / n if n else 0.0,
        "samples": samples,
    }


def evaluate_greedy(
    model_dir: str,
    jsonl: str,
    n: int = 200,
    batch_size: int = 64,
    max_new_tokens: int = 256,
    device: Optional[str] = None,
    instruction: str = INSTRUCTION,
) -> Dict:
    """Load ``model_dir``, greedily answer the first ``n`` problems of ``jsonl`` (question/answer) and return
    ``{"accuracy", "n", "format_rate", "samples"}`` with verl's strict GSM8K score."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev = _device(device)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).to(dev)
    return evaluate(
        model,
        tok,
        read_jsonl(jsonl, n),
        batch_size=batch_size,
        max_new_tokens=max_new_tokens,
        device=dev,
        instruction=instruction,
    )


# --- CLI -------------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Supervised warm-up of a small Qwen2 on synthetic GSM8K problems.")
    ap.add_argument("--output", required=True, help="checkpoint directory to write (usable as --model)")
    ap.add_argument(
        "--init-model", default=None, help="start from this model directory (default: a fresh random --shape model)"
    )
    ap.add_argument("--shape", default="small", choices=sorted(make_model.SHAPES))
    ap.add_argument("--tokenizer-dir", default=None, help="tokenizer for the fresh model (default: train one)")
    ap.add_argument("--data-dir", default=None, help="directory with train.jsonl and test.jsonl (default: generate)")
    ap.add_argument("--train-size", type=int, default=5000)
    ap.add_argument("--test-size", type=int, default=500)
    ap.add_argument("--max-value", type=int, default=50, help="operand bound of generated problems")
    ap.add_argument("--steps", type=int, default=800, help="step budget (an upper bound with --stop-at-accuracy)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="cuda / cpu (default: cuda if available)")
    ap.add_argument("--eval-n", type=int, default=200, help="test problems scored at the end (0: skip)")
    ap.add_argument(
        "--eval-every",
        type=int,
        default=25,
        help=(
            "score --eval-n problems of a separate generated dev split every N steps (0: never, "
            "which makes --steps a fixed step count)"
        ),
    )
    ap.add_argument(
        "--stop-at-accuracy",
        type=float,
        default=0.25,
        help="stop (and save) as soon as a periodic dev accuracy reaches this (default 0.25)",
    )
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument(
        "--instruction",
        default=INSTRUCTION,
        help=(
            "what follows the question in each prompt (default: verl's GSM8K instruction; the own task: "
            "own_task.instruction())"
        ),
    )
    a = ap.parse_args(argv)

    os.makedirs(a.output, exist_ok=True)
    if a.data_dir:
        train_path, test_path = (os.path.join(a.data_dir, f"{s}.jsonl") for s in ("train", "test"))
    else:
        paths = gsm8k_synthetic.write_splits(
            os.path.join(a.output, "data"), n_train=a.train_size, n_test=a.test_size, seed=a.seed, max_value=a.max_value
        )
        train_path, test_path = paths["train"], paths["test"]
    train_rows = read_jsonl(train_path)
    test_rows = read_jsonl(test_path) if os.path.exists(test_path) else []
    dev_rows = []
    if a.eval_every:
        # periodic checks (and --stop-at-accuracy) use their own problems, so the test split stays untouched
        dev_rows = (
            read_jsonl(os.path.join(a.data_dir, "dev.jsonl"))
            if a.data_dir and os.path.exists(os.path.join(a.data_dir, "dev.jsonl"))
            else gsm8k_synthetic.generate_split(
                a.eval_n or 200,
                seed=a.seed,
                split="dev",
                max_value=a.max_value,
                exclude={r["question"] for r in train_rows + test_rows},
            )
        )

    tmp = None
    init = a.init_model
    if init is None:
        tmp = tempfile.mkdtemp(prefix="sft-init-")
        make_model.make_model(tmp, shape=a.shape, tokenizer_dir=a.tokenizer_dir, seed=a.seed, dtype="float32")
        init = tmp
    try:
        res = train_sft(
            init,
            a.output,
            train_rows,
            steps=a.steps,
            batch=a.batch,
            lr=a.lr,
            seed=a.seed,
            device=a.device,
            warmup=a.warmup,
            log_every=a.log_every,
            eval_rows=dev_rows,
            eval_every=a.eval_every,
            eval_n=a.eval_n or 200,
            stop_at_accuracy=a.stop_at_accuracy,
            instruction=a.instruction,
        )
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    summary = {
        "args": vars(a),
        "train": train_path,
        "test": test_path,
        "steps": res["stopped_at"],
        "seconds": round(res["seconds"], 2),
        "device": res["device"],
        "loss_first": res["losses"][0] if res["losses"] else None,
        "loss_last": res["losses"][-1] if res["losses"] else None,
        "losses": [round(x, 5) for x in res["losses"]],
        "dev_evals": res["evals"],
    }
    if a.eval_n and test_rows:
        ev = evaluate_greedy(
            a.output, test_path, a.eval_n, max_new_tokens=a.max_new_tokens, device=a.device, instruction=a.instruction
        )
        summary["accuracy"] = ev["accuracy"]
        summary["format_rate"] = ev["format_rate"]
        summary["eval_n"] = ev["n"]
        summary["samples"] = ev["samples"]
    with open(os.path.join(a.output, "sft_warmup.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    print(f"checkpoint: {a.output}")
    if "accuracy" in summary:
        print(
            f"accuracy: {summary['accuracy']:.3f} (greedy, strict GSM8K reward, {summary['eval_n']} test problems; "
            f"format rate {summary['format_rate']:.3f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
