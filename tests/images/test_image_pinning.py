"""Reproducible by default, checked statically: the base images pinned by digest in the Dockerfiles' defaults, every
lock line pinned and hashed (the torch index's few without a published hash named exactly), every pip run with
--require-hashes, the apt lock exact, the proxy and CA variables in compose; and docker/wheel-hashes.py, which makes the
hashed requirement files, on real files."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from image_helpers import DOCKERFILES, REPO, parse_dockerfile, resolved_args

DOCKER = REPO / "docker"
WHEEL_HASHES = DOCKER / "wheel-hashes.py"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# pins of the torch index with no sha256 found in public files: their hash is computed on the build's first download
FIRST_DOWNLOAD = {"torch-cu118.lock": {"torchvision", "torchaudio"}, "a10-cu118.lock": {"xformers"}}


@pytest.mark.parametrize("profile", sorted(DOCKERFILES))
def test_base_images_are_pinned_by_digest_by_default(profile):
    args = resolved_args(parse_dockerfile(DOCKERFILES[profile]))
    assert DIGEST.fullmatch(args["BUILD_BASE_DIGEST"]) and DIGEST.fullmatch(args["RUNTIME_BASE_DIGEST"])
    assert args["BUILD_BASE_DIGEST"] != args["RUNTIME_BASE_DIGEST"]


def lock_pins(path: Path) -> dict[str, list[str]]:
    """name -> its sha256 digests, from a pip lock's logical lines (continuations joined; comments and options skipped)."""
    pins = {}
    for line in path.read_text().replace("\\\n", " ").splitlines():
        words = line.split("#", 1)[0].split()
        if not words or words[0].startswith("-"):
            continue
        name, separator, version = words[0].partition("==")
        assert separator and version and not re.search(r"[<>~!*]", version), f"{path.name}: {line!r} is not an exact pin"
        assert all(re.fullmatch(r"--hash=sha256:[0-9a-f]{64}", word) for word in words[1:]), f"{path.name}: {line!r}"
        pins[name] = [word.split(":", 1)[1] for word in words[1:]]
    return pins


@pytest.mark.parametrize("lock", sorted(path.name for path in DOCKER.glob("*.lock") if path.name != "apt.lock"))
def test_every_lock_line_is_an_exact_hashed_pin(lock):
    pins = lock_pins(DOCKER / lock)
    assert pins
    assert {name for name, hashes in pins.items() if not hashes} == FIRST_DOWNLOAD.get(lock, set())


def pip_commands(text: str) -> list[str]:
    """Every pip invocation of a shell script or Dockerfile: its logical line (continuations joined) from `pip` on."""
    commands = []
    for line in text.replace("\\\n", " ").splitlines():
        if line.lstrip().startswith("#"):
            continue
        for match in re.finditer(r"(?:\bpip_install\b|-m pip (?:install|wheel|download)\b|(?<![\w/.-])pip (?:install|wheel|download)\b).*", line):
            commands.append(match.group(0))
    return commands


# the pip runs that cannot check hashes, and why: local source trees (verl editable, verlfit; nothing downloaded,
# --no-index) and the one first download of a torch-index wheel with no published hash (it computes the hash)
NO_HASH_ALLOWED = {"docker/install-project.sh": 'pip_install --no-index --no-build-isolation "${editable[@]}" "$1"'}


def test_every_pip_install_requires_hashes():
    files = sorted([*DOCKER.glob("*.sh"), *DOCKERFILES.values(), REPO / "tests/images/rehearsal/Dockerfile.tests"])
    seen = 0
    for path in files:
        relative = str(path.relative_to(REPO))
        for command in pip_commands(path.read_text()):
            if relative == "docker/lib.sh" and (command.startswith("pip_install() {") or command.endswith('--no-deps "$@"')):
                continue  # the helper's definition and body: its callers pass --require-hashes
            seen += 1
            if NO_HASH_ALLOWED.get(relative) == command:
                continue
            assert "--require-hashes" in command.split(), f"{relative}: {command}"
    # install-python.sh 2, download-locked.sh 2 (wheel, download), install-wheels.sh, install-project.sh, Dockerfile.tests
    assert seen == 7
    # the Python helper's one download without hashes is the first download itself
    source = WHEEL_HASHES.read_text()
    assert source.count('"download"') == 1 and "if not hashes:" in source


def test_proxy_and_ca_variables_reach_every_compose_service():
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    needed = {"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "REQUESTS_CA_BUNDLE",
              "SSL_CERT_FILE", "HF_HUB_DISABLE_XET"}
    for name, service in compose["services"].items():
        assert needed <= set(service["environment"]), name
        # the CA bundle's mount is a variable, not a line to uncomment
        mounts = [volume for volume in service["volumes"] if isinstance(volume, dict) and volume["target"] == "/etc/verlfit/ca-bundle.pem"]
        assert [mount["source"] for mount in mounts] == ["${VERLFIT_CA_BUNDLE:-./docker/no-ca-bundle.pem}"], name


def make_wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal wheel (PEP 427 name, METADATA and WHEEL) for pip to download."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        info = f"{name}-{version}.dist-info"
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    return path


def helper(*args: str) -> subprocess.CompletedProcess:
    # pip without this machine's own configuration (find-links, extra indexes)
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    return subprocess.run([sys.executable, str(WHEEL_HASHES), *args], capture_output=True, text=True, env=environment)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_wheel_hashes_folder_constraints_and_index(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    one, two = make_wheel(wheels, "torch", "2.6.0+cu118"), make_wheel(wheels, "antlr4_python3_runtime", "4.9.3")
    result = helper("folder", str(wheels))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"antlr4-python3-runtime==4.9.3 --hash=sha256:{sha256(two)}",
                                          f"torch==2.6.0+cu118 --hash=sha256:{sha256(one)}"]
    assert helper("constraints", str(DOCKER / "torch-cu118.lock"), str(DOCKER / "a10-cu118.lock")).stdout == (
        "torch==2.6.0+cu118\ntorchaudio==2.6.0+cu118\ntorchvision==0.21.0+cu118\nxformers==0.0.29.post2\n")
    (wheels / "pylatexenc-2.10.tar.gz").write_bytes(b"sdist")
    assert helper("index", str(wheels)).returncode == 0
    assert sorted(str(path.relative_to(wheels)) for path in wheels.rglob("*") if path.is_file()) == [
        "simple/antlr4-python3-runtime/antlr4_python3_runtime-4.9.3-py3-none-any.whl",
        "simple/pylatexenc/pylatexenc-2.10.tar.gz", "simple/torch/torch-2.6.0+cu118-py3-none-any.whl"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert helper("folder", str(empty)).stderr == f"wheel-hashes.py: no wheels in {empty}\n"


def test_first_download_records_the_hash_and_enforces_it_after(tmp_path):
    """A pin without a published hash: downloaded once (a file:// index here), its sha256 recorded; the next build
    uses the record, and a record of other versions is replaced."""
    index = tmp_path / "index"
    (index / "tinypkg").mkdir(parents=True)
    wheel = make_wheel(index / "tinypkg", "tinypkg", "1.0")
    # a file:// index's project page is its index.html (pip reads no folder listing there; a web server makes one)
    (index / "tinypkg" / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')
    (index / "published").mkdir()
    published = make_wheel(index / "published", "published", "2.0")
    lock = tmp_path / "x-cu118.lock"
    lock.write_text(f"# a header\npublished==2.0 \\\n    --hash=sha256:{sha256(published)}\ntinypkg==1.0\n")
    record = tmp_path / "cache" / "x-cu118.lock"
    result = helper("first-download", str(lock), index.as_uri(), str(tmp_path / "scratch"), str(record))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{record}\n"
    assert record.read_text() == (f"# x-cu118.lock with the hashes computed on first download from {index.as_uri()}\n"
                                  f"published==2.0 \\\n    --hash=sha256:{sha256(published)}\ntinypkg==1.0 \\\n    --hash=sha256:{sha256(wheel)}\n")
    assert (f"verlfit-build: tinypkg==1.0: no published sha256 in x-cu118.lock; computed on first download: --hash=sha256:{sha256(wheel)} "
            "(enforced from now on; add it to docker/x-cu118.lock)") in result.stderr
    # the next build: the record, no download (the index is gone)
    wheel.unlink()
    again = helper("first-download", str(lock), index.as_uri(), str(tmp_path / "scratch2"), str(record))
    assert (again.returncode, again.stdout) == (0, f"{record}\n")
    assert "hashes of the first download enforced" in again.stderr
    # a lock with every pin hashed is its own record
    lock.write_text(f"published==2.0 --hash=sha256:{sha256(published)}\n")
    assert helper("first-download", str(lock), index.as_uri(), str(tmp_path / "s3"), str(record)).stdout == f"{lock}\n"


def test_lock_lines_that_are_not_exact_pins_are_refused(tmp_path):
    lock = tmp_path / "bad-cu118.lock"
    lock.write_text("torch>=2.6\n")
    result = helper("first-download", str(lock), "file:///nonexistent", str(tmp_path / "s"), str(tmp_path / "r"))
    assert result.returncode == 1
    assert result.stderr == f"wheel-hashes.py: {lock}: 'torch>=2.6' is not NAME==VERSION [--hash=sha256:HEX]...\n"
