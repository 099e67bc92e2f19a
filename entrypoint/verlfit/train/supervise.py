"""Running verl for ``verlfit train``: the process and its output watched (:func:`launch`: progress, stall,
checkpoints kept), its stop (Ctrl-C, ``--stall-timeout``: SIGINT, SIGTERM, SIGKILL) and, when it fails, the report
of why (:func:`report_failure`), recorded in ``run.json``.
"""

from __future__ import annotations

import queue
import shutil
import errno
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from verlfit import failure as failures
from verlfit.checkpoints import CheckpointKeeper, how_to_continue, latest_checkpoint, remove_cut_short
from verlfit.errors import VerlfitError
from verlfit.metrics import MetricsWriter
from verlfit.progress import StepWatcher
from verlfit.run_files import CHECKPOINTS_DIR, LOG_FILE
from verlfit.train.launch_plan import LaunchPlan, plan_request
from verlfit.train.run_directory import record_outcome

STALLED_STATUS = 124  # launch()'s status after --stall-timeout stopped verl (timeout(1)'s convention)


def launch(
    plan: LaunchPlan, run_dir: Path, stream=None, stall_timeout: float | None = None, poll_seconds: float = 5.0
) -> int:
    """Run verl, feeding every output line to the progress watcher; return verl's exit status.

    Ctrl-C sends SIGINT to verl's whole process group (verl's driver shuts its local Ray cluster
    down on exit), waits up to 60 s, then SIGTERM, then SIGKILL. A SIGTERM to verlfit itself (``docker stop``, which
    tini, the image's PID 1, passes on; systemd; Kubernetes) is handled the same way, within that grace: give the
    container at least 100 s (``docker run --stop-timeout 120``, compose's ``stop_grace_period: 2m``). Checkpoints are
    not damaged:
    verl writes ``latest_checkpointed_iteration.txt`` only after a checkpoint is complete.

    verl's output is read by a thread, so the watcher's stall check (:meth:`verlfit.progress.StepWatcher.check_stall`)
    runs every ``poll_seconds`` even when verl prints nothing. With ``stall_timeout`` (``--stall-timeout``, seconds)
    a stall stops verl the way Ctrl-C does, ``run.json`` records ``outcome`` ``{"status": "stalled", ...}`` and the
    status is :data:`STALLED_STATUS`. Checkpoints beyond ``--keep-checkpoints`` are removed before verl starts, each
    time verl's marker names a new step and when verl exits (:class:`verlfit.checkpoints.CheckpointKeeper`: verl prunes
    only its own session's saves, and leaves their ``data.pt``). A resumed run (``plan.resume_step``: the checkpoint
    its plan found) first drops the records after that checkpoint from ``metrics.jsonl``: verl trains those steps
    again (:func:`verlfit.metrics.drop_after_checkpoint`).

    When verl fails, the diagnosis (:func:`report_failure`) reads the watcher's in-memory copy of this session's last
    lines, so it works when ``train.log`` could not be written (a full disk: the watcher says so and goes on reading
    verl's output, :mod:`verlfit.progress`); the closing line then names the log as incomplete. An unexpected error in
    verlfit itself stops verl's process group before its traceback, so verl is never left running unwatched.
    """

    stream = stream or sys.stdout
    # VERLFIT_CONSOLE_FULL_PRECISION: patch 0008 prints exact metric values, so metrics.jsonl keeps them
    environment = {**os.environ, **plan.environment, "PYTHONUNBUFFERED": "1", "VERLFIT_CONSOLE_FULL_PRECISION": "1"}
    # metrics.jsonl, opened first: a resume's records after its checkpoint are dropped before verl trains them again
    metrics = MetricsWriter(run_dir, plan.resume_step)
    watcher = StepWatcher(
        run_dir,
        plan.total_steps,
        stream=stream,
        initial_step_seconds=plan.estimated_step_seconds,
        resume_step=plan.resume_step,
        stall_timeout=stall_timeout,
        metrics=metrics,
    )
    keeper = CheckpointKeeper(run_dir, plan.settings.keep_checkpoints, watcher.say)
    keeper.check(force=True)  # a resumed run: the checkpoints from before it, which verl will not prune
    # a verlfit started with SIGINT ignored (`nohup verlfit train &` from a shell without job control) would pass that
    # on through exec, and verl would ignore the SIGINT that stops it cleanly (_stop): a handled signal is reset to its
    # default by exec, an ignored one is not, so SIGINT is handled here while verl starts, then ignored again
    sigint_ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if sigint_ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(
            plan.command,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
    finally:
        if sigint_ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        try:
            for line in process.stdout:
                lines.put(line)
        finally:
            lines.put(None)  # end of output

    threading.Thread(target=read, daemon=True).start()
    previous_sigterm = _sigterm_as_ctrl_c()
    try:
        while True:
            try:
                line = lines.get(timeout=poll_seconds)
            except queue.Empty:
                line = ""
            if line is None:
                break
            if line:
                watcher.feed(line)
            watcher.check_stall()
            if watcher.stop_requested:  # verl is stopped first; its checkpoints are settled after, by the final check
                stall = watcher.stall
                _stop(process, lines, watcher)
                outcome = {
                    "status": "stalled",
                    "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "reason": "stall",
                    "seconds_without_a_step": round(stall.seconds, 1),
                    "limit_seconds": stall.limit,
                    "step": stall.next_step,
                    "phase": stall.phase,
                    "message": stall.message(),
                    "log_line": stall.last_line,
                }
                record_outcome(run_dir, outcome)
                print(
                    f"verlfit: stopped verl: {stall.message().removesuffix('; stopping verl (--stall-timeout)')}",
                    file=sys.stderr,
                )
                next_step = how_to_continue(run_dir, plan.settings.save_freq)
                print(f"verlfit: {next_step}", file=sys.stderr)
                return STALLED_STATUS
            keeper.check()
        status = process.wait()
        if status != 0 and not watcher.verbose:
            print("verlfit: the last lines verl printed:", file=sys.stderr)
            for line in list(watcher.tail_lines)[-40:]:
                print(f"  {line}", file=sys.stderr)
        if status not in (0, 130, -signal.SIGINT):
            report_failure(
                plan,
                run_dir,
                status,
                log_lines=list(watcher.log_lines),
                write_error=watcher.log_error or watcher.metrics_error,
            )
            log = (
                f"the full log is {watcher.log_path}"
                if watcher.log_error is None
                else f"the log {watcher.log_path} is incomplete (writing it failed: {watcher.log_error})"
            )
            print(f"verlfit: verl exited with status {status}; {log}", file=sys.stderr)
        return status
    except KeyboardInterrupt as interrupt:
        cause = (
            "SIGTERM (docker stop)" if str(interrupt) == f"signal {signal.SIGTERM}" else "Ctrl-C again is not needed"
        )
        print(f"\nverlfit: stopping verl ({cause}; waiting up to 60 s)", file=sys.stderr)
        _stop(process, lines, watcher)
        next_step = how_to_continue(run_dir, plan.settings.save_freq)
        print(f"verlfit: {next_step}", file=sys.stderr)
        return 130
    except Exception:
        print("verlfit: stopping verl after an error in verlfit itself (its traceback follows)", file=sys.stderr)
        _stop(process, lines, None)  # not fed to the watcher: it may be what failed
        raise
    finally:
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
        keeper.check(force=True)  # the last save (and a Ctrl-C's or failure's) is settled now
        watcher.close()


def _sigterm_as_ctrl_c():
    """Make SIGTERM raise KeyboardInterrupt, as Ctrl-C does, so ``docker stop`` gets the same clean stop; return the
    handler it replaced (None when not on the main thread, where Python allows no signal handler)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    return signal.signal(signal.SIGTERM, interrupt)


def _stop(process, lines, watcher) -> None:
    """Stop verl's process group: SIGINT, 60 s, SIGTERM, 30 s, SIGKILL; then feed its last words to the watcher
    (``watcher`` None: they are left unread)."""
    for sig, wait in ((signal.SIGINT, 60), (signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    if watcher is not None:
        _drain(lines, watcher, seconds=10)  # verl's last words go to train.log too


def report_failure(
    plan: LaunchPlan, run_dir: Path, status: int, log_lines: list[str] | None = None, write_error: OSError | None = None
) -> dict | None:
    """Say why verl stopped (verlfit.failure) and record it in ``run.json`` as ``outcome``; return that record.

    Reads the last 4000 lines of ``train.log`` unless ``log_lines`` is given. Nothing recognised: the outcome
    still says failed, with verl's exit status and reason None. The run directory is otherwise untouched, except
    that a checkpoint folder newer than verl's marker (a save the failure cut short: verl writes
    ``latest_checkpointed_iteration.txt`` after the save, ``ray_trainer.py:830-835``) is removed after a full disk,
    so the space it held is free again and ``--resume`` starts from the marker's step.

    ``write_error``: verlfit's own write into the run directory that failed during the run (the watcher's
    ``train.log`` or ``metrics.jsonl``). An ``ENOSPC`` there makes the diagnosis a full disk when verl's lines say
    nothing more specific (none recognised, or only dead workers: :func:`verlfit.failure.disk_full_seen_by_verlfit`);
    torch's own save error does not always name ``ENOSPC``. A ``run.json`` that cannot be written is said on stderr
    (:func:`record_outcome`).
    """

    if log_lines is None:
        log = run_dir / LOG_FILE
        log_lines = log.read_text(errors="replace").splitlines()[-4000:] if log.is_file() else []
    found = failures.diagnose(log_lines)
    if write_error is not None and write_error.errno == errno.ENOSPC and (found is None or found.kind == "worker_died"):
        found = failures.disk_full_seen_by_verlfit(log_lines, f"verlfit could not write to {run_dir}: {write_error}")
    outcome = {"status": "failed", "exit_status": status, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "reason": None}
    if found is not None:
        request = None
        try:
            request = plan_request(plan)
        except (VerlfitError, OSError, ValueError) as error:  # the explanation goes on without the planner's figures
            print(f"verlfit: (the planner could not size this run for the explanation: {error})", file=sys.stderr)
        step = latest_checkpoint(run_dir)
        free = path = None
        if found.kind == "disk_full":
            checkpoints = run_dir / CHECKPOINTS_DIR
            for partial in remove_cut_short(run_dir):
                print(
                    f"verlfit: removed {partial}: a checkpoint the full disk cut short (verl had not "
                    "marked it complete)",
                    file=sys.stderr,
                )
            path = str(checkpoints if checkpoints.is_dir() else run_dir)
            free = shutil.disk_usage(path).free
        message, fix = failures.explain(
            found,
            request,
            run_dir=shlex.quote(str(run_dir)),
            checkpoint_step=step,
            disk_free_bytes=free,
            disk_path=path,
        )
        print(f"verlfit: {message}\n  fix: {fix}", file=sys.stderr)
        outcome.update(
            reason=found.kind,
            phase=found.phase,
            worker_method=found.worker_method,
            message=message,
            fix=fix,
            log_line=found.detail,
        )
    record_outcome(run_dir, outcome)
    return outcome


def _drain(lines, watcher, seconds: float) -> None:
    """Feed what is left in ``lines`` (launch's queue of verl's output, None at its end) to ``watcher`` for at most
    ``seconds`` (a Ray process that outlives verl's driver can hold the pipe open, so waiting for the end could
    block forever)."""

    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            return
        if line is None:
            return
        watcher.feed(line)
