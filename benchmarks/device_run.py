"""Run verlfit's GPU benchmarks on a machine with the verl stack: the stage runner.

    python3 benchmarks/device_run.py STAGE [STAGE ...]              # one after another
    python3 benchmarks/device_run.py --parallel STAGE [STAGE ...]   # all at once (one GPU, one Ray instance each)

Each stage is a row of :data:`STAGES` (name, what it runs, its help text); each writes run directories under
``$RUNS`` and appends to ``$RUNS/stages.log``. A training run is a ``Run`` (one row: its model, data, steps and words,
its plan, what runs after it), which builds its own ``verlfit train`` and ``verlfit plan`` words; most stages are such
rows, run by ``start`` (``rows``), and the few that do more stay code (see :data:`STAGES`). What every stage shares
lives in benchmarks/stage_runner.py: the ``Device`` (paths, settings, the log, the deadline: every process a stage
starts goes through ``Device.command``, every long one under the one time limit of ``Device.run_limit``, coreutils
``timeout -s INT -k 20``: SIGINT to the run's process group, SIGKILL 20 s later) and the ``Run`` rows. The runner
itself needs only the standard library; everything that touches the ML stack (verl, torch, pyarrow, this checkout's
benchmarks/*.py) runs in a child ``python3`` taken from PATH, the stack's interpreter on the device (the tests put a
recording ``python3`` there); of verlfit it imports only ``run_files.load_run``, the one reader of run.json (standard
library only).

Exit status: 0 when every stage ran to its end (a training run that fails is recorded in stages.log, not raised);
1 when a stage raised (a setup step failed: patches, a model, the data), in sequence or with ``--parallel``;
2 for no stage or an unknown stage name (nothing is written then).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tarfile
import textwrap
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path

from stage_runner import (  # benchmarks/stage_runner.py: the Device, a run as data, and what runs rows of runs
    CHECKS_OFF,
    REPO,
    Device,
    Run,
    Stage,
    last_lines,
    overrides,
    read_text,
    rows,
    run_all,
    setting,
    start,
    together,
    words,
)


# issue 13's keys (patches 0020-0023), per configuration of stage speed and stage lora_speed
TRIM_TRAIN = (
    "+actor_rollout_ref.actor.trim_padding=True",
    "+actor_rollout_ref.ref.trim_padding=True",
    "+critic.trim_padding=True",
)
TRIM_ROLLOUT = ("+actor_rollout_ref.rollout.trim_padding=True",)
CUDA_GRAPH = ("+actor_rollout_ref.rollout.cuda_graph=True",)
# generate() without FSDP's per-unit hooks: with LoRA every adapter Linear is an FSDP unit (patch 0009)
UNWRAP = ("+actor_rollout_ref.rollout.unwrap_fsdp=True",)
# the p40 profile turns the four trim keys on (profiles/p40.yaml): a configuration states every key it leaves off
# (verlfit merges a repeated key, the last value wins: overrides.merge_overrides)
NO_TRIM_TRAIN = tuple(key.replace("=True", "=False") for key in TRIM_TRAIN)
NO_TRIM_ROLLOUT = tuple(key.replace("=True", "=False") for key in TRIM_ROLLOUT)
SPEED_CONFIGURATIONS = {
    "today": NO_TRIM_TRAIN + NO_TRIM_ROLLOUT,
    "trim_train": TRIM_TRAIN + NO_TRIM_ROLLOUT,
    "trim_rollout": NO_TRIM_TRAIN + TRIM_ROLLOUT,
    "cuda_graph": NO_TRIM_TRAIN + NO_TRIM_ROLLOUT + CUDA_GRAPH,
    "unwrap": NO_TRIM_TRAIN + NO_TRIM_ROLLOUT + UNWRAP,
    "trims": TRIM_TRAIN + TRIM_ROLLOUT,  # the p40 profile's default since 2026-12-01
    "trims_unwrap": TRIM_TRAIN + TRIM_ROLLOUT + UNWRAP,  # LoRA's candidate default
    "all": TRIM_TRAIN + TRIM_ROLLOUT + CUDA_GRAPH + UNWRAP,
    "shipped": (),  # the p40 profile as verlfit ships it: no key of the run's own
}

# issue 26 item 6: LoRA on the new families, --emulate p40, 3 steps each, all at once (each capped at 22.5 GiB), with
# the plan first: (run name, make_model.py shape, data: gsm8k or own, verlfit train words)
FAMILY_512 = "--max-prompt-length 512 --max-response-length 256"  # GSM8K's lengths; the own task's are 256/128
FAMILY_256 = "--max-prompt-length 256 --max-response-length 128"
LORA_FAMILY_RUNS = (
    ("lora-qwen3-0p6b-ppo-gsm8k", "qwen3-0.6b", "gsm8k", f"--lora-rank 32 --batch-size 32 {FAMILY_512}"),
    ("lora-qwen3-1p7b-ppo-own", "qwen3-1.7b", "own", f"--lora-rank 16 --batch-size 16 {FAMILY_256}"),
    ("lora-qwen3-4b-grpo-own", "qwen3-4b", "own", f"--algo grpo --lora-rank 16 --batch-size 8 {FAMILY_256}"),
    (
        "lora-llama-3.2-1b-grpo-gsm8k",
        "llama-3.2-1b",
        "gsm8k",
        f"--algo grpo --lora-rank 32 --batch-size 16 {FAMILY_512}",
    ),
    (
        "lora-llama-3.2-3b-grpo-gsm8k",
        "llama-3.2-3b",
        "gsm8k",
        f"--algo grpo --lora-rank 16 --batch-size 8 {FAMILY_512}",
    ),
    # Llama 3.2 through PPO's whole path (actor, critic with its value head, GAE); full-parameter PPO of the 1B does
    # not fit a P40 (the planner: critic update 28.1 GiB of 22.5), so both roles carry adapters
    ("lora-llama-3.2-1b-ppo-gsm8k", "llama-3.2-1b", "gsm8k", f"--lora-rank 32 --batch-size 32 {FAMILY_512}"),
    # the same as the 1B run with the p40 profile's trims off (patches 0020-0021): the planner's full widths, so the
    # LoRA terms are checked apart from the trims' effect
    (
        "lora-llama-3.2-1b-grpo-gsm8k-untrimmed",
        "llama-3.2-1b",
        "gsm8k",
        (
            f"--algo grpo --lora-rank 32 --batch-size 16 {FAMILY_512} -- +actor_rollout_ref.actor.trim_padding=False "
            "+actor_rollout_ref.ref.trim_padding=False +actor_rollout_ref.rollout.trim_padding=False"
        ),
    ),
)

# issue 36: LoRA with the frozen base stored in 16 bits (patch 0026; verlfit sets it with --lora-rank, the profile's
# dtype: bf16 on p40/a10, fp16 on t4). Each target is planned (NAME.plan, the planner's auto-fit as train runs it) and
# trained 3 steps on random weights made here: (run name, make_model.py shape, verlfit plan and train words)
LORA16_SIZE = "--lora-rank 32 --batch-size 16 --max-prompt-length 512 --max-response-length 256"
LORA16_TARGETS = (
    ("lora16-qwen3-4b-grpo-t4", "qwen3-4b", f"--emulate t4 --algo grpo {LORA16_SIZE}"),
    ("lora16-qwen2.5-3b-ppo-p40", "qwen2.5-3b", f"--emulate p40 {LORA16_SIZE}"),
    # this stack has neither vLLM nor flash-attn: the a10 profile's bf16 path with the HF rollout and SDPA
    (
        "lora16-qwen2.5-7b-grpo-a10",
        "qwen2.5-7b",
        f"--emulate a10 --rollout hf --attention sdpa --algo grpo {LORA16_SIZE}",
    ),
)
# issue 43 item 4: the 4B T4 target trained its passes 3-4x slower than the time model and the 7B A10 target 2x, where
# the 3B P40 target (fp32 compute) was within 3%. These two rows change one thing each: the Qwen3-4B shape in bf16 (the
# a10 path of the 7B), and the Qwen2.5-3B shape in fp16 (the t4 path of the 4B). Stage lora_graph runs them by name.
LORA16_CALIBRATION_TARGETS = (
    (
        "lora16-qwen3-4b-grpo-a10",
        "qwen3-4b",
        f"--emulate a10 --rollout hf --attention sdpa --algo grpo {LORA16_SIZE}",
    ),
    ("lora16-qwen2.5-3b-grpo-t4", "qwen2.5-3b", f"--emulate t4 --algo grpo {LORA16_SIZE}"),
)
# issue 46: LoRA on a frozen base stored in NF4 (patch 0028, --frozen-base-dtype nf4): an 8B on the T4's budget, a 7B
# on the P40's, a 14B on the A10's (HF rollout), each planned first (NAME.plan) and trained NF4_STEPS steps alone on
# random weights (make_model.py saves these shapes in bf16, as the real checkpoints): (run name, shape, words)
NF4_TARGETS = (
    ("nf4-llama-3.1-8b-grpo-t4", "llama-3.1-8b", f"--emulate t4 --algo grpo --frozen-base-dtype nf4 {LORA16_SIZE}"),
    ("nf4-qwen2.5-7b-grpo-p40", "qwen2.5-7b", f"--emulate p40 --algo grpo --frozen-base-dtype nf4 {LORA16_SIZE}"),
    # the step time against the 16-bit base where both fit: lora16-qwen2.5-7b-grpo-a10 with the base in NF4
    (
        "nf4-qwen2.5-7b-grpo-a10",
        "qwen2.5-7b",
        f"--emulate a10 --rollout hf --attention sdpa --algo grpo --frozen-base-dtype nf4 {LORA16_SIZE}",
    ),
    (
        "nf4-qwen2.5-14b-grpo-a10",
        "qwen2.5-14b",
        f"--emulate a10 --rollout hf --attention sdpa --algo grpo --frozen-base-dtype nf4 {LORA16_SIZE}",
    ),
)
# issue 36 item 2, (c) of stage lora16: LoRA PPO of the 0.5B shape on the P40 card (rank 32, batch 32, 512/256). The
# speed pick takes the fp32 base at micro-batch 16 (the P40's time estimate: no upcast of the base per unit and decode
# step); with --frozen-base-dtype bfloat16 and --gradient-checkpointing kept, auto-fit makes the memory-first choice
# (the bf16 base, the largest micro-batches). (run name suffix, the words that keep verlfit from the speed pick)
LORA16_SPEED_SIZE = "--emulate p40 --lora-rank 32 --batch-size 32 --max-prompt-length 512 --max-response-length 256"
LORA16_SPEED_RUNS = (
    ("chosen", ""),
    ("memory-first", "--frozen-base-dtype bfloat16 --gradient-checkpointing"),
)

# the 256-row validation slice of the soak stages, written by the stack's python3 (pyarrow) from stdin
VALIDATION_SLICE = """\
import os, sys
import pyarrow.parquet as pq
source, target = sys.argv[1:3]
pq.write_table(pq.read_table(source).slice(0, 256), target + ".partial")
os.replace(target + ".partial", target)
"""
OWN_TASK_PROMPT = 'import sys; sys.path.insert(0, "benchmarks"); import own_task; print(own_task.PROMPT_TEMPLATE)'
OWN_TASK_INSTRUCTION = 'import sys; sys.path.insert(0, "benchmarks"); import own_task; print(own_task.instruction())'


# the main job's sequence lengths (prompt <= 512, response <= 256), and the learning check's sizes
MAIN_LENGTHS = words("--max-prompt-length 512 --max-response-length 256")
LEARN_SIZES = words("--batch-size 64 --max-prompt-length 256 --max-response-length 128")
SMOKE_SIZES = words("--batch-size 8 --max-response-length 32")  # the tiny model: batch 8, responses <= 32 tokens
P40_GRPO = words("--emulate p40 --algo grpo")


# -- shared makers --------------------------------------------------------------------------------------------------
def learn_data(device: Device) -> None:
    """The synthetic problems and the SFT-warmed small model of learn, learn_lora, the soak and fault stages.

    One maker at a time: ``--parallel soak_ppo soak_grpo fault_worker fault_disk`` all need them. The raw problems
    go beside the prepared folder, not inside it: verlfit writes prepared data only into a folder holding nothing else.
    """
    raw, synthetic, small = device.work / "synthetic-raw", device.work / "synthetic", device.work / "small-sft"
    sizes = words("--train-size 4096 --test-size 256")
    with device.one_maker("learn_data"):
        if not (raw / "train.jsonl").is_file():
            device.python("benchmarks/gsm8k_synthetic.py", "--output", str(raw), *sizes, check=True)
        if not (synthetic / "train.parquet").is_file():
            prepare = ("--input", str(raw), "--output", str(synthetic), "--tokenizer", str(device.model))
            device.verlfit("prepare-gsm8k", *prepare, "--max-prompt-length", "256", check=True)
        # seed 2 stopped at step 450 with 0.340 on the dev split (the stop rule is >= 0.25), ~30 s on an H200; 0.315
        # greedy accuracy on 200 test problems (2026-11-29)
        if not (small / "config.json").is_file():
            warmup = ("--data-dir", str(raw), "--output", str(small), "--tokenizer-dir", str(device.model))
            made = device.python("benchmarks/sft_warmup.py", *warmup, "--seed", "2", capture=True, check=True)
            device.record(last_lines(made.stdout, 3))


def own_data(device: Device) -> None:
    """The own task's problems, prepared by verlfit prepare-data with the local tokenizer (all models here share it)."""
    own = device.own
    with device.one_maker("own_data"):
        if not (own / "raw" / "train.jsonl").is_file():
            sizes = words("--train-size 4096 --test-size 256")
            device.python("benchmarks/own_task.py", "--output", str(own / "raw"), *sizes, check=True)
        if not (own / "data" / "train.parquet").is_file():
            template = device.python("-c", OWN_TASK_PROMPT, capture=True).stdout or ""
            rows = ("--train", str(own / "raw" / "train.jsonl"), "--test", str(own / "raw" / "test.jsonl"))
            columns = words("--question-column problem --answer-column solution --data-source verlfit/shelf-stock")
            prompt = ("--prompt-template", template.rstrip("\n"), "--tokenizer", str(device.model))
            output = ("--max-prompt-length", "256", "--output", str(own / "data"))
            prepared = device.verlfit("prepare-data", *rows, *columns, *prompt, *output, capture=True, check=True)
            device.record(last_lines(prepared.stdout, 4))


def own_warmup(device: Device) -> None:
    """The small model warmed up on the own task's problems (sft_warmup.py from learn's small-sft): ``$WORK/own-sft``.

    learn's small-sft, warmed up on GSM8K-style problems, scored 0.016 on the own task's held-out problems and GRPO
    moved it to 0.023 in 200 steps: with 4 samples a prompt almost every group earned nothing, so its advantages were
    zero. A model that sometimes earns reward (0.2-0.4, as learn's) is what a learning check needs: warm it up on
    own-task problems (never the RL splits' ones: own_task.write_warmup_splits), prompted exactly as the RL run is.
    """
    small, own_small, warmup = device.work / "small-sft", device.work / "own-sft", device.own / "warmup"
    with device.one_maker("own_warmup"):
        if not (warmup / "train.jsonl").is_file():
            sizes = words("--train-size 4096 --test-size 256")
            device.python("benchmarks/own_task.py", "--warmup", "--output", str(warmup), *sizes, check=True)
        if not (own_small / "config.json").is_file():
            instruction = (device.python("-c", OWN_TASK_INSTRUCTION, capture=True).stdout or "").rstrip("\n")
            folders = ("--init-model", str(small), "--data-dir", str(warmup), "--output", str(own_small))
            schedule = words("--seed 2 --eval-every 10 --max-new-tokens 128")
            made = device.python(
                "benchmarks/sft_warmup.py", *folders, "--instruction", instruction, *schedule, capture=True, check=True
            )
            device.record(last_lines(made.stdout, 3))


def soak_data(device: Device) -> None:
    """``$WORK/gsm8k-val256``: the prepared GSM8K's training set (linked) and the first 256 rows of its test set."""
    validation = device.work / "gsm8k-val256"
    with device.one_maker("soak_data"):
        if (validation / "test.parquet").is_file():
            return
        validation.mkdir(parents=True, exist_ok=True)
        link = validation / "train.parquet"
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(device.data / "train.parquet")
        device.python(
            "-", str(device.data / "test.parquet"), str(validation / "test.parquet"), stdin=VALIDATION_SLICE, check=True
        )


def adapters(device: Device, name: str) -> None:
    """The adapters' norms per checkpoint into the log and ``$RUNS/NAME.adapters.json``; then the full shards go.

    verl saves the whole FSDP state (frozen base included) beside lora_adapter/: ~12 GiB a checkpoint here. Once the
    adapters are read, only lora_adapter/ is kept of every checkpoint but the newest (a run cut by a deadline is
    resumed from it: :meth:`Device.train_or_resume`), unless KEEP_FULL_CHECKPOINTS is set.
    """
    run = device.runs / name
    norms = device.python(
        "benchmarks/adapter_norm.py", str(run), "--json", str(device.runs / f"{name}.adapters.json"), capture=True
    )
    device.record((norms.stdout or "").splitlines(), f"  {name} adapter| ")
    if setting("KEEP_FULL_CHECKPOINTS"):
        return
    newest = read_text(run / "checkpoints" / "latest_checkpointed_iteration.txt", "none")
    for checkpoint in (run / "checkpoints").glob("global_step_*"):
        if checkpoint.name != f"global_step_{newest}":
            for shard in checkpoint.rglob("*.pt"):
                shard.unlink()


def export_and_eval(
    device: Device, name: str, data: Path, options: tuple[str, ...], extra: tuple[str, ...] = ()
) -> Path | None:
    """``verlfit export`` of run NAME's last checkpoint, then ``verlfit eval EXPORT --data DATA OPTIONS --output FOLDER
    EXTRA``; the eval folder.

    Returns None when the export failed (logged).
    """
    run = device.runs / name
    step = read_text(run / "checkpoints" / "latest_checkpointed_iteration.txt", "none")
    status = device.verlfit(
        "export", str(run), "--force", output=device.runs / f"{name}.export.console", timed=True
    ).returncode
    device.log(f"end export {name} (checkpoint of step {step}): status {status}")
    device.show(device.console_tail(device.runs / f"{name}.export.console", 3), "  export| ")
    if status != 0:
        return None
    output = run / "eval" / f"global_step_{step}-test"
    exported = (str(run / "export" / f"global_step_{step}"), "--data", str(data), *options)
    status = device.verlfit(
        "eval", *exported, "--output", str(output), *extra, output=device.runs / f"{name}.eval.console", timed=True
    ).returncode
    device.log(f"end eval {name}: status {status}")
    device.record(device.console_tail(device.runs / f"{name}.eval.console", 5), "  eval| ")
    return output


def own_export_eval(device: Device, name: str, *eval_arguments: str) -> None:
    """Export run NAME's last checkpoint and eval it with the own task's reward function (``$RUNS/NAME.eval.json``)."""
    options = ("--batch-size", "64", "--reward-function", f"{device.own_reward_file}:compute_score")
    output = export_and_eval(device, name, device.own / "data", options, eval_arguments)
    if output is None:
        return
    for summary in ("summary.json", "comparison.json"):  # the comparison, when there is one, wins
        if (output / summary).is_file():
            shutil.copyfile(output / summary, device.runs / f"{name}.eval.json")


def soak(device: Device, run: Run, plan: str) -> None:
    """One run through its interruption plan (benchmarks/soak_run.py), re-entrant: the events done are kept."""
    events = device.runs / f"{run.name}.events"
    done = ""
    if events.is_file():
        done = "; events so far: " + ",".join(
            line.split("\t")[1] for line in events.read_text().splitlines() if "\t" in line
        )
    device.log(f"soak {run.name}: {run.steps} steps, plan '{plan}'{done}")
    deadline = ("--deadline", setting("DEADLINE")) if setting("DEADLINE") else ()
    soak_run = ("--runs", str(device.runs), "--name", run.name, "--total", run.steps, "--plan", plan, *deadline)
    status = device.python("benchmarks/soak_run.py", *soak_run, "--", *run.arguments()).returncode
    device.log(f"soak {run.name}: status {status}")


# -- stages ---------------------------------------------------------------------------------------------------------
def stage_setup(device: Device) -> None:
    site = (
        device.site
        or device.python(
            "-c",
            "import os, verl; print(os.path.dirname(os.path.dirname(verl.__file__)))",
            capture=True,
            stdout_only=True,  # verl 0.4.1 warns on stderr as it imports (pkg_resources is deprecated)
            check=True,
        ).stdout.strip()
    )
    if device.python("patches/apply.py", "--status", site, output=Path(os.devnull)).returncode == 0:
        device.log(f"patch series already applied to {site}")
    else:
        device.python("patches/apply.py", site, check=True)
    device.python(
        "-c",
        "import verl.workers.actor.dp_actor, verl.workers.fsdp_workers; print('patched verl imports without "
        "flash_attn')",
        check=True,
    )
    if device.make_model("qwen2.5-0.5b", device.model, tokenizer=False):
        raise RuntimeError(f"setup: make_model.py --shape qwen2.5-0.5b --output {device.model} failed")
    # the bigger shapes (random weights, the 0.5B's tokenizer) only when a stage of this call trains them
    named = set(device.named_stages) | set(words(setting("SETUP_FOR")))
    bigger = []
    if named & {"lora_1p5b_ppo", "lora_speed"}:
        bigger.append(("qwen2.5-1.5b", device.model_1p5b))
    if "lora_3b_grpo" in named:
        bigger.append(("qwen2.5-3b", device.model_3b))
    if "own_task" in named:
        bigger += [("qwen3-0.6b", device.model_qwen3_0p6b), ("qwen3-1.7b", device.model_qwen3_1p7b)]
    if not setting("SKIP_TINY"):
        bigger.append(("tiny", device.tiny))
    for shape, model in bigger:
        if device.make_model(shape, model):
            raise RuntimeError(f"setup: make_model.py --shape {shape} --output {model} failed")
    if not (device.data / "train.parquet").is_file():
        prepare = ("--input", str(device.gsm8k_dir), "--output", str(device.data), "--tokenizer", str(device.model))
        device.verlfit("prepare-gsm8k", *prepare, "--max-prompt-length", "512", check=True)
    query = ("--query-gpu=name,memory.total,driver_version", "--format=csv,noheader")
    device.record(device.command(["nvidia-smi", *query], capture=True, check=True).stdout.splitlines())


def stage_gputests(device: Device) -> None:
    console = device.runs / "gputests.console"
    status = device.python(
        "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu", output=console, timed=True
    ).returncode
    if status:
        device.log(f"tests/gpu: status {status}")
    device.record(device.console_tail(console, 15))


def smoke(device: Device, name: str, steps: str, *, sizes: tuple[str, ...] = SMOKE_SIZES, **fields) -> Run:
    """A smoke run: the tiny model on GSM8K under ``--emulate p40``, ``steps`` steps of batch 8 with responses of at
    most 32 tokens (``fields``: the rest of the row)."""
    return Run(name, device.tiny, device.data, steps, sizes=sizes, **fields)


def smoke_runs(device: Device) -> tuple[Run, ...]:
    return smoke(device, "smoke-ppo", "3"), smoke(device, "smoke-grpo", "3", profile=P40_GRPO)


def smoke_resume_runs(device: Device) -> tuple[Run, ...]:
    # a run that checkpoints at its last step (2), continued to 4 by `verlfit train --resume`: the resume path end to
    # end (its record, its checkpoint, its ETA from the estimate run.json recorded) on the tiny model
    def resumed(device: Device, name: str) -> None:
        device.log(f"resume {name}: verlfit train --resume {device.runs / name} --steps 4")
        device.resume(name, device.runs / name, "--steps", "4", label=f"{name} resume")

    return (smoke(device, "smoke-resume", "2", checks=(*CHECKS_OFF, "--save-freq", "2"), after=resumed),)


# issue 44 item 4: a reward function split into two files, the scorer importing its helper from beside it
REWARD_HELPER_FILES = {
    "gsm8k_answer.py": (
        '''"""The final answer of a GSM8K-style response: the number after its last '####'."""


def final_answer(text):
    marker = text.rfind("####")
    if marker < 0:
        return None
    return text[marker + 4 :].strip().replace(",", "")
'''
    ),
    "reward.py": (
        '''"""1.0 when the response's final answer is the ground truth, else 0.0 (the helper lies beside this file)."""

from gsm8k_answer import final_answer


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if final_answer(solution_str) == str(ground_truth).strip() else 0.0
'''
    ),
}


def reward_helper_runs(device: Device) -> tuple[Run, ...]:
    # the files written each time (they are small); the run trains the tiny model 2 steps and validates at step 2, so
    # verl imports the reward (and its helper) in its trainer and its validation alike
    folder = device.work / "reward-helper"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in REWARD_HELPER_FILES.items():
        (folder / name).write_text(text, encoding="utf-8")
    reward = ("--reward-function", f"{folder / 'reward.py'}:compute_score")
    checks = words("--skip-checks --test-freq 2 --save-freq -1")
    return (smoke(device, "reward-helper", "2", sizes=(*SMOKE_SIZES, *reward), checks=checks),)


def main_runs(device: Device) -> tuple[Run, ...]:
    # ~13.5 s a step alone on an H200 at prompt 512, ~18 s more for each checkpoint save (2026-11-29): the run is
    # planned as 25 steps ending on verl's checkpoint (~11 GiB), and main_resume extends it to 50 through verl's own
    # resume (--steps 50), so no step is trained twice and none is lost to a deadline
    checks = (*CHECKS_OFF, "--save-freq", "25")
    return (Run("main-ppo", device.model, device.data, "25", sizes=MAIN_LENGTHS, checks=checks),)


def stage_main_resume(device: Device) -> None:
    run = device.runs / "main-ppo"
    device.log(f"resume main-ppo: verlfit train --resume {run}")
    device.resume("main-ppo", run, "--steps", "50", label="main-ppo resume")


def grpo_runs(device: Device) -> tuple[Run, ...]:
    sizes = ("--batch-size", setting("GRPO_BATCH", "32"), *MAIN_LENGTHS)
    return (Run("main-grpo", device.model, device.data, setting("GRPO_STEPS", "10"), profile=P40_GRPO, sizes=sizes),)


def public_runs(device: Device) -> tuple[Run, ...]:
    # the blog posts' P40 shape: batch 1, mini-batch 1, micro-batch 1, eager attention, fp32, 256/256
    profile = words("--emulate p40 --plan off --attention eager")
    sizes = words("--batch-size 1 --mini-batch-size 1 --micro-batch-size 1 --max-prompt-length 256")
    steps = setting("PUBLIC_STEPS", "10")
    sizes = (*sizes, "--max-response-length", "256")
    return (Run("public-recipe", device.model, device.data, steps, profile=profile, sizes=sizes),)


def tuned_runs(device: Device) -> tuple[Run, ...]:
    sizes = words("--max-prompt-length 256 --max-response-length 256")
    return (Run("tuned-p40", device.model, device.data, setting("TUNED_STEPS", "10"), sizes=sizes),)


def a10_runs(device: Device) -> tuple[Run, ...]:
    # bf16 + sdpa + HF rollout: flash-attn and vLLM are not on this machine (the real A10 image uses both)
    profile = words("--profile a10 --rollout hf --attention sdpa --gpu-memory-limit 24")
    extra = ("--", "actor_rollout_ref.actor.use_torch_compile=False")
    return (Run("a10-like", device.model, device.data, "20", profile=profile, extra=extra),)


def speed_keys(device: Device, config: str, stage: str) -> tuple[str, ...] | None:
    """The extra verl overrides of one speed configuration; None (logged) for an unknown name."""
    if config not in SPEED_CONFIGURATIONS:
        device.log(f"stage {stage}: unknown configuration '{config}' ({' '.join(SPEED_CONFIGURATIONS)})")
        return None
    return SPEED_CONFIGURATIONS[config]


def speed_runs(device: Device) -> Iterator[Run]:
    for config in words(setting("SPEED_CONFIGS", "today all")):
        keys = speed_keys(device, config, "speed")
        if keys is not None:
            steps = setting("SPEED_STEPS", "10")
            yield Run(f"speed-{config}", device.model, device.data, steps, sizes=MAIN_LENGTHS, extra=overrides(keys))


def stage_speed(device: Device) -> None:
    # Sequential by default: 10 steps x ~14 s plus ~1-1.5 min of start-up per run. SPEED_PARALLEL=1 runs them at
    # once: then step times include the others' load (memory figures do not).
    run_all(device, tuple(speed_runs(device)), at_once=bool(setting("SPEED_PARALLEL")))
    if setting("SKIP_DECODE_BENCH"):
        return
    device.log("start decode_bench: batch 32 and 64, prompts 100-256 of 256 columns, 256 new tokens, fp32")
    result = device.runs / "decode_bench.json"
    bench, console = ("--model", str(device.model), "--output", str(result)), device.runs / "decode_bench.console"
    status = device.python("benchmarks/decode_bench.py", *bench, output=console, timed=True).returncode
    if status:
        device.log(f"decode_bench: status {status}")
    device.show(device.console_tail(device.runs / "decode_bench.console", 4), "  decode_bench| ")
    if result.is_file():
        shutil.copyfile(result, device.out / "decode_bench.json")


FP16_CONFIGURATIONS = {
    "t4": ("--emulate", "t4"),
    "v100": ("--emulate", "v100"),
    "p40_t4_budget": ("--profile", "p40", "--gpu-memory-limit", "14"),
}


def fp16_runs(device: Device) -> Iterator[Run]:
    # ~1.5 min of start-up plus 10 steps per run; the fp32 run of the P40 profile took 6.6 s a step at 22.5 GiB; each
    # planned first (plan calls the limit --gpu-memory)
    sizes = ("--batch-size", "32", *MAIN_LENGTHS)
    for config in words(setting("FP16_CONFIGS", "t4 v100 p40_t4_budget")):
        if config not in FP16_CONFIGURATIONS:
            device.log(f"stage fp16: unknown configuration '{config}' ({' '.join(FP16_CONFIGURATIONS)})")
            continue
        selection = FP16_CONFIGURATIONS[config]
        plan_selection = tuple("--gpu-memory" if word == "--gpu-memory-limit" else word for word in selection)
        plan = (*plan_selection, "--model", str(device.model), *sizes)
        steps = setting("FP16_STEPS", "10")
        yield Run(f"fp16-{config}", device.model, device.data, steps, profile=selection, sizes=sizes, plan=plan)


def learning_check(
    device: Device,
    name: str,
    algo: str,
    learning_rate: str,
    *,
    profile: tuple[str, ...] = ("--emulate", "p40"),
    critic_lr: str = "5e-5",
    adapter: tuple[str, ...] = (),
    model: Path | None = None,
    data: Path | None = None,
    **fields,
) -> Run:
    """One run of the learning check (200 steps, batch 64, 256/128) of learn's SFT-warmed small model on its
    synthetic problems (``model``, ``data``: others): PPO gets ``critic_lr``; ``adapter``: LoRA's words after the
    learning rates; ``fields``: the rest of the row (checks, extra, environment, resume, after)."""
    algorithm = ("--algo", "grpo") if algo == "grpo" else ()
    rates = ("--actor-lr", learning_rate, *(("--critic-lr", critic_lr) if algo == "ppo" else ()))
    model, data = model or device.work / "small-sft", data or device.work / "synthetic"
    return Run(
        name, model, data, "200", profile=(*profile, *algorithm), sizes=(*LEARN_SIZES, *rates, *adapter), **fields
    )


def learn_runs(device: Device) -> tuple[Run, ...]:
    # responses up to 128 tokens: the synthetic answers take 49-88 tokens (median 62) with the local tokenizer, so 64
    # would cut off the final "#### N" of about one in six. --save-freq 200: one checkpoint, of the last step, for
    # export_eval. LEARN_ALGOS, LEARN_TAG (a suffix for the run names) and LEARN_EXTRA (more verlfit train words)
    # run variants of the same check.
    learn_data(device)
    checks = ("--skip-checks", "--test-freq", setting("LEARN_TEST_FREQ", "20"), "--save-freq", "200")
    extra = words(setting("LEARN_EXTRA"))
    return tuple(
        learning_check(device, f"learn-{algo}-lr{lr}{setting('LEARN_TAG')}", algo, lr, checks=checks, extra=extra)
        for lr in words(setting("LEARN_LRS", "1e-5 3e-5"))
        for algo in words(setting("LEARN_ALGOS", "ppo grpo"))
    )


def learn_fp16_runs(device: Device) -> tuple[Run, ...]:
    # learn's check at one learning rate (1e-5: 3e-5 made fp32 PPO fall in the learn stage), fp16 training under the
    # T4's memory, with the profile's fp16 rollout and with an fp32 rollout; 200 steps x ~1.1 s + start-up, all at once
    learn_data(device)
    checks = ("--skip-checks", "--test-freq", setting("LEARN_TEST_FREQ", "20"), "--save-freq", "-1")
    t4 = {"profile": ("--emulate", "t4"), "checks": checks}
    return tuple(
        learning_check(
            device, f"learn-fp16-{algo}-rollout-{rollout}", algo, "1e-5", **t4, environment=(("VLLM_DTYPE", rollout),)
        )
        for rollout in words(setting("LEARN_FP16_ROLLOUTS", "float16 float32"))
        for algo in ("ppo", "grpo")
    )


def learn_lora_runs(device: Device) -> tuple[Run, ...]:
    # The learning check of stage learn with LoRA. Rank 32 on the small model (hidden 256, 4 layers): an eighth of
    # the full rank of its square projections, enough room that capacity is not what is tested, and the adapter stays
    # small (720,896 parameters on the 4 layers). alpha 32 (scaling 1) and learning rates ten times the
    # full-parameter check's: Schulman et al., "LoRA Without Regret" (Thinking Machines, 2025) find the best LoRA
    # learning rate about 10x full fine-tuning's, roughly independent of the rank under alpha/r scaling, and RL
    # (policy gradient) as well served by LoRA as by full fine-tuning even at small ranks. The critic (LoRA at the
    # same rank, its value head trained in full, patch 0011) gets ten times its full-parameter rate too.
    algos = words(setting("LEARN_LORA_ALGOS", "ppo grpo"))
    for algo in algos:  # a typo would run nothing and say nothing
        if algo not in ("ppo", "grpo"):
            device.log(
                f"learn_lora: LEARN_LORA_ALGOS has '{algo}'; write ppo, grpo or both (\"ppo grpo\"): nothing run"
            )
            return ()
    learn_data(device)
    # --save-freq 50: a run a deadline cuts is resumed the next time the stage runs (train_or_resume)
    checks = ("--skip-checks", "--test-freq", setting("LEARN_TEST_FREQ", "20"), "--save-freq", "50")
    adapter, extra = words("--lora-rank 32 --lora-alpha 32"), words(setting("LORA_EXTRA"))
    lora = {"critic_lr": "5e-4", "adapter": adapter, "checks": checks, "extra": extra, "resume": True}
    return tuple(
        learning_check(device, f"learn-lora-{algo}-lr{lr}", algo, lr, **lora)
        for lr in words(setting("LEARN_LORA_LRS", "1e-4 3e-4"))
        for algo in ("ppo", "grpo")
        if algo in algos
    )


def stage_learn_data(device: Device) -> None:
    learn_data(device)


def export_against_validation(device: Device, name: str) -> None:
    """Learning-check run NAME's last checkpoint as a Hugging Face model (``verlfit export``), scored by ``verlfit
    eval`` against learn's SFT-warmed small model it started from (``--compare``) on the 256 held-out problems the
    run's validation used (same greedy decoding, same strict score, the run's profile, its response length): the
    comparison in ``$RUNS/NAME.eval.json``, the report's validation and eval lines in the log. The run must save its
    last step (``--save-freq 200``). Agreement is within noise: about +-0.03 for one accuracy on 256 rows."""
    small, run = device.work / "small-sft", device.runs / name
    step = read_text(run / "checkpoints" / "latest_checkpointed_iteration.txt", "none")
    device.log(f"export_eval {name}: verlfit export (checkpoint of step {step}), then verlfit eval --compare {small}")
    output = export_and_eval(
        device, name, device.work / "synthetic", ("--limit", "256", "--batch-size", "64", "--compare", str(small))
    )
    if output is None:
        return
    if (output / "comparison.json").is_file():
        shutil.copyfile(output / "comparison.json", device.runs / f"{name}.eval.json")
    if device.verlfit("report", str(run), output=Path(os.devnull)).returncode == 0:
        summary = read_text(run / "report" / "summary.txt", "").splitlines()
        device.record([line for line in summary if line.startswith(("validation ", "eval "))])


def stage_export_eval(device: Device) -> None:
    # stage learn's run EXPORT_RUN (default learn-grpo-lr1e-5; fp32 + SDPA from the run's p40 profile, responses <= 128
    # tokens). On 2026-11-29 learn-grpo-lr1e-5 validated at 0.320 (step 0) and 0.520 (step 200).
    export_against_validation(device, setting("EXPORT_RUN", "learn-grpo-lr1e-5"))


def stage_graph_memory(device: Device) -> None:
    # issue 13: does patch 0022 leave allocated memory behind per generate call? benchmarks/graph_memory_probe.py
    # decodes GRAPH_MEMORY_CALLS times with a fresh StaticDecoder each, with a new side stream per capture (as before
    # the fix) and with capture_stream (the fix), and records torch.cuda.memory_allocated after each
    calls = setting("GRAPH_MEMORY_CALLS", "8")
    device.log(
        f"start graph_memory: allocated memory after each of {calls} CUDA-graph generate calls, per capture-stream "
        "policy"
    )
    result = device.runs / "graph_memory.json"
    probe = ("--model", str(device.model), "--calls", calls, "--output", str(result))
    status = device.python(
        "benchmarks/graph_memory_probe.py", *probe, output=device.runs / "graph_memory.console", timed=True
    ).returncode
    if status:
        device.log(f"graph_memory: status {status}")
    device.record(device.console_tail(device.runs / "graph_memory.console", 6), "  graph_memory| ")
    if result.is_file():
        shutil.copyfile(result, device.out / "graph_memory.json")


def lora_speed_runs(device: Device) -> Iterator[Run]:
    # lora_1p5b_ppo (2026-12-01): 63.5 s of generation a step (~250 ms per decode step at batch 32) against 7.4 s for
    # the full-parameter 0.5B; the suspect is FSDP's hooks on every adapter unit per token (patch 0023). Unwrapped
    # first, so a run cut short by the deadline still measures the key.
    if not (device.model_1p5b / "config.json").is_file():
        device.log(f"lora_speed: no {device.model_1p5b} (run setup with this stage named)")
        return
    sizes = ("--batch-size", "32", *MAIN_LENGTHS, "--lora-rank", "32")
    for config in words(setting("LORA_SPEED_CONFIGS", "unwrap all today")):
        keys = speed_keys(device, config, "lora_speed")
        if keys is not None:
            steps = setting("LORA_SPEED_STEPS", "4")
            name = f"lora-speed-{config}"
            yield Run(name, device.model_1p5b, device.data, steps, sizes=sizes, extra=overrides(keys))


def calibration(profile: str, runs: dict[str, str]) -> Callable[[Device], Iterator[Run]]:
    """3 steps of each run (name -> verlfit train words) without a memory limit: allocated memory is the real need."""

    def describe(device: Device) -> Iterator[Run]:
        for name, arguments in runs.items():
            yield Run(
                name, device.model, device.data, "3", profile=(*words(profile), "--plan", "off", *words(arguments))
            )

    return describe


CALIBRATE_P40 = {
    "cal-p40-ppo-m4-512": "--micro-batch-size 4 --max-prompt-length 512 --max-response-length 256",
    "cal-p40-ppo-m8-opt": "--micro-batch-size 8 --offload optimizer --max-prompt-length 256 --max-response-length 128",
    "cal-p40-grpo-m4": (
        "--algo grpo --batch-size 8 --micro-batch-size 4 --offload optimizer "
        "--max-prompt-length 512 --max-response-length 256"
    ),
}
CALIBRATE_A10 = {
    "cal-a10-ppo-m8": "--micro-batch-size 8 --max-prompt-length 512 --max-response-length 256",
    "cal-a10-ppo-m4-nockpt": (
        "--micro-batch-size 4 --no-gradient-checkpointing --max-prompt-length 256 --max-response-length 256"
    ),
    "cal-a10-grpo-m8": (
        "--algo grpo --batch-size 16 --micro-batch-size 8 --max-prompt-length 512 --max-response-length 256"
    ),
}
# an independent check of the eager bf16 entropy coefficient that cal-a10-ppo-m8 / cal-a10-grpo-m8 fitted: another
# micro-batch (log-prob 32) and sequence split (256/256); the planner puts its peak in the old log-prob
CALIBRATE_CHECK = {
    "cal-a10-grpo-m16-256": (
        "--algo grpo --batch-size 8 --micro-batch-size 16 --max-prompt-length 256 --max-response-length 256"
    ),
}
A10_HF = "--profile a10 --rollout hf --attention sdpa"  # the a10 profile without vLLM and flash-attn


def own_task_runs(device: Device) -> Iterator[Run]:
    # GRPO with LoRA on the Qwen3-1.7B shape; PPO full-parameter on the Qwen3-0.6B shape: 4 steps each, no
    # validation, one checkpoint of the last step for export; the plan first (its predicted peak against the run's)
    own_data(device)
    sizes = words("--batch-size 16 --max-prompt-length 256 --max-response-length 128")
    for name, model, algo in (
        ("own-grpo-lora-qwen3-1p7b", device.model_qwen3_1p7b, words("--algo grpo --lora-rank 16")),
        ("own-ppo-qwen3-0p6b", device.model_qwen3_0p6b, ()),
    ):
        if not (model / "config.json").is_file():
            device.log(f"own_task: no {model} (run setup with this stage named)")
            continue
        yield Run(
            name,
            model,
            device.own / "data",
            "4",
            profile=("--emulate", "p40", *algo),
            sizes=sizes,
            checks=(*CHECKS_OFF, "--save-freq", "4"),
            extra=device.own_reward,
            plan=("--model", str(model), "--emulate", "p40", *algo, *sizes),
            after=lambda device, name: own_export_eval(device, name, "--limit", "64"),
        )


def learn_own_runs(device: Device) -> tuple[Run, ...]:
    learn_data(device)
    own_data(device)
    own_warmup(device)
    start = device.work / "own-sft"

    def validated_then_compared(device: Device, name: str) -> None:
        key = "val-core/verlfit/shelf-stock/reward/mean@1"
        metrics = device.runs / name / "metrics.jsonl"
        scores = [
            json.dumps({key: record[key]})[1:-1]
            for record in map(json.loads, read_text(metrics, "").splitlines())
            if key in record
        ]
        device.record(scores[:1] + scores[-1:], f"  {name} validation| ")
        own_export_eval(device, name, "--compare", str(start))
        device.log(
            "learn_own: expected a held-out difference (model - start) of at least +0.10 in "
            f"{device.runs / name}.eval.json"
        )

    # as learn's GRPO run at its first learning rate, on the own task and scored by its reward function (training and
    # validation: verl uses the custom reward for both); the 256 held-out problems are validated every 20 steps
    checks = words("--skip-checks --test-freq 20 --save-freq 200")
    return (
        learning_check(
            device,
            "learn-own-grpo",
            "grpo",
            "1e-5",
            model=start,
            data=device.own / "data",
            checks=checks,
            extra=device.own_reward,
            after=validated_then_compared,
        ),
    )


def lora_family_run(device: Device, name: str, shape: str, data: str, arguments: str) -> None:
    """One row of LORA_FAMILY_RUNS: make the model if missing, plan (the words before ``--``), train 3 steps."""
    model = device.work / f"{shape}-random"
    with device.one_maker(shape):
        status = device.make_model(shape, model, output=device.runs / f"{name}.make.console")
    if status:
        device.log(f"lora_families: making {model} failed: status {status}")
        return
    reward: tuple[str, ...] = ()
    if data == "own":
        own_data(device)
        data_path, reward = device.own / "data", device.own_reward
    else:
        data_path = device.data
    plan = ("--model", str(model), "--emulate", "p40", *words(arguments.split(" -- ")[0]))
    start(device, Run(name, model, data_path, "3", extra=(*reward, *words(arguments)), plan=plan))


def stage_lora_families(device: Device) -> None:
    chosen = words(setting("LORA_FAMILY_NAMES"))  # only these names (e.g. two waves that do not share the GPU's memory)
    together(
        *(lambda row=row: lora_family_run(device, *row) for row in LORA_FAMILY_RUNS if not chosen or row[0] in chosen)
    )


def lora16_model(device: Device, shape: str) -> int:
    """``$WORK/SHAPE-random``, made once (random weights, the 0.5B's tokenizer); make_model.py's status."""
    with device.one_maker(shape):
        return device.make_model(shape, device.work / f"{shape}-random", output=device.runs / f"make-{shape}.console")


def lora16_target(device: Device, name: str, shape: str, arguments: str) -> None:
    """One row of LORA16_TARGETS: make the model if missing, plan, train 3 steps."""
    status = lora16_model(device, shape)
    if status:
        device.log(f"lora16: making {device.work}/{shape}-random failed: status {status}")
        return
    model = device.work / f"{shape}-random"
    plan = ("--model", str(model), "--auto-fit", *words(arguments))
    start(device, Run(name, model, device.data, "3", profile=(), extra=words(arguments), plan=plan))


def lora16_seven_b_plan(device: Device) -> None:
    """The 7B's plan on a P40 (no run: its verdict is "does not fit"; the plan shows the arithmetic per phase)."""
    if lora16_model(device, "qwen2.5-7b") == 0:
        model = ("--model", str(device.work / "qwen2.5-7b-random"))
        plan = (*model, *P40_GRPO, *words(LORA16_SIZE), "--auto-fit")
        device.verlfit("plan", *plan, output=device.runs / "lora16-qwen2.5-7b-grpo-p40.plan")


def lora16_speed_runs(device: Device) -> Iterator[Run]:
    """(c) of stage lora16: auto-fit's speed pick, then the memory-first choice, one after the other.

    Each is planned first (``$RUNS/lora16-speed-NAME.plan``, ``verlfit plan --auto-fit``) and trained
    LORA16_SPEED_STEPS steps (default 4) as ``$RUNS/lora16-speed-NAME`` on setup's 0.5B shape and GSM8K; the
    runs' statuses are logged, never raised (:meth:`Device.train`).
    """
    for name, kept in LORA16_SPEED_RUNS:
        arguments = (*words(LORA16_SPEED_SIZE), *words(kept))
        plan = ("--model", str(device.model), "--auto-fit", *arguments)
        steps = setting("LORA16_SPEED_STEPS", "4")
        yield Run(f"lora16-speed-{name}", device.model, device.data, steps, profile=(), extra=arguments, plan=plan)


def lora_graph_runs(device: Device) -> Iterator[Run]:
    """Issue 43's side by side: LORA_GRAPH_TARGETS (default the 4B GRPO LoRA T4 target; names of LORA16_TARGETS or
    LORA16_CALIBRATION_TARGETS) in LORA_GRAPH_MODES (default "off on") one after the other, each with the GPU to
    itself, LORA_GRAPH_STEPS (default 3) steps, each planned first (NAME.plan). Modes: ``on``, verlfit's default;
    ``off``, CUDA-graph decoding off (``+actor_rollout_ref.rollout.cuda_graph=False``); ``units``, the adapters as
    FSDP units again (``+actor_rollout_ref.model.adapters_outside_fsdp=False``, patch 0027's key; the default with
    LoRA before it); ``before``, both (verlfit's default with LoRA before issue 43)."""
    chosen = words(setting("LORA_GRAPH_TARGETS", "lora16-qwen3-4b-grpo-t4"))
    graphs_off, units = (
        "+actor_rollout_ref.rollout.cuda_graph=False",
        "+actor_rollout_ref.model.adapters_outside_fsdp=False",
    )
    # (train's words, plan's words): plan takes no verl overrides; its --no-cuda-graph is the same switch (it has none
    # for patch 0027's key: the plan of units and before estimates the adapters outside FSDP)
    modes = {
        "off": (("--", graphs_off), ("--no-cuda-graph",)),
        "on": ((), ()),
        "units": (("--", units), ()),
        "before": (("--", graphs_off, units), ("--no-cuda-graph",)),
    }
    for name, shape, arguments in (*LORA16_TARGETS, *LORA16_CALIBRATION_TARGETS):
        if name not in chosen:
            continue
        if lora16_model(device, shape):
            device.log(f"lora_graph: making {device.work}/{shape}-random failed")
            continue
        model = device.work / f"{shape}-random"
        for mode in words(setting("LORA_GRAPH_MODES", "off on")):
            if mode not in modes:
                device.log(f"lora_graph: LORA_GRAPH_MODES has '{mode}'; write some of {', '.join(modes)}")
                continue
            train, plan = modes[mode]
            steps = setting("LORA_GRAPH_STEPS", "3")
            extra, plan = (*words(arguments), *train), ("--model", str(model), *words(arguments), *plan)
            yield Run(f"{name}-graphs-{mode}", model, device.data, steps, profile=(), extra=extra, plan=plan)


def nf4_runs(device: Device) -> Iterator[Run]:
    """Issue 46's targets (NF4_TARGETS; NF4_NAMES: only these run names), one after the other, each with the GPU to
    itself, NF4_STEPS (default 2) steps, each planned first (NAME.plan); the random model made once per shape
    (``$WORK/SHAPE-random``, as stage lora16's)."""
    chosen = words(setting("NF4_NAMES", " ".join(name for name, _, _ in NF4_TARGETS)))
    for name, shape, arguments in NF4_TARGETS:
        if name not in chosen:
            continue
        model = device.work / f"{shape}-random"
        made = lora16_model(device, shape)
        if made:
            device.log(f"nf4: making {model} failed: status {made}")
            continue
        plan = ("--model", str(model), "--auto-fit", *words(arguments))
        yield Run(name, model, device.data, setting("NF4_STEPS", "2"), profile=(), extra=words(arguments), plan=plan)


def stage_lora16(device: Device) -> None:
    # (a) the targets, all at once (caps 14 + 22.5 + 22 GiB), and the 7B's plan on a P40; (c) once the targets end,
    # the speed pick's two runs (lora16_speed) unless LORA16_SPEED=0. (b) the learning check of
    # learn_lora's GRPO run (the SFT-warmed small model, rank 32, alpha 32, lr 1e-4, 200 steps) with the base in 16
    # bits, beside the same run with --frozen-base-dtype float32 (LORA16_LEARN_BASES). The small model is fp32 on disk
    # (sft_warmup.py): the 16-bit run rounds its frozen base to bf16 when verl loads it, so its reference policy (the
    # adapter off) is that rounding, while the float32 run keeps the weights as saved.
    learn_data(device)
    jobs = []
    # each run saves its last step, exported and scored against its own validation once it ends (issue 46 item 4:
    # the merged model differs from the trained one by the base's rounding, bf16's or NF4's)
    checks = ("--skip-checks", "--test-freq", setting("LEARN_TEST_FREQ", "50"), "--save-freq", "200")
    for base in words(setting("LORA16_LEARN_BASES", "bfloat16 float32")):
        if base not in ("bfloat16", "float32", "nf4"):  # nf4: issue 46's learning check (patch 0028)
            device.log(f"lora16: LORA16_LEARN_BASES has '{base}'; write some of bfloat16, float32 and nf4")
            continue
        adapter = (*words("--lora-rank 32 --lora-alpha 32"), "--frozen-base-dtype", base)
        run = learning_check(
            device,
            f"lora16-learn-grpo-{base}",
            "grpo",
            "1e-4",
            adapter=adapter,
            checks=checks,
            after=export_against_validation,
        )
        jobs.append(partial(start, device, run))

    def targets_then_speed() -> None:
        # (c) once the targets are done (the learning check's small model still shares the GPU, with both runs
        # alike); LORA16_SPEED=0 leaves it out (stage lora16_speed runs it alone)
        together(*(lambda row=row: lora16_target(device, *row) for row in LORA16_TARGETS))
        if setting("LORA16_SPEED", "1") != "0":
            run_all(device, lora16_speed_runs(device))

    # LORA16_PARTS (default "learn targets"): "learn" alone gives the learning check the GPU to itself
    parts = words(setting("LORA16_PARTS", "learn targets"))
    for part in parts:
        if part not in ("learn", "targets"):
            device.log(f"lora16: LORA16_PARTS has '{part}'; write learn, targets or both: nothing run")
            return
    if "learn" not in parts:
        jobs = []
    if "targets" in parts:
        jobs += [targets_then_speed, lambda: lora16_seven_b_plan(device)]
    together(*jobs)


def stage_bench(device: Device) -> None:
    gsm8k = ("--gsm8k", str(device.gsm8k_dir)) if (device.gsm8k_dir / "train.jsonl").is_file() else ()
    # the card as it is: an H200 (9.0) gets the a10 profile, whose vLLM rollout and FlashAttention-2 this stack lacks
    # (bench refuses at once without them), so HF generate and SDPA, as on an A10 without them (profiles/a10.yaml
    # fallbacks); the public recipe keeps its eager attention
    modes = {
        "card": (("--rollout", "hf", "--attention", "sdpa"), "bench-h200.json", "bench"),
        "emulate_p40": (("--emulate", "p40"), "bench-h200-emulate-p40.json", "bench --emulate p40"),
    }
    for mode in words(setting("BENCH_MODES", "card emulate_p40")):
        if mode not in modes:
            device.log(f"stage bench: unknown mode '{mode}' (card emulate_p40)")
            continue
        selection, output, label = modes[mode]
        places = ("--work", str(device.work / "bench"), "--output", str(device.out / output))
        bench = device.verlfit("bench", *selection, *places, *gsm8k, capture=True)
        lines = (bench.stdout or "").splitlines()
        with open(device.runs / "stages.log", "a") as log:
            log.write("".join(line + "\n" for line in lines))
        device.show(lines[-20:])
        if bench.returncode:
            device.log(f"{label}: status {bench.returncode}")


def stage_lora_1p5b_ppo(device: Device) -> None:
    model = device.model_1p5b
    if not (model / "config.json").is_file():
        device.log(f"lora_1p5b_ppo: no {model} (run setup with this stage named)")
        return
    # the planner's verdict with LoRA, then for full-parameter PPO of the same model, for the README table
    for name, adapter in (("lora-1p5b-ppo", ("--lora-rank", "32")), ("full-1p5b-ppo", ())):
        plan = ("--model", str(model), "--emulate", "p40", *adapter, "--batch-size", "32")
        device.verlfit("plan", *plan, output=device.runs / f"{name}.plan")
    sizes = ("--batch-size", "32", *MAIN_LENGTHS, "--lora-rank", "32")
    checks, extra = (*CHECKS_OFF, "--save-freq", "5"), words(setting("LORA_EXTRA"))
    lora = Run("lora-1p5b-ppo", model, device.data, "10", sizes=sizes, checks=checks, extra=extra, resume=True)
    start(device, replace(lora, after=adapters))


def lora_3b_grpo_runs(device: Device) -> Iterator[Run]:
    model = device.model_3b
    if not (model / "config.json").is_file():
        device.log(f"lora_3b_grpo: no {model} (run setup with this stage named)")
        return
    batch, samples = setting("LORA_3B_BATCH", "32"), setting("LORA_3B_SAMPLES", "4")
    profile = (*P40_GRPO, "--samples", samples)
    plan = ("--model", str(model), *profile, "--lora-rank", "32", "--batch-size", batch)
    # save at step 3 and at the last step (verl saves every --save-freq steps and at the end)
    yield Run(
        "lora-3b-grpo",
        model,
        device.data,
        setting("LORA_3B_STEPS", "5"),
        profile=profile,
        sizes=("--batch-size", batch, *MAIN_LENGTHS, "--lora-rank", "32"),
        checks=(*CHECKS_OFF, "--save-freq", "3"),
        extra=words(setting("LORA_EXTRA")),
        plan=plan,
        resume=True,
        after=adapters,
    )


def stage_multigpu(device: Device) -> None:
    steps, big, port = setting("MULTIGPU_STEPS", "10"), device.model_1p5b, setting("MULTIGPU_RAY_PORT", "6390")
    one = Run("multigpu-gpus1", device.model, device.data, steps, sizes=MAIN_LENGTHS, extra=("--gpus", "1"))
    topology = device.runs / "multigpu-topology.console"
    device.verlfit(
        "doctor", "--profile", "p40", "--data", str(device.data), "--model", str(device.model), output=topology
    )
    device.command(["nvidia-smi", "topo", "-m"], output=topology, append=True)
    lines = topology.read_text(errors="replace").splitlines()
    shown = next((lines[index : index + 13] for index, line in enumerate(lines) if " topology " in line), [])
    device.record(shown)
    start(device, one)
    start(device, replace(one, name="multigpu-gpus2", extra=("--gpus", "2")))
    no_p2p = (("NCCL_P2P_DISABLE", "1"),)
    start(device, replace(one, name="multigpu-gpus2-no-p2p", extra=("--gpus", "2"), environment=no_p2p))
    if device.make_model("qwen2.5-1.5b", big):
        raise RuntimeError(f"multigpu: make_model.py --shape qwen2.5-1.5b --output {big} failed")
    status = device.verlfit(
        "plan", "--emulate", "p40", "--model", str(big), "--gpus", "2", output=device.runs / "multigpu-1.5b.plan"
    ).returncode
    if status:
        device.log(f"plan 1.5B on 2 emulated P40s: status {status} (the planner says it does not fit)")
    by_hand = words("--gpus 2 --plan off --micro-batch-size 1 --offload optimizer")
    start(device, Run("multigpu-1.5b-gpus2", big, device.data, "10", sizes=MAIN_LENGTHS, extra=by_hand))
    # two nodes on one host: each raylet sees one GPU; a pre-started cluster's workers take their environment from
    # `ray start` (verl's main_ppo.py:42-45), so the profile's knobs and the emulated card's limit go there: bash
    # evaluates the profile's export lines (verlfit profiles --env-shell) and starts the two raylets
    defaults = device.verlfit("profiles", "p40", "--env-shell", capture=True).stdout or ""
    start_ray = (
        'eval "$1"; export VERLFIT_GPU_MEMORY_LIMIT_GIB=22.5\n'
        'CUDA_VISIBLE_DEVICES=0 python3 -m ray.scripts.scripts start --head --port="$2" --num-gpus=1 '
        "--disable-usage-stats\n"
        'CUDA_VISIBLE_DEVICES=1 python3 -m ray.scripts.scripts start --address="127.0.0.1:$2" --num-gpus=1 '
        "--disable-usage-stats\n"
    )
    status = device.command(
        ["bash", "-c", start_ray, "start_ray", defaults, port], output=device.runs / "multigpu-ray.console"
    ).returncode
    if status:
        device.log(f"ray start: status {status}")
    cluster = (("RAY_ADDRESS", f"127.0.0.1:{port}"),)
    start(device, replace(one, name="multigpu-nodes2", extra=("--nodes", "2", "--gpus", "1"), environment=cluster))
    device.python(
        "-m", "ray.scripts.scripts", "stop", "--force", output=device.runs / "multigpu-ray.console", append=True
    )


# the soak runs' words after --steps (soak_run.py adds --run-dir, or --resume)
SOAK_ARGUMENTS = words(
    "--emulate p40 --max-prompt-length 512 --max-response-length 256 --batch-size 64 --save-freq 50 --test-freq 100 "
    "--skip-checks"
)
# the fault stages' small runs: learn's sizes without validation (their --save-freq comes before these words)
FAULT_SMALL_ARGUMENTS = (*words("--emulate p40"), *LEARN_SIZES, *CHECKS_OFF)


def soak_run(device: Device, name: str, steps: str, profile: tuple[str, ...] = ()) -> Run:
    """A soak run's words: learn's small model on the real GSM8K's training set, validated on 256 of its test rows."""
    model, data = device.work / "small-sft", device.work / "gsm8k-val256"
    return Run(name, model, data, str(int(steps)), profile=profile, sizes=SOAK_ARGUMENTS, checks=())


def stage_soak_ppo(device: Device) -> None:
    learn_data(device)
    soak_data(device)
    run = soak_run(device, "soak-ppo", setting("SOAK_PPO_STEPS", "500"))
    soak(device, run, os.environ.get("SOAK_PPO_PLAN", "sigint@150 sigkill@300"))


def stage_soak_grpo(device: Device) -> None:
    learn_data(device)
    soak_data(device)
    run = soak_run(device, "soak-grpo", setting("SOAK_GRPO_STEPS", "300"), profile=words("--algo grpo --samples 4"))
    soak(device, run, os.environ.get("SOAK_GRPO_PLAN", "sigint@120"))


def fault_oom_runs(device: Device) -> Iterator[Run]:
    run = device.runs / "fault-oom"
    if (run / "run.json").is_file():
        device.log(f"fault_oom: done in an earlier call ({run}): {device.run_outcome(run)}")
        return

    def diagnosed(device: Device, name: str) -> None:
        device.verlfit_diagnosis(name)
        device.log(f"fault_oom outcome: {device.run_outcome(device.runs / name)}")

    profile = words("--emulate p40 --plan off --batch-size 64 --mini-batch-size 64 --micro-batch-size 64")
    yield Run("fault-oom", device.model, device.data, "2", profile=profile, sizes=MAIN_LENGTHS, after=diagnosed)


def fault_small(device: Device, name: str, steps: str, save_freq: str) -> Run:
    """A fault stage's run: learn's small model on its synthetic problems, saving every ``save_freq`` steps."""
    model, data = device.work / "small-sft", device.work / "synthetic"
    sizes = ("--save-freq", save_freq)
    return Run(name, model, data, steps, profile=(), sizes=sizes, checks=FAULT_SMALL_ARGUMENTS)


def stage_fault_worker(device: Device) -> None:
    learn_data(device)
    soak(device, fault_small(device, "fault-worker", "12", "5"), os.environ.get("FAULT_WORKER_PLAN", "kill-worker@7"))


def checkpoints_in(run: Path) -> str:
    """A run's global_step_* folders in step order, on one line."""
    folders = [path.name for path in (run / "checkpoints").glob("global_step_*") if path.is_dir()]
    return " ".join(
        sorted(folders, key=lambda name: int(name.rsplit("_", 1)[1]) if name.rsplit("_", 1)[1].isdigit() else -1)
    )


def event_line(stamp: str, what: str, step: str, status: int, said: str) -> str:
    """One line of ``$RUNS/fault-disk.events`` in soak_run.py's columns (time, event, step, -, status, message)."""
    return "\t".join((stamp, what, step, "-", str(status), said.replace("\t", " "))) + "\n"


def stage_fault_disk(device: Device) -> None:
    mount_point, keep = device.runs / "fault-disk-mnt", device.runs / "fault-disk"
    run, console, events = mount_point / "run", device.runs / "fault-disk.console", device.runs / "fault-disk.events"
    tracker = run / "checkpoints" / "latest_checkpointed_iteration.txt"
    if (keep / "run.json").is_file():
        device.log(f"fault_disk: done in an earlier call ({keep}): {device.run_outcome(keep)}")
        return
    learn_data(device)
    mount_point.mkdir(parents=True, exist_ok=True)
    if device.command(["mountpoint", "-q", str(mount_point)]).returncode == 0:
        device.log(f"fault_disk: {mount_point} is still mounted from an earlier call: unmounting, starting again")
        if device.command(["umount", str(mount_point)]).returncode:
            return
    # big at first: the step-2 checkpoint's real size is measured, then the tmpfs is shrunk around it
    mounted = device.command(["mount", "-t", "tmpfs", "-o", "size=16g", "tmpfs", str(mount_point)], capture=True)
    if mounted.returncode:
        device.log(f"tmpfs mount refused: {(mounted.stdout or '').strip()}")
        return
    device.log(
        f"fault_disk: tmpfs of 16 GiB at {mount_point}; verlfit train --run-dir {run}, checkpoints every 2 steps"
    )

    def used_bytes() -> int:
        return int(
            device.command(["df", "--output=used", "-B1", str(mount_point)], capture=True, check=True).stdout.split()[
                -1
            ]
        )

    start = time.monotonic()
    result: dict[str, int] = {}
    arguments = fault_small(device, "fault-disk", "6", "2").arguments()
    training = threading.Thread(
        target=lambda: result.update(
            status=device.verlfit("train", "--run-dir", str(run), *arguments, output=console, timed=True).returncode
        )
    )
    training.start()
    while training.is_alive() and not tracker.is_file():
        time.sleep(1)
    if tracker.is_file():
        used = used_bytes()
        size = used * 3 // 2
        if device.command(["mount", "-o", f"remount,size={size}", str(mount_point)]).returncode == 0:
            device.log(
                f"fault_disk: step-2 checkpoint complete, {used} bytes used; tmpfs shrunk to {size} bytes: the "
                "step-4 checkpoint cannot fit"
            )
        else:
            device.log(f"fault_disk: remount to {size} bytes refused")
        sizes = device.command(["du", "-sb", *map(str, (run / "checkpoints").glob("global_step_*"))], capture=True)
        device.record((sizes.stdout or "").splitlines(), "  fault-disk| ")
    training.join()
    status = result.get("status", 1)
    device.log(
        f"end fault-disk: status {status} after {int(time.monotonic() - start)} s (expected: a failure at the step-4 "
        "save)"
    )
    device.verlfit_diagnosis("fault-disk")
    device.log(f"fault_disk outcome: {device.run_outcome(run)}")
    device.log(f"fault_disk checkpoints left: {checkpoints_in(run)} (tracker: {read_text(tracker, 'none')})")
    files = [
        f"{path.stat().st_size} {path.relative_to(run / 'checkpoints')}"
        for path in sorted((run / "checkpoints").glob("global_step_*/**/*"))
        if path.is_file()
    ]
    with open(device.runs / "stages.log", "a") as log:
        log.write("".join(f"  fault-disk file| {line}\n" for line in files))
    said = [line for line in device.console_tail(console, 10**6) if line.startswith("verlfit:")]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    with open(events, "a") as record:
        record.write(
            event_line(stamp, "full disk at the step-4 save", read_text(tracker, "0"), status, said[-1] if said else "")
        )
    if (run / "run.json").is_file():
        grown = (used_bytes() + 1) * 8
        if device.command(["mount", "-o", f"remount,size={grown}", str(mount_point)]).returncode == 0:
            device.log(f"fault_disk: tmpfs grown to {grown} bytes; verlfit train --resume {run}")
        with open(console, "a") as handle:
            handle.write("== resume\n")
        before = console.stat().st_size
        status = device.verlfit("train", "--resume", str(run), output=console, append=True, timed=True).returncode
        device.log(f"end fault-disk resume: status {status}")
        device.show(device.console_tail(console, 5), "  fault-disk| ")
        # the resume's own last word (verlfit's line, or the display's "finished at step N/M"), not the failed run's
        with open(console, "rb") as handle:
            handle.seek(before)
            resumed = handle.read().decode(errors="replace").splitlines()
        last = [line for line in resumed if line.startswith(("verlfit:", "finished at step"))]
        with open(events, "a") as record:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            record.write(
                event_line(
                    stamp, "resume after growing the disk", read_text(tracker, "0"), status, last[-1] if last else "-"
                )
            )
        device.log(f"fault_disk checkpoints after the resume: {checkpoints_in(run)}")
        keep.mkdir(parents=True, exist_ok=True)
        for name in ("run.json", "metrics.jsonl"):
            if (run / name).is_file():
                shutil.copyfile(run / name, keep / name)
        if (run / "train.log").is_file():
            (keep / "train.log").write_text(
                "".join(line + "\n" for line in last_lines((run / "train.log").read_text(errors="replace"), 400))
            )
    status = device.command(["umount", str(mount_point)]).returncode
    if status:
        device.log(f"fault_disk: umount {mount_point}: status {status}")


def noeos_runs(device: Device) -> Iterator[Run]:
    # issue 29: the CUDA-graph decoder raised TypeError on eos_token_id=None at the first generation (and verl's HF
    # rollout itself died one line after generate: patch 0025); expected now: 3 steps, every response of full length
    if not (device.model / "tokenizer.json").is_file():
        device.log(f"noeos: no {device.model} (run setup first: it makes the tokenizer and GSM8K)")
        return
    if not (device.model_no_eos / "config.json").is_file():
        made = ("--output", str(device.model_no_eos), "--tokenizer-dir", str(device.model))
        status = device.python("benchmarks/qwen3_no_eos_model.py", *made).returncode
        if status:
            device.log(f"noeos: making {device.model_no_eos} failed: status {status}")
            return
    yield Run("noeos-qwen3-0.6b", device.model_no_eos, device.data, "3", after=noeos_lengths)


def noeos_lengths(device: Device, name: str) -> None:
    """The run's outcome, and the response lengths of its steps, into the log."""
    device.log(f"noeos outcome: {device.run_outcome(device.runs / name)}")
    # without an EOS every response is response_length tokens long: min = mean = max, clip_ratio 1.0
    records = map(json.loads, read_text(device.runs / name / "metrics.jsonl", "").splitlines())
    device.record(
        [
            f"step {record['step']} response_length min/mean/max/clip_ratio "
            + " ".join(str(record.get(f"response_length/{key}")) for key in ("min", "mean", "max", "clip_ratio"))
            for record in records
            if "response_length/mean" in record
        ],
        "  noeos| ",
    )


PACKED_NAMES = ("run.json", "metrics.jsonl", "stages.log", "train.log")
PACKED_SUFFIXES = (".console", ".eval.json", ".adapters.json", ".plan", ".rss.csv", ".events", ".soak.json")


def stage_pack(device: Device) -> None:
    for name in ("soak-ppo", "soak-grpo"):
        if (device.runs / name / "run.json").is_file():
            checked = device.python(
                "benchmarks/soak_check.py",
                str(device.runs / name),
                "--json",
                str(device.runs / f"{name}.soak.json"),
                capture=True,
            )
            device.record((checked.stdout or "").splitlines(), f"  {name} soak| ")
    # the run records at most one folder down, not the tmpfs of fault_disk; train.log can be long: its last 400 lines
    found = sorted(
        path
        for path in [*device.runs.glob("*"), *device.runs.glob("*/*")]
        if path.is_file()
        and (path.name in PACKED_NAMES or path.name.endswith(PACKED_SUFFIXES))
        and path.relative_to(device.runs).parts[0] != "fault-disk-mnt"
    )
    archive = device.out / "runs.tar.gz"
    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, "w:gz") as tar:
        for path in found:
            if path.name == "train.log":
                tail = path.with_name("train.log.tail")
                tail.write_text("".join(line + "\n" for line in last_lines(path.read_text(errors="replace"), 400)))
                path = tail
            tar.add(path, arcname=f"./{path.relative_to(device.runs)}")
    partial.replace(archive)
    results = ("--json", str(device.out / "results.json"), "--markdown", str(device.out / "results.md"))
    device.python("benchmarks/collect.py", str(device.runs), *results, check=True)
    device.show((device.out / "results.md").read_text().splitlines())
    device.show([f"{path.stat().st_size:>12} {path.name}" for path in sorted(device.out.iterdir())])


# A stage whose training runs are rows of Run is rows(DESCRIBE): DESCRIBE(device) makes what they need and gives the
# runs from the settings. Code stays where a stage is more than its runs: setup (patches, models, data), gputests,
# main_resume (a resume alone), speed (its decode benchmark after), export_eval, graph_memory and bench (other
# commands than train), lora_1p5b_ppo (a second plan, of full-parameter PPO, between its own and the run),
# lora_families and lora16 (models made per row inside the threads; lora16's parts at once with (c) after the
# targets), multigpu (topology, a Ray cluster started between runs), the soak and fault_worker stages
# (benchmarks/soak_run.py's interruption plan), fault_disk (a tmpfs shrunk while the run trains) and pack.
STAGES = (
    Stage(
        "setup",
        stage_setup,
        "apply patches/verl-0.4.1 to the installed verl, make the models and prepare GSM8K (the bigger shapes only "
        "for the stages named in the same call or in SETUP_FOR)",
    ),
    Stage("smoke", rows(smoke_runs), "3 steps each of p40-emulated PPO and GRPO on a tiny random Qwen2"),
    Stage(
        "smoke_resume",
        rows(smoke_resume_runs),
        "a 2-step p40-emulated PPO on the tiny Qwen2 that checkpoints at step 2, resumed to 4 steps (--resume)",
    ),
    Stage(
        "gputests",
        stage_gputests,
        "the pytest suite tests/gpu (3-step p40-emulated PPO and GRPO through verlfit train)",
    ),
    Stage(
        "reward_helper",
        rows(reward_helper_runs),
        "a reward function in two files ($WORK/reward-helper/reward.py importing gsm8k_answer.py beside it), "
        "--reward-function FILE:compute_score: the tiny model's p40-emulated PPO, 2 steps, validation at step 2",
    ),
    Stage(
        "main",
        rows(main_runs),
        "PPO, Qwen2.5-0.5B shape, real GSM8K, --emulate p40 (prompt <= 512, response <= 256): steps 1-25, ending on a "
        "checkpoint; main_resume extends it to 50 steps (verlfit train --resume --steps 50)",
    ),
    Stage("main_resume", stage_main_resume, "verlfit train --resume of main's run to 50 steps"),
    Stage("grpo", rows(grpo_runs), "10 GRPO steps, 32 prompts x 4 samples, same setup (GRPO_STEPS, GRPO_BATCH)"),
    Stage(
        "public",
        rows(public_runs),
        "the public P40 recipe (batch 1, micro-batch 1, eager, fp32, 256/256) under the same limit, 10 steps",
    ),
    Stage("tuned", rows(tuned_runs), "verlfit's p40 configuration (planner) at 256/256 under the same limit, 10 steps"),
    Stage("a10", rows(a10_runs), "a10-like path (bf16, sdpa, HF rollout), 20 steps, 24 GiB limit"),
    Stage(
        "calibrate_p40",
        rows(calibration("--profile p40", CALIBRATE_P40)),
        "short runs without a memory limit for the planner's calibration table (fp32)",
    ),
    Stage("calibrate_a10", rows(calibration(A10_HF, CALIBRATE_A10)), "the same in bf16"),
    Stage(
        "calibrate_check",
        rows(calibration(A10_HF, CALIBRATE_CHECK)),
        "one more uncapped bf16 run, to check the coefficient fitted to calibrate_a10",
    ),
    Stage(
        "learn",
        rows(learn_runs, at_once=True),
        "SFT warm-up of a small model on synthetic problems, then PPO and GRPO learning checks (LEARN_LRS, "
        "LEARN_ALGOS, LEARN_TAG, LEARN_EXTRA, LEARN_TEST_FREQ: validation every N steps, default 20; also for "
        "learn_lora) (200 steps each, at two actor learning rates, all four at once; each ends on a checkpoint of "
        "step 200)",
    ),
    Stage(
        "export_eval",
        stage_export_eval,
        "verlfit export of the learning check's final checkpoint (EXPORT_RUN, default learn-grpo-lr1e-5), then "
        "verlfit eval of it --compare the starting model on the 256 held-out problems (the rows its validation used)",
    ),
    Stage(
        "bench",
        stage_bench,
        "verlfit bench on the card as it is (--rollout hf --attention sdpa: this stack has no vLLM/flash-attn) and "
        'with --emulate p40 (BENCH_MODES, default "card emulate_p40", one after the other); the JSON files go to $OUT',
    ),
    Stage(
        "speed",
        stage_speed,
        "issue 13: the main job's configuration (PPO, 0.5B shape, --emulate p40, 512/256, batch 32), 10 steps per "
        "configuration of SPEED_CONFIGS (default \"today all\": today's path, then all of patches 0020-0023's keys "
        'on, one after the other so neither shares the GPU; "trim_train trim_rollout cuda_graph unwrap" are each one '
        'alone, "trims" the p40 profile\'s default: both trims, no graph; every configuration sets each key it '
        "leaves off to False, since the profile turns the trims on), SPEED_PARALLEL=1 runs them at once; then "
        "benchmarks/decode_bench.py (ms per decode step at batch 32 and 64, prefill, generate vs graph) into "
        "$OUT/decode_bench.json",
    ),
    Stage(
        "fp16",
        rows(fp16_runs),
        "issue 27: the main job's configuration (PPO, 0.5B shape, real GSM8K, 512/256, batch 32, as speed) for "
        "FP16_STEPS (default 10) steps under --emulate t4 (fp16 + loss scaling, 14 GiB), --emulate v100 (30.5 GiB), "
        "then the fp32 p40 profile under the T4's 14 GiB (--profile p40 --gpu-memory-limit 14: the same budget), one "
        'after the other (FP16_CONFIGS, default "t4 v100 p40_t4_budget"); each run\'s `verlfit plan` verdict first '
        "(NAME.plan, for predicted vs measured peak)",
    ),
    Stage(
        "learn_fp16",
        rows(learn_fp16_runs, at_once=True),
        "issue 27: the learning check of `learn` (its SFT-warmed small model and synthetic problems) in fp16: "
        "--emulate t4, PPO and GRPO, 200 steps, actor lr 1e-5, with the rollout in fp16 (the profile's) and in fp32 "
        '(VLLM_DTYPE=float32: fp32 rollout, fp16 training); LEARN_FP16_ROLLOUTS (default "float16 float32"), all four '
        "at once",
    ),
    Stage(
        "graph_memory",
        stage_graph_memory,
        "issue 13: benchmarks/graph_memory_probe.py: allocated memory after each of GRAPH_MEMORY_CALLS (default 8) "
        "CUDA-graph generate calls (0.5B shape, batch 32), a new side stream per capture vs patch 0022's "
        "capture_stream; into $OUT/graph_memory.json",
    ),
    Stage(
        "lora_speed",
        rows(lora_speed_runs),
        "the HF rollout with LoRA (patch 0023): lora_1p5b_ppo's run (1.5B shape, rank 32, --emulate p40, 512/256, "
        'batch 32) for LORA_SPEED_STEPS (default 4) steps per configuration of LORA_SPEED_CONFIGS (default "unwrap '
        "all today\": rollout.unwrap_fsdp alone, every speed key, then none; the speed configurations' names), one "
        'after the other; without the key generation took ~63.5 s a step, so "today" alone is ~7-8 min',
    ),
    Stage(
        "lora_1p5b_ppo",
        stage_lora_1p5b_ppo,
        "PPO with LoRA actor and critic (rank 32), Qwen2.5-1.5B shape, real GSM8K, --emulate p40, 512/256, batch 32, "
        "10 steps, checkpoints at steps 5 and 10; then benchmarks/adapter_norm.py on its adapters; a run a deadline "
        "cut is resumed (verlfit train --resume) when the stage runs again (also lora_3b_grpo and learn_lora)",
    ),
    Stage(
        "lora_3b_grpo",
        rows(lora_3b_grpo_runs),
        "GRPO with LoRA (rank 32), Qwen2.5-3B shape, same setup, 32 prompts x 4 samples (what `verlfit plan` says "
        "fits), 5 steps, checkpoints at steps 3 and 5; then adapter_norm.py",
    ),
    Stage(
        "learn_data",
        stage_learn_data,
        "the synthetic problems and the SFT-warmed small model of learn/learn_lora alone (run it before stages "
        "started --parallel that need them)",
    ),
    Stage(
        "learn_lora",
        rows(learn_lora_runs, at_once=True),
        "the learning check of `learn` with LoRA (rank 32, alpha 32), PPO and GRPO, 200 steps, at two actor learning "
        "rates ten times the full-parameter ones (all four at once), checkpoints every 50 steps",
    ),
    Stage(
        "lora16",
        stage_lora16,
        "issue 36: LoRA with the frozen base in 16 bits (patch 0026), all at once: the targets, each `verlfit plan` "
        "(NAME.plan) then 3 steps on random weights made here (Qwen3-4B GRPO --emulate t4, Qwen2.5-3B PPO --emulate "
        "p40, Qwen2.5-7B GRPO --emulate a10 --rollout hf --attention sdpa; batch 16, 512/256, rank 32), the 7B's plan "
        "on a P40; and learn_lora's GRPO learning check (lr 1e-4, 200 steps, validation every LEARN_TEST_FREQ, "
        "default 50) with the base in bf16 and in fp32 (LORA16_LEARN_BASES), each exported and scored against its "
        "validation as export_eval does; once the targets end, (c) the speed pick "
        "(lora16_speed). Needs setup first (the 0.5B's tokenizer, GSM8K); ~9 minutes on an H200 without (c) "
        "(LORA16_SPEED=0), (c) adds ~4",
    ),
    Stage(
        "lora_graph",
        rows(lora_graph_runs),
        "issue 43: LORA_GRAPH_TARGETS (default lora16-qwen3-4b-grpo-t4, names of stage lora16's targets) with "
        'CUDA-graph decoding off, then on (LORA_GRAPH_MODES, default "off on"), one after the other, LORA_GRAPH_STEPS '
        "(default 3) steps each, each planned first (NAME-graphs-MODE.plan); needs setup first",
    ),
    Stage(
        "nf4",
        lambda device: run_all(device, nf4_runs(device), at_once=setting("NF4_AT_ONCE") == "1"),
        "issue 46: LoRA GRPO on an NF4 frozen base (--frozen-base-dtype nf4, patch 0028): Llama-3.1-8B --emulate "
        "t4, Qwen2.5-7B --emulate p40, Qwen2.5-14B --emulate a10 --rollout hf --attention sdpa (batch 16, 512/256, "
        "rank 32; random weights), one after the other (all at once with NF4_AT_ONCE=1), NF4_STEPS (default 2) "
        "steps each, each planned first "
        "(NAME.plan); needs setup first and bitsandbytes on the stack",
    ),
    Stage(
        "lora16_speed",
        rows(lora16_speed_runs),  # (c) of stage lora16 alone: the two runs with the GPU to themselves
        "issue 36 item 2: auto-fit's speed pick against the memory-first choice, one after the other, LoRA PPO of the "
        "0.5B shape, --emulate p40, batch 32, 512/256, LORA16_SPEED_STEPS (default 4) steps each, each with its plan: "
        "the chosen configuration (fp32 base, micro-batch 16), then --frozen-base-dtype bfloat16 "
        "--gradient-checkpointing (the memory-first choice: the bf16 base)",
    ),
    Stage(
        "multigpu",
        stage_multigpu,
        "issue 18, on a kind with 2 or more GPUs: doctor's topology and `nvidia-smi topo -m`; the main job's "
        "configuration (PPO, 0.5B shape, --emulate p40, 512/256) for MULTIGPU_STEPS (default 10) steps with --gpus 1, "
        "then --gpus 2, then --gpus 2 with NCCL_P2P_DISABLE=1 forced; full-parameter PPO of the 1.5B shape on 2 "
        "emulated P40s (the planner's verdict, then 10 steps sized by hand: --plan off, micro-batch 1, optimizer "
        "offload); then a two-node Ray cluster on this host (two `ray start`, one GPU each, the workers' environment "
        "given at `ray start`) and `verlfit train --nodes 2 --gpus 1` on it",
    ),
    Stage(
        "own_task",
        rows(own_task_runs),
        "issue 26: a task that is not GSM8K end to end, --emulate p40: benchmarks/own_task.py's shelf-stock problems "
        "(jsonl, problem/solution columns), prepared by verlfit prepare-data (data_source verlfit/shelf-stock), "
        "scored by benchmarks/own_task_reward.py (--reward-function FILE:compute_score): GRPO with LoRA rank 16 on "
        "the Qwen3-1.7B shape and PPO full-parameter on the Qwen3-0.6B shape (random weights, 4 steps each, a "
        "checkpoint of step 4), each with its plan; then verlfit export and verlfit eval --reward-function on 64 "
        "held-out problems (run setup with this stage named first: it makes the models)",
    ),
    Stage(
        "lora_families",
        stage_lora_families,
        "issue 26 item 6: LoRA runs of the new families (Qwen3 0.6B/1.7B/4B, Llama 3.2 1B/3B shapes, random weights "
        "made here), PPO and GRPO, GSM8K and the own task, 3 steps each, all at once, each with its plan; one with "
        "the trims off, and Llama 3.2 1B through PPO (LORA_FAMILY_NAMES: only these run names)",
    ),
    Stage(
        "learn_own",
        rows(learn_own_runs),
        "the learning check's small model (learn's SFT warm-up, then warmed up on own-task problems) on the own task "
        "with its reward function, GRPO, 200 steps, lr 1e-5, validation every 20 steps; then export and eval "
        "--reward-function --compare the starting model on the 256 held-out problems: the held-out score should rise "
        "by at least +0.10",
    ),
    Stage(
        "soak_ppo",
        stage_soak_ppo,
        "issue 17: PPO of the learning check's small model (learn's SFT warm-up) on the real GSM8K, --emulate p40, "
        "512/256, batch 64, 500 steps, checkpoints every 50, validation every 100 on the first 256 test rows "
        '($WORK/gsm8k-val256); interrupted as SOAK_PPO_PLAN says (default "sigint@150 sigkill@300": Ctrl-C\'s SIGINT '
        "to verlfit at step 150, then --resume; SIGKILL of every process of the run at step 300, then --resume; "
        "benchmarks/soak_run.py). Re-entrant: name it again and it continues (the events done are in "
        "$RUNS/soak-ppo.events; a DEADLINE cut is one too); a finished run is not relaunched. Host memory (RSS of "
        "verlfit, verl's driver, the Ray workers) every 10 s into $RUNS/soak-ppo.rss.csv",
    ),
    Stage(
        "soak_grpo",
        stage_soak_grpo,
        'the same for GRPO (4 samples a prompt), 300 steps, SOAK_GRPO_PLAN (default "sigint@120"); $RUNS/soak-grpo.*',
    ),
    Stage(
        "fault_oom",
        rows(fault_oom_runs),
        "the 0.5B shape, --emulate p40 --plan off, batch, mini-batch and micro-batch 64 at 512/256 (the actor's fp32 "
        "logits alone are 64 x 768 x 151936 x 4 B = 27.8 GiB of the 22.5), 2 steps: expected to fail; logs verlfit's "
        "diagnosis (verlfit/failure.py) and run.json's outcome",
    ),
    Stage(
        "fault_worker",
        stage_fault_worker,
        "the small model on the synthetic problems (as learn), batch 64, response 128, 12 steps, checkpoints every 5: "
        'at step 7 SIGKILL one Ray WorkerDict process of the run (FAULT_WORKER_PLAN, default "kill-worker@7"), the '
        "seconds until verlfit exits and what it said into $RUNS/fault-worker.events, then --resume to 12",
    ),
    Stage(
        "fault_disk",
        stage_fault_disk,
        "the small model's PPO (as fault_worker, --save-freq 2, 6 steps) with its run directory in a tmpfs "
        "($RUNS/fault-disk-mnt; needs root; a refused mount is logged and the stage ends): once the step-2 checkpoint "
        "is complete the tmpfs is shrunk to 1.5 x what it holds, so the step-4 checkpoint fills it; logs verlfit's "
        "full-disk message and the checkpoints left, remounts it 8 x bigger and resumes to step 6; the records are "
        "copied to $RUNS/fault-disk and the tmpfs unmounted",
    ),
    Stage(
        "noeos",
        rows(noeos_runs),
        "issue 29: a random Qwen3-0.6B-shaped model whose config.json and generation_config.json have no eos_token_id "
        "(benchmarks/qwen3_no_eos_model.py, the 0.5B's tokenizer; made once, into $WORK/qwen3-0.6b-no-eos), then "
        "`verlfit train --emulate p40 --model DIR --steps 3` on setup's GSM8K (the p40 profile turns patch 0022's "
        "cuda_graph on; the rollout gets no EOS id and decodes every response to the full length); logs the run's "
        "outcome and the response lengths of its steps",
    ),
    Stage(
        "pack",
        stage_pack,
        "tar the run records (run.json, metrics.jsonl, train.log tail, the soak stages' *.events, *.rss.csv) into "
        "$OUT/runs.tar.gz and write $OUT/results.json and $OUT/results.md (benchmarks/collect.py: the comparison "
        "table); first benchmarks/soak_check.py on soak-ppo and soak-grpo when present ($RUNS/NAME.soak.json)",
    ),
)

# the environment variables the runner and its stages read: (name, meaning and default)
VARIABLES = (
    ("VERLFIT_SITE", "the site-packages holding verl; default: where `python3` imports verl from"),
    (
        "GSM8K_DIR",
        (
            'a folder with the real GSM8K as train.jsonl and test.jsonl, the rows of the hub\'s openai/gsm8k "main" '
            "config, as `verlfit prepare-gsm8k --input` reads them; default .device-stack/b/gsm8k"
        ),
    ),
    ("WORK", "models and data; default ~/verlfit-bench/work"),
    ("RUNS", "run directories, their consoles and stages.log; default ~/verlfit-bench/runs"),
    ("OUT", "results to bring back; default /tmp/out"),
    (
        "DEADLINE",
        (
            "epoch seconds: every run is stopped with SIGINT by then, so a time-limited machine still packs its"
            " results; default: none"
        ),
    ),
    ("STAGE_TIMEOUT", "seconds per run, default 3000"),
    (
        "SETUP_FOR",
        (
            "stage names setup makes the bigger models for, as if they were named with it (for a setup run before a "
            "--parallel start)"
        ),
    ),
    ("SKIP_TINY", "set: setup makes no tiny model"),
    ("LEARN_LRS", 'actor learning rates of the learning check, default "1e-5 3e-5"'),
    (
        "LEARN_ALGOS, LEARN_TAG, LEARN_EXTRA",
        'learn\'s algorithms (default "ppo grpo"), a suffix for its run names, more verlfit train words',
    ),
    (
        "LEARN_TEST_FREQ",
        "validation every N steps of learn, learn_fp16 and learn_lora (default 20) and lora16 (default 50)",
    ),
    ("LEARN_LORA_LRS, LEARN_LORA_ALGOS", 'the same for learn_lora, default "1e-4 3e-4" and "ppo grpo"'),
    ("LEARN_FP16_ROLLOUTS", 'learn_fp16\'s rollout dtypes, default "float16 float32"'),
    (
        "LORA_3B_BATCH, LORA_3B_SAMPLES, LORA_3B_STEPS",
        (
            "default 32, 4 and 5: a lower LORA_3B_STEPS first and the default next checks a resume from the step-3 "
            "checkpoint"
        ),
    ),
    (
        "LORA_EXTRA",
        (
            'more verlfit train words for lora_1p5b_ppo, lora_3b_grpo and learn_lora, e.g. "--'
            ' +actor_rollout_ref.rollout.unwrap_fsdp=False" to measure LoRA without patch 0023, which train turns on'
            " for LoRA"
        ),
    ),
    (
        "KEEP_FULL_CHECKPOINTS",
        (
            "set: keep the LoRA runs' full FSDP shards, ~12 GiB per 1.5B PPO or 3B GRPO checkpoint, instead of deleting"
            " them once adapter_norm.py has read the adapters"
        ),
    ),
    (
        "SPEED_CONFIGS, SPEED_STEPS, SPEED_PARALLEL, SKIP_DECODE_BENCH",
        "stage speed's configurations, steps, all at once, no decode_bench.py",
    ),
    ("LORA_SPEED_CONFIGS, LORA_SPEED_STEPS", "stage lora_speed's configurations and steps"),
    ("FP16_CONFIGS, FP16_STEPS", "stage fp16's configurations and steps"),
    ("GRPO_STEPS, GRPO_BATCH, PUBLIC_STEPS, TUNED_STEPS", "steps and batch of stages grpo, public, tuned"),
    ("GRAPH_MEMORY_CALLS", "stage graph_memory's generate calls, default 8"),
    ("EXPORT_RUN", "stage export_eval's run, default learn-grpo-lr1e-5"),
    ("BENCH_MODES", 'stage bench\'s modes, default "card emulate_p40"'),
    ("LORA_FAMILY_NAMES", "stage lora_families runs only these run names"),
    (
        "LORA16_LEARN_BASES",
        'stage lora16\'s frozen-base dtypes of the learning check (bfloat16, float32, nf4), default "bfloat16 float32"',
    ),
    ("LORA16_SPEED", "0: stage lora16 leaves out (c), the speed pick's two runs; default 1 (other values run them)"),
    ("LORA16_SPEED_STEPS", "steps of each lora16_speed run (also (c) of stage lora16), default 4"),
    ("LORA_GRAPH_TARGETS", "stage lora_graph's targets, names of stage lora16's, default \"lora16-qwen3-4b-grpo-t4\""),
    ("LORA_GRAPH_MODES", 'stage lora_graph\'s settings in order (off, on, units, before), default "off on"'),
    ("LORA_GRAPH_STEPS", "steps of each lora_graph run, default 3"),
    ("NF4_NAMES", "stage nf4 runs only these run names, default all four"),
    ("NF4_STEPS", "steps of each nf4 run, default 2"),
    (
        "NF4_AT_ONCE",
        "1: stage nf4 runs its targets all at once (each capped at its card's memory: peaks as alone, step times "
        "shared)",
    ),
    ("MODEL_DEVICE", "draw the random models' weights on this torch device (make_model.py --device cuda); default CPU"),
    ("MULTIGPU_STEPS, MULTIGPU_RAY_PORT", "stage multigpu's steps (default 10) and Ray port (default 6390)"),
    (
        "SOAK_PPO_PLAN, SOAK_GRPO_PLAN, FAULT_WORKER_PLAN",
        "the soak and fault stages' interruptions, words ACTION@STEP: benchmarks/soak_plan.py",
    ),
    ("SOAK_PPO_STEPS, SOAK_GRPO_STEPS", "the soak runs' lengths, default 500 and 300"),
)

NOTES = """\
Several verl runs can share one big GPU: each caps its own workers (--emulate / --gpu-memory-limit) and starts its own
local Ray instance; their step times then include the others' load (memory figures do not).

Needs: a CUDA GPU and a Python 3 environment where `python3 -c "import verl, ray, torch"` works (verl 0.4.1, e.g.
`pip install verl==0.4.1` with its dependencies, or a verlfit image) plus verlfit's own dependencies (`pip install -e .`
from this checkout); no network: models are made locally and GSM8K is read from files.

Exit status: 0 when every stage ran to its end (a failed training run is logged in $RUNS/stages.log), 1 when a stage
raised (setup could not apply the patches, make a model or prepare the data), 2 for a missing or unknown stage name.

examples:
  $ python3 benchmarks/device_run.py setup main pack
  $ DEADLINE=$(( $(date +%s) + 540 )) python3 benchmarks/device_run.py --parallel soak_ppo soak_grpo
"""


def help_text() -> str:
    """The stages and the environment variables, for ``--help``."""
    # lines of at most 118 columns, never broken inside a word: an option such as --gradient-checkpointing stays whole
    indent = " " * 13
    lines = ["stages (each writes run directories under $RUNS and appends to $RUNS/stages.log):"]
    for stage in STAGES:
        if len(stage.name) > 10:
            lines.append(f"  {stage.name}")
        first = f"  {stage.name:<10} " if len(stage.name) <= 10 else indent
        lines.append(
            textwrap.fill(stage.help, width=118, initial_indent=first, subsequent_indent=indent, break_on_hyphens=False)
        )
    lines.append("\nenvironment:")
    for name, meaning in VARIABLES:
        lines.append(f"  {name}")
        lines.append(
            textwrap.fill(meaning, width=118, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False)
        )
    return "\n".join(lines) + "\n\n" + NOTES


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    """The command line: ``[--parallel] STAGE [STAGE ...]``; exits 2 (argparse's status) on no or an unknown stage."""
    parser = argparse.ArgumentParser(
        prog="device_run.py",
        description="Run verlfit's GPU benchmarks stage by stage.",
        epilog=help_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--parallel", action="store_true", help="start every named stage at once (one GPU, one Ray instance each)"
    )
    parser.add_argument("stages", nargs="*", metavar="STAGE", help="stage names, run in this order")
    args = parser.parse_args(argv)
    known = {stage.name for stage in STAGES}
    if not args.stages:
        parser.print_usage(sys.stderr)
        parser.exit(2, "device_run.py: name at least one stage\n")
    for name in args.stages:
        if name not in known:
            parser.exit(
                2,
                f"device_run.py: unknown stage '{name}'; stages: {' '.join(sorted(known))} (--help for what each "
                "does)\n",
            )
    for name, example in (("DEADLINE", "DEADLINE=$(( $(date +%s) + 540 ))"), ("STAGE_TIMEOUT", "STAGE_TIMEOUT=3000")):
        if setting(name) and not setting(name).isdigit():
            message = f"{name}={setting(name)!r} is not a whole number of seconds; write e.g. {example}"
            parser.exit(2, f"device_run.py: {message}\n")
    return args


def run_stage(device: Device, stage: Stage, parallel: bool) -> bool:
    """Run one stage; False (logged with its traceback) when it raised."""
    device.log(f"== stage {stage.name}{' (parallel)' if parallel else ''}")
    try:
        stage.run(device)
    except Exception as error:  # noqa: BLE001 - reported below and turned into the exit status, never dropped
        device.log(f"stage {stage.name} failed: {error!r}")
        traceback.print_exc()
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the named stages (see ``--help``); the exit status (0, or 1 when a stage raised)."""
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    os.chdir(REPO)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "entrypoint"), os.environ.get("PYTHONPATH")]))
    os.environ.update(PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    device = Device(args.stages)
    for folder in (device.work, device.runs, device.out):
        folder.mkdir(parents=True, exist_ok=True)
    stages = {stage.name: stage for stage in STAGES}
    if args.parallel:
        with ThreadPoolExecutor(max_workers=len(args.stages)) as pool:
            results = list(pool.map(lambda name: run_stage(device, stages[name], True), args.stages))
        failed = [name for name, ok in zip(args.stages, results) if not ok]
    else:
        failed = []
        for name in args.stages:
            if not run_stage(device, stages[name], False):
                failed.append(name)
                break  # a later stage builds on this one (setup before the runs), as before
    if failed:
        device.log(f"failed stages: {' '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
