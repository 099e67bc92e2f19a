"""verlfit train after verl fails: the diagnosis printed, recorded in run.json, and a cut-short checkpoint removed."""

import json

from test_failure import DIED_LOG, DISK_LOG, OOM_LOG
from test_train import P40, fake_checkpoint, parse

from verlfit.train import create_run_directory, prepare_launch, report_failure


def _run(tmp_path, *extra):
    argv = ["--profile", "p40", "--plan", "off", "--run-dir", str(tmp_path / "r"), *extra]
    plan = prepare_launch(parse(argv), environ={}, gpu=P40)
    return plan, create_run_directory(plan, None)


def test_an_out_of_memory_step_is_explained_and_recorded_as_failed(tmp_path, capsys):
    plan, run_dir = _run(tmp_path, "--micro-batch-size", "16")
    (run_dir / "train.log").write_text("\n".join(OOM_LOG) + "\n")
    outcome = report_failure(plan, run_dir, 1)
    said = capsys.readouterr().err
    assert "verlfit: verl ran out of GPU memory in the actor update (verl's actor_rollout_update_actor): torch asked for 2.32 GiB with 1.05 GiB of 22.50 GiB free; the planner predicts" in said
    assert "the planner predicts 26.1 GiB for this phase against 22.5 GiB usable" in said
    assert "fix: auto-fit picks actor micro-batch 4, log-prob micro-batch 8: drop --plan off so verlfit train sizes the run (or set --micro-batch-size 4 yourself)" in said
    record = json.loads((run_dir / "run.json").read_text())
    assert record["outcome"] == outcome
    assert (outcome["status"], outcome["exit_status"], outcome["reason"], outcome["phase"]) == ("failed", 1, "out_of_memory", "actor_update")


def test_a_full_disk_keeps_the_complete_checkpoint_and_removes_the_cut_short_one(tmp_path, capsys):
    plan, run_dir = _run(tmp_path)
    fake_checkpoint(run_dir, 25)
    partial = run_dir / "checkpoints" / "global_step_50" / "actor"
    partial.mkdir(parents=True)
    (partial / "model_world_size_1_rank_0.pt").write_bytes(b"half")
    (run_dir / "train.log").write_text("\n".join(DISK_LOG) + "\n")
    outcome = report_failure(plan, run_dir, 1)
    said = capsys.readouterr().err
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["global_step_25", "latest_checkpointed_iteration.txt"]
    assert f"removed {run_dir / 'checkpoints' / 'global_step_50'}" in said
    assert f"the disk filled up during a checkpoint save (verl's actor_rollout_save_checkpoint): {run_dir / 'checkpoints'} has " in said
    assert "; one checkpoint of this run needs about 11.1 GiB; the checkpoint of step 25 is complete and kept" in said
    assert f"then verlfit train --resume {run_dir} continues from step 25" in said
    assert outcome["reason"] == "disk_full"


def test_a_dead_worker_names_the_role_and_an_unknown_failure_is_still_recorded(tmp_path, capsys):
    plan, run_dir = _run(tmp_path)
    outcome = report_failure(plan, run_dir, 1, log_lines=DIED_LOG)
    assert "a verl worker process died during the critic's value pass, in the critic worker (verl's critic_compute_values)" in capsys.readouterr().err
    assert (outcome["reason"], outcome["phase"], outcome["worker_method"]) == ("worker_died", "values", "critic_compute_values")
    outcome = report_failure(plan, run_dir, 2, log_lines=["KeyError: 'x'"])
    assert (outcome["status"], outcome["exit_status"], outcome["reason"]) == ("failed", 2, None)
    assert json.loads((run_dir / "run.json").read_text())["outcome"]["exit_status"] == 2
