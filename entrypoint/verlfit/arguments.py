"""argparse ``type=`` functions for verlfit's numeric options: each returns the value or raises
``argparse.ArgumentTypeError``, which argparse prints as ``argument --OPTION: MESSAGE`` with exit status 2.

Also the options shared by ``verlfit train`` and ``verlfit plan`` (:func:`add_sizing_arguments`) and their typed
form (:class:`SizingOptions`), and :func:`typed_options`, with which a command module turns its parsed options into
its one typed request: below the command modules no function reads an argparse namespace.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from typing import Any, Callable, Mapping, TypeVar

from verlfit.profiles import memory_above_every_card
from verlfit.run_settings import LEARNING_RATE_LIMIT_WHY, MAX_LEARNING_RATE

Number = TypeVar("Number", int, float)


def parse_number(text: str, convert: Callable[[str], Number], what: str) -> Number:
    """``convert(text)``, or ArgumentTypeError ``'TEXT' is not WHAT`` (e.g. "a whole number")."""
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def path_text(text: str) -> str:
    """A path or model name as given, refused when empty or blank: ``--run-dir ''`` fell back to the default folder
    without a word, and ``--model ''`` was read as the current directory ("." has no config.json)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: it must name a folder, a file or a model")
    return text


def whole_number(text: str) -> int:
    """A whole number >= 1 (counts: steps, GPUs, prompts, tokens)."""
    value = parse_number(text, int, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def frequency(text: str) -> int:
    """Every how many steps (``--save-freq``, ``--test-freq``): a whole number >= 1, or 0 or -1 for never.

    verl 0.4.1 saves and validates only when the frequency is above 0 (``ray_trainer.py:1151`` and ``:1158``:
    ``test_freq > 0 and ...``, ``save_freq > 0 and ...``), so 0 and -1 both mean never; lower values are refused.
    """
    value = parse_number(text, int, "a whole number of steps")
    if value < -1:
        raise argparse.ArgumentTypeError(f"{value} must be a number of steps (1 or more), or 0 or -1 for never")
    return value


def checkpoints_to_keep(text: str) -> int:
    """``--keep-checkpoints`` of ``verlfit train`` and ``verlfit doctor``: 0 (keep all) or a whole number >= 2.

    1 is refused: verl 0.4.1 deletes the oldest kept checkpoint *before* writing the next one
    (``fsdp_checkpoint_manager.py:183-186``), so with 1 a crash or Ctrl-C during a save leaves no checkpoint.
    """
    value = parse_number(text, int, "a whole number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be 0 (keep all) or at least 2")
    if value == 1:
        raise argparse.ArgumentTypeError(
            "1 would leave no checkpoint during each save (verl deletes the previous one before writing "
            "the next): use 2 or more, or 0 to keep all"
        )
    return value


def positive_number(text: str) -> float:
    """A finite number > 0 (learning rates, GiB)."""
    value = parse_number(text, float, "a number")
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} must be a positive, finite number")
    return value


def learning_rate(text: str) -> float:
    """``--actor-lr`` / ``--critic-lr``: a positive, finite number at most :data:`MAX_LEARNING_RATE`."""
    value = positive_number(text)
    if value > MAX_LEARNING_RATE:
        raise argparse.ArgumentTypeError(f"{text} is above {MAX_LEARNING_RATE:g}: {LEARNING_RATE_LIMIT_WHY}")
    return value


def memory_gib(text: str) -> float:
    """GPU memory in GiB (2**30 bytes) per GPU, from 1 (the CUDA context and any model need more; a P40 leaves 22.5)
    to the memory of the largest card verlfit knows (:func:`verlfit.cards.largest_memory_card`: the H200's 141 GB,
    read as GiB, which NVML's 140.4 GiB stays below): more is a unit mistake (``1e9``: bytes; ``24576``: MiB), said
    with what the value would be in that unit."""
    value = positive_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{text} GiB is less than 1 GiB: no verl worker runs in that (a P40 leaves 22.5)"
        )
    too_much = memory_above_every_card(text, value)
    if too_much:
        raise argparse.ArgumentTypeError(f"{text} GiB {too_much}")
    return value


def timeout_seconds(text: str) -> float:
    """Seconds for a network check: more than 0 and at most 300."""
    value = parse_number(text, float, "a number of seconds")
    if not 0 < value <= 300:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"{text} must be more than 0 and at most 300 seconds")
    return value


DEFAULT_SAMPLES = 4  # GRPO responses per prompt when --samples is not given
# LoRA defaults: verl 0.4.1's own (ppo_trainer.yaml:128 and :654 lora_alpha 16; :132 and :657 target_modules all-linear)
DEFAULT_LORA_ALPHA = 16
DEFAULT_LORA_TARGET_MODULES = "all-linear"
FROZEN_BASE_CHOICES = ("float32", "bfloat16", "float16")  # --frozen-base-dtype (patch 0026)


def rank(text: str) -> int:
    """A LoRA rank: a whole number >= 0 (0 = every parameter trains)."""
    value = parse_number(text, int, "a whole number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be 0 (full fine-tuning) or more")
    return value


def target_modules(text: str) -> str | tuple[str, ...]:
    """LoRA target modules: ``all-linear`` (PEFT's shorthand) or comma-separated Linear module names
    (``q_proj,v_proj``), as PEFT matches them against the end of each module's path."""
    if text.strip().lower() == DEFAULT_LORA_TARGET_MODULES:
        return DEFAULT_LORA_TARGET_MODULES
    names = tuple(part.strip() for part in text.split(","))
    bad = [name for name in names if not re.fullmatch(r"[A-Za-z0-9_.]+", name)]
    if bad:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not all-linear or a comma-separated list of module names such as q_proj,v_proj"
        )
    return tuple(dict.fromkeys(names))


def add_sizing_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options that size a run, shared by ``verlfit train`` and ``verlfit plan`` so they cannot drift:
    ``--algo --samples --gpus --batch-size --mini-batch-size --micro-batch-size --max-prompt-length
    --max-response-length --gradient-checkpointing/--no-gradient-checkpointing --offload --plan``, and LoRA's
    ``--lora-rank --lora-alpha --lora-target-modules --critic-lora-rank --frozen-base-dtype`` (they change what trains
    and what it is stored in, so what the planner counts).

    Both commands take them as :class:`SizingOptions` (:func:`typed_options`) and turn them into sizes through
    :func:`verlfit.plan.request.sizing_fields` (same defaults, same refusals). Sizes count prompts (micro-batches:
    responses per GPU); lengths count tokens.
    """
    parser.add_argument(
        "--algo",
        default="ppo",
        choices=("ppo", "grpo"),
        help="ppo: GAE with a critic; grpo: no critic, --samples responses per prompt, KL loss with a "
        "reference model (default: ppo)",
    )
    parser.add_argument(
        "--samples",
        type=whole_number,
        help=f"GRPO responses per prompt (default: {DEFAULT_SAMPLES}; refused with --algo ppo)",
    )
    parser.add_argument(
        "--gpus",
        type=whole_number,
        default=1,
        help="GPUs per node; FSDP shards weights, gradients and optimizer states over all of them (default: 1)",
    )
    parser.add_argument(
        "--batch-size", type=whole_number, default=32, help="prompts per step (data.train_batch_size, default: 32)"
    )
    parser.add_argument(
        "--mini-batch-size",
        type=whole_number,
        help="prompts per PPO update (default: half the batch, or the whole batch when it is odd)",
    )
    parser.add_argument(
        "--micro-batch-size",
        type=whole_number,
        help="responses per forward/backward on each GPU for actor and critic; log-prob twice that (default: "
        "chosen by the planner; 4 with --plan off)",
    )
    parser.add_argument(
        "--max-prompt-length",
        type=whole_number,
        default=512,
        help="tokens; longer prompts are dropped when data is prepared (default: 512)",
    )
    parser.add_argument("--max-response-length", type=whole_number, default=256, help="tokens (default: 256)")
    checkpointing = parser.add_mutually_exclusive_group()
    checkpointing.add_argument(
        "--gradient-checkpointing",
        dest="gradient_checkpointing",
        action="store_true",
        default=None,
        help="recompute layer activations in backward (the default, as verl's)",
    )
    checkpointing.add_argument(
        "--no-gradient-checkpointing",
        dest="gradient_checkpointing",
        action="store_false",
        default=None,
        help="keep all activations (faster, more memory)",
    )
    parser.add_argument(
        "--offload",
        choices=("none", "optimizer", "all"),
        help="FSDP offload for actor and critic (default: the planner decides; none with --plan off)",
    )
    lora = parser.add_argument_group(
        "LoRA (verl's actor_rollout_ref.model / critic.model lora_rank, lora_alpha, target_modules)"
    )
    lora.add_argument(
        "--lora-rank",
        type=rank,
        default=0,
        metavar="N",
        help="train LoRA adapters of rank N instead of every parameter: the base weights freeze (no gradients, "
        "no AdamW states) and GRPO's reference is the actor with its adapter disabled, so no second model "
        "is loaded; 0 = full fine-tuning (default: 0)",
    )
    lora.add_argument(
        "--lora-alpha",
        type=positive_number,
        metavar="A",
        help="LoRA scaling numerator: the adapter's output is multiplied by A/N (default: "
        f"{DEFAULT_LORA_ALPHA}, verl's own; needs --lora-rank or --critic-lora-rank)",
    )
    lora.add_argument(
        "--lora-target-modules",
        type=target_modules,
        metavar="NAMES",
        help=f"Linear layers that get adapters: {DEFAULT_LORA_TARGET_MODULES} (PEFT: every Linear but lm_head; "
        "in the critic the value head score too) or names such as q_proj,k_proj,v_proj,o_proj (default: "
        f"{DEFAULT_LORA_TARGET_MODULES}, verl's own)",
    )
    lora.add_argument(
        "--critic-lora-rank",
        type=rank,
        metavar="N",
        help="the PPO critic's LoRA rank; 0 = a fully trained critic (default: --lora-rank's; refused with "
        "--algo grpo, which has no critic)",
    )
    lora.add_argument(
        "--frozen-base-dtype",
        choices=FROZEN_BASE_CHOICES,
        help="how actor and critic store their frozen base weights with LoRA (patch 0026): the profile's "
        "16-bit dtype (bfloat16 on p40 and a10, float16 on t4 and v100: 2 bytes a parameter; the run "
        "still computes in the profile's dtype) or float32 (4 bytes, stock verl); refused without LoRA "
        "(default: the profile's 16-bit dtype, or the fp32 base where --plan auto finds it fits and "
        "is faster on the card)",
    )
    parser.add_argument(
        "--plan",
        choices=("auto", "off"),
        default="auto",
        help="auto: the planner picks micro-batches, gradient checkpointing and offload to fit the card, "
        "keeping any of them you set; off: keep your numbers (default: auto)",
    )


@dataclasses.dataclass(frozen=True)
class SizingOptions:
    """The options of :func:`add_sizing_arguments` as typed values, one field per option (its argparse dest); None:
    not given (the default then comes from :func:`verlfit.plan.request.sizing_fields`). The defaults live in the
    parser alone, so the fields have none. Sizes count prompts (micro-batch: responses per GPU); lengths count tokens.
    """

    algo: str
    samples: int | None
    gpus: int
    batch_size: int
    mini_batch_size: int | None
    micro_batch_size: int | None
    max_prompt_length: int
    max_response_length: int
    gradient_checkpointing: bool | None
    offload: str | None
    lora_rank: int
    lora_alpha: float | None
    lora_target_modules: str | tuple[str, ...] | None
    critic_lora_rank: int | None
    frozen_base_dtype: str | None
    plan: str


Options = TypeVar("Options")


def typed_options(kind: type[Options], parsed: Mapping[str, Any], **given: Any) -> Options:
    """``kind`` (a dataclass of options) from parsed option values (``vars()`` of argparse's namespace: dest ->
    value), one field each by its name; ``given`` fields (a nested dataclass such as :class:`SizingOptions`) are taken
    as they are. Values the dataclass does not name are left out.

    Raises:
        KeyError: a field the parser has no option for (a dataclass and its parser that drifted apart).
    """
    return kind(
        **{
            field.name: given[field.name] if field.name in given else parsed[field.name]
            for field in dataclasses.fields(kind)
        }
    )
