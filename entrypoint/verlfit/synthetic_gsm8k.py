"""Simple GSM8K-format word problems, generated locally and deterministically (no download).

Each problem is "a + b - c" style (two steps), written like GSM8K: a question in English and an answer whose
reasoning lines carry calculator annotations (``12 + 7 = <<12+7=19>>19``) and whose last line is ``#### N``.
A small share of problems use thousands (answer written ``#### 1,450`` as GSM8K does) and a small share have a
negative result (temperatures, bank balances), so the strict reward's comma and sign handling is exercised.

Used by ``verlfit bench`` (its data without ``--gsm8k``), by the learning check of issue 6 and by the local
tokenizer's training corpus (:mod:`verlfit.synthetic_model`). :func:`write_splits` writes ``DIR/train.jsonl`` and
``DIR/test.jsonl`` (one ``{"question", "answer"}`` object a line), which ``verlfit prepare-gsm8k --input DIR``
turns into verl's parquet files. The command line is ``python benchmarks/gsm8k_synthetic.py --output DIR``.

Same seed, same sizes -> the same files byte for byte. The test split never repeats a train question.
"""

from __future__ import annotations

import json
import os
import random
import re
from typing import Dict, Iterator, List

from verlfit.output_files import write_file

__all__ = [
    "NAMES",
    "ITEMS",
    "generate_problem",
    "generate_split",
    "generate_splits",
    "write_jsonl",
    "write_splits",
    "iter_corpus_lines",
    "answer_value",
    "format_number",
]

NAMES = [
    "Maria",
    "James",
    "Aisha",
    "Tom",
    "Lena",
    "Carlos",
    "Priya",
    "Ben",
    "Sofia",
    "Omar",
    "Emma",
    "Liam",
    "Noah",
    "Olivia",
    "Ava",
    "Lucas",
    "Mia",
    "Ethan",
    "Zara",
    "Yuki",
    "Hana",
    "Diego",
    "Nina",
    "Sam",
    "Grace",
    "Leo",
    "Chloe",
    "Jack",
    "Ruby",
    "Max",
]

# (singular, plural)
ITEMS = [
    ("apple", "apples"),
    ("book", "books"),
    ("marble", "marbles"),
    ("pencil", "pencils"),
    ("sticker", "stickers"),
    ("cookie", "cookies"),
    ("card", "cards"),
    ("shell", "shells"),
    ("stamp", "stamps"),
    ("balloon", "balloons"),
    ("orange", "oranges"),
    ("toy car", "toy cars"),
    ("flower", "flowers"),
    ("egg", "eggs"),
    ("crayon", "crayons"),
    ("button", "buttons"),
    ("candy", "candies"),
    ("coin", "coins"),
    ("ribbon", "ribbons"),
    ("cupcake", "cupcakes"),
]

_PRONOUN = {  # a rough, deterministic pronoun per name (only for readability of the text)
    "Maria": "she",
    "Aisha": "she",
    "Lena": "she",
    "Priya": "she",
    "Sofia": "she",
    "Emma": "she",
    "Olivia": "she",
    "Ava": "she",
    "Mia": "she",
    "Zara": "she",
    "Yuki": "she",
    "Hana": "she",
    "Nina": "she",
    "Grace": "she",
    "Chloe": "she",
    "Ruby": "she",
}


def _pron(name: str) -> str:
    return _PRONOUN.get(name, "he")


def format_number(n: int, commas: bool = True) -> str:
    """GSM8K style: thousands separated by commas (``1,450``), negative with a leading minus."""
    return f"{n:,}" if commas else str(n)


def answer_value(answer: str) -> str:
    """The ground truth the way verl's GSM8K preprocessing takes it: the first ``#### N``, commas removed."""
    m = re.search(r"#### (\-?[0-9\.\,]+)", answer)
    if m is None:
        raise ValueError(f"no '#### N' in answer: {answer!r}")
    return m.group(1).replace(",", "")


def _step(x: int, op: str, y: int) -> tuple[int, str]:
    r = x + y if op == "+" else x - y
    return r, f"{format_number(x)} {op} {format_number(y)} = <<{x}{op}{y}={r}>>{format_number(r)}"


def _items_problem(rng: random.Random, max_value: int) -> Dict[str, str]:
    name, other = rng.sample(NAMES, 2)
    sing, plur = rng.choice(ITEMS)
    he = _pron(name)
    a = rng.randint(2, max_value)
    b = rng.randint(1, max_value)
    c = rng.randint(1, a + b)  # never below zero: you cannot give away more than you have
    kind = rng.randrange(3)
    if kind == 0:
        q = (
            f"{name} has {format_number(a)} {plur}. {he.capitalize()} buys {format_number(b)} more {plur} and then "
            f"gives {format_number(c)} {plur} to {other}. How many {plur} does {name} have now?"
        )
        x, l1 = _step(a, "+", b)
        r, l2 = _step(x, "-", c)
        ans = f"After buying, {name} has {l1} {plur}.\nAfter giving some to {other}, {he} has {l2} {plur}.\n"
    elif kind == 1:
        q = (
            f"There are {format_number(a)} {plur} in a box. {name} puts in {format_number(b)} more {plur}. "
            f"Then {other} takes out {format_number(c)} {plur}. How many {plur} are in the box now?"
        )
        x, l1 = _step(a, "+", b)
        r, l2 = _step(x, "-", c)
        ans = (
            f"After {name} puts some in, there are {l1} {plur}.\nAfter {other} takes some out, there are {l2} {plur}.\n"
        )
    else:
        q = (
            f"{name} collected {format_number(a)} {plur} on Monday and {format_number(b)} {plur} on Tuesday. "
            f"{he.capitalize()} lost {format_number(c)} of them on Wednesday. How many {plur} does {name} have left?"
        )
        x, l1 = _step(a, "+", b)
        r, l2 = _step(x, "-", c)
        ans = f"On Monday and Tuesday {name} collected {l1} {plur}.\nAfter losing some, {he} has {l2} {plur} left.\n"
    return {"question": q, "answer": ans + f"#### {format_number(r)}"}


def _negative_problem(rng: random.Random, max_value: int) -> Dict[str, str]:
    name = rng.choice(NAMES)
    a = rng.randint(1, min(max_value, 30))
    b = rng.randint(1, min(max_value, 30))
    c = rng.randint(a + b + 1, a + b + min(max_value, 30))  # result below zero
    if rng.randrange(2) == 0:
        q = (
            f"In the morning the temperature was {a} degrees. By noon it rose by {b} degrees, and by midnight it "
            f"fell by {c} degrees. What was the temperature at midnight, in degrees?"
        )
        x, l1 = _step(a, "+", b)
        r, l2 = _step(x, "-", c)
        ans = f"At noon the temperature was {l1} degrees.\nAt midnight it was {l2} degrees.\n"
    else:
        q = (
            f"{name} had ${a} in a bank account and deposited ${b}. Then {_pron(name)} paid a bill of ${c} from "
            f"the same account. What is the balance of the account now, in dollars?"
        )
        x, l1 = _step(a, "+", b)
        r, l2 = _step(x, "-", c)
        ans = f"After the deposit the balance was {l1} dollars.\nAfter the bill the balance was {l2} dollars.\n"
    return {"question": q, "answer": ans + f"#### {format_number(r)}"}


def _thousands_problem(rng: random.Random, max_value: int) -> Dict[str, str]:
    name = rng.choice(NAMES)
    sing, plur = rng.choice(ITEMS)
    a = rng.randint(10, 99) * 100
    b = rng.randint(1, 99) * 10
    c = rng.randint(1, 99) * 10
    q = (
        f"A factory made {format_number(a)} {plur} last month. This month it made {format_number(b)} more {plur} "
        f"than that, and {name} shipped {format_number(c)} of this month's {plur} to a store. How many of this "
        f"month's {plur} are still at the factory?"
    )
    x, l1 = _step(a, "+", b)
    r, l2 = _step(x, "-", c)
    ans = f"This month the factory made {l1} {plur}.\nAfter the shipment, {l2} {plur} are still there.\n"
    return {"question": q, "answer": ans + f"#### {format_number(r)}"}


def generate_problem(
    rng: random.Random, max_value: int = 50, negative_rate: float = 0.03, thousands_rate: float = 0.03
) -> Dict[str, str]:
    """One problem drawn from ``rng``. ``max_value`` bounds the operands of the ordinary problems."""
    u = rng.random()
    if u < negative_rate:
        return _negative_problem(rng, max_value)
    if u < negative_rate + thousands_rate:
        return _thousands_problem(rng, max_value)
    return _items_problem(rng, max_value)


def _rng(seed: int, split: str) -> random.Random:
    # str seeds hash through sha512: stable across Python versions and runs (unlike hash()).
    return random.Random(f"verlfit-gsm8k-synthetic:{seed}:{split}")


def generate_split(
    n: int, seed: int = 0, split: str = "train", max_value: int = 50, exclude: set | None = None, **kw
) -> List[Dict[str, str]]:
    """``n`` distinct problems for ``split``; questions in ``exclude`` are skipped.

    Raises:
        RuntimeError: ``max_value`` too small to give ``n`` distinct questions (after ``50 n + 1000`` draws).
    """
    rng = _rng(seed, split)
    seen = set(exclude or ())
    rows: List[Dict[str, str]] = []
    tries = 0
    while len(rows) < n:
        tries += 1
        if tries > 50 * n + 1000:
            raise RuntimeError(f"could not draw {n} distinct problems with max_value={max_value}")
        p = generate_problem(rng, max_value=max_value, **kw)
        if p["question"] in seen:
            continue
        seen.add(p["question"])
        rows.append(p)
    return rows


def generate_splits(
    n_train: int = 5000, n_test: int = 500, seed: int = 0, max_value: int = 50, **kw
) -> Dict[str, List[Dict[str, str]]]:
    """Train and test splits; no test question occurs in train."""
    train = generate_split(n_train, seed=seed, split="train", max_value=max_value, **kw)
    test = generate_split(
        n_test, seed=seed, split="test", max_value=max_value, exclude={r["question"] for r in train}, **kw
    )
    return {"train": train, "test": test}


def iter_corpus_lines(n: int = 4000, seed: int = 1234) -> Iterator[str]:
    """Question and answer text for tokenizer training (one problem's text per item)."""
    rng = _rng(seed, "corpus")
    for _ in range(n):
        p = generate_problem(rng, max_value=999, negative_rate=0.1, thousands_rate=0.1)
        yield p["question"]
        yield p["answer"]


def write_jsonl(rows: List[Dict[str, str]], path: str) -> None:
    """Write ``rows`` to ``path`` as JSON lines (``question`` then ``answer``) with
    :func:`verlfit.output_files.write_file` (a temporary file in the same folder and a rename: an interrupted write
    leaves no half file; the file gets the umask's permissions, as a plain ``open`` gives)."""

    lines = (json.dumps({"question": r["question"], "answer": r["answer"]}, ensure_ascii=False) + "\n" for r in rows)
    write_file(path, "".join(lines))


def write_splits(
    output_dir: str, n_train: int = 5000, n_test: int = 500, seed: int = 0, max_value: int = 50, **kw
) -> Dict[str, str]:
    """Write ``train.jsonl`` and ``test.jsonl`` under ``output_dir``; returns their paths."""
    os.makedirs(output_dir, exist_ok=True)
    splits = generate_splits(n_train=n_train, n_test=n_test, seed=seed, max_value=max_value, **kw)
    paths = {}
    for name, rows in splits.items():
        paths[name] = os.path.join(output_dir, f"{name}.jsonl")
        write_jsonl(rows, paths[name])
    return paths
