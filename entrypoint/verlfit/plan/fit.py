"""The fitting search of ``verlfit plan --auto-fit`` and ``verlfit train --plan auto``: :func:`auto_fit` sizes
micro-batches and turns on gradient checkpointing and offload only when needed, and, given the card the run is for,
picks the fastest by the time estimate among the configurations that fit (gradient checkpointing per role, the
micro-batches each allows, a LoRA base in 16 bits or fp32: :func:`speed_candidates`); :func:`smallest_change` searches
the single changes that would make a hopeless configuration fit; :func:`fit_for_train` applies the choice to
``verlfit train``'s settings (docs/plan.md section 6); :func:`plan_for_train` is ``verlfit train``'s planner: the run's
request built once, fitted (or checked as given), then timed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from verlfit.arguments import micro_batch_fields
from verlfit.errors import VerlfitError
from verlfit.plan.memory import (
    ALLOCATOR_HEADROOM_BYTES,
    DEFAULT_MARGIN,
    HALF_PRECISION,
    LORA_SUGGESTED_RANK,
    NF4,
    Plan,
    PlanRequest,
    format_gib,
    format_gib_against,
    lora_rank_bound,
    predict,
    unsupported_reason,
    validate_request,
    vllm_share_shortfall,
)
from verlfit.plan.request import inputs_for_train, request_from_settings
from verlfit.plan.time import estimate
from verlfit.plan.train_estimate import step_time_lines


@dataclass(frozen=True)
class FitDecision:
    """What :func:`auto_fit` chose.

    Attributes:
        fits: a configuration within the budget was found.
        request: the chosen configuration (the input request, changed only in micro-batches,
            gradient checkpointing and offload); when nothing fits, the most memory-saving one tried.
        plan: :func:`predict` of ``request``.
        reasons: one human line per decision, e.g.
            ``"actor micro-batch 4: 8 would need 21.3 GiB of 20.2 GiB (90% of 22.5 GiB)"``.
        suggestion: when ``fits`` is False, the smallest changes that would fit (found by search), as a message.
        speed: with a card (the speed pick): every configuration that fit as (description, estimated seconds per step
            on the card), the chosen one first; empty without a card.
    """

    fits: bool
    request: PlanRequest
    plan: Plan
    reasons: tuple[str, ...]
    suggestion: str | None = None
    speed: tuple[tuple[str, float], ...] = ()


# --------------------------------------------------------------------------------------
# auto-fit
# --------------------------------------------------------------------------------------

# micro-batch knob -> (request field, title, phases it sizes)
_MICRO_KNOBS = {
    "actor": ("actor_micro_batch_size", "actor micro-batch", ("actor_update",)),
    "log_prob": ("log_prob_micro_batch_size", "log-prob micro-batch", ("old_log_prob", "ref_log_prob")),
    "critic": ("critic_micro_batch_size", "critic micro-batch", ("values", "critic_update")),
    "rollout": ("rollout_micro_batch_size", "rollout micro-batch", ("rollout",)),
}
# "micro_batches": the actor's, log-prob's and critic's (verlfit's --micro-batch-size sets them together);
# "rollout_micro_batch": the HF rollout's prompts per generate call, kept apart (plan's --rollout-micro-batch-size)
KEEPABLE = ("micro_batches", "rollout_micro_batch", "gradient_checkpointing", "offload", "frozen_base")


def _kept_knob(knob: str, keep: frozenset[str]) -> bool:
    """Whether the micro-batch ``knob`` (a key of :data:`_MICRO_KNOBS`) is the user's, not the planner's."""
    return ("rollout_micro_batch" if knob == "rollout" else "micro_batches") in keep


def _sizing_start(request: PlanRequest, keep: frozenset[str]) -> PlanRequest:
    """The request the micro-batch search starts from: the kept micro-batches as given, the others at 1."""
    changes = {}
    if "micro_batches" not in keep:
        changes.update(actor_micro_batch_size=1, critic_micro_batch_size=1, log_prob_micro_batch_size=1)
    if "rollout_micro_batch" not in keep and request.rollout == "hf":
        changes["rollout_micro_batch_size"] = 1
    return replace(request, **changes)


# The speed pick leaves the memory-first choice only for a configuration estimated this much faster (a fraction of
# its seconds per step): the time model's fitted terms rest on H200 records (plan/time.py FACTORS), and it put the main
# job's checkpointing-off run at 9.7 s against 7.2 (+35%) where the H200 measured 8.7 against 6.9 (+26%): ranking two
# configurations a few percent apart is within that error.
SPEED_PICK_GAIN = 0.05


def _powers_of_two_dividing(n: int) -> list[int]:
    """1, 2, 4, ... up to the largest power of two dividing ``n``, plus ``n`` itself."""
    out, p = [], 1
    while p <= n and n % p == 0:
        out.append(p)
        p *= 2
    if n not in out:
        out.append(n)
    return out


def _candidates(request: PlanRequest, knob: str) -> list[int]:
    if knob in ("actor", "critic"):
        return _powers_of_two_dividing(request.per_gpu_mini_batch)
    if knob == "log_prob":
        # verl splits without needing equal chunks (dp_actor.py:345, TensorDict.split: the last chunk is smaller):
        # powers of two below the batch, then the whole batch
        out, p = [], 1
        while p < request.per_gpu_responses:
            out.append(p)
            p *= 2
        return out + [request.per_gpu_responses]
    return _powers_of_two_dividing(request.per_gpu_prompts)


def _phase_total(request: PlanRequest, names: tuple[str, ...]) -> tuple[int, str]:
    plan = predict(request)
    totals = [(p.total, p.title) for p in plan.phases if p.phase in names]
    return max(totals) if totals else (0, "")


def _levels(request: PlanRequest, keep: frozenset[str]) -> list[tuple[str, dict]]:
    """The escalation ladder, cheapest first, never turning off what the request has on."""
    r = request
    levels = [("as requested", {})]
    if "gradient_checkpointing" not in keep and not r.gradient_checkpointing:
        levels.append(("gradient checkpointing", {"gradient_checkpointing": True}))
    if "offload" not in keep:
        optimizer = {"actor_optimizer_offload": True}
        if r.has_critic:
            optimizer["critic_optimizer_offload"] = True
        if any(not getattr(r, k) for k in optimizer):
            levels.append(("optimizer offload", optimizer))
        params = {}
        if r.has_critic:
            params["critic_param_offload"] = True
        if r.rollout != "hf":
            params["actor_param_offload"] = True
        if any(not getattr(r, k) for k in params):
            levels.append(("param offload", params))
    # cumulative: each level includes the ones before it
    out, acc = [], {}
    for name, changes in levels:
        acc = {**acc, **changes}
        out.append((name, dict(acc)))
    return out


def _need_text(need: int, budget: int, usable: int, margin: float) -> str:
    """``"21.3 GiB of 20.2 GiB (90% of 22.5 GiB)"``: the need against the budget, told apart when they round alike."""
    need_text, budget_text = format_gib_against(need, budget)
    return f"{need_text} of {budget_text} ({margin:.0%} of {format_gib(usable)})"


def _size_micro_batches(
    request: PlanRequest, budget: int, keep: frozenset[str]
) -> tuple[PlanRequest | None, list[str], str | None]:
    """Largest micro-batch per knob whose phases fit ``budget`` at the request's switches.

    Returns (request, reasons, failure): failure names the phase that does not fit at micro-batch 1.
    """
    reasons = []
    chosen = request
    knobs = [k for k in _MICRO_KNOBS if k != "critic" or request.has_critic]
    if request.rollout != "hf":
        knobs = [k for k in knobs if k != "rollout"]
    usable = request.gpu_memory_bytes
    margin = budget / usable
    for knob in knobs:
        attr, title, names = _MICRO_KNOBS[knob]
        if _kept_knob(knob, keep):
            need, where = _phase_total(chosen, names)
            if need + ALLOCATOR_HEADROOM_BYTES > budget:
                return (
                    None,
                    reasons,
                    f"{where} at {title} {getattr(chosen, attr) or chosen.per_gpu_prompts} (kept) would "
                    f"need {_need_text(need + ALLOCATOR_HEADROOM_BYTES, budget, usable, margin)}",
                )
            continue
        best, refused = None, None
        for size in _candidates(chosen, knob):
            trial = replace(chosen, **{attr: size})
            need, where = _phase_total(trial, names)
            if need + ALLOCATOR_HEADROOM_BYTES <= budget:
                best = trial
            else:
                refused = (size, need + ALLOCATOR_HEADROOM_BYTES, where)
                break
        if best is None:
            size, need, where = refused
            return (
                None,
                reasons,
                f"{where} at {title} 1 would need {_need_text(need, budget, usable, margin)}",
            )
        chosen = best
        value = getattr(best, attr) or best.per_gpu_prompts
        if refused:
            size, need, where = refused
            reasons.append(f"{title} {value}: {size} would need {_need_text(need, budget, usable, margin)} in {where}")
        else:
            unit = "prompts per GPU" if knob == "rollout" else "responses per GPU"
            reasons.append(f"{title} {value}: the largest possible ({value} {unit})")
    return chosen, reasons, None


def _peak_failure(plan: Plan, budget: int, keep: frozenset[str]) -> str | None:
    """What does not fit, named after the plan's peak phase (the phase the table's ``peak:`` line names: the first
    largest total, :func:`verlfit.plan.memory.predict`), so that a tie or near-tie between phases of two micro-batch
    knobs (a PPO actor update and critic update at micro-batch 1) is told as one phase; None when the peak is no
    micro-batch knob's phase (the caller keeps the first knob's failure)."""
    request, peak = plan.request, plan.peak
    for knob, (attr, title, names) in _MICRO_KNOBS.items():
        if peak.phase in names and (knob != "rollout" or request.rollout == "hf"):
            kept = " (kept)" if _kept_knob(knob, keep) else ""
            return (
                f"{peak.title} at {title} {getattr(request, attr) or request.per_gpu_prompts}{kept} would need "
                f"{_need_text(peak.total + ALLOCATOR_HEADROOM_BYTES, budget, plan.usable_bytes, plan.margin)}"
            )
    return None


def auto_fit(
    request: PlanRequest,
    margin: float = DEFAULT_MARGIN,
    keep: tuple[str, ...] | frozenset[str] = (),
    card=None,
    inputs=None,
) -> FitDecision:
    """Choose micro-batches, gradient checkpointing and offload so every phase fits; with ``card``, the fastest of
    the configurations that fit by the time estimate for that card.

    Without ``card`` (the memory-first choice, :func:`fit_memory`): the request's switches, the largest
    micro-batches that fit, savings turned on only when needed. With ``card`` (a :class:`verlfit.cards.Card`, the
    one the run is for; ``inputs``: the run's :class:`verlfit.plan.time.TimeInputs`, its patch switches) every
    combination of :func:`speed_candidates` is fitted the same way and estimated
    (:func:`verlfit.plan.time.estimate`); the fastest is chosen, the memory-first choice on a tie. Gradient
    checkpointing saves activation memory and costs a second forward of the layers; without it the micro-batches
    that fit are smaller, each pass paying its fixed costs: which wins depends on the card (compute-bound cards
    lose more to the recompute). A LoRA base in 16 bits frees memory; on a card that computes in fp32 (the P40)
    it costs an upcast per unit and pass. The reasons say the chosen estimate and the memory-first one's.

    Raises:
        ValueError: an unknown ``keep`` name.
    """
    keep = frozenset(keep)
    first = fit_memory(request, margin, keep)
    if card is None or not first.fits:
        return _with_the_16_bit_base_line(first, request, margin, keep, card, inputs)
    why_nf4 = ()
    if first.request.frozen_base_dtype != request.frozen_base_dtype:
        # nothing fit without the NF4 base (fit_memory's last resort): the speed pick weighs NF4 configurations only,
        # and the one it picks carries the memory-first choice's line saying why the base is quantised
        request, keep = replace(request, frozen_base_dtype=first.request.frozen_base_dtype), keep | {"frozen_base"}
        why_nf4 = first.reasons[:1]

    # each configuration that fits, described once (the description tells two apart and names them in the lines)
    decisions = [first]
    described = [describe_choice(first.request)]
    for changes in speed_candidates(request, keep):
        decision = fit_memory(replace(request, **changes), margin, keep | {"gradient_checkpointing", "frozen_base"})
        text = describe_choice(decision.request) if decision.fits else None
        if decision.fits and text not in described:
            decisions.append(decision)
            described.append(text)
    timed = [
        (estimate(decision.request, card, inputs).step_seconds, index, decision)
        for index, decision in enumerate(decisions)
    ]
    fastest = min(timed, key=lambda t: (t[0], t[1]))
    # another configuration only when clearly faster than the memory-first one (the estimate's error is of that order)
    seconds, index, best = fastest if fastest[0] < (1 - SPEED_PICK_GAIN) * timed[0][0] else timed[0]
    others = sorted((t for t in timed if t[1] != index), key=lambda t: (t[0], t[1]))
    speed = ((described[index], seconds), *((described[i], t) for t, i, _ in others))
    fit_count = f"{len(decisions)} configuration{'s' if len(decisions) > 1 else ''} fit"
    lines = [
        f"speed: {fit_count}; by the time estimate on {card.name}, chosen: {described[index]}, {seconds:.1f} s/step"
    ]
    if index != 0:
        lines.append(f"speed: the memory-first choice ({described[0]}) would take {timed[0][0]:.1f} s/step")
    elif len(decisions) > 1:
        runner = others[0]
        gain = 1 - runner[0] / seconds
        why = f" (kept: not {SPEED_PICK_GAIN:.0%} faster, within the estimate's error)" if gain > 0 else ""
        lines.append(f"speed: next, {described[runner[1]]}: {runner[0]:.1f} s/step{why}")
    reasons = best.reasons if best is first else why_nf4 + best.reasons
    return _with_the_16_bit_base_line(
        replace(best, reasons=reasons + tuple(lines), speed=speed), request, margin, keep, card, inputs
    )


def _with_the_16_bit_base_line(
    decision: FitDecision, request: PlanRequest, margin: float, keep: frozenset[str], card, inputs
) -> FitDecision:
    """``decision`` with one more reason where the run asked for an NF4 base (``--frozen-base-dtype nf4``, kept) that
    fits and the profile's 16-bit base (bfloat16; float16 where the run computes in it) fits the same run too: its
    peak and, with ``card``, its step time as :func:`auto_fit` would choose it, since NF4 trains on a 4-bit
    quantisation of the model (export merges the adapter into the dequantised base) and is only needed where 16 bits
    do not fit."""
    if not decision.fits or request.frozen_base_dtype != NF4 or "frozen_base" not in keep or not request.has_lora:
        return decision
    stored = sixteen_bit_base(request)
    sixteen_bit = auto_fit(replace(request, frozen_base_dtype=stored), margin, keep, card, inputs)
    if not sixteen_bit.fits:
        return decision
    speed = f", {sixteen_bit.speed[0][1]:.1f} s/step on {card.name}" if card else ""
    line = (
        f"{stored} base: fits too (peak {format_gib(sixteen_bit.plan.required_bytes)}{speed}) and trains the model's "
        "own weights, nf4 a 4-bit quantisation of them: leave --frozen-base-dtype nf4 out to use it"
    )
    return replace(decision, reasons=decision.reasons + (line,))


def speed_candidates(request: PlanRequest, keep: frozenset[str] = frozenset()) -> list[dict]:
    """The switch combinations :func:`auto_fit`'s speed pick fits and times, as request changes: gradient
    checkpointing on or off for the actor and, apart, for a PPO critic (None where it equals the actor's; unless
    ``"gradient_checkpointing"`` is kept:
    the user's ``--gradient-checkpointing`` / ``--no-gradient-checkpointing``), and for a LoRA run whose base is
    stored in 16 bits also the fp32 base (unless ``"frozen_base"`` is kept: ``--frozen-base-dtype``). Micro-batches
    and offload are sized for each by :func:`fit_memory` (the largest micro-batches that fit: in the time model a
    larger micro-batch is never slower)."""
    r = request
    if "gradient_checkpointing" in keep:
        checkpointing = [(r.gradient_checkpointing, r.critic_gradient_checkpointing)]
    else:
        critics = (True, False) if r.has_critic else (None,)
        checkpointing = [(actor, None if critic == actor else critic) for actor in (True, False) for critic in critics]
    bases = [r.frozen_base_dtype]
    if "frozen_base" not in keep and r.has_lora and r.frozen_base_dtype is not None:
        bases.append(None)
    return [
        dict(gradient_checkpointing=actor, critic_gradient_checkpointing=critic, frozen_base_dtype=base)
        for actor, critic in checkpointing
        for base in bases
    ]


def describe_choice(request: PlanRequest) -> str:
    """One line for a configuration auto-fit chose or weighed: checkpointing per role, micro-batches, offload and a
    LoRA base's storage, e.g. ``"checkpointing actor off, critic on; micro-batches actor 2, log-prob 8, critic 4,
    rollout 32 prompts; offload none"``."""
    r = request
    on = lambda flag: "on" if flag else "off"  # noqa: E731
    checkpointing = f"checkpointing actor {on(r.checkpointing_of('actor'))}"
    micro = f"micro-batches actor {r.actor_micro_batch_size}, log-prob {r.log_prob_micro_batch_size}"
    if r.has_critic:
        checkpointing += f", critic {on(r.checkpointing_of('critic'))}"
        micro += f", critic {r.critic_micro_batch_size}"
    if r.rollout == "hf":
        micro += f", rollout {r.rollout_prompts_per_call} prompts"
    switches = ("actor_param_offload", "actor_optimizer_offload", "critic_param_offload", "critic_optimizer_offload")
    offload = [name.replace("_offload", "").replace("_", " ") for name in switches if getattr(r, name)]
    text = f"{checkpointing}; {micro}; offload {', '.join(offload) or 'none'}"
    if r.has_lora:
        text += f"; LoRA base in {r.frozen_base_dtype or 'float32'}"
    return text


def fit_memory(
    request: PlanRequest, margin: float = DEFAULT_MARGIN, keep: tuple[str, ...] | frozenset[str] = ()
) -> FitDecision:
    """Choose micro-batches, gradient checkpointing and offload so every phase fits (the memory-first choice).

    Climbs a ladder, cheapest first: the request's own switches; + gradient checkpointing;
    + optimizer offload (actor and critic); + parameter offload (critic, and actor unless the
    rollout is HF, which cannot run with it). At the first rung where every phase fits at
    micro-batch 1, each micro-batch is raised to the largest power of two dividing its batch that
    keeps its phases within ``margin`` x usable memory (peak + allocator headroom). Nothing the
    request turned on is turned off. When no rung fits, a LoRA run whose base storage is not kept, on one GPU with
    the HF rollout, climbs the ladder again with its base in NF4 (patch 0028; :func:`nf4_fallback_allowed`), the
    first reason saying what did not fit without it.

    Args:
        request: the starting configuration (its micro-batches are ignored unless kept).
        margin: fraction of ``request.gpu_memory_bytes`` to stay under.
        keep: knobs not to change: any of ``"micro_batches"``, ``"gradient_checkpointing"``, ``"offload"``,
            ``"frozen_base"``.

    Returns:
        A :class:`FitDecision`. When nothing fits even at the top rung with micro-batch 1,
        ``fits`` is False and ``suggestion`` names the smallest changes that would fit.

    Raises:
        ValueError: an unknown ``keep`` name.
    """
    keep = frozenset(keep)
    unknown = keep - set(KEEPABLE)
    if unknown:
        raise ValueError(f"unknown keep {sorted(unknown)}; allowed: {KEEPABLE}")
    decision = _fit_ladder(request, margin, keep)
    if decision.fits or not nf4_fallback_allowed(request, keep):
        return decision
    quantised = _fit_ladder(replace(request, frozen_base_dtype=NF4), margin, keep | {"frozen_base"})
    stored = request.frozen_base_dtype or "float32"
    if not quantised.fits:
        # both needs in the last line, the one train's refusal quotes: the smallest changes offered assume the NF4
        # base, and beside the 16-bit base's need alone they read as too small
        nf4_failure = quantised.reasons[-1].partition(" saving on, ")[2]
        last = f"{decision.reasons[-1]} with the {stored} base; with the base in NF4 (the last resort), {nf4_failure}"
        return replace(decision, reasons=(*decision.reasons[:-1], last))
    failure = decision.reasons[-1].removeprefix("nothing fits: ")
    return replace(
        quantised,
        reasons=(
            f"frozen base in NF4 (patch 0028), chosen because the {stored} base does not fit: {failure}; the adapter "
            "then learns against a 4-bit quantisation of the model",
        )
        + quantised.reasons,
    )


def nf4_fallback_allowed(request: PlanRequest, keep: frozenset[str]) -> bool:
    """Whether :func:`fit_memory` may store a LoRA base in NF4 (patch 0028) when nothing fits otherwise: the base's
    storage not kept (no ``--frozen-base-dtype``), a LoRA role, one GPU, the HF rollout
    (:func:`verlfit.plan.request.check_nf4_base`), and not NF4 already. Quantising changes what the model computes,
    so it is the last resort, after gradient checkpointing and offload."""
    return (
        "frozen_base" not in keep
        and request.has_lora
        and request.gpus == 1
        and request.rollout == "hf"
        and request.frozen_base_dtype != NF4
    )


def _fit_ladder(request: PlanRequest, margin: float, keep: frozenset[str]) -> FitDecision:
    """:func:`fit_memory` at the request's base storage: the first rung of :func:`_levels` where every phase fits."""
    budget = int(margin * request.gpu_memory_bytes)
    reasons: list[str] = []
    start = _sizing_start(request, keep)
    # micro-batches the planner will choose are not the user's: validate from micro-batch 1 (batch 1 is valid)
    validate_request(start)
    failures: list[tuple[str, str]] = []
    last_trial = start
    for name, changes in _levels(request, keep):
        trial = replace(start, **changes)
        sized, sized_reasons, failure = _size_micro_batches(trial, budget, keep)
        if sized is not None:
            plan = predict(sized, margin)
            short = vllm_share_shortfall(sized)
            if short:
                sized, failure = None, short
            elif plan.required_bytes > budget:
                # a phase no micro-batch sizes (the vLLM rollout: the model's second copy in vLLM's share of the
                # card, and the FSDP weights beside it) is over the budget at this rung
                sized, failure = (
                    None,
                    (
                        f"{plan.peak.title} would need "
                        f"{_need_text(plan.required_bytes, budget, plan.usable_bytes, plan.margin)}"
                    ),
                )
        if sized is not None:
            # each switch turned on, with what failed on the rung below it
            for (_, below), (switch, _) in zip(failures, failures[1:] + [(name, None)]):
                reasons.append(f"{switch} on: without it, {below}")
            reasons += sized_reasons
            if request.rollout == "hf" and not request.actor_param_offload and name == "param offload":
                reasons.append(
                    "actor parameters stay on the GPU: HF rollout cannot run with actor param offload in verl 0.4.1"
                )
            return FitDecision(True, sized, plan, tuple(reasons), None)
        failures.append((name, failure))
        last_trial = trial
    plan = predict(last_trial, margin)
    others = " other" if keep & {"micro_batches", "rollout_micro_batch"} else ""
    failure = vllm_share_shortfall(last_trial) or _peak_failure(plan, budget, keep) or failures[-1][1]
    reasons.append(f"nothing fits: even with every{others} saving on, {failure}")
    return FitDecision(False, last_trial, plan, tuple(reasons), smallest_change(request, margin, keep))


def _fits_fully_saved(request: PlanRequest, margin: float, keep: frozenset[str]) -> bool:
    budget = int(margin * request.gpu_memory_bytes)
    levels = _levels(request, keep)
    start = _sizing_start(request, keep)
    trial = replace(start, **levels[-1][1])
    try:
        plan = predict(trial, margin)
    except VerlfitError:
        return False
    return plan.verdict != "unsupported" and plan.required_bytes <= budget and not vllm_share_shortfall(trial)


def _largest_fitting(lo: int, hi: int, make, margin: float, keep: frozenset[str]) -> int | None:
    """Largest value in [lo, hi] for which ``make(value)`` fits (fit is monotone in the value)."""
    if hi < lo or not _fits_fully_saved(make(lo), margin, keep):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fits_fully_saved(make(mid), margin, keep):
            lo = mid
        else:
            hi = mid - 1
    return lo


def smallest_change(request: PlanRequest, margin: float = DEFAULT_MARGIN, keep: frozenset[str] = frozenset()) -> str:
    """Search single-setting changes that make ``request`` fit fully saved; return them as a
    message, the smallest relative change first. Lengths are searched in steps of 32 tokens.
    A fully trained actor (or PPO critic) is offered LoRA at rank :data:`LORA_SUGGESTED_RANK` (the adapter's
    size barely depends on the rank: what LoRA saves is the base's gradients, AdamW states and the reference model),
    tried with the base train would store (:func:`sixteen_bit_base`, then beside ``--rollout hf``, then NF4 where
    :func:`fit_memory` falls back to it);
    a LoRA rank too large for the card is offered the largest smaller rank that fits (``--lora-rank``, and
    ``--critic-lora-rank`` for a critic rank set apart). Where no single change fits a LoRA run whose base is not in
    NF4, the changes that fit with the NF4 base (one GPU, the HF rollout) are offered: as single changes where the
    planner would take NF4 itself (:func:`nf4_fallback_allowed`), else as pairs with ``--frozen-base-dtype nf4``."""
    options = _single_changes(request, margin, keep)
    if options:
        options.sort(key=lambda item: item[0])
        return "smallest changes that would fit, each on its own: " + "; ".join(text for _, text in options)
    r = request
    if r.has_lora and r.frozen_base_dtype != NF4:
        quantised = replace(r, rollout="hf", gpus=1, frozen_base_dtype=NF4)
        paired = sorted(_single_changes(quantised, margin, frozenset(keep) | {"frozen_base"}), key=lambda i: i[0])
        changes = "; ".join(text for _, text in paired)
        if paired and nf4_fallback_allowed(r, frozenset(keep)):
            # the planner takes NF4 itself once one of these makes it fit: each is a single change
            return (
                f"smallest changes that would fit, each on its own, with the base then in nf4 (the planner's last "
                f"resort; the adapter learns against a 4-bit quantisation of the model): {changes}"
            )
        if paired:
            return (
                f"no single change fits; {_nf4_flag(r)} (QLoRA: the layers' Linears in 4 bits; the adapter learns "
                f"against the quantised base) fits together with one of: {changes}"
            )
    return (
        "no single change found that fits"
        + (" (not even LoRA rank 1)" if r.has_lora else "")
        + ": use a smaller model or a card with more memory"
    )


def sixteen_bit_base(request: PlanRequest) -> str:
    """The profile's 16-bit dtype for a LoRA base (patch 0026), read from the run's compute dtype: float16 where the
    run computes in it (the t4 and v100 profiles), else bfloat16 (p40, a10), as the profiles' ``frozen_base_dtype``."""
    return request.dtype if request.dtype in HALF_PRECISION else "bfloat16"


def _nf4_flag(request: PlanRequest) -> str:
    """The options that put ``request``'s LoRA base in NF4: ``--frozen-base-dtype nf4``, with ``--rollout hf`` and
    ``--gpus 1`` where the run has vLLM or several GPUs (patch 0028 runs on neither)."""
    return (
        "--frozen-base-dtype nf4"
        + (" --rollout hf" if request.rollout != "hf" else "")
        + (" --gpus 1" if request.gpus > 1 else "")
    )


def _single_changes(request: PlanRequest, margin: float, keep: frozenset[str]) -> list[tuple[float, str]]:
    """:func:`smallest_change`'s search: (relative size of the change, the change as options) for each single
    setting change that makes ``request`` fit fully saved, unsorted."""
    r = request
    options: list[tuple[float, str]] = []
    if "micro_batches" in keep:
        # the user's micro-batch is the first thing to give up: what auto-fit would choose instead
        free = fit_memory(r, margin, keep - {"micro_batches"})
        if free.fits:
            chosen = free.request
            # offer --micro-batch-size N only when all it sets (micro_batch_fields) fits, else the planner's choice
            size = chosen.actor_micro_batch_size
            as_option = replace(r, **micro_batch_fields(size))
            if size != r.actor_micro_batch_size and fit_memory(as_option, margin, keep).fits:
                change = f"--micro-batch-size {size} (from {r.actor_micro_batch_size}), or leave it out for the planner"
                options.append((0.0, change + " to choose"))
            else:
                picks = [f"actor {size}", f"log-prob {chosen.log_prob_micro_batch_size}"]
                picks += [f"critic {chosen.critic_micro_batch_size}"] if r.has_critic else []
                options.append(
                    (
                        0.0,
                        f"leave the micro-batch sizes you gave out for the planner to choose (its choice: "
                        f"{', '.join(picks)})",
                    )
                )
    if "rollout_micro_batch" in keep:
        # plan's --rollout-micro-batch-size, kept apart: what auto-fit would choose without it
        free = fit_memory(r, margin, keep - {"rollout_micro_batch"})
        if free.fits:
            base = (
                f", the base in {free.request.frozen_base_dtype}"
                if free.request.frozen_base_dtype != r.frozen_base_dtype
                else ""
            )
            options.append(
                (
                    0.0,
                    "leave --rollout-micro-batch-size out for the planner to choose (its choice: "
                    f"{free.request.rollout_prompts_per_call} prompts a generate call{base})",
                )
            )
    step = 32
    best = _largest_fitting(
        1, (r.max_response_length - 1) // step, lambda k: replace(r, max_response_length=k * step), margin, keep
    )
    if best:
        value = best * step
        options.append(
            (
                (r.max_response_length - value) / r.max_response_length,
                f"--max-response-length {value} (from {r.max_response_length})",
            )
        )
    if r.max_prompt_length > step:
        best = _largest_fitting(
            1, (r.max_prompt_length - 1) // step, lambda k: replace(r, max_prompt_length=k * step), margin, keep
        )
        if best:
            value = best * step
            options.append(
                (
                    (r.max_prompt_length - value) / r.max_prompt_length,
                    f"--max-prompt-length {value} (from {r.max_prompt_length})",
                )
            )
    if r.algorithm == "grpo" and r.rollout_n > 1:
        for n in range(r.rollout_n - 1, 0, -1):
            if _fits_fully_saved(replace(r, rollout_n=n), margin, keep):
                options.append(((r.rollout_n - n) / r.rollout_n, f"--samples {n} (from {r.rollout_n})"))
                break
    for gpus in (2, 4, 8):
        if gpus > r.gpus and r.train_batch_size % gpus == 0 and (r.ppo_mini_batch_size * r.samples) % gpus == 0:
            trial = replace(r, gpus=gpus)
            if _fits_fully_saved(trial, margin, keep):
                options.append(
                    ((gpus - r.gpus) / r.gpus, f"--gpus {gpus} (FSDP shards weights, gradients and optimizer states)")
                )
                break
    if r.lora_rank == 0 or (r.has_critic and r.lora_rank_of("critic") == 0):
        # LoRA on every role that trains fully (the critic follows the actor's rank unless it was set apart)
        # the base as train stores a LoRA base it was not told about: the profile's 16 bits, else NF4 where nothing
        # else fits one GPU with the HF rollout (fit_memory's last resort), with --rollout hf where that is the rest
        lora = replace(
            r,
            lora_rank=r.lora_rank or LORA_SUGGESTED_RANK,
            critic_lora_rank=None if r.critic_lora_rank is None or r.critic_lora_rank == 0 else r.critic_lora_rank,
            frozen_base_dtype=r.frozen_base_dtype if r.has_lora else sixteen_bit_base(r),
        )
        flag = f"--lora-rank {LORA_SUGGESTED_RANK}" if r.lora_rank == 0 else f"--critic-lora-rank {r.lora_rank}"
        why = (
            "LoRA: the base weights freeze, only adapters train, with no gradients or AdamW states for the "
            f"base{' and no separate reference model' if r.has_reference and r.lora_rank == 0 else ''}"
        )
        storage_kept = "frozen_base" in keep and r.has_lora
        hf_flag = " --rollout hf" if r.rollout != "hf" else ""
        trials = [(lora, "", "")]
        if hf_flag:
            trials.append((replace(lora, rollout="hf"), hf_flag, ""))
        if not storage_kept and r.gpus == 1:
            nf4 = "; the planner then stores the base in nf4 itself: the adapter learns against a 4-bit quantisation"
            trials.append((replace(lora, rollout="hf", frozen_base_dtype=NF4), hf_flag, nf4))
        for trial, extra, base in trials:
            if _fits_fully_saved(trial, margin, keep):
                options.append((1.0, f"{flag}{extra} ({why}{base})"))
                break
    # a LoRA rank too large for the card (an adapter grows with the rank: rank x (inputs + outputs) per Linear):
    # the largest smaller rank that fits, for the actor (with the critic when it follows) and for a critic set apart
    # (a critic at the actor's rank follows it: train's --lora-rank alone sets both)
    critic_rank = r.lora_rank_of("critic") if r.has_critic else 0
    follows = r.has_critic and critic_rank == r.lora_rank
    # ranks above min(in, out features) of the targeted layers add no capacity: never suggested
    # (memory.lora_rank_bound, read once for each rank searched)
    searched = (("actor", r.lora_rank > 1), ("critic", critic_rank > 1 and not follows))
    bounds = {role: lora_rank_bound(r.shape, role, r.lora_target_modules)[0] for role, search in searched if search}
    if r.lora_rank > 1:
        best = _largest_fitting(
            1,
            min(r.lora_rank - 1, bounds["actor"]),
            lambda k: replace(r, lora_rank=k, critic_lora_rank=None if follows else r.critic_lora_rank),
            margin,
            keep,
        )
        if best:
            options.append(
                (
                    (r.lora_rank - best) / r.lora_rank,
                    f"--lora-rank {best} (from "
                    f"{r.lora_rank}{f'; and --critic-lora-rank {best} if you gave one' if follows else ''})",
                )
            )
    if critic_rank > 1 and not follows:
        best = _largest_fitting(
            1,
            min(critic_rank - 1, bounds["critic"]),
            lambda k: replace(r, critic_lora_rank=k),
            margin,
            keep,
        )
        if best:
            options.append(((critic_rank - best) / critic_rank, f"--critic-lora-rank {best} (from {critic_rank})"))
    if r.algorithm == "ppo" and _fits_fully_saved(
        replace(r, algorithm="grpo", rollout_n=1, use_reference=False), margin, keep
    ):
        options.append((1.0, "--algo grpo (no critic model)"))
    if r.rollout == "vllm" and _fits_fully_saved(replace(r, rollout="hf"), margin, keep):
        # vLLM holds a second copy of the model in its share of the card; HF generate uses the training weights
        options.append(
            (
                0.5,
                "--rollout hf (HF generate from the training weights: no second copy of the model in vLLM's share "
                "of the card; slower generation)",
            )
        )
    # a LoRA base in NF4 (patch 0028; one GPU, the HF rollout): what fit_memory itself takes last where the base's
    # storage was not given, offered where it was (or where the run's rollout is vLLM: with --rollout hf)
    # on several GPUs the NF4 base means one GPU (--gpus 1): offered when one GPU then holds the run
    if r.has_lora and r.frozen_base_dtype != NF4:
        hf = replace(r, rollout="hf", gpus=1)
        if _fits_fully_saved(replace(hf, frozen_base_dtype=NF4), margin, keep):
            flag = _nf4_flag(r)
            where = ", which runs on one GPU" if r.gpus > 1 else ""
            options.append(
                (
                    1.0,
                    f"{flag} (QLoRA{where}: the layers' Linears in 4 bits; the adapter learns against the quantised "
                    "base)",
                )
            )
    return options


def fit_for_train(
    settings,
    profile,
    memory_bytes: int,
    keep_micro_batch: bool = False,
    keep_offload: bool = False,
    keep_checkpointing: bool = False,
    margin: float = DEFAULT_MARGIN,
    card=None,
    inputs=None,
    keep_frozen_base: bool = False,
    switches=None,
) -> list[str]:
    """Run :func:`auto_fit` for ``verlfit train`` and write its choice into ``settings`` (micro-batches, gradient
    checkpointing of actor and critic, offload, and a LoRA base's storage). ``card`` and ``inputs``: the card the run
    is for and its :class:`verlfit.plan.time.TimeInputs`, for the speed pick (None: the memory-first choice).
    ``switches``: the run's :class:`verlfit.patch_switches.PatchSwitches` (:func:`request_from_settings`).

    Returns the lines to print ("what it chose and why"). Raises :class:`VerlfitError` when
    nothing fits, with the smallest change that would as the fix.
    """
    keep = set()
    if keep_frozen_base:
        keep.add("frozen_base")
    if keep_micro_batch:
        keep.add("micro_batches")
    if keep_offload:
        keep.add("offload")
    if keep_checkpointing:
        keep.add("gradient_checkpointing")
    request = request_from_settings(settings, profile, memory_bytes, switches=switches)
    return fit_request_for_train(settings, request, keep, margin, card, inputs)[0]


def fit_request_for_train(
    settings, request: PlanRequest, keep: set[str], margin: float = DEFAULT_MARGIN, card=None, inputs=None
) -> tuple[list[str], PlanRequest]:
    """:func:`fit_for_train` of the run's planner ``request`` (:func:`request_from_settings` of ``settings``, sized
    for the run's usable memory): :func:`auto_fit` keeping ``keep`` (:func:`verlfit.arguments.sizing_keep`'s
    names), its choice written into ``settings``; returns (the lines to print, the chosen request: the request of
    ``settings`` as written).

    Raises:
        VerlfitError: nothing fits (the smallest change that would as the fix), or verl 0.4.1 cannot run the choice.
    """
    keep_micro_batch, keep_offload = "micro_batches" in keep, "offload" in keep
    keep_checkpointing = "gradient_checkpointing" in keep
    memory_bytes = request.gpu_memory_bytes
    decision = auto_fit(request, margin=margin, keep=keep, card=card, inputs=inputs)
    if not decision.fits:
        savings = [
            name
            for name, kept in (("gradient checkpointing", keep_checkpointing), ("offload", keep_offload))
            if not kept
        ]
        micro = "at the micro-batches you set" if keep_micro_batch else "at micro-batch 1"
        tried = f"even with {' and '.join(savings)} {micro}" if savings else micro
        raise VerlfitError(
            f"this configuration does not fit in {format_gib(memory_bytes)} per GPU {tried}: "
            + decision.reasons[-1].partition(" saving on, ")[2],
            fix=decision.suggestion,
        )
    chosen, plan = decision.request, decision.plan
    if plan.unsupported:
        raise VerlfitError(
            f"verl 0.4.1 cannot run this configuration: {plan.unsupported}",
            fix="use --offload optimizer (or leave --offload to the planner)",
            exit_code=2,
        )
    for name in (
        "actor_micro_batch_size",
        "log_prob_micro_batch_size",
        "critic_micro_batch_size",
        "gradient_checkpointing",
        "critic_gradient_checkpointing",
        "actor_param_offload",
        "actor_optimizer_offload",
        "critic_param_offload",
        "critic_optimizer_offload",
    ):
        setattr(settings, name, getattr(chosen, name))
    if request.frozen_base_dtype is not None:  # a LoRA run stored in 16 bits: the speed pick may take the fp32 base
        settings.frozen_base_dtype = chosen.frozen_base_dtype or "float32"
    if chosen.rollout == "hf":
        settings.rollout_micro_batch_size = chosen.rollout_micro_batch_size
    return (
        [f"plan: {line}" for line in decision.reasons]
        + [f"plan: {plan.notes[0]} -> {plan.verdict}"]
        + [f"plan: {line}" for line in plan.lora_notes]
    ), chosen


def offloaded_parts(request: PlanRequest) -> list[str]:
    """The FSDP offloads ``request`` turns on, in words (``["actor param", "critic optimizer"]``), in the order actor
    param, actor optimizer, critic param, critic optimizer; empty when none is."""
    return [
        name.replace("_offload", "").replace("_", " ")
        for name in (
            "actor_param_offload",
            "actor_optimizer_offload",
            "critic_param_offload",
            "critic_optimizer_offload",
        )
        if getattr(request, name)
    ]


def plan_off_lines(plan: Plan) -> list[str]:
    """The planner's warning for ``verlfit train --plan off`` (sizes as given): none when the run's ``plan``
    (:func:`predict` at its ``margin`` of the run's request: :func:`request_from_settings` of the sizes as given, sized
    for the run's usable memory) fits; otherwise one line with its peak and verdict ("tight" or "does not fit": the
    run may run out of memory, verl after Ray has started) and what would fit: ``--plan auto``'s choice when it finds
    one, else the smallest change (:func:`auto_fit`). The run still launches: ``--plan off`` is the user's call."""
    if plan.verdict == "fits":
        return []
    decision = auto_fit(plan.request, margin=plan.margin)
    if decision.fits:
        chosen = decision.request
        offload = offloaded_parts(chosen)
        then = (
            "without --plan off the planner would choose: micro-batches actor "
            f"{chosen.actor_micro_batch_size}, log-prob {chosen.log_prob_micro_batch_size}"
            + (f", critic {chosen.critic_micro_batch_size}" if chosen.has_critic else "")
            + f"; gradient checkpointing {'on' if chosen.gradient_checkpointing else 'off'}; offload "
            f"{', '.join(offload) or 'none'}"
        )
    else:
        then = decision.suggestion or "nothing fits this card"
    return [f"plan: WARN --plan off: {plan.notes[0]} -> {plan.verdict}: verl may run out of memory; {then}"]


def plan_for_train(
    settings, run, keep: set[str], auto: bool, steps: int | None, margin: float = DEFAULT_MARGIN
) -> tuple[list[str], float | None, PlanRequest]:
    """The planner's part of ``verlfit train`` for the resolved ``run`` (:class:`verlfit.resolved_run.ResolvedRun`:
    its profile, usable memory, card and patch switches, read as they are): the run's request built once
    (:func:`request_from_settings` of ``settings``); with ``auto`` (``--plan auto``) fitted
    (:func:`fit_request_for_train`, keeping ``keep``: :func:`verlfit.arguments.sizing_keep`'s names) and its
    choice written into ``settings``, else the sizes as given checked (:func:`plan_off_lines`); then the
    step time of the request as run (:func:`verlfit.plan.train_estimate.step_time_lines`, over ``steps``) on the
    run's card, under ``--emulate`` first on the card the run goes at (``run.goes_at``).

    Returns (the lines to print: with ``auto`` the choice and the time estimate, else the warning when the sizes do
    not fit; the estimated seconds per step on the GPU the run goes at, for the ETA before the first step; the run's
    request as planned: with ``auto`` the chosen one, whose ``frozen_base_dtype`` is the LoRA base storage verl is
    then told, :func:`verlfit.overrides.build_overrides`).

    Raises:
        VerlfitError: sizes as given that verl 0.4.1 cannot run; the model's shape cannot be read; with ``auto``,
            nothing fits or verl cannot run the choice.
    """

    if not auto:
        reason = unsupported_reason(run.profile.rollout, settings.actor_param_offload)
        if reason:
            raise VerlfitError(
                f"verl 0.4.1 cannot run this configuration: {reason}", fix="use --offload optimizer", exit_code=2
            )
    request = request_from_settings(settings, run.profile, run.memory_bytes, switches=run.switches)
    inputs = inputs_for_train(settings, run.switches)
    if auto:
        lines, request = fit_request_for_train(settings, request, keep, margin, card=run.card, inputs=inputs)
    else:
        # sizes as given: say what the planner thinks of their plan
        lines = plan_off_lines(predict(request, margin))
    # timed on the run's card; under --emulate first on the card the run goes at, then on the emulated one
    running = run.goes_at
    estimated, seconds = step_time_lines(
        request, inputs, [running] + ([run.card] if run.card != running else []), steps, run.switches
    )
    return lines + (estimated if auto else []), seconds, request
