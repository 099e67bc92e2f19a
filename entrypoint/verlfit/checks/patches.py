"""The patch series check: is the installed verl patched with this verlfit's series (:func:`check_patches`), found
where verl is installed (:func:`installed_verl_dir`, without importing it) and where the series is
(:func:`default_series`)? Used by ``verlfit doctor`` (its ``patches`` line), so by ``verlfit train``'s blocking
checks, and by ``verlfit bench`` (the verl it records).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from verlfit.checks.result import FAIL, PASS, SKIP, WARN, CheckResult


def installed_verl_dir() -> Path | None:
    """The installed ``verl`` package directory, found without importing it (importing pulls torch)."""

    try:
        spec = importlib.util.find_spec("verl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def default_series(environ: Mapping[str, str]) -> Path | None:
    """``VERLFIT_PATCHES_DIR`` (the series' folder, or a folder holding ``verl-0.4.1/``), else the
    repository's ``patches/verl-0.4.1/series`` next to this package's source tree."""
    candidates = []
    if environ.get("VERLFIT_PATCHES_DIR"):
        base = Path(environ["VERLFIT_PATCHES_DIR"])
        candidates += [base / "series", base / "verl-0.4.1" / "series"]
    candidates.append(
        Path(__file__).resolve().parents[3] / "patches" / "verl-0.4.1" / "series"
    )  # verlfit/checks/ -> the repository
    return next((c for c in candidates if c.is_file()), None)


def _apply_tool(series: Path):
    """The ``patches/apply.py`` beside ``series`` (``patches/<name>/series``), loaded as a module, so the
    check reads the series and the marker exactly as the tool that wrote them. None when it is absent."""

    path = Path(series).resolve().parent.parent / "apply.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("verlfit_patches_apply", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def _read_series(series: Path) -> list[tuple[str, str]]:
    """(sha256, name) of each patch of ``series``, read by ``patches/apply.py``."""
    tool = _apply_tool(series)
    if tool is None:
        raise FileNotFoundError(f"no patches/apply.py beside {series}")
    return [(patch.sha256, patch.name) for patch in tool.read_series(Path(series))]


def _read_marker(series: Path, verl_dir: Path) -> list[tuple[str, str]]:
    """(sha256, name) entries of the installed verl's marker, read by ``patches/apply.py``."""
    tool = _apply_tool(series)
    if tool is None:
        raise FileNotFoundError(f"no patches/apply.py beside {series}")
    return tool.read_marker(Path(verl_dir).parent) or []


def check_patches(verl_dir: str | os.PathLike | None, series: str | os.PathLike | None) -> CheckResult:
    """The ``patches`` check: does the installed verl (``verl_dir``, its package folder: :func:`installed_verl_dir`;
    None: not installed, SKIP) carry the patch series ``series`` (its ``series`` file: :func:`default_series`), as
    ``patches/apply.py`` wrote its ``.verlfit-patches`` marker? PASS when the marker lists the series' patches in
    order with their digests; WARN when the series cannot be found or a patch changed since; FAIL when verl is not
    patched or carries another series."""
    if verl_dir is None:
        return CheckResult(
            "patches",
            SKIP,
            "verl is not installed here: patch series not checked (run the doctor inside the verlfit image)",
        )
    verl_dir = Path(verl_dir)
    marker = verl_dir / ".verlfit-patches"
    apply = f"python3 patches/apply.py {verl_dir.parent}"
    if series is None or not Path(series).is_file():
        if marker.is_file():
            return CheckResult(
                "patches",
                WARN,
                f"{marker} exists, but this verlfit's series was not found to compare",
                "set VERLFIT_PATCHES_DIR to the folder holding patches/verl-0.4.1/series",
            )
        return CheckResult(
            "patches",
            WARN,
            f"{verl_dir} has no {marker.name} and no patch series was found to compare",
            "set VERLFIT_PATCHES_DIR, then run patches/apply.py on the installed verl",
        )
    expected = _read_series(Path(series))
    if not marker.is_file():
        return CheckResult(
            "patches",
            FAIL,
            f"the installed verl ({verl_dir}) is not patched: no {marker.name} (verl 0.4.1 stock fails on pre-Ampere "
            "GPUs and with HF rollout)",
            apply,
        )
    applied = _read_marker(Path(series), verl_dir)
    want, have = [n for _, n in expected], [n for _, n in applied]
    if want != have:
        missing = [n for n in want if n not in have]
        extra = [n for n in have if n not in want]
        detail = (
            "; ".join(
                part
                for part in (
                    f"missing {', '.join(missing)}" if missing else "",
                    f"not in this series {', '.join(extra)}" if extra else "",
                )
                if part
            )
            or "in another order"
        )
        return CheckResult(
            "patches",
            FAIL,
            f"the installed verl carries another patch series than {series}: {detail}",
            "reinstall verl 0.4.1 and run patches/apply.py on it (or rebuild the image)",
        )
    changed = [n for (d1, n), (d2, _) in zip(expected, applied) if d1 and d1 != d2]
    if changed:
        return CheckResult(
            "patches",
            WARN,
            f"the installed verl has this series' patches, but {', '.join(changed)} changed since they were applied",
            "reinstall verl 0.4.1 and re-apply the series (or rebuild the image)",
        )
    return CheckResult(
        "patches",
        PASS,
        f"{len(applied)} patches of {Path(series).parent.name} applied to {verl_dir} "
        f"({applied[0][1][:4]}..{applied[-1][1][:4]})"
        if applied
        else f"the series at {series} is empty",
    )
