"""compose.yaml: valid against the Compose Specification's JSON schema (the copy check-jsonschema
ships, offline), and checked for the image variable, GPU reservation, shared memory, volumes, the
run-time-only Hugging Face settings and the Ray cluster profile."""

from __future__ import annotations

import json
import re
from importlib import resources

import jsonschema
import pytest
import yaml

from image_helpers import DOCKERFILES, REPO, parse_dockerfile

ENTRYPOINT = "/opt/verlfit/entrypoint/entrypoint.sh"
# the image's ENTRYPOINT: tini as PID 1 in front of verlfit's entrypoint; a service that replaces it keeps tini
TINI = ["/usr/bin/tini", "-g", "--"]  # -g: the signal to the whole process group, bench's train run included
GPU = {"resources": {"reservations": {"devices": [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]}}}
# ./data and ./runs in the long syntax without create_host_path: compose stops when one is missing instead of letting
# Docker create it owned by root
VOLUMES = [
    {"type": "bind", "source": "./data", "target": "/workspace/data", "bind": {"create_host_path": False}},
    {"type": "bind", "source": "./runs", "target": "/workspace/runs", "bind": {"create_host_path": False}},
    "hf-cache:/cache/huggingface",
    # a CA bundle without editing this file: VERLFIT_CA_BUNDLE, else an empty file the entrypoint ignores
    {
        "type": "bind",
        "source": "${VERLFIT_CA_BUNDLE:-./docker/no-ca-bundle.pem}",
        "target": "/etc/verlfit/ca-bundle.pem",
        "read_only": True,
        "bind": {"create_host_path": False},
    },
]
# the proxy and CA variables a restricted network needs at run time (model and dataset downloads)
RESTRICTED_NETWORK = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "REQUESTS_CA_BUNDLE",
    "SSL_CERT_FILE",
]
ENVIRONMENT = [
    "HF_ENDPOINT",
    "HF_TOKEN",
    "HF_HUB_OFFLINE",
    "HF_HUB_DISABLE_XET",
    "VLLM_DTYPE",
    "TRITON_MAX_SHARED_MEMORY",
    "PYTORCH_CUDA_ALLOC_CONF",
    "CUDA_VISIBLE_DEVICES",
    "WANDB_API_KEY",
    "CUDA_DEVICE_ORDER",
    "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_SOCKET_IFNAME",
    "VERLFIT_GPU_MEMORY_LIMIT_GIB",
    *RESTRICTED_NETWORK,
]


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((REPO / "compose.yaml").read_text())


def compose_schema():
    return json.loads(
        resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text()
    )


def interpolate(value: str, environ: dict[str, str]) -> str:
    """Compose's ${VAR:-default} and ${VAR} interpolation."""

    def replace(match):
        name, default = match.group(1), match.group(3)
        return environ.get(name) or (default if default is not None else "")

    return re.sub(r"\$\{(\w+)(:-([^}]*))?\}", replace, value)


def test_schema_is_the_compose_specification():
    schema = compose_schema()
    assert (schema["$id"], schema["title"]) == ("compose_spec.json", "Compose Specification")


def test_compose_yaml_is_valid_against_the_compose_specification(compose):
    validator = jsonschema.Draft202012Validator(compose_schema())
    assert [error.message for error in validator.iter_errors(compose)] == []


def test_the_schema_rejects_a_misspelt_key(compose):
    broken = json.loads(json.dumps(compose))
    broken["services"]["train"]["shm-size"] = "8gb"
    assert not jsonschema.Draft202012Validator(compose_schema()).is_valid(broken)


def test_services_and_profiles(compose):
    assert {name: service.get("profiles") for name, service in compose["services"].items()} == {
        "train": None,
        "prepare-gsm8k": None,
        "doctor": None,
        "bench": None,
        "export": None,
        "eval": None,
        "report": None,
        "shell": None,
        "ray-head": ["cluster"],
        "ray-worker": ["cluster"],
    }
    assert compose["name"] == "verlfit"
    # the volume's name is the one the docs' `docker run -v verlfit-hf-cache:...` uses (not compose's verlfit_hf-cache)
    assert compose["volumes"] == {"hf-cache": {"name": "${VERLFIT_HF_CACHE_VOLUME:-verlfit-hf-cache}"}}
    assert interpolate(compose["volumes"]["hf-cache"]["name"], {}) == "verlfit-hf-cache"
    # a second uid's own cache (the entrypoint's warning names this fix)
    assert (
        interpolate(compose["volumes"]["hf-cache"]["name"], {"VERLFIT_HF_CACHE_VOLUME": "verlfit-hf-cache-1001"})
        == "verlfit-hf-cache-1001"
    )


@pytest.mark.parametrize("environ, image", [({}, "verlfit:p40"), ({"VERLFIT_PROFILE": "a10"}, "verlfit:a10")])
def test_one_variable_picks_the_image(compose, environ, image):
    assert {interpolate(service["image"], environ) for service in compose["services"].values()} == {image}


def test_gpu_reservation_everywhere_but_data_preparation_export_and_report(compose):
    # prepare-gsm8k, export (FSDP shards merged on the CPU) and report (plots from files) run on any host
    for name, service in compose["services"].items():
        assert service.get("deploy") == (None if name in ("prepare-gsm8k", "export", "report") else GPU), name


def test_shared_memory_volumes_user_and_environment(compose):
    for name, service in compose["services"].items():
        assert service["shm_size"] == "11gb"
        assert service["volumes"] == VOLUMES
        assert service["working_dir"] == "/workspace"
        assert service["user"] == "${VERLFIT_UID:-1000}:${VERLFIT_GID:-1000}"
        assert interpolate(service["user"], {}) == "1000:1000"
        # the image's tini is PID 1 (compose's init would put a second one in front); SIGTERM, the default stop signal,
        # is verlfit's Ctrl-C; two minutes cover its 60 s + 30 s stop
        assert ("init" not in service, "stop_signal" not in service, service["stop_grace_period"]) == (True, True, "2m")
        # names only: values come from the caller's environment at run time, never from a file
        assert service["environment"] == ENVIRONMENT


def test_volume_targets_match_the_image(compose):
    for profile, path in DOCKERFILES.items():
        dockerfile = parse_dockerfile(path)
        runtime = dockerfile.stage("runtime")
        environment = {}
        for env in runtime.all("ENV"):
            environment.update(env.pairs())
        assert environment["HF_HOME"] == "/cache/huggingface"
        assert runtime.all("WORKDIR")[-1].value == "/workspace"
        assert runtime.all("ENTRYPOINT")[-1].value == json.dumps([*TINI, ENTRYPOINT])
    targets = [volume["target"] if isinstance(volume, dict) else volume.split(":")[1] for volume in VOLUMES]
    assert targets == ["/workspace/data", "/workspace/runs", "/cache/huggingface", "/etc/verlfit/ca-bundle.pem"]
    # the entrypoint looks for the CA bundle where compose mounts it
    assert (
        "ca_bundle=${VERLFIT_CA_BUNDLE_MOUNT:-/etc/verlfit/ca-bundle.pem}"
        in (REPO / "entrypoint" / "entrypoint.sh").read_text()
    )
    assert interpolate(VOLUMES[3]["source"], {}) == "./docker/no-ca-bundle.pem"
    assert (
        interpolate(VOLUMES[3]["source"], {"VERLFIT_CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt"})
        == "/etc/ssl/certs/ca-certificates.crt"
    )


def test_each_service_runs_its_subcommand(compose):
    services = compose["services"]
    assert services["train"]["entrypoint"] == [*TINI, ENTRYPOINT, "train"] and "command" not in services["train"]
    assert services["prepare-gsm8k"]["entrypoint"] == [*TINI, ENTRYPOINT, "prepare-gsm8k"]
    assert services["doctor"]["entrypoint"] == [*TINI, ENTRYPOINT, "doctor"]
    for name in ("export", "eval", "report"):
        assert services[name]["entrypoint"] == [*TINI, ENTRYPOINT, name] and "command" not in services[name], name
    assert "entrypoint" not in services["shell"] and services["shell"]["command"] == ["bash"]
    assert (services["shell"]["stdin_open"], services["shell"]["tty"]) == (True, True)


def test_ray_cluster_profile(compose):
    head, worker = compose["services"]["ray-head"], compose["services"]["ray-worker"]
    assert head["command"] == ["ray", "start", "--head", "--port=6379", "--block"]  # dashboard not exposed
    assert worker["command"] == ["ray", "start", "--address=${RAY_HEAD_ADDRESS:-127.0.0.1:6379}", "--block"]
    assert interpolate(worker["command"][2], {"RAY_HEAD_ADDRESS": "10.0.0.5:6379"}) == "--address=10.0.0.5:6379"
    # through the image's entrypoint: the profile's environment reaches the raylets and so every worker
    assert "entrypoint" not in head and "entrypoint" not in worker
    assert head["network_mode"] == worker["network_mode"] == "host"


def test_no_secret_or_mirror_in_the_file():
    text = (REPO / "compose.yaml").read_text()
    assert not re.search(r"hf_[A-Za-z0-9]{10,}|HF_TOKEN\s*[:=]\s*\S|https?://(?!127)", text.split("name: verlfit")[1])
