"""Run a probe of speed_probe.py (or another probe ``script`` with the same protocol, e.g. loss_scaling_probe.py) in a
subprocess against one copy of verl (as conftest._run_probe does for verl_probe.py); return its result dict or fail
the test with the probe's output."""

import json
import os
import subprocess
import sys
from pathlib import Path

SPEED_PROBE = Path(__file__).resolve().parent / "speed_probe.py"


def run_speed_probe(root: Path, probe: str, *args, timeout=600, script: Path = SPEED_PROBE):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONDONTWRITEBYTECODE="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        CUDA_VISIBLE_DEVICES="",
    )
    proc = subprocess.run(
        [sys.executable, str(script), probe, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=str(root),
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PROBE_RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"speed probe {probe} on {root} exited"
        f" {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    )
    result = json.loads(lines[-1][len("PROBE_RESULT ") :])
    assert result["verl_file"].startswith(str(root)), f"probe imported {result['verl_file']}, not {root}"
    return result
