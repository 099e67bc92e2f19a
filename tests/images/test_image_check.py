"""docker/check-image.py, the build-time checks, run outside an image: one check at a time, with a
fake torch (CUDA 11.8 arch flags and no GPU), a fake xformers build record and a fake pip check."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from image_helpers import REPO

CHECK = REPO / "docker" / "check-image.py"
# torch 2.6.0+cu118's compiled architectures, as torch._C._cuda_getArchFlags() reports them
ARCH_FLAGS = "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_37 sm_90"


def check(*args: str, fakes: Path | None = None) -> subprocess.CompletedProcess:
    environment = dict(os.environ)
    if fakes:
        environment["PYTHONPATH"] = str(fakes) + os.pathsep + environment.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, str(CHECK), *args], env=environment, capture_output=True, text=True)


@pytest.fixture()
def fake_torch(tmp_path):
    """A torch package that knows its CUDA version and arch flags and, like any torch in
    `docker build`, sees no GPU (get_arch_list() is then empty)."""
    package = tmp_path / "torch"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import types\n"
        "__version__ = '2.6.0+cu118'\n"
        "version = types.SimpleNamespace(cuda='11.8')\n"
        f"_C = types.SimpleNamespace(_cuda_getArchFlags=lambda: {ARCH_FLAGS!r})\n"
        "cuda = types.SimpleNamespace(is_available=lambda: False, get_arch_list=lambda: [])\n"
    )
    return tmp_path


def test_arch_and_cuda_pass_for_the_p40_and_a10_entries(fake_torch):
    result = check("--cuda", "11.8", "--arch", "sm_60", fakes=fake_torch)
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines() == [
        "PASS torch-cuda: torch 2.6.0+cu118, CUDA 11.8",
        f"PASS torch-arch: sm_60 in {ARCH_FLAGS}",
        "check-image: 2 passed, 0 failed",
    ]
    assert check("--arch", "sm_86", fakes=fake_torch).returncode == 0


def test_there_is_no_sm_61_entry_for_the_p40(fake_torch):
    result = check("--arch", "sm_61", fakes=fake_torch)
    assert result.returncode == 1
    assert (
        result.stdout.splitlines()[0]
        == f"FAIL torch-arch: sm_61 is not among torch's CUDA architectures {ARCH_FLAGS.split()}"
    )


def test_wrong_cuda_build_fails(fake_torch):
    result = check("--cuda", "12.4", fakes=fake_torch)
    assert result.stdout.splitlines()[0] == "FAIL torch-cuda: torch 2.6.0+cu118 is built for CUDA 11.8, expected 12.4"
    assert result.returncode == 1


def test_a_cpu_torch_has_no_arch_flags(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "import types\n__version__ = '2.6.0+cpu'\n_C = types.SimpleNamespace()\n"
    )
    result = check("--arch", "sm_60", fakes=tmp_path)
    assert (
        result.stdout.splitlines()[0] == "FAIL torch-arch: torch 2.6.0+cpu reports no CUDA architectures (a CPU build?)"
    )


def test_lock_pins_and_expected_versions(tmp_path):
    import pytest as installed

    lock = tmp_path / "test.lock"
    lock.write_text(f"# a lock\n--no-binary something\npytest=={installed.__version__}\nPyYAML==0.0.1\n")
    result = check("--lock", str(lock), "--expect", f"pytest=={installed.__version__}")
    import yaml

    assert result.stdout.splitlines() == [
        f"FAIL lock test.lock: 1 of 2 differ from test.lock: pyyaml {yaml.__version__} (want 0.0.1)",
        "PASS versions: 1 package as the Dockerfile's version ARGs says",
        "check-image: 1 passed, 1 failed",
    ]


def test_version_matching_rules():

    spec = importlib.util.spec_from_file_location("check_image", CHECK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.version_matches("2.6.0+cu118", "2.6.0+cu118")
    assert not module.version_matches("2.6.0", "2.6.0+cu118")
    assert not module.version_matches("2.6.0+cu124", "2.6.0+cu118")
    assert module.version_matches("2.7.3+cu11torch2.6cxx11abifalse", "2.7.3")
    assert module.version_matches("0.8.5+cu118", "0.8.5")
    assert not module.version_matches(None, "0.8.5")
    assert not module.version_matches("0.8.50", "0.8.5")


def test_absent_packages(tmp_path):
    assert (
        check("--absent", "vllm", "--absent", "flash-attn", "--absent", "liger-kernel").stdout.splitlines()[0]
        == "PASS absent: not installed: vllm, flash-attn, liger-kernel"
    )
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "__init__.py").write_text("")
    result = check("--absent", "flash-attn", "--absent", "pytest", fakes=tmp_path)
    import pytest as installed

    assert (
        result.stdout.splitlines()[0]
        == f"FAIL absent: module flash_attn is importable; pytest {installed.__version__} is installed"
    )


def test_imports_report_every_failure():
    result = check("--import", "json", "--import", "no_such_module_here")
    assert (
        result.stdout.splitlines()[0]
        == "FAIL imports: no_such_module_here: ModuleNotFoundError: No module named 'no_such_module_here'"
    )
    assert check("--import", "verlfit.cli").stdout.splitlines()[0] == "PASS imports: imported verlfit.cli"


@pytest.mark.parametrize(
    "cuda, line",
    [
        (1108, "PASS xformers-cuda: xformers built for CUDA 1108, torch 2.6.0+cu118"),
        (
            1204,
            (
                "FAIL xformers-cuda: xformers was built for CUDA 1204 (torch 2.6.0+cu124), expected 1108: it came from"
                " PyPI, not from TORCH_INDEX_URL"
            ),
        ),
    ],
)
def test_xformers_must_be_the_cuda_11_8_build(tmp_path, cuda, line):
    package = tmp_path / "xformers"
    package.mkdir()
    (package / "__init__.py").write_text("")
    torch = "2.6.0+cu118" if cuda == 1108 else "2.6.0+cu124"
    (package / "cpp_lib.json").write_text(
        json.dumps({"version": {"cuda": cuda, "torch": torch, "python": "3.10.16"}, "env": {}})
    )
    assert check("--xformers-cuda", "1108", fakes=tmp_path).stdout.splitlines()[0] == line


@pytest.fixture()
def fake_pip(tmp_path):
    """`python -m pip check` answering with two broken requirements."""
    package = tmp_path / "pip"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(
        "import sys\n"
        "print('vllm 0.8.5+cu118 has requirement foo>=1, but you have foo 0.9.')\n"
        "print('ray 2.46.0 requires bar, which is not installed.')\n"
        "sys.exit(1)\n"
    )
    return tmp_path


def test_pip_check_fails_on_unlisted_problems(fake_pip):
    result = check("--pip-check", "--pip-check-allow", r"^ray 2\.46\.0 requires bar,", fakes=fake_pip)
    assert (
        result.stdout.splitlines()[0]
        == "FAIL pip-check: pip check: vllm 0.8.5+cu118 has requirement foo>=1, but you have foo 0.9."
    )
    result = check(
        "--pip-check",
        "--pip-check-allow",
        r"^ray 2\.46\.0 requires bar,",
        "--pip-check-allow",
        r"^vllm .* foo>=1",
        fakes=fake_pip,
    )
    assert result.stdout.splitlines()[0] == "PASS pip-check: pip check clean apart from 2 listed exception(s)"


def test_verlfit_runs(monkeypatch):
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    assert (
        check("--verlfit", "p40").stdout.splitlines()[0]
        == "PASS verlfit: verlfit --help and verlfit profiles p40 --env-shell run"
    )
    monkeypatch.setenv("PATH", "/nonexistent")
    assert check("--verlfit", "p40").stdout.splitlines()[0] == "FAIL verlfit: verlfit is not on PATH"


def test_verl_must_come_from_the_patched_checkout(tmp_path):
    result = check("--verl-dir", str(tmp_path), "--patches-dir", str(REPO / "patches"))
    import verl

    location = Path(verl.__file__).resolve().parent
    assert (
        result.stdout.splitlines()[0]
        == f"FAIL verl: verl is imported from {location}, not from the patched checkout {tmp_path}"
    )


def test_no_checks_is_a_usage_error():
    result = check()
    assert (result.returncode, result.stderr.strip()) == (1, "check-image.py: no checks requested (see --help)")


def test_extension_must_be_compiled_and_load_against_this_torch(fake_torch, tmp_path):
    """flash_attn_2_cuda built against another torch fails to load with an undefined symbol: a
    shared object whose one function calls a symbol nothing defines stands in for it (Python opens
    extensions with RTLD_NOW, so the load fails as the real mismatch does)."""
    import importlib.machinery
    import shutil
    import sysconfig

    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    source = tmp_path / "mismatch.c"
    source.write_text(
        "extern void _ZN3c1015SmallVectorBaseIjE8grow_podEPvmm(void);\n"
        "void flash_attn_entry(void) { _ZN3c1015SmallVectorBaseIjE8grow_podEPvmm(); }\n"
    )
    assert shutil.which("gcc"), "the test needs gcc (.ci/run installs it)"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(fake_torch / f"flash_attn_2_cuda{suffix}"), str(source)], check=True
    )
    result = check("--extension", "flash_attn_2_cuda", fakes=fake_torch)
    line = result.stdout.splitlines()[0]
    assert line.startswith(
        f"FAIL extensions: flash_attn_2_cuda: ImportError: {fake_torch / f'flash_attn_2_cuda{suffix}'}: undefined"
        " symbol: _ZN3c1015SmallVectorBaseIjE8grow_podEPvmm"
    ), line
    assert line.endswith(" (built against another torch: an ABI mismatch)")
    assert result.returncode == 1

    # a Python module of that name (a stand-in that would hide the extension) is no extension
    (fake_torch / f"flash_attn_2_cuda{suffix}").unlink()
    (fake_torch / "flash_attn_2_cuda.py").write_text("")
    assert (
        check("--extension", "flash_attn_2_cuda", fakes=fake_torch).stdout.splitlines()[0]
        == f"FAIL extensions: flash_attn_2_cuda: {fake_torch / 'flash_attn_2_cuda.py'} is not a compiled extension"
    )
    assert (
        check("--extension", "no_such_extension", fakes=fake_torch).stdout.splitlines()[0]
        == "FAIL extensions: no_such_extension: not found"
    )

    # a compiled extension that links passes (the interpreter's own _ctypes)
    origin = importlib.util.find_spec("_ctypes").origin
    assert isinstance(importlib.util.find_spec("_ctypes").loader, importlib.machinery.ExtensionFileLoader)
    assert (
        check("--extension", "_ctypes", fakes=fake_torch).stdout.splitlines()[0]
        == f"PASS extensions: loaded _ctypes ({os.path.basename(origin)})"
    )


def test_libraries_resolve_with_ldd_the_drivers_aside(tmp_path):
    """ldd on real shared objects: Python's own resolves; one that needs an absent library fails, naming it; the
    driver's libcuda.so.1 (mounted at run time) is no failure; a pattern that matches nothing fails."""
    import shutil as shell_tools

    gcc = shell_tools.which("gcc") or shell_tools.which("cc")
    if gcc is None:
        pytest.fail("a C compiler is needed to make the test's shared objects (Debian: gcc)")
    stub = tmp_path / "stub.c"
    stub.write_text("int verlfit_stub(void) { return 0; }\n")
    for soname in ("libverlfitabsent.so.1", "libcuda.so.1"):
        subprocess.run(
            [gcc, "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(tmp_path / soname), str(stub)], check=True
        )
    for name, needed in (("needs-absent.so", "libverlfitabsent.so.1"), ("needs-driver.so", "libcuda.so.1")):
        # --no-as-needed: record the library although the stub calls nothing in it
        subprocess.run(
            [
                gcc,
                "-shared",
                "-fPIC",
                "-o",
                str(tmp_path / name),
                str(stub),
                "-Wl,--no-as-needed",
                str(tmp_path / needed),
            ],
            check=True,
        )
    for soname in ("libverlfitabsent.so.1", "libcuda.so.1"):
        (tmp_path / soname).unlink()  # gone at run time, as a library the image lacks
    result = check("--libraries", str(tmp_path / "needs-driver.so"))
    assert (
        result.stdout.splitlines()[0]
        == "PASS libraries: 1 shared objects find every library they need (ldd; libcuda.so.1 is the driver's, mounted"
        " at run time)"
    )
    result = check("--libraries", str(tmp_path / "needs-*.so"))
    assert result.returncode == 1
    assert (
        result.stdout.splitlines()[0]
        == f"FAIL libraries: {tmp_path / 'needs-absent.so'}: libverlfitabsent.so.1 not found"
    )
    result = check("--libraries", str(tmp_path / "nothing-*.so"))
    assert result.stdout.splitlines()[0] == f"FAIL libraries: no file matches {tmp_path / 'nothing-*.so'}"
