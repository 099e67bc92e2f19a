"""The ``verlfit plan`` subcommand: its arguments (:func:`register`), their typed form (:func:`plan_options`, the one
place that reads the parsed namespace) and its run (:func:`_run`): the use case
(:func:`verlfit.plan.outcome.make_plan`) called, its outcome printed (:mod:`verlfit.plan.render`)."""

from __future__ import annotations

import argparse
import json
import sys

from verlfit.arguments import (
    SizingOptions,
    add_sizing_arguments,
    dtype_name,
    frequency,
    memory_gib,
    path_text,
    positive_number,
    typed_options,
    whole_number,
)
from verlfit.cards import CARDS
from verlfit.model_shape import BUILTIN_SHAPES, DEFAULT_MODEL
from verlfit.plan.memory import DEFAULT_MARGIN
from verlfit.plan.outcome import make_plan
from verlfit.plan.render import outcome_to_dict, render_outcome
from verlfit.plan.request import PlanOptions
from verlfit.plan.time import GSM8K_MEAN_PROMPT_TOKENS, GSM8K_ROLLOUT_PROMPT_TOKENS, GSM8K_WINDOW_PROMPT_TOKENS
from verlfit.profiles import ATTENTION, DTYPES, PROFILE_NAMES, ROLLOUTS, load_profile


def register(subparsers):
    parser = subparsers.add_parser(
        "plan",
        help="predict peak GPU memory per PPO/GRPO phase, with micro-batches, checkpointing and offload chosen "
        "as verlfit train chooses them (--plan off: as given)",
        description=(
            "Predict the peak GPU memory of each phase of a verl 0.4.1 PPO/GRPO step (rollout, old log-prob, "
            "ref log-prob, values, critic update, actor update), split into weights, gradients, optimizer state, "
            "activations, logits and KV cache, and say whether it fits. Offline: reads the model's config.json "
            f"(built in: {', '.join(sorted(BUILTIN_SHAPES))})."
        ),
        epilog=(
            "examples:\n"
            "  $ verlfit plan --emulate p40                      # what verlfit train --emulate p40 will choose\n"
            "  $ verlfit plan --profile p40 --gpu-memory 22.5 --batch-size 64 --micro-batch-size 8 --plan off\n"
            "  $ verlfit plan --emulate p40 --algo grpo --samples 8\n"
            "  $ verlfit plan --emulate t4                       # fp16 with loss scaling on a 16 GB T4\n"
            "  $ verlfit plan --emulate p40 --gpus 2                # per-GPU memory, and which Qwen2.5 "
            "sizes 2 cards open up\n"
            "  $ verlfit plan --model ./my-model/config.json --profile a10 --json\n"
            "\nverdicts: fits (peak + headroom within --margin of the usable memory; exit status 0); "
            "tight (above the margin,\n"
            "within the card: it can still run out of memory, and verlfit train's planner does not choose "
            "it; exit 1);\n"
            "does not fit (exit 1); unsupported (verl 0.4.1 cannot run it at any size; exit 1)"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        type=path_text,
        help="model directory, its config.json, or a hub id found built in or in the local cache (default: "
        "%(default)s)",
    )
    parser.add_argument(
        "--profile",
        type=str.lower,
        choices=(*PROFILE_NAMES, "auto"),
        help="hardware profile: dtype, attention and rollout (default: by the visible GPU; p40 without one)",
    )
    parser.add_argument(
        "--emulate",
        type=str.lower,
        choices=PROFILE_NAMES,
        help="plan for that profile's card: its usable memory ("
        + ", ".join(f"{name} {load_profile(name).gpu_memory_gib:g}" for name in PROFILE_NAMES)
        + " GiB) and datasheet rates",
    )
    parser.add_argument(
        "--gpu-memory",
        type=memory_gib,
        metavar="GIB",
        help="usable memory per GPU in GiB (default: --emulate's, else the detected card less the CUDA "
        "context); with --emulate, at most the emulated card's (p40: 22.5)",
    )
    # the options that size the run: the same definitions, defaults and refusals as verlfit train's
    add_sizing_arguments(parser)
    parser.add_argument(
        "--auto-fit",
        dest="plan",
        action="store_const",
        const="auto",
        default="auto",
        help="plan only: the same as --plan auto (the default; verlfit train takes --plan auto)",
    )
    parser.add_argument(
        "--actor-micro-batch-size",
        type=whole_number,
        help="plan only, a what-if: the actor update's micro-batch (default: --micro-batch-size, else as verlfit train "
        "chooses)",
    )
    parser.add_argument(
        "--log-prob-micro-batch-size",
        type=whole_number,
        help="plan only, a what-if: the old and ref log-prob's micro-batch (default: twice --micro-batch-size, else as "
        "verlfit train chooses)",
    )
    parser.add_argument(
        "--critic-micro-batch-size",
        type=whole_number,
        help="plan only, a what-if: the values' and critic update's micro-batch (default: --micro-batch-size, else as "
        "verlfit train chooses)",
    )
    parser.add_argument(
        "--rollout-micro-batch-size",
        type=whole_number,
        help="plan only, a what-if: prompts per HF generate call per GPU, kept as given (default: as verlfit train "
        "chooses: auto-fit's, else the whole batch)",
    )
    for role in ("actor", "critic"):
        for kind in ("param", "optimizer"):
            parser.add_argument(f"--{role}-{kind}-offload", action="store_true", help=f"{role} {kind} offload")
    parser.add_argument("--dtype", type=dtype_name, choices=DTYPES, help="compute dtype (default: the profile's)")
    parser.add_argument("--rollout", type=str.lower, choices=ROLLOUTS, help="rollout engine (default: the profile's)")
    parser.add_argument(
        "--vllm-gpu-memory-utilization", type=float, help="vLLM's share of the card (default: the profile's)"
    )
    parser.add_argument(
        "--attention",
        type=str.lower,
        choices=ATTENTION,
        help="attention implementation (default: the profile's)",
    )
    parser.add_argument(
        "--reference",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a reference model runs (default: grpo yes, ppo no)",
    )
    parser.add_argument(
        "--data",
        metavar="DIR",
        help="your verl-format data folder (train.parquet, test.parquet): its longest prompt is measured with "
        "--model's local tokenizer, as verlfit train measures it, and its rows give --dataset-size",
    )
    parser.add_argument(
        "--longest-prompt-length",
        type=whole_number,
        metavar="TOKENS",
        help="the longest prompt of your training data, in tokens with the model's chat template (verlfit "
        "train measures it from --data): with the profile's trims (patches 0020-0021) memory is counted "
        "for it instead of --max-prompt-length; above --max-prompt-length, the limit is counted (verl drops the "
        "longer prompts) (default: not known, the prompt limit is counted)",
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=DEFAULT_MARGIN,
        help="fraction of usable memory to stay under (default %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_time_arguments(parser)
    parser.set_defaults(func=_run)
    return parser


def plan_options(args: argparse.Namespace) -> PlanOptions:
    """``verlfit plan``'s parsed options as :class:`verlfit.plan.request.PlanOptions` (the sizing ones as
    :class:`verlfit.arguments.SizingOptions`): what the rest of the planner reads."""
    parsed = vars(args)
    return typed_options(PlanOptions, parsed, sizing=typed_options(SizingOptions, parsed))


def add_time_arguments(parser: argparse.ArgumentParser) -> None:
    """``verlfit plan``'s options for the time estimate (read by :mod:`verlfit.plan.time`)."""
    group = parser.add_argument_group("time estimate")
    group.add_argument(
        "--card",
        type=str.lower,
        choices=list(CARDS),
        help="estimate time on this card (default: --emulate's card, else the detected GPU, else the profile's card)",
    )
    group.add_argument("--steps", type=whole_number, help="steps of the run, for the run's total time")
    group.add_argument("--epochs", type=whole_number, help="epochs of the run (with --dataset-size; default 1)")
    group.add_argument(
        "--dataset-size",
        type=whole_number,
        metavar="ROWS",
        help="training rows (GSM8K train: 7473); steps = epochs x rows // batch size",
    )
    group.add_argument(
        "--save-freq",
        type=frequency,
        default=25,
        metavar="N",
        help="steps between checkpoint saves, adding their time per step (default: 25, as verlfit train; 0 or "
        "-1: never)",
    )
    # patches 0020-0022 (verl keys in verlfit.patch_switches.SWITCH_KEYS): unset = what the profile's overrides say
    group.add_argument(
        "--trim-padding",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="patch 0020: actor, ref and critic passes run on each micro-batch's window of used columns "
        "(+actor_rollout_ref.actor.trim_padding, +actor_rollout_ref.ref.trim_padding, "
        "+critic.trim_padding; default: the profile's)",
    )
    group.add_argument(
        "--window-prompt-length",
        type=whole_number,
        metavar="TOKENS",
        help="with --trim-padding: the longest prompt of a training micro-batch (default "
        f"{GSM8K_WINDOW_PROMPT_TOKENS}, derived from a GSM8K record, capped at --max-prompt-length; a "
        "larger value is refused)",
    )
    group.add_argument(
        "--window-response-length",
        type=whole_number,
        metavar="TOKENS",
        help="with --trim-padding: the longest response of a training micro-batch (default "
        "--max-response-length: random weights fill it; a larger value is refused)",
    )
    group.add_argument(
        "--rollout-trim-padding",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="patch 0021: each HF rollout micro-batch is generated from prompts cut to its longest "
        "(+actor_rollout_ref.rollout.trim_padding; default: the profile's)",
    )
    group.add_argument(
        "--rollout-prompt-length",
        type=whole_number,
        metavar="TOKENS",
        help="with --rollout-trim-padding: the longest prompt of a rollout micro-batch (default "
        f"{GSM8K_ROLLOUT_PROMPT_TOKENS}, measured on GSM8K at 32 prompts, capped at --max-prompt-length; a "
        "larger value is refused)",
    )
    group.add_argument(
        "--cuda-graph",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="patch 0022: HF rollout decode steps replayed as a CUDA graph "
        "(+actor_rollout_ref.rollout.cuda_graph; default: the profile's)",
    )
    group.add_argument(
        "--pack-sequences",
        action="store_true",
        help="what-if: training passes over used tokens only (verl's use_remove_padding with FlashAttention-2: "
        "the a10 profile's default; not on a P40). The estimate does not model it or vLLM unless asked: "
        "the a10 profile's own path is estimated as padded HF generation",
    )
    group.add_argument(
        "--mean-prompt-length",
        type=positive_number,
        help=f"mean prompt tokens with --pack-sequences (default {GSM8K_MEAN_PROMPT_TOKENS}, GSM8K with Qwen's "
        "chat template)",
    )
    group.add_argument(
        "--mean-response-length",
        type=positive_number,
        help="mean response tokens with --pack-sequences (default: --max-response-length)",
    )


def _run(args: argparse.Namespace, nvml=None, out=None) -> int:
    from rich.console import Console  # third-party, only for the text output: --help and --json start without it

    out = out or sys.stdout
    outcome = make_plan(plan_options(args), nvml)
    if outcome.options.json:
        out.write(json.dumps(outcome_to_dict(outcome), indent=2) + "\n")
    else:
        render_outcome(outcome, Console(file=out, width=120))
    return outcome.exit_status
