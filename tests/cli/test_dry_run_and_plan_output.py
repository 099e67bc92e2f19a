"""Golden outputs: ``verlfit train --dry-run`` and ``verlfit plan`` print the same verl command, environment, sizes and
plan numbers as the files recorded in tests/data/golden/ (one file per case: the exit status, then stdout, then
stderr), for every profile and the common choices (PPO, GRPO, LoRA, --emulate, --plan off, a --data folder, a
detected card). They guard refactors that must change nothing a user sees.

Each case runs in-process through :func:`verlfit.cli.main` in a temporary working directory, with an environment
holding no verlfit, PyTorch, NCCL, Triton or vLLM variables, NVML answered by :class:`fakes.FakeNvml` (installed as
the ``pynvml`` module, so every caller sees the same card), and this Python's engines check answered as "no vllm, no
flash_attn" (the machine the test runs on must not change the text). Paths that differ from run to run are written as
``<tmp>``, ``<tiny_model>`` and ``<python>``; a dry run's wrapped notes are joined onto one line each.

To record the files again after a change that is meant to change the output (review the diff!):
``VERLFIT_RECORD_GOLDEN=1 python -m pytest tests/cli/test_dry_run_and_plan_output.py``.
"""

import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import pytest

from fakes import FakeNvml, write_raw_gsm8k
from verlfit import cli

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
RECORD = os.environ.get("VERLFIT_RECORD_GOLDEN") == "1"
# the environment a case runs in: only these variables of the caller's are kept
KEPT_VARIABLES = (
    "PATH",
    "HOME",
    "LANG",
    "TMPDIR",
    "PYTHONPATH",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "HF_HOME",
)
# NVML's answers (name, compute capability, total bytes): the totals nvidia-smi reports for these cards
P40 = ("Tesla P40", (6, 1), 25_769_803_776)
A10 = ("NVIDIA A10", (8, 6), 24_146_608_128)
T4 = ("Tesla T4", (7, 5), 16_106_127_360)
H200 = ("NVIDIA H200", (9, 0), 150_754_820_096)
QUESTIONS = [
    ("1 + 1?", 2),
    ("Tom has 3 apples and buys 4 more. How many apples does he have?", 7),
    ("A train leaves at 9 and travels 60 miles an hour for 2 hours, then 40 miles an hour for 3 hours. How far?", 240),
    ("What is 12 times 3, plus 4?", 40),
]
NO_GPU = dict(error="NVML Shared Library Not Found")

RUN = ["--run-dir", "<tmp>/run", "--data", "<tmp>/raw"]  # a raw GSM8K folder: nothing depends on a datasets cache
# verl's files, prompts measured with the tiny model's tokenizer; relative to the case's working directory, so a plan
# table's title (the model as given) does not change width with the temporary directory's name
MEASURED = ["--model", "tiny", "--data", "prepared"]

# case name -> (argv, NVML's GPUs or NO_GPU)
CASES = {
    # verlfit train --dry-run: each profile, then the choices
    "train-p40-ppo": (["train", "--dry-run", "--profile", "p40", *RUN], NO_GPU),
    "train-a10-ppo": (["train", "--dry-run", "--profile", "a10", *RUN], NO_GPU),
    "train-t4-ppo": (["train", "--dry-run", "--profile", "t4", *RUN], NO_GPU),
    "train-v100-ppo": (["train", "--dry-run", "--profile", "v100", *RUN], NO_GPU),
    "train-p40-grpo": (["train", "--dry-run", "--profile", "p40", "--algo", "grpo", "--samples", "8", *RUN], NO_GPU),
    "train-p40-lora": (
        ["train", "--dry-run", "--profile", "p40", "--lora-rank", "32", "--model", "Qwen/Qwen2.5-1.5B-Instruct", *RUN],
        NO_GPU,
    ),
    "train-t4-grpo-lora": (
        ["train", "--dry-run", "--profile", "t4", "--algo", "grpo", "--lora-rank", "16", *RUN],
        NO_GPU,
    ),
    "train-emulate-p40": (["train", "--dry-run", "--emulate", "p40", "--steps", "10", *RUN], [H200]),
    "train-emulate-v100-grpo": (["train", "--dry-run", "--emulate", "v100", "--algo", "grpo", *RUN], [H200]),
    "train-p40-plan-off": (
        [
            "train",
            "--dry-run",
            "--profile",
            "p40",
            "--plan",
            "off",
            "--batch-size",
            "64",
            "--micro-batch-size",
            "8",
            "--offload",
            "optimizer",
            *RUN,
        ],
        NO_GPU,
    ),
    "train-a10-hf-sdpa": (
        ["train", "--dry-run", "--profile", "a10", "--rollout", "hf", "--attention", "sdpa", *RUN],
        NO_GPU,
    ),
    "train-auto-p40-detected": (["train", "--dry-run", "--profile", "auto", *RUN], [P40]),
    "train-auto-a10-detected": (["train", "--dry-run", "--profile", "auto", "--gpu-memory-limit", "20", *RUN], [A10]),
    "train-auto-two-p40": (["train", "--dry-run", "--profile", "auto", "--gpus", "2", *RUN], [P40, P40]),
    "train-user-overrides": (
        [
            "train",
            "--dry-run",
            "--profile",
            "p40",
            "--lora-rank",
            "8",
            *RUN,
            "--",
            "+actor_rollout_ref.rollout.unwrap_fsdp=False",
            "+actor_rollout_ref.actor.trim_padding=False",
        ],
        NO_GPU,
    ),
    "train-data-folder": (
        ["train", "--dry-run", "--profile", "p40", "--batch-size", "2", "--run-dir", "<tmp>/run", *MEASURED],
        NO_GPU,
    ),
    # verlfit plan
    "plan-emulate-p40": (["plan", "--emulate", "p40"], NO_GPU),
    "plan-emulate-a10": (["plan", "--emulate", "a10"], NO_GPU),
    "plan-emulate-t4": (["plan", "--emulate", "t4"], NO_GPU),
    "plan-emulate-v100": (["plan", "--emulate", "v100"], NO_GPU),
    "plan-p40-grpo": (["plan", "--profile", "p40", "--algo", "grpo", "--samples", "8"], NO_GPU),
    "plan-p40-lora-3b": (
        ["plan", "--emulate", "p40", "--model", "Qwen/Qwen2.5-3B-Instruct", "--algo", "grpo", "--lora-rank", "32"],
        NO_GPU,
    ),
    "plan-t4-lora-ppo": (["plan", "--emulate", "t4", "--lora-rank", "16"], NO_GPU),
    "plan-plan-off": (
        [
            "plan",
            "--profile",
            "p40",
            "--gpu-memory",
            "22.5",
            "--batch-size",
            "64",
            "--micro-batch-size",
            "8",
            "--plan",
            "off",
        ],
        NO_GPU,
    ),
    "plan-detected-p40": (["plan"], [P40]),
    "plan-detected-t4": (["plan", "--algo", "grpo"], [T4]),
    "plan-detected-h200-profile-a10": (["plan", "--profile", "a10", "--steps", "100"], [H200]),
    "plan-a10-hf-sdpa": (["plan", "--profile", "a10", "--rollout", "hf", "--attention", "sdpa"], NO_GPU),
    "plan-switches": (
        ["plan", "--emulate", "p40", "--no-trim-padding", "--no-cuda-graph", "--rollout-trim-padding"],
        NO_GPU,
    ),
    "plan-two-gpus": (["plan", "--emulate", "p40", "--gpus", "2"], NO_GPU),
    "plan-json-lora": (["plan", "--emulate", "p40", "--lora-rank", "32", "--json"], NO_GPU),
    "plan-data-folder": (["plan", "--profile", "p40", *MEASURED], NO_GPU),
    "plan-a10-float32": (["plan", "--profile", "a10", "--dtype", "float32", "--longest-prompt-length", "200"], NO_GPU),
    "plan-p40-longest-prompt": (["plan", "--emulate", "p40", "--longest-prompt-length", "200", "--json"], NO_GPU),
    "plan-two-gpus-lora": (["plan", "--emulate", "p40", "--gpus", "2", "--lora-rank", "16", "--json"], NO_GPU),
}


@pytest.fixture
def golden_world(tmp_path, monkeypatch, tiny_qwen2_dir):
    """The temporary world every case runs in; returns the path replacements that make its output stable."""
    for name in list(os.environ):
        if name not in KEPT_VARIABLES:
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *rest: None if name in ("vllm", "flash_attn") else real_find_spec(name, *rest),
    )
    write_raw_gsm8k(tmp_path / "raw")
    several = tmp_path / "several"  # four rows of different lengths, so the measured prompts differ
    several.mkdir()
    rows = [json.dumps({"question": question, "answer": f"...\n#### {answer}"}) for question, answer in QUESTIONS]
    for split in ("train", "test"):
        (several / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    assert cli.main(["prepare-gsm8k", "--input", str(several), "--output", str(tmp_path / "prepared")]) == 0
    (tmp_path / "tiny").symlink_to(tiny_qwen2_dir)
    return {"<tmp>": str(tmp_path), "<tiny_model>": str(Path(tiny_qwen2_dir).resolve())}


def _stable(text: str, places: dict[str, str]) -> str:
    """``text`` with the temporary paths as placeholders, and each dry-run note on one line: the notes are wrapped
    at spaces (:func:`verlfit.train.describe.wrap_note`), where a temporary path's length moves the breaks."""
    for placeholder, path in sorted(places.items(), key=lambda item: -len(item[1])):
        text = text.replace(path, placeholder)
    text = text.replace(sys.executable, "<python>")
    return re.sub(r"\n {6}(?=\S)", " ", text)


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_is_the_recorded_one(name, golden_world, capsys, monkeypatch):
    argv, gpus = CASES[name]
    capsys.readouterr()  # what preparing the data printed
    nvml = FakeNvml(**gpus) if isinstance(gpus, dict) else FakeNvml(gpus)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    words = [word.replace("<tmp>", golden_world["<tmp>"]) for word in argv]
    status = cli.main(words)
    captured = capsys.readouterr()
    text = _stable(f"exit status: {status}\n--- stdout\n{captured.out}--- stderr\n{captured.err}", golden_world)
    path = GOLDEN / f"{name}.txt"
    if RECORD:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"{path} is missing: record it with VERLFIT_RECORD_GOLDEN=1"
    assert text == path.read_text()
