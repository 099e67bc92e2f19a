"""The training stack a command imports (torch, transformers, verl): whether this Python has it, said once, in the
same words for every command that needs it (:func:`require`), before anything is read or written.

The images install all of it (docker/*.lock); a plain ``pip install`` of verlfit does not, and ``verlfit plan``,
``train --dry-run`` (with ``--no-validate``) and ``prepare-gsm8k`` need none of it.
"""

from __future__ import annotations

import importlib.util
import sys

from verlfit.errors import VerlfitError

# what each command imports, in the order said: export merges and saves with torch and transformers; eval generates
# with them and scores with verl's default_compute_score; a training launch runs verl
NEEDS = {
    "train": ("torch", "transformers", "verl"),
    "export": ("torch", "transformers", "verl"),
    "eval": ("torch", "transformers", "verl"),
}


def missing_packages(packages, find_spec=importlib.util.find_spec) -> list[str]:
    """The names of ``packages`` this Python cannot import, found without importing them (``find_spec``)."""
    missing = []
    for name in packages:
        try:
            found = find_spec(name) is not None
        except (ImportError, ValueError):  # a module set to None in sys.modules, or a broken parent package
            found = False
        if not found:
            missing.append(name)
    return missing


def require(command: str, find_spec=importlib.util.find_spec) -> None:
    """Refuse ``verlfit COMMAND`` (a key of :data:`NEEDS`) in a Python without its stack.

    Raises:
        VerlfitError (exit status 1): naming the command, each missing package and this Python, with the two ways to
            get them (the image, or installing them here).
    """
    missing = missing_packages(NEEDS[command], find_spec)
    if missing:
        raise VerlfitError(
            f"verlfit {command} needs {' and '.join(missing)}, which this Python ({sys.executable}) cannot import",
            fix=f"run verlfit in its image (docker compose run verlfit {command} ...), or install {' '.join(missing)} into this Python "
                "(the versions verlfit is tested with: tests/requirements-ci.txt; `make test` builds .venv with them)",
        )
