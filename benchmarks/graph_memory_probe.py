#!/usr/bin/env python3
"""Does patch 0022's CUDA-graph decoding leave allocated GPU memory behind, call after call? (issue 13)

With every speed key on, the main job's allocated peak rose ~30 MB a step (16.69 -> 16.98 GiB over 10 steps,
benchmarks/results/2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench/speed-all) and stayed flat
without cuda_graph. The suspect: each
capture warmed up on a new ``torch.cuda.Stream``; cuBLAS keeps one workspace per (handle, stream) for the life of
the process (allocated through torch's caching allocator, so it counts as allocated), and torch hands out
streams from a round-robin pool of 32. Patch 0022 now warms up and captures on one stream per device
(``static_decode.capture_stream``).

This probe decodes ``--calls`` times with a fresh StaticDecoder each (as HFRollout does per micro-batch and
step) under two policies, in this order: ``one_stream`` (the patch as it is) and ``new_stream_per_capture``
(``capture_stream`` replaced by a new stream per call, as before the fix), and records
``torch.cuda.memory_allocated()`` (bytes) after each call and a ``gc.collect()``. Reported per policy: the
allocated bytes after each call and the growth per call after the first (MiB, least squares).

Needs a CUDA GPU and verl patched with patches/verl-0.4.1. Writes --output (JSON) via a temporary file.

  python3 benchmarks/graph_memory_probe.py --model MODEL_DIR --output graph_memory.json
"""

import argparse
import gc
import json
import os
import sys
import tempfile

MIB = 1024**2


def growth_per_call(values: list[float]) -> float:
    """Least-squares slope of ``values`` against the call index (units of ``values`` per call); 0 for < 2 values."""
    n = len(values)
    if n < 2:
        return 0.0
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    return sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values)) / sum((i - mean_x) ** 2 for i in range(n))


def run_policy(model, policy: str, calls: int, batch: int, prompt_width: int, new_tokens: int) -> dict:
    """``calls`` generate calls with a fresh StaticDecoder each; allocated bytes after each."""
    import torch

    from verl.workers.rollout import static_decode

    original = static_decode.capture_stream
    if policy == "new_stream_per_capture":
        static_decode.capture_stream = lambda device: torch.cuda.Stream(device=device)
    try:
        generator = torch.Generator(device="cpu").manual_seed(0)
        allocated = []
        for _ in range(calls):
            lengths = torch.randint(prompt_width // 2, prompt_width + 1, (batch,), generator=generator)
            ids = torch.randint(0, model.config.vocab_size, (batch, prompt_width), generator=generator)
            mask = (torch.arange(prompt_width)[None, :] >= (prompt_width - lengths)[:, None]).long()
            decoder = static_decode.StaticDecoder(
                model,
                batch_size=batch,
                cache_len=prompt_width + new_tokens,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                eos_token_id=-1,
                pad_token_id=0,
            )
            decoder.generate(ids.cuda() * mask.cuda(), mask.cuda(), new_tokens)
            del decoder
            gc.collect()
            torch.cuda.synchronize()
            allocated.append(torch.cuda.memory_allocated())
    finally:
        static_decode.capture_stream = original
    after_first = [a / MIB for a in allocated[1:]]
    return {"allocated_bytes": allocated, "growth_mib_per_call": round(growth_per_call(after_first), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", required=True, help="a model directory (benchmarks/make_model.py --shape qwen2.5-0.5b)"
    )
    parser.add_argument("--calls", type=int, default=8, help="generate calls per policy (default 8)")
    parser.add_argument(
        "--batch", type=int, default=32, help="rows per call (default 32, the main job's rollout micro-batch)"
    )
    parser.add_argument("--prompt-width", type=int, default=256, help="prompt columns, left-padded (default 256)")
    parser.add_argument(
        "--new-tokens", type=int, default=16, help="tokens per call (default 16: a capture and some replays)"
    )
    parser.add_argument("--output", required=True, help="JSON file to write")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM

    if not torch.cuda.is_available():
        print("graph_memory_probe.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    model = (
        AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32, attn_implementation="sdpa")
        .cuda()
        .eval()
    )
    result = {
        "model": os.path.basename(os.path.normpath(args.model)),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "batch": args.batch,
        "prompt_width": args.prompt_width,
        "new_tokens": args.new_tokens,
        "policies": {},
    }
    for policy in ("one_stream", "new_stream_per_capture"):
        result["policies"][policy] = run_policy(
            model, policy, args.calls, args.batch, args.prompt_width, args.new_tokens
        )
        print(
            f"{policy}: allocated after each call (MiB):"
            f" {[round(a / MIB, 1) for a in result['policies'][policy]['allocated_bytes']]}; growth"
            f" {result['policies'][policy]['growth_mib_per_call']} MiB per call"
        )
    folder = os.path.dirname(os.path.abspath(args.output))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".graph_memory.", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(result, f, indent=2)
        os.replace(tmp, args.output)
    except BaseException:
        os.unlink(tmp)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
