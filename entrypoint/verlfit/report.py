"""``verlfit report RUN_DIR``: plots and a short summary of a run, finished, running or interrupted.

A run directory (made by ``verlfit train``) holds ``metrics.jsonl`` (one record per step, see
:mod:`verlfit.metrics`), ``train.log`` (verl's full output) and ``run.json`` (``total_steps``, ``command``,
...). The report reads ``metrics.jsonl`` (a cut last line is skipped) or, without it, parses
``train.log``; ``run.json`` is optional. It writes into ``RUN_DIR/report`` or ``--output``, as one folder built beside
it and switched in (:mod:`verlfit.output_files`: never over files verlfit did not write, the run directory itself or
elsewhere in it, or the current directory; its earlier report of the same run is replaced without ``--force``):

    reward.png  kl.png  entropy.png  response_length.png  step_time.png  memory.png  summary.txt

(a plot whose metrics the run never logged is left out). The validation curve keeps its step-0 point (verl's
validation before training) as a dotted baseline, and the summary says "step 0 (before training) X -> last Y".
When ``verlfit eval`` scored an exported checkpoint of the run (``RUN_DIR/eval/*/summary.json``, its default output for
a run directory), the summary adds that accuracy, as before -> after when it ran with ``--compare``. An unreadable
``run.json``, or one whose ``total_steps`` is not a whole number >= 1, is named (as ``verlfit train --resume`` names it)
and the status then rests on the metrics alone; a ``metrics.jsonl`` with no step record and lines that are not UTF-8 (a
binary file) is refused, naming it. Reports of the recorded runs under ``benchmarks/results`` are kept out of git by
``.gitignore`` (``report/``, ``eval/`` and ``export/`` there), so the default output stays beside the run. The data
behind each plot comes from :func:`plot_data`, which tests compare with the input; :func:`build_figure` draws exactly
that data.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from verlfit import output_files
from verlfit.errors import VerlfitError
from verlfit.evaluate import COMPARISON_FILE, EVAL_DIR, SUMMARY_FILE as EVAL_SUMMARY
from verlfit.input_files import kind_of
from verlfit.metrics import consolidate, is_training_record, parse_log, read_metrics
from verlfit.durations import format_duration
from verlfit.progress import REWARD_KEY, tokens_per_second
from verlfit.run_files import LOG_FILE, METRICS_FILE, NoRunRecord, RUN_FILE, load_run, process_alive

REPORT_DIR = "report"
SUMMARY_FILE = "summary.txt"

# verl 0.4.1's marked_timer phases inside timing_s/step (ray_trainer.py fit), in execution order.
# timing_s/generate_sequences and timing_s/reshard are parts of gen and are not stacked again.
TIMING_PHASES = (
    "gen",
    "gen_max",
    "reward",
    "old_log_prob",
    "ref",
    "values",
    "adv",
    "update_critic",
    "update_actor",
    "dump_rollout_generations",
    "testing",
    "save_checkpoint",
)

# The most steps drawn as one bar each in the step-time plot (and plotted points for which the legend looks for the
# best place): past it a bar would be under a pixel wide in the 800-pixel figure, and each bar is a matplotlib patch
# (80,000 patches took 78 s for 10,000 steps of 8 phases); the phases are then drawn as stacked areas.
MAX_BARS = 1000

# plot name -> (title, y label, metric names drawn as lines)
LINE_PLOTS = {
    "reward": ("Reward", "score", (REWARD_KEY, "critic/rewards/mean")),
    "kl": ("KL", "KL", ("actor/kl_loss", "actor/reward_kl_penalty", "actor/ppo_kl")),
    "entropy": ("Entropy", "nats/token", ("actor/entropy",)),
    "response_length": (
        "Response length",
        "tokens",
        ("response_length/mean", "response_length/max", "response_length/min"),
    ),
    "memory": ("Peak GPU memory", "GiB", ("perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb")),
}


# the metrics the summary reads besides the plotted ones (throughput, peak memory)
SUMMARY_METRICS = (
    "perf/total_num_tokens",
    "perf/throughput",
    "perf/max_memory_allocated_gb",
    "perf/max_memory_reserved_gb",
)


def shown_metric(name: str) -> bool:
    """Whether the report shows metric ``name`` (a plot's, the summary's, any ``timing_s/`` or ``val-core/``), the
    ones :func:`read_run_metrics` keeps of each step."""
    return (
        name.startswith(("timing_s/", "val-core/"))
        or name in SUMMARY_METRICS
        or any(name in metrics for _title, _label, metrics in LINE_PLOTS.values())
    )


@dataclass
class Run:
    """What a run directory says: consolidated records (one per step) and what run.json adds."""

    run_dir: Path
    records: list[dict]
    source: str
    info: dict = field(default_factory=dict)
    total_steps: int | None = None
    unreadable_lines: list[int] = field(default_factory=list)  # of metrics.jsonl, from 1
    not_numbers: list[tuple[int, str]] = field(default_factory=list)  # (line, metric) of metrics.jsonl read as NaN
    info_error: str | None = None  # why run.json could not be read (None: read, or absent)
    evaluation: dict | None = (
        None  # the newest RUN/eval/*/summary.json of this run's exported checkpoint (verlfit eval)
    )

    @property
    def training(self) -> list[dict]:
        return [r for r in self.records if is_training_record(r)]

    @property
    def finished(self) -> bool:
        last = self.training[-1]["step"] if self.training else None
        return any(r.get("finished") for r in self.records) or (
            self.total_steps is not None and last is not None and last >= self.total_steps
        )


def read_run_metrics(run_dir: str | os.PathLike) -> Run:
    """Gather what a report shows of a run directory: its step records from ``metrics.jsonl`` (or, without it, parsed
    from ``train.log``), consolidated one per step; ``run.json`` (:func:`verlfit.run_files.load_run`; missing: no
    warning; unreadable: ``info_error`` says why, as ``train --resume`` words it); the total steps (``run.json``'s,
    else ``train.log``'s "Total training steps"); the newest eval of an exported checkpoint
    (:func:`read_evaluation`).

    ``run.json``'s ``total_steps`` must be a whole number >= 1 (what ``verlfit train`` records): another value
    (``-3``, ``0``, ``"10"``, ``true``) makes the record untrusted, as an unreadable one (``info_error`` names the
    key and the file). Lines of ``metrics.jsonl`` that are not step records are skipped and counted, as
    :func:`verlfit.metrics.read_metrics` says.

    Raises:
        VerlfitError (exit status 2): the directory does not exist, or has neither ``metrics.jsonl`` nor
            ``train.log``; its ``metrics.jsonl`` holds no step record and lines that are not UTF-8 (not the JSON
            lines verlfit train writes), naming the file and the first such line.
    """
    run_dir = Path(run_dir)
    what = (
        f"a run directory (made by verlfit train) holds {METRICS_FILE} (metrics per step), "
        f"{LOG_FILE} (verl's output) and {RUN_FILE}"
    )
    if not run_dir.is_dir():
        raise VerlfitError(f"{run_dir} is not a directory; {what}", fix="verlfit report runs/<name>", exit_code=2)
    metrics_path, log_path = run_dir / METRICS_FILE, run_dir / LOG_FILE
    if not metrics_path.is_file() and not log_path.is_file():
        # what stands there instead of the files, in words (a folder named metrics.jsonl, a dangling link)
        found = [f"{path.name} is {kind_of(path)}" for path in (metrics_path, log_path) if os.path.lexists(path)]
        has = f"its {' and its '.join(found)}, not a file" if found else f"it has no {METRICS_FILE} and no {LOG_FILE}"
        raise VerlfitError(
            f"{run_dir} is not a run: {has}; {what}",
            fix="pass the directory verlfit train created, e.g. verlfit report runs/<name>",
            exit_code=2,
        )
    info, info_error = {}, None
    try:
        info = load_run(run_dir)
    except NoRunRecord:
        pass  # a copied verl log: the metrics alone
    except VerlfitError as error:
        info_error = error.message
    recorded = info.get("total_steps")
    if "total_steps" in info and (not isinstance(recorded, int) or isinstance(recorded, bool) or recorded < 1):
        info, info_error = {}, f"{run_dir / RUN_FILE} holds total_steps {recorded!r}, not a whole number of steps >= 1"
    total = info.get("total_steps")
    unreadable: list[int] = []
    not_numbers: list[tuple[int, str]] = []
    not_text: list[int] = []
    records = read_metrics(run_dir, unreadable, not_numbers, keep=shown_metric, not_text=not_text)
    if not records and not_text:
        also = f"move it away: the report then reads {LOG_FILE}"
        if not log_path.is_file():
            also = "pass the run directory verlfit train wrote"
        raise VerlfitError(
            f"{metrics_path} is not text: line {not_text[0]} holds bytes that are not UTF-8, and no line is a step "
            f"record (verlfit train writes one JSON object a line)",
            fix=f"restore {METRICS_FILE} from a copy of the run, or {also}",
            exit_code=2,
        )
    source = METRICS_FILE
    log_total = None
    if log_path.is_file() and (not records or total is None):
        with open(log_path, encoding="utf-8", errors="replace", newline="") as handle:
            log_records, parser = parse_log(handle)
        log_total = parser.total_steps
        if not records:
            records, source = log_records, LOG_FILE
    return Run(
        run_dir=run_dir,
        records=consolidate(records),
        source=source,
        info=info,
        total_steps=total if total is not None else log_total,
        unreadable_lines=unreadable,
        not_numbers=not_numbers,
        info_error=info_error,
        evaluation=read_evaluation(run_dir),
    )


def read_evaluation(run_dir: Path) -> dict | None:
    """The summary ``verlfit eval`` wrote for this run's newest evaluated checkpoint (``RUN/eval/*/summary.json``
    whose ``step`` is set), with its ``comparison`` (``comparison.json`` beside it) when ``--compare`` was given."""

    found = []
    for path in sorted((run_dir / EVAL_DIR).glob(f"*/{EVAL_SUMMARY}")):
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if (
            isinstance(summary, dict)
            and isinstance(summary.get("step"), int)
            and isinstance(summary.get("accuracy"), (int, float))
        ):
            try:
                comparison = json.loads((path.parent / COMPARISON_FILE).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                comparison = None
            found.append(
                summary | {"comparison": comparison if isinstance(comparison, dict) else None, "path": str(path.parent)}
            )
    return max(found, key=lambda s: s["step"]) if found else None


def series(records: list[dict], name: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric over the records that have it; a value that is not :func:`_finite` (NaN,
    infinite, beyond +-:data:`LARGEST_SHOWN`) is NaN, which matplotlib leaves as a gap in the line."""
    points = [(r["step"], r[name]) for r in records if name in r]
    return [s for s, _ in points], [v if _finite(v) else math.nan for _, v in points]


def plot_data(records: list[dict]) -> dict[str, dict]:
    """The data of every plot, keyed by plot name (the PNG's stem).

    Line plots: ``{"title", "ylabel", "kind": "line", "lines": {metric: (steps, values)}}`` with only the
    metrics present; the reward plot adds the ``val-core/*`` metrics (validation score, a marker per
    validation) and ``"baselines": {metric: step-0 value}`` for those validated before training. Step time:
    ``{"kind": "stacked", "steps": [...], "phases": {phase: [seconds per step]}}``
    where the phases are verl's ``timing_s/<phase>`` (0 where absent) plus ``other`` = ``timing_s/step``
    minus their sum (never below 0). Plots without data are left out.
    """
    plots: dict[str, dict] = {}
    for name, (title, ylabel, metrics) in LINE_PLOTS.items():
        wanted = list(metrics)
        if name == "reward":
            wanted += sorted({k for r in records for k in r if k.startswith("val-core/")})
        lines = {m: series(records, m) for m in wanted}
        lines = {m: pts for m, pts in lines.items() if pts[0]}
        if lines:
            plots[name] = {"title": title, "ylabel": ylabel, "kind": "line", "lines": lines}
            baselines = {m: pts[1][0] for m, pts in lines.items() if m.startswith("val-core/") and pts[0][0] == 0}
            if baselines:
                plots[name]["baselines"] = baselines  # validation before training (step 0): a dotted level line
    timed = [
        r for r in records if is_training_record(r) and _finite(r["timing_s/step"])
    ]  # a step without its time: no bar
    if timed:
        present = [p for p in TIMING_PHASES if any(f"timing_s/{p}" in r for r in timed)]
        phases = {p: [r[f"timing_s/{p}"] if _finite(r.get(f"timing_s/{p}")) else 0.0 for r in timed] for p in present}
        phases["other"] = [
            max(0.0, r["timing_s/step"] - sum(r.get(f"timing_s/{p}", 0.0) for p in present)) for r in timed
        ]
        plots["step_time"] = {
            "title": "Step time by verl phase",
            "ylabel": "seconds",
            "kind": "stacked",
            "steps": [r["step"] for r in timed],
            "phases": phases,
        }
    return plots


# No reward, score, time or memory figure a run logs comes near this; a value past it is a broken number, left out as
# NaN is (matplotlib's axis arithmetic overflows near the float limit: 1e308 and -1e308 in one plot raised ValueError)
LARGEST_SHOWN = 1e100


def _finite(value) -> bool:
    """True for a number that is not NaN, infinite or beyond +-:data:`LARGEST_SHOWN` (a metric read as NaN:
    :func:`verlfit.metrics.read_metrics`)."""
    return isinstance(value, (int, float)) and math.isfinite(value) and abs(value) <= LARGEST_SHOWN


def build_figure(spec: dict):
    """A matplotlib Figure (Agg canvas, no pyplot state) drawing exactly ``spec`` from :func:`plot_data`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy: only where report draws
    from matplotlib.figure import Figure  # lazy: only where report draws
    from matplotlib.ticker import MaxNLocator  # lazy: only where report draws

    fig = Figure(figsize=(8, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if spec["kind"] == "stacked" and len(spec["steps"]) <= MAX_BARS:
        bottom = [0.0] * len(spec["steps"])
        for phase, heights in spec["phases"].items():
            ax.bar(spec["steps"], heights, bottom=bottom, label=phase)
            bottom = [b + h for b, h in zip(bottom, heights)]
    elif spec["kind"] == "stacked":
        # one filled outline per phase, a flat top a step wide (step="mid"): the same heights as the bars without
        # their gaps, drawn as one polygon instead of a patch per step
        bottom = [0.0] * len(spec["steps"])
        for phase, heights in spec["phases"].items():
            top = [b + h for b, h in zip(bottom, heights)]
            ax.fill_between(spec["steps"], bottom, top, step="mid", label=phase, linewidth=0)
            bottom = top
    else:
        for name, (steps, values) in spec["lines"].items():
            marker = "o" if name.startswith("val-core/") or len(steps) < 20 else None
            style = "--" if name.startswith("val-core/") else "-"
            ax.plot(steps, values, style, marker=marker, label=name)
        for name, value in spec.get("baselines", {}).items():
            ax.axhline(value, linestyle=":", color="gray", label=f"step-0 baseline {value:.3f}")
    ax.set_title(spec["title"])
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(spec["ylabel"])
    ax.grid(alpha=0.3)
    points = len(spec["steps"]) if spec["kind"] == "stacked" else sum(len(steps) for steps, _ in spec["lines"].values())
    # matplotlib's "best" tries each place against every drawn point (32 s for 10,000 steps of six plots): past
    # MAX_BARS points the legend goes beside the plot, where it covers nothing
    if points <= MAX_BARS:
        ax.legend(fontsize="small")
    else:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig


def _best(points: list, spec: str) -> str:
    """``"best 0.250 (step 2)"``: the highest finite value of ``points`` ((step, value) pairs) and its step; a NaN or
    infinite value (warned about by :func:`not_a_number_warnings`) is never the best, and with no finite value the
    text says so."""
    finite = [point for point in points if _finite(point[1])]
    if not finite:
        return "best: none (every value NaN, infinite or beyond 1e100)"
    step, value = max(finite, key=lambda point: point[1])
    return f"best {value:{spec}} (step {step})"


def not_a_number_warnings(run: Run) -> list[str]:
    """A ``warning:`` line for the reward (:data:`REWARD_KEY`) and each ``val-core/`` score that is NaN, infinite or
    beyond +-:data:`LARGEST_SHOWN` at
    some step (verl logs ``nan`` when a reward function returns NaN for a response; a null read as NaN counts too),
    naming the steps: those steps are left out of "best" and the plots, which would otherwise hide them."""
    lines = []
    keys = [REWARD_KEY, *sorted({k for r in run.records for k in r if k.startswith("val-core/")})]
    for key in keys:
        steps = [r["step"] for r in run.records if key in r and not _finite(r[key])]
        if steps:
            total = sum(key in r for r in run.records)
            shown = ", ".join(map(str, steps[:10])) + (" ..." if len(steps) > 10 else "")
            lines.append(
                f"warning: {key} is NaN, infinite or beyond 1e100 at {len(steps)} of {total} steps (step {shown}):"
                " left out of best and the plots; fix: make the reward function return a finite number for every"
                " response (verl averages the scores, so one NaN makes the step's mean NaN)"
            )
    return lines


def summarize(run: Run) -> str:
    """The short text summary: status, steps, reward, validation, step time, throughput, peak memory."""
    lines = [f"run: {run.run_dir} (read from {run.source})"]
    training = run.training
    last = training[-1]["step"] if training else None
    total = run.total_steps
    of_total = f" of {total}" if total is not None else ""
    if run.finished:
        status = f"finished ({last if last is not None else 0}{of_total} steps)"
    elif process_alive(run.info.get("pid")):
        status = f"running (step {last or 0}{of_total} done)"
    elif total is not None:
        status = f"interrupted or still running: {last or 0}{of_total} steps done"
    else:
        status = f"{last or 0} steps done; total unknown (no run.json total_steps, no 'Total training steps' line)"
    lines.append(f"status: {status}")
    if run.info_error:
        lines.append(
            f"warning: {run.info_error}: {RUN_FILE}'s total steps and process id are unknown; "
            f"the status above is what {run.source} alone supports"
        )
    if run.unreadable_lines:
        shown = ", ".join(map(str, run.unreadable_lines[:10])) + (" ..." if len(run.unreadable_lines) > 10 else "")
        lines.append(
            f"warning: {len(run.unreadable_lines)} line(s) of {METRICS_FILE} are not step records and were skipped "
            f"(line {shown}); a run stopped mid-write cuts only its last line"
        )
    if run.not_numbers:
        shown = ", ".join(f"{key} (line {line})" for line, key in run.not_numbers[:5]) + (
            " ..." if len(run.not_numbers) > 5 else ""
        )
        lines.append(
            f"warning: {len(run.not_numbers)} value(s) of {METRICS_FILE} are null or not numbers: {shown}; "
            "read as NaN: left out of the means, maxima and step-time bars below"
        )
    if not training:
        lines.append("no training step has finished yet")
    lines += not_a_number_warnings(run)
    rewards = [(r["step"], r[REWARD_KEY]) for r in training if REWARD_KEY in r]
    if rewards:
        lines.append(
            f"reward ({REWARD_KEY}): last {rewards[-1][1]:.3f} (step {rewards[-1][0]}), {_best(rewards, '.3f')}"
        )
    val_keys = sorted({k for r in run.records for k in r if k.startswith("val-core/")})
    for key in val_keys:
        points = [(r["step"], r[key]) for r in run.records if key in r]
        start = f"step 0 (before training) {points[0][1]:.4f} -> " if points[0][0] == 0 and len(points) > 1 else ""
        lines.append(
            f"validation ({key}): {start}last {points[-1][1]:.4f} (step {points[-1][0]}), {_best(points, '.4f')}"
        )
    if run.evaluation:
        lines.append(describe_evaluation(run.evaluation))
    times = [r["timing_s/step"] for r in training if _finite(r["timing_s/step"])]
    if times:
        mean = sum(times) / len(times)
        line = f"step time (timing_s/step): mean {mean:.1f} s over {len(times)} steps"
        if total is not None and last is not None and last < total and not run.finished:
            line += f"; {total - last} steps left, about {format_duration(mean * (total - last))}"
        lines.append(line)
    tok = [t for t in (tokens_per_second(r) for r in training) if _finite(t)]
    if tok:
        lines.append(f"throughput: mean {sum(tok) / len(tok):.0f} tokens/s (perf/total_num_tokens / timing_s/step)")
    alloc = [r["perf/max_memory_allocated_gb"] for r in training if _finite(r.get("perf/max_memory_allocated_gb"))]
    reserved = [r["perf/max_memory_reserved_gb"] for r in training if _finite(r.get("perf/max_memory_reserved_gb"))]
    if alloc:
        text = f"peak GPU memory: {max(alloc):.1f} GiB allocated"
        if reserved:
            text += f", {max(reserved):.1f} GiB reserved"
        lines.append(text + " (perf/max_memory_*_gb)")
    lines.append(
        "note: values come from verl's console: exact for runs of `verlfit train` (patch 0008), "
        "3 decimals for other verl logs"
    )
    return "\n".join(lines)


def describe_evaluation(evaluation: dict) -> str:
    """One line: the eval of the exported checkpoint, and before -> after when it was compared with another model."""
    e = evaluation
    # summaries before "score" were GSM8K's
    scored = e.get("score") if isinstance(e.get("score"), str) else "verl's strict GSM8K score"
    # verlfit.evaluate.score_text: a reward of 0.5 is no half answer
    measure = "accuracy" if e.get("binary", True) else "mean reward"
    partial = f", partial: stopped at row {e.get('stopped_at_row')}" if e.get("partial") else ""
    where = f"{e.get('rows')} rows of {e.get('split')}{partial}, greedy, scored by {scored}; {e['path']}"
    comparison = e.get("comparison")
    if (
        comparison
        and isinstance(comparison.get("other"), dict)
        and isinstance(comparison["other"].get("accuracy"), (int, float))
    ):
        other = comparison["other"]
        return (
            f"eval (verlfit eval, {where}): {measure} before -> after: {other.get('model')} {other['accuracy']:.4f} -> "
            f"exported step {e['step']} {e['accuracy']:.4f} (difference {comparison['difference']:+.4f}, "
            f"{comparison['confidence']:.0%} CI [{comparison['low']:+.4f}, {comparison['high']:+.4f}])"
        )
    form = (
        "" if e.get("format_rate") is None else f", format {e['format_rate']:.4f}"
    )  # GSM8K's extraction only (verlfit.evaluate)
    return f"eval (verlfit eval, {where}): exported step {e['step']} {measure} {e['accuracy']:.4f}{form}"


@dataclass
class ReportResult:
    output_dir: Path
    files: list[Path]
    summary: str
    info_error: str | None = None  # why run.json could not be read (the report then rests on the metrics alone)
    replaced: str = ""  # what of verlfit's earlier output there it replaced (output_files.replaced_text)


def write_report(
    run_dir: str | os.PathLike, output_dir: str | os.PathLike | None = None, force: bool = False
) -> ReportResult:
    """Write the plots and ``summary.txt`` for ``run_dir``; return where and what.

    ``force``: replace what verlfit wrote at ``output_dir`` before (another run's report); a report of the same run
    replaces its own without it.

    Raises:
        VerlfitError: ``run_dir`` is not a run (see :func:`read_run_metrics`); an output the write policy refuses
            (:func:`verlfit.output_files.check_output`, exit status 2), or one that cannot be written.
    """

    run = read_run_metrics(run_dir)
    out = Path(output_dir) if output_dir is not None else run.run_dir / REPORT_DIR
    target = output_files.check_output(
        out, "verlfit report", force=force, inputs=[run.run_dir], own_place=(REPORT_DIR,)
    )
    summary = summarize(run)
    specs = plot_data(run.records)
    if specs:
        summary += "\nplots: " + " ".join(f"{name}.png" for name in specs)

    def build(folder: Path) -> None:
        for name, spec in specs.items():
            with open(folder / f"{name}.png", "xb") as handle:
                build_figure(spec).savefig(handle, format="png")
        (folder / SUMMARY_FILE).write_text(summary + "\n", encoding="utf-8")

    output_files.write_folder(target, build)
    files = [out / f"{name}.png" for name in specs] + [out / SUMMARY_FILE]
    return ReportResult(
        output_dir=out,
        files=files,
        summary=summary,
        info_error=run.info_error,
        replaced=output_files.replaced_text(target),
    )
