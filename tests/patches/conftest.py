"""Fixtures for the verl 0.4.1 patch series tests (helpers live in verl_patch_helpers.py)."""

import concurrent.futures
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verl_patch_helpers import (
    BEFORE_CKPT,
    BEFORE_LORA,
    BEFORE_ROLLOUT_FIX,
    LORA_WRAP_ONLY,
    PROBE,
    copy_verl,
    partial_series,
    run_apply,
)


@pytest.fixture
def pristine_root(tmp_path):
    """A fresh copy of the installed (pristine) verl: tmp_path/site/verl."""
    return copy_verl(tmp_path / "site")


@pytest.fixture(scope="session")
def trees(tmp_path_factory):
    """Session copies of verl: 'patched' (whole series, via apply.py), 'partial' (0001-0003), 'pristine',
    'before_lora' (0001-0008), 'lora_wrap_only' (0001-0009) and 'before_ckpt' (0001-0011)."""
    base = tmp_path_factory.mktemp("verl_trees")
    patched = copy_verl(base / "patched")
    run_apply(patched, check_rc=0)
    partial = copy_verl(base / "partial")
    run_apply("--series", partial_series(base / "series_partial", BEFORE_ROLLOUT_FIX), partial, check_rc=0)
    pristine = copy_verl(base / "pristine")
    trees = {"patched": patched, "partial": partial, "pristine": pristine}
    for name, count in {
        "before_lora": BEFORE_LORA,
        "lora_wrap_only": LORA_WRAP_ONLY,
        "before_ckpt": BEFORE_CKPT,
    }.items():
        trees[name] = copy_verl(base / name)
        run_apply("--series", partial_series(base / f"series_{name}", count), trees[name], check_rc=0)
    return trees


@pytest.fixture(scope="session")
def fake_flash_attn(tmp_path_factory):
    """A directory with a fake flash_attn package whose Triton cross-entropy counts calls and raises."""
    root = tmp_path_factory.mktemp("fake_flash_attn")
    pkg = root / "flash_attn" / "ops" / "triton"
    pkg.mkdir(parents=True)
    for d in (root / "flash_attn", root / "flash_attn" / "ops", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "cross_entropy.py").write_text(
        "CALLS = 0\n\n\ndef cross_entropy_loss(logits, labels, inplace_backward=True):\n"
        "    global CALLS\n    CALLS += 1\n    raise RuntimeError('fake flash-attn Triton kernel called')\n"
    )
    return root


# (tree, probe, extra args) run once per session, concurrently.
PROBES = {
    ("patched", "imports"): (),
    ("pristine", "imports"): (),
    ("patched", "rollout"): (),
    ("partial", "rollout"): (),
    ("patched", "autocast"): (),
    ("patched", "wiring"): (),
    ("pristine", "wiring"): (),
    ("patched", "triton"): ("FAKE",),
    ("pristine", "triton"): ("FAKE",),
    ("patched", "lora"): (),
    ("before_lora", "lora"): (),
    ("lora_wrap_only", "lora"): (),
    ("patched", "checkpoint"): (),
    ("before_ckpt", "checkpoint"): (),
}


def _run_probe(root: Path, probe: str, args, timeout=300):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONDONTWRITEBYTECODE="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        CUDA_VISIBLE_DEVICES="",
    )
    proc = subprocess.run(
        [sys.executable, str(PROBE), probe, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=str(root),
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PROBE_RESULT ")]
    if proc.returncode != 0 or not lines:
        return {
            "_error": (
                f"probe {probe} on {root} exited"
                f" {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
            )
        }
    result = json.loads(lines[-1][len("PROBE_RESULT ") :])
    result["_stderr"] = proc.stderr[-2000:]
    return result


@pytest.fixture(scope="session")
def probe_results(trees, fake_flash_attn):
    """Run every probe of PROBES in parallel subprocesses; {(tree, probe): result dict}."""
    jobs = {}
    workers = max(2, min(len(PROBES), os.cpu_count() or 2))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        for (tree, probe), args in PROBES.items():
            args = tuple(str(fake_flash_attn) if a == "FAKE" else a for a in args)
            jobs[(tree, probe)] = pool.submit(_run_probe, trees[tree], probe, args)
        return {key: job.result() for key, job in jobs.items()}


@pytest.fixture
def probe(probe_results, trees):
    def get(tree, name):
        result = probe_results[(tree, name)]
        assert "_error" not in result, result["_error"]
        assert result["verl_file"].startswith(str(trees[tree])), (
            f"probe imported {result['verl_file']}, not the {tree} copy"
        )
        return result

    return get
