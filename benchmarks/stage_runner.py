"""How a stage of benchmarks/device_run.py runs on the device machine: the :class:`Device` (its paths, settings, log,
deadline and the processes every stage starts) and a training run as data, :class:`Run`, with :func:`start`,
:func:`run_all` and :func:`rows`, which run such rows. device_run.py holds the stages themselves (which runs, with which
words) and its command line; this module holds what every stage shares. Standard library only, and of verlfit
``run_files.load_run`` (run.json's one reader) and ``errors``, both standard library only themselves.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "entrypoint"))  # this checkout's verlfit.run_files: run.json's one reader

from verlfit.errors import VerlfitError  # noqa: E402 - both modules import nothing beyond the standard library
from verlfit.run_files import load_run  # noqa: E402

PYTHON = "python3"  # the stack's interpreter, looked up on PATH for every child
# the verl runs' own arguments when a stage measures something else than validation or checkpoints
CHECKS_OFF = ("--skip-checks", "--no-validate-before-train", "--test-freq", "-1")  # no doctor, no validation
COMMON = (*CHECKS_OFF, "--save-freq", "-1")  # ... and no checkpoint
KILL_AFTER_S = 20  # seconds between the SIGINT at a run's limit and the SIGKILL (benchmarks/soak_run.py uses the same)


def setting(name: str, default: str = "") -> str:
    """``${NAME:-default}``: the variable's value, or ``default`` when it is unset or empty."""
    return os.environ.get(name) or default


def words(text: str) -> tuple[str, ...]:
    """A variable holding verlfit words separated by spaces (no quoting: the words hold no spaces), as a tuple."""
    return tuple(text.split())


def last_lines(text: str, count: int) -> list[str]:
    """The last ``count`` lines of ``text`` (``tail -n COUNT``)."""
    return text.splitlines()[-count:] if count else []


def read_text(path: Path, default: str) -> str:
    """A small file's text without its trailing newline, or ``default`` when it is missing."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return default


def together(*jobs: Callable[[], object]) -> None:
    """Run ``jobs`` at once (threads: each starts its own processes) and wait for all; re-raise the first failure.

    Raises:
        Exception: the first exception a job raised, after every job has ended.
    """
    if not jobs:
        return
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = [pool.submit(job) for job in jobs]
    failures = [future.exception() for future in futures if future.exception() is not None]
    if failures:
        raise failures[0]


@dataclass(frozen=True)
class Stage:
    """One stage: its name on the command line, the function that runs it, its help text."""

    name: str
    run: Callable[[Device], None]
    help: str


class Device:
    """The paths and the process helpers every stage shares; built once from the environment (see ``--help``)."""

    def __init__(self, named_stages: list[str]):
        self.named_stages = named_stages  # setup makes the bigger models only for the stages that train them
        self.site = setting("VERLFIT_SITE")
        self.gsm8k_dir = Path(setting("GSM8K_DIR", ".device-stack/b/gsm8k"))
        self.work = Path(setting("WORK", str(Path.home() / "verlfit-bench" / "work")))
        self.runs = Path(setting("RUNS", str(Path.home() / "verlfit-bench" / "runs")))
        self.out = Path(setting("OUT", "/tmp/out"))
        self.model = self.work / "qwen2.5-0.5b-random"
        self.model_1p5b = self.work / "qwen2.5-1.5b-random"
        self.model_3b = self.work / "qwen2.5-3b-random"
        self.model_qwen3_0p6b = self.work / "qwen3-0.6b-random"
        self.model_qwen3_1p7b = self.work / "qwen3-1.7b-random"
        self.model_no_eos = self.work / "qwen3-0.6b-no-eos"
        self.tiny = self.work / "tiny"
        self.data = self.work / "gsm8k"
        self.own = self.work / "own"
        self.own_reward_file = REPO / "benchmarks" / "own_task_reward.py"
        # the own task's reward function: verlfit train checks it on the training rows before launch, copies it into
        # the run directory and records it in run.json (issue 26 phase B)
        self.own_reward = ("--reward-function", f"{self.own_reward_file}:compute_score")
        self._log_lock = threading.Lock()

    # -- output -----------------------------------------------------------------------------------------------------
    def log(self, message: str) -> None:
        """Print ``[HH:MM:SS] message`` and append it to ``$RUNS/stages.log``."""
        self.record([f"[{time.strftime('%H:%M:%S')}] {message}"])

    def record(self, lines: list[str], prefix: str = "") -> None:
        """Print ``lines`` (each after ``prefix``) and append them to ``$RUNS/stages.log`` (``| tee -a``)."""
        text = "".join(f"{prefix}{line}\n" for line in lines)
        with self._log_lock, open(self.runs / "stages.log", "a") as log:
            log.write(text)
            sys.stdout.write(text)
            sys.stdout.flush()

    def show(self, lines: list[str], prefix: str = "") -> None:
        """Print ``lines`` (each after ``prefix``) without recording them."""
        with self._log_lock:
            sys.stdout.write("".join(f"{prefix}{line}\n" for line in lines))
            sys.stdout.flush()

    def console_tail(self, path: Path, count: int) -> list[str]:
        """The last ``count`` lines of a console file (none when it is missing)."""
        return last_lines(path.read_text(errors="replace"), count) if path.exists() else []

    # -- processes --------------------------------------------------------------------------------------------------
    def run_limit(self) -> int:
        """Seconds a run may take: STAGE_TIMEOUT (default 3000), cut to what is left before DEADLINE, at least 5."""
        limit = int(setting("STAGE_TIMEOUT", "3000"))
        if setting("DEADLINE"):
            limit = min(limit, int(setting("DEADLINE")) - int(time.time()))
        return max(limit, 5)

    def command(
        self,
        argv: list[str],
        *,
        output: Path | None = None,
        append: bool = False,
        capture: bool = False,
        stdout_only: bool = False,
        environment: dict[str, str] | None = None,
        timed: bool = False,
        check: bool = False,
        stdin: str | None = None,
    ) -> subprocess.CompletedProcess:
        """Start one process and wait for it; the one place the runner starts processes.

        Args:
            argv: the command; ``python3`` is looked up on PATH.
            output: a file for stdout and stderr (``append``: added to its end); else they go to the runner's.
            capture: keep stdout and stderr together in the result's ``stdout`` (text).
            stdout_only: with ``capture``, keep stdout alone in the result's ``stdout``; stderr goes to the runner's
                (a value read from stdout, such as a path, then holds no warning the command printed).
            environment: variables set for this process only.
            timed: run it under :meth:`run_limit` (SIGINT at the limit, SIGKILL ``KILL_AFTER_S`` later).
            check: raise when it exits non-zero.
            stdin: text for its standard input.

        Returns the completed process; a command that is not installed has status 127, as in a shell.

        Raises:
            subprocess.CalledProcessError: ``check`` and a non-zero status.
        """
        if timed:
            argv = ["timeout", "-s", "INT", "-k", str(KILL_AFTER_S), str(self.run_limit()), *argv]
        env = {**os.environ, **(environment or {})}
        handle = open(output, "a" if append else "w") if output is not None else None
        try:
            stdout = handle if handle is not None else (subprocess.PIPE if capture else None)
            stderr = subprocess.STDOUT if (handle is not None or (capture and not stdout_only)) else None
            try:
                completed = subprocess.run(argv, stdout=stdout, stderr=stderr, env=env, text=True, input=stdin)
            except FileNotFoundError as missing:
                message = f"{argv[0]}: command not found ({missing.strerror})\n"
                if handle is not None:
                    handle.write(message)
                elif not capture:
                    sys.stderr.write(message)
                completed = subprocess.CompletedProcess(argv, 127, message if capture else None)
        finally:
            if handle is not None:
                handle.close()
        if check and completed.returncode != 0:
            raise subprocess.CalledProcessError(completed.returncode, argv, completed.stdout)
        return completed

    def verlfit(self, *arguments: str, **options) -> subprocess.CompletedProcess:
        """``python3 -m verlfit ARGUMENTS`` through :meth:`command` (same options)."""
        return self.command([PYTHON, "-m", "verlfit", *arguments], **options)

    def python(self, *arguments: str, **options) -> subprocess.CompletedProcess:
        """``python3 ARGUMENTS`` through :meth:`command` (same options)."""
        return self.command([PYTHON, *arguments], **options)

    @contextmanager
    def one_maker(self, name: str):
        """Hold ``$WORK/.NAME.lock`` (flock): one maker of a shared model or data set at a time, across stages."""
        self.work.mkdir(parents=True, exist_ok=True)
        with open(self.work / f".{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def train(self, name: str, *arguments: str, environment: dict[str, str] | None = None) -> None:
        """One ``verlfit train --run-dir $RUNS/NAME`` run; its status is logged, never raised."""
        self.log(f"start {name}: verlfit train {' '.join(arguments)}")
        start = time.monotonic()
        console = self.runs / f"{name}.console"
        status = self.verlfit(
            "train", "--run-dir", str(self.runs / name), *arguments, output=console, environment=environment, timed=True
        ).returncode
        self.log(f"end {name}: status {status} after {int(time.monotonic() - start)} s")
        self.show(self.console_tail(console, 5), f"  {name}| ")

    def resume(self, name: str, run: Path, *arguments: str, label: str) -> None:
        """``verlfit train --resume RUN ARGUMENTS``, its output appended to ``$RUNS/NAME.console``."""
        start = time.monotonic()
        console = self.runs / f"{name}.console"
        status = self.verlfit(
            "train", "--resume", str(run), *arguments, output=console, append=True, timed=True
        ).returncode
        self.log(f"end {label}: status {status} after {int(time.monotonic() - start)} s")
        self.show(self.console_tail(console, 5), f"  {name}| ")

    def train_or_resume(self, name: str, *arguments: str) -> None:
        """A new run, or ``verlfit train --resume`` of one a deadline cut short (its run.json is there).

        The stage's ``--steps`` is the run's total: a run that finished fewer is extended to it; one whose checkpoint
        already reaches it is left as it is (verlfit would refuse: it has finished).
        """
        run = self.runs / name
        if not (run / "run.json").is_file():
            self.train(name, *arguments)
            return
        steps = next((arguments[i + 1] for i in range(len(arguments) - 1) if arguments[i] == "--steps"), "")
        checkpoint = int(read_text(run / "checkpoints" / "latest_checkpointed_iteration.txt", "0"))
        if steps and checkpoint >= int(steps):
            self.log(f"{name}: finished (its checkpoint of step {checkpoint} reaches --steps {steps}): not resumed")
            return
        self.log(f"resume {name}: verlfit train --resume {run}{f' --steps {steps}' if steps else ''}")
        self.resume(name, run, *(("--steps", steps) if steps else ()), label=f"{name} resume")

    def make_model(self, shape: str, model: Path, *, output: Path | None = None, tokenizer: bool = True) -> int:
        """``benchmarks/make_model.py --shape SHAPE`` into ``model`` unless its config.json is there; the status."""
        if (model / "config.json").is_file():
            return 0
        arguments = ["benchmarks/make_model.py", "--shape", shape, "--output", str(model)]
        if tokenizer:
            arguments += ["--tokenizer-dir", str(self.model)]
        if setting("MODEL_DEVICE"):
            arguments += ["--device", setting("MODEL_DEVICE")]
        return self.python(*arguments, output=output).returncode

    def run_outcome(self, run: Path) -> str:
        """run.json's outcome as one JSON line (``null``: the run finished), or ``no RUN/run.json`` when there is no
        record to read (none, or one :func:`verlfit.run_files.load_run` refuses)."""
        try:
            return json.dumps(load_run(run).get("outcome"))
        except VerlfitError:
            return f"no {run}/run.json"

    def verlfit_diagnosis(self, name: str) -> None:
        """Log the last lines of verlfit's own diagnosis (``verlfit:`` and ``  fix:``) in ``$RUNS/NAME.console``."""
        lines = [
            line
            for line in self.console_tail(self.runs / f"{name}.console", 10**6)
            if line.startswith(("verlfit:", "  fix:"))
        ]
        self.record(lines[-8:], f"  {name}| ")


# -- a stage's runs as data -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    """One ``verlfit train`` run of a stage, as data; it builds its own command line, in one order for every stage::

        verlfit train --run-dir $RUNS/NAME PROFILE --model MODEL --data DATA --steps STEPS SIZES CHECKS EXTRA

    and, when ``plan`` is set, ``verlfit plan PLAN`` into ``$RUNS/NAME.plan`` before it (plan's words are its own: no
    data, no steps, no verl overrides, sometimes ``--auto-fit``). :func:`start` runs it.
    """

    name: str  # the run directory under $RUNS, and NAME.console, NAME.plan beside it
    model: Path
    data: Path
    steps: str  # --steps: the run's total (a resumed run is extended to it)
    profile: tuple[str, ...] = ("--emulate", "p40")  # the words before --model: the card, the algorithm, ...
    sizes: tuple[str, ...] = ()  # the words after --steps: batch sizes, lengths, adapter rank, learning rates
    checks: tuple[str, ...] = COMMON  # the words after the sizes: doctor, validation, checkpoints
    extra: tuple[str, ...] = ()  # the words after the checks: a reward function, more train words, verl overrides
    plan: tuple[str, ...] | None = None  # verlfit plan's words, planned first (NAME.plan); None: not planned
    resume: bool = False  # a run a deadline cut is resumed when its stage runs again (Device.train_or_resume)
    environment: tuple[tuple[str, str], ...] = ()  # (variable, value) set for this run alone
    after: Callable[[Device, str], None] | None = None  # what runs once it ended, given the run's name

    def arguments(self) -> tuple[str, ...]:
        """``verlfit train``'s words after ``--run-dir``."""
        place = ("--model", str(self.model), "--data", str(self.data), "--steps", self.steps)
        return (*self.profile, *place, *self.sizes, *self.checks, *self.extra)


def start(device: Device, run: Run) -> None:
    """One run: its plan (a failed plan is logged), its training (or the resume of a run a deadline cut), then
    ``run.after``; a failed run is logged, never raised (:meth:`Device.train`)."""
    if run.plan is not None:
        status = device.verlfit("plan", *run.plan, output=device.runs / f"{run.name}.plan").returncode
        if status:
            device.log(f"plan {run.name}: status {status}")
    if run.resume:
        device.train_or_resume(run.name, *run.arguments())
    else:
        device.train(run.name, *run.arguments(), environment=dict(run.environment))
    if run.after is not None:
        run.after(device, run.name)


def run_all(device: Device, runs: Iterable[Run], *, at_once: bool = False) -> None:
    """Start ``runs`` one after the other, each as it comes (a generator's log lines stay between the runs), or all
    at once (threads: each caps its own memory, each starts its own Ray instance)."""
    if at_once:
        together(*(partial(start, device, run) for run in runs))
    else:
        for run in runs:
            start(device, run)


def rows(describe: Callable[[Device], Iterable[Run]], *, at_once: bool = False) -> Callable[[Device], None]:
    """A stage made of runs: ``describe(device)`` makes what they need and gives them (from the settings), and
    :func:`run_all` runs them."""
    return lambda device: run_all(device, describe(device), at_once=at_once)


def overrides(keys: tuple[str, ...]) -> tuple[str, ...]:
    """verl overrides after ``--``, or no words at all when there is none."""
    return ("--", *keys) if keys else ()
