"""benchmarks/device_run.sh argument handling (its stages need a GPU and are run on the device, not here)."""

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "device_run.sh"


def run(tmp_path, *args):
    env = {**os.environ, "WORK": str(tmp_path / "work"), "RUNS": str(tmp_path / "runs"), "OUT": str(tmp_path / "out")}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def test_help_prints_the_stages_and_what_the_script_needs(tmp_path):
    result = run(tmp_path, "--help")
    assert result.returncode == 0
    assert "  calibrate_check\n" in result.stdout and 'Needs: a CUDA GPU and a Python 3 environment where `python3 -c "import verl, ray, torch"` works' in result.stdout


def test_no_stage_and_an_unknown_stage_are_refused_before_anything_is_written(tmp_path):
    for args in ((), ("--parallel",)):
        none = run(tmp_path, *args)
        assert none.returncode == 2 and none.stderr.endswith("device_run.sh: name at least one stage\n")
    bogus = run(tmp_path, "setup", "bogus")
    assert bogus.returncode == 2
    assert "device_run.sh: unknown stage 'bogus'; stages: a10 calibrate_a10 calibrate_check calibrate_p40 gputests grpo learn learn_lora lora_1p5b_ppo lora_3b_grpo main main_resume pack public setup smoke tuned (--help for what each does)" in bogus.stderr
    assert not any((tmp_path / name).exists() for name in ("work", "runs", "out"))  # setup did not start either
