"""Fit the time model's efficiency factors (``verlfit.plan.time.FACTORS``) to recorded runs; print predicted vs
measured seconds per phase and per step.

    python benchmarks/calibrate_time.py                      # the stored H200 records, the stored factors
    python benchmarks/calibrate_time.py --fit                # refit, print the fitted factors and the table
    python benchmarks/calibrate_time.py --fit --write-factors  # and write them into entrypoint/verlfit/plan/time.py
    python benchmarks/calibrate_time.py --fit --record DIR --record DIR2   # add run dirs (all steps after the 1st)

Records: run directories written by ``verlfit train`` (``run.json`` settings, ``metrics.jsonl`` verl's
``timing_s/*`` per step). Only runs that had the GPU to themselves count as timings (docs/benchmarks.md, "Sharing
the GPU slows every run"; benchmarks/results/2026-11-29-h200/README.md): :data:`VALID_RECORDS` lists them with the
steps used. Call 3 and call 9 shared the GPU (seven and nine runs at once) and call 8's main-ppo steps 26-36 ran
beside tests/gpu: none of those steps is used. Call 5's two learning runs ran together but are small (tiny
kernels, CPU-bound, 16 cores): they are used, as the brief of issue 14 counts call 5 alone.

Per run: the mean over the used steps of each phase (``timing_s/gen``, ``old_log_prob``, ``ref``, ``values``,
``update_critic``, ``update_actor``) and of ``timing_s/step``, steps with a checkpoint save excluded (their save
time is fitted on its own: ``timing_s/save_checkpoint``); decode steps per generate call = the mean of
``response_length/max`` (the longest response sets how long ``generate`` runs).

Fit: weighted least squares (every row divided by its measured seconds, so each phase counts by its relative
error) of the phase seconds on the features of ``plan_time.phase_features``: 1/efficiency for fp32 and bf16
passes, a fixed cost per micro-batch pass per layer, 1/efficiency of decode, a fixed cost per decode step and per
decode step per layer. ``save_bytes_per_s`` = saved bytes / measured save seconds over all saves; ``other_s`` =
the median over runs of (measured step - sum of measured phases). numpy is needed for --fit only (the test environment has it).
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

from verlfit import plan
from verlfit.plan import time as plan_time  # noqa: E402
from verlfit.cards import get_card  # noqa: E402
from verlfit.metrics import consolidate, read_metrics  # noqa: E402
from verlfit.model_shape import load_model_shape, shape_from_config  # noqa: E402

H200 = ROOT / "benchmarks" / "results" / "2026-11-29-h200"
MEASURED = ("gen", "old_log_prob", "ref", "values", "update_critic", "update_actor")

# (record dir relative to H200, first step used, last step used or None, why)
VALID_RECORDS = (
    ("call-1/smoke-ppo", 2, None, "call 1: smoke stage alone"),
    ("call-1/smoke-grpo", 2, None, "call 1: smoke stage alone"),
    ("call-1/tuned-p40", 2, None, "call 1: tuned stage alone"),
    ("call-2/main-grpo", 2, None, "call 2: stages one after another"),
    ("call-2/public-recipe", 2, None, "call 2"),
    ("call-2/tuned-p40", 2, None, "call 2"),
    ("call-4/main-ppo", 12, 39, "call 4 resumed at 11 alone; steps 1-10 are call 3's (shared)"),
    ("call-5/learn-ppo-lr1e-5", 2, None, "call 5: the two small learning runs together"),
    ("call-5/learn-grpo-lr1e-5", 2, None, "call 5"),
    ("call-7/main-ppo", 2, 25, "call 7 alone"),
    ("call-8/main-ppo", 37, 50, "call 8: steps 26-36 shared the GPU with tests/gpu; 1-25 are call 7's"),
    ("call-10/cal-a10-grpo-m16-256", 2, None, "call 10 alone, bf16, no memory cap"),
)

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
    for key, builtin in (("0.5b", "Qwen/Qwen2.5-0.5B-Instruct"), ("1.5b", "Qwen/Qwen2.5-1.5B-Instruct"), ("3b", "Qwen/Qwen2.5-3B-Instruct")):
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
    request: plan.PlanRequest
    inputs: plan_time.TimeInputs
    measured: dict  # phase -> mean seconds (non-save steps)
    step_s: float
    steps_used: int
    save_s: list  # seconds of each save
    save_bytes: float
    description: str


def load_record(run_dir: Path, first: int = 2, last: int | None = None, name: str | None = None) -> Record:
    """Read one run directory into a :class:`Record` (the used steps: ``first`` .. ``last``)."""
    from verlfit.overrides import TrainSettings
    from verlfit.profiles import load_profile

    record = json.loads((run_dir / "run.json").read_text())
    steps = [r for r in consolidate(read_metrics(run_dir)) if "timing_s/step" in r and r["step"] >= first and (last is None or r["step"] <= last)]
    if not steps:
        raise SystemExit(f"{run_dir}: no steps in {first}..{last}")
    saves = [r for r in steps if "timing_s/save_checkpoint" in r]
    plain = [r for r in steps if "timing_s/save_checkpoint" not in r] or steps
    fields = {f.name for f in dataclasses.fields(TrainSettings)}
    values = {k: v for k, v in record["settings"].items() if k in fields}
    values["loggers"] = tuple(values.get("loggers", ("console",)))
    settings = TrainSettings(**values)
    request = plan.request_from_settings(settings, load_profile(record["profile"]), 140 * 1024**3, shape=shape_for(settings.model))
    if any(o.endswith("attn_implementation=eager") for o in record["overrides"]):
        request = dataclasses.replace(request, attention="eager")
    inputs = plan_time.TimeInputs(decode_steps=round(statistics.mean(r["response_length/max"] for r in plain)))
    measured = {p: statistics.mean(r.get(f"timing_s/{p}", 0.0) for r in plain) for p in MEASURED if any(f"timing_s/{p}" in r for r in plain)}
    save_work = plan_time.phase_work(request, dataclasses.replace(inputs, save_freq=1)).get("save_checkpoint")
    s = record["settings"]
    description = f"{s['algorithm']} {request.shape.num_layers}L/{request.shape.hidden_size} b{s['train_batch_size']}x{request.samples} {s['max_prompt_length']}/{s['max_response_length']} mb {request.actor_micro_batch_size}/{request.log_prob_micro_batch_size}{f'/{request.critic_micro_batch_size}' if request.has_critic else ''} {request.dtype} {request.attention}"
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
    )


def stored_records(extra: list[str] = ()) -> list[Record]:
    """The valid H200 records plus ``extra`` run directories (all their steps after the first)."""
    records = [load_record(H200 / rel, first, last, name=rel) for rel, first, last, _ in VALID_RECORDS]
    records += [load_record(Path(d), 2, None, name=str(d)) for d in extra]
    return records


def rows(records: list[Record], card) -> list[tuple[tuple[float, ...], float, float]]:
    """(features, fixed seconds, measured seconds) for every measured phase of every record."""
    out = []
    for rec in records:
        work = plan_time.phase_work(rec.request, rec.inputs)
        for phase, seconds in rec.measured.items():
            if phase in work and seconds > 0:
                features, fixed = plan_time.phase_features(work[phase], card, rec.request.dtype)
                out.append((features, fixed, seconds))
    return out


def _round(value: float) -> float:
    return float(f"{value:.4g}")


def fit(records: list[Record], card) -> dict:
    """Fitted :data:`verlfit.plan.time.FACTORS` (4 significant digits) from ``records`` on ``card``."""
    import numpy as np

    data = rows(records, card)
    x = np.array([f for f, _, _ in data], dtype=float)
    y = np.array([m - fixed for _, fixed, m in data], dtype=float)
    weight = 1.0 / np.array([m for _, _, m in data], dtype=float)
    used = [k for k in range(x.shape[1]) if x[:, k].any()]
    solution, *_ = np.linalg.lstsq(x[:, used] * weight[:, None], y * weight, rcond=None)
    coef = dict(zip([plan_time.COEFFICIENTS[k] for k in used], solution.tolist()))
    negative = [k for k, v in coef.items() if v <= 0]
    if negative:
        raise SystemExit(f"fit gave non-positive coefficients {negative}: {coef}")
    factors = {
        "train_efficiency_float32": _round(1 / coef["1/train_efficiency_float32"]),
        "train_efficiency_bfloat16": _round(1 / coef["1/train_efficiency_bfloat16"]) if "1/train_efficiency_bfloat16" in coef else plan_time.FACTORS["train_efficiency_bfloat16"],
        "pass_overhead_s": _round(coef["pass_overhead_s"]),
        "pass_overhead_per_layer_s": _round(coef["pass_overhead_per_layer_s"]),
        "decode_efficiency": _round(1 / coef["1/decode_efficiency"]),
        "decode_overhead_s": _round(coef["decode_overhead_s"]),
        "decode_overhead_per_layer_s": _round(coef["decode_overhead_per_layer_s"]),
    }
    saves = [(rec.save_bytes, s) for rec in records for s in rec.save_s]
    factors["save_bytes_per_s"] = _round(sum(b for b, _ in saves) / sum(s for _, s in saves)) if saves else plan_time.FACTORS["save_bytes_per_s"]
    # the step's remainder outside the measured phases (reward, advantages, dispatch), as measured
    factors["other_s"] = _round(statistics.median(rec.step_s - sum(rec.measured.values()) for rec in records))
    return factors


def table(records: list[Record], card, factors: dict) -> tuple[str, list[dict]]:
    """Markdown table of predicted vs measured seconds per phase and per step, and the same as dicts."""
    head = "| record | configuration | steps | " + " | ".join(f"{p} pred/meas" for p in MEASURED) + " | step pred | step meas | error |"
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
        lines.append(f"| {rec.name} | {rec.description} | {rec.steps_used} | " + " | ".join(cells) + f" | {step:.2f} | {rec.step_s:.2f} | {error:+.0%} |")
        results.append({"record": rec.name, "predicted_step_s": round(step, 3), "measured_step_s": round(rec.step_s, 3), "error": round(error, 4), "phases": {p: [round(est.phases.get(p, 0.0), 3), round(rec.measured[p], 3)] for p in rec.measured}})
        for s in rec.save_s:
            lines.append(f"| {rec.name} (save) | checkpoint save | 1 | | | | | | | {rec.save_bytes / factors['save_bytes_per_s']:.1f} | {s:.1f} | {rec.save_bytes / factors['save_bytes_per_s'] / s - 1:+.0%} |")
    return "\n".join(lines), results


def write_factors(factors: dict, path: Path = ROOT / "entrypoint" / "verlfit" / "plan" / "time.py") -> None:
    """Replace the ``FACTORS = {...}`` block in plan/time.py (temp file + rename)."""
    text = path.read_text()
    body = "FACTORS = {\n" + "".join(f'    "{k}": {v!r},\n' for k, v in factors.items()) + "}"
    new, count = re.subn(r"FACTORS = \{\n(?:    .*\n)*?\}", body, text, count=1)
    if count != 1:
        raise SystemExit(f"{path}: no FACTORS block to replace")
    tmp = path.with_suffix(".py.tmp")
    tmp.write_text(new)
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="append", default=[], help="an extra run directory (run.json + metrics.jsonl) recorded alone on the card; repeatable")
    parser.add_argument("--card", default="h200", help="the card the records ran on (default h200)")
    parser.add_argument("--fit", action="store_true", help="refit the factors (else use the stored plan_time.FACTORS)")
    parser.add_argument("--write-factors", action="store_true", help="with --fit: write the fitted factors into entrypoint/verlfit/plan/time.py")
    parser.add_argument("--json", help="also write the table as JSON here")
    args = parser.parse_args(argv)
    card = get_card(args.card)
    records = stored_records(args.record)
    factors = fit(records, card) if args.fit else dict(plan_time.FACTORS)
    print("factors:", json.dumps(factors))
    text, results = table(records, card, factors)
    print(text)
    inside = sum(1 for r in results if abs(r["error"]) <= 0.25)
    print(f"{inside} of {len(results)} records within +-25% per step")
    if args.write_factors:
        if not args.fit:
            raise SystemExit("--write-factors needs --fit")
        write_factors(factors)
    if args.json:
        Path(args.json).write_text(json.dumps({"factors": factors, "records": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
