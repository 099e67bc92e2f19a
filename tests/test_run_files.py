"""verlfit.run_files: a run directory's names spelled once in the package, one reader of run.json, and its wording
for each way run.json can be unreadable (report and train --resume show the same words)."""

import ast
import json
from pathlib import Path

import pytest
from run_json_readers import run_json_reader_names

from verlfit import run_files
from verlfit.errors import VerlfitError
from verlfit.run_files import DAMAGED_RECORD_FIX, NOT_A_RECORD_FIX, NoRunRecord, is_run_directory, load_run

PACKAGE = Path(run_files.__file__).resolve().parent


def string_constants(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, value) of every string constant in ``tree`` but docstrings (a module's, a class's, a function's)."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def spelled(value: str) -> list[str]:
    """``FILE:LINE`` of each string constant of the package equal to ``value``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, constant in string_constants(ast.parse(path.read_text(), str(path))):
            if constant == value:
                found.append(f"{path.relative_to(PACKAGE)}:{line}")
    return found


@pytest.mark.parametrize(
    "name, value",
    [
        ("RUN_FILE", "run.json"),
        ("METRICS_FILE", "metrics.jsonl"),
        ("COMMAND_FILE", "command.sh"),
        ("CONFIG_FILE", "config.yaml"),
    ],
)
def test_each_name_of_a_run_directory_is_spelled_once_in_the_package(name, value):
    assert getattr(run_files, name) == value
    assert spelled(value) == [f"run_files.py:{_line_of(name)}"]


def _line_of(name: str) -> int:
    source = (PACKAGE / "run_files.py").read_text()
    return next(number for number, line in enumerate(source.splitlines(), 1) if line.startswith(f"{name} = "))


def test_one_load_run_in_the_package():
    found = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "load_run"
    ]
    assert found == [f"run_files.py:{_def_line('load_run')}"]


def test_run_json_is_read_by_load_run_alone():
    """No function of the package or of benchmarks/*.py but load_run reads run.json, whatever its name: counting the
    functions named load_run let ``json.loads((run_dir / "run.json").read_text())`` through in bench.py and three
    scripts, where a damaged record was a traceback instead of load_run's words and fix (issue 45 item 2)."""
    assert run_json_reader_names(PACKAGE.parents[1]) == ["run_files.load_run"]


def test_the_one_reader_check_fails_on_a_bypass_in_any_function(tmp_path):
    (tmp_path / "entrypoint" / "verlfit").mkdir(parents=True)
    (tmp_path / "entrypoint" / "verlfit" / "run_files.py").write_text(
        'RUN_FILE = "run.json"\n\ndef load_run(run_dir):\n    return json.loads((run_dir / RUN_FILE).read_text())\n'
    )
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "script.py").write_text(
        'def load_record(run_dir):\n    return json.loads((run_dir / "run.json").read_text())\n'
    )
    assert run_json_reader_names(tmp_path) == ["benchmarks/script.py::load_record", "run_files.load_run"]


def _def_line(function: str) -> int:
    source = (PACKAGE / "run_files.py").read_text()
    return next(n for n, line in enumerate(source.splitlines(), 1) if line.startswith(f"def {function}("))


def test_the_walk_finds_a_spelling_and_skips_docstrings():
    tree = ast.parse(
        '"""run.json in a docstring"""\nNAME = "run.json"\n\ndef f():\n    """run.json"""\n    return "x"\n'
    )
    assert string_constants(tree) == [(2, "run.json"), (6, "x")]


def test_load_run_reads_the_record(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"total_steps": 3, "pid": 1}))
    assert load_run(tmp_path) == {"total_steps": 3, "pid": 1}
    assert load_run(str(tmp_path)) == {"total_steps": 3, "pid": 1}


@pytest.mark.parametrize(
    "content, message, fix",
    [
        (
            '{"total_steps": 10, "pid":',
            "is not valid JSON (Expecting value: line 1 column 27 (char 26))",
            DAMAGED_RECORD_FIX,
        ),
        (b"\xff\xfe{}", "is not a verlfit run record (UnicodeDecodeError)", NOT_A_RECORD_FIX),
        ("[1, 2]", "is not a verlfit run record (a JSON list, not an object)", NOT_A_RECORD_FIX),
        ('"text"', "is not a verlfit run record (a JSON str, not an object)", NOT_A_RECORD_FIX),
    ],
)
def test_an_unreadable_record_is_named_with_its_fix(tmp_path, content, message, fix):
    path = tmp_path / "run.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(VerlfitError) as caught:
        load_run(tmp_path)
    assert (caught.value.message, caught.value.fix) == (f"{path} {message}", fix)
    assert not isinstance(caught.value, NoRunRecord)


def test_a_folder_named_run_json_and_a_file_for_the_run_directory(tmp_path):
    (tmp_path / "run.json").mkdir()
    with pytest.raises(VerlfitError) as caught:
        load_run(tmp_path)
    assert caught.value.message == f"{tmp_path / 'run.json'} is not a verlfit run record (IsADirectoryError)"
    (tmp_path / "file").write_text("x")
    with pytest.raises(VerlfitError) as caught:
        load_run(tmp_path / "file")
    assert caught.value.message == f"{tmp_path / 'file'} is a file, not a verlfit run directory"


def test_no_run_json_is_its_own_error(tmp_path):
    with pytest.raises(NoRunRecord) as caught:
        load_run(tmp_path)
    assert (
        str(caught.value)
        == f"{tmp_path} is not a verlfit run directory (no run.json)\n  fix: pass a directory created by `verlfit"
        " train`"
    )


def test_is_run_directory(tmp_path):
    assert not is_run_directory(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    assert is_run_directory(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "run.json").write_text("{}")
    assert is_run_directory(other)
    (other / "run.json").unlink()
    (other / "run.json").mkdir()  # a folder named run.json is no record
    assert not is_run_directory(other)


def test_record_text_is_what_a_run_json_holds():
    assert run_files.record_text({"a": [1]}) == '{\n  "a": [\n    1\n  ]\n}\n'


def test_the_outcome_is_recorded_through_the_one_reader(tmp_path, capsys):
    from verlfit.train.run_directory import record_outcome

    assert record_outcome(tmp_path, {"status": "failed"}) is False  # no run.json: nothing to record
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "run.json").write_text(json.dumps({"total_steps": 2}))
    assert record_outcome(tmp_path, {"status": "failed"}) is True
    assert load_run(tmp_path) == {"total_steps": 2, "outcome": {"status": "failed"}}
    # a damaged run.json: said on stderr and left as it is (the run's failure, already printed, is what matters)
    (tmp_path / "run.json").write_text('{"total_steps": 2,')
    assert record_outcome(tmp_path, {"status": "failed"}) is False
    assert (
        capsys.readouterr().err
        == f"verlfit: could not update {tmp_path / 'run.json'} with the outcome: {tmp_path / 'run.json'} is not valid"
        " JSON (Expecting property name enclosed in double quotes: line 1 column 19 (char 18))\n"
    )
    assert (tmp_path / "run.json").read_text() == '{"total_steps": 2,'
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run.json"]
