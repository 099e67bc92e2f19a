"""entrypoint/entrypoint.sh on the host, with a stub `verlfit` first on PATH: the stub answers
`profiles NAME --env-shell` with the real verlfit's output and records every other call."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from image_helpers import REPO

ENTRYPOINT = REPO / "entrypoint" / "entrypoint.sh"
DEFAULTS = {
    "p40": {
        "VLLM_DTYPE": "float32",
        "TRITON_MAX_SHARED_MEMORY": "49152",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    },
    "a10": {
        "VLLM_DTYPE": "bfloat16",
        "TRITON_MAX_SHARED_MEMORY": "101376",
        "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:256",
    },
}


@pytest.fixture()
def stub_path(tmp_path):
    stub = tmp_path / "verlfit"
    stub.write_text(
        '#!/bin/bash\nif [ "$1" = profiles ]; then exec '
        + sys.executable
        + ' -m verlfit "$@"; fi\necho "verlfit-stub: $*"\necho "env: VLLM_DTYPE=$VLLM_DTYPE'
        ' TRITON_MAX_SHARED_MEMORY=$TRITON_MAX_SHARED_MEMORY PYTORCH_CUDA_ALLOC_CONF=$PYTORCH_CUDA_ALLOC_CONF"\n'
    )
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    return f"{tmp_path}:{os.environ['PATH']}"


def entrypoint(stub_path, *args, **env):
    environment = {"PATH": stub_path, "HOME": os.environ.get("HOME", "/tmp"), **env}
    return subprocess.run([str(ENTRYPOINT), *args], env=environment, capture_output=True, text=True)


def env_line(profile, **overrides):
    values = {**DEFAULTS[profile], **overrides}
    return "env: " + " ".join(f"{key}={value}" for key, value in values.items())


def test_no_arguments_trains(stub_path):
    result = entrypoint(stub_path, VERLFIT_PROFILE="p40")
    assert (result.returncode, result.stdout.splitlines()) == (0, ["verlfit-stub: train", env_line("p40")])


@pytest.mark.parametrize("profile", ["p40", "a10"])
def test_profile_defaults_are_exported(stub_path, profile):
    result = entrypoint(stub_path, "doctor", VERLFIT_PROFILE=profile)
    assert result.stdout.splitlines() == ["verlfit-stub: doctor", env_line(profile)]


def test_user_values_win(stub_path):
    result = entrypoint(
        stub_path,
        "train",
        "--dry-run",
        VERLFIT_PROFILE="p40",
        VLLM_DTYPE="float16",
        PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:128",
    )
    assert result.stdout.splitlines() == [
        "verlfit-stub: train --dry-run",
        env_line("p40", VLLM_DTYPE="float16", PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:128"),
    ]


def test_every_subcommand_goes_to_verlfit_with_its_arguments(stub_path):
    from verlfit.cli import SUBCOMMANDS

    for subcommand in SUBCOMMANDS:
        if subcommand == "profiles":
            continue  # answered by the real verlfit in this stub
        result = entrypoint(stub_path, subcommand, "--x", "a b", VERLFIT_PROFILE="a10")
        assert result.stdout.splitlines()[0] == f"verlfit-stub: {subcommand} --x a b", subcommand


def test_options_go_to_verlfit(stub_path):
    assert entrypoint(stub_path, "--help", VERLFIT_PROFILE="p40").stdout.splitlines()[0] == "verlfit-stub: --help"


def test_programs_on_path_run_with_the_defaults_set(stub_path):
    result = entrypoint(
        stub_path,
        "bash",
        "-c",
        'echo "$VLLM_DTYPE $TRITON_MAX_SHARED_MEMORY $PYTORCH_CUDA_ALLOC_CONF $0"',
        VERLFIT_PROFILE="a10",
    )
    assert (result.returncode, result.stdout) == (0, "bfloat16 101376 max_split_size_mb:256 bash\n")
    result = entrypoint(
        stub_path, "python3", "-c", "import os; print(os.environ['TRITON_MAX_SHARED_MEMORY'])", VERLFIT_PROFILE="p40"
    )
    assert result.stdout == "49152\n"


def test_exec_replaces_the_entrypoint(stub_path):
    # `exec`: the program keeps the entrypoint's process id, so signals from `docker stop` reach it
    environment = {"PATH": stub_path, "VERLFIT_PROFILE": "p40"}
    process = subprocess.Popen(
        [str(ENTRYPOINT), "bash", "-c", "echo $$"], env=environment, stdout=subprocess.PIPE, text=True
    )
    output, _ = process.communicate()
    assert int(output) == process.pid


def test_unknown_subcommand_lists_the_subcommands(stub_path):
    result = entrypoint(stub_path, "trian", VERLFIT_PROFILE="p40")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        "verlfit: unknown subcommand 'trian'",
        "subcommands: prepare-gsm8k prepare-data train plan doctor report export eval profiles bench",
        "or any program in the image, e.g. bash, python, ray",
    ]


def test_shell_builtins_are_not_programs(stub_path):
    assert entrypoint(stub_path, "cd", VERLFIT_PROFILE="p40").returncode == 2


def test_profile_is_optional_and_must_be_valid(stub_path):
    result = entrypoint(stub_path, "train")  # outside the images: verlfit applies the profile itself
    assert result.returncode == 0 and "verlfit-stub" in result.stdout
    result = entrypoint(stub_path, "train", VERLFIT_PROFILE="k80")
    assert result.returncode == 2 and "verlfit-stub" not in result.stdout
    assert (
        result.stderr
        == "verlfit entrypoint: VERLFIT_PROFILE=k80 is not a profile (use p40, t4, v100 or a10; the images set it)\n"
    )
    # the entrypoint's list is verlfit's (issue 27 added t4 and v100, which run in the verlfit:p40 image)
    from verlfit.profiles import PROFILE_NAMES

    assert f"    {'|'.join(PROFILE_NAMES)}) ;;" in (REPO / "entrypoint" / "entrypoint.sh").read_text()


def test_subcommand_list_is_verlfits():
    from verlfit.cli import SUBCOMMANDS

    match = re.search(r"^SUBCOMMANDS=\(([^)]*)\)$", ENTRYPOINT.read_text(), re.MULTILINE)
    assert match.group(1).split() == list(SUBCOMMANDS)


def test_strict_mode():
    lines = ENTRYPOINT.read_text().splitlines()
    assert lines[0] == "#!/usr/bin/env bash" and "set -euo pipefail" in lines


CA_ECHO = (
    'echo "REQUESTS_CA_BUNDLE=${REQUESTS_CA_BUNDLE-unset} SSL_CERT_FILE=${SSL_CERT_FILE-unset}'
    ' HF_HUB_DISABLE_XET=${HF_HUB_DISABLE_XET-unset}"'
)


def test_a_mounted_ca_bundle_is_trusted_inside_and_hf_xet_is_switched_off(stub_path, tmp_path):
    """compose.yaml mounts VERLFIT_CA_BUNDLE at /etc/verlfit/ca-bundle.pem (here VERLFIT_CA_BUNDLE_MOUNT points at a
    test
    file): Python's HTTPS clients get it, hf-xet (its own TLS) is switched off; what the user set wins, an empty value
    too.
    """
    bundle = tmp_path / "ca-bundle.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    result = entrypoint(stub_path, "bash", "-c", CA_ECHO, VERLFIT_PROFILE="p40", VERLFIT_CA_BUNDLE_MOUNT=str(bundle))
    assert result.stdout == f"REQUESTS_CA_BUNDLE={bundle} SSL_CERT_FILE={bundle} HF_HUB_DISABLE_XET=1\n"
    result = entrypoint(
        stub_path,
        "bash",
        "-c",
        CA_ECHO,
        VERLFIT_PROFILE="p40",
        VERLFIT_CA_BUNDLE_MOUNT=str(bundle),
        SSL_CERT_FILE="/etc/mine.pem",
        HF_HUB_DISABLE_XET="",
    )
    assert result.stdout == f"REQUESTS_CA_BUNDLE={bundle} SSL_CERT_FILE=/etc/mine.pem HF_HUB_DISABLE_XET=\n"


def test_no_ca_bundle_mounted_changes_nothing(stub_path, tmp_path):
    # compose's stand-in when VERLFIT_CA_BUNDLE is unset: the checkout's empty docker/no-ca-bundle.pem
    assert (REPO / "docker" / "no-ca-bundle.pem").read_bytes() == b""
    for mount in (REPO / "docker" / "no-ca-bundle.pem", tmp_path / "absent.pem"):
        result = entrypoint(stub_path, "bash", "-c", CA_ECHO, VERLFIT_PROFILE="p40", VERLFIT_CA_BUNDLE_MOUNT=str(mount))
        assert result.stdout == "REQUESTS_CA_BUNDLE=unset SSL_CERT_FILE=unset HF_HUB_DISABLE_XET=unset\n"


def test_a_hugging_face_cache_another_uid_made_is_named_with_the_fixes(tmp_path):
    """Another uid's hub/ in the shared cache volume: a warning with the owner and both fixes, then the command runs.
    As root the entrypoint runs as uid 65534 (nobody), since root can write anything; otherwise hub/ is made read-only.
    """
    home = Path(tempfile.mkdtemp(dir="/tmp"))  # a folder every uid can enter, unlike pytest's tmp_path under root
    try:
        home.chmod(0o1777)
        hub = home / "hub"
        hub.mkdir(mode=0o755)
        as_nobody = os.getuid() == 0
        if not as_nobody:
            hub.chmod(0o555)
        environment = {"PATH": os.environ["PATH"], "HF_HOME": str(home)}
        # the entrypoint where every uid can read it, as /opt/verlfit/entrypoint is in the image: a checkout cloned into
        # a private folder (mktemp -d's 0700) cannot be entered by uid 65534
        entrypoint_copy = home / "entrypoint.sh"
        shutil.copy2(ENTRYPOINT, entrypoint_copy)
        entrypoint_copy.chmod(0o755)
        result = subprocess.run(
            [str(entrypoint_copy), "bash", "-c", "echo ran"],
            env=environment,
            capture_output=True,
            text=True,
            user=65534 if as_nobody else None,
        )
        uid = 65534 if as_nobody else os.getuid()
        assert (result.returncode, result.stdout) == (0, "ran\n")
        assert (
            result.stderr
            == f"verlfit entrypoint: warning: the Hugging Face cache folder {hub} belongs to uid {os.getuid()} and this"
            f" container runs as uid {uid}, which cannot write it: downloads into it will fail with PermissionError"
            " (what is there can still be read, with HF_HUB_OFFLINE=1). Run as uid"
            f" {os.getuid()} (VERLFIT_UID={os.getuid()} in .env; docker run -u {os.getuid()}), or give uid {uid} a"
            f" cache volume of its own (VERLFIT_HF_CACHE_VOLUME=verlfit-hf-cache-{uid} in .env; docker run -v"
            f" verlfit-hf-cache-{uid}:/cache/huggingface) (docs/images.md, 'Running with compose')\n"
        )
        # the owner itself: nothing to say
        hub.chmod(0o755)
        result = subprocess.run(
            [str(entrypoint_copy), "bash", "-c", "echo ran"], env=environment, capture_output=True, text=True
        )
        assert (result.stdout, result.stderr) == ("ran\n", "")
    finally:
        shutil.rmtree(home)
