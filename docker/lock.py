#!/usr/bin/env python3
"""Regenerate the lock files (docker/*.lock) from docker/image.in and docker/a10.in.

usage: python3 docker/lock.py [--uv PATH] [--exclude-newer TIMESTAMP]

Each lock is one image layer, pinned to the whole dependency tree with ``==`` so the build installs
with ``--no-deps`` and resolves nothing:

  python.lock       pip, setuptools, wheel of the venv                       PIP_INDEX_URL
  torch-cu118.lock  torch, torchvision, torchaudio (CUDA 11.8 builds)        TORCH_INDEX_URL
  torch-deps.lock   what they depend on (nvidia-*-cu11, triton, sympy...)    PIP_INDEX_URL
  common.lock       verl 0.4.1's and verlfit's dependencies (both images)   PIP_INDEX_URL
  a10-cu118.lock    xformers (CUDA 11.8 build)                               TORCH_INDEX_URL
  a10-extra.lock    vLLM 0.8.5's and flash-attn's other dependencies        PIP_INDEX_URL

The A10 tree is resolved first and the P40 tree is constrained by it, so the layers both images
share (python, torch, common) are identical in both. Resolution is for CPython 3.10 on
manylinux_2_35 x86_64 (Ubuntu 22.04) and only sees packages published before EXCLUDE_NEWER, so
the same command gives the same locks later; move the date to take newer releases.

Needs uv (UV_VERSION below) and PyPI; PyTorch's CUDA 11.8 index is not needed. Metadata-only
stand-in wheels for torch, torchvision, torchaudio and xformers (their Requires-Dist as published
for the cu118 builds: STANDINS below) let uv resolve the rest against PyPI. PyPI's vllm 0.8.5
metadata stands in for its cu118 release wheel, which declares the same requirements. The build
proves both: ``pip check`` (docker/check-image.py) fails on any requirement a real wheel declares
that the locks do not satisfy.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
UV_VERSION = "0.13.9"
EXCLUDE_NEWER = "2025-07-01T00:00:00Z"  # just after verl 0.4.1's release
PYTHON_VERSION = "3.10"
PLATFORM = "x86_64-manylinux_2_35"

CU11 = (
    "nvidia-cuda-nvrtc-cu11==11.8.89", "nvidia-cuda-runtime-cu11==11.8.89", "nvidia-cuda-cupti-cu11==11.8.87",
    "nvidia-cudnn-cu11==9.1.0.70", "nvidia-cublas-cu11==11.11.3.6", "nvidia-cufft-cu11==10.9.0.58",
    "nvidia-curand-cu11==10.3.0.86", "nvidia-cusolver-cu11==11.4.1.48", "nvidia-cusparse-cu11==11.7.5.86",
    "nvidia-nccl-cu11==2.21.5", "nvidia-nvtx-cu11==11.8.86",
)
_LINUX_X86 = '; platform_system == "Linux" and platform_machine == "x86_64"'
STANDINS: dict[tuple[str, str], tuple[str, ...]] = {
    ("torch", "2.6.0+cu118"): (
        "filelock", "typing-extensions>=4.10.0", "networkx", "jinja2", "fsspec",
        *(requirement + _LINUX_X86 for requirement in CU11),
        "triton==3.2.0" + _LINUX_X86, 'setuptools; python_version >= "3.12"', 'sympy==1.13.1; python_version >= "3.9"',
    ),
    ("torchvision", "0.21.0+cu118"): ("numpy", "torch==2.6.0", "pillow!=8.3.*,>=5.3.0"),
    ("torchaudio", "2.6.0+cu118"): ("torch==2.6.0",),
    ("xformers", "0.0.29.post2"): ("numpy", "torch==2.6.0"),
}
TORCH = ("torch", "torchvision", "torchaudio")
PYTHON_TOOLS = ("pip", "setuptools", "wheel")
A10_TORCH_INDEX = ("xformers",)
BY_URL = ("vllm",)  # installed from its release wheel (docker/fetch-wheel.sh), not from a lock

HEADERS = {
    "python.lock": "the venv's own tools, from PIP_INDEX_URL",
    "torch-cu118.lock": "the torch layer's CUDA 11.8 builds, from TORCH_INDEX_URL only",
    "torch-deps.lock": "what torch, torchvision and torchaudio depend on, from PIP_INDEX_URL",
    "common.lock": "verl 0.4.1's and verlfit's dependencies (both images), from PIP_INDEX_URL",
    "a10-cu118.lock": "the A10 layer's CUDA 11.8 builds, from TORCH_INDEX_URL only",
    "a10-extra.lock": "the A10 layer: vLLM 0.8.5's and flash-attn's dependencies, from PIP_INDEX_URL",
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def write_standins(directory: Path) -> None:
    """Write one metadata-only wheel per STANDINS entry into ``directory``."""
    for (name, version), requirements in STANDINS.items():
        dist_info = f"{name}-{version}.dist-info"
        files = {
            f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nRequires-Python: >=3.9\n"
            + "".join(f"Requires-Dist: {requirement}\n" for requirement in requirements),
            f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: verlfit-lock\nRoot-Is-Purelib: false\nTag: cp310-cp310-linux_x86_64\n",
        }
        record = ""
        for path, text in files.items():
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record += f"{path},sha256={digest},{len(text.encode())}\n"
        files[f"{dist_info}/RECORD"] = record + f"{dist_info}/RECORD,,\n"
        with zipfile.ZipFile(directory / f"{name}-{version}-cp310-cp310-linux_x86_64.whl", "w") as wheel:
            for path, text in files.items():
                wheel.writestr(path, text)


def parse_pins(text: str) -> dict[str, tuple[str, str]]:
    """``name==version`` lines of a requirements text -> {canonical name: (name as written, version)}.

    Comments, blank lines and option lines (``--no-binary``) are skipped; extras are dropped from the name.
    The one reader of lock files: docker/check-image.py (inside the image) and the tests use it too.

    Raises:
        ValueError: ``not an exact pin: LINE`` for any other line.
    """
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)", line)
        if not match:
            raise ValueError(f"not an exact pin: {line!r}")
        pins[canonical(match.group(1))] = (match.group(1), match.group(2))
    return pins


class Resolver:
    def __init__(self, uv: str, standins: Path, exclude_newer: str, workdir: Path):
        self.uv, self.standins, self.exclude_newer, self.workdir = uv, standins, exclude_newer, workdir

    def compile(self, requirements: Path, constraints: Path | None = None, no_binary: tuple[str, ...] = (), only_binary: bool = False) -> subprocess.CompletedProcess:
        command = [self.uv, "pip", "compile", str(requirements), "--python-version", PYTHON_VERSION, "--python-platform", PLATFORM,
                   "--find-links", str(self.standins), "--exclude-newer", self.exclude_newer,
                   "--no-header", "--no-annotate"]
        if constraints:
            command += ["--constraint", str(constraints)]
        if only_binary:
            command += ["--only-binary", ":all:"]
        for name in no_binary:
            command += ["--no-binary", name]
        return subprocess.run(command, capture_output=True, text=True)

    def pins(self, requirements: Path, constraints: Path | None = None) -> dict[str, tuple[str, str]]:
        result = self.compile(requirements, constraints)
        if result.returncode:
            raise SystemExit(f"lock.py: uv could not resolve {requirements}:\n{result.stderr}")
        try:
            return parse_pins(result.stdout)
        except ValueError as error:
            raise SystemExit(f"lock.py: uv's output for {requirements}: {error}") from None

    def sdist_only(self, requirements: Path) -> tuple[str, ...]:
        """Names in the resolved tree that have no wheel for the target (built from source)."""
        names: list[str] = []
        for _ in range(20):
            result = self.compile(requirements, no_binary=tuple(names), only_binary=True)
            if result.returncode == 0:
                return tuple(sorted(names))
            match = re.search(r"Wheels are required for `([^`]+)`", result.stderr)
            if not match:
                raise SystemExit(f"lock.py: uv failed on the wheels-only pass:\n{result.stderr}")
            names.append(canonical(match.group(1)))
        raise SystemExit("lock.py: too many sdist-only packages")


def render(name: str, pins: dict[str, tuple[str, str]], no_binary: tuple[str, ...], exclude_newer: str) -> str:
    lines = [
        f"# docker/{name}: {HEADERS[name]}.",
        f"# Generated by docker/lock.py (uv {UV_VERSION}; CPython {PYTHON_VERSION}, {PLATFORM}; published before",
        f"# {exclude_newer}) from docker/image.in and docker/a10.in. Do not edit: change the .in files and rerun.",
    ]
    here = sorted(set(no_binary) & set(pins))
    if here:
        lines.append("# no wheel is published for these; the build stage builds them from source (pure Python):")
        lines.append("--no-binary " + ",".join(here))
    lines += [f"{pins[key][0]}=={pins[key][1]}" for key in sorted(pins)]
    return "\n".join(lines) + "\n"


def split_layers(a10: dict, p40: dict, torch_closure: dict) -> dict[str, dict]:
    """Split the resolved trees into the per-layer locks and check they fit together."""
    for key, pin in p40.items():
        if a10.get(key) != pin:
            raise SystemExit(f"lock.py: P40 tree has {pin}, A10 tree has {a10.get(key)}")
    layers = {
        "python.lock": {k: v for k, v in p40.items() if k in PYTHON_TOOLS},
        "torch-cu118.lock": {k: v for k, v in torch_closure.items() if k in TORCH},
        "torch-deps.lock": {k: v for k, v in torch_closure.items() if k not in TORCH and k not in PYTHON_TOOLS},
    }
    shared = {k for layer in layers.values() for k in layer}
    layers["common.lock"] = {k: v for k, v in p40.items() if k not in shared}
    extra = {k: v for k, v in a10.items() if k not in p40 and k not in BY_URL}
    layers["a10-cu118.lock"] = {k: v for k, v in extra.items() if k in A10_TORCH_INDEX}
    layers["a10-extra.lock"] = {k: v for k, v in extra.items() if k not in A10_TORCH_INDEX}
    missing = set(p40) - {k for name in ("python.lock", "torch-cu118.lock", "torch-deps.lock", "common.lock") for k in layers[name]}
    if missing:
        raise SystemExit(f"lock.py: P40 packages in no layer: {sorted(missing)}")
    return layers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uv", default="uv", help="uv executable (version %s)" % UV_VERSION)
    parser.add_argument("--exclude-newer", default=EXCLUDE_NEWER)
    args = parser.parse_args(argv)
    version = subprocess.run([args.uv, "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
    if version != UV_VERSION:
        print(f"lock.py: warning: uv {version}, the locks were made with {UV_VERSION}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        (work / "standins").mkdir()
        write_standins(work / "standins")
        resolver = Resolver(args.uv, work / "standins", args.exclude_newer, work)
        a10 = resolver.pins(HERE / "a10.in")
        (work / "a10.txt").write_text("".join(f"{n}=={v}\n" for n, v in a10.values()))
        p40 = resolver.pins(HERE / "image.in", work / "a10.txt")
        (work / "torch.in").write_text("".join(f"{n}=={STANDIN}\n" for n, STANDIN in
                                               (("torch", "2.6.0+cu118"), ("torchvision", "0.21.0+cu118"), ("torchaudio", "2.6.0+cu118"))))
        torch_closure = resolver.pins(work / "torch.in", work / "a10.txt")
        no_binary = resolver.sdist_only(work / "a10.txt")
    for name, pins in split_layers(a10, p40, torch_closure).items():
        (HERE / name).write_text(render(name, pins, no_binary, args.exclude_newer))
        print(f"docker/{name}: {len(pins)} packages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
