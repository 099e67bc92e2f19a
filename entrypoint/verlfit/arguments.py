"""argparse ``type=`` functions for verlfit's numeric options: each returns the value or raises
``argparse.ArgumentTypeError``, which argparse prints as ``argument --OPTION: MESSAGE`` with exit status 2.

Also the options shared by ``verlfit train`` and ``verlfit plan`` (:func:`add_sizing_arguments`), their typed
form (:class:`SizingOptions`) with what both commands make of it (:func:`check_sizing`, :func:`sizing_fields`,
:func:`sizing_keep`), and :func:`typed_options`, with which a command module turns its parsed options into its one
typed request: below the command modules no function reads an argparse namespace.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from typing import Any, Callable, Mapping, TypeVar

from verlfit.errors import VerlfitError
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
FROZEN_BASE_CHOICES = ("float32", "bfloat16", "float16", "nf4")  # --frozen-base-dtype (patches 0026, 0028)
# the short names the README, the patches' verl keys and the papers use, taken for the long ones
DTYPE_SHORT_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


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


def dtype_name(text: str) -> str:
    """``text`` as a dtype choice: lower case (``NF4`` as the papers write it), a short name (:data:`DTYPE_SHORT_NAMES`:
    ``bf16``) as its long one; argparse's ``choices`` then refuses what is neither."""
    lowered = text.lower()
    return DTYPE_SHORT_NAMES.get(lowered, lowered)


def add_frozen_base_dtype(parser, help_text: str) -> None:
    """Add ``--frozen-base-dtype`` (one of :data:`FROZEN_BASE_CHOICES`, any case, or a short name: ``bf16``) to
    ``parser`` (a parser or an argument group) with ``help_text``: train and plan size and run it, doctor checks for
    it."""
    parser.add_argument("--frozen-base-dtype", type=dtype_name, choices=FROZEN_BASE_CHOICES, help=help_text)


def add_sizing_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options that size a run, shared by ``verlfit train`` and ``verlfit plan`` so they cannot drift:
    ``--algo --samples --gpus --batch-size --mini-batch-size --micro-batch-size --max-prompt-length
    --max-response-length --gradient-checkpointing/--no-gradient-checkpointing --offload --plan``, and LoRA's
    ``--lora-rank --lora-alpha --lora-target-modules --critic-lora-rank --frozen-base-dtype`` (they change what trains
    and what it is stored in, so what the planner counts).

    Both commands take them as :class:`SizingOptions` (:func:`typed_options`) and turn them into sizes through
    :func:`sizing_fields` (same defaults, same refusals). Sizes count prompts (micro-batches:
    responses per GPU); lengths count tokens.
    """
    parser.add_argument(
        "--algo",
        default="ppo",
        type=str.lower,
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
        type=str.lower,
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
    add_frozen_base_dtype(
        lora,
        "how actor and critic store their frozen base weights with LoRA: the profile's 16-bit dtype (bfloat16 "
        "on p40 and a10, float16 on t4 and v100: 2 bytes a parameter; patch 0026), float32 (4 bytes, stock verl), "
        "or nf4 (QLoRA, patch 0028: every Linear of the decoder layers in 4 bits through bitsandbytes, about 0.52 "
        "bytes a weight, dequantised to the profile's dtype for each matmul; one GPU and --rollout hf; the adapter "
        "learns against the quantised base); the run computes in the profile's dtype either way; refused without "
        "LoRA (default: the profile's 16-bit dtype; float32 where --plan auto finds it fits and is faster on the "
        "card; nf4 where --plan auto finds nothing else fits on one GPU with --rollout hf)",
    )
    parser.add_argument(
        "--plan",
        type=str.lower,
        choices=("auto", "off"),
        default="auto",
        help="auto: the planner picks micro-batches, gradient checkpointing and offload to fit the card, "
        "keeping any of them you set; off: keep your numbers (default: auto)",
    )


@dataclasses.dataclass(frozen=True)
class SizingOptions:
    """The options of :func:`add_sizing_arguments` as typed values, one field per option (its argparse dest); None:
    not given (the default then comes from :func:`sizing_fields`). The defaults live in the
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


# The most prompts a step verlfit plans or launches. verl 0.4.1 holds a step's whole batch in one DataProto in the
# driver process (ray_trainer.py fit: batch = DataProto.from_single_dict(batch_dict), then union with the rollout's
# output): at 2**20 prompts of 512 + 256 tokens its int64 token tensors alone (input_ids, attention_mask,
# position_ids) take 2**20 x 768 x 8 bytes x 3 = 18 GiB of host memory before any score or advantage. A bound
# verlfit sets, 140 times GSM8K's 7,473 training rows; verl itself sets none.
MAX_BATCH_PROMPTS = 2**20
DRIVER_TOKEN_TENSORS = 3  # input_ids, attention_mask, position_ids: int64, batch x (prompt + response) each


def check_sizing(sizing: SizingOptions) -> None:
    """Refuse sizing options (:func:`add_sizing_arguments`) that do not go together, for
    ``verlfit train`` and ``verlfit plan`` alike.

    Raises:
        VerlfitError (exit status 2): ``--samples`` with ``--algo ppo``; ``--samples 1`` with ``--algo grpo`` (every
            advantage 0); ``--critic-lora-rank`` with ``--algo grpo``;
            ``--lora-alpha`` or ``--lora-target-modules`` without an adapter to apply them to; ``--batch-size`` above
            :data:`MAX_BATCH_PROMPTS` (the message gives the driver's token tensors in GiB for the run's lengths).
    """
    if sizing.batch_size > MAX_BATCH_PROMPTS:
        driver_bytes = (
            sizing.batch_size * (sizing.max_prompt_length + sizing.max_response_length) * 8 * DRIVER_TOKEN_TENSORS
        )
        raise VerlfitError(
            f"--batch-size {sizing.batch_size:,} prompts a step: verl holds a step's whole batch on its driver, whose"
            f" token tensors alone (input_ids, attention_mask, position_ids: int64, {sizing.max_prompt_length} +"
            f" {sizing.max_response_length} tokens a prompt) would take {driver_bytes / 1024**3:,.0f} GiB of host"
            " memory;"
            f" verlfit takes at most {MAX_BATCH_PROMPTS:,} prompts a step",
            fix=(
                "use a batch of at most your training rows (verlfit's default is 32; GSM8K has 7,473 training rows),"
                f" at most {MAX_BATCH_PROMPTS:,}"
            ),
            exit_code=2,
        )
    if sizing.algo == "ppo" and sizing.samples is not None:
        raise VerlfitError(
            f"--samples {sizing.samples} with --algo ppo: PPO samples one response per prompt (its critic "
            "gives the baseline)",
            fix="use --algo grpo for several responses per prompt, or drop --samples",
            exit_code=2,
        )
    if sizing.algo == "grpo" and sizing.samples == 1:
        raise VerlfitError(
            "--samples 1 with --algo grpo: GRPO's advantage is each response's reward minus the mean of its prompt's "
            "group (verl's compute_grpo_outcome_advantage), so in a group of one every advantage is 0 and the actor "
            "learns nothing",
            fix="use --samples 2 or more (verlfit's default is 4), or --algo ppo, whose critic gives the baseline for "
            "one response per prompt",
            exit_code=2,
        )
    if sizing.algo == "grpo" and sizing.critic_lora_rank is not None:
        raise VerlfitError(
            f"--critic-lora-rank {sizing.critic_lora_rank} with --algo grpo: GRPO has no critic",
            fix="drop --critic-lora-rank (--lora-rank sets the actor's), or use --algo ppo",
            exit_code=2,
        )
    critic_rank = (
        (sizing.lora_rank if sizing.critic_lora_rank is None else sizing.critic_lora_rank)
        if sizing.algo == "ppo"
        else 0
    )
    if sizing.lora_rank == 0 and critic_rank == 0:
        refuse_lora_options_without_lora(
            {
                "--lora-alpha": sizing.lora_alpha,
                "--lora-target-modules": sizing.lora_target_modules,
                "--frozen-base-dtype": sizing.frozen_base_dtype,
            }
        )


def refuse_lora_options_without_lora(options: Mapping[str, Any]) -> None:
    """Refuse the LoRA ``options`` (flag -> value; None: not given) of a run without LoRA (no rank above 0 on any
    role), as train, plan and doctor do.

    Raises:
        VerlfitError (exit status 2): one or more given, named with the fix.
    """
    unused = [flag for flag, value in options.items() if value is not None]
    if unused:
        raise VerlfitError(
            f"{' and '.join(unused)} without LoRA: every parameter trains, so there is no adapter to "
            f"apply {'them' if len(unused) > 1 else 'it'} to",
            fix="add --lora-rank N (e.g. 32), or drop " + " and ".join(unused),
            exit_code=2,
        )


def default_mini_batch(batch: int) -> int:
    """Prompts per PPO update when the user gives none: half the batch (two updates a step, as verl's
    GSM8K examples), or the whole batch when it is odd, so that it always divides the batch."""
    return batch // 2 if batch % 2 == 0 else batch


def sizing_fields(sizing: SizingOptions) -> dict:
    """The :class:`verlfit.run_settings.TrainSettings` fields set by the shared sizing options
    (:func:`add_sizing_arguments`): the one place ``verlfit train`` and ``verlfit plan`` take
    their defaults from, so the plan is sized as the run will be.

    Defaults: mini-batch half the batch (the whole batch when it is odd, :func:`default_mini_batch`);
    micro-batches TrainSettings' (actor 4, log-prob 8, critic 4) or, with ``--micro-batch-size M``, M for actor and
    critic and 2M for log-prob; gradient checkpointing on; offload none; responses per prompt (``rollout_n``) 1 for PPO,
    for GRPO
    ``--samples`` or :data:`DEFAULT_SAMPLES`;
    LoRA off (rank 0); with LoRA alpha :data:`DEFAULT_LORA_ALPHA` and target modules
    :data:`DEFAULT_LORA_TARGET_MODULES` (verl's own defaults), and for PPO the critic at the actor's rank.

    Raises:
        VerlfitError: from :func:`check_sizing`.
    """
    check_sizing(sizing)
    fields = dict(
        algorithm=sizing.algo,
        # responses per prompt as the run samples them: PPO one (build_overrides sets rollout.n=1), GRPO --samples
        rollout_n=1 if sizing.algo == "ppo" else sizing.samples if sizing.samples is not None else DEFAULT_SAMPLES,
        gpus=sizing.gpus,
        train_batch_size=sizing.batch_size,
        ppo_mini_batch_size=sizing.mini_batch_size
        if sizing.mini_batch_size is not None
        else default_mini_batch(sizing.batch_size),
        max_prompt_length=sizing.max_prompt_length,
        max_response_length=sizing.max_response_length,
        gradient_checkpointing=sizing.gradient_checkpointing is not False,
        lora_rank=sizing.lora_rank,
        critic_lora_rank=(sizing.lora_rank if sizing.critic_lora_rank is None else sizing.critic_lora_rank)
        if sizing.algo == "ppo"
        else None,
        lora_alpha=sizing.lora_alpha if sizing.lora_alpha is not None else DEFAULT_LORA_ALPHA,
        lora_target_modules=sizing.lora_target_modules
        if sizing.lora_target_modules is not None
        else DEFAULT_LORA_TARGET_MODULES,
        frozen_base_dtype=sizing.frozen_base_dtype,
    )
    if sizing.micro_batch_size is not None:
        fields.update(micro_batch_fields(sizing.micro_batch_size))
    if sizing.offload:
        optimizer, param = sizing.offload in ("optimizer", "all"), sizing.offload == "all"
        fields.update(
            actor_optimizer_offload=optimizer,
            critic_optimizer_offload=optimizer,
            actor_param_offload=param,
            critic_param_offload=param,
        )
    return fields


def micro_batch_fields(micro_batch_size: int) -> dict[str, int]:
    """The micro-batches ``--micro-batch-size M`` sets: M responses for the actor and the critic, 2M for the log-prob
    passes (forward only, no activations kept for a backward)."""
    return dict(
        actor_micro_batch_size=micro_batch_size,
        critic_micro_batch_size=micro_batch_size,
        log_prob_micro_batch_size=2 * micro_batch_size,
    )


def sizing_keep(sizing: SizingOptions) -> set[str]:
    """What ``--plan auto`` must not change (:data:`verlfit.plan.fit.KEEPABLE` names): the micro-batches, gradient
    checkpointing, offload and LoRA base storage (``--frozen-base-dtype``) the user set with the shared sizing
    options."""
    keep = set()
    if sizing.micro_batch_size is not None:
        keep.add("micro_batches")
    if sizing.gradient_checkpointing is not None:
        keep.add("gradient_checkpointing")
    if sizing.offload:
        keep.add("offload")
    if sizing.frozen_base_dtype is not None:
        keep.add("frozen_base")
    return keep


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
