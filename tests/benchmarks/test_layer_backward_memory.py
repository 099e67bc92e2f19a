"""benchmarks/layer_backward_memory.py: one LoRA decoder layer's backward, measured on the CPU against the planner."""

import json
import subprocess
import sys
from pathlib import Path

from verlfit.plan.memory import BACKWARD_WORKSPACE_LAYERS

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "layer_backward_memory.py"


def run_probe(*argv):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=600, check=False
    )


def test_the_planner_counts_what_a_checkpointed_lora_layer_holds_in_its_backward(tmp_path):
    out = tmp_path / "layer.json"
    done = run_probe("--model", "Qwen/Qwen2.5-0.5B-Instruct", "--tokens", "384", "--json", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    # the checkpointed layer keeps only its input: 384 tokens x 896 hidden x 4 bytes, to the page glibc maps
    assert abs(result["saved_input_bytes"] - 384 * 896 * 4) <= 64 * 1024
    # its backward holds the recomputed activations and a workspace the planner's constant covers (measured 0.154
    # at 512 tokens when it was set), and not far less: a constant well above it would over-count big models again
    assert 0.10 < result["backward_workspace_layers"] <= BACKWARD_WORKSPACE_LAYERS
    assert result["planner_backward_workspace_layers"] == BACKWARD_WORKSPACE_LAYERS
    assert "backward workspace" in done.stdout and not (tmp_path / "layer.json.tmp").exists()


def test_a_shape_it_cannot_build_is_refused_by_name():
    done = run_probe("--model", "meta-llama/Llama-3.2-1B-Instruct")
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == (
        "layer_backward_memory: --model meta-llama/Llama-3.2-1B-Instruct: a llama shape; this probe builds Qwen2 "
        "decoder layers only"
    )
