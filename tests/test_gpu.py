"""GPU facts from NVML: a P40 and an A10 as NVML reports them, and no driver at all."""

from fakes import FakeNvml
from verlfit.gpu import max_shared_memory_per_block, query_gpus


def test_p40_facts():
    report = query_gpus(FakeNvml([("Tesla P40", (6, 1), 25_637_224_448)], driver="470.256.02", cuda=11040))
    assert report.error is None and report.count == 1
    assert (report.driver_version, report.cuda_driver_version) == ("470.256.02", (11, 4))
    gpu = report.gpus[0]
    assert (gpu.name, gpu.compute_capability_text, gpu.total_memory_bytes, gpu.free_memory_bytes) == ("Tesla P40", "6.1", 25_637_224_448, 25_637_224_448 - 300 * 2**20)
    assert (gpu.supports_bf16, gpu.supports_flash_attention_2, gpu.supports_triton, gpu.supports_vllm) == (False, False, False, False)
    assert gpu.max_shared_memory_per_block == 49152


def test_a10_facts():
    gpu = query_gpus(FakeNvml([("NVIDIA A10", (8, 6), 24_146_608_128)])).gpus[0]
    assert (gpu.supports_bf16, gpu.supports_flash_attention_2, gpu.supports_triton, gpu.supports_vllm) == (True, True, True, True)
    assert gpu.max_shared_memory_per_block == 101376 == max_shared_memory_per_block((8, 9))


def test_no_driver_is_a_result_not_a_traceback():
    report = query_gpus(FakeNvml(error="NVML Shared Library Not Found"))
    assert report.gpus == [] and report.error.startswith("no NVIDIA GPU visible: NVML could not start (NVML Shared Library Not Found)")


def test_driver_without_devices():
    report = query_gpus(FakeNvml([]))
    assert report.error == "no NVIDIA GPU visible: the driver is loaded but reports 0 devices (check CUDA_VISIBLE_DEVICES and --gpus)"
