"""Output of ``verlfit plan``: a plan as JSON-ready data (:func:`plan_to_dict`) or as a ``rich`` table
(:func:`render_table`), the auto-fit's choice in one line (:func:`chosen_line`), the model sizes more GPUs open up
(:func:`render_sizes` of :func:`verlfit.plan.sizes.size_rows`), and a whole :class:`verlfit.plan.outcome.PlanOutcome`
as ``--json``'s data (:func:`outcome_to_dict`) or as text (:func:`render_outcome`)."""

from __future__ import annotations

import dataclasses

from verlfit.model_shape import ModelShape, load_model_shape
from verlfit.plan import time as plan_time
from verlfit.plan.memory import (
    CALIBRATED_MODEL,
    CALIBRATION_NOTE,
    COMPONENT_TITLES,
    COMPONENTS,
    EXTRAPOLATED_NOTE,
    Plan,
    format_gib,
    gib,
)
from verlfit.plan.outcome import PlanOutcome
from verlfit.plan.sizes import size_rows


def calibration_note(shape: ModelShape) -> str:
    """What the plan's numbers were checked against, for a plan of ``shape``: :data:`CALIBRATION_NOTE`, and for any
    shape other than the calibrated Qwen2.5-0.5B's (compared on every dimension, not the name) that it is
    extrapolated (:data:`EXTRAPOLATED_NOTE`)."""
    calibrated = dataclasses.replace(load_model_shape(CALIBRATED_MODEL), name=shape.name)
    return CALIBRATION_NOTE if shape == calibrated else f"{CALIBRATION_NOTE}; {EXTRAPOLATED_NOTE}"


def plan_to_dict(plan: Plan) -> dict:
    """JSON-ready form of a plan (bytes as integers, GiB rounded to 3 places)."""
    r = plan.request
    request = {k: v for k, v in dataclasses.asdict(r).items() if k != "shape"}
    shape = dataclasses.asdict(r.shape)
    shape.update(actor_parameters=r.shape.actor_parameters, critic_parameters=r.shape.critic_parameters)
    phases = []
    for p in plan.phases:
        entry = {"phase": p.phase, "title": p.title}
        entry.update({f"{c}_bytes": getattr(p, c) for c in COMPONENTS})
        entry["total_bytes"] = p.total
        entry["total_gib"] = round(gib(p.total), 3)
        entry["fraction_of_usable"] = round(p.total / plan.usable_bytes, 4)
        entry["detail"] = list(p.detail)
        phases.append(entry)
    return {
        "model": shape,
        "request": request,
        "phases": phases,
        "peak_phase": plan.peak.phase,
        "peak_bytes": plan.peak.total,
        "headroom_bytes": plan.headroom_bytes,
        "required_bytes": plan.required_bytes,
        "usable_bytes": plan.usable_bytes,
        "margin": plan.margin,
        "budget_bytes": plan.budget_bytes,
        "verdict": plan.verdict,
        "notes": list(plan.notes),
        "calibration": calibration_note(r.shape),
    }


def _lora_title(r) -> str:
    ranks = [
        f"{role} {r.lora_rank_of(role)}"
        for role in ("actor", "critic")
        if r.lora_rank_of(role) > 0 and (role == "actor" or r.has_critic)
    ]
    return f", LoRA rank {', '.join(ranks)}" if ranks else ""


def render_table(plan: Plan, console=None) -> None:
    """Print the per-phase table with ``rich`` (GiB and fraction of usable memory)."""
    from rich.console import Console  # lazy: only for the live progress display on a terminal
    from rich.table import Table  # lazy: only for the live progress display on a terminal

    console = console or Console()
    r = plan.request
    title = (
        f"{r.shape.name}: {r.algorithm.upper()}{f' n={r.samples}' if r.samples > 1 else ''}, {r.dtype}, "
        f"{r.rollout} rollout, {r.gpus} GPU{'s' if r.gpus > 1 else ''}{_lora_title(r)}, "
        f"{format_gib(plan.usable_bytes)} usable"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("phase")
    for c in COMPONENTS:
        table.add_column(COMPONENT_TITLES[c], justify="right")
    table.add_column("total", justify="right")
    table.add_column("of usable", justify="right")
    for p in plan.phases:
        style = "bold" if p is plan.peak else None
        table.add_row(
            p.title,
            *(f"{gib(getattr(p, c)):.2f}" for c in COMPONENTS),
            f"{gib(p.total):.2f}",
            f"{p.total / plan.usable_bytes:.0%}",
            style=style,
        )
    console.print(table)
    console.print(f"GiB per GPU; predicted allocated peak of each phase ({calibration_note(r.shape)})")
    for p in plan.phases:
        for line in p.detail:
            console.print(f"  {p.title}: {line}", highlight=False, soft_wrap=True)
    for note in plan.notes:
        console.print(note, highlight=False, soft_wrap=True)
    console.print(f"verdict: {plan.verdict}", highlight=False)


OFFLOAD_FIELDS = ("actor_param_offload", "actor_optimizer_offload", "critic_param_offload", "critic_optimizer_offload")


def chosen_line(request, fits: bool = True) -> str:
    """The auto-fit's choice for ``request`` (a :class:`verlfit.plan.memory.PlanRequest`) in one line: micro-batches,
    rollout prompts per call (HF), gradient checkpointing, offload and the LoRA base's storage dtype; where nothing
    fits (``fits`` False) the most saving configuration tried, which the table then shows, said as such."""
    r = request
    label = "chosen" if fits else "nothing chosen; the most saving configuration tried, in the table below"
    return (
        f"  {label}: actor micro-batch {r.actor_micro_batch_size}, log-prob {r.log_prob_micro_batch_size}"
        + (f", critic {r.critic_micro_batch_size}" if r.has_critic else "")
        + (
            f", rollout {r.rollout_prompts_per_call} prompt{'' if r.rollout_prompts_per_call == 1 else 's'}"
            if r.rollout == "hf"
            else ""
        )
        + f"; gradient checkpointing {'on' if r.gradient_checkpointing else 'off'}"
        + (
            f" (critic {'on' if r.checkpointing_of('critic') else 'off'})"
            if r.has_critic and r.checkpointing_of("critic") != r.gradient_checkpointing
            else ""
        )
        + "; offload: "
        + (", ".join(n.replace("_offload", "").replace("_", " ") for n in OFFLOAD_FIELDS if getattr(r, n)) or "none")
        + (f"; LoRA base in {r.frozen_base_dtype or 'float32'}" if r.has_lora else "")
    )


def _size_cell(cell: dict) -> str:
    if not cell["fits"]:
        return f"no: {gib(cell['required_bytes']):.1f} GiB"
    return f"fits {gib(cell['required_bytes']):.1f} GiB" + (
        f", offload {', '.join(cell['offload'])}" if cell["offload"] else ""
    )


def render_sizes(rows: list[dict], gpus: int, usable_bytes: int, console) -> None:
    """Print :func:`size_rows` as a table: one row per model and algorithm, 1 GPU against ``gpus``."""
    from rich.table import Table  # lazy: only for the live progress display on a terminal

    console.print(
        f"model sizes at {gpus} GPUs against 1: full-parameter, this batch and lengths, auto-fitted; "
        f"predicted peak per GPU + allocator headroom, of {format_gib(usable_bytes)} usable",
        highlight=False,
        soft_wrap=True,
    )
    table = Table()
    for column in ("model", "algorithm", "1 GPU", f"{gpus} GPUs"):
        table.add_column(column)
    for row in rows:
        algorithm = "PPO" if row["algorithm"] == "ppo" else f"GRPO n={row['samples']}"
        table.add_row(
            row["model"].removeprefix("Qwen/").removesuffix("-Instruct"),
            algorithm,
            _size_cell(row["1"]),
            _size_cell(row[str(gpus)]),
        )
    console.print(table)


# printed after every plan made with --plan off, whatever its verdict: the planner did not choose
PLAN_OFF_HINT = (
    "--plan off: micro-batches, gradient checkpointing and offload as given (as verlfit train --plan off runs "
    "them); without --plan off the planner chooses them to fit, as verlfit train does by default"
)


def outcome_to_dict(outcome: PlanOutcome) -> dict:
    """``verlfit plan --json``'s data: :func:`plan_to_dict` with the memory source, auto-fit's decision, the time
    estimate (seconds) with its card and notes, and with several GPUs the sizes they open up."""
    plan, decision = outcome.plan, outcome.decision
    data = plan_to_dict(plan)
    data["memory_source"] = outcome.memory_source
    if decision:
        speed = [{"configuration": label, "step_s": round(seconds, 2)} for label, seconds in decision.speed]
        data["auto_fit"] = {
            "fits": decision.fits,
            "reasons": list(decision.reasons),
            "suggestion": decision.suggestion,
            "kept": outcome.kept,
            "speed": speed,
        }
    data["time"] = {
        **plan_time.estimate_to_dict(outcome.timing, outcome.steps),
        "card_source": outcome.card_source,
        "notes": [line.removeprefix("note: ") for line in outcome.notes],
    }
    if plan.request.gpus > 1:
        data["sizes"] = size_rows(plan.request, outcome.options.margin)
    return data


def render_outcome(outcome: PlanOutcome, console) -> None:
    """``verlfit plan``'s text on a ``rich`` console: the memory source, auto-fit's reasons and choice, the table,
    the card and the time estimate, the notes, and with several GPUs the sizes they open up."""
    plan, decision = outcome.plan, outcome.decision

    def say(line: str) -> None:
        console.print(line, highlight=False, soft_wrap=True)

    console.print(f"memory: {outcome.memory_source}", highlight=False)
    if decision:
        # "within the budget": the configuration shown may still be "tight" (above the margin, within the card)
        budget = f"auto-fit: nothing fits within the {outcome.options.margin:.0%} budget"
        console.print("auto-fit:" if decision.fits else budget, highlight=False)
        for line in decision.reasons:
            say(f"  {line}")
        if decision.suggestion:
            say(f"  {decision.suggestion}")
        say(chosen_line(decision.request, decision.fits))
    render_table(plan, console)
    say(f"card: {outcome.card_source}")
    options = outcome.options
    for line in plan_time.estimate_lines(
        outcome.timing, outcome.steps, options.dataset_size, plan.request.train_batch_size
    ):
        say(line)
    if plan.request.lora_rank_of("actor") > 0:
        say(
            plan_time.lora_generation_note(
                plan.request.rollout, outcome.switches.unwrap_fsdp, plan.request.frozen_base_dtype
            )
        )
    if plan.request.rollout == "vllm":
        say(plan_time.VLLM_NOTE)
    for line in outcome.notes:
        say(line)
    if decision is None:
        say(PLAN_OFF_HINT)
    if plan.request.gpus > 1:  # the question --gpus N asks: what N cards open up (12 auto-fits, ~50 ms)
        render_sizes(size_rows(plan.request, options.margin), plan.request.gpus, plan.usable_bytes, console)
