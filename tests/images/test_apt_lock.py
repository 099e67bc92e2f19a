"""The apt lock by content: docker/apt.lock's lines (a file and its sha256 per package), make apt-lock's resolver and
merger (docker/apt-resolve.sh, docker/apt-lock.sh, with a fake apt-get and docker), the fetch by sha256 with its
fallback places (docker/fetch-apt-packages.sh, for real with apt's own downloader on file:// places) and the install
of the fetched files (docker/install-system.sh, its plan). The image build with the committed lock is the
rehearsal's (tests/images/rehearsal/rehearse.sh: `committed lock:`)."""

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
LOCK = DOCKER / "apt.lock"
APT_HELPER = Path("/usr/lib/apt/apt-helper")
CUDA_REPO = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64"
VERSIONS = {"PYTHON_VERSION": "3.10", "CUDNN_VERSION": "8.9.7.29-1+cuda11.8", "TORCH_CUDA_VERSION": "11.8"}
needs_apt = pytest.mark.skipif(
    not APT_HELPER.exists() and not os.environ.get("CI"),
    reason="needs apt's downloader, /usr/lib/apt/apt-helper (Debian and Ubuntu hosts, CI's included)",
)


def script(name: str, *args: str, dry: bool = False, **env: str) -> subprocess.CompletedProcess:
    environment = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **env}
    if dry:
        environment["VERLFIT_DRY_RUN"] = "1"
    return subprocess.run([str(DOCKER / name), *args], env=environment, capture_output=True, text=True)


def lock_lines(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line and not line.startswith("#")]


def asked(step: str) -> list[str]:
    """lib.sh's apt_set_packages STEP at the Dockerfiles' versions."""
    shown = subprocess.run(
        ["bash", "-c", f". {DOCKER}/lib.sh; apt_set_packages {step}"],
        env={"PATH": os.environ["PATH"], **VERSIONS},
        capture_output=True,
        text=True,
        check=True,
    )
    return shown.stdout.split()


# ---- the committed lock --------------------------------------------------------------------------------------------


def test_every_committed_apt_lock_line_names_a_file_and_its_sha256():
    """Must show: every line has a sha256 (NVIDIA's files alone may be `signed-index`, and the header says why) and a
    pool path whose file name is the package's own; every step the images run has its packages."""
    text = LOCK.read_text()
    lines = lock_lines(text)
    assert len(lines) > 50
    for line in lines:
        assert len(line) == 5, line
        pin, sha256, source, path, steps = line
        name, version = pin.split("=", 1)
        assert source in ("ubuntu", "cuda"), line
        if source == "ubuntu":
            assert re.fullmatch(r"[0-9a-f]{64}", sha256), line
            assert re.fullmatch(
                rf"pool/(main|universe|restricted|multiverse)/[a-z0-9+.-]+/[a-z0-9+.-]+/{re.escape(name)}_[^_/]+_(amd64|all)\.deb",
                path,
            ), line
        else:
            assert re.fullmatch(r"[0-9a-f]{64}|signed-index", sha256), line
            assert re.fullmatch(rf"{re.escape(name)}_[^_/]+_amd64\.deb", path), line
        # the file name holds the version (without its epoch)
        assert path.split("/")[-1].split("_")[1] == version.split(":", 1)[-1], line
        assert set(steps.split(",")) <= {"build", "runtime", "triton"}, line
    names = [line[0].split("=", 1)[0] for line in lines]
    assert len(names) == len(set(names)), "one line per package"
    assert re.search(r"^# ubuntu archive: \d{8}T\d{6}Z$", text, re.MULTILINE)
    if any(line[1] == "signed-index" for line in lines):
        assert "# NVIDIA's files: signed-index" in text
    locked = {line[0].split("=", 1)[0]: line for line in lines}
    for step in ("build", "runtime", "triton"):
        for package in asked(step):
            name, _, version = package.partition("=")
            assert name in locked and step in locked[name][4].split(","), (step, package)
            assert not version or locked[name][0] == package, (step, package)
    assert locked["libcudnn8"][0] == "libcudnn8=8.9.7.29-1+cuda11.8"


def test_nothing_probes_versions_through_the_index_and_apt_get_update_fails_on_errors():
    """The old check (`apt-cache show name=version`) exits 0 for a missing version on jammy's apt 2.4.5; apt-get update
    exits 0 on an unreachable source unless --error-on=any."""
    for path in DOCKER.glob("*.sh"):
        text = path.read_text()
        assert "apt-cache show" not in text, path
        for line in text.splitlines():
            if re.match(r"\s*(run\s+)?apt-get\b.*\bupdate\b", line):
                assert "--error-on=any" in line, (path, line)


# ---- make apt-lock: the resolver in a base's container --------------------------------------------------------------


@pytest.fixture()
def base_root(tmp_path):
    """A scratch /etc/apt (Ubuntu's and NVIDIA's sources), apt lists holding two Release files, and a fake apt-get that
    answers --print-uris from FAKE_URIS_<n> (the nth call) and logs its calls with the sources in effect."""
    sources = tmp_path / "etc-apt"
    (sources / "sources.list.d").mkdir(parents=True)
    (sources / "sources.list").write_text(
        "deb http://archive.ubuntu.com/ubuntu/ jammy main\ndeb http://security.ubuntu.com/ubuntu/ jammy-security main\n"
    )
    (sources / "sources.list.d" / "cuda-ubuntu2204-x86_64.list").write_text(
        f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {CUDA_REPO}/ /\n"
    )
    lists = tmp_path / "lists"
    lists.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt.log"
    fake = bin_dir / "apt-get"
    fake.write_text(
        "#!/bin/bash\n"
        f'echo "apt-get $*" >> {log}\n'
        f'if [ "${{*: -1}}" != update ] && [ "$1" != update ] && ! [[ " $* " == *" update "* ]]; then\n'
        f'  n=$(grep -c print-uris {log}); var=FAKE_URIS_$n; printf "%b" "${{!var}}"; exit 0\n'
        "fi\n"
        f"cat {sources}/sources.list {sources}/sources.list.d/*.list >> {log}\n"
        "printf 'Origin: Ubuntu\\nDate: Tue, 01 Dec 2026 19:28:48 UTC\\n' >"
        f" {lists}/archive.ubuntu.com_ubuntu_dists_jammy-updates_InRelease\n"
        "printf 'Origin: Ubuntu\\nDate: Thu, 21 Apr 2022 17:16:08 UTC\\n' >"
        f" {lists}/archive.ubuntu.com_ubuntu_dists_jammy_InRelease\n"
        f"printf 'Origin: NVIDIA\\nDate: Wed, 02 Dec 2026 08:00:00 UTC\\n' > {lists}/cuda_InRelease\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return sources, lists, bin_dir, log


def uri_line(uri: str, sha256: str, file: str = "") -> str:
    """apt-get --print-uris's line: the URI, apt's file name (the version's epoch ':' written %3a), size, hash."""
    return f"'{uri}' {file or uri.rsplit('/', 1)[-1]} 1234 SHA256:{sha256}\\n"


def test_apt_resolve_prints_each_steps_files_stacked_and_the_archives_date(base_root):
    sources, lists, bin_dir, log = base_root
    git = "http://mirror.example/ubuntu/pool/main/g/git/git_2.34.1-1ubuntu1.20_amd64.deb"
    tini = "http://mirror.example/ubuntu/pool/universe/t/tini/tini_0.19.0-1_amd64.deb"
    cudnn = "https://cuda.example/repo/./libcudnn8_8.9.7.29-1%2bcuda11.8_amd64.deb"
    gcc = "http://mirror.example/ubuntu/pool/main/g/gcc-defaults/gcc_11.2.0-1ubuntu1_amd64.deb"
    result = script(
        "apt-resolve.sh",
        "runtime",
        "triton",
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        APT_SOURCES_DIR=str(sources),
        APT_LISTS_DIR=str(lists),
        APT_MIRROR="http://mirror.example/ubuntu/",
        CUDA_APT_MIRROR="https://cuda.example/repo",
        FAKE_URIS_1=uri_line(git, "a" * 64, "git_1%3a2.34.1-1ubuntu1.20_amd64.deb")
        + uri_line(cudnn, "b" * 64)
        + uri_line(tini, "c" * 64),
        # the stacked step asks again: what runtime already named is not repeated under triton
        FAKE_URIS_2=uri_line(git, "a" * 64, "git_1%3a2.34.1-1ubuntu1.20_amd64.deb")
        + uri_line(cudnn, "b" * 64)
        + uri_line(tini, "c" * 64)
        + uri_line(gcc, "d" * 64, "gcc_4%3a11.2.0-1ubuntu1_amd64.deb"),
        **VERSIONS,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "# ubuntu archive: 20261201T192848Z",
        f"git=1:2.34.1-1ubuntu1.20 {'a' * 64} ubuntu pool/main/g/git/git_2.34.1-1ubuntu1.20_amd64.deb runtime",
        f"libcudnn8=8.9.7.29-1+cuda11.8 {'b' * 64} cuda libcudnn8_8.9.7.29-1+cuda11.8_amd64.deb runtime",
        f"tini=0.19.0-1 {'c' * 64} ubuntu pool/universe/t/tini/tini_0.19.0-1_amd64.deb runtime",
        f"gcc=4:11.2.0-1ubuntu1 {'d' * 64} ubuntu pool/main/g/gcc-defaults/gcc_11.2.0-1ubuntu1_amd64.deb triton",
    ]
    calls = [line for line in log.read_text().splitlines() if line.startswith("apt-get")]
    assert calls[0] == "apt-get update --error-on=any"
    # the mirrors in the container's sources (a throwaway container: rewritten in place)
    assert "deb http://mirror.example/ubuntu/ jammy-security main" in log.read_text()
    assert "https://cuda.example/repo/ /" in log.read_text()
    runtime = "ca-certificates git patch python3 python3.10 python3.10-venv libcudnn8=8.9.7.29-1+cuda11.8 tini"
    assert calls[1:] == [
        f"apt-get -o Acquire::ForceHash=SHA256 install --print-uris -qq --no-install-recommends {runtime}",
        (
            f"apt-get -o Acquire::ForceHash=SHA256 install --print-uris -qq --no-install-recommends {runtime} gcc"
            " libc6-dev python3.10-dev cuda-driver-dev-11-8"
        ),
    ]
    assert list(lists.iterdir()) == []


def test_apt_resolve_names_the_settings_when_a_source_cannot_be_reached(base_root):
    sources, lists, bin_dir, log = base_root
    (bin_dir / "apt-get").write_text(
        "#!/bin/bash\necho 'E: Failed to fetch http://archive.ubuntu.com/ubuntu/dists/jammy/InRelease' >&2\nexit 100\n"
    )
    result = script(
        "apt-resolve.sh",
        "build",
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        APT_SOURCES_DIR=str(sources),
        APT_LISTS_DIR=str(lists),
        **VERSIONS,
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "E: Failed to fetch http://archive.ubuntu.com/ubuntu/dists/jammy/InRelease",
        (
            "verlfit-build: error: apt-get update failed (above: the source it could not reach): set APT_MIRROR=<a"
            f" mirror of http://archive.ubuntu.com/ubuntu> or CUDA_APT_MIRROR=<a mirror of {CUDA_REPO}>; behind a proxy"
            " set the lower-case http_proxy/https_proxy apt reads; behind a TLS-intercepting proxy pass its CA bundle,"
            " CA_BUNDLE=<bundle> (docs/images.md, 'apt lock')"
        ),
    ]


# ---- make apt-lock: the merger over both bases
# ------------------------------------------------------------------------


@pytest.fixture()
def fake_docker(tmp_path):
    """A docker that answers `run ... IMAGE STEPS` with FAKE_<build|runtime> (the resolver's lines) and logs its
    args."""
    log = tmp_path / "docker.log"
    fake = tmp_path / "fake-docker"
    fake.write_text(
        "#!/bin/bash\n"
        f'echo "$*" >> {log}\n'
        'case " $* " in *" build"*) printf "%b" "$FAKE_BUILD";; *) printf "%b" "$FAKE_RUNTIME";; esac\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return fake, log


GIT = f"git=1:2.34.1-1ubuntu1.20 {'a' * 64} ubuntu pool/main/g/git/git_2.34.1-1ubuntu1.20_amd64.deb"
CUDNN = f"libcudnn8=8.9.7.29-1+cuda11.8 {'b' * 64} cuda libcudnn8_8.9.7.29-1+cuda11.8_amd64.deb"


def test_apt_lock_merges_the_steps_of_both_bases(tmp_path, fake_docker):
    docker, log = fake_docker
    lock = tmp_path / "apt.lock"
    result = script(
        "apt-lock.sh",
        str(lock),
        "devel@sha256:1",
        "base@sha256:2",
        DOCKER=str(docker),
        HTTPS_PROXY="http://proxy:3128",
        FAKE_BUILD=f"# ubuntu archive: 20261201T192848Z\\n{GIT} build\\n",
        FAKE_RUNTIME=f"# ubuntu archive: 20261202T080000Z\\n{GIT} runtime\\n{CUDNN} runtime\\n",
        **VERSIONS,
    )
    assert result.returncode == 0, result.stderr
    text = lock.read_text()
    assert lock_lines(text) == [(GIT + " build,runtime").split(), (CUDNN + " runtime").split()]
    assert "# build base: devel@sha256:1\n# runtime base: base@sha256:2\n" in text
    assert "# ubuntu archive: 20261202T080000Z\n" in text
    calls = log.read_text().splitlines()
    # apt reads only the lower-case proxy variables: the upper-case one given goes in as both
    assert all("-e https_proxy=http://proxy:3128 -e HTTPS_PROXY=http://proxy:3128" in call for call in calls)
    assert [call.split("--entrypoint /opt/verlfit/docker/apt-resolve.sh ")[1] for call in calls] == [
        "devel@sha256:1 build",
        "base@sha256:2 runtime triton",
    ]
    result = script(
        "apt-lock.sh",
        str(lock),
        "devel@sha256:1",
        "base@sha256:2",
        DOCKER=str(docker),
        CUDA_SHA256="signed-index",
        FAKE_BUILD=f"# ubuntu archive: 20261201T192848Z\\n{GIT} build\\n",
        FAKE_RUNTIME=f"{CUDNN} runtime\\n",
        **VERSIONS,
    )
    assert result.returncode == 0, result.stderr
    assert lock_lines(lock.read_text())[1] == [
        "libcudnn8=8.9.7.29-1+cuda11.8",
        "signed-index",
        "cuda",
        "libcudnn8_8.9.7.29-1+cuda11.8_amd64.deb",
        "runtime",
    ]


def test_apt_lock_refuses_two_files_for_one_package_and_keeps_the_old_lock(tmp_path, fake_docker):
    docker, _ = fake_docker
    lock = tmp_path / "apt.lock"
    lock.write_text("old\n")
    other = GIT.replace("1ubuntu1.20", "1ubuntu1.18").replace("a" * 64, "e" * 64)
    result = script(
        "apt-lock.sh",
        str(lock),
        "devel",
        "base",
        DOCKER=str(docker),
        FAKE_BUILD=f"{GIT} build\\n",
        FAKE_RUNTIME=f"{other} runtime\\n",
        **VERSIONS,
    )
    assert (result.returncode, result.stderr.splitlines()[-1]) == (
        1,
        "apt-lock.sh: the bases would install different files of: git",
    )
    assert lock.read_text() == "old\n" and not list(tmp_path.glob("apt.lock.*"))


# ---- the build: fetch by sha256, install the files ------------------------------------------------------------------


def write_lock(path: Path, *lines: str, archive: str = "20261201T192848Z") -> Path:
    path.write_text(f"# test lock\n# ubuntu archive: {archive}\n" + "".join(line + "\n" for line in lines))
    return path


@pytest.fixture()
def pool(tmp_path):
    """Two package files in a scratch Ubuntu pool, and lock lines naming them."""
    root = tmp_path / "archive"
    files = {
        "git": "pool/main/g/git/git_2.34.1-1ubuntu1.18_amd64.deb",
        "tini": "pool/universe/t/tini/tini_0.19.0-1_amd64.deb",
    }
    lines = {}
    for name, relative in files.items():
        target = root / relative
        target.parent.mkdir(parents=True)
        target.write_bytes(f"{name} package bytes".encode())
        version = "1:2.34.1-1ubuntu1.18" if name == "git" else "0.19.0-1"
        lines[name] = f"{name}={version} {hashlib.sha256(target.read_bytes()).hexdigest()} ubuntu {relative} runtime"
    return root, lines


@needs_apt
def test_fetch_takes_each_file_by_sha256_from_the_first_place_that_has_it(tmp_path, pool):
    root, lines = pool
    lock = write_lock(tmp_path / "apt.lock", lines["git"], lines["tini"])
    empty = tmp_path / "empty-mirror"
    empty.mkdir()
    dest = tmp_path / "dest"
    environment = {
        "APT_LOCK": str(lock),
        "APT_FILES_CACHE": str(tmp_path / "cache"),
        "APT_MIRROR": f"file://{empty}",
        "UBUNTU_ARCHIVES_OVERRIDE": f"file://{root}",
        "UBUNTU_SNAPSHOTS_OVERRIDE": f"file://{tmp_path}/snapshots",
    }
    result = script("fetch-apt-packages.sh", str(dest), "runtime", **environment)
    assert result.returncode == 0, result.stderr
    assert sorted(path.name for path in (dest / "runtime").iterdir()) == [
        "git_2.34.1-1ubuntu1.18_amd64.deb",
        "tini_0.19.0-1_amd64.deb",
    ]
    assert (dest / "runtime" / "tini_0.19.0-1_amd64.deb").read_bytes() == b"tini package bytes"
    assert not (dest / "runtime" / "tini_0.19.0-1_amd64.deb").is_symlink()
    assert (
        result.stderr.splitlines()[-1]
        == f"verlfit-build: apt packages fetched by sha256 for runtime: 2 from file://{root}"
    )
    # again, with no place at all: the build cache has them
    shutil.rmtree(dest)
    result = script(
        "fetch-apt-packages.sh", str(dest), "runtime", **{**environment, "UBUNTU_ARCHIVES_OVERRIDE": f"file://{empty}"}
    )
    assert result.returncode == 0, result.stderr
    assert (
        result.stderr.splitlines()[-1]
        == "verlfit-build: apt packages fetched by sha256 for runtime: 2 from the build cache"
    )


@needs_apt
def test_fetch_stops_on_a_file_found_nowhere_with_its_sha256_naming_every_place_and_the_fix(tmp_path, pool):
    root, lines = pool
    other = "0" * 64
    lock = write_lock(tmp_path / "apt.lock", lines["git"].replace(lines["git"].split()[1], other), lines["tini"])
    dest = tmp_path / "dest"
    result = script(
        "fetch-apt-packages.sh",
        str(dest),
        "runtime",
        APT_LOCK=str(lock),
        APT_FILES_CACHE=str(tmp_path / "cache"),
        UBUNTU_ARCHIVES_OVERRIDE=f"file://{root} file://{tmp_path}/security",
        UBUNTU_SNAPSHOTS_OVERRIDE=f"file://{tmp_path}/snapshots",
    )
    assert result.returncode == 1
    path = "pool/main/g/git/git_2.34.1-1ubuntu1.18_amd64.deb"
    assert (
        result.stderr.splitlines()[-1]
        == f"verlfit-build: error: git=1:2.34.1-1ubuntu1.18: no place has its file with the lock's sha256 {other}."
        f" Tried: file://{root}/{path} (Hash Sum mismatch); file://{tmp_path}/security/{path} (File not found -"
        f" {tmp_path}/security/{path} (2: No such file or directory));"
        f" file://{tmp_path}/snapshots/20261201T192848Z/{path} (File not found -"
        f" {tmp_path}/snapshots/20261201T192848Z/{path} (2: No such file or directory)); fix: regenerate the lock on"
        " a networked host (make apt-lock), or set APT_MIRROR (CUDA_APT_MIRROR for NVIDIA's) to a mirror that keeps"
        " this file (docs/images.md, 'apt lock')"
    )
    assert not list((tmp_path / "cache").glob("*.partial"))


def test_fetch_plan_tries_the_mirror_first_and_refuses_a_hashless_ubuntu_line(tmp_path):
    lock = write_lock(
        tmp_path / "apt.lock",
        f"tini=0.19.0-1 {'c' * 64} ubuntu pool/universe/t/tini/tini_0.19.0-1_amd64.deb runtime",
        f"cuda-driver-dev-11-8=11.8.89-1 {'d' * 64} cuda cuda-driver-dev-11-8_11.8.89-1_amd64.deb triton",
    )
    result = script(
        "fetch-apt-packages.sh",
        "/apt-packages",
        "runtime",
        "triton",
        dry=True,
        APT_LOCK=str(lock),
        APT_MIRROR="http://mirror.example/ubuntu/",
        CUDA_APT_MIRROR="https://cuda.example/repo",
    )
    assert result.returncode == 0, result.stderr
    helper = (
        "/usr/lib/apt/apt-helper -o Acquire::http::Timeout=30 -o Acquire::https::Timeout=30 -o Acquire::Retries=0 -o"
        " APT::Sandbox::User=root"
    )
    assert [line for line in result.stdout.splitlines() if "apt-helper" in line] == [
        (
            f"+ {helper} download-file http://mirror.example/ubuntu/pool/universe/t/tini/tini_0.19.0-1_amd64.deb"
            f" /var/cache/verlfit-apt/{'c' * 64}.deb SHA256:{'c' * 64}"
        ),
        (
            f"+ {helper} download-file https://cuda.example/repo/cuda-driver-dev-11-8_11.8.89-1_amd64.deb"
            f" /var/cache/verlfit-apt/{'d' * 64}.deb SHA256:{'d' * 64}"
        ),
    ]
    write_lock(lock, "tini=0.19.0-1 signed-index ubuntu pool/universe/t/tini/tini_0.19.0-1_amd64.deb runtime")
    result = script("fetch-apt-packages.sh", "/apt-packages", "runtime", dry=True, APT_LOCK=str(lock))
    assert (result.returncode, result.stderr) == (
        1,
        (
            f"verlfit-build: error: {lock}: tini=0.19.0-1 has no sha256 ('signed-index' is for "
            "NVIDIA's files only): regenerate the lock (make apt-lock)\n"
        ),
    )
    result = script("fetch-apt-packages.sh", "/apt-packages", "build", dry=True, APT_LOCK=str(lock))
    assert (result.returncode, result.stderr) == (
        1,
        f"verlfit-build: error: {lock} has no packages for the apt step 'build' (make apt-lock writes every step's)\n",
    )


def test_install_plan_installs_the_steps_files_and_holds_cudnn(tmp_path):
    lock = write_lock(
        tmp_path / "apt.lock",
        *(
            f"{line} runtime"
            for line in (
                (
                    f"ca-certificates=20261130ubuntu0.22.04.1 {'1' * 64} ubuntu"
                    " pool/main/c/ca-certificates/ca-certificates_20261130ubuntu0.22.04.1_all.deb"
                ),
                GIT,
                f"patch=2.7.6-7build2 {'2' * 64} ubuntu pool/main/p/patch/patch_2.7.6-7build2_amd64.deb",
                (
                    f"python3=3.10.6-1~22.04.1 {'3' * 64} ubuntu"
                    " pool/main/p/python3-defaults/python3_3.10.6-1~22.04.1_amd64.deb"
                ),
                (
                    f"python3.10=3.10.12-1~22.04.18 {'4' * 64} ubuntu"
                    " pool/main/p/python3.10/python3.10_3.10.12-1~22.04.18_amd64.deb"
                ),
                (
                    f"python3.10-venv=3.10.12-1~22.04.18 {'5' * 64} ubuntu"
                    " pool/universe/p/python3.10/python3.10-venv_3.10.12-1~22.04.18_amd64.deb"
                ),
                CUDNN,
                f"tini=0.19.0-1 {'c' * 64} ubuntu pool/universe/t/tini/tini_0.19.0-1_amd64.deb",
            )
        ),
    )
    result = script(
        "install-system.sh",
        "runtime",
        "/apt-packages",
        dry=True,
        APT_LOCK=str(lock),
        APT_LISTS_DIR="/lists",
        **VERSIONS,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        (
            "+ apt-get install -y --no-install-recommends /apt-packages/ca-certificates_20261130ubuntu0.22.04.1_all.deb"
            " /apt-packages/git_2.34.1-1ubuntu1.20_amd64.deb /apt-packages/patch_2.7.6-7build2_amd64.deb"
            " /apt-packages/python3_3.10.6-1~22.04.1_amd64.deb /apt-packages/python3.10_3.10.12-1~22.04.18_amd64.deb"
            " /apt-packages/python3.10-venv_3.10.12-1~22.04.18_amd64.deb"
            " /apt-packages/libcudnn8_8.9.7.29-1+cuda11.8_amd64.deb /apt-packages/tini_0.19.0-1_amd64.deb"
        ),
        "+ apt-mark hold libcudnn8",
        "+ find /lists -mindepth 1 -delete",
    ]
    # a step asking for a package the lock lacks, or a cuDNN at another version: regenerate the lock
    result = script(
        "install-system.sh",
        "runtime",
        "/apt-packages",
        dry=True,
        APT_LOCK=str(lock),
        **{**VERSIONS, "CUDNN_VERSION": "8.9.6.50-1+cuda11.8"},
    )
    assert (result.returncode, result.stderr) == (
        1,
        (
            "verlfit-build: error: the apt step 'runtime' asks for libcudnn8=8.9.6.50-1+cuda11.8 (locked: "
            f"8.9.7.29-1+cuda11.8), which {lock} does not pin at that version: regenerate the lock "
            "(make apt-lock; docs/images.md, 'apt lock')\n"
        ),
    )
    result = script("install-system.sh", "gpu", "/apt-packages", dry=True, APT_LOCK=str(lock), **VERSIONS)
    assert (result.returncode, result.stderr) == (
        1,
        "verlfit-build: error: unknown apt step 'gpu' (build, runtime, triton)\n",
    )


def test_make_apt_lock_resolves_on_the_pinned_bases_through_the_proxy_in_both_cases(tmp_path, fake_docker):
    """make apt-lock: the bases by digest (the Dockerfiles' pins), the versions from their ARGs, and a proxy given in
    one case reaching the containers in both (apt reads only the lower-case names)."""
    docker, log = fake_docker
    for name in (
        "Makefile",
        "Dockerfile.p40",
        "Dockerfile.a10",
        "docker/apt-lock.sh",
        "docker/apt-resolve.sh",
        "docker/lib.sh",
    ):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(REPO / name, tmp_path / name)
    environment = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "FAKE_BUILD": f"# ubuntu archive: 20261201T192848Z\\n{GIT} build\\n",
        "FAKE_RUNTIME": f"{GIT} runtime\\n{CUDNN} runtime\\n",
    }
    result = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "apt-lock",
            f"DOCKER={docker}",
            "HTTPS_PROXY=http://u:p$w0rd@proxy.example:3128",
        ],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    calls = log.read_text().splitlines()
    devel = (
        "docker.io/nvidia/cuda:11.8.0-devel-ubuntu22.04"
        "@sha256:94fd755736cb58979173d491504f0b573247b1745250249415b07fefc738e41f"
    )
    base = (
        "docker.io/nvidia/cuda:11.8.0-base-ubuntu22.04"
        "@sha256:f895871972c1c91eb6a896eee68468f40289395a1e58c492e1be7929d0f8703b"
    )
    assert [call.split("--entrypoint /opt/verlfit/docker/apt-resolve.sh ")[1] for call in calls] == [
        f"{devel} build",
        f"{base} runtime triton",
    ]
    for call in calls:
        assert (
            "-e https_proxy=http://u:p$w0rd@proxy.example:3128 -e HTTPS_PROXY=http://u:p$w0rd@proxy.example:3128"
            in call
        )
        assert "-e PYTHON_VERSION=3.10 -e CUDNN_VERSION=8.9.7.29-1+cuda11.8 -e TORCH_CUDA_VERSION=11.8" in call
    assert lock_lines((tmp_path / "docker" / "apt.lock").read_text()) == [
        (GIT + " build,runtime").split(),
        (CUDNN + " runtime").split(),
    ]
