"""Who reads run.json: every function of the package and of benchmarks/*.py that reads it itself (a ``read_text``,
``read_bytes`` or ``open`` of a path that spells it), whatever the function's name. tests/test_run_files.py holds the
readers to ``run_files.load_run`` alone; tests/test_architecture_doc.py holds docs/architecture.md to them."""

import ast
from pathlib import Path

READ_CALLS = {"read_text", "read_bytes", "open"}  # Path.read_text / read_bytes / open, and the built-in open


def _names_run_json(node: ast.AST, aliases: set[str]) -> bool:
    """Whether an expression spells run.json: the literal (or a path ending in it), ``RUN_FILE``, or a name assigned
    from such an expression earlier in the same function."""
    for part in ast.walk(node):
        if isinstance(part, ast.Constant) and isinstance(part.value, str) and part.value.endswith("run.json"):
            return True
        if isinstance(part, ast.Name) and (part.id == "RUN_FILE" or part.id in aliases):
            return True
        if isinstance(part, ast.Attribute) and part.attr == "RUN_FILE":
            return True
    return False


def run_json_readers(path: Path) -> list[str]:
    """The functions of one file (``Class.method`` for a method) that read run.json themselves: a ``read_text``,
    ``read_bytes`` or ``open`` call on (or of) a path that spells it (:func:`_names_run_json`)."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, prefix)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                aliases = {
                    target.id
                    for statement in ast.walk(child)
                    if isinstance(statement, ast.Assign) and _names_run_json(statement.value, set())
                    for target in statement.targets
                    if isinstance(target, ast.Name)
                }
                functions = (ast.FunctionDef, ast.AsyncFunctionDef)
                inner = [n for n in ast.walk(child) if n is not child and isinstance(n, functions)]
                nested = {id(part) for function in inner for part in ast.walk(function)}  # their own names
                for call in ast.walk(child):
                    if id(call) in nested or not isinstance(call, ast.Call):
                        continue
                    function = call.func
                    if isinstance(function, ast.Attribute) and function.attr in READ_CALLS:
                        subject = [function.value, *call.args]
                    elif isinstance(function, ast.Name) and function.id == "open":
                        subject = call.args[:1]
                    else:
                        continue
                    if any(_names_run_json(part, aliases) for part in subject):
                        found.append(name)
                        break
                visit(child, f"{name}.")

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), "")
    return found


def run_json_reader_names(root: Path) -> list[str]:
    """Every reader of run.json in the package and the benchmark scripts, sorted: a package function as its dotted
    name from the package root (``run_files.load_run``), a script's as ``benchmarks/FILE.py::NAME``."""
    package = root / "entrypoint" / "verlfit"
    names = []
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(package).with_suffix("").parts)
        names += [f"{module}.{name}" for name in run_json_readers(path)]
    for path in sorted((root / "benchmarks").glob("*.py")):
        names += [f"{path.relative_to(root).as_posix()}::{name}" for name in run_json_readers(path)]
    return sorted(names)
