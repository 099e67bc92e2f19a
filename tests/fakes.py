"""Fakes of the outside world shared by several test modules."""

from types import SimpleNamespace

import pynvml  # nvidia-ml-py: the fake answers with its real constants and error class

from verlfit.gpu import GpuInfo


class FakeNvml:
    """The pynvml functions gpu.query_gpus calls, answering for the given GPUs.

    ``gpus``: (name, (major, minor), total bytes) each, NVML index = position. ``pci_buses``: each GPU's PCI bus
    number (default: its index), so NVML order and PCI order can differ as on real boards. ``p2p``: {(a, b): NVML
    P2P status} for the read capability (default OK; give one direction, the other answers the same). ``nvlink``:
    pairs joined by NVLink. ``levels``: {(a, b): NVML_TOPOLOGY_*} (default host bridge); ``levels_error`` makes the
    common-ancestor query raise NVMLError_NotSupported, as NVML does on some platforms.
    """

    NVML_P2P_CAPS_INDEX_READ = pynvml.NVML_P2P_CAPS_INDEX_READ  # (0,) in nvidia-ml-py: a tuple, kept as is
    NVML_P2P_CAPS_INDEX_NVLINK = pynvml.NVML_P2P_CAPS_INDEX_NVLINK
    NVML_P2P_STATUS_OK = pynvml.NVML_P2P_STATUS_OK
    NVMLError = pynvml.NVMLError

    def __init__(
        self,
        gpus=(),
        driver="535.183.01",
        cuda=12020,
        error=None,
        pci_buses=None,
        p2p=None,
        nvlink=(),
        levels=None,
        levels_error=False,
    ):
        self.gpus, self.driver, self.cuda, self.error = list(gpus), driver, cuda, error
        self.pci_buses = list(pci_buses) if pci_buses is not None else list(range(len(self.gpus)))
        self.p2p, self.nvlink, self.levels, self.levels_error = (
            dict(p2p or {}),
            {frozenset(pair) for pair in nvlink},
            dict(levels or {}),
            levels_error,
        )

    def nvmlInit(self):
        if self.error:
            raise RuntimeError(self.error)

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return self.driver.encode()

    def nvmlSystemGetCudaDriverVersion(self):
        return self.cuda

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return self.gpus[handle][0]

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return self.gpus[handle][1]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=self.gpus[handle][2], free=self.gpus[handle][2] - 300 * 2**20)

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-{handle:08x}-aaaa-bbbb-cccc-{self.pci_buses[handle]:012x}"

    def nvmlDeviceGetPciInfo(self, handle):
        bus = self.pci_buses[handle]
        return SimpleNamespace(busId=f"00000000:{bus:02X}:00.0".encode(), domain=0, bus=bus, device=0)

    def _pair(self, table, a, b, default):
        return table.get((a, b), table.get((b, a), default))

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        if not isinstance(index, int):  # what ctypes does with a tuple
            raise TypeError(f"Don't know how to convert parameter 3 ({index!r})")
        if index == pynvml.NVML_P2P_CAPS_INDEX_NVLINK:
            return (
                pynvml.NVML_P2P_STATUS_OK if frozenset((a, b)) in self.nvlink else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
            )
        return self._pair(self.p2p, a, b, pynvml.NVML_P2P_STATUS_OK)

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        if self.levels_error:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._pair(self.levels, a, b, pynvml.NVML_TOPOLOGY_HOSTBRIDGE)


TINY_QWEN2_CONFIG = {
    "model_type": "qwen2",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 1000,
}
LFS_POINTER = (
    "version https://git-lfs.github.com/spec/v1\noid"
    " sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 988097824\n"
)


def write_model_dir(directory, config=TINY_QWEN2_CONFIG, shards=1, extra_parameters=0, tokenizer=("tokenizer.json",)):
    """A model directory as save_pretrained leaves it, without torch: config.json, safetensors weights whose
    tensors hold exactly the config's actor parameter count (verlfit.model_shape) plus ``extra_parameters``,
    split into ``shards`` files with a model.safetensors.index.json when more than one, and the ``tokenizer``
    files (placeholders: the doctor checks their presence, AutoTokenizer is not run). Returns the directory."""
    import json
    from pathlib import Path

    import numpy as np
    from safetensors.numpy import save_file

    from verlfit.model_shape import shape_from_config

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    shape = shape_from_config(config)
    tensors = {"model.embed_tokens.weight": np.zeros((shape.vocab_size, shape.hidden_size), dtype=np.float32)}
    for layer in range(shape.num_layers):
        tensors[f"model.layers.{layer}.packed"] = np.zeros(shape.layer_parameters, dtype=np.float32)
    tensors["model.norm.weight"] = np.zeros(shape.hidden_size + extra_parameters, dtype=np.float32)
    if not shape.tie_word_embeddings:
        tensors["lm_head.weight"] = np.zeros((shape.vocab_size, shape.hidden_size), dtype=np.float32)
    if shards == 1:
        save_file(tensors, str(directory / "model.safetensors"))
    else:
        names = list(tensors)
        weight_map = {}
        for shard in range(shards):
            file = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
            part = {name: tensors[name] for name in names[shard::shards]}
            save_file(part, str(directory / file))
            weight_map.update({name: file for name in part})
        (directory / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map})
        )
    for name in tokenizer:
        (directory / name).write_text("{}\n")
    return directory


def write_raw_gsm8k(directory):
    """``directory/train.jsonl`` and ``test.jsonl`` with one GSM8K-style row each: raw files ``verlfit train``
    prepares into ``directory/verl`` (its data check: WARN, not FAIL), so a dry run on them needs neither the hub
    nor a datasets cache. Returns ``directory`` as a string, for ``--data``."""
    import json
    from pathlib import Path

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        (directory / f"{split}.jsonl").write_text(
            json.dumps({"question": "1 + 1?", "answer": "1 + 1 = 2\n#### 2"}) + "\n"
        )
    return str(directory)


# GPUs as verlfit.gpu.query_gpus reports them (for the functions that take a detected GpuInfo)
H200 = GpuInfo(
    index=0,
    name="NVIDIA H200",
    compute_capability=(9, 0),
    total_memory_bytes=150_754_820_096,
    free_memory_bytes=150_000_000_000,
)
P40 = GpuInfo(
    index=0,
    name="Tesla P40",
    compute_capability=(6, 1),
    total_memory_bytes=25_637_224_448,
    free_memory_bytes=25_000_000_000,
)


def fake_checkpoint(run_dir, step):
    """What verl leaves after a complete save: global_step_<step>/ and the tracker file naming it."""
    (run_dir / "checkpoints" / f"global_step_{step}").mkdir(parents=True, exist_ok=True)
    (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(str(step))


def fake_verl_plan(tmp_path, script):
    """A LaunchPlan whose command is a small Python script standing in for verl's main_ppo."""
    import sys

    from verlfit.run_settings import TrainSettings
    from verlfit.train.launch_plan import LaunchPlan

    settings = TrainSettings(run_dir=str(tmp_path / "run"), steps=3)
    return LaunchPlan(
        settings,
        "p40",
        "fake",
        {"VLLM_DTYPE": "float32"},
        [],
        [sys.executable, "-c", script],
        [],
        total_steps=settings.steps,
    )


# verl 0.4.1's console line for step {n} (a stand-in verl script prints it with .format(n=...))
STEP = (
    "print('(TaskRunner pid=1) step:{n} - actor/pg_loss:0.5 - actor/ppo_kl:2.5e-05 - timing_s/step:1.0 -"
    " perf/total_num_tokens:100 - perf/throughput:100.0', flush=True)"
)

# The shape of Ray's report when a worker task raises (ray 2.46 RayTaskError, verl 0.4.1 WorkerDict methods)
OOM_LOG = """\
(TaskRunner pid=2211) step:3 - actor/pg_loss:0.01
Traceback (most recent call last):
  File "/opt/verl/verl/trainer/main_ppo.py", line 64, in main
ray.exceptions.RayTaskError(OutOfMemoryError): ray::TaskRunner.run() (pid=2211, ip=10.0.0.2)
  File "/opt/verl/verl/trainer/ppo/ray_trainer.py", line 1130, in fit
    actor_output = self.actor_rollout_wg.update_actor(batch)
ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_update_actor() (pid=2402, ip=10.0.0.2, actor_id=ab12)
  File "/opt/verl/verl/workers/actor/dp_actor.py", line 391, in update_policy
    loss.backward()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB. GPU 0 has a total capacity of 22.50 GiB of which 1.05 GiB is free. Including non-PyTorch memory, this process has 21.40 GiB memory in use.
""".splitlines()  # noqa: E501 (data or a script written out as it runs)

DISK_LOG = """\
(WorkerDict pid=2402) [rank0]: saving checkpoint to runs/r/checkpoints/global_step_50/actor
ray.exceptions.RayTaskError(RuntimeError): ray::WorkerDict.actor_rollout_save_checkpoint() (pid=2402, ip=10.0.0.2)
RuntimeError: [enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file data/12: file write failed
OSError: [Errno 28] No space left on device
""".splitlines()  # noqa: E501 (data or a script written out as it runs)

DIED_LOG = """\
(TaskRunner pid=2211) step:7 - actor/pg_loss:0.01
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
	class_name: create_colocated_worker_cls.<locals>.WorkerDict
	actor_id: 5e3c
	pid: 2402
The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2.
ray::WorkerDict.critic_compute_values() (pid=2402)
""".splitlines()  # noqa: E501 (data or a script written out as it runs)
