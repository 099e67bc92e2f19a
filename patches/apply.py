#!/usr/bin/env python3
"""Apply verlfit's verl patch series to a verl tree, check it, or report its status.

The one tool every consumer uses (Dockerfiles, tests, the device). Standard library only; needs GNU patch.

TARGET is a directory that contains the ``verl/`` package: a verl git checkout, an unpacked sdist, or a
site-packages directory. The ``verl`` package directory itself is accepted too (its parent is used).

How it works: every patch of the series is first applied, in order, to a scratch copy of the files the
series touches (each one dry-run before it is applied there), so the target is only changed when the whole
series is known to apply cleanly. Patches are applied with ``patch -p1 --forward --fuzz=0 --batch``; hunks may
move (offsets) but never apply with fuzz. ``git apply`` is never used: inside another git work tree it skips
every file and still exits 0. After a successful apply, ``verl/.verlfit-patches`` records the series (sha256
and name of each patch) so ``verlfit doctor`` and ``--status`` can tell the installed verl is patched.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

EXIT_OK = 0
EXIT_FAILS = 1
EXIT_USAGE = 2
EXIT_ALREADY_APPLIED = 3
EXIT_PARTIAL = 4
EXIT_NOT_APPLIED = 5
EXIT_MARKER = 6

MARKER_NAME = ".verlfit-patches"
DEFAULT_SERIES = Path(__file__).resolve().parent / "verl-0.4.1" / "series"

EPILOG = """\
modes:
  (default)   apply the series; refused without changes when it is already (or partly) applied
  --check     change nothing; print for each patch "applies", "already applied" or "fails at hunk N"
  --status    change nothing; exit 0 only when the whole series is applied and the marker matches it

exit codes:
  0  apply: series applied | --check: the series would apply | --status: fully applied, marker matches
  1  a patch does not apply cleanly (failing hunk, missing file, or it would need fuzz); nothing changed
  2  usage error: TARGET has no verl/ package, series or patch file missing, GNU patch not found
  3  the whole series is already applied; nothing changed (apply refuses to apply it twice)
  4  part of the series is applied and part is not; nothing changed
  5  --status: the series is not applied
  6  --status: the patches are applied but verl/.verlfit-patches is missing or lists another series

examples:
  python3 patches/apply.py /usr/local/lib/python3.10/dist-packages
  python3 patches/apply.py --check .venv/lib/python3.11/site-packages
  python3 patches/apply.py --status "$(python3 -c 'import verl, os; print(os.path.dirname(verl.__file__))')"
"""


class UsageError(Exception):
    """Bad arguments or environment (exit 2)."""


@dataclass
class Patch:
    name: str
    path: Path
    sha256: str
    files: List[str]  # paths relative to TARGET after -p1, in order of appearance


@dataclass
class Result:
    """Outcome of one patch invocation."""

    ok: bool
    output: str
    hunk: Optional[str] = None  # human description of the first failing hunk
    reason: Optional[str] = None  # e.g. "previously applied"


@dataclass
class TreeState:
    """Where TARGET stands relative to the series."""

    applied_count: Optional[int]  # m: TARGET == pristine + series[:m]; None: matches no prefix
    per_patch: List[str] = field(default_factory=list)  # "applies" / "already applied" / "fails at hunk N ..."
    failure: Optional[Tuple[Patch, Result]] = None


# ----------------------------------------------------------------------------------------------------------
# series and patch files


def read_series(series_path: Path) -> List[Patch]:
    """Read a quilt-style series file: one patch file name per line, '#' comments and blank lines ignored."""
    if not series_path.is_file():
        raise UsageError(f"series file not found: {series_path}")
    patches = []
    for lineno, raw in enumerate(series_path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name = line.split()[0]
        path = series_path.parent / name
        if not path.is_file():
            raise UsageError(f"{series_path}:{lineno}: patch file not found: {path}")
        data = path.read_bytes()
        files = patched_files(data.decode("utf-8", errors="replace"))
        if not files:
            raise UsageError(f"{path}: no file headers (---/+++) found: not a unified diff")
        patches.append(Patch(name=name, path=path.resolve(), sha256=hashlib.sha256(data).hexdigest(), files=files))
    if not patches:
        raise UsageError(f"series file lists no patches: {series_path}")
    return patches


def _strip1(header_path: str) -> Optional[str]:
    header_path = header_path.split("\t", 1)[0].strip()
    if header_path == "/dev/null":
        return None
    parts = header_path.split("/", 1)
    return parts[1] if len(parts) == 2 else None


def patched_files(text: str) -> List[str]:
    """Paths (after -p1) named by the ---/+++ headers of a unified diff."""
    files: List[str] = []
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.startswith("--- ") and lines[i + 1].startswith("+++ "):
            for candidate in (_strip1(line[4:]), _strip1(lines[i + 1][4:])):
                if candidate and candidate not in files:
                    files.append(candidate)
    return files


# ----------------------------------------------------------------------------------------------------------
# running GNU patch


def find_gnu_patch() -> str:
    exe = shutil.which("patch")
    if exe is None:
        raise UsageError("GNU patch not found on PATH: install it (Debian/Ubuntu: apt-get install -y patch)")
    try:
        version = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False).stdout
    except OSError as exc:
        raise UsageError(f"cannot run {exe}: {exc}") from exc
    if "GNU patch" not in version:
        raise UsageError(f"{exe} is not GNU patch (needed for --forward/--fuzz/--batch semantics): {version.strip()[:80]!r}")
    return exe


_HUNK_FAILED = re.compile(r"Hunk #(\d+) FAILED at (\d+)")
_HUNK_FUZZ = re.compile(r"Hunk #(\d+) succeeded at (\d+) with fuzz (\d+)")
_FILE_LINE = re.compile(r"^(?:checking|patching) file (.+)$")


_WOULD_CREATE = re.compile(r"would create the file (.+?),\s*which already exists", re.S)
_NO_FILE = re.compile(r"can't find file to patch at input line (\d+)")


def describe_failure(output: str) -> Tuple[str, Optional[str]]:
    """(hunk description, reason) for the first problem in patch's output."""
    current_file = None
    for line in output.splitlines():
        m = _FILE_LINE.match(line.strip())
        if m:
            current_file = m.group(1).strip().strip("'\"")
            continue
        where = f" of {current_file}" if current_file else ""
        m = _HUNK_FAILED.search(line)
        if m:
            return f"hunk {m.group(1)}{where} (FAILED at line {m.group(2)})", None
        m = _HUNK_FUZZ.search(line)
        if m:
            return f"hunk {m.group(1)}{where} (needs fuzz {m.group(3)}; fuzz is refused)", None
        if "Reversed (or previously applied) patch detected" in line:
            return f"hunk 1{where} (its changes are already there)", "previously applied"
        if "malformed patch" in line or "Only garbage was found" in line:
            return f"hunk ? (malformed patch: {line.strip()})", None
        if "would create the file" in line:
            break  # message spans two lines; handled below
        if "can't find file to patch" in line:
            break
    m = _WOULD_CREATE.search(output)
    if m:
        path = " ".join(m.group(1).split())
        return f"hunk 1 of {path} (the file it creates already exists: left over from an earlier apply? reinstall verl cleanly or remove it)", "previously applied"
    m = _NO_FILE.search(output)
    if m:
        headers = re.findall(r"^\|\+\+\+ (\S+)", output, re.M)
        path = _strip1(headers[-1]) if headers else None
        return f"hunk 1 of {path or '?'} (file to patch not found: is TARGET the directory that contains verl/?)", None
    last = output.strip().splitlines()[-1] if output.strip() else "no output"
    return f"hunk ? ({last})", None


def run_patch(exe: str, patch: Patch, directory: Path, *, reverse: bool = False, dry_run: bool = False) -> Result:
    """Run GNU patch for one patch file in ``directory``; never applies with fuzz."""
    cmd = [exe, "-p1", "--forward", "--fuzz=0", "--batch", "--no-backup-if-mismatch", "--quoting-style=literal", "-d", str(directory), "-i", str(patch.path)]
    if reverse:
        cmd.insert(1, "--reverse")
    if dry_run:
        cmd.append("--dry-run")
    env = dict(os.environ, LC_ALL="C", LANG="C")
    env.pop("POSIXLY_CORRECT", None)  # POSIX mode changes how patch picks file names
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    output = (proc.stdout or "") + (proc.stderr or "")
    if proc.returncode == 0 and not _HUNK_FUZZ.search(output):
        return Result(ok=True, output=output)
    hunk, reason = describe_failure(output)
    return Result(ok=False, output=output, hunk=hunk, reason=reason)


def step(exe: str, patch: Patch, directory: Path, *, reverse: bool = False) -> Result:
    """Dry-run one patch in ``directory``, then apply it there if the dry run is clean."""
    result = run_patch(exe, patch, directory, reverse=reverse, dry_run=True)
    if not result.ok:
        return result
    applied = run_patch(exe, patch, directory, reverse=reverse)
    if not applied.ok:  # should not happen after a clean dry run
        return applied
    return result


# ----------------------------------------------------------------------------------------------------------
# state of a tree


def scratch_copy(target: Path, patches: Sequence[Patch], scratch: Path) -> None:
    """Copy the files the series touches from ``target`` into an empty ``scratch`` directory."""
    for rel in sorted({f for p in patches for f in p.files}):
        src = target / rel
        if src.is_file():
            dst = scratch / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def _hypothesis(exe: str, target: Path, patches: Sequence[Patch], m: int) -> Tuple[bool, Optional[Tuple[Patch, Result]]]:
    """Is ``target`` exactly pristine + patches[:m]? Checked on scratch copies only.

    patches[:m] must reverse-apply (last first), and patches[m:] must forward-apply in order.
    """
    with tempfile.TemporaryDirectory(prefix="verlfit-rev-") as tmp:
        scratch = Path(tmp)
        scratch_copy(target, patches, scratch)
        for patch in reversed(patches[:m]):
            result = step(exe, patch, scratch, reverse=True)
            if not result.ok:
                return False, (patch, result)
    with tempfile.TemporaryDirectory(prefix="verlfit-fwd-") as tmp:
        scratch = Path(tmp)
        scratch_copy(target, patches, scratch)
        # forward-apply the applied prefix is unnecessary: scratch already holds it
        for patch in patches[m:]:
            result = step(exe, patch, scratch)
            if not result.ok:
                return False, (patch, result)
    return True, None


def tree_state(exe: str, target: Path, patches: Sequence[Patch]) -> TreeState:
    """Find m such that TARGET == pristine verl + the first m patches; report per patch."""
    n = len(patches)
    first_failure = None
    for m in [0, n] + list(range(n - 1, 0, -1)):
        ok, failure = _hypothesis(exe, target, patches, m)
        if ok:
            per = ["already applied"] * m + ["applies"] * (n - m)
            return TreeState(applied_count=m, per_patch=per)
        if m == 0:
            first_failure = failure
    # No prefix explains the tree: report the forward pass from the current state.
    assert first_failure is not None
    bad_patch, bad_result = first_failure
    per = []
    for patch in patches:
        if patch is bad_patch:
            per.append(f"fails at {bad_result.hunk}")
        elif per and per[-1].startswith(("fails", "not checked")):
            per.append("not checked (an earlier patch fails)")
        else:
            per.append("applies")
    return TreeState(applied_count=None, per_patch=per, failure=first_failure)


# ----------------------------------------------------------------------------------------------------------
# marker


def marker_text(series_path: Path, patches: Sequence[Patch]) -> str:
    lines = [
        "# verl patch series applied by verlfit's patches/apply.py; do not edit.",
        f"# series: {series_path.parent.name}",
        "# format: sha256  patch-name (sha256sum style), in application order",
    ]
    lines += [f"{p.sha256}  {p.name}" for p in patches]
    return "\n".join(lines) + "\n"


def read_marker(target: Path) -> Optional[List[Tuple[str, str]]]:
    path = target / "verl" / MARKER_NAME
    if not path.is_file():
        return None
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        digest, _, name = line.partition("  ")
        entries.append((digest.strip(), name.strip()))
    return entries


# ----------------------------------------------------------------------------------------------------------
# target


def resolve_target(raw: str) -> Path:
    path = Path(raw).expanduser()
    if not path.is_dir():
        raise UsageError(f"TARGET is not a directory: {raw}")
    path = path.resolve()
    if (path / "verl" / "__init__.py").is_file():
        return path
    if path.name == "verl" and (path / "__init__.py").is_file():
        return path.parent
    raise UsageError(f"TARGET has no verl/ package: {path} (give the directory that contains verl/, e.g. site-packages)")


# ----------------------------------------------------------------------------------------------------------
# commands


def _print_states(patches: Sequence[Patch], states: Sequence[str]) -> None:
    width = max(len(p.name) for p in patches)
    for patch, state in zip(patches, states):
        print(f"  {patch.name:<{width}}  {state}")


def cmd_check(exe: str, target: Path, series: Path, patches: Sequence[Patch]) -> int:
    state = tree_state(exe, target, patches)
    print(f"checking {len(patches)} patches of {series} against {target} (nothing is changed)")
    _print_states(patches, state.per_patch)
    if state.applied_count is None:
        patch, result = state.failure
        print(f"result: {patch.name} fails at {result.hunk}", file=sys.stderr)
        return EXIT_FAILS
    if state.applied_count == 0:
        print("result: the series applies cleanly")
        return EXIT_OK
    if state.applied_count == len(patches):
        print("result: the series is already applied")
        return EXIT_ALREADY_APPLIED
    print(f"result: partly applied ({state.applied_count} of {len(patches)} patches)")
    return EXIT_PARTIAL


def cmd_status(exe: str, target: Path, series: Path, patches: Sequence[Patch]) -> int:
    state = tree_state(exe, target, patches)
    marker = read_marker(target)
    expected = [(p.sha256, p.name) for p in patches]
    print(f"verl at {target / 'verl'}; series {series}")
    _print_states(patches, state.per_patch)
    if state.applied_count is None:
        patch, result = state.failure
        print(f"status: verl matches neither the pristine nor the patched tree ({patch.name} fails at {result.hunk})")
        return EXIT_FAILS
    if state.applied_count == 0:
        print("status: not patched")
        return EXIT_NOT_APPLIED
    if state.applied_count < len(patches):
        print(f"status: partly patched ({state.applied_count} of {len(patches)} patches)")
        return EXIT_PARTIAL
    if marker is None:
        print(f"status: patches present but verl/{MARKER_NAME} is missing")
        return EXIT_MARKER
    if marker != expected:
        print(f"status: patches present but verl/{MARKER_NAME} lists another series: {[n for _, n in marker]}")
        return EXIT_MARKER
    print("status: fully patched")
    return EXIT_OK


def cmd_apply(exe: str, target: Path, series: Path, patches: Sequence[Patch]) -> int:
    state = tree_state(exe, target, patches)
    if state.applied_count is None:
        patch, result = state.failure
        print(f"error: {patch.name} does not apply cleanly to {target}: fails at {result.hunk}; nothing was changed", file=sys.stderr)
        _print_states(patches, state.per_patch)
        print("--- output of patch ---\n" + result.output.rstrip(), file=sys.stderr)
        return EXIT_FAILS
    if state.applied_count == len(patches):
        print(f"refusing to apply: the series {series.parent.name} is already applied to {target}; nothing was changed", file=sys.stderr)
        return EXIT_ALREADY_APPLIED
    if state.applied_count > 0:
        print(f"refusing to apply: {state.applied_count} of {len(patches)} patches are already applied to {target}; reinstall a pristine verl first; nothing was changed", file=sys.stderr)
        _print_states(patches, state.per_patch)
        return EXIT_PARTIAL

    done: List[Patch] = []
    for patch in patches:
        result = step(exe, patch, target)
        if not result.ok:  # the scratch run said it applies; undo what we did and stop
            for undo in reversed(done):
                run_patch(exe, undo, target, reverse=True)
            print(f"error: {patch.name} does not apply cleanly to {target}: fails at {result.hunk}; earlier patches were reverted", file=sys.stderr)
            print("--- output of patch ---\n" + result.output.rstrip(), file=sys.stderr)
            return EXIT_FAILS
        done.append(patch)
        print(f"applied {patch.name}")
    marker = target / "verl" / MARKER_NAME
    marker.write_text(marker_text(series, patches), encoding="utf-8")
    print(f"applied {len(patches)} patches of {series.parent.name} to {target}; marker {marker}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="apply.py",
        description="Apply verlfit's verl patch series (GNU patch -p1 --forward --fuzz=0 --batch), check it, or report its status.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("target", metavar="TARGET", help="directory containing the verl/ package (site-packages, sdist or git checkout), or verl/ itself")
    parser.add_argument("--series", type=Path, default=DEFAULT_SERIES, help=f"series file; patch names are relative to its directory (default: {DEFAULT_SERIES})")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="change nothing; report per patch: applies / already applied / fails at hunk N")
    mode.add_argument("--status", action="store_true", help="change nothing; exit 0 only when the series is fully applied and the marker matches")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        exe = find_gnu_patch()
        target = resolve_target(args.target)
        series = args.series.expanduser().resolve()
        patches = read_series(series)
        if args.check:
            return cmd_check(exe, target, series, patches)
        if args.status:
            return cmd_status(exe, target, series, patches)
        return cmd_apply(exe, target, series, patches)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
