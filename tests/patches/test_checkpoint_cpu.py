"""Patch 0012 on CPU: verl's FSDPCheckpointManager on FSDP1 with one rank (NO_SHARD), driven by verl_probe.py
checkpoint.

Two tiny random Qwen2s (2 layers, hidden 64): a full model with tied embeddings, and a LoRA model (rank 8,
all-linear) under verl's LoRA wrap policy; AdamW and a LambdaLR scheduler. Each is trained one step, saved,
trained one more step, then loaded. The probe also runs on the series without 0012 (0001-0011), which loads
without map_location (on a GPU: CUDA tensors next to the live model) and writes tied weights as two storages.
The GPU half (peak memory during save and load) is tests/gpu/test_checkpoint_memory.py.
"""

import pytest

pytestmark = pytest.mark.needs_gnu_patch

FILES = ["extra_state_world_size_1_rank_0.pt", "model_world_size_1_rank_0.pt", "optim_world_size_1_rank_0.pt"]
LOADS_CPU = [
    {"file": "model_world_size_1_rank_0.pt", "map_location": "cpu"},
    {"file": "optim_world_size_1_rank_0.pt", "map_location": "cpu"},
    {"file": "extra_state_world_size_1_rank_0.pt", "map_location": "cpu"},
]


@pytest.mark.parametrize("case", ["full", "lora"])
def test_save_then_load_round_trips_exactly_with_cpu_loads(probe, case):
    r = probe("patched", "checkpoint")[case]
    assert r["strategies"] == ["NO_SHARD"]  # one rank: FSDP turned verl's FULL_SHARD into NO_SHARD
    assert r["params_moved_after_save"] is True  # the step after the save changed the model: the load had work to do
    assert r["params_round_trip"] is True and r["optimizer_round_trip"] is True
    # AdamW state per FSDP flat parameter with a gradient: full = 2 decoder layers + root; LoRA = 28 units
    # (2 layers x 7 linears x lora_A/lora_B)
    assert r["optimizer_state_count"] == {"full": 3, "lora": 28}[case]
    assert r["scheduler_last_epoch"] == 1  # the scheduler as saved (after one step), not as after the second step
    assert r["loads"] == LOADS_CPU


@pytest.mark.parametrize("case", ["full", "lora"])
def test_saved_files_hold_cpu_tensors_in_fsdps_own_format(probe, case):
    r = probe("patched", "checkpoint")[case]
    assert r["storage_locations"] == {name: ["cpu"] for name in FILES}
    assert r["saved_tensor_devices"] == ["cpu"]
    # keys in FSDP's order and values equal to the FSDP state dict verl 0.4.1 writes: only the device differs
    assert r["saved_keys_equal_fsdp"] is True and r["saved_values_equal_fsdp"] is True
    assert r["saved_key_count"] == {"full": 27, "lora": 55}[case]


def test_tied_embeddings_share_one_cpu_copy(probe):
    # the hook copies each tensor once: lm_head.weight and embed_tokens.weight stay one storage in the file
    assert probe("patched", "checkpoint")["full"]["tied_keys_share_storage"] is True


def test_without_0012_loads_have_no_map_location(probe):
    r = probe("before_ckpt", "checkpoint")
    for case in ("full", "lora"):
        assert [load["map_location"] for load in r[case]["loads"]] == [None, None, None]
        assert r[case]["params_round_trip"] is True  # stock round-trips too; what it costs is GPU memory
    # FSDP clones embed_tokens.weight but leaves the shared lm_head.weight a view of the flat parameter
    assert r["full"]["tied_keys_share_storage"] is False
