"""Doctor: every check against fakes of NVML (a P40, an A10, no GPU), torch, the filesystem and the network;
exact verdicts and messages, --json, exit status, and the blocking subset train runs."""

import dataclasses
import hashlib
import io
import json
import re
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fakes import LFS_POINTER, FakeNvml, write_model_dir
from verlfit import cli
from verlfit import gsm8k
from verlfit import readiness
from verlfit.commands import doctor
from verlfit.errors import VerlfitError
from verlfit.checks.patches import default_series
from verlfit.readiness import BLOCKING, CHECK_NAMES, DoctorContext, TorchInfo, arch_covers, blocking_checks, run_checks

GIB = 1024**3


P40 = ("Tesla P40", (6, 1), 25_637_224_448)
A10 = ("NVIDIA A10", (8, 6), 24_146_608_128)
NO_GPU = dict(error="NVML Shared Library Not Found")
TORCH_CU118 = TorchInfo(
    "2.6.0+cu118", "11.8", ("sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"), True, True
)
PATCHES = ["0001-a.patch", "0002-b.patch"]


def write_parquet(path, columns=readiness.VERL_COLUMNS, rows=3):
    """verl-format rows (GSM8K's data_source, chat messages, a reward_model struct with ground_truth) in ``columns``."""
    values = {
        "data_source": ["openai/gsm8k"] * rows,
        "reward_model": [{"style": "rule", "ground_truth": str(i)} for i in range(rows)],
        "prompt": [[{"role": "user", "content": f"question {i}"}] for i in range(rows)],
    }
    table = pa.table({name: values.get(name, [f"{name}{i}" for i in range(rows)]) for name in columns})
    pq.write_table(table, path)


@pytest.fixture
def world(tmp_path):
    """A prepared machine: data, a local model, a patched verl, the series, roomy disk and /dev/shm."""
    data = tmp_path / "data"
    data.mkdir()
    write_parquet(data / "train.parquet", rows=5)
    write_parquet(data / "test.parquet", rows=2)
    model = write_model_dir(tmp_path / "model")
    series_dir = tmp_path / "patches" / "verl-0.4.1"
    series_dir.mkdir(parents=True)
    for name in PATCHES:
        (series_dir / name).write_text(
            f"header of {name}\n--- a/verl/{name}.py\n+++ b/verl/{name}.py\n@@ -0,0 +1 @@\n+x = 1\n"
        )
    (series_dir / "series").write_text("# comment\n" + "\n".join(PATCHES) + "\n")
    shutil.copy(
        Path(__file__).resolve().parents[2] / "patches" / "apply.py", tmp_path / "patches" / "apply.py"
    )  # the doctor reads through it
    verl = tmp_path / "site-packages" / "verl"
    verl.mkdir(parents=True)
    marker = "# verl patch series applied by verlfit's patches/apply.py; do not edit.\n" + "".join(
        f"{hashlib.sha256((series_dir / n).read_bytes()).hexdigest()}  {n}\n" for n in PATCHES
    )
    (verl / ".verlfit-patches").write_text(marker)
    return SimpleNamespace(tmp=tmp_path, data=data, model=model, series=series_dir / "series", verl=verl)


def context(world, gpus=(P40,), nvml=None, torch=TORCH_CU118, environ=None, **fields):
    calls = {"torch": 0, "head": []}

    def torch_probe():
        calls["torch"] += 1
        return torch

    def head(url, timeout, headers):
        calls["head"].append(url)
        return 200

    values = dict(
        profile_name=None,
        environ=dict(environ or {}),
        nvml=nvml or FakeNvml(gpus),
        torch_probe=torch_probe,
        data_dir=str(world.data),
        model=str(world.model),
        checkpoint_dir=str(world.tmp / "runs"),
        disk_usage=lambda path: SimpleNamespace(total=500 * GIB, used=100 * GIB, free=400 * GIB),
        shm_size=lambda path: 8 * GIB,
        available_memory=lambda: 16 * GIB,  # Ray's store: 30% = 4.8 GiB, in the 8 GiB /dev/shm
        verl_dir=world.verl,
        series_path=world.series,
        head=head,
        hub_cache_lookup=lambda repo, name: None,
        dataset_cache_lookup=lambda dataset: None,
        find_spec=lambda name: SimpleNamespace(name=name),  # the image's Python: vllm and flash_attn importable
    )
    values.update(fields)
    ctx = DoctorContext(**values)
    ctx.calls = calls
    return ctx


def by_name(results):
    return {r.name: r for r in results}


def test_p40_ready_with_p40_profile(world):
    results = by_name(run_checks(context(world, profile_name="p40")))
    assert [r.status for r in results.values()] == ["PASS"] * len(CHECK_NAMES)
    assert results["driver"].message == "driver 535.183.01 (CUDA 12.2) runs CUDA 11.8 (needs >= 520.61.05)"
    assert (
        results["gpu"].message
        == "GPU 0: Tesla P40, compute capability 6.1: bf16 no, FlashAttention-2 no, vLLM no, Triton no; matches"
        " profile p40"
    )
    assert (
        results["torch-arch"].message
        == "torch 2.6.0+cu118 (CUDA 11.8) runs on compute capability 6.1 via sm_60 (same major, minor <= 1)"
    )
    assert (
        results["triton-shared-memory"].message
        == "profile p40's TRITON_MAX_SHARED_MEMORY=49152 <= Tesla P40's 49152 B per block (Triton does not run below"
        " compute capability 7.0 anyway)"
    )
    assert results["data"].message == f"{world.data}: train.parquet 5 rows, test.parquet 2 rows, verl columns present"
    assert results["cuda"].message == "torch 2.6.0+cu118 (CUDA 11.8) allocated and computed on the GPU"
    assert results["patches"].message == f"2 patches of verl-0.4.1 applied to {world.verl} (0001..0002)"
    assert doctor.exit_status(list(results.values())) == 0


def test_a10_profile_on_a_p40_fails_with_the_fix(world):
    result = by_name(run_checks(context(world, environ={"VERLFIT_PROFILE": "a10"})))["gpu"]
    assert result.status == "FAIL"
    assert (
        result.message
        == "GPU 0: Tesla P40, compute capability 6.1: bf16 no, FlashAttention-2 no, vLLM no, Triton no; profile a10"
        " needs compute capability >= 8.0 (bfloat16, flash_attention_2, vllm rollout)"
    )
    assert result.fix == "use the verlfit:p40 image (--profile p40)"


def test_a10_answers(world):
    results = by_name(run_checks(context(world, gpus=(A10,), profile_name="a10")))
    assert results["gpu"].status == "PASS"
    assert (
        results["gpu"].message
        == "GPU 0: NVIDIA A10, compute capability 8.6: bf16 yes, FlashAttention-2 yes, vLLM yes, Triton yes; matches"
        " profile a10"
    )
    assert results["torch-arch"].message.endswith("via sm_86 (same major, minor <= 6)")
    assert (
        results["triton-shared-memory"].message
        == "profile a10's TRITON_MAX_SHARED_MEMORY=101376 <= NVIDIA A10's 101376 B per block"
    )
    p40_image = by_name(run_checks(context(world, gpus=(A10,), profile_name="p40")))["gpu"]
    assert p40_image.status == "WARN"
    assert p40_image.fix == "use the verlfit:a10 image (--profile a10) for speed, or keep p40 to rehearse a P40"
    auto = by_name(run_checks(context(world, gpus=(A10,))))["gpu"]
    assert auto.message.endswith("-> profile a10 (image verlfit:a10)")


def test_no_gpu_fails_gpu_checks_without_touching_torch(world):
    ctx = context(world, nvml=FakeNvml(**NO_GPU))
    started = time.monotonic()
    results = by_name(run_checks(ctx))
    assert time.monotonic() - started < 1.0
    assert ctx.calls["torch"] == 0
    assert results["driver"].status == "FAIL"
    assert (
        results["driver"].message
        == "no NVIDIA GPU visible: NVML could not start (NVML Shared Library Not Found); is the NVIDIA driver installed"
        " and the GPU passed to this container (docker run --gpus all)"
    )
    assert (results["gpu"].status, results["gpu"].message) == ("FAIL", "no NVIDIA GPU visible: training cannot run")
    assert (results["cuda"].status, results["cuda"].message) == (
        "FAIL",
        "no NVIDIA GPU visible: CUDA from torch not tried",
    )
    assert results["torch-arch"].status == results["triton-shared-memory"].status == "SKIP"
    assert [results[n].status for n in ("shm", "disk", "data", "model", "patches")] == ["PASS"] * 5
    assert doctor.exit_status(list(results.values())) == 1


@pytest.mark.parametrize(
    "driver, status", [("520.61.05", "PASS"), ("470.82.01", "WARN"), ("450.80.02", "WARN"), ("440.33.01", "FAIL")]
)
def test_driver_versions(world, driver, status):
    result = by_name(
        run_checks(
            context(world, nvml=FakeNvml([P40], driver=driver, cuda=11040), profile_name="p40"), names=("driver",)
        )
    )["driver"]
    assert result.status == status
    if status == "FAIL":
        assert (
            result.message
            == f"driver {driver} (CUDA 11.4) cannot run CUDA 11.8 (needs >= 520.61.05, at least 450.80.02): the NVIDIA "
            "container toolkit refuses to start the images on it (NVIDIA_REQUIRE_CUDA=cuda>=11.8 driver>=450.80.2)"
        )
        assert result.fix == "upgrade the NVIDIA driver to >= 520.61.05"
    if status == "WARN":
        assert (
            result.message
            == f"driver {driver} (CUDA 11.4) is older than CUDA 11.8's 520.61.05: it runs only through minor-version"
            " compatibility (no PTX JIT of newer code); the images accept it (NVIDIA_REQUIRE_CUDA=cuda>=11.8"
            " driver>=450.80.2)"
        )


def toolkit_accepts(requirement: str, *, cuda: str, driver: str, brand: str) -> bool:
    """The NVIDIA container toolkit's NVIDIA_REQUIRE_* rule, as libnvidia-container's src/cli/dsl.c evaluates it:
    space-separated terms ORed, comma-separated conditions ANDed; cuda and driver compared number by number (missing
    parts are 0), brand as a string. cuda is the driver's CUDA version (cuDriverGetVersion), brand NVML's."""

    def version(text):
        parts = [int(part) for part in text.split(".")]
        return tuple(parts + [0] * (4 - len(parts)))

    def holds(condition):
        name, operator, value = re.fullmatch(r"(cuda|driver|brand)(>=|<=|!=|=|<|>)(\S+)", condition).groups()
        left, right = (
            (brand, value) if name == "brand" else (version({"cuda": cuda, "driver": driver}[name]), version(value))
        )
        return {
            ">=": left >= right,
            "<=": left <= right,
            "=": left == right,
            "!=": left != right,
            "<": left < right,
            ">": left > right,
        }[operator]

    return any(all(holds(condition) for condition in term.split(",")) for term in requirement.split())


# nvidia/cuda:11.8.0-base-ubuntu22.04's own NVIDIA_REQUIRE_CUDA (its ENV, as `printenv` shows it in published CI logs)
CUDA_BASE_REQUIREMENT = (
    "cuda>=11.8 brand=tesla,driver>=450,driver<451 brand=tesla,driver>=470,driver<471"
    " brand=unknown,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471"
    " brand=quadrortx,driver>=470,driver<471 brand=unknown,driver>=510,driver<511 brand=nvidia,driver>=510,driver<511"
    " brand=nvidiartx,driver>=510,driver<511 brand=quadrortx,driver>=510,driver<511"
    " brand=unknown,driver>=515,driver<516 brand=nvidia,driver>=515,driver<516 brand=nvidiartx,driver>=515,driver<516"
    " brand=quadrortx,driver>=515,driver<516"
)


# (driver, the CUDA version it reports: CUDA release notes, table 3)
DRIVERS = [
    ("440.33.01", "10.2"),
    ("450.36.06", "11.0"),
    ("450.80.02", "11.0"),
    ("470.82.01", "11.4"),
    ("510.47.03", "11.6"),
    ("515.65.01", "11.7"),
    ("520.61.05", "11.8"),
    ("535.183.01", "12.2"),
]


@pytest.mark.parametrize("driver, cuda", DRIVERS)
def test_the_images_driver_requirement_accepts_exactly_what_doctor_does_not_fail(world, driver, cuda):
    major, minor = (int(part) for part in cuda.split("."))
    nvml = FakeNvml([P40], driver=driver, cuda=major * 1000 + minor * 10)
    status = by_name(run_checks(context(world, nvml=nvml, profile_name="p40"), names=("driver",)))["driver"].status
    accepted = toolkit_accepts(readiness.IMAGE_DRIVER_REQUIREMENT, cuda=cuda, driver=driver, brand="tesla")
    assert (status, accepted) == {
        "440.33.01": ("FAIL", False),
        "450.36.06": ("FAIL", False),
        "520.61.05": ("PASS", True),
        "535.183.01": ("PASS", True),
    }.get(driver, ("WARN", True))
    # the same on a GeForce or an unknown brand: the rule does not depend on the card
    assert toolkit_accepts(readiness.IMAGE_DRIVER_REQUIREMENT, cuda=cuda, driver=driver, brand="geforce") == accepted


def test_the_cuda_bases_own_requirement_refused_teslas_that_doctor_warns_about():
    # why the images set their own: the base's windows are R450 and R470 for Tesla, so R510/R515 Teslas were refused
    refused = [
        driver
        for driver, cuda in DRIVERS
        if not toolkit_accepts(CUDA_BASE_REQUIREMENT, cuda=cuda, driver=driver, brand="tesla")
    ]
    assert refused == ["440.33.01", "510.47.03", "515.65.01"]
    assert toolkit_accepts(
        CUDA_BASE_REQUIREMENT, cuda="11.6", driver="510.47.03", brand="nvidia"
    )  # the brands it lists pass


def test_arch_coverage_rules():
    assert arch_covers(["sm_60", "sm_70"], (6, 1)) == "sm_60"  # sm_60 code runs on 6.1
    assert arch_covers(["sm_70", "sm_80"], (6, 1)) is None
    assert arch_covers(["sm_80", "sm_86", "sm_90"], (8, 9)) == "sm_86"
    assert arch_covers(["sm_90a", "compute_70"], (8, 6)) == "compute_70"
    assert arch_covers(["sm_86"], (8, 0)) is None  # a higher minor does not run on a lower one


def test_torch_without_pascal_kernels_fails(world):
    torch = TorchInfo("2.6.0+cu124", "12.4", ("sm_70", "sm_80", "sm_90"), True, True)
    result = by_name(run_checks(context(world, torch=torch), names=("torch-arch",)))["torch-arch"]
    assert result.status == "FAIL"
    assert (
        result.message
        == "torch 2.6.0+cu124 (CUDA 12.4) has no kernels for Tesla P40 (compute capability 6.1): arch list ['sm_70',"
        " 'sm_80', 'sm_90']"
    )


def test_torch_missing_skips_and_cuda_unusable_fails(world):
    missing = by_name(run_checks(context(world, torch=None), names=("torch-arch", "cuda")))
    assert missing["torch-arch"].status == missing["cuda"].status == "SKIP"
    broken = TorchInfo(
        "2.6.0+cu118",
        "11.8",
        TORCH_CU118.arch_list,
        True,
        False,
        "RuntimeError: CUDA error: no kernel image is available",
    )
    result = by_name(run_checks(context(world, torch=broken), names=("cuda",)))["cuda"]
    assert (result.status, result.message) == (
        "FAIL",
        "torch 2.6.0+cu118 could not compute on the GPU: RuntimeError: CUDA error: no kernel image is available",
    )


def test_triton_shared_memory_over_the_p40_limit(world):
    result = by_name(
        run_checks(
            context(world, environ={"TRITON_MAX_SHARED_MEMORY": "101376"}, profile_name="p40"),
            names=("triton-shared-memory",),
        )
    )["triton-shared-memory"]
    assert result.status == "FAIL"
    assert (
        result.message
        == "TRITON_MAX_SHARED_MEMORY=101376 exceeds Tesla P40's 49152 B per block: Triton kernels sized for it fail"
        " with 'out of resource: shared memory'"
    )
    assert result.fix == "export TRITON_MAX_SHARED_MEMORY=49152"


def test_dockers_default_dev_shm_fails_with_the_size_to_give(world):
    result = by_name(
        run_checks(context(world, shm_size=lambda path: 64 * 2**20, available_memory=lambda: 64 * GIB), names=("shm",))
    )["shm"]
    assert result.status == "FAIL"
    assert (
        result.message
        == "/dev/shm has 64 MiB free (Docker's default /dev/shm is 64 MiB); Ray's object store here is 10.0 GB (30% of"
        ' the 64.0 GiB available RAM, at most 10 GB): Ray would move it to /tmp, on disk ("This will harm'
        ' performance!")'
    )
    # 10 GB x 1.1 (Ray's own advice) = 10.24 GiB -> 11; the cap is 90% of what /dev/shm has free
    assert (
        result.fix
        == "give the container 11 GiB of shared memory: compose.yaml's shm_size: 11gb, or docker run --shm-size=11g (or"
        " --ipc=host); or cap Ray's store to fit: export RAY_DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES=60397977"
    )
    assert "shm" in BLOCKING


@pytest.mark.parametrize(
    "variable, value, words",
    [
        ("RAY_DEFAULT_OBJECT_STORE_MEMORY_PROPORTION", "abc", "a number (a fraction of the RAM, e.g. 0.3)"),
        ("RAY_DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES", "1e9", "a whole number of bytes"),
    ],
)
def test_a_ray_variable_ray_cannot_read_fails_the_shm_check_by_name(world, variable, value, words):
    """New-user re-trial: RAY_DEFAULT_OBJECT_STORE_MEMORY_PROPORTION=abc (or ..._MAX_MEMORY_BYTES=1e9) made the shm
    check say "the check itself failed: ValueError ...; report this as a verlfit bug". Ray reads them with float()
    and int() when it starts (ray_constants.env_float, env_integer), and fails on such values: a FAIL naming the
    variable."""
    ctx = context(world, shm_size=lambda path: 64 * GIB, available_memory=lambda: 64 * GIB)
    ctx = dataclasses.replace(ctx, environ={**ctx.environ, variable: value})
    result = by_name(run_checks(ctx, names=("shm",)))["shm"]
    kind = "float" if "PROPORTION" in variable else "int"
    assert (result.status, result.message, result.fix) == (
        "FAIL",
        f"{variable}={value!r} is not {words}: Ray reads it with {kind}() when it starts and fails on it",
        f"unset {variable}, or set it to {words}",
    )


@pytest.mark.parametrize(
    "shm_gib, ram_gib, status", [(8, 16, "PASS"), (8, 64, "FAIL"), (11, 64, "PASS"), (0.5, 1, "PASS"), (0.5, 2, "FAIL")]
)
def test_shm_verdict_is_rays_own_choice_of_dev_shm(world, monkeypatch, tmp_path, shm_gib, ram_gib, status):
    """Reference: Ray 2.46's own ResourceSpec.resolve and determine_plasma_store_config, fed the same sizes."""
    import ray._private.utils as ray_utils
    from ray._private import services
    from ray._private.resource_spec import ResourceSpec

    shm, ram = int(shm_gib * GIB), int(ram_gib * GIB)
    monkeypatch.setattr(ray_utils, "get_shared_memory_bytes", lambda: shm)
    monkeypatch.setattr(ray_utils, "estimate_available_memory", lambda: ram)
    monkeypatch.setattr(ray_utils, "get_system_memory", lambda: ram)
    rays_store = (
        ResourceSpec(num_cpus=1, num_gpus=0).resolve(is_head=True, node_ip_address="127.0.0.1").object_store_memory
    )
    rays_directory = services.determine_plasma_store_config(rays_store, str(tmp_path))[0]
    assert readiness.ray_object_store_bytes(ram, shm, {}) == int(rays_store)
    result = by_name(
        run_checks(context(world, shm_size=lambda path: shm, available_memory=lambda: ram), names=("shm",))
    )["shm"]
    assert (result.status, rays_directory) == (
        status,
        "/dev/shm" if status == "PASS" else "/tmp",
    )  # Ray's user temp dir


def test_capping_rays_store_as_the_fix_says_passes(world):
    small = context(world, shm_size=lambda path: 8 * GIB, available_memory=lambda: 64 * GIB)
    assert by_name(run_checks(small, names=("shm",)))["shm"].status == "FAIL"
    small.environ = {"RAY_DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES": str(int(8 * GIB * 0.9))}
    result = by_name(run_checks(small, names=("shm",)))["shm"]
    assert (result.status, result.message) == (
        "PASS",
        (
            "/dev/shm has 8.0 GiB free; Ray's object store here is 7.7 GB (30% of the 64.0 GiB available RAM, at most"
            " 10 GB): it fits"
        ),
    )


def test_missing_dev_shm_fails(world):
    result = by_name(run_checks(context(world, shm_size=lambda path: None), names=("shm",)))["shm"]
    assert result.status == "FAIL" and result.message.startswith(
        "/dev/shm is missing: Ray reads its size when it starts"
    )


def test_train_refuses_a_small_dev_shm(world, monkeypatch):
    from verlfit.data_folder import DataKeys
    from verlfit.train import preflight

    monkeypatch.setattr(readiness, "_statvfs_free", lambda path: 64 * 2**20)
    monkeypatch.setattr(readiness, "available_memory_bytes", lambda: 64 * GIB)
    monkeypatch.setattr("verlfit.checks.stack.require", lambda command: None)  # the Python stack is not what is tested
    plan = SimpleNamespace(
        profile_name="p40",
        settings=SimpleNamespace(
            resume=None,
            run_dir=str(world.tmp / "run"),
            data_dir=str(world.data),
            raw_data_dir=None,
            model=str(world.model),
            rollout="hf",
            attention="sdpa",
            frozen_base_dtype=None,
        ),
        environment={},
        overrides=[],
        data_keys=DataKeys(),
    )
    with pytest.raises(VerlfitError) as raised:
        preflight.start_run(plan)  # the doctor's blocking checks, before anything is prepared
    assert "  FAIL shm: /dev/shm has 64 MiB free (Docker's default /dev/shm is 64 MiB)" in raised.value.message
    assert (
        "fix: give the container 11 GiB of shared memory: compose.yaml's shm_size: 11gb, or docker run --shm-size=11g"
        in raised.value.message
    )


# the small model of fakes.write_model_dir, PPO: actor and critic, fp32 weights + AdamW, + 32 MiB of tokenizer files
# each
def small_checkpoint(world, algorithm="ppo"):
    from verlfit.plan.time import checkpoint_disk_bytes
    from verlfit.model_shape import load_model_shape

    shape = load_model_shape(str(world.model))
    roles = [(shape.actor_parameters,)] + ([(shape.critic_parameters,)] if algorithm == "ppo" else [])
    one = sum(params * 12 + 32 * 2**20 for (params,) in roles)
    from verlfit.plan.memory import PlanRequest

    request = PlanRequest(shape=shape, gpu_memory_bytes=24 * GIB, algorithm=algorithm)
    assert one == checkpoint_disk_bytes(request)
    return one


@pytest.mark.parametrize(
    "algorithm, keep, fit, status",
    [
        ("ppo", 2, 2, "PASS"),
        ("ppo", 2, 1.5, "WARN"),
        ("ppo", 2, 0.9, "FAIL"),
        ("grpo", 3, 2.5, "WARN"),
        ("grpo", 3, 3, "PASS"),
        ("ppo", 0, 1.9, "WARN"),
    ],
)
def test_disk_holds_the_checkpoints_kept_at_once(world, algorithm, keep, fit, status):
    one = small_checkpoint(world, algorithm)
    free = int(one * fit)
    ctx = context(
        world,
        algorithm=algorithm,
        keep_checkpoints=keep,
        disk_usage=lambda path: SimpleNamespace(total=0, used=0, free=free),
    )
    result = by_name(run_checks(ctx, names=("disk",)))["disk"]
    held = keep or 2  # keep all: the doctor does not know the run's length, 2 are counted
    assert result.status == status
    head = (
        f"{free / GIB:.1f} GiB free at {world.tmp}; this run holds {held} checkpoints of {one / GIB:.1f} GiB at once"
        f" ({held * one / GIB:.1f} GiB)"
    )
    tail = {
        "PASS": "",
        "WARN": f": only {int(fit)} fit{'s' if int(fit) == 1 else ''}, the save after that fails with a full disk",
        "FAIL": ": not even one checkpoint fits",
    }[status]
    assert result.message == head + tail  # runs/ does not exist yet: its nearest existing parent is measured
    # the fix names only what changes the verdict: nothing but space when none fits; --keep-checkpoints only below held
    fix = {
        "PASS": None,
        "FAIL": f"free disk space at {world.tmp} or point --run-dir at a bigger disk",
        "WARN": (
            f"free disk space at {world.tmp}, point --run-dir at a bigger disk"
            + (f", keep {int(fit)} (--keep-checkpoints {int(fit)})" if 2 <= int(fit) < held else "")
            + f" or save at most {int(fit)} time{'s' if int(fit) > 1 else ''} in the run (--save-freq)"
        ),
    }[status]
    assert result.fix == fix


def test_checkpoints_held_follows_verls_pruning():
    from verlfit.checks.disk import checkpoints_held

    assert [
        checkpoints_held(2),
        checkpoints_held(5),
        checkpoints_held(0),
        checkpoints_held(0, 20),
        checkpoints_held(5, 3),
        checkpoints_held(2, 1),
    ] == [2, 5, 2, 20, 3, 1]


def test_doctor_cli_sizes_the_disk_for_algo_and_keep(world, monkeypatch):
    seen = {}
    monkeypatch.setitem(
        readiness.CHECKS,
        "disk",
        lambda ctx: (
            seen.update(algo=ctx.algorithm, keep=ctx.keep_checkpoints) or readiness.CheckResult("disk", "PASS", "ok")
        ),
    )
    out = io.StringIO()
    args = cli.build_parser().parse_args(
        ["doctor", "--algo", "grpo", "--keep-checkpoints", "4", "--model", str(world.model)]
    )
    doctor._run(args, context=context(world), out=out)
    assert seen == {"algo": "grpo", "keep": 4}


def test_doctor_sizes_a_lora_run_with_lora_rank(world, monkeypatch):
    """new-user trial: doctor had no --lora-rank, so a LoRA run's disk need was that of full fine-tuning (34.6 GiB for
    1.5B PPO instead of 12.5 GiB: tests/test_failure.py)."""
    seen = {}
    monkeypatch.setitem(
        readiness.CHECKS,
        "disk",
        lambda ctx: (
            seen.update(rank=ctx.lora_rank, critic=ctx.critic_lora_rank) or readiness.CheckResult("disk", "PASS", "ok")
        ),
    )
    args = cli.build_parser().parse_args(
        ["doctor", "--lora-rank", "32", "--critic-lora-rank", "0", "--model", str(world.model)]
    )
    doctor._run(args, context=context(world), out=io.StringIO())
    assert seen == {"rank": 32, "critic": 0}
    monkeypatch.undo()

    free = 20 * GIB
    usage = lambda path: SimpleNamespace(total=0, used=0, free=free)  # noqa: E731
    lora = by_name(
        run_checks(
            context(world, model="Qwen/Qwen2.5-1.5B-Instruct", lora_rank=32, frozen_base="float32", disk_usage=usage),
            names=("disk",),
        )
    )["disk"]
    assert (lora.status, lora.message) == (
        "WARN",
        (
            f"20.0 GiB free at {world.tmp}; this run holds 2 checkpoints of 12.5 GiB at once (25.1 GiB): only 1 fits,"
            " the save after that fails with a full disk"
        ),
    )
    # the profile's 16-bit base (patch 0026, train's default) is saved in 16 bits: 6.8 GiB (tests/test_failure.py)
    sixteen_bit = by_name(
        run_checks(context(world, model="Qwen/Qwen2.5-1.5B-Instruct", lora_rank=32, disk_usage=usage), names=("disk",))
    )["disk"]
    assert (sixteen_bit.status, sixteen_bit.message) == (
        "PASS",
        f"20.0 GiB free at {world.tmp}; this run holds 2 checkpoints of 6.8 GiB at once (13.6 GiB)",
    )
    full = by_name(run_checks(context(world, model="Qwen/Qwen2.5-1.5B-Instruct", disk_usage=usage), names=("disk",)))[
        "disk"
    ]
    assert (full.status, full.message) == (
        "FAIL",
        (
            f"20.0 GiB free at {world.tmp}; this run holds 2 checkpoints of 34.6 GiB at once (69.1 GiB): not even one"
            " checkpoint fits"
        ),
    )
    critic_full = by_name(
        run_checks(
            context(world, model="Qwen/Qwen2.5-1.5B-Instruct", lora_rank=32, critic_lora_rank=0, disk_usage=usage),
            names=("disk",),
        )
    )["disk"]
    # the LoRA actor's 16-bit base, the critic's 12 bytes a parameter and the adapter file: (3,564,137,472 +
    # 18,558,144,524 + 147,718,144) B, tests/test_failure.py
    assert "checkpoints of 20.7 GiB at once" in critic_full.message


@pytest.mark.parametrize("command", ["doctor", "train"])
def test_doctor_and_train_refuse_the_same_checkpoint_counts(command, capsys):
    """new-user trial: `verlfit doctor --keep-checkpoints 1` was accepted although train refuses 1 (one parser type
    now)."""
    parser = cli.build_parser()
    with pytest.raises(SystemExit) as stopped:
        parser.parse_args([command, "--keep-checkpoints", "1"])
    assert stopped.value.code == 2
    assert "argument --keep-checkpoints: 1 would leave no checkpoint during each save" in capsys.readouterr().err
    assert [parser.parse_args([command, "--keep-checkpoints", n]).keep_checkpoints for n in ("0", "2")] == [0, 2]


def test_data_missing_warns_broken_fails(world):
    (world.data / "test.parquet").unlink()
    (world.data / "train.parquet").unlink()
    result = by_name(run_checks(context(world), names=("data",)))["data"]
    assert (result.status, result.fix) == (
        "WARN",
        f"verlfit prepare-gsm8k --output {world.data}",
    )  # an empty folder: train prepares GSM8K there
    write_parquet(world.data / "train.parquet", rows=5)
    (world.data / "test.parquet").write_bytes(b"not parquet")
    result = by_name(run_checks(context(world), names=("data",)))["data"]
    assert result.status == "FAIL" and result.message.startswith(
        f"--data {world.data} holds files verlfit did not write (test.parquet, train.parquet; test.parquet does not"
        " read as parquet) and no train.parquet and test.parquet in verl's format"
    )
    write_parquet(world.data / "test.parquet", columns=("question", "answer"))
    result = by_name(run_checks(context(world), names=("data",)))["data"]
    assert (result.status, result.message.partition(") and")[0]) == (
        "FAIL",
        (
            f"--data {world.data} holds files verlfit did not write (test.parquet, train.parquet; test.parquet lacks"
            " data_source, prompt, reward_model"
        ),
    )
    assert "prepare-gsm8k" not in result.fix  # never a fix that writes over the user's files


def test_model_hub_reachable_through_endpoint(world):
    ctx = context(world, model="Qwen/Qwen2.5-0.5B-Instruct", environ={"HF_ENDPOINT": "https://mirror.example/"})
    result = by_name(run_checks(ctx, names=("model",)))["model"]
    assert (result.status, result.message) == (
        "PASS",
        "Qwen/Qwen2.5-0.5B-Instruct is reachable at https://mirror.example (HTTP 200); it downloads at the first run",
    )
    assert ctx.calls["head"] == ["https://mirror.example/Qwen/Qwen2.5-0.5B-Instruct/resolve/main/config.json"]


@pytest.mark.parametrize(
    "answer, message",
    [
        (401, "Qwen/Qwen2.5-0.5B-Instruct at https://huggingface.co needs authorisation (HTTP 401): gated or private"),
        (404, "Qwen/Qwen2.5-0.5B-Instruct does not exist at https://huggingface.co (HTTP 404)"),
        (
            OSError("timed out"),
            "Qwen/Qwen2.5-0.5B-Instruct is not local and https://huggingface.co is unreachable (timed out)",
        ),
    ],
)
def test_model_hub_failures(world, answer, message):
    def head(url, timeout, headers):
        if isinstance(answer, Exception):
            raise answer
        return answer

    result = by_name(run_checks(context(world, model="Qwen/Qwen2.5-0.5B-Instruct", head=head), names=("model",)))[
        "model"
    ]
    assert (result.status, result.message) == ("FAIL", message)


def test_model_cached_or_offline(world):
    config = world.model / "config.json"
    cached = by_name(
        run_checks(
            context(world, model="Qwen/Qwen2.5-0.5B-Instruct", hub_cache_lookup=lambda repo, name: str(config)),
            names=("model",),
        )
    )["model"]
    assert (cached.status, cached.message) == ("PASS", "Qwen/Qwen2.5-0.5B-Instruct is in the local hub cache")
    ctx = context(world, model="Qwen/Qwen2.5-0.5B-Instruct", environ={"HF_HUB_OFFLINE": "1"})
    offline = by_name(run_checks(ctx, names=("model",)))["model"]
    assert offline.status == "FAIL" and ctx.calls["head"] == []


def test_patch_marker_states(world):
    marker = world.verl / ".verlfit-patches"
    text = marker.read_text()
    marker.write_text(text.replace("0002-b.patch", "0002-old.patch"))
    result = by_name(run_checks(context(world), names=("patches",)))["patches"]
    assert result.status == "FAIL"
    assert (
        result.message
        == f"the installed verl carries another patch series than {world.series}: missing 0002-b.patch; not in this"
        " series 0002-old.patch"
    )
    marker.write_text(text.replace(text.splitlines()[-1][:64], "0" * 64))
    assert by_name(run_checks(context(world), names=("patches",)))["patches"].status == "WARN"
    marker.unlink()
    result = by_name(run_checks(context(world), names=("patches",)))["patches"]
    assert (result.status, result.fix) == ("FAIL", f"python3 patches/apply.py {world.verl.parent}")
    assert by_name(run_checks(context(world, verl_dir=None), names=("patches",)))["patches"].status == "SKIP"


def test_series_found_through_environment(world, monkeypatch):
    assert default_series({"VERLFIT_PATCHES_DIR": str(world.series.parent)}) == world.series
    assert default_series({"VERLFIT_PATCHES_DIR": str(world.series.parent.parent)}) == world.series
    repo_series = default_series({})
    assert repo_series is not None and repo_series.name == "series"


def test_a_crashing_check_becomes_a_fail(world, monkeypatch):
    monkeypatch.setitem(readiness.CHECKS, "shm", lambda ctx: 1 / 0)
    result = by_name(run_checks(context(world), names=("shm",)))["shm"]
    assert (result.status, result.message) == ("FAIL", "the check itself failed: ZeroDivisionError: division by zero")


def test_blocking_checks_return_only_failures_of_the_subset(world):
    assert blocking_checks(context=context(world)) == []
    failures = blocking_checks(profile_name="a10", context=context(world, shm_size=lambda path: 1))
    assert [f.name for f in failures] == [
        "gpu",
        "triton-shared-memory",
        "shm",
    ]  # the a10 image's 99 KiB; 1 byte of /dev/shm
    failures = blocking_checks(
        environment={"TRITON_MAX_SHARED_MEMORY": "101376"}, context=context(world, profile_name="p40")
    )
    assert [f.name for f in failures] == ["triton-shared-memory"]
    (world.data / "train.parquet").unlink()
    (world.data / "test.parquet").unlink()
    assert blocking_checks(context=context(world)) == []  # missing data (an empty folder) is a WARN: train prepares it
    none = blocking_checks(context=context(world, nvml=FakeNvml(**NO_GPU)))
    assert [f.name for f in none] == ["driver", "gpu", "cuda"]
    assert set(BLOCKING) <= set(CHECK_NAMES)


def test_json_output_and_exit_status(world):
    args = cli.build_parser().parse_args(
        ["doctor", "--json", "--profile", "a10", "--data", str(world.data), "--model", str(world.model)]
    )
    out = io.StringIO()
    status = doctor._run(args, context=context(world), out=out)
    data = json.loads(out.getvalue())
    assert status == data["exit_status"] == 1
    assert [c["name"] for c in data["checks"]] == list(CHECK_NAMES)
    assert {c["name"]: c["status"] for c in data["checks"]}["gpu"] == "FAIL"
    out = io.StringIO()
    args = cli.build_parser().parse_args(
        ["doctor", "--profile", "p40", "--data", str(world.data), "--model", str(world.model)]
    )
    assert doctor._run(args, context=context(world), out=out) == 0
    assert out.getvalue().splitlines()[-1] == "14 PASS: ready"


def test_real_cli_runs_quickly_and_is_consistent(world, capsys):
    """The real machine (no GPU in CI): JSON parses, the exit status follows the verdicts; no network
    (local model), about a second."""
    started = time.monotonic()
    status = cli.main(
        ["doctor", "--json", "--model", str(world.model), "--data", str(world.data), "--run-dir", str(world.tmp)]
    )
    elapsed = time.monotonic() - started
    data = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in data["checks"]] == list(CHECK_NAMES)
    assert status == (1 if any(c["status"] == "FAIL" for c in data["checks"]) else 0)
    assert elapsed < 10


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "301", "soon"])
def test_doctor_timeout_must_be_a_sensible_number_of_seconds(value, capsys):
    from verlfit import cli

    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["doctor", "--timeout", value])
    assert "argument --timeout: " in capsys.readouterr().err


def test_a_file_where_the_data_directory_or_run_directory_should_be_fails(world):
    afile = world.tmp / "afile"
    afile.write_text("x")
    results = by_name(
        run_checks(context(world, data_dir=str(afile), checkpoint_dir=str(afile / "runs")), names=("data", "disk"))
    )
    assert (results["data"].status, results["data"].message) == ("FAIL", f"{afile} is a file, not a data directory")
    assert (results["disk"].status, results["disk"].message) == (
        "FAIL",
        f"{afile} is a file: checkpoints cannot go under it ({afile / 'runs'})",
    )


@pytest.mark.parametrize(
    "gpus, profile_name, environ, status, message, fix",
    [
        ((P40,), "p40", {}, "PASS", "profile p40 (given); VLLM_DTYPE=float32, TRITON_MAX_SHARED_MEMORY=49152", None),
        (
            (A10,),
            None,
            {},
            "PASS",
            "profile a10 (chosen by NVIDIA A10); VLLM_DTYPE=bfloat16, TRITON_MAX_SHARED_MEMORY=101376",
            None,
        ),
        (
            (P40,),
            None,
            {"VERLFIT_PROFILE": "nonsense"},
            "FAIL",
            "VERLFIT_PROFILE (or --profile) is 'nonsense', not a profile",
            "set it to one of p40, t4, v100, a10 (or unset it: the image's own profile, or the GPU's, applies)",
        ),
        (
            (P40,),
            "p40",
            {"VLLM_DTYPE": "bfloat16"},
            "FAIL",
            "VLLM_DTYPE=bfloat16 on Tesla P40 (compute capability below 8.0): bf16 needs 8.0",
            "unset VLLM_DTYPE (the p40 profile uses float32)",
        ),
        (
            (),
            "p40",
            {"VLLM_DTYPE": "bfloat16"},
            "FAIL",
            "VLLM_DTYPE=bfloat16 on the p40 profile's cards (compute capability below 8.0): bf16 needs 8.0",
            "unset VLLM_DTYPE (the p40 profile uses float32)",
        ),
        (
            (P40,),
            "p40",
            {"TRITON_MAX_SHARED_MEMORY": "abc"},
            "FAIL",
            "TRITON_MAX_SHARED_MEMORY='abc' is not a number of bytes",
            "unset it (the p40 profile uses 49152) or set e.g. 49152 (48 KiB)",
        ),
        (
            (),
            None,
            {},
            "SKIP",
            (
                "no profile given (VERLFIT_PROFILE, --profile) and no GPU to choose one by; TRITON_MAX_SHARED_MEMORY"
                " and PYTORCH_CUDA_ALLOC_CONF are well formed"
            ),
            None,
        ),
        (
            (),
            "auto",
            {},
            "SKIP",
            (
                "no profile given (VERLFIT_PROFILE, --profile) and no GPU to choose one by; TRITON_MAX_SHARED_MEMORY"
                " and PYTORCH_CUDA_ALLOC_CONF are well formed"
            ),
            None,
        ),
        (
            (A10,),
            "auto",
            {},
            "PASS",
            "profile a10 (chosen by NVIDIA A10); VLLM_DTYPE=bfloat16, TRITON_MAX_SHARED_MEMORY=101376",
            None,
        ),
        (
            (),
            None,
            {"PYTORCH_CUDA_ALLOC_CONF": "garbage"},
            "FAIL",
            "PYTORCH_CUDA_ALLOC_CONF='garbage' is not a comma-separated list of option:value",
            (
                "unset it (the p40 profile uses expandable_segments:True) or write e.g."
                " expandable_segments:True,max_split_size_mb:256"
            ),
        ),
        (
            (),
            "p40",
            {"TRITON_MAX_SHARED_MEMORY": "65536"},
            "FAIL",
            (
                "TRITON_MAX_SHARED_MEMORY=65536 is outside 1..49152, the shared memory per block of the p40 profile's"
                " cards"
            ),
            "unset it (the p40 profile uses 49152)",
        ),
    ],
)
def test_environment_check_applies_trains_rules_with_or_without_a_gpu(
    world, gpus, profile_name, environ, status, message, fix
):
    nvml = FakeNvml(gpus) if gpus else FakeNvml(**NO_GPU)
    result = by_name(
        run_checks(context(world, nvml=nvml, profile_name=profile_name, environ=environ), names=("environment",))
    )["environment"]
    assert (result.status, result.message, result.fix) == (status, message, fix)


def test_triton_shared_memory_of_zero_fails_on_a_gpu(world):
    result = by_name(
        run_checks(
            context(world, profile_name="p40", environ={"TRITON_MAX_SHARED_MEMORY": "0"}),
            names=("triton-shared-memory",),
        )
    )["triton-shared-memory"]
    assert (result.status, result.message, result.fix) == (
        "FAIL",
        "TRITON_MAX_SHARED_MEMORY=0: Triton needs some shared memory per block",
        "export TRITON_MAX_SHARED_MEMORY=49152",
    )


def model_check(world, model):
    return by_name(run_checks(context(world, model=str(model)), names=("model",)))["model"]


def test_a_complete_local_model_passes_saying_what_it_holds(world):
    result = model_check(world, world.model)
    assert (result.status, result.message) == (
        "PASS",
        (
            f"{world.model} is a local model directory: config.json, weights model.safetensors (4 tensors, 138,304"
            " parameters; config.json: 138,304), tokenizer tokenizer.json"
        ),
    )
    sharded = write_model_dir(world.tmp / "sharded", shards=2, tokenizer=("vocab.json", "merges.txt"))
    result = model_check(world, sharded)
    assert (result.status, result.message) == (
        "PASS",
        (
            f"{sharded} is a local model directory: config.json, weights 2 shards (model-00001-of-00002.safetensors ..)"
            " (4 tensors, 138,304 parameters; config.json: 138,304), tokenizer vocab.json + merges.txt"
        ),
    )


def test_a_model_saved_by_transformers_passes(world, tiny_qwen2_dir):
    result = model_check(world, tiny_qwen2_dir)
    assert result.status == "PASS", result.message
    assert result.message.startswith(
        f"{tiny_qwen2_dir} is a local model directory: config.json, weights model.safetensors ("
    )


def test_a_directory_with_only_a_config_fails_naming_the_weights(world, capsys):
    only_config = world.tmp / "only-config"
    only_config.mkdir()
    shutil.copy(world.model / "config.json", only_config / "config.json")
    result = model_check(world, only_config)
    assert (result.status, result.message) == (
        "FAIL",
        (
            f"{only_config} has no weights: neither model.safetensors, model.safetensors.index.json with its shards,"
            " nor pytorch_model.bin"
        ),
    )
    assert (
        result.fix == "copy the model's weight files next to config.json (huggingface-cli download MODEL --local-dir"
        f" {only_config}), or pass --model a complete model directory"
    )
    # the real command: exit status 1 and the FAIL line naming the weights
    status = cli.main(["doctor", "--model", str(only_config), "--data", str(world.data), "--run-dir", str(world.tmp)])
    out = capsys.readouterr().out
    assert status == 1
    assert f"FAIL  model                 {only_config} has no weights: neither model.safetensors" in out


def test_git_lfs_pointers_fail_with_git_lfs_pull(world):
    (world.model / "model.safetensors").write_text(LFS_POINTER)
    result = model_check(world, world.model)
    assert (result.status, result.message) == (
        "FAIL",
        (
            f"{world.model}: model.safetensors is a Git LFS pointer (a small text file), not the content: the clone was"
            " made without git lfs"
        ),
    )
    assert result.fix.startswith(f"run `git lfs pull` in {world.model} (install git-lfs first)")
    write_model_dir(world.model)
    (world.model / "tokenizer.json").write_text(LFS_POINTER)
    result = model_check(world, world.model)
    assert (result.status, result.message) == (
        "FAIL",
        (
            f"{world.model}: tokenizer.json is a Git LFS pointer (a small text file), not the content: the clone was"
            " made without git lfs"
        ),
    )


def test_an_index_with_a_missing_shard_fails_naming_it(world):
    model = write_model_dir(world.tmp / "sharded", shards=3)
    (model / "model-00002-of-00003.safetensors").unlink()
    result = model_check(world, model)
    assert (result.status, result.message) == (
        "FAIL",
        f"{model}: model.safetensors.index.json names 3 weight shards; missing: model-00002-of-00003.safetensors",
    )


def test_a_cut_short_safetensors_file_fails(world):
    weights = world.model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    result = model_check(world, world.model)
    # safetensors' own words, read from safetensors on the same file: they differ between its versions (0.5.3 in the
    # image, newer in the test venv), so the test asks the installed one rather than copying one version's text
    from safetensors import SafetensorError, safe_open

    with pytest.raises(SafetensorError) as raised:
        safe_open(str(weights), framework="np")
    assert (result.status, result.message) == ("FAIL", f"{weights} is not a readable safetensors file: {raised.value}")


def test_weights_of_another_size_than_the_config_fail(world):
    # 138,304 expected; up to 5% over the untied count (138,304 + 64,000) is accepted (a tied lm_head saved anyway)
    write_model_dir(world.model, extra_parameters=64_000)
    assert model_check(world, world.model).status == "PASS"
    write_model_dir(world.model, extra_parameters=100_000)
    result = model_check(world, world.model)
    assert (result.status, result.message) == (
        "FAIL",
        (
            f"{world.model}: the weights hold 238,304 parameters in 4 tensors, but config.json describes a qwen2 of"
            " 138,304: the weights are incomplete or belong to another model"
        ),
    )


def test_a_model_without_tokenizer_fails(world):
    (world.model / "tokenizer.json").unlink()
    (world.model / "vocab.json").write_text("{}")  # merges.txt missing: not a tokenizer
    result = model_check(world, world.model)
    assert (result.status, result.message) == (
        "FAIL",
        (
            f"{world.model} has no tokenizer: AutoTokenizer needs tokenizer.json, or vocab.json + merges.txt, or"
            " tokenizer.model (or vocab.txt)"
        ),
    )


def test_train_refuses_the_directory_the_doctor_fails(world, monkeypatch):
    from verlfit.data_folder import DataKeys
    from verlfit.train import preflight

    only_config = world.tmp / "only-config"
    only_config.mkdir()
    shutil.copy(world.model / "config.json", only_config / "config.json")
    monkeypatch.setattr("verlfit.checks.stack.require", lambda command: None)  # the Python stack is not what is tested
    plan = SimpleNamespace(
        profile_name="p40",
        settings=SimpleNamespace(
            resume=None,
            run_dir=str(world.tmp / "run"),
            data_dir=str(world.data),
            raw_data_dir=None,
            model=str(only_config),
            rollout="hf",
            attention="sdpa",
            frozen_base_dtype=None,
        ),
        environment={},
        overrides=[],
        data_keys=DataKeys(),
    )
    with pytest.raises(VerlfitError) as raised:
        preflight.start_run(plan)  # the doctor's blocking checks, before anything is prepared
    assert f"  FAIL model: {only_config} has no weights: neither model.safetensors" in raised.value.message


def test_no_data_and_no_hub_fails_instead_of_promising_preparation(world):
    nowhere = world.tmp / "gsm8k"  # a folder named for GSM8K: GSM8K's fixes (another name: the next test)
    offline = by_name(
        run_checks(context(world, data_dir=str(nowhere), environ={"HF_HUB_OFFLINE": "1"}), names=("data",))
    )["data"]
    assert (offline.status, offline.message) == (
        "FAIL",
        (
            f"{nowhere} has no train.parquet or test.parquet and no raw GSM8K files, and openai/gsm8k is not in the"
            " datasets cache while HF_HUB_OFFLINE is set: verlfit train has nothing to prepare from"
        ),
    )
    assert offline.fix.startswith(
        "copy GSM8K's files (the hub's main/train-*.parquet and main/test-*.parquet, or train/test .jsonl with"
        f" question and answer) into {nowhere}"
    )

    def unreachable(url, timeout, headers):
        raise OSError("timed out")

    ctx = context(world, data_dir=str(nowhere), head=unreachable)
    result = by_name(run_checks(ctx, names=("data",)))["data"]
    assert (result.status, result.message) == (
        "FAIL",
        (
            f"{nowhere} has no train.parquet or test.parquet and no raw GSM8K files, and https://huggingface.co is"
            " unreachable (timed out): verlfit train has nothing to prepare from"
        ),
    )
    assert [f.name for f in blocking_checks(context=context(world, data_dir=str(nowhere), head=unreachable))] == [
        "data"
    ]
    # the hub reachable, or GSM8K in the datasets cache: a WARN (train prepares it), and the HEAD asked for its train
    # split
    ctx = context(world, data_dir=str(nowhere), environ={"HF_ENDPOINT": "https://mirror.example"})
    reachable = by_name(run_checks(ctx, names=("data",)))["data"]
    assert (reachable.status, reachable.message) == (
        "WARN",
        (
            f"{nowhere} has no train.parquet or test.parquet and no raw GSM8K files: not prepared yet (verlfit train"
            " prepares GSM8K there from https://mirror.example)"
        ),
    )
    assert ctx.calls["head"] == [
        "https://mirror.example/datasets/openai/gsm8k/resolve/main/main/train-00000-of-00001.parquet"
    ]
    cached = by_name(
        run_checks(
            context(
                world,
                data_dir=str(nowhere),
                environ={"HF_HUB_OFFLINE": "1"},
                dataset_cache_lookup=lambda dataset: "/cache/openai___gsm8k",
            ),
            names=("data",),
        )
    )["data"]
    assert (cached.status, cached.message) == (
        "WARN",
        (
            f"{nowhere} has no train.parquet or test.parquet and no raw GSM8K files: not prepared yet (verlfit train"
            " prepares GSM8K there from the datasets cache, /cache/openai___gsm8k)"
        ),
    )


@pytest.mark.parametrize("layout", ["flat jsonl", "hub parquet"])
def test_raw_gsm8k_files_in_the_data_directory_are_what_train_prepares(world, layout):
    raw = world.tmp / "raw"
    rows = [{"question": "q", "answer": "a #### 1"}]
    if layout == "flat jsonl":
        raw.mkdir()
        for split in ("train", "test"):
            (raw / f"{split}.jsonl").write_text(json.dumps(rows[0]) + "\n")
    else:
        (raw / "main").mkdir(parents=True)
        for split in ("train", "test"):
            pq.write_table(pa.Table.from_pylist(rows), raw / "main" / f"{split}-00000-of-00001.parquet")

    def unreachable(url, timeout, headers):
        raise AssertionError("the hub is not needed")

    result = by_name(run_checks(context(world, data_dir=str(raw), head=unreachable), names=("data",)))["data"]
    assert (result.status, result.message, result.fix) == (
        "WARN",
        (
            f"{raw} holds raw GSM8K files, not prepared yet: verlfit train prepares verl's files from them into"
            f" {raw / 'verl'}"
        ),
        f"verlfit prepare-gsm8k --input {raw} --output {raw / 'verl'}",
    )
    # train's blocking checks look at --data/verl, with the raw files above it
    assert blocking_checks(data_dir=str(raw / "verl"), context=context(world, head=unreachable)) == []
    (raw / ("train.jsonl" if layout == "flat jsonl" else "main/train-00000-of-00001.parquet")).unlink()
    result = by_name(run_checks(context(world, data_dir=str(raw), head=unreachable), names=("data",)))["data"]
    assert (result.status, result.message) == (
        "FAIL",
        (
            f"{raw if layout == 'flat jsonl' else raw / 'main'} has no train file (found"
            f" test{'.jsonl' if layout == 'flat jsonl' else '-00000-of-00001.parquet'})"
        ),
    )


def test_a_broken_json_line_in_raw_gsm8k_files_fails_naming_the_file_and_line_as_prepare_gsm8k_does(world):
    # new-user trial: the data check passed (WARN: train prepares them) while prepare-gsm8k --input refused the file
    raw = world.tmp / "raw"
    raw.mkdir()
    (raw / "train.jsonl").write_text(json.dumps({"question": "q", "answer": "a #### 1"}) + '\n{"question": broken\n')
    (raw / "test.jsonl").write_text(json.dumps({"question": "q", "answer": "a #### 1"}) + "\n")

    def unreachable(url, timeout, headers):
        raise AssertionError("the hub is not needed")

    result = by_name(run_checks(context(world, data_dir=str(raw), head=unreachable), names=("data",)))["data"]
    assert (result.status, result.message, result.fix) == (
        "FAIL",
        f"cannot read {raw / 'train.jsonl'} line 2: not JSON (Expecting value at character 14)",
        (
            "repair or remove that line (each line of a .jsonl file is one JSON object; download the file again if it"
            " was cut), then run the command again"
        ),
    )
    # train's blocking checks (it reads --data/verl, prepared from the raw files above it) refuse it too
    assert [f.name for f in blocking_checks(data_dir=str(raw / "verl"), context=context(world, head=unreachable))] == [
        "data"
    ]
    with pytest.raises(VerlfitError) as refused:
        gsm8k.prepare(raw, world.tmp / "out", log=lambda line: None)
    assert (refused.value.message, refused.value.fix) == (result.message, result.fix)


def test_a_7x_card_is_told_why_it_gets_the_p40_profile_and_what_it_leaves_off(world):
    t4 = ("Tesla T4", (7, 5), 16_106_127_360)
    note = (
        "profile p40 for Tesla T4 (compute capability 7.5): below 8.0 there is no bf16 and no FlashAttention-2, which"
        " the a10 profile is built on; this card could also run fp16 on its tensor cores (the t4 profile, which auto"
        " picks), Triton (torch.compile, Triton kernels) and vLLM (both need 7.0), which the p40 profile leaves off"
        " (its TRITON_MAX_SHARED_MEMORY=49152, under the 81920 B verlfit asks for Triton, keeps torch.compile, liger"
        " and fused kernels off; HF rollout)"
    )
    auto = by_name(run_checks(context(world, gpus=(t4,)), names=("gpu",)))["gpu"]
    # issue 27: auto gives a 7.x card the fp16 profile, and says why; the image it names is the t4 profile's own
    fp16_note = (
        "profile t4 for Tesla T4 (compute capability 7.5): fp16 tensor cores but no bf16 and no FlashAttention-2 (both"
        " need 8.0), so fp16 compute with fp32 master weights and dynamic loss scaling (an overflowing update is"
        " skipped and shows in the progress line); --profile p40 runs it in fp32"
    )
    assert auto.status == "PASS"
    assert (
        auto.message
        == "GPU 0: Tesla T4, compute capability 7.5: bf16 no, FlashAttention-2 no, vLLM yes, Triton yes -> profile t4"
        f" (image verlfit:p40); {fp16_note}"
    )
    given = by_name(run_checks(context(world, gpus=(t4,), profile_name="p40"), names=("gpu",)))["gpu"]
    # --profile p40 on a T4 runs, but leaves the card's fp16 tensor cores unused now that t4 suits it: a warning
    assert given.status == "WARN"
    assert (
        given.message
        == "GPU 0: Tesla T4, compute capability 7.5: bf16 no, FlashAttention-2 no, vLLM yes, Triton yes; profile p40"
        " runs here but leaves fp16 tensor cores unused"
    )
    assert given.fix == "use the verlfit:p40 image (--profile t4) for speed, or keep p40 to rehearse a P40"
    # t4 on a V100 (whose own profile is v100): the same code paths, so no warning
    v100 = by_name(
        run_checks(
            context(world, gpus=(("Tesla V100-SXM2-32GB", (7, 0), 34_359_738_368),), profile_name="t4"), names=("gpu",)
        )
    )["gpu"]
    assert v100.status == "PASS" and "profile t4 runs the same code paths as v100, this card's profile" in v100.message
    from verlfit.gpu import GpuInfo
    from verlfit.profiles import profile_choice_note

    assert profile_choice_note("p40", GpuInfo(0, "Tesla T4", (7, 5), 16_106_127_360, 0)) == note
    p100 = by_name(
        run_checks(context(world, gpus=(("Tesla P100-PCIE-16GB", (6, 0), 17_071_734_784),)), names=("gpu",))
    )["gpu"]
    assert p100.message.endswith(
        "-> profile p40 (image verlfit:p40); profile p40 for Tesla P100-PCIE-16GB (compute capability 6.0): below 8.0"
        " there is no bf16 and no FlashAttention-2, which the a10 profile is built on; it has the P40's other limits"
        " too (Triton and vLLM need 7.0), so the profile leaves nothing off"
    )


# ---- topology: mixed cards, per-pair PCIe level / NVLink / P2P, the NCCL settings in force (issue 18)

import pynvml  # noqa: E402


def test_one_gpu_needs_no_peer_to_peer_and_shows_verls_nccl_setting(world):
    result = by_name(run_checks(context(world), names=("topology",)))["topology"]
    assert (result.status, result.message) == ("PASS", "1 GPU visible (GPU 0, Tesla P40): no traffic between GPUs")
    assert result.details == ("NCCL settings in force: NCCL_DEBUG=WARN (verl's main_ppo sets it for its workers)",)


def test_pairs_without_p2p_are_listed_and_verlfit_train_disables_nccl_p2p(world):
    nvml = FakeNvml(
        [P40, P40, P40],
        p2p={
            (0, 2): pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED,
            (1, 2): pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED,
        },
        levels={
            (0, 1): pynvml.NVML_TOPOLOGY_SINGLE,
            (0, 2): pynvml.NVML_TOPOLOGY_SYSTEM,
            (1, 2): pynvml.NVML_TOPOLOGY_SYSTEM,
        },
    )
    result = by_name(
        run_checks(
            context(world, nvml=nvml, environ={"NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "INFO"}), names=("topology",)
        )
    )["topology"]
    assert (result.status, result.message) == (
        "PASS",
        (
            "3 x Tesla P40 visible (GPU 0, 1, 2): 2 of 3 pairs without P2P: verlfit train sets NCCL_P2P_DISABLE=1 (NCCL"
            " through host memory)"
        ),
    )
    assert result.details == (
        "GPU 0 - GPU 1: PCIe PIX (one PCIe switch), P2P yes",
        (
            "GPU 0 - GPU 2: PCIe SYS (the link between CPU sockets (QPI/UPI, Infinity Fabric)), P2P no (NVML status 1:"
            " the chipset does not support it)"
        ),
        (
            "GPU 1 - GPU 2: PCIe SYS (the link between CPU sockets (QPI/UPI, Infinity Fabric)), P2P no (NVML status 1:"
            " the chipset does not support it)"
        ),
        (
            "NCCL settings in force: NCCL_DEBUG=WARN (verl's main_ppo sets it for its workers, yours (INFO) is"
            " replaced); NCCL_P2P_DISABLE=1 (verlfit train sets it: a pair without P2P); NCCL_SOCKET_IFNAME=eth0"
            " (yours)"
        ),
    )
    text = doctor.format_results([result])
    assert (
        "PASS  topology  3 x Tesla P40 visible" in text
        and "\n" + " " * 18 + "GPU 0 - GPU 1: PCIe PIX (one PCIe switch), P2P yes\n" in text
    )
    # CUDA_VISIBLE_DEVICES keeps the two GPUs behind one switch: nothing to disable
    picked = by_name(
        run_checks(context(world, nvml=nvml, environ={"CUDA_VISIBLE_DEVICES": "0,1"}), names=("topology",))
    )["topology"]
    assert (picked.status, picked.message) == (
        "PASS",
        "2 x Tesla P40 visible (GPU 0, 1): every pair reads the other's memory directly (P2P)",
    )
    assert picked.details[-1] == "NCCL settings in force: NCCL_DEBUG=WARN (verl's main_ppo sets it for its workers)"


def test_the_users_nccl_p2p_setting_is_kept_with_a_warning(world):
    nvml = FakeNvml([P40, P40], p2p={(0, 1): pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED}, nvlink=())
    result = by_name(run_checks(context(world, nvml=nvml, environ={"NCCL_P2P_DISABLE": "0"}), names=("topology",)))[
        "topology"
    ]
    assert (result.status, result.message) == (
        "WARN",
        (
            "2 x Tesla P40 visible (GPU 0, 1): 1 of 1 pairs without P2P; your NCCL_P2P_DISABLE=0 is kept (verlfit would"
            " set NCCL_P2P_DISABLE=1)"
        ),
    )
    assert result.fix == "unset it, so verlfit train sets NCCL_P2P_DISABLE=1, unless that path is known to work"
    assert (
        result.details[-1]
        == "NCCL settings in force: NCCL_DEBUG=WARN (verl's main_ppo sets it for its workers); NCCL_P2P_DISABLE=0"
        " (yours)"
    )


def test_mixed_cards_fail_naming_both_and_the_selection(world):
    nvml = FakeNvml([A10, P40], pci_buses=[0x81, 0x02])
    result = by_name(run_checks(context(world, nvml=nvml), names=("topology",)))["topology"]
    assert result.status == "FAIL"
    assert (
        result.message
        == "this machine has GPUs of 2 kinds (NVML indices, as nvidia-smi numbers them): Tesla P40 (compute capability"
        " 6.1, 23.9 GiB): GPU 1; NVIDIA A10 (compute capability 8.6, 22.5 GiB): GPU 0; one run needs cards of one"
        " kind (one profile, one memory plan, equal FSDP shards)"
    )
    assert (
        result.fix == "run on one kind: CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0 for the Tesla P40 or"
        " CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1 for the NVIDIA A10"
    )
    fixed = by_name(
        run_checks(
            context(world, nvml=nvml, environ={"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1"}),
            names=("topology",),
        )
    )["topology"]
    assert (fixed.status, fixed.message) == ("PASS", "1 GPU visible (GPU 0, NVIDIA A10): no traffic between GPUs")
    unmappable = by_name(
        run_checks(context(world, nvml=nvml, environ={"CUDA_VISIBLE_DEVICES": "1"}), names=("topology",))
    )["topology"]
    assert (unmappable.status, unmappable.fix) == (
        "FAIL",
        (
            "also set CUDA_DEVICE_ORDER=PCI_BUS_ID (then the indices are nvidia-smi's), or name the GPUs by UUID"
            " (nvidia-smi -L)"
        ),
    )
    hidden = by_name(run_checks(context(world, nvml=nvml, environ={"CUDA_VISIBLE_DEVICES": ""}), names=("topology",)))[
        "topology"
    ]
    assert (hidden.status, hidden.message) == ("FAIL", "CUDA_VISIBLE_DEVICES= hides all 2 GPUs NVML sees")
    none = by_name(run_checks(context(world, nvml=FakeNvml(**NO_GPU)), names=("topology",)))["topology"]
    assert (none.status, none.message) == ("SKIP", "no NVIDIA GPU visible: topology not read")
    data = json.loads(json.dumps(result.to_dict()))
    assert data["details"] == [] and data["fix"] == result.fix


def test_an_unpatched_verl_blocks_train_and_bench_but_a_warn_does_not(world):
    assert "patches" in BLOCKING
    marker = world.verl / ".verlfit-patches"
    text = marker.read_text()
    marker.write_text(text.replace(text.splitlines()[-1][:64], "0" * 64))  # a patch changed since applied: WARN
    assert blocking_checks(context=context(world)) == []
    assert blocking_checks(context=context(world, series_path=world.tmp / "no-series")) == []  # series not found: WARN
    marker.unlink()
    assert (
        blocking_checks(context=context(world, series_path=world.tmp / "no-series")) == []
    )  # nothing to compare with: WARN
    failures = blocking_checks(context=context(world))
    assert [(f.name, f.status, f.fix) for f in failures] == [
        ("patches", "FAIL", f"python3 patches/apply.py {world.verl.parent}")
    ]
    assert blocking_checks(context=context(world, verl_dir=None)) == []  # no verl here: SKIP


# --------------------------------------------------------------------------------------
# engines: the packages the profile's rollout and attention import (vllm, flash_attn), after --rollout/--attention
# --------------------------------------------------------------------------------------


def without(*packages):
    """importlib.util.find_spec as in a Python without ``packages`` (tests/test_bench.py's, for the doctor)."""
    import importlib.util

    real = importlib.util.find_spec
    return lambda name, *rest: None if name in packages else real(name, *rest)


def only(*packages):
    """A find_spec that finds ``packages`` and nothing else."""
    return lambda name, *rest: SimpleNamespace(name=name) if name in packages else None


def engines(world, **fields):
    return by_name(run_checks(context(world, **fields), names=("engines",)))["engines"]


def test_engines_fail_names_the_packages_and_the_options_that_run_without_them(world):
    import sys

    # a named profile needs no GPU
    result = engines(world, profile_name="a10", nvml=FakeNvml(**NO_GPU), find_spec=without("vllm", "flash_attn"))
    assert (result.status, result.message, result.fix) == (
        "FAIL",
        (
            "profile a10 (given) with rollout vllm and attention flash_attention_2 needs vllm for the vLLM rollout and"
            f" flash_attn for FlashAttention-2 attention; this Python ({sys.executable}) has neither: verl would fail a"
            " minute in, after Ray starts"
        ),
        (
            "pass --rollout hf --attention sdpa to verlfit train (it then runs without vllm and flash_attn), or run in"
            " the verlfit:a10 image (it has vLLM and flash-attn)"
        ),
    )
    result = engines(world, profile_name="a10", rollout="hf", find_spec=without("vllm", "flash_attn"))
    assert (result.status, result.message, result.fix) == (
        "FAIL",
        (
            "profile a10 (given) with rollout hf and attention flash_attention_2 needs flash_attn for FlashAttention-2"
            f" attention; this Python ({sys.executable}) has no flash_attn: verl would fail a minute in, after Ray"
            " starts"
        ),
        (
            "pass --attention sdpa to verlfit train (it then runs without flash_attn), or run in the verlfit:a10 image"
            " (it has vLLM and flash-attn)"
        ),
    )
    # chosen by the GPU, as train's auto; VERLFIT_PROFILE counts as given
    result = engines(world, gpus=(A10,), find_spec=only("flash_attn"))
    assert (result.status, result.message) == (
        "FAIL",
        (
            "profile a10 (chosen by NVIDIA A10) with rollout vllm and attention flash_attention_2 needs vllm for the"
            f" vLLM rollout; this Python ({sys.executable}) has no vllm: verl would fail a minute in, after Ray starts"
        ),
    )
    assert (
        result.fix
        == "pass --rollout hf to verlfit train (it then runs without vllm), or run in the verlfit:a10 image (it has"
        " vLLM and flash-attn)"
    )
    assert engines(
        world, environ={"VERLFIT_PROFILE": "a10"}, attention="sdpa", find_spec=only("flash_attn")
    ).message.startswith("profile a10 (given) with rollout vllm and attention sdpa needs vllm for the vLLM rollout;")


def test_engines_fail_an_nf4_run_without_bitsandbytes_and_pass_it_with(world):
    import sys

    # train's blocking checks pass the planned base storage (blocking_checks(frozen_base=...), preflight.start_run)
    result = engines(world, profile_name="p40", frozen_base="nf4", find_spec=without("bitsandbytes"))
    assert (result.status, result.message, result.fix) == (
        "FAIL",
        (
            "profile p40 (given) with rollout hf and attention sdpa needs bitsandbytes for the NF4 frozen base (patch"
            f" 0028); this Python ({sys.executable}) has no bitsandbytes: verl would fail a minute in, after Ray"
            " starts"
        ),
        (
            "pass --frozen-base-dtype with the profile's 16-bit dtype (or pip install bitsandbytes) to verlfit train"
            " (it then runs without bitsandbytes), or run in the verlfit:p40 image (both images have bitsandbytes)"
        ),
    )
    result = engines(world, profile_name="p40", frozen_base="nf4", find_spec=only("bitsandbytes"))
    assert (result.status, result.message) == (
        "PASS",
        "profile p40 (given) with rollout hf and attention sdpa: bitsandbytes importable",
    )
    # a 16-bit base needs nothing
    assert (
        engines(world, profile_name="p40", frozen_base="bfloat16", find_spec=without("bitsandbytes")).status == "PASS"
    )


def test_doctor_takes_the_runs_frozen_base_dtype_for_the_engines_and_disk_checks(world):
    """New-user trial: doctor had no --frozen-base-dtype, so only train's own checks found a missing bitsandbytes,
    and the disk check sized an NF4 7B's checkpoint with a 16-bit base. The option as train takes it (any case)."""
    usage = lambda path: SimpleNamespace(total=0, used=0, free=20 * GIB)  # noqa: E731
    argv = ["--profile", "p40", "--frozen-base-dtype", "NF4", "--lora-rank", "32", "--algo", "grpo"]
    checks = _doctor_json(
        world, [*argv, "--model", "Qwen/Qwen2.5-7B-Instruct"], find_spec=without("bitsandbytes"), disk_usage=usage
    )
    assert checks["engines"]["status"] == "FAIL"
    assert "needs bitsandbytes for the NF4 frozen base (patch 0028)" in checks["engines"]["message"]
    # 6,872,910,592 bytes a checkpoint: the NF4 base as the p40 profile stores it, the adapters (tests/test_failure.py)
    assert (checks["disk"]["status"], checks["disk"]["message"]) == (
        "PASS",
        f"20.0 GiB free at {world.tmp}; this run holds 2 checkpoints of 6.4 GiB at once (12.8 GiB)",
    )


@pytest.mark.parametrize("frozen_base", [["--frozen-base-dtype", "nf4"], []])
def test_doctor_sizes_an_nf4_checkpoint_on_the_a10_profile_with_the_hf_rollout(world, frozen_base):
    """New-user trial: on the a10 profile the disk check sized the run with the profile's vLLM rollout, with which an
    NF4 base is refused, and fell back to the bf16 base: a 14B NF4 GRPO LoRA read 2 checkpoints of 29.6 GiB each and
    FAILed on 23.6 GiB free. With --rollout hf, as train runs it, the NF4 base (given, or the one train plans) is
    sized: 11.3 GiB, as on the p40 profile."""
    usage = lambda path: SimpleNamespace(total=0, used=0, free=int(23.6 * GIB))  # noqa: E731
    run = ["--lora-rank", "32", "--algo", "grpo", "--model", "Qwen/Qwen2.5-14B-Instruct", *frozen_base]
    on_a10 = ["--profile", "a10", "--rollout", "hf", "--attention", "sdpa", *run]
    checks = _doctor_json(world, on_a10, disk_usage=usage)
    on_p40 = _doctor_json(world, ["--profile", "p40", *run], disk_usage=usage)
    assert (checks["disk"]["status"], checks["disk"]["message"]) == (
        "PASS",
        f"23.6 GiB free at {world.tmp}; this run holds 2 checkpoints of 11.3 GiB at once (22.7 GiB)",
    )
    assert on_p40["disk"]["message"] == checks["disk"]["message"]


def _doctor_json(world, argv, **fields):
    """``verlfit doctor ARGV --json`` against ``context(world, **fields)``: the checks by name."""
    import json

    args = cli.build_parser().parse_args(["doctor", *argv, "--run-dir", str(world.tmp / "runs"), "--json"])
    out = io.StringIO()
    doctor._run(args, context=context(world, **fields), out=out)
    return {check["name"]: check for check in json.loads(out.getvalue())["checks"]}


def test_doctor_checks_the_nf4_base_train_would_plan_for_a_7b_on_a_p40(world):
    """New-user trial: for a 7B LoRA on the p40 profile train's planner stores the base in NF4 by itself, while doctor
    checked no bitsandbytes and sized a 16-bit base's checkpoint (15.4 GiB). Now the doctor plans the base as train
    does at its default sizes; the 3B, whose bf16 base fits, keeps it."""
    usage = lambda path: SimpleNamespace(total=0, used=0, free=20 * GIB)  # noqa: E731
    seven_b = ["--profile", "p40", "--lora-rank", "32", "--algo", "grpo", "--model", "Qwen/Qwen2.5-7B-Instruct"]
    checks = _doctor_json(world, seven_b, find_spec=without("bitsandbytes"), disk_usage=usage)
    assert checks["engines"]["status"] == "FAIL"
    assert checks["engines"]["message"].startswith(
        "profile p40 (given) with rollout hf and attention sdpa, the LoRA base in nf4 as verlfit train plans it with "
        "its default sizes needs bitsandbytes for the NF4 frozen base (patch 0028);"
    )
    assert checks["disk"]["message"].endswith("this run holds 2 checkpoints of 6.4 GiB at once (12.8 GiB)")
    three_b = [*seven_b[:-1], "Qwen/Qwen2.5-3B-Instruct"]
    checks = _doctor_json(world, three_b, find_spec=without("bitsandbytes"), disk_usage=usage)
    assert (checks["engines"]["status"], checks["engines"]["message"]) == (
        "PASS",
        "profile p40 (given) with rollout hf and attention sdpa: no vllm or flash_attn needed",
    )
    assert checks["disk"]["message"].endswith("this run holds 2 checkpoints of 6.7 GiB at once (13.3 GiB)")


@pytest.mark.parametrize(
    "argv, message, fix",
    [
        (
            ["--frozen-base-dtype", "nf4", "--model", "Qwen/Qwen2.5-7B-Instruct", "--profile", "p40"],
            "--frozen-base-dtype without LoRA: every parameter trains, so there is no adapter to apply it to",
            "add --lora-rank N (e.g. 32), or drop --frozen-base-dtype",
        ),
        (
            ["--frozen-base-dtype", "float16", "--profile", "p40", "--lora-rank", "32"],
            "--frozen-base-dtype float16 with the p40 profile: it stores a LoRA base in bfloat16 (as the checkpoints "
            "hold it, computed in float32)",
            "use --frozen-base-dtype bfloat16, nf4, or float32 (stock verl)",
        ),
        (
            ["--frozen-base-dtype", "nf4", "--profile", "a10", "--lora-rank", "32"],
            "--frozen-base-dtype nf4 with the vllm rollout: verl hands vLLM the FSDP model's weights, and vLLM cannot "
            "load bitsandbytes' packed 4-bit ones",
            "add --rollout hf",
        ),
    ],
)
def test_doctor_refuses_the_frozen_base_dtypes_train_refuses_with_exit_2(argv, message, fix, capsys):
    """New-user trial: these were FAILs on the disk line (and the free space went unjudged); train and plan refuse
    them with exit status 2, and so does doctor now, before any check."""
    assert cli.main(["doctor", *argv]) == 2
    assert capsys.readouterr().err.splitlines()[-2:] == [f"verlfit: error: {message}", f"  fix: {fix}"]


def test_engines_pass_names_what_they_found_or_that_nothing_is_needed(world):
    looked = []
    result = engines(
        world,
        profile_name="a10",
        nvml=FakeNvml(**NO_GPU),
        find_spec=lambda name: looked.append(name) or SimpleNamespace(name=name),
    )
    assert (result.status, result.message, result.fix) == (
        "PASS",
        "profile a10 (given) with rollout vllm and attention flash_attention_2: vllm and flash_attn importable",
        None,
    )
    assert looked == ["vllm", "flash_attn"]
    nothing = lambda name: pytest.fail(f"looked for {name}")  # noqa: E731
    result = engines(world, profile_name="a10", rollout="hf", attention="sdpa", find_spec=nothing)
    assert (result.status, result.message) == (
        "PASS",
        "profile a10 (given) with rollout hf and attention sdpa: no vllm or flash_attn needed",
    )
    assert (
        engines(world, profile_name="a10", attention="eager", find_spec=only("vllm")).message
        == "profile a10 (given) with rollout vllm and attention eager: vllm importable"
    )
    assert (
        engines(world, find_spec=nothing).message
        == "profile p40 (chosen by Tesla P40) with rollout hf and attention sdpa: no vllm or flash_attn needed"
    )


def test_engines_refuse_what_the_profile_cannot_run_and_skip_without_a_profile(world):
    result = engines(world, profile_name="p40", rollout="vllm")
    assert (result.status, result.message, result.fix) == (
        "FAIL",
        "--rollout vllm with the p40 profile: vLLM needs compute capability 7.0 and the verlfit:p40 image has no vLLM",
        "use --rollout hf (the profile's HF generate rollout)",
    )
    result = engines(world, nvml=FakeNvml(**NO_GPU), find_spec=lambda name: pytest.fail(f"looked for {name}"))
    assert (result.status, result.message) == (
        "SKIP",
        (
            "no profile given (VERLFIT_PROFILE, --profile) and no GPU to choose one by: the rollout's and attention's"
            " packages not checked"
        ),
    )


def test_doctor_json_carries_engines_and_takes_trains_options(world):
    import sys

    out = io.StringIO()
    paths = ["--data", str(world.data), "--model", str(world.model), "--run-dir", str(world.tmp / "runs")]
    args = cli.build_parser().parse_args(["doctor", "--json", "--profile", "a10", *paths])
    assert doctor._run(args, context=context(world, gpus=(A10,), find_spec=without("vllm", "flash_attn")), out=out) == 1
    data = json.loads(out.getvalue())
    assert [c["name"] for c in data["checks"]] == list(CHECK_NAMES) and CHECK_NAMES.index(
        "engines"
    ) == CHECK_NAMES.index("environment") + 1
    assert {c["name"]: c["status"] for c in data["checks"] if c["status"] != "PASS"} == {"engines": "FAIL"}
    assert [c for c in data["checks"] if c["name"] == "engines"] == [
        {
            "name": "engines",
            "status": "FAIL",
            "message": (
                "profile a10 (given) with rollout vllm and attention flash_attention_2 needs vllm for the vLLM rollout"
                f" and flash_attn for FlashAttention-2 attention; this Python ({sys.executable}) has neither: verl"
                " would fail a minute in, after Ray starts"
            ),
            "fix": (
                "pass --rollout hf --attention sdpa to verlfit train (it then runs without vllm and flash_attn), or run"
                " in the verlfit:a10 image (it has vLLM and flash-attn)"
            ),
            "details": [],
        }
    ]
    out = io.StringIO()
    args = cli.build_parser().parse_args(
        ["doctor", "--profile", "a10", "--rollout", "hf", "--attention", "sdpa", *paths]
    )
    assert doctor._run(args, context=context(world, gpus=(A10,), find_spec=without("vllm", "flash_attn")), out=out) == 0
    assert (
        "PASS  engines               profile a10 (given) with rollout hf and attention sdpa: no vllm or flash_attn"
        " needed" in out.getvalue().splitlines()
    )
    assert out.getvalue().splitlines()[-1] == "14 PASS: ready"


H200_NVML = FakeNvml([("NVIDIA H200", (9, 0), 150_754_820_096)], driver="580.159.04", cuda=13000)


class Launched(Exception):
    """Raised where train goes on past its blocking checks."""


def train_without_engines(monkeypatch, tmp_path, capsys, argv):
    """``verlfit train --profile a10 ARGV`` on a fake H200 in a Python without vllm and flash_attn, the doctor's other
    blocking checks passing; returns (exit status, stderr, the checks that ran). Past the checks, train stops at
    data_ready (raising :class:`Launched`)."""
    import importlib.util

    import verlfit.gpu
    from verlfit.checks.result import CheckResult
    from verlfit.train import inputs, supervise

    real_query = verlfit.gpu.query_gpus
    from verlfit.train import gpus as train_gpus

    for module in (train_gpus, readiness):  # the names train's GPU lookup and the doctor's checks call
        monkeypatch.setattr(module, "query_gpus", lambda nvml=None: real_query(H200_NVML))
    monkeypatch.setattr(importlib.util, "find_spec", without("vllm", "flash_attn"))
    ran = []
    for name in BLOCKING:
        if name != "engines":
            monkeypatch.setitem(
                readiness.CHECKS, name, lambda ctx, name=name: ran.append(name) or CheckResult(name, "PASS", "fake")
            )
    real_engines = readiness.CHECKS["engines"]
    monkeypatch.setitem(readiness.CHECKS, "engines", lambda ctx: ran.append("engines") or real_engines(ctx))

    def launched(settings, keys=None, prepare=True):
        raise Launched(settings.rollout, settings.attention)

    monkeypatch.setattr(inputs, "data_ready", launched)
    monkeypatch.setattr(supervise.subprocess, "Popen", lambda *a, **kw: pytest.fail("verl was launched"))
    status = cli.main(
        ["train", "--profile", "a10", "--plan", "off", "--no-validate", "--run-dir", str(tmp_path / "run"), *argv]
    )
    assert not (tmp_path / "run").exists()
    return status, capsys.readouterr().err, ran


def test_train_without_vllm_refuses_before_launching_and_hf_sdpa_passes(monkeypatch, tmp_path, capsys):
    import sys

    status, err, ran = train_without_engines(monkeypatch, tmp_path, capsys, [])
    assert status == 1  # as the other blocking checks' refusals
    assert (
        err == "verlfit: error: pre-flight checks failed:\n  FAIL engines: profile a10 (given) with rollout vllm and"
        " attention flash_attention_2 needs vllm for the vLLM rollout and flash_attn for FlashAttention-2"
        f" attention; this Python ({sys.executable}) has neither: verl would fail a minute in, after Ray starts\n   "
        "    fix: pass --rollout hf --attention sdpa to verlfit train (it then runs without vllm and flash_attn),"
        " or run in the verlfit:a10 image (it has vLLM and flash-attn)\n  fix: run `verlfit doctor` for the full"
        " report, or --skip-checks to launch anyway\n"
    )
    assert ran == list(BLOCKING)
    status, err, ran = train_without_engines(monkeypatch, tmp_path, capsys, ["--rollout", "hf"])
    assert (
        status == 1
        and "  FAIL engines: profile a10 (given) with rollout hf and attention flash_attention_2 needs flash_attn for"
        " FlashAttention-2 attention;"
        in err
    )
    assert "       fix: pass --attention sdpa to verlfit train (it then runs without flash_attn)" in err
    with pytest.raises(Launched) as launched:
        train_without_engines(monkeypatch, tmp_path, capsys, ["--rollout", "hf", "--attention", "sdpa"])
    assert launched.value.args == ("hf", "sdpa")


def test_train_skip_checks_skips_the_engines_check_too(monkeypatch, tmp_path, capsys):
    with pytest.raises(Launched) as launched:
        train_without_engines(monkeypatch, tmp_path, capsys, ["--skip-checks"])
    assert launched.value.args == ("vllm", "flash_attention_2")


# --------------------------------------------------------------------------- issue 26 phase B: the user's own task


def write_own_task(folder, prompt_key="prompt", data_source="arith", test=True):
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "data_source": [data_source] * 4,
            prompt_key: [[{"role": "user", "content": f"{i} + {i}?"}] for i in range(4)],
            "reward_model": [{"style": "rule", "ground_truth": str(2 * i)} for i in range(4)],
        }
    )
    pq.write_table(table, folder / "train.parquet")
    if test:
        pq.write_table(table, folder / "test.parquet")
    return folder


def doctor_lines(world, *argv):
    out = io.StringIO()
    args = cli.build_parser().parse_args(["doctor", "--profile", "p40", "--model", str(world.model), *argv])
    status = doctor._run(args, context=context(world), out=out)
    return (
        status,
        {line.split()[1]: line for line in out.getvalue().splitlines() if line[:4] in ("PASS", "WARN", "FAIL", "SKIP")},
        out.getvalue(),
    )


def test_verl_data_with_its_own_prompt_key_passes_when_the_override_is_given(world):
    # issue 26 finding 1: verl-valid data with data.prompt_key=question FAILed, with `prepare-gsm8k --output DIR` as the
    # fix
    data = write_own_task(world.tmp / "question", prompt_key="question", data_source="openai/gsm8k")
    status, lines, text = doctor_lines(world, "--data", str(data))
    assert (
        lines["data"].startswith("FAIL  data ")
        and "train.parquet lacks prompt; test.parquet lacks prompt" in lines["data"]
    )
    assert "prepare-gsm8k" not in text and "set data.prompt_key / data.reward_fn_key after -- to your columns" in text
    status, lines, _ = doctor_lines(world, "--data", str(data), "--", "data.prompt_key=question")
    assert lines["data"].split(None, 2)[2] == f"{data}: train.parquet 4 rows, test.parquet 4 rows, verl columns present"
    assert (
        lines["reward"].split(None, 2)[2]
        == f"verl's default_compute_score scores every data_source of {data}: 4 training and 4 test rows; the ground"
        " truth scored 0 x8; an empty response scored 0 x8; 0 for the ground truth is expected: verl's scorers read"
        " the answer in a response's own form (GSM8K's the number after '####'), which the bare ground truth lacks"
    )
    assert status == 0


def test_a_folder_with_only_the_users_train_parquet_fails_without_a_fix_that_overwrites_it(world):
    data = write_own_task(world.tmp / "mine", test=False)
    result = by_name(run_checks(context(world, data_dir=str(data)), names=("data",)))["data"]
    assert result.status == "FAIL"
    assert (
        result.fix
        == f"add test.parquet (verl validates on it) next to train.parquet in {data}, or point --data at a folder"
        " holding both train.parquet and test.parquet (verlfit prepare-data --output NEW_FOLDER makes them from"
        " your own files)"
    )


def test_doctor_checks_the_reward_function_and_the_data_sources_verl_scores(world):
    data = write_own_task(world.tmp / "own")
    reward = world.tmp / "reward.py"
    reward.write_text(
        "def score(data_source, solution_str, ground_truth, extra_info=None):\n    return float(solution_str =="
        " ground_truth)\n"
    )
    status, lines, text = doctor_lines(world, "--data", str(data))
    assert (
        status == 1
        and lines["reward"].startswith("FAIL  reward ")
        and "verl 0.4.1 has no scorer for data_source 'arith' (in train.parquet, test.parquet) of"
        f" {data / 'train.parquet'}"
        in lines["reward"]
    )
    assert "fix: pass a reward function: --reward-function FILE.py:FUNCTION" in text
    status, lines, text = doctor_lines(world, "--data", str(data), "--reward-function", f"{reward}:compute_score")
    assert (
        status == 1
        and lines["reward"].split(None, 2)[2]
        == f"reward function file {reward} has no function 'compute_score' (its functions: score)"
    )
    assert f"fix: pass --reward-function {reward}:score, or rename the function" in text
    status, lines, _ = doctor_lines(world, "--data", str(data), "--reward-function", f"{reward}:score")
    assert (
        status == 0
        and lines["reward"].split(None, 2)[2]
        == f"score in {reward} scores every row (called in a scratch directory): 4 training and 4 test rows; the"
        " ground truth scored 1 x8; an empty response scored 0 x8"
    )


def test_the_model_check_fails_a_mixture_of_experts_config(world):
    config = json.loads((world.model / "config.json").read_text())
    (world.model / "config.json").write_text(
        json.dumps({**config, "model_type": "qwen2_moe", "num_experts": 60, "num_experts_per_tok": 4})
    )
    result = by_name(run_checks(context(world), names=("model",)))["model"]
    assert result.status == "FAIL"
    assert result.message.startswith(
        f"{world.model}: a mixture-of-experts model (num_experts=60, num_experts_per_tok=4, model_type 'qwen2_moe'):"
        " verlfit counts parameters and memory for dense models only"
    )


def test_empty_own_data_gets_a_fix_for_own_data_never_gsm8k(world):
    """new-user trial: an empty train.parquet in the user's verl-format folder got `verlfit prepare-gsm8k --output` as
    doctor's fix, and train's dry run `use --batch-size 0 or less`."""
    from verlfit.train.inputs import check_data_size
    from verlfit.run_settings import TrainSettings

    data = write_own_task(world.tmp / "own")
    empty = pa.table(
        {
            name: pa.array([], type=pq.read_schema(data / "train.parquet").field(name).type)
            for name in ("data_source", "prompt", "reward_model")
        }
    )
    pq.write_table(empty, data / "train.parquet")
    status, lines, text = doctor_lines(world, "--data", str(data))
    assert lines["data"].startswith("FAIL  data ") and f"{data / 'train.parquet'} has no rows" in lines["data"]
    assert (
        "prepare-gsm8k" not in text
        and "make train.parquet and test.parquet again from your own files (verlfit prepare-data --output NEW_FOLDER)"
        in " ".join(text.split())
    )
    with pytest.raises(VerlfitError) as refused:
        check_data_size(TrainSettings(data_dir=str(data)))
    assert (refused.value.message, refused.value.exit_code) == (f"{data / 'train.parquet'} has no rows", 2)
    assert refused.value.fix.startswith(
        "prepare the data again (verlfit prepare-data --output NEW_FOLDER from your own files"
    )


def test_a_missing_data_folder_not_named_for_gsm8k_is_not_sent_to_gsm8k(world):
    """issue 32 item 18: `doctor --data data/mytask` (not there yet) told the user to copy GSM8K's files into it."""
    nowhere = world.tmp / "mytask"
    offline = by_name(
        run_checks(context(world, data_dir=str(nowhere), environ={"HF_HUB_OFFLINE": "1"}), names=("data",))
    )["data"]
    assert (offline.status, offline.message) == (
        "FAIL",
        (
            f"{nowhere} does not exist: verlfit train would prepare GSM8K into it, but cannot here (openai/gsm8k is not"
            " in the datasets cache while HF_HUB_OFFLINE is set: verlfit train has nothing to prepare from)"
        ),
    )
    assert (
        offline.fix
        == "check the path; for your own task make the folder first: verlfit prepare-data --train FILE --test-fraction"
        f" 0.1 --data-source NAME --output {nowhere}"
    )
    ctx = context(world, data_dir=str(nowhere), environ={"HF_ENDPOINT": "https://mirror.example"})
    reachable = by_name(run_checks(ctx, names=("data",)))["data"]
    assert (reachable.status, reachable.message, reachable.fix) == (
        "WARN",
        f"{nowhere} does not exist: verlfit train would prepare GSM8K into it",
        offline.fix,
    )


UNBUILDABLE_CONFIGS = {
    "unknown model_type": (
        {"model_type": "florp"},
        (
            "transformers 4.51.3 cannot build this config.json (The checkpoint you are trying to load has model type "
            "`florp` but Transformers does not recognize this architecture. This could be because of an issue with the "
            "checkpoint, or because your version of Transformers is out of date.), so verl could not load the model"
        ),
        (
            "pass --model a model whose config.json transformers knows (model_type qwen2, qwen3, llama or mistral:"
            " those verlfit plans for), downloaded whole from its repository"
        ),
    ),
    "no hidden_size": (
        {"hidden_size": None},
        (
            "not a decoder-only transformer config: missing hidden_size (transformers would fill in its class's"
            " defaults, another model's sizes, and the weights would not load)"
        ),
        (
            "download config.json again from the model's repository (huggingface-cli download MODEL config.json "
            "--local-dir DIR), or pass --model a Qwen2, Qwen3, Llama or Mistral model"
        ),
    ),
    "num_hidden_layers -1": (
        {"num_hidden_layers": -1},
        "num_hidden_layers=-1 must be a positive whole number (counts of layers, heads and widths)",
        (
            "download config.json again from the model's repository (huggingface-cli download MODEL config.json "
            "--local-dir DIR): a config whose sizes are not whole numbers describes no model the weights fit"
        ),
    ),
    "num_hidden_layers two": (
        {"num_hidden_layers": "two"},
        "num_hidden_layers='two' must be a positive whole number (counts of layers, heads and widths)",
        (
            "download config.json again from the model's repository (huggingface-cli download MODEL config.json "
            "--local-dir DIR): a config whose sizes are not whole numbers describes no model the weights fit"
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(UNBUILDABLE_CONFIGS))
def test_doctor_plan_and_dry_run_agree_on_a_config_transformers_cannot_build(
    world, tiny_qwen2_dir, case, monkeypatch, capsys
):
    """New-user trial: these config.json files got "PASS model" from doctor, while plan and the dry run refused some
    of them (an unknown model_type none) and eval could load none. Now all three say the same refusal."""
    change, message, fix = UNBUILDABLE_CONFIGS[case]
    shutil.rmtree(world.model)
    shutil.copytree(tiny_qwen2_dir, world.model)  # a real tokenizer: the dry run measures the prompts with it
    config = json.loads((world.model / "config.json").read_text())
    config = {key: value for key, value in {**config, **change}.items() if value is not None}
    (world.model / "config.json").write_text(json.dumps(config))
    result = model_check(world, world.model)
    assert (result.status, result.message, result.fix) == ("FAIL", f"{world.model}: {message}", fix)
    monkeypatch.chdir(world.tmp)
    assert cli.main(["plan", "--profile", "p40", "--model", "model"]) == 2
    assert capsys.readouterr().err == f"verlfit: error: model: {message}\n  fix: {fix}\n"
    status = cli.main(["train", "--dry-run", "--profile", "p40", "--model", "model", "--data", str(world.data)])
    err = capsys.readouterr().err
    assert (status, err) == (2, f"verlfit: error: {world.model}: {message}\n  fix: {fix}\n")


@pytest.mark.parametrize("why", ["read-only file system", "not writable"])
def test_raw_gsm8k_in_a_folder_train_cannot_write_fails_instead_of_would_prepare(world, why, monkeypatch, capsys):
    """New-user trial: a dry run on raw GSM8K in a read-only folder said a real run "prepares verl's files from them
    into DIR/verl", which it could not. (The suite runs as root, for whom permission bits do not stop a write, so
    statvfs and os.access answer as they would for a read-only mount or another user's folder.)"""
    import os

    from verlfit.checks import data_folder

    raw = world.tmp / "raw"
    raw.mkdir()
    row = {"question": "What is 1 + 1?", "answer": "1 + 1 = 2\n#### 2"}
    for split in ("train", "test"):
        (raw / f"{split}.jsonl").write_text(json.dumps(row) + "\n")
    real_statvfs, real_access = os.statvfs, os.access

    class ReadOnly:
        f_flag = os.ST_RDONLY

    if why == "read-only file system":
        monkeypatch.setattr(
            data_folder.os, "statvfs", lambda path: ReadOnly() if Path(path) == raw else real_statvfs(path)
        )
        cause = f"{raw} is on a read-only file system"
    else:
        monkeypatch.setattr(data_folder.os, "access", lambda path, mode: Path(path) != raw and real_access(path, mode))
        cause = f"{raw} is not writable for this user"
    result = by_name(run_checks(context(world, data_dir=str(raw)), names=("data",)))["data"]
    assert (result.status, result.message, result.fix) == (
        "FAIL",
        (
            f"{raw} holds raw GSM8K files, not prepared yet, and verlfit train cannot prepare verl's files into "
            f"{raw / 'verl'}: {cause}"
        ),
        (
            f"verlfit prepare-gsm8k --input {raw} --output A_FOLDER_YOU_CAN_WRITE (e.g. ~/data/gsm8k), then pass --data"
            " that folder"
        ),
    )
