"""Reproducible by default, checked statically: the base images pinned by digest in the Dockerfiles' defaults, every
lock line pinned and hashed (the torch index's few without a published hash by a required build argument, named
exactly), every pip run with --require-hashes and no path that installs a wheel without a hash, the apt lock exact,
the proxy and CA variables in compose; and docker/wheel-hashes.py and docker/download-locked.sh, which make and use the
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

from image_helpers import DOCKERFILES, LOCK_TOOL, REPO, parse_dockerfile, resolved_args

DOCKER = REPO / "docker"
WHEEL_HASHES = DOCKER / "wheel-hashes.py"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# pins of the torch index with no sha256 found in public files: their hash is a build argument of Dockerfile.a10 with no
# default (the user gives it), written in the lock as pip's ${NAME}
BUILD_ARG_HASHES = {
    "a10-cu118.lock": {
        "torchaudio": "TORCHAUDIO_WHEEL_SHA256",
        "torchvision": "TORCHVISION_WHEEL_SHA256",
        "xformers": "XFORMERS_WHEEL_SHA256",
    }
}


@pytest.mark.parametrize("profile", sorted(DOCKERFILES))
def test_base_images_are_pinned_by_digest_by_default(profile):
    args = resolved_args(parse_dockerfile(DOCKERFILES[profile]))
    assert DIGEST.fullmatch(args["BUILD_BASE_DIGEST"]) and DIGEST.fullmatch(args["RUNTIME_BASE_DIGEST"])
    assert args["BUILD_BASE_DIGEST"] != args["RUNTIME_BASE_DIGEST"]


def lock_pins(path: Path) -> dict[str, list[str]]:
    """name -> its --hash values (64 hex digits, or a build argument's ${NAME}), from a pip lock's logical lines
    (continuations joined; comments and options skipped)."""
    pins = {}
    for line in path.read_text().replace("\\\n", " ").splitlines():
        words = line.split("#", 1)[0].split()
        if not words or words[0].startswith("-"):
            continue
        name, separator, version = words[0].partition("==")
        assert separator and version and not re.search(r"[<>~!*]", version), (
            f"{path.name}: {line!r} is not an exact pin"
        )
        assert all(re.fullmatch(r"--hash=sha256:([0-9a-f]{64}|\$\{[A-Z0-9_]+\})", word) for word in words[1:]), (
            f"{path.name}: {line!r}"
        )
        pins[name] = [word.split(":", 1)[1] for word in words[1:]]
    return pins


PIP_LOCKS = sorted(path.name for path in DOCKER.glob("*.lock") if path.name != "apt.lock")


@pytest.mark.parametrize("lock", PIP_LOCKS)
def test_every_lock_pin_carries_a_hash(lock):
    """Every pin of every pip lock has a --hash: its sha256 written here, or (the torch index's wheels whose sha256 is
    published nowhere) the build argument the user gives it by, which has no default in Dockerfile.a10."""
    pins = lock_pins(DOCKER / lock)
    assert pins
    assert [name for name, hashes in pins.items() if not hashes] == []
    by_argument = {name: hashes[0][2:-1] for name, hashes in pins.items() if hashes[0].startswith("${")}
    assert by_argument == BUILD_ARG_HASHES.get(lock, {})
    assert all(len(pins[name]) == 1 for name in by_argument)  # the one file pip picks on the image
    defaults = resolved_args(parse_dockerfile(DOCKERFILES["a10"]))
    assert {name: defaults[name] for name in by_argument.values()} == {name: "" for name in by_argument.values()}
    assert lock in PIP_LOCKS and len(PIP_LOCKS) == 6


def pip_commands(text: str) -> list[str]:
    """Every pip invocation of a shell script or Dockerfile: its logical line (continuations joined) from `pip` on."""
    commands = []
    for line in text.replace("\\\n", " ").splitlines():
        if line.lstrip().startswith("#"):
            continue
        for match in re.finditer(
            r"(?:\bpip_install\b|-m pip (?:install|wheel|download)\b|(?<![\w/.-])pip (?:install|wheel|download)\b).*",
            line,
        ):
            commands.append(match.group(0))
    return commands


# the pip runs that cannot check hashes, and why: local source trees (verl editable, verlfit; nothing downloaded,
# --no-index)
NO_HASH_ALLOWED = {"docker/install-project.sh": 'pip_install --no-index --no-build-isolation "${editable[@]}" "$1"'}


def test_every_pip_install_requires_hashes():
    files = sorted([*DOCKER.glob("*.sh"), *DOCKERFILES.values(), REPO / "tests/images/rehearsal/Dockerfile.tests"])
    seen = 0
    for path in files:
        relative = str(path.relative_to(REPO))
        for command in pip_commands(path.read_text()):
            if relative == "docker/lib.sh" and (
                command.startswith("pip_install() {") or command.endswith('--no-deps "$@"')
            ):
                continue  # the helper's definition and body: its callers pass --require-hashes
            seen += 1
            if NO_HASH_ALLOWED.get(relative) == command:
                continue
            assert "--require-hashes" in command.split(), f"{relative}: {command}"
    # install-python.sh 2, download-locked.sh 2 (wheel, download), install-wheels.sh, install-project.sh,
    # Dockerfile.tests
    assert seen == 7
    # the Python helpers run pip only to check (there was a trust-on-first-download path here: a wheel downloaded
    # without a hash, its sha256 recorded and trusted from then on; it is gone)
    runs = {path.name: re.findall(r'"-m", "pip", "(\w+)"', path.read_text()) for path in DOCKER.glob("*.py")}
    assert {name: found for name, found in runs.items() if found} == {"check-image.py": ["check"]}
    assert [path.name for path in DOCKER.glob("*.py") if re.search(r"first.download", path.read_text())] == []


def test_no_install_path_accepts_a_hashless_wheel():
    """Each way a wheel reaches an image, statically: the locks through download-locked.sh, whose pip reads only the
    lock's hashed copy (docker/wheel-hashes.py hashed refuses a pin without a hash and a missing build argument before
    pip starts); the release wheels through fetch-wheel.sh, which refuses an empty sha256; the runtime stage through
    install-wheels.sh / install-python.sh, from the wheels stage's folders with each file's sha256."""
    download = (DOCKER / "download-locked.sh").read_text().replace("\\\n", " ")
    commands = [line.strip() for line in download.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    pip_lines = [line for line in commands if " -m pip " in line]
    assert len(pip_lines) == 2 and all(
        line.endswith('-r "$hashed"') and "--require-hashes" in line.split() for line in pip_lines
    )
    hashed = [line for line in commands if "hashed" in line and "-m pip" not in line]
    assert hashed == [
        'hashed=$dest/$(basename "$lock" .lock).hashes.lock',
        'run "$VENV/bin/python" "$DOCKER_DIR/wheel-hashes.py" hashed "$lock" "$hashed"',
    ]
    assert commands.index(hashed[1]) < commands.index(pip_lines[0])  # checked before pip runs
    fetch = (DOCKER / "fetch-wheel.sh").read_text()
    assert """[ -n "$sha256" ] || die "no sha256 given for $name""" in fetch and "^[0-9a-f]{64}$" in fetch
    # every wheel the Dockerfiles fetch by URL is checked against a sha256 build arg with no default
    for profile, dockerfile in DOCKERFILES.items():
        fetched = re.findall(r'fetch-wheel\.sh \S+ "\$\{(\w+)_URL\}" "\$\{(\w+)\}"', dockerfile.read_text())
        assert fetched == (
            [("VLLM_WHEEL", "VLLM_WHEEL_SHA256"), ("FLASH_ATTN_WHEEL", "FLASH_ATTN_WHEEL_SHA256")]
            if profile == "a10"
            else []
        )
        defaults = resolved_args(parse_dockerfile(dockerfile))
        assert [defaults[sha] for _, sha in fetched] == [""] * len(fetched)
    # the runtime stage's installs: no index, each wheel with its own sha256
    assert "wheel_requirements" in (DOCKER / "install-wheels.sh").read_text()
    assert "--require-hashes" in (DOCKER / "install-python.sh").read_text()


def test_proxy_and_ca_variables_reach_every_compose_service():
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    needed = {
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "REQUESTS_CA_BUNDLE",
        "SSL_CERT_FILE",
        "HF_HUB_DISABLE_XET",
    }
    for name, service in compose["services"].items():
        assert needed <= set(service["environment"]), name
        # the CA bundle's mount is a variable, not a line to uncomment
        mounts = [
            volume
            for volume in service["volumes"]
            if isinstance(volume, dict) and volume["target"] == "/etc/verlfit/ca-bundle.pem"
        ]
        assert [mount["source"] for mount in mounts] == ["${VERLFIT_CA_BUNDLE:-./docker/no-ca-bundle.pem}"], name


def make_wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal wheel (PEP 427 name, METADATA and WHEEL) for pip to download."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        info = f"{name}-{version}.dist-info"
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return path


def helper(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    # pip without this machine's own configuration (find-links, extra indexes); env: the build args a RUN would see
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PIP_") and not key.endswith("_WHEEL_SHA256")
    }
    environment |= {"PIP_CONFIG_FILE": os.devnull, **(env or {})}
    return subprocess.run([sys.executable, str(WHEEL_HASHES), *args], capture_output=True, text=True, env=environment)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_wheel_hashes_folder_constraints_and_index(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    one, two = make_wheel(wheels, "torch", "2.6.0+cu118"), make_wheel(wheels, "antlr4_python3_runtime", "4.9.3")
    result = helper("folder", str(wheels))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"antlr4-python3-runtime==4.9.3 --hash=sha256:{sha256(two)}",
        f"torch==2.6.0+cu118 --hash=sha256:{sha256(one)}",
    ]
    assert (
        helper("constraints", str(DOCKER / "torch-cu118.lock"), str(DOCKER / "a10-cu118.lock")).stdout
        == "torch==2.6.0+cu118\ntorchaudio==2.6.0+cu118\ntorchvision==0.21.0+cu118\nxformers==0.0.29.post2\n"
    )
    (wheels / "pylatexenc-2.10.tar.gz").write_bytes(b"sdist")
    assert helper("index", str(wheels)).returncode == 0
    assert sorted(str(path.relative_to(wheels)) for path in wheels.rglob("*") if path.is_file()) == [
        "simple/antlr4-python3-runtime/antlr4_python3_runtime-4.9.3-py3-none-any.whl",
        "simple/pylatexenc/pylatexenc-2.10.tar.gz",
        "simple/torch/torch-2.6.0+cu118-py3-none-any.whl",
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert helper("folder", str(empty)).stderr == f"wheel-hashes.py: no wheels in {empty}\n"


def file_index(root: Path, *wheels: Path) -> Path:
    """A PEP 503 index in ``root`` (a file:// index's project page is its index.html: pip reads no folder listing there)
    serving ``wheels``."""
    for wheel in wheels:
        project = root / wheel.name.split("-")[0].replace("_", "-")
        project.mkdir(parents=True, exist_ok=True)
        (project / wheel.name).write_bytes(wheel.read_bytes())
        (project / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')
    return root


def test_hashed_fills_the_build_argument_hashes_and_refuses_what_it_cannot(tmp_path):
    lock = tmp_path / "x-cu118.lock"
    published = "a" * 64
    lock.write_text(
        f"# a header\n--no-binary other\npublished==2.0 \\\n    --hash=sha256:{published}\n"
        "tinypkg==1.0 \\\n    --hash=sha256:${TINYPKG_WHEEL_SHA256}\n"
    )
    out = tmp_path / "x-cu118.hashes.lock"
    given = "b" * 64
    result = helper("hashed", str(lock), str(out), env={"TINYPKG_WHEEL_SHA256": given})
    assert (result.returncode, result.stderr) == (0, "")
    # the lock as it is, the build argument's value in place of its name
    assert (
        out.read_text() == f"# a header\n--no-binary other\npublished==2.0 \\\n    --hash=sha256:{published}\n"
        f"tinypkg==1.0 \\\n    --hash=sha256:{given}\n"
    )
    out.unlink()
    fix = (
        "No sha256 of these wheels is published: take it once from a download you trust and pass it, 64 lowercase hex "
        "digits (make image-a10 TINYPKG_WHEEL_SHA256=<sha256>; docs/images.md, 'A10 wheels')\n"
    )
    for value, said in (("", "it is not set"), ("B" * 64, f"got '{'B' * 64}'"), ("abc", "got 'abc'")):
        result = helper("hashed", str(lock), str(out), env={"TINYPKG_WHEEL_SHA256": value} if value else {})
        assert result.returncode == 1
        assert result.stderr == (
            f"wheel-hashes.py: {lock}: tinypkg==1.0 takes its sha256 from the build argument "
            f"TINYPKG_WHEEL_SHA256, and {said}. " + fix
        )
        assert not out.exists() and list(tmp_path.glob("*.partial")) == []  # nothing written
    # a pin without any hash: refused whatever the environment
    lock.write_text(f"published==2.0 --hash=sha256:{published}\ntinypkg==1.0\n")
    result = helper("hashed", str(lock), str(out))
    assert result.returncode == 1 and not out.exists()
    assert (
        result.stderr
        == f"wheel-hashes.py: {lock}: tinypkg==1.0 carries no --hash=sha256: no wheel is installed without a "
        "hash written in the lock or given as a build argument (docs/images.md, 'Hashes')\n"
    )


@pytest.mark.parametrize("lock", ["torch-cu118.lock", "a10-cu118.lock", "common.lock"])
def test_hashed_on_the_committed_locks(tmp_path, lock):
    """The P40 image's locks need no build argument; the A10 image's torch-index lock needs its three."""
    out = tmp_path / "out.lock"
    result = helper("hashed", str(DOCKER / lock), str(out))
    if lock != "a10-cu118.lock":
        assert (result.returncode, out.read_text()) == (0, (DOCKER / lock).read_text())
        return
    assert result.returncode == 1 and not out.exists()
    assert (
        "torchaudio==2.6.0+cu118 takes its sha256 from the build argument TORCHAUDIO_WHEEL_SHA256, and it is not set;"
        " torchvision==0.21.0+cu118 takes its sha256 from the build argument TORCHVISION_WHEEL_SHA256, and it is not"
        " set; xformers==0.0.29.post2 takes its sha256 from the build argument XFORMERS_WHEEL_SHA256, and it is not"
        " set." in result.stderr
    )
    digests = {
        "TORCHAUDIO_WHEEL_SHA256": "1" * 64,
        "TORCHVISION_WHEEL_SHA256": "2" * 64,
        "XFORMERS_WHEEL_SHA256": "3" * 64,
    }
    assert helper("hashed", str(DOCKER / lock), str(out), env=digests).returncode == 0
    assert LOCK_TOOL.parse_lock(out.read_text()) == {
        "torchaudio": LOCK_TOOL.Pin("torchaudio", "2.6.0+cu118", ("1" * 64,)),
        "torchvision": LOCK_TOOL.Pin("torchvision", "0.21.0+cu118", ("2" * 64,)),
        "xformers": LOCK_TOOL.Pin("xformers", "0.0.29.post2", ("3" * 64,)),
    }


def download_locked(dest: Path, lock: Path, index: Path, **env: str) -> subprocess.CompletedProcess:
    """docker/download-locked.sh for real: this interpreter's pip as the build's venv, a file:// index as
    TORCH_INDEX_URL."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")} | {
        "PIP_CONFIG_FILE": os.devnull,
        "VENV": sys.prefix,
        "TORCH_INDEX_URL": index.as_uri(),
        **env,
    }
    return subprocess.run(
        [str(DOCKER / "download-locked.sh"), str(dest), str(lock)], capture_output=True, text=True, env=environment
    )


def test_download_locked_installs_nothing_without_the_hash(tmp_path):
    """The whole path a torch-index wheel takes into the wheels stage, run for real on a file:// index: without its
    build argument nothing is downloaded; with a wrong one pip refuses the file; with the right one the wheel lands."""
    wheel = make_wheel(tmp_path, "tinypkg", "1.0")
    index = file_index(tmp_path / "index", wheel)
    lock = tmp_path / "x-cu118.lock"
    lock.write_text("tinypkg==1.0 \\\n    --hash=sha256:${TINYPKG_WHEEL_SHA256}\n")
    missing = download_locked(tmp_path / "missing", lock, index)
    assert missing.returncode == 1
    assert (
        "tinypkg==1.0 takes its sha256 from the build argument TINYPKG_WHEEL_SHA256, and it is not set"
        in missing.stderr
    )
    assert list((tmp_path / "missing").iterdir()) == []
    wrong = download_locked(tmp_path / "wrong", lock, index, TINYPKG_WHEEL_SHA256="0" * 64)
    assert wrong.returncode != 0 and "THESE PACKAGES DO NOT MATCH THE HASHES" in wrong.stderr
    assert list((tmp_path / "wrong").glob("*.whl")) == []
    right = download_locked(tmp_path / "right", lock, index, TINYPKG_WHEEL_SHA256=sha256(wheel))
    assert right.returncode == 0, right.stderr
    assert sorted(path.name for path in (tmp_path / "right").iterdir()) == [
        "tinypkg-1.0-py3-none-any.whl",
        "x-cu118.hashes.lock",
    ]
    assert (
        tmp_path / "right" / "x-cu118.hashes.lock"
    ).read_text() == f"tinypkg==1.0 \\\n    --hash=sha256:{sha256(wheel)}\n"


def test_lock_lines_that_are_not_exact_pins_are_refused(tmp_path):
    lock = tmp_path / "bad-cu118.lock"
    lock.write_text("torch>=2.6\n")
    result = helper("hashed", str(lock), str(tmp_path / "out"))
    assert result.returncode == 1
    assert result.stderr == f"wheel-hashes.py: {lock}: 'torch>=2.6' is not NAME==VERSION [--hash=sha256:HEX]...\n"
