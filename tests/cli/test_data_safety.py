"""The data-safety property of issue 32: no writing command loses a file that existed before it ran.

Every writing command (prepare-gsm8k, prepare-data, train's run directory, export, eval, report, bench) is pointed
at the run directory, its parent, a child of it (its checkpoints, and a new folder in it), its input's folder, a
user's folder with a README, the current directory, and a symlink to each, with and without --force; afterwards
every file that existed before has the same SHA-256, and each refusal says the fix, with no traceback.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from verlfit import cli

PLACES = ("run", "parent", "checkpoints", "new-child", "input", "user", "current")
COMMANDS = ("prepare-gsm8k", "prepare-data", "train", "export", "eval", "report", "bench")


def checksums(folder: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under ``folder``, symlinks not followed."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A run with a real verl checkpoint, the inputs of every command, a user's folder, the current directory."""
    from gsm8k_rows import TEST, TRAIN, write_jsonl
    from verl_checkpoint_maker import write_checkpoint_run

    from verlfit import gsm8k

    base = tmp_path_factory.mktemp("world")
    run = write_checkpoint_run(base / "run", "--step", "2")
    (run / "metrics.jsonl").write_text('{"step": 1, "timing_s/step": 2.0, "critic/score/mean": 0.5}\n')
    (base / "notes.txt").write_text("beside the run")
    raw = write_jsonl(base / "raw", TRAIN, TEST)
    gsm8k.prepare(source=raw, output_dir=base / "data", log=lambda line: None)
    (base / "mine").mkdir()
    (base / "mine" / "README.md").write_text("my notes")
    (base / "cwd").mkdir()
    (base / "cwd" / "work.txt").write_text("the user's work")
    (base / "bench-work").mkdir()
    (base / "bench-work" / "kept.txt").write_text("a file in bench's --work")
    links = base / "links"
    links.mkdir()
    return base


def place(world: Path, command: str, where: str) -> Path:
    run = world / "run"
    inputs = {
        "prepare-gsm8k": world / "raw",
        "prepare-data": world / "raw",
        "train": world / "data",
        "export": run,
        "eval": world / "data",
        "report": run,
        "bench": world / "bench-work",
    }
    return {
        "run": run,
        "parent": world,
        "checkpoints": run / "checkpoints",
        "new-child": run / "new-child",
        "input": inputs[command],
        "user": world / "mine",
        "current": Path("."),
    }[where]


def argv(world: Path, command: str, output: str, force: bool, model: str) -> list[str]:
    raw, data, run = world / "raw", world / "data", world / "run"
    words = {
        "prepare-gsm8k": ["prepare-gsm8k", "--input", str(raw), "--output", output],
        "prepare-data": [
            "prepare-data",
            "--train",
            str(raw / "train.jsonl"),
            "--test",
            str(raw / "test.jsonl"),
            "--data-source",
            "my/task",
            "--output",
            output,
        ],
        "train": [
            "train",
            "--run-dir",
            output,
            "--data",
            str(data),
            "--model",
            model,
            "--profile",
            "p40",
            "--skip-checks",
            "--steps",
            "1",
        ],
        "export": ["export", str(run), "--output", output],
        "eval": ["eval", model, "--data", str(data), "--output", output, "--limit", "1", "--max-new-tokens", "2"],
        "report": ["report", str(run), "--output", output],
        "bench": ["bench", "--work", str(world / "bench-work"), "--output", output],
    }[command]
    # train has no --force: a run directory is never replaced
    return words + (["--force"] if force and command != "train" else [])


class WouldRun(Exception):
    """Raised where a command got past its output checks into real work: the test's guard, not verlfit's."""


@pytest.mark.parametrize("command", COMMANDS)
def test_no_writing_command_loses_a_file_wherever_it_is_pointed(world, command, tiny_qwen2_dir, monkeypatch, capsys):
    from verlfit import bench
    from verlfit.commands import train as train_command
    from verlfit.train import inputs

    monkeypatch.chdir(world / "cwd")

    # guards: no verl launch, no bench run, should an output ever be allowed through
    def would_run(what):
        def guard(*args, **kwargs):
            raise WouldRun(what)

        return guard

    monkeypatch.setattr(train_command, "launch", would_run("train launched"))
    monkeypatch.setattr(inputs, "data_ready", would_run("train prepared data"))
    monkeypatch.setattr(bench, "blocking_checks", lambda **kwargs: [])
    facts = {
        "card": "NVIDIA H200",
        "driver": "580",
        "cuda": "13.0",
        "torch": "2",
        "verl": "0.4.1",
        "patches": "-",
        "compute_capability": "9.0",
        "memory_gib": 140.4,
    }
    monkeypatch.setattr(bench, "machine_facts", lambda nvml=None: facts)
    monkeypatch.setattr(bench, "check_engine_packages", lambda *args, **kwargs: None)
    monkeypatch.setattr(bench, "prepare_inputs", would_run("bench ran"))
    outcomes = []
    for where in PLACES:
        target = place(world, command, where)
        link = world / "links" / f"{command}-{where}"
        if not link.is_symlink():
            link.symlink_to(target.resolve() if where == "current" else target)
        for output in (str(target), str(link)):
            for force in (False, True):
                before = checksums(world)
                status = cli.main(argv(world, command, output, force, tiny_qwen2_dir))
                err = capsys.readouterr().err
                after = checksums(world)
                lost = {name for name, digest in before.items() if after.get(name) != digest}
                flags = f"{command} --output {output}{' --force' if force else ''}"
                assert not lost, f"{flags}: lost or changed {sorted(lost)}"
                assert status != 0 and "\n  fix: " in err and "Traceback" not in err, (flags, status, err)
                outcomes.append((where, output == str(link), force, status, err.splitlines()[0]))
    # every place refused, each in its own words (no other error hid the refusal)
    assert len(outcomes) == len(PLACES) * 4
    named = ("--output", "--run-dir", "run directory")
    assert all(any(words in line for words in named) for *_rest, line in outcomes), outcomes


def test_a_new_folder_is_still_written(world, monkeypatch, capsys):
    """The control: the same commands do write where nothing is in the way (the property above is not vacuous)."""
    monkeypatch.chdir(world / "cwd")
    for command in ("prepare-gsm8k", "prepare-data", "report"):
        output = world / "new" / command
        before = checksums(world)
        assert cli.main(argv(world, command, str(output), False, "unused")) == 0, capsys.readouterr().err
        after = checksums(world)
        assert {name: digest for name, digest in after.items() if name in before} == before
        assert json.loads((output / ".verlfit-written.json").read_text())["written_by"] == f"verlfit {command}"
