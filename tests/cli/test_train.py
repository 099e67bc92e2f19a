"""verlfit train: dry runs without a GPU, emulation, run directory, resume plan."""

import json
import time
from pathlib import Path

import pytest

from command_lines import parse_train as parse
from fakes import H200, P40, STEP, fake_checkpoint, fake_verl_plan
from verlfit import cli
from verlfit.commands.train import prepare_launch
from verlfit.errors import VerlfitError
from verlfit.run_settings import TrainSettings
from verlfit.train.run_directory import create_run_directory, resume_plan
from verlfit.patch_switches import forced_switches, speed_switches
from verlfit.profiles import load_profile


@pytest.mark.parametrize(
    "profile, rollout", [("p40", "actor_rollout_ref.rollout.name=hf"), ("a10", "actor_rollout_ref.rollout.name=vllm")]
)
def test_dry_run_prints_command_without_gpu(profile, rollout, capsys, monkeypatch, tmp_path):
    from fakes import write_raw_gsm8k

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    # --skip-checks: this Python may lack vllm (the a10 profile's rollout), which a real launch's checks refuse
    assert (
        cli.main(
            [
                "train",
                "--profile",
                profile,
                "--dry-run",
                "--steps",
                "3",
                "--plan",
                "off",
                "--skip-checks",
                "--data",
                write_raw_gsm8k(tmp_path / "raw"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert f"profile: {profile}    GPU: none detected" in out
    assert "-m verl.trainer.main_ppo" in out
    assert rollout in out
    assert "trainer.total_training_steps=3" in out


def test_dry_run_with_auto_profile_and_no_gpu_says_so(capsys):
    assert cli.main(["train", "--profile", "auto", "--dry-run"]) == 1
    assert "no NVIDIA GPU visible" in capsys.readouterr().err


def test_a10_on_p40_refused_before_anything_starts():
    from verlfit.errors import VerlfitError

    with pytest.raises(VerlfitError, match="Tesla P40 with compute capability 6.1"):
        prepare_launch(parse(["--profile", "a10", "--plan", "off"]), environ={}, gpu=P40)


def test_emulate_p40_sets_memory_limit_and_p40_paths():
    plan = prepare_launch(parse(["--emulate", "p40", "--plan", "off"]), environ={"VLLM_DTYPE": "float16"}, gpu=H200)
    assert plan.environment == {
        "VLLM_DTYPE": "float16",
        "TRITON_MAX_SHARED_MEMORY": "49152",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "VERLFIT_GPU_MEMORY_LIMIT_GIB": "22.5",
    }
    assert "actor_rollout_ref.rollout.name=hf" in plan.overrides
    assert "actor_rollout_ref.actor.use_torch_compile=False" in plan.overrides


def test_memory_limit_larger_than_card_is_refused():
    from verlfit.errors import VerlfitError

    with pytest.raises(VerlfitError, match="more than Tesla P40's 23.9 GiB"):
        prepare_launch(parse(["--profile", "p40", "--gpu-memory-limit", "30", "--plan", "off"]), environ={}, gpu=P40)


def test_run_directory_is_complete_and_resume_reuses_it(tmp_path):
    args = parse(["--profile", "p40", "--plan", "off", "--run-dir", str(tmp_path / "runs" / "r1"), "--steps", "4"])
    plan = prepare_launch(args, environ={}, gpu=P40)
    run_dir = create_run_directory(plan, "data: {}\n")
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints", "command.sh", "config.yaml", "run.json"]
    assert [p.name for p in run_dir.parent.iterdir()] == ["r1"]  # no staging directory left behind
    record = json.loads((run_dir / "run.json").read_text())
    assert record["total_steps"] == 4 and record["overrides"] == plan.overrides
    fake_checkpoint(run_dir, 2)
    resumed = resume_plan(run_dir)
    assert resumed.notes == ["resuming from the checkpoint of step 2"]
    assert resumed.resume_step == 2  # what launch drops metrics.jsonl back to
    assert "trainer.resume_mode=auto" in resumed.overrides and "trainer.resume_mode=disable" not in resumed.overrides
    from verlfit.errors import VerlfitError

    with pytest.raises(VerlfitError, match="already exists"):
        create_run_directory(plan, None)


def test_resume_of_a_non_run_directory(tmp_path, capsys):
    assert cli.main(["train", "--resume", str(tmp_path)]) == 2
    assert f"{tmp_path} is not a verlfit run directory (no run.json)" in capsys.readouterr().err


def test_launch_records_every_step_and_reports_verl_failure(tmp_path, capsys):
    from verlfit.metrics import read_metrics
    from verlfit.train.supervise import launch

    script = (
        "import os, sys\n"
        + "\n".join(STEP.format(n=n) for n in (1, 2))
        + "\nprint('Traceback: boom', flush=True)\nassert os.environ['VERLFIT_CONSOLE_FULL_PRECISION'] =="
        " '1'\nsys.exit(3)"
    )
    plan = fake_verl_plan(tmp_path, script)
    run_dir = tmp_path / "run"
    assert launch(plan, run_dir) == 3
    records = read_metrics(run_dir)
    assert [r["step"] for r in records] == [1, 2] and records[0]["actor/ppo_kl"] == 2.5e-05
    assert "Traceback: boom" in (run_dir / "train.log").read_text()
    assert "  Traceback: boom" in capsys.readouterr().err


def test_ctrl_c_stops_verl_and_keeps_finished_steps(tmp_path, capsys):
    import os
    import signal
    import threading

    from verlfit.metrics import read_metrics
    from verlfit.train.supervise import launch

    script = (
        STEP.format(n=1)
        + "\nimport time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('verl got SIGINT',"
        " flush=True)\n    raise SystemExit(1)"
    )
    plan = fake_verl_plan(tmp_path, script)
    run_dir = tmp_path / "run"
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        status = launch(plan, run_dir)
    finally:
        timer.cancel()
    assert status == 130
    assert [r["step"] for r in read_metrics(run_dir)] == [1]
    assert "verl got SIGINT" in (run_dir / "train.log").read_text()
    assert (
        "stopped before the first checkpoint (--save-freq 25): nothing to resume; start a new run"
        in capsys.readouterr().err
    )


def test_resume_uses_the_run_directory_it_is_given_and_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = prepare_launch(
        parse(["--profile", "p40", "--plan", "off", "--run-dir", "runs/r1", "--steps", "4"]), environ={}, gpu=P40
    )
    assert plan.settings.run_dir == str(tmp_path / "runs" / "r1") and plan.settings.data_dir == str(
        tmp_path / "data" / "gsm8k"
    )
    run_dir = create_run_directory(plan, None)
    moved = tmp_path / "elsewhere"
    run_dir.rename(moved)
    fake_checkpoint(moved, 2)
    monkeypatch.chdir("/")
    resumed = resume_plan(moved, steps=10)
    assert f"trainer.default_local_dir={moved / 'checkpoints'}" in resumed.overrides
    assert (
        "trainer.total_training_steps=10" in resumed.overrides
        and "trainer.total_training_steps=4" not in resumed.overrides
    )
    assert resumed.command[-1] == f"hydra.run.dir={moved / 'hydra'}"


@pytest.mark.parametrize(
    "tracker, directory, save_freq, when",
    [
        (None, None, 25, "the first is saved at step 25"),
        ("10", None, 25, "the first is saved at step 25"),  # a tracker naming a deleted checkpoint
        ("garbage", 10, -1, "this run saves none (--save-freq -1)"),
    ],
)
def test_resume_without_a_complete_checkpoint_is_refused(tmp_path, tracker, directory, save_freq, when):
    from verlfit.errors import VerlfitError

    plan = prepare_launch(
        parse(["--profile", "p40", "--plan", "off", "--run-dir", str(tmp_path / "r"), "--save-freq", str(save_freq)]),
        environ={},
        gpu=P40,
    )
    run_dir = create_run_directory(plan, None)
    if directory is not None:
        (run_dir / "checkpoints" / f"global_step_{directory}").mkdir()
    if tracker is not None:
        (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(tracker)
    with pytest.raises(VerlfitError) as caught:
        resume_plan(run_dir)
    assert f"{run_dir} has no complete checkpoint" in str(caught.value) and when in str(caught.value)
    assert "verl would start again from step 0" in str(caught.value)


def test_ctrl_c_after_a_checkpoint_names_its_step(tmp_path, capsys):
    import os
    import signal
    import threading

    from verlfit.train.supervise import launch

    run_dir = tmp_path / "run"
    fake_checkpoint(run_dir, 1)
    plan = fake_verl_plan(
        tmp_path,
        STEP.format(n=1)
        + "\nimport time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    raise SystemExit(1)",
    )
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        assert launch(plan, run_dir) == 130
    finally:
        timer.cancel()
    assert f"verlfit: stopped. Continue from step 1 with: verlfit train --resume {run_dir}" in capsys.readouterr().err


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("{}", "is not a verlfit run record (missing or wrong: overrides, settings, environment, profile, gpu)"),
        ("[]", "is not a verlfit run record"),
        ("{", "is not valid JSON"),
    ],
)
def test_resume_of_a_bad_run_record(tmp_path, capsys, content, fragment):
    (tmp_path / "run.json").write_text(content)
    assert cli.main(["train", "--resume", str(tmp_path)]) == 2
    assert fragment in capsys.readouterr().err


def test_resume_with_steps_behind_the_checkpoint_offers_only_what_works(tmp_path):
    """new-user trial: `--resume RUN --steps 10` on a finished 50-step run said "or leave it out", and leaving it
    out is refused ("has finished"); on an unfinished run leaving it out does finish the run."""
    from verlfit.errors import VerlfitError

    plan = prepare_launch(
        parse(["--profile", "p40", "--plan", "off", "--run-dir", str(tmp_path / "r"), "--steps", "50"]),
        environ={},
        gpu=P40,
    )
    run_dir = create_run_directory(plan, None)
    fake_checkpoint(run_dir, 50)
    with pytest.raises(
        VerlfitError, match="--steps 10 with --resume: the newest checkpoint of .* is already at step 50"
    ) as finished:
        resume_plan(run_dir, steps=10)
    assert (
        finished.value.fix
        == "pass --steps above 50 (the run's new total; it has finished its 50 steps), e.g. `verlfit train --resume"
        f" {run_dir} --steps 100`"
    )
    assert "trainer.total_training_steps=100" in resume_plan(run_dir, steps=100).overrides  # the example works
    fake_checkpoint(run_dir, 25)
    with pytest.raises(VerlfitError) as unfinished:
        resume_plan(run_dir, steps=10)
    assert (
        unfinished.value.fix
        == "pass --steps above 25 (the run's new total), or leave it out to finish the run's own 50 steps"
    )
    assert resume_plan(run_dir).notes == ["resuming from the checkpoint of step 25"]  # leaving it out works


def test_resume_refuses_changed_settings(tmp_path, capsys):
    assert cli.main(["train", "--resume", str(tmp_path), "--batch-size", "8", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "--batch-size cannot be given with it" in err
    # new-user trial: the fix named --steps and --keep-checkpoints only; every option --resume takes is listed
    assert (
        "  fix: resume with only --steps (the run's new total, to extend it), --keep-checkpoints, --stall-timeout,"
        " --dry-run, --skip-checks, --no-validate; or start a new run\n" in err
    )
    resume = next(
        action for action in cli.build_parser().commands["train"]._actions if "--resume" in action.option_strings
    )
    assert resume.help.endswith(
        "(only --steps, --keep-checkpoints, --stall-timeout, --dry-run, --skip-checks, --no-validate may be given)"
    )
    # a switch whose default is None (one option pair shared with verlfit plan): turning it off is a change too
    assert cli.main(["train", "--resume", str(tmp_path), "--no-gradient-checkpointing", "--dry-run"]) == 2
    assert "; --gradient-checkpointing/--no-gradient-checkpointing cannot be given with it" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--steps", "0"], "argument --steps: 0 must be at least 1"),
        (["--mini-batch-size", "0"], "argument --mini-batch-size: 0 must be at least 1"),
        (["--profile", "p40", "--emulate", "a10"], "--profile p40 and --emulate a10 disagree"),
    ],
)
def test_bad_sizes_and_conflicts(argv, fragment, capsys):
    try:
        status = cli.main(["train", "--dry-run", "--plan", "off", *argv])
    except SystemExit as exit:  # argparse type errors
        status = exit.code
    assert status == 2
    assert fragment in capsys.readouterr().err


def test_user_memory_limit_variable_is_validated_and_planned_for():
    from verlfit.errors import VerlfitError

    plan = prepare_launch(
        parse(["--profile", "p40", "--plan", "off"]), environ={"VERLFIT_GPU_MEMORY_LIMIT_GIB": "10"}, gpu=P40
    )
    assert plan.environment["VERLFIT_GPU_MEMORY_LIMIT_GIB"] == "10"
    with pytest.raises(VerlfitError, match="VERLFIT_GPU_MEMORY_LIMIT_GIB='abc' is not a number of GiB from 1 up"):
        prepare_launch(
            parse(["--profile", "p40", "--plan", "off"]), environ={"VERLFIT_GPU_MEMORY_LIMIT_GIB": "abc"}, gpu=P40
        )


def test_bf16_rollout_refused_on_pascal_and_triton_off_for_p40_without_gpu():
    from verlfit.errors import VerlfitError

    with pytest.raises(
        VerlfitError, match=r"VLLM_DTYPE=bfloat16 on Tesla P40 \(compute capability 6.1\): bf16 needs 8.0"
    ):
        prepare_launch(parse(["--profile", "p40", "--plan", "off"]), environ={"VLLM_DTYPE": "bfloat16"}, gpu=P40)
    plan = prepare_launch(
        parse(["--profile", "p40", "--plan", "off", "--dry-run"]),
        environ={"TRITON_MAX_SHARED_MEMORY": "101376"},
        detect_gpu=False,
    )
    assert "actor_rollout_ref.actor.use_torch_compile=False" in plan.overrides


def test_training_set_smaller_than_a_batch_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from verlfit.errors import VerlfitError
    from verlfit.run_settings import TrainSettings
    from verlfit.train.inputs import check_data_size

    pq.write_table(pa.table({"x": list(range(7))}), tmp_path / "train.parquet")
    with pytest.raises(VerlfitError, match="train.parquet has 7 rows, fewer than one batch of 32 prompts"):
        check_data_size(TrainSettings(data_dir=str(tmp_path)))


def test_emulating_a10_on_a_p40_is_refused_and_nan_limits_are_usage_errors(capsys):
    from verlfit.errors import VerlfitError

    with pytest.raises(VerlfitError, match="Tesla P40 with compute capability 6.1"):
        prepare_launch(parse(["--emulate", "a10", "--plan", "off"]), environ={}, gpu=P40)
    with pytest.raises(SystemExit):
        parse(["--gpu-memory-limit", "nan"])
    assert "argument --gpu-memory-limit: nan must be a positive, finite number" in capsys.readouterr().err


def test_resume_records_itself_and_moves_tensorboard(tmp_path):
    args = parse(["--profile", "p40", "--plan", "off", "--run-dir", str(tmp_path / "r"), "--steps", "4"])
    plan = prepare_launch(args, environ={"TENSORBOARD_DIR": "ignored"}, gpu=P40)
    plan.environment["TENSORBOARD_DIR"] = str(tmp_path / "r" / "tensorboard")
    run_dir = create_run_directory(plan, None)
    moved = tmp_path / "moved"
    run_dir.rename(moved)
    fake_checkpoint(moved, 2)
    assert resume_plan(moved).environment["TENSORBOARD_DIR"] == str(moved / "tensorboard")
    from verlfit.train.run_directory import record_resume

    record_resume(moved, resume_plan(moved, steps=20, keep_checkpoints=3))
    record = json.loads((moved / "run.json").read_text())
    assert record["total_steps"] == 20 and len(record["resumed"]) == 1
    assert (record["settings"]["steps"], record["settings"]["keep_checkpoints"]) == (20, 3)
    # a second resume without --steps keeps the extended total (it went back to 4 before)
    again = resume_plan(moved)
    assert again.settings.steps == 20
    assert (
        "trainer.total_training_steps=20" in again.overrides and "trainer.total_training_steps=4" not in again.overrides
    )
    assert "trainer.max_actor_ckpt_to_keep=3" in again.overrides


def test_resume_refuses_a_finished_run_unless_steps_extend_it(tmp_path):
    from verlfit.errors import VerlfitError

    plan = prepare_launch(
        parse(["--profile", "p40", "--plan", "off", "--run-dir", str(tmp_path / "r"), "--steps", "25"]),
        environ={},
        gpu=P40,
    )
    run_dir = create_run_directory(plan, None)
    fake_checkpoint(run_dir, 25)
    with pytest.raises(VerlfitError, match=r"has finished: its newest checkpoint is step 25 of its 25 steps") as error:
        resume_plan(run_dir)
    assert error.value.fix.startswith(
        "pass --steps above 25 to train further, e.g. `verlfit train --resume "
    ) and error.value.fix.endswith(" --steps 50`")
    assert "trainer.total_training_steps=50" in resume_plan(run_dir, steps=50).overrides
    # a run.json extended before settings were kept: total_steps 50, settings and overrides still 25
    record = json.loads((run_dir / "run.json").read_text())
    record["total_steps"] = 50
    (run_dir / "run.json").write_text(json.dumps(record))
    fake_checkpoint(run_dir, 40)
    resumed = resume_plan(run_dir)
    assert resumed.settings.steps == 50 and "trainer.total_training_steps=50" in resumed.overrides


def test_a10_with_hf_rollout_and_sdpa_plans_without_a_vllm_share_and_records_the_choice():
    plan = prepare_launch(
        parse(["--profile", "a10", "--rollout", "hf", "--attention", "sdpa", "--gpu-memory-limit", "24"]),
        environ={},
        gpu=H200,
    )
    assert (plan.settings.rollout, plan.settings.attention) == ("hf", "sdpa")
    assert "actor_rollout_ref.rollout.name=hf" in plan.overrides
    assert "+actor_rollout_ref.rollout.micro_batch_size=32" in plan.overrides
    assert "+actor_rollout_ref.model.attn_implementation=sdpa" in plan.overrides
    assert "actor_rollout_ref.model.use_remove_padding=False" in plan.overrides
    assert not [o for o in plan.overrides if "gpu_memory_utilization" in o or "enforce_eager" in o]
    assert "rollout hf instead of the a10 profile's vllm; attention sdpa instead of flash_attention_2" in plan.notes
    from verlfit.train.describe import describe

    text = describe(plan).splitlines()
    assert text[1] == "rollout: hf    attention: sdpa"
    assert "checkpoints: every 25 steps, newest 2 kept" in text[6]


def test_p40_with_vllm_rollout_is_refused_before_anything_starts():
    from verlfit.errors import VerlfitError

    with pytest.raises(VerlfitError, match="vLLM needs compute capability 7.0"):
        prepare_launch(parse(["--profile", "p40", "--rollout", "vllm", "--dry-run"]), environ={}, gpu=None)


@pytest.mark.parametrize(
    "argv, expected", [([], "2"), (["--keep-checkpoints", "3"], "3"), (["--keep-checkpoints", "0"], "null")]
)
def test_keep_checkpoints_bounds_what_verl_keeps(argv, expected):
    plan = prepare_launch(parse(["--profile", "p40", "--plan", "off", "--dry-run", *argv]), environ={}, gpu=None)
    assert f"trainer.max_actor_ckpt_to_keep={expected}" in plan.overrides
    assert f"trainer.max_critic_ckpt_to_keep={expected}" in plan.overrides


@pytest.mark.parametrize(
    "value, fragment",
    [
        ("-1", "-1 must be 0 (keep all) or at least 2"),
        ("1", "1 would leave no checkpoint during each save"),
        ("1.5", "'1.5' is not a whole number"),
    ],
)
def test_keep_checkpoints_values_that_could_lose_the_run_are_refused_by_the_parser(capsys, value, fragment):
    with pytest.raises(SystemExit):
        parse(["--keep-checkpoints", value])
    assert f"argument --keep-checkpoints: {fragment}" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["runs/a,b", "runs/my (copy)", "runs/x=y", "runs/it's", "runs/x]y", "runs/plain"])
def test_every_run_directory_name_reaches_hydra_as_one_value(tmp_path, name):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    plan = prepare_launch(
        parse(["--profile", "p40", "--plan", "off", "--dry-run", "--run-dir", str(tmp_path / name)]),
        environ={},
        gpu=None,
    )
    parsed = OverridesParser.create().parse_overrides(plan.command[3:])
    values = {o.key_or_group: o.value() for o in parsed}
    assert values["hydra.run.dir"] == str(tmp_path / name / "hydra")
    assert values["trainer.default_local_dir"] == str(tmp_path / name / "checkpoints")


def test_emulating_p40_inside_the_a10_image_uses_p40_values_not_the_images_defaults():
    image = {
        "VLLM_DTYPE": "bfloat16",
        "TRITON_MAX_SHARED_MEMORY": "101376",
        "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:256",
        "VERLFIT_PROFILE_DEFAULTS": (
            " VLLM_DTYPE=bfloat16 TRITON_MAX_SHARED_MEMORY=101376 PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:256"
        ),
    }
    plan = prepare_launch(parse(["--emulate", "p40", "--plan", "off"]), environ=image, gpu=H200)
    assert plan.environment == {
        "VLLM_DTYPE": "float32",
        "TRITON_MAX_SHARED_MEMORY": "49152",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "VERLFIT_GPU_MEMORY_LIMIT_GIB": "22.5",
    }


@pytest.mark.parametrize(
    "override, fix",
    [
        ("+actor_rollout_ref.model.attn_implementation=sdpa", "use --attention sdpa|eager|flash_attention_2 instead"),
        ("actor_rollout_ref.rollout.name=vllm", "use --rollout hf|vllm instead"),
        ("critic.model.use_remove_padding=True", "use --attention (packing is on only with flash_attention_2) instead"),
        (
            "++actor_rollout_ref.rollout.dtype=bfloat16",
            "use the VLLM_DTYPE environment variable (checked against the GPU) instead",
        ),
        # a whole section holding managed keys, offload, dtype, checkpoints kept, nodes
        (
            "actor_rollout_ref.rollout={name:vllm}",
            (
                "use --max-prompt-length; --max-response-length; --micro-batch-size (or leave micro-batches to the"
                " planner: --plan auto); --plan auto (it sizes the HF rollout's prompts per generate call: the largest"
                " that fits; verlfit plan shows what another size would need); --rollout hf|vllm; --samples (with"
                " --algo grpo); the VLLM_DTYPE environment"
                " variable (checked against the GPU); the profile (its vLLM share of the card, which the planner"
                " counts; --gpu-memory-limit scales it) instead"
            ),
        ),
        (
            "actor_rollout_ref.actor.fsdp_config.param_offload=True",
            "use --offload (actor param offload cannot run with the HF rollout) instead",
        ),
        ("trainer.max_actor_ckpt_to_keep=1", "use --keep-checkpoints (0, or 2 and more) instead"),
        (
            "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
            "use --profile (the profile decides the dtype from the card) instead",
        ),
        ("trainer.nnodes=2", "use --nodes (the batch is checked against every GPU) instead"),
        (
            "trainer.total_training_steps=10",
            "use --steps (the progress display, --resume and report count against it) instead",
        ),
        # sizes the planner and verl's own checks depend on (issue 16 item 2: a batch of 8 under mini-batch 16 was
        # accepted)
        ("data.train_batch_size=8", "use --batch-size instead"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size=4", "use --mini-batch-size instead"),
        ("critic.ppo_mini_batch_size=4", "use --mini-batch-size instead"),
        (
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "use --micro-batch-size (or leave micro-batches to the planner: --plan auto) instead",
        ),
        (
            "actor_rollout_ref.ref.log_prob_micro_batch_size=16",
            "use --micro-batch-size (or leave micro-batches to the planner: --plan auto) instead",
        ),
        (
            "critic.forward_micro_batch_size_per_gpu=8",
            "use --micro-batch-size (or leave micro-batches to the planner: --plan auto) instead",
        ),
        ("data.max_response_length=1024", "use --max-response-length instead"),
        ("actor_rollout_ref.rollout.prompt_length=128", "use --max-prompt-length instead"),
        ("actor_rollout_ref.rollout.n=8", "use --samples (with --algo grpo) instead"),
        (
            "critic.model.enable_gradient_checkpointing=False",
            "use --gradient-checkpointing / --no-gradient-checkpointing instead",
        ),
        ("actor_rollout_ref.ref.fsdp_config.param_offload=False", "use --offload none|optimizer|all instead"),
        (
            "trainer.total_epochs=3",
            "use --steps or --epochs (the progress display, --resume and report count against them) instead",
        ),
        # what the plan sizes and run.json records, and the run directory's layout (new-user trial: accepted before, the
        # plan sized the 0.5B PPO, run.json said ppo, and --resume/export looked in RUN/checkpoints)
        (
            "actor_rollout_ref.model.path=/other",
            "use --model (the planner sizes the model it reads; actor, reference and critic start from it) instead",
        ),
        (
            "critic.model.path=/other",
            "use --model (the planner sizes the model it reads; actor, reference and critic start from it) instead",
        ),
        (
            "algorithm.adv_estimator=grpo",
            (
                "use --algo ppo|grpo (the planner counts the critic, the reference model and the samples it implies)"
                " instead"
            ),
        ),
        (
            "actor_rollout_ref.actor.use_kl_loss=True",
            (
                "use --algo ppo|grpo (the planner counts the critic, the reference model and the samples it implies)"
                " instead"
            ),
        ),
        (
            "algorithm.use_kl_in_reward=True",
            (
                "use --algo ppo|grpo (the planner counts the critic, the reference model and the samples it implies)"
                " instead"
            ),
        ),
        (
            "trainer.default_local_dir=/tmp/x",
            "use --run-dir (checkpoints go to RUN_DIR/checkpoints, where --resume, report and export look) instead",
        ),
        (
            "trainer.resume_mode=auto",
            "use --resume RUN_DIR (continues from RUN_DIR/checkpoints; a new run starts from step 0) instead",
        ),
        (
            "data.train_files=/d/train.parquet",
            (
                "use --data (a directory with train.parquet and test.parquet; the step count and the batch check read"
                " it) instead"
            ),
        ),
        (
            "data.val_files=/d/test.parquet",
            (
                "use --data (a directory with train.parquet and test.parquet; the step count and the batch check read"
                " it) instead"
            ),
        ),
        ("trainer.n_gpus_per_node=2", "use --gpus (the batch is checked against every GPU) instead"),
        (
            "actor_rollout_ref.rollout.gpu_memory_utilization=0.9",
            (
                "use the profile (its vLLM share of the card, which the planner counts; --gpu-memory-limit scales it)"
                " instead"
            ),
        ),
        ("trainer.save_freq=5", "use --save-freq instead"),
        ("trainer.test_freq=5", "use --test-freq instead"),
        ("trainer.max_critic_ckpt_to_keep=3", "use --keep-checkpoints (0, or 2 and more) instead"),
        ("trainer.val_before_train=False", "use --no-validate-before-train instead"),
    ],
)
def test_raw_overrides_of_what_verlfit_checks_are_refused_with_the_option_to_use(override, fix):
    from verlfit.errors import VerlfitError

    with pytest.raises(VerlfitError) as caught:
        prepare_launch(parse(["--profile", "p40", "--plan", "off", "--dry-run", "--", override]), environ={}, gpu=None)
    assert f"override {override!r}: verlfit sets" in caught.value.message
    assert caught.value.fix == fix


def test_a_managed_batch_size_after_the_separator_is_refused_by_the_command(capsys):
    """issue 16 item 2: `verlfit train --dry-run --profile p40 -- data.train_batch_size=8` was accepted while the
    header,
    the plan and verl's mini-batch check all used 32."""
    assert cli.main(["train", "--dry-run", "--profile", "p40", "--", "data.train_batch_size=8"]) == 2
    err = capsys.readouterr().err
    assert "override 'data.train_batch_size=8': verlfit sets data.train_batch_size itself" in err
    assert "fix: use --batch-size instead" in err


def test_the_bypass_of_the_trial_is_refused_by_the_command(capsys):
    """new-user trial: `--dry-run -- actor_rollout_ref.model.path=/other algorithm.adv_estimator=grpo
    trainer.default_local_dir=/tmp/x` exited 0 with a plan for the 0.5B PPO; the first such key is refused."""
    assert (
        cli.main(
            [
                "train",
                "--profile",
                "p40",
                "--dry-run",
                "--",
                "actor_rollout_ref.model.path=/other",
                "algorithm.adv_estimator=grpo",
                "trainer.default_local_dir=/tmp/x",
            ]
        )
        == 2
    )
    assert (
        "override 'actor_rollout_ref.model.path=/other': verlfit sets actor_rollout_ref.model.path itself"
        in capsys.readouterr().err
    )


def test_every_option_the_managed_keys_name_is_a_real_train_option():
    """The fix of each managed key names options `verlfit train --help` has (a renamed flag would make the fix a
    lie)."""
    import re

    from verlfit.overrides import MANAGED_KEYS

    train = cli.build_parser().commands["train"]
    flags = {flag for action in train._actions for flag in action.option_strings}
    named = {flag for option in MANAGED_KEYS.values() for flag in re.findall(r"--[a-z][a-z0-9-]*", option)}
    assert sorted(named - flags) == []
    assert {
        "--model",
        "--algo",
        "--data",
        "--run-dir",
        "--resume",
        "--save-freq",
        "--test-freq",
        "--keep-checkpoints",
        "--no-validate-before-train",
        "--gpus",
        "--nodes",
    } <= named


@pytest.mark.parametrize("option", ["--save-freq", "--test-freq"])
def test_a_frequency_of_0_means_never_as_in_verl_and_the_help_says_so(option, capsys):
    """new-user trial: 0 was accepted while the help named only -1 for never; verl 0.4.1 saves and validates only
    above 0 (ray_trainer.py:1151, :1158), so 0 and -1 are documented as never and lower values refused."""
    action = next(a for a in cli.build_parser().commands["train"]._actions if option in a.option_strings)
    assert action.help.endswith("(default: 25; 0 or -1: never, as verl treats any value <= 0)")
    for value in ("0", "-1", "5"):
        plan = prepare_launch(
            parse(["--profile", "p40", "--plan", "off", "--dry-run", option, value]), environ={}, gpu=None
        )
        assert f"trainer.{option[2:].replace('-', '_')}={value}" in plan.overrides
    with pytest.raises(SystemExit):
        parse([option, "-2"])
    assert (
        f"argument {option}: -2 must be a number of steps (1 or more), or 0 or -1 for never" in capsys.readouterr().err
    )


def test_the_stall_timeout_help_says_0_never_stops():
    action = next(a for a in cli.build_parser().commands["train"]._actions if "--stall-timeout" in a.option_strings)
    assert "(default, or 0: never stop;" in action.help
    assert parse(["--stall-timeout", "0"]).stall_timeout == 0


@pytest.mark.parametrize(
    "option, fix",
    [
        ("--data", "pass a directory with train.parquet and test.parquet, or raw GSM8K files"),
        ("--run-dir", "pass a directory that does not exist yet: verlfit creates it"),
    ],
)
def test_a_data_or_run_directory_that_is_a_file_is_refused_by_the_dry_run(option, fix, tmp_path, capsys):
    """new-user trial: `train --dry-run --run-dir FILE` (or --data FILE) printed a plan and exited 0."""
    existing = tmp_path / "notes.txt"
    existing.write_text("x")
    assert cli.main(["train", "--profile", "p40", "--plan", "off", "--dry-run", option, str(existing)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"verlfit: error: {option} {existing} is a file: it must be a directory\n  fix: {fix}\n"


def test_a_run_directory_in_a_folder_one_cannot_write_is_refused_by_the_dry_run(tmp_path, capsys, monkeypatch):
    """new-user trial: `train --dry-run --run-dir` under a folder the user cannot write printed a plan and exited 0;
    the launch then failed creating it. The tests run as root, who may write anywhere: os.access answers for a user
    without the write bit, os.statvfs for a read-only mount."""
    import os

    locked = tmp_path / "locked"
    locked.mkdir()
    real_access, real_statvfs = os.access, os.statvfs
    monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path) == locked else real_access(path, mode))
    argv = ["train", "--profile", "p40", "--plan", "off", "--dry-run", "--run-dir"]
    fix = "pass --run-dir a folder under one you can write (e.g. ./runs/NAME; in the image, under the mounted /runs)"
    assert cli.main([*argv, str(locked / "runs" / "a")]) == 2
    assert capsys.readouterr() == (
        "",
        (
            f"verlfit: error: --run-dir {locked / 'runs' / 'a'} cannot be written: {locked}, the folder it would be"
            f" created in, is not writable by this user\n  fix: {fix}\n"
        ),
    )
    assert cli.main([*argv, str(locked)]) == 2
    assert f"--run-dir {locked} cannot be written: it is not writable by this user" in capsys.readouterr().err

    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(os, "statvfs", lambda path: ReadOnly() if Path(path) == tmp_path else real_statvfs(path))
    assert cli.main([*argv, str(tmp_path / "run")]) == 2
    assert f"cannot be written: {tmp_path}, the folder it would be created in, is on a read-only file system" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "run").exists() and not (locked / "runs").exists()


@pytest.mark.skipif(not Path("/proc/self/mountinfo").is_file(), reason="no /proc/self/mountinfo (not Linux)")
def test_a_run_directory_on_a_pseudo_file_system_is_refused_by_the_dry_run(capsys):
    """new-user trial: `train --dry-run --run-dir /proc/x` run as root printed a plan and exited 0: os.access lets
    root write anywhere and /proc is not mounted read-only; the launch could not have created it."""
    argv = ["train", "--profile", "p40", "--plan", "off", "--dry-run", "--run-dir", "/proc/x"]
    assert cli.main(argv) == 2
    assert capsys.readouterr() == (
        "",
        (
            "verlfit: error: --run-dir /proc/x cannot be written: /proc, the folder it would be created in, is on proc,"
            " a pseudo file system the kernel fills with its own state: it holds no run's files\n  fix: pass --run-dir"
            " a folder under one you can write (e.g. ./runs/NAME; in the image, under the mounted /runs)\n"
        ),
    )


def test_tensorboard_without_its_package_is_a_note_in_the_dry_run_and_a_refusal_at_launch(
    tmp_path, capsys, monkeypatch
):
    """new-user trial: the dry run stopped with exit 1 on a machine without tensorboard, where the README says what
    depends on the machine is a note (the dry run exits 0); the launch still refuses it before verl starts."""
    import importlib.util

    from verlfit.errors import VerlfitError

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real_find_spec(name, *a)
    )
    argv = ["train", "--profile", "p40", "--plan", "off", "--tensorboard", "--run-dir", str(tmp_path / "run")]
    assert cli.main([*argv, "--dry-run"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "note: a real run would refuse --tensorboard here: the tensorboard package is not installed (verl 0.4.1 writes"
        " through torch.utils.tensorboard.SummaryWriter; pip install tensorboard)" in out
    )
    assert f"TENSORBOARD_DIR={tmp_path / 'run' / 'tensorboard'}" in out
    with pytest.raises(VerlfitError, match="^--tensorboard needs the tensorboard package, which is not installed here"):
        prepare_launch(parse([*argv[1:]]), detect_gpu=False)


def test_the_managed_keys_are_listed_in_the_help_by_option():
    text = cli.build_parser().commands["train"].format_help()
    assert "  --batch-size: data.train_batch_size\n" in text
    assert "  --mini-batch-size: actor_rollout_ref.actor.ppo_mini_batch_size, critic.ppo_mini_batch_size\n" in text


def test_resume_may_keep_fewer_checkpoints(tmp_path):
    plan = prepare_launch(
        parse(["--profile", "p40", "--plan", "off", "--run-dir", str(tmp_path / "r"), "--keep-checkpoints", "0"]),
        environ={},
        gpu=P40,
    )
    run_dir = create_run_directory(plan, None)
    fake_checkpoint(run_dir, 25)
    assert "trainer.max_actor_ckpt_to_keep=null" in resume_plan(run_dir).overrides
    resumed = resume_plan(run_dir, keep_checkpoints=3)
    assert (
        "trainer.max_actor_ckpt_to_keep=3" in resumed.overrides
        and "trainer.max_critic_ckpt_to_keep=3" in resumed.overrides
    )
    assert "trainer.max_actor_ckpt_to_keep=null" not in resumed.overrides and resumed.settings.keep_checkpoints == 3


def test_dry_run_fails_as_a_real_run_would_on_a_training_set_smaller_than_one_batch(tmp_path, capsys):
    """new-user trial: `--data DIR --batch-size 10000` with 7473 rows printed a plan that "fits" (a note said a real
    run would refuse it, and the exit status was 0); the dry run now fails with the launch's own refusal."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"prompt": [str(i) for i in range(7473)]}), tmp_path / "data" / "train.parquet")
    assert (
        cli.main(
            [
                "train",
                "--profile",
                "p40",
                "--dry-run",
                "--batch-size",
                "10000",
                "--data",
                str(tmp_path / "data"),
                "--run-dir",
                str(tmp_path / "r"),
            ]
        )
        == 2
    )
    out, err = capsys.readouterr()
    assert out == ""  # no plan verdict, estimate or command for a run that cannot start
    assert (
        err == f"verlfit: error: {tmp_path / 'data' / 'train.parquet'} has 7473 rows, fewer than one batch of 10000"
        " prompts\n  fix: use --batch-size 7473 or less, or more data\n"
    )


def test_dry_run_counts_the_steps_an_epoch_takes_when_the_data_is_there(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    from fakes import write_raw_gsm8k

    pq.write_table(pa.table({"prompt": [str(i) for i in range(7473)]}), tmp_path / "data" / "train.parquet")
    # a train.parquet alone, not in verl's format: counted, then refused as the real launch refuses it
    # (exit 2; it was 0)
    assert (
        cli.main(
            [
                "train",
                "--profile",
                "p40",
                "--plan",
                "off",
                "--dry-run",
                "--epochs",
                "2",
                "--data",
                str(tmp_path / "data"),
                "--run-dir",
                str(tmp_path / "r"),
            ]
        )
        == 2
    )
    out, err = capsys.readouterr()
    # 2 x 233 whole batches
    assert "\nsteps: 466 (2 epoch(s) of 7473 rows // 32 prompts a batch)    batch: 32 prompts" in out
    assert err.startswith(
        f"verlfit: error: a real launch would refuse this run: data {tmp_path / 'data'} (the notes above say why)\n"
    )
    assert (
        cli.main(
            [
                "train",
                "--profile",
                "p40",
                "--plan",
                "off",
                "--dry-run",
                "--data",
                write_raw_gsm8k(tmp_path / "raw"),
                "--run-dir",
                str(tmp_path / "r"),
            ]
        )
        == 0
    )
    assert "\nsteps: 1 epoch(s)    batch: 32 prompts" in capsys.readouterr().out  # not prepared yet: nothing to count


def test_a_memory_limit_below_one_gib_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        parse(["--gpu-memory-limit", "1e-9"])
    assert "argument --gpu-memory-limit: 1e-9 GiB is less than 1 GiB" in capsys.readouterr().err


@pytest.mark.parametrize(
    "given, read_as",
    [
        ("1e9", "; read as bytes, 1e9 would be 0.93 GiB"),
        ("24576", "; read as MiB, 24576 would be 24 GiB"),
        ("142", ""),
    ],
)
def test_a_memory_limit_above_every_known_card_is_refused_with_the_unit_and_the_range(capsys, given, read_as):
    # new-user trial: --gpu-memory-limit 1e9 (bytes, most likely) passed the dry run with only a note
    with pytest.raises(SystemExit):
        parse(["--gpu-memory-limit", given])
    assert (
        f"argument --gpu-memory-limit: {given} GiB is more than any GPU verlfit knows has (the largest, H200, 141 GB):"
        f" the value is in GiB (2**30 bytes) per GPU, from 1 to 141 (a P40 leaves 22.5){read_as}\n"
        in capsys.readouterr().err
    )
    # the legal range still parses, its ends included
    assert [parse(["--gpu-memory-limit", value]).gpu_memory_limit for value in ("1", "22.5", "141")] == [
        1.0,
        22.5,
        141.0,
    ]


@pytest.mark.parametrize("batch, mini", [(32, 16), (2, 1), (1, 1), (5, 5), (9, 9)])
def test_the_default_mini_batch_always_divides_the_batch(batch, mini):
    plan = prepare_launch(parse(["--profile", "p40", "--dry-run", "--batch-size", str(batch)]), environ={}, gpu=None)
    assert plan.settings.ppo_mini_batch_size == mini


def test_nodes_reach_verl_and_the_planner():
    plan = prepare_launch(parse(["--profile", "p40", "--dry-run", "--nodes", "2", "--gpus", "1"]), environ={}, gpu=None)
    assert "trainer.nnodes=2" in plan.overrides and "trainer.n_gpus_per_node=1" in plan.overrides
    assert plan.settings.nodes == 2


def test_vllm_share_is_scaled_to_the_memory_limit_on_a_bigger_card():
    plan = prepare_launch(parse(["--emulate", "a10", "--plan", "off"]), environ={}, gpu=H200)
    share = round(0.35 * 22.0 * 1024**3 / H200.total_memory_bytes, 4)
    assert f"actor_rollout_ref.rollout.gpu_memory_utilization={share}" in plan.overrides
    assert "actor_rollout_ref.rollout.gpu_memory_utilization=0.35" not in plan.overrides
    assert share == 0.0548


def test_resume_refuses_a_run_that_is_still_training_and_steps_behind_its_checkpoint(tmp_path):
    import subprocess
    import sys

    from verlfit.errors import VerlfitError

    plan = prepare_launch(
        parse(["--profile", "p40", "--plan", "off", "--run-dir", str(tmp_path / "r")]), environ={}, gpu=P40
    )
    run_dir = create_run_directory(plan, None)
    fake_checkpoint(run_dir, 10)
    with pytest.raises(VerlfitError, match="the newest checkpoint of .* is already at step 10"):
        resume_plan(run_dir, steps=10)
    assert "trainer.total_training_steps=11" in resume_plan(run_dir, steps=11).overrides
    # a live process whose command line names verlfit, recorded as the run's pid
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "verlfit"])
    try:
        # until the child has exec'd, /proc shows pytest's command line (the test raced on this)
        cmdline = Path(f"/proc/{alive.pid}/cmdline")
        for _ in range(500):
            if b"verlfit" in cmdline.read_bytes():
                break
            time.sleep(0.01)
        record = json.loads((run_dir / "run.json").read_text())
        (run_dir / "run.json").write_text(json.dumps({**record, "pid": alive.pid}))
        with pytest.raises(VerlfitError, match=f"is still being trained by process {alive.pid}"):
            resume_plan(run_dir)
    finally:
        alive.kill()
        alive.wait()
    assert resume_plan(run_dir).notes == ["resuming from the checkpoint of step 10"]  # the process is gone


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--batch-size", "6", "--micro-batch-size", "2"], "fix: use a micro-batch size that divides 3: 1, 3"),
        (
            ["--batch-size", "1", "--algo", "grpo", "--samples", "2", "--gpus", "2"],
            "the batch of 1 prompt does not split over 2 GPUs",
        ),
        (["--run-dir", "runs/r${HOME}x"], "holds ${, which verl's Hydra/OmegaConf config would rewrite"),
        (["--run-dir", "runs/r\\un"], "holds a backslash, which verl's Hydra/OmegaConf config would rewrite"),
    ],
)
def test_sizes_and_paths_verl_cannot_take_are_refused_with_the_fix(argv, fragment, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "--profile", "p40", "--dry-run", *argv]) == 2
    assert fragment in capsys.readouterr().err


def test_a_memory_limit_variable_below_one_gib_is_refused():
    from verlfit.errors import VerlfitError

    with pytest.raises(VerlfitError, match="VERLFIT_GPU_MEMORY_LIMIT_GIB='1e-9' is not a number of GiB from 1 up"):
        prepare_launch(
            parse(["--profile", "p40", "--plan", "off", "--dry-run"]),
            environ={"VERLFIT_GPU_MEMORY_LIMIT_GIB": "1e-9"},
            gpu=None,
        )
    # above every card verlfit knows: bytes for GiB, as --gpu-memory-limit says
    with pytest.raises(VerlfitError) as error:
        prepare_launch(
            parse(["--profile", "p40", "--plan", "off", "--dry-run"]),
            environ={"VERLFIT_GPU_MEMORY_LIMIT_GIB": "24e9"},
            gpu=None,
        )
    assert (error.value.message, error.value.fix) == (
        (
            "VERLFIT_GPU_MEMORY_LIMIT_GIB='24e9' is more than any GPU verlfit knows has (the largest, H200, 141 GB):"
            " the value is in GiB (2**30 bytes) per GPU, from 1 to 141 (a P40 leaves 22.5); read as bytes, 24e9 would"
            " be 22 GiB"
        ),
        "unset it, or use --gpu-memory-limit GIB (e.g. VERLFIT_GPU_MEMORY_LIMIT_GIB=22.5)",
    )


def test_samples_without_grpo_is_refused(capsys):
    assert cli.main(["train", "--profile", "p40", "--dry-run", "--samples", "8"]) == 2
    assert "--samples 8 with --algo ppo: PPO samples one response per prompt" in capsys.readouterr().err


def test_a_kept_micro_batch_that_cannot_fit_is_named_as_the_first_fix():
    from verlfit.errors import VerlfitError

    with pytest.raises(VerlfitError) as error:
        prepare_launch(parse(["--emulate", "p40", "--micro-batch-size", "16"]), environ={}, gpu=H200)
    assert error.value.message.startswith(
        "this configuration does not fit in 22.5 GiB per GPU even with gradient checkpointing and offload at the"
        " micro-batches you set: old log-prob at log-prob micro-batch 32 (kept) would need 27.5 GiB of 20.2 GiB (90% of"
        " 22.5 GiB)"
    )
    # the plan's peak phase, the one its peak line names (log-prob runs at twice --micro-batch-size), not the first knob
    # tried
    # what auto-fit picks for this run without --micro-batch-size (the main job's actor micro-batch 4)
    assert error.value.fix.startswith(
        "smallest changes that would fit, each on its own: --micro-batch-size 4 (from 16), or leave it out for the"
        " planner to choose; --max-response-length "
    )
    chosen = prepare_launch(parse(["--emulate", "p40"]), environ={}, gpu=H200).settings
    assert chosen.actor_micro_batch_size == 4


def test_a_kept_micro_batch_whose_log_prob_pass_cannot_fit_names_that_pass_not_the_same_value():
    # GRPO at 1024 response tokens on the P40: the actor's micro-batch 4 fits, the log-prob pass at twice it does not;
    # auto-fit would keep 4 for the actor and run the log-prob at 4, so "--micro-batch-size 4 (from 4)" would be no fix
    argv = ["--emulate", "p40", "--algo", "grpo", "--micro-batch-size", "4", "--max-response-length", "1024"]
    with pytest.raises(VerlfitError) as error:
        prepare_launch(parse(argv), environ={}, gpu=H200)
    assert error.value.message.endswith(
        "old log-prob at log-prob micro-batch 8 (kept) would need 21.4 GiB of 20.2 GiB (90% of 22.5 GiB)"
    )
    assert error.value.fix.startswith(
        "smallest changes that would fit, each on its own: leave the micro-batch sizes you gave out for the planner"
        " to choose (its choice: actor 4, log-prob 4); --max-response-length 928 (from 1024); "
    )
    chosen = prepare_launch(parse([*argv[:4], *argv[6:]]), environ={}, gpu=H200).settings
    assert (chosen.actor_micro_batch_size, chosen.log_prob_micro_batch_size) == (4, 4)


def test_resume_with_an_empty_path_is_refused_not_taken_for_a_new_run(capsys):
    status = cli.main(["train", "--resume", "", "--dry-run"])
    assert status == 2
    assert "verlfit: error: --resume was given an empty path" in capsys.readouterr().err


def test_an_unknown_option_is_reported_with_the_subcommands_usage(capsys):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["train", "--bogus", "--dry-run"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: verlfit train ") and err.endswith(
        "verlfit train: error: unrecognized arguments: --bogus\n"
    )


def test_a_run_sized_by_epochs_that_finished_is_refused_too(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from verlfit.errors import VerlfitError

    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(pa.table({"x": list(range(70))}), data / "train.parquet")  # 70 rows // batch 32 = 2 steps an epoch
    plan = prepare_launch(
        parse(
            [
                "--profile",
                "p40",
                "--plan",
                "off",
                "--data",
                str(data),
                "--run-dir",
                str(tmp_path / "r"),
                "--epochs",
                "2",
            ]
        ),
        environ={},
        gpu=P40,
    )
    run_dir = create_run_directory(plan, None)
    assert json.loads((run_dir / "run.json").read_text())["total_steps"] is None  # recorded without --steps
    fake_checkpoint(run_dir, 3)
    assert resume_plan(run_dir).notes == ["resuming from the checkpoint of step 3"]
    fake_checkpoint(run_dir, 4)
    with pytest.raises(VerlfitError, match="has finished: its newest checkpoint is step 4 of its 4 steps"):
        resume_plan(run_dir)


def test_an_unknown_option_before_the_command_is_the_top_parsers(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--bogus", "train", "--dry-run"])
    assert capsys.readouterr().err.endswith("verlfit: error: unrecognized arguments: --bogus\n")


@pytest.mark.parametrize(
    "argv, fix",
    [
        # issue 16 item 7: the profile was passed; what makes it run without a GPU is --dry-run
        (
            ["--profile", "p40", "--data", "D", "--steps", "2"],
            "run `verlfit doctor`; for a dry run without a GPU add --dry-run",
        ),
        (["--emulate", "p40", "--steps", "2"], "run `verlfit doctor`; for a dry run without a GPU add --dry-run"),
        (
            ["--profile", "auto", "--dry-run"],
            "run `verlfit doctor`; for a dry run without a GPU pass --dry-run with --profile p40 or --profile a10",
        ),
    ],
)
def test_no_gpu_fix_names_what_is_missing(argv, fix, monkeypatch):
    from verlfit import gpu
    from verlfit.errors import VerlfitError

    from verlfit.train import gpus as train_gpus  # the name train's GPU lookup calls

    monkeypatch.setattr(
        train_gpus,
        "query_gpus",
        lambda nvml=None: gpu.GpuReport(
            gpus=[], driver_version=None, cuda_driver_version=None, error="no NVIDIA GPU visible: NVML could not start"
        ),
    )
    with pytest.raises(VerlfitError) as caught:
        prepare_launch(parse(argv), environ={})
    assert (caught.value.message, caught.value.fix) == ("no NVIDIA GPU visible: NVML could not start", fix)


def test_the_plan_verdict_comes_with_the_estimated_run_time():
    from verlfit.model_shape import load_model_shape
    from verlfit.plan import time as plan_time
    from verlfit.plan.request import request_from_settings
    from verlfit.profiles import load_profile

    plan = prepare_launch(parse(["--emulate", "p40", "--steps", "200"]), environ={}, gpu=H200)
    request = request_from_settings(
        plan.settings, load_profile("p40"), 24 * 1024**3, shape=load_model_shape(plan.settings.model)
    )
    # the p40 profile's speed keys (patches 0020-0022) are part of what the estimate models
    inputs = plan_time.TimeInputs(save_freq=plan.settings.save_freq, **speed_switches(load_profile("p40").overrides))
    on_h200, on_p40 = (plan_time.estimate(request, card, inputs).step_seconds for card in ("h200", "p40"))
    # below an hour in minutes (a new-user trial read "2 steps = 0.00 h"), above it in hours
    assert on_h200 * 200 < 3600 < on_p40 * 200
    assert (
        f"plan: estimated time on H200: {on_h200:.1f} s/step, 200 steps = {round(on_h200 * 200 / 60)} min (estimate"
        " calibrated on recorded H200 runs (benchmarks/calibrate_time.py))" in plan.notes
    )
    assert (
        f"plan: estimated time on Tesla P40: {on_p40:.1f} s/step, 200 steps = {on_p40 * 200 / 3600:.1f} h"
        " (datasheet-based estimate, unverified on a real card)" in plan.notes
    )


# ---------------------------------------------------------------------------------------------- LoRA (issue 12)

LORA_ACTOR = [
    "actor_rollout_ref.model.lora_rank=32",
    "actor_rollout_ref.model.lora_alpha=16",
    "actor_rollout_ref.model.target_modules=all-linear",
]
LORA_CRITIC = ["critic.model.lora_rank=32", "critic.model.lora_alpha=16", "critic.model.target_modules=all-linear"]


def _lora_keys(overrides):
    return [o for o in overrides if ".lora_" in o or ".target_modules=" in o]


def test_dry_run_with_lora_prints_verls_lora_keys_for_actor_and_critic_without_a_gpu(capsys, monkeypatch, tmp_path):
    from fakes import write_raw_gsm8k

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    assert (
        cli.main(
            ["train", "--dry-run", "--profile", "p40", "--lora-rank", "32", "--data", write_raw_gsm8k(tmp_path / "raw")]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "LoRA: actor rank 32, critic rank 32 (0 = fully trained), alpha 16, target modules all-linear" in out
    for key in LORA_ACTOR + LORA_CRITIC:
        assert f"    {key} \\\n" in out
    # notes are wrapped at 110 columns (issue 28): read them with the line breaks undone
    assert (
        "note: plan: LoRA actor: rank 32 on q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj: 17,596,416"
        " parameters train (3.56% of 494,032,768: adapters)" in " ".join(out.split())
    )


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--lora-rank", "32"], LORA_ACTOR + LORA_CRITIC),
        (["--lora-rank", "32", "--algo", "grpo"], LORA_ACTOR),
        (["--lora-rank", "32", "--critic-lora-rank", "0"], LORA_ACTOR),
        (
            ["--critic-lora-rank", "8", "--lora-alpha", "32"],
            ["critic.model.lora_rank=8", "critic.model.lora_alpha=32", "critic.model.target_modules=all-linear"],
        ),
        (
            [
                "--lora-rank",
                "64",
                "--lora-alpha",
                "0.5",
                "--lora-target-modules",
                "q_proj,v_proj,o_proj",
                "--algo",
                "grpo",
            ],
            [
                "actor_rollout_ref.model.lora_rank=64",
                "actor_rollout_ref.model.lora_alpha=0.5",
                "actor_rollout_ref.model.target_modules=[q_proj,v_proj,o_proj]",
            ],
        ),
        ([], []),  # full fine-tuning: verl's defaults, no LoRA keys
    ],
)
def test_lora_options_become_verls_keys_validated_by_hydra(argv, expected):
    plan = prepare_launch(parse(["--profile", "p40", "--plan", "off", *argv]), environ={}, gpu=P40)
    assert _lora_keys(plan.overrides) == expected
    # prepare_launch composed them with Hydra against verl's yaml; the config PEFT gets:
    from verlfit.overrides import validate_overrides

    config = validate_overrides(plan.overrides)
    if expected and expected[0].startswith("actor_rollout_ref"):
        assert config.actor_rollout_ref.model.lora_rank == int(expected[0].split("=")[1])


def test_lora_target_list_reaches_peft_as_a_list():
    from omegaconf import OmegaConf

    from verlfit.overrides import validate_overrides

    plan = prepare_launch(
        parse(["--profile", "p40", "--plan", "off", "--lora-rank", "8", "--lora-target-modules", "q_proj,v_proj"]),
        environ={},
        gpu=P40,
    )
    config = validate_overrides(plan.overrides)
    assert OmegaConf.to_container(config.actor_rollout_ref.model.target_modules) == ["q_proj", "v_proj"]
    assert OmegaConf.to_container(config.critic.model.target_modules) == ["q_proj", "v_proj"]


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--algo", "grpo", "--critic-lora-rank", "8"], "--critic-lora-rank 8 with --algo grpo: GRPO has no critic"),
        (
            ["--lora-alpha", "32"],
            "--lora-alpha without LoRA: every parameter trains, so there is no adapter to apply it to",
        ),
        (["--lora-rank", "8", "--critic-lora-rank", "0", "--algo", "grpo"], "--critic-lora-rank 0 with --algo grpo"),
        (
            ["--lora-rank", "0", "--lora-target-modules", "q_proj", "--lora-alpha", "8"],
            "--lora-alpha and --lora-target-modules without LoRA",
        ),
    ],
)
def test_lora_options_that_do_not_go_together_are_refused(argv, fragment, capsys):
    assert cli.main(["train", "--dry-run", "--profile", "p40", *argv]) == 2
    assert fragment in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--lora-rank", "-1"], "argument --lora-rank: -1 must be 0 (full fine-tuning) or more"),
        (["--lora-rank", "eight"], "argument --lora-rank: 'eight' is not a whole number"),
        (
            ["--lora-target-modules", "q_proj,,v_proj"],
            "argument --lora-target-modules: 'q_proj,,v_proj' is not all-linear or a comma-separated list",
        ),
        (["--lora-alpha", "0"], "argument --lora-alpha: 0 must be a positive, finite number"),
    ],
)
def test_bad_lora_values_are_refused_by_the_parser(argv, fragment, capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(["train", "--dry-run", "--profile", "p40", *argv])
    assert exit.value.code == 2
    assert fragment in capsys.readouterr().err


@pytest.mark.parametrize(
    "override, option",
    [
        ("actor_rollout_ref.model.lora_rank=8", "--lora-rank"),
        ("actor_rollout_ref.model.lora_alpha=8", "--lora-alpha"),
        ("critic.model.lora_rank=8", "--critic-lora-rank"),
        ("critic.model.target_modules=[q_proj]", "--lora-target-modules"),
    ],
)
def test_raw_lora_overrides_are_refused_naming_the_option(override, option, capsys):
    assert cli.main(["train", "--dry-run", "--profile", "p40", "--", override]) == 2
    assert f"use {option} instead" in capsys.readouterr().err


def test_lora_settings_are_recorded_and_resume_keeps_them(tmp_path, capsys):
    args = parse(
        [
            "--profile",
            "p40",
            "--plan",
            "off",
            "--run-dir",
            str(tmp_path / "r"),
            "--steps",
            "4",
            "--lora-rank",
            "16",
            "--lora-target-modules",
            "q_proj,v_proj,o_proj",
        ]
    )
    plan = prepare_launch(args, environ={}, gpu=P40)
    run_dir = create_run_directory(plan, None)
    settings = json.loads((run_dir / "run.json").read_text())["settings"]
    assert (
        settings["lora_rank"],
        settings["critic_lora_rank"],
        settings["lora_alpha"],
        settings["lora_target_modules"],
    ) == (16, 16, 16, ["q_proj", "v_proj", "o_proj"])
    fake_checkpoint(run_dir, 2)
    resumed = resume_plan(run_dir)
    assert _lora_keys(resumed.overrides) == [
        "actor_rollout_ref.model.lora_rank=16",
        "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.model.target_modules=[q_proj,v_proj,o_proj]",
        "critic.model.lora_rank=16",
        "critic.model.lora_alpha=16",
        "critic.model.target_modules=[q_proj,v_proj,o_proj]",
    ]
    assert (resumed.settings.lora_rank, resumed.settings.critic_lora_rank) == (16, 16)
    # the planner reads the recorded list back as PEFT's names
    from verlfit.plan.request import request_from_settings
    from verlfit.profiles import load_profile

    assert request_from_settings(resumed.settings, load_profile("p40"), 22 * 1024**3).lora_target_modules == (
        "q_proj",
        "v_proj",
        "o_proj",
    )
    # changing LoRA on resume is a change of settings
    assert cli.main(["train", "--resume", str(run_dir), "--lora-rank", "8", "--dry-run"]) == 2
    assert "--lora-rank cannot be given with it" in capsys.readouterr().err


def test_the_lora_flags_are_in_both_helps(capsys):
    for command in ("train", "plan"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        out = capsys.readouterr().out
        for flag in ("--lora-rank N", "--lora-alpha A", "--lora-target-modules NAMES", "--critic-lora-rank N"):
            assert flag in out, (command, flag)
        assert "default: 16, verl's own" in " ".join(out.split())


def test_lora_keeps_a_profiles_cuda_graph_decoding_unless_the_user_turns_it_off():
    """The p40 profile turns CUDA-graph decoding on; with LoRA it stays on (greedy tokens as generate's with an adapter
    on the GPU: tests/gpu/test_cuda_graph_lora.py), with no note; the user's override after -- turns it off."""

    def cuda_graph(plan):
        return [o for o in plan.overrides if "cuda_graph" in o]

    full = prepare_launch(parse(["--profile", "p40", "--plan", "off"]), environ={}, gpu=P40)
    assert cuda_graph(full) == ["+actor_rollout_ref.rollout.cuda_graph=True"]
    lora = prepare_launch(parse(["--profile", "p40", "--plan", "off", "--lora-rank", "32"]), environ={}, gpu=P40)
    assert cuda_graph(lora) == ["+actor_rollout_ref.rollout.cuda_graph=True"]
    assert not [note for note in lora.notes if "CUDA-graph" in note]
    off = prepare_launch(
        parse(
            [
                "--profile",
                "p40",
                "--plan",
                "off",
                "--lora-rank",
                "32",
                "--",
                "+actor_rollout_ref.rollout.cuda_graph=False",
            ]
        ),
        environ={},
        gpu=P40,
    )
    assert cuda_graph(off) == ["+actor_rollout_ref.rollout.cuda_graph=False"]
    assert not [note for note in off.notes if "CUDA-graph" in note]


def test_dry_run_shows_the_p40_profiles_cuda_graph_decoding_and_several_gpus_turn_it_off_with_a_note(
    capsys, monkeypatch, tmp_path
):
    # issue 13's "what must show": the dry run's verl command carries the key
    from fakes import write_raw_gsm8k
    from verlfit.overrides import CUDA_GRAPH_SEVERAL_GPUS_NOTE

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("VERLFIT_PROFILE", raising=False)
    assert (
        cli.main(
            [
                "train",
                "--profile",
                "p40",
                "--dry-run",
                "--steps",
                "3",
                "--plan",
                "off",
                "--data",
                write_raw_gsm8k(tmp_path / "raw"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "+actor_rollout_ref.rollout.cuda_graph=True" in out and "cuda_graph=False" not in out
    assert CUDA_GRAPH_SEVERAL_GPUS_NOTE not in out
    two = prepare_launch(
        parse(["--profile", "p40", "--plan", "off", "--gpus", "2"]), environ={}, gpu=P40, detect_gpu=False
    )
    assert [o for o in two.overrides if "cuda_graph" in o] == ["+actor_rollout_ref.rollout.cuda_graph=False"]
    assert CUDA_GRAPH_SEVERAL_GPUS_NOTE in two.notes
    forced = prepare_launch(
        parse(["--profile", "p40", "--plan", "off", "--gpus", "2", "--", "+actor_rollout_ref.rollout.cuda_graph=True"]),
        environ={},
        gpu=P40,
        detect_gpu=False,
    )
    assert [o for o in forced.overrides if "cuda_graph" in o] == ["+actor_rollout_ref.rollout.cuda_graph=True"]
    assert CUDA_GRAPH_SEVERAL_GPUS_NOTE not in forced.notes


def test_lora_on_one_gpu_generates_through_the_unwrapped_module_unless_the_user_says_otherwise():
    from verlfit.overrides import LORA_UNWRAP_NOTE

    def unwrap(launch):
        return [o for o in launch.overrides if "unwrap_fsdp" in o]

    lora = prepare_launch(parse(["--profile", "p40", "--plan", "off", "--lora-rank", "32"]), environ={}, gpu=P40)
    assert unwrap(lora) == ["+actor_rollout_ref.rollout.unwrap_fsdp=True"]
    assert LORA_UNWRAP_NOTE in lora.notes
    full = prepare_launch(parse(["--profile", "p40", "--plan", "off"]), environ={}, gpu=P40)
    assert unwrap(full) == [] and LORA_UNWRAP_NOTE not in full.notes
    off = prepare_launch(
        parse(
            [
                "--profile",
                "p40",
                "--plan",
                "off",
                "--lora-rank",
                "32",
                "--",
                "+actor_rollout_ref.rollout.unwrap_fsdp=False",
            ]
        ),
        environ={},
        gpu=P40,
    )
    assert unwrap(off) == ["+actor_rollout_ref.rollout.unwrap_fsdp=False"]
    assert LORA_UNWRAP_NOTE not in off.notes  # a new-user trial read the note after turning the key off
    plain = prepare_launch(
        parse(
            [
                "--profile",
                "p40",
                "--plan",
                "off",
                "--lora-rank",
                "32",
                "--",
                "actor_rollout_ref.rollout.unwrap_fsdp=False",
            ]
        ),
        environ={},
        gpu=P40,
    )
    assert unwrap(plain) == ["+actor_rollout_ref.rollout.unwrap_fsdp=False"] and LORA_UNWRAP_NOTE not in plain.notes
    two = prepare_launch(
        parse(["--profile", "p40", "--plan", "off", "--lora-rank", "32", "--gpus", "2"]), environ={}, gpu=P40
    )
    assert unwrap(two) == []
    # a user who turns it on across GPUs is told it is untested there
    from verlfit.overrides import UNWRAP_SEVERAL_GPUS_NOTE

    assert UNWRAP_SEVERAL_GPUS_NOTE not in two.notes
    asked = prepare_launch(
        parse(
            [
                "--profile",
                "p40",
                "--plan",
                "off",
                "--lora-rank",
                "32",
                "--gpus",
                "2",
                "--",
                "+actor_rollout_ref.rollout.unwrap_fsdp=True",
            ]
        ),
        environ={},
        gpu=P40,
    )
    assert unwrap(asked) == ["+actor_rollout_ref.rollout.unwrap_fsdp=True"] and UNWRAP_SEVERAL_GPUS_NOTE in asked.notes
    # patch 0027's keys set by the user across GPUs are refused before anything starts (its workers would raise
    # after Ray and the model load)
    for key in ("actor_rollout_ref.model.adapters_outside_fsdp", "critic.model.adapters_outside_fsdp"):
        with pytest.raises(VerlfitError) as err:
            prepare_launch(
                parse(["--profile", "t4", "--plan", "off", "--lora-rank", "32", "--gpus", "2", "--", f"+{key}=True"]),
                environ={},
                gpu=H200,
            )
        role = key.split(".")[0].replace("actor_rollout_ref", "actor")
        assert str(err.value).startswith(
            f"+{key}=True keeps the {role}'s LoRA adapters out of FSDP (patch 0027), which works on one GPU only: on 2"
            " GPUs FSDP would not all-reduce their gradients"
        )
        assert err.value.fix == f"leave {key} unset on several GPUs (verlfit sets it where it applies)"
        assert err.value.exit_code == 2


def test_a_user_strategy_fsdp2_keeps_that_roles_adapters_as_verl_wraps_them():
    # patch 0027 is for FSDP1: verlfit does not force its key on a role the user moves to FSDP2 after --
    t4 = load_profile("t4")
    ppo = TrainSettings(model="m", lora_rank=32, extra_overrides=["critic.strategy=fsdp2"])
    assert forced_switches(ppo, t4) == [
        "+actor_rollout_ref.rollout.unwrap_fsdp=True",
        "+actor_rollout_ref.model.adapters_outside_fsdp=True",
    ]
    both = TrainSettings(
        model="m", lora_rank=32, extra_overrides=["actor_rollout_ref.actor.strategy=fsdp2", "critic.strategy=fsdp2"]
    )
    assert forced_switches(both, t4) == ["+actor_rollout_ref.rollout.unwrap_fsdp=True"]
    back = TrainSettings(model="m", lora_rank=32, extra_overrides=["critic.strategy=fsdp2", "critic.strategy=fsdp"])
    assert forced_switches(back, t4)[-1] == "+critic.model.adapters_outside_fsdp=True"


def test_a_dry_run_says_when_a_real_run_would_fail_the_engines_check(capsys, monkeypatch, tmp_path):
    # a second new-user trial rehearsed `train --profile a10 --dry-run` on a Python without vllm and got a clean plan
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("vllm", "flash_attn") else real_find_spec(name, *a),
    )
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    from fakes import write_raw_gsm8k

    raw = write_raw_gsm8k(tmp_path / "raw")
    # a note, exit 0: this machine's Python, not the run's inputs (a dry run is often made on another machine)
    assert cli.main(["train", "--profile", "a10", "--dry-run", "--steps", "3", "--plan", "off", "--data", raw]) == 0
    out = capsys.readouterr().out
    assert (
        "this Python has no vllm and no flash_attn: a real run would refuse it (FAIL engines; --rollout hf, --attention"
        " sdpa, or the verlfit:a10 image)" in " ".join(out.split())
    )
    assert (
        cli.main(
            [
                "train",
                "--profile",
                "a10",
                "--rollout",
                "hf",
                "--attention",
                "sdpa",
                "--dry-run",
                "--steps",
                "3",
                "--plan",
                "off",
                "--data",
                raw,
            ]
        )
        == 0
    )
    assert "FAIL engines" not in capsys.readouterr().out


def test_an_hf_rollout_switch_on_the_vllm_rollout_gets_a_note_that_it_does_nothing():
    # new-user trial: `verlfit train --profile a10 -- +actor_rollout_ref.rollout.cuda_graph=True` was taken silently,
    # though vLLM never reads the key (plan already said so)
    plan = prepare_launch(
        parse(
            [
                "--profile",
                "a10",
                "--plan",
                "off",
                "--",
                "+actor_rollout_ref.rollout.cuda_graph=True",
                "+actor_rollout_ref.rollout.trim_padding=True",
            ]
        ),
        environ={},
        gpu=H200,
    )
    assert [note for note in plan.notes if "has no effect" in note] == [
        (
            "+actor_rollout_ref.rollout.cuda_graph=True has no effect with the vllm rollout: its patch changes verl's"
            " HF rollout only (--rollout hf)"
        ),
        (
            "+actor_rollout_ref.rollout.trim_padding=True has no effect with the vllm rollout: its patch changes verl's"
            " HF rollout only (--rollout hf)"
        ),
    ]
    hf = prepare_launch(
        parse(
            ["--profile", "a10", "--rollout", "hf", "--plan", "off", "--", "+actor_rollout_ref.rollout.cuda_graph=True"]
        ),
        environ={},
        gpu=H200,
    )
    assert not any("has no effect" in note for note in hf.notes)
    assert not any(
        "has no effect" in note
        for note in prepare_launch(parse(["--profile", "a10", "--plan", "off"]), environ={}, gpu=H200).notes
    )


def test_dry_run_says_a_real_run_would_refuse_a_local_model_without_a_tokenizer(tmp_path, capsys):
    """new-user trial: a model folder without tokenizer files passed the dry run (doctor FAILs it, and so does a real
    run)."""
    from fakes import write_model_dir, write_raw_gsm8k

    model = tmp_path / "model"
    write_model_dir(model, tokenizer=())
    raw = write_raw_gsm8k(tmp_path / "raw")
    assert (
        cli.main(
            [
                "train",
                "--profile",
                "p40",
                "--plan",
                "off",
                "--dry-run",
                "--model",
                str(model),
                "--run-dir",
                str(tmp_path / "r"),
                "--data",
                raw,
            ]
        )
        == 2
    )
    out, err = capsys.readouterr()
    assert f"a real launch would refuse this run: model {model} (the notes above say why)" in err
    out = " ".join(out.split())
    assert (
        f"note: a real run would refuse its model: FAIL model: {model} has no tokenizer: AutoTokenizer needs"
        " tokenizer.json" in out
    )
    write_model_dir(tmp_path / "whole")  # with its tokenizer: nothing to say
    assert (
        cli.main(
            [
                "train",
                "--profile",
                "p40",
                "--plan",
                "off",
                "--dry-run",
                "--model",
                str(tmp_path / "whole"),
                "--run-dir",
                str(tmp_path / "r"),
                "--data",
                raw,
            ]
        )
        == 0
    )
    assert "refuse its model" not in capsys.readouterr().out


def test_sigterm_stops_verl_like_ctrl_c(tmp_path, capsys):
    """docker stop sends SIGTERM to the container (tini passes it to verlfit): the same clean stop as Ctrl-C, and
    the SIGTERM handler verlfit had before is back afterwards."""
    import os
    import signal
    import threading

    from verlfit.metrics import read_metrics
    from verlfit.train.supervise import launch

    script = (
        STEP.format(n=1)
        + "\nimport time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('verl got SIGINT',"
        " flush=True)\n    raise SystemExit(1)"
    )
    plan = fake_verl_plan(tmp_path, script)
    run_dir = tmp_path / "run"
    before = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        status = launch(plan, run_dir)
    finally:
        timer.cancel()
    assert status == 130
    assert signal.getsignal(signal.SIGTERM) is before
    assert [r["step"] for r in read_metrics(run_dir)] == [1]
    assert "verl got SIGINT" in (run_dir / "train.log").read_text()
    err = capsys.readouterr().err
    assert "verlfit: stopping verl (SIGTERM (docker stop); waiting up to 60 s)" in err
    assert "stopped before the first checkpoint (--save-freq 25): nothing to resume; start a new run" in err


def test_sigterm_stops_verl_like_ctrl_c_when_verlfit_runs_with_sigint_ignored(tmp_path, capsys):
    """`nohup verlfit train ... &` from a shell without job control starts verlfit with SIGINT ignored, and verl
    inherited that: the SIGINT verlfit sends it to stop cleanly was ignored, and it was killed 60 s later (SIGTERM).
    verl now starts with SIGINT at its default, so it stops cleanly; verlfit's own SIGINT stays ignored."""
    import os
    import signal
    import threading
    import time

    from verlfit.train.supervise import launch

    script = (
        STEP.format(n=1)
        + "\nimport time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('verl got SIGINT',"
        " flush=True)\n    raise SystemExit(1)"
    )
    plan = fake_verl_plan(tmp_path, script)
    run_dir = tmp_path / "run"
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGTERM))
    started = time.monotonic()
    timer.start()
    try:
        status = launch(plan, run_dir)
        ignored_after = signal.getsignal(signal.SIGINT)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert status == 130
    assert ignored_after is signal.SIG_IGN
    assert "verl got SIGINT" in (run_dir / "train.log").read_text()
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(
    "argv, option",
    [
        (["train", "--dry-run", "--profile", "p40", "--run-dir", ""], "--run-dir"),
        (["train", "--dry-run", "--profile", "p40", "--model", " "], "--model"),
        (["train", "--dry-run", "--profile", "p40", "--data", ""], "--data"),
        (["plan", "--model", ""], "--model"),
    ],
)
def test_an_empty_path_or_model_is_refused_by_name(argv, option, capsys):
    """new-user trial: --run-dir '' fell back to runs/<name> without a word; plan --model '' said '. has no
    config.json'."""
    with pytest.raises(SystemExit) as refused:
        cli.main(argv)
    assert refused.value.code == 2
    assert f"error: argument {option}: is empty: it must name a folder, a file or a model" in capsys.readouterr().err


def test_a_run_directory_inside_the_data_or_the_model_folder_is_refused(tmp_path, tiny_qwen2_dir, capsys):
    """New-user trial (finding 12): the dry run with `--run-dir data/small/run` (or models/tiny/run) exited 0; verlfit
    never writes into the command's own input. The real launch refuses it before the GPU is looked for."""
    import shutil

    from fakes import write_raw_gsm8k

    data = Path(write_raw_gsm8k(tmp_path / "raw"))
    model = tmp_path / "model"
    shutil.copytree(tiny_qwen2_dir, model)
    argv = ["train", "--profile", "p40", "--plan", "off", "--skip-checks", "--data", str(data), "--model", str(model)]
    for named, folder in (("--data", data), ("--model", model)):
        refusal = (
            f"--run-dir {folder / 'run'} lies inside {named} {folder}, which this command reads: verlfit never writes"
            f" into its own input (the output would be taken for part of {folder}, and go with it when it is moved,"
            " copied or cleaned)"
        )
        assert cli.main([*argv, "--dry-run", "--run-dir", str(folder / "run")]) == 2
        assert capsys.readouterr().err == (
            f"verlfit: error: a real launch would refuse this run: --run-dir {folder / 'run'}: {refusal} (the notes"
            " above say why)\n  fix: do what those notes say, then dry-run again\n"
        )
        assert cli.main([*argv, "--run-dir", str(folder / "run")]) == 2
        assert capsys.readouterr() == (
            "",
            f"verlfit: error: {refusal}\n  fix: pass --run-dir a folder outside {folder}\n",
        )
        assert not (folder / "run").exists()


def test_lora_at_verls_default_learning_rate_is_told_what_the_learning_checks_used():
    from verlfit.overrides import LORA_LEARNING_RATE_NOTE

    def notes(*argv):
        return prepare_launch(parse(["--profile", "p40", "--plan", "off", *argv]), environ={}, gpu=P40).notes

    assert LORA_LEARNING_RATE_NOTE in notes("--lora-rank", "32")
    assert LORA_LEARNING_RATE_NOTE.startswith("LoRA at the actor learning rate 1e-06 (verl's default")
    # a rate given either way, or no adapter: no note
    assert LORA_LEARNING_RATE_NOTE not in notes("--lora-rank", "32", "--actor-lr", "1e-4")
    assert LORA_LEARNING_RATE_NOTE not in notes("--lora-rank", "32", "--", "actor_rollout_ref.actor.optim.lr=1e-6")
    assert LORA_LEARNING_RATE_NOTE not in notes()
