"""Command line of :mod:`verlfit.synthetic_model`: a Qwen2.5-style tokenizer and a random-weight model (Qwen2, Qwen3
or Llama), made locally with no hub access.

    python benchmarks/make_model.py --shape qwen2.5-0.5b --output DIR
    python benchmarks/make_model.py --tokenizer-only --output DIR
    python benchmarks/make_model.py --shape tiny --output DIR --generation-sampling-defaults
    python benchmarks/make_model.py --shape tiny --output DIR --no-eos

Shapes: qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-3b (the Qwen2.5-*-Instruct configs), tiny and small. The code lives in
the package (``verlfit bench`` uses it inside the images); this script runs the checkout's copy and re-exports its
names, so ``import make_model`` keeps working. Deterministic: the same arguments give the same files byte for byte.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoint"))

from verlfit import synthetic_model  # noqa: E402
from verlfit.synthetic_model import *  # noqa: E402,F401,F403  (the module's public names, as before the move)
from verlfit.synthetic_model import DEFAULT_VOCAB_SIZE, SAMPLING_DEFAULTS, SHAPES  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Make a local Qwen2.5-style tokenizer and random-weight Qwen2 model.")
    ap.add_argument("--output", required=True, help="output directory (usable as --model for verl)")
    ap.add_argument("--shape", default="qwen2.5-0.5b", choices=sorted(SHAPES))
    ap.add_argument("--tokenizer-dir", default=None, help="reuse this tokenizer instead of training one")
    ap.add_argument("--tokenizer-only", action="store_true", help="train and save only the tokenizer")
    ap.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE, help="tokenizer size, specials included")
    ap.add_argument(
        "--corpus-jsonl",
        action="append",
        default=[],
        help=(
            "extra tokenizer training text: jsonl files with question/answer fields (repeatable); "
            "added to the built-in corpus"
        ),
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    ap.add_argument(
        "--device",
        default=None,
        help="draw the random weights on this torch device (e.g. cuda: seconds for a 14B; other values); default CPU",
    )
    ap.add_argument(
        "--generation-sampling-defaults",
        action="store_true",
        help=f"write Qwen2.5-Instruct's sampling fields into generation_config.json ({SAMPLING_DEFAULTS})",
    )
    ap.add_argument(
        "--no-eos",
        action="store_true",
        help=(
            "write config.json and generation_config.json without eos_token_id and pad_token_id "
            "(the tokenizer keeps its EOS): verl's rollout then decodes without an EOS id (issue 29)"
        ),
    )
    a = ap.parse_args(argv)

    tok_dir = a.tokenizer_dir
    if tok_dir is None and (a.tokenizer_only or a.corpus_jsonl or a.vocab_size != DEFAULT_VOCAB_SIZE):
        texts = synthetic_model.read_corpus_jsonl(a.corpus_jsonl) if a.corpus_jsonl else None
        tok = synthetic_model.train_tokenizer(a.output, texts=texts, vocab_size=a.vocab_size)
        tok_dir = a.output
        print(f"tokenizer: {a.output} ({len(tok)} tokens, specials {synthetic_model.special_ids(tok)})")
    if a.tokenizer_only:
        return 0
    synthetic_model.make_model(
        a.output,
        shape=a.shape,
        tokenizer_dir=tok_dir,
        seed=a.seed,
        dtype=a.dtype,
        generation_sampling_defaults=a.generation_sampling_defaults,
        vocab_size=a.vocab_size,
        no_eos=a.no_eos,
        device=a.device,
    )
    with open(os.path.join(a.output, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    print(
        f"model: {a.output} (shape {a.shape}, {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, "
        f"vocab {cfg['vocab_size']}, dtype {cfg['torch_dtype']})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
