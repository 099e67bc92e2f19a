"""Stand-in for the PyTorch cu118 index, which this network cannot reach: a PEP 503 index serving
torch 2.6.0+cu118 (both images), torchvision 0.21.0+cu118 and torchaudio 2.6.0+cu118 (the A10 image's: vLLM 0.8.5
requires them; the P40 image has neither) made from PyPI's 2.6.0 / 0.21.0 / 2.6.0 wheels (the CUDA 12.4 builds: PyPI
has no cu118 build).

What changes in each wheel, and nothing else:
- the version gets the local label ``+cu118`` (METADATA's Version, the .dist-info folder, the file name), so the
  image's locks (``torch==2.6.0+cu118``) resolve exactly as against the real index;
- torch's ``Requires-Dist`` on ``nvidia-*-cu12`` packages becomes the cu118 build's, the ``nvidia-*-cu11`` pins of
  docker/torch-deps.lock (what the real torch 2.6.0+cu118 requires), so ``pip check`` judges the same tree;
- torch carries the CUDA 12 libraries its compiled code links to that the cu11 packages do not provide
  (libcudart.so.12, libcublas.so.12, ...), under ``nvidia/<name>/lib/`` (``cusparselt/lib/``) where its RPATH looks, so
  ``import torch`` works on a machine without a GPU as the real build's does.
``torch.version.cuda`` stays ``12.4``: the rehearsal builds with ``TORCH_CUDA_VERSION=12.4``, so the image's CUDA check
runs and reports the CUDA it saw. PyPI's xformers 0.0.29.post2 (the A10 image's, CUDA 12.4 build) is served as it is:
docker/a10-cu118.lock pins it without a local label. The A10 image's three take their sha256 from build args
(TORCHVISION_WHEEL_SHA256, TORCHAUDIO_WHEEL_SHA256, XFORMERS_WHEEL_SHA256): the rehearsal passes these files' own.

Usage: python stand_in_torch_index.py PYPI_WHEELS CU12_WHEELS TORCH_DEPS_LOCK OUT
  PYPI_WHEELS  folder with PyPI's torch-2.6.0, torchvision-0.21.0, torchaudio-2.6.0 and xformers-0.0.29.post2 cp310
wheels
  CU12_WHEELS  folder with the nvidia-*-cu12 wheels named in CU12_LIBRARIES (torch 2.6.0's own pins)
  OUT          written: OUT/simple/<project>/index.html and OUT/files/*.whl
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

LOCAL_LABEL = "cu118"
# nvidia-*-cu12 packages (torch 2.6.0's own pins, tests/images/rehearsal/stand-in-cu12.txt) whose libraries torch
# 2.6.0's own libraries need (readelf -d on torch/lib/*.so: NEEDED) under a soname no nvidia-*-cu11 package of
# torch-deps.lock provides: libcudart.so.12, libcublas(Lt).so.12, libcufft.so.11, libcusparse.so.12 (and the
# libnvJitLink.so.12 it needs), libcusparseLt.so.0, libcupti.so.12, libnvrtc.so.12. cuDNN 9, NCCL 2, cuRAND 10 and
# cuSOLVER 11 have the same sonames in both (only libtorch_cuda_linalg.so links cuSOLVER, loaded on first GPU use).
CU12_LIBRARIES = (
    "nvidia_cuda_runtime_cu12",
    "nvidia_cublas_cu12",
    "nvidia_cufft_cu12",
    "nvidia_cusparse_cu12",
    "nvidia_nvjitlink_cu12",
    "nvidia_cusparselt_cu12",
    "nvidia_cuda_cupti_cu12",
    "nvidia_cuda_nvrtc_cu12",
)


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def cu11_requirements(lock: Path) -> list[str]:
    """The ``nvidia-*-cu11==VERSION`` pins of docker/torch-deps.lock, as Requires-Dist values."""
    pins = re.findall(r"^(nvidia-[a-z0-9-]+-cu11)==(\S+)", lock.read_text(), flags=re.MULTILINE)
    if not pins:
        raise SystemExit(f"{lock}: no nvidia-*-cu11 pins")
    return [f'{name}=={version}; platform_system == "Linux" and platform_machine == "x86_64"' for name, version in pins]


def relabel(wheel: Path, out_dir: Path, cu11: list[str], cu12_dir: Path | None) -> Path:
    """Write ``wheel`` with version ``V+cu118`` into ``out_dir`` (see the module docstring); return its path."""
    name, version, *tags = wheel.name[: -len(".whl")].split("-")
    new_version = f"{version}+{LOCAL_LABEL}"
    old_info, new_info = f"{name}-{version}.dist-info", f"{name}-{new_version}.dist-info"
    target = out_dir / ("-".join([name, new_version, *tags]) + ".whl")
    with tempfile.TemporaryDirectory(dir=out_dir) as scratch:
        staging = Path(scratch)
        with zipfile.ZipFile(wheel) as source:
            info_files = {
                item: source.read(item)
                for item in source.namelist()
                if item.startswith(old_info + "/") and not item.endswith("/")
            }
        metadata = info_files[f"{old_info}/METADATA"].decode()
        metadata = re.sub(r"^Version: .*$", f"Version: {new_version}", metadata, count=1, flags=re.MULTILINE)
        if name == "torch":
            lines = [
                line for line in metadata.split("\n") if not re.match(r"Requires-Dist: nvidia-[a-z0-9-]+-cu12", line)
            ]
            at = next(index for index, line in enumerate(lines) if line.startswith("Requires-Dist:"))
            lines[at:at] = [f"Requires-Dist: {requirement}" for requirement in cu11]
            metadata = "\n".join(lines)
        info_files[f"{old_info}/METADATA"] = metadata.encode()
        added: dict[str, bytes] = {}
        if name == "torch" and cu12_dir is not None:
            for package in CU12_LIBRARIES:
                found = sorted(cu12_dir.glob(f"{package}-*.whl"))
                if len(found) != 1:
                    raise SystemExit(f"{cu12_dir}: expected one {package}-*.whl, found {[path.name for path in found]}")
                with zipfile.ZipFile(found[0]) as library:
                    for item in library.namelist():
                        # nvidia/<name>/lib/ (cusparselt/lib/ for cuSPARSELt), where torch's RPATH looks
                        if item.startswith(("nvidia/", "cusparselt/")) and "/lib/" in item and not item.endswith("/"):
                            added[item] = library.read(item)
        # the new .dist-info (RECORD rewritten: renamed folder, new METADATA hash, the added libraries)
        record_name = f"{new_info}/RECORD"
        record = [
            line
            for line in info_files.pop(f"{old_info}/RECORD").decode().splitlines()
            if line and not line.startswith(old_info + "/")
        ]
        for item, data in info_files.items():
            path = staging / item.replace(old_info, new_info, 1)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            record.append(f"{item.replace(old_info, new_info, 1)},{record_hash(data)},{len(data)}")
        for item, data in added.items():
            path = staging / item
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            record.append(f"{item},{record_hash(data)},{len(data)}")
        record.append(f"{record_name},,")
        (staging / record_name).write_text("\n".join(record) + "\n")
        partial = target.with_name(target.name + ".partial")
        shutil.copyfile(wheel, partial)
        # zip(1) edits in place without recompressing the rest: drop the old .dist-info, add the new one
        # (deflated) and the libraries (stored: they are large and compress little)
        subprocess.run(["zip", "--quiet", "--delete", str(partial), f"{old_info}/*"], check=True)
        subprocess.run(["zip", "--quiet", "--recurse-paths", str(partial), new_info], cwd=staging, check=True)
        if added:
            tops = sorted({item.split("/")[0] for item in added})
            subprocess.run(["zip", "--quiet", "-0", "--recurse-paths", str(partial), *tops], cwd=staging, check=True)
        partial.rename(target)
    return target


def write_index(files: list[Path], out: Path) -> None:
    """PEP 503: OUT/simple/<project>/index.html linking each file with its sha256."""
    for project in sorted({path.name.split("-")[0] for path in files}):
        page = out / "simple" / project / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        links = []
        for path in sorted(files):
            if path.name.split("-")[0] == project:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                url = "../../files/" + path.name.replace("+", "%2B")
                links.append(f'<a href="{html.escape(url)}#sha256={digest}">{html.escape(path.name)}</a><br>')
        page.write_text("<!DOCTYPE html>\n<html><body>\n" + "\n".join(links) + "\n</body></html>\n")


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__.split("Usage: ")[1].split("\n")[0], file=sys.stderr)
        return 2
    pypi, cu12, lock, out = (Path(arg) for arg in argv)
    files_dir = out / "files"
    files_dir.mkdir(parents=True, exist_ok=True)
    cu11 = cu11_requirements(lock)
    made = []
    for project, version in (("torch", "2.6.0"), ("torchvision", "0.21.0"), ("torchaudio", "2.6.0")):
        found = sorted(pypi.glob(f"{project}-{version}-cp310-*.whl"))
        if len(found) != 1:
            print(
                f"{pypi}: expected one {project}-{version}-cp310-*.whl, found {[path.name for path in found]}",
                file=sys.stderr,
            )
            return 1
        made.append(relabel(found[0], files_dir, cu11, cu12 if project == "torch" else None))
    served = list(made)
    for wheel in sorted(pypi.glob("xformers-0.0.29.post2-cp310-*.whl")):
        shutil.copyfile(wheel, files_dir / wheel.name)
        served.append(files_dir / wheel.name)
    write_index(served, out)
    for path in made:
        print(f"stand-in: {path.name} (from PyPI's {path.name.replace('+' + LOCAL_LABEL, '')})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
