"""StepWatcher: full log, metrics.jsonl as steps finish, plain lines off a terminal, live display on one."""

import io
from pathlib import Path

import pytest

from verlfit.metrics import MetricsWriter, read_metrics
from verlfit.durations import format_duration
from verlfit.progress import StepWatcher, format_step_line

LOGS = Path(__file__).parent / "data" / "verl_logs"


def log_lines(name):
    with open(LOGS / name, encoding="utf-8", newline="") as handle:
        return handle.read().splitlines(keepends=True)


def watch(run_dir, name, **kwargs):
    out = io.StringIO()
    ticks = iter(range(1000, 2000))
    with StepWatcher(
        run_dir, stream=out, clock=lambda: float(next(ticks)), metrics=MetricsWriter(run_dir), **kwargs
    ) as watcher:
        for line in log_lines(name):
            watcher.feed(line)
    return watcher, out.getvalue()


def test_plain_lines_for_a_finished_ppo_run(tmp_path):
    watcher, out = watch(tmp_path, "ppo_p40_finished.log", tty=False)
    assert out.splitlines() == [
        "step 0/4 | val 0.005",
        "step 1/4 | 44.0 s/step | 113 tok/s | ETA 2m12s | score 0.062 | ppo_kl 0.000 | mem 13.0 GiB (22.4 reserved)",
        (
            "step 2/4 | 107.8 s/step | 47 tok/s | ETA 2m32s | score 0.125 | ppo_kl 0.000 | val 0.066 | mem 13.0 GiB"
            " (22.4 reserved)"
        ),
        "step 3/4 | 43.3 s/step | 121 tok/s | ETA 1m05s | score 0.188 | ppo_kl 0.000 | mem 13.0 GiB (22.4 reserved)",
        (
            "step 4/4 | 125.7 s/step | 43 tok/s | ETA 0s | score 0.250 | ppo_kl 0.000 | val 0.105 | mem 13.0 GiB (22.4"
            " reserved)"
        ),
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
    watcher = StepWatcher(tmp_path, stream=io.StringIO(), tty=False, metrics=MetricsWriter(tmp_path))
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
    with StepWatcher(
        tmp_path, total_steps=3, stream=out, tty=False, verbose=True, metrics=MetricsWriter(tmp_path)
    ) as watcher:
        watcher.feed(b"\x1b[36m(TaskRunner pid=1)\x1b[0m Training from scratch\n")
        watcher.feed(
            b"(TaskRunner pid=1) step:1 - critic/score/mean:0.500 - timing_s/step:2.000 - perf/throughput:10.000\n"
        )
    assert out.getvalue().splitlines() == [
        "Training from scratch",
        "step:1 - critic/score/mean:0.500 - timing_s/step:2.000 - perf/throughput:10.000",
        "step 1/3 | 2.0 s/step | 10 tok/s | ETA 4s | score 0.500",
    ]


def test_live_display_on_a_terminal(tmp_path):
    out = io.StringIO()
    with StepWatcher(tmp_path, total_steps=10, stream=out, tty=True, metrics=MetricsWriter(tmp_path)) as watcher:
        for line in log_lines("grpo_a10_interrupted.log"):
            watcher.feed(line)
    text = out.getvalue()
    assert "\x1b[" in text  # rich drew it
    assert "step 3/10 | 17.8 s/step | 1180 tok/s | ETA 2m04s | score 0.266 | kl_loss 0.004" in text
    assert "ETA 2m04s" in text and "━" in text
    assert len(read_metrics(tmp_path)) == 4


def test_tty_detection_follows_the_stream(tmp_path):
    assert StepWatcher(tmp_path, stream=io.StringIO(), metrics=MetricsWriter(tmp_path)).tty is False


def test_format_duration():
    assert [format_duration(s) for s in (0, 34.4, 59.6, 301, 3599, 7500, 90061)] == [
        "0s",
        "34s",
        "1m00s",
        "5m01s",
        "59m59s",
        "2h05m",
        "25h01m",
    ]


def test_format_step_line_prefers_kl_loss_and_leaves_out_what_is_missing():
    record = {"step": 7, "timing_s/step": 3.0, "perf/throughput": 100.0, "actor/ppo_kl": 0.002, "actor/kl_loss": 0.011}
    assert format_step_line(record, None, None) == "step 7/? | 3.0 s/step | 100 tok/s | kl_loss 0.011"


def test_the_step_line_shows_the_updates_fp16_loss_scaling_skipped_and_nothing_when_none():
    # patch 0024's metrics, as verl's console line carries them (one value per step)
    record = {
        "step": 4,
        "timing_s/step": 2.0,
        "actor/skipped_updates": 1.0,
        "actor/loss_scale": 32768.0,
        "actor/skipped_updates_total": 3.0,
        "critic/skipped_updates": 0.0,
        "critic/loss_scale": 65536.0,
    }
    assert (
        format_step_line(record, 10, None)
        == "step 4/10 | 2.0 s/step | skipped updates (fp16 overflow): actor 1; loss scale actor 32768"
    )
    record["critic/skipped_updates"], record["critic/loss_scale"] = 2.0, 16384.0
    assert (
        format_step_line(record, 10, None)
        == "step 4/10 | 2.0 s/step | skipped updates (fp16 overflow): actor 1, critic 2; loss scale actor 32768, critic"
        " 16384"
    )
    record["actor/skipped_updates"] = record["critic/skipped_updates"] = 0.0
    assert format_step_line(record, 10, None) == "step 4/10 | 2.0 s/step"


def test_eta_starts_from_the_initial_estimate_until_a_step_is_done(tmp_path):
    watcher = StepWatcher(
        tmp_path,
        total_steps=10,
        stream=io.StringIO(),
        tty=False,
        initial_step_seconds=12.5,
        metrics=MetricsWriter(tmp_path),
    )
    assert watcher.eta_seconds() == 125.0
    watcher.step_times.append(20.0)
    watcher.last_step = 1
    assert watcher.eta_seconds() == 180.0
    watcher.close()
    assert (
        StepWatcher(
            tmp_path, total_steps=10, stream=io.StringIO(), tty=False, metrics=MetricsWriter(tmp_path)
        ).eta_seconds()
        is None
    )


def test_a_resumed_run_records_each_step_once(tmp_path):
    """Two sessions: the first killed during step 6 after its checkpoint of step 4, the second resumed from it."""
    from verlfit.metrics import consolidate, is_training_record

    watch(tmp_path, "ppo_resumed_first_session.log", tty=False)
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1, 2, 3, 4, 5]
    ticks = iter(range(2000, 3000))
    with StepWatcher(
        tmp_path,
        stream=io.StringIO(),
        tty=False,
        clock=lambda: float(next(ticks)),
        resume_step=4,
        metrics=MetricsWriter(tmp_path, resume_step=4),
    ) as watcher:
        assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1, 2, 3, 4]  # step 5 dropped before verl starts again
        for line in log_lines("ppo_resumed_second_session.log"):
            watcher.feed(line)
    records = read_metrics(tmp_path)
    assert [(r["step"], r["time"], is_training_record(r), bool(r.get("finished"))) for r in records] == [
        (0, 1000.0, False, False),
        (1, 1001.0, True, False),
        (2, 1002.0, True, False),
        (3, 1003.0, True, False),
        (4, 1004.0, True, False),
        (4, 2000.0, False, False),
        (5, 2001.0, True, False),
        (6, 2002.0, True, False),
        (6, 2003.0, False, True),
    ]
    training = [r["step"] for r in records if is_training_record(r)]
    assert training == [1, 2, 3, 4, 5, 6]  # each training step exactly once
    assert (
        records[6]["critic/score/mean"] == 0.188
    )  # step 5 as the second session trained it (the first session: 0.062; 3 decimals)
    merged = consolidate(records)
    assert [r["step"] for r in merged] == [0, 1, 2, 3, 4, 5, 6] and merged[4][
        "val-core/openai/gsm8k/reward/mean@1"
    ] == 0.0712
    # the full log keeps both sessions, step 5 twice
    assert sum(" step:5 - " in line for line in (tmp_path / "train.log").read_text().splitlines()) == 2


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def stall_watcher(tmp_path, **kwargs):
    clock, out = FakeClock(), io.StringIO()
    watcher = StepWatcher(
        tmp_path,
        total_steps=6,
        stream=out,
        tty=False,
        clock=lambda: 0.0,
        monotonic=clock,
        metrics=MetricsWriter(tmp_path),
        **kwargs,
    )
    return watcher, clock, out


def feed_at(watcher, clock, seconds, line):
    clock.now = seconds
    return watcher.feed(line)


def test_a_stall_is_reported_once_with_the_phase_and_not_stopped(tmp_path):
    lines = log_lines("ppo_resumed_first_session.log")
    watcher, clock, out = stall_watcher(tmp_path, initial_step_seconds=100.0)
    feed_at(watcher, clock, 5, lines[0])  # Total training steps: 6
    # before the first record: max(10 min, 5 x 100 s) + 30 min of startup
    assert watcher.stall_limit() == (
        2400.0,
        "5 x the estimated step, 1m40s, at least 10m00s, + 30m00s for startup before the first record",
    )
    clock.now = 2399
    assert watcher.check_stall() is None
    clock.now = 2400
    stall = watcher.check_stall()
    assert (stall.seconds, stall.next_step, stall.phase, stall.phase_seconds, stall.last_line, stall.stopping) == (
        2400,
        1,
        "model loading (the Ray workers build the models)",
        2395,
        "Total training steps: 6",
        False,
    )
    assert out.getvalue().splitlines() == [
        "verlfit: no step has finished for 40m00s (limit 40m00s: 5 x the estimated step, 1m40s, at least 10m00s, +"
        " 30m00s for startup before the first record); step 1 is in progress; verl last entered model loading (the Ray"
        " workers build the models) 39m55s ago; its last line, 39m55s ago: 'Total training steps: 6'; not stopped"
        " (verlfit train --stall-timeout SECONDS stops a stalled run)"
    ]
    clock.now = 2500
    assert watcher.check_stall().seconds == 2500 and len(out.getvalue().splitlines()) == 1  # said once
    assert not watcher.stop_requested
    for line in lines[1:7]:  # the initial validation, then its step:0 record
        feed_at(watcher, clock, 2600, line)
    assert watcher.stall is None
    assert out.getvalue().splitlines()[-1] == "verlfit: step 0 finished after 43m20s without one: the stall is over"
    feed_at(watcher, clock, 2650, lines[7])  # step 1
    step1 = watcher.step_times[0]
    feed_at(watcher, clock, 2700, lines[8])  # local_global_step_folder: .../global_step_2
    assert watcher.phase == "the checkpoint save of step 2"
    assert watcher.stall_limit() == (600.0, f"5 x the longest step so far, {round(step1)}s, at least 10m00s")
    clock.now = 3249  # 600 s after step 1
    assert watcher.check_stall() is None
    clock.now = 3250
    assert (watcher.check_stall().phase, watcher.stall.phase_seconds, watcher.stall.next_step) == (
        "the checkpoint save of step 2",
        550,
        2,
    )
    watcher.close()


def test_stall_timeout_asks_to_stop_and_names_a_worker_method(tmp_path):
    watcher, clock, out = stall_watcher(tmp_path, stall_timeout=120)
    feed_at(
        watcher,
        clock,
        10,
        "(TaskRunner pid=1) step:3 - critic/score/mean:0.500 - timing_s/step:2.000 - perf/throughput:10.000\n",
    )
    feed_at(
        watcher,
        clock,
        20,
        '(TaskRunner pid=1)   File "ray_trainer.py", line 1129, in fit: ray::WorkerDict.actor_rollout_update_actor()'
        " (pid=9)\n",
    )
    assert watcher.stall_limit() == (120, "--stall-timeout 120")
    clock.now = 129.9
    assert watcher.check_stall() is None and not watcher.stop_requested
    clock.now = 130
    stall = watcher.check_stall()
    assert (stall.next_step, stall.phase, stall.stopping, watcher.stop_requested) == (
        4,
        "the actor update (verl's actor_rollout_update_actor)",
        True,
        True,
    )
    assert out.getvalue().splitlines()[-1].endswith("; stopping verl (--stall-timeout)")
    watcher.close()


def test_a_finished_run_never_stalls(tmp_path):
    watcher, clock, _ = stall_watcher(tmp_path, stall_timeout=1)
    for line in log_lines("ppo_p40_finished.log"):
        watcher.feed(line)
    clock.now = 10_000
    assert watcher.finished and watcher.check_stall() is None
    watcher.close()


def test_stall_timeout_counts_from_the_first_record_with_the_startup_allowance_before_it(tmp_path):
    # a new-user trial: --stall-timeout 60 stopped a run during model loading (the raw 60 s applied before any record)
    watcher, clock, out = stall_watcher(tmp_path, stall_timeout=60)
    feed_at(watcher, clock, 5, "Total training steps: 6\n")
    assert watcher.stall_limit() == (1860.0, "--stall-timeout 60, + 30m00s for startup before the first record")
    clock.now = 1859
    assert watcher.check_stall() is None and not watcher.stop_requested
    feed_at(
        watcher,
        clock,
        1800,
        "(TaskRunner pid=1) step:1 - critic/score/mean:0.500 - timing_s/step:2.000 - perf/throughput:10.000\n",
    )
    assert watcher.stall_limit() == (60, "--stall-timeout 60")
    clock.now = 1860
    assert watcher.check_stall().stopping and watcher.stop_requested
    watcher.close()


def test_a_metrics_file_that_cannot_be_written_is_said_once_and_the_steps_still_show(tmp_path, monkeypatch):
    import errno

    from verlfit.metrics import MetricsWriter

    def refused(self, record):
        raise OSError(errno.EACCES, "Permission denied")

    out = io.StringIO()
    watcher = StepWatcher(tmp_path, total_steps=3, stream=out, tty=False, metrics=MetricsWriter(tmp_path))
    monkeypatch.setattr(MetricsWriter, "write", refused)
    for n in (1, 2):
        watcher.feed(
            f"(TaskRunner pid=1) step:{n} - actor/pg_loss:0.5 - timing_s/step:1.0 - perf/total_num_tokens:100 -"
            " perf/throughput:100.0\n"
        )
    watcher.close()
    assert out.getvalue().splitlines() == [
        (
            f"verlfit: {tmp_path / 'metrics.jsonl'} is incomplete from here on: writing it failed ([Errno 13]"
            " Permission denied); the records of step 1 on are not in it; the steps still show here"
        ),
        "step 1/3 | 1.0 s/step | 100 tok/s | ETA 2s",
        "step 2/3 | 1.0 s/step | 100 tok/s | ETA 1s",
    ]
    assert isinstance(watcher.metrics_error, OSError) and watcher.log_error is None
    assert len((tmp_path / "train.log").read_text().splitlines()) == 2 and len(watcher.log_lines) == 2
