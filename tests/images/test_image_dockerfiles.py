"""Dockerfile.p40 and Dockerfile.a10, parsed with dockerfile-parse and checked without an engine:
parameterised FROMs, version ARGs equal to the locks, one verl commit and patch series, nothing
GPU-only in the P40 image, no mirror in ENV or in the runtime stage, the exact P40/A10 difference,
user, entrypoint, labels, cache mounts and the build context."""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from verlfit.readiness import IMAGE_DRIVER_REQUIREMENT

from image_helpers import (
    DOCKERFILES,
    LOCKS,
    P40_LOCKS,
    REPO,
    VERL_COMMIT,
    dockerignore_excludes,
    dockerignore_patterns,
    lock_pins,
    parse_dockerfile,
    resolved_args,
    shell_expand,
)

PROFILES = ("p40", "a10")
STAGES = [
    ("apt-packages", "${BASE_REGISTRY}${BASE_IMAGE}:${BUILD_BASE_TAG}${BUILD_BASE_DIGEST:+@${BUILD_BASE_DIGEST}}"),
    ("build", "${BASE_REGISTRY}${BASE_IMAGE}:${BUILD_BASE_TAG}${BUILD_BASE_DIGEST:+@${BUILD_BASE_DIGEST}}"),
    ("wheels", "build"),
    ("wheelhouse-files", "build"),
    ("wheelhouse", "scratch"),
    ("verl-source", "build"),
    (
        "runtime-system",
        "${BASE_REGISTRY}${BASE_IMAGE}:${RUNTIME_BASE_TAG}${RUNTIME_BASE_DIGEST:+@${RUNTIME_BASE_DIGEST}}",
    ),
    ("runtime", "runtime-system"),
]
# the A10 image's runtime: the P40 image's layers first (runtime-python repeats the P40 runtime stage's first steps
# instruction for instruction, so one builder builds them once), then Triton's apt step in a stage of its own
A10_STAGES = [
    *STAGES[:-1],
    ("runtime-python", "runtime-system"),
    ("runtime-triton", "runtime-python"),
    ("runtime", "runtime-triton"),
]


def runtime_stages(dockerfile):
    """The stages the runtime image is built in after runtime-system (p40: runtime; a10: runtime-python,
    runtime-triton, runtime)."""
    names = [stage.name for stage in dockerfile.stages]
    return [
        stage
        for stage in dockerfile.stages
        if stage.name.startswith("runtime")
        and stage.name != "runtime-system"
        and names.index(stage.name) > names.index("runtime-system")
    ]


# version ARG -> (package in the locks, value)
VERSION_ARGS = {
    "TORCH_VERSION": ("torch", "2.6.0+cu118"),
    "TRANSFORMERS_VERSION": ("transformers", "4.51.3"),
    "TENSORDICT_VERSION": ("tensordict", "0.6.2"),
    "RAY_VERSION": ("ray", "2.46.0"),
    "DATASETS_VERSION": ("datasets", "3.6.0"),
    "PYARROW_VERSION": ("pyarrow", "20.0.0"),
    "HYDRA_CORE_VERSION": ("hydra-core", "1.3.2"),
}
# the A10 image's torch-index builds: vLLM 0.8.5 requires them (the P40 image has no torchvision or torchaudio)
A10_VERSION_ARGS = {
    "TORCHVISION_VERSION": ("torchvision", "0.21.0+cu118"),
    "TORCHAUDIO_VERSION": ("torchaudio", "2.6.0+cu118"),
    "XFORMERS_VERSION": ("xformers", "0.0.29.post2"),
}
# the A10 image's wheels whose sha256 no project publishes: build args with no default (docs/images.md, "A10 wheels")
A10_HASH_ARGS = (
    "TORCHVISION_WHEEL_SHA256",
    "TORCHAUDIO_WHEEL_SHA256",
    "XFORMERS_WHEEL_SHA256",
    "VLLM_WHEEL_SHA256",
    "FLASH_ATTN_WHEEL_SHA256",
)
SOURCE_ARGS = (
    "BASE_REGISTRY",
    "BASE_IMAGE",
    "BUILD_BASE_TAG",
    "BUILD_BASE_DIGEST",
    "RUNTIME_BASE_TAG",
    "RUNTIME_BASE_DIGEST",
    "APT_MIRROR",
    "CUDA_APT_MIRROR",
    "PIP_INDEX_URL",
    "TORCH_INDEX_URL",
    "VERL_REPO",
)
GPU_ONLY = ("vllm", "flash-attn", "liger-kernel", "xformers")
# the bases' multi-platform index digests (each seen in independent public files: docs/images.md names them)
DEVEL_DIGEST = "sha256:94fd755736cb58979173d491504f0b573247b1745250249415b07fefc738e41f"
RUNTIME_DIGEST = "sha256:f895871972c1c91eb6a896eee68468f40289395a1e58c492e1be7929d0f8703b"

# Every instruction line (comments aside) in which the two files differ: the GPU difference.
P40_ONLY = [
    "    /opt/verlfit/docker/fetch-apt-packages.sh /apt-packages build runtime",
    "      /opt/verlfit/locks/torch-deps.lock /opt/verlfit/locks/common.lock",
    "FROM runtime-system AS runtime",
    (
        " && python /opt/verlfit/docker/wheel-hashes.py constraints /opt/verlfit/docker/torch-cu118.lock"
        " >/opt/verlfit/constraints.txt"
    ),
    "ENV VERLFIT_PROFILE=p40 \\",
    '      --python "${PYTHON_VERSION}" --cuda "${TORCH_CUDA_VERSION}" --arch sm_60 --cudnn "${CUDNN_VERSION}" \\',
    "      --absent vllm --absent flash-attn --absent liger-kernel --absent xformers --absent apex \\",
    "      --absent torchvision --absent torchaudio \\",
    "      --verlfit p40 --pip-check",
    'LABEL org.opencontainers.image.title="verlfit-p40" \\',
    (
        '      org.opencontainers.image.description="verl 0.4.1 PPO/GRPO for the Tesla P40 (compute capability 6.1):'
        ' fp32, SDPA attention, HF rollout" \\'
    ),
    '      io.verlfit.profile="p40" \\',
    '      io.verlfit.gpu-arch="sm_60" \\',
    '      io.verlfit.verl-commit="${VERL_COMMIT}"',
]
A10_ONLY = [
    "ARG TORCHVISION_VERSION=0.21.0+cu118",
    "ARG TORCHAUDIO_VERSION=2.6.0+cu118",
    "ARG XFORMERS_VERSION=0.0.29.post2",
    "ARG VLLM_VERSION=0.8.5",
    "ARG FLASH_ATTN_VERSION=2.7.3",
    "ARG TORCHVISION_WHEEL_SHA256=",
    "ARG TORCHAUDIO_WHEEL_SHA256=",
    "ARG XFORMERS_WHEEL_SHA256=",
    (
        "ARG VLLM_WHEEL_URL=https://github.com/vllm-project/vllm/releases/download/v${VLLM_VERSION}/vllm-${VLLM_VERSION}+cu118-cp38-abi3-manylinux1_x86_64.whl"
    ),
    "ARG VLLM_WHEEL_SHA256=",
    (
        "ARG FLASH_ATTN_WHEEL_URL=https://github.com/Dao-AILab/flash-attention/releases/download/v${FLASH_ATTN_VERSION}/flash_attn-${FLASH_ATTN_VERSION}+cu11torch2.6cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"
    ),
    "ARG FLASH_ATTN_WHEEL_SHA256=",
    "    /opt/verlfit/docker/fetch-apt-packages.sh /apt-packages build runtime triton",
    "ARG TORCHVISION_WHEEL_SHA256",
    "ARG TORCHAUDIO_WHEEL_SHA256",
    "ARG XFORMERS_WHEEL_SHA256",
    "ARG VLLM_WHEEL_URL",
    "ARG VLLM_WHEEL_SHA256",
    "ARG FLASH_ATTN_WHEEL_URL",
    "ARG FLASH_ATTN_WHEEL_SHA256",
    "COPY docker/fetch-wheel.sh /opt/verlfit/docker/",
    "RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \\",
    "    --mount=type=secret,id=netrc,target=/root/.netrc \\",
    "    --mount=type=secret,id=ca-bundle \\",
    "    --mount=type=bind,source=docker/a10-cu118.lock,target=/opt/verlfit/docker/a10-cu118.lock \\",
    "    --mount=type=bind,source=docker/a10-extra.lock,target=/opt/verlfit/docker/a10-extra.lock \\",
    (
        "    /opt/verlfit/docker/download-locked.sh /wheels/a10 /opt/verlfit/docker/a10-cu118.lock"
        " /opt/verlfit/docker/a10-extra.lock \\"
    ),
    ' && /opt/verlfit/docker/fetch-wheel.sh /wheels/a10 "${VLLM_WHEEL_URL}" "${VLLM_WHEEL_SHA256}" \\',
    ' && /opt/verlfit/docker/fetch-wheel.sh /wheels/a10 "${FLASH_ATTN_WHEEL_URL}" "${FLASH_ATTN_WHEEL_SHA256}"',
    "ARG TORCHVISION_WHEEL_SHA256",
    "ARG TORCHAUDIO_WHEEL_SHA256",
    "ARG XFORMERS_WHEEL_SHA256",
    "      /opt/verlfit/locks/torch-deps.lock /opt/verlfit/locks/common.lock \\",
    "      /opt/verlfit/locks/a10-cu118.lock /opt/verlfit/locks/a10-extra.lock",
    "FROM runtime-system AS runtime-python",
    "",
    "FROM runtime-python AS runtime-triton",
    "ARG PYTHON_VERSION",
    "ARG TORCH_CUDA_VERSION",
    "RUN --mount=type=bind,from=apt-packages,source=/apt-packages/triton,target=/apt-packages \\",
    "    /opt/verlfit/docker/install-system.sh triton /apt-packages",
    "",
    "FROM runtime-triton AS runtime",
    "ARG PYTHON_VERSION",
    "ENV LIBRARY_PATH=/usr/local/cuda/lib64/stubs",
    "RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \\",
    "    --mount=type=bind,from=wheels,source=/wheels/a10,target=/wheels/a10 \\",
    "    /opt/verlfit/docker/install-wheels.sh /wheels/a10",
    (
        " && python /opt/verlfit/docker/wheel-hashes.py constraints /opt/verlfit/docker/torch-cu118.lock"
        " /opt/verlfit/docker/a10-cu118.lock >/opt/verlfit/constraints.txt"
    ),
    "ENV VERLFIT_PROFILE=a10 \\",
    "ARG TORCHVISION_VERSION",
    "ARG TORCHAUDIO_VERSION",
    "ARG XFORMERS_VERSION",
    "ARG VLLM_VERSION",
    "ARG FLASH_ATTN_VERSION",
    '      --python "${PYTHON_VERSION}" --cuda "${TORCH_CUDA_VERSION}" --arch sm_86 --cudnn "${CUDNN_VERSION}" \\',
    "      --lock /opt/verlfit/docker/a10-cu118.lock --lock /opt/verlfit/docker/a10-extra.lock \\",
    '      --expect "torchvision==${TORCHVISION_VERSION}" --expect "torchaudio==${TORCHAUDIO_VERSION}" \\',
    '      --expect "xformers==${XFORMERS_VERSION}" --expect "vllm==${VLLM_VERSION}+cu118" \\',
    '      --expect "flash-attn==${FLASH_ATTN_VERSION}" --xformers-cuda 1108 \\',
    "      --absent liger-kernel --absent apex \\",
    "      --import vllm --import flash_attn --import verl.workers.rollout.vllm_rollout \\",
    "      --extension flash_attn_2_cuda \\",
    "      --verlfit a10 --pip-check",
    'LABEL org.opencontainers.image.title="verlfit-a10" \\',
    (
        '      org.opencontainers.image.description="verl 0.4.1 PPO/GRPO for the A10 and L4 (compute capability'
        ' 8.6/8.9): bf16, FlashAttention-2, vLLM rollout" \\'
    ),
    '      io.verlfit.profile="a10" \\',
    '      io.verlfit.gpu-arch="sm_86" \\',
    '      io.verlfit.verl-commit="${VERL_COMMIT}" \\',
    '      io.verlfit.torchvision="${TORCHVISION_VERSION}" \\',
    '      io.verlfit.torchaudio="${TORCHAUDIO_VERSION}" \\',
    '      io.verlfit.xformers="${XFORMERS_VERSION}" \\',
    '      io.verlfit.vllm="${VLLM_VERSION}+cu118" \\',
    '      io.verlfit.flash-attn="${FLASH_ATTN_VERSION}"',
]


@pytest.fixture(scope="module", params=PROFILES)
def profile(request):
    return request.param


@pytest.fixture(scope="module")
def dockerfiles():
    return {name: parse_dockerfile(path) for name, path in DOCKERFILES.items()}


def check_options(dockerfile):
    """The options of the build-time check RUN (docker/check-image.py) as (option, value) pairs."""
    run = next(run for run in dockerfile.stage("runtime").all("RUN") if "check-image.py" in run.value)
    words = shlex.split(run.value)
    words = words[words.index("/opt/verlfit/docker/check-image.py") + 1 :]
    pairs = []
    while words:
        option = words.pop(0)
        value = words.pop(0) if words and not words[0].startswith("--") else None
        pairs.append((option, value))
    return pairs


def test_stages_are_role_named_and_every_from_is_parameterised(dockerfiles, profile):
    assert [(stage.name, stage.base) for stage in dockerfiles[profile].stages] == (
        STAGES if profile == "p40" else A10_STAGES
    )


def test_from_lines_expand_to_the_cuda_images_a_mirror_and_a_digest(dockerfiles, profile):
    dockerfile = dockerfiles[profile]
    build, runtime = dockerfile.stage("build").base, dockerfile.stage("runtime-system").base
    defaults = resolved_args(dockerfile)
    # pinned by default: the multi-platform index digests (docs/images.md, "Base image digests")
    assert shell_expand(build, defaults) == f"docker.io/nvidia/cuda:11.8.0-devel-ubuntu22.04@{DEVEL_DIGEST}"
    assert shell_expand(runtime, defaults) == f"docker.io/nvidia/cuda:11.8.0-base-ubuntu22.04@{RUNTIME_DIGEST}"
    # emptied (bases loaded by make load carry no registry digest): the tags
    by_tag = resolved_args(dockerfile, {"BUILD_BASE_DIGEST": "", "RUNTIME_BASE_DIGEST": ""})
    assert shell_expand(build, by_tag) == "docker.io/nvidia/cuda:11.8.0-devel-ubuntu22.04"
    assert shell_expand(runtime, by_tag) == "docker.io/nvidia/cuda:11.8.0-base-ubuntu22.04"
    digest = "sha256:" + "0" * 64
    mirrored = resolved_args(
        dockerfile, {"BASE_REGISTRY": "mirror.example.com/dockerhub/", "RUNTIME_BASE_DIGEST": digest}
    )
    assert (
        shell_expand(build, mirrored)
        == f"mirror.example.com/dockerhub/nvidia/cuda:11.8.0-devel-ubuntu22.04@{DEVEL_DIGEST}"
    )
    assert (
        shell_expand(runtime, mirrored) == f"mirror.example.com/dockerhub/nvidia/cuda:11.8.0-base-ubuntu22.04@{digest}"
    )


def test_source_args_default_to_upstream(dockerfiles, profile):
    args = resolved_args(dockerfiles[profile])
    assert {name: args[name] for name in SOURCE_ARGS} == {
        "BASE_REGISTRY": "docker.io/",
        "BASE_IMAGE": "nvidia/cuda",
        "BUILD_BASE_TAG": "11.8.0-devel-ubuntu22.04",
        "BUILD_BASE_DIGEST": DEVEL_DIGEST,
        "RUNTIME_BASE_TAG": "11.8.0-base-ubuntu22.04",
        "RUNTIME_BASE_DIGEST": RUNTIME_DIGEST,
        "APT_MIRROR": "",
        "CUDA_APT_MIRROR": "",
        "PIP_INDEX_URL": "https://pypi.org/simple",
        "TORCH_INDEX_URL": "https://download.pytorch.org/whl/cu118",
        "VERL_REPO": "https://github.com/volcengine/verl.git",
    }


def test_system_versions(dockerfiles, profile):
    args = resolved_args(dockerfiles[profile])
    assert (args["TORCH_CUDA_VERSION"], args["CUDNN_VERSION"], args["PYTHON_VERSION"]) == (
        "11.8",
        "8.9.7.29-1+cuda11.8",
        "3.10",
    )
    assert "CUDA_VERSION" not in args  # the nvidia/cuda images' ENV CUDA_VERSION=11.8.0 would win over such an ARG


def test_version_args_equal_the_lock_pins(dockerfiles, profile):
    args = resolved_args(dockerfiles[profile])
    locks = lock_pins(*(LOCKS if profile == "a10" else P40_LOCKS))
    expected = {**VERSION_ARGS, **(A10_VERSION_ARGS if profile == "a10" else {})}
    for name, (package, version) in expected.items():
        assert args[name] == version, name
        assert locks[package] == version, package


def test_a10_wheel_urls_and_versions(dockerfiles):
    args = resolved_args(dockerfiles["a10"])
    assert (args["VLLM_VERSION"], args["FLASH_ATTN_VERSION"]) == ("0.8.5", "2.7.3")
    assert (
        args["VLLM_WHEEL_URL"]
        == "https://github.com/vllm-project/vllm/releases/download/v0.8.5/vllm-0.8.5+cu118-cp38-abi3-manylinux1_x86_64.whl"
    )
    assert (
        args["FLASH_ATTN_WHEEL_URL"] == "https://github.com/Dao-AILab/flash-attention/releases/download/v2.7.3/"
        "flash_attn-2.7.3+cu11torch2.6cxx11abiFALSE-cp310-cp310-linux_x86_64.whl"
    )
    # no trust on first use: the sha256 args have no default; fetch-wheel.sh refuses an empty one, and
    # download-locked.sh (wheel-hashes.py hashed) the torch index's three
    assert {name: args[name] for name in A10_HASH_ARGS} == {name: "" for name in A10_HASH_ARGS}
    # the wheels stage's a10 step and the wheelhouse see the torch index's three (a RUN gets its stage's ARGs as
    # environment)
    for stage in ("wheels", "wheelhouse-files"):
        assert set(A10_HASH_ARGS[:3]) <= set(dockerfiles["a10"].stage(stage).args()), stage


def test_build_check_compares_every_version_arg_and_lock(dockerfiles, profile):
    options = check_options(dockerfiles[profile])
    expects = sorted(value for option, value in options if option == "--expect")
    names = {**VERSION_ARGS, **(A10_VERSION_ARGS if profile == "a10" else {})}
    wanted = [f"{package}==${{{name}}}" for name, (package, _) in names.items()] + ["verl==${VERL_VERSION}"]
    if profile == "a10":
        wanted += ["vllm==${VLLM_VERSION}+cu118", "flash-attn==${FLASH_ATTN_VERSION}"]
    assert expects == sorted(wanted)
    locks = [value for option, value in options if option == "--lock"]
    assert locks == [f"/opt/verlfit/docker/{name}" for name in (LOCKS if profile == "a10" else P40_LOCKS)]
    assert ("--cuda", "${TORCH_CUDA_VERSION}") in options and ("--python", "${PYTHON_VERSION}") in options
    assert ("--cudnn", "${CUDNN_VERSION}") in options and ("--pip-check", None) in options
    assert ("--verl-dir", "/opt/verl") in options and ("--patches-dir", "/opt/verlfit/patches") in options
    assert ("--verlfit", profile) in options


def test_arch_checked_is_the_one_torch_cu118_carries(dockerfiles):
    # torch 2.6.0+cu118 has sm_60 (runs on the P40's 6.1; there is no sm_61 entry) and sm_86
    assert ("--arch", "sm_60") in check_options(dockerfiles["p40"])
    assert ("--arch", "sm_86") in check_options(dockerfiles["a10"])


def test_same_verl_commit_and_patch_series(dockerfiles, profile):
    dockerfile = dockerfiles[profile]
    assert resolved_args(dockerfile)["VERL_COMMIT"] == VERL_COMMIT
    assert resolved_args(dockerfile)["VERL_VERSION"] == "0.4.1"
    source = dockerfile.stage("verl-source")
    assert [run.command() for run in source.all("RUN")] == [
        "/opt/verlfit/docker/install-verl.sh fetch /opt/verl",
        "PATCHES_DIR=/opt/verlfit/patches /opt/verlfit/docker/install-verl.sh patch /opt/verl",
    ]
    assert "patches/ /opt/verlfit/patches/" in [copy.value for copy in source.all("COPY")]
    runtime = dockerfile.stage("runtime")
    assert "--from=verl-source /opt/verl /opt/verl" in [copy.value for copy in runtime.all("COPY")]
    assert "patches/ /opt/verlfit/patches/" in [copy.value for copy in runtime.all("COPY")]
    series = (REPO / "patches" / "verl-0.4.1" / "series").read_text().split()
    patches = [line for line in series if line.endswith(".patch")]
    assert patches and all((REPO / "patches" / "verl-0.4.1" / name).is_file() for name in patches)


def test_verl_commit_matches_the_package(dockerfiles):
    import verlfit

    assert resolved_args(dockerfiles["p40"])["VERL_VERSION"] == verlfit.VERL_VERSION == "0.4.1"


def test_p40_installs_no_vllm_flash_attn_liger_or_xformers(dockerfiles):
    text = DOCKERFILES["p40"].read_text()
    for word in (
        "a10-cu118.lock",
        "a10-extra.lock",
        "fetch-wheel.sh",
        "/wheels/a10",
        "WHEEL_SHA256",
        "TORCHVISION",
        "TORCHAUDIO",
    ):
        assert word not in text
    pins = lock_pins(*P40_LOCKS)
    assert [name for name in GPU_ONLY if name in pins] == []
    absent = [value for option, value in check_options(dockerfiles["p40"]) if option == "--absent"]
    assert absent == ["vllm", "flash-attn", "liger-kernel", "xformers", "apex", "torchvision", "torchaudio"]
    assert [value for option, value in check_options(dockerfiles["a10"]) if option == "--absent"] == [
        "liger-kernel",
        "apex",
    ]


def test_dockerfiles_name_no_frontend_image(profile):
    """Issue 24: a `# syntax=` line makes BuildKit pull a frontend image from the public Docker registry before
    anything else, so nothing builds without that registry; the engine's own frontend parses these files (the
    rehearsal build, tests/images/rehearsal, shows it). No parser directive of any kind, then."""
    lines = DOCKERFILES[profile].read_text().splitlines()
    assert not any(re.match(r"#\s*(syntax|escape|check)\s*=", line, re.IGNORECASE) for line in lines)


def test_a10_check_loads_flash_attns_compiled_extension(dockerfiles):
    # `import flash_attn` alone can pass with an extension that does not link against this torch
    options = check_options(dockerfiles["a10"])
    assert ("--extension", "flash_attn_2_cuda") in options
    assert [value for option, value in check_options(dockerfiles["p40"]) if option == "--extension"] == []


def test_dockerfiles_differ_only_in_gpu_lines():
    p40 = DOCKERFILES["p40"].read_text().splitlines()
    a10 = DOCKERFILES["a10"].read_text().splitlines()
    diff = list(difflib.unified_diff(p40, a10, n=0, lineterm=""))
    removed = [line[1:] for line in diff if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in diff if line.startswith("+") and not line.startswith("+++")]
    assert [line for line in removed if not line.lstrip().startswith("#")] == P40_ONLY
    assert [line for line in added if not line.lstrip().startswith("#")] == A10_ONLY


def test_no_env_carries_an_index_mirror_proxy_or_secret(dockerfiles, profile):
    for env in dockerfiles[profile].instructions("ENV"):
        for key, value in env.pairs().items():
            assert not re.search(r"INDEX|MIRROR|PROXY|TOKEN|PASSWORD|SECRET|NETRC|REPO", key, re.IGNORECASE), key
            assert "://" not in value and "@" not in value, (key, value)


def test_package_sources_stay_in_the_build_stages(dockerfiles, profile):
    dockerfile = dockerfiles[profile]
    runtime_args = set(dockerfile.stage("runtime").args())
    # the apt mirrors reach only the apt-packages stage, which fetches the lock's files by sha256; the stages that
    # install
    # them take the files from it (a bind mount) with no source at all, so no mirror shows in the image's history
    fetch = dockerfile.stage("apt-packages")
    assert set(fetch.args()) & set(SOURCE_ARGS) == {"APT_MIRROR", "CUDA_APT_MIRROR"}
    steps = ["build", "runtime", "triton"] if profile == "a10" else ["build", "runtime"]
    assert [run.value.split()[-len(steps) - 2 :] for run in fetch.all("RUN")] == [
        ["/opt/verlfit/docker/fetch-apt-packages.sh", "/apt-packages", *steps]
    ]
    installs = {"build": "build", "runtime-system": "runtime", "runtime-triton": "triton"}
    for stage_name, step in installs.items():
        if stage_name == "runtime-triton" and profile == "p40":
            continue
        stage = dockerfile.stage(stage_name)
        assert set(stage.args()) & {"APT_MIRROR", "CUDA_APT_MIRROR"} == set(), stage_name
        apt_runs = [run for run in stage.all("RUN") if "install-system.sh" in run.value]
        assert [run.value.split()[-3:] for run in apt_runs] == [
            ["/opt/verlfit/docker/install-system.sh", step, "/apt-packages"]
        ]
        assert apt_runs[0].mounts() == [
            {"type": "bind", "from": "apt-packages", "source": f"/apt-packages/{step}", "target": "/apt-packages"}
        ]
    if profile == "a10":
        assert set(dockerfile.stage("runtime-python").args()) & set(SOURCE_ARGS) == set()
    assert runtime_args & set(SOURCE_ARGS) == {"BASE_REGISTRY", "BASE_IMAGE", "RUNTIME_BASE_TAG", "RUNTIME_BASE_DIGEST"}
    label_only = {"BASE_REGISTRY", "BASE_IMAGE", "RUNTIME_BASE_TAG", "RUNTIME_BASE_DIGEST"}
    for run in dockerfile.stage("runtime").all("RUN"):
        assert not any(f"${{{name}" in run.value for name in label_only)
        assert "--index-url" not in run.value and "http" not in run.value
    for name in ("PIP_INDEX_URL", "TORCH_INDEX_URL"):
        # the wheelhouse stage downloads what the wheels stage does, from the same indexes (make wheelhouse)
        assert [stage.name for stage in dockerfile.stages if name in stage.args()] == (
            ["build", "wheels", "wheelhouse-files"] if name == "PIP_INDEX_URL" else ["wheels", "wheelhouse-files"]
        )
    assert [stage.name for stage in dockerfile.stages if "VERL_REPO" in stage.args()] == ["verl-source"]


def test_runtime_user_entrypoint_and_environment(dockerfiles, profile):
    dockerfile = dockerfiles[profile]
    args = resolved_args(dockerfile)
    # the same user for everyone who builds it: no build arg sets it (compose maps the runtime user)
    assert "VERLFIT_UID" not in args and "VERLFIT_GID" not in args
    runtime = dockerfile.stage("runtime")
    assert runtime.all("USER")[-1].value == "1000:1000"
    assert [item.value for item in runtime.all("WORKDIR")] == ["/workspace"]
    # tini is PID 1; docker stop's SIGTERM (the default stop signal) reaches verlfit, which handles it like Ctrl-C
    # -g: to verlfit's whole process group, as a terminal's Ctrl-C, so verlfit bench's train run gets it too
    assert (
        runtime.all("ENTRYPOINT")[-1].value == '["/usr/bin/tini", "-g", "--", "/opt/verlfit/entrypoint/entrypoint.sh"]'
    )
    assert runtime.all("CMD")[-1].value == '["train"]'
    assert runtime.all("STOPSIGNAL") == []
    environment = {}
    for stage in runtime_stages(dockerfile):
        for env in stage.all("ENV"):
            environment.update(env.pairs())
    constraint = "/opt/verlfit/constraints.txt"  # written from the torch index's locks, without their hashes
    expected = {
        "VIRTUAL_ENV": "/opt/venv",
        "PATH": "/opt/venv/bin:$PATH",
        "PYTHONUNBUFFERED": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "VERLFIT_PROFILE": profile,
        "HOME": "/home/verlfit",
        "LOGNAME": "verlfit",
        "USER": "verlfit",
        "HF_HOME": "/cache/huggingface",
        "PIP_CONSTRAINT": constraint,
        # verlfit doctor compares the installed verl with the image's own patch series (issue 24: it WARNed)
        "VERLFIT_PATCHES_DIR": "/opt/verlfit/patches",
        # the drivers the container toolkit starts the image on: those verlfit doctor does not FAIL
        # (tests/cli/test_doctor.py
        # evaluates both rules side by side); the base's own value refused a Tesla on R510/R515, where doctor WARNs
        "NVIDIA_REQUIRE_CUDA": "cuda>=11.8 driver>=450.80.2",
    }
    assert expected["NVIDIA_REQUIRE_CUDA"] == IMAGE_DRIVER_REQUIREMENT
    if profile == "a10":
        expected["LIBRARY_PATH"] = "/usr/local/cuda/lib64/stubs"  # Triton's -lcuda links against CUDA's stub
    assert environment == expected
    user_run = next(run for run in runtime.all("RUN") if "useradd" in run.value)
    assert "useradd --no-log-init --uid 1000 --gid 1000" in user_run.value
    locks = "/opt/verlfit/docker/torch-cu118.lock" + (" /opt/verlfit/docker/a10-cu118.lock" if profile == "a10" else "")
    assert (
        f"python /opt/verlfit/docker/wheel-hashes.py constraints {locks} >/opt/verlfit/constraints.txt"
        in user_run.value
    )
    assert "chmod 1777 /home/verlfit /workspace /cache/huggingface" in user_run.value
    # no empty mount-point folders left in the image (compose mounts ./data and ./runs; verlfit creates them otherwise)
    assert "/workspace/data" not in user_run.value and "/workspace/runs" not in user_run.value


def test_labels_record_profile_and_pins(dockerfiles, profile):
    dockerfile = dockerfiles[profile]
    labels = dockerfile.stage("runtime").all("LABEL")[-1].pairs()
    provenance = {
        "VCS_REF": "abc123",
        "IMAGE_SOURCE": "https://git.example.com/verlfit.git",
        "IMAGE_CREATED": "2025-12-02T00:00:00Z",
        "VERLFIT_VERSION": "0.1.0",
    }
    values = {key: shell_expand(value, resolved_args(dockerfile, provenance)) for key, value in labels.items()}
    expected = {
        "org.opencontainers.image.title": f"verlfit-{profile}",
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.revision": "abc123",
        "org.opencontainers.image.source": "https://git.example.com/verlfit.git",
        "org.opencontainers.image.created": "2025-12-02T00:00:00Z",
        "org.opencontainers.image.version": "0.1.0",
        "org.opencontainers.image.base.name": "docker.io/nvidia/cuda:11.8.0-base-ubuntu22.04",
        "org.opencontainers.image.base.digest": RUNTIME_DIGEST,
        "io.verlfit.profile": profile,
        "io.verlfit.gpu-arch": "sm_60" if profile == "p40" else "sm_86",
        "io.verlfit.cuda": "11.8",
        "io.verlfit.cudnn": "8.9.7.29-1+cuda11.8",
        "io.verlfit.python": "3.10",
        "io.verlfit.torch": "2.6.0+cu118",
        "io.verlfit.transformers": "4.51.3",
        "io.verlfit.tensordict": "0.6.2",
        "io.verlfit.ray": "2.46.0",
        "io.verlfit.datasets": "3.6.0",
        "io.verlfit.pyarrow": "20.0.0",
        "io.verlfit.hydra-core": "1.3.2",
        "io.verlfit.verl": "0.4.1",
        "io.verlfit.verl-commit": VERL_COMMIT,
    }
    if profile == "a10":
        expected.update(
            {
                "io.verlfit.torchvision": "0.21.0+cu118",
                "io.verlfit.torchaudio": "2.6.0+cu118",
                "io.verlfit.xformers": "0.0.29.post2",
                "io.verlfit.vllm": "0.8.5+cu118",
                "io.verlfit.flash-attn": "2.7.3",
            }
        )
    values.pop("org.opencontainers.image.description")
    assert values == expected
    # every ARG a label uses is declared in the runtime stage (global ARGs are not visible there otherwise)
    used = set(re.findall(r"\$\{(\w+)", " ".join(labels.values())))
    assert used <= set(dockerfile.stage("runtime").args())


def test_every_arg_used_in_a_stage_is_declared_there(dockerfiles, profile):
    dockerfile = dockerfiles[profile]
    for stage in dockerfile.stages:
        declared = set(stage.args())
        for instruction in stage.instructions:
            if instruction.keyword in ("RUN", "LABEL", "USER"):
                used = set(re.findall(r"\$\{(\w+)", instruction.value)) - {"PATH"}
                assert used <= declared, (stage.name, instruction.line, used - declared)


def test_pip_runs_have_cache_mounts_and_network_runs_the_netrc_secret(dockerfiles, profile):
    network_scripts = ("download-locked.sh", "fetch-wheel.sh", "install-verl.sh fetch")
    for stage in dockerfiles[profile].stages:
        for run in stage.all("RUN"):
            mounts = run.mounts()
            pip = any(
                script in run.value
                for script in ("install-python.sh", "download-locked.sh", "install-wheels.sh", "install-project.sh")
            )
            if pip:
                assert {"type": "cache", "target": "/root/.cache/pip", "sharing": "locked"} in mounts, run.line
            if any(script in run.value for script in network_scripts) or (
                stage.name == "build" and "install-python.sh" in run.value
            ):
                assert {"type": "secret", "id": "netrc", "target": "/root/.netrc"} in mounts, run.line
                # a private or intercepting TLS certificate authority (issue 24): trusted where the network is used
                assert {"type": "secret", "id": "ca-bundle"} in mounts, run.line
            if "fetch-apt-packages.sh" in run.value:
                assert {"type": "secret", "id": "ca-bundle"} in mounts, run.line
                assert {"type": "cache", "target": "/var/cache/verlfit-apt", "sharing": "locked"} in mounts, run.line
            if "install-system.sh" in run.value:
                # no network: the files come from the apt-packages stage
                assert not any(mount["type"] == "secret" for mount in mounts), run.line


def test_every_stage_sets_pipefail_shell(dockerfiles, profile):
    names = [stage.name for stage in dockerfiles[profile].stages]
    for stage in dockerfiles[profile].stages:
        if stage.base in names or stage.base == "scratch":
            continue  # inherits its parent stage's SHELL, or runs nothing (the wheelhouse's export)
        assert stage.all("SHELL")[0].value == '["/bin/bash", "-o", "pipefail", "-c"]'


def test_copied_and_mounted_files_exist_and_are_in_the_build_context(dockerfiles, profile):
    patterns = dockerignore_patterns()
    sources = []
    for copy in dockerfiles[profile].instructions("COPY"):
        words = copy.value.split()
        if words[0].startswith("--from="):
            continue
        sources += words[:-1]
    for run in dockerfiles[profile].instructions("RUN"):
        sources += [mount["source"] for mount in run.mounts() if mount["type"] == "bind" and "from" not in mount]
    assert sources
    for source in sources:
        assert (REPO / source).exists(), source
        assert not dockerignore_excludes(source.rstrip("/"), patterns), source


def test_scripts_the_dockerfiles_run_are_executable(dockerfiles, profile):
    scripts = set(re.findall(r"/opt/verlfit/docker/([\w.-]+\.(?:sh|py))", DOCKERFILES[profile].read_text()))
    assert scripts >= {
        "fetch-apt-packages.sh",
        "install-system.sh",
        "install-python.sh",
        "download-locked.sh",
        "install-verl.sh",
        "install-wheels.sh",
        "install-project.sh",
        "check-image.py",
    }
    for script in scripts:
        assert os.access(REPO / "docker" / script, os.X_OK), script
    assert os.access(REPO / "entrypoint" / "entrypoint.sh", os.X_OK)


@pytest.mark.parametrize(
    "path, excluded",
    [
        ("data/gsm8k/train.parquet", True),
        ("runs/ppo-p40/checkpoints/global_step_25/actor.pt", True),
        ("checkpoints/x.pt", True),
        ("hf-cache/hub/models--Qwen/blob", True),
        ("dist/verlfit-p40.tar.gz", True),
        (".venv/bin/python", True),
        (".git/HEAD", True),
        ("tests/images/test_image_dockerfiles.py", True),
        ("entrypoint/verlfit/__pycache__/cli.cpython-310.pyc", True),
        ("entrypoint/verlfit.egg-info/PKG-INFO", True),
        ("docker/common.lock", False),
        ("patches/apply.py", False),
        ("entrypoint/entrypoint.sh", False),
        ("entrypoint/verlfit/cli.py", False),
        ("pyproject.toml", False),
        ("README.md", False),
    ],
)
def test_dockerignore_keeps_data_checkpoints_and_caches_out(path, excluded):
    assert dockerignore_excludes(path, dockerignore_patterns()) is excluded


def test_apex_is_imported_only_by_verls_megatron_code():
    """Why neither image has NVIDIA apex: in verl 0.4.1 (the PyPI wheel, byte-identical to the tag's
    verl/), only two Megatron layers import it; the FSDP path verlfit runs never loads them."""
    import verl

    root = os.path.dirname(verl.__file__)
    importers = []
    for directory, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                if re.search(r"^\s*(from apex\b|import apex\b)", open(path, encoding="utf-8").read(), re.MULTILINE):
                    importers.append(os.path.relpath(path, root))
    assert sorted(importers) == [
        "models/llama/megatron/layers/parallel_rmsnorm.py",
        "models/qwen2/megatron/layers/parallel_rmsnorm.py",
    ]


def test_the_fsdp_path_never_asks_for_apex_or_megatron_layers():
    # sys.modules["apex"] = None: `import apex` raises ImportError and find_spec("apex") answers None,
    # even where apex is installed, so the imports below prove the path needs no apex
    probe = """
import importlib, sys, warnings
warnings.simplefilter("ignore")
sys.modules["apex"] = None
for module in ("verl.trainer.main_ppo", "verl.workers.fsdp_workers", "verl.workers.actor.dp_actor",
               "verl.workers.critic.dp_critic", "verl.workers.rollout.hf_rollout", "verl.utils.reward_score.gsm8k"):
    importlib.import_module(module)
print(sorted(m for m in sys.modules if m.startswith("verl.") and ("megatron" in m or "mcore" in m)))
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_torchvision_and_torchaudio_are_imported_only_by_verls_multimodal_dataset_code():
    """Why the P40 image has neither: in verl 0.4.1 (the PyPI wheel, byte-identical to the tag's verl/) one file
    imports torchvision, the multimodal dataset helpers, which RLHFDataset imports only when a processor exists
    (verl's hf_processor gives one only for a multimodal model); none imports torchaudio."""
    import verl

    root = os.path.dirname(verl.__file__)
    importers = {}
    for directory, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                found = re.findall(
                    r"^\s*(?:from|import) (torchvision|torchaudio)\b", open(path, encoding="utf-8").read(), re.MULTILINE
                )
                if found:
                    importers[os.path.relpath(path, root)] = sorted(set(found))
    assert importers == {"utils/dataset/vision_utils.py": ["torchvision"]}
    dataset = open(os.path.join(root, "utils/dataset/rl_dataset.py"), encoding="utf-8").read()
    assert re.findall(
        r"^( *)(?:from verl\.utils\.dataset\.vision_utils|import verl\.utils\.dataset\.vision_utils)",
        dataset,
        re.MULTILINE,
    ) == [
        " " * 12,
        " " * 16,
        " " * 12,
        " " * 16,
    ]  # inside methods, under `if ... processor ...`, never at the top


def test_the_p40_path_runs_without_torchvision_or_torchaudio(tmp_path):
    """The P40 image's training path with torchvision and torchaudio made unimportable (sys.modules[...] = None: an
    import raises ImportError and importlib.util.find_spec answers None, even where they are installed, so
    transformers' and datasets' is_*_available checks say no): verl's FSDP workers, HF rollout, trainer and GSM8K
    reward import; transformers' Qwen2, Qwen3 and Llama models generate; verl's hf_tokenizer and hf_processor (through
    AutoProcessor) load a local text model's tokenizer (no processor: a text model has none); RLHFDataset builds an
    item; every verlfit module imports. Nothing loads a torchvision, torchaudio or vision_utils module."""
    probe = f"""
import importlib, json, pkgutil, sys, warnings
warnings.simplefilter("ignore")
sys.modules["torchvision"] = None
sys.modules["torchaudio"] = None
import pandas, torch
from omegaconf import OmegaConf
from tokenizers import Tokenizer, models, pre_tokenizers
import transformers
import verlfit
for module in ("verl.trainer.main_ppo", "verl.workers.fsdp_workers", "verl.workers.actor.dp_actor", "verl.workers.critic.dp_critic",
               "verl.workers.rollout.hf_rollout", "verl.utils.reward_score.gsm8k",
               *(info.name for info in pkgutil.walk_packages(verlfit.__path__, "verlfit.") if not info.name.endswith("__main__"))):
    importlib.import_module(module)
from verl.utils import hf_processor, hf_tokenizer
from verl.utils.dataset.rl_dataset import RLHFDataset
folder = {str(tmp_path)!r}
vocabulary = {{word: index for index, word in enumerate(["<pad>", "<eos>", *(f"w{{i}}" for i in range(98))])}}
tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token="<pad>"))
tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>")
fast.chat_template = "{{% for m in messages %}}{{{{ m['content'] }}}} {{% endfor %}}"
fast.save_pretrained(folder)
shape = dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
transformers.Qwen2Config(**shape).save_pretrained(folder)
tokenizer, processor = hf_tokenizer(folder), hf_processor(folder)
pandas.DataFrame({{"prompt": [[{{"role": "user", "content": "w1 w2 w3"}}]], "data_source": ["openai/gsm8k"],
                  "reward_model": [{{"ground_truth": "1", "style": "rule"}}], "extra_info": [{{"index": 0}}]}}).to_parquet(folder + "/train.parquet")
config = OmegaConf.create({{"max_prompt_length": 8, "filter_overlong_prompts": True, "truncation": "error"}})
item = RLHFDataset(data_files=[folder + "/train.parquet"], tokenizer=tokenizer, processor=processor, config=config)[0]
generated = []
for family in ("Qwen2", "Qwen3", "Llama"):
    model = getattr(transformers, family + "ForCausalLM")(getattr(transformers, family + "Config")(**shape, attn_implementation="sdpa"))
    model.generation_config.eos_token_id = None  # random weights: an EOS by chance (Llama's 2) would end it early
    generated.append(model.generate(torch.tensor([[3, 4, 5]]), max_new_tokens=2, do_sample=False, pad_token_id=0).shape[1])
loaded = sorted(name for name in sys.modules if sys.modules[name] is not None and name.split(".")[0] in ("torchvision", "torchaudio"))
loaded += [name for name in sys.modules if name.endswith("vision_utils")]
print(json.dumps({{"processor": repr(processor), "input_ids": item["input_ids"].tolist(), "generated": generated, "loaded": loaded}}))
"""  # noqa: E501 (data or a script written out as it runs)
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # "w1 w2 w3 " as the chat template writes it, left-padded to max_prompt_length with <pad> (0)
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "processor": "None",
        "input_ids": [0, 0, 0, 0, 0, 3, 4, 5],
        "generated": [5, 5, 5],
        "loaded": [],
    }


def test_docs_name_every_source_arg_and_headline_pin(dockerfiles):
    text = (REPO / "docs" / "images.md").read_text()
    for name in (*SOURCE_ARGS, "VLLM_WHEEL_URL", "FLASH_ATTN_WHEEL_URL", *A10_HASH_ARGS):
        assert f"`{name}" in text, name
    args = resolved_args(dockerfiles["a10"])
    for name in (
        "TORCH_VERSION",
        "TRANSFORMERS_VERSION",
        "TENSORDICT_VERSION",
        "RAY_VERSION",
        "DATASETS_VERSION",
        "PYARROW_VERSION",
        "HYDRA_CORE_VERSION",
        "XFORMERS_VERSION",
        "FLASH_ATTN_VERSION",
        "VERL_COMMIT",
        "CUDNN_VERSION",
    ):
        assert args[name] in text, name
    # the sources table gives the digests' real default: pinned, not empty
    row = next(line for line in text.splitlines() if line.startswith("| `BUILD_BASE_DIGEST`, `RUNTIME_BASE_DIGEST` |"))
    assert row.split(" | ")[1].startswith("Docker Hub's digests of the two tags, pinned")
    assert args["BUILD_BASE_DIGEST"] in text and args["RUNTIME_BASE_DIGEST"] in text


def test_the_a10_image_starts_with_the_p40_images_runtime_layers(dockerfiles):
    """Everything from the runtime base to the training stack is the same instructions in the same order (and the same
    runtime-system stage): built on one builder, the A10 image reuses those layers of the P40 image (7 GB of torch)."""

    def instructions(dockerfile, stages):
        return [(item.keyword, item.value) for name in stages for item in dockerfile.stage(name).instructions]

    p40, a10 = dockerfiles["p40"], dockerfiles["a10"]
    assert instructions(a10, ["runtime-system"]) == instructions(p40, ["runtime-system"])
    shared = instructions(a10, ["runtime-python"])
    assert shared == instructions(p40, ["runtime"])[: len(shared)]
    assert [value for instruction, value in shared if instruction == "RUN"][-1].endswith(
        "/opt/verlfit/docker/install-wheels.sh /wheels/common"
    )
