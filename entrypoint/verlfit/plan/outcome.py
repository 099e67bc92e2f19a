"""``verlfit plan``'s use case: from its typed options to a :class:`PlanOutcome` (:func:`make_plan`): the data
measured (:func:`verlfit.plan.request.measure_data`), the run resolved once
(:func:`verlfit.plan.request.resolve_plan_run`), the plan fitted (:func:`verlfit.plan.fit.auto_fit`, or
:func:`verlfit.plan.memory.predict` with ``--plan off``) and its time estimated on the run's card. Printing is
:mod:`verlfit.plan.render`'s; the command (:mod:`verlfit.commands.plan`) only parses, calls and prints."""

from __future__ import annotations

from dataclasses import dataclass

from verlfit.errors import VerlfitError
from verlfit.plan import time as plan_time
from verlfit.plan.fit import FitDecision, auto_fit
from verlfit.plan.memory import DEFAULT_MARGIN, Plan, predict
from verlfit.plan.request import (
    PlanOptions,
    measure_data,
    plan_keep,
    request_from_options,
    resolve_plan_run,
    time_inputs_for_options,
    time_report,
)


@dataclass(frozen=True)
class PlanOutcome:
    """What ``verlfit plan`` found for one set of options.

    Attributes:
        options: the options, with ``--data``'s measurements filled in.
        plan: the chosen configuration's plan (bytes per phase, verdict).
        decision: auto-fit's decision; None with ``--plan off``.
        memory_source: where the usable memory came from (``"emulating p40: 22.5 GiB usable"``).
        kept: what ``--plan auto`` was told not to change.
        timing: the time estimate on the run's card (seconds per phase and step).
        steps: the run's steps when known (``--steps``, or ``--dataset-size`` and ``--epochs``), else None.
        switches: the patch switches the estimate used.
        card_source: the card the time is estimated on, and why that card.
        notes: the lines about lengths and data (``"note: ..."`` where verlfit train says the same).
    """

    options: PlanOptions
    plan: Plan
    decision: FitDecision | None
    memory_source: str
    kept: list[str]
    timing: plan_time.StepEstimate
    steps: int | None
    switches: plan_time.TimeInputs
    card_source: str
    notes: tuple[str, ...]

    @property
    def exit_status(self) -> int:
        """0 only for "fits" (within the margin: what verlfit train's planner accepts); "tight" (above the margin,
        within the card), "does not fit" and "unsupported" are 1, with or without auto-fit."""
        if self.decision is not None and not self.decision.fits:
            return 1
        return 0 if self.plan.verdict == "fits" else 1


def make_plan(options: PlanOptions, nvml=None) -> PlanOutcome:
    """Plan one run as ``verlfit plan`` does (``nvml``: passed to :func:`verlfit.gpu.query_gpus`, a fake in tests).

    Raises:
        VerlfitError (exit status 2): ``--margin`` outside (0, 1]; what :func:`measure_data`,
            :func:`resolve_plan_run` and :func:`request_from_options` refuse.
    """
    if not 0 < options.margin <= 1:
        raise VerlfitError(
            f"--margin {options.margin:g} must be in (0, 1]: it is the fraction of the usable memory a plan may fill",
            fix=f"pass a fraction such as --margin {DEFAULT_MARGIN:g} (the default) or leave it out",
            exit_code=2,
        )
    options, data_notes = measure_data(options)
    run = resolve_plan_run(options, nvml)  # the profile, the card (NVML asked once) and the switches
    request, source = request_from_options(options, run=run)
    kept = plan_keep(options)  # what --plan auto keeps, as in verlfit train
    decision = None
    if options.sizing.plan == "auto":  # the fastest of what fits, by the estimate for the card the time is estimated on
        decision = auto_fit(
            request, margin=options.margin, keep=kept, card=run.card, inputs=time_inputs_for_options(options, run)
        )
    plan = decision.plan if decision else predict(request, margin=options.margin)
    timing, steps, switches = time_report(options, plan.request, run)
    notes = data_notes + plan_time.length_notes(options, plan.request, switches)
    if options.steps is not None and options.epochs is not None:  # as verlfit train says it
        notes.append(
            f"note: --steps {options.steps} and --epochs {options.epochs}: --steps wins: the run's time is "
            f"of {options.steps} steps (--epochs counts only without --steps)"
        )
    return PlanOutcome(options, plan, decision, source, kept, timing, steps, switches, run.card_source, tuple(notes))
