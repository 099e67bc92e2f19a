"""docker/*.sh outside Docker: each script's exact plan in dry-run mode (VERLFIT_DRY_RUN=1), and
the parts that can run for real on a scratch directory: wheel download and sha256 verification (file:// URLs), verl
fetch by commit (a local
git repository)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from image_helpers import REPO

DOCKER = REPO / "docker"
SHA = "0123456789abcdef" * 4


def run(script: str, *args: str, dry: bool = True, **env: str) -> subprocess.CompletedProcess:
    environment = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **env}
    if dry:
        environment["VERLFIT_DRY_RUN"] = "1"
    return subprocess.run([str(DOCKER / script), *args], env=environment, capture_output=True, text=True)


def plan(script: str, *args: str, **env: str) -> list[str]:
    result = run(script, *args, **env)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_a_ca_bundle_secret_is_trusted_by_pip_git_curl_and_apt(tmp_path):
    """What lib.sh exports for pip, git, curl and Python's ssl, and the option apt and apt-helper get; nothing without
    the secret."""
    bundle = tmp_path / "ca-bundle"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    shown = subprocess.run(
        [
            "bash",
            "-c",
            (
                f". {DOCKER}/lib.sh; echo $PIP_CERT $GIT_SSL_CAINFO $CURL_CA_BUNDLE $SSL_CERT_FILE $REQUESTS_CA_BUNDLE;"
                " echo ${APT_CA_OPTIONS[*]}"
            ),
        ],
        env={"PATH": os.environ["PATH"], "VERLFIT_CA_BUNDLE": str(bundle)},
        capture_output=True,
        text=True,
    )
    assert shown.stdout.splitlines() == [" ".join([str(bundle)] * 5), f"-o Acquire::https::CaInfo={bundle}"]
    shown = subprocess.run(
        ["bash", "-c", f". {DOCKER}/lib.sh; echo ${{PIP_CERT-unset}} ${{#APT_CA_OPTIONS[@]}}"],
        env={"PATH": os.environ["PATH"], "VERLFIT_CA_BUNDLE": str(tmp_path / "absent")},
        capture_output=True,
        text=True,
    )
    assert shown.stdout == "unset 0\n"


def test_install_python_from_the_index_and_from_wheels():
    assert plan("install-python.sh", PYTHON_VERSION="3.10", PIP_INDEX_URL="https://pypi.example/simple") == [
        "+ python3.10 -m venv /opt/venv",
        (
            "+ /opt/venv/bin/python -m pip install --no-input --disable-pip-version-check --no-deps"
            f" --only-binary=:all: --require-hashes --index-url https://pypi.example/simple -r {DOCKER}/python.lock"
        ),
    ]
    runtime = plan("install-python.sh", "/wheels/python", PYTHON_VERSION="3.10")
    # the folder's wheels, each with its sha256 (wheel-hashes.py folder), installed with --require-hashes
    assert runtime[:2] == [
        "+ python3.10 -m venv /opt/venv",
        f"+ /opt/venv/bin/python {DOCKER}/wheel-hashes.py folder /wheels/python",
    ]
    assert re.fullmatch(
        r"\+ /opt/venv/bin/python -m pip install --no-input --disable-pip-version-check --no-deps --no-index "
        r"--find-links /wheels/python --require-hashes -r /tmp/verlfit-wheels\.\w+\.txt",
        runtime[2],
    ), runtime[2]
    assert len(runtime) == 3


def test_download_locked_routes_cu118_locks_to_the_torch_index_only():
    lines = plan(
        "download-locked.sh",
        "/wheels/torch",
        str(DOCKER / "torch-cu118.lock"),
        str(DOCKER / "torch-deps.lock"),
        PIP_INDEX_URL="https://pypi.example/simple",
        TORCH_INDEX_URL="https://torch.example/whl/cu118",
    )
    prefix = (
        "+ /opt/venv/bin/python -m pip wheel --no-input --disable-pip-version-check --no-deps --no-build-isolation"
        " --only-binary=:all:"
    )
    assert lines == [
        "+ mkdir -p /wheels/torch",
        # each lock as pip reads it: its build-argument hashes filled in, a pin without a hash refused (wheel-hashes.py)
        (
            f"+ /opt/venv/bin/python {DOCKER}/wheel-hashes.py hashed {DOCKER}/torch-cu118.lock"
            " /wheels/torch/torch-cu118.hashes.lock"
        ),
        (
            f"{prefix} --require-hashes --index-url https://torch.example/whl/cu118 --wheel-dir /wheels/torch -r"
            " /wheels/torch/torch-cu118.hashes.lock"
        ),
        (
            f"+ /opt/venv/bin/python {DOCKER}/wheel-hashes.py hashed {DOCKER}/torch-deps.lock"
            " /wheels/torch/torch-deps.hashes.lock"
        ),
        (
            f"{prefix} --require-hashes --index-url https://pypi.example/simple --wheel-dir /wheels/torch -r"
            " /wheels/torch/torch-deps.hashes.lock"
        ),
    ]
    # every pip wheel of both images' locks goes through --require-hashes, on the hashed copy
    for lock in ("python.lock", "common.lock", "a10-extra.lock", "a10-cu118.lock"):
        lines = plan(
            "download-locked.sh",
            "/wheels",
            str(DOCKER / lock),
            PIP_INDEX_URL="https://p.example",
            TORCH_INDEX_URL="https://t.example",
        )
        pips = [line for line in lines if " pip " in line]
        assert len(pips) == 1 and "--require-hashes" in pips[0].split(), lines
        assert pips[0].endswith(f" -r /wheels/{lock.removesuffix('.lock')}.hashes.lock")
    wheelhouse = plan(
        "download-locked.sh",
        "--download",
        "/wheelhouse",
        str(DOCKER / "a10-cu118.lock"),
        TORCH_INDEX_URL="https://t.example",
    )
    assert wheelhouse[-2:] == [
        (
            "+ /opt/venv/bin/python -m pip download --no-input --disable-pip-version-check --no-deps"
            " --only-binary=:all: --require-hashes --index-url https://t.example --dest /wheelhouse -r"
            " /wheelhouse/a10-cu118.hashes.lock"
        ),
        f"+ /opt/venv/bin/python {DOCKER}/wheel-hashes.py index /wheelhouse",
    ]


def test_download_locked_needs_the_index_it_uses():
    result = run(
        "download-locked.sh", "/wheels/a10", str(DOCKER / "a10-cu118.lock"), PIP_INDEX_URL="https://pypi.example/simple"
    )
    assert (result.returncode, result.stderr) == (
        1,
        "verlfit-build: error: TORCH_INDEX_URL is not set (a build arg of Dockerfile.p40/Dockerfile.a10)\n",
    )
    result = run("download-locked.sh", "/wheels", "/nonexistent.lock", PIP_INDEX_URL="x")
    assert (result.returncode, result.stderr) == (1, "verlfit-build: error: lock file /nonexistent.lock not found\n")


def test_install_wheels_and_projects_use_no_index():
    lines = plan("install-wheels.sh", "/wheels/torch", "/wheels/a10")
    assert lines[:2] == [
        f"+ /opt/venv/bin/python {DOCKER}/wheel-hashes.py folder /wheels/torch",
        f"+ /opt/venv/bin/python {DOCKER}/wheel-hashes.py folder /wheels/a10",
    ]
    assert re.fullmatch(
        r"\+ /opt/venv/bin/python -m pip install --no-input --disable-pip-version-check --no-deps --no-index "
        r"--find-links /wheels/torch --find-links /wheels/a10 --require-hashes -r /tmp/verlfit-wheels\.\w+\.txt",
        lines[2],
    ), lines[2]
    assert len(lines) == 3
    assert plan("install-project.sh", "--editable", "/opt/verl") == [
        (
            "+ /opt/venv/bin/python -m pip install --no-input --disable-pip-version-check --no-deps --no-index"
            " --no-build-isolation --editable /opt/verl"
        ),
    ]
    assert plan("install-project.sh", "/opt/verlfit") == [
        (
            "+ /opt/venv/bin/python -m pip install --no-input --disable-pip-version-check --no-deps --no-index"
            " --no-build-isolation /opt/verlfit"
        ),
    ]


def test_install_wheels_refuses_an_empty_folder(tmp_path):
    result = run("install-wheels.sh", str(tmp_path), dry=False, VENV=str(tmp_path / "venv"))
    assert (result.returncode, result.stderr) == (1, f"verlfit-build: error: no wheels in {tmp_path}\n")


def test_fetch_wheel_plan_decodes_the_file_name():
    url = "https://github.com/vllm-project/vllm/releases/download/v0.8.5/vllm-0.8.5%2Bcu118-cp38-abi3-manylinux1_x86_64.whl"
    assert plan("fetch-wheel.sh", "/wheels/a10", url, SHA) == [
        "+ mkdir -p /wheels/a10",
        (
            "+ curl --fail --silent --show-error --location --retry 3 --netrc-optional --output"
            f" /wheels/a10/vllm-0.8.5+cu118-cp38-abi3-manylinux1_x86_64.whl {url}"
        ),
        f"+ verify sha256 {SHA} /wheels/a10/vllm-0.8.5+cu118-cp38-abi3-manylinux1_x86_64.whl",
    ]


@pytest.mark.parametrize(
    "sha256, message",
    [
        (
            "",
            "no sha256 given for x-1.0-py3-none-any.whl; pass its sha256 as a build arg (docs/images.md, 'A10 wheels')",
        ),
        ("ABC", "sha256 for x-1.0-py3-none-any.whl must be 64 lowercase hex digits, got 'ABC'"),
    ],
)
def test_fetch_wheel_requires_a_sha256(sha256, message):
    result = run("fetch-wheel.sh", "/wheels", "https://example.com/x-1.0-py3-none-any.whl", sha256)
    assert (result.returncode, result.stdout, result.stderr) == (1, "", f"verlfit-build: error: {message}\n")


@pytest.mark.skipif(
    shutil.which("curl") is None and not os.environ.get("CI"),
    reason="needs curl (the build stage has it; .ci/run installs it)",
)
def test_fetch_wheel_verifies_what_it_downloaded(tmp_path):
    source = tmp_path / "vllm-0.8.5+cu118-cp38-abi3-manylinux1_x86_64.whl"
    source.write_bytes(b"not really a wheel")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    url = f"file://{tmp_path}/vllm-0.8.5%2Bcu118-cp38-abi3-manylinux1_x86_64.whl"
    result = run("fetch-wheel.sh", str(tmp_path / "out"), url, digest, dry=False)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / source.name).read_bytes() == b"not really a wheel"
    result = run("fetch-wheel.sh", str(tmp_path / "bad"), url, SHA, dry=False)
    assert result.returncode == 1
    assert (
        result.stderr
        == f"verlfit-build: error: sha256 mismatch for {source.name} from {url}: expected {SHA}, got {digest}\n"
    )
    assert list((tmp_path / "bad").iterdir()) == []


@pytest.fixture()
def verl_remote(tmp_path):
    """A local git repository with two commits, standing in for VERL_REPO."""
    remote = tmp_path / "verl.git"
    remote.mkdir()
    git = ["git", "-C", str(remote), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "--quiet"], check=True)
    (remote / "setup.py").write_text("# release\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "release"], check=True)
    release = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    (remote / "setup.py").write_text("# later\n")
    subprocess.run([*git, "commit", "--quiet", "-am", "later"], check=True)
    return remote, release


def test_install_verl_fetches_the_commit_by_hash(tmp_path, verl_remote):
    remote, release = verl_remote
    result = run(
        "install-verl.sh", "fetch", str(tmp_path / "verl"), dry=False, VERL_REPO=f"file://{remote}", VERL_COMMIT=release
    )
    assert result.returncode == 0, result.stderr
    head = subprocess.run(
        ["git", "-C", str(tmp_path / "verl"), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert head == release
    assert (tmp_path / "verl" / "setup.py").read_text() == "# release\n"


def test_install_verl_refuses_a_tag_or_short_hash():
    result = run(
        "install-verl.sh",
        "fetch",
        "/opt/verl",
        VERL_REPO="https://github.com/volcengine/verl.git",
        VERL_COMMIT="v0.4.1",
    )
    assert (result.returncode, result.stderr) == (
        1,
        "verlfit-build: error: VERL_COMMIT must be a full 40-digit commit hash, got 'v0.4.1'\n",
    )


def test_install_verl_plan():
    commit = "8d9e350ea58c7ad4b50dd14d9dcb50577242c55f"
    assert plan(
        "install-verl.sh", "fetch", "/opt/verl", VERL_REPO="https://git.example/verl.git", VERL_COMMIT=commit
    ) == [
        "+ git init --quiet /opt/verl",
        "+ git -C /opt/verl remote add origin https://git.example/verl.git",
        f"+ git -C /opt/verl fetch --quiet --depth 1 origin {commit}",
        f"+ git -C /opt/verl -c advice.detachedHead=false checkout --quiet {commit}",
    ]
    assert plan("install-verl.sh", "patch", "/opt/verl", PATCHES_DIR="/opt/verlfit/patches") == [
        "+ python3 /opt/verlfit/patches/apply.py /opt/verl",
    ]


def test_install_verl_patch_applies_the_series_to_a_verl_tree(tmp_path):
    """The patch step for real: verl 0.4.1's package (the PyPI wheel's verl/, identical to the tag's)
    copied to a scratch tree, patched by patches/apply.py as the build does, then --status passes."""
    import verl

    # verl as released: VERLFIT_PRISTINE_VERL inside the image (whose /opt/verl is patched; the test image exports the
    # commit's tree there), else the test venv's PyPI wheel. The copy keeps any .verlfit-patches marker, so a patched
    # tree is seen as one (issue 24: the copy dropped the marker and apply.py then failed on a patched tree).
    source = (
        Path(os.environ["VERLFIT_PRISTINE_VERL"]) / "verl"
        if os.environ.get("VERLFIT_PRISTINE_VERL")
        else Path(verl.__file__).parent
    )
    tree = tmp_path / "verl-checkout"
    shutil.copytree(source, tree / "verl", ignore=shutil.ignore_patterns("__pycache__"))
    assert not (tree / "verl" / ".verlfit-patches").exists(), (
        f"{source} is a patched verl: set VERLFIT_PRISTINE_VERL to verl as released"
    )
    environment = {"PATH": os.environ["PATH"], "PATCHES_DIR": str(REPO / "patches")}
    result = subprocess.run(
        [str(DOCKER / "install-verl.sh"), "patch", str(tree)], env=environment, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    status = subprocess.run(
        ["python3", str(REPO / "patches" / "apply.py"), "--status", str(tree)], capture_output=True, text=True
    )
    assert status.returncode == 0, status.stdout + status.stderr
