"""patches/apply.py against copies of the PyPI verl 0.4.1 tree: clean apply, refusals, --check, --status."""

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from verl_patch_helpers import APPLY, SERIES, copy_verl, partial_series, run_apply, series_names, tree_digest

# CI (.ci/run) installs GNU patch, so there a missing patch fails instead of skipping
pytestmark = pytest.mark.needs_gnu_patch


def test_series_lists_every_patch_once_and_each_has_a_changelog_header():
    names = series_names()
    on_disk = sorted(p.name for p in SERIES.parent.glob("*.patch"))
    assert sorted(names) == on_disk and len(set(names)) == len(names)
    assert names == sorted(names), "series order follows the numbering"
    for name in names:
        text = (SERIES.parent / name).read_text()
        header = text.split("\n--- ", 1)[0].split("\ndiff --git ", 1)[0]
        assert header.startswith(f"verlfit {name[:4]}: "), f"{name}: header must start with 'verlfit NNNN: <what>'"
        for section in ("What", "Why", "Upstream"):
            assert re.search(rf"^{section}\b", header, re.M), f"{name}: header lacks a '{section}' paragraph"
        assert "verl 0.4.1" in header
        # -p1 paths relative to the directory that contains verl/
        for path in re.findall(r"^(?:---|\+\+\+) (\S+)", text, re.M):
            assert path == "/dev/null" or re.match(r"^[ab]/verl/", path), f"{name}: unexpected path {path}"


def test_series_applies_cleanly_and_writes_marker(pristine_root):
    proc = run_apply(pristine_root, check_rc=0)
    for name in series_names():
        assert f"applied {name}" in proc.stdout
    marker = (pristine_root / "verl" / ".verlfit-patches").read_text().splitlines()
    entries = [line.split("  ") for line in marker if line and not line.startswith("#")]
    expected = [[hashlib.sha256((SERIES.parent / n).read_bytes()).hexdigest(), n] for n in series_names()]
    assert entries == expected
    assert not list(pristine_root.rglob("*.orig")) and not list(pristine_root.rglob("*.rej"))
    run_apply("--status", pristine_root, check_rc=0)


def test_applied_tree_is_what_the_patches_say(pristine_root):
    """Spot checks that the patched sources carry each concern (the behaviour is tested in test_patched_verl)."""
    run_apply(pristine_root, check_rc=0)
    verl = pristine_root / "verl"
    assert (verl / "utils" / "bert_padding_fallback.py").is_file()
    assert (verl / "utils" / "autocast_config.py").is_file()
    assert (verl / "utils" / "gpu_memory_limit.py").is_file()
    rollout = (verl / "workers" / "rollout" / "hf_rollout.py").read_text()
    assert "position_ids=position_ids," not in rollout
    assert '"use_model_defaults": False' in rollout


def test_second_apply_is_refused_and_changes_nothing(pristine_root):
    run_apply(pristine_root, check_rc=0)
    before = tree_digest(pristine_root)
    proc = run_apply(pristine_root, check_rc=3)
    assert "already applied" in proc.stderr and "nothing was changed" in proc.stderr
    assert tree_digest(pristine_root) == before


def test_check_changes_nothing_and_reports_each_patch(pristine_root):
    before = tree_digest(pristine_root)
    proc = run_apply("--check", pristine_root, check_rc=0)
    assert tree_digest(pristine_root) == before
    for name in series_names():
        assert re.search(rf"{re.escape(name)}\s+applies$", proc.stdout, re.M)

    run_apply(pristine_root, check_rc=0)
    patched = tree_digest(pristine_root)
    proc = run_apply("--check", pristine_root, check_rc=3)
    assert tree_digest(pristine_root) == patched
    for name in series_names():
        assert re.search(rf"{re.escape(name)}\s+already applied$", proc.stdout, re.M)


def test_partly_applied_tree_is_refused(pristine_root, tmp_path):
    run_apply("--series", partial_series(tmp_path / "part", 2), pristine_root, check_rc=0)
    before = tree_digest(pristine_root)
    proc = run_apply("--check", pristine_root, check_rc=4)
    names = series_names()
    assert re.search(rf"{re.escape(names[1])}\s+already applied$", proc.stdout, re.M)
    assert re.search(rf"{re.escape(names[2])}\s+applies$", proc.stdout, re.M)
    assert run_apply(pristine_root).returncode == 4
    assert run_apply("--status", pristine_root).returncode == 4
    assert tree_digest(pristine_root) == before


def _series_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "series_copy"
    shutil.copytree(SERIES.parent, dest)
    return dest


def test_corrupted_patch_names_patch_and_hunk_and_changes_nothing(pristine_root, tmp_path):
    series_dir = _series_copy(tmp_path)
    name = "0004-hf-rollout-correctness.patch"
    path = series_dir / name
    text = path.read_text()
    # break a context line in the middle of hf_rollout.py's 4th hunk
    old = "\n         # make config according to generate mode\n"
    assert text.count(old) == 1
    path.write_text(text.replace(old, "\n         # make config according to generate mode (corrupted)\n"))
    before = tree_digest(pristine_root)

    proc = run_apply("--series", series_dir / "series", pristine_root, check_rc=1)
    assert name in proc.stderr
    assert "hunk 4 of verl/workers/rollout/hf_rollout.py" in proc.stderr
    assert "nothing was changed" in proc.stderr
    assert tree_digest(pristine_root) == before, "earlier patches must not be left applied"

    proc = run_apply("--check", "--series", series_dir / "series", pristine_root, check_rc=1)
    assert re.search(rf"{re.escape(name)}\s+fails at hunk 4 of verl/workers/rollout/hf_rollout.py", proc.stdout)
    assert tree_digest(pristine_root) == before


def test_fuzz_is_refused_even_where_plain_patch_would_accept_it(pristine_root, tmp_path):
    series_dir = _series_copy(tmp_path)
    name = "0005-gate-triton-cross-entropy.patch"
    path = series_dir / name
    lines = path.read_text().splitlines(keepends=True)
    first_hunk = next(i for i, line in enumerate(lines) if line.startswith("@@"))
    assert lines[first_hunk + 1].startswith(" ")
    lines[first_hunk + 1] = " # a first context line that is not in the file\n"
    path.write_text("".join(lines))
    target_file = pristine_root / "verl" / "utils" / "torch_functional.py"
    # plain `patch` (default fuzz 2) would take it with fuzz: the refusal is apply.py's doing
    plain = subprocess.run(
        ["patch", "-p1", "--dry-run", "--batch", "-d", str(pristine_root), "-i", str(path)],
        capture_output=True,
        text=True,
    )
    assert plain.returncode == 0 and "fuzz" in plain.stdout
    before = target_file.read_bytes()
    proc = run_apply("--series", series_dir / "series", pristine_root, check_rc=1)
    assert name in proc.stderr and "hunk 1 of verl/utils/torch_functional.py" in proc.stderr
    assert target_file.read_bytes() == before


def test_accepts_the_verl_package_dir_and_works_inside_a_git_work_tree(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    root = copy_verl(repo / "vendor")
    run_apply(root / "verl", check_rc=0)  # the package dir itself is accepted
    run_apply("--status", root, check_rc=0)
    assert "position_ids=position_ids," not in (root / "verl" / "workers" / "rollout" / "hf_rollout.py").read_text()


def test_status_codes(pristine_root):
    proc = run_apply("--status", pristine_root, check_rc=5)
    assert "not patched" in proc.stdout
    run_apply(pristine_root, check_rc=0)
    run_apply("--status", pristine_root, check_rc=0)
    marker = pristine_root / "verl" / ".verlfit-patches"
    marker.write_text(marker.read_text().replace("0006-gpu-memory-limit.patch", "0006-other.patch"))
    assert run_apply("--status", pristine_root).returncode == 6
    marker.unlink()
    proc = run_apply("--status", pristine_root, check_rc=6)
    assert "missing" in proc.stdout


def test_usage_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = run_apply(tmp_path / "empty", check_rc=2)
    assert "no verl/ package" in proc.stderr
    run_apply(tmp_path / "does-not-exist", check_rc=2)
    root = copy_verl(tmp_path / "site")
    proc = run_apply("--series", tmp_path / "nope" / "series", root, check_rc=2)
    assert "series file not found" in proc.stderr
    help_text = subprocess.run(["python3", str(APPLY), "--help"], capture_output=True, text=True).stdout
    for code in range(7):
        assert re.search(rf"^  {code}  ", help_text, re.M), f"exit code {code} undocumented in --help"


def test_leftover_file_from_an_earlier_apply_is_named(pristine_root, tmp_path):
    """e.g. after `pip install --force-reinstall verl`: restored sources, but the files the series added remain."""
    other = copy_verl(tmp_path / "other")
    run_apply(other, check_rc=0)
    shutil.copy2(other / "verl" / "utils" / "bert_padding_fallback.py", pristine_root / "verl" / "utils")
    proc = run_apply(pristine_root, check_rc=1)
    assert (
        "0001-" in proc.stderr
        and "verl/utils/bert_padding_fallback.py" in proc.stderr
        and "already exists" in proc.stderr
    )


def test_missing_source_file_is_named(pristine_root):
    (pristine_root / "verl" / "utils" / "torch_functional.py").unlink()
    before = tree_digest(pristine_root)
    proc = run_apply(pristine_root, check_rc=1)
    assert "0005-" in proc.stderr and "verl/utils/torch_functional.py" in proc.stderr and "not found" in proc.stderr
    assert tree_digest(pristine_root) == before
