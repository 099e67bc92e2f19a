"""``verlfit train --dry-run``'s text that shows a :class:`verlfit.train.launch_plan.LaunchPlan`: the values that
matter, the environment and the exact command (:func:`describe`), and the command quoted for a shell
(:func:`shell_command`, also ``command.sh``'s).
"""

from __future__ import annotations

import textwrap
import shlex

from verlfit.run_settings import TrainSettings
from verlfit.progress import STARTUP_ALLOWANCE_S
from verlfit.train.launch_plan import LaunchPlan, total_steps, training_rows


def shell_command(command: list[str], indent: str) -> str:
    """``command`` quoted for a shell: ``python -m module`` on the first line, one override per continued line."""
    head = " ".join(shlex.quote(part) for part in command[:3])
    return f" \\\n{indent}".join([head, *(shlex.quote(part) for part in command[3:])])


def _lora_line(s: TrainSettings) -> str:
    """The dry run's LoRA line: each role's rank (0 = fully trained), alpha and target modules; an NF4 base."""
    critic = s.effective_critic_lora_rank
    ranks = [f"actor rank {s.lora_rank}"] + ([f"critic rank {critic}"] if s.algorithm == "ppo" else [])
    if s.lora_rank == 0 and (s.algorithm != "ppo" or critic == 0):
        return "LoRA: off (every parameter trains)"
    targets = s.lora_target_modules if isinstance(s.lora_target_modules, str) else ",".join(s.lora_target_modules)
    line = f"LoRA: {', '.join(ranks)} (0 = fully trained), alpha {s.lora_alpha:g}, target modules {targets}"
    if s.frozen_base_dtype == "nf4":  # asked for, or --plan auto's last resort: said where the run is summed up
        line += "; frozen base in NF4 (4 bits, patch 0028: the adapter learns against the quantised base)"
    return line


def _steps_text(s: TrainSettings) -> str:
    """The dry run's step count: ``--steps``; else, when train.parquet is there, the steps verl will take
    (``"233 (1 epoch(s) of 7473 rows // 32 prompts a batch)"``, counting only the rows within the prompt limit where
    verl drops some); else ``"1 epoch(s)"``."""
    if s.steps is not None:
        return str(s.steps)
    rows = training_rows(s)
    if rows is None:
        return f"{s.epochs} epoch(s)"
    if s.train_prompts_kept is not None:  # verl's filter_overlong_prompts drops the rest
        return (
            f"{total_steps(s)} ({s.epochs} epoch(s) of {s.train_prompts_kept} of {rows} rows within the prompt "
            f"limit // {s.train_batch_size} prompts a batch)"
        )
    return f"{total_steps(s)} ({s.epochs} epoch(s) of {rows} rows // {s.train_batch_size} prompts a batch)"


NOTE_WIDTH = 110  # columns of a dry run's notes (patch numbers and doc references ran to 389 on one line)
NOTE_INDENT = "      "  # under the text after "note: "


def wrap_note(note: str) -> str:
    """One dry-run note as ``note: ...``, wrapped at spaces to :data:`NOTE_WIDTH` columns, continued under its
    first word (:data:`NOTE_INDENT`); words are never cut, so a path or an override longer than a line stays whole.
    ``" ".join(text.split())`` of the result gives ``"note: " + note`` back for a note without runs of spaces."""

    return textwrap.fill(
        note,
        width=NOTE_WIDTH,
        initial_indent="note: ",
        subsequent_indent=NOTE_INDENT,
        break_long_words=False,
        break_on_hyphens=False,
    )


def describe(plan: LaunchPlan, stall_timeout: float | None = None) -> str:
    """The dry-run text: values that matter, the environment, and the exact command; ``stall_timeout``
    (``--stall-timeout``, seconds) adds its line when given (not 0)."""
    s = plan.settings
    lines = [
        f"profile: {plan.profile_name}    GPU: {plan.gpu_description}",
        *([f"rollout: {s.rollout}    attention: {s.attention}"] if s.rollout and s.attention else []),
        f"algorithm: {s.algorithm}{f' (n={s.rollout_n})' if s.algorithm == 'grpo' else ''}    model: {s.model}",
        f"data: {s.data_dir}    run directory: {s.run_dir}",
        f"steps: {_steps_text(s)}    batch: {s.train_batch_size} prompts, mini-batch {s.ppo_mini_batch_size}",
        "micro-batches per GPU: "
        + ", ".join(
            [f"actor {s.actor_micro_batch_size}"]
            + ([f"critic {s.critic_micro_batch_size}"] if s.algorithm == "ppo" else [])
            + [f"log-prob {s.log_prob_micro_batch_size}"]
            + (
                [f"HF rollout {s.rollout_micro_batch_size or s.train_batch_size} prompts"]
                if "actor_rollout_ref.rollout.name=hf" in plan.overrides
                else []
            )
        ),
        f"lengths: prompt <= {s.max_prompt_length}, response <= {s.max_response_length} tokens    "
        f"checkpoints: every {s.save_freq} steps, "
        f"{f'newest {s.keep_checkpoints}' if s.keep_checkpoints else 'all'} kept"
        if s.save_freq > 0
        else f"lengths: prompt <= {s.max_prompt_length}, response <= {s.max_response_length} tokens    "
        f"checkpoints: none (--save-freq {s.save_freq})",
        f"gradient checkpointing: {s.gradient_checkpointing}    offload: actor params "
        f"{s.actor_param_offload}, optimizer {s.actor_optimizer_offload}"
        + (
            f"; critic params {s.critic_param_offload}, optimizer {s.critic_optimizer_offload}"
            if s.algorithm == "ppo"
            else ""
        ),
        _lora_line(s),
    ]
    if stall_timeout:
        lines.append(
            f"stall timeout: stop verl after {stall_timeout:g} s without a finished step (--stall-timeout; "
            f"+ {STARTUP_ALLOWANCE_S / 60:g} min of startup before the first record)"
        )
    if s.extra_overrides:
        lines.append(
            "your overrides (after --, applied last; they win over the values above): " + " ".join(s.extra_overrides)
        )
    lines += [wrap_note(note) for note in plan.notes]
    lines.append("environment:")
    lines += [f"  {key}={value}" for key, value in plan.environment.items()]
    lines.append("command:")
    lines.append("  " + shell_command(plan.command, indent="    "))
    return "\n".join(lines)
