"""verlfit bench: argument checks, the table and the JSON from recorded runs (the training launch is mocked)."""

import io
import json
import shutil
import statistics
from pathlib import Path

import pytest

from fakes import FakeNvml
from verlfit import bench, cli
from verlfit.errors import VerlfitError

ROOT = Path(__file__).resolve().parents[1]
CALL2 = ROOT / "benchmarks" / "results" / "2026-11-29-h200" / "call-2"
RECORDED = {"public-recipe": CALL2 / "public-recipe", "verlfit": CALL2 / "tuned-p40"}


def parse(argv):
    return cli.build_parser().parse_args(["bench", *argv])


def test_validation_names_the_bad_input(tmp_path):
    with pytest.raises(VerlfitError, match="--configs 'public-recipe,fast': unknown fast") as error:
        bench.validate_args(parse(["--configs", "public-recipe,fast"]))
    assert error.value.fix == "use a comma-separated list of: public-recipe, verlfit"
    with pytest.raises(VerlfitError, match="--steps 1: the first step is warm-up"):
        bench.validate_args(parse(["--steps", "1"]))
    with pytest.raises(VerlfitError, match=f"--gsm8k {tmp_path}: no train.jsonl or test.jsonl there"):
        bench.validate_args(parse(["--gsm8k", str(tmp_path)]))
    with pytest.raises(VerlfitError, match="no make_model.py"):
        bench.validate_args(parse(["--benchmarks-dir", str(tmp_path)]))
    assert bench.validate_args(parse(["--configs", "verlfit"])) == ["verlfit"]


def test_train_arguments_follow_device_run_stages(tmp_path):
    args = parse(["--emulate", "p40", "--steps", "5"])
    assert bench.train_args("public-recipe", args, Path("/m"), Path("/d"), Path("/r")) == [
        "train", "--run-dir", "/r", "--emulate", "p40", "--model", "/m", "--data", "/d", "--steps", "5",
        "--plan", "off", "--attention", "eager", "--batch-size", "1", "--mini-batch-size", "1", "--micro-batch-size", "1",
        "--max-prompt-length", "256", "--max-response-length", "256", "--skip-checks", "--no-validate-before-train", "--test-freq", "-1", "--save-freq", "-1",
    ]
    assert bench.train_args("verlfit", parse([]), Path("/m"), Path("/d"), Path("/r"))[3:5] == ["--profile", "auto"]


def test_summary_of_a_recorded_run():
    row = bench.summarise_run(CALL2 / "tuned-p40", "h200")
    records = [r for r in map(json.loads, (CALL2 / "tuned-p40" / "metrics.jsonl").read_text().splitlines()) if "timing_s/step" in r][1:]
    assert row["steps_timed"] == 7 and row["batch"] == 32
    assert row["step_s"] == round(statistics.mean(r["timing_s/step"] for r in records), 3)
    assert row["phases_s"]["gen"] == round(statistics.mean(r["timing_s/gen"] for r in records), 3)
    assert "ref" not in row["phases_s"]
    assert row["peak_allocated_gib"] == 17.96
    assert row["estimate_error"] == round(row["estimate_step_s"] / row["step_s"] - 1, 4)


def test_bench_runs_both_configurations_and_writes_the_json(tmp_path, monkeypatch, capsys):
    import verlfit.doctor

    monkeypatch.setattr(verlfit.doctor, "blocking_checks", lambda **kw: [])
    monkeypatch.setattr(bench, "_prepare", lambda args, work: (Path("/m"), Path("/d")))
    monkeypatch.setattr(bench, "machine_facts", lambda nvml=None: {"card": "NVIDIA H200", "driver": "580.159.04", "cuda": "13.0", "torch": "2.11.0", "verl": "0.4.1", "patches": "0001-0008", "compute_capability": "9.0", "memory_gib": 140.4})
    launched = []

    def fake_run(argv):
        run_dir = Path(argv[argv.index("--run-dir") + 1])
        launched.append(run_dir.name)
        shutil.copytree(RECORDED[run_dir.name], run_dir)
        return 0

    output = tmp_path / "out" / "bench.json"
    status = bench._run(parse(["--work", str(tmp_path), "--output", str(output)]), run=fake_run)
    out = capsys.readouterr().out
    assert status == 0 and launched == ["public-recipe", "verlfit"]
    data = json.loads(output.read_text())
    assert [r["run"] for r in data["runs"]] == ["public-recipe", "verlfit"]
    assert data["runs"][1] == bench.summarise_run(tmp_path / "runs" / "verlfit", "h200")
    assert data["machine"]["card"] == "NVIDIA H200" and data["data"] == "generated"
    assert "card NVIDIA H200, driver 580.159.04, CUDA 13.0, torch 2.11.0, verl 0.4.1, patch series 0001-0008" in out
    assert f"bench: wrote {output}; attach it to an issue on verlfit's tracker" in out
    assert list(output.parent.iterdir()) == [output]


def test_bench_refuses_where_the_doctor_fails(monkeypatch, tmp_path):
    import verlfit.doctor
    from verlfit.doctor import CheckResult

    monkeypatch.setattr(verlfit.doctor, "blocking_checks", lambda **kw: [CheckResult("driver", "FAIL", "no NVIDIA driver", "install the driver")])
    with pytest.raises(VerlfitError, match="this machine cannot run the bench: driver: no NVIDIA driver") as error:
        bench._run(parse(["--work", str(tmp_path)]), run=lambda argv: pytest.fail("launched"))
    assert error.value.fix == "install the driver"


def test_render_table_rows():
    from rich.console import Console

    result = {"emulate": "p40", "machine": {"card": "NVIDIA H200", "driver": "d", "cuda": "c", "torch": "t", "verl": "v", "patches": "p"}, "runs": [bench.summarise_run(CALL2 / "public-recipe", "h200")]}
    out = io.StringIO()
    bench.render(result, Console(file=out, width=250))
    text = out.getvalue()
    assert "verlfit bench: NVIDIA H200 (emulating p40)" in text
    row = result["runs"][0]
    assert f"{row['step_s']:.2f}" in text and f"{row['estimate_error']:+.0%}" in text
