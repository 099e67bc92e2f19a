"""Issue 17's soak tools on CPU: plans (soak_plan.py), the run's process tree (process_tree.py, real processes),
the re-entrant driver (soak_run.py against tests/benchmarks/fake_verlfit.py) and the soak check (soak_check.py)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import process_tree  # benchmarks/ is on sys.path (tests/conftest.py)
import soak_check
import soak_plan
import soak_run

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

FAKE = Path(__file__).resolve().parent / "fake_verlfit.py"


def test_plans_parse_in_step_order_and_bad_words_are_refused_with_the_word():
    assert soak_plan.parse_plan("sigkill@300 sigint@150") == [
        soak_plan.PlanItem("sigint", 150),
        soak_plan.PlanItem("sigkill", 300),
    ]
    assert soak_plan.parse_plan("") == [] and soak_plan.parse_plan("none") == []
    assert [item.label for item in soak_plan.parse_plan("kill-worker@7")] == ["kill-worker@7"]
    for word in ("sigint", "sigterm@5", "sigint@0", "sigint@x", "sigint@-3"):
        with pytest.raises(soak_plan.PlanError, match=f"plan word '{word}' is not ACTION@STEP"):
            soak_plan.parse_plan(word)
    with pytest.raises(soak_plan.PlanError, match="two actions at one step"):
        soak_plan.parse_plan("sigint@5 sigkill@5")


def test_next_action_follows_the_events_done():
    plan = soak_plan.parse_plan("sigint@150 sigkill@300")
    event = lambda name: {"event": name}  # noqa: E731
    assert soak_plan.next_step_action(plan, [], 0, 500, run_exists=False) == ("start", plan[0])
    assert soak_plan.next_step_action(plan, [event("sigint@150")], 150, 500, run_exists=True) == ("resume", plan[1])
    assert soak_plan.next_step_action(
        plan, [event("sigint@150"), event("deadline sigint")], 170, 500, run_exists=True
    ) == ("resume", plan[1])
    assert soak_plan.next_step_action(plan, [event("sigint@150"), event("sigkill@300")], 300, 500, run_exists=True) == (
        "resume",
        None,
    )
    assert soak_plan.next_step_action(plan, [event("sigint@150")], 500, 500, run_exists=True) == ("finished", None)
    assert soak_plan.next_step_action(plan, [event("sigint@150"), event("exit")], 201, 500, run_exists=True) == (
        "stopped",
        None,
    )


def test_events_lines_round_trip_and_a_cut_line_is_skipped(tmp_path):
    path = tmp_path / "x.events"
    line = soak_plan.format_event("sigint@150", 151, 12.34, 130, "verlfit: stopped.\tContinue\n", now=0)
    assert line.split("\t")[1:] == ["sigint@150", "151", "12.3", "130", "verlfit: stopped. Continue\n"]
    path.write_text(
        line
        + soak_plan.format_event("deadline sigint", 170, None, None, None, now=0)
        + "2026-12-01T00:00:00+0000\tsigkill@300\t30"
    )
    events = soak_plan.read_events(path)
    assert [(e["event"], e["step"], e["exit_seconds"], e["status"], e["note"]) for e in events] == [
        ("sigint@150", 151, 12.3, 130, "verlfit: stopped. Continue"),
        ("deadline sigint", 170, None, None, "-"),
    ]
    assert soak_plan.read_events(tmp_path / "none.events") == []


@pytest.fixture
def run_tree():
    """A real tree like a run's: a 'verlfit' process, its child 'verl driver' in its own session (as train.py starts
    it),
    that child's child a 'ray::WorkerDict' process; plus a process in the root's group that is not its descendant."""
    script = (
        "import subprocess, sys, time\nsubprocess.Popen(['bash', '-c', \"bash -c 'exec -a"
        " ray::WorkerDict.actor_rollout_compute_log_prob sleep 60' & exec -a 'python -m verl.trainer.main_ppo' sleep"
        ' 60"], start_new_session=True)\ntime.sleep(60)\n'
    )
    # its own group, as soak_run.py gives verlfit (preexec_fn, not process_group=: that needs Python 3.11, the image has
    # 3.10)
    root = subprocess.Popen([sys.executable, "-c", script], preexec_fn=os.setpgrp)
    deadline = time.monotonic() + 10
    while len(psutil.Process(root.pid).children(recursive=True)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    # a member of the root's process group that is not its descendant (as a wrapper's sibling would be)
    sibling = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: os.setpgid(0, root.pid))
    yield root, sibling
    for process in (root, sibling):
        process.kill()
        process.wait()
    for child in psutil.Process().children(recursive=True):
        child.kill()


def test_the_run_tree_is_found_with_roles_and_killed_at_once(run_tree):
    root, sibling = run_tree
    processes = process_tree.run_processes(root.pid)
    roles = sorted((process_tree.role(p, root.pid), p.pid) for p in processes)
    driver = next(p for p in psutil.Process(root.pid).children() if "verl.trainer.main_ppo" in " ".join(p.cmdline()))
    worker = driver.children()[0]
    assert roles == sorted(
        [("verlfit", root.pid), ("driver", driver.pid), ("worker", worker.pid), ("other", sibling.pid)]
    )
    rss = process_tree.rss_by_role(root.pid)
    assert (
        rss["workers"] == 1
        and rss["verlfit"] > 1
        and rss["driver"] > 0
        and rss["workers_sum"] == rss["workers_max"] > 0
    )
    assert [p.pid for p in process_tree.worker_processes(root.pid)] == [worker.pid]
    killed = process_tree.kill_run(root.pid)
    assert killed == sorted([root.pid, driver.pid, worker.pid, sibling.pid])
    assert root.wait(timeout=5) == -9 and sibling.wait(timeout=5) == -9
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(
        psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in (driver.pid, worker.pid)
    ):
        time.sleep(0.05)
    assert not any(
        psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in (driver.pid, worker.pid)
    )
    assert process_tree.run_processes(root.pid) == [] or all(
        p.status() == psutil.STATUS_ZOMBIE for p in process_tree.run_processes(root.pid)
    )


def test_kill_worker_command_kills_only_the_worker(run_tree):
    root, _ = run_tree
    driver = next(p for p in psutil.Process(root.pid).children() if "verl.trainer.main_ppo" in " ".join(p.cmdline()))
    worker = driver.children()[0]
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "process_tree.py"), "kill-worker", str(root.pid)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{worker.pid}\tray::WorkerDict.actor_rollout_compute_log_prob 60\n"
    deadline = time.monotonic() + 5
    while (
        time.monotonic() < deadline and worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE
    ):  # its parent (sleep) never reaps it
        time.sleep(0.05)
    assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
    assert driver.is_running() and root.poll() is None
    again = subprocess.run(
        [sys.executable, str(BENCHMARKS / "process_tree.py"), "kill-worker", str(root.pid)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert again.returncode == 1 and again.stderr == f"process_tree.py: no WorkerDict process under {root.pid}\n"


def _driver(tmp_path, plan, total=9, deadline=None, **kwargs):
    return soak_run.Driver(
        tmp_path,
        "soak",
        total,
        soak_plan.parse_plan(plan),
        ["--steps", str(total), "--save-freq", "3"],
        deadline,
        [sys.executable, str(FAKE)],
        poll_s=0.05,
        sample_s=0.2,
        grace_s=5,
        min_launch_s=0,
        **kwargs,
    )


def _steps(run):
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_driver_interrupts_and_resumes_the_run_as_planned_each_step_once(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0.15")
    assert _driver(tmp_path, "sigint@3 sigkill@6").run() == 0
    events = soak_plan.read_events(tmp_path / "soak.events")
    assert [e["event"] for e in events] == ["sigint@3", "sigkill@6", "finished"]
    assert [e["status"] for e in events] == [130, -9, None]
    assert events[0]["note"] == "verlfit: stopped. Continue from step N with: verlfit train --resume RUN"
    assert events[0]["step"] >= 3 and events[1]["step"] >= 6
    assert _steps(tmp_path / "soak") == list(range(1, 10))
    console = (tmp_path / "soak.console").read_text()
    assert console.count("== soak_run.py ") == 3 and console.count(f"train --resume {tmp_path}/soak\n") == 2
    rows = (tmp_path / "soak.rss.csv").read_text().splitlines()
    assert rows[0] == "time,step,verlfit_mib,driver_mib,workers_sum_mib,workers_max_mib,workers" and len(rows) > 3
    assert any(row.endswith(",1") for row in rows[1:])  # a sample that saw the one worker

    # no process of the run is left (the SIGKILL took the driver and the worker too); a killed process leaves the table
    # when it is reaped, which a loaded machine can take a moment over: looked for again for up to 10 s
    def left_over():
        return [
            p
            for p in psutil.process_iter(["cmdline", "status"])
            if p.info["cmdline"]
            and "ray::WorkerDict.actor_rollout_generate_sequences" in p.info["cmdline"][0]
            and p.info["status"] != psutil.STATUS_ZOMBIE
        ]

    deadline = time.monotonic() + 10
    while left_over() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left_over()
    # run again (the next device call): finished, nothing relaunched, nothing recorded twice
    assert _driver(tmp_path, "sigint@3 sigkill@6").run() == 0
    assert [e["event"] for e in soak_plan.read_events(tmp_path / "soak.events")] == [
        "sigint@3",
        "sigkill@6",
        "finished",
    ]
    assert (tmp_path / "soak.console").read_text().count("== soak_run.py ") == 3


def test_a_deadline_cut_is_an_event_and_the_next_call_continues(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0.25")
    driver = _driver(tmp_path, "sigint@8", deadline=time.time() + 1.7)
    assert driver.run() == 0
    events = soak_plan.read_events(tmp_path / "soak.events")
    assert [e["event"] for e in events] == ["deadline sigint"] and events[0]["status"] == 130
    assert 3 <= max(_steps(tmp_path / "soak")) < 8
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0.1")
    assert _driver(tmp_path, "sigint@8").run() == 0
    assert [e["event"] for e in soak_plan.read_events(tmp_path / "soak.events")] == [
        "deadline sigint",
        "sigint@8",
        "finished",
    ]
    assert _steps(tmp_path / "soak") == list(range(1, 10))


def test_kill_worker_waits_for_verlfit_to_notice_then_resumes(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0.15")
    assert _driver(tmp_path, "kill-worker@4").run() == 0
    events = soak_plan.read_events(tmp_path / "soak.events")
    assert [(e["event"], e["status"]) for e in events] == [("kill-worker@4", 1), ("finished", None)]
    assert (
        events[0]["note"]
        == "verlfit: the actor/rollout worker died (ray::WorkerDict.actor_rollout_generate_sequences): ActorDiedError"
    )
    assert 0 < events[0]["exit_seconds"] < 5
    assert _steps(tmp_path / "soak") == list(range(1, 10))


def test_a_run_that_ends_by_itself_short_of_its_total_is_not_relaunched(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0.05")
    driver = _driver(tmp_path, "", total=9)
    driver.verlfit = [sys.executable, "-c", "import sys; print('verlfit: error: boom'); sys.exit(1)"]
    assert driver.run() == 1
    assert [
        (e["event"], e["step"], e["status"], e["note"]) for e in soak_plan.read_events(tmp_path / "soak.events")
    ] == [("exit", 0, 1, "verlfit: error: boom")]
    assert driver.run() == 1  # the next call does not relaunch it either
    assert len(soak_plan.read_events(tmp_path / "soak.events")) == 1
    assert "not relaunched: the last launch ended by itself at step 0" in (tmp_path / "stages.log").read_text()


def test_waits_after_an_action_end_at_the_deadline(tmp_path):
    assert _driver(tmp_path, "", deadline=None)._budget(600) == 600
    assert _driver(tmp_path, "", deadline=time.time() + 2)._budget(600) == 5  # the grace: verlfit gets that long anyway
    assert 95 < _driver(tmp_path, "", deadline=time.time() + 100)._budget(600) <= 100


def test_the_note_is_verlfits_diagnosis_not_its_closing_line(tmp_path):
    driver = _driver(tmp_path, "")
    driver.console.write_text(
        "old\nverlfit: earlier\nverlfit: the last lines verl printed:\n  ray.exceptions.ActorDiedError\nverlfit: verl's"
        " actor worker died in the rollout\n  fix: resume\nverlfit: verl exited with status 1; the full log is x\n"
    )
    assert driver._last_verlfit_line(4) == "verlfit: verl's actor worker died in the rollout"
    assert driver._last_verlfit_line(len(driver.console.read_bytes())) is None


def _made_up_run(tmp_path, steps, memory, total=6, checkpoints=(4, 6)):
    run = tmp_path / "soak-ppo"
    (run / "checkpoints").mkdir(parents=True)
    for step in checkpoints:
        (run / "checkpoints" / f"global_step_{step}").mkdir()
    record = {
        "total_steps": total,
        "settings": {"steps": total, "keep_checkpoints": 2},
        "overrides": [],
        "environment": {},
        "profile": "p40",
        "gpu": "H200",
    }
    (run / "run.json").write_text(json.dumps(record))
    lines = [{"step": 0, "val-core/openai/gsm8k/reward/mean@1": 0.25}]
    lines += [{"step": s, "timing_s/step": 1.0, "perf/max_memory_allocated_gb": m} for s, m in zip(steps, memory)]
    lines.append({"step": 6, "val-core/openai/gsm8k/reward/mean@1": 0.375})
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (tmp_path / "soak-ppo.rss.csv").write_text(
        "time,step,verlfit_mib,driver_mib,workers_sum_mib,workers_max_mib,workers\n"
        "100,1,50.0,900.0,0.0,0.0,0\n"  # before from_step: left out
        "110,2,50.0,1000.0,3000.0,1500.0,2\n"
        "120,4,52.0,1010.0,3040.0,1520.0,2\n"
        "130,6,54.0,1020.0,3080.0,1540.0,2\n"
    )
    (tmp_path / "soak-ppo.events").write_text(
        soak_plan.format_event("sigint@3", 3, 10.0, 130, "verlfit: stopped.", now=0)
    )
    return run


def test_soak_check_reports_exact_values_of_a_clean_run(tmp_path):
    run = _made_up_run(tmp_path, [1, 2, 3, 4, 5, 6], [9.0, 10.0, 10.1, 10.2, 10.25, 10.3])
    result = soak_check.check_run(run, from_step=2)
    assert result["steps"] == {"recorded": 6, "duplicates": [], "missing": [], "unexpected": [], "ok": True}
    assert result["checkpoints"] == {"left": ["global_step_4", "global_step_6"], "keep_checkpoints": 2, "ok": True}
    assert soak_check.checkpoint_check(["global_step_2", "global_step_4", "global_step_6"], 2)["ok"] is False
    assert (
        soak_check.checkpoint_check(["global_step_2", "global_step_4", "global_step_6"], 0)["ok"] is True
    )  # 0: keep all
    assert result["validation"] == [
        {"step": 0, "key": "val-core/openai/gsm8k/reward/mean@1", "score": 0.25},
        {"step": 6, "key": "val-core/openai/gsm8k/reward/mean@1", "score": 0.375},
    ]
    assert [(e["event"], e["status"]) for e in result["events"]] == [("sigint@3", 130)]
    assert result["ok"] is True
    assert result["gpu_memory"] == {
        "step": 2,
        "gib": 10.0,
        "last_step": 6,
        "last_gib": 10.3,
        "ratio": pytest.approx(1.03),
        "ok": True,
    }
    assert result["rss"]["driver_mib"] == {
        "first": 1000.0,
        "last": 1020.0,
        "slope_mib_per_100_steps": pytest.approx(500.0),
        "samples": 3,
    }
    assert soak_check.check_run(run)["gpu_memory"]["ratio"] is None  # from step 50 (the default): no record that late
    assert soak_check.memory_check(
        [{"step": s, "perf/max_memory_allocated_gb": m} for s, m in ((2, 10.0), (6, 10.3))], from_step=2
    ) == {"step": 2, "gib": 10.0, "last_step": 6, "last_gib": 10.3, "ratio": pytest.approx(1.03), "ok": True}
    trend = soak_check.rss_trend(
        [
            {
                "step": "2",
                "verlfit_mib": "50",
                "driver_mib": "1000",
                "workers_sum_mib": "3000",
                "workers_max_mib": "1500",
            },
            {
                "step": "4",
                "verlfit_mib": "52",
                "driver_mib": "1010",
                "workers_sum_mib": "3040",
                "workers_max_mib": "1520",
            },
            {
                "step": "6",
                "verlfit_mib": "54",
                "driver_mib": "1020",
                "workers_sum_mib": "3080",
                "workers_max_mib": "1540",
            },
        ],
        from_step=2,
    )
    assert {
        role: (t["first"], t["last"], round(t["slope_mib_per_100_steps"], 6), t["samples"]) for role, t in trend.items()
    } == {
        "verlfit_mib": (50.0, 54.0, 100.0, 3),
        "driver_mib": (1000.0, 1020.0, 500.0, 3),
        "workers_sum_mib": (3000.0, 3080.0, 2000.0, 3),
        "workers_max_mib": (1500.0, 1540.0, 1000.0, 3),
    }


def test_soak_check_fails_on_repeated_or_missing_steps_and_on_memory_growth(tmp_path):
    assert soak_check.step_check([1, 2, 3, 3, 5, 7], 6) == {
        "recorded": 6,
        "duplicates": [3],
        "missing": [4, 6],
        "unexpected": [7],
        "ok": False,
    }
    grown = soak_check.memory_check(
        [
            {"step": 50, "perf/max_memory_allocated_gb": 10.0},
            {"step": 60},
            {"step": 70, "perf/max_memory_allocated_gb": 10.31},
        ]
    )
    assert (
        grown["ratio"] == pytest.approx(1.031)
        and grown["ok"] is False
        and (grown["step"], grown["last_step"]) == (50, 70)
    )
    assert (
        soak_check.memory_check([{"step": 10, "perf/max_memory_allocated_gb": 10.0}])["ok"] is False
    )  # nothing at or after step 50
    run = _made_up_run(tmp_path, [1, 2, 3, 3, 4, 6], [10.0] * 6, checkpoints=(2, 4, 6))
    out = tmp_path / "soak-ppo.soak.json"
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "soak_check.py"), str(run), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(BENCHMARKS.parent / "entrypoint")},
    )
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"run {run}: FAIL"
    assert lines[1] == "steps: 6 recorded of 6: some twice; duplicates 3; missing 5"
    assert lines[2] == "checkpoints left: 3 (global_step_2 global_step_4 global_step_6); --keep-checkpoints 2: FAIL"
    assert lines[3] == "GPU peak allocated: no perf/max_memory_allocated_gb at or after step 50: FAIL"
    assert "validation: step 0 0.2500, step 6 0.3750 (val-core/openai/gsm8k/reward/mean@1)" in lines
    assert lines[-1].endswith("sigint@3 at step 3, exit 10.0 s, status 130: verlfit: stopped.")
    written = json.loads(out.read_text())
    assert written["steps"]["duplicates"] == [3] and written["ok"] is False
    not_a_run = subprocess.run(
        [sys.executable, str(BENCHMARKS / "soak_check.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(BENCHMARKS.parent / "entrypoint")},
    )
    assert not_a_run.returncode == 2 and "is not a verlfit run directory (no run.json)" in not_a_run.stderr


def test_rss_figure_plots_driver_and_workers_against_the_step_leaving_out_absent_processes():
    rows = [
        {
            "time": "1",
            "step": "50",
            "verlfit_mib": "34",
            "driver_mib": "792.5",
            "workers_sum_mib": "0.0",
            "workers_max_mib": "0.0",
            "workers": "0",
        },
        {
            "time": "2",
            "step": "51",
            "verlfit_mib": "34",
            "driver_mib": "792.6",
            "workers_sum_mib": "2364.7",
            "workers_max_mib": "2364.7",
            "workers": "1",
        },
        {
            "time": "3",
            "step": "76",
            "verlfit_mib": "0",
            "driver_mib": "0.0",
            "workers_sum_mib": "0.0",
            "workers_max_mib": "0.0",
            "workers": "0",
        },
        {
            "time": "4",
            "step": "99",
            "verlfit_mib": "34",
            "driver_mib": "792.7",
            "workers_sum_mib": "2379.9",
            "workers_max_mib": "2379.9",
            "workers": "1",
        },
    ]
    axes = soak_check.rss_figure(rows, "Host memory of soak-ppo").axes[0]
    driver, workers = axes.get_lines()
    assert (list(driver.get_xdata()), list(driver.get_ydata())) == ([50, 51, 99], [792.5, 792.6, 792.7])
    assert (list(workers.get_xdata()), list(workers.get_ydata())) == ([51, 99], [2364.7, 2379.9])
    assert (axes.get_xlabel(), axes.get_ylabel(), axes.get_title()) == ("step", "RSS, MiB", "Host memory of soak-ppo")


def test_soak_check_plot_without_matplotlib_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """new-user trial: --plot on a Python without matplotlib printed the report, then died with ModuleNotFoundError."""
    run = _made_up_run(tmp_path, [1, 2, 3, 4, 5, 6], [10.0] * 6)
    for name in [name for name in sys.modules if name == "matplotlib" or name.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ModuleNotFoundError
    out, plot = tmp_path / "soak-ppo.soak.json", tmp_path / "rss.png"
    assert soak_check.main([str(run), "--json", str(out), "--plot", str(plot)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        captured.err
        == "soak_check.py: --plot needs matplotlib, which this Python cannot import (import of matplotlib halted; None"
        " in sys.modules): pip install matplotlib, or run soak_check.py with verlfit's environment's Python\n"
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["soak-ppo", "soak-ppo.events", "soak-ppo.rss.csv"]
