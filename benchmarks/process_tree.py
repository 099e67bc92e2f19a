"""The processes of one verlfit run, found from the ``verlfit train`` PID (issue 17's soak and fault stages).

A run is a process tree: ``verlfit train`` starts verl's driver (``python -m verl.trainer.main_ppo``, in its own
session: ``verlfit/train/supervise.py`` ``launch``, ``start_new_session=True``); the driver's ``ray.init`` starts Ray's
GCS server,
raylet and dashboard, and the raylet starts the workers (``ray::WorkerDict`` once verl's worker group is made,
``ray::IDLE`` before). Other runs share the machine, so nothing here looks past the run's own tree and process
group: no ``pgrep`` over the machine, no ``ray stop``. psutil (a Ray dependency, ``docker/common.lock``) walks
``/proc``; RSS is its ``memory_info().rss`` (``/proc/PID/statm``'s resident pages x page size), in MiB (2**20 bytes).

    python3 benchmarks/process_tree.py tree PID          # one line per process: pid, role, RSS MiB, command
    python3 benchmarks/process_tree.py kill PID          # SIGKILL the run at once (a power cut); prints the PIDs
    python3 benchmarks/process_tree.py kill-worker PID   # SIGKILL one Ray WorkerDict process of the run
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import psutil

MIB = 2**20
DRIVER_MODULE = "verl.trainer.main_ppo"
WORKER_NAME = "WorkerDict"  # Ray names an actor's process ray::<class>[.<method>] (setproctitle); verl's is WorkerDict


def run_processes(pid: int) -> list[psutil.Process]:
    """The process ``pid``, every descendant (``/proc`` children, recursively) and every other member of ``pid``'s
    process group, each once, ``pid`` first. Processes that exit while this runs are left out; ``[]`` when ``pid``
    itself is gone."""
    try:
        root = psutil.Process(pid)
        found = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    try:
        group = os.getpgid(pid)
    except ProcessLookupError:
        group = None
    seen = {process.pid for process in found}
    if group is not None:
        for process in psutil.process_iter():
            if process.pid in seen:
                continue
            try:
                if os.getpgid(process.pid) == group:
                    found.append(process)
                    seen.add(process.pid)
            except (ProcessLookupError, PermissionError):
                continue
    return found


def _command(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline()) or process.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


def role(process: psutil.Process, root_pid: int) -> str:
    """``verlfit`` (the root), ``driver`` (verl's main_ppo), ``worker`` (a Ray WorkerDict), or ``other`` (Ray's
    GCS, raylet, dashboard, idle workers, the timeout wrapper's siblings)."""
    if process.pid == root_pid:
        return "verlfit"
    command = _command(process)
    if DRIVER_MODULE in command:
        return "driver"
    try:
        name = process.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        name = ""
    if WORKER_NAME in command or WORKER_NAME in name:
        return "worker"
    return "other"


def rss_mib(process: psutil.Process) -> float | None:
    """Resident set size in MiB, or None when the process has gone."""
    try:
        return process.memory_info().rss / MIB
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def rss_by_role(pid: int) -> dict[str, float]:
    """RSS of the run of ``pid`` in MiB: ``verlfit``, ``driver`` (the largest if several), ``workers_sum``,
    ``workers_max`` and ``workers`` (their count); 0.0 for a role with no process (yet)."""
    result = {"verlfit": 0.0, "driver": 0.0, "workers_sum": 0.0, "workers_max": 0.0, "workers": 0}
    for process in run_processes(pid):
        kind, rss = role(process, pid), rss_mib(process)
        if rss is None:
            continue
        if kind == "verlfit":
            result["verlfit"] = rss
        elif kind == "driver":
            result["driver"] = max(result["driver"], rss)
        elif kind == "worker":
            result["workers_sum"] += rss
            result["workers_max"] = max(result["workers_max"], rss)
            result["workers"] += 1
    return result


def kill_run(pid: int) -> list[int]:
    """SIGKILL the run of ``pid`` at once, as a power cut would: every process of :func:`run_processes` is first
    stopped (SIGSTOP, so none reacts to another's death, e.g. a raylet starting a worker), then killed. Returns the
    PIDs signalled, sorted (those that had already exited are left out)."""
    processes = run_processes(pid)
    signalled = []
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for process in processes:
            try:
                process.send_signal(sig)
                if sig == signal.SIGKILL:
                    signalled.append(process.pid)
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
    return sorted(signalled)


def worker_processes(pid: int) -> list[psutil.Process]:
    """The Ray WorkerDict processes of the run of ``pid`` (:func:`role` ``worker``), oldest first."""
    workers = [process for process in run_processes(pid) if role(process, pid) == "worker"]
    return sorted(workers, key=lambda process: (process.create_time(), process.pid))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[2],
    )
    parser.add_argument("action", choices=("tree", "kill", "kill-worker"))
    parser.add_argument("pid", type=int, help="the `verlfit train` process")
    args = parser.parse_args(argv)
    if args.action == "tree":
        for process in run_processes(args.pid):
            rss = rss_mib(process)
            memory = "-" if rss is None else f"{rss:.0f}"
            print(f"{process.pid}\t{role(process, args.pid)}\t{memory}\t{_command(process)[:200]}")
        return 0
    if args.action == "kill":
        killed = kill_run(args.pid)
        print(" ".join(map(str, killed)))
        return 0 if killed else 1
    workers = worker_processes(args.pid)
    if not workers:
        print(f"process_tree.py: no {WORKER_NAME} process under {args.pid}", file=sys.stderr)
        return 1
    target = workers[0]
    command = _command(target)
    target.send_signal(signal.SIGKILL)
    print(f"{target.pid}\t{command[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
