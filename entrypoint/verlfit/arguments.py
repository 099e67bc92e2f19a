"""argparse ``type=`` functions for verlfit's numeric options: each returns the value or raises
``argparse.ArgumentTypeError``, which argparse prints as ``argument --OPTION: MESSAGE`` with exit status 2."""

from __future__ import annotations

import argparse
import math
from typing import Callable, TypeVar

Number = TypeVar("Number", int, float)


def parse_number(text: str, convert: Callable[[str], Number], what: str) -> Number:
    """``convert(text)``, or ArgumentTypeError ``'TEXT' is not WHAT`` (e.g. "a whole number")."""
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def whole_number(text: str) -> int:
    """A whole number >= 1 (counts: steps, GPUs, prompts, tokens)."""
    value = parse_number(text, int, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def positive_number(text: str) -> float:
    """A finite number > 0 (learning rates, GiB)."""
    value = parse_number(text, float, "a number")
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} must be a positive, finite number")
    return value


def memory_gib(text: str) -> float:
    """GPU memory in GiB, at least 1 (the CUDA context and any model need more; a P40 leaves 22.5)."""
    value = positive_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} GiB is less than 1 GiB: no verl worker runs in that (a P40 leaves 22.5)")
    return value


def timeout_seconds(text: str) -> float:
    """Seconds for a network check: more than 0 and at most 300."""
    value = parse_number(text, float, "a number of seconds")
    if not 0 < value <= 300:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"{text} must be more than 0 and at most 300 seconds")
    return value


DEFAULT_SAMPLES = 4  # GRPO responses per prompt when --samples is not given


def add_sizing_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options that size a run, shared by ``verlfit train`` and ``verlfit plan`` so they cannot drift:
    ``--algo --samples --gpus --batch-size --mini-batch-size --micro-batch-size --max-prompt-length
    --max-response-length --gradient-checkpointing/--no-gradient-checkpointing --offload --plan``.

    Both commands turn them into a request through ``verlfit.plan.request.sizing_from_args`` (same defaults, same
    refusals). Sizes count prompts (micro-batches: responses per GPU); lengths count tokens.
    """
    parser.add_argument("--algo", default="ppo", choices=("ppo", "grpo"), help="ppo: GAE with a critic; grpo: no critic, --samples responses per prompt, KL loss with a reference model (default: ppo)")
    parser.add_argument("--samples", type=whole_number, help=f"GRPO responses per prompt (default: {DEFAULT_SAMPLES}; refused with --algo ppo)")
    parser.add_argument("--gpus", type=whole_number, default=1, help="GPUs per node; FSDP shards weights, gradients and optimizer states over all of them (default: 1)")
    parser.add_argument("--batch-size", type=whole_number, default=32, help="prompts per step (data.train_batch_size, default: 32)")
    parser.add_argument("--mini-batch-size", type=whole_number, help="prompts per PPO update (default: half the batch, or the whole batch when it is odd)")
    parser.add_argument("--micro-batch-size", type=whole_number, help="responses per forward/backward on each GPU for actor and critic; log-prob twice that (default: chosen by the planner; 4 with --plan off)")
    parser.add_argument("--max-prompt-length", type=whole_number, default=512, help="tokens; longer prompts are dropped when data is prepared (default: 512)")
    parser.add_argument("--max-response-length", type=whole_number, default=256, help="tokens (default: 256)")
    checkpointing = parser.add_mutually_exclusive_group()
    checkpointing.add_argument("--gradient-checkpointing", dest="gradient_checkpointing", action="store_true", default=None, help="recompute layer activations in backward (the default, as verl's)")
    checkpointing.add_argument("--no-gradient-checkpointing", dest="gradient_checkpointing", action="store_false", default=None, help="keep all activations (faster, more memory)")
    parser.add_argument("--offload", choices=("none", "optimizer", "all"), help="FSDP offload for actor and critic (default: the planner decides; none with --plan off)")
    parser.add_argument("--plan", choices=("auto", "off"), default="auto", help="auto: the planner picks micro-batches, gradient checkpointing and offload to fit the card, keeping any of them you set; off: keep your numbers (default: auto)")
