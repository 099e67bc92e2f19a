"""benchmarks/device_run.py: argument handling, and the exact commands each stage starts.

The stages need a GPU and run on the device, not here: a fake python3 on PATH records every command the runner
starts (the runner itself runs under this interpreter, sys.executable, and starts `python3` from PATH)."""

import os
import sys
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "device_run.py"
REPO = SCRIPT.parents[1]


def run(tmp_path, *args):
    env = {**os.environ, "WORK": str(tmp_path / "work"), "RUNS": str(tmp_path / "runs"), "OUT": str(tmp_path / "out")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def test_help_prints_the_stages_and_what_the_script_needs(tmp_path):
    result = run(tmp_path, "--help")
    assert result.returncode == 0
    assert (
        "  calibrate_check\n" in result.stdout
        and 'Needs: a CUDA GPU and a Python 3 environment where `python3 -c "import verl, ray, torch"` works'
        in result.stdout
    )


def test_help_wraps_the_stages_and_variables_at_118_columns_without_breaking_an_option(tmp_path):
    """textwrap broke words at hyphens (`--gradient-` / `checkpointing`) and let first lines run past the width."""
    text = run(tmp_path, "--help").stdout
    generated = text[text.index("stages (each writes") : text.index("Several verl runs")]
    assert max(len(line) for line in generated.splitlines()) == 118
    assert "then --frozen-base-dtype bfloat16\n             --gradient-checkpointing (the memory-first" in generated
    assert "then export and eval\n             --reward-function --compare the starting model" in generated
    assert "(patch 0026), all at once: the targets, each `verlfit\n             plan` (NAME.plan)" in generated


def test_no_stage_and_an_unknown_stage_are_refused_before_anything_is_written(tmp_path):
    for args in ((), ("--parallel",)):
        none = run(tmp_path, *args)
        assert none.returncode == 2 and none.stderr.endswith("device_run.py: name at least one stage\n")
    bogus = run(tmp_path, "setup", "bogus")
    assert bogus.returncode == 2
    stages = (
        "a10 bench calibrate_a10 calibrate_check calibrate_p40 export_eval fault_disk fault_oom fault_worker fp16 "
        "gputests graph_memory grpo learn learn_data learn_fp16 learn_lora learn_own lora16 lora16_speed lora_1p5b_ppo "
        "lora_3b_grpo lora_families lora_graph lora_speed main main_resume multigpu nf4 noeos own_task pack public "
        "reward_helper setup smoke smoke_resume soak_grpo soak_ppo speed tuned"
    )
    assert f"device_run.py: unknown stage 'bogus'; stages: {stages} (--help for what each does)" in bogus.stderr
    assert not any((tmp_path / name).exists() for name in ("work", "runs", "out"))  # setup did not start either


def test_speed_stage_passes_each_configurations_keys_after_the_train_arguments(tmp_path):
    # a fake python3 records every command the stage runs (no GPU, no verl here)
    bin_dir = _fake_python(tmp_path)
    log = tmp_path / "calls"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WORK": str(tmp_path / "work"),
        "RUNS": str(tmp_path / "runs"),
        "OUT": str(tmp_path / "out"),
        "SPEED_CONFIGS": "today trim_rollout trims all shipped bogus",
    }
    result = subprocess.run([sys.executable, str(SCRIPT), "speed"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    calls = log.read_text().splitlines()
    work = tmp_path / "work"
    common = (
        f"--emulate p40 --model {work}/qwen2.5-0.5b-random --data {work}/gsm8k --steps 10 --max-prompt-length 512"
        " --max-response-length 256 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
    )
    assert calls == [
        # the p40 profile turns the trims on: today's path and a key alone say False for every key they leave off
        (
            f"-m verlfit train --run-dir {tmp_path}/runs/speed-today {common} --"
            " +actor_rollout_ref.actor.trim_padding=False +actor_rollout_ref.ref.trim_padding=False"
            " +critic.trim_padding=False +actor_rollout_ref.rollout.trim_padding=False"
        ),
        (
            f"-m verlfit train --run-dir {tmp_path}/runs/speed-trim_rollout {common} --"
            " +actor_rollout_ref.actor.trim_padding=False +actor_rollout_ref.ref.trim_padding=False"
            " +critic.trim_padding=False +actor_rollout_ref.rollout.trim_padding=True"
        ),
        (
            f"-m verlfit train --run-dir {tmp_path}/runs/speed-trims {common} --"
            " +actor_rollout_ref.actor.trim_padding=True +actor_rollout_ref.ref.trim_padding=True"
            " +critic.trim_padding=True +actor_rollout_ref.rollout.trim_padding=True"
        ),
        (
            f"-m verlfit train --run-dir {tmp_path}/runs/speed-all {common} --"
            " +actor_rollout_ref.actor.trim_padding=True +actor_rollout_ref.ref.trim_padding=True"
            " +critic.trim_padding=True +actor_rollout_ref.rollout.trim_padding=True"
            " +actor_rollout_ref.rollout.cuda_graph=True +actor_rollout_ref.rollout.unwrap_fsdp=True"
        ),
        f"-m verlfit train --run-dir {tmp_path}/runs/speed-shipped {common}",  # the profile as shipped: no keys, no --
        f"benchmarks/decode_bench.py --model {work}/qwen2.5-0.5b-random --output {tmp_path}/runs/decode_bench.json",
    ]
    assert "stage speed: unknown configuration 'bogus'" in (tmp_path / "runs" / "stages.log").read_text()


def _fake_python(tmp_path):
    """A bin directory whose python3 appends its arguments to tmp_path/calls (no GPU, no verl here)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "calls"}\n')
    (bin_dir / "python3").chmod(0o755)
    return bin_dir


def test_lora_speed_stage_runs_the_1p5b_lora_ppo_with_and_without_the_unwrap_key_one_after_the_other(tmp_path):
    bin_dir = _fake_python(tmp_path)
    work, runs = tmp_path / "work", tmp_path / "runs"
    env = {key: value for key, value in os.environ.items() if key not in ("LORA_SPEED_CONFIGS", "LORA_SPEED_STEPS")}
    env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", WORK=str(work), RUNS=str(runs), OUT=str(tmp_path / "out"))
    # without the 1.5B model (setup makes it when lora_speed is named) the stage says so and runs nothing
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "lora_speed"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "calls").exists()
    assert (
        f"lora_speed: no {work}/qwen2.5-1.5b-random (run setup with this stage named)"
        in (runs / "stages.log").read_text()
    )
    (work / "qwen2.5-1.5b-random").mkdir(parents=True)
    (work / "qwen2.5-1.5b-random" / "config.json").write_text("{}")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "lora_speed"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    train = (
        f"-m verlfit train --run-dir {runs}/lora-speed-%s --emulate p40 --model {work}/qwen2.5-1.5b-random --data"
        f" {work}/gsm8k --steps 4 --batch-size 32 --max-prompt-length 512 --max-response-length 256 --lora-rank 32"
        " --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
    )
    assert (tmp_path / "calls").read_text().splitlines() == [
        train % "unwrap" + " -- +actor_rollout_ref.actor.trim_padding=False +actor_rollout_ref.ref.trim_padding=False"
        " +critic.trim_padding=False +actor_rollout_ref.rollout.trim_padding=False"
        " +actor_rollout_ref.rollout.unwrap_fsdp=True",
        train % "all" + " -- +actor_rollout_ref.actor.trim_padding=True +actor_rollout_ref.ref.trim_padding=True"
        " +critic.trim_padding=True +actor_rollout_ref.rollout.trim_padding=True"
        " +actor_rollout_ref.rollout.cuda_graph=True +actor_rollout_ref.rollout.unwrap_fsdp=True",
        train % "today" + " -- +actor_rollout_ref.actor.trim_padding=False +actor_rollout_ref.ref.trim_padding=False"
        " +critic.trim_padding=False +actor_rollout_ref.rollout.trim_padding=False",
    ]
    (tmp_path / "calls").unlink()
    env.update(LORA_SPEED_CONFIGS="today bogus cuda_graph", LORA_SPEED_STEPS="2")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "lora_speed"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "calls").read_text().splitlines() == [
        (train % "today").replace("--steps 4", "--steps 2")
        + " -- +actor_rollout_ref.actor.trim_padding=False +actor_rollout_ref.ref.trim_padding=False "
        "+critic.trim_padding=False +actor_rollout_ref.rollout.trim_padding=False",
        (train % "cuda_graph").replace("--steps 4", "--steps 2")
        + " -- +actor_rollout_ref.actor.trim_padding=False +actor_rollout_ref.ref.trim_padding=False"
        " +critic.trim_padding=False +actor_rollout_ref.rollout.trim_padding=False"
        " +actor_rollout_ref.rollout.cuda_graph=True",
    ]
    assert "stage lora_speed: unknown configuration 'bogus'" in (runs / "stages.log").read_text()


def test_lora_graph_stage_plans_and_runs_the_4b_t4_target_with_graphs_off_then_on(tmp_path):
    bin_dir = _fake_python(tmp_path)
    work, runs = tmp_path / "work", tmp_path / "runs"
    (work / "qwen3-4b-random").mkdir(parents=True)
    (work / "qwen3-4b-random" / "config.json").write_text("{}")  # made: the stage does not make it again
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORA_GRAPH_")}
    env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", WORK=str(work), RUNS=str(runs), OUT=str(tmp_path / "out"))
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "lora_graph"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    target = "--emulate t4 --algo grpo --lora-rank 32 --batch-size 16 --max-prompt-length 512 --max-response-length 256"
    model = f"--model {work}/qwen3-4b-random"
    train = (
        f"-m verlfit train --run-dir {runs}/lora16-qwen3-4b-grpo-t4-graphs-%s {model} --data {work}/gsm8k --steps %s"
        f" --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1 {target}"
    )
    off = " -- +actor_rollout_ref.rollout.cuda_graph=False"
    assert (tmp_path / "calls").read_text().splitlines() == [
        f"-m verlfit plan {model} {target} --no-cuda-graph",  # plan takes no verl overrides: its own switch
        train % ("off", 3) + off,
        f"-m verlfit plan {model} {target}",
        train % ("on", 3),
    ]
    (tmp_path / "calls").unlink()
    env.update(LORA_GRAPH_MODES="on bogus", LORA_GRAPH_STEPS="2")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "lora_graph"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "calls").read_text().splitlines() == [f"-m verlfit plan {model} {target}", train % ("on", 2)]
    assert (
        "lora_graph: LORA_GRAPH_MODES has 'bogus'; write some of off, on, units, before"
        in (runs / "stages.log").read_text()
    )


def test_lora_graph_stage_runs_the_calibration_targets_by_name(tmp_path):
    # issue 43 item 4: the Qwen3-4B shape on the a10 path (bf16) and the Qwen2.5-3B shape on the t4 path (fp16)
    bin_dir = _fake_python(tmp_path)
    work, runs = tmp_path / "work", tmp_path / "runs"
    for shape in ("qwen3-4b", "qwen2.5-3b"):
        (work / f"{shape}-random").mkdir(parents=True)
        (work / f"{shape}-random" / "config.json").write_text("{}")
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORA_GRAPH_")}
    env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", WORK=str(work), RUNS=str(runs), OUT=str(tmp_path / "out"))
    env.update(
        LORA_GRAPH_TARGETS="lora16-qwen3-4b-grpo-a10 lora16-qwen2.5-3b-grpo-t4",
        LORA_GRAPH_MODES="on",
        LORA_GRAPH_STEPS="2",
    )
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "lora_graph"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    size = "--lora-rank 32 --batch-size 16 --max-prompt-length 512 --max-response-length 256"
    a10 = f"--emulate a10 --rollout hf --attention sdpa --algo grpo {size}"
    t4 = f"--emulate t4 --algo grpo {size}"
    common = f"--data {work}/gsm8k --steps 2 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
    assert (tmp_path / "calls").read_text().splitlines() == [
        f"-m verlfit plan --model {work}/qwen3-4b-random {a10}",
        (
            f"-m verlfit train --run-dir {runs}/lora16-qwen3-4b-grpo-a10-graphs-on --model {work}/qwen3-4b-random"
            f" {common} {a10}"
        ),
        f"-m verlfit plan --model {work}/qwen2.5-3b-random {t4}",
        (
            f"-m verlfit train --run-dir {runs}/lora16-qwen2.5-3b-grpo-t4-graphs-on --model {work}/qwen2.5-3b-random"
            f" {common} {t4}"
        ),
    ]


def test_reward_helper_stage_trains_with_a_reward_that_imports_the_module_beside_it(tmp_path):
    bin_dir = _fake_python(tmp_path)
    work, runs = tmp_path / "work", tmp_path / "runs"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WORK": str(work),
        "RUNS": str(runs),
        "OUT": str(tmp_path / "out"),
    }
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "reward_helper"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    folder = work / "reward-helper"
    assert sorted(path.name for path in folder.iterdir()) == ["gsm8k_answer.py", "reward.py"]
    assert (tmp_path / "calls").read_text().splitlines() == [
        f"-m verlfit train --run-dir {runs}/reward-helper --emulate p40 --model {work}/tiny --data {work}/gsm8k --steps"
        f" 2 --batch-size 8 --max-response-length 32 --reward-function {folder}/reward.py:compute_score --skip-checks"
        " --test-freq 2 --save-freq -1"
    ]
    # the two files score as written: the helper's import resolves from the reward's folder, as verl imports it there
    scored = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import reward; print(reward.compute_score('gsm8k', 'so 3 + 4 = 7 #### 1,234', '1234'),"
                " reward.compute_score('gsm8k', '#### 12', '1234'), reward.compute_score('gsm8k', 'no marker 1234',"
                " '1234'))"
            ),
        ],
        capture_output=True,
        text=True,
        cwd=folder,
        timeout=60,
    )
    assert scored.stdout.split() == ["1.0", "0.0", "0.0"], scored.stderr


def test_setup_makes_the_1p5b_model_when_lora_speed_is_named(tmp_path):
    bin_dir = _fake_python(tmp_path)
    work = tmp_path / "work"
    (work / "qwen2.5-0.5b-random").mkdir(parents=True)
    (work / "qwen2.5-0.5b-random" / "config.json").write_text("{}")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WORK": str(work),
        "RUNS": str(tmp_path / "runs"),
        "OUT": str(tmp_path / "out"),
        "VERLFIT_SITE": str(tmp_path / "site"),
        "SKIP_TINY": "1",
    }
    nvidia = bin_dir / "nvidia-smi"
    nvidia.write_text("#!/bin/sh\necho fake\n")
    nvidia.chmod(0o755)
    # stage setup only; lora_speed is named in the same call (its run finds no config.json: the fake made none)
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "setup", "lora_speed"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert (
        f"benchmarks/make_model.py --shape qwen2.5-1.5b --output {work}/qwen2.5-1.5b-random --tokenizer-dir"
        f" {work}/qwen2.5-0.5b-random" in calls
    )
    assert not any("qwen2.5-3b" in call for call in calls)
    # setup alone, told by SETUP_FOR which stages will follow (a --parallel call after it)
    (tmp_path / "calls").unlink()
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "setup"],
        capture_output=True,
        text=True,
        env={**env, "SETUP_FOR": "lora_3b_grpo"},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert (
        f"benchmarks/make_model.py --shape qwen2.5-3b --output {work}/qwen2.5-3b-random --tokenizer-dir"
        f" {work}/qwen2.5-0.5b-random" in calls
    )


def test_setup_reads_verls_site_from_stdout_alone_when_verl_warns_on_stderr(tmp_path):
    # issue 43 item 8: verl 0.4.1 prints a pkg_resources warning on stderr as it imports; setup read the site-packages
    # from stdout and stderr together, so the warning became part of the path and applying the patches failed
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    site = tmp_path / "site"
    (bin_dir / "python3").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {tmp_path / "calls"}\n'
        'if [ "$1" = "-c" ]; then\n'
        "  echo '/usr/lib/python3/dist-packages/verl/__init__.py:18: UserWarning: pkg_resources is deprecated as an"
        " API.' >&2\n"
        f"  echo {site}\n"
        "fi\n"
    )
    (bin_dir / "python3").chmod(0o755)
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho fake\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    work = tmp_path / "work"
    env = {key: value for key, value in os.environ.items() if key != "VERLFIT_SITE"}
    env.update(
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        WORK=str(work),
        RUNS=str(tmp_path / "runs"),
        OUT=str(tmp_path / "out"),
        SKIP_TINY="1",
    )
    result = subprocess.run([sys.executable, str(SCRIPT), "setup"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[:2] == [
        "-c import os, verl; print(os.path.dirname(os.path.dirname(verl.__file__)))",
        f"patches/apply.py --status {site}",
    ]
    assert "UserWarning: pkg_resources is deprecated" in result.stderr  # the warning is shown, not lost


def test_noeos_stage_makes_the_qwen3_model_without_eos_once_and_trains_it_3_steps(tmp_path):
    bin_dir = _fake_python(tmp_path)
    work, runs = tmp_path / "work", tmp_path / "runs"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WORK": str(work),
        "RUNS": str(runs),
        "OUT": str(tmp_path / "out"),
    }
    # before setup (no tokenizer, no GSM8K) the stage says so and runs nothing
    result = subprocess.run([sys.executable, str(SCRIPT), "noeos"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "calls").exists()
    assert (
        f"noeos: no {work}/qwen2.5-0.5b-random (run setup first: it makes the tokenizer and GSM8K)"
        in (runs / "stages.log").read_text()
    )
    (work / "qwen2.5-0.5b-random").mkdir(parents=True)
    (work / "qwen2.5-0.5b-random" / "tokenizer.json").write_text("{}")
    result = subprocess.run([sys.executable, str(SCRIPT), "noeos"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    # issue 29's command: verlfit train --emulate p40 --model DIR --steps 3 (the p40 profile turns cuda_graph on)
    assert calls[:2] == [
        (
            f"benchmarks/qwen3_no_eos_model.py --output {work}/qwen3-0.6b-no-eos --tokenizer-dir"
            f" {work}/qwen2.5-0.5b-random"
        ),
        (
            f"-m verlfit train --run-dir {runs}/noeos-qwen3-0.6b --emulate p40 --model {work}/qwen3-0.6b-no-eos --data"
            f" {work}/gsm8k --steps 3 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
        ),
    ]
    # a model made by an earlier call is reused
    (tmp_path / "calls").unlink()
    (work / "qwen3-0.6b-no-eos").mkdir()
    (work / "qwen3-0.6b-no-eos" / "config.json").write_text("{}")
    result = subprocess.run([sys.executable, str(SCRIPT), "noeos"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert not any("qwen3_no_eos_model.py" in call for call in (tmp_path / "calls").read_text().splitlines())


def test_multigpu_stage_runs_the_issue_18_measurements_in_order_with_their_environment(tmp_path):
    # the fake python3 records each command with the variables the stage sets for it (no GPU, no verl, no Ray here)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    (bin_dir / "python3").write_text(
        '#!/bin/sh\necho "$* | NCCL_P2P_DISABLE=$NCCL_P2P_DISABLE RAY_ADDRESS=$RAY_ADDRESS'
        f' CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES LIMIT=$VERLFIT_GPU_MEMORY_LIMIT_GIB" >> {log}\n'
    )
    (bin_dir / "python3").chmod(0o755)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("NCCL_P2P_DISABLE", "RAY_ADDRESS", "CUDA_VISIBLE_DEVICES", "VERLFIT_GPU_MEMORY_LIMIT_GIB")
    }
    env.update(
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        WORK=str(tmp_path / "work"),
        RUNS=str(tmp_path / "runs"),
        OUT=str(tmp_path / "out"),
    )
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "multigpu"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    work, runs = tmp_path / "work", tmp_path / "runs"
    common = (
        f"--emulate p40 --model {work}/qwen2.5-0.5b-random --data {work}/gsm8k --steps 10 --max-prompt-length 512"
        " --max-response-length 256 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
    )
    plain = "| NCCL_P2P_DISABLE= RAY_ADDRESS= CUDA_VISIBLE_DEVICES= LIMIT="
    assert log.read_text().splitlines() == [
        f"-m verlfit doctor --profile p40 --data {work}/gsm8k --model {work}/qwen2.5-0.5b-random {plain}",
        f"-m verlfit train --run-dir {runs}/multigpu-gpus1 {common} --gpus 1 {plain}",
        f"-m verlfit train --run-dir {runs}/multigpu-gpus2 {common} --gpus 2 {plain}",
        (
            f"-m verlfit train --run-dir {runs}/multigpu-gpus2-no-p2p {common} --gpus 2 | NCCL_P2P_DISABLE=1"
            " RAY_ADDRESS= CUDA_VISIBLE_DEVICES= LIMIT="
        ),
        (
            f"benchmarks/make_model.py --shape qwen2.5-1.5b --output {work}/qwen2.5-1.5b-random --tokenizer-dir"
            f" {work}/qwen2.5-0.5b-random {plain}"
        ),
        f"-m verlfit plan --emulate p40 --model {work}/qwen2.5-1.5b-random --gpus 2 {plain}",
        (
            f"-m verlfit train --run-dir {runs}/multigpu-1.5b-gpus2 --emulate p40 --model {work}/qwen2.5-1.5b-random"
            f" --data {work}/gsm8k --steps 10 --max-prompt-length 512 --max-response-length 256 --skip-checks"
            " --no-validate-before-train --test-freq -1 --save-freq -1 --gpus 2 --plan off --micro-batch-size 1"
            f" --offload optimizer {plain}"
        ),
        f"-m verlfit profiles p40 --env-shell {plain}",
        (
            "-m ray.scripts.scripts start --head --port=6390 --num-gpus=1 --disable-usage-stats | NCCL_P2P_DISABLE="
            " RAY_ADDRESS= CUDA_VISIBLE_DEVICES=0 LIMIT=22.5"
        ),
        (
            "-m ray.scripts.scripts start --address=127.0.0.1:6390 --num-gpus=1 --disable-usage-stats |"
            " NCCL_P2P_DISABLE= RAY_ADDRESS= CUDA_VISIBLE_DEVICES=1 LIMIT=22.5"
        ),
        (
            f"-m verlfit train --run-dir {runs}/multigpu-nodes2 {common} --nodes 2 --gpus 1 | NCCL_P2P_DISABLE="
            " RAY_ADDRESS=127.0.0.1:6390 CUDA_VISIBLE_DEVICES= LIMIT="
        ),
        f"-m ray.scripts.scripts stop --force {plain}",
    ]
    assert (
        "multigpu   issue 18, on a kind with 2 or more GPUs"
        in subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60).stdout
    )


def test_graph_memory_growth_is_the_least_squares_slope():
    import graph_memory_probe  # benchmarks/ is on sys.path (tests/conftest.py)

    assert graph_memory_probe.growth_per_call([100.0, 132.0, 164.0, 196.0]) == 32.0
    assert graph_memory_probe.growth_per_call([5.0, 5.0, 5.0]) == 0.0
    assert graph_memory_probe.growth_per_call([7.0]) == 0.0
    assert round(graph_memory_probe.growth_per_call([0.0, 1.0, 0.0, 1.0]), 6) == 0.2


def test_a_lora_run_cut_by_a_deadline_is_resumed_when_its_stage_runs_again(tmp_path):
    bin_dir = _fake_python(tmp_path)
    work, runs = tmp_path / "work", tmp_path / "runs"
    (work / "qwen2.5-1.5b-random").mkdir(parents=True)
    (work / "qwen2.5-1.5b-random" / "config.json").write_text("{}")
    env = {key: value for key, value in os.environ.items() if key != "LORA_EXTRA"}
    env.update(
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        WORK=str(work),
        RUNS=str(runs),
        OUT=str(tmp_path / "out"),
        LORA_EXTRA="-- +actor_rollout_ref.rollout.unwrap_fsdp=True",
    )
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "lora_1p5b_ppo"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert (
        calls[2]
        == f"-m verlfit train --run-dir {runs}/lora-1p5b-ppo --emulate p40 --model {work}/qwen2.5-1.5b-random --data"
        f" {work}/gsm8k --steps 10 --batch-size 32 --max-prompt-length 512 --max-response-length 256 --lora-rank 32"
        " --skip-checks --no-validate-before-train --test-freq -1 --save-freq 5 --"
        " +actor_rollout_ref.rollout.unwrap_fsdp=True"
    )
    # the next call finds the run the deadline cut (its run.json) and resumes it; the newest checkpoint keeps its shards
    (runs / "lora-1p5b-ppo").mkdir()
    (runs / "lora-1p5b-ppo" / "run.json").write_text("{}")
    for step in (5, 10):
        (runs / "lora-1p5b-ppo" / "checkpoints" / f"global_step_{step}" / "actor").mkdir(parents=True)
        (
            runs / "lora-1p5b-ppo" / "checkpoints" / f"global_step_{step}" / "actor" / "model_world_size_1_rank_0.pt"
        ).write_text("x")
    (runs / "lora-1p5b-ppo" / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("5")
    (tmp_path / "calls").unlink()
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "lora_1p5b_ppo"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "calls").read_text().splitlines()[
        2
    ] == f"-m verlfit train --resume {runs}/lora-1p5b-ppo --steps 10"
    shards = sorted(p.relative_to(runs).as_posix() for p in runs.rglob("*.pt"))
    assert shards == ["lora-1p5b-ppo/checkpoints/global_step_5/actor/model_world_size_1_rank_0.pt"]
    # a run whose checkpoint reaches the stage's --steps is not resumed again (verlfit would refuse: it has finished)
    (runs / "lora-1p5b-ppo" / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("10")
    (tmp_path / "calls").unlink()
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "lora_1p5b_ppo"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert not any(" --resume " in line for line in (tmp_path / "calls").read_text().splitlines())
    assert (
        "lora-1p5b-ppo: finished (its checkpoint of step 10 reaches --steps 10): not resumed"
        in (runs / "stages.log").read_text()
    )


def test_lora_3b_steps_makes_a_short_first_run_that_the_default_extends(tmp_path):
    bin_dir = _fake_python(tmp_path)
    work, runs = tmp_path / "work", tmp_path / "runs"
    (work / "qwen2.5-3b-random").mkdir(parents=True)
    (work / "qwen2.5-3b-random" / "config.json").write_text("{}")
    env = {
        key: value for key, value in os.environ.items() if key not in ("LORA_EXTRA", "LORA_3B_BATCH", "LORA_3B_STEPS")
    }
    env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", WORK=str(work), RUNS=str(runs), OUT=str(tmp_path / "out"))
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "lora_3b_grpo"],
        capture_output=True,
        text=True,
        env={**env, "LORA_3B_STEPS": "3", "LORA_3B_BATCH": "8"},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    first = [line for line in (tmp_path / "calls").read_text().splitlines() if line.startswith("-m verlfit train")]
    assert first == [
        f"-m verlfit train --run-dir {runs}/lora-3b-grpo --emulate p40 --algo grpo --samples 4 --model"
        f" {work}/qwen2.5-3b-random --data {work}/gsm8k --steps 3 --batch-size 8 --max-prompt-length 512"
        " --max-response-length 256 --lora-rank 32 --skip-checks --no-validate-before-train --test-freq -1"
        " --save-freq 3"
    ]
    (runs / "lora-3b-grpo").mkdir()
    (runs / "lora-3b-grpo" / "run.json").write_text("{}")
    (runs / "lora-3b-grpo" / "checkpoints").mkdir()
    (runs / "lora-3b-grpo" / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("3")
    (tmp_path / "calls").unlink()
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "lora_3b_grpo"],
        capture_output=True,
        text=True,
        env={**env, "LORA_3B_BATCH": "8"},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert f"-m verlfit train --resume {runs}/lora-3b-grpo --steps 5" in (tmp_path / "calls").read_text().splitlines()


def test_help_documents_the_soak_and_fault_stages(tmp_path):
    text = run(tmp_path, "--help").stdout
    for start in (
        "  soak_ppo   issue 17: PPO of the learning check's small model",
        "  soak_grpo  the same for GRPO",
        "  fault_oom  the 0.5B shape",
        "  fault_worker\n",
        "  fault_disk the small model's PPO",
        "\n  SOAK_PPO_PLAN, SOAK_GRPO_PLAN, FAULT_WORKER_PLAN\n",
    ):
        assert start in text, start


def _stage_env(tmp_path, bin_dir, **extra):
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DEADLINE", "SOAK_PPO_PLAN", "SOAK_GRPO_PLAN", "FAULT_WORKER_PLAN")
    }
    env.update(
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        WORK=str(tmp_path / "work"),
        RUNS=str(tmp_path / "runs"),
        OUT=str(tmp_path / "out"),
        **extra,
    )
    return env


def test_soak_and_fault_worker_stages_hand_their_run_to_the_soak_driver(tmp_path):
    bin_dir = _fake_python(tmp_path)
    work, runs = tmp_path / "work", tmp_path / "runs"
    (work / "small-sft").mkdir(parents=True)
    (work / "small-sft" / "config.json").write_text("{}")
    for folder in ("synthetic", "synthetic-raw"):
        (work / folder).mkdir(exist_ok=True)
    (work / "synthetic-raw" / "train.jsonl").write_text("")
    (work / "synthetic" / "train.parquet").write_text("")
    env = _stage_env(tmp_path, bin_dir, DEADLINE="2000000000", SOAK_GRPO_PLAN="sigint@10 sigkill@20")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "soak_ppo", "soak_grpo", "fault_worker"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    val = work / "gsm8k-val256"
    soak = (
        "--emulate p40 --max-prompt-length 512 --max-response-length 256 --batch-size 64 --save-freq 50 --test-freq 100"
        " --skip-checks"
    )
    assert calls == [
        f"- {work}/gsm8k/test.parquet {val}/test.parquet",  # the 256-row validation slice (pyarrow, from stdin)
        (
            f"benchmarks/soak_run.py --runs {runs} --name soak-ppo --total 500 --plan sigint@150 sigkill@300 --deadline"
            f" 2000000000 -- --model {work}/small-sft --data {val} --steps 500 {soak}"
        ),
        f"- {work}/gsm8k/test.parquet {val}/test.parquet",
        (
            f"benchmarks/soak_run.py --runs {runs} --name soak-grpo --total 300 --plan sigint@10 sigkill@20 --deadline"
            f" 2000000000 -- --algo grpo --samples 4 --model {work}/small-sft --data {val} --steps 300 {soak}"
        ),
        (
            f"benchmarks/soak_run.py --runs {runs} --name fault-worker --total 12 --plan kill-worker@7 --deadline"
            f" 2000000000 -- --model {work}/small-sft --data {work}/synthetic --steps 12 --save-freq 5 --emulate p40"
            " --batch-size 64 --max-prompt-length 256 --max-response-length 128 --skip-checks"
            " --no-validate-before-train --test-freq -1"
        ),
    ]
    assert (val / "train.parquet").resolve() == work / "gsm8k" / "train.parquet"  # the full training set, linked
    assert "soak soak-ppo: 500 steps, plan 'sigint@150 sigkill@300'" in (runs / "stages.log").read_text()


def test_fault_disk_stage_ends_with_a_log_line_when_tmpfs_cannot_be_mounted(tmp_path):
    bin_dir = _fake_python(tmp_path)
    (bin_dir / "mount").write_text("#!/bin/sh\necho 'mount: only root can use \"--types\" option' >&2\nexit 1\n")
    (bin_dir / "mount").chmod(0o755)
    work, runs = tmp_path / "work", tmp_path / "runs"
    (work / "small-sft").mkdir(parents=True)
    (work / "small-sft" / "config.json").write_text("{}")
    (work / "synthetic-raw").mkdir(parents=True)
    (work / "synthetic-raw" / "train.jsonl").write_text("")
    (work / "synthetic").mkdir()
    (work / "synthetic" / "train.parquet").write_text("")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "fault_disk"],
        capture_output=True,
        text=True,
        env=_stage_env(tmp_path, bin_dir),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert 'tmpfs mount refused: mount: only root can use "--types" option' in (runs / "stages.log").read_text()
    assert not (tmp_path / "calls").exists()  # no training was started


def test_fault_oom_stage_runs_the_oversized_micro_batch_once(tmp_path):
    bin_dir = _fake_python(tmp_path)
    work, runs = tmp_path / "work", tmp_path / "runs"
    env = _stage_env(tmp_path, bin_dir)
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "fault_oom"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert (
        calls[0]
        == f"-m verlfit train --run-dir {runs}/fault-oom --emulate p40 --plan off --batch-size 64 --mini-batch-size 64"
        f" --micro-batch-size 64 --model {work}/qwen2.5-0.5b-random --data {work}/gsm8k --steps 2"
        " --max-prompt-length 512 --max-response-length 256 --skip-checks --no-validate-before-train --test-freq -1"
        " --save-freq -1"
    )
    assert calls[1:] == []  # the runner reads run.json's outcome itself (the fake made none)
    assert f"fault_oom outcome: no {runs}/fault-oom/run.json" in (runs / "stages.log").read_text()
    # a later call: the run is there, nothing is relaunched
    (runs / "fault-oom").mkdir()
    (runs / "fault-oom" / "run.json").write_text('{"outcome": {"status": "failed", "reason": "oom"}}')
    (tmp_path / "calls").unlink()
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "fault_oom"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "calls").exists()  # nothing started
    assert (
        f'fault_oom: done in an earlier call ({runs}/fault-oom): {{"status": "failed", "reason": "oom"}}'
        in (runs / "stages.log").read_text()
    )


def test_bench_stage_runs_the_card_with_hf_rollout_and_sdpa_then_emulating_p40(tmp_path):
    # the device's stack has no vLLM and no flash-attn: the card's bench (a10 profile on an H200) must fall back
    bin_dir = _fake_python(tmp_path)
    work, out = tmp_path / "work", tmp_path / "out"
    env = {key: value for key, value in os.environ.items() if key != "BENCH_MODES"}
    env.update(
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        WORK=str(work),
        RUNS=str(tmp_path / "runs"),
        OUT=str(out),
        GSM8K_DIR=str(tmp_path / "no-gsm8k"),
    )
    result = subprocess.run([sys.executable, str(SCRIPT), "bench"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "calls").read_text().splitlines() == [
        f"-m verlfit bench --rollout hf --attention sdpa --work {work}/bench --output {out}/bench-h200.json",
        f"-m verlfit bench --emulate p40 --work {work}/bench --output {out}/bench-h200-emulate-p40.json",
    ]


def test_learn_lora_names_an_unknown_algorithm_and_runs_nothing(tmp_path):
    """LEARN_LORA_ALGOS=gpro matched neither grep -w and the stage ran nothing without a word."""
    bin_dir = _fake_python(tmp_path)
    work, runs = tmp_path / "work", tmp_path / "runs"
    env = {key: value for key, value in os.environ.items() if key not in ("LORA_EXTRA", "LEARN_LORA_LRS")}
    env.update(
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        WORK=str(work),
        RUNS=str(runs),
        OUT=str(tmp_path / "out"),
        LEARN_LORA_ALGOS="ppo gpro",
    )
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "learn_lora"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert (
        "learn_lora: LEARN_LORA_ALGOS has 'gpro'; write ppo, grpo or both (\"ppo grpo\"): nothing run"
        in (runs / "stages.log").read_text()
    )
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    assert not any(line.startswith("-m verlfit train") for line in calls)


def _fake_python_with_rollout_dtype(tmp_path):
    """As _fake_python, each line starting with the VLLM_DTYPE the command saw."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\necho "VLLM_DTYPE=${{VLLM_DTYPE:-}} $*" >> {tmp_path / "calls"}\n')
    (bin_dir / "python3").chmod(0o755)
    return bin_dir


def test_fp16_stage_plans_and_runs_t4_v100_and_p40_on_the_t4_budget_one_after_the_other(tmp_path):
    bin_dir = _fake_python_with_rollout_dtype(tmp_path)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WORK": str(tmp_path / "work"),
        "RUNS": str(tmp_path / "runs"),
        "OUT": str(tmp_path / "out"),
        "FP16_CONFIGS": "t4 v100 p40_t4_budget bogus",
    }
    env.pop("VLLM_DTYPE", None)
    result = subprocess.run([sys.executable, str(SCRIPT), "fp16"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    work, runs = tmp_path / "work", tmp_path / "runs"
    sizes = f"--model {work}/qwen2.5-0.5b-random --batch-size 32 --max-prompt-length 512 --max-response-length 256"
    common = (
        f"--model {work}/qwen2.5-0.5b-random --data {work}/gsm8k --steps 10 --batch-size 32 --max-prompt-length 512"
        " --max-response-length 256 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
    )
    assert (tmp_path / "calls").read_text().splitlines() == [
        f"VLLM_DTYPE= -m verlfit plan --emulate t4 {sizes}",
        f"VLLM_DTYPE= -m verlfit train --run-dir {runs}/fp16-t4 --emulate t4 {common}",
        f"VLLM_DTYPE= -m verlfit plan --emulate v100 {sizes}",
        f"VLLM_DTYPE= -m verlfit train --run-dir {runs}/fp16-v100 --emulate v100 {common}",
        f"VLLM_DTYPE= -m verlfit plan --profile p40 --gpu-memory 14 {sizes}",
        (
            f"VLLM_DTYPE= -m verlfit train --run-dir {runs}/fp16-p40_t4_budget --profile p40 --gpu-memory-limit 14"
            f" {common}"
        ),
    ]
    assert "stage fp16: unknown configuration 'bogus'" in (runs / "stages.log").read_text()


def test_learn_fp16_stage_runs_ppo_and_grpo_with_an_fp16_and_an_fp32_rollout(tmp_path):
    bin_dir = _fake_python_with_rollout_dtype(tmp_path)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WORK": str(tmp_path / "work"),
        "RUNS": str(tmp_path / "runs"),
        "OUT": str(tmp_path / "out"),
    }
    env.pop("VLLM_DTYPE", None)
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "learn_fp16"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    work, runs = tmp_path / "work", tmp_path / "runs"
    trains = sorted(line for line in (tmp_path / "calls").read_text().splitlines() if " -m verlfit train " in line)
    shape = (
        f"--model {work}/small-sft --data {work}/synthetic --steps 200 --batch-size 64 --max-prompt-length 256"
        " --max-response-length 128 --actor-lr 1e-5"
    )
    tail = "--skip-checks --test-freq 20 --save-freq -1"
    assert trains == sorted(
        f"VLLM_DTYPE={dtype} -m verlfit train --run-dir {runs}/learn-fp16-{algo}-rollout-{dtype} --emulate t4"
        f" {'--algo grpo ' if algo == 'grpo' else ''}{shape} {'--critic-lr 5e-5 ' if algo == 'ppo' else ''}{tail}"
        for dtype in ("float16", "float32")
        for algo in ("ppo", "grpo")
    )


def test_own_task_stage_prepares_the_own_data_and_trains_both_models_with_the_reward_function(tmp_path):
    bin_dir = _fake_python(tmp_path)
    work, runs = tmp_path / "work", tmp_path / "runs"
    for name in ("qwen3-0.6b-random", "qwen3-1.7b-random"):
        (work / name).mkdir(parents=True)
        (work / name / "config.json").write_text("{}")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WORK": str(work),
        "RUNS": str(runs),
        "OUT": str(tmp_path / "out"),
    }
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "own_task"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    reward = f"{REPO}/benchmarks/own_task_reward.py"
    assert calls[0] == f"benchmarks/own_task.py --output {work}/own/raw --train-size 4096 --test-size 256"
    assert calls[2].startswith(
        f"-m verlfit prepare-data --train {work}/own/raw/train.jsonl --test {work}/own/raw/test.jsonl --question-column"
        " problem --answer-column solution --data-source verlfit/shelf-stock --prompt-template "
    )
    trains = [call for call in calls if call.startswith("-m verlfit train")]
    assert trains == [
        (
            f"-m verlfit train --run-dir {runs}/own-grpo-lora-qwen3-1p7b --emulate p40 --algo grpo --lora-rank 16"
            f" --model {work}/qwen3-1.7b-random --data {work}/own/data --steps 4 --batch-size 16 --max-prompt-length"
            " 256 --max-response-length 128 --skip-checks --no-validate-before-train --test-freq -1 --save-freq 4"
            f" --reward-function {reward}:compute_score"
        ),
        (
            f"-m verlfit train --run-dir {runs}/own-ppo-qwen3-0p6b --emulate p40 --model {work}/qwen3-0.6b-random"
            f" --data {work}/own/data --steps 4 --batch-size 16 --max-prompt-length 256 --max-response-length 128"
            " --skip-checks --no-validate-before-train --test-freq -1 --save-freq 4 --reward-function"
            f" {reward}:compute_score"
        ),
    ]
    evals = [call for call in calls if call.startswith("-m verlfit eval")]
    assert evals == [
        f"-m verlfit eval {runs}/own-{name}/export/global_step_none --data {work}/own/data --batch-size 64"
        f" --reward-function {reward}:compute_score --output {runs}/own-{name}/eval/global_step_none-test --limit 64"
        for name in ("grpo-lora-qwen3-1p7b", "ppo-qwen3-0p6b")
    ]


def test_setup_makes_the_qwen3_models_when_own_task_is_named(tmp_path):
    bin_dir = _fake_python(tmp_path)
    work = tmp_path / "work"
    (work / "qwen2.5-0.5b-random").mkdir(parents=True)
    (work / "qwen2.5-0.5b-random" / "config.json").write_text("{}")
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho fake\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WORK": str(work),
        "RUNS": str(tmp_path / "runs"),
        "OUT": str(tmp_path / "out"),
        "VERLFIT_SITE": str(tmp_path / "site"),
        "SKIP_TINY": "1",
        "SETUP_FOR": "own_task",
    }
    result = subprocess.run([sys.executable, str(SCRIPT), "setup"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    for shape in ("qwen3-0.6b", "qwen3-1.7b"):
        assert (
            f"benchmarks/make_model.py --shape {shape} --output {work}/{shape}-random --tokenizer-dir"
            f" {work}/qwen2.5-0.5b-random" in calls
        )


def test_lora_families_stage_makes_each_model_plans_and_trains_every_run(tmp_path):
    bin_dir = _fake_python(tmp_path)
    work, runs = tmp_path / "work", tmp_path / "runs"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WORK": str(work),
        "RUNS": str(runs),
        "OUT": str(tmp_path / "out"),
    }
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "lora_families"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()  # the runs go at once: their lines interleave
    common = "--skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
    gsm8k, own = f"--data {work}/gsm8k", f"--data {work}/own/data"
    # the own task's runs are scored by its reward function (verl has no scorer for verlfit/shelf-stock)
    reward = f"--reward-function {REPO}/benchmarks/own_task_reward.py:compute_score"
    untrimmed = (
        "-- +actor_rollout_ref.actor.trim_padding=False +actor_rollout_ref.ref.trim_padding=False"
        " +actor_rollout_ref.rollout.trim_padding=False"
    )
    expected_train = [
        (
            f"lora-qwen3-0p6b-ppo-gsm8k --emulate p40 --model {work}/qwen3-0.6b-random {gsm8k} --steps 3"
            f" {common} --lora-rank 32 --batch-size 32 --max-prompt-length 512 --max-response-length 256"
        ),
        (
            f"lora-qwen3-1p7b-ppo-own --emulate p40 --model {work}/qwen3-1.7b-random {own} --steps 3"
            f" {common} {reward} --lora-rank 16 --batch-size 16 --max-prompt-length 256 --max-response-length 128"
        ),
        (
            f"lora-qwen3-4b-grpo-own --emulate p40 --model {work}/qwen3-4b-random {own} --steps 3"
            f" {common} {reward} --algo grpo --lora-rank 16 --batch-size 8 --max-prompt-length 256"
            " --max-response-length 128"
        ),
        (
            f"lora-llama-3.2-1b-grpo-gsm8k --emulate p40 --model {work}/llama-3.2-1b-random {gsm8k} --steps 3"
            f" {common} --algo grpo --lora-rank 32 --batch-size 16 --max-prompt-length 512 --max-response-length 256"
        ),
        (
            f"lora-llama-3.2-3b-grpo-gsm8k --emulate p40 --model {work}/llama-3.2-3b-random {gsm8k} --steps 3"
            f" {common} --algo grpo --lora-rank 16 --batch-size 8 --max-prompt-length 512 --max-response-length 256"
        ),
        (
            f"lora-llama-3.2-1b-ppo-gsm8k --emulate p40 --model {work}/llama-3.2-1b-random {gsm8k} --steps 3"
            f" {common} --lora-rank 32 --batch-size 32 --max-prompt-length 512 --max-response-length 256"
        ),
        (
            f"lora-llama-3.2-1b-grpo-gsm8k-untrimmed --emulate p40 --model {work}/llama-3.2-1b-random {gsm8k} --steps 3"
            f" {common} --algo grpo --lora-rank 32 --batch-size 16 --max-prompt-length 512 --max-response-length 256"
            f" {untrimmed}"
        ),
    ]
    assert sorted(line for line in calls if " train " in line) == sorted(
        f"-m verlfit train --run-dir {runs}/{words}" for words in expected_train
    )
    # a model is made where its config.json is missing (the fake python writes none, so the two 1B runs both ask)
    makes = sorted(
        line.split(" --output ")[1].split()[0] for line in calls if line.startswith("benchmarks/make_model.py")
    )
    assert makes == sorted(
        f"{work}/{shape}-random"
        for shape in (
            "qwen3-0.6b",
            "qwen3-1.7b",
            "qwen3-4b",
            "llama-3.2-1b",
            "llama-3.2-1b",
            "llama-3.2-1b",
            "llama-3.2-3b",
        )
    )
    # the plan gets the sizes, never the overrides after --
    assert (
        f"-m verlfit plan --model {work}/llama-3.2-1b-random --emulate p40 --algo grpo --lora-rank 32 --batch-size 16"
        " --max-prompt-length 512 --max-response-length 256" in calls
    )
    assert not any(" plan " in line and " -- " in line for line in calls)


def test_lora_families_runs_only_the_named_runs(tmp_path):
    bin_dir = _fake_python(tmp_path)
    work, runs = tmp_path / "work", tmp_path / "runs"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WORK": str(work),
        "RUNS": str(runs),
        "OUT": str(tmp_path / "out"),
        "LORA_FAMILY_NAMES": "lora-qwen3-4b-grpo-own lora-llama-3.2-1b-grpo-gsm8k",
    }
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "lora_families"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    trained = sorted(line.split(" --run-dir ")[1].split()[0] for line in calls if " train " in line)
    # the name is matched whole: lora-llama-3.2-1b-grpo-gsm8k-untrimmed is not taken for lora-llama-3.2-1b-grpo-gsm8k
    assert trained == [f"{runs}/lora-llama-3.2-1b-grpo-gsm8k", f"{runs}/lora-qwen3-4b-grpo-own"]


def test_learn_own_warms_the_small_model_up_on_own_task_problems_and_compares_against_that(tmp_path):
    bin_dir = _fake_python(tmp_path)
    work, runs = tmp_path / "work", tmp_path / "runs"
    for name in ("small-sft", "synthetic-raw", "synthetic", "own/raw", "own/data"):
        (work / name).mkdir(parents=True)
    for path in (
        "small-sft/config.json",
        "synthetic-raw/train.jsonl",
        "synthetic/train.parquet",
        "own/raw/train.jsonl",
        "own/data/train.parquet",
    ):
        (work / path).write_text("{}")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WORK": str(work),
        "RUNS": str(runs),
        "OUT": str(tmp_path / "out"),
    }
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "learn_own"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    reward = f"--reward-function {REPO}/benchmarks/own_task_reward.py:compute_score"
    assert calls[0] == f"benchmarks/own_task.py --warmup --output {work}/own/warmup --train-size 4096 --test-size 256"
    # calls[1]: the instruction, printed by own_task.instruction() through python3 -c
    assert (
        calls[2] == f"benchmarks/sft_warmup.py --init-model {work}/small-sft --data-dir {work}/own/warmup --output"
        f" {work}/own-sft "
        "--instruction  --seed 2 --eval-every 10 --max-new-tokens 128"
    )  # the fake python prints no instruction
    assert (
        calls[3]
        == f"-m verlfit train --run-dir {runs}/learn-own-grpo --emulate p40 --algo grpo --model {work}/own-sft --data"
        f" {work}/own/data --steps 200 --batch-size 64 --max-prompt-length 256 --max-response-length 128 --actor-lr"
        f" 1e-5 --skip-checks --test-freq 20 --save-freq 200 {reward}"
    )
    assert any(call.startswith("-m verlfit eval ") and call.endswith(f"--compare {work}/own-sft") for call in calls)


def test_lora16_stage_plans_and_trains_the_targets_and_runs_the_learning_check_with_both_bases(tmp_path):
    bin_dir = _fake_python(tmp_path)
    work, runs = tmp_path / "work", tmp_path / "runs"
    # the models and the learning check's data already made (setup, learn_data): the stage makes none of them again
    for folder in ("qwen3-4b-random", "qwen2.5-3b-random", "qwen2.5-7b-random", "small-sft"):
        (work / folder).mkdir(parents=True)
        (work / folder / "config.json").write_text("{}")
    (work / "synthetic-raw").mkdir(parents=True)
    (work / "synthetic-raw" / "train.jsonl").write_text("")
    (work / "synthetic").mkdir()
    (work / "synthetic" / "train.parquet").write_text("")
    unset = ("LORA16_LEARN_BASES", "LEARN_TEST_FREQ", "LORA16_SPEED", "LORA16_SPEED_STEPS", "LORA16_PARTS")
    env = {key: value for key, value in os.environ.items() if key not in unset}
    env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", WORK=str(work), RUNS=str(runs), OUT=str(tmp_path / "out"))
    command = [sys.executable, str(SCRIPT), "lora16"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    unsorted = (tmp_path / "calls").read_text().splitlines()
    calls = sorted(unsorted)  # the runs go at once: their lines interleave
    common = "--skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
    size = "--lora-rank 32 --batch-size 16 --max-prompt-length 512 --max-response-length 256"
    targets = {
        "lora16-qwen3-4b-grpo-t4": ("qwen3-4b", f"--emulate t4 --algo grpo {size}"),
        "lora16-qwen2.5-3b-ppo-p40": ("qwen2.5-3b", f"--emulate p40 {size}"),
        "lora16-qwen2.5-7b-grpo-a10": ("qwen2.5-7b", f"--emulate a10 --rollout hf --attention sdpa --algo grpo {size}"),
    }
    learn = (
        f"--emulate p40 --algo grpo --model {work}/small-sft --data {work}/synthetic --steps 200 --batch-size 64 "
        "--max-prompt-length 256 --max-response-length 128 --actor-lr 1e-4 --lora-rank 32 --lora-alpha 32 "
        "--frozen-base-dtype {base} --skip-checks --test-freq 50 --save-freq 200"
    )

    def learned(base):
        # the run, then its last checkpoint exported and scored against the model it started from on the rows its
        # validation used (no checkpoint is saved here: the step reads "none"), then its report
        run = f"{runs}/lora16-learn-grpo-{base}"
        return [
            f"-m verlfit train --run-dir {run} " + learn.format(base=base),
            f"-m verlfit export {run} --force",
            f"-m verlfit eval {run}/export/global_step_none --data {work}/synthetic --limit 256 --batch-size 64 "
            f"--compare {work}/small-sft --output {run}/eval/global_step_none-test",
            f"-m verlfit report {run}",
        ]

    gsm8k = f"--data {work}/gsm8k"
    expected = [
        *(f"-m verlfit plan --model {work}/{shape}-random --auto-fit {words}" for shape, words in targets.values()),
        *(
            f"-m verlfit train --run-dir {runs}/{name} --model {work}/{shape}-random {gsm8k} --steps 3 {common} {words}"
            for name, (shape, words) in targets.items()
        ),
        f"-m verlfit plan --model {work}/qwen2.5-7b-random --emulate p40 --algo grpo {size} --auto-fit",
        *learned("bfloat16"),
        *learned("float32"),
    ]
    # (c) after the targets, one after the other: the speed pick's choice, then the memory-first one
    speed = "--emulate p40 --lora-rank 32 --batch-size 32 --max-prompt-length 512 --max-response-length 256"
    kept = "--frozen-base-dtype bfloat16 --gradient-checkpointing"
    small = f"--model {work}/qwen2.5-0.5b-random"
    expected_speed = [
        f"-m verlfit plan {small} --auto-fit {speed}",
        f"-m verlfit train --run-dir {runs}/lora16-speed-chosen {small} {gsm8k} --steps 4 {common} {speed}",
        f"-m verlfit plan {small} --auto-fit {speed} {kept}",
        f"-m verlfit train --run-dir {runs}/lora16-speed-memory-first {small} {gsm8k} --steps 4 {common} {speed} "
        + kept,
    ]
    assert [line for line in unsorted if "lora16-speed" in line or f"{small} --auto-fit" in line] == expected_speed
    targets_trained = [unsorted.index(line) for line in unsorted if " train " in line and "/lora16-qwen" in line]
    assert max(targets_trained) < unsorted.index(expected_speed[0])  # (c) starts once the targets have ended
    assert calls == sorted(expected + expected_speed)
    # a wrong base is named in the log and skipped; LORA16_SPEED=0 leaves (c) out
    (tmp_path / "calls").unlink()
    env.update(LORA16_LEARN_BASES="float16", LORA16_SPEED="0")
    subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=True)
    stages_log = (runs / "stages.log").read_text()
    assert "lora16: LORA16_LEARN_BASES has 'float16'; write some of bfloat16, float32 and nf4" in stages_log
    later = (tmp_path / "calls").read_text().splitlines()
    assert not any("lora16-learn" in call or "lora16-speed" in call for call in later)
    # LORA16_PARTS=learn: the learning check alone (issue 43 item 6), nothing of (a) or (c)
    (tmp_path / "calls").unlink()
    env.update(LORA16_LEARN_BASES="bfloat16", LORA16_SPEED="1", LORA16_PARTS="learn")
    subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=True)
    assert (tmp_path / "calls").read_text().splitlines() == learned("bfloat16")
    # the NF4 base's learning check (patch 0028) beside the 16-bit one
    (tmp_path / "calls").unlink()
    env.update(LORA16_LEARN_BASES="nf4")
    subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=True)
    assert (tmp_path / "calls").read_text().splitlines() == learned("nf4")
    (tmp_path / "calls").unlink()
    env.update(LORA16_LEARN_BASES="bfloat16")
    subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=True)
    env.update(LORA16_PARTS="learn bogus")
    subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=True)
    assert (
        "lora16: LORA16_PARTS has 'bogus'; write learn, targets or both: nothing run"
        in (runs / "stages.log").read_text()
    )
    assert (tmp_path / "calls").read_text().splitlines() == learned("bfloat16")


def test_lora16_speed_stage_runs_the_speed_pick_then_the_memory_first_choice_alone(tmp_path):
    bin_dir = _fake_python(tmp_path)
    work, runs = tmp_path / "work", tmp_path / "runs"
    env = {key: value for key, value in os.environ.items() if key != "LORA16_SPEED"}
    env.update(
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        WORK=str(work),
        RUNS=str(runs),
        OUT=str(tmp_path / "out"),
        LORA16_SPEED_STEPS="2",
    )
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "lora16_speed"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    common = "--skip-checks --no-validate-before-train --test-freq -1 --save-freq -1"
    speed = "--emulate p40 --lora-rank 32 --batch-size 32 --max-prompt-length 512 --max-response-length 256"
    kept = "--frozen-base-dtype bfloat16 --gradient-checkpointing"
    small, gsm8k = f"--model {work}/qwen2.5-0.5b-random", f"--data {work}/gsm8k"
    assert (tmp_path / "calls").read_text().splitlines() == [
        f"-m verlfit plan {small} --auto-fit {speed}",
        f"-m verlfit train --run-dir {runs}/lora16-speed-chosen {small} {gsm8k} --steps 2 {common} {speed}",
        f"-m verlfit plan {small} --auto-fit {speed} {kept}",
        f"-m verlfit train --run-dir {runs}/lora16-speed-memory-first {small} {gsm8k} --steps 2 {common} {speed} "
        + kept,
    ]
    # each plan's output goes to its own file beside the runs (the fake python3 prints nothing into them)
    plans = sorted(path.name for path in runs.glob("*.plan"))
    assert plans == ["lora16-speed-chosen.plan", "lora16-speed-memory-first.plan"]


def _failing_python(tmp_path, failing):
    """A bin directory whose python3 records its arguments and exits 1 when they contain ``failing``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(
        f'#!/bin/sh\necho "$*" >> {tmp_path / "calls"}\ncase "$*" in *{failing}*) exit 1 ;; esac\n'
    )
    (bin_dir / "python3").chmod(0o755)
    return bin_dir


def test_parallel_returns_non_zero_when_a_stage_fails_and_still_runs_the_others(tmp_path):
    """A bare `wait` returned 0 although setup had failed; the other stage still runs to its end."""
    bin_dir = _failing_python(tmp_path, "make_model.py")
    work, runs = tmp_path / "work", tmp_path / "runs"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WORK": str(work),
        "RUNS": str(runs),
        "OUT": str(tmp_path / "out"),
        "VERLFIT_SITE": str(tmp_path / "site"),
    }
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--parallel", "setup", "noeos"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 1
    log = (runs / "stages.log").read_text()
    assert (
        "stage setup failed: RuntimeError('setup: make_model.py --shape qwen2.5-0.5b --output"
        f" {work}/qwen2.5-0.5b-random failed')" in log
    )
    assert f"noeos: no {work}/qwen2.5-0.5b-random (run setup first: it makes the tokenizer and GSM8K)" in log
    assert log.rstrip("\n").endswith("failed stages: setup")
    # one after the other, a failed stage stops the stages after it (they build on it)
    (runs / "stages.log").unlink()
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "setup", "noeos"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 1
    assert "== stage noeos" not in (runs / "stages.log").read_text()


def test_a_run_that_fails_is_logged_and_the_stage_goes_on(tmp_path):
    bin_dir = _failing_python(tmp_path, "speed-today")
    runs = tmp_path / "runs"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WORK": str(tmp_path / "work"),
        "RUNS": str(runs),
        "OUT": str(tmp_path / "out"),
        "SPEED_CONFIGS": "today all",
        "SKIP_DECODE_BENCH": "1",
    }
    result = subprocess.run([sys.executable, str(SCRIPT), "speed"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    log = (runs / "stages.log").read_text()
    assert "end speed-today: status 1 after 0 s" in log and "end speed-all: status 0 after 0 s" in log


def test_runs_stop_at_the_deadline_through_one_time_limit(tmp_path):
    """STAGE_TIMEOUT caps each run; DEADLINE cuts it to what is left; timeout sends SIGINT, SIGKILL 20 s later."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text("#!/bin/sh\nsleep 30\n")
    (bin_dir / "python3").chmod(0o755)
    runs = tmp_path / "runs"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WORK": str(tmp_path / "work"),
        "RUNS": str(runs),
        "OUT": str(tmp_path / "out"),
        "STAGE_TIMEOUT": "3000",
        "DEADLINE": "0",
    }
    result = subprocess.run([sys.executable, str(SCRIPT), "tuned"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    # the deadline has passed: the run gets the 5 s floor, then SIGINT (sh dies of it: timeout reports 124)
    assert "end tuned-p40: status 124 after 5 s" in (runs / "stages.log").read_text()


def test_help_lists_every_environment_variable_and_the_wrapper_hands_over(tmp_path):
    text = run(tmp_path, "--help").stdout
    for name in (
        "VERLFIT_SITE",
        "GSM8K_DIR",
        "WORK",
        "RUNS",
        "OUT",
        "DEADLINE",
        "STAGE_TIMEOUT",
        "SETUP_FOR",
        "LORA_EXTRA",
        "KEEP_FULL_CHECKPOINTS",
    ):
        assert f"\n  {name}\n" in text or f"\n  {name}," in text, name
    wrapper = subprocess.run(
        ["bash", str(SCRIPT.with_suffix(".sh")), "bogus"], capture_output=True, text=True, timeout=60
    )
    assert wrapper.returncode == 2 and "device_run.py: unknown stage 'bogus'" in wrapper.stderr


def test_a_deadline_that_is_not_epoch_seconds_is_refused_before_anything_is_written(tmp_path):
    env = {
        **os.environ,
        "WORK": str(tmp_path / "work"),
        "RUNS": str(tmp_path / "runs"),
        "OUT": str(tmp_path / "out"),
        "DEADLINE": "now+540",
    }
    result = subprocess.run([sys.executable, str(SCRIPT), "setup"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2
    assert (
        result.stderr
        == "device_run.py: DEADLINE='now+540' is not a whole number of seconds; write e.g. DEADLINE=$(( $(date +%s) +"
        " 540 ))\n"
    )
    assert not any((tmp_path / name).exists() for name in ("work", "runs", "out"))
