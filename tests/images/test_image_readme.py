"""README.md against the records it summarises: the results paragraph says what docs/benchmarks.md
says (the machine, the torch, the weights, the learning check's model), it claims nothing of
docs/images.md that is not there, and the developer path names its prerequisites."""

from __future__ import annotations

import re

from image_helpers import REPO

README = (REPO / "README.md").read_text()
BENCHMARKS = (REPO / "docs" / "benchmarks.md").read_text()
IMAGES = (REPO / "docs" / "images.md").read_text()


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    following = re.search(r"^#{1,3} ", text[start + len(heading) :], re.MULTILINE)
    return text[start : start + len(heading) + (following.start() if following else len(text))]


def flat(text: str) -> str:
    return " ".join(text.split())


def test_results_paragraph_says_what_the_benchmarks_record():
    results = flat(section(README, "### What it does on a GPU"))
    machine = re.search(r"\*\*Machine:\*\* one NVIDIA (H200) .*?, torch (\S+),", flat(BENCHMARKS))
    assert machine.groups() == ("H200", "2.11.0+cu130")
    assert "on one H200 standing in for a P40 (`--emulate p40`" in results
    assert (
        "with torch 2.11.0+cu130 and verl 0.4.1 from PyPI with the patch series applied, not the image's torch"
        " 2.6.0+cu118" in results
    )
    assert "text it generates is noise, so every GSM8K reward is 0" in flat(BENCHMARKS)
    assert "The 0.5B runs use **random weights** with the exact Qwen2.5-0.5B-Instruct shape" in results
    assert "**every GSM8K reward is 0**" in results
    assert "a small Qwen2 (4 layers, hidden 256" in flat(BENCHMARKS)
    assert "The learning check is a different, **4-layer Qwen2 (hidden 256)**, first warmed up" in results
    # every number the paragraph quotes from the learning check and section 1 is in the record
    for number in ("21x", "+0.148", "+0.199", "0.320 -> 0.469", "0.320 -> 0.520", "13.5 s", "50 of 50"):
        assert number in results, number
        assert (
            number in flat(BENCHMARKS)
            or number.replace(" -> ", "") in BENCHMARKS
            or f"| {number.split()[0]}" in BENCHMARKS
        ), number


def test_readme_claims_of_images_md_hold():
    images_line = flat(section(README, "## Images"))
    assert "the A10 wheels' checksums, the full pin list" not in images_line
    assert (
        "how to get and check the A10 image's five wheel checksums (no one publishes them, so none ships here and the "
        "build refuses to start without them)" in images_line
    )
    a10_wheels = section(IMAGES, "### A10 wheels")
    assert re.findall(r"\b[0-9a-f]{64}\b", a10_wheels) == []  # it tells how to get them; it has none
    assert "Take them once, from a machine you trust, and keep them" in a10_wheels
    # each build arg the build requires, in its table and in the make command it ends with
    names = (
        "VLLM_WHEEL_SHA256",
        "FLASH_ATTN_WHEEL_SHA256",
        "TORCHVISION_WHEEL_SHA256",
        "TORCHAUDIO_WHEEL_SHA256",
        "XFORMERS_WHEEL_SHA256",
    )
    assert re.findall(r"\| `(\w+_WHEEL_SHA256)` \|", a10_wheels) == list(names)
    assert "make image-a10 " + " ".join(f"{name}=..." for name in names) in flat(a10_wheels)
    assert "### Hashes" in IMAGES and "### A second source for the base images: NVIDIA's registry" in IMAGES


def test_developer_prerequisites_are_named():
    developing = flat(section(README, "## Developing"))
    for needed in (
        "Python 3.10–3.12 with its `venv` module",
        "`python3-venv`",
        "GNU `patch`",
        "`curl`",
        "`gcc`",
        "PYTHON=python3.12 make test",
        "`TORCH_INDEX_URL` (default `https://download.pytorch.org/whl/cpu`)",
    ):
        assert needed in developing, needed


ARCHITECTURE = (REPO / "docs" / "architecture.md").read_text()
PATCHES_README = (REPO / "patches" / "README.md").read_text()


def test_every_subcommand_has_a_line_in_the_launcher_table():
    import sys

    sys.path.insert(0, str(REPO / "entrypoint"))
    from verlfit.cli import SUBCOMMANDS

    table = section(README, "## The launcher: `verlfit`")
    rows = re.findall(r"^\| `verlfit ([a-z0-9-]+)", table, re.MULTILINE)
    assert sorted(rows) == sorted(SUBCOMMANDS)


def test_every_compose_service_is_named():
    import yaml

    services = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
    running = flat(section(README, "### Running with compose"))
    single_host = [name for name, service in services.items() if "cluster" not in service.get("profiles", [])]
    assert "bench" in single_host
    for name in single_host:
        assert f"`{name}`" in running, name
    assert "package `docker-compose-plugin`" in running


def test_every_module_is_in_the_readme_layout_and_the_architecture_table():
    package = REPO / "entrypoint" / "verlfit"
    modules = sorted(path.stem for path in package.glob("*.py") if path.stem not in ("__init__", "__main__"))
    plan_parts = sorted(path.stem for path in (package / "plan").glob("*.py") if path.stem != "__init__")
    layout = section(README, "Layout: ")
    for name in modules + plan_parts:
        assert f"`{name}`" in layout, name
    for name in modules:
        assert f"| `{name}.py` |" in ARCHITECTURE, name
    for name in plan_parts:
        assert f"| `plan/{name}.py` |" in ARCHITECTURE, name


def test_every_key_a_patch_adds_is_in_the_architecture_keys_table():
    series = section(PATCHES_README, "## The series")
    keys = sorted(set(re.findall(r"`(\+[a-z_.]+)`", series)))
    assert "+actor_rollout_ref.rollout.unwrap_fsdp" in keys and "+critic.trim_padding" in keys
    table = section(ARCHITECTURE, "## Keys added by patches/verl-0.4.1")
    for key in keys:
        assert f"| `{key}=" in table, key
    for lora_key in ("actor_rollout_ref.model.lora_rank", "critic.model.lora_rank"):
        assert f"| `{lora_key}` > 0" in table, lora_key


def test_the_developing_section_names_the_version_pairs_the_tests_and_images_differ_in():
    from image_helpers import LOCKS, lock_pins

    images = lock_pins(*LOCKS)
    tests = dict(
        line.split("==")
        for line in (REPO / "tests" / "requirements-ci.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    developing = flat(section(README, "## Developing"))
    assert f"torch {tests['torch']} (the CPU build) here, {images['torch']} in the images" in developing
    assert f"PEFT {tests['peft']} here, {images['peft']} in the images" in developing
    for name in ("accelerate", "pyarrow", "tokenizers"):
        assert tests[name] != images[name], name
        assert f"{name} {tests[name]} / {images[name]}" in developing, name
    assert (
        f"transformers {tests['transformers']} in both" in developing
        and tests["transformers"] == images["transformers"]
    )
    assert "third torch, 2.11.0+cu130" in developing
    # patch 0010's claim, as patches/README.md makes it
    assert "PEFT 0.15, the images' pin, accepted them" in flat(
        PATCHES_README
    ) and "loads back to the trained adapter with both versions" in flat(PATCHES_README)
    assert "with PEFT 0.15 and 0.21" in developing


def test_the_image_table_quotes_xformers_as_locked():
    from image_helpers import lock_pins

    version = lock_pins("a10-cu118.lock")["xformers"]
    assert f"/ {version} (the CUDA 11.8 build, from the PyTorch cu118 index) |" in section(README, "## Images")


def test_the_speed_keys_paragraph_matches_the_profile_and_train():
    speed = flat(section(README, "### The p40 profile's speed keys"))
    profile = (REPO / "entrypoint" / "verlfit" / "profiles" / "p40.yaml").read_text()
    from verlfit.profiles import load_profile

    from verlfit.run_settings import TrainSettings

    p40 = load_profile("p40").overrides
    for key in (
        "actor_rollout_ref.actor.trim_padding",
        "actor_rollout_ref.ref.trim_padding",
        "critic.trim_padding",
        "actor_rollout_ref.rollout.trim_padding",
    ):
        assert f"`+{key}`" in speed and f"+{key}=True" in p40, key
    # CUDA-graph decoding: on in the profile since section 10's run, off with LoRA and on several GPUs (forced_switches)
    assert (
        "it turns on CUDA-graph decoding without Triton too (patch 0022, `+actor_rollout_ref.rollout.cuda_graph`)"
        in speed
    )
    assert "+actor_rollout_ref.rollout.cuda_graph=True" in p40 and "(docs/benchmarks.md section 1.4;" in profile
    from verlfit.patch_switches import forced_switches

    assert forced_switches(TrainSettings(model="m", lora_rank=32), load_profile("p40")) == [
        "+actor_rollout_ref.rollout.unwrap_fsdp=True"
    ]
    assert forced_switches(TrainSettings(model="m", gpus=2), load_profile("p40")) == [
        "+actor_rollout_ref.rollout.cuda_graph=False"
    ]
    assert (
        "The graphs stay on with `--lora-rank`" in speed
        and "`-- +actor_rollout_ref.rollout.cuda_graph=False` turns them off" in speed
    )
    assert "verlfit turns them off, with a note, on several GPUs (written and tested for one)" in speed
    # patch 0023: on by verlfit for LoRA on one GPU (patch_switches.unwraps_lora_generation), off after -- by the user
    from verlfit.patch_switches import unwraps_lora_generation

    assert unwraps_lora_generation(TrainSettings(model="m", lora_rank=32), load_profile("p40"))
    assert not unwraps_lora_generation(TrainSettings(model="m", lora_rank=32, gpus=2), load_profile("p40"))
    assert (
        "with `--lora-rank` on one GPU, verlfit turns on patch 0023 (`+actor_rollout_ref.rollout.unwrap_fsdp=True`"
        in speed
    )
    assert "`-- +actor_rollout_ref.rollout.unwrap_fsdp=False` turns it off" in speed
    assert "`verlfit train -- actor_rollout_ref.rollout.trim_padding=False`" in speed


def test_no_tracker_that_does_not_exist_and_no_internal_notes_cited():
    assert "the project's tracker" not in README
    tracked = (
        __import__("subprocess")
        .run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
        .stdout.split()
    )
    citing = [
        name
        for name in tracked
        if (REPO / name).is_file()
        and "FACTS.md" in (REPO / name).read_text(errors="replace")
        and name != "tests/images/test_image_readme.py"
    ]
    assert citing == []


def fenced_block(heading: str) -> list[str]:
    """The first ```bash block under a README heading, as command lines (comments dropped, continuations joined)."""
    body = section(README, heading)
    block = re.search(r"```bash\n(.*?)```", body, re.DOTALL).group(1)
    lines = [line.split("  #")[0].rstrip() for line in block.replace("\\\n", " ").splitlines()]
    return [" ".join(line.split()) for line in lines if line.strip()]


def test_the_first_40_lines_give_the_two_docker_commands_and_the_test_command():
    first = "\n".join(README.splitlines()[:40])
    for command in ("make image-p40", "make train", "docker compose run --rm train", "make test"):
        assert command in first, command
    assert "GSM8K" in first and "Qwen2.5-0.5B-Instruct" in first


def test_no_rounds_of_work_and_no_internal_call_numbers():
    assert re.findall(r"(?i)\b(?:second|third|fourth|fifth) round\b|\bcall \d", README) == []


def test_the_try_it_without_a_gpu_lines_run_as_written(tmp_path):
    """The README's CPU path, line by line: `make dev` (tests/bootstrap.sh into VENV: this interpreter's venv, which
    bootstrap.sh made, so it checks its stamp and returns at once instead of installing again), then each
    `.venv/bin/verlfit ...` line with that venv's verlfit, run from an empty folder so nothing lands in the checkout."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    lines = fenced_block("## Try it without a GPU or Docker")
    assert lines == [
        "make dev",
        ".venv/bin/verlfit plan --profile p40",
        ".venv/bin/verlfit train --dry-run --profile p40",
    ]
    venv = Path(sys.prefix)
    environment = {**os.environ, "VENV": str(venv)}
    if (venv / ".verlfit-test-stamp").is_file():
        # bootstrap.sh's venv (the venv suite, CI): make dev finds it ready
        made = subprocess.run(
            ["make", "-C", str(REPO), "dev", f"VENV={venv}"], env=environment, capture_output=True, text=True
        )
        assert made.returncode == 0, made.stderr
        assert f"make dev: {venv}/bin/verlfit is ready" in made.stdout
    else:
        # the image's /opt/venv (the in-image suite): not bootstrap's, and not the image user's to write (make dev would
        # install into it); what make dev runs is checked, without running it
        planned = subprocess.run(
            ["make", "-n", "-C", str(REPO), "dev", f"VENV={venv}"], env=environment, capture_output=True, text=True
        )
        assert planned.returncode == 0, planned.stderr
        assert (
            "\nbash tests/bootstrap.sh\n" in planned.stdout
            and f"make dev: {venv}/bin/verlfit is ready" in planned.stdout
        ), planned.stdout
    outputs = []
    for line in lines[1:]:
        ran = subprocess.run(
            line.replace(".venv/bin/", f"{venv}/bin/"),
            shell=True,
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert ran.returncode == 0, (line, ran.stdout[-2000:], ran.stderr[-2000:])
        outputs.append(ran.stdout)
    assert "fits" in outputs[0]
    assert "python3 -m verl.trainer.main_ppo" in outputs[1] or "verl.trainer.main_ppo" in outputs[1]
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing


def test_the_own_task_example_prepares_data_the_reward_function_scores(tmp_path):
    """The README's own-task example up to training: the generator and `verlfit prepare-data` lines run as written (in
    an empty folder holding a link to benchmarks/), then the reward file scores the prepared rows' ground truth 1.0."""
    import importlib.util
    import os
    import subprocess
    import sys

    import pyarrow.parquet as pq

    lines = fenced_block("## Your own task")
    assert lines[0] == "python3 benchmarks/own_task.py --output data/shelf-raw"
    assert lines[1].startswith(
        "verlfit prepare-data --train data/shelf-raw/train.jsonl --test data/shelf-raw/test.jsonl "
    )
    assert lines[2] == "cp benchmarks/own_task_reward.py data/shelf_reward.py"
    assert (
        lines[3] == "verlfit train --data data/shelf --reward-function data/shelf_reward.py:compute_score --model"
        " Qwen/Qwen3-0.6B "
        "--algo grpo --steps 100"
    )
    assert lines[4] == "verlfit eval runs/RUN --data data/shelf --reward-function data/shelf_reward.py"
    (tmp_path / "benchmarks").symlink_to(REPO / "benchmarks")
    bin_dir = os.path.dirname(sys.executable)
    environment = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"]}
    for line in lines[:3]:
        ran = subprocess.run(
            line.replace("python3 ", f"{sys.executable} ", 1),
            shell=True,
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert ran.returncode == 0, (line, ran.stdout[-2000:], ran.stderr[-2000:])
    train = pq.read_table(tmp_path / "data" / "shelf" / "train.parquet").to_pylist()
    test = pq.read_table(tmp_path / "data" / "shelf" / "test.parquet").to_pylist()
    assert (len(train), len(test)) == (4096, 256)
    assert {row["data_source"] for row in train + test} == {"verlfit/shelf-stock"}
    first = train[0]
    assert first["prompt"][-1]["content"].endswith(
        'Think step by step, then give the final number on its own line as "Answer: N".'
    )
    spec = importlib.util.spec_from_file_location("shelf_reward", tmp_path / "data" / "shelf_reward.py")
    reward = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reward)
    truth = first["reward_model"]["ground_truth"]
    assert reward.compute_score("verlfit/shelf-stock", f"Answer: {truth}", truth, first.get("extra_info")) == 1.0
    assert reward.compute_score("verlfit/shelf-stock", "", truth, first.get("extra_info")) == 0.0
    # the same section's second block: the dry run on the path without a GPU, offline, exit 0, nothing written
    body = section(README, "## Your own task")
    blocks = re.findall(r"```bash\n(.*?)```", body, re.DOTALL)
    (dry_run,) = [" ".join(line.split()) for line in blocks[1].replace("\\\n", " ").splitlines() if line.strip()]
    assert dry_run.startswith(
        ".venv/bin/verlfit train --data data/shelf --reward-function data/shelf_reward.py:compute_score "
    ) and dry_run.endswith(" --dry-run --profile p40")
    before = sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*"))
    ran = subprocess.run(
        dry_run.replace(".venv/bin/", f"{bin_dir}/"),
        shell=True,
        cwd=tmp_path,
        env={**environment, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, (ran.stdout[-2000:], ran.stderr[-2000:])
    out = " ".join(ran.stdout.split())
    # no "Answer:" line: 0
    assert (
        "note: reward function: compute_score in " in out
        and "4096 training and 256 test rows; the ground truth scored 0 x4352; an empty response scored 0 x4352" in out
    )
    assert sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*")) == before


def test_readme_and_images_md_agree_on_the_compute_capabilities_each_image_serves():
    """The p40 image serves 6.x and 7.x cards (the 7.x ones with the v100/t4 profiles), the a10 image 8.x and 9.x."""
    assert "Two images, `verlfit:p40` (compute capability 6.x and 7.x) and `verlfit:a10` (8.x and 9.x)" in flat(README)
    table = flat(section(IMAGES, "# Container images"))
    assert "| `verlfit:p40` | compute capability 6.x and 7.x:" in table
    assert "| `verlfit:a10` | A10, L4 and other 8.x/9.x cards |" in table


def test_the_hf_cache_volume_has_one_name_in_the_docs_and_compose():
    import yaml

    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    # its default: VERLFIT_HF_CACHE_VOLUME names another uid's own volume
    assert compose["volumes"]["hf-cache"]["name"] == "${VERLFIT_HF_CACHE_VOLUME:-verlfit-hf-cache}"
    named = set(re.findall(r"-v ([\w-]+):/cache/huggingface", IMAGES + README))
    assert named == {"verlfit-hf-cache"}
    # every docker run example that trains gives docker stop the time verlfit's clean stop needs
    for example in re.findall(r"docker run [^`]*?verlfit:\w+ train", IMAGES):
        assert "--stop-timeout 120" in example, example
