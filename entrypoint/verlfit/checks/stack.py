"""The training stack a command imports (torch, transformers, verl): does this Python have it (:func:`check_stack`),
said in the same words by every command that needs it (:func:`require`: ``verlfit train`` before its launch, ``export``
and ``eval`` before anything is read or written).

The images install all of it (docker/*.lock); a plain ``pip install`` of verlfit does not, and ``verlfit plan``,
``train --dry-run`` and ``prepare-gsm8k`` need none of it.
"""

from __future__ import annotations

import importlib.util
import sys

from verlfit.checks.result import FAIL, PASS, CheckResult
from verlfit.errors import VerlfitError

# what each command imports: export merges and saves with torch and transformers through verl's model merger; eval
# generates with them and scores with verl's default_compute_score; a training launch runs verl
NEEDS = {
    "train": ("torch", "transformers", "verl"),
    "export": ("torch", "transformers", "verl"),
    "eval": ("torch", "transformers", "verl"),
}


def missing_packages(packages, find_spec=None) -> list[str]:
    """The names of ``packages`` this Python cannot import, found without importing them (``find_spec``: an
    ``importlib.util.find_spec``-like lookup; None: the real one)."""
    find_spec = find_spec or importlib.util.find_spec
    missing = []
    for name in packages:
        try:
            found = find_spec(name) is not None
        except (ImportError, ValueError):  # a module set to None in sys.modules, or a broken parent package
            found = False
        if not found:
            missing.append(name)
    return missing


def check_stack(command: str, find_spec=None) -> CheckResult:
    """The ``stack`` check of ``verlfit COMMAND`` (a key of :data:`NEEDS`): PASS when this Python can import what it
    needs, else FAIL naming each missing package and this Python, with the two ways to get them (the image, or
    installing them here)."""
    missing = missing_packages(NEEDS[command], find_spec)
    if not missing:
        return CheckResult("stack", PASS, f"verlfit {command}: {', '.join(NEEDS[command])} importable")
    return CheckResult(
        "stack",
        FAIL,
        f"verlfit {command} needs {' and '.join(missing)}, which this Python ({sys.executable}) cannot import",
        f"run verlfit in its image (docker compose run verlfit {command} ...), or install {' '.join(missing)} into "
        "this Python "
        "(the versions verlfit is tested with: tests/requirements-ci.txt; `make test` builds .venv with them)",
    )


def require(command: str, find_spec=None) -> None:
    """Refuse ``verlfit COMMAND`` in a Python without its stack (:func:`check_stack`).

    Raises:
        VerlfitError (exit status 1): the FAIL's message, with its fix.
    """
    result = check_stack(command, find_spec)
    if result.status == FAIL:
        raise VerlfitError(result.message, fix=result.fix)
