"""verlfit bench: argument checks, the model and data it makes from the package alone (no checkout), the table and
the JSON from recorded runs (the training launch is mocked)."""

import io
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakes import FakeNvml
from verlfit import bench, cli, readiness
from verlfit.commands import bench as bench_command
from verlfit.errors import VerlfitError

ROOT = Path(__file__).resolve().parents[1]
CALL2 = ROOT / "benchmarks" / "results" / "2026-11-29-h200-p40-main-job-learning-planner" / "public-recipe-tuned-grpo"
RECORDED = {"public-recipe": CALL2 / "public-recipe", "verlfit": CALL2 / "tuned-p40"}


def parse(argv):
    return cli.build_parser().parse_args(["bench", *argv])


def test_validation_names_the_bad_input(tmp_path):
    with pytest.raises(VerlfitError, match="--configs 'public-recipe,fast': unknown fast") as error:
        bench_command.bench_options(parse(["--configs", "public-recipe,fast"]))
    assert error.value.fix == "use a comma-separated list of: public-recipe, verlfit"
    with pytest.raises(VerlfitError, match="--steps 1: the first step is warm-up"):
        bench_command.bench_options(parse(["--steps", "1"]))
    with pytest.raises(VerlfitError, match=f"--gsm8k {tmp_path}: no train.jsonl or test.jsonl there"):
        bench_command.bench_options(parse(["--gsm8k", str(tmp_path)]))
    assert bench_command.bench_options(parse(["--configs", "verlfit"])).configs == ("verlfit",)
    # a new-user trial's --configs verlfit,verlfit was accepted
    with pytest.raises(
        VerlfitError, match=r"--configs 'verlfit,verlfit': verlfit named twice \(each configuration runs once\)"
    ) as twice:
        bench_command.bench_options(parse(["--configs", "verlfit,verlfit"]))
    assert twice.value.fix == "name each once, e.g. --configs verlfit"


def test_train_arguments_follow_device_run_stages(tmp_path):
    args = parse(["--emulate", "p40", "--steps", "5"])
    assert bench.train_args("public-recipe", bench_command.bench_options(args), Path("/m"), Path("/d"), Path("/r")) == [
        "train",
        "--run-dir",
        "/r",
        "--emulate",
        "p40",
        "--model",
        "/m",
        "--data",
        "/d",
        "--steps",
        "5",
        "--plan",
        "off",
        "--attention",
        "eager",
        "--batch-size",
        "1",
        "--mini-batch-size",
        "1",
        "--micro-batch-size",
        "1",
        "--max-prompt-length",
        "256",
        "--max-response-length",
        "256",
        "--skip-checks",
        "--no-validate-before-train",
        "--test-freq",
        "-1",
        "--save-freq",
        "-1",
    ]
    assert bench.train_args("verlfit", bench_command.bench_options(parse([])), Path("/m"), Path("/d"), Path("/r"))[
        3:5
    ] == ["--profile", "auto"]


def test_summary_of_a_recorded_run():
    row = bench.summarise_run(CALL2 / "tuned-p40", "h200")
    records = [
        r
        for r in map(json.loads, (CALL2 / "tuned-p40" / "metrics.jsonl").read_text().splitlines())
        if "timing_s/step" in r
    ][1:]
    assert row["steps_timed"] == 7 and row["batch"] == 32
    assert row["step_s"] == round(statistics.mean(r["timing_s/step"] for r in records), 3)
    assert row["phases_s"]["gen"] == round(statistics.mean(r["timing_s/gen"] for r in records), 3)
    assert "ref" not in row["phases_s"]
    assert row["peak_allocated_gib"] == 17.96
    # from the unrounded seconds: the rounded ones shown beside it can move the fourth decimal by one
    assert row["estimate_error"] == pytest.approx(row["estimate_step_s"] / row["step_s"] - 1, abs=1e-4)


def test_bench_runs_both_configurations_and_writes_the_json(tmp_path, monkeypatch, capsys):

    monkeypatch.setattr(bench, "blocking_checks", lambda **kw: [])
    prepared = []
    monkeypatch.setattr(
        bench,
        "prepare_inputs",
        lambda work, shape, gsm8k: prepared.append((work, shape, gsm8k)) or (Path("/m"), Path("/d")),
    )
    monkeypatch.setattr(
        bench,
        "machine_facts",
        lambda nvml=None: {
            "card": "NVIDIA H200",
            "driver": "580.159.04",
            "cuda": "13.0",
            "torch": "2.11.0",
            "verl": "0.4.1",
            "patches": "0001-0008",
            "compute_capability": "9.0",
            "memory_gib": 140.4,
        },
    )
    launched = []

    def fake_run(argv):
        run_dir = Path(argv[argv.index("--run-dir") + 1])
        assert not run_dir.exists()  # verlfit train refuses an existing run directory
        launched.append(run_dir)
        shutil.copytree(RECORDED[run_dir.name], run_dir)
        return 0

    output = tmp_path / "out" / "bench.json"
    status = bench_command._run(parse(["--work", str(tmp_path), "--output", str(output)]), run=fake_run)
    out = capsys.readouterr().out
    assert status == 0 and [r.name for r in launched] == ["public-recipe", "verlfit"]
    runs = launched[0].parent
    assert launched[1].parent == runs and runs.parent == tmp_path / "runs"
    assert prepared == [(tmp_path, "qwen2.5-0.5b", None)]
    data = json.loads(output.read_text())
    assert [r["run"] for r in data["runs"]] == ["public-recipe", "verlfit"]
    assert data["runs"][1] == bench.summarise_run(runs / "verlfit", "h200")
    assert data["machine"]["card"] == "NVIDIA H200" and data["data"] == "generated" and data["model"] == "qwen2.5-0.5b"
    assert "card NVIDIA H200, driver 580.159.04, CUDA 13.0, torch 2.11.0, verl 0.4.1, patch series 0001-0008" in out
    assert f"bench: wrote {output}; attach it to an issue on verlfit's tracker" in out
    assert list(output.parent.iterdir()) == [output]

    # the record is replaced only with --force, and that is said before anything runs
    before = output.read_bytes()
    with pytest.raises(VerlfitError, match=f"--output {output} holds an earlier record verlfit bench wrote"):
        bench_command._run(
            parse(["--work", str(tmp_path), "--output", str(output)]), run=lambda argv: pytest.fail("launched")
        )
    assert output.read_bytes() == before
    # a second bench with the same --work (and another shape) runs into a folder of its own
    assert (
        bench_command._run(
            parse(
                [
                    "--work",
                    str(tmp_path),
                    "--output",
                    str(output),
                    "--shape",
                    "qwen2.5-1.5b",
                    "--configs",
                    "verlfit",
                    "--force",
                ]
            ),
            run=fake_run,
        )
        == 0
    )
    assert (
        launched[2].name == "verlfit"
        and launched[2].parent not in (runs, tmp_path / "runs")
        and launched[2].parent.parent == tmp_path / "runs"
    )
    assert prepared[1] == (tmp_path, "qwen2.5-1.5b", None) and json.loads(output.read_text())["model"] == "qwen2.5-1.5b"


def test_bench_refuses_where_the_doctor_fails(monkeypatch, tmp_path):
    from verlfit.checks.result import CheckResult

    monkeypatch.setattr(
        bench, "blocking_checks", lambda **kw: [CheckResult("driver", "FAIL", "no NVIDIA driver", "install the driver")]
    )
    with pytest.raises(VerlfitError, match="this machine cannot run the bench: driver: no NVIDIA driver") as error:
        bench_command._run(parse(["--work", str(tmp_path)]), run=lambda argv: pytest.fail("launched"))
    assert error.value.fix == "install the driver"


def test_bench_says_each_fix_once(monkeypatch, tmp_path):
    from verlfit.checks.result import CheckResult

    same = "install the NVIDIA driver and run the container with --gpus all"
    failures = [
        CheckResult("driver", "FAIL", "no NVIDIA driver", same),
        CheckResult("gpu", "FAIL", "no GPU", same),
        CheckResult("cuda", "FAIL", "CUDA unavailable", same),
        CheckResult("patches", "FAIL", "verl not patched", "python3 patches/apply.py X"),
    ]
    monkeypatch.setattr(bench, "blocking_checks", lambda **kw: failures)
    with pytest.raises(VerlfitError) as error:
        bench_command._run(parse(["--work", str(tmp_path)]), run=lambda argv: pytest.fail("launched"))
    assert error.value.fix == f"{same}; python3 patches/apply.py X"


def test_bench_help_is_plain_prose(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    out = capsys.readouterr().out
    assert "``" not in out and "Measure this card with two short runs" in out and "patched verl" in out


def test_render_table_rows():
    from rich.console import Console

    result = {
        "emulate": "p40",
        "machine": {"card": "NVIDIA H200", "driver": "d", "cuda": "c", "torch": "t", "verl": "v", "patches": "p"},
        "runs": [bench.summarise_run(CALL2 / "public-recipe", "h200")],
    }
    out = io.StringIO()
    bench_command.render(result, Console(file=out, width=250))
    text = out.getvalue()
    assert "verlfit bench: NVIDIA H200 (emulating p40)" in text
    row = result["runs"][0]
    assert f"{row['step_s']:.2f}" in text and f"{row['estimate_error']:+.0%}" in text


# --------------------------------------------------------------------------------------
# the model and data, made from an installed verlfit: a copy of the package with no checkout around it
# --------------------------------------------------------------------------------------

INSTALLED_CHECK = """
import json, sys
from pathlib import Path
import verlfit
from verlfit import bench
package = Path(verlfit.__file__).resolve().parent
assert not (package.parents[1] / "benchmarks").exists(), package
assert not [p for p in sys.path if "benchmarks" in p], sys.path
work = Path(sys.argv[1])
model, data = bench.prepare_inputs(work, shape="tiny", synthetic_sizes=(40, 8), log=lambda line: print(line, flush=True))
print(json.dumps({"package": str(package), "model": str(model), "data": str(data)}))
"""  # noqa: E501 (data or a script written out as it runs)


def _installed_copy(tmp_path: Path) -> dict:
    """An environment whose only verlfit is a copy of entrypoint/verlfit under tmp_path/site (what pip installs into
    site-packages), with no benchmarks/ on the path and the hub unreachable."""
    import os

    site = tmp_path / "site"
    shutil.copytree(ROOT / "entrypoint" / "verlfit", site / "verlfit", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VERLFIT_PATCHES_DIR")}
    env.update(
        PYTHONPATH=str(site),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_ENDPOINT="http://127.0.0.1:9",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


def test_bench_help_from_an_installed_verlfit(tmp_path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "verlfit", "bench", "--help"],
        cwd=tmp_path,
        env=_installed_copy(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: verlfit bench [-h] [--steps STEPS] [--gsm8k DIR]")
    assert "--shape {qwen2.5-0.5b,qwen2.5-1.5b,qwen2.5-3b}" in done.stdout
    assert "benchmarks" not in done.stdout


def test_bench_makes_a_loadable_model_and_prepared_data_from_the_package_alone(tmp_path):
    import subprocess
    import sys

    import pyarrow.parquet as pq
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verlfit import gsm8k, synthetic_gsm8k

    work = tmp_path / "work"
    command = [sys.executable, "-c", INSTALLED_CHECK, str(work)]
    done = subprocess.run(
        command, cwd=tmp_path, env=_installed_copy(tmp_path), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    result = json.loads(lines[-1])
    assert result == {
        "package": str(tmp_path / "site" / "verlfit"),
        "model": str(work / "tiny-random"),
        "data": str(work / "gsm8k-synthetic"),
    }
    assert lines[0] == f"bench: making a random-weight tiny-shape model and its tokenizer in {work / 'tiny-random'}"
    assert lines[1] == f"bench: generating 40 + 8 GSM8K-format problems in {work / 'synthetic-raw'}"
    assert lines[2] == f"bench: preparing {work / 'synthetic-raw'} into {work / 'gsm8k-synthetic'}"
    assert sorted(p.name for p in work.iterdir()) == [
        "gsm8k-synthetic",
        "synthetic-raw",
        "tiny-random",
    ]  # no temp folder left

    tokenizer = AutoTokenizer.from_pretrained(work / "tiny-random")
    model = AutoModelForCausalLM.from_pretrained(work / "tiny-random")
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert (model.config.num_hidden_layers, model.config.hidden_size, model.config.vocab_size) == (
        2,
        64,
        len(tokenizer),
    )
    assert (
        tokenizer.apply_chat_template(
            [{"role": "user", "content": "What is 2 + 3?"}], tokenize=False, add_generation_prompt=True
        )
        == "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"
    )
    with torch.no_grad():
        logits = model(**tokenizer(["#### 5"], return_tensors="pt")).logits
    assert logits.shape[-1] == len(tokenizer) and torch.isfinite(logits).all()

    # the data: verl's schema, every generated problem kept (their prompts are far below 256 tokens), in order
    assert gsm8k.is_prepared(work / "gsm8k-synthetic")
    expected = synthetic_gsm8k.generate_splits(n_train=40, n_test=8, seed=0)
    for split, rows in expected.items():
        table = pq.read_table(work / "gsm8k-synthetic" / f"{split}.parquet").to_pylist()
        assert [r["extra_info"]["question"] for r in table] == [r["question"] for r in rows]
        assert [r["reward_model"]["ground_truth"] for r in table] == [
            synthetic_gsm8k.answer_value(r["answer"]) for r in rows
        ]
        assert [
            json.loads(line) for line in (work / "synthetic-raw" / f"{split}.jsonl").read_text().splitlines()
        ] == rows

    # a second bench reuses all three folders as they are
    stamps = {p: p.stat().st_mtime_ns for p in work.rglob("*")}
    done = subprocess.run(
        command, cwd=tmp_path, env=_installed_copy(tmp_path / "again"), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:-1] == [] and {p: p.stat().st_mtime_ns for p in work.rglob("*")} == stamps


def test_prepare_inputs_refuses_an_incomplete_folder_and_leaves_no_half_one(tmp_path, monkeypatch):
    from verlfit import synthetic_model

    (tmp_path / "qwen2.5-0.5b-random").mkdir()
    with pytest.raises(VerlfitError, match=r"qwen2.5-0.5b-random exists but is incomplete") as error:
        bench.prepare_inputs(tmp_path, log=lambda line: None)
    assert error.value.fix == f"remove {tmp_path / 'qwen2.5-0.5b-random'} and run the bench again"

    def half_then_fail(output_dir, **kw):
        (Path(output_dir) / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(synthetic_model, "make_model", half_then_fail)
    with pytest.raises(KeyboardInterrupt):
        bench.prepare_inputs(tmp_path / "fresh", shape="tiny", log=lambda line: None)
    assert list((tmp_path / "fresh").iterdir()) == []


def test_patch_series_reads_the_installed_verls_marker_only(tmp_path):
    verl = tmp_path / "verl"
    verl.mkdir()
    series = tmp_path / "patches" / "verl-0.4.1"
    series.mkdir(parents=True)
    (series / "series").write_text("# comment\n0001-a.patch\n0002-b.patch\n")
    environ = {"VERLFIT_PATCHES_DIR": str(tmp_path / "patches")}
    assert bench.patch_series(environ, verl_dir=verl) == "not patched"  # the checkout's series is not what runs
    (verl / ".verlfit-patches").write_text(
        "# verl patch series applied by verlfit's patches/apply.py; do not edit.\n# series: verl-0.4.1\n"
        + "a" * 64
        + "  0001-a.patch\n"
        + "b" * 64
        + "  0009-c.patch\n"
    )
    assert bench.patch_series(environ, verl_dir=verl) == "0001-a.patch, 0009-c.patch"
    assert bench.patch_series({}, verl_dir=verl) == "0001-a.patch, 0009-c.patch"
    assert bench.patch_series(environ, verl_dir=None) == "unknown"


# --------------------------------------------------------------------------------------
# a card whose profile's engines are not installed (an H200 without vLLM and flash-attn picks the a10 profile)
# --------------------------------------------------------------------------------------

H200_NVML = FakeNvml([("NVIDIA H200", (9, 0), 150_754_820_096)], driver="580.159.04", cuda=13000)


def without(*packages):
    """importlib.util.find_spec as in a Python without ``packages``."""
    import importlib.util

    real = importlib.util.find_spec
    return lambda name, *rest: None if name in packages else real(name, *rest)


def test_missing_engine_packages_names_package_use_and_option():
    from verlfit.checks.engines import missing_engine_packages

    nothing = without("vllm", "flash_attn")
    assert missing_engine_packages("vllm", "flash_attention_2", find_spec=nothing) == [
        ("vllm", "the vLLM rollout", "--rollout hf"),
        ("flash_attn", "FlashAttention-2 attention", "--attention sdpa"),
    ]
    assert missing_engine_packages("hf", "flash_attention_2", find_spec=nothing) == [
        ("flash_attn", "FlashAttention-2 attention", "--attention sdpa")
    ]
    assert missing_engine_packages("hf", "sdpa", find_spec=nothing) == []
    assert missing_engine_packages("hf", "eager", find_spec=lambda name: pytest.fail(f"looked for {name}")) == []
    assert missing_engine_packages("vllm", "flash_attention_2", find_spec=lambda name: object()) == []

    def broken(name):
        raise ValueError(f"{name}.__spec__ is None")

    assert [package for package, _, _ in missing_engine_packages("vllm", "sdpa", find_spec=broken)] == ["vllm"]


def _refused(monkeypatch, tmp_path, capsys, argv, packages=("vllm", "flash_attn")):
    """Run ``verlfit bench ARGV`` on a fake H200 in a Python without ``packages``; nothing after the engine check may
    run."""
    import importlib.util

    import verlfit.gpu

    real_query = verlfit.gpu.query_gpus
    monkeypatch.setattr(bench, "query_gpus", lambda nvml=None: real_query(H200_NVML))
    monkeypatch.setattr(importlib.util, "find_spec", without(*packages))
    monkeypatch.setattr(bench, "blocking_checks", lambda **kw: pytest.fail("the doctor's checks ran"))
    monkeypatch.setattr(bench, "prepare_inputs", lambda *a, **kw: pytest.fail("the model and data were made"))
    monkeypatch.setattr(bench.subprocess, "run", lambda *a, **kw: pytest.fail("a run was launched"))
    monkeypatch.chdir(tmp_path)
    status = cli.main(["bench", "--work", str(tmp_path / "work"), *argv])
    assert list(tmp_path.iterdir()) == []  # no work folder, no JSON
    return status, capsys.readouterr().err


def test_bench_refuses_the_a10_profile_without_vllm_and_flash_attn(monkeypatch, tmp_path, capsys):
    import sys

    status, err = _refused(monkeypatch, tmp_path, capsys, [])
    assert status == 1  # as verlfit train's FAIL engines (test_train_and_bench_exit_alike_for_a_missing_engine)
    assert (
        err
        == "verlfit: error: bench: the a10 profile (chosen for NVIDIA H200, compute capability 9.0) needs vllm for the"
        " vLLM rollout (public-recipe, verlfit) and flash_attn for FlashAttention-2 attention (verlfit); this"
        f" Python ({sys.executable}) has neither\n  fix: pass --rollout hf --attention sdpa (this card without vllm"
        " and flash_attn), or --emulate p40 (the P40's code paths); or run the bench in the verlfit:a10 image (it"
        " has vLLM and flash-attn)\n"
    )


def test_bench_refusal_names_only_what_is_still_missing(monkeypatch, tmp_path, capsys):
    import sys

    status, err = _refused(monkeypatch, tmp_path, capsys, ["--rollout", "hf"])
    assert status == 1
    assert err.startswith(
        "verlfit: error: bench: the a10 profile (chosen for NVIDIA H200, compute capability 9.0) needs flash_attn for"
        f" FlashAttention-2 attention (verlfit); this Python ({sys.executable}) has no flash_attn\n"
    )
    assert "  fix: pass --attention sdpa (this card without flash_attn), or --emulate p40" in err
    # the public recipe's eager attention needs no flash_attn: with --configs public-recipe only vLLM is missing
    status, err = _refused(
        monkeypatch, tmp_path, capsys, ["--configs", "public-recipe", "--emulate", "a10"], packages=("vllm",)
    )
    assert (
        status == 1
        and "the a10 profile (--emulate a10) needs vllm for the vLLM rollout (public-recipe); this Python" in err
        and "fix: pass --rollout hf (this card without vllm)" in err
    )


def test_bench_refuses_vllm_on_the_p40_profile_before_anything_runs(monkeypatch, tmp_path, capsys):
    status, err = _refused(monkeypatch, tmp_path, capsys, ["--emulate", "p40", "--rollout", "vllm"], packages=())
    assert status == 2 and err.startswith(
        "verlfit: error: --rollout vllm with the p40 profile: vLLM needs compute capability 7.0"
    )


def test_bench_with_hf_and_sdpa_passes_the_engine_check_without_vllm_or_flash_attn(monkeypatch, tmp_path):
    import importlib.util

    from verlfit.checks.result import CheckResult

    reached = []
    monkeypatch.setattr(importlib.util, "find_spec", without("vllm", "flash_attn"))
    monkeypatch.setattr(
        bench, "blocking_checks", lambda **kw: reached.append(kw) or [CheckResult("cuda", "FAIL", "stop here", None)]
    )
    for argv in (["--rollout", "hf", "--attention", "sdpa"], ["--emulate", "p40"]):
        with pytest.raises(VerlfitError, match="this machine cannot run the bench: cuda: stop here"):
            bench_command._run(
                parse(["--work", str(tmp_path / "work"), *argv]),
                nvml=H200_NVML,
                run=lambda argv: pytest.fail("launched"),
            )
    assert reached == [{"profile_name": None}, {"profile_name": "p40"}]


def test_bench_leaves_the_engine_packages_to_its_own_per_run_check(monkeypatch, tmp_path):
    """The doctor's engines check sees the profile's engines, not bench's per-run ones (the public recipe's eager
    attention; bench's --rollout/--attention): bench checked them itself, so its FAIL is not bench's refusal."""
    import importlib.util

    from verlfit.checks.result import CheckResult

    monkeypatch.setattr(importlib.util, "find_spec", without("vllm", "flash_attn"))
    failures = [
        CheckResult("engines", "FAIL", "profile a10 needs vllm", "pass --rollout hf"),
        CheckResult("cuda", "FAIL", "stop here", None),
    ]
    monkeypatch.setattr(bench, "blocking_checks", lambda **kw: failures)
    with pytest.raises(VerlfitError) as raised:
        bench_command._run(
            parse(["--work", str(tmp_path / "work"), "--rollout", "hf", "--attention", "sdpa"]),
            nvml=H200_NVML,
            run=lambda argv: pytest.fail("launched"),
        )
    assert (raised.value.message, raised.value.fix) == (
        "this machine cannot run the bench: cuda: stop here",
        "run verlfit doctor",
    )


def test_train_arguments_carry_rollout_to_both_runs_and_attention_to_verlfit_only():
    args = parse(["--rollout", "hf", "--attention", "sdpa", "--steps", "3"])
    common = [
        "--max-prompt-length",
        "256",
        "--max-response-length",
        "256",
        "--skip-checks",
        "--no-validate-before-train",
        "--test-freq",
        "-1",
        "--save-freq",
        "-1",
    ]
    assert bench.train_args("public-recipe", bench_command.bench_options(args), Path("/m"), Path("/d"), Path("/r")) == [
        "train",
        "--run-dir",
        "/r",
        "--profile",
        "auto",
        "--model",
        "/m",
        "--data",
        "/d",
        "--steps",
        "3",
        "--plan",
        "off",
        "--attention",
        "eager",
        "--batch-size",
        "1",
        "--mini-batch-size",
        "1",
        "--micro-batch-size",
        "1",
        "--rollout",
        "hf",
        *common,
    ]
    assert bench.train_args("verlfit", bench_command.bench_options(args), Path("/m"), Path("/d"), Path("/r")) == [
        "train",
        "--run-dir",
        "/r",
        "--profile",
        "auto",
        "--model",
        "/m",
        "--data",
        "/d",
        "--steps",
        "3",
        "--rollout",
        "hf",
        "--attention",
        "sdpa",
        *common,
    ]
    # without the options the commands are as before
    assert "--rollout" not in bench.train_args(
        "verlfit", bench_command.bench_options(parse([])), Path("/m"), Path("/d"), Path("/r")
    )
    assert bench.train_args(
        "verlfit", bench_command.bench_options(parse(["--attention", "eager"])), Path("/m"), Path("/d"), Path("/r")
    )[11:13] == ["--attention", "eager"]


def test_bench_json_and_table_name_the_code_paths_that_ran(monkeypatch, tmp_path, capsys):
    """The train commands bench makes, resolved by verlfit train itself on an H200, give the run.json rows the
    bench reads back: profile a10, HF rollout in both, eager (public recipe) and SDPA (verlfit), bf16."""
    import dataclasses
    import importlib.util

    from verlfit.commands.train import prepare_launch

    monkeypatch.setattr(importlib.util, "find_spec", without("vllm", "flash_attn"))
    monkeypatch.setattr(bench, "blocking_checks", lambda **kw: [])
    monkeypatch.setattr(
        bench, "prepare_inputs", lambda work, shape, gsm8k: (Path("Qwen/Qwen2.5-0.5B-Instruct"), tmp_path / "data")
    )
    monkeypatch.setattr(
        bench,
        "machine_facts",
        lambda nvml=None: {
            "card": "NVIDIA H200",
            "driver": "580.159.04",
            "cuda": "13.0",
            "torch": "2.11.0",
            "verl": "0.4.1",
            "patches": "p",
            "compute_capability": "9.0",
            "memory_gib": 140.4,
        },
    )
    from verlfit.gpu import query_gpus

    h200 = H200_NVML
    plans = {}

    def fake_run(argv):
        run_dir = Path(argv[argv.index("--run-dir") + 1])
        plan = prepare_launch(cli.build_parser().parse_args(argv), environ={}, gpu=query_gpus(h200).gpus[0])
        plans[run_dir.name] = plan
        run_dir.mkdir(parents=True)
        shutil.copy(RECORDED[run_dir.name] / "metrics.jsonl", run_dir)
        (run_dir / "run.json").write_text(
            json.dumps(
                {
                    "profile": plan.profile_name,
                    "settings": dataclasses.asdict(plan.settings),
                    "overrides": plan.overrides,
                }
            )
        )
        return 0

    output = tmp_path / "bench.json"
    assert (
        bench_command._run(
            parse(["--work", str(tmp_path), "--output", str(output), "--rollout", "hf", "--attention", "sdpa"]),
            nvml=h200,
            run=fake_run,
        )
        == 0
    )
    assert (
        "actor_rollout_ref.rollout.name=hf" in plans["public-recipe"].overrides
        and "+actor_rollout_ref.model.attn_implementation=eager" in plans["public-recipe"].overrides
    )
    assert (
        "actor_rollout_ref.rollout.name=hf" in plans["verlfit"].overrides
        and "+actor_rollout_ref.model.attn_implementation=sdpa" in plans["verlfit"].overrides
    )
    data = json.loads(output.read_text())
    assert (data["profile"], data["rollout"], data["attention"], data["emulate"]) == ("a10", "hf", "sdpa", None)
    assert [{k: r[k] for k in ("run", "profile", "rollout", "attention", "dtype")} for r in data["runs"]] == [
        {"run": "public-recipe", "profile": "a10", "rollout": "hf", "attention": "eager", "dtype": "bfloat16"},
        {"run": "verlfit", "profile": "a10", "rollout": "hf", "attention": "sdpa", "dtype": "bfloat16"},
    ]
    assert "bench: [2/2] verlfit: verlfit train --run-dir " in capsys.readouterr().out
    # the table's title line names them
    from rich.console import Console

    text = io.StringIO()
    bench_command.render(data, Console(file=text, width=250))
    assert (
        text.getvalue().splitlines()[0].rstrip()
        == "verlfit bench: NVIDIA H200: profile a10, rollout hf, attention eager (public-recipe) / sdpa (verlfit),"
        " bfloat16"
    )


def test_recorded_runs_code_paths():
    """From the run.json of recorded H200 runs: the p40 public recipe (eager, from its overrides: its settings predate
    the rollout/attention fields) and an a10 run that fell back to HF generate and SDPA."""
    read = lambda path: bench.ran_code_paths(json.loads((path / "run.json").read_text()))  # noqa: E731
    assert read(CALL2 / "public-recipe") == {
        "profile": "p40",
        "rollout": "hf",
        "attention": "eager",
        "dtype": "float32",
    }
    assert read(CALL2 / "tuned-p40") == {"profile": "p40", "rollout": "hf", "attention": "sdpa", "dtype": "float32"}
    assert read(
        ROOT
        / "benchmarks"
        / "results"
        / "2026-11-29-h200-p40-main-job-learning-planner"
        / "main-grpo-learn-a10-shared"
        / "a10-like"
    ) == {"profile": "a10", "rollout": "hf", "attention": "sdpa", "dtype": "bfloat16"}


# ---------------------------------------------------------------------------------------- issue 28: the owner's kit


def test_the_table_is_whole_in_a_log_that_is_not_a_terminal():
    # `verlfit bench ... | cat`: rich fitted the table into 80 columns and a held-back run printed `│ ve… │  32 │ 5.… │`
    from rich.console import Console

    result = {
        "emulate": "p40",
        "machine": {"card": "NVIDIA H200", "driver": "d", "cuda": "c", "torch": "t", "verl": "v", "patches": "p"},
        "runs": [bench.summarise_run(RECORDED[name], "h200") for name in ("public-recipe", "verlfit")],
    }
    for row, name in zip(result["runs"], ("public-recipe", "verlfit")):
        row["run"] = name
    log = io.StringIO()
    console = Console(file=log, width=80)  # what rich gives a pipe or a file
    assert not console.is_terminal
    bench_command.render(result, console)
    text = log.getvalue()
    assert "…" not in text
    for row in result["runs"]:
        (line,) = [line for line in text.splitlines() if f" {row['run']} " in line]
        cells = [cell.strip() for cell in line.strip("│ ").split("│")]
        assert cells == [
            row["run"],
            str(row["batch"]),
            f"{row['step_s']:.2f}",
            *(f"{row['phases_s'][p]:.2f}" if p in row["phases_s"] else "-" for p in bench.PHASES),
            f"{row['tokens_per_s']:.0f}",
            f"{row['peak_allocated_gib']:.2f}",
            f"{row['estimate_step_s']:.2f}",
            f"{row['estimate_error']:+.0%}",
        ]
    for column in ("configuration", "tokens/s", "peak alloc GiB", "estimate s/step", "estimate vs measured"):
        assert column in text
    # on a terminal the console's own width still rules
    narrow = io.StringIO()
    bench_command.render(result, Console(file=narrow, width=80, force_terminal=True, color_system=None))
    assert max(len(line) for line in narrow.getvalue().splitlines()[:-1]) <= 80


def _record_like_train(tmp_path, argv):
    """A run.json written by verlfit train's own code for ``argv`` on an H200 (the run directory of a real launch),
    and train's printed estimate of that run's card (the H200's)."""
    import re

    from verlfit.gpu import GpuInfo
    from verlfit.commands.train import prepare_launch, register
    from verlfit.train.run_directory import create_run_directory

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    h200 = GpuInfo(
        index=0,
        name="NVIDIA H200",
        compute_capability=(9, 0),
        total_memory_bytes=150_754_820_096,
        free_memory_bytes=150_000_000_000,
    )
    plan = prepare_launch(parser.parse_args(["train", "--run-dir", str(tmp_path / "run"), *argv]), environ={}, gpu=h200)
    (line,) = [note for note in plan.notes if note.startswith("plan: estimated time on H200:")]
    run_dir = create_run_directory(plan, None)
    return json.loads((run_dir / "run.json").read_text()), float(re.search(r"([0-9.]+) s/step", line).group(1))


import argparse  # noqa: E402


@pytest.mark.parametrize(
    "argv",
    [
        [
            "--emulate",
            "p40",
            "--steps",
            "4",
            "--max-prompt-length",
            "256",
            "--max-response-length",
            "256",
        ],  # bench's verlfit run
        ["--emulate", "p40", "--steps", "4", "--algo", "grpo", "--lora-rank", "32"],
        ["--profile", "a10", "--rollout", "hf", "--attention", "sdpa", "--steps", "4"],
    ],
)
def test_bench_and_train_give_one_estimate_for_the_same_settings(tmp_path, argv):
    # a held-back run: the bench said 11.48 s for verlfit's run where `verlfit train` printed 6.5 s for it
    from verlfit.plan import time as plan_time

    record, printed = _record_like_train(tmp_path, argv)
    assert f"{bench._estimate(record, 'h200'):.1f}" == f"{printed:.1f}"
    # exactly: GSM8K's own lengths measured give the estimate train makes (which assumes them)
    gsm8k = plan_time.MeasuredLengths(
        prompt_mean=plan_time.GSM8K_MEAN_PROMPT_TOKENS,
        prompt_max=plan_time.GSM8K_ROLLOUT_PROMPT_TOKENS,
        response_mean=record["settings"]["max_response_length"],
        response_max=record["settings"]["max_response_length"],
    )
    assert bench._estimate(record, "h200", gsm8k) == pytest.approx(bench._estimate(record, "h200"), rel=1e-12)


def test_the_estimate_is_of_the_prompts_that_ran(tmp_path):
    # the generated problems' prompts are ~75 tokens: the estimate must not assume GSM8K's (mean 133, longest 230)
    from verlfit.plan import time as plan_time

    record, _ = _record_like_train(
        tmp_path, ["--emulate", "p40", "--steps", "4", "--max-prompt-length", "256", "--max-response-length", "256"]
    )
    run_dir = tmp_path / "run"
    steps = [
        {
            "step": s,
            "timing_s/step": 5.0,
            "timing_s/gen": 3.0,
            "prompt_length/mean": 74.0 + s,
            "prompt_length/max": 90.0,
            "response_length/mean": 250.0,
            "response_length/max": 256.0,
            "perf/total_num_tokens": 10000,
            "perf/max_memory_allocated_gb": 16.0,
        }
        for s in (1, 2, 3, 4)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    row = bench.summarise_run(run_dir, "h200")
    # the steps after the first: prompt means 76, 77, 78
    lengths = plan_time.MeasuredLengths(prompt_mean=77.0, prompt_max=90.0, response_mean=250.0, response_max=256.0)
    assert row["estimate_lengths"] == {
        "prompt_mean": 77.0,
        "prompt_max": 90.0,
        "response_mean": 250.0,
        "response_max": 256.0,
    }
    from verlfit.patch_switches import PatchSwitches
    from verlfit.plan.request import inputs_for_train
    from verlfit.train.launch_plan import recorded_settings

    settings = recorded_settings(record, rollout="hf", attention="sdpa")
    request = plan_time_request(settings)
    inputs = inputs_for_train(settings, PatchSwitches.from_overrides(record["overrides"]))
    # the calibrated window sits between GSM8K's mean prompt and its rollout width; placed alike between these
    gsm8k_mean, gsm8k_width = plan_time.GSM8K_MEAN_PROMPT_TOKENS, plan_time.GSM8K_ROLLOUT_PROMPT_TOKENS
    window = 77.0 + (plan_time.GSM8K_WINDOW_PROMPT_TOKENS - gsm8k_mean) / (gsm8k_width - gsm8k_mean) * (90.0 - 77.0)
    expected = plan_time.estimate(
        request,
        "h200",
        plan_time.TimeInputs(
            **{
                **inputs.__dict__,
                "decode_steps": 256,
                "rollout_prompt_length": 90.0,
                "window_prompt_length": window,
                "window_response_length": 256.0,
                "mean_prompt_length": 77.0,
                "mean_response_length": 250.0,
            }
        ),
    )
    assert row["estimate_step_s"] == round(expected.step_seconds, 3)
    assert row["estimate_step_s"] < round(bench._estimate(record, "h200"), 3)  # shorter prompts than GSM8K's: less work
    assert row["estimate_step_s"] == round(bench._estimate(record, "h200", lengths), 3)
    # a record without verl's length metrics: GSM8K's lengths, as train assumes, and said so in the JSON (None)
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in r.items() if "length" not in k}) + "\n" for r in steps)
    )
    bare = bench.summarise_run(run_dir, "h200")
    assert bare["estimate_lengths"] is None and bare["estimate_step_s"] == round(bench._estimate(record, "h200"), 3)


def plan_time_request(settings):
    from verlfit.model_shape import load_model_shape
    from verlfit.plan.request import request_from_settings
    from verlfit.profiles import load_profile

    return request_from_settings(
        settings, load_profile("p40"), 24 * 1024**3, shape=load_model_shape("Qwen/Qwen2.5-0.5B-Instruct")
    )


def test_train_and_bench_exit_alike_for_a_missing_engine(monkeypatch, tmp_path, capsys):
    # bench exited 2 and train 1 for the same missing vllm on the a10 profile
    import verlfit.commands.train as train_command
    from fakes import H200

    status, _ = _refused(
        monkeypatch, tmp_path, capsys, ["--configs", "public-recipe", "--emulate", "a10"], packages=("vllm",)
    )
    monkeypatch.undo()
    no_vllm = without("vllm")
    # train's pre-flight with the doctor's own engines check as its only blocking check (the machine's driver aside)
    monkeypatch.setattr(
        bench,
        "blocking_checks",
        lambda **kw: [
            readiness.check_engines(
                readiness.DoctorContext(
                    profile_name="a10", rollout=kw["rollout"], attention=kw["attention"], find_spec=no_vllm
                )
            )
        ],
    )
    real = train_command.build_launch
    monkeypatch.setattr(train_command, "build_launch", lambda options: real(options, environ={}, gpu=H200))
    train_status = cli.main(["train", "--emulate", "a10", "--attention", "sdpa", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert "FAIL engines: profile a10" in err and "needs vllm" in err
    assert train_status == status == 1


# the stand-in for a configuration's `verlfit train`: on SIGTERM it takes a while to stop cleanly (verl's Ray shut down,
# its checkpoint kept), then records that it finished and exits 130 as verlfit train does
CLEAN_STOPPER = """
import signal, sys, time
def stop(signum, frame):
    time.sleep(0.5)
    open(sys.argv[1], "w").write(f"stopped cleanly on signal {signum}")
    sys.exit(130)
signal.signal(signal.SIGTERM, stop)
open(sys.argv[2], "w").write("ready")
time.sleep(60)
"""
# bench's side, as the image runs it: verlfit bench launching the run through bench.run_in_group
BENCH_SIDE = """
import sys, time
from verlfit import bench
try:
    bench.run_in_group([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]])
except KeyboardInterrupt as interrupt:
    print(f"bench stopped after the run: {interrupt}; the run's record: {open(sys.argv[2]).read()}")
"""


def test_a_stop_reaching_the_process_group_lets_the_run_stop_cleanly_before_bench_stops(tmp_path):
    """docker stop through the images' `tini -g` sends SIGTERM to verlfit bench and its train run at once (Ctrl-C does
    the same with SIGINT): bench must outlive the run's clean stop, then stop without starting another configuration."""
    record, ready = tmp_path / "record", tmp_path / "ready"
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "entrypoint")}
    process = subprocess.Popen(
        [sys.executable, "-c", BENCH_SIDE, CLEAN_STOPPER, str(record), str(ready)],
        env=environment,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGTERM)  # what tini -g does: the whole group
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    assert (
        output
        == f"bench stopped after the run: signal {int(signal.SIGTERM)}; the run's record: stopped cleanly on signal"
        f" {int(signal.SIGTERM)}\n"
    )


def test_run_in_group_returns_the_exit_status_and_restores_the_handlers():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    assert bench.run_in_group([sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
