"""verlfit train, export and eval in a Python without torch or transformers: one clean error, the same words for the
three (issue 28, item 5: export and eval died in `import torch` with a traceback)."""

import sys

import pytest

from verlfit import cli
from verlfit.checks.stack import missing_packages, require

FIX = (
    "run verlfit in its image (docker compose run verlfit {command} ...), or install torch transformers into this"
    " Python (the versions verlfit is tested with: tests/requirements-ci.txt; `make test` builds .venv with them)"
)


@pytest.fixture
def no_torch(monkeypatch):
    """This Python as one without torch and transformers (an import of either fails)."""
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "transformers", None)


def test_missing_packages_are_found_without_importing_them(no_torch):
    assert missing_packages(("torch", "transformers", "verl", "json")) == ["torch", "transformers"]
    assert missing_packages(("json",), find_spec=lambda name: None) == ["json"]


@pytest.mark.parametrize("command", ["train", "export", "eval"])
def test_every_command_that_needs_the_stack_says_so_in_the_same_words(command, no_torch, tmp_path, monkeypatch, capsys):
    if command == "train":
        from fakes import P40  # a GPU, so the launch gets as far as the stack

        import verlfit.commands.train as train_command

        real = train_command.build_launch
        monkeypatch.setattr(train_command, "build_launch", lambda options: real(options, environ={}, gpu=P40))
        argv = ["train", "--profile", "p40", "--run-dir", str(tmp_path / "run")]
    elif command == "export":
        argv = ["export", str(tmp_path)]
    else:
        argv = ["eval", str(tmp_path), "--data", str(tmp_path)]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert (
        err == f"verlfit: error: verlfit {command} needs torch and transformers, which this Python ({sys.executable})"
        f" cannot import\n  fix: {FIX.format(command=command)}\n"
    )
    assert list(tmp_path.iterdir()) == []  # nothing made


def test_require_passes_where_the_stack_is_installed():
    require("export")
    require("eval")
