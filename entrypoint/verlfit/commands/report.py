"""The ``report`` subcommand: ``verlfit report RUN_DIR [--output DIR] [--force]`` parsed into paths, the report
written by :func:`verlfit.report.write_report`, its summary and where it went printed."""

from __future__ import annotations

import argparse
from pathlib import Path

from verlfit import report
from verlfit.errors import VerlfitError
from verlfit.run_files import DAMAGED_RECORD_FIX


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``verlfit report`` to ``subparsers``; return its parser."""
    parser = subparsers.add_parser(
        "report",
        help="plot a run's reward, KL, entropy, lengths, step time and memory; summarize it",
        description=(
            "Plot and summarize a run directory made by verlfit train, while it runs or after it "
            "stopped. Reads metrics.jsonl (or train.log) and run.json."
        ),
        epilog=(
            "examples:\n  $ verlfit report runs/ppo-p40\n  $ verlfit report runs/ppo-p40 --output /tmp/ppo-p40-report\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory")
    parser.add_argument(
        "--output",
        metavar="DIR",
        help=f"where to write the plots: a new folder or an earlier report's (default RUN_DIR/{report.REPORT_DIR})",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace what verlfit wrote at --output before (another run's report; the same run's is "
        "replaced without it); never a file verlfit did not write",
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Write and print the report; return 0. A run whose run.json cannot be read still gets its report (from the
    metrics), then exits 2 with the fix (:data:`verlfit.run_files.DAMAGED_RECORD_FIX`), as ``verlfit train --resume``
    refuses it.

    Raises:
        VerlfitError: what :func:`verlfit.report.write_report` raises; the unreadable run.json as above.
    """
    output = Path(args.output) if args.output is not None else None
    result = report.write_report(Path(args.run_dir), output, force=bool(args.force))
    print(result.summary)
    print(f"written to {result.output_dir}")
    if result.replaced:
        print(result.replaced)
    if result.info_error:
        raise VerlfitError(
            f"{result.info_error}: the report above rests on the metrics alone (total steps and process id unknown)",
            fix=DAMAGED_RECORD_FIX,
            exit_code=2,
        )
    return 0
