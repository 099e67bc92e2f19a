"""docker/*.sh outside Docker: each script's exact plan in dry-run mode (VERLFIT_DRY_RUN=1), and
the parts that can run for real on a scratch directory: apt mirror substitution and restore (with a
fake apt-get), wheel download and sha256 verification (file:// URLs), verl fetch by commit (a local
git repository)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from image_helpers import REPO

DOCKER = REPO / "docker"
SHA = "0123456789abcdef" * 4
# an apt lock for the install-system.sh tests (docker/apt.lock's format) and its pins of each group
APT_LOCK = Path(__file__).parent / "apt-test.lock"
ALWAYS = ("ca-certificates=20240203~22.04.1 git=1:2.34.1-1ubuntu1.12 patch=2.7.6-7build2 python3=3.10.6-1~22.04.1 "
          "python3.10=3.10.12-1~22.04.10 python3.10-venv=3.10.12-1~22.04.10")


def simulated(*extra: str) -> str:
    """The pins install-system.sh passes when apt-get -s answers (the fake below): every package in C order."""
    pins = ALWAYS.split() + list(extra)
    return " ".join(sorted(pins, key=lambda pin: pin.encode()))


def run(script: str, *args: str, dry: bool = True, **env: str) -> subprocess.CompletedProcess:
    environment = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "APT_LOCK": str(APT_LOCK), **env}
    if dry:
        environment["VERLFIT_DRY_RUN"] = "1"
    return subprocess.run([str(DOCKER / script), *args], env=environment, capture_output=True, text=True)


def plan(script: str, *args: str, **env: str) -> list[str]:
    result = run(script, *args, **env)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_install_system_build_stage():
    assert plan("install-system.sh", "build", PYTHON_VERSION="3.10", APT_SOURCES_DIR="/nonexistent") == [
        "+ apt-get update",
        f"+ apt-get install -y --no-install-recommends {ALWAYS} curl=7.81.0-1ubuntu1.20",
        "+ find /var/lib/apt/lists -mindepth 1 -delete",
    ]


def test_install_system_runtime_pins_and_holds_cudnn():
    assert plan("install-system.sh", "cudnn", PYTHON_VERSION="3.10", CUDNN_VERSION="8.9.7.29-1+cuda11.8", APT_SOURCES_DIR="/nonexistent") == [
        "+ apt-get update",
        f"+ apt-get install -y --no-install-recommends {ALWAYS} libcudnn8=8.9.7.29-1+cuda11.8",
        "+ apt-mark hold libcudnn8",
        "+ find /var/lib/apt/lists -mindepth 1 -delete",
    ]


def test_install_system_triton_group_adds_a_compiler_and_headers():
    lines = plan("install-system.sh", "cudnn", "triton", "init", PYTHON_VERSION="3.10", CUDNN_VERSION="8.9.7.29-1+cuda11.8",
                 TORCH_CUDA_VERSION="11.8", APT_SOURCES_DIR="/nonexistent")
    assert lines[1] == (f"+ apt-get install -y --no-install-recommends {ALWAYS} libcudnn8=8.9.7.29-1+cuda11.8 gcc=4:11.2.0-1ubuntu1 "
                        "libc6-dev=2.35-0ubuntu3.8 python3.10-dev=3.10.12-1~22.04.10 cuda-driver-dev-11-8=11.8.89-1 tini=0.19.0-1")


def test_install_system_refuses_unknown_groups_and_missing_versions():
    result = run("install-system.sh", "gpu", PYTHON_VERSION="3.10")
    assert (result.returncode, result.stderr) == (1, "verlfit-build: error: unknown package group 'gpu' (build, cudnn, triton, init)\n")
    result = run("install-system.sh", "cudnn", PYTHON_VERSION="3.10")
    assert (result.returncode, result.stderr) == (1, "verlfit-build: error: CUDNN_VERSION is not set (a build arg of Dockerfile.p40/Dockerfile.a10)\n")


@pytest.fixture()
def apt_root(tmp_path):
    """A scratch /etc/apt with Ubuntu's and NVIDIA's sources, a scratch lists dir, and fake apt tools
    that record each call with the sources in effect at that moment."""
    sources = tmp_path / "etc-apt"
    (sources / "sources.list.d").mkdir(parents=True)
    (sources / "sources.list").write_text("deb http://archive.ubuntu.com/ubuntu/ jammy main\ndeb http://security.ubuntu.com/ubuntu/ jammy-security main\n")
    (sources / "sources.list.d" / "cuda-ubuntu2204-x86_64.list").write_text(
        "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/ /\n")
    lists = tmp_path / "lists"
    (lists / "partial").mkdir(parents=True)
    (lists / "archive.ubuntu.com_ubuntu_dists_jammy_InRelease").write_text("x")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt.log"
    for tool in ("apt-get", "apt-mark"):
        path = bin_dir / tool
        path.write_text(f'#!/bin/bash\necho "{tool} $*" >> {log}\ncat {sources}/sources.list {sources}/sources.list.d/*.list >> {log} 2>/dev/null; true\n')
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    # apt-get -s install: what apt would install, "Inst NAME (VERSION ...)" per package asked for plus FAKE_EXTRA
    # (a dependency); nothing is logged, as nothing changes
    (bin_dir / "apt-get").write_text(
        '#!/bin/bash\n'
        'if [ "$1" = -s ] || [ "$3" = -s ]; then\n'
        '  asked=false; for word in "$@" $FAKE_EXTRA; do\n'
        '    if $asked; then echo "Inst ${word%%=*} (9.9 Ubuntu:22.04/jammy [amd64])"; elif [ "$word" = --no-install-recommends ]; then asked=true; fi\n'
        '  done\n'
        '  exit 0\nfi\n'
        f'echo "apt-get $*" >> {log}\ncat {sources}/sources.list {sources}/sources.list.d/*.list >> {log} 2>/dev/null; true\n')
    # apt-cache madison: what NVIDIA's repository offers (FAKE_NO_CUDNN: a source without it, as when the
    # repository was not reached)
    path = bin_dir / "apt-cache"
    path.write_text('#!/bin/bash\n'
                    'if [ "$1" = show ]; then case " $FAKE_GONE " in *" $2 "*) exit 100;; esac; exit 0; fi\n'
                    '[ -n "$FAKE_NO_CUDNN" ] || echo " libcudnn8 | 8.9.7.29-1+cuda11.8 | https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64  Packages"\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return sources, lists, bin_dir, log


def test_install_system_uses_mirrors_for_one_run_and_restores_the_sources(apt_root):
    sources, lists, bin_dir, log = apt_root
    before = {path: path.read_text() for path in sources.rglob("*.list")}
    result = run("install-system.sh", "cudnn", dry=False, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON_VERSION="3.10",
                 CUDNN_VERSION="8.9.7.29-1+cuda11.8", APT_MIRROR="http://mirror.example/ubuntu/",
                 CUDA_APT_MIRROR="https://mirror.example/nvidia-cuda/ubuntu2204/x86_64", APT_SOURCES_DIR=str(sources), APT_LISTS_DIR=str(lists))
    assert result.returncode == 0, result.stderr
    mirrored = ("deb http://mirror.example/ubuntu/ jammy main\ndeb http://mirror.example/ubuntu/ jammy-security main\n"
                "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] https://mirror.example/nvidia-cuda/ubuntu2204/x86_64/ /\n")
    assert log.read_text() == (
        "apt-get update\n" + mirrored
        + f"apt-get install -y --no-install-recommends {simulated('libcudnn8=8.9.7.29-1+cuda11.8')}\n" + mirrored
        + "apt-mark hold libcudnn8\n" + mirrored
    )
    # no mirror left behind, no backup files, apt lists emptied
    assert {path: path.read_text() for path in sources.rglob("*.list")} == before
    assert sorted(path.name for path in sources.rglob("*")) == ["cuda-ubuntu2204-x86_64.list", "sources.list", "sources.list.d"]
    assert list(lists.iterdir()) == []


def test_install_system_restores_the_sources_when_apt_fails(apt_root):
    sources, lists, bin_dir, log = apt_root
    (bin_dir / "apt-get").write_text("#!/bin/bash\nexit 100\n")
    before = {path: path.read_text() for path in sources.rglob("*.list")}
    result = run("install-system.sh", "build", dry=False, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON_VERSION="3.10",
                 APT_MIRROR="http://mirror.example/ubuntu", APT_SOURCES_DIR=str(sources), APT_LISTS_DIR=str(lists))
    assert result.returncode == 1 and "verlfit-build: error: apt-get update failed" in result.stderr
    assert {path: path.read_text() for path in sources.rglob("*.list")} == before
    assert not list(sources.rglob("*.verlfit-orig"))


UBUNTU_LINES = "deb http://archive.ubuntu.com/ubuntu/ jammy main\ndeb http://security.ubuntu.com/ubuntu/ jammy-security main\n"


def test_install_system_build_stage_never_asks_nvidias_repository(apt_root):
    """The build stage installs nothing from NVIDIA's repository: its source line is set aside for the run
    (apt-get update then never contacts it) and put back afterwards."""
    sources, lists, bin_dir, log = apt_root
    before = {path: path.read_text() for path in sources.rglob("*.list")}
    result = run("install-system.sh", "build", dry=False, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON_VERSION="3.10",
                 APT_SOURCES_DIR=str(sources), APT_LISTS_DIR=str(lists))
    assert result.returncode == 0, result.stderr
    assert log.read_text() == (
        "apt-get update\n" + UBUNTU_LINES
        + f"apt-get install -y --no-install-recommends {simulated('curl=7.81.0-1ubuntu1.20')}\n" + UBUNTU_LINES)
    assert {path: path.read_text() for path in sources.rglob("*.list")} == before
    assert not list(sources.rglob("*.verlfit-orig"))


def test_install_system_without_cudnn_in_any_source_names_cuda_apt_mirror(apt_root):
    sources, lists, bin_dir, log = apt_root
    result = run("install-system.sh", "cudnn", dry=False, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON_VERSION="3.10",
                 CUDNN_VERSION="8.9.7.29-1+cuda11.8", APT_SOURCES_DIR=str(sources), APT_LISTS_DIR=str(lists), FAKE_NO_CUDNN="1")
    assert result.returncode == 1
    assert result.stderr == (
        "verlfit-build: error: no apt source offers libcudnn8=8.9.7.29-1+cuda11.8: it comes from NVIDIA's CUDA repository "
        "(https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64), which this build did not reach: "
        "set CUDA_APT_MIRROR=<a mirror of it> (make image-p40 CUDA_APT_MIRROR=...; docs/images.md, 'Restricted network')\n")
    assert "apt-get install" not in log.read_text()


def test_install_system_names_the_mirror_build_args_when_apt_get_update_fails(apt_root):
    sources, lists, bin_dir, log = apt_root
    (bin_dir / "apt-get").write_text("#!/bin/bash\necho 'E: Failed to fetch https://developer.download.nvidia.com/...' >&2\nexit 100\n")
    result = run("install-system.sh", "cudnn", dry=False, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON_VERSION="3.10",
                 CUDNN_VERSION="8.9.7.29-1+cuda11.8", APT_SOURCES_DIR=str(sources), APT_LISTS_DIR=str(lists))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "E: Failed to fetch https://developer.download.nvidia.com/...",
        "verlfit-build: error: apt-get update failed (above: the source it could not reach): set the build arg for Ubuntu's archive "
        "(APT_MIRROR=<a mirror of http://archive.ubuntu.com/ubuntu>) or NVIDIA's CUDA repository (CUDA_APT_MIRROR=<a mirror of "
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64>); behind a TLS-intercepting proxy pass its CA "
        "bundle, --secret id=ca-bundle,src=<bundle> (docs/images.md, 'Restricted network')"]


def test_a_ca_bundle_secret_is_trusted_by_apt_pip_git_and_curl(apt_root, tmp_path):
    sources, lists, bin_dir, log = apt_root
    bundle = tmp_path / "ca-bundle"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    result = run("install-system.sh", "build", dry=False, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON_VERSION="3.10",
                 APT_SOURCES_DIR=str(sources), APT_LISTS_DIR=str(lists), VERLFIT_CA_BUNDLE=str(bundle))
    assert result.returncode == 0, result.stderr
    assert [line for line in log.read_text().splitlines() if line.startswith("apt-get")] == [
        f"apt-get -o Acquire::https::CaInfo={bundle} update",
        f"apt-get -o Acquire::https::CaInfo={bundle} install -y --no-install-recommends {simulated('curl=7.81.0-1ubuntu1.20')}"]
    # what lib.sh exports for pip, git, curl and Python's ssl; nothing without the secret
    shown = subprocess.run(["bash", "-c", f". {DOCKER}/lib.sh; echo $PIP_CERT $GIT_SSL_CAINFO $CURL_CA_BUNDLE $SSL_CERT_FILE $REQUESTS_CA_BUNDLE"],
                           env={"PATH": os.environ["PATH"], "VERLFIT_CA_BUNDLE": str(bundle)}, capture_output=True, text=True)
    assert shown.stdout.split() == [str(bundle)] * 5
    shown = subprocess.run(["bash", "-c", f". {DOCKER}/lib.sh; echo ${{PIP_CERT-unset}}"],
                           env={"PATH": os.environ["PATH"], "VERLFIT_CA_BUNDLE": str(tmp_path / "absent")}, capture_output=True, text=True)
    assert shown.stdout == "unset\n"


def test_install_python_from_the_index_and_from_wheels():
    assert plan("install-python.sh", PYTHON_VERSION="3.10", PIP_INDEX_URL="https://pypi.example/simple") == [
        "+ python3.10 -m venv /opt/venv",
        f"+ /opt/venv/bin/python -m pip install --no-input --disable-pip-version-check --no-deps --only-binary=:all: "
        f"--require-hashes --index-url https://pypi.example/simple -r {DOCKER}/python.lock",
    ]
    runtime = plan("install-python.sh", "/wheels/python", PYTHON_VERSION="3.10")
    # the folder's wheels, each with its sha256 (wheel-hashes.py folder), installed with --require-hashes
    assert runtime[:2] == ["+ python3.10 -m venv /opt/venv", f"+ /opt/venv/bin/python {DOCKER}/wheel-hashes.py folder /wheels/python"]
    assert re.fullmatch(r"\+ /opt/venv/bin/python -m pip install --no-input --disable-pip-version-check --no-deps --no-index "
                        r"--find-links /wheels/python --require-hashes -r /tmp/verlfit-wheels\.\w+\.txt", runtime[2]), runtime[2]
    assert len(runtime) == 3


def test_download_locked_routes_cu118_locks_to_the_torch_index_only():
    lines = plan("download-locked.sh", "/wheels/torch", str(DOCKER / "torch-cu118.lock"), str(DOCKER / "torch-deps.lock"),
                 PIP_INDEX_URL="https://pypi.example/simple", TORCH_INDEX_URL="https://torch.example/whl/cu118")
    prefix = "+ /opt/venv/bin/python -m pip wheel --no-input --disable-pip-version-check --no-deps --no-build-isolation --only-binary=:all:"
    assert lines == [
        "+ mkdir -p /wheels/torch",
        # each lock as pip reads it: its build-argument hashes filled in, a pin without a hash refused (wheel-hashes.py)
        f"+ /opt/venv/bin/python {DOCKER}/wheel-hashes.py hashed {DOCKER}/torch-cu118.lock /wheels/torch/torch-cu118.hashes.lock",
        f"{prefix} --require-hashes --index-url https://torch.example/whl/cu118 --wheel-dir /wheels/torch -r /wheels/torch/torch-cu118.hashes.lock",
        f"+ /opt/venv/bin/python {DOCKER}/wheel-hashes.py hashed {DOCKER}/torch-deps.lock /wheels/torch/torch-deps.hashes.lock",
        f"{prefix} --require-hashes --index-url https://pypi.example/simple --wheel-dir /wheels/torch -r /wheels/torch/torch-deps.hashes.lock",
    ]
    # every pip wheel of both images' locks goes through --require-hashes, on the hashed copy
    for lock in ("python.lock", "common.lock", "a10-extra.lock", "a10-cu118.lock"):
        lines = plan("download-locked.sh", "/wheels", str(DOCKER / lock), PIP_INDEX_URL="https://p.example", TORCH_INDEX_URL="https://t.example")
        pips = [line for line in lines if " pip " in line]
        assert len(pips) == 1 and "--require-hashes" in pips[0].split(), lines
        assert pips[0].endswith(f" -r /wheels/{lock.removesuffix('.lock')}.hashes.lock")
    wheelhouse = plan("download-locked.sh", "--download", "/wheelhouse", str(DOCKER / "a10-cu118.lock"), TORCH_INDEX_URL="https://t.example")
    assert wheelhouse[-2:] == [
        "+ /opt/venv/bin/python -m pip download --no-input --disable-pip-version-check --no-deps --only-binary=:all: --require-hashes "
        "--index-url https://t.example --dest /wheelhouse -r /wheelhouse/a10-cu118.hashes.lock",
        f"+ /opt/venv/bin/python {DOCKER}/wheel-hashes.py index /wheelhouse"]


def test_download_locked_needs_the_index_it_uses():
    result = run("download-locked.sh", "/wheels/a10", str(DOCKER / "a10-cu118.lock"), PIP_INDEX_URL="https://pypi.example/simple")
    assert (result.returncode, result.stderr) == (1, "verlfit-build: error: TORCH_INDEX_URL is not set (a build arg of Dockerfile.p40/Dockerfile.a10)\n")
    result = run("download-locked.sh", "/wheels", "/nonexistent.lock", PIP_INDEX_URL="x")
    assert (result.returncode, result.stderr) == (1, "verlfit-build: error: lock file /nonexistent.lock not found\n")


def test_install_wheels_and_projects_use_no_index():
    lines = plan("install-wheels.sh", "/wheels/torch", "/wheels/a10")
    assert lines[:2] == [f"+ /opt/venv/bin/python {DOCKER}/wheel-hashes.py folder /wheels/torch", f"+ /opt/venv/bin/python {DOCKER}/wheel-hashes.py folder /wheels/a10"]
    assert re.fullmatch(r"\+ /opt/venv/bin/python -m pip install --no-input --disable-pip-version-check --no-deps --no-index "
                        r"--find-links /wheels/torch --find-links /wheels/a10 --require-hashes -r /tmp/verlfit-wheels\.\w+\.txt", lines[2]), lines[2]
    assert len(lines) == 3
    assert plan("install-project.sh", "--editable", "/opt/verl") == [
        "+ /opt/venv/bin/python -m pip install --no-input --disable-pip-version-check --no-deps --no-index --no-build-isolation --editable /opt/verl",
    ]
    assert plan("install-project.sh", "/opt/verlfit") == [
        "+ /opt/venv/bin/python -m pip install --no-input --disable-pip-version-check --no-deps --no-index --no-build-isolation /opt/verlfit",
    ]


def test_install_wheels_refuses_an_empty_folder(tmp_path):
    result = run("install-wheels.sh", str(tmp_path), dry=False, VENV=str(tmp_path / "venv"))
    assert (result.returncode, result.stderr) == (1, f"verlfit-build: error: no wheels in {tmp_path}\n")


def test_fetch_wheel_plan_decodes_the_file_name():
    url = "https://github.com/vllm-project/vllm/releases/download/v0.8.5/vllm-0.8.5%2Bcu118-cp38-abi3-manylinux1_x86_64.whl"
    assert plan("fetch-wheel.sh", "/wheels/a10", url, SHA) == [
        "+ mkdir -p /wheels/a10",
        f"+ curl --fail --silent --show-error --location --retry 3 --netrc-optional --output /wheels/a10/vllm-0.8.5+cu118-cp38-abi3-manylinux1_x86_64.whl {url}",
        f"+ verify sha256 {SHA} /wheels/a10/vllm-0.8.5+cu118-cp38-abi3-manylinux1_x86_64.whl",
    ]


@pytest.mark.parametrize("sha256, message", [
    ("", "no sha256 given for x-1.0-py3-none-any.whl; pass its sha256 as a build arg (docs/images.md, 'A10 wheels')"),
    ("ABC", "sha256 for x-1.0-py3-none-any.whl must be 64 lowercase hex digits, got 'ABC'"),
])
def test_fetch_wheel_requires_a_sha256(sha256, message):
    result = run("fetch-wheel.sh", "/wheels", "https://example.com/x-1.0-py3-none-any.whl", sha256)
    assert (result.returncode, result.stdout, result.stderr) == (1, "", f"verlfit-build: error: {message}\n")


@pytest.mark.skipif(shutil.which("curl") is None and not os.environ.get("CI"), reason="needs curl (the build stage has it; .ci/run installs it)")
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
    assert result.stderr == f"verlfit-build: error: sha256 mismatch for {source.name} from {url}: expected {SHA}, got {digest}\n"
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
    result = run("install-verl.sh", "fetch", str(tmp_path / "verl"), dry=False, VERL_REPO=f"file://{remote}", VERL_COMMIT=release)
    assert result.returncode == 0, result.stderr
    head = subprocess.run(["git", "-C", str(tmp_path / "verl"), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert head == release
    assert (tmp_path / "verl" / "setup.py").read_text() == "# release\n"


def test_install_verl_refuses_a_tag_or_short_hash():
    result = run("install-verl.sh", "fetch", "/opt/verl", VERL_REPO="https://github.com/volcengine/verl.git", VERL_COMMIT="v0.4.1")
    assert (result.returncode, result.stderr) == (1, "verlfit-build: error: VERL_COMMIT must be a full 40-digit commit hash, got 'v0.4.1'\n")


def test_install_verl_plan():
    commit = "8d9e350ea58c7ad4b50dd14d9dcb50577242c55f"
    assert plan("install-verl.sh", "fetch", "/opt/verl", VERL_REPO="https://git.example/verl.git", VERL_COMMIT=commit) == [
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
    source = Path(os.environ["VERLFIT_PRISTINE_VERL"]) / "verl" if os.environ.get("VERLFIT_PRISTINE_VERL") else Path(verl.__file__).parent
    tree = tmp_path / "verl-checkout"
    shutil.copytree(source, tree / "verl", ignore=shutil.ignore_patterns("__pycache__"))
    assert not (tree / "verl" / ".verlfit-patches").exists(), f"{source} is a patched verl: set VERLFIT_PRISTINE_VERL to verl as released"
    environment = {"PATH": os.environ["PATH"], "PATCHES_DIR": str(REPO / "patches")}
    result = subprocess.run([str(DOCKER / "install-verl.sh"), "patch", str(tree)], env=environment, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    status = subprocess.run(["python3", str(REPO / "patches" / "apply.py"), "--status", str(tree)], capture_output=True, text=True)
    assert status.returncode == 0, status.stdout + status.stderr


def test_install_system_takes_every_package_apt_would_install_at_the_locks_version(apt_root):
    """Dependencies too: what `apt-get -s` says it would install is installed at the lock's version."""
    sources, lists, bin_dir, log = apt_root
    result = run("install-system.sh", "init", dry=False, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON_VERSION="3.10",
                 CUDNN_VERSION="8.9.7.29-1+cuda11.8", APT_SOURCES_DIR=str(sources), APT_LISTS_DIR=str(lists), FAKE_EXTRA="gcc")
    assert result.returncode == 0, result.stderr
    installs = [line for line in log.read_text().splitlines() if line.startswith("apt-get install")]
    assert installs == [f"apt-get install -y --no-install-recommends {simulated('tini=0.19.0-1', 'gcc=4:11.2.0-1ubuntu1')}"]


def test_install_system_stops_on_a_package_the_lock_does_not_pin(apt_root):
    sources, lists, bin_dir, log = apt_root
    result = run("install-system.sh", "init", dry=False, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON_VERSION="3.10",
                 APT_SOURCES_DIR=str(sources), APT_LISTS_DIR=str(lists), FAKE_EXTRA="libnew1")
    assert result.returncode == 1
    assert result.stderr == (f"verlfit-build: error: apt would install libnew1, which {APT_LOCK} does not pin (the base image or the groups "
                             "changed): regenerate the lock on the bases you build from, make apt-lock (docs/images.md, 'apt lock')\n")
    assert "apt-get install" not in log.read_text()


def test_install_system_names_a_dated_snapshot_when_a_locked_version_is_gone(apt_root):
    """Ubuntu drops superseded versions from -updates and -security: never another version, the snapshot to use."""
    sources, lists, bin_dir, log = apt_root
    result = run("install-system.sh", "build", dry=False, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON_VERSION="3.10",
                 APT_SOURCES_DIR=str(sources), APT_LISTS_DIR=str(lists), FAKE_GONE="curl=7.81.0-1ubuntu1.20 git=1:2.34.1-1ubuntu1.12")
    assert result.returncode == 1
    assert result.stderr == (
        "verlfit-build: error: the apt sources no longer offer curl=7.81.0-1ubuntu1.20 git=1:2.34.1-1ubuntu1.12 (Ubuntu drops "
        "superseded versions from jammy-updates and jammy-security): build from a dated snapshot of the archive taken while the "
        "lock was current, APT_MIRROR=https://snapshot.ubuntu.com/ubuntu/20261201T000000Z (make image-p40 APT_MIRROR=...), or "
        "regenerate the lock (make apt-lock; docs/images.md, 'apt lock')\n")
    assert "apt-get install" not in log.read_text()
    # the sources are restored even so
    assert not list(sources.rglob("*.verlfit-orig"))


def test_install_system_print_lock_lists_what_apt_would_install(apt_root):
    """make apt-lock's source: NAME=VERSION per "Inst" line of apt-get -s, upgrades ("Inst NAME [OLD] (NEW ...") too."""
    sources, lists, bin_dir, log = apt_root
    (bin_dir / "apt-get").write_text(
        "#!/bin/bash\n"
        "case \" $* \" in *' -s '*) printf '%s\\n' 'Inst tini (0.19.0-1 Ubuntu:22.04/jammy [amd64])' "
        "'Inst libc6-dev [2.35-0ubuntu3] (2.35-0ubuntu3.8 Ubuntu:22.04/jammy-updates [amd64])' 'Conf tini (0.19.0-1 Ubuntu:22.04/jammy [amd64])';; "
        "*) echo 'Reading package lists... Done';; esac\n")
    result = run("install-system.sh", "--print-lock", "init", dry=False, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON_VERSION="3.10",
                 APT_SOURCES_DIR=str(sources), APT_LISTS_DIR=str(lists))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "libc6-dev=2.35-0ubuntu3.8\ntini=0.19.0-1\n"
    assert "Reading package lists... Done" in result.stderr
