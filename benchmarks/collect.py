"""Summarise benchmark run directories into a JSON of results and a markdown table.

    python benchmarks/collect.py RESULTS_DIR [--json OUT.json] [--markdown OUT.md]

RESULTS_DIR holds run directories written by ``verlfit train`` (``run.json`` + ``metrics.jsonl``), e.g. the
unpacked ``runs.tar.gz`` of ``benchmarks/device_run.py pack``. For each run it reports, from verl's own metrics:

* steps done, mean step time (s) and tokens per second over the steps after the first (the first includes
  CUDA/allocator warm-up), tokens per step (``perf/total_num_tokens``: prompt + response tokens, padding
  excluded), and the time split into verl's phases (``timing_s/gen``, ``old_log_prob``, ``ref``, ``values``,
  ``update_critic``, ``update_actor``);
* peak allocated and reserved memory (``perf/max_memory_allocated_gb`` / ``..._reserved_gb``, GiB: verl divides
  by 1024**3) against the run's per-worker limit, and the planner's prediction for the same settings;
* whether every loss was finite and whether the policy moved (largest |actor/ppo_kl| at full precision);
* the validation score per validation step (``val-core/...``: verl's strict GSM8K reward, greedy decoding), for
  the learning check; the markdown then has a second table, one column per run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoint"))

from verlfit.metrics import consolidate, read_metrics  # noqa: E402
from verlfit.run_files import load_run  # noqa: E402
from verlfit.synthetic_model import BUILT_IN_MODELS  # noqa: E402

PHASES = ("gen", "old_log_prob", "ref", "values", "update_critic", "update_actor")
LOSSES = ("actor/pg_loss", "critic/vf_loss", "actor/kl_loss")
QWEN05B = "Qwen/Qwen2.5-0.5B-Instruct"
# device_run.py's random-weight models (``$WORK/SHAPE-random``, made by make_model.py --shape SHAPE) have the shapes
# of the hub models verlfit.synthetic_model.BUILT_IN_MODELS names, which the planner has built in
RANDOM_MODEL_SUFFIX = "-random"


def built_in_shape(model: str) -> str | None:
    """The built-in shape (hub id) of a run's model path: one of device_run.py's random-weight models
    (``SHAPE-random``, by the directory's name: ``BUILT_IN_MODELS[SHAPE]``, e.g. ``qwen2.5-7b-random`` is
    ``Qwen/Qwen2.5-7B-Instruct``) or another 0.5B-named model; None for any other."""
    name = Path(model).name
    if name.endswith(RANDOM_MODEL_SUFFIX) and name.removesuffix(RANDOM_MODEL_SUFFIX) in BUILT_IN_MODELS:
        return BUILT_IN_MODELS[name.removesuffix(RANDOM_MODEL_SUFFIX)]
    return QWEN05B if "0.5b" in model else None


def predicted_peak_gib(record: dict, longest_prompt_length: int | None = None) -> float | None:
    """The planner's peak (GiB, allocator headroom excluded) for the run's recorded settings.

    The benchmark models are random-weight copies of built-in shapes, so the built-in shape is used where the
    model's config.json is not on this machine (:func:`built_in_shape`);
    extra ``*.attn_implementation=eager`` overrides switch the prediction to eager attention.
    ``longest_prompt_length``: the prompt columns the run's trims cut to (tokens), e.g. the longest prompt its
    steps measured (verl's ``prompt_length/max``); None = the run's recorded value, if any.
    """
    from verlfit.plan.memory import gib, predict
    from verlfit.plan.request import request_from_settings
    from verlfit.model_shape import load_model_shape
    from verlfit.run_settings import TrainSettings
    from verlfit.patch_switches import speed_switches
    from verlfit.profiles import load_profile

    settings_fields = {f.name for f in dataclasses.fields(TrainSettings)}
    values = {k: v for k, v in record["settings"].items() if k in settings_fields}
    values["loggers"] = tuple(values.get("loggers", ("console",)))
    values.setdefault("frozen_base_dtype", "float32")  # recorded before patch 0026: a LoRA base in fp32
    if longest_prompt_length is not None:
        values["longest_prompt_length"] = longest_prompt_length
    settings = TrainSettings(**values)
    config = Path(settings.model) / "config.json"
    shape = (
        load_model_shape(str(config))
        if config.is_file()
        else load_model_shape(built_in_shape(settings.model) or settings.model)
    )
    limit = record["environment"].get("VERLFIT_GPU_MEMORY_LIMIT_GIB")
    memory = int(float(limit) * 1024**3) if limit else 140 * 1024**3
    request = request_from_settings(settings, load_profile(record["profile"]), memory, shape=shape)
    if any(o.endswith("attn_implementation=eager") for o in record["overrides"]):
        request = dataclasses.replace(request, attention="eager")
    # the patch switches as the run had them (its override list), not as today's profile sets them
    switches = speed_switches(record["overrides"])
    request = dataclasses.replace(
        request,
        trim_padding=switches.get("trim_padding", ()),
        rollout_trim_padding=switches.get("rollout_trim_padding", False),
        cuda_graph=request.rollout == "hf" and switches.get("cuda_graph", False),
    )
    return gib(predict(request).peak.total)


def summarise(run_dir: Path) -> dict:
    """One run's numbers (see the module docstring)."""
    record = load_run(run_dir)
    records = consolidate(read_metrics(run_dir))
    steps = [r for r in records if "timing_s/step" in r]
    later = steps[1:] or steps
    settings = record["settings"]
    out = {
        "run": run_dir.name,
        "algorithm": settings["algorithm"],
        "profile": record["profile"],
        "memory_limit_gib": (
            float(record["environment"]["VERLFIT_GPU_MEMORY_LIMIT_GIB"])
            if record["environment"].get("VERLFIT_GPU_MEMORY_LIMIT_GIB")
            else None
        ),
        "batch": settings["train_batch_size"],
        "mini_batch": settings["ppo_mini_batch_size"],
        "micro_batch": {
            "actor": settings["actor_micro_batch_size"],
            "critic": settings["critic_micro_batch_size"] if settings["algorithm"] == "ppo" else None,
            "log_prob": settings["log_prob_micro_batch_size"],
            "rollout": settings["rollout_micro_batch_size"] or settings["train_batch_size"],
        },
        "samples": settings["rollout_n"] if settings["algorithm"] == "grpo" else 1,
        "lengths": [settings["max_prompt_length"], settings["max_response_length"]],
        "gradient_checkpointing": settings["gradient_checkpointing"],
        "offload": {
            k: settings[k]
            for k in (
                "actor_param_offload",
                "actor_optimizer_offload",
                "critic_param_offload",
                "critic_optimizer_offload",
            )
        },
        "attention": (
            "eager"
            if any(o.endswith("attn_implementation=eager") for o in record["overrides"])
            else next(
                (
                    o.split("=", 1)[1]
                    for o in record["overrides"]
                    if o.startswith("+actor_rollout_ref.model.attn_implementation=")
                ),
                None,
            )
        ),
        "steps": len(steps),
    }
    if not steps:
        return out
    # validation before training is a record of its own at step 0
    out["validation"] = {
        key: [[r["step"], r[key]] for r in records if key in r]
        for key in sorted({k for r in records for k in r if k.startswith("val-core/")})
    }
    out.update(
        step_time_s=statistics.mean(r["timing_s/step"] for r in later),
        tokens_per_step=statistics.mean(r["perf/total_num_tokens"] for r in later),
        tokens_per_second=statistics.mean(r["perf/total_num_tokens"] / r["timing_s/step"] for r in later),
        verl_throughput=statistics.mean(r["perf/throughput"] for r in later),
        phases_s={p: statistics.mean(r.get(f"timing_s/{p}", 0.0) for r in later) for p in PHASES},
        peak_allocated_gib=max(r["perf/max_memory_allocated_gb"] for r in steps),
        peak_reserved_gib=max(r["perf/max_memory_reserved_gb"] for r in steps),
        losses_finite=all(math.isfinite(r[k]) for r in steps for k in LOSSES if k in r),
        max_abs_ppo_kl=max(abs(r.get("actor/ppo_kl", 0.0)) for r in steps),
        critic_vf_loss_first_last=[steps[0].get("critic/vf_loss"), steps[-1].get("critic/vf_loss")],
        mean_score=statistics.mean(r.get("critic/score/mean", 0.0) for r in steps),
    )
    model = Path(settings["model"])
    if not (model / "config.json").is_file() and built_in_shape(str(model)) is None:
        # a model made on the device (tiny, small-sft): its config.json is only where the runs were made
        out["predicted_peak_gib_error"] = (
            f"model {model.name}: its config.json is not on this machine (run collect.py where the model is)"
        )
        return out
    out["predicted_peak_gib"] = predicted_peak_gib(record)
    longest = max((r["prompt_length/max"] for r in steps if "prompt_length/max" in r), default=None)
    if longest is not None:
        # the prediction with the prompt columns the run's trims cut to: its steps' longest prompt
        out["longest_prompt_measured"] = int(longest)
        out["predicted_peak_gib_at_measured_prompts"] = predicted_peak_gib(record, int(longest))
    return out


def markdown(results: list[dict]) -> str:
    """A markdown table of ``results`` (one row per run)."""
    head = (
        "| run | algo | batch x n | micro (actor/critic/log-prob/rollout) | prompt/resp | ckpt | optimizer offload |"
        " steps | s/step | tokens/step | tokens/s | gen s | peak alloc GiB | predicted GiB | reserved GiB | limit GiB"
        " |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = []
    for r in results:
        if not r["steps"]:
            rows.append(f"| {r['run']} | {r['algorithm']} | no finished steps |" + " |" * 13)
            continue
        m = r["micro_batch"]
        predicted = f"{r['predicted_peak_gib']:.1f}" if "predicted_peak_gib" in r else "n/a"
        limit = f"{r['memory_limit_gib']:g}" if r["memory_limit_gib"] else "none"
        rows.append(
            f"| {r['run']} | {r['algorithm']} | {r['batch']} x {r['samples']} |"
            f" {m['actor']}/{m['critic'] or '-'}/{m['log_prob']}/{m['rollout']} | {r['lengths'][0]}/{r['lengths'][1]} |"
            f" {'on' if r['gradient_checkpointing'] else 'off'} |"
            f" {'yes' if r['offload']['actor_optimizer_offload'] else 'no'} | {r['steps']} | {r['step_time_s']:.1f} |"
            f" {r['tokens_per_step']:.0f} | {r['tokens_per_second']:.0f} | {r['phases_s']['gen']:.1f} |"
            f" {r['peak_allocated_gib']:.2f} | {predicted} | {r['peak_reserved_gib']:.2f} | {limit} |"
        )
    return "\n".join([head, *rows]) + "\n" + validation_markdown(results)


def validation_markdown(results: list[dict]) -> str:
    """A markdown table of validation scores: one row per validation step, one column per run that validated."""
    curves = {
        r["run"]: dict((step, score) for key in r.get("validation", {}) for step, score in r["validation"][key])
        for r in results
    }
    curves = {run: curve for run, curve in curves.items() if curve}
    if not curves:
        return ""
    runs = sorted(curves)
    lines = [
        "",
        "Validation score (greedy, strict GSM8K reward) per step:",
        "",
        "| step | " + " | ".join(runs) + " |",
        "|---" * (len(runs) + 1) + "|",
    ]
    for step in sorted({step for curve in curves.values() for step in curve}):
        lines.append(
            f"| {step} | "
            + " | ".join(f"{curves[run][step]:.3f}" if step in curves[run] else "" for run in runs)
            + " |"
        )
    first_last = [
        f"{run}: {curves[run][min(curves[run])]:.3f} -> {curves[run][max(curves[run])]:.3f} (best"
        f" {max(curves[run].values()):.3f})"
        for run in runs
    ]
    return "\n".join(lines + ["", "; ".join(first_last)]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="directory of run directories")
    parser.add_argument("--json", type=Path, help="write the results here (default: stdout)")
    parser.add_argument("--markdown", type=Path, help="write the markdown table here")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        parser.error(f"{args.results} is not a directory")
    runs = sorted(p for p in args.results.iterdir() if (p / "run.json").is_file())
    if not runs:
        parser.error(f"{args.results} holds no run directories (run.json)")
    results = [summarise(p) for p in runs]
    text = json.dumps(results, indent=2) + "\n"
    if args.json:
        args.json.write_text(text)
    else:
        sys.stdout.write(text)
    if args.markdown:
        args.markdown.write_text(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
