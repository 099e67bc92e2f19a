"""docs/architecture.md against the package it describes, read with the ast module (nothing of verlfit is imported).

The module table (the rows whose first cell is a backticked path of entrypoint/verlfit) has one row per module: each
``.py`` file has a row of its path (``train/settings.py``), a sub-package's ``__init__.py`` the row of its folder
(``checks/``, ``commands/``, ``plan/``, ``profiles/``, ``train/``); the package's own ``__init__.py`` and
``__main__.py`` (``python -m verlfit``) have none. No row names a module that does not exist.

The names of each row's key-API cell (its third) are read by one rule. A backticked span is taken apart as
``NAME``, ``NAME(...)``, ``NAME -> ...`` or ``NAME.attribute`` (a dotted head, then anything):

* a head whose first parts name a module of the package from the package root (``output_files.write_file``,
  ``plan.time.measured_lengths``) names the next part, which that module must define at its top level;
* any other head names its first part (``PatchSwitches`` of ``PatchSwitches.from_overrides``), which the row's own
  module must define at its top level (a ``def``, a ``class`` or an assignment; an imported name does not count);
* except: a first part that no module of the package defines at its top level is not the package's (verl's keys such
  as ``data_source``, run.json's fields, ``rich``), and a bare span that is a subcommand's name (``train``,
  ``export``) names the subcommand; both are skipped. Spans that are not identifiers (file names such as
  ``metrics.jsonl``, flags such as ``--step``, paths) are not names; a span ending in ``.py`` or ``/`` is a path of
  the package, which must exist; a span ending in a data file's extension (``.json``, ``.jsonl``, ``.parquet``,
  ``.log``, ``.txt``, ``.yaml``, ``.csv``, ``.png``, ``.sh``: ``train.log``, ``metrics.jsonl``) is a file name.

Two more rules cover the whole document and the rows' calls. A dotted span anywhere in it (``verlfit.`` left off)
whose first parts name a module of the package names a top-level name of that module, as above (the prose's
``train.preflight.checkpoint_space_warning``, the keys table's ``patch_switches.forced_switches``). A key-API span
written as a
call, ``NAME(a, b=None)``, of a function or class its row's module defines lists the first parameters of that
function (of a class: its ``__init__``'s, else its fields), in order; a call whose arguments are not all identifiers
(``prepare(...)``, ``parse_reward_function("FILE[:NAME]")``) shows a value, not the parameters, and is skipped.

The other rules the document states: files are renamed into place only by output_files.py (``os.rename``,
``os.replace``, ``renameat2``); NVML is read only in gpu.py; only the command modules define ``register``; run_files
imports nothing of the package but errors; run.json is read (a ``read_text``, ``read_bytes`` or ``open`` of a path
that spells it) by exactly the functions the run_files rule names, in the package and in benchmarks/; the model_shape
and synthetic_model rows name the model families of ``BUILTIN_SHAPES``. That the literal "run.json" (and each name of a
run directory) is
spelled only in run_files.py, that it holds the one ``load_run`` and that no other function reads run.json, is
tests/test_run_files.py's (``test_each_name_of_a_run_directory_is_spelled_once_in_the_package``,
``test_one_load_run_in_the_package``, ``test_run_json_is_read_by_load_run_alone``); the scan is
tests/run_json_readers.py.
"""

import ast
import re
from pathlib import Path

from run_json_readers import run_json_reader_names

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "entrypoint" / "verlfit"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

ROW = re.compile(r"^\| `(?P<module>[\w/]+(?:\.py|/))` \| (?P<concept>.*?) \| ?(?P<api>.*?) ?\|$")
SPAN = re.compile(r"`([^`]+)`")
HEAD = re.compile(r"^(?P<head>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?P<rest>\(.*|\s->\s.*|)$")
PATH = re.compile(r"^[\w/]+(?:\.py|/)$")
FILE_NAME = re.compile(r"^[\w.-]+\.(?:json|jsonl|parquet|log|txt|yaml|csv|png|sh)$")


def module_rows(text: str) -> list[tuple[str, str]]:
    """(module, key-API cell) of each row of the document's module table, in order."""
    return [(m["module"], m["api"]) for m in map(ROW.match, text.splitlines()) if m]


def expected_rows(package: Path) -> list[str]:
    """The table's first column as the package's files call for it, sorted: a file's path, a sub-package's folder."""
    rows = []
    for path in package.rglob("*.py"):
        relative = path.relative_to(package).as_posix()
        if relative in ("__init__.py", "__main__.py"):
            continue
        rows.append(relative[: -len("__init__.py")] if path.name == "__init__.py" else relative)
    return sorted(rows)


def module_file(package: Path, row: str) -> Path:
    return package / row / "__init__.py" if row.endswith("/") else package / row


def top_level_names(path: Path) -> set[str]:
    """What a module defines at its top level: functions, classes, assigned and annotated names (not imports)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def dotted_modules(package: Path) -> dict[str, Path]:
    """``plan.time`` -> its file, for every module of the package (a sub-package as its ``__init__.py``)."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        if parts:
            modules[".".join(parts)] = path
    return modules


def missing_api_names(text: str, package: Path, subcommands: set[str]) -> list[str]:
    """``ROW: SPAN`` for each key-API name (the module docstring's rule) its module does not define, and each path
    that is not in the package."""
    modules = dotted_modules(package)
    defined = {name: top_level_names(path) for name, path in modules.items()}
    anywhere = set().union(*defined.values())
    missing = []
    for row, api in module_rows(text):
        own = top_level_names(module_file(package, row)) if module_file(package, row).is_file() else set()
        for span in SPAN.findall(api):
            if PATH.match(span):
                if not module_file(package, span).is_file():
                    missing.append(f"{row}: {span}")
                continue
            match = HEAD.match(span)
            if match is None or span in subcommands or FILE_NAME.match(span):
                continue
            parts = match["head"].split(".")
            prefixes = [".".join(parts[:n]) for n in range(len(parts) - 1, 0, -1) if ".".join(parts[:n]) in modules]
            if prefixes:
                module, name = prefixes[0], parts[len(prefixes[0].split("."))]
                if name not in defined[module]:
                    missing.append(f"{row}: {span}")
            elif parts[0] in anywhere and parts[0] not in own:
                missing.append(f"{row}: {span}")
    return missing


def dotted_reference_errors(text: str, package: Path) -> list[str]:
    """Each backticked ``module.name`` of the whole document (the module docstring's rule) whose module does not
    define the name."""
    modules = dotted_modules(package)
    wrong = []
    for span in SPAN.findall(text):
        match = HEAD.match(span.removeprefix("verlfit."))
        if match is None or FILE_NAME.match(span) or PATH.match(span) or match["head"] in modules:
            continue
        parts = match["head"].split(".")
        prefixes = [".".join(parts[:n]) for n in range(len(parts) - 1, 0, -1) if ".".join(parts[:n]) in modules]
        if prefixes and parts[len(prefixes[0].split("."))] not in top_level_names(modules[prefixes[0]]):
            wrong.append(span)
    return wrong


CALL = re.compile(r"^(?P<name>[A-Za-z_]\w*)\((?P<arguments>[^()]*)\)")
PARAMETER = re.compile(r"^(?P<name>[A-Za-z_]\w*)(?:=.*)?$")


def parameters_of(node: ast.AST) -> list[str]:
    """A function's parameters (positional, then keyword-only); a class's ``__init__``'s without ``self``, else its
    annotated fields (a dataclass's)."""
    if isinstance(node, ast.ClassDef):
        init = [item for item in node.body if isinstance(item, ast.FunctionDef) and item.name == "__init__"]
        if init:
            return parameters_of(init[0])[1:]
        return [
            item.target.id
            for item in node.body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
        ]
    arguments = node.args
    return [argument.arg for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]


def wrong_parameters(text: str, package: Path) -> list[str]:
    """``ROW: SPAN (has P1, P2, ...)`` for each key-API call (the module docstring's rule) whose parameters are not
    the first ones of its function or class."""
    wrong = []
    for row, api in module_rows(text):
        path = module_file(package, row)
        if not path.is_file():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        defined = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        for span in SPAN.findall(api):
            call = CALL.match(span)
            if call is None or call["name"] not in defined or not call["arguments"].strip():
                continue
            listed = [PARAMETER.match(item.strip()) for item in call["arguments"].split(",")]
            if not all(listed):
                continue
            names = [item["name"] for item in listed]
            actual = parameters_of(defined[call["name"]])
            if actual[: len(names)] != names:
                wrong.append(f"{row}: {span} (has {', '.join(actual)})")
    return wrong


def subcommand_names(package: Path) -> set[str]:
    """The keys of cli.py's ``SUBCOMMANDS``, read from its source."""
    for node in ast.parse((package / "cli.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "SUBCOMMANDS":
            return set(ast.literal_eval(node.value))
    raise AssertionError("cli.py has no SUBCOMMANDS")


def calls_found(package: Path, wanted: dict[str, str]) -> list[str]:
    """``FILE: WHAT`` (sorted, once each) for each use of a ``module.attribute`` in ``wanted`` (attribute -> module,
    e.g. ``rename`` -> ``os``), each ``X.rename(...)`` and one-argument ``X.replace(...)`` call (``Path``'s), each
    ``renameat2`` (a name, an attribute or a string: it is looked up in the C
    library), and each import of ``pynvml``."""
    found = set()
    for path in package.rglob("*.py"):
        relative = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if wanted.get(node.attr) == node.value.id:
                    found.add(f"{relative}: {node.value.id}.{node.attr}")
            if (  # Path.rename, Path.replace (one argument: str.replace takes two)
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and not (
                    isinstance(node.func.value, ast.Name) and node.func.value.id in ("os", "shutil", "dataclasses")
                )
                and (
                    node.func.attr == "rename"
                    or (node.func.attr == "replace" and len(node.args) == 1 and not node.keywords)
                )
            ):
                found.add(f"{relative}: .{node.func.attr}")
            if (
                (isinstance(node, ast.Name) and node.id == "renameat2")
                or (isinstance(node, ast.Attribute) and node.attr == "renameat2")
                or (isinstance(node, ast.Constant) and node.value == "renameat2")
            ):
                found.add(f"{relative}: renameat2")
            if isinstance(node, ast.Import) and any(alias.name == "pynvml" for alias in node.names):
                found.add(f"{relative}: import pynvml")
            if isinstance(node, ast.ImportFrom) and node.module == "pynvml":
                found.add(f"{relative}: import pynvml")
    return sorted(found)


RENAMES = {"rename": "os", "replace": "os", "renames": "os", "move": "shutil"}


def register_definitions(package: Path) -> list[str]:
    """The files that define a function named ``register`` (at any depth), sorted."""
    return sorted(
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if any(
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "register"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        )
    )


def package_imports(path: Path) -> set[str]:
    """The ``verlfit`` modules a file imports (module level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("verlfit"))
        elif isinstance(node, ast.ImportFrom) and node.module == "verlfit":
            found.update(f"verlfit.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("verlfit."):
            found.add(node.module)
    return found


def documented_run_json_readers(text: str) -> list[str]:
    """The readers of run.json the document names: the backticked spans of its run_files rule after "read by"."""
    rule = text.split("- **A run directory's names and its record: run_files.**", 1)[1].split("\n- ", 1)[0]
    return sorted(SPAN.findall(rule.split("run.json is read by", 1)[1].split(" (`tests/", 1)[0]))


FAMILY = re.compile(r"\b(?:Qwen\d[\d.]*|Llama[ -]\d[\d.]*)")


def builtin_families(path: Path) -> set[str]:
    """The model families of ``BUILTIN_SHAPES`` in model_shape.py, read from the hub ids it is filled with
    (``BUILTIN_SHAPES[f"Qwen/Qwen3-{_size}{_suffix}"] = ...`` -> ``Qwen3``; ``Llama-3.2`` written ``Llama 3.2``)."""
    families = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            subscript = isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
            if subscript and target.value.id == "BUILTIN_SHAPES":
                key = target.slice
                text = key.values[0].value if isinstance(key, ast.JoinedStr) else key.value
                name = re.sub(r"-(?:\d[\d.]*B.*)?$", "", text.split("/", 1)[1])
                families.add(name.replace("-", " "))
    return families


def families_named(cell: str) -> set[str]:
    """The model families a document's cell names (``Qwen2.5``, ``Llama 3.2``)."""
    return {name.replace("-", " ") for name in FAMILY.findall(cell)}


# the package itself


def test_the_module_table_has_one_row_per_module():
    rows = [row for row, _ in module_rows(ARCHITECTURE.read_text(encoding="utf-8"))]
    assert sorted(rows) == expected_rows(PACKAGE)
    assert len(rows) == len(set(rows))


def test_every_key_api_name_is_defined_in_its_module():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert missing_api_names(text, PACKAGE, subcommand_names(PACKAGE)) == []


def test_every_dotted_name_in_the_document_is_defined():
    assert dotted_reference_errors(ARCHITECTURE.read_text(encoding="utf-8"), PACKAGE) == []


def test_every_call_in_the_table_lists_its_parameters():
    assert wrong_parameters(ARCHITECTURE.read_text(encoding="utf-8"), PACKAGE) == []


def test_only_output_files_renames_and_only_gpu_reads_nvml():
    assert calls_found(PACKAGE, RENAMES) == [
        "checkpoints.py: .rename",  # prune: a checkpoint renamed aside before it is deleted, nothing written
        "gpu.py: import pynvml",
        "output_files.py: os.rename",
        "output_files.py: os.replace",
        "output_files.py: renameat2",
    ]


def test_only_the_command_modules_define_register():
    assert register_definitions(PACKAGE) == [
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


def test_run_files_imports_only_errors():
    assert package_imports(PACKAGE / "run_files.py") == {"verlfit.errors"}


def test_the_model_shape_rows_name_the_built_in_families():
    families = builtin_families(PACKAGE / "model_shape.py")
    assert families == {"Qwen2.5", "Qwen3", "Llama 3.2", "Llama 3.1"}
    lines = ARCHITECTURE.read_text(encoding="utf-8").splitlines()
    rows = {match["module"]: line for line in lines if (match := ROW.match(line))}
    assert families_named(rows["model_shape.py"]) == families
    assert families_named(rows["synthetic_model.py"]) == families


def test_the_readers_of_run_json_are_the_documented_ones():
    documented = documented_run_json_readers(ARCHITECTURE.read_text(encoding="utf-8"))
    assert "run_files.load_run" in documented
    assert run_json_reader_names(ROOT) == documented


# the checks above can fail


def _package(tmp_path: Path) -> Path:
    """A small package: cli.py with two subcommands, a module, a sub-package with one module."""
    package = tmp_path / "verlfit"
    (package / "plan").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text("")
    (package / "cli.py").write_text(
        'SUBCOMMANDS: dict[str, str] = {"train": "x", "export": "y"}\n\ndef main(argv=None):\n    pass\n'
    )
    (package / "export.py").write_text("from os import path\n\ndef export():\n    pass\n\nLIMIT = 3\n")
    (package / "plan" / "__init__.py").write_text("")
    (package / "plan" / "time.py").write_text("class Card:\n    pass\n\ndef estimate(x):\n    return x\n")
    return package


TABLE = """\
| module | concept | key API |
|---|---|---|
| `cli.py` | wiring | `SUBCOMMANDS`, `main(argv)`; `train` and `export` |
| `export.py` | export | `export(...) -> Result`, `LIMIT`, `export.log`, `--step`, `data_source`, `plan/time.py` |
| `plan/` | plan | |
| `plan/time.py` | time | `Card.name`, `estimate -> float`, `export.LIMIT` |
"""


def test_a_missing_or_extra_row_is_found(tmp_path):
    package = _package(tmp_path)
    assert expected_rows(package) == ["cli.py", "export.py", "plan/", "plan/time.py"]
    assert sorted(row for row, _ in module_rows(TABLE)) == expected_rows(package)
    (package / "hub.py").write_text("")
    assert expected_rows(package) == ["cli.py", "export.py", "hub.py", "plan/", "plan/time.py"]
    without = TABLE.replace("| `plan/` | plan | |\n", "")
    assert [row for row, _ in module_rows(without)] == ["cli.py", "export.py", "plan/time.py"]


def test_a_name_missing_from_its_module_is_found(tmp_path):
    package = _package(tmp_path)
    subcommands = subcommand_names(package)
    assert subcommands == {"train", "export"}
    assert missing_api_names(TABLE, package, subcommands) == []
    wrong = (
        TABLE.replace("`main(argv)`", "`export`, `estimate(argv)`")  # a bare subcommand: skipped; another module's
        .replace("`LIMIT`", "`path`, `plan.time.Card`, `plan.time.LIMIT`")  # imported; dotted right; dotted wrong
        .replace("`data_source`, `plan/time.py`", "`data_source`, `plan/memory.py`")  # a path that is not there
        .replace("`Card.name`", "`Card.name`, `main`")  # defined in another module (cli.py)
    )
    assert missing_api_names(wrong, package, subcommands) == [
        "cli.py: estimate(argv)",
        "export.py: plan.time.LIMIT",
        "export.py: plan/memory.py",
        "plan/time.py: main",
    ]
    # `path` is imported by export.py but defined by no module of the package: not the package's name, skipped


def test_the_rename_and_nvml_scan_finds_each_use(tmp_path):
    package = _package(tmp_path)
    assert calls_found(package, RENAMES) == []
    (package / "export.py").write_text(
        "import os, shutil\nfrom pynvml import nvmlInit\n\n"
        "def f(a, b):\n    os.replace(a, b)\n    shutil.move(a, b)\n    return getattr(libc, 'renameat2')\n"
    )
    (package / "plan" / "time.py").write_text(
        "import pynvml\nimport os\nos.rename('a', 'b')\n'x'.replace('a', 'b')\nPath('a').replace('b')\n"
    )
    assert calls_found(package, RENAMES) == [
        "export.py: import pynvml",
        "export.py: os.replace",
        "export.py: renameat2",
        "export.py: shutil.move",
        "plan/time.py: .replace",
        "plan/time.py: import pynvml",
        "plan/time.py: os.rename",
    ]


def test_the_register_and_import_scans_find_them(tmp_path):
    package = _package(tmp_path)
    assert register_definitions(package) == []
    (package / "plan" / "time.py").write_text("def register(subparsers):\n    from verlfit import cli\n")
    assert register_definitions(package) == ["plan/time.py"]
    assert package_imports(package / "plan" / "time.py") == {"verlfit.cli"}
    (package / "export.py").write_text("import verlfit.errors\nfrom verlfit.output_files import write_file\n")
    assert package_imports(package / "export.py") == {"verlfit.errors", "verlfit.output_files"}


def test_a_wrong_dotted_name_or_parameter_list_is_found(tmp_path):
    package = _package(tmp_path)
    prose = "see `verlfit.plan.time.estimate`, `export.LIMIT`, `plan.time`, `export.log`, `cli.py`, `data.prompt_key`\n"
    assert dotted_reference_errors(prose + TABLE, package) == []
    assert dotted_reference_errors("`plan.time.predict`, `verlfit.export.export_all()`\n", package) == [
        "plan.time.predict",
        "verlfit.export.export_all()",
    ]
    assert wrong_parameters(TABLE, package) == []
    (package / "cli.py").write_text("SUBCOMMANDS: dict[str, str] = {}\n\ndef main(args, argv=None):\n    pass\n")
    (package / "plan" / "time.py").write_text("class Card:\n    name: str\n    memory: int\n")
    calls = TABLE.replace("`Card.name`", '`Card(name, memory)`, `Card(memory)`, `Card("A10")`')
    assert wrong_parameters(calls.replace("`estimate -> float`", ""), package) == [
        "cli.py: main(argv) (has args, argv)",
        "plan/time.py: Card(memory) (has name, memory)",
    ]


def test_the_run_json_scan_finds_each_reader_and_only_readers(tmp_path):
    package = tmp_path / "entrypoint" / "verlfit"
    (package / "train").mkdir(parents=True)
    (tmp_path / "benchmarks").mkdir()
    (package / "run_files.py").write_text(
        'RUN_FILE = "run.json"\n\ndef load_run(run_dir):\n'
        "    path = run_dir / RUN_FILE\n    return path.read_text()\n\n"
        "def is_run_directory(path):\n    return (path / RUN_FILE).is_file()\n"
    )
    (package / "train" / "report.py").write_text(
        "from verlfit import run_files\n\nclass Summary:\n    def total(self, run):\n"
        "        return json.loads((run / run_files.RUN_FILE).read_text())\n\n"
        "def metrics(run):\n    print('no run.json')\n    return (run / 'metrics.jsonl').read_text()\n"
    )
    (tmp_path / "benchmarks" / "collect.py").write_text(
        "def summarise(run):\n    with open(run / 'run.json') as file:\n        return file.read()\n\n"
        "def outer(run):\n    def inner():\n        return (run / 'run.json').read_bytes()\n    return inner\n"
    )
    assert run_json_reader_names(tmp_path) == [
        "benchmarks/collect.py::outer.inner",
        "benchmarks/collect.py::summarise",
        "run_files.load_run",
        "train.report.Summary.total",
    ]
    rule = (
        "- **A run directory's names and its record: run_files.** Names, and run.json is read by `run_files.load_run`"
        " and, directly, by `benchmarks/collect.py::summarise` (`tests/test_architecture_doc.py`); more `prose`.\n"
        "- **Next.** `other`\n"
    )
    assert documented_run_json_readers(rule) == ["benchmarks/collect.py::summarise", "run_files.load_run"]


def test_the_family_scans_read_the_hub_ids_and_the_cells(tmp_path):
    shapes = tmp_path / "model_shape.py"
    shapes.write_text(
        'BUILTIN_SHAPES = {}\nfor size in SIZES:\n    BUILTIN_SHAPES[f"Qwen/Qwen2.5-{size}"] = {}\n'
        'BUILTIN_SHAPES["meta-llama/Llama-3.2-1B-Instruct"] = {}\nOTHER["Qwen/Qwen3-4B"] = {}\n'
    )
    assert builtin_families(shapes) == {"Qwen2.5", "Llama 3.2"}
    assert families_named("| `model_shape.py` | shapes | built-in Qwen2.5 shapes |") == {"Qwen2.5"}
    assert families_named("Qwen2.5, Qwen3 and Llama 3.2; meta-llama/Llama-3.2-3B") == {"Qwen2.5", "Qwen3", "Llama 3.2"}
