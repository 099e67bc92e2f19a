"""Helpers for the verl 0.4.1 patch series tests (imported by conftest.py and the test modules).

The installed verl (the PyPI 0.4.1 wheel in the test venv) is never modified: every test copies its tree
to a temporary directory and patches the copy with patches/apply.py, the same tool the images use. Code
from a patched copy runs in subprocesses (tests/patches/verl_probe.py) with the copy first on PYTHONPATH,
or, for the standalone helper modules the series adds, is loaded in-process by file path.
"""

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
APPLY = REPO / "patches" / "apply.py"
SERIES = REPO / "patches" / "verl-0.4.1" / "series"
PROBE = Path(__file__).resolve().parent / "verl_probe.py"

# Patches up to and including the autocast one: the HF rollout runs in fp32 but without the 0004 fixes,
# so rollout tests can show that they fail without 0004 and pass with it.
BEFORE_ROLLOUT_FIX = 3
# Patches up to 0008 (before the LoRA fixes) and up to 0009 (LoRA actor builds with the HF rollout, adapter
# checkpoint and critic head not yet fixed): the LoRA tests show each defect on these trees.
BEFORE_LORA = 8
LORA_WRAP_ONLY = 9
# Patches up to 0011 (before 0012): the checkpoint manager loads without map_location.
BEFORE_CKPT = 11


def series_names(series=SERIES):
    names = []
    for line in Path(series).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return names


def installed_verl_dir() -> Path:
    """The pristine verl 0.4.1 package every test copies: ``VERLFIT_PRISTINE_VERL`` when set (a folder holding verl's
    ``verl/`` package: inside the image, whose installed verl is patched, the rehearsal's test image exports the
    pristine tree of /opt/verl's commit there; tests/images/rehearsal/Dockerfile.tests), else the installed verl
    (the PyPI 0.4.1 wheel in the test venv)."""
    if os.environ.get("VERLFIT_PRISTINE_VERL"):
        return Path(os.environ["VERLFIT_PRISTINE_VERL"]) / "verl"
    spec = importlib.util.find_spec("verl")
    assert spec is not None and spec.submodule_search_locations, "verl 0.4.1 must be installed in the test venv"
    return Path(list(spec.submodule_search_locations)[0])


def copy_verl(dest_root: Path) -> Path:
    """Copy the installed verl package to dest_root/verl (without bytecode); return dest_root."""
    if (installed_verl_dir() / ".verlfit-patches").exists():
        import pytest

        pytest.skip(
            "the installed verl is already patched; these tests need the pristine PyPI 0.4.1 wheel (or"
            " VERLFIT_PRISTINE_VERL)"
        )
    dest_root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(installed_verl_dir(), dest_root / "verl", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest_root


def run_apply(*args, check_rc=None):
    proc = subprocess.run([sys.executable, str(APPLY), *map(str, args)], capture_output=True, text=True)
    if check_rc is not None:
        assert proc.returncode == check_rc, f"apply.py {args} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def partial_series(dest: Path, count: int) -> Path:
    """A series directory holding the first ``count`` patches of the real series."""
    dest.mkdir(parents=True, exist_ok=True)
    names = series_names()[:count]
    for name in names:
        shutil.copy2(SERIES.parent / name, dest / name)
    (dest / "series").write_text("\n".join(names) + "\n")
    return dest / "series"


def tree_digest(root: Path) -> dict:
    """sha256 of every file under root/verl (bytecode excluded)."""
    out = {}
    for path in sorted((root / "verl").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def load_module_from(path: Path, name: str):
    """Import one standalone file (a helper the series adds) without touching the ``verl`` package."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
