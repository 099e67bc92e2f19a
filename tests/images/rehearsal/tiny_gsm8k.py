"""Write a few GSM8K-style rows (question, answer ending in '#### <number>') as DIR/train.jsonl and DIR/test.jsonl:
the local input `verlfit prepare-gsm8k --input DIR` reads in the rehearsal. Made here, not copied from GSM8K.

Usage: python tiny_gsm8k.py DIR
"""

import json
import sys
from pathlib import Path


def rows(count: int, start: int) -> list[dict[str, str]]:
    made = []
    for index in range(start, start + count):
        apples, more = 3 + index, 2 * index + 1
        made.append(
            {
                "question": f"Sam has {apples} apples and buys {more} more. How many apples does Sam have?",
                "answer": f"Sam has {apples} + {more} = {apples + more} apples.\n#### {apples + more}",
            }
        )
    return made


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("Usage: ")[1].strip(), file=sys.stderr)
        return 2
    folder = Path(argv[0])
    folder.mkdir(parents=True, exist_ok=True)
    for split, count, start in (("train", 8, 0), ("test", 4, 100)):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows(count, start)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
