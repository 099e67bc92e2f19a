"""Check a soak run (device_run.py stages soak_ppo / soak_grpo, issue 17): did it survive its interruptions whole?

    python3 benchmarks/soak_check.py RUNS/soak-ppo [--json RUNS/soak-ppo.soak.json]

Reads the run directory (``run.json``, ``metrics.jsonl``, ``checkpoints/``) and, beside it, ``NAME.rss.csv`` (the host
memory samples of benchmarks/soak_run.py) and ``NAME.events``. Reports:

- the training steps recorded in metrics.jsonl: each of 1..TOTAL (run.json's ``total_steps``) exactly once, else
  the duplicates and the missing steps;
- the ``global_step_*`` checkpoints left against run.json's ``--keep-checkpoints`` K: more than K fails (verl prunes
  only its own session's saves; verlfit removes the rest, :mod:`verlfit.checkpoints`; K 0 keeps all);
- peak allocated GPU memory (``perf/max_memory_allocated_gb``, GiB: the actor update's
``torch.cuda.max_memory_allocated``,
  verlfit/metrics.py) at step 50 (or the first step after it) against the last step: growth beyond 3 % fails;
- host RSS per role (verlfit, verl's driver, the Ray workers' sum and largest) from the samples taken at step 50 and
  after: first, last, and a least-squares slope in MiB per 100 steps (reported, not judged);
- the validation score per validated step (the first ``val-core/`` key, as verlfit.progress reads it);
- the events file's lines.

Exit status 0 when the steps are exactly once each, no more than K checkpoints are left and GPU memory did not grow
beyond 3 %, 1 otherwise, 2 for a directory that is not a verlfit run.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import soak_plan  # noqa: E402

MEMORY_KEY = "perf/max_memory_allocated_gb"
FROM_STEP = 50  # after the first checkpoint (--save-freq 50): allocator and caches have settled
GROWTH_LIMIT = 0.03
RSS_ROLES = ("verlfit_mib", "driver_mib", "workers_sum_mib", "workers_max_mib")


def step_check(steps: list[int], total: int) -> dict:
    """Steps recorded (training records, file order) against 1..``total``: ``{"recorded", "duplicates", "missing",
    "unexpected", "ok"}`` (duplicates: steps recorded more than once, sorted; missing: of 1..total; unexpected:
    outside it)."""
    counts = Counter(steps)
    duplicates = sorted(step for step, count in counts.items() if count > 1)
    missing = [step for step in range(1, total + 1) if step not in counts]
    unexpected = sorted(step for step in counts if not 1 <= step <= total)
    return {
        "recorded": len(steps),
        "duplicates": duplicates,
        "missing": missing,
        "unexpected": unexpected,
        "ok": not duplicates and not missing and not unexpected,
    }


def memory_check(records: list[dict], from_step: int = FROM_STEP, limit: float = GROWTH_LIMIT) -> dict:
    """Peak allocated GPU memory at ``from_step`` (the first training record at or after it) against the last training
    record's: ``{"step", "gib", "last_step", "last_gib", "ratio", "ok"}``; ok when ratio <= 1 + limit. No record with
    the key at or after ``from_step``: ratio None, ok False."""
    marked = sorted((r["step"], r[MEMORY_KEY]) for r in records if MEMORY_KEY in r and r["step"] >= from_step)
    if not marked:
        return {"step": None, "gib": None, "last_step": None, "last_gib": None, "ratio": None, "ok": False}
    (step, gib), (last_step, last_gib) = marked[0], marked[-1]
    ratio = last_gib / gib if gib else None
    return {
        "step": step,
        "gib": gib,
        "last_step": last_step,
        "last_gib": last_gib,
        "ratio": ratio,
        "ok": ratio is not None and ratio <= 1 + limit,
    }


def rss_trend(rows: list[dict], from_step: int = FROM_STEP) -> dict:
    """Per role of :data:`RSS_ROLES`: ``{"first", "last", "slope_mib_per_100_steps"}`` over the samples at step
    ``from_step`` and after (MiB; the slope a least-squares line of RSS against step, x 100; None with fewer than two
    distinct steps); samples where the role's RSS is 0 (its process not there yet, or gone) are left out."""
    result = {}
    for role in RSS_ROLES:
        points = [
            (int(row["step"]), float(row[role]))
            for row in rows
            if int(row["step"]) >= from_step and float(row[role]) > 0
        ]
        if not points:
            result[role] = {"first": None, "last": None, "slope_mib_per_100_steps": None, "samples": 0}
            continue
        steps = [p[0] for p in points]
        slope = statistics.linear_regression(steps, [p[1] for p in points]).slope * 100 if len(set(steps)) > 1 else None
        result[role] = {
            "first": points[0][1],
            "last": points[-1][1],
            "slope_mib_per_100_steps": slope,
            "samples": len(points),
        }
    return result


def rss_figure(rows: list[dict], title: str):
    """A matplotlib Figure of host RSS (MiB) against the training step for verl's driver and the Ray workers'
    sum, one point per sample of NAME.rss.csv whose RSS is above 0 (a role's process not there yet, or gone, as
    around each resume, is left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4))
    for role, label in (("driver_mib", "verl driver"), ("workers_sum_mib", "Ray workers (sum)")):
        points = [(int(row["step"]), float(row[role])) for row in rows if float(row[role]) > 0]
        axes.plot([p[0] for p in points], [p[1] for p in points], ".", label=label)
    axes.set_xlabel("step")
    axes.set_ylabel("RSS, MiB")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right", fontsize="small")
    figure.tight_layout()
    return figure


def validation_scores(records: list[dict]) -> list[tuple[int, str, float]]:
    """``(step, key, score)`` of every record with a ``val-core/`` key (its first), in file order."""
    scores = []
    for record in records:
        key = next((name for name in record if name.startswith("val-core/")), None)
        if key is not None:
            scores.append((record["step"], key, record[key]))
    return scores


def check_run(run_dir: Path, from_step: int = FROM_STEP) -> dict:
    """Everything the module docstring lists, for one run directory; GPU memory and RSS from ``from_step``.

    Raises:
        VerlfitError: ``run_dir`` is not a verlfit run directory, or its run.json cannot be read
            (verlfit.run_files.load_run).
    """
    from verlfit.checkpoints import STEP_PREFIX, saved_steps
    from verlfit.metrics import is_training_record, read_metrics
    from verlfit.run_files import CHECKPOINTS_DIR, load_run

    record = load_run(run_dir)
    settings = record.get("settings") if isinstance(record.get("settings"), dict) else {}
    total = record.get("total_steps") or settings.get("steps")
    records = read_metrics(run_dir)
    training = [r for r in records if is_training_record(r)]
    left = [f"{STEP_PREFIX}{step}" for step in saved_steps(run_dir / CHECKPOINTS_DIR)]
    rss_path = run_dir.parent / f"{run_dir.name}.rss.csv"
    rows = list(csv.DictReader(rss_path.open())) if rss_path.is_file() else []
    steps = step_check([r["step"] for r in training], total)
    memory = memory_check(training, from_step)
    return {
        "run": str(run_dir),
        "total_steps": total,
        "steps": steps,
        "checkpoints": checkpoint_check(left, settings.get("keep_checkpoints")),
        "gpu_memory": memory,
        "from_step": from_step,
        "rss": rss_trend(rows, from_step),
        "rss_samples": len(rows),
        "validation": [{"step": s, "key": k, "score": v} for s, k, v in validation_scores(records)],
        "events": soak_plan.read_events(run_dir.parent / f"{run_dir.name}.events"),
        "ok": steps["ok"] and memory["ok"] and checkpoint_check(left, settings.get("keep_checkpoints"))["ok"],
    }


def checkpoint_check(left: list[str], keep: int | None) -> dict:
    """``{"left", "keep_checkpoints", "ok"}``: ok when ``keep`` is 0 or unset (keep all) or at most ``keep`` folders are
    left."""
    return {"left": left, "keep_checkpoints": keep, "ok": not keep or len(left) <= keep}


def _listing(values: list[int], most: int = 20) -> str:
    return (
        " ".join(map(str, values[:most])) + (f" ... ({len(values)} in all)" if len(values) > most else "")
    ) or "none"


def render(result: dict) -> str:
    """The text report of :func:`check_run`'s result."""
    s, m, c = result["steps"], result["gpu_memory"], result["checkpoints"]
    lines = [
        f"run {result['run']}: {'PASS' if result['ok'] else 'FAIL'}",
        f"steps: {s['recorded']} recorded of {result['total_steps']}:"
        f" {'each once' if s['ok'] else ('some twice' if s['duplicates'] else 'NOT all recorded')}; duplicates"
        f" {_listing(s['duplicates'])}; missing {_listing(s['missing'])}"
        + (f"; outside 1..{result['total_steps']}: {_listing(s['unexpected'])}" if s["unexpected"] else ""),
        (
            f"checkpoints left: {len(c['left'])} ({' '.join(c['left']) or 'none'}); --keep-checkpoints"
            f" {c['keep_checkpoints']}: {'PASS' if c['ok'] else 'FAIL'}"
        ),
    ]
    if m["ratio"] is None:
        lines.append(f"GPU peak allocated: no {MEMORY_KEY} at or after step {result['from_step']}: FAIL")
    else:
        lines.append(
            f"GPU peak allocated: {m['gib']:.3f} GiB at step {m['step']}, {m['last_gib']:.3f} GiB at step"
            f" {m['last_step']}: ratio {m['ratio']:.4f} ({'PASS' if m['ok'] else 'FAIL'}, limit {1 + GROWTH_LIMIT:g})"
        )
    lines.append(f"host RSS from step {result['from_step']} ({result['rss_samples']} samples in all):")
    for role, trend in result["rss"].items():
        if trend["first"] is None:
            lines.append(f"  {role}: no samples")
        else:
            slope = "-" if trend["slope_mib_per_100_steps"] is None else f"{trend['slope_mib_per_100_steps']:+.1f}"
            lines.append(
                f"  {role}: {trend['first']:.1f} -> {trend['last']:.1f} MiB, slope {slope} MiB per 100 steps"
                f" ({trend['samples']} samples)"
            )
    lines.append(
        "validation: "
        + (", ".join(f"step {v['step']} {v['score']:.4f}" for v in result["validation"]) or "none")
        + (f" ({result['validation'][0]['key']})" if result["validation"] else "")
    )
    lines.append(f"events ({len(result['events'])}):")
    for e in result["events"]:
        seconds = "-" if e["exit_seconds"] is None else f"{e['exit_seconds']:.1f} s"
        lines.append(
            f"  {e['time']} {e['event']} at step {e['step']}, exit {seconds}, status {e['status']}: {e['note']}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("run", type=Path, help="the soak run's directory (RUNS/NAME)")
    parser.add_argument("--json", type=Path, help="also write the result here (JSON)")
    parser.add_argument(
        "--plot", type=Path, help="also plot host RSS per role against the step from NAME.rss.csv into this PNG"
    )
    args = parser.parse_args(argv)
    if args.plot:  # before the report and the JSON: a --plot that cannot be drawn writes nothing
        try:
            import matplotlib  # noqa: F401
        except ImportError as error:
            print(
                f"soak_check.py: --plot needs matplotlib, which this Python cannot import ({error}): pip install"
                " matplotlib, or run soak_check.py with verlfit's environment's Python",
                file=sys.stderr,
            )
            return 2
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoint"))
    from verlfit.errors import VerlfitError

    try:
        result = check_run(args.run)
    except VerlfitError as error:
        print(f"soak_check.py: {error}", file=sys.stderr)
        return 2
    print(render(result))
    if args.plot:
        rss_path = args.run.parent / f"{args.run.name}.rss.csv"
        if not rss_path.is_file():
            print(
                f"soak_check.py: --plot: no {rss_path} (benchmarks/soak_run.py writes it beside the run)",
                file=sys.stderr,
            )
            return 2
        figure = rss_figure(list(csv.DictReader(rss_path.open())), f"Host memory of {args.run.name}")
        with tempfile.NamedTemporaryFile(
            dir=args.plot.parent, prefix=f".{args.plot.name}.", suffix=".png", delete=False
        ) as handle:
            figure.savefig(handle, format="png", dpi=100)
        os.replace(handle.name, args.plot)
    if args.json:
        with tempfile.NamedTemporaryFile(
            "w", dir=args.json.parent, prefix=f".{args.json.name}.", delete=False
        ) as handle:
            json.dump(result, handle, indent=2)
            handle.write("\n")
        os.replace(handle.name, args.json)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
