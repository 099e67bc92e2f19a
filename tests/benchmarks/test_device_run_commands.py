"""benchmarks/device_run.py: every stage's commands, recorded once from the runner as it spelled each argument list
word by word (before issue 45's run descriptions) and pinned here, so that a change to how a stage builds its
command lines cannot change them.

Each stage runs alone with a fake ``python3`` (and fake ``nvidia-smi``, ``mount``, ``umount``, ``mountpoint``, ``df``)
that appends its arguments to a file; the models of the stages that check for them exist, nothing else does (the
makers' commands are recorded too). Paths are written as ``{work}``, ``{runs}``, ``{out}``, ``{repo}`` and ``{tmp}``;
the calls of the stages that start their runs at once interleave, so they are compared sorted."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "device_run.py"
REPO = SCRIPT.parents[1]
# the stages whose runs start at once: their calls are compared sorted
AT_ONCE = {"learn", "learn_fp16", "learn_lora", "lora_families", "lora16"}
# the variables a stage reads (device_run.py's VARIABLES and what its runs see): unset, so the defaults are pinned
SETTINGS = re.compile(
    r"^(LEARN|LORA|SPEED|FP16|GRPO|PUBLIC|TUNED|GRAPH|EXPORT|BENCH|MULTIGPU|SOAK|FAULT|SETUP|SKIP|KEEP|DEADLINE|"
    r"STAGE_TIMEOUT|VERLFIT_SITE|GSM8K_DIR|VLLM|NCCL|RAY)"
)
# the models the stages check for before they train (setup makes them when their stage is named)
MODELS = ("qwen2.5-1.5b-random", "qwen2.5-3b-random", "qwen3-0.6b-random", "qwen3-1.7b-random")


def _tool(bin_dir: Path, name: str, body: str) -> None:
    (bin_dir / name).write_text("#!/bin/sh\n" + body)
    (bin_dir / name).chmod(0o755)


def stage_calls(tmp_path: Path, stage: str) -> list[str]:
    """The commands ``device_run.py STAGE`` starts, its paths written as placeholders (sorted for AT_ONCE)."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    _tool(bin_dir, "python3", f'echo "$*" >> {calls}\n')
    for tool in ("mount", "umount"):
        _tool(bin_dir, tool, f'echo "{tool} $*" >> {calls}\n')
    _tool(bin_dir, "mountpoint", f'echo "mountpoint $*" >> {calls}\nexit 1\n')  # nothing mounted there yet
    _tool(bin_dir, "df", f'echo "df $*" >> {calls}\necho Used\necho 1000\n')
    _tool(bin_dir, "nvidia-smi", f'echo "nvidia-smi $*" >> {calls}\necho fake\n')
    work, runs, out = tmp_path / "work", tmp_path / "runs", tmp_path / "out"
    for model in MODELS:
        (work / model).mkdir(parents=True)
        (work / model / "config.json").write_text("{}")
    (work / "qwen2.5-0.5b-random").mkdir()
    (work / "qwen2.5-0.5b-random" / "tokenizer.json").write_text("{}")  # no config.json: setup makes it
    out.mkdir()
    (out / "results.md").write_text("results\n")  # what collect.py would write: pack prints it
    env = {key: value for key, value in os.environ.items() if not SETTINGS.match(key)}
    env.update(
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        WORK=str(work),
        RUNS=str(runs),
        OUT=str(out),
        VERLFIT_SITE=str(tmp_path / "site"),
        SETUP_FOR="lora_1p5b_ppo lora_3b_grpo own_task",
        # not the default ({tmp}/gsm8k, which a checkout that staged the device stack has): bench passes
        # --gsm8k only when that folder holds train.jsonl
        GSM8K_DIR=str(tmp_path / "gsm8k"),
    )
    result = subprocess.run([sys.executable, str(SCRIPT), stage], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    found = calls.read_text().splitlines() if calls.exists() else []
    places = ((work, "{work}"), (runs, "{runs}"), (out, "{out}"), (tmp_path, "{tmp}"), (REPO, "{repo}"))
    for path, placeholder in places:
        found = [line.replace(str(path), placeholder) for line in found]
    return sorted(found) if stage in AT_ONCE else found


EXPECTED = {
    "setup": [
        "patches/apply.py --status {tmp}/site",
        (
            "-c import verl.workers.actor.dp_actor, verl.workers.fsdp_workers; print('patched verl imports without"
            " flash_attn')"
        ),
        "benchmarks/make_model.py --shape qwen2.5-0.5b --output {work}/qwen2.5-0.5b-random",
        "benchmarks/make_model.py --shape tiny --output {work}/tiny --tokenizer-dir {work}/qwen2.5-0.5b-random",
        (
            "-m verlfit prepare-gsm8k --input {tmp}/gsm8k --output {work}/gsm8k --tokenizer"
            " {work}/qwen2.5-0.5b-random --max-prompt-length 512"
        ),
        "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader",
    ],
    "smoke": [
        (
            "-m verlfit train --run-dir {runs}/smoke-ppo --emulate p40 --model {work}/tiny --data {work}/gsm8k --steps"
            " 3 --batch-size 8 --max-response-length 32 --skip-checks --no-validate-before-train --test-freq -1"
            " --save-freq -1"
        ),
        (
            "-m verlfit train --run-dir {runs}/smoke-grpo --emulate p40 --algo grpo --model {work}/tiny --data"
            " {work}/gsm8k --steps 3 --batch-size 8 --max-response-length 32 --skip-checks --no-validate-before-train"
            " --test-freq -1 --save-freq -1"
        ),
    ],
    "smoke_resume": [
        (
            "-m verlfit train --run-dir {runs}/smoke-resume --emulate p40 --model {work}/tiny --data {work}/gsm8k"
            " --steps 2 --batch-size 8 --max-response-length 32 --skip-checks --no-validate-before-train --test-freq -1"
            " --save-freq 2"
        ),
        "-m verlfit train --resume {runs}/smoke-resume --steps 4",
    ],
    "gputests": [
        "-m pytest -q -p no:cacheprovider tests/gpu",
    ],
    "reward_helper": [
        (
            "-m verlfit train --run-dir {runs}/reward-helper --emulate p40 --model {work}/tiny --data {work}/gsm8k"
            " --steps 2 --batch-size 8 --max-response-length 32 --reward-function"
            " {work}/reward-helper/reward.py:compute_score --skip-checks --test-freq 2 --save-freq -1"
        ),
    ],
    "main": [
        (
            "-m verlfit train --run-dir {runs}/main-ppo --emulate p40 --model {work}/qwen2.5-0.5b-random --data"
            " {work}/gsm8k --steps 25 --max-prompt-length 512 --max-response-length 256 --skip-checks"
            " --no-validate-before-train --test-freq -1 --save-freq 25"
        ),
    ],
    "main_resume": [
        "-m verlfit train --resume {runs}/main-ppo --steps 50",
    ],
    "grpo": [
        (
            "-m verlfit train --run-dir {runs}/main-grpo --emulate p40 --algo grpo --model {work}/qwen2.5-0.5b-random"
            " --data {work}/gsm8k --steps 10 --batch-size 32 --max-prompt-length 512 --max-response-length 256"
            " --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
        ),
    ],
    "public": [
        (
            "-m verlfit train --run-dir {runs}/public-recipe --emulate p40 --plan off --attention eager --model"
            " {work}/qwen2.5-0.5b-random --data {work}/gsm8k --steps 10 --batch-size 1 --mini-batch-size 1"
            " --micro-batch-size 1 --max-prompt-length 256 --max-response-length 256 --skip-checks"
            " --no-validate-before-train --test-freq -1 --save-freq -1"
        ),
    ],
    "tuned": [
        (
            "-m verlfit train --run-dir {runs}/tuned-p40 --emulate p40 --model {work}/qwen2.5-0.5b-random --data"
            " {work}/gsm8k --steps 10 --max-prompt-length 256 --max-response-length 256 --skip-checks"
            " --no-validate-before-train --test-freq -1 --save-freq -1"
        ),
    ],
    "a10": [
        (
            "-m verlfit train --run-dir {runs}/a10-like --profile a10 --rollout hf --attention sdpa --gpu-memory-limit"
            " 24 --model {work}/qwen2.5-0.5b-random --data {work}/gsm8k --steps 20 --skip-checks"
            " --no-validate-before-train --test-freq -1 --save-freq -1 --"
            " actor_rollout_ref.actor.use_torch_compile=False"
        ),
    ],
    "calibrate_p40": [
        (
            "-m verlfit train --run-dir {runs}/cal-p40-ppo-m4-512 --profile p40 --plan off --micro-batch-size 4"
            " --max-prompt-length 512 --max-response-length 256 --model {work}/qwen2.5-0.5b-random --data {work}/gsm8k"
            " --steps 3 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
        ),
        (
            "-m verlfit train --run-dir {runs}/cal-p40-ppo-m8-opt --profile p40 --plan off --micro-batch-size 8"
            " --offload optimizer --max-prompt-length 256 --max-response-length 128 --model {work}/qwen2.5-0.5b-random"
            " --data {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
        ),
        (
            "-m verlfit train --run-dir {runs}/cal-p40-grpo-m4 --profile p40 --plan off --algo grpo --batch-size 8"
            " --micro-batch-size 4 --offload optimizer --max-prompt-length 512 --max-response-length 256 --model"
            " {work}/qwen2.5-0.5b-random --data {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train"
            " --test-freq -1 --save-freq -1"
        ),
    ],
    "calibrate_a10": [
        (
            "-m verlfit train --run-dir {runs}/cal-a10-ppo-m8 --profile a10 --rollout hf --attention sdpa --plan off"
            " --micro-batch-size 8 --max-prompt-length 512 --max-response-length 256 --model {work}/qwen2.5-0.5b-random"
            " --data {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
        ),
        (
            "-m verlfit train --run-dir {runs}/cal-a10-ppo-m4-nockpt --profile a10 --rollout hf --attention sdpa --plan"
            " off --micro-batch-size 4 --no-gradient-checkpointing --max-prompt-length 256 --max-response-length 256"
            " --model {work}/qwen2.5-0.5b-random --data {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train"
            " --test-freq -1 --save-freq -1"
        ),
        (
            "-m verlfit train --run-dir {runs}/cal-a10-grpo-m8 --profile a10 --rollout hf --attention sdpa --plan off"
            " --algo grpo --batch-size 16 --micro-batch-size 8 --max-prompt-length 512 --max-response-length 256"
            " --model {work}/qwen2.5-0.5b-random --data {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train"
            " --test-freq -1 --save-freq -1"
        ),
    ],
    "calibrate_check": [
        (
            "-m verlfit train --run-dir {runs}/cal-a10-grpo-m16-256 --profile a10 --rollout hf --attention sdpa --plan"
            " off --algo grpo --batch-size 8 --micro-batch-size 16 --max-prompt-length 256 --max-response-length 256"
            " --model {work}/qwen2.5-0.5b-random --data {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train"
            " --test-freq -1 --save-freq -1"
        ),
    ],
    "learn": [
        (
            "-m verlfit prepare-gsm8k --input {work}/synthetic-raw --output {work}/synthetic --tokenizer"
            " {work}/qwen2.5-0.5b-random --max-prompt-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/learn-grpo-lr1e-5 --emulate p40 --algo grpo --model {work}/small-sft"
            " --data {work}/synthetic --steps 200 --batch-size 64 --max-prompt-length 256 --max-response-length 128"
            " --actor-lr 1e-5 --skip-checks --test-freq 20 --save-freq 200"
        ),
        (
            "-m verlfit train --run-dir {runs}/learn-grpo-lr3e-5 --emulate p40 --algo grpo --model {work}/small-sft"
            " --data {work}/synthetic --steps 200 --batch-size 64 --max-prompt-length 256 --max-response-length 128"
            " --actor-lr 3e-5 --skip-checks --test-freq 20 --save-freq 200"
        ),
        (
            "-m verlfit train --run-dir {runs}/learn-ppo-lr1e-5 --emulate p40 --model {work}/small-sft --data"
            " {work}/synthetic --steps 200 --batch-size 64 --max-prompt-length 256 --max-response-length 128 --actor-lr"
            " 1e-5 --critic-lr 5e-5 --skip-checks --test-freq 20 --save-freq 200"
        ),
        (
            "-m verlfit train --run-dir {runs}/learn-ppo-lr3e-5 --emulate p40 --model {work}/small-sft --data"
            " {work}/synthetic --steps 200 --batch-size 64 --max-prompt-length 256 --max-response-length 128 --actor-lr"
            " 3e-5 --critic-lr 5e-5 --skip-checks --test-freq 20 --save-freq 200"
        ),
        "benchmarks/gsm8k_synthetic.py --output {work}/synthetic-raw --train-size 4096 --test-size 256",
        (
            "benchmarks/sft_warmup.py --data-dir {work}/synthetic-raw --output {work}/small-sft --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random --seed 2"
        ),
    ],
    "export_eval": [
        "-m verlfit export {runs}/learn-grpo-lr1e-5 --force",
        (
            "-m verlfit eval {runs}/learn-grpo-lr1e-5/export/global_step_none --data {work}/synthetic --limit 256"
            " --batch-size 64 --compare {work}/small-sft --output {runs}/learn-grpo-lr1e-5/eval/global_step_none-test"
        ),
        "-m verlfit report {runs}/learn-grpo-lr1e-5",
    ],
    "bench": [
        "-m verlfit bench --rollout hf --attention sdpa --work {work}/bench --output {out}/bench-h200.json",
        "-m verlfit bench --emulate p40 --work {work}/bench --output {out}/bench-h200-emulate-p40.json",
    ],
    "speed": [
        (
            "-m verlfit train --run-dir {runs}/speed-today --emulate p40 --model {work}/qwen2.5-0.5b-random --data"
            " {work}/gsm8k --steps 10 --max-prompt-length 512 --max-response-length 256 --skip-checks"
            " --no-validate-before-train --test-freq -1 --save-freq -1 -- +actor_rollout_ref.actor.trim_padding=False"
            " +actor_rollout_ref.ref.trim_padding=False +critic.trim_padding=False"
            " +actor_rollout_ref.rollout.trim_padding=False"
        ),
        (
            "-m verlfit train --run-dir {runs}/speed-all --emulate p40 --model {work}/qwen2.5-0.5b-random --data"
            " {work}/gsm8k --steps 10 --max-prompt-length 512 --max-response-length 256 --skip-checks"
            " --no-validate-before-train --test-freq -1 --save-freq -1 -- +actor_rollout_ref.actor.trim_padding=True"
            " +actor_rollout_ref.ref.trim_padding=True +critic.trim_padding=True"
            " +actor_rollout_ref.rollout.trim_padding=True +actor_rollout_ref.rollout.cuda_graph=True"
            " +actor_rollout_ref.rollout.unwrap_fsdp=True"
        ),
        "benchmarks/decode_bench.py --model {work}/qwen2.5-0.5b-random --output {runs}/decode_bench.json",
    ],
    "fp16": [
        (
            "-m verlfit plan --emulate t4 --model {work}/qwen2.5-0.5b-random --batch-size 32 --max-prompt-length 512"
            " --max-response-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/fp16-t4 --emulate t4 --model {work}/qwen2.5-0.5b-random --data"
            " {work}/gsm8k --steps 10 --batch-size 32 --max-prompt-length 512 --max-response-length 256 --skip-checks"
            " --no-validate-before-train --test-freq -1 --save-freq -1"
        ),
        (
            "-m verlfit plan --emulate v100 --model {work}/qwen2.5-0.5b-random --batch-size 32 --max-prompt-length 512"
            " --max-response-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/fp16-v100 --emulate v100 --model {work}/qwen2.5-0.5b-random --data"
            " {work}/gsm8k --steps 10 --batch-size 32 --max-prompt-length 512 --max-response-length 256 --skip-checks"
            " --no-validate-before-train --test-freq -1 --save-freq -1"
        ),
        (
            "-m verlfit plan --profile p40 --gpu-memory 14 --model {work}/qwen2.5-0.5b-random --batch-size 32"
            " --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/fp16-p40_t4_budget --profile p40 --gpu-memory-limit 14 --model"
            " {work}/qwen2.5-0.5b-random --data {work}/gsm8k --steps 10 --batch-size 32 --max-prompt-length 512"
            " --max-response-length 256 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
        ),
    ],
    "learn_fp16": [
        (
            "-m verlfit prepare-gsm8k --input {work}/synthetic-raw --output {work}/synthetic --tokenizer"
            " {work}/qwen2.5-0.5b-random --max-prompt-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/learn-fp16-grpo-rollout-float16 --emulate t4 --algo grpo --model"
            " {work}/small-sft --data {work}/synthetic --steps 200 --batch-size 64 --max-prompt-length 256"
            " --max-response-length 128 --actor-lr 1e-5 --skip-checks --test-freq 20 --save-freq -1"
        ),
        (
            "-m verlfit train --run-dir {runs}/learn-fp16-grpo-rollout-float32 --emulate t4 --algo grpo --model"
            " {work}/small-sft --data {work}/synthetic --steps 200 --batch-size 64 --max-prompt-length 256"
            " --max-response-length 128 --actor-lr 1e-5 --skip-checks --test-freq 20 --save-freq -1"
        ),
        (
            "-m verlfit train --run-dir {runs}/learn-fp16-ppo-rollout-float16 --emulate t4 --model {work}/small-sft"
            " --data {work}/synthetic --steps 200 --batch-size 64 --max-prompt-length 256 --max-response-length 128"
            " --actor-lr 1e-5 --critic-lr 5e-5 --skip-checks --test-freq 20 --save-freq -1"
        ),
        (
            "-m verlfit train --run-dir {runs}/learn-fp16-ppo-rollout-float32 --emulate t4 --model {work}/small-sft"
            " --data {work}/synthetic --steps 200 --batch-size 64 --max-prompt-length 256 --max-response-length 128"
            " --actor-lr 1e-5 --critic-lr 5e-5 --skip-checks --test-freq 20 --save-freq -1"
        ),
        "benchmarks/gsm8k_synthetic.py --output {work}/synthetic-raw --train-size 4096 --test-size 256",
        (
            "benchmarks/sft_warmup.py --data-dir {work}/synthetic-raw --output {work}/small-sft --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random --seed 2"
        ),
    ],
    "graph_memory": [
        (
            "benchmarks/graph_memory_probe.py --model {work}/qwen2.5-0.5b-random --calls 8 --output"
            " {runs}/graph_memory.json"
        ),
    ],
    "lora_speed": [
        (
            "-m verlfit train --run-dir {runs}/lora-speed-unwrap --emulate p40 --model {work}/qwen2.5-1.5b-random"
            " --data {work}/gsm8k --steps 4 --batch-size 32 --max-prompt-length 512 --max-response-length 256"
            " --lora-rank 32 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1 --"
            " +actor_rollout_ref.actor.trim_padding=False +actor_rollout_ref.ref.trim_padding=False"
            " +critic.trim_padding=False +actor_rollout_ref.rollout.trim_padding=False"
            " +actor_rollout_ref.rollout.unwrap_fsdp=True"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora-speed-all --emulate p40 --model {work}/qwen2.5-1.5b-random --data"
            " {work}/gsm8k --steps 4 --batch-size 32 --max-prompt-length 512 --max-response-length 256 --lora-rank 32"
            " --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1 --"
            " +actor_rollout_ref.actor.trim_padding=True +actor_rollout_ref.ref.trim_padding=True"
            " +critic.trim_padding=True +actor_rollout_ref.rollout.trim_padding=True"
            " +actor_rollout_ref.rollout.cuda_graph=True +actor_rollout_ref.rollout.unwrap_fsdp=True"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora-speed-today --emulate p40 --model {work}/qwen2.5-1.5b-random --data"
            " {work}/gsm8k --steps 4 --batch-size 32 --max-prompt-length 512 --max-response-length 256 --lora-rank 32"
            " --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1 --"
            " +actor_rollout_ref.actor.trim_padding=False +actor_rollout_ref.ref.trim_padding=False"
            " +critic.trim_padding=False +actor_rollout_ref.rollout.trim_padding=False"
        ),
    ],
    "lora_1p5b_ppo": [
        "-m verlfit plan --model {work}/qwen2.5-1.5b-random --emulate p40 --lora-rank 32 --batch-size 32",
        "-m verlfit plan --model {work}/qwen2.5-1.5b-random --emulate p40 --batch-size 32",
        (
            "-m verlfit train --run-dir {runs}/lora-1p5b-ppo --emulate p40 --model {work}/qwen2.5-1.5b-random --data"
            " {work}/gsm8k --steps 10 --batch-size 32 --max-prompt-length 512 --max-response-length 256 --lora-rank 32"
            " --skip-checks --no-validate-before-train --test-freq -1 --save-freq 5"
        ),
        "benchmarks/adapter_norm.py {runs}/lora-1p5b-ppo --json {runs}/lora-1p5b-ppo.adapters.json",
    ],
    "lora_3b_grpo": [
        (
            "-m verlfit plan --model {work}/qwen2.5-3b-random --emulate p40 --algo grpo --samples 4 --lora-rank 32"
            " --batch-size 32"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora-3b-grpo --emulate p40 --algo grpo --samples 4 --model"
            " {work}/qwen2.5-3b-random --data {work}/gsm8k --steps 5 --batch-size 32 --max-prompt-length 512"
            " --max-response-length 256 --lora-rank 32 --skip-checks --no-validate-before-train --test-freq -1"
            " --save-freq 3"
        ),
        "benchmarks/adapter_norm.py {runs}/lora-3b-grpo --json {runs}/lora-3b-grpo.adapters.json",
    ],
    "learn_data": [
        "benchmarks/gsm8k_synthetic.py --output {work}/synthetic-raw --train-size 4096 --test-size 256",
        (
            "-m verlfit prepare-gsm8k --input {work}/synthetic-raw --output {work}/synthetic --tokenizer"
            " {work}/qwen2.5-0.5b-random --max-prompt-length 256"
        ),
        (
            "benchmarks/sft_warmup.py --data-dir {work}/synthetic-raw --output {work}/small-sft --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random --seed 2"
        ),
    ],
    "learn_lora": [
        (
            "-m verlfit prepare-gsm8k --input {work}/synthetic-raw --output {work}/synthetic --tokenizer"
            " {work}/qwen2.5-0.5b-random --max-prompt-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/learn-lora-grpo-lr1e-4 --emulate p40 --algo grpo --model"
            " {work}/small-sft --data {work}/synthetic --steps 200 --batch-size 64 --max-prompt-length 256"
            " --max-response-length 128 --actor-lr 1e-4 --lora-rank 32 --lora-alpha 32 --skip-checks --test-freq 20"
            " --save-freq 50"
        ),
        (
            "-m verlfit train --run-dir {runs}/learn-lora-grpo-lr3e-4 --emulate p40 --algo grpo --model"
            " {work}/small-sft --data {work}/synthetic --steps 200 --batch-size 64 --max-prompt-length 256"
            " --max-response-length 128 --actor-lr 3e-4 --lora-rank 32 --lora-alpha 32 --skip-checks --test-freq 20"
            " --save-freq 50"
        ),
        (
            "-m verlfit train --run-dir {runs}/learn-lora-ppo-lr1e-4 --emulate p40 --model {work}/small-sft --data"
            " {work}/synthetic --steps 200 --batch-size 64 --max-prompt-length 256 --max-response-length 128 --actor-lr"
            " 1e-4 --critic-lr 5e-4 --lora-rank 32 --lora-alpha 32 --skip-checks --test-freq 20 --save-freq 50"
        ),
        (
            "-m verlfit train --run-dir {runs}/learn-lora-ppo-lr3e-4 --emulate p40 --model {work}/small-sft --data"
            " {work}/synthetic --steps 200 --batch-size 64 --max-prompt-length 256 --max-response-length 128 --actor-lr"
            " 3e-4 --critic-lr 5e-4 --lora-rank 32 --lora-alpha 32 --skip-checks --test-freq 20 --save-freq 50"
        ),
        "benchmarks/gsm8k_synthetic.py --output {work}/synthetic-raw --train-size 4096 --test-size 256",
        (
            "benchmarks/sft_warmup.py --data-dir {work}/synthetic-raw --output {work}/small-sft --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random --seed 2"
        ),
    ],
    "lora16": [
        (
            "-m verlfit eval {runs}/lora16-learn-grpo-bfloat16/export/global_step_none --data {work}/synthetic"
            " --limit 256 --batch-size 64 --compare {work}/small-sft --output"
            " {runs}/lora16-learn-grpo-bfloat16/eval/global_step_none-test"
        ),
        (
            "-m verlfit eval {runs}/lora16-learn-grpo-float32/export/global_step_none --data {work}/synthetic"
            " --limit 256 --batch-size 64 --compare {work}/small-sft --output"
            " {runs}/lora16-learn-grpo-float32/eval/global_step_none-test"
        ),
        "-m verlfit export {runs}/lora16-learn-grpo-bfloat16 --force",
        "-m verlfit export {runs}/lora16-learn-grpo-float32 --force",
        (
            "-m verlfit plan --model {work}/qwen2.5-0.5b-random --auto-fit --emulate p40 --lora-rank 32 --batch-size 32"
            " --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit plan --model {work}/qwen2.5-0.5b-random --auto-fit --emulate p40 --lora-rank 32 --batch-size 32"
            " --max-prompt-length 512 --max-response-length 256 --frozen-base-dtype bfloat16 --gradient-checkpointing"
        ),
        (
            "-m verlfit plan --model {work}/qwen2.5-3b-random --auto-fit --emulate p40 --lora-rank 32 --batch-size 16"
            " --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit plan --model {work}/qwen2.5-7b-random --auto-fit --emulate a10 --rollout hf --attention sdpa"
            " --algo grpo --lora-rank 32 --batch-size 16 --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit plan --model {work}/qwen2.5-7b-random --emulate p40 --algo grpo --lora-rank 32 --batch-size 16"
            " --max-prompt-length 512 --max-response-length 256 --auto-fit"
        ),
        (
            "-m verlfit plan --model {work}/qwen3-4b-random --auto-fit --emulate t4 --algo grpo --lora-rank 32"
            " --batch-size 16 --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit prepare-gsm8k --input {work}/synthetic-raw --output {work}/synthetic --tokenizer"
            " {work}/qwen2.5-0.5b-random --max-prompt-length 256"
        ),
        "-m verlfit report {runs}/lora16-learn-grpo-bfloat16",
        "-m verlfit report {runs}/lora16-learn-grpo-float32",
        (
            "-m verlfit train --run-dir {runs}/lora16-learn-grpo-bfloat16 --emulate p40 --algo grpo --model"
            " {work}/small-sft --data {work}/synthetic --steps 200 --batch-size 64 --max-prompt-length 256"
            " --max-response-length 128 --actor-lr 1e-4 --lora-rank 32 --lora-alpha 32 --frozen-base-dtype bfloat16"
            " --skip-checks --test-freq 50 --save-freq 200"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora16-learn-grpo-float32 --emulate p40 --algo grpo --model"
            " {work}/small-sft --data {work}/synthetic --steps 200 --batch-size 64 --max-prompt-length 256"
            " --max-response-length 128 --actor-lr 1e-4 --lora-rank 32 --lora-alpha 32 --frozen-base-dtype float32"
            " --skip-checks --test-freq 50 --save-freq 200"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora16-qwen2.5-3b-ppo-p40 --model {work}/qwen2.5-3b-random --data"
            " {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1 --emulate"
            " p40 --lora-rank 32 --batch-size 16 --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora16-qwen2.5-7b-grpo-a10 --model {work}/qwen2.5-7b-random --data"
            " {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1 --emulate"
            " a10 --rollout hf --attention sdpa --algo grpo --lora-rank 32 --batch-size 16 --max-prompt-length 512"
            " --max-response-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora16-qwen3-4b-grpo-t4 --model {work}/qwen3-4b-random --data"
            " {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1 --emulate"
            " t4 --algo grpo --lora-rank 32 --batch-size 16 --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora16-speed-chosen --model {work}/qwen2.5-0.5b-random --data"
            " {work}/gsm8k --steps 4 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1 --emulate"
            " p40 --lora-rank 32 --batch-size 32 --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora16-speed-memory-first --model {work}/qwen2.5-0.5b-random --data"
            " {work}/gsm8k --steps 4 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1 --emulate"
            " p40 --lora-rank 32 --batch-size 32 --max-prompt-length 512 --max-response-length 256 --frozen-base-dtype"
            " bfloat16 --gradient-checkpointing"
        ),
        "benchmarks/gsm8k_synthetic.py --output {work}/synthetic-raw --train-size 4096 --test-size 256",
        (
            "benchmarks/make_model.py --shape qwen2.5-7b --output {work}/qwen2.5-7b-random --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random"
        ),
        (
            "benchmarks/make_model.py --shape qwen2.5-7b --output {work}/qwen2.5-7b-random --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random"
        ),
        (
            "benchmarks/make_model.py --shape qwen3-4b --output {work}/qwen3-4b-random --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random"
        ),
        (
            "benchmarks/sft_warmup.py --data-dir {work}/synthetic-raw --output {work}/small-sft --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random --seed 2"
        ),
    ],
    "lora_graph": [
        (
            "benchmarks/make_model.py --shape qwen3-4b --output {work}/qwen3-4b-random --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random"
        ),
        (
            "-m verlfit plan --model {work}/qwen3-4b-random --emulate t4 --algo grpo --lora-rank 32 --batch-size 16"
            " --max-prompt-length 512 --max-response-length 256 --no-cuda-graph"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora16-qwen3-4b-grpo-t4-graphs-off --model {work}/qwen3-4b-random --data"
            " {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1 --emulate"
            " t4 --algo grpo --lora-rank 32 --batch-size 16 --max-prompt-length 512 --max-response-length 256 --"
            " +actor_rollout_ref.rollout.cuda_graph=False"
        ),
        (
            "-m verlfit plan --model {work}/qwen3-4b-random --emulate t4 --algo grpo --lora-rank 32 --batch-size 16"
            " --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora16-qwen3-4b-grpo-t4-graphs-on --model {work}/qwen3-4b-random --data"
            " {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1 --emulate"
            " t4 --algo grpo --lora-rank 32 --batch-size 16 --max-prompt-length 512 --max-response-length 256"
        ),
    ],
    # issue 46: each NF4 target made, planned, trained 2 steps, one after the other
    "nf4": [
        (
            "benchmarks/make_model.py --shape llama-3.1-8b --output {work}/llama-3.1-8b-random --tokenizer-dir "
            "{work}/qwen2.5-0.5b-random"
        ),
        (
            "-m verlfit plan --model {work}/llama-3.1-8b-random --auto-fit --emulate t4 --algo grpo "
            "--frozen-base-dtype nf4 --lora-rank 32 --batch-size 16 --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/nf4-llama-3.1-8b-grpo-t4 --model {work}/llama-3.1-8b-random --data "
            "{work}/gsm8k --steps 2 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1 "
            "--emulate t4 --algo grpo --frozen-base-dtype nf4 --lora-rank 32 --batch-size 16 --max-prompt-length 512 "
            "--max-response-length 256"
        ),
        (
            "benchmarks/make_model.py --shape qwen2.5-7b --output {work}/qwen2.5-7b-random --tokenizer-dir "
            "{work}/qwen2.5-0.5b-random"
        ),
        (
            "-m verlfit plan --model {work}/qwen2.5-7b-random --auto-fit --emulate p40 --algo grpo "
            "--frozen-base-dtype nf4 --lora-rank 32 --batch-size 16 --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/nf4-qwen2.5-7b-grpo-p40 --model {work}/qwen2.5-7b-random --data "
            "{work}/gsm8k --steps 2 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1 "
            "--emulate p40 --algo grpo --frozen-base-dtype nf4 --lora-rank 32 --batch-size 16 --max-prompt-length 512 "
            "--max-response-length 256"
        ),
        (
            "benchmarks/make_model.py --shape qwen2.5-7b --output {work}/qwen2.5-7b-random --tokenizer-dir "
            "{work}/qwen2.5-0.5b-random"
        ),
        (
            "-m verlfit plan --model {work}/qwen2.5-7b-random --auto-fit --emulate a10 --rollout hf --attention "
            "sdpa --algo grpo --frozen-base-dtype nf4 --lora-rank 32 --batch-size 16 --max-prompt-length 512 "
            "--max-response-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/nf4-qwen2.5-7b-grpo-a10 --model {work}/qwen2.5-7b-random --data "
            "{work}/gsm8k --steps 2 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1 "
            "--emulate a10 --rollout hf --attention sdpa --algo grpo --frozen-base-dtype nf4 --lora-rank 32 "
            "--batch-size 16 --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "benchmarks/make_model.py --shape qwen2.5-14b --output {work}/qwen2.5-14b-random --tokenizer-dir "
            "{work}/qwen2.5-0.5b-random"
        ),
        (
            "-m verlfit plan --model {work}/qwen2.5-14b-random --auto-fit --emulate a10 --rollout hf --attention "
            "sdpa --algo grpo --frozen-base-dtype nf4 --lora-rank 32 --batch-size 16 --max-prompt-length 512 "
            "--max-response-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/nf4-qwen2.5-14b-grpo-a10 --model {work}/qwen2.5-14b-random --data "
            "{work}/gsm8k --steps 2 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1 "
            "--emulate a10 --rollout hf --attention sdpa --algo grpo --frozen-base-dtype nf4 --lora-rank 32 "
            "--batch-size 16 --max-prompt-length 512 --max-response-length 256"
        ),
    ],
    "lora16_speed": [
        (
            "-m verlfit plan --model {work}/qwen2.5-0.5b-random --auto-fit --emulate p40 --lora-rank 32 --batch-size 32"
            " --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora16-speed-chosen --model {work}/qwen2.5-0.5b-random --data"
            " {work}/gsm8k --steps 4 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1 --emulate"
            " p40 --lora-rank 32 --batch-size 32 --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit plan --model {work}/qwen2.5-0.5b-random --auto-fit --emulate p40 --lora-rank 32 --batch-size 32"
            " --max-prompt-length 512 --max-response-length 256 --frozen-base-dtype bfloat16 --gradient-checkpointing"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora16-speed-memory-first --model {work}/qwen2.5-0.5b-random --data"
            " {work}/gsm8k --steps 4 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1 --emulate"
            " p40 --lora-rank 32 --batch-size 32 --max-prompt-length 512 --max-response-length 256 --frozen-base-dtype"
            " bfloat16 --gradient-checkpointing"
        ),
    ],
    "multigpu": [
        "-m verlfit doctor --profile p40 --data {work}/gsm8k --model {work}/qwen2.5-0.5b-random",
        "nvidia-smi topo -m",
        (
            "-m verlfit train --run-dir {runs}/multigpu-gpus1 --emulate p40 --model {work}/qwen2.5-0.5b-random --data"
            " {work}/gsm8k --steps 10 --max-prompt-length 512 --max-response-length 256 --skip-checks"
            " --no-validate-before-train --test-freq -1 --save-freq -1 --gpus 1"
        ),
        (
            "-m verlfit train --run-dir {runs}/multigpu-gpus2 --emulate p40 --model {work}/qwen2.5-0.5b-random --data"
            " {work}/gsm8k --steps 10 --max-prompt-length 512 --max-response-length 256 --skip-checks"
            " --no-validate-before-train --test-freq -1 --save-freq -1 --gpus 2"
        ),
        (
            "-m verlfit train --run-dir {runs}/multigpu-gpus2-no-p2p --emulate p40 --model {work}/qwen2.5-0.5b-random"
            " --data {work}/gsm8k --steps 10 --max-prompt-length 512 --max-response-length 256 --skip-checks"
            " --no-validate-before-train --test-freq -1 --save-freq -1 --gpus 2"
        ),
        "-m verlfit plan --emulate p40 --model {work}/qwen2.5-1.5b-random --gpus 2",
        (
            "-m verlfit train --run-dir {runs}/multigpu-1.5b-gpus2 --emulate p40 --model {work}/qwen2.5-1.5b-random"
            " --data {work}/gsm8k --steps 10 --max-prompt-length 512 --max-response-length 256 --skip-checks"
            " --no-validate-before-train --test-freq -1 --save-freq -1 --gpus 2 --plan off --micro-batch-size 1"
            " --offload optimizer"
        ),
        "-m verlfit profiles p40 --env-shell",
        "-m ray.scripts.scripts start --head --port=6390 --num-gpus=1 --disable-usage-stats",
        "-m ray.scripts.scripts start --address=127.0.0.1:6390 --num-gpus=1 --disable-usage-stats",
        (
            "-m verlfit train --run-dir {runs}/multigpu-nodes2 --emulate p40 --model {work}/qwen2.5-0.5b-random --data"
            " {work}/gsm8k --steps 10 --max-prompt-length 512 --max-response-length 256 --skip-checks"
            " --no-validate-before-train --test-freq -1 --save-freq -1 --nodes 2 --gpus 1"
        ),
        "-m ray.scripts.scripts stop --force",
    ],
    "own_task": [
        "benchmarks/own_task.py --output {work}/own/raw --train-size 4096 --test-size 256",
        '-c import sys; sys.path.insert(0, "benchmarks"); import own_task; print(own_task.PROMPT_TEMPLATE)',
        (
            "-m verlfit prepare-data --train {work}/own/raw/train.jsonl --test {work}/own/raw/test.jsonl"
            " --question-column problem --answer-column solution --data-source verlfit/shelf-stock --prompt-template "
            " --tokenizer {work}/qwen2.5-0.5b-random --max-prompt-length 256 --output {work}/own/data"
        ),
        (
            "-m verlfit plan --model {work}/qwen3-1.7b-random --emulate p40 --algo grpo --lora-rank 16 --batch-size 16"
            " --max-prompt-length 256 --max-response-length 128"
        ),
        (
            "-m verlfit train --run-dir {runs}/own-grpo-lora-qwen3-1p7b --emulate p40 --algo grpo --lora-rank 16"
            " --model {work}/qwen3-1.7b-random --data {work}/own/data --steps 4 --batch-size 16 --max-prompt-length 256"
            " --max-response-length 128 --skip-checks --no-validate-before-train --test-freq -1 --save-freq 4"
            " --reward-function {repo}/benchmarks/own_task_reward.py:compute_score"
        ),
        "-m verlfit export {runs}/own-grpo-lora-qwen3-1p7b --force",
        (
            "-m verlfit eval {runs}/own-grpo-lora-qwen3-1p7b/export/global_step_none --data {work}/own/data"
            " --batch-size 64 --reward-function {repo}/benchmarks/own_task_reward.py:compute_score --output"
            " {runs}/own-grpo-lora-qwen3-1p7b/eval/global_step_none-test --limit 64"
        ),
        (
            "-m verlfit plan --model {work}/qwen3-0.6b-random --emulate p40 --batch-size 16 --max-prompt-length 256"
            " --max-response-length 128"
        ),
        (
            "-m verlfit train --run-dir {runs}/own-ppo-qwen3-0p6b --emulate p40 --model {work}/qwen3-0.6b-random --data"
            " {work}/own/data --steps 4 --batch-size 16 --max-prompt-length 256 --max-response-length 128 --skip-checks"
            " --no-validate-before-train --test-freq -1 --save-freq 4 --reward-function"
            " {repo}/benchmarks/own_task_reward.py:compute_score"
        ),
        "-m verlfit export {runs}/own-ppo-qwen3-0p6b --force",
        (
            "-m verlfit eval {runs}/own-ppo-qwen3-0p6b/export/global_step_none --data {work}/own/data --batch-size 64"
            " --reward-function {repo}/benchmarks/own_task_reward.py:compute_score --output"
            " {runs}/own-ppo-qwen3-0p6b/eval/global_step_none-test --limit 64"
        ),
    ],
    "lora_families": [
        '-c import sys; sys.path.insert(0, "benchmarks"); import own_task; print(own_task.PROMPT_TEMPLATE)',
        '-c import sys; sys.path.insert(0, "benchmarks"); import own_task; print(own_task.PROMPT_TEMPLATE)',
        (
            "-m verlfit plan --model {work}/llama-3.2-1b-random --emulate p40 --algo grpo --lora-rank 32 --batch-size"
            " 16 --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit plan --model {work}/llama-3.2-1b-random --emulate p40 --algo grpo --lora-rank 32 --batch-size"
            " 16 --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit plan --model {work}/llama-3.2-1b-random --emulate p40 --lora-rank 32 --batch-size 32"
            " --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit plan --model {work}/llama-3.2-3b-random --emulate p40 --algo grpo --lora-rank 16 --batch-size 8"
            " --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit plan --model {work}/qwen3-0.6b-random --emulate p40 --lora-rank 32 --batch-size 32"
            " --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit plan --model {work}/qwen3-1.7b-random --emulate p40 --lora-rank 16 --batch-size 16"
            " --max-prompt-length 256 --max-response-length 128"
        ),
        (
            "-m verlfit plan --model {work}/qwen3-4b-random --emulate p40 --algo grpo --lora-rank 16 --batch-size 8"
            " --max-prompt-length 256 --max-response-length 128"
        ),
        (
            "-m verlfit prepare-data --train {work}/own/raw/train.jsonl --test {work}/own/raw/test.jsonl"
            " --question-column problem --answer-column solution --data-source verlfit/shelf-stock --prompt-template "
            " --tokenizer {work}/qwen2.5-0.5b-random --max-prompt-length 256 --output {work}/own/data"
        ),
        (
            "-m verlfit prepare-data --train {work}/own/raw/train.jsonl --test {work}/own/raw/test.jsonl"
            " --question-column problem --answer-column solution --data-source verlfit/shelf-stock --prompt-template "
            " --tokenizer {work}/qwen2.5-0.5b-random --max-prompt-length 256 --output {work}/own/data"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora-llama-3.2-1b-grpo-gsm8k --emulate p40 --model"
            " {work}/llama-3.2-1b-random --data {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train"
            " --test-freq -1 --save-freq -1 --algo grpo --lora-rank 32 --batch-size 16 --max-prompt-length 512"
            " --max-response-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora-llama-3.2-1b-grpo-gsm8k-untrimmed --emulate p40 --model"
            " {work}/llama-3.2-1b-random --data {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train"
            " --test-freq -1 --save-freq -1 --algo grpo --lora-rank 32 --batch-size 16 --max-prompt-length 512"
            " --max-response-length 256 -- +actor_rollout_ref.actor.trim_padding=False"
            " +actor_rollout_ref.ref.trim_padding=False +actor_rollout_ref.rollout.trim_padding=False"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora-llama-3.2-1b-ppo-gsm8k --emulate p40 --model"
            " {work}/llama-3.2-1b-random --data {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train"
            " --test-freq -1 --save-freq -1 --lora-rank 32 --batch-size 32 --max-prompt-length 512"
            " --max-response-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora-llama-3.2-3b-grpo-gsm8k --emulate p40 --model"
            " {work}/llama-3.2-3b-random --data {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train"
            " --test-freq -1 --save-freq -1 --algo grpo --lora-rank 16 --batch-size 8 --max-prompt-length 512"
            " --max-response-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora-qwen3-0p6b-ppo-gsm8k --emulate p40 --model {work}/qwen3-0.6b-random"
            " --data {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
            " --lora-rank 32 --batch-size 32 --max-prompt-length 512 --max-response-length 256"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora-qwen3-1p7b-ppo-own --emulate p40 --model {work}/qwen3-1.7b-random"
            " --data {work}/own/data --steps 3 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
            " --reward-function {repo}/benchmarks/own_task_reward.py:compute_score --lora-rank 16 --batch-size 16"
            " --max-prompt-length 256 --max-response-length 128"
        ),
        (
            "-m verlfit train --run-dir {runs}/lora-qwen3-4b-grpo-own --emulate p40 --model {work}/qwen3-4b-random"
            " --data {work}/own/data --steps 3 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
            " --reward-function {repo}/benchmarks/own_task_reward.py:compute_score --algo grpo --lora-rank 16"
            " --batch-size 8 --max-prompt-length 256 --max-response-length 128"
        ),
        (
            "benchmarks/make_model.py --shape llama-3.2-1b --output {work}/llama-3.2-1b-random --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random"
        ),
        (
            "benchmarks/make_model.py --shape llama-3.2-1b --output {work}/llama-3.2-1b-random --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random"
        ),
        (
            "benchmarks/make_model.py --shape llama-3.2-1b --output {work}/llama-3.2-1b-random --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random"
        ),
        (
            "benchmarks/make_model.py --shape llama-3.2-3b --output {work}/llama-3.2-3b-random --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random"
        ),
        (
            "benchmarks/make_model.py --shape qwen3-4b --output {work}/qwen3-4b-random --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random"
        ),
        "benchmarks/own_task.py --output {work}/own/raw --train-size 4096 --test-size 256",
        "benchmarks/own_task.py --output {work}/own/raw --train-size 4096 --test-size 256",
    ],
    "learn_own": [
        "benchmarks/gsm8k_synthetic.py --output {work}/synthetic-raw --train-size 4096 --test-size 256",
        (
            "-m verlfit prepare-gsm8k --input {work}/synthetic-raw --output {work}/synthetic --tokenizer"
            " {work}/qwen2.5-0.5b-random --max-prompt-length 256"
        ),
        (
            "benchmarks/sft_warmup.py --data-dir {work}/synthetic-raw --output {work}/small-sft --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random --seed 2"
        ),
        "benchmarks/own_task.py --output {work}/own/raw --train-size 4096 --test-size 256",
        '-c import sys; sys.path.insert(0, "benchmarks"); import own_task; print(own_task.PROMPT_TEMPLATE)',
        (
            "-m verlfit prepare-data --train {work}/own/raw/train.jsonl --test {work}/own/raw/test.jsonl"
            " --question-column problem --answer-column solution --data-source verlfit/shelf-stock --prompt-template "
            " --tokenizer {work}/qwen2.5-0.5b-random --max-prompt-length 256 --output {work}/own/data"
        ),
        "benchmarks/own_task.py --warmup --output {work}/own/warmup --train-size 4096 --test-size 256",
        '-c import sys; sys.path.insert(0, "benchmarks"); import own_task; print(own_task.instruction())',
        (
            "benchmarks/sft_warmup.py --init-model {work}/small-sft --data-dir {work}/own/warmup --output"
            " {work}/own-sft --instruction  --seed 2 --eval-every 10 --max-new-tokens 128"
        ),
        (
            "-m verlfit train --run-dir {runs}/learn-own-grpo --emulate p40 --algo grpo --model {work}/own-sft --data"
            " {work}/own/data --steps 200 --batch-size 64 --max-prompt-length 256 --max-response-length 128 --actor-lr"
            " 1e-5 --skip-checks --test-freq 20 --save-freq 200 --reward-function"
            " {repo}/benchmarks/own_task_reward.py:compute_score"
        ),
        "-m verlfit export {runs}/learn-own-grpo --force",
        (
            "-m verlfit eval {runs}/learn-own-grpo/export/global_step_none --data {work}/own/data --batch-size 64"
            " --reward-function {repo}/benchmarks/own_task_reward.py:compute_score --output"
            " {runs}/learn-own-grpo/eval/global_step_none-test --compare {work}/own-sft"
        ),
    ],
    "soak_ppo": [
        "benchmarks/gsm8k_synthetic.py --output {work}/synthetic-raw --train-size 4096 --test-size 256",
        (
            "-m verlfit prepare-gsm8k --input {work}/synthetic-raw --output {work}/synthetic --tokenizer"
            " {work}/qwen2.5-0.5b-random --max-prompt-length 256"
        ),
        (
            "benchmarks/sft_warmup.py --data-dir {work}/synthetic-raw --output {work}/small-sft --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random --seed 2"
        ),
        "- {work}/gsm8k/test.parquet {work}/gsm8k-val256/test.parquet",
        (
            "benchmarks/soak_run.py --runs {runs} --name soak-ppo --total 500 --plan sigint@150 sigkill@300 -- --model"
            " {work}/small-sft --data {work}/gsm8k-val256 --steps 500 --emulate p40 --max-prompt-length 512"
            " --max-response-length 256 --batch-size 64 --save-freq 50 --test-freq 100 --skip-checks"
        ),
    ],
    "soak_grpo": [
        "benchmarks/gsm8k_synthetic.py --output {work}/synthetic-raw --train-size 4096 --test-size 256",
        (
            "-m verlfit prepare-gsm8k --input {work}/synthetic-raw --output {work}/synthetic --tokenizer"
            " {work}/qwen2.5-0.5b-random --max-prompt-length 256"
        ),
        (
            "benchmarks/sft_warmup.py --data-dir {work}/synthetic-raw --output {work}/small-sft --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random --seed 2"
        ),
        "- {work}/gsm8k/test.parquet {work}/gsm8k-val256/test.parquet",
        (
            "benchmarks/soak_run.py --runs {runs} --name soak-grpo --total 300 --plan sigint@120 -- --algo grpo"
            " --samples 4 --model {work}/small-sft --data {work}/gsm8k-val256 --steps 300 --emulate p40"
            " --max-prompt-length 512 --max-response-length 256 --batch-size 64 --save-freq 50 --test-freq 100"
            " --skip-checks"
        ),
    ],
    "fault_oom": [
        (
            "-m verlfit train --run-dir {runs}/fault-oom --emulate p40 --plan off --batch-size 64 --mini-batch-size 64"
            " --micro-batch-size 64 --model {work}/qwen2.5-0.5b-random --data {work}/gsm8k --steps 2"
            " --max-prompt-length 512 --max-response-length 256 --skip-checks --no-validate-before-train --test-freq -1"
            " --save-freq -1"
        ),
    ],
    "fault_worker": [
        "benchmarks/gsm8k_synthetic.py --output {work}/synthetic-raw --train-size 4096 --test-size 256",
        (
            "-m verlfit prepare-gsm8k --input {work}/synthetic-raw --output {work}/synthetic --tokenizer"
            " {work}/qwen2.5-0.5b-random --max-prompt-length 256"
        ),
        (
            "benchmarks/sft_warmup.py --data-dir {work}/synthetic-raw --output {work}/small-sft --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random --seed 2"
        ),
        (
            "benchmarks/soak_run.py --runs {runs} --name fault-worker --total 12 --plan kill-worker@7 -- --model"
            " {work}/small-sft --data {work}/synthetic --steps 12 --save-freq 5 --emulate p40 --batch-size 64"
            " --max-prompt-length 256 --max-response-length 128 --skip-checks --no-validate-before-train --test-freq -1"
        ),
    ],
    "fault_disk": [
        "benchmarks/gsm8k_synthetic.py --output {work}/synthetic-raw --train-size 4096 --test-size 256",
        (
            "-m verlfit prepare-gsm8k --input {work}/synthetic-raw --output {work}/synthetic --tokenizer"
            " {work}/qwen2.5-0.5b-random --max-prompt-length 256"
        ),
        (
            "benchmarks/sft_warmup.py --data-dir {work}/synthetic-raw --output {work}/small-sft --tokenizer-dir"
            " {work}/qwen2.5-0.5b-random --seed 2"
        ),
        "mountpoint -q {runs}/fault-disk-mnt",
        "mount -t tmpfs -o size=16g tmpfs {runs}/fault-disk-mnt",
        (
            "-m verlfit train --run-dir {runs}/fault-disk-mnt/run --model {work}/small-sft --data {work}/synthetic"
            " --steps 6 --save-freq 2 --emulate p40 --batch-size 64 --max-prompt-length 256 --max-response-length 128"
            " --skip-checks --no-validate-before-train --test-freq -1"
        ),
        "umount {runs}/fault-disk-mnt",
    ],
    "noeos": [
        "benchmarks/qwen3_no_eos_model.py --output {work}/qwen3-0.6b-no-eos --tokenizer-dir {work}/qwen2.5-0.5b-random",
        (
            "-m verlfit train --run-dir {runs}/noeos-qwen3-0.6b --emulate p40 --model {work}/qwen3-0.6b-no-eos --data"
            " {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
        ),
    ],
    "pack": [
        "benchmarks/collect.py {runs} --json {out}/results.json --markdown {out}/results.md",
    ],
}


@pytest.mark.parametrize("stage", sorted(EXPECTED))
def test_each_stage_starts_the_commands_it_started_before_the_run_descriptions(tmp_path, stage):
    assert stage_calls(tmp_path, stage) == EXPECTED[stage]


def test_every_stage_is_pinned():
    help_text = subprocess.run([sys.executable, str(SCRIPT), "bogus"], capture_output=True, text=True, timeout=60)
    named = help_text.stderr.split("stages: ", 1)[1].split(" (--help", 1)[0].split()
    assert sorted(EXPECTED) == sorted(named)
