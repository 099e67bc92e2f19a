"""``verlfit doctor``: is this machine ready to train? One line per check (:mod:`verlfit.readiness`), PASS /
WARN / FAIL / SKIP, each with a one-line fix; exit status 1 on any FAIL; ``--json`` for machines. This module lays
every check out as that table; ``verlfit train`` reports only a blocking FAIL (its error) and the disk WARN (a note).
"""

from __future__ import annotations

import argparse
import json
import sys

from verlfit.arguments import (
    add_frozen_base_dtype,
    checkpoints_to_keep,
    rank,
    timeout_seconds,
)
from verlfit.checks.result import CheckResult, FAIL, PASS, SKIP, WARN
from verlfit.hub import NETWORK_TIMEOUT_S
from verlfit.overrides import parse_user_overrides
from verlfit.profiles import ATTENTION, PROFILE_NAMES, ROLLOUTS
from verlfit.readiness import DoctorContext, planned_frozen_base, run_checks
from verlfit.train.reward import data_keys, run_reward_function


def exit_status(results: list[CheckResult]) -> int:
    """1 when any result is a FAIL, else 0 (WARN and SKIP do not fail the doctor)."""
    return 1 if any(r.status == FAIL for r in results) else 0


def format_results(results: list[CheckResult]) -> str:
    """The doctor's report: ``STATUS  name  message`` a line (names padded to one width), each detail and each
    WARN's or FAIL's ``fix:`` indented under it, then the count of each status (``: ready`` without a FAIL or WARN,
    ``: ready, with warnings`` with WARNs only)."""
    width = max(len(r.name) for r in results)
    lines = []
    for r in results:
        lines.append(f"{r.status}  {r.name.ljust(width)}  {r.message}")
        lines += [f"{'':4}  {'':{width}}    {detail}" for detail in r.details]
        if r.fix and r.status in (WARN, FAIL):
            lines.append(f"{'':4}  {'':{width}}  fix: {r.fix}")
    counts = {s: sum(1 for r in results if r.status == s) for s in (PASS, WARN, FAIL, SKIP)}
    lines.append(
        ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        + ("" if counts[FAIL] else ": ready" if not counts[WARN] else ": ready, with warnings")
    )
    return "\n".join(lines)


def register(subparsers):
    """Add the ``doctor`` parser; its ``func`` runs every check and prints the report (or ``--json``)."""
    parser = subparsers.add_parser(
        "doctor",
        help="check driver, GPU, GPU topology and NCCL, torch, Triton, the rollout and attention packages, /dev/shm, "
        "disk, data, model, CUDA and the verl patches",
        description="Check that this machine can train: one line per check (PASS, WARN, FAIL, SKIP) with a fix. Exit "
        "status 1 on any FAIL.",
        epilog="examples:\n  $ verlfit doctor\n  $ verlfit doctor --profile p40 --data data/gsm8k\n  $ verlfit doctor "
        "--profile a10 --rollout hf --attention sdpa   # an Ampere or newer card without vLLM/flash-attn\n  $ "
        "verlfit doctor --data data/mytask --reward-function reward.py:compute_score -- "
        "data.prompt_key=question\n  $ verlfit doctor --json | jq '.checks[] | select(.status == \"FAIL\")'",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--profile",
        type=str.lower,
        choices=(*PROFILE_NAMES, "auto"),
        help="profile to check the GPU against (default: VERLFIT_PROFILE, else chosen by the GPU)",
    )
    parser.add_argument(
        "--rollout",
        type=str.lower,
        choices=ROLLOUTS,
        help="rollout engine instead of the profile's, as verlfit train --rollout (hf needs no vllm)",
    )
    parser.add_argument(
        "--attention",
        type=str.lower,
        choices=ATTENTION,
        help="attention instead of the profile's, as verlfit train --attention (sdpa and eager need no flash_attn)",
    )
    parser.add_argument(
        "--data", default="data/gsm8k", help="folder with train.parquet and test.parquet (default: %(default)s)"
    )
    parser.add_argument(
        "--model", default="Qwen/Qwen2.5-0.5B-Instruct", help="model directory or hub id (default: %(default)s)"
    )
    parser.add_argument(
        "--run-dir", default="runs", help="where checkpoints go, for the disk check (default: %(default)s)"
    )
    parser.add_argument(
        "--algo",
        type=str.lower,
        choices=("ppo", "grpo"),
        default="ppo",
        help="the algorithm whose checkpoints the disk check sizes (PPO: actor and critic; default: %(default)s, as "
        "train)",
    )
    parser.add_argument(
        "--keep-checkpoints",
        type=checkpoints_to_keep,
        default=2,
        metavar="N",
        help="checkpoints the run keeps, for the disk check: 0 (all) or 2 and more, as train takes (default: "
        "%(default)s, as train)",
    )
    parser.add_argument(
        "--lora-rank",
        type=rank,
        default=0,
        metavar="N",
        help="the run's LoRA rank, for the disk check: a LoRA checkpoint holds the frozen base, the adapters and "
        "AdamW states of the adapters only; 0 = full fine-tuning (default: %(default)s, as train)",
    )
    parser.add_argument(
        "--critic-lora-rank",
        type=rank,
        metavar="N",
        help="the PPO critic's LoRA rank, for the disk check (default: --lora-rank's, as train; ignored with --algo "
        "grpo)",
    )
    add_frozen_base_dtype(
        parser,
        "the LoRA run's frozen base storage, as verlfit train --frozen-base-dtype: nf4 needs bitsandbytes (the "
        "engines check), and the disk check sizes the checkpoint's base as stored: 4 bytes a parameter in float32, 2 "
        "in 16 bits, about 0.52 in nf4 (default: what verlfit train's planner chooses at its default sizes on the "
        "profile's usable memory: the profile's 16-bit dtype, nf4 where nothing else fits one GPU with --rollout hf)",
    )
    parser.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=NETWORK_TIMEOUT_S,
        help="seconds for the hub reachability check (default: %(default)s)",
    )
    parser.add_argument(
        "--reward-function",
        metavar="FILE[:NAME]",
        help=(
            "the run's reward function, as verlfit train --reward-function takes it: the reward line imports it and"
            " calls it on every training and test row (default: verl's scorer, which must know every data_source)"
        ),
    )
    parser.add_argument("--json", action="store_true", help="print JSON: {checks: [...], exit_status}")
    parser.add_argument(
        "overrides",
        nargs=argparse.REMAINDER,
        help="after --: the verl overrides the run gets; the data and reward lines read data.prompt_key, "
        "data.reward_fn_key and custom_reward_function.path/.name",
    )
    parser.set_defaults(func=_run)
    return parser


def _run(args, context: DoctorContext | None = None, out=None) -> int:
    """Run every check (:func:`verlfit.readiness.run_checks`) against ``context`` (default: this machine) with
    the options laid over it; write the report (or ``--json``: ``{checks: [...], exit_status}``) to ``out`` (default
    stdout); return :func:`exit_status`.

    Raises:
        VerlfitError: a malformed override after ``--``, an unusable ``--reward-function``, ``--frozen-base-dtype``
            without LoRA or one train refuses for the profile (:func:`verlfit.readiness.planned_frozen_base`) (exit
            status 2).
    """
    out = out or sys.stdout
    ctx = context or DoctorContext()
    ctx.profile_name = args.profile or ctx.profile_name
    ctx.rollout, ctx.attention = args.rollout or ctx.rollout, args.attention or ctx.attention
    ctx.data_dir, ctx.model, ctx.checkpoint_dir, ctx.timeout = args.data, args.model, args.run_dir, args.timeout
    ctx.algorithm, ctx.keep_checkpoints = args.algo, args.keep_checkpoints
    ctx.lora_rank, ctx.critic_lora_rank = args.lora_rank, args.critic_lora_rank
    ctx.frozen_base = args.frozen_base_dtype or ctx.frozen_base
    ctx.frozen_base, ctx.frozen_base_planned = planned_frozen_base(ctx)

    overrides = parse_user_overrides(getattr(args, "overrides", None) or [])
    ctx.data_keys = data_keys(overrides.values)
    ctx.reward_function, _ = run_reward_function(getattr(args, "reward_function", None), overrides)
    results = run_checks(ctx)
    status = exit_status(results)
    if args.json:
        out.write(json.dumps({"checks": [r.to_dict() for r in results], "exit_status": status}, indent=2) + "\n")
    else:
        out.write(format_results(results) + "\n")
    return status
