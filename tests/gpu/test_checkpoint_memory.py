"""GPU half of patch 0012: checkpoint save and load through verl's FSDPCheckpointManager cost no extra GPU memory.

Skipped without CUDA or without verl patched with 0012. On the device, benchmarks/device_run.sh gputests runs it.
A tiny random Qwen2 (8 layers, hidden 512, vocab 4096: 26.75 M parameters, 107 MB fp32) wrapped by FSDP1 on one
GPU as fsdp_workers.py:314-330 does (FULL_SHARD becomes NO_SHARD on a world of one), AdamW, one training step.
Without 0012 the save clones every parameter on the GPU (torch FSDP _full_post_state_dict_hook with the
FullStateDictConfig() that NO_SHARD swaps in) and the load restores a second model on the GPU (torch.load
without map_location): both peaks sit a whole parameter copy above the bound used here.
"""

import importlib.util

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
if importlib.util.find_spec("verl") is None:
    pytest.skip("needs verl patched with patches/verl-0.4.1 (0012)", allow_module_level=True)
import verl.utils.checkpoint.fsdp_checkpoint_manager as checkpoint_manager  # noqa: E402

if not hasattr(checkpoint_manager, "_cpu_model_state_dict"):
    pytest.skip("needs verl patched with patches/verl-0.4.1 (0012)", allow_module_level=True)

import torch.distributed as dist  # noqa: E402
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP  # noqa: E402
from torch.distributed.fsdp import MixedPrecision, ShardingStrategy  # noqa: E402
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402

from verl.utils.fsdp_utils import get_fsdp_wrap_policy  # noqa: E402

VOCAB = 4096
MARGIN = 0.10  # of the parameter bytes


class Tokenizer:
    def save_pretrained(self, path):  # all the checkpoint manager asks of processing_class
        pass


@pytest.fixture(scope="module", autouse=True)
def process_group(tmp_path_factory):
    if not dist.is_initialized():
        dist.init_process_group(
            "nccl", init_method=f"file://{tmp_path_factory.mktemp('pg')}/store", rank=0, world_size=1
        )
    torch.cuda.set_device(0)
    yield


def build():
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).float()
    fp32 = MixedPrecision(param_dtype=torch.float32, reduce_dtype=torch.float32, buffer_dtype=torch.float32)
    fsdp = FSDP(
        model,
        auto_wrap_policy=get_fsdp_wrap_policy(model, config=None),
        device_id=torch.cuda.current_device(),
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        mixed_precision=fp32,
        sync_module_states=True,
        use_orig_params=False,
    )
    optimizer = torch.optim.AdamW(fsdp.parameters(), lr=1e-3)
    manager = checkpoint_manager.FSDPCheckpointManager(
        fsdp, optimizer, None, processing_class=Tokenizer(), checkpoint_config=None
    )
    return fsdp, optimizer, manager


def param_bytes(fsdp):
    return sum(p.numel() * p.element_size() for p in fsdp.parameters())


def train_step(fsdp, optimizer):
    ids = torch.randint(1, VOCAB, (4, 64), generator=torch.Generator().manual_seed(1)).cuda()
    fsdp(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def full_params(fsdp):
    with FSDP.summon_full_params(fsdp, writeback=False):
        return {name: p.detach().cpu().clone() for name, p in fsdp.named_parameters()}


def test_save_and_load_peak_within_live_footprint(tmp_path):
    fsdp, optimizer, manager = build()
    assert {unit.sharding_strategy for unit in FSDP.fsdp_modules(fsdp)} == {ShardingStrategy.NO_SHARD}
    nbytes = param_bytes(fsdp)
    assert nbytes == 4 * 26_753_536  # embed + lm_head 2 x 4096 x 512, 8 layers x 2,819,840, final norm 512
    train_step(fsdp, optimizer)
    saved_params = full_params(fsdp)

    torch.cuda.synchronize()
    live = torch.cuda.memory_allocated()  # parameters + AdamW's two moments
    torch.cuda.reset_peak_memory_stats()
    manager.save_checkpoint(str(tmp_path), global_step=1)
    torch.cuda.synchronize()
    save_peak = torch.cuda.max_memory_allocated()
    assert save_peak <= live + MARGIN * nbytes, f"save peak {save_peak} B, live {live} B, parameters {nbytes} B"
    for name in ("model", "optim"):
        seen = []
        torch.load(
            tmp_path / f"{name}_world_size_1_rank_0.pt",
            map_location=lambda storage, loc: (seen.append(loc), storage)[1],
            weights_only=False,
        )
        assert set(seen) == {"cpu"}, f"{name} file holds storages on {sorted(set(seen))}"

    # a resume: a fresh process holds a fresh model and an optimizer without state
    del fsdp, optimizer, manager
    torch.cuda.empty_cache()
    fsdp, optimizer, manager = build()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    manager.load_checkpoint(str(tmp_path))
    torch.cuda.synchronize()
    load_peak, after = torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated()
    # what the load must add is AdamW's state (2 x parameter bytes); nothing else may show at the peak
    assert after - before >= 2 * nbytes
    assert load_peak <= after + MARGIN * nbytes, (
        f"load peak {load_peak} B, after load {after} B, before {before} B, parameters {nbytes} B"
    )
    loaded = full_params(fsdp)
    assert loaded.keys() == saved_params.keys() and all(torch.equal(loaded[k], saved_params[k]) for k in loaded)
    train_step(fsdp, optimizer)  # the loaded optimizer state lives on the GPU and trains on
