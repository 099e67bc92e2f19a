"""``verlfit prepare-data``: its parser and help, the options handed to :func:`verlfit.prepare_data.prepare_data`,
which writes the user's question/answer files as verl 0.4.1's ``train.parquet`` / ``test.parquet`` and says each step
on stdout."""

from __future__ import annotations

import argparse

from verlfit.output_files import printed_while_writing
from verlfit.prepare_data import DEFAULT_ABILITY, prepare_data

_DESCRIPTION = """\
Write your own question/answer files as verl 0.4.1 reads them: <output>/train.parquet and
<output>/test.parquet with the five columns of verl's GSM8K script (data_source, prompt, ability,
reward_model, extra_info). data_source is --data-source on every row (your reward function receives
it: verl's own scorers know only their datasets' names); prompt is an optional --system-prompt
message, then the question (or --prompt-template with {question} in it); the ground truth is the
answer column as text (a whole number as its digits, 3.0 too; another number as Python writes it).
Only {question} is replaced in --prompt-template: another {name} in it is refused.

input: .jsonl (one JSON object a line), .json (an array of objects), .csv (header line first, each
column named once; UTF-8, with or without the byte-order mark Excel writes), .parquet. A column
named by --question-column or --answer-column that no row has is refused once, listing the file's
columns. A row with a missing or blank question or answer, an answer that is neither text nor a
number, text holding a lone surrogate escape (\\ud800 without its pair), or a line that is not a JSON
object is reported as '<file> line N, column C: reason'
(parquet and .json: row/item N, counted from 0) and skipped (--strict: fatal).

split: --test FILE (another file than --train), or --test-fraction F of --train's good rows drawn
with --seed (at least one row each side); extra_info.index is the row's position in its file.

lengths: with --tokenizer, prompts are measured as verl's RLHFDataset measures them; with
--max-prompt-length N, prompts over N tokens are dropped (as prepare-gsm8k does).

output: built whole in a hidden folder beside --output with a marker (.verlfit-written.json), then
switched in with one rename. --output must be absent, empty, or what verlfit wrote there before: a
re-run on the same files replaces it, --force replaces what verlfit wrote from other inputs; a
folder holding files verlfit did not write, an input's folder, a run directory or the current
directory is refused (even with --force).
"""

_EPILOG = """\
examples:
  $ verlfit prepare-data --train units.jsonl --test-fraction 0.1 --data-source my/units --output data/units
  $ verlfit prepare-data --train train.csv --test test.csv --question-column problem --answer-column solution \\
      --data-source my/task --prompt-template 'Solve: {question} Put the answer after ####.' \\
      --tokenizer Qwen/Qwen3-1.7B --max-prompt-length 256 --output data/task
then train with your reward function:
  $ verlfit train --data data/units --reward-function reward.py:compute_score
"""


def register(subparsers):
    """Add the ``prepare-data`` parser; its ``func`` runs :func:`verlfit.prepare_data.prepare_data` with the options."""
    parser = subparsers.add_parser(
        "prepare-data",
        help="write your own question/answer files as verl's train.parquet / test.parquet",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--train", metavar="FILE", required=True, help="training rows: .jsonl, .json, .csv or .parquet")
    held_out = parser.add_mutually_exclusive_group(required=True)
    held_out.add_argument("--test", metavar="FILE", help="held-out rows (same formats)")
    held_out.add_argument(
        "--test-fraction", metavar="F", type=float, help="hold out this share of --train's good rows (0 < F < 1)"
    )
    parser.add_argument(
        "--seed", metavar="N", type=int, default=0, help="random seed of --test-fraction's split (default 0)"
    )
    parser.add_argument(
        "--data-source",
        metavar="NAME",
        required=True,
        help="the data_source of every row: your reward function receives it",
    )
    parser.add_argument(
        "--question-column", metavar="NAME", default="question", help="column holding the question (default: question)"
    )
    parser.add_argument(
        "--answer-column",
        metavar="NAME",
        default="answer",
        help="column holding the answer, the ground truth (default: answer)",
    )
    parser.add_argument("--system-prompt", metavar="TEXT", help="a system message before each question")
    parser.add_argument(
        "--prompt-template",
        metavar="TEXT",
        help="the user message, with {question} where the question goes (default: the question)",
    )
    parser.add_argument(
        "--ability", metavar="NAME", default=DEFAULT_ABILITY, help=f"verl's ability column (default: {DEFAULT_ABILITY})"
    )
    parser.add_argument(
        "--tokenizer",
        "--model",
        dest="tokenizer",
        metavar="PATH_OR_NAME",
        help="the model you train (its folder or hub name): prompts are measured in its tokens",
    )
    parser.add_argument(
        "--max-prompt-length", metavar="N", type=int, help="drop prompts longer than N tokens (needs --tokenizer)"
    )
    parser.add_argument(
        "--output", metavar="DIR", required=True, help="output folder: absent, empty, or written by verlfit before"
    )
    parser.add_argument("--strict", action="store_true", help="fail on bad rows instead of skipping them")
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace what verlfit wrote into --output before (from other inputs or another command); "
        "never a file verlfit did not write",
    )
    parser.set_defaults(func=_run)
    return parser


def _run(args) -> int:
    """Prepare the user's files as the options say, printing each progress and summary line; 0 when written.

    Raises:
        VerlfitError: what :func:`verlfit.prepare_data.prepare_data` raises (exit status 2 for a refused input, option
            or output; 1 when the hub cannot be reached or the output cannot be written).
    """
    with printed_while_writing() as log:  # a closed pipe (| head -1) stops the printing, never the write
        prepare_data(
            train=args.train,
            test=args.test,
            test_fraction=args.test_fraction,
            seed=args.seed,
            data_source=args.data_source,
            question_column=args.question_column,
            answer_column=args.answer_column,
            system_prompt=args.system_prompt,
            prompt_template=args.prompt_template,
            ability=args.ability,
            tokenizer=args.tokenizer,
            max_prompt_length=args.max_prompt_length,
            output_dir=args.output,
            strict=args.strict,
            force=args.force,
            log=log,
        )
    return 0
