"""A stand-in for `python3 -m verlfit` in the soak driver's tests: `train --run-dir D --steps N --save-freq F` or
`train --resume D`. Writes run.json, metrics.jsonl (one training record every FAKE_STEP_SECONDS) and checkpoints as
verlfit and verl do (the tracker after the folder), starts a child in its own session as verlfit starts verl's
driver, and that child a grandchild named ray::WorkerDict; Ctrl-C's SIGINT stops it (status 130) after stopping
the child; a dead worker makes it say so and exit 1, as verl's ActorDiedError does."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from verlfit.metrics import drop_after_checkpoint


def main() -> int:
    args = sys.argv[2:]
    resume = args[0] == "--resume"
    run = Path(args[1])
    if resume:
        record = json.loads((run / "run.json").read_text())
        tracker = run / "checkpoints" / "latest_checkpointed_iteration.txt"
        start = int(tracker.read_text())
        drop_after_checkpoint(run, start)
        record["pid"] = os.getpid()
        (run / "run.json").write_text(json.dumps(record))
    else:
        steps, save = int(args[args.index("--steps") + 1]), int(args[args.index("--save-freq") + 1])
        (run / "checkpoints").mkdir(parents=True)
        record = {
            "total_steps": steps,
            "settings": {"steps": steps, "save_freq": save, "keep_checkpoints": 2},
            "overrides": [],
            "environment": {},
            "profile": "p40",
            "gpu": "fake",
            "pid": os.getpid(),
        }
        (run / "run.json").write_text(json.dumps(record))
        start = 0
    total, save = record["total_steps"], record["settings"]["save_freq"]
    # verl's driver (its own session), and its Ray worker: `exec -a` sets the command line Ray's setproctitle would
    driver = subprocess.Popen(
        [
            "bash",
            "-c",
            (
                "bash -c 'exec -a ray::WorkerDict.actor_rollout_generate_sequences sleep 60' & exec -a 'python -m"
                " verl.trainer.main_ppo' sleep 60"
            ),
        ],
        start_new_session=True,
    )
    time.sleep(0.3)
    print(f"verlfit: run directory {run}", flush=True)
    try:
        for step in range(start + 1, total + 1):
            time.sleep(float(os.environ.get("FAKE_STEP_SECONDS", "0.2")))
            if not any(
                b"WorkerDict" in p.read_bytes()
                for p in Path("/proc").glob("[0-9]*/cmdline")
                if _readable(p) and _parent_chain(p.parent.name, driver.pid)
            ):
                print(
                    "verlfit: the actor/rollout worker died (ray::WorkerDict.actor_rollout_generate_sequences):"
                    " ActorDiedError",
                    flush=True,
                )
                os.killpg(driver.pid, signal.SIGKILL)
                return 1
            with open(run / "metrics.jsonl", "a") as handle:
                handle.write(
                    json.dumps({"step": step, "timing_s/step": 0.2, "perf/max_memory_allocated_gb": 10.0}) + "\n"
                )
            if step % save == 0 or step == total:
                (run / "checkpoints" / f"global_step_{step}").mkdir()
                (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(str(step))
    except KeyboardInterrupt:
        os.killpg(driver.pid, signal.SIGKILL)
        print("verlfit: stopped. Continue from step N with: verlfit train --resume RUN", flush=True)
        return 130
    os.killpg(driver.pid, signal.SIGKILL)
    return 0


def _readable(path: Path) -> bool:
    try:
        path.read_bytes()
        return True
    except OSError:
        return False


def _parent_chain(pid: str, ancestor: int) -> bool:
    """True when process ``pid`` descends from ``ancestor`` (/proc/PID/stat's fourth field is the parent)."""
    current = int(pid)
    for _ in range(10):
        try:
            current = int(Path(f"/proc/{current}/stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if current == ancestor:
            return True
    return False


if __name__ == "__main__":
    sys.exit(main())
