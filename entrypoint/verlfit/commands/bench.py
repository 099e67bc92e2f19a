"""``verlfit bench``: its parser and help, the options checked and turned into :class:`verlfit.bench.BenchOptions`,
the measurement (:func:`verlfit.bench.run_bench`), its table printed with ``rich`` and its JSON record written.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from verlfit.arguments import whole_number
from verlfit.bench import (
    CONFIGS,
    MODEL_SHAPES,
    PHASES,
    PUBLIC_RECIPE_ATTENTION,
    BenchOptions,
    code_paths_line,
    launch,
    run_bench,
    write_json,
)
from verlfit.errors import VerlfitError
from verlfit.profiles import ATTENTION, PROFILE_NAMES, ROLLOUTS


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``bench`` parser; its ``func`` measures the card, prints the table and writes the JSON record."""
    parser = subparsers.add_parser(
        "bench",
        help="measure this card: the public P40 recipe and verlfit's configuration for a few steps each; one table + "
        "JSON",
        description=(
            "Measure this card with two short runs (the public P40 recipe and verlfit's configuration), print one "
            "table "
            "and write it as JSON to share. Needs a GPU and a patched verl; makes its model and data locally."
        ),
        epilog=(
            "examples:\n  $ verlfit bench                      # writes verlfit-bench-<card>.json\n  $ verlfit bench "
            "--gsm8k ~/gsm8k --steps 6 --output p40.json\n"
            "  $ verlfit bench --emulate p40        # on a bigger GPU, P40 code paths and memory cap\n"
            "  $ verlfit bench --rollout hf --attention sdpa   # an Ampere or newer card without vLLM/flash-attn"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--steps", type=whole_number, default=4, help="steps per configuration (default 4; the first is not timed)"
    )
    parser.add_argument(
        "--gsm8k", metavar="DIR", help="the real GSM8K as train.jsonl and test.jsonl (default: generated problems)"
    )
    parser.add_argument(
        "--shape",
        type=str.lower,
        choices=MODEL_SHAPES,
        default="qwen2.5-0.5b",
        help="the random-weight model's shape, a Qwen2.5-Instruct configuration (default %(default)s); from 1.5B on, "
        "public-recipe (planner off, no offload) will not fit 24 GB: fp32 weights, gradients and Adam state are 16 "
        "bytes a parameter, "
        "23 GiB at 1.5B, so pass --configs verlfit there",
    )
    parser.add_argument(
        "--configs", default="public-recipe,verlfit", help=f"comma-separated, of: {', '.join(CONFIGS)} (default: both)"
    )
    parser.add_argument(
        "--emulate",
        type=str.lower,
        choices=PROFILE_NAMES,
        help="emulate that card (its code paths and memory cap) instead of running the card as it is",
    )
    parser.add_argument(
        "--profile",
        type=str.lower,
        choices=(*PROFILE_NAMES, "auto"),
        default="auto",
        help="profile when not emulating (default: by the GPU)",
    )
    parser.add_argument(
        "--rollout",
        type=str.lower,
        choices=ROLLOUTS,
        help="rollout engine of both runs instead of the profile's (verlfit train --rollout): hf (transformers "
        "generate; any card) or vllm (a10 profile only); "
        "hf where vLLM is not installed",
    )
    parser.add_argument(
        "--attention",
        type=str.lower,
        choices=ATTENTION,
        help="attention of the verlfit run instead of the profile's (verlfit train --attention): sdpa, eager or "
        "flash_attention_2 (a10 profile only); "
        f"sdpa where flash-attn is not installed. The public-recipe run keeps the recipe's {PUBLIC_RECIPE_ATTENTION} "
        "attention",
    )
    parser.add_argument(
        "--work",
        default=os.path.join("~", ".cache", "verlfit-bench"),
        help="model, data and run directories (default %(default)s)",
    )
    parser.add_argument(
        "--output",
        help="JSON file to write (default: verlfit-bench-<card>.json in the current "
        "directory); never over a file verlfit did not write",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace an earlier bench record at --output (checked before the runs start)",
    )
    parser.set_defaults(func=_run)
    return parser


def bench_options(args) -> BenchOptions:
    """The parsed ``bench`` options as :class:`verlfit.bench.BenchOptions`, checked (``--configs`` split at commas).

    Raises:
        VerlfitError: an unknown or repeated configuration, fewer than 2 steps, a --gsm8k folder without its files.
    """
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown or not names:
        raise VerlfitError(
            f"--configs {args.configs!r}: unknown {', '.join(unknown) or 'empty list'}",
            fix=f"use a comma-separated list of: {', '.join(CONFIGS)}",
            exit_code=2,
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise VerlfitError(
            f"--configs {args.configs!r}: {', '.join(repeated)} named twice (each configuration runs once)",
            fix=f"name each once, e.g. --configs {','.join(dict.fromkeys(names))}",
            exit_code=2,
        )
    if args.steps < 2:
        raise VerlfitError(
            f"--steps {args.steps}: the first step is warm-up, so at least 2 are needed for a timing",
            fix="use --steps 2 or more (default 4)",
            exit_code=2,
        )
    if args.gsm8k:
        missing = [
            name for name in ("train.jsonl", "test.jsonl") if not (Path(args.gsm8k).expanduser() / name).is_file()
        ]
        if missing:
            raise VerlfitError(
                f"--gsm8k {args.gsm8k}: no {' or '.join(missing)} there",
                fix="pass the folder holding GSM8K's train.jsonl and test.jsonl (openai/gsm8k main), or leave --gsm8k "
                "out for generated problems",
                exit_code=2,
            )
    return BenchOptions(
        configs=tuple(names),
        steps=args.steps,
        gsm8k=Path(args.gsm8k).expanduser() if args.gsm8k else None,
        shape=args.shape,
        emulate=args.emulate,
        profile=args.profile,
        rollout=args.rollout,
        attention=args.attention,
        work=Path(args.work).expanduser(),
        output=Path(args.output).expanduser() if args.output else None,
        force=args.force,
    )


def _run(args, nvml=None, run=launch, find_spec=None) -> int:
    """Measure the card as the options say (:func:`verlfit.bench.run_bench`, each run's command line printed as it
    starts), print the table (:func:`render`), write the JSON record and say where; 0 when written.

    Raises:
        VerlfitError: a bad option (exit status 2), or what :func:`verlfit.bench.run_bench` and
            :func:`verlfit.bench.write_json` raise.
    """
    result, output = run_bench(
        bench_options(args), nvml=nvml, run=run, find_spec=find_spec, log=lambda line: print(line, flush=True)
    )
    render(result)
    write_json(result, output)
    print(f"bench: wrote {output.given}; attach it to an issue on verlfit's tracker", flush=True)
    return 0


def render(result: dict, console=None) -> None:
    """Print the result as one ``rich`` table plus the machine line.

    On a console that is not a terminal (``| tee``, a log file, ``docker compose run`` without a TTY) rich would fit
    the table into 80 columns and cut every cell to ``…``; there the table is printed at its natural width instead,
    so each cell is whole in the log (the JSON holds the same values)."""
    from rich.console import Console  # lazy: only for the live progress display on a terminal
    from rich.measure import Measurement  # lazy: only for the live progress display on a terminal
    from rich.table import Table  # lazy: only for the live progress display on a terminal

    console = console or Console()
    m = result["machine"]
    title = f"verlfit bench: {m['card']}{' (emulating ' + result['emulate'] + ')' if result.get('emulate') else ''}"
    if result["runs"] and "profile" in result["runs"][0]:
        title += f": {code_paths_line(result['runs'])}"
    table = Table(title=title, title_justify="left")
    for column in (
        "configuration",
        "batch",
        "s/step",
        *PHASES,
        "tokens/s",
        "peak alloc GiB",
        "estimate s/step",
        "estimate vs measured",
    ):
        table.add_column(column, justify="left" if column == "configuration" else "right")
    for row in result["runs"]:
        error = row.get("estimate_error")
        table.add_row(
            row["run"],
            str(row["batch"]),
            f"{row['step_s']:.2f}",
            *(f"{row['phases_s'][p]:.2f}" if p in row["phases_s"] else "-" for p in PHASES),
            f"{row['tokens_per_s']:.0f}" if row["tokens_per_s"] is not None else "-",
            f"{row['peak_allocated_gib']:.2f}",
            f"{row['estimate_step_s']:.2f}" if row["estimate_step_s"] is not None else "-",
            f"{error:+.0%}" if error is not None else "-",
        )
    if console.is_terminal:
        console.print(table)
    else:  # print's own width= is capped at the console's: widen the console for the table, then put it back
        width = console.width
        console.width = max(width, Measurement.get(console, console.options.update_width(10_000), table).maximum)
        try:
            console.print(table)
        finally:
            console.width = width
    console.print(
        f"card {m['card']}, driver {m['driver']}, CUDA {m['cuda']}, torch {m['torch']}, verl {m['verl']}, patch "
        f"series {m['patches']}",
        highlight=False,
        soft_wrap=True,
    )
