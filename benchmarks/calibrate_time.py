"""Fit the time model's efficiency factors (``verlfit.plan.time.FACTORS``) to recorded runs; print predicted vs
measured seconds per phase and per step.

    python benchmarks/calibrate_time.py                      # the stored H200 records, the stored factors
    python benchmarks/calibrate_time.py --fit                # refit, print the fitted factors and the table
    python benchmarks/calibrate_time.py --fit --write-factors  # and write them into entrypoint/verlfit/plan/time.py
    python benchmarks/calibrate_time.py --fit --record DIR --record DIR2   # add run dirs (all steps after the 1st)

Records: run directories written by ``verlfit train`` (``run.json`` settings and overrides, ``metrics.jsonl`` verl's
``timing_s/*`` per step). Only runs that had the GPU to themselves count as timings (docs/benchmarks.md, "Sharing
the GPU slows every run"; benchmarks/results/2026-11-29-h200-p40-main-job-learning-planner/README.md):
:data:`VALID_RECORDS` lists them with the
steps used. Call 3 and call 9 shared the GPU (seven and nine runs at once) and call 8's main-ppo steps 26-36 ran
beside tests/gpu: none of those steps is used. Call 5's two learning runs ran together but are small (tiny
kernels, CPU-bound, 16 cores): they are used, as the brief of issue 14 counts call 5 alone. 2026-12-01 call 2's
speed-today and speed-all (the main job without and with patches 0020-0022's five keys) ran alone, one after the
other; so did the third session's speed-today, speed-trims, speed-all (the main job with every switch off, the
four trims, the trims + cuda_graph + unwrap_fsdp:
benchmarks/results/2026-12-01-h200-p40-lora-resume-faster-path-alone/README.md) and
lora-speed-trims_unwrap (Qwen2.5-1.5B PPO, LoRA rank 32 on actor and critic, the trims + unwrap_fsdp, steps 2-3):
the one record of a shape above 0.5B alone, and the only one behind the two LoRA factors (adapter_pass_overhead_s,
adapter_decode_overhead_s; the second is set by its generation alone). :data:`EXCLUDED_RECORDS` names the runs that
shared the GPU and why (2026-12-01 call 3's LoRA 1.5B/3B, call 4's learning check with the keys).

Per run: the mean over the used steps of each phase (``timing_s/gen``, ``old_log_prob``, ``ref``, ``values``,
``update_critic``, ``update_actor``) and of ``timing_s/step``, steps with a checkpoint save excluded (their save
time is fitted on its own: ``timing_s/save_checkpoint``); decode steps per generate call = the mean of
``response_length/max`` (the longest response sets how long ``generate`` runs). The speed switches come from the
run's overrides (``verlfit.patch_switches.speed_switches``); with the rollout trim and one generate call per step, the
rollout
width is the mean of ``prompt_length/max`` (the batch's longest prompt).

Fit: weighted least squares (every row divided by its measured seconds, so each phase counts by its relative
error) of the phase seconds on the features of ``plan_time.phase_features``: 1/efficiency for fp32 and bf16
passes, fixed costs per micro-batch pass and per pass per layer, the decode step's GPU side (1/efficiency, a floor
per step per layer) and the HF loop's CPU side (per step, per step per layer). Rows: every fitted phase of every
record, plus :data:`DECODE_BENCHES` (``benchmarks/decode_bench.py``: patch 0022's replays, the GPU side alone).
The trimmed main-job records' training phases (:data:`WINDOW_RECORDS`) are not fitted: with speed-today, their
untrimmed twin of the same session, they derive ``GSM8K_WINDOW_PROMPT_TOKENS`` (:func:`window_prompt_tokens`). The
LoRA record's fitted training phases use the stored window, so after a change ``--fit --write-factors`` is run
again until the factors and the window stop moving (twice for the third session's records). ``save_bytes_per_s`` = saved
bytes / measured save
seconds over all saves; ``other_s`` = the median over runs of (measured step - sum of measured phases).
``--write-factors`` writes FACTORS and the two derived GSM8K widths. numpy is needed for --fit only (the test
environment has it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "entrypoint"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from verlfit.plan.memory import PlanRequest  # noqa: E402
from verlfit.plan.request import request_from_settings  # noqa: E402
from verlfit.plan import time as plan_time  # noqa: E402
from verlfit.patch_switches import speed_switches  # noqa: E402
from verlfit.cards import get_card  # noqa: E402
from verlfit.metrics import consolidate, read_metrics  # noqa: E402
from verlfit.model_shape import load_model_shape, shape_from_config  # noqa: E402
from verlfit.run_files import load_run  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
H200 = RESULTS / "2026-11-29-h200-p40-main-job-learning-planner"
MEASURED = ("gen", "old_log_prob", "ref", "values", "update_critic", "update_actor")
TRAINED = ("old_log_prob", "ref", "values", "update_critic", "update_actor")  # the passes patch 0020 trims

# (record dir relative to benchmarks/results/2026-11-29-h200-p40-main-job-learning-planner or, for later dates, to
# benchmarks/results; first step
# used, last step used or None, why)
VALID_RECORDS = (
    ("smoke-tuned/smoke-ppo", 2, None, "call 1: smoke stage alone"),
    ("smoke-tuned/smoke-grpo", 2, None, "call 1: smoke stage alone"),
    ("smoke-tuned/tuned-p40", 2, None, "call 1: tuned stage alone"),
    ("public-recipe-tuned-grpo/main-grpo", 2, None, "call 2: stages one after another"),
    ("public-recipe-tuned-grpo/public-recipe", 2, None, "call 2"),
    ("public-recipe-tuned-grpo/tuned-p40", 2, None, "call 2"),
    ("main-ppo-resumed-to-39/main-ppo", 12, 39, "call 4 resumed at 11 alone; steps 1-10 are call 3's (shared)"),
    ("learning-check/learn-ppo-lr1e-5", 2, None, "call 5: the two small learning runs together"),
    ("learning-check/learn-grpo-lr1e-5", 2, None, "call 5"),
    ("main-ppo-steps-1-25/main-ppo", 2, 25, "call 7 alone"),
    (
        "main-ppo-resumed-to-50-gputests/main-ppo",
        37,
        50,
        "call 8: steps 26-36 shared the GPU with tests/gpu; 1-25 are call 7's",
    ),
    ("calibration-check-bf16/cal-a10-grpo-m16-256", 2, None, "call 10 alone, bf16, no memory cap"),
    (
        "2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench/speed-today",
        2,
        None,
        "2026-12-01 call 2: alone, today's path (the speed stage's runs one after another)",
    ),
    (
        "2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench/speed-all",
        2,
        None,
        (
            "2026-12-01 call 2: alone, patches 0020-0022's five keys on; its training phases set the derived window"
            " (GSM8K_WINDOW_PROMPT_TOKENS), only its generation is fitted"
        ),
    ),
    (
        "2026-12-01-h200-p40-lora-resume-faster-path-alone/speed-trims-alone/speed-today",
        2,
        None,
        "2026-12-01 third session, call 4: alone (one run at a time), the main job with every patch switch off",
    ),
    (
        "2026-12-01-h200-p40-lora-resume-faster-path-alone/speed-trims-alone/speed-trims",
        2,
        None,
        (
            "third session, call 5: alone, the four trim_padding keys on, no CUDA graph; its training phases set the"
            " window with its twin, only its generation is fitted"
        ),
    ),
    (
        "2026-12-01-h200-p40-lora-resume-faster-path-alone/speed-trims-alone/speed-all",
        2,
        None,
        (
            "third session, call 4: alone, trims + cuda_graph + unwrap_fsdp, the StaticCache sized to the trimmed"
            " width; its training phases set the window, only its generation is fitted"
        ),
    ),
    (
        "2026-12-01-h200-p40-lora-resume-faster-path-alone/speed-trims-alone/lora-speed-trims_unwrap",
        2,
        3,
        (
            "third session, call 4: alone, Qwen2.5-1.5B PPO, LoRA rank 32 on actor and critic, trims + unwrap_fsdp, 3"
            " steps: the only record of a shape above 0.5B alone and of LoRA alone"
        ),
    ),
    # issue 43's big LoRA targets, each alone, 16-bit frozen bases, step 2 (step 1 warms the allocator and captures)
    (
        "2026-12-03-h200-t4-lora-graphs-side-by-side/lora16-qwen3-4b-grpo-t4-graphs-off",
        2,
        None,
        "2026-12-03: alone, Qwen3-4B GRPO LoRA, t4 (fp16), CUDA graphs off",
    ),
    (
        "2026-12-03-h200-t4-lora-graphs-side-by-side/lora16-qwen3-4b-grpo-t4-graphs-on",
        2,
        None,
        "2026-12-03: alone, the same with CUDA graphs on",
    ),
    (
        "2026-12-04-h200-lora-graphs-7b-a10-3b-p40-side-by-side/lora16-qwen2.5-7b-grpo-a10-graphs-off",
        2,
        None,
        "2026-12-04: alone, Qwen2.5-7B GRPO LoRA, a10 with the HF rollout (bf16), CUDA graphs off",
    ),
    (
        "2026-12-04-h200-lora-graphs-7b-a10-3b-p40-side-by-side/lora16-qwen2.5-7b-grpo-a10-graphs-on",
        2,
        None,
        "2026-12-04: alone, the same with CUDA graphs on",
    ),
    (
        "2026-12-04-h200-lora-graphs-7b-a10-3b-p40-side-by-side/lora16-qwen2.5-3b-ppo-p40-graphs-off",
        2,
        None,
        "2026-12-04: alone, Qwen2.5-3B PPO LoRA, p40 (fp32 compute, bf16 base), CUDA graphs off",
    ),
    (
        "2026-12-04-h200-lora-graphs-7b-a10-3b-p40-side-by-side/lora16-qwen2.5-3b-ppo-p40-graphs-on",
        2,
        None,
        "2026-12-04: alone, the same with CUDA graphs on",
    ),
    (
        "2026-12-04-h200-lora16-time-calibration-learning-check/lora16-qwen3-4b-grpo-a10-graphs-on",
        2,
        None,
        "2026-12-04: alone, Qwen3-4B GRPO LoRA on the a10 path (bf16): the 4B's family without fp16",
    ),
    (
        "2026-12-04-h200-lora-adapters-outside-fsdp-7b-a10/lora16-qwen2.5-7b-grpo-a10-graphs-on",
        2,
        None,
        "2026-12-04: alone, Qwen2.5-7B GRPO LoRA, a10 with the HF rollout (bf16), verlfit's default since patch 0027:"
        " CUDA graphs on, the adapters outside FSDP (the one record behind adapter_pass_overhead_outside_s)",
    ),
)
# recorded alone and not fitted on: the check of the fitted factors on a configuration the fit did not see (the
# Qwen2.5 family in fp16, where the fitted 16-bit records are Qwen3 in fp16 and bf16 and Qwen2.5 in bf16)
CHECK_RECORDS = (
    (
        "2026-12-04-h200-lora16-time-calibration-learning-check/lora16-qwen2.5-3b-grpo-t4-graphs-on",
        2,
        None,
        "2026-12-04: alone, Qwen2.5-3B GRPO LoRA, t4 (fp16), CUDA graphs on",
    ),
    (
        "2026-12-04-h200-lora-adapters-outside-fsdp-7b-a10/lora16-qwen2.5-7b-grpo-a10-graphs-before",
        2,
        None,
        "2026-12-04: alone, the same as verlfit ran it before: CUDA graphs off, the adapters FSDP units",
    ),
    (
        "2026-12-05-h200-t4-4b-lora-graphs-before-after/lora16-qwen3-4b-grpo-t4-graphs-on",
        2,
        None,
        "2026-12-05: alone, Qwen3-4B GRPO LoRA, t4 (fp16), verlfit's default: CUDA graphs on, adapters outside FSDP",
    ),
    (
        "2026-12-05-h200-t4-4b-lora-graphs-before-after/lora16-qwen3-4b-grpo-t4-graphs-before",
        2,
        None,
        "2026-12-05: alone, the same as verlfit ran it before: CUDA graphs off, the adapters FSDP units",
    ),
    (
        "2026-12-05-h200-t4-nf4-llama-8b/nf4-llama-3.1-8b-grpo-t4",
        2,
        None,
        "2026-12-05: alone, Llama-3.1-8B GRPO LoRA, t4 (fp16), the frozen base in NF4 (patch 0028), CUDA graphs on",
    ),
    (
        "2026-12-05-h200-nf4-7b-p40-14b-a10-learning-check/p40-7b-alone/nf4-qwen2.5-7b-grpo-p40",
        2,
        None,
        "2026-12-05: alone, Qwen2.5-7B GRPO LoRA, p40 (fp32), the frozen base in NF4, CUDA graphs on",
    ),
    (
        "2026-12-05-h200-nf4-7b-p40-14b-a10-learning-check/a10-7b-nf4-beside-bfloat16/nf4-qwen2.5-7b-grpo-a10",
        2,
        None,
        "2026-12-05: alone, Qwen2.5-7B GRPO LoRA, a10 path (bf16, HF rollout, SDPA), the frozen base in NF4",
    ),
    (
        "2026-12-05-h200-nf4-7b-p40-14b-a10-learning-check/a10-7b-nf4-beside-bfloat16/"
        "lora16-qwen2.5-7b-grpo-a10-graphs-on",
        2,
        None,
        "2026-12-05: alone, the same with its base in bf16 (verlfit's default there), right after it",
    ),
)
# a record with patch 0020 on -> its untrimmed twin (same job, same data order, the same session): the twin's
# measured/predicted ratio per phase cancels the model's own error on that phase when the window is derived
# patch 0022 sized its StaticCache to the untrimmed prompt + response width until 2026-12-01's second session
UNTRIMMED_STATIC_CACHE_RECORDS = {
    "2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench/speed-all",
    "2026-12-01-h200-p40-faster-path-lora-export/learn-speed-keys-export-eval/learn-grpo-lr1e-5-fast",
}
WINDOW_RECORDS = {
    "2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench/speed-all": (
        "2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench/speed-today"
    ),
    "2026-12-01-h200-p40-lora-resume-faster-path-alone/speed-trims-alone/speed-trims": (
        "2026-12-01-h200-p40-lora-resume-faster-path-alone/speed-trims-alone/speed-today"
    ),
    "2026-12-01-h200-p40-lora-resume-faster-path-alone/speed-trims-alone/speed-all": (
        "2026-12-01-h200-p40-lora-resume-faster-path-alone/speed-trims-alone/speed-today"
    ),
}
# the rollout width (GSM8K_ROLLOUT_PROMPT_TOKENS) is the mean batch-32 longest prompt of this record
ROLLOUT_WIDTH_RECORD = "2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench/speed-all"

# recorded but not timings: they shared the GPU (docs/benchmarks.md, "Sharing the GPU slows every run")
EXCLUDED_RECORDS = (
    (
        "2026-12-01-h200-p40-faster-path-lora-export/learn-speed-keys-export-eval/learn-grpo-lr1e-5-fast",
        (
            "the learning check (GRPO 64x4, 256/128) with the five speed keys, 200 steps, but it shared the GPU with"
            " two other runs"
        ),
    ),
    (
        "2026-12-01-h200-p40-faster-path-lora-export/lora-1p5b-ppo-3b-grpo-shared/lora-1p5b-ppo",
        (
            "1.5B LoRA PPO: shared the GPU with a 3B run loading and generating, and generated through FSDP's hooks (no"
            " unwrap_fsdp); the same shape alone with unwrap_fsdp is"
            " 2026-12-01-h200-p40-lora-resume-faster-path-alone/speed-trims-alone/lora-speed-trims_unwrap"
        ),
    ),
    (
        "2026-12-01-h200-p40-faster-path-lora-export/lora-1p5b-ppo-3b-grpo-shared/lora-3b-grpo",
        "3B LoRA GRPO: shared the GPU with the 1.5B run",
    ),
)

# benchmarks/decode_bench.py runs: patch 0022's replayed decode steps, alone on the GPU (its HF generate rows run
# without verl's FSDP wrapper, so they are not verl's decode loop and are shown, not fitted)
DECODE_BENCHES = ("2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench/decode_bench.json",)
DECODE_BENCH_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"  # its "qwen2.5-0.5b-random": make_model.py's exact 0.5B shape


def record_path(rel: str) -> Path:
    """A :data:`VALID_RECORDS` entry's directory: dated entries under benchmarks/results, others under H200."""
    return RESULTS / rel if rel[:4].isdigit() else H200 / rel


# the models the records name ($WORK/<dir>): their config.json stayed on the device machine; shapes from
# benchmarks/make_model.py SHAPES (vocab = the local tokenizer's 8192 rows for tiny and small)
DEFAULT_TOKENIZER_ROWS = 8192


def shape_for(model: str):
    """The model shape of a recorded run's ``settings.model``."""
    config = Path(model) / "config.json"
    if config.is_file():
        return load_model_shape(str(config))
    import make_model

    name = Path(model).name
    for key, builtin in (
        ("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct"),
        ("qwen2.5-14b", "Qwen/Qwen2.5-14B-Instruct"),
        ("qwen3-4b", "Qwen/Qwen3-4B"),
        ("qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct"),
        ("0.5b", "Qwen/Qwen2.5-0.5B-Instruct"),
        ("1.5b", "Qwen/Qwen2.5-1.5B-Instruct"),
        ("3b", "Qwen/Qwen2.5-3B-Instruct"),
    ):
        if key in name:  # benchmarks/make_model.py's exact Qwen2.5 shapes (random weights)
            return load_model_shape(builtin)
    for key, shape_name in (("small", "small"), ("tiny", "tiny")):
        if key in name:
            values = dict(make_model.SHAPES[shape_name], model_type="qwen2")
            values["vocab_size"] = values["vocab_size"] or DEFAULT_TOKENIZER_ROWS
            return shape_from_config(values, name=f"make_model.py shape {shape_name}")
    return load_model_shape(model)


@dataclasses.dataclass
class Record:
    name: str
    request: PlanRequest
    inputs: plan_time.TimeInputs
    measured: dict  # phase -> mean seconds (non-save steps)
    step_s: float
    steps_used: int
    save_s: list  # seconds of each save
    save_bytes: float
    description: str
    fitted: tuple = MEASURED  # the measured phases the fit uses
    prompt_max: float = 0.0  # mean over the used steps of verl's prompt_length/max (the batch's longest prompt)


def load_record(run_dir: Path, first: int = 2, last: int | None = None, name: str | None = None) -> Record:
    """Read one run directory into a :class:`Record` (the used steps: ``first`` .. ``last``)."""
    from verlfit.run_settings import TrainSettings
    from verlfit.profiles import load_profile

    record = load_run(run_dir)
    steps = [
        r
        for r in consolidate(read_metrics(run_dir))
        if "timing_s/step" in r and r["step"] >= first and (last is None or r["step"] <= last)
    ]
    if not steps:
        raise SystemExit(f"{run_dir}: no steps in {first}..{last}")
    saves = [r for r in steps if "timing_s/save_checkpoint" in r]
    plain = [r for r in steps if "timing_s/save_checkpoint" not in r] or steps
    fields = {f.name for f in dataclasses.fields(TrainSettings)}
    values = {k: v for k, v in record["settings"].items() if k in fields}
    values["loggers"] = tuple(values.get("loggers", ("console",)))
    values.setdefault("frozen_base_dtype", "float32")  # recorded before patch 0026: a LoRA base in fp32
    settings = TrainSettings(**values)
    request = request_from_settings(
        settings, load_profile(record["profile"]), 140 * 1024**3, shape=shape_for(settings.model)
    )
    if any(o.endswith("attn_implementation=eager") for o in record["overrides"]):
        request = dataclasses.replace(request, attention="eager")
    switches = speed_switches([*record["overrides"]])
    prompt_max = statistics.mean(r["prompt_length/max"] for r in plain)
    if switches.get("rollout_trim_padding") and request.rollout_prompts_per_call >= request.per_gpu_prompts:
        switches["rollout_prompt_length"] = (
            prompt_max  # one generate call per step: its width is the batch's longest prompt, as recorded
        )
    if name in UNTRIMMED_STATIC_CACHE_RECORDS:
        switches["static_cache_untrimmed"] = True
    inputs = plan_time.TimeInputs(
        decode_steps=round(statistics.mean(r["response_length/max"] for r in plain)), **switches
    )
    measured = {
        p: statistics.mean(r.get(f"timing_s/{p}", 0.0) for r in plain)
        for p in MEASURED
        if any(f"timing_s/{p}" in r for r in plain)
    }
    save_work = plan_time.phase_work(request, dataclasses.replace(inputs, save_freq=1)).get("save_checkpoint")
    s = record["settings"]
    keys = " ".join(
        name
        for name, on in (
            ("trim", inputs.trim_padding),
            ("rollout-trim", inputs.rollout_trim_padding),
            ("cuda-graph", inputs.cuda_graph),
        )
        if on
    )
    shape, critic = request.shape, f"/{request.critic_micro_batch_size}" if request.has_critic else ""
    description = (
        f"{s['algorithm']} {shape.num_layers}L/{shape.hidden_size} b{s['train_batch_size']}x{request.samples}"
        f" {s['max_prompt_length']}/{s['max_response_length']}"
        f" mb {request.actor_micro_batch_size}/{request.log_prob_micro_batch_size}{critic}"
        f" {request.dtype} {request.attention}{f' {keys}' if keys else ''}"
    )
    return Record(
        name=name or run_dir.name,
        request=request,
        inputs=inputs,
        measured=measured,
        step_s=statistics.mean(r["timing_s/step"] for r in plain),
        steps_used=len(steps),
        save_s=[r["timing_s/save_checkpoint"] for r in saves],
        save_bytes=save_work.save_bytes if save_work else 0.0,
        description=description,
        prompt_max=prompt_max,
    )


def check_records() -> list[Record]:
    """:data:`CHECK_RECORDS`: recorded alone, shown against the fitted factors, never fitted."""
    return [load_record(record_path(rel), first, last, name=rel) for rel, first, last, _ in CHECK_RECORDS]


def stored_records(extra: list[str] = ()) -> list[Record]:
    """The valid H200 records plus ``extra`` run directories (all their steps after the first)."""
    records = [load_record(record_path(rel), first, last, name=rel) for rel, first, last, _ in VALID_RECORDS]
    records = [
        dataclasses.replace(r, fitted=("gen",)) if r.name in WINDOW_RECORDS else r for r in records
    ]  # its training phases derive the window
    records += [load_record(Path(d), 2, None, name=str(d)) for d in extra]
    return records


@dataclasses.dataclass
class DecodeBench:
    """One ``benchmarks/decode_bench.py`` run of patch 0022's static decoder: ``steps`` decode steps (new tokens
    - 1, prefill excluded) of ``batch`` rows from ``prompt_width`` columns into a cache of ``prompt_width +
    new_tokens``, measured ``seconds`` (static_graph total - prefill)."""

    name: str
    batch: int
    prompt_width: int
    new_tokens: int
    seconds: float
    generate_seconds: float  # HF generate's decode steps in the same process (shown, not fitted)

    def work(self, shape, cuda_graph: bool = True):
        return plan_time.decode_work(
            shape,
            self.batch,
            self.prompt_width,
            self.new_tokens - 1,
            4,
            cuda_graph=cuda_graph,
            cache_columns=self.prompt_width + self.new_tokens,
        )


def decode_benches() -> list[DecodeBench]:
    """The :data:`DECODE_BENCHES` runs (fp32 only: the model's compute bytes are 4)."""
    out = []
    for rel in DECODE_BENCHES:
        data = json.loads((RESULTS / rel).read_text())
        if data["dtype"] != "fp32":
            raise SystemExit(f"{rel}: dtype {data['dtype']}; only fp32 decode benches are read")
        for run in data["runs"]:
            steps = run["new_tokens"] - 1
            graph, hf = run["static_graph"], run["generate"]
            out.append(
                DecodeBench(
                    f"{rel} batch {run['batch']}",
                    run["batch"],
                    run["prompt_width"],
                    run["new_tokens"],
                    graph["ms_per_decode_step"] * steps / 1e3,
                    hf["ms_per_decode_step"] * steps / 1e3,
                )
            )
    return out


def rows(records: list[Record], card, benches: list[DecodeBench] = ()) -> list[tuple[tuple[float, ...], float, float]]:
    """(features, fixed seconds, measured seconds) for every fitted measured phase of every record and every
    decode bench's replayed steps."""
    out = []
    for rec in records:
        work = plan_time.phase_work(rec.request, rec.inputs)
        for phase, seconds in rec.measured.items():
            if phase in work and phase in rec.fitted and seconds > 0:
                features, fixed = plan_time.phase_features(work[phase], card.rates(rec.request.dtype))
                out.append((features, fixed, seconds))
    shape = shape_for(DECODE_BENCH_MODEL)
    for bench in benches:
        features, fixed = plan_time.phase_features(bench.work(shape), card.rates("float32"))
        out.append((features, fixed, bench.seconds))
    return out


def trained_phases(rec: Record, card, factors: dict, window: float | None = None) -> dict:
    """Predicted seconds of ``rec``'s measured training phases (:data:`TRAINED`), the window's prompt columns
    ``window`` (None: the inputs' own)."""
    inputs = rec.inputs if window is None else dataclasses.replace(rec.inputs, window_prompt_length=window)
    est = plan_time.estimate(rec.request, card, inputs, factors=factors)
    return {p: est.phases[p] for p in TRAINED if p in rec.measured}


def window_prompt_tokens(records: list[Record], card, factors: dict, phases: tuple = TRAINED) -> int:
    """:data:`verlfit.plan.time.GSM8K_WINDOW_PROMPT_TOKENS`: the window prompt columns (whole tokens, bisection
    over 1 .. max_prompt_length) at which the :data:`WINDOW_RECORDS`' training ``phases`` sum to their measured
    seconds, each phase's prediction scaled by its untrimmed twin's measured / predicted (so the model's own error on
    a phase, e.g. the actor update's +22% on the main job, does not move the window)."""
    by_name = {r.name: r for r in records}
    pairs = [(by_name[a], by_name[b]) for a, b in WINDOW_RECORDS.items() if a in by_name and b in by_name]
    if not pairs:
        raise SystemExit(f"no window record with its twin among {sorted(by_name)}")
    low, high = 1.0, float(min(r.request.max_prompt_length for r, _ in pairs))
    scales = []
    for rec, twin in pairs:
        untrimmed = trained_phases(twin, card, factors)
        scales.append({p: twin.measured[p] / untrimmed[p] for p in untrimmed if p in phases})

    def excess(window: float) -> float:
        total = 0.0
        for (rec, _), scale in zip(pairs, scales):
            predicted = trained_phases(rec, card, factors, window)
            total += sum(predicted[p] * scale[p] - rec.measured[p] for p in scale)
        return total

    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if excess(middle) < 0 else (low, middle)
    return round((low + high) / 2)


def rollout_prompt_tokens(records: list[Record]) -> int:
    """:data:`verlfit.plan.time.GSM8K_ROLLOUT_PROMPT_TOKENS`: :data:`ROLLOUT_WIDTH_RECORD`'s mean batch-32 longest
    prompt (verl's ``prompt_length/max``) over its used steps."""
    (rec,) = [r for r in records if r.name == ROLLOUT_WIDTH_RECORD]
    return round(rec.prompt_max)


def _round(value: float) -> float:
    return float(f"{value:.4g}")


def fit(records: list[Record], card, benches: list[DecodeBench] = ()) -> dict:
    """Fitted :data:`verlfit.plan.time.FACTORS` (4 significant digits) from ``records`` (and ``benches``: without
    them no CUDA-graph row, the graph factors stay as stored) on ``card``."""
    import numpy as np

    data = rows(records, card, benches)
    x = np.array([f for f, _, _ in data], dtype=float)
    # one training efficiency, as a fraction of the datasheet peak of the run's compute dtype, for fp32 and for
    # fp16/bf16 alike: the fp32 and 16-bit ideal-seconds columns are summed into one unknown. Fitted apart, the
    # 16-bit one came out at 1.225 (above the peak: no card does that), because on the H200 the 16-bit FLOP term
    # of the big LoRA records is small beside their fixed costs per adapted Linear, so the fit used it as slack
    x = np.column_stack([x[:, 0] + x[:, 1], x[:, 2:]])
    names = ("1/train_efficiency", *plan_time.COEFFICIENTS[2:])
    y = np.array([m - fixed for _, fixed, m in data], dtype=float)
    weight = 1.0 / np.array([m for _, _, m in data], dtype=float)
    used = [k for k in range(x.shape[1]) if x[:, k].any()]
    solution, *_ = np.linalg.lstsq(x[:, used] * weight[:, None], y * weight, rcond=None)
    coef = dict(zip([names[k] for k in used], solution.tolist()))
    negative = [k for k, v in coef.items() if v <= 0]
    if negative:
        raise SystemExit(f"fit gave non-positive coefficients {negative}: {coef}")
    factors = {
        "train_efficiency_float32": _round(1 / coef["1/train_efficiency"]),
        "train_efficiency_bfloat16": _round(1 / coef["1/train_efficiency"]),
        "pass_overhead_s": _round(coef["pass_overhead_s"]),
        "pass_overhead_per_layer_s": _round(coef["pass_overhead_per_layer_s"]),
        "decode_efficiency": _round(1 / coef["1/decode_efficiency"]),
        "decode_gpu_per_layer_s": _round(coef["decode_gpu_per_layer_s"]),
        "decode_overhead_s": _round(coef["decode_overhead_s"]),
        "decode_overhead_per_layer_s": _round(coef["decode_overhead_per_layer_s"]),
    }
    saves = [(rec.save_bytes, s) for rec in records for s in rec.save_s]
    factors["save_bytes_per_s"] = (
        _round(sum(b for b, _ in saves) / sum(s for _, s in saves)) if saves else plan_time.FACTORS["save_bytes_per_s"]
    )
    # the step's remainder outside the measured phases (reward, advantages, dispatch), as measured
    factors["other_s"] = _round(statistics.median(rec.step_s - sum(rec.measured.values()) for rec in records))
    # LoRA's fixed costs per adapted Linear: fitted when a LoRA record is among the rows, else as stored
    for name in (
        "adapter_pass_overhead_s",
        "adapter_pass_overhead_16bit_s",
        "adapter_decode_overhead_s",
        "adapter_pass_overhead_outside_s",
    ):
        factors[name] = _round(coef[name]) if name in coef else plan_time.FACTORS[name]
    return factors


def table(records: list[Record], card, factors: dict) -> tuple[str, list[dict]]:
    """Markdown table of predicted vs measured seconds per phase and per step, and the same as dicts."""
    head = (
        "| record | configuration | steps | "
        + " | ".join(f"{p} pred/meas" for p in MEASURED)
        + " | step pred | step meas | error |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    results = []
    for rec in records:
        est = plan_time.estimate(rec.request, card, rec.inputs, factors=factors)
        cells = []
        for p in MEASURED:
            if p in rec.measured:
                cells.append(f"{est.phases.get(p, 0.0):.2f}/{rec.measured[p]:.2f}")
            else:
                cells.append("")
        step = est.step_seconds - est.phases.get("save_checkpoint", 0.0)
        error = step / rec.step_s - 1
        lines.append(
            f"| {rec.name} | {rec.description} | {rec.steps_used} | "
            + " | ".join(cells)
            + f" | {step:.2f} | {rec.step_s:.2f} | {error:+.0%} |"
        )
        results.append(
            {
                "record": rec.name,
                "predicted_step_s": round(step, 3),
                "measured_step_s": round(rec.step_s, 3),
                "error": round(error, 4),
                "phases": {p: [round(est.phases.get(p, 0.0), 3), round(rec.measured[p], 3)] for p in rec.measured},
            }
        )
        for s in rec.save_s:
            lines.append(
                f"| {rec.name} (save) | checkpoint save | 1 | | | | | | |"
                f" {rec.save_bytes / factors['save_bytes_per_s']:.1f} | {s:.1f} |"
                f" {rec.save_bytes / factors['save_bytes_per_s'] / s - 1:+.0%} |"
            )
    return "\n".join(lines), results


def bench_table(benches: list[DecodeBench], card, factors: dict) -> tuple[str, list[dict]]:
    """Markdown table of the decode benches: predicted vs measured ms per decode step, patch 0022's replays
    (fitted) and HF ``generate`` in the same process (not fitted: no FSDP wrapper, unlike verl's rollout)."""
    shape = shape_for(DECODE_BENCH_MODEL)
    lines = [
        (
            "| decode bench | rows | cache columns | graph ms/step pred | meas | error | HF generate ms/step pred"
            " (verl's loop) | meas (bare generate) |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    results = []
    for bench in benches:
        steps = bench.new_tokens - 1
        graph = plan_time.phase_seconds(bench.work(shape), card.rates("float32"), factors) / steps * 1e3
        hf = plan_time.phase_seconds(bench.work(shape, cuda_graph=False), card.rates("float32"), factors) / steps * 1e3
        measured, measured_hf = bench.seconds / steps * 1e3, bench.generate_seconds / steps * 1e3
        lines.append(
            f"| {bench.name} | {bench.batch} | {bench.prompt_width + bench.new_tokens} | {graph:.1f} | {measured:.1f} |"
            f" {graph / measured - 1:+.0%} | {hf:.1f} | {measured_hf:.1f} |"
        )
        results.append(
            {
                "bench": bench.name,
                "graph_ms": [round(graph, 2), round(measured, 2)],
                "generate_ms": [round(hf, 2), round(measured_hf, 2)],
                "error": round(graph / measured - 1, 4),
            }
        )
    return "\n".join(lines), results


def notes() -> str:
    """The table's notes: which records are excluded and why, what the speed records set."""
    lines = ["Notes:"]
    lines += [f"- excluded, {rel}: {why} (shared the GPU: not a timing)" for rel, why in EXCLUDED_RECORDS]
    lines.append(
        "- LoRA records alone: the 1.5B PPO (fp32 base), the 3B PPO on the p40 path (bf16 base, fp32 compute) and the"
        " big 16-bit targets (Qwen3-4B on t4 in fp16 and on a10 in bf16, Qwen2.5-7B on a10 in bf16); the fp32-compute"
        " ones set adapter_pass_overhead_s, the 16-bit ones adapter_pass_overhead_16bit_s (the adapters FSDP units),"
        " the Qwen2.5-7B a10 target with the adapters outside FSDP (patch 0027) adapter_pass_overhead_outside_s, alone;"
        " no full-parameter shape above 0.5B ran alone"
    )
    lines.append(
        "- the one miss: the Qwen3-4B t4 target with CUDA graphs off generates 1.8x slower than predicted (125 s"
        " against 71): its HF loop runs in small generate calls (rollout micro-batch 4, what the t4 budget leaves) with"
        " fp16 adapters on 252 Linears, whose per-step cost the model's CPU terms (fitted on fp32 loops) undercount;"
        " not profiled. With CUDA graphs (the default) the same run is -22%"
    )
    lines += [f"- not fitted on: {rel}: {why}" for rel, _, _, why in CHECK_RECORDS]
    lines += [
        f"- {rec}: its training phases are not fitted, they derive the window (GSM8K_WINDOW_PROMPT_TOKENS) against"
        f" {twin}; its generation is fitted with the decode benches"
        for rec, twin in WINDOW_RECORDS.items()
    ]
    return "\n".join(lines)


def write_factors(
    factors: dict, path: Path = ROOT / "entrypoint" / "verlfit" / "plan" / "time.py", constants: dict | None = None
) -> None:
    """Replace the ``FACTORS = {...}`` block in plan/time.py, and each ``NAME = <int>`` line of ``constants``
    (temp file + rename)."""
    text = path.read_text()
    body = "FACTORS = {\n" + "".join(f'    "{k}": {v!r},\n' for k, v in factors.items()) + "}"
    new, count = re.subn(r"FACTORS = \{\n(?:    .*\n)*?\}", body, text, count=1)
    if count != 1:
        raise SystemExit(f"{path}: no FACTORS block to replace")
    for name, value in (constants or {}).items():
        new, count = re.subn(rf"^{name} = \d+$", f"{name} = {int(value)}", new, count=1, flags=re.M)
        if count != 1:
            raise SystemExit(f"{path}: no '{name} = <int>' line to replace")
    tmp = path.with_suffix(".py.tmp")
    tmp.write_text(new)
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--record",
        action="append",
        default=[],
        help="an extra run directory (run.json + metrics.jsonl) recorded alone on the card; repeatable",
    )
    parser.add_argument("--card", default="h200", help="the card the records ran on (default h200)")
    parser.add_argument("--fit", action="store_true", help="refit the factors (else use the stored plan_time.FACTORS)")
    parser.add_argument(
        "--write-factors",
        action="store_true",
        help="with --fit: write the fitted factors into entrypoint/verlfit/plan/time.py",
    )
    parser.add_argument("--json", help="also write the table as JSON here")
    args = parser.parse_args(argv)
    card = get_card(args.card)
    records = stored_records(args.record)
    benches = decode_benches()
    factors = fit(records, card, benches) if args.fit else dict(plan_time.FACTORS)
    constants = {
        "GSM8K_WINDOW_PROMPT_TOKENS": window_prompt_tokens(records, card, factors),
        "GSM8K_ROLLOUT_PROMPT_TOKENS": rollout_prompt_tokens(records),
    }
    print("factors:", json.dumps(factors))
    print(
        "derived:",
        json.dumps(constants),
        "(stored:",
        json.dumps({k: getattr(plan_time, k) for k in constants}) + ")",
        "window per phase:",
        json.dumps({p: window_prompt_tokens(records, card, factors, (p,)) for p in TRAINED if p != "ref"}),
    )
    text, results = table(records, card, factors)
    print(text)
    inside = sum(1 for r in results if abs(r["error"]) <= 0.25)
    print(f"{inside} of {len(results)} records within +-25% per step")
    print()
    check_text, check_results = table(check_records(), card, factors)
    print("Not fitted on (CHECK_RECORDS):")
    print(check_text)
    print()
    bench_text, bench_results = bench_table(benches, card, factors)
    print(bench_text)
    print()
    print(notes())
    if args.write_factors:
        if not args.fit:
            raise SystemExit("--write-factors needs --fit")
        write_factors(factors, constants=constants)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "factors": factors,
                    "derived": constants,
                    "records": results,
                    "checks": check_results,
                    "decode_benches": bench_results,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
