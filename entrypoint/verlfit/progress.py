"""A compact view of a running verl job, fed one output line at a time.

``verlfit train`` runs ``python -m verl.trainer.main_ppo`` with stdout and stderr merged and hands every
line to a :class:`StepWatcher`::

    metrics = MetricsWriter(run_dir, resume_step)  # metrics.jsonl, a resume's records after its checkpoint dropped
    with StepWatcher(run_dir, total_steps=run["total_steps"], metrics=metrics) as watcher:
        for line in process.stdout:          # text mode, or bytes: both are accepted
            watcher.feed(line)
    # watcher.last_step, watcher.finished, watcher.tail_lines for the exit message

The watcher

* appends every line to the full log ``run_dir/train.log`` (flushed line by line);
* turns verl's step lines into records appended to ``run_dir/metrics.jsonl`` through the
  :class:`verlfit.metrics.MetricsWriter` it is handed (fsync-ed each, see :mod:`verlfit.metrics`), each with ``time``
  (Unix seconds) added;
* shows step / total, step time, tokens per second, ETA, reward mean (``critic/score/mean``), KL
  (``actor/kl_loss``, else ``actor/reward_kl_penalty``, else ``actor/ppo_kl``), peak memory, and the
  validation score when there is one, and the updates fp16 loss scaling skipped in the step when there are any
  (:func:`skipped_updates_text`): on a terminal a ``rich`` live bar under one permanent line per step,
  otherwise (compose logs, CI, a pipe) just the plain line per step, e.g.::

      step 3/10 | 43.3 s/step | 121 tok/s | ETA 5m01s | score 0.188 | ppo_kl 0.000 | mem 13.0 GiB (22.4 reserved)

ETA = mean ``timing_s/step`` of the steps finished since the watcher started x steps left (before the first step:
the time model's estimate, ``initial_step_seconds``, when ``verlfit train`` could make one).

A resumed run (``resume_step``: the checkpoint verl continues from) first drops the records after that step from
``metrics.jsonl``: the :class:`verlfit.metrics.MetricsWriter` opened for it does, before the watcher is made
(:func:`verlfit.metrics.drop_after_checkpoint`): verl trains those steps again, so each step ends up recorded once.

**Stalls.** :meth:`StepWatcher.check_stall`, called every few seconds by ``verlfit train`` whether or not verl
printed anything, reports a stall when no step (or validation record) has finished for longer than the limit:
``--stall-timeout`` when given, else :data:`STALL_FACTOR` x the longest step of this session (before the first
one, the time model's estimate), at least :data:`STALL_MINIMUM_S`; either way plus :data:`STARTUP_ALLOWANCE_S`
before the first record (Ray start, model loading and the initial validation come first: a ``--stall-timeout 60``
counts its 60 s only from the first record on, so it does not stop a run during model loading). These are verlfit's
choices, not measurements: a validation step and a checkpoint save are part of ``timing_s/step`` and take a few times a
plain step (``tests/data/verl_logs``: 108 s against 44 s), so 5x leaves room for both without waiting hours.

The stall message names the phase verl last entered, as far as its output tells: verl 0.4.1 prints nothing between
a step's phases (rollout, log-probs, values, updates: ``ray_trainer.py:979-1130`` only time them), so the phases
that can be named are the ones it announces (:data:`PHASE_SIGNALS`: model loading, checkpoint loading, validation
generation and scoring, a checkpoint save, and a Ray worker method named in a traceback); otherwise "step N: the
rollout, log-prob passes and updates" since the last finished step. The message also quotes verl's last line and
how long ago it came. Only with ``stall_timeout`` set does :attr:`StepWatcher.stop_requested` turn on, and
``verlfit train`` then stops verl as on Ctrl-C and records the run as stalled.

**A failed write.** When appending to ``train.log`` or ``metrics.jsonl`` fails (``OSError``: a full disk,
``ENOSPC``, is the one seen, on a run directory that filled during a checkpoint save), the watcher stops writing
that file, says so once (the file, the error, and for a full disk the free bytes ``shutil.disk_usage`` reports), and
goes on: step lines still show, and :attr:`StepWatcher.log_lines` keeps verl's last :data:`DIAGNOSIS_LINES` lines in
memory for the diagnosis (:func:`verlfit.train.supervise.report_failure`), so verlfit keeps reading verl's output, waits
for it and explains the failure instead of stopping with a traceback while verl runs on.
"""

from __future__ import annotations

import collections
import errno
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TextIO

from verlfit.durations import format_duration
from verlfit.failure import PHASE_WORDS, WORKER_METHOD_PHASES
from verlfit.metrics import MetricsWriter, VerlConsoleParser, clean_line, is_training_record
from verlfit.run_files import LOG_FILE

REWARD_KEY = "critic/score/mean"
KL_KEYS = ("actor/kl_loss", "actor/reward_kl_penalty", "actor/ppo_kl")
LOSS_SCALED_ROLES = (
    "actor",
    "critic",
)  # patch 0024's metrics {role}/skipped_updates and {role}/loss_scale (fp16 profiles)

STALL_FACTOR = 5  # x the longest step so far (or the estimate): verlfit's choice, see the module docstring
STALL_MINIMUM_S = 600.0
STARTUP_ALLOWANCE_S = 1800.0  # added before the first record: Ray start, model loading, initial validation
DIAGNOSIS_LINES = (
    4000  # verl's last lines kept in memory for verlfit.failure.diagnose (what report_failure reads of train.log)
)

# verl 0.4.1's lines that announce a phase (text after the Ray prefix) -> the phase; "{next}" is the step in progress
PHASE_SIGNALS: tuple[tuple[re.Pattern, str], ...] = (
    (
        re.compile(r"^Total training steps: \d+"),
        "model loading (the Ray workers build the models)",
    ),  # ray_trainer.py:536, before init_workers
    (re.compile(r"^Load from checkpoint folder: "), "loading the checkpoint"),  # ray_trainer.py:868
    (
        re.compile(r"^(?:Training from scratch|Resuming from )"),
        "step {next}: the rollout, log-prob passes and updates",
    ),  # ray_trainer.py:858, 873
    (
        re.compile(r"^test_gen_batch meta info: "),
        "validation: generating answers to the test prompts",
    ),  # ray_trainer.py:646
    (re.compile(r"^validation generation end"), "validation: scoring the answers"),  # ray_trainer.py:659
    (re.compile(r"^local_global_step_folder: "), "the checkpoint save of step {next}"),  # ray_trainer.py:812
)
_SETTING_STEP = re.compile(r"^Setting global step to (\d+)")  # ray_trainer.py:872, a resume
_WORKER_METHOD = re.compile(r"ray::WorkerDict\.(\w+)\(")


@dataclass(frozen=True)
class Stall:
    """No step has finished for longer than the limit.

    Attributes:
        seconds: since the last record (a finished step or validation), or since the watcher started.
        limit: the limit in seconds; ``limit_source`` says where it came from.
        next_step: the step in progress.
        phase: the phase verl last entered (see the module docstring); ``phase_seconds`` ago.
        last_line: verl's last line (ANSI-stripped, Ray prefix off), ``last_line_seconds`` ago; None before any.
        stopping: verlfit stops verl for it (``--stall-timeout`` given).
    """

    seconds: float
    limit: float
    limit_source: str
    next_step: int
    phase: str
    phase_seconds: float
    last_line: str | None
    last_line_seconds: float | None
    stopping: bool

    def message(self) -> str:
        text = (
            f"no step has finished for {format_duration(self.seconds)} "
            f"(limit {format_duration(self.limit)}: {self.limit_source}); step {self.next_step} is in progress; "
            f"verl last entered {self.phase} {format_duration(self.phase_seconds)} ago"
        )
        if self.last_line is not None:
            text += f"; its last line, {format_duration(self.last_line_seconds)} ago: {self.last_line[:160]!r}"
        return text + (
            "; stopping verl (--stall-timeout)"
            if self.stopping
            else "; not stopped (verlfit train --stall-timeout SECONDS stops a stalled run)"
        )


def validation_score(record: dict) -> float | None:
    """The first ``val-core/...`` value of a record (the mean score on the first validation set), or None."""
    return next((value for name, value in record.items() if name.startswith("val-core/")), None)


def tokens_per_second(record: dict) -> float | None:
    """All tokens of the step over its time (``perf/throughput`` is the same per GPU)."""
    tokens, seconds = record.get("perf/total_num_tokens"), record.get("timing_s/step")
    if tokens is not None and seconds:
        return tokens / seconds
    return record.get("perf/throughput")


def skipped_updates_text(record: dict) -> str | None:
    """What patch 0024's dynamic loss scaling skipped in this step, e.g. ``"skipped updates (fp16 overflow): actor 1;
    loss scale actor 32768"``; None when the record has no skipped update (or no loss scaling: fp32 and bf16 runs)."""
    skipped = {role: record.get(f"{role}/skipped_updates", 0) for role in LOSS_SCALED_ROLES}
    roles = [role for role, count in skipped.items() if count > 0]
    if not roles:
        return None
    scales = [f"{role} {record[f'{role}/loss_scale']:g}" for role in roles if f"{role}/loss_scale" in record]
    return f"skipped updates (fp16 overflow): {', '.join(f'{role} {skipped[role]:g}' for role in roles)}" + (
        f"; loss scale {', '.join(scales)}" if scales else ""
    )


def format_step_line(record: dict, total_steps: int | None, eta_seconds: float | None) -> str:
    """The one-line summary of a record, as printed when the output is not a terminal.

    Fields the record lacks are left out. A validation-only record (step 0, or the resume step) shows
    just the step and ``val``; the final record (``finished``) says so.
    """
    total = "?" if total_steps is None else str(total_steps)
    head = f"step {record['step']}/{total}"
    if record.get("finished"):
        head = f"finished at {head}"
    parts = [head]
    if is_training_record(record):
        parts.append(f"{record['timing_s/step']:.1f} s/step")
        tok = tokens_per_second(record)
        if tok is not None:
            parts.append(f"{tok:.0f} tok/s")
        if eta_seconds is not None:
            parts.append(f"ETA {format_duration(eta_seconds)}")
        if REWARD_KEY in record:
            parts.append(f"score {record[REWARD_KEY]:.3f}")
        kl = next((key for key in KL_KEYS if key in record), None)
        if kl:
            parts.append(f"{kl.split('/', 1)[1]} {record[kl]:.3f}")
        skipped = skipped_updates_text(record)
        if skipped:
            parts.append(skipped)
    val = validation_score(record)
    if val is not None:
        parts.append(f"val {val:.3f}")
    if "perf/max_memory_allocated_gb" in record:
        mem = f"mem {record['perf/max_memory_allocated_gb']:.1f} GiB"
        if "perf/max_memory_reserved_gb" in record:
            mem += f" ({record['perf/max_memory_reserved_gb']:.1f} reserved)"
        parts.append(mem)
    return " | ".join(parts)


class StepWatcher:
    """Log, record and display a verl run from its output lines.

    Args:
        run_dir: the run directory; ``train.log`` and ``metrics.jsonl`` are appended to (a resumed run
            continues both).
        total_steps: the run's ``trainer.total_training_steps``; ``None`` takes verl's
            ``Total training steps: N`` line.
        stream: where the display goes (default ``sys.stdout`` at construction).
        tty: force the live display (``True``) or plain lines (``False``); ``None`` asks ``stream.isatty()``.
        log_path: the full log (default ``run_dir/train.log``).
        verbose: also echo every verl line to ``stream``.
        clock: wall-clock source for the records' ``time`` (tests pass a fake).
        initial_step_seconds: an estimated step time (``verlfit.plan.time``) the ETA uses until a step is done,
            and the stall limit too.
        resume_step: the checkpoint step a resumed verl run continues from (the stall message's step in progress
            counts from it). None: a new run.
        stall_timeout: seconds without a finished step after which verl is to be stopped (``--stall-timeout``),
            plus :data:`STARTUP_ALLOWANCE_S` before the first record; None or 0: the derived limit, and a stall is
            only reported.
        monotonic: the clock of the stall limit, in seconds (tests pass a fake).
        metrics: where the records go: ``run_dir/metrics.jsonl`` opened by its caller
            (``MetricsWriter(run_dir, resume_step)``: a resume's records after its checkpoint dropped first); the
            watcher writes it and closes it (:meth:`close`).

    Attributes:
        last_step: step of the last record, or ``None`` before the first.
        finished: verl printed its final line (the run's last step is done).
        tail_lines: the last 200 lines, ANSI-stripped, for an error message when verl fails.
        log_lines: the last :data:`DIAGNOSIS_LINES` lines of this session, ANSI-stripped, for the diagnosis
            (:func:`verlfit.failure.diagnose`); kept whether or not ``train.log`` could be written.
        log_error: the ``OSError`` that stopped the writing of ``train.log`` (the file is incomplete from there on),
            None while it is written.
        metrics_error: the same for ``metrics.jsonl``.
        phase: the phase verl last entered, as its output tells (module docstring).
        stall: the current :class:`Stall`, or None while steps finish.
        stop_requested: a stall passed ``stall_timeout``: the caller should stop verl.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        total_steps: int | None = None,
        stream: TextIO | None = None,
        tty: bool | None = None,
        log_path: str | os.PathLike | None = None,
        verbose: bool = False,
        clock: Callable[[], float] = time.time,
        initial_step_seconds: float | None = None,
        resume_step: int | None = None,
        stall_timeout: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        *,
        metrics: MetricsWriter,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.total_steps = total_steps
        self.stream = stream if stream is not None else sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)()) if tty is None else tty
        self.log_path = Path(log_path) if log_path is not None else self.run_dir / LOG_FILE
        self.verbose = verbose
        self.clock = clock
        self.initial_step_seconds = initial_step_seconds
        self.parser = VerlConsoleParser()
        self.tail_lines: collections.deque[str] = collections.deque(maxlen=200)
        self.log_lines: collections.deque[str] = collections.deque(maxlen=DIAGNOSIS_LINES)
        self.log_error: OSError | None = None
        self.metrics_error: OSError | None = None
        self.last_step: int | None = None
        self.last_training: dict | None = None
        self.step_times: list[float] = []
        self.stall_timeout = stall_timeout or None
        self.monotonic = monotonic
        self._base_step = resume_step or 0  # the step verl starts after (a resume's checkpoint)
        self._progress_at = self._line_at = self._phase_at = monotonic()
        self._seen_record = False
        self._last_text: str | None = None
        self.phase = "startup (Ray and the workers starting)"
        self.stall: Stall | None = None
        self.stop_requested = False
        self._log = open(self.log_path, "a", encoding="utf-8", errors="replace", buffering=1)
        self._writer = metrics
        self._live = None
        self._closed = False
        if self.tty:
            self._start_live()

    @property
    def finished(self) -> bool:
        return self.parser.finished

    def eta_seconds(self) -> float | None:
        """Mean step time of the steps finished so far x steps left; before the first step, the initial
        estimate x all steps (``initial_step_seconds``); None when unknown."""
        total = self.total_steps if self.total_steps is not None else self.parser.total_steps
        if total is not None and not self.step_times and self.initial_step_seconds is not None:
            return self.initial_step_seconds * max(0, total - (self.last_step or 0))
        if total is None or not self.step_times or self.last_step is None:
            return None
        return sum(self.step_times) / len(self.step_times) * max(0, total - self.last_step)

    def feed(self, line: str | bytes) -> list[dict]:
        """Take one line of verl's output; return the records it completed (already written)."""
        if self._closed:
            raise ValueError("StepWatcher is closed")
        if isinstance(line, bytes):
            line = line.decode("utf-8", errors="replace")
        if self.log_error is None:
            try:
                self._log.write(line if line.endswith("\n") else line + "\n")
            except OSError as error:
                self.log_error = error
                self._abandon(
                    self._log,
                    self.log_path,
                    error,
                    f"verlfit stops writing it and keeps verl's last {DIAGNOSIS_LINES} lines in memory for the "
                    "diagnosis",
                )
        _, text = clean_line(line)
        self.tail_lines.append(text)
        self.log_lines.append(text)
        now = self.monotonic()
        if text.strip():
            self._last_text, self._line_at = text, now
        if self.verbose:
            self._echo(text)
        self._follow_phase(text, now)
        records = self.parser.feed(line)
        if self.total_steps is None and self.parser.total_steps is not None:
            self.total_steps = self.parser.total_steps
        for record in records:
            self.last_step = record["step"]
            if is_training_record(record):
                self.step_times.append(record["timing_s/step"])
                self.last_training = record
            step_line = format_step_line(record, self.total_steps, self.eta_seconds())
            if self.metrics_error is None:
                try:
                    self._writer.write({**record, "time": self.clock()})
                except OSError as error:
                    self.metrics_error = error
                    self._abandon(
                        self._writer,
                        self._writer.path,
                        error,
                        f"the records of step {record['step']} on are not in it; the steps still show here",
                    )
            self._echo(step_line)
            if self.stall is not None:
                self._echo(
                    f"verlfit: step {record['step']} finished after {format_duration(now - self._progress_at)} "
                    "without one: the stall is over"
                )
            self._progress_at, self._seen_record, self.stall = now, True, None
            self._base_step = record["step"]
            self._enter(f"step {record['step'] + 1}: the rollout, log-prob passes and updates", now)
        if records and self._live is not None:
            self._live.refresh()  # other lines show at the next automatic refresh (twice a second)
        return records

    # stalls --------------------------------------------------------------------------------------

    def _enter(self, phase: str, now: float) -> None:
        if phase != self.phase:
            self.phase, self._phase_at = phase, now

    def _follow_phase(self, text: str, now: float) -> None:
        setting = _SETTING_STEP.match(text)
        if setting:
            self._base_step = int(setting.group(1))
        method = _WORKER_METHOD.search(text)
        if method:
            name = method.group(1)
            self._enter(f"{PHASE_WORDS.get(WORKER_METHOD_PHASES.get(name), 'a worker call')} (verl's {name})", now)
            return
        for pattern, phase in PHASE_SIGNALS:
            if pattern.match(text):
                self._enter(phase.format(next=self._base_step + 1), now)
                return

    def stall_limit(self) -> tuple[float, str]:
        """(seconds without a finished step that make a stall, where that number comes from)."""
        if self.stall_timeout:
            limit, source = self.stall_timeout, f"--stall-timeout {self.stall_timeout:g}"
        else:
            limit, source = self._derived_limit()
        if not self._seen_record:
            limit += STARTUP_ALLOWANCE_S
            source += f", + {format_duration(STARTUP_ALLOWANCE_S)} for startup before the first record"
        return limit, source

    def _derived_limit(self) -> tuple[float, str]:
        measured = max(self.step_times) if self.step_times else None
        reference = measured if measured is not None else self.initial_step_seconds
        if reference:
            what = (
                f"the longest step so far, {format_duration(reference)}"
                if measured is not None
                else f"the estimated step, {format_duration(reference)}"
            )
            limit, source = (
                max(STALL_MINIMUM_S, STALL_FACTOR * reference),
                f"{STALL_FACTOR} x {what}, at least {format_duration(STALL_MINIMUM_S)}",
            )
        else:
            limit, source = STALL_MINIMUM_S, f"no step time known: {format_duration(STALL_MINIMUM_S)}"
        return limit, source

    def check_stall(self) -> Stall | None:
        """The current :class:`Stall`, or None while steps finish within the limit. The first time a stall is
        seen, its message is shown, and with ``stall_timeout`` :attr:`stop_requested` turns on. Call it every
        few seconds: it reads only the clock."""
        if self._closed or self.finished:
            return None
        now = self.monotonic()
        limit, source = self.stall_limit()
        seconds = now - self._progress_at
        if seconds < limit:
            return None
        first = self.stall is None
        self.stall = Stall(
            seconds,
            limit,
            source,
            self._base_step + 1,
            self.phase,
            now - self._phase_at,
            self._last_text,
            None if self._last_text is None else now - self._line_at,
            bool(self.stall_timeout),
        )
        if first:
            self._echo("verlfit: " + self.stall.message())
            self.stop_requested = bool(self.stall_timeout)
        return self.stall

    def close(self) -> None:
        """Stop the display and close the log and metrics files (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._live is not None:
            self._live.stop()
        for file, path, kept, failed in (
            (self._log, self.log_path, "its last lines are lost", "log_error"),
            (self._writer, self._writer.path, "its last record may be cut", "metrics_error"),
        ):
            if getattr(self, failed) is None:
                try:
                    file.close()  # flushes: the disk can fill between the last line and this
                except OSError as error:
                    setattr(self, failed, error)
                    self._abandon(file, path, error, kept)

    def _abandon(self, file, path: Path, error: OSError, kept: str) -> None:
        """Stop writing ``file`` after ``error``: say so once, with the free space when the disk is full, and close it
        (its unwritten buffer is dropped: closing flushes it, which fails again)."""
        if error.errno == errno.ENOSPC:
            try:
                free = f"{shutil.disk_usage(path.parent).free} bytes free in {path.parent}"
            except OSError as usage_error:
                free = f"free space in {path.parent} unknown: {usage_error}"
            why = f"the disk is full ({error.strerror or os.strerror(error.errno)}; {free})"
        else:
            why = f"writing it failed ({error})"
        self._echo(f"verlfit: {path} is incomplete from here on: {why}; {kept}")
        try:
            file.close()
        except OSError:
            pass  # the same failure again, already reported: the file descriptor is closed all the same

    def __enter__(self) -> "StepWatcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # display -----------------------------------------------------------------------------------

    def say(self, text: str) -> None:
        """Print one line of verlfit's own (not verl's) above the progress display; it is not written to train.log."""
        self._echo(text)

    def _echo(self, text: str) -> None:
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def _start_live(self) -> None:
        from rich.console import Console  # lazy: only for the live progress display on a terminal
        from rich.live import Live  # lazy: only for the live progress display on a terminal

        console = Console(file=self.stream, force_terminal=True)
        self._live = Live(
            _LiveView(self),
            console=console,
            refresh_per_second=2,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()


class _LiveView:
    """What the rich live area shows: a bar with step / total and ETA, then the latest verl line."""

    def __init__(self, watcher: StepWatcher) -> None:
        self.watcher = watcher
        self.started = time.monotonic()

    def __rich__(self):
        from rich.console import Group  # lazy: only for the live progress display on a terminal
        from rich.progress_bar import ProgressBar  # lazy: only for the live progress display on a terminal
        from rich.table import Table  # lazy: only for the live progress display on a terminal
        from rich.text import Text  # lazy: only for the live progress display on a terminal

        w = self.watcher
        done = w.last_step or 0
        bar = (
            ProgressBar(total=w.total_steps, completed=done, width=30)
            if w.total_steps
            else ProgressBar(total=None, width=30)
        )
        eta = w.eta_seconds()
        status = f"step {done}/{w.total_steps or '?'}  elapsed {format_duration(time.monotonic() - self.started)}"
        status += (
            f"  ETA {format_duration(eta)}"
            if eta is not None
            else ("  waiting for the first step" if not w.step_times else "")
        )
        if w.stall is not None:
            status += f"  STALLED: no step for {format_duration(w.stall.seconds)}, in {w.stall.phase}"
        row = Table.grid(padding=(0, 1))
        row.add_row(bar, Text(status))
        last = w.tail_lines[-1] if w.tail_lines else "starting verl"
        return Group(row, Text(last, style="dim", no_wrap=True, overflow="ellipsis"))
