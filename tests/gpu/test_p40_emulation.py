"""Short GPU version of the main job: 3 steps each of p40-emulated PPO and GRPO through `verlfit train`.

Skipped without CUDA or without the verl stack (verl patched with patches/verl-0.4.1, ray). Run on any
CUDA machine with `python -m pytest tests/gpu`; benchmarks/device_run.sh gputests runs it on the lent GPU.
The model is a tiny random Qwen2 with the locally trained tokenizer, the data synthetic GSM8K-format
problems: nothing is downloaded.
"""

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
for module in ("verl", "ray"):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"needs {module} (the verl stack)", allow_module_level=True)

from verlfit.metrics import consolidate, read_metrics  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def prepared_data(tmp_path_factory, tiny_qwen2_dir):
    import gsm8k_synthetic

    from verlfit import gsm8k

    root = tmp_path_factory.mktemp("synthetic")
    gsm8k_synthetic.write_splits(str(root / "raw"), n_train=64, n_test=16, seed=0)
    gsm8k.prepare(source=root / "raw", output_dir=root / "data", tokenizer=tiny_qwen2_dir, max_prompt_length=256)
    return root / "data"


def run_train(tmp_path, model, data, *extra):
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "verlfit",
        "train",
        "--emulate",
        "p40",
        "--model",
        str(model),
        "--data",
        str(data),
        "--run-dir",
        str(run_dir),
        "--steps",
        "3",
        "--batch-size",
        "8",
        "--max-prompt-length",
        "256",
        "--max-response-length",
        "32",
        "--skip-checks",
        "--test-freq",
        "-1",
        "--save-freq",
        "-1",
        "--no-validate-before-train",
        *extra,
    ]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    # one record per step: metrics.jsonl also holds the end-of-run marker ({"step": 3, "finished": true}),
    # which consolidate() merges into step 3 (a device run of 2026-11-29 failed on counting it as a step)
    rows = consolidate(read_metrics(run_dir))
    assert rows[-1].get("finished") is True, rows[-1]
    return run_dir, rows


def test_ppo_three_steps(tmp_path, tiny_qwen2_dir, prepared_data):
    _, rows = run_train(tmp_path, tiny_qwen2_dir, prepared_data)
    assert [row["step"] for row in rows] == [1, 2, 3]
    for row in rows:
        for key in ("actor/pg_loss", "critic/vf_loss"):
            assert math.isfinite(row[key]), (key, row)
        assert row["perf/max_memory_allocated_gb"] < 22.5


def test_grpo_three_steps(tmp_path, tiny_qwen2_dir, prepared_data):
    _, rows = run_train(tmp_path, tiny_qwen2_dir, prepared_data, "--algo", "grpo", "--samples", "2")
    assert [row["step"] for row in rows] == [1, 2, 3]
    for row in rows:
        assert math.isfinite(row["actor/pg_loss"]) and math.isfinite(row["actor/kl_loss"])
