#!/usr/bin/env python3
"""Build-time checks of a verlfit image: any FAIL fails the build (the last RUN of the Dockerfiles).

usage: check-image.py [--python 3.10] [--cuda 11.8] [--arch sm_60] [--lock FILE]... [--expect NAME==VERSION]...
                      [--absent DIST]... [--import MODULE]... [--extension MODULE]... [--xformers-cuda 1108] [--cudnn VERSION]
                      [--verl-dir DIR --patches-dir DIR] [--verlfit PROFILE] [--pip-check] [--pip-check-allow REGEX]...
                      [--libraries GLOB]...

Each option turns one check on, so the checks can be run one at a time outside an image
(tests/images/test_check_image.py). One line per check, "PASS name: detail" or "FAIL name: detail",
then the exit status: 0 when every check passed, 1 otherwise. Versions: "NAME==2.6.0+cu118" must
match exactly; "NAME==2.7.3" also accepts a local build of 2.7.3 ("2.7.3+cu11torch2.6cxx11abifalse").

Why the architecture check reads ``torch._C._cuda_getArchFlags()``: ``torch.cuda.get_arch_list()``
returns [] when no GPU is visible, which is always the case in ``docker build``; the arch flags are
the compile-time list (``sm_50 sm_60 ...``) and need no device. torch 2.6.0+cu118 has sm_60 code,
which runs on the P40's compute capability 6.1; it has no sm_61 entry (torch's build list; see docs/images.md).
"""

from __future__ import annotations

import argparse
import glob
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# docker/lock.py beside this file (the image has the whole docker/ folder) reads lock files and names
sys.path.insert(0, str(Path(__file__).resolve().parent))
from lock import canonical, parse_pins  # noqa: E402

# distribution name -> the module it would make importable
MODULES = {"vllm": "vllm", "flash-attn": "flash_attn", "liger-kernel": "liger_kernel", "xformers": "xformers", "apex": "apex"}


class CheckFailed(Exception):
    """A check's failure; its message is the detail printed after FAIL."""


def read_lock(path: Path) -> dict[str, str]:
    """A lock file's pins as {canonical name: version} (read by docker/lock.py's parser)."""
    try:
        return {name: version for name, (_, version) in parse_pins(Path(path).read_text()).items()}
    except ValueError as error:
        raise CheckFailed(f"{path}: {error}") from None


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_python(expected: str) -> str:
    actual = "%d.%d" % sys.version_info[:2]
    if actual != expected:
        raise CheckFailed(f"Python {actual}, expected {expected}")
    return f"Python {sys.version.split()[0]} at {sys.executable}"


def check_torch_cuda(expected: str) -> str:
    import torch

    if torch.version.cuda != expected:
        raise CheckFailed(f"torch {torch.__version__} is built for CUDA {torch.version.cuda}, expected {expected}")
    return f"torch {torch.__version__}, CUDA {torch.version.cuda}"


def check_arch(arch: str) -> str:
    import torch

    flags = torch._C._cuda_getArchFlags() if hasattr(torch._C, "_cuda_getArchFlags") else None
    if not flags:
        raise CheckFailed(f"torch {torch.__version__} reports no CUDA architectures (a CPU build?)")
    archs = flags.split()
    if arch not in archs:
        raise CheckFailed(f"{arch} is not among torch's CUDA architectures {archs}")
    return f"{arch} in {' '.join(archs)}"


def version_matches(actual: str | None, expected: str) -> bool:
    """Exact match; an expected version without a local part ("2.7.3") also accepts any local
    build of it ("2.7.3+cu11torch2.6cxx11abifalse"), one with a local part only itself."""
    if actual is None:
        return False
    return actual == expected or ("+" not in expected and actual.split("+", 1)[0] == expected)


def check_pins(pins: dict[str, str], what: str) -> str:
    wrong = []
    for name, version in sorted(pins.items()):
        actual = installed_version(name)
        if not version_matches(actual, version):
            wrong.append(f"{name} {actual or 'missing'} (want {version})")
    if wrong:
        raise CheckFailed(f"{len(wrong)} of {len(pins)} differ from {what}: " + ", ".join(wrong))
    return f"{len(pins)} package{'s' if len(pins) != 1 else ''} as {what} says"


def check_absent(dists: list[str]) -> str:
    present = []
    for dist in dists:
        version = installed_version(dist)
        module = MODULES.get(canonical(dist), canonical(dist).replace("-", "_"))
        if version is not None:
            present.append(f"{dist} {version} is installed")
        elif importlib.util.find_spec(module) is not None:
            present.append(f"module {module} is importable")
    if present:
        raise CheckFailed("; ".join(present))
    return "not installed: " + ", ".join(dists)


def check_imports(modules: list[str]) -> str:
    failed = []
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as error:  # noqa: BLE001 - report every import failure, whatever it is
            failed.append(f"{module}: {type(error).__name__}: {error}")
    if failed:
        raise CheckFailed("; ".join(failed))
    return "imported " + ", ".join(modules)


def check_extensions(modules: list[str]) -> str:
    """Each module is a compiled extension (loaded by ExtensionFileLoader from a shared object) that
    imports. flash-attn's Python package imports its extension flash_attn_2_cuda lazily in places, and
    a wheel built against another torch fails exactly there, with an undefined C++ symbol of torch
    (an ABI mismatch): importing the extension itself, after torch, proves it links to this torch.
    Needs no GPU: the CUDA driver is only opened at the first kernel launch."""
    import torch  # noqa: F401 - torch's libraries must be loaded first, as flash_attn does

    failed, loaded = [], []
    for module in modules:
        spec = importlib.util.find_spec(module)
        if spec is None:
            failed.append(f"{module}: not found")
            continue
        if not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            failed.append(f"{module}: {spec.origin} is not a compiled extension")
            continue
        try:
            importlib.import_module(module)
        except ImportError as error:
            hint = " (built against another torch: an ABI mismatch)" if "undefined symbol" in str(error) else ""
            failed.append(f"{module}: {type(error).__name__}: {error}{hint}")
            continue
        loaded.append(f"{module} ({os.path.basename(spec.origin)})")
    if failed:
        raise CheckFailed("; ".join(failed))
    return "loaded " + ", ".join(loaded)


def check_xformers_cuda(expected: int) -> str:
    spec = importlib.util.find_spec("xformers")
    if spec is None or not spec.submodule_search_locations:
        raise CheckFailed("xformers is not installed")
    build = json.loads((Path(list(spec.submodule_search_locations)[0]) / "cpp_lib.json").read_text())
    cuda = build["version"]["cuda"]
    if cuda != expected:
        raise CheckFailed(f"xformers was built for CUDA {cuda} (torch {build['version']['torch']}), expected {expected}: "
                          "it came from PyPI, not from TORCH_INDEX_URL")
    return f"xformers built for CUDA {cuda}, torch {build['version']['torch']}"


def check_cudnn(expected: str) -> str:
    if shutil.which("dpkg-query") is None:
        raise CheckFailed("dpkg-query not found")
    version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libcudnn8"], capture_output=True, text=True).stdout.strip()
    if version != expected:
        raise CheckFailed(f"libcudnn8 {version or 'missing'}, expected {expected}")
    held = subprocess.run(["apt-mark", "showhold"], capture_output=True, text=True).stdout.split()
    if "libcudnn8" not in held:
        raise CheckFailed(f"libcudnn8 {version} is not held (apt-mark showhold: {held})")
    return f"libcudnn8 {version}, held"


# the one library a GPU program may lack in `docker build`: the driver's, which the NVIDIA Container Toolkit mounts
DRIVER_LIBRARIES = ("libcuda.so.1",)


def check_libraries(patterns: list[str]) -> str:
    """Every shared object matching the glob patterns finds every library it needs (``ldd``: no "not found"), the
    driver's libcuda.so.1 aside. The image's runtime base is the CUDA "base" flavour, which has no CUDA libraries of
    its own: torch finds its own in the nvidia-*-cu11 wheels (its RPATH), and the system's (the held cuDNN 8) through
    /etc/ld.so.conf.d/verlfit-torch-cuda.conf. A pattern that matches nothing fails: a renamed file must not pass."""
    if shutil.which("ldd") is None:
        raise CheckFailed("ldd not found")
    empty = [pattern for pattern in patterns if not glob.glob(pattern)]
    if empty:
        raise CheckFailed(f"no file matches {', '.join(empty)}")
    files = sorted({path for pattern in patterns for path in glob.glob(pattern)})
    unresolved = []
    for path in files:
        output = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        lost = [line.split()[0] for line in output.splitlines() if "not found" in line and line.split()[0] not in DRIVER_LIBRARIES]
        if lost:
            unresolved.append(f"{path}: {', '.join(lost)} not found")
    if unresolved:
        raise CheckFailed("; ".join(unresolved))
    return f"{len(files)} shared objects find every library they need (ldd; {', '.join(DRIVER_LIBRARIES)} is the driver's, mounted at run time)"


def check_verl(verl_dir: str, patches_dir: str) -> str:
    import verl

    location = Path(verl.__file__).resolve().parent
    if Path(verl_dir).resolve() not in location.parents:
        raise CheckFailed(f"verl is imported from {location}, not from the patched checkout {verl_dir}")
    status = subprocess.run([sys.executable, str(Path(patches_dir) / "apply.py"), "--status", verl_dir], capture_output=True, text=True)
    if status.returncode != 0:
        raise CheckFailed(f"patches/apply.py --status exited {status.returncode}: {(status.stdout + status.stderr).strip()}")
    return f"verl {getattr(verl, '__version__', '?')} from {location}, patch series applied"


def check_verlfit(profile: str) -> str:
    if shutil.which("verlfit") is None:
        raise CheckFailed("verlfit is not on PATH")
    for command in (["verlfit", "--help"], ["verlfit", "profiles", profile, "--env-shell"]):
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise CheckFailed(f"{' '.join(command)} exited {result.returncode}: {result.stderr.strip()}")
    return f"verlfit --help and verlfit profiles {profile} --env-shell run"


def check_pip(allow: list[str]) -> str:
    result = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if line.strip() and line.strip() != "No broken requirements found."]
    broken = [line for line in lines if not any(re.search(pattern, line) for pattern in allow)]
    if broken or (result.returncode != 0 and not lines):
        raise CheckFailed("pip check: " + "; ".join(broken or [result.stderr.strip()]))
    return "pip check clean" + (f" apart from {len(lines)} listed exception(s)" if lines else "")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", metavar="X.Y", help="the interpreter's major.minor version")
    parser.add_argument("--cuda", metavar="X.Y", help="torch.version.cuda")
    parser.add_argument("--arch", metavar="SM", help="an entry of torch's compiled CUDA architectures, e.g. sm_60")
    parser.add_argument("--lock", action="append", default=[], metavar="FILE", help="every pin of this lock file is installed")
    parser.add_argument("--expect", action="append", default=[], metavar="NAME==VERSION", help="this exact version is installed")
    parser.add_argument("--absent", action="append", default=[], metavar="DIST", help="neither installed nor importable")
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE", help="imports without error")
    parser.add_argument("--extension", dest="extensions", action="append", default=[], metavar="MODULE",
                        help="a compiled extension module that loads against the installed torch (flash_attn_2_cuda)")
    parser.add_argument("--xformers-cuda", type=int, metavar="N", help="xformers' cpp_lib.json CUDA version (1108 = 11.8)")
    parser.add_argument("--cudnn", metavar="VERSION", help="the held libcudnn8 package version")
    parser.add_argument("--verl-dir", help="verl is imported from this checkout ...")
    parser.add_argument("--patches-dir", help="... and patches/apply.py --status passes for it")
    parser.add_argument("--verlfit", metavar="PROFILE", help="verlfit --help and verlfit profiles PROFILE --env-shell run")
    parser.add_argument("--pip-check", action="store_true", help="pip check reports nothing beyond --pip-check-allow")
    parser.add_argument("--pip-check-allow", action="append", default=[], metavar="REGEX", help="a known pip check line")
    parser.add_argument("--libraries", action="append", default=[], metavar="GLOB",
                        help="the shared objects matching it resolve every library they need (ldd), libcuda.so.1 aside")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    checks = []
    if args.python:
        checks.append(("python", lambda: check_python(args.python)))
    if args.cuda:
        checks.append(("torch-cuda", lambda: check_torch_cuda(args.cuda)))
    if args.arch:
        checks.append(("torch-arch", lambda: check_arch(args.arch)))
    for lock in args.lock:
        checks.append((f"lock {os.path.basename(lock)}", lambda lock=lock: check_pins(read_lock(Path(lock)), os.path.basename(lock))))
    if args.expect:
        expected = {}
        for item in args.expect:
            name, separator, version = item.partition("==")
            if not separator or not version:
                raise SystemExit(f"check-image.py: --expect needs NAME==VERSION, got {item!r}")
            expected[canonical(name)] = version
        checks.append(("versions", lambda: check_pins(expected, "the Dockerfile's version ARGs")))
    if args.absent:
        checks.append(("absent", lambda: check_absent(args.absent)))
    if args.imports:
        checks.append(("imports", lambda: check_imports(args.imports)))
    if args.extensions:
        checks.append(("extensions", lambda: check_extensions(args.extensions)))
    if args.xformers_cuda is not None:
        checks.append(("xformers-cuda", lambda: check_xformers_cuda(args.xformers_cuda)))
    if args.cudnn:
        checks.append(("cudnn", lambda: check_cudnn(args.cudnn)))
    if args.verl_dir or args.patches_dir:
        if not (args.verl_dir and args.patches_dir):
            raise SystemExit("check-image.py: --verl-dir and --patches-dir go together")
        checks.append(("verl", lambda: check_verl(args.verl_dir, args.patches_dir)))
    if args.verlfit:
        checks.append(("verlfit", lambda: check_verlfit(args.verlfit)))
    if args.pip_check:
        checks.append(("pip-check", lambda: check_pip(args.pip_check_allow)))
    if args.libraries:
        checks.append(("libraries", lambda: check_libraries(args.libraries)))
    if not checks:
        raise SystemExit("check-image.py: no checks requested (see --help)")
    failures = 0
    for name, check in checks:
        try:
            print(f"PASS {name}: {check()}", flush=True)
        except CheckFailed as error:
            failures += 1
            print(f"FAIL {name}: {error}", flush=True)
    print(f"check-image: {len(checks) - failures} passed, {failures} failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
