"""verlfit report on fixture run directories: files, plotted values equal to the input, summary, errors."""

import io
import json
import os
import shutil
from pathlib import Path

import pytest

from verlfit import cli, report
from verlfit.errors import VerlfitError
from verlfit.metrics import MetricsWriter, consolidate, read_metrics
from verlfit.progress import StepWatcher
from verlfit.report import build_figure, plot_data, read_run_metrics, summarize, write_report

LOGS = Path(__file__).parent / "data" / "verl_logs"
VAL = "val-core/openai/gsm8k/reward/mean@1"
PNGS = ["reward.png", "kl.png", "entropy.png", "response_length.png", "memory.png", "step_time.png"]


def make_run(run_dir, log_name, run_json=None):
    """A run directory as verlfit train leaves it: train.log and metrics.jsonl from the watcher, run.json."""
    with (
        open(LOGS / log_name, encoding="utf-8", newline="") as handle,
        StepWatcher(run_dir, stream=io.StringIO(), tty=False, metrics=MetricsWriter(run_dir)) as watcher,
    ):
        for line in handle.read().splitlines(keepends=True):
            watcher.feed(line)
    if run_json is not None:
        (run_dir / "run.json").write_text(json.dumps(run_json))
    return run_dir


@pytest.fixture
def finished_run(tmp_path):
    return make_run(
        tmp_path / "ppo-p40",
        "ppo_p40_finished.log",
        {"total_steps": 4, "command": ["python", "-m", "verl.trainer.main_ppo"]},
    )


@pytest.fixture
def interrupted_run(tmp_path):
    run = make_run(tmp_path / "grpo-a10", "grpo_a10_interrupted.log", {"total_steps": 10, "command": ["python"]})
    with open(run / "metrics.jsonl", "a") as handle:  # the watcher was killed while writing step 4
        handle.write('{"step":4,"actor/entropy":0.3')
    return run


def test_report_files_exist_and_are_png(finished_run):
    result = write_report(finished_run)
    assert result.output_dir == finished_run / "report"
    assert sorted(p.name for p in result.files) == sorted(PNGS + ["summary.txt"])
    for name in PNGS:
        assert (finished_run / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in (finished_run / "report").iterdir() if p.name.startswith(".")] == [
        ".verlfit-written.json"
    ]  # no temp files left
    assert [p.name for p in finished_run.iterdir() if p.name.startswith(".")] == []


def test_plotted_values_equal_the_input(finished_run):
    records = consolidate(read_metrics(finished_run))
    data = plot_data(records)
    steps = [1, 2, 3, 4]
    assert data["reward"]["lines"] == {
        "critic/score/mean": (steps, [0.062, 0.125, 0.188, 0.25]),
        "critic/rewards/mean": (steps, [0.062, 0.125, 0.188, 0.25]),
        VAL: ([0, 2, 4], [0.004548900682335102, 0.066, 0.10538286580742987]),  # full precision where verl printed it
    }
    assert data["kl"]["lines"] == {"actor/ppo_kl": (steps, [0.0, 0.0, 0.0, 0.0])}
    assert data["entropy"]["lines"] == {"actor/entropy": (steps, [0.575, 0.563, 0.551, 0.539])}
    assert data["response_length"]["lines"]["response_length/mean"] == (steps, [193.75, 201.25, 208.75, 216.25])
    assert data["memory"]["lines"] == {
        "perf/max_memory_allocated_gb": (steps, [12.962, 13.002, 13.002, 13.002]),
        "perf/max_memory_reserved_gb": (steps, [22.43] * 4),
    }
    timing = data["step_time"]
    assert timing["steps"] == steps
    assert list(timing["phases"]) == [
        "gen",
        "reward",
        "old_log_prob",
        "values",
        "adv",
        "update_critic",
        "update_actor",
        "testing",
        "save_checkpoint",
        "other",
    ]
    assert timing["phases"]["gen"] == [21.324, 20.914, 20.504, 20.094]
    assert timing["phases"]["testing"] == [0.0, 64.119, 0.0, 64.119]
    assert timing["phases"]["save_checkpoint"] == [0.0, 0.0, 0.0, 18.604]
    for i, record in enumerate(r for r in records if "timing_s/step" in r):  # the stack adds up to timing_s/step
        assert sum(column[i] for column in timing["phases"].values()) == pytest.approx(record["timing_s/step"])


def test_figures_draw_exactly_the_plot_data(finished_run):
    data = plot_data(consolidate(read_metrics(finished_run)))
    reward = build_figure(data["reward"])
    drawn = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in reward.axes[0].lines}
    baselines = {
        f"step-0 baseline {v:.3f}": ([0, 1], [v, v]) for v in data["reward"]["baselines"].values()
    }  # axhline: x in axes units
    assert baselines == {"step-0 baseline 0.005": ([0, 1], [data["reward"]["lines"][VAL][1][0]] * 2)}
    assert drawn == {name: (list(s), list(v)) for name, (s, v) in data["reward"]["lines"].items()} | baselines
    stacked = build_figure(data["step_time"])
    bars = {c.get_label(): [patch.get_height() for patch in c.patches] for c in stacked.axes[0].containers}
    assert list(bars) == list(data["step_time"]["phases"])
    for phase, heights in data["step_time"]["phases"].items():  # matplotlib stores bottom and top: float rounding
        assert bars[phase] == pytest.approx(heights, abs=1e-9)
    assert [patch.get_x() + patch.get_width() / 2 for patch in stacked.axes[0].containers[0].patches] == [1, 2, 3, 4]


def test_summary_of_a_finished_run(finished_run):
    text = write_report(finished_run).summary
    assert text.splitlines()[1:8] == [
        "status: finished (4 of 4 steps)",
        "reward (critic/score/mean): last 0.250 (step 4), best 0.250 (step 4)",
        f"validation ({VAL}): step 0 (before training) 0.0045 -> last 0.1054 (step 4), best 0.1054 (step 4)",
        "step time (timing_s/step): mean 80.2 s over 4 steps",
        "throughput: mean 81 tokens/s (perf/total_num_tokens / timing_s/step)",
        "peak GPU memory: 13.0 GiB allocated, 22.4 GiB reserved (perf/max_memory_*_gb)",
        (
            "note: values come from verl's console: exact for runs of `verlfit train` (patch 0008), 3 decimals for"
            " other verl logs"
        ),
    ]
    assert (finished_run / "report" / "summary.txt").read_text() == text + "\n"


def test_interrupted_run_with_a_cut_last_metrics_line(interrupted_run):
    result = write_report(interrupted_run)
    lines = result.summary.splitlines()
    assert "status: interrupted or still running: 3 of 10 steps done" in lines
    assert "step time (timing_s/step): mean 17.7 s over 3 steps; 7 steps left, about 2m04s" in lines
    assert plot_data(read_run_metrics(interrupted_run).records)["entropy"]["lines"]["actor/entropy"] == (
        [1, 2, 3],
        [0.409, 0.4, 0.391],
    )
    assert "critic/values/mean" not in str(plot_data(read_run_metrics(interrupted_run).records))


def test_running_when_run_json_pid_is_alive(interrupted_run):
    (interrupted_run / "run.json").write_text(json.dumps({"total_steps": 10, "command": [], "pid": os.getpid()}))
    assert "status: running (step 3 of 10 done)" in summarize(read_run_metrics(interrupted_run))


def test_falls_back_to_train_log_and_reads_total_from_it(tmp_path):
    run = tmp_path / "copied"
    run.mkdir()
    shutil.copy(LOGS / "grpo_a10_interrupted.log", run / "train.log")  # no metrics.jsonl, no run.json
    loaded = read_run_metrics(run)
    assert (loaded.source, loaded.total_steps, [r["step"] for r in loaded.records]) == ("train.log", 10, [0, 1, 2, 3])
    assert "status: interrupted or still running: 3 of 10 steps done" in write_report(run).summary


def test_run_without_a_finished_step(tmp_path):
    (tmp_path / "train.log").write_text("(TaskRunner pid=1) TaskRunner hostname: x, PID: 1\n")
    result = write_report(tmp_path)
    assert [p.name for p in result.files] == ["summary.txt"]
    assert "no training step has finished yet" in result.summary


def test_not_a_run_directory(tmp_path):
    with pytest.raises(VerlfitError) as caught:
        read_run_metrics(tmp_path)
    text = str(caught.value)
    assert f"{tmp_path} is not a run: it has no metrics.jsonl and no train.log" in text
    assert "run.json" in text and "fix:" in text
    with pytest.raises(VerlfitError, match="is not a directory"):
        read_run_metrics(tmp_path / "missing")


def test_cli_report(finished_run, tmp_path, capsys):
    out = tmp_path / "elsewhere"
    assert cli.main(["report", str(finished_run), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "status: finished (4 of 4 steps)" in printed and f"written to {out}" in printed
    assert sorted(p.name for p in out.iterdir()) == sorted(PNGS + ["summary.txt", ".verlfit-written.json"])


def test_cli_report_on_a_non_run(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path)]) == 2
    assert f"verlfit: error: {tmp_path} is not a run" in capsys.readouterr().err


def test_failed_plot_write_leaves_neither_partial_file_nor_temp(finished_run, monkeypatch, tmp_path):
    out = tmp_path / "out"
    write_report(finished_run, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken_figure(spec):
        class Broken:
            def savefig(self, handle, format):
                handle.write(b"\x89PNG partial")
                raise OSError(28, "No space left on device")

        return Broken()

    monkeypatch.setattr(report, "build_figure", broken_figure)
    with pytest.raises(
        VerlfitError,
        match=(
            f"^cannot write to --output {out}: no space left on the disk of {out}; what was there before is unchanged\n"
            "  fix: "
        ),
    ):
        write_report(finished_run, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "ppo-p40"]  # no folder half-built beside it


def test_unreadable_metrics_lines_are_named_not_passed_over(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 1, "timing_s/step": 2.0}\nnot json\n\n["a list"]\n{"no step": 1}\n{"step": true}\n{"step":'
        ' -1}\n{"step": 2, "timing_s/st'
    )
    run = read_run_metrics(tmp_path)
    assert run.unreadable_lines == [2, 4, 5, 6, 7, 8]  # the blank line 3 is not counted
    assert [r["step"] for r in run.training] == [1]
    assert (
        "warning: 6 line(s) of metrics.jsonl are not step records and were skipped (line 2, 4, 5, 6, 7, 8); "
        "a run stopped mid-write cuts only its last line" in summarize(run).splitlines()
    )


def test_corrupt_run_json_is_named_and_status_comes_from_metrics(interrupted_run):
    # before: a corrupt run.json was read as {} without a word
    (interrupted_run / "run.json").write_text('{"total_steps": 10, "pid":')
    text = summarize(read_run_metrics(interrupted_run))
    lines = text.splitlines()
    assert (
        lines[1] == "status: interrupted or still running: 3 of 10 steps done"
    )  # the total from train.log's "Total training steps"
    assert (
        lines[2]
        == f"warning: {interrupted_run / 'run.json'} is not valid JSON (Expecting value: line 1 column 27 (char 26)): "
        "run.json's total steps and process id are unknown; the status above is what metrics.jsonl alone supports"
    )


def test_run_json_that_is_not_an_object(finished_run):
    (finished_run / "run.json").write_text("[1, 2]")
    assert (
        f"warning: {finished_run / 'run.json'} is not a verlfit run record (a JSON list, not an object)"
        in summarize(read_run_metrics(finished_run))
    )


def test_no_warning_without_run_json(finished_run):
    (finished_run / "run.json").unlink()
    assert not [line for line in summarize(read_run_metrics(finished_run)).splitlines() if line.startswith("warning:")]


def _validated_run(tmp_path):
    run = tmp_path / "learn"
    run.mkdir()
    records = [
        {"step": 0, VAL: 0.3203125},
        {"step": 1, "timing_s/step": 2.0, "critic/score/mean": 0.1},
        {"step": 2, "timing_s/step": 2.0, "critic/score/mean": 0.2, VAL: 0.51953125},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "run.json").write_text(json.dumps({"total_steps": 2, "command": []}))
    return run


def test_validation_curve_keeps_its_step_0_baseline(tmp_path):
    run = _validated_run(tmp_path)
    data = plot_data(read_run_metrics(run).records)["reward"]
    assert data["lines"][VAL] == ([0, 2], [0.3203125, 0.51953125])
    assert data["baselines"] == {VAL: 0.3203125}
    build_figure(data)
    assert (
        f"validation ({VAL}): step 0 (before training) 0.3203 -> last 0.5195 (step 2), best 0.5195 (step 2)"
        in summarize(read_run_metrics(run))
    )


def test_eval_of_the_exported_checkpoint_before_after(tmp_path):
    from verlfit import evaluate

    run = _validated_run(tmp_path)
    out = run / "eval" / "global_step_2-test"
    rows = [evaluate.RowResult(i, i, "r", "1", "1", s, 3) for i, s in enumerate([1.0, 1.0, 0.0, 1.0])]
    other = [evaluate.RowResult(i, i, "r", "1", "1", s, 3) for i, s in enumerate([0.0, 1.0, 0.0, 0.0])]
    evaluate.write_results(out, rows, evaluate.summarize(rows) | {"model": str(run), "step": 2, "split": "test"})
    other_summary = evaluate.summarize(other) | {"model": "start-model", "step": None, "split": "test"}
    evaluate.write_results(out / "compare", other, other_summary)
    comparison = evaluate.paired_difference([r.score for r in rows], [r.score for r in other]) | {
        "other": other_summary
    }
    (out / "comparison.json").write_text(json.dumps(comparison))
    line = [line for line in summarize(read_run_metrics(run)).splitlines() if line.startswith("eval ")]
    half = 1.959963984540054 * 0.5773502691896257 / 2  # stdev of the differences 1,0,0,1 over sqrt(4)
    assert line == [
        f"eval (verlfit eval, 4 rows of test, greedy, scored by verl's strict GSM8K score; {out}): accuracy before ->"
        f" after: start-model 0.2500 -> exported step 2 0.7500 (difference +0.5000, 95% CI [{0.5 - half:+.4f},"
        f" {0.5 + half:+.4f}])"
    ]
    (out / "comparison.json").unlink()
    assert "exported step 2 accuracy 0.7500, format 1.0000" in summarize(read_run_metrics(run))


def test_reports_of_recorded_runs_stay_out_of_git():
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    record = "benchmarks/results/2026-11-29-h200-p40-main-job-learning-planner/learning-check/learn-grpo-lr1e-5"
    assert (repo / record / "run.json").is_file()
    for generated in (
        "report/summary.txt",
        "report/reward.png",
        "eval/global_step_200-test/summary.json",
        "export/global_step_200/model.safetensors",
    ):
        assert subprocess.run(["git", "check-ignore", "-q", f"{record}/{generated}"], cwd=repo).returncode == 0, (
            generated
        )
    assert (
        subprocess.run(["git", "check-ignore", "-q", f"{record}/run.json"], cwd=repo).returncode == 1
    )  # the record itself stays tracked


def test_report_on_a_corrupt_run_exits_2_with_the_fix_resume_gives(interrupted_run, capsys):
    # a new-user trial: the report of a damaged run.json exited 0, and --resume on it said no fix
    from verlfit import cli
    from verlfit.run_files import DAMAGED_RECORD_FIX

    (interrupted_run / "run.json").write_text('{"total_steps": 10, "pid":')
    assert cli.main(["report", str(interrupted_run)]) == 2
    captured = capsys.readouterr()
    assert (
        interrupted_run / "report" / "summary.txt"
    ).is_file() and "status: interrupted or still running: 3 of 10 steps done" in captured.out
    why = f"{interrupted_run / 'run.json'} is not valid JSON (Expecting value: line 1 column 27 (char 26))"
    assert (
        captured.err
        == f"verlfit: error: {why}: the report above rests on the metrics alone (total steps and process id unknown)\n "
        f" fix: {DAMAGED_RECORD_FIX}\n"
    )
    assert cli.main(["train", "--resume", str(interrupted_run)]) == 2
    assert capsys.readouterr().err == f"verlfit: error: {why}\n  fix: {DAMAGED_RECORD_FIX}\n"
    # a readable run.json: exit 0
    (interrupted_run / "run.json").write_text('{"total_steps": 10}')
    assert cli.main(["report", str(interrupted_run)]) == 0


@pytest.mark.parametrize("value", ["-3", "0", '"10"', "true", "2.5", "null"])
def test_a_run_json_total_steps_that_is_no_step_count_is_named_with_its_file(interrupted_run, value, capsys):
    """New-user trial: the report of a run.json with total_steps -3 said "0 of -3 steps done" and exited 0. The
    value is refused as a damaged record is: the report rests on the metrics (the total from train.log), exit 2."""
    from verlfit.run_files import DAMAGED_RECORD_FIX

    (interrupted_run / "run.json").write_text(f'{{"total_steps": {value}, "pid": 1}}')
    assert cli.main(["report", str(interrupted_run)]) == 2
    captured = capsys.readouterr()
    assert "status: interrupted or still running: 3 of 10 steps done" in captured.out
    recorded = repr(json.loads(value))
    assert (
        captured.err
        == f"verlfit: error: {interrupted_run / 'run.json'} holds total_steps {recorded}, not a whole number of steps"
        " >= 1"
        ": the report above rests on the metrics alone (total steps and process id unknown)\n"
        f"  fix: {DAMAGED_RECORD_FIX}\n"
    )


@pytest.mark.parametrize("with_log", [True, False])
def test_a_binary_metrics_jsonl_is_refused_naming_the_file(interrupted_run, with_log, capsys):
    """New-user trial: a metrics.jsonl of random bytes gave a report of "warning: 12 line(s) ... skipped" and "no
    training step has finished yet", exit 0. A file with no step record and lines that are not UTF-8 is not verl's
    metrics: refused (exit 2), naming it; no report is written."""
    (interrupted_run / "metrics.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe binary \x00\x01\n\xc3\x28\n")
    if not with_log:
        (interrupted_run / "train.log").unlink()
    assert cli.main(["report", str(interrupted_run)]) == 2
    also = "move it away: the report then reads train.log" if with_log else "pass the run directory verlfit train wrote"
    assert capsys.readouterr() == (
        "",
        (
            f"verlfit: error: {interrupted_run / 'metrics.jsonl'} is not text: line 1 holds bytes that are not UTF-8,"
            " and no line is a step record (verlfit train writes one JSON object a line)\n  fix: restore metrics.jsonl"
            f" from a copy of the run, or {also}\n"
        ),
    )
    assert not (interrupted_run / "report").exists()


def test_lines_that_are_not_text_among_step_records_are_skipped_as_cut_lines_are(interrupted_run, capsys):
    """A metrics.jsonl that holds step records keeps its report: lines that are not UTF-8 among them (a disk that
    garbled a block) are skipped and counted, as a line a killed run left cut, not refused."""
    with open(interrupted_run / "metrics.jsonl", "ab") as handle:
        handle.write(b"\n\xff\xfe\x00\n")
    assert cli.main(["report", str(interrupted_run)]) == 0
    out = capsys.readouterr().out
    assert "warning: 2 line(s) of metrics.jsonl are not step records and were skipped (line 5, 6)" in out
    assert "status: interrupted or still running: 3 of 10 steps done" in out


def test_null_and_text_metric_values_are_read_as_nan_and_named_not_a_traceback(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        '{"step": 1, "timing_s/step": null, "critic/score/mean": null, "perf/total_num_tokens": 100, "timing_s/gen":'
        ' null, "perf/max_memory_allocated_gb": null, "actor/entropy": "x"}\n{"step": 2, "timing_s/step": 2.0,'
        ' "timing_s/gen": 1.5, "critic/score/mean": 0.5, "perf/total_num_tokens": 100, "perf/max_memory_allocated_gb":'
        " 3.25}\n"
    )
    assert cli.main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert (
        "warning: 5 value(s) of metrics.jsonl are null or not numbers: timing_s/step (line 1), critic/score/mean (line"
        " 1), timing_s/gen (line 1), perf/max_memory_allocated_gb (line 1), actor/entropy (line 1); read as NaN" in out
    )
    assert "step time (timing_s/step): mean 2.0 s over 1 steps" in out
    assert "throughput: mean 50 tokens/s" in out
    assert "peak GPU memory: 3.2 GiB allocated" in out
    assert "reward (critic/score/mean): last 0.500 (step 2), best 0.500 (step 2)" in out
    data = plot_data(read_run_metrics(run).records)
    assert data["step_time"]["steps"] == [2] and data["step_time"]["phases"] == {"gen": [1.5], "other": [0.5]}


# --------------------------------------------------------------------------- issue 32: report loses nothing


def test_item5_report_into_a_folder_holding_the_users_summary_and_plot_is_refused_and_they_are_kept(
    finished_run, tmp_path, capsys
):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "summary.txt").write_text("my summary")
    (mine / "reward.png").write_bytes(b"my plot")
    for force in ([], ["--force"]):
        assert cli.main(["report", str(finished_run), "--output", str(mine), *force]) == 2
        err = capsys.readouterr().err
        assert (
            f"verlfit: error: --output {mine} holds files verlfit did not write (no verlfit marker: verlfit did not"
            " write reward.png, summary.txt): verlfit never replaces or deletes them, even with --force\n" in err
        )
    assert (mine / "summary.txt").read_text() == "my summary" and (mine / "reward.png").read_bytes() == b"my plot"


def test_a_report_of_the_same_run_is_replaced_and_of_another_only_with_force(finished_run, tmp_path, capsys):
    import shutil

    other = tmp_path / "other-run"
    shutil.copytree(finished_run, other, ignore=shutil.ignore_patterns("report"))
    out = tmp_path / "reports"
    assert cli.main(["report", str(finished_run), "--output", str(out)]) == 0
    assert cli.main(["report", str(finished_run), "--output", str(out)]) == 0
    capsys.readouterr()
    assert cli.main(["report", str(other), "--output", str(out)]) == 2
    assert f"--output {out} holds what verlfit report from {finished_run.resolve()} wrote (" in capsys.readouterr().err
    assert cli.main(["report", str(other), "--output", str(out), "--force"]) == 0
    assert f"run: {other}" in (out / "summary.txt").read_text()


def test_a_metrics_jsonl_that_is_a_folder_is_said_as_such(tmp_path, capsys):
    """New-user trial: a folder named metrics.jsonl was reported as "it has no metrics.jsonl"."""
    run = tmp_path / "run"
    (run / "metrics.jsonl").mkdir(parents=True)
    assert cli.main(["report", str(run)]) == 2
    assert f"verlfit: error: {run} is not a run: its metrics.jsonl is a folder, not a file; " in capsys.readouterr().err


def test_nan_rewards_are_warned_about_naming_the_steps_not_dropped_silently(tmp_path, capsys):
    """New-user trial: NaN rewards (verl logs nan when a reward function returns NaN) were left out of "best" and
    the reward plot without a word, while null ones were warned about."""
    run = tmp_path / "run"
    run.mkdir()
    records = [
        {"step": 1, "timing_s/step": 2.0, "critic/score/mean": 0.25},
        {"step": 2, "timing_s/step": 2.0, "critic/score/mean": float("nan"), VAL: float("nan")},
        {"step": 3, "timing_s/step": 2.0, "critic/score/mean": float("nan")},
        {"step": 4, "timing_s/step": 2.0, "critic/score/mean": 0.5, VAL: 0.5},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    assert cli.main(["report", str(run)]) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    fix = (
        " fix: make the reward function return a finite number for every response (verl averages the scores, so one"
        " NaN makes the step's mean NaN)"
    )
    assert warnings == [
        "warning: critic/score/mean is NaN, infinite or beyond 1e100 at 2 of 4 steps (step 2, 3): left out of best"
        " and the plots;" + fix,
        f"warning: {VAL} is NaN, infinite or beyond 1e100 at 1 of 2 steps (step 2): left out of best and the plots;"
        + fix,
    ]


def test_an_infinite_reward_is_never_the_best_one(tmp_path, capsys):
    """New-user trial finding 15: NaN rewards, then Infinity, printed the warning that non-finite values are left out
    of best, then `best inf (step 3)`. Only a finite value is best; with none, the line says so."""
    run = tmp_path / "run"
    run.mkdir()
    lines = [
        '{"step": 1, "timing_s/step": 2.0, "critic/score/mean": NaN, "%s": 0.5}' % VAL,
        '{"step": 2, "timing_s/step": 2.0, "critic/score/mean": 0.25}',
        '{"step": 3, "timing_s/step": 2.0, "critic/score/mean": Infinity, "%s": Infinity}' % VAL,
    ]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert cli.main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "reward (critic/score/mean): last inf (step 3), best 0.250 (step 2)\n" in out
    assert f"validation ({VAL}): last inf (step 3), best 0.5000 (step 1)\n" in out
    lines[1] = '{"step": 2, "timing_s/step": 2.0, "critic/score/mean": -Infinity}'
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert cli.main(["report", str(run), "--force"]) == 0
    assert (
        "reward (critic/score/mean): last inf (step 3), best: none (every value NaN, infinite or beyond 1e100)\n"
        in capsys.readouterr().out
    )


def test_values_near_the_float_limit_are_left_out_as_nan_is_and_the_report_is_written(tmp_path, capsys):
    """New-user trial (second): rewards of 1e308 then -1e308 ended report with matplotlib's "ValueError: arange: cannot
    compute length" and no report; past 1e100 a value is left out of best and the plots, with the NaN warning."""
    run = tmp_path / "run"
    run.mkdir()
    lines = [
        '{"step": 1, "timing_s/step": 3.0, "critic/score/mean": 1e308}',
        '{"step": 2, "timing_s/step": 4.0, "critic/score/mean": -1e308}',
        '{"step": 3, "timing_s/step": 4.0, "critic/score/mean": 0.5}',
    ]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert cli.main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "reward (critic/score/mean): last 0.500 (step 3), best 0.500 (step 3)\n" in out
    assert "warning: critic/score/mean is NaN, infinite or beyond 1e100 at 2 of 3 steps (step 1, 2)" in out
    assert (run / "report" / "reward.png").is_file()


def _consolidate_unoptimised(records):
    """consolidate as it was before it was made linear (issue 44, item 14): the reference for the test below."""
    from verlfit.metrics import is_training_record

    by_step = {}
    for record in records:
        step = record["step"]
        previous = by_step.get(step, {})
        if is_training_record(record):
            for later in [s for s in by_step if s > step]:
                del by_step[later]
            if is_training_record(previous):
                previous = {}
            for earlier in by_step.values():
                earlier.pop("finished", None)
        by_step[step] = {**previous, **record}
    return [by_step[step] for step in sorted(by_step)]


def test_the_linear_consolidate_equals_the_unoptimised_one_on_resumed_and_finished_runs():
    """Resumes (a training record at or below the highest step), validation-only records, "finished" markers and runs
    trained on after them, in 300 random sequences; each compared record by record with the quadratic original."""
    import copy
    import random

    rng = random.Random(0)
    for _ in range(300):
        records, step = [], 0
        for index in range(rng.randint(1, 40)):
            kind = rng.random()
            if kind < 0.15:
                step = rng.randint(0, max(step, 1))  # a resume from an earlier checkpoint
            elif kind < 0.8:
                step += 1
            record = {"step": step, "index": index}
            if rng.random() < 0.7:
                record["timing_s/step"] = float(index)
            if rng.random() < 0.2:
                record[VAL] = rng.random()
            if rng.random() < 0.1:
                record["finished"] = True
            records.append(record)
        assert consolidate(copy.deepcopy(records)) == _consolidate_unoptimised(copy.deepcopy(records))


def test_a_long_run_is_drawn_as_stacked_areas_with_the_legend_beside(tmp_path):
    """Past MAX_BARS steps a bar per step per phase (80,000 matplotlib patches for 10,000 steps) gives way to one
    filled area per phase; the legend goes beside the plot instead of matplotlib searching every point for a place."""
    steps = list(range(1, report.MAX_BARS + 2))
    spec = {
        "title": "Step time by verl phase",
        "ylabel": "seconds",
        "kind": "stacked",
        "steps": steps,
        "phases": {"gen": [2.0] * len(steps), "other": [1.0] * len(steps)},
    }
    axes = build_figure(spec).axes[0]
    assert (len(axes.patches), [c.get_label() for c in axes.collections]) == (0, ["gen", "other"])
    tops = [max(vertex[1] for vertex in c.get_paths()[0].vertices) for c in axes.collections]
    assert tops == [2.0, 3.0]  # stacked: other sits on gen
    assert axes.get_legend()._loc == 2 and axes.get_legend().get_bbox_to_anchor() is not None  # upper left, outside
    spec["steps"], spec["phases"] = steps[:4], {"gen": [2.0] * 4, "other": [1.0] * 4}
    assert len(build_figure(spec).axes[0].patches) == 8  # a short run keeps a bar per step


def test_the_report_keeps_only_what_it_shows_and_says_the_same(finished_run):
    """read_run_metrics keeps of each step the metrics the report shows (the rest took 1.3 GB for 100,000 steps); the
    summary and the plots' data are those of the whole records."""
    from verlfit.metrics import read_metrics as read_all

    run = read_run_metrics(finished_run)
    whole = consolidate(read_all(finished_run))
    assert all(set(r) <= set(w) for r, w in zip(run.records, whole)) and len(run.records) == len(whole)
    assert "global_seqlen/min" in whole[1] and "global_seqlen/min" not in run.records[1]
    assert plot_data(run.records) == plot_data(whole)
    assert summarize(run) == summarize(report.Run(**{**run.__dict__, "records": whole}))
