"""StepWatcher: full log, metrics.jsonl as steps finish, plain lines off a terminal, live display on one."""

import io
from pathlib import Path

import pytest

from verlfit.metrics import read_metrics
from verlfit.progress import StepWatcher, format_duration, format_step_line

LOGS = Path(__file__).parent / "data" / "verl_logs"


def log_lines(name):
    with open(LOGS / name, encoding="utf-8", newline="") as handle:
        return handle.read().splitlines(keepends=True)


def watch(run_dir, name, **kwargs):
    out = io.StringIO()
    ticks = iter(range(1000, 2000))
    with StepWatcher(run_dir, stream=out, clock=lambda: float(next(ticks)), **kwargs) as watcher:
        for line in log_lines(name):
            watcher.feed(line)
    return watcher, out.getvalue()


def test_plain_lines_for_a_finished_ppo_run(tmp_path):
    watcher, out = watch(tmp_path, "ppo_p40_finished.log", tty=False)
    assert out.splitlines() == [
        "step 0/4 | val 0.005",
        "step 1/4 | 44.0 s/step | 113 tok/s | ETA 2m12s | score 0.062 | ppo_kl 0.000 | mem 13.0 GiB (22.4 reserved)",
        "step 2/4 | 107.8 s/step | 47 tok/s | ETA 2m32s | score 0.125 | ppo_kl 0.000 | val 0.066 | mem 13.0 GiB (22.4 reserved)",
        "step 3/4 | 43.3 s/step | 121 tok/s | ETA 1m05s | score 0.188 | ppo_kl 0.000 | mem 13.0 GiB (22.4 reserved)",
        "step 4/4 | 125.7 s/step | 43 tok/s | ETA 0s | score 0.250 | ppo_kl 0.000 | val 0.105 | mem 13.0 GiB (22.4 reserved)",
        "finished at step 4/4 | val 0.105",
    ]
    assert (watcher.total_steps, watcher.last_step, watcher.finished) == (4, 4, True)  # total from verl's line


def test_plain_lines_for_a_grpo_run_cut_off_mid_step(tmp_path):
    watcher, out = watch(tmp_path, "grpo_a10_interrupted.log", total_steps=10, tty=False)
    assert out.splitlines() == [
        "step 0/10 | val 0.285",
        "step 1/10 | 17.6 s/step | 1174 tok/s | ETA 2m38s | score 0.203 | kl_loss 0.001 | mem 18.8 GiB (20.6 reserved)",
        "step 2/10 | 17.7 s/step | 1177 tok/s | ETA 2m21s | score 0.234 | kl_loss 0.002 | mem 18.8 GiB (20.6 reserved)",
        "step 3/10 | 17.8 s/step | 1180 tok/s | ETA 2m04s | score 0.266 | kl_loss 0.004 | mem 18.8 GiB (20.6 reserved)",
    ]
    assert (watcher.last_step, watcher.finished) == (3, False)
    assert watcher.tail_lines[-1] == "INFO 07-08 11:02:39 [executor_base.py:204] It took 0.2"
    # ETA = mean timing_s/step of finished steps x steps left: (17.567 + 17.687 + 17.807) / 3 * 7
    assert watcher.eta_seconds() == pytest.approx((17.567 + 17.687 + 17.807) / 3 * 7)


def test_full_log_and_metrics_file(tmp_path):
    watch(tmp_path, "grpo_a10_interrupted.log", tty=False)
    lines = log_lines("grpo_a10_interrupted.log")
    # every line kept; the cut last line gets its newline so a resumed run appends cleanly
    assert (tmp_path / "train.log").read_text(encoding="utf-8") == "".join(lines) + "\n"
    records = read_metrics(tmp_path)
    assert [(r["step"], r["time"]) for r in records] == [(0, 1000.0), (1, 1001.0), (2, 1002.0), (3, 1003.0)]
    assert records[3]["critic/score/mean"] == 0.266


def test_each_step_is_on_disk_before_the_next_line(tmp_path):
    watcher = StepWatcher(tmp_path, stream=io.StringIO(), tty=False)
    seen = []
    for line in log_lines("ppo_p40_finished.log"):
        watcher.feed(line)
        seen.append(len(read_metrics(tmp_path)))
    assert max(seen) == 6 and seen[-1] == 6  # never closed: as after a kill
    watcher.close()
    watcher.close()  # idempotent


def test_resumed_run_appends(tmp_path):
    watch(tmp_path, "ppo_partial_step_line.log", tty=False)
    watch(tmp_path, "ppo_partial_step_line.log", tty=False)
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 1, 2]
    assert (tmp_path / "train.log").read_text().count("Total training steps: 6\n") == 2


def test_bytes_and_verbose_echo(tmp_path):
    out = io.StringIO()
    with StepWatcher(tmp_path, total_steps=3, stream=out, tty=False, verbose=True) as watcher:
        watcher.feed(b"\x1b[36m(TaskRunner pid=1)\x1b[0m Training from scratch\n")
        watcher.feed(b"(TaskRunner pid=1) step:1 - critic/score/mean:0.500 - timing_s/step:2.000 - perf/throughput:10.000\n")
    assert out.getvalue().splitlines() == [
        "Training from scratch",
        "step:1 - critic/score/mean:0.500 - timing_s/step:2.000 - perf/throughput:10.000",
        "step 1/3 | 2.0 s/step | 10 tok/s | ETA 4s | score 0.500",
    ]


def test_live_display_on_a_terminal(tmp_path):
    out = io.StringIO()
    with StepWatcher(tmp_path, total_steps=10, stream=out, tty=True) as watcher:
        for line in log_lines("grpo_a10_interrupted.log"):
            watcher.feed(line)
    text = out.getvalue()
    assert "\x1b[" in text  # rich drew it
    assert "step 3/10 | 17.8 s/step | 1180 tok/s | ETA 2m04s | score 0.266 | kl_loss 0.004" in text
    assert "ETA 2m04s" in text and "━" in text
    assert len(read_metrics(tmp_path)) == 4


def test_tty_detection_follows_the_stream(tmp_path):
    assert StepWatcher(tmp_path, stream=io.StringIO()).tty is False


def test_format_duration():
    assert [format_duration(s) for s in (0, 34.4, 59.6, 301, 3599, 7500, 90061)] == ["0s", "34s", "1m00s", "5m01s", "59m59s", "2h05m", "25h01m"]


def test_format_step_line_prefers_kl_loss_and_leaves_out_what_is_missing():
    record = {"step": 7, "timing_s/step": 3.0, "perf/throughput": 100.0, "actor/ppo_kl": 0.002, "actor/kl_loss": 0.011}
    assert format_step_line(record, None, None) == "step 7/? | 3.0 s/step | 100 tok/s | kl_loss 0.011"


def test_eta_starts_from_the_initial_estimate_until_a_step_is_done(tmp_path):
    watcher = StepWatcher(tmp_path, total_steps=10, stream=io.StringIO(), tty=False, initial_step_seconds=12.5)
    assert watcher.eta_seconds() == 125.0
    watcher.step_times.append(20.0)
    watcher.last_step = 1
    assert watcher.eta_seconds() == 180.0
    watcher.close()
    assert StepWatcher(tmp_path, total_steps=10, stream=io.StringIO(), tty=False).eta_seconds() is None
