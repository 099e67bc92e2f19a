"""Hand-written GSM8K-shaped rows (not from GSM8K) for the prepare-gsm8k tests and those that need GSM8K input to
prepare, the JSONL files of them, and :func:`run_prepare` (``verlfit.gsm8k.prepare`` with its log kept)."""

from __future__ import annotations

import json
from pathlib import Path

from verlfit import gsm8k

LONG_QUESTION = (
    "A baker fills trays with rolls and stacks the trays by the oven door. " * 12
    + "If he bakes 4 trays an hour for 6 hours, how many trays does he bake?"
)

# Hand-written rows (not from GSM8K). Train: a thousands comma, a negative, a decimal, no "####",
# "#### " with no number, an empty question, a second comma, and one very long question.
TRAIN = [
    {
        "question": "An orchard has 40 rows of 40 apple trees. How many trees are there?",
        "answer": "40 * 40 = <<40*40=1600>>1600 trees.\n#### 1,600",
    },
    {
        "question": "Tom has 3 dollars and spends 8. What is his balance?",
        "answer": "3 - 8 = <<3-8=-5>>-5 dollars.\n#### -5",
    },
    {
        "question": "Five cakes are shared by two children. How many cakes does each get?",
        "answer": "5 / 2 = <<5/2=2.5>>2.5 cakes.\n#### 2.5",
    },
    {"question": "How many legs do 2 cats have?", "answer": "Each cat has 4 legs, so 2 * 4 = 8 legs."},
    {"question": "What is 7 + 5?", "answer": "7 + 5 = <<7+5=12>>12\n#### "},
    {"question": "", "answer": "There are 3.\n#### 3"},
    {
        "question": "A shop sells 1,250 pens on Monday and 1,250 on Tuesday. How many pens in all?",
        "answer": "1,250 + 1,250 = <<1250+1250=2500>>2,500 pens.\n#### 2,500",
    },
    {"question": LONG_QUESTION, "answer": "4 * 6 = <<4*6=24>>24 trays.\n#### 24"},
]
# Test: a plain row, a whitespace-only question, a long question.
TEST = [
    {
        "question": "Sam reads 12 pages a day for 30 days. How many pages does he read?",
        "answer": "12 * 30 = <<12*30=360>>360 pages.\n#### 360",
    },
    {"question": "   ", "answer": "#### 4"},
    {"question": LONG_QUESTION.replace("4 trays", "5 trays"), "answer": "5 * 6 = <<5*6=30>>30 trays.\n#### 30"},
]


def write_jsonl(directory: Path, train=TRAIN, test=TEST) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("test", test)):
        with open(directory / f"{name}.jsonl", "w") as handle:
            for item in rows:
                handle.write(json.dumps(item) + "\n")
    return directory


def run_prepare(source, output, **kwargs):
    lines: list[str] = []
    result = gsm8k.prepare(source, output, log=lines.append, **kwargs)
    return result, lines
