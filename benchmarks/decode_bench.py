#!/usr/bin/env python3
"""Generation micro-benchmark: HF ``generate`` (verl's HF rollout: dynamic cache) against patch 0022's
static-cache decoder replayed as a CUDA graph, on one GPU.

For each batch size: prompts of 100-256 tokens left-padded to --prompt-width columns (the main job's GSM8K
prompts average 133 tokens, patch 0020's header), --new-tokens new tokens with no EOS (a random model never stops
anyway), greedy. Reported per path: prefill time (one forward over the prompts, ms), ms per decode step
((total - prefill) / (new tokens - 1)), total seconds, and whether the greedy tokens are identical. fp32,
SDPA, TF32 off (a P40 has no TF32), unless --dtype bf16 (autocast, the a10 rollout).

Needs a CUDA GPU and verl patched with patches/verl-0.4.1 (0022). Writes --output (JSON) via a temp file.

  python3 benchmarks/decode_bench.py --model MODEL_DIR --output decode.json   # MODEL_DIR: benchmarks/make_model.py
--shape qwen2.5-0.5b
"""

import argparse
import json
import os
import sys
import tempfile
import time


def _timed(fn):
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - start


def bench(model, batch: int, prompt_width: int, new_tokens: int, dtype: str, seed: int = 0) -> dict:
    """One batch size; returns {'generate': {...}, 'static_graph': {...}, 'identical_tokens': bool}."""
    import torch
    from transformers import GenerationConfig

    from verl.workers.rollout.static_decode import StaticDecoder

    g = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    lengths = torch.randint(100, min(256, prompt_width) + 1, (batch,), generator=g)
    ids = torch.zeros(batch, prompt_width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths.tolist()):
        ids[i, prompt_width - n :] = torch.randint(1, vocab, (n,), generator=g)
        mask[i, prompt_width - n :] = 1
    ids, mask = ids.cuda(), mask.cuda()
    never = vocab  # an id no token has: nothing stops before new_tokens
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16")
    cfg = GenerationConfig(
        max_new_tokens=new_tokens, do_sample=False, eos_token_id=never, pad_token_id=0, repetition_penalty=1.0
    )
    result = {
        "batch": batch,
        "prompt_width": prompt_width,
        "new_tokens": new_tokens,
        "mean_prompt_tokens": float(lengths.float().mean()),
    }
    with torch.no_grad(), autocast:
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=1)  # warm-up
        _, prefill = _timed(lambda: model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=1))
        model.generate(
            input_ids=ids[:, -8:],
            attention_mask=mask[:, -8:],
            generation_config=GenerationConfig(max_new_tokens=4, do_sample=False, pad_token_id=0),
            use_model_defaults=False,
        )
        ref, total = _timed(
            lambda: model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg, use_model_defaults=False)
        )
        result["generate"] = {
            "prefill_ms": prefill * 1e3,
            "ms_per_decode_step": (total - prefill) * 1e3 / (new_tokens - 1),
            "total_s": total,
        }
        dec = StaticDecoder(
            model,
            batch,
            prompt_width + new_tokens,
            do_sample=False,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            eos_token_id=never,
            pad_token_id=0,
        )
        dec.generate(ids, mask, 4)  # warm-up (cuBLAS handles, a first capture)
        got, total_static = _timed(lambda: dec.generate(ids, mask, new_tokens))
        # the static prefill: the eager forward over the prompts into the StaticCache
        dec.cache.reset()
        _, prefill_static = _timed(
            lambda: dec._forward(
                ids,
                torch.ones(batch, prompt_width + new_tokens, dtype=torch.long, device="cuda"),
                pos,
                torch.arange(prompt_width, device="cuda"),
            )
        )
        result["static_graph"] = {
            "prefill_ms": prefill_static * 1e3,
            "ms_per_decode_step": (total_static - prefill_static) * 1e3 / (new_tokens - 1),
            "total_s": total_static,
            "captures": dec.captures,
        }
    result["identical_tokens"] = got.tolist() == ref.tolist()
    result["first_divergence"] = next((t for t in range(got.size(1)) if not torch.equal(got[:, t], ref[:, t])), None)
    result["speedup_per_step"] = result["generate"]["ms_per_decode_step"] / result["static_graph"]["ms_per_decode_step"]
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    ap.add_argument(
        "--model", required=True, help="a Hugging Face model directory (e.g. make_model.py's qwen2.5-0.5b shape)"
    )
    ap.add_argument("--output", required=True, help="JSON file to write")
    ap.add_argument("--batch", type=int, nargs="+", default=[32, 64], help="batch sizes (default 32 64)")
    ap.add_argument("--prompt-width", type=int, default=256, help="columns prompts are left-padded to (default 256)")
    ap.add_argument("--new-tokens", type=int, default=256, help="new tokens per row (default 256)")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="fp32 (P40) or bf16 autocast (A10)")
    args = ap.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM

    if not torch.cuda.is_available():
        print("decode_bench.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = (
        AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32, attn_implementation="sdpa")
        .cuda()
        .eval()
    )
    record = {
        "model": os.path.basename(os.path.normpath(args.model)),
        "device": torch.cuda.get_device_name(),
        "dtype": args.dtype,
        "torch": torch.__version__,
        "runs": [],
    }
    for batch in args.batch:
        run = bench(model, batch, args.prompt_width, args.new_tokens, args.dtype)
        record["runs"].append(run)
        print(json.dumps(run))
        torch.cuda.empty_cache()
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(args.output)) or ".", prefix=".decode_bench.")
    with os.fdopen(fd, "w") as f:
        json.dump(record, f, indent=1)
    os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
