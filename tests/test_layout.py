"""The package's layout rules that a reader relies on (issue 25): argparse stops at each command's edge. Each
subcommand's module (the one whose ``register`` ``verlfit.cli`` calls) turns its parsed namespace into one typed
value; no function below it takes the namespace, so the planner and the launcher do not depend on the command
line's shape."""

import ast
import importlib
from pathlib import Path

from verlfit.cli import SUBCOMMANDS

PACKAGE = Path(importlib.import_module("verlfit").__file__).parent


def command_modules() -> set[Path]:
    """The files that define a subcommand's ``register`` (``verlfit.commands.<name>``)."""
    return {
        Path(importlib.import_module(importlib.import_module(name).register.__module__).__file__)
        for name in SUBCOMMANDS.values()
    }


def namespace_parameters(path: Path, root: Path = PACKAGE) -> list[str]:
    """``FILE:LINE FUNCTION(PARAMETER)`` for each parameter of a function in ``path`` named ``args`` or annotated
    ``argparse.Namespace`` (``*args`` is a list of positionals, not a namespace, and is left out)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            parameters = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            for parameter in parameters:
                annotation = ast.unparse(parameter.annotation) if parameter.annotation is not None else ""
                if parameter.arg == "args" or "Namespace" in annotation:
                    name = getattr(node, "name", "lambda")
                    found.append(f"{path.relative_to(root)}:{node.lineno} {name}({parameter.arg})")
    return found


def test_the_command_modules_are_the_registered_ones():
    assert sorted(str(path.relative_to(PACKAGE)) for path in command_modules()) == [
        "commands/bench.py",
        "commands/doctor.py",
        "commands/eval.py",
        "commands/export.py",
        "commands/plan.py",
        "commands/prepare_data.py",
        "commands/prepare_gsm8k.py",
        "commands/profiles.py",
        "commands/report.py",
        "commands/train.py",
    ]


def test_no_function_below_a_command_module_takes_an_argparse_namespace():
    commands = command_modules()
    below = sorted(path for path in PACKAGE.rglob("*.py") if path not in commands)
    assert [found for path in below for found in namespace_parameters(path)] == []


def test_the_walk_finds_a_namespace_parameter(tmp_path):
    """The check above can fail: a function taking ``args``, or a namespace under another name, is reported."""
    source = tmp_path / "example.py"
    source.write_text(
        "import argparse\n\ndef sizes(args):\n    return args.batch_size\n\ndef other(parsed: argparse.Namespace,"
        " *args):\n    pass\n"
    )
    assert namespace_parameters(source, tmp_path) == ["example.py:3 sizes(args)", "example.py:6 other(parsed)"]


def test_the_slow_modules_exist_and_make_test_fast_leaves_only_them_out():
    from slow_modules import SLOW_MODULES

    root = Path(__file__).resolve().parents[1]
    assert [name for name in sorted(SLOW_MODULES) if not (root / name).is_file()] == []
    makefile = (root / "Makefile").read_text(encoding="utf-8")
    assert '$(VENV)/bin/python -m pytest -m "not slow" $(PYTEST_ARGS)' in makefile
