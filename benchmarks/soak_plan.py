"""Interruption plans of issue 17's soak and fault stages, and their events file (pure functions and the file format).

A plan is words ``ACTION@STEP``: ``sigint@150 sigkill@300`` (the default of stage soak_ppo) stops the run with Ctrl-C's
SIGINT once step 150 is recorded in metrics.jsonl, resumes it, and kills every process of it with SIGKILL once step
300 is recorded (a power cut), then resumes again. Actions: ``sigint`` (to the ``verlfit train`` process only, as a
terminal's Ctrl-C reaches it: verl runs in its own session), ``sigkill`` (the whole run at once,
``process_tree.kill_run``), ``kill-worker`` (SIGKILL one Ray WorkerDict process; verlfit is left to notice).

The events file (``$RUNS/NAME.events``) has one tab-separated line per event, appended as it happens, so a later
device call knows what was done: ``TIME EVENT STEP EXIT_SECONDS STATUS NOTE`` (ISO time; the plan word, or
``deadline sigint``, ``exit`` for a run that ended without an action, ``finished``; the highest step recorded at the
event; seconds from the signal until ``verlfit train`` exited; its exit status, negative for a signal; the last
line verlfit printed, ``-`` when none).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

ACTIONS = ("sigint", "sigkill", "kill-worker")
FIELDS = ("time", "event", "step", "exit_seconds", "status", "note")


class PlanError(ValueError):
    """A plan word that is not ACTION@STEP with a known action and a step from 1."""


@dataclasses.dataclass(frozen=True)
class PlanItem:
    action: str
    step: int

    @property
    def label(self) -> str:
        """The plan word, as the events file records it: ``sigint@150``."""
        return f"{self.action}@{self.step}"


def parse_plan(text: str) -> list[PlanItem]:
    """``"sigint@150 sigkill@300"`` -> the items in order of step; ``""`` or ``"none"`` -> ``[]``.

    Raises:
        PlanError: a word without ``@``, an unknown action, a step that is not a whole number from 1, two items at
            one step.
    """
    items = []
    for word in text.split():
        if word == "none":
            continue
        action, at, step = word.partition("@")
        if not at or action not in ACTIONS or not step.isdigit() or int(step) < 1:
            raise PlanError(
                f"plan word {word!r} is not ACTION@STEP with ACTION one of {', '.join(ACTIONS)} and STEP a whole number"
                " from 1 (e.g. sigint@150)"
            )
        items.append(PlanItem(action, int(step)))
    steps = [item.step for item in items]
    if len(set(steps)) != len(steps):
        raise PlanError(f"plan {text!r} has two actions at one step")
    return sorted(items, key=lambda item: item.step)


def read_events(path: str | Path) -> list[dict]:
    """The events file's lines as dicts of :data:`FIELDS` (``step`` and ``status`` ints, ``exit_seconds`` float or
    None); ``[]`` when there is no file. A line with fewer fields (cut by a kill) is skipped."""
    path = Path(path)
    if not path.is_file():
        return []
    events = []
    for line in path.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) < len(FIELDS):
            continue
        record = dict(zip(FIELDS, parts[: len(FIELDS)]))
        try:
            record["step"] = int(record["step"])
            record["status"] = int(record["status"]) if record["status"] != "-" else None
            record["exit_seconds"] = float(record["exit_seconds"]) if record["exit_seconds"] != "-" else None
        except ValueError:
            continue
        events.append(record)
    return events


def format_event(
    event: str, step: int, exit_seconds: float | None, status: int | None, note: str | None, now: float | None = None
) -> str:
    """One events-file line (with its newline); tabs and newlines in ``note`` become spaces."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now))
    clean = " ".join((note or "").split()) or "-"
    return (
        "\t".join(
            [
                stamp,
                event,
                str(step),
                "-" if exit_seconds is None else f"{exit_seconds:.1f}",
                "-" if status is None else str(status),
                clean,
            ]
        )
        + "\n"
    )


def next_item(plan: list[PlanItem], events: list[dict]) -> PlanItem | None:
    """The first plan item whose label no event records yet; None when all are done."""
    done = {event["event"] for event in events}
    return next((item for item in plan if item.label not in done), None)


def next_step_action(
    plan: list[PlanItem], events: list[dict], highest_step: int, total: int, run_exists: bool
) -> tuple[str, PlanItem | None]:
    """What a soak stage does next: ``("finished", None)`` when ``highest_step`` >= ``total``; ``("stopped", None)``
    when the last event is ``exit`` (the run ended by itself, not at an action: a failure a relaunch would repeat;
    the lead looks first); else ``("resume" if run_exists else "start", the pending item or None)``."""
    if highest_step >= total:
        return "finished", None
    if events and events[-1]["event"] == "exit":
        return "stopped", None
    return ("resume" if run_exists else "start"), next_item(plan, events)
