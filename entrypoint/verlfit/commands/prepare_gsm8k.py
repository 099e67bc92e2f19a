"""``verlfit prepare-gsm8k``: its parser and help, the options handed to :func:`verlfit.gsm8k.prepare`, which
writes GSM8K as verl 0.4.1's ``train.parquet`` / ``test.parquet`` and says each step on stdout."""

from __future__ import annotations

import argparse

from verlfit.gsm8k import DEFAULT_OUTPUT, HUB_CONFIG, HUB_DATASET, prepare
from verlfit.output_files import printed_while_writing

_DESCRIPTION = f"""\
Write GSM8K as verl 0.4.1 reads it: <output>/train.parquet and <output>/test.parquet with the
columns of verl's examples/data_preprocess/gsm8k.py (data_source, prompt, ability, reward_model,
extra_info); the ground truth is the first '#### <number>' of the answer, commas removed.

source: without --input, {HUB_DATASET} (config {HUB_CONFIG}) through the datasets library, which
honours HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE=1 / HF_DATASETS_OFFLINE=1. With --input DIR, local
files with 'question' and 'answer' columns: in DIR, or else in DIR/main (the hub's layout),
  train.parquet | train.jsonl | train.json | train-*.parquet | train-*.jsonl | train-*.json
and the same for test; shards are read in name order; one format per split. (.json: JSON lines
or one JSON array of objects.)

rows: a row with a missing or blank question or answer, no '####' in its answer or no number after it is
reported as '<split> row <index>: <reason>' (index counted from 0: line index+1 of a jsonl file) \
and skipped (--strict: fatal). A file that does not parse
(a broken JSON line, a question that is a number) stops preparation with the reader's error. \
extra_info.index is the row's
index in its source split, so skipped or dropped rows leave gaps and every row traces back.

lengths: with --tokenizer, each prompt is rendered as verl's RLHFDataset does
(apply_chat_template(prompt, add_generation_prompt=True)) and the length distribution printed;
with --max-prompt-length N too, prompts over N tokens are dropped (verl keeps length <= N), so
data.max_prompt_length=N cannot fail mid-run.

output: built whole in a hidden folder beside the output, with a marker (.verlfit-written.json:
the command, its input, each file's size and SHA-256), then switched in with one rename; on any
error or Ctrl-C the previous folder stays as it was. The same input gives byte-identical parquet
files. The output must be absent, empty, or what verlfit prepared there before: a re-run on the
same input replaces it, --force replaces what another verlfit command or input wrote; a folder
holding files verlfit did not write, an input, a run directory or the current directory is
refused before anything is read (even with --force), and so is a folder inside --input, but for
<input>/verl, the folder `verlfit train --data <input>` reads (and prepares itself).
"""

_EPILOG = """\
examples:
  $ verlfit prepare-gsm8k
  $ HF_HUB_OFFLINE=1 verlfit prepare-gsm8k --input /data/gsm8k --output data/gsm8k
  $ verlfit prepare-gsm8k --input ./gsm8k --tokenizer Qwen/Qwen2.5-0.5B-Instruct --max-prompt-length 256
"""


def register(subparsers):
    """Add the ``prepare-gsm8k`` parser; its ``func`` runs :func:`verlfit.gsm8k.prepare` with the options."""
    parser = subparsers.add_parser(
        "prepare-gsm8k",
        help="write GSM8K as verl's train.parquet / test.parquet (hub or local files)",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--input", metavar="DIR", help="local GSM8K directory (default: download from the hub)")
    parser.add_argument(
        "--output", metavar="DIR", default=DEFAULT_OUTPUT, help=f"output directory (default: {DEFAULT_OUTPUT})"
    )
    parser.add_argument(
        "--tokenizer", metavar="PATH_OR_NAME", help="tokenizer to measure prompts with (the model you train)"
    )
    parser.add_argument(
        "--max-prompt-length", metavar="N", type=int, help="drop prompts longer than N tokens (needs --tokenizer)"
    )
    parser.add_argument("--strict", action="store_true", help="fail on bad rows instead of skipping them")
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace what verlfit wrote into --output before (from another input or command); never a "
        "file verlfit did not write",
    )
    parser.set_defaults(func=_run)
    return parser


def _run(args) -> int:
    """Prepare GSM8K as the options say, printing each progress and summary line; 0 when written.

    Raises:
        VerlfitError: what :func:`verlfit.gsm8k.prepare` raises (its exit status: 2 for a refused input, option or
            output; 1 when the hub cannot be reached or the output cannot be written).
    """
    with printed_while_writing() as log:  # a closed pipe (| head -1) stops the printing, never the write
        prepare(
            source=args.input,
            output_dir=args.output,
            tokenizer=args.tokenizer,
            max_prompt_length=args.max_prompt_length,
            strict=args.strict,
            force=args.force,
            log=log,
        )
    return 0
