"""Command line of :mod:`verlfit.synthetic_gsm8k`: simple GSM8K-format word problems, generated locally.

    python benchmarks/gsm8k_synthetic.py --output DIR [--train-size 5000] [--test-size 500] [--seed 0]

writes ``DIR/train.jsonl`` and ``DIR/test.jsonl`` (one ``{"question", "answer"}`` object a line) for
``verlfit prepare-gsm8k --input DIR``. The generator lives in the package (``verlfit bench`` uses it inside the
images); this script runs the checkout's copy and re-exports its names, so ``import gsm8k_synthetic`` keeps working.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoint"))

from verlfit import synthetic_gsm8k  # noqa: E402
from verlfit.synthetic_gsm8k import *  # noqa: E402,F401,F403  (the module's public names, as before the move)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=synthetic_gsm8k.__doc__.split("\n\n")[0])
    ap.add_argument("--output", required=True, help="directory for train.jsonl and test.jsonl")
    ap.add_argument("--train-size", type=int, default=5000)
    ap.add_argument("--test-size", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-value", type=int, default=50, help="largest operand of the ordinary problems")
    ap.add_argument("--negative-rate", type=float, default=0.03)
    ap.add_argument("--thousands-rate", type=float, default=0.03)
    a = ap.parse_args(argv)
    paths = synthetic_gsm8k.write_splits(
        a.output,
        n_train=a.train_size,
        n_test=a.test_size,
        seed=a.seed,
        max_value=a.max_value,
        negative_rate=a.negative_rate,
        thousands_rate=a.thousands_rate,
    )
    for name, p in paths.items():
        print(f"{name}: {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
