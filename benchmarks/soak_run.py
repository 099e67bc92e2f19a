"""Drive one verlfit run through an interruption plan, across device calls (issue 17: "a run that survives").

    python3 benchmarks/soak_run.py --runs RUNS --name soak-ppo --total 500 --plan "sigint@150 sigkill@300" \\
        [--deadline EPOCH] -- --model M --data D --steps 500 ...      # the words after -- go to `verlfit train`

Each pass: reads the highest training step of ``RUNS/NAME/metrics.jsonl`` and the events done
(``RUNS/NAME.events``, :mod:`soak_plan`); stops when the run reached ``--total`` (event ``finished``); else starts
``verlfit train --run-dir RUNS/NAME ARGS`` (no run directory yet) or ``verlfit train --resume RUNS/NAME``, its output
appended to ``RUNS/NAME.console``, and watches it: once the pending plan item's step is recorded (by this launch)
its action is taken, its event appended, and the next pass resumes the run. At ``--deadline`` (epoch seconds) the
run gets SIGINT, as device_run.py's train() gives it (event ``deadline sigint``), and the driver returns: the next
device call runs the stage again and it continues from the events file. A run that ends without an action short of
its total is recorded as ``exit`` and not relaunched (status 1).

Beside each launch a sampler appends every ``--sample-seconds`` (10) a line to ``RUNS/NAME.rss.csv``:
``time,step,verlfit_mib,driver_mib,workers_sum_mib,workers_max_mib,workers`` (unix seconds, highest step,
RSS in MiB of the verlfit process, of verl's driver, sum and max over the Ray WorkerDict processes, their count;
:func:`process_tree.rss_by_role`). Every action is logged to stdout and ``RUNS/stages.log`` (device_run.py's format).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(
    1, str(Path(__file__).resolve().parents[1] / "entrypoint")
)  # this checkout's verlfit, as device_run.py's PYTHONPATH
import process_tree  # noqa: E402
import soak_plan  # noqa: E402

RSS_HEADER = "time,step,verlfit_mib,driver_mib,workers_sum_mib,workers_max_mib,workers\n"
# verlfit's own stop: SIGINT to verl, 60 s, SIGTERM, 30 s, SIGKILL, 10 s, + 10 s drain
# (verlfit/train/supervise.py _stop)
SIGINT_WAIT_S = 240
DEADLINE_GRACE_S = 20  # as device_run.py's `timeout -k 20`: then the whole run is killed (no Ray left on the GPU)
WORKER_EXIT_WAIT_S = 600  # verl notices a dead actor at its next remote call (Ray's ActorDiedError)
MIN_LAUNCH_S = 60  # no launch this close to the deadline: Ray's start and the model's loading take about a minute


def latest_checkpoint(run_dir: Path) -> int | None:
    """verlfit's own answer (:func:`verlfit.checkpoints.latest_checkpoint`): the newest complete checkpoint's step."""
    from verlfit.checkpoints import latest_checkpoint as newest

    return newest(run_dir)


def highest_step(run_dir: Path, since: float | None = None) -> int:
    """The highest training step of ``run_dir/metrics.jsonl`` (0: none); with ``since`` (epoch seconds), 0 unless the
    file was written after it (a launch has not recorded a step yet: the old records are not its progress)."""
    from verlfit.metrics import is_training_record, read_metrics

    path = run_dir / "metrics.jsonl"
    if since is not None and (not path.is_file() or path.stat().st_mtime < since):
        return 0
    return max((record["step"] for record in read_metrics(run_dir) if is_training_record(record)), default=0)


class Driver:
    def __init__(
        self,
        runs: Path,
        name: str,
        total: int,
        plan: list,
        train_args: list[str],
        deadline: float | None,
        verlfit: list[str],
        poll_s: float = 2.0,
        sample_s: float = 10.0,
        sigint_wait_s: float = SIGINT_WAIT_S,
        worker_wait_s: float = WORKER_EXIT_WAIT_S,
        grace_s: float = DEADLINE_GRACE_S,
        min_launch_s: float = MIN_LAUNCH_S,
    ):
        self.runs, self.name, self.total, self.plan, self.train_args, self.deadline, self.verlfit = (
            runs,
            name,
            total,
            plan,
            train_args,
            deadline,
            verlfit,
        )
        self.poll_s, self.sample_s, self.sigint_wait_s, self.worker_wait_s, self.grace_s, self.min_launch_s = (
            poll_s,
            sample_s,
            sigint_wait_s,
            worker_wait_s,
            grace_s,
            min_launch_s,
        )
        self.run_dir = runs / name
        self.events_path = runs / f"{name}.events"
        self.console = runs / f"{name}.console"
        self.rss_path = runs / f"{name}.rss.csv"

    def log(self, message: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {self.name}: {message}"
        print(line, flush=True)
        with open(self.runs / "stages.log", "a") as handle:
            handle.write(line + "\n")

    def record(self, event: str, step: int, exit_seconds: float | None, status: int | None, note: str | None) -> None:
        with open(self.events_path, "a") as handle:
            handle.write(soak_plan.format_event(event, step, exit_seconds, status, note))
        self.log(
            f"event {event} at step {step}: exit after {'-' if exit_seconds is None else f'{exit_seconds:.1f} s'},"
            f" status {status}; last: {note or '-'}"
        )

    def _console_tail(self, offset: int, lines: int = 5) -> list[str]:
        with open(self.console, "rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace").splitlines()[-lines:]

    def _last_verlfit_line(self, offset: int) -> str | None:
        with open(self.console, "rb") as handle:
            handle.seek(offset)
            text = handle.read().decode(errors="replace").splitlines()
        # verlfit's diagnosis (verlfit/failure.py) comes before its closing "verl exited with status N; the full log is
        # ..."
        said = [
            line
            for line in text
            if line.startswith("verlfit:")
            and not line.startswith(("verlfit: verl exited with status", "verlfit: the last lines verl printed"))
        ]
        return said[-1] if said else None

    def _sample(self, pid: int, stop: threading.Event) -> None:
        while True:
            rss = process_tree.rss_by_role(pid)
            new = not self.rss_path.is_file()
            with open(self.rss_path, "a") as handle:
                if new:
                    handle.write(RSS_HEADER)
                handle.write(
                    f"{time.time():.0f},{highest_step(self.run_dir)},{rss['verlfit']:.1f},{rss['driver']:.1f},{rss['workers_sum']:.1f},{rss['workers_max']:.1f},{rss['workers']}\n"
                )
            if stop.wait(self.sample_s):
                return

    def _wait(self, process: subprocess.Popen, seconds: float) -> int | None:
        try:
            return process.wait(timeout=max(seconds, 0.1))
        except subprocess.TimeoutExpired:
            return None

    def _budget(self, seconds: float) -> float:
        """``seconds``, cut to what is left before the deadline (at least the deadline's grace): an action's wait
        must not outlast the device call."""
        if self.deadline is None:
            return seconds
        return min(seconds, max(self.deadline - time.time(), self.grace_s))

    def _kill(self, process: subprocess.Popen) -> int:
        killed = process_tree.kill_run(process.pid)
        self.log(f"SIGKILL to every process of the run: {len(killed)} ({' '.join(map(str, killed))})")
        return process.wait()

    def run(self) -> int:
        """Passes until the run is finished, stopped, or the deadline comes; 0 unless the run stopped by itself."""
        self.runs.mkdir(parents=True, exist_ok=True)
        while True:
            events = soak_plan.read_events(self.events_path)
            step = highest_step(self.run_dir)
            what, item = soak_plan.next_step_action(
                self.plan, events, step, self.total, (self.run_dir / "run.json").is_file()
            )
            if what == "finished":
                if not any(event["event"] == "finished" for event in events):
                    self.record("finished", step, None, None, None)
                self.log(f"finished: step {step} of {self.total} recorded")
                return 0
            if what == "stopped":
                self.log(f"not relaunched: the last launch ended by itself at step {step} (see {self.events_path})")
                return 1
            if self.deadline is not None and self.deadline - time.time() < self.min_launch_s:
                self.log(
                    f"deadline in {self.deadline - time.time():.0f} s: not launching (step {step}; the next call"
                    " continues)"
                )
                return 0
            if what == "resume" and latest_checkpoint(self.run_dir) is None:
                # stopped before its first checkpoint: nothing to resume (verlfit refuses); start again beside it
                aside = self.run_dir.with_name(f"{self.name}.no-checkpoint-{time.strftime('%H%M%S')}")
                self.run_dir.rename(aside)
                self.record("restart", step, None, None, f"no complete checkpoint: moved to {aside.name}")
                what = "start"
            result = self.launch(what, item)
            if result is not None:
                return result

    def launch(self, what: str, item) -> int | None:
        """One launch; None: go on with the next pass; an int: return it."""
        command = [
            *self.verlfit,
            "train",
            *(
                ["--resume", str(self.run_dir)]
                if what == "resume"
                else ["--run-dir", str(self.run_dir), *self.train_args]
            ),
        ]
        offset = self.console.stat().st_size if self.console.is_file() else 0
        with open(self.console, "a") as handle:
            handle.write(f"== soak_run.py {time.strftime('%Y-%m-%dT%H:%M:%S%z')}: {shlex.join(command)}\n")
        offset = self.console.stat().st_size
        self.log(f"{what} (next action: {item.label if item else 'none'}): {shlex.join(command)}")
        started = time.time()
        with open(self.console, "a") as out:
            # its own session and process group: SIGINT reaches verlfit alone, kill_run's group is the run's only
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        stop = threading.Event()
        sampler = threading.Thread(target=self._sample, args=(process.pid, stop), daemon=True)
        sampler.start()
        try:
            return self._watch(process, item, started, offset)
        finally:
            stop.set()
            sampler.join(timeout=30)

    def _watch(self, process: subprocess.Popen, item, started: float, offset: int) -> int | None:
        while True:
            status = self._wait(process, self.poll_s)
            step = highest_step(self.run_dir)
            if status is not None:
                note = self._last_verlfit_line(offset)
                for line in self._console_tail(offset):
                    self.log(f"  | {line}")
                if step >= self.total:
                    return None  # the next pass records finished
                self.record("exit", step, None, status, note)
                return 1
            if self.deadline is not None and time.time() >= self.deadline:
                self.log(f"deadline: SIGINT to verlfit (pid {process.pid}) at step {step}")
                sent = time.monotonic()
                os.kill(process.pid, signal.SIGINT)
                status = self._wait(process, self.grace_s)
                if status is None:
                    status = self._kill(process)
                self.record(
                    "deadline sigint",
                    highest_step(self.run_dir),
                    time.monotonic() - sent,
                    status,
                    self._last_verlfit_line(offset),
                )
                return 0
            if item is not None and highest_step(self.run_dir, since=started) >= item.step:
                self.act(process, item, step, offset)
                return None

    def act(self, process: subprocess.Popen, item, step: int, offset: int) -> None:
        self.log(f"{item.label}: step {step} recorded; {item.action} (verlfit pid {process.pid})")
        sent = time.monotonic()
        if item.action == "sigint":
            os.kill(process.pid, signal.SIGINT)
            status = self._wait(process, self._budget(self.sigint_wait_s))
            if status is None:
                self.log(f"verlfit did not exit {time.monotonic() - sent:.0f} s after SIGINT")
                status = self._kill(process)
        elif item.action == "sigkill":
            status = self._kill(process)
        else:  # kill-worker
            workers = process_tree.worker_processes(process.pid)
            if not workers:
                self.log("kill-worker: no WorkerDict process in the run's tree; killing the run instead")
                status = self._kill(process)
            else:
                target = workers[0]
                self.log(
                    f"kill-worker: SIGKILL to {target.pid} ({' '.join(target.cmdline())[:160]}) of"
                    f" {len(workers)} WorkerDict processes"
                )
                sent = time.monotonic()
                target.send_signal(signal.SIGKILL)
                status = self._wait(process, self._budget(self.worker_wait_s))
                if status is None:
                    self.log(f"verlfit did not exit {time.monotonic() - sent:.0f} s after the worker's death")
                    status = self._kill(process)
        seconds = time.monotonic() - sent
        for line in self._console_tail(offset, lines=8):
            self.log(f"  | {line}")
        self.record(item.label, step, seconds, status, self._last_verlfit_line(offset))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--runs", required=True, type=Path, help="the runs folder ($RUNS)")
    parser.add_argument("--name", required=True, help="the run's name: RUNS/NAME, RUNS/NAME.events, .console, .rss.csv")
    parser.add_argument("--total", required=True, type=int, help="the run's total steps (= --steps of the train words)")
    parser.add_argument(
        "--plan", default="", help="interruption plan, e.g. 'sigint@150 sigkill@300' (soak_plan.parse_plan)"
    )
    parser.add_argument("--deadline", type=float, help="epoch seconds: SIGINT the run then and return")
    parser.add_argument("--verlfit", default="python3 -m verlfit", help="the verlfit command (default: %(default)s)")
    parser.add_argument("--sample-seconds", type=float, default=10.0)
    parser.add_argument("--poll-seconds", type=float, default=2.0)
    parser.add_argument("train", nargs=argparse.REMAINDER, help="after --: the `verlfit train` words of a new run")
    args = parser.parse_args(argv)
    try:
        plan = soak_plan.parse_plan(args.plan)
    except soak_plan.PlanError as error:
        parser.error(f"--plan: {error}")
    train = args.train[1:] if args.train[:1] == ["--"] else args.train
    driver = Driver(
        args.runs,
        args.name,
        args.total,
        plan,
        train,
        args.deadline,
        shlex.split(args.verlfit),
        poll_s=args.poll_seconds,
        sample_s=args.sample_seconds,
    )
    return driver.run()


if __name__ == "__main__":
    sys.exit(main())
