"""A task that is not GSM8K, generated locally, for the own-task GPU stages (``own_task``, ``learn_own``).

    python benchmarks/own_task.py --output DIR [--train-size 4096] [--test-size 256] [--seed 0]

writes ``DIR/train.jsonl`` and ``DIR/test.jsonl``: one ``{"problem", "solution"}`` object a line (column names unlike
GSM8K's on purpose, for ``verlfit prepare-data --question-column problem --answer-column solution``). Each problem is
a two-step stock count on a shelf ("A shelf holds 23 jars. 17 more jars arrive, then 9 are sold. How many jars are
on the shelf now?"), the solution the whole number alone ("31"): no worked answer, no "####". The answer format the
model is asked for, and the reward function that scores it, are ``benchmarks/own_task_reward.py``'s: the last
``Answer: N`` (or ``#### N``) line of the response, compared as a number. Deterministic: the same arguments give the
same files byte for byte.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

DATA_SOURCE = "verlfit/shelf-stock"
# the instruction prepare-data puts after each problem (--prompt-template)
PROMPT_TEMPLATE = '{question} Think step by step, then give the final number on its own line as "Answer: N".'
_ITEMS = ("jars", "books", "boxes", "cans", "bottles", "bags", "cups", "plates")
_PLACES = ("shelf", "rack", "cart", "crate")


def problem(rng: random.Random, max_value: int = 50) -> dict:
    """One problem: ``{"problem": text, "solution": the count as text}``; the count never drops below 0."""
    item, place = rng.choice(_ITEMS), rng.choice(_PLACES)
    start, arrive = rng.randint(2, max_value), rng.randint(1, max_value)
    sold = rng.randint(1, start + arrive)
    text = f"A {place} holds {start} {item}. {arrive} more {item} arrive, then {sold} are sold. How many {item} are on the {place} now?"
    return {"problem": text, "solution": str(start + arrive - sold)}


def write_splits(output: str | Path, train_size: int = 4096, test_size: int = 256, seed: int = 0) -> dict[str, Path]:
    """Write ``train.jsonl`` and ``test.jsonl`` of distinct problems (no test problem is a training problem)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    rows: list[dict] = []
    while len(rows) < train_size + test_size:
        row = problem(rng)
        if row["problem"] not in seen:
            seen.add(row["problem"])
            rows.append(row)
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    paths = {"train": output / "train.jsonl", "test": output / "test.jsonl"}
    for split, part in (("train", rows[:train_size]), ("test", rows[train_size:])):
        paths[split].write_text("".join(json.dumps(row) + "\n" for row in part), encoding="utf-8")
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, help="folder for train.jsonl and test.jsonl")
    parser.add_argument("--train-size", type=int, default=4096)
    parser.add_argument("--test-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for split, path in write_splits(args.output, args.train_size, args.test_size, args.seed).items():
        print(f"{split}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
