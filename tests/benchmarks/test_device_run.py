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
    assert "device_run.sh: unknown stage 'bogus'; stages: a10 bench calibrate_a10 calibrate_check calibrate_p40 export_eval gputests grpo learn learn_lora lora_1p5b_ppo lora_3b_grpo main main_resume pack public setup smoke speed tuned (--help for what each does)" in bogus.stderr
    assert not any((tmp_path / name).exists() for name in ("work", "runs", "out"))  # setup did not start either


def test_speed_stage_passes_each_configurations_keys_after_the_train_arguments(tmp_path):
    # a fake python3 records every command the stage runs (no GPU, no verl here)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    (bin_dir / "python3").write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "WORK": str(tmp_path / "work"), "RUNS": str(tmp_path / "runs"), "OUT": str(tmp_path / "out"), "SPEED_CONFIGS": "today all bogus"}
    result = subprocess.run(["bash", str(SCRIPT), "speed"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    calls = log.read_text().splitlines()
    work = tmp_path / "work"
    common = f"--emulate p40 --model {work}/qwen2.5-0.5b-random --data {work}/gsm8k --steps 10 --max-prompt-length 512 --max-response-length 256 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
    assert calls == [
        f"-m verlfit train --run-dir {tmp_path}/runs/speed-today {common}",
        f"-m verlfit train --run-dir {tmp_path}/runs/speed-all {common} -- +actor_rollout_ref.actor.trim_padding=True +actor_rollout_ref.ref.trim_padding=True "
        "+critic.trim_padding=True +actor_rollout_ref.rollout.trim_padding=True +actor_rollout_ref.rollout.cuda_graph=True",
        f"benchmarks/decode_bench.py --model {work}/qwen2.5-0.5b-random --output {tmp_path}/runs/decode_bench.json",
    ]
    assert "stage speed: unknown configuration 'bogus'" in (tmp_path / "runs" / "stages.log").read_text()
