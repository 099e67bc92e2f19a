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
    text = (
        f"A {place} holds {start} {item}. {arrive} more {item} arrive, then {sold} are sold. How many {item} are on the"
        f" {place} now?"
    )
    return {"problem": text, "solution": str(start + arrive - sold)}


def _distinct_problems(rng: random.Random, count: int, seen: set[str]) -> list[dict]:
    """``count`` problems from ``rng`` whose text is not in ``seen`` (which grows with them)."""
    rows: list[dict] = []
    while len(rows) < count:
        row = problem(rng)
        if row["problem"] not in seen:
            seen.add(row["problem"])
            rows.append(row)
    return rows


def write_splits(output: str | Path, train_size: int = 4096, test_size: int = 256, seed: int = 0) -> dict[str, Path]:
    """Write ``train.jsonl`` and ``test.jsonl`` of distinct problems (no test problem is a training problem)."""
    rows = _distinct_problems(random.Random(seed), train_size + test_size, set())
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    paths = {"train": output / "train.jsonl", "test": output / "test.jsonl"}
    for split, part in (("train", rows[:train_size]), ("test", rows[train_size:])):
        paths[split].write_text("".join(json.dumps(row) + "\n" for row in part), encoding="utf-8")
    return paths


def worked_answer(row: dict) -> str:
    """The answer a supervised warm-up teaches for one problem: both steps, then ``#### N`` (the line the reward
    function reads, as ``Answer: N``), e.g. ``23 + 17 = 40. 40 - 9 = 31.\n#### 31``. The numbers are read back from
    the problem's own fixed wording (``problem``'s sentence: words 3, 5 and 10)."""
    words = row["problem"].split()
    start, arrive, sold = int(words[3]), int(words[5]), int(words[10])
    return (
        f"{start} + {arrive} = {start + arrive}. {start + arrive} - {sold} = {row['solution']}.\n#### {row['solution']}"
    )


def write_warmup_splits(
    output: str | Path,
    train_size: int = 4096,
    test_size: int = 256,
    seed: int = 0,
    warmup_size: int = 4096,
    dev_size: int = 200,
) -> dict[str, Path]:
    """Write the supervised warm-up's problems for the own task: ``train.jsonl``, ``test.jsonl`` and ``dev.jsonl``
    of ``{"question", "answer"}`` (``benchmarks/sft_warmup.py --data-dir``'s format; answers from ``worked_answer``).

    They are drawn from the same random stream as ``write_splits(train_size, test_size, seed)``, after its rows and
    never equal to one of them: the RL run's held-out problems are never seen in the warm-up.
    """
    rng = random.Random(seed)
    seen: set[str] = set()
    _distinct_problems(rng, train_size + test_size, seen)  # the RL splits' problems, skipped
    rows = _distinct_problems(rng, warmup_size + 2 * dev_size, seen)
    parts = {
        "train": rows[:warmup_size],
        "test": rows[warmup_size : warmup_size + dev_size],
        "dev": rows[warmup_size + dev_size :],
    }
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, part in parts.items():
        paths[split] = output / f"{split}.jsonl"
        paths[split].write_text(
            "".join(json.dumps({"question": r["problem"], "answer": worked_answer(r)}) + "\n" for r in part),
            encoding="utf-8",
        )
    return paths


def instruction() -> str:
    """What ``PROMPT_TEMPLATE`` puts after the question (``sft_warmup.py --instruction``: the warm-up's prompts are the
    RL run's)."""
    return PROMPT_TEMPLATE.removeprefix("{question} ")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, help="folder for train.jsonl and test.jsonl")
    parser.add_argument("--train-size", type=int, default=4096)
    parser.add_argument("--test-size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--warmup",
        action="store_true",
        help=(
            "write the supervised warm-up's problems instead (sft_warmup.py --data-dir format: train, test, "
            "dev; worked answers; none of them in the splits the same sizes and seed write)"
        ),
    )
    args = parser.parse_args(argv)
    write = write_warmup_splits if args.warmup else write_splits
    for split, path in write(args.output, args.train_size, args.test_size, args.seed).items():
        print(f"{split}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
