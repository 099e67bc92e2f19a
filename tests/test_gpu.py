"""GPU facts from NVML: a P40 and an A10 as NVML reports them, and no driver at all."""

import pynvml
import pytest

from fakes import FakeNvml
from verlfit.errors import VerlfitError
from verlfit.gpu import (
    cuda_visible_gpus,
    links_among,
    max_shared_memory_per_block,
    nccl_environment,
    query_gpus,
    refuse_mixed_cards,
    refuse_too_few,
)


def test_p40_facts():
    report = query_gpus(FakeNvml([("Tesla P40", (6, 1), 25_637_224_448)], driver="470.256.02", cuda=11040))
    assert report.error is None and report.count == 1
    assert (report.driver_version, report.cuda_driver_version) == ("470.256.02", (11, 4))
    gpu = report.gpus[0]
    assert (gpu.name, gpu.compute_capability_text, gpu.total_memory_bytes, gpu.free_memory_bytes) == (
        "Tesla P40",
        "6.1",
        25_637_224_448,
        25_637_224_448 - 300 * 2**20,
    )
    assert (gpu.supports_bf16, gpu.supports_flash_attention_2, gpu.supports_triton, gpu.supports_vllm) == (
        False,
        False,
        False,
        False,
    )
    assert gpu.max_shared_memory_per_block == 49152


def test_a10_facts():
    gpu = query_gpus(FakeNvml([("NVIDIA A10", (8, 6), 24_146_608_128)])).gpus[0]
    assert (gpu.supports_bf16, gpu.supports_flash_attention_2, gpu.supports_triton, gpu.supports_vllm) == (
        True,
        True,
        True,
        True,
    )
    assert gpu.max_shared_memory_per_block == 101376 == max_shared_memory_per_block((8, 9))


def test_no_driver_is_a_result_not_a_traceback():
    report = query_gpus(FakeNvml(error="NVML Shared Library Not Found"))
    assert report.gpus == [] and report.error.startswith(
        "no NVIDIA GPU visible: NVML could not start (NVML Shared Library Not Found)"
    )


def test_driver_without_devices():
    report = query_gpus(FakeNvml([]))
    assert (
        report.error
        == "no NVIDIA GPU visible: the driver is loaded but reports 0 devices (check CUDA_VISIBLE_DEVICES and --gpus)"
    )


# ---- several GPUs: PCI order, CUDA_VISIBLE_DEVICES, mixed cards, peer-to-peer (fake NVML with pynvml's constants)


P40 = ("Tesla P40", (6, 1), 25_637_224_448)
A10 = ("NVIDIA A10", (8, 6), 24_146_608_128)


def test_pairs_say_pcie_level_nvlink_and_p2p_and_the_tuple_constant_reaches_nvml_as_an_int():
    # nvidia-ml-py's NVML_P2P_CAPS_INDEX_READ is (0,): the fake, like ctypes, refuses anything but an int
    assert pynvml.NVML_P2P_CAPS_INDEX_READ == (0,)
    nvml = FakeNvml(
        [P40, P40, P40],
        p2p={(0, 2): pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED},
        levels={(0, 1): pynvml.NVML_TOPOLOGY_SINGLE, (1, 2): pynvml.NVML_TOPOLOGY_SYSTEM},
        nvlink=[(0, 1)],
    )
    report = query_gpus(nvml)
    assert [
        (link.first, link.second, link.level, link.p2p_read, link.p2p_status, link.nvlink) for link in report.links
    ] == [(0, 1, 10, True, 0, True), (0, 2, 30, False, 3, False), (1, 2, 50, True, 0, False)]
    assert [link.describe() for link in report.links] == [
        "GPU 0 - GPU 1: NVLink, P2P yes",
        (
            "GPU 0 - GPU 2: PCIe PHB (a PCIe host bridge (the CPU's root complex)), P2P no (NVML status 3: the PCIe"
            " topology does not support it)"
        ),
        "GPU 1 - GPU 2: PCIe SYS (the link between CPU sockets (QPI/UPI, Infinity Fabric)), P2P yes",
    ]
    assert (report.gpus[1].uuid, report.gpus[1].pci_bus_id, report.gpus[1].pci_order) == (
        "GPU-00000001-aaaa-bbbb-cccc-000000000001",
        "00000000:01:00.0",
        (0, 1, 0),
    )


def test_a_one_way_p2p_refusal_counts_and_an_unknown_path_still_reports_p2p():
    class OneWay(FakeNvml):
        def nvmlDeviceGetP2PStatus(self, a, b, index):
            return (
                pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED
                if (a, b, index) == (1, 0, 0)
                else super().nvmlDeviceGetP2PStatus(a, b, index)
            )

    link = query_gpus(OneWay([P40, P40], levels_error=True)).links[0]
    assert (link.p2p_read, link.p2p_status, link.level) == (False, 2, None)
    assert link.describe().startswith("GPU 0 - GPU 1: path unknown (NVML: ") and link.describe().endswith(
        "), P2P no (NVML status 2: the GPU does not support it)"
    )


def test_cuda_visible_devices_is_read_in_pci_bus_order_and_ends_at_the_first_bad_entry():
    # NVML index 0 sits on PCI bus 0x41, index 1 on 0x03, index 2 on 0x81: PCI order is 1, 0, 2
    gpus = query_gpus(FakeNvml([P40, P40, P40], pci_buses=[0x41, 0x03, 0x81])).gpus
    index = lambda environ: [g.index for g in cuda_visible_gpus(gpus, environ)]  # noqa: E731
    assert index({}) == [1, 0, 2]
    assert index({"CUDA_VISIBLE_DEVICES": "0"}) == [1]
    assert index({"CUDA_VISIBLE_DEVICES": "2,0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) == [2, 1]
    assert index({"CUDA_VISIBLE_DEVICES": "0,7,2"}) == [1]  # CUDA stops at the invalid 7
    assert index({"CUDA_VISIBLE_DEVICES": "GPU-00000002,1"}) == [2, 0]
    assert index({"CUDA_VISIBLE_DEVICES": ""}) == [] == index({"CUDA_VISIBLE_DEVICES": "-1"})
    with pytest.raises(VerlfitError, match="entry GPU-0000000 matches 3 GPUs"):
        cuda_visible_gpus(gpus, {"CUDA_VISIBLE_DEVICES": "GPU-0000000"})


def test_indices_on_mixed_cards_need_pci_bus_order():
    gpus = query_gpus(FakeNvml([P40, A10])).gpus
    with pytest.raises(VerlfitError) as error:
        cuda_visible_gpus(gpus, {"CUDA_VISIBLE_DEVICES": "0"})
    assert (
        error.value.message
        == "CUDA_VISIBLE_DEVICES=0 numbers the GPUs in CUDA's default fastest-first order, which is not nvidia-smi's on"
        " this machine of NVIDIA A10 and Tesla P40 cards"
    )
    assert (
        error.value.fix
        == "also set CUDA_DEVICE_ORDER=PCI_BUS_ID (then the indices are nvidia-smi's), or name the GPUs by UUID"
        " (nvidia-smi -L)"
    )
    assert [
        g.name for g in cuda_visible_gpus(gpus, {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    ] == ["NVIDIA A10"]


def test_mixed_cards_are_refused_naming_both_and_the_selection_of_each_kind():
    # NVML 0: A10 on bus 5, NVML 1: P40 on bus 2, NVML 2: P40 on bus 9 -> PCI order P40(1), A10(0), P40(2)
    gpus = query_gpus(FakeNvml([A10, P40, P40], pci_buses=[5, 2, 9])).gpus
    with pytest.raises(VerlfitError) as error:
        refuse_mixed_cards(gpus, cuda_visible_gpus(gpus, {}), {})
    assert (
        error.value.message
        == "this machine has GPUs of 2 kinds (NVML indices, as nvidia-smi numbers them): Tesla P40 (compute capability"
        " 6.1, 23.9 GiB): GPU 1, 2; NVIDIA A10 (compute capability 8.6, 22.5 GiB): GPU 0; one run needs cards of one"
        " kind (one profile, one memory plan, equal FSDP shards)"
    )
    assert (
        error.value.fix
        == "run on one kind: CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,2 for the Tesla P40s or"
        " CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1 for the NVIDIA A10"
    )
    assert error.value.exit_code == 2
    picked = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0,2"}  # the fix, applied
    refuse_mixed_cards(gpus, cuda_visible_gpus(gpus, picked), picked)
    assert [g.name for g in cuda_visible_gpus(gpus, picked)] == ["Tesla P40", "Tesla P40"]


def test_more_gpus_than_visible_are_refused_naming_the_count():
    gpus = query_gpus(FakeNvml([P40, P40])).gpus
    refuse_too_few(gpus, 2, {})
    with pytest.raises(VerlfitError) as error:
        refuse_too_few(gpus, 4, {})
    assert (error.value.message, error.value.fix) == (
        "--gpus 4 asks for more GPUs than are visible: this machine has 2",
        "use --gpus 2 or less",
    )
    environ = {"CUDA_VISIBLE_DEVICES": "1"}
    with pytest.raises(VerlfitError) as error:
        refuse_too_few(cuda_visible_gpus(gpus, environ), 2, environ)
    assert (error.value.message, error.value.fix) == (
        "--gpus 2 asks for more GPUs than are visible: CUDA_VISIBLE_DEVICES=1 leaves 1 visible",
        "use --gpus 1 or less, or widen CUDA_VISIBLE_DEVICES",
    )


def test_nccl_p2p_is_disabled_only_where_a_pair_lacks_it_and_never_over_the_users_setting():
    report = query_gpus(FakeNvml([P40, P40, P40], p2p={(1, 2): pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED}))
    environment, notes = nccl_environment(report.links, 3, {})
    assert environment == {"NCCL_P2P_DISABLE": "1"}
    assert notes == [
        "NVML reports no peer-to-peer access between GPU 1-2: NCCL_P2P_DISABLE=1 for the workers, so NCCL goes through"
        " host memory (slower, but no hang); set NCCL_P2P_DISABLE or NCCL_P2P_LEVEL yourself to override"
    ]
    assert nccl_environment(links_among(report.links, report.gpus[:2]), 2, {}) == (
        {},
        [],
    )  # GPUs 0 and 1 reach each other
    assert nccl_environment(report.links, 1, {}) == ({}, [])  # one GPU: no NCCL traffic between GPUs
    kept = nccl_environment(report.links, 3, {"NCCL_P2P_LEVEL": "LOC"})
    assert kept == (
        {},
        [
            "NVML reports no peer-to-peer access between GPU 1-2; your NCCL_P2P_LEVEL=LOC is kept (verlfit would set"
            " NCCL_P2P_DISABLE=1)"
        ],
    )
    assert nccl_environment(report.links, 3, {"NCCL_P2P_DISABLE": "0"})[0] == {}
