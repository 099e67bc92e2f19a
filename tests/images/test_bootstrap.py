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
# a venv's python, Python {version}: the probe of the torch index runs on the real interpreter,
# a version query is answered, every other call (pip) is logged
if [ "$1" = - ]; then exec {python} "$@"; fi
if [ "$1" = -c ]; then echo {version}; exit 0; fi
printf '%s\\n' "$*" >> {log}
"""

INTERPRETER = """#!{python}
# PYTHON for bootstrap.sh, Python {version}: answers a version query, logs the rest; `-m venv [--clear] DIR`
# (re)writes DIR/bin/python as a stub venv python of its own version
import stat, sys
from pathlib import Path
if sys.argv[1:2] == ["-c"]:
    print("{version}")
    sys.exit(0)
with open({log!r}, "a") as log:
    log.write(" ".join(["{name}", *sys.argv[1:]]) + "\\n")
if sys.argv[1:3] == ["-m", "venv"]:
    python = Path(sys.argv[-1]) / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text({stub!r})
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
"""


def write_venv_python(path: Path, version: str, log: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(STUB.format(python=sys.executable, log=log, version=version))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def write_interpreter(directory: Path, name: str, version: str, log: Path) -> Path:
    """A fake interpreter named ``name`` (python3.12 ...) in ``directory``: its path."""
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    stub = STUB.format(python=sys.executable, log=log, version=version)
    path.write_text(INTERPRETER.format(python=sys.executable, version=version, log=str(log), name=name, stub=stub))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.fixture()
def checkout(tmp_path):
    """A scratch copy of what bootstrap.sh reads, a venv whose python is the stub (Python 3.11.9) and
    PYTHON, a fake python3.11 of the same version, in bin/."""
    root = tmp_path / "checkout"
    (root / "tests").mkdir(parents=True)
    for name in ("tests/bootstrap.sh", "tests/requirements-ci.txt", "pyproject.toml"):
        shutil.copy(REPO / name, root / name)
    write_venv_python(root / "venv" / "bin" / "python", "3.11.9", tmp_path / "pip.log")
    write_interpreter(tmp_path / "bin", "python3.11", "3.11.9", tmp_path / "pip.log")
    return root


def bootstrap(checkout: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    environment = {key: value for key, value in os.environ.items() if key not in ("TORCH_INDEX_URL", "PYTHON")}
    environment["PATH"] = f"{checkout.parent / 'bin'}:{environment['PATH']}"
    log = checkout.parent / "pip.log"
    log.unlink(missing_ok=True)
    result = subprocess.run(
        ["bash", "tests/bootstrap.sh"],
        cwd=checkout,
        capture_output=True,
        text=True,
        env={**environment, "VENV": str(checkout / "venv"), "PYTHON": "python3.11", **env},
    )
    return result, log.read_text().splitlines() if log.exists() else []


REST = [
    "-m pip install -q -r tests/requirements-ci.txt",
    "-m pip install -q --no-deps verl==0.4.1",
    "-m pip install -q --no-deps -e .",
]


@pytest.fixture()
def cpu_index(tmp_path):
    """A simple index with a torch/ page, served on the loopback: its URL."""
    root = tmp_path / "index"
    (root / "whl" / "cpu" / "torch").mkdir(parents=True)
    (root / "whl" / "cpu" / "torch" / "index.html").write_text(
        "<a href='torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl'>torch</a>"
    )
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
    assert calls == [
        "-m pip install -q --upgrade pip",
        f"-m pip install -q --no-deps --index-url {cpu_index} torch==2.13.0",
        *REST,
    ]
    assert (checkout / "venv" / ".verlfit-test-stamp").exists()


def test_an_unreachable_index_falls_back_to_pypi_and_says_so(checkout):
    # port 9 (discard) on the loopback: nothing listens, the probe fails at once
    result, calls = bootstrap(checkout, TORCH_INDEX_URL="http://127.0.0.1:9/whl/cpu")
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("tests/bootstrap.sh: http://127.0.0.1:9/whl/cpu did not answer (URLError: ")
    assert result.stderr.endswith(
        "): torch (torch==2.13.0) from PyPI instead (on Linux x86_64 that can be the CUDA build; "
        "set TORCH_INDEX_URL to a reachable CPU index)\n"
    )
    assert calls == ["-m pip install -q --upgrade pip", *REST]


def test_an_empty_index_setting_means_pypi_without_a_probe(checkout):
    result, calls = bootstrap(checkout, TORCH_INDEX_URL="")
    assert result.stderr == "tests/bootstrap.sh: torch (torch==2.13.0) from PyPI (TORCH_INDEX_URL is empty)\n"
    assert calls == ["-m pip install -q --upgrade pip", *REST]


def test_the_default_index_is_pytorchs_cpu_index():
    text = (REPO / "tests" / "bootstrap.sh").read_text()
    assert "torch_index=${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}\n" in text
    assert "timeout=5" in text  # the probe never holds the setup up for long


def test_another_python_recreates_the_venv_and_says_so(checkout):
    # the README's `PYTHON=python3.12 make test` after a 3.11 .venv: the stamp alone used to match
    result, _ = bootstrap(checkout, TORCH_INDEX_URL="")
    assert result.returncode == 0, result.stderr
    stamp = checkout / "venv" / ".verlfit-test-stamp"
    assert stamp.read_text().endswith(" python 3.11.9\n")
    write_interpreter(checkout.parent / "bin", "python3.12", "3.12.7", checkout.parent / "pip.log")
    venv = checkout / "venv"
    result, calls = bootstrap(checkout, TORCH_INDEX_URL="", PYTHON="python3.12")
    assert result.returncode == 0, result.stderr
    assert (
        result.stderr.splitlines()[0]
        == f"tests/bootstrap.sh: {venv} has Python 3.11.9, PYTHON=python3.12 is 3.12.7: recreating {venv}"
    )
    assert calls == [f"python3.12 -m venv --clear {venv}", "-m pip install -q --upgrade pip", *REST]
    assert stamp.read_text().endswith(" python 3.12.7\n")
    assert (venv / "bin" / "python").read_text().count("echo 3.12.7") == 1  # the new venv's python is 3.12
    # and a second run with the same interpreter has nothing to do
    result, calls = bootstrap(checkout, TORCH_INDEX_URL="", PYTHON="python3.12")
    assert (result.returncode, result.stderr, calls) == (0, "", [])


def test_a_new_patch_release_reinstalls_into_the_same_venv(checkout):
    bootstrap(checkout, TORCH_INDEX_URL="")
    write_interpreter(checkout.parent / "bin", "python3.11", "3.11.10", checkout.parent / "pip.log")
    (checkout / "venv" / "bin" / "python").write_text(
        (checkout / "venv" / "bin" / "python").read_text().replace("3.11.9", "3.11.10")
    )
    result, calls = bootstrap(checkout, TORCH_INDEX_URL="")
    assert result.returncode == 0 and "recreating" not in result.stderr
    assert calls == ["-m pip install -q --upgrade pip", *REST]


def requires_python() -> str:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pytest's own dependency on 3.10
        import tomli as tomllib
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]


@pytest.mark.parametrize("version", ["3.9.18", "3.10.14", "3.11.9", "3.12.7", "3.13.1"])
def test_the_python_version_is_checked_against_requires_python_before_anything_is_installed(checkout, version):
    from packaging.specifiers import SpecifierSet

    shutil.rmtree(checkout / "venv")
    name = "python" + version.rsplit(".", 1)[0]
    write_interpreter(checkout.parent / "bin", name, version, checkout.parent / "pip.log")
    result, calls = bootstrap(checkout, TORCH_INDEX_URL="", PYTHON=name)
    if SpecifierSet(requires_python()).contains(version):
        assert result.returncode == 0, result.stderr
        assert calls == [f"{name} -m venv {checkout / 'venv'}", "-m pip install -q --upgrade pip", *REST]
    else:
        assert result.returncode == 2 and calls == [] and not (checkout / "venv").exists()
        assert (
            result.stderr == f"tests/bootstrap.sh: PYTHON={name} is Python {version}; verlfit needs 3.10, 3.11 or 3.12 "
            "(pyproject.toml: requires-python >=3.10,<3.13): set PYTHON to one, e.g. PYTHON=python3.12 make test\n"
        )


def test_a_missing_interpreter_is_named_with_the_fix(checkout):
    result, calls = bootstrap(checkout, TORCH_INDEX_URL="", PYTHON="python3.99")
    assert result.returncode == 2 and calls == []
    assert (
        result.stderr
        == "tests/bootstrap.sh: PYTHON=python3.99: no such command; install Python 3.10, 3.11 or 3.12 (with its venv"
        " module) or set PYTHON to one, e.g. PYTHON=python3.12 make test\n"
    )


def test_the_license_is_a_pep_639_string_and_the_build_takes_a_setuptools_that_reads_it():
    # the table form `license = { text = ... }` prints setuptools' deprecation banner on every install
    from packaging.requirements import Requirement

    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    build = [Requirement(text) for text in project["build-system"]["requires"]]
    pins = [
        Requirement(line)
        for line in (REPO / "tests" / "requirements-ci.txt").read_text().splitlines()
        if line.startswith("setuptools")
    ]
    for requirement in [*(r for r in build if r.name == "setuptools"), *pins]:
        assert not requirement.specifier.contains("76.1.0") and requirement.specifier.contains("77.0.0"), (
            requirement
        )  # PEP 639: setuptools 77
