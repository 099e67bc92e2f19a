"""tests/bootstrap.sh, the test setup, run for real against a stub venv: its python logs each pip
command and answers nothing, while the probe of the torch index runs on the real interpreter against
a local index (http.server on the loopback) or a port nothing listens on."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from image_helpers import REPO

STUB = """#!/usr/bin/env bash
if [ "$1" = - ]; then exec {python} "$@"; fi
printf '%s\\n' "$*" >> {log}
"""


@pytest.fixture()
def checkout(tmp_path):
    """A scratch copy of what bootstrap.sh reads, and a venv whose python is the stub."""
    root = tmp_path / "checkout"
    (root / "tests").mkdir(parents=True)
    for name in ("tests/bootstrap.sh", "tests/requirements-ci.txt", "pyproject.toml"):
        shutil.copy(REPO / name, root / name)
    python = root / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(STUB.format(python=sys.executable, log=tmp_path / "pip.log"))
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return root


def bootstrap(checkout: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    environment = {key: value for key, value in os.environ.items() if key != "TORCH_INDEX_URL"}
    result = subprocess.run(["bash", "tests/bootstrap.sh"], cwd=checkout, capture_output=True, text=True,
                            env={**environment, "VENV": str(checkout / "venv"), **env})
    log = checkout.parent / "pip.log"
    return result, log.read_text().splitlines() if log.exists() else []


REST = ["-m pip install -q -r tests/requirements-ci.txt", "-m pip install -q --no-deps verl==0.4.1", "-m pip install -q --no-deps -e ."]


@pytest.fixture()
def cpu_index(tmp_path):
    """A simple index with a torch/ page, served on the loopback: its URL."""
    root = tmp_path / "index"
    (root / "whl" / "cpu" / "torch").mkdir(parents=True)
    (root / "whl" / "cpu" / "torch" / "index.html").write_text("<a href='torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl'>torch</a>")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
    server.shutdown()
    server.server_close()


def test_torch_comes_from_a_reachable_cpu_index_first(checkout, cpu_index):
    result, calls = bootstrap(checkout, TORCH_INDEX_URL=cpu_index)
    assert result.returncode == 0, result.stderr
    assert result.stderr == f"tests/bootstrap.sh: torch (torch==2.13.0) CPU build from {cpu_index}\n"
    assert calls == ["-m pip install -q --upgrade pip", f"-m pip install -q --no-deps --index-url {cpu_index} torch==2.13.0", *REST]
    assert (checkout / "venv" / ".verlfit-test-stamp").exists()


def test_an_unreachable_index_falls_back_to_pypi_and_says_so(checkout):
    # port 9 (discard) on the loopback: nothing listens, the probe fails at once
    result, calls = bootstrap(checkout, TORCH_INDEX_URL="http://127.0.0.1:9/whl/cpu")
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("tests/bootstrap.sh: http://127.0.0.1:9/whl/cpu did not answer (URLError: ")
    assert result.stderr.endswith("): torch (torch==2.13.0) from PyPI instead (on Linux x86_64 that can be the CUDA build; "
                                  "set TORCH_INDEX_URL to a reachable CPU index)\n")
    assert calls == ["-m pip install -q --upgrade pip", *REST]


def test_an_empty_index_setting_means_pypi_without_a_probe(checkout):
    result, calls = bootstrap(checkout, TORCH_INDEX_URL="")
    assert result.stderr == "tests/bootstrap.sh: torch (torch==2.13.0) from PyPI (TORCH_INDEX_URL is empty)\n"
    assert calls == ["-m pip install -q --upgrade pip", *REST]


def test_the_default_index_is_pytorchs_cpu_index():
    text = (REPO / "tests" / "bootstrap.sh").read_text()
    assert "torch_index=${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}\n" in text
    assert "timeout=5" in text  # the probe never holds the setup up for long
