"""The package's imports, read with the ast module (nothing is imported): no module of entrypoint/verlfit imports
itself back through others (no cycle, imports inside functions included), and the layers of the run's resolution
hold: the memory and time models and the resolved run import nothing from the modules that build on them.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "entrypoint" / "verlfit"

# lower layer first; a module may import its own layer and the layers below, never one above
# (the modules not named here are not checked against each other, only for cycles)
LAYERS = (
    # the switches and the resolved run: data about one run, read from profiles, cards and override strings
    ("verlfit.patch_switches", "verlfit.resolved_run"),
    # the models: what a run needs in memory and in time; no I/O, no command
    ("verlfit.plan.memory", "verlfit.plan.time"),
    # the checks several commands need: pure functions of paths and the environment, nothing of the plan
    (
        "verlfit.checks.result",
        "verlfit.checks.data_folder",
        "verlfit.checks.disk",
        "verlfit.checks.engines",
        "verlfit.checks.model_folder",
        "verlfit.checks.patches",
        "verlfit.checks.stack",
    ),
    # requests built from settings and options, the fitting search, the estimate of a train run
    ("verlfit.plan.request", "verlfit.plan.fit", "verlfit.plan.render", "verlfit.plan.train_estimate"),
    # what uses the plan to explain: why a run stopped (the planner's figures), is this machine ready (the disk line)
    ("verlfit.failure", "verlfit.readiness"),
    # what resolves a train run, and bench (it resolves runs as train does)
    ("verlfit.train.settings", "verlfit.bench"),
    # the command layer: each subcommand's module resolves its run at its edge
    ("verlfit.commands.plan", "verlfit.commands.train"),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its file (module level or inside functions):
    ``from A import b`` counts as importing ``A.b`` when that is a module, else ``A``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    [*package.split(".")[: len(package.split(".")) - node.level + 1], *([base] if base else [])]
                )
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {module for module in found if module in modules and module != name}


def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_reader_finds_the_imports_it_must():
    graph = import_graph()
    # relative, absolute, submodule and function-level imports
    assert {"verlfit.patch_switches", "verlfit.plan.request", "verlfit.plan.time", "verlfit.resolved_run"} <= graph[
        "verlfit.plan.train_estimate"
    ]
    assert "verlfit.resolved_run" in graph["verlfit.train.settings"]
    assert "verlfit.gpu" in graph["verlfit.plan.request"]  # imported inside resolve_plan_run
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_itself_back():
    assert cycles(import_graph()) == []


def test_no_module_imports_from_a_layer_above_its_own():
    graph = import_graph()
    layer_of = {module: level for level, layer in enumerate(LAYERS) for module in layer}
    assert set(layer_of) <= set(graph), "a module named in LAYERS is not in the package"
    upward = sorted(
        (module, target)
        for module, targets in graph.items()
        if module in layer_of
        for target in targets
        if layer_of.get(target, -1) > layer_of[module]
    )
    assert upward == []


def test_commands_import_no_command_and_nothing_imports_them():
    """The command layer (verlfit.commands): no command imports another, and no module outside it imports it (only
    cli.py names the modules, as strings)."""
    graph = import_graph()
    commands = {name for name in graph if name.startswith("verlfit.commands.")}
    assert {"verlfit.commands.report", "verlfit.commands.export", "verlfit.commands.eval"} <= commands
    between = sorted((name, target) for name in commands for target in graph[name] if target in commands)
    assert between == []
    outside = sorted(
        (name, target)
        for name, targets in graph.items()
        if not name.startswith("verlfit.commands")
        for target in targets
        if target.startswith("verlfit.commands")
    )
    assert outside == []


def test_verlfits_own_imports_stand_at_the_top_of_each_module():
    # imports inside functions hide the house's structure; only third-party ones (torch, datasets, verl, ...) stay
    # lazy there, so that commands without them start fast and work where they are missing
    inside = []
    for name, path in package_modules().items():
        for function in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "verlfit"):
                    inside.append(f"{name}:{node.lineno} {function.name}")
                elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "verlfit" for a in node.names):
                    inside.append(f"{name}:{node.lineno} {function.name}")
    assert inside == []
