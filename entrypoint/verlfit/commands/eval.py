"""The ``eval`` subcommand: ``verlfit eval MODEL [--data DIR] [--split S] [--compare OTHER] ...`` parsed into typed
values, the stack checked, the model scored by :func:`verlfit.evaluate.run_eval`, its summary printed
(:func:`verlfit.evaluate.describe`)."""

from __future__ import annotations

import argparse

from verlfit import evaluate
from verlfit.checks.stack import require
from verlfit.profiles import PROFILE_NAMES


def whole_number(text: str) -> int:
    """A count option's value (``--limit``, ``--batch-size``, ``--max-new-tokens``): a whole number >= 1, else
    argparse's usage error (exit status 2)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number >= 1")
    return int(text)


def split_name(text: str) -> str:
    """``--split``: the name of a split file in ``--data`` (``test`` for test.parquet), not a path: a name with a
    ``/`` or one of ``.``, ``..`` would read outside ``--data`` and name the eval folder outside ``eval/``."""
    if not text or text in (".", "..") or "/" in text or "\\" in text or "\0" in text:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a split name: pass the name of a SPLIT.parquet in --data (e.g. test, train)"
        )
    return text.removesuffix(".parquet")


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``verlfit eval`` to ``subparsers``; return its parser."""
    parser = subparsers.add_parser(
        "eval",
        help=(
            "score a model on a prepared split (GSM8K or your own task) as training validation scores it, greedy;"
            " optionally against another"
        ),
        description=(
            "Score MODEL on a prepared split (verlfit prepare-gsm8k, or verlfit prepare-data for your own task) as "
            "training validation scores it, with greedy HF generate in the profile's dtype and attention. The score "
            "is your reward function (--reward-function FILE[:NAME]; a run directory brings the one it trained with), "
            "else verl's scorer for each row's data_source (openai/gsm8k: verl's strict GSM8K reward). Prints "
            "accuracy where every score is 0 or 1, else the mean reward. MODEL is a model directory, a hub id, or a "
            "run directory (its newest checkpoint, exported to a temporary directory)."
        ),
        epilog=(
            "examples:\n  $ verlfit eval runs/ppo-p40 --data data/gsm8k\n  $ verlfit eval runs/ppo-p40 --compare"
            " Qwen/Qwen2.5-0.5B-Instruct --limit 256\n  $ verlfit eval runs/grpo-p40 --data data/shelf"
            " --reward-function data/shelf_reward.py   # your own task\n  $ verlfit eval"
            " runs/ppo-p40/export/global_step_50 --profile p40 --batch-size 32 --output eval/step50\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model", metavar="MODEL", help="model directory, hub id, or run directory")
    parser.add_argument(
        "--data",
        default="data/gsm8k",
        metavar="DIR",
        help="prepared data: the folder verlfit prepare-gsm8k or verlfit prepare-data wrote (default data/gsm8k)",
    )
    parser.add_argument(
        "--split",
        default="test",
        type=split_name,
        help="which SPLIT.parquet of --data, by name (default test, what validation uses)",
    )
    parser.add_argument("--limit", type=whole_number, metavar="N", help="only the first N rows")
    parser.add_argument(
        "--compare",
        metavar="OTHER",
        help="also score OTHER on the same rows; print the paired difference with a 95%% CI",
    )
    parser.add_argument("--batch-size", type=whole_number, default=16, help="prompts per generate call (default 16)")
    parser.add_argument(
        "--max-new-tokens",
        type=whole_number,
        metavar="T",
        help="response budget in tokens (default: the run's --max-response-length, else "
        f"{evaluate.DEFAULT_MAX_NEW_TOKENS})",
    )
    parser.add_argument(
        "--profile",
        type=str.lower,
        choices=(*PROFILE_NAMES, "auto"),
        help="dtype and attention (default: the run's profile, else the GPU's, else fp32 + SDPA on CPU)",
    )
    parser.add_argument(
        "--output",
        metavar="DIR",
        help=f"where to write {evaluate.ROWS_FILE} and {evaluate.SUMMARY_FILE}: a new folder or an earlier eval's "
        f"(default RUN/{evaluate.EVAL_DIR}/global_step_N-DATA-SPLIT or {evaluate.EVAL_DIR}/NAME-DATA-SPLIT, "
        "DATA the data folder's name)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace what verlfit wrote at --output before (another eval's; a re-run of the same eval "
        "replaces its own without it); never a file verlfit did not write",
    )
    parser.add_argument(
        "--reward-function",
        metavar="FILE[:NAME]",
        help="score with this reward function (verl's custom_reward_function; NAME default compute_score) instead "
        "of verl's scorer for each row's data_source (default: the run's, else verl's)",
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Check the stack (torch, transformers, verl), score the model and print its summary; return 0.

    Raises:
        VerlfitError: a missing package (:func:`verlfit.checks.stack.require`, the same words as train and export);
            what :func:`verlfit.evaluate.run_eval` raises.
    """

    require("eval")
    summary = evaluate.run_eval(
        args.model,
        args.data,
        args.split,
        args.limit,
        args.batch_size,
        args.output,
        args.compare,
        args.profile,
        args.max_new_tokens,
        reward_function=args.reward_function,
        force=bool(args.force),
    )
    print(evaluate.describe(summary))
    return 0
