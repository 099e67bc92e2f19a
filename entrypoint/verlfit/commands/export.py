"""The ``export`` subcommand: ``verlfit export RUN_DIR [--step N|latest] [--output DIR] ...`` parsed into typed
values, the checkpoint merged by :func:`verlfit.export.export`, what was written and where printed."""

from __future__ import annotations

import argparse
from pathlib import Path

from verlfit import export
from verlfit.arguments import dtype_name, positive_number


def checkpoint_step(text: str) -> int | str:
    """``--step``'s value: ``N`` or ``global_step_N`` as the step N, ``latest`` as itself
    (:func:`verlfit.export.parse_step`); anything else is argparse's usage error (exit status 2)."""
    try:
        return export.parse_step(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``verlfit export`` to ``subparsers``; return its parser."""
    parser = subparsers.add_parser(
        "export",
        help="write a run's checkpoint as a Hugging Face model directory (verl's merger)",
        description=(
            "Merge the FSDP shards of one checkpoint of a run (RUN_DIR/checkpoints/global_step_N) into a model "
            "directory that transformers' AutoModelForCausalLM.from_pretrained loads: safetensors weights, "
            "config.json, generation_config.json and tokenizer files. A LoRA run's adapter is merged into the "
            "base (PEFT merge_and_unload) unless --adapter-only."
        ),
        epilog=(
            "examples:\n"
            "  $ verlfit export runs/ppo-p40\n"
            "  $ verlfit export runs/ppo-p40 --step 50 --output models/ppo-p40-step50\n"
            "  $ verlfit export runs/lora-a10 --adapter-only\n"
            "  $ verlfit export runs/ppo-p40 --critic --dtype bfloat16 --force\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory made by verlfit train")
    parser.add_argument(
        "--step",
        type=checkpoint_step,
        default="latest",
        metavar="N|latest",
        help="which checkpoint: N or global_step_N (its directory's name); latest: the newest complete one (default)",
    )
    parser.add_argument(
        "--output",
        metavar="DIR",
        help="where to write the model: a new folder, or an earlier export "
        f"(default RUN_DIR/{export.EXPORT_DIR}/global_step_N)",
    )
    parser.add_argument(
        "--dtype",
        type=dtype_name,
        choices=tuple(export.DTYPES),
        help="dtype of the written weights (default: the checkpoint's, fp32 for verl's FSDP master weights; "
        "bfloat16 halves the size and rounds)",
    )
    parser.add_argument(
        "--adapter-only",
        action="store_true",
        help="LoRA runs: write the PEFT adapter directory instead of the merged model (a run with an NF4 base, "
        "--frozen-base-dtype nf4, is otherwise merged into that base as dequantised in training, from the "
        "checkpoint's nf4_quant_state.safetensors)",
    )
    parser.add_argument(
        "--lora-alpha",
        type=positive_number,
        metavar="A",
        help="LoRA runs: lora_alpha when the run has no config.yaml (default: the run's; a positive number, as "
        "verlfit train takes it; refused where it differs from the run's own)",
    )
    parser.add_argument("--critic", action="store_true", help="also export the critic (PPO) into OUTPUT/critic")
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace what verlfit wrote at --output before (after the new export is complete); "
        "never a file verlfit did not write",
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Export the checkpoint and print ``exported step N of RUN (actor model, ...) to OUTPUT``; return 0.

    Raises:
        VerlfitError: what :func:`verlfit.export.export` raises (no complete checkpoint, a refused output, a full
            disk, a damaged shard).
    """
    result = export.export(
        Path(args.run_dir),
        args.step,
        Path(args.output) if args.output is not None else None,
        args.dtype,
        adapter_only=bool(args.adapter_only),
        critic=bool(args.critic),
        force=bool(args.force),
        lora_alpha=args.lora_alpha,
    )
    what = ", ".join(f"{role} {kind}" for role, kind in result.written.items())
    print(f"exported step {result.checkpoint.step} of {result.checkpoint.run_dir} ({what}) to {result.output}")
    if result.replaced:
        print(result.replaced)
    return 0
