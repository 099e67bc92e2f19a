#!/usr/bin/env python3
"""Regenerate the lock files (docker/*.lock) from docker/image.in and docker/a10.in.

usage: python3 docker/lock.py [--uv PATH] [--exclude-newer TIMESTAMP] [--index-url URL]
       python3 docker/lock.py --hashes-only [--index-url URL]

Each lock is one image layer, pinned to the whole dependency tree with ``==`` so the build installs
with ``--no-deps`` and resolves nothing:

  python.lock       pip, setuptools, wheel of the venv                       PIP_INDEX_URL
  torch-cu118.lock  torch (CUDA 11.8 build)                                  TORCH_INDEX_URL
  torch-deps.lock   what it depends on (nvidia-*-cu11, triton, sympy...)     PIP_INDEX_URL
  common.lock       verl 0.4.1's and verlfit's dependencies (both images)   PIP_INDEX_URL
  a10-cu118.lock    torchvision, torchaudio, xformers (CUDA 11.8 builds)     TORCH_INDEX_URL
  a10-extra.lock    vLLM 0.8.5's and flash-attn's other dependencies        PIP_INDEX_URL

The A10 tree is resolved first and the P40 tree is constrained by it, so the layers both images
share (python, torch, common) are identical in both. Resolution is for CPython 3.10 on
manylinux_2_35 x86_64 (Ubuntu 22.04) and only sees packages published before EXCLUDE_NEWER (a package in
EXCLUDE_NEWER_PACKAGES: before its own date), so the same command gives the same locks later; move the date to
take newer releases.

Nothing the P40 image runs imports torchvision or torchaudio (docs/images.md, "What each image contains"), so
only the A10 image has them: vLLM 0.8.5 requires both.

Needs uv (UV_VERSION below) and PyPI; PyTorch's CUDA 11.8 index is not needed. Metadata-only
stand-in wheels for torch, torchvision, torchaudio and xformers (their Requires-Dist as published
for the cu118 builds: STANDINS below) let uv resolve the rest against PyPI. PyPI's vllm 0.8.5
metadata stands in for its cu118 release wheel, which declares the same requirements. The build
proves both: ``pip check`` (docker/check-image.py) fails on any requirement a real wheel declares
that the locks do not satisfy.

Hashes: every pin of a PIP_INDEX_URL lock carries ``--hash=sha256:...`` for each file of that version
pip could pick on the target (the cp310 manylinux/linux x86_64 wheels, or the sdist of a
``--no-binary`` package), read from the index's PEP 691 JSON pages (``--index-url``, PyPI by
default), so the build installs them with ``--require-hashes`` and a rebuilt image gets the same
bytes. The two TORCH_INDEX_URL locks (HASH_EXEMPT) cannot be read that way here (PyTorch's cu118 index was
not reachable where the locks were made): they carry the sha256 PyTorch's index publishes where it was found
in public files (PUBLISHED_HASHES, sources in docs/images.md "Hashes"), and where none was found,
``--hash=sha256:${NAME}``: a build argument the user gives (HASH_BUILD_ARGS; pip's own ``${NAME}`` syntax of
requirement files), filled in by docker/wheel-hashes.py, which stops the build when it is missing. A pin with
neither is refused: no lock is written with a pin that has no hash. ``--hashes-only`` keeps
every pin and (re)reads the hashes, with no uv and no resolution; it needs ``packaging``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from typing import NamedTuple
from pathlib import Path

HERE = Path(__file__).resolve().parent
UV_VERSION = "0.13.9"
EXCLUDE_NEWER = "2025-07-01T00:00:00Z"  # just after verl 0.4.1's release
# packages pinned past EXCLUDE_NEWER in image.in, each seen only up to its own date (uv --exclude-newer-package).
# bitsandbytes: 0.46.0, the newest before EXCLUDE_NEWER, refuses on the CPU an NF4 weight packed in a float
# quant_storage ("Blockwise 4bit dequantization on CPU only supports uint8 storage"), which patch 0028 packs and the
# test suite in the image runs; 0.48.2 (published 2025-10-29) dequantises it, and its CUDA 11.8 library carries
# sm_60 (runs on the P40's 6.1), sm_75 and sm_86 kernels (docs/images.md, "bitsandbytes")
EXCLUDE_NEWER_PACKAGES = {"bitsandbytes": "2025-10-30T00:00:00Z"}
PYTHON_VERSION = "3.10"
PLATFORM = "x86_64-manylinux_2_35"
INDEX_URL = "https://pypi.org/simple"
GLIBC_MINOR = 35  # Ubuntu 22.04's glibc 2.35: manylinux_2_35 and every older manylinux tag install

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
TORCH = ("torch",)
PYTHON_TOOLS = ("pip", "setuptools", "wheel")
A10_TORCH_INDEX = ("torchvision", "torchaudio", "xformers")
BY_URL = ("vllm",)  # installed from its release wheel (docker/fetch-wheel.sh), not from a lock

HEADERS = {
    "python.lock": "the venv's own tools, from PIP_INDEX_URL",
    "torch-cu118.lock": "the torch layer's CUDA 11.8 build of torch, from TORCH_INDEX_URL only",
    "torch-deps.lock": "what torch depends on, from PIP_INDEX_URL",
    "common.lock": "verl 0.4.1's and verlfit's dependencies (both images), from PIP_INDEX_URL",
    "a10-cu118.lock": "the A10 layer's CUDA 11.8 builds (vLLM 0.8.5 requires all three), from TORCH_INDEX_URL only",
    "a10-extra.lock": "the A10 layer: vLLM 0.8.5's and flash-attn's dependencies, from PIP_INDEX_URL",
}


# locks whose pins come from TORCH_INDEX_URL: their hashes are not read from the index (it was not reachable)
HASH_EXEMPT = ("torch-cu118.lock", "a10-cu118.lock")
HASH_EXEMPT_NOTE = ("# Hashes: the sha256 PyTorch's index publishes (its links' #sha256= fragments), as found in public",
                    "# files (docs/images.md, \"Hashes\"); where none was found, ${NAME}: a build argument the build",
                    "# requires (the sha256 you took of that wheel, docs/images.md \"A10 wheels\"); without it the build stops.")
# The cp310 linux_x86_64 wheels' sha256 as download.pytorch.org/whl/cu118 links them, each seen in public files
# (docs/images.md, "Hashes", names them); torchvision 0.21.0+cu118, torchaudio 2.6.0+cu118 and xformers
# 0.0.29.post2 (cu118) were found in none: their hash is HASH_BUILD_ARGS' build argument.
PUBLISHED_HASHES = {
    ("torch", "2.6.0+cu118"): ("715d3b039a629881f263c40d1fb65edac6786da13bfba221b353ef2371c4da86",),
}
# The torch index's pins with no published sha256: the Dockerfile.a10 build argument (no default) that gives it,
# written into the lock as pip's ``${NAME}`` and filled in by docker/wheel-hashes.py hashed
HASH_BUILD_ARGS = {
    ("torchvision", "0.21.0+cu118"): "TORCHVISION_WHEEL_SHA256",
    ("torchaudio", "2.6.0+cu118"): "TORCHAUDIO_WHEEL_SHA256",
    ("xformers", "0.0.29.post2"): "XFORMERS_WHEEL_SHA256",
}
# one --hash value: 64 hex digits, or a build argument's ${NAME} (HASH_BUILD_ARGS)
HASH_VALUE = r"[0-9a-f]{64}|\$\{[A-Z0-9_]+\}"


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


class Pin(NamedTuple):
    """One lock line: ``name==version`` (the name as written) and its ``--hash=sha256:`` digests."""

    name: str
    version: str
    hashes: tuple[str, ...] = ()


def _logical_lines(text: str) -> list[str]:
    """Requirement-file lines with comments removed and backslash continuations joined (pip's rules)."""
    lines, pending = [], ""
    for raw in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()  # a comment starts at a "#" after whitespace
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append((pending + line).strip())
        pending = ""
    if pending.strip():
        lines.append(pending.strip())
    return [line for line in lines if line]


def parse_lock(text: str) -> dict[str, Pin]:
    """A lock's pins: {canonical name: Pin}. A pin is ``name==version``, optionally followed by
    ``--hash=sha256:<64 hex digits>`` or ``--hash=sha256:${NAME}`` (a build argument, HASH_BUILD_ARGS) options
    (on the line or on backslash-continued lines).

    Comments, blank lines and option lines (``--no-binary``) are skipped; extras are dropped from the name.
    The one reader of lock files: docker/check-image.py (inside the image) and the tests use it too.

    Raises:
        ValueError: ``not an exact pin: LINE`` for any other line.
    """
    pins = {}
    for line in _logical_lines(text):
        if line.startswith("-"):
            continue
        words = line.split()
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)", words[0])
        hashes = tuple(word[len("--hash=sha256:"):] for word in words[1:] if re.fullmatch(rf"--hash=sha256:(?:{HASH_VALUE})", word))
        if not match or len(hashes) != len(words) - 1:
            raise ValueError(f"not an exact pin: {line!r}")
        pins[canonical(match.group(1))] = Pin(match.group(1), match.group(2), hashes)
    return pins


def parse_pins(text: str) -> dict[str, tuple[str, str]]:
    """``name==version`` lines of a lock -> {canonical name: (name as written, version)} (parse_lock without hashes).

    Raises:
        ValueError: as parse_lock.
    """
    return {key: (pin.name, pin.version) for key, pin in parse_lock(text).items()}


def no_binary_names(text: str) -> tuple[str, ...]:
    """The names a lock's ``--no-binary a,b`` line lists (built from their sdist)."""
    names: list[str] = []
    for line in _logical_lines(text):
        if line.startswith("--no-binary"):
            names += [canonical(name) for name in line.split(None, 1)[1].split(",")]
    return tuple(sorted(names))


def target_tags() -> set:
    """The wheel tags pip accepts on the images' Python: CPython 3.10 on glibc 2.35 x86_64 (manylinux_2_35
    down to manylinux_2_5, their legacy aliases manylinux2014/2010/1, linux_x86_64), through ``packaging.tags``."""
    from packaging import tags

    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    platforms = []
    for minor in range(GLIBC_MINOR, 4, -1):
        platforms.append(f"manylinux_2_{minor}_x86_64")
        if minor in legacy:
            platforms.append(f"{legacy[minor]}_x86_64")
    platforms.append("linux_x86_64")
    return set(tags.cpython_tags((3, 10), abis=["cp310"], platforms=platforms)) | set(
        tags.compatible_tags((3, 10), interpreter="cp310", platforms=platforms))


def select_hashes(files: list[dict], name: str, version: str, from_source: bool, accepted: set) -> tuple[str, ...]:
    """The sha256 digests of the files of ``name==version`` that pip could pick on the target.

    ``files`` is a PEP 691 project page's "files" list ({"filename", "hashes": {"sha256"}}). A package
    built from source (``from_source``) gets its sdists' digests; any other its wheels whose tags are in
    ``accepted`` (target_tags()). Sorted, so a rerun writes the same lock.

    Raises:
        SystemExit: naming the pin when no such file is on the index.
    """
    from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
    from packaging.version import Version

    wanted, digests = Version(version), set()
    for entry in files:
        filename = entry["filename"]
        try:
            if filename.endswith(".whl"):
                if from_source:
                    continue
                project, file_version, _, file_tags = parse_wheel_filename(filename)
                if not file_tags & accepted:
                    continue
            elif from_source:
                project, file_version = parse_sdist_filename(filename)
            else:
                continue
        except (InvalidWheelFilename, InvalidSdistFilename):
            continue
        if canonical(project) == canonical(name) and file_version == wanted and "sha256" in entry.get("hashes", {}):
            digests.add(entry["hashes"]["sha256"])
    if not digests:
        kind = "sdist" if from_source else "cp310 manylinux x86_64 wheel"
        raise SystemExit(f"lock.py: no {kind} of {name}=={version} on the index: cannot pin its hash")
    return tuple(sorted(digests))


def index_files(index_url: str, name: str) -> list[dict]:
    """A project's files from a PEP 691 JSON simple index (``{index_url}/{name}/``): the "files" list."""
    request = urllib.request.Request(f"{index_url.rstrip('/')}/{canonical(name)}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)["files"]


def add_hashes(pins: dict[str, Pin], no_binary: tuple[str, ...], fetch=None, accepted: set | None = None) -> dict[str, Pin]:
    """``pins`` with each one's hashes read from the index (``fetch(name) -> files``; index_files on PyPI by default)."""
    fetch = fetch or (lambda name: index_files(INDEX_URL, name))
    accepted = target_tags() if accepted is None else accepted
    return {key: Pin(pin.name, pin.version, select_hashes(fetch(pin.name), pin.name, pin.version, key in no_binary, accepted))
            for key, pin in pins.items()}


class Resolver:
    def __init__(self, uv: str, standins: Path, exclude_newer: str, workdir: Path):
        self.uv, self.standins, self.exclude_newer, self.workdir = uv, standins, exclude_newer, workdir

    def compile(self, requirements: Path, constraints: Path | None = None, no_binary: tuple[str, ...] = (), only_binary: bool = False) -> subprocess.CompletedProcess:
        command = [self.uv, "pip", "compile", str(requirements), "--python-version", PYTHON_VERSION, "--python-platform", PLATFORM,
                   "--find-links", str(self.standins), "--exclude-newer", self.exclude_newer,
                   "--no-header", "--no-annotate"]
        for name, date in EXCLUDE_NEWER_PACKAGES.items():
            command += ["--exclude-newer-package", f"{name}={date}"]
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
            return parse_pins(result.stdout)  # uv's own hashes would include the stand-ins' (add_hashes)
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


def render(name: str, pins: dict, no_binary: tuple[str, ...], exclude_newer: str) -> str:
    """A lock file's text. ``pins`` maps canonical names to Pin (hashes written one per continued line)
    or to (name, version) pairs (no hashes)."""
    lines = [
        f"# docker/{name}: {HEADERS[name]}.",
        f"# Generated by docker/lock.py (uv {UV_VERSION}; CPython {PYTHON_VERSION}, {PLATFORM}; published before",
        f"# {exclude_newer}) from docker/image.in and docker/a10.in. Do not edit: change the .in files and rerun.",
    ]
    if name in HASH_EXEMPT:
        lines += HASH_EXEMPT_NOTE
    here = sorted(set(no_binary) & set(pins))
    if here:
        lines.append("# no wheel is published for these; the build stage builds them from source (pure Python):")
        lines.append("--no-binary " + ",".join(here))
    for key in sorted(pins):
        pin = pins[key] if isinstance(pins[key], Pin) else Pin(*pins[key])
        lines.append(" \\\n".join([f"{pin.name}=={pin.version}", *(f"    --hash=sha256:{digest}" for digest in pin.hashes)]))
    return "\n".join(lines) + "\n"


def torch_index_hashes(name: str, version: str) -> tuple[str, ...]:
    """A TORCH_INDEX_URL pin's hashes: the published sha256 (PUBLISHED_HASHES), else its build argument's ``${NAME}``.

    Raises:
        SystemExit: naming the pin when it has neither (add one to PUBLISHED_HASHES or HASH_BUILD_ARGS).
    """
    key = (canonical(name), version)
    if key in PUBLISHED_HASHES:
        return PUBLISHED_HASHES[key]
    if key in HASH_BUILD_ARGS:
        return (f"${{{HASH_BUILD_ARGS[key]}}}",)
    raise SystemExit(f"lock.py: {name}=={version} from TORCH_INDEX_URL has no published sha256 (PUBLISHED_HASHES) and no build "
                     "argument that gives one (HASH_BUILD_ARGS): add one of them; no pin is locked without a hash")


def hash_layers(layers: dict[str, dict], no_binary: tuple[str, ...], fetch=None) -> dict[str, dict]:
    """Every layer but HASH_EXEMPT with its pins' hashes (add_hashes); the exempt ones with torch_index_hashes'."""
    accepted = target_tags()
    return {name: {key: Pin(pin.name, pin.version, torch_index_hashes(pin.name, pin.version))
                   for key, pin in ((key, pin if isinstance(pin, Pin) else Pin(*pin)) for key, pin in pins.items())}
            if name in HASH_EXEMPT else
            add_hashes({key: pin if isinstance(pin, Pin) else Pin(*pin) for key, pin in pins.items()}, no_binary, fetch, accepted)
            for name, pins in layers.items()}


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


def rehash(fetch=None) -> None:
    """``--hashes-only``: keep every lock's pins, no-binary list and date; (re)write its hashes."""
    layers, no_binary, dates = {}, (), {}
    for name in HEADERS:
        text = (HERE / name).read_text()
        layers[name] = parse_lock(text)
        no_binary += no_binary_names(text)
        found = re.search(r"^# (\S+)\) from docker/image.in", text, re.MULTILINE)
        if not found:
            raise SystemExit(f"lock.py: docker/{name} has no generated header; run lock.py without --hashes-only")
        dates[name] = found.group(1)
    for name, pins in hash_layers(layers, no_binary, fetch).items():
        (HERE / name).write_text(render(name, pins, no_binary, dates[name]))
        print(f"docker/{name}: {len(pins)} packages" + ("" if name in HASH_EXEMPT else ", hashes read"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uv", default="uv", help="uv executable (version %s)" % UV_VERSION)
    parser.add_argument("--exclude-newer", default=EXCLUDE_NEWER)
    parser.add_argument("--index-url", default=INDEX_URL, help="a PEP 691 (JSON) simple index to read the hashes from (default %(default)s)")
    parser.add_argument("--hashes-only", action="store_true", help="keep the pins, (re)read their hashes; needs no uv")
    args = parser.parse_args(argv)
    def fetch(name: str) -> list[dict]:
        return index_files(args.index_url, name)

    if args.hashes_only:
        rehash(fetch)
        return 0
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
        (work / "torch.in").write_text("torch==2.6.0+cu118\n")
        torch_closure = resolver.pins(work / "torch.in", work / "a10.txt")
        no_binary = resolver.sdist_only(work / "a10.txt")
    for name, pins in hash_layers(split_layers(a10, p40, torch_closure), no_binary, fetch).items():
        (HERE / name).write_text(render(name, pins, no_binary, args.exclude_newer))
        print(f"docker/{name}: {len(pins)} packages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
