"""Patch 0026: with LoRA, the frozen base weights of the actor and the critic stored in 16 bits
(+actor_rollout_ref.model.frozen_base_dtype, +critic.model.frozen_base_dtype).

The probe (frozen_base_probe.py) drives verl's own ActorRolloutRefWorker and CriticWorker (LoRA rank 8, all-linear, a
nonzero adapter, the HF rollout unwrapped as verlfit runs it) on a tiny random Qwen2 (2 layers, hidden 64, vocabulary
300), FSDP1 on CPU with gloo, once per configuration in its own process (same seeds, so the critic's new value head
and PEFT's lora_A start the same). The sharper comparison: a 16-bit base computes exactly what an fp32 base computes
when that fp32 base holds the 16-bit values (the checkpoint's weights rounded first): every rollout token, log-prob,
value, update and checkpoint round trip is bit-identical, because FSDP's upcast of a bf16 (or fp16) value to fp32
is exact and the arithmetic after it is the same. Against the unrounded checkpoint the results differ by what the
rounding of the stored weights does to this model (bf16 keeps 8 significant bits: relative error up to 2^-9 per
weight), which the tests show is not zero, so the equal results above are not a vacuous comparison.
"""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from speed_probes import run_speed_probe
from verl_patch_helpers import copy_verl, load_module_from, partial_series, run_apply, series_names

pytestmark = pytest.mark.needs_gnu_patch

PROBE = Path(__file__).resolve().parent / "frozen_base_probe.py"
PATCH = "0026-lora-frozen-base-16-bit.patch"
# the tiny model (verl_probe.make_qwen2, untied): embeddings and LM head 2 x 300 x 64, final norm 64; per layer
# q/o 64x64+bias(q), k/v 64x32+bias, 3 MLP matrices 64x128, 2 norms 64
LAYER = (64 * 64 + 64) + 2 * (64 * 32 + 32) + 64 * 64 + 3 * 64 * 128 + 2 * 64  # 37120
ROOT = 2 * 300 * 64 + 64  # 38464
BASE = ROOT + 2 * LAYER  # 112704
ADAPTER = 16384  # test_patched_verl_lora.ADAPTER_NUMEL
CRITIC_BASE = 300 * 64 + 64 + 2 * LAYER + 65  # no LM head; the frozen original value head (64 + bias)
CRITIC_TRAINABLE = ADAPTER + 65  # adapters + the trained value head (modules_to_save)
RUNS = {  # label: (profile, checkpoint, frozen_base_dtype[, adapters: units (stock) or outside (patch 0027)])
    "p40_bf16": ("p40", "original", "bf16"),
    "p40_rounded_fp32": ("p40", "rounded", "fp32"),
    "p40_fp32": ("p40", "original", "fp32"),
    "t4_fp16": ("t4", "original", "fp16"),
    "t4_rounded_fp32": ("t4", "rounded", "fp32"),
    "t4_fp16_outside": ("t4", "original", "fp16", "outside"),
}
COMPUTED = (
    "rollout",
    "old_log_probs",
    "ref_log_probs",
    "update_metrics",
    "adapter_after",
    "log_probs_after_update",
    "values",
    "value_head_after",
    "values_after_update",
)


def test_size_formulas():
    assert (LAYER, ROOT, BASE, CRITIC_BASE) == (37120, 38464, 112704, 93569)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every run of RUNS on the whole series, and the bf16 run on the series without 0026."""
    base = tmp_path_factory.mktemp("frozen_base")
    patched = copy_verl(base / "patched")
    run_apply(patched, check_rc=0)
    before = copy_verl(base / "before")
    run_apply("--series", partial_series(base / "series", series_names().index(PATCH)), before, check_rc=0)
    jobs = {label: (patched, args) for label, args in RUNS.items()}
    jobs["before_p40_bf16"] = (before, RUNS["p40_bf16"])
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            label: pool.submit(run_speed_probe, root, "run", *args, script=PROBE)
            for label, (root, args) in jobs.items()
        }
        return {label: future.result() for label, future in futures.items()}


def _max_diff(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        return max((_max_diff(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, list):
        assert len(a) == len(b)
        return max((_max_diff(x, y) for x, y in zip(a, b)), default=0.0)
    return abs(a - b)


def test_frozen_weights_stored_in_16_bits_trainable_in_fp32(runs):
    assert runs["p40_bf16"]["actor_stored"] == {"bfloat16 frozen": BASE, "float32 trainable": ADAPTER}
    assert runs["p40_bf16"]["critic_stored"] == {"bfloat16 frozen": CRITIC_BASE, "float32 trainable": CRITIC_TRAINABLE}
    assert runs["t4_fp16"]["actor_stored"] == {"float16 frozen": BASE, "float32 trainable": ADAPTER}
    assert runs["t4_fp16"]["critic_stored"] == {"float16 frozen": CRITIC_BASE, "float32 trainable": CRITIC_TRAINABLE}
    assert runs["p40_fp32"]["actor_stored"] == {"float32 frozen": BASE, "float32 trainable": ADAPTER}  # stock
    for label, stored in (("p40_bf16", "bfloat16"), ("t4_fp16", "float16")):
        run = runs[label]
        assert run["adapter_dtypes"] == ["float32"] and run["value_head_dtypes"] == ["float32"]
        assert run["optimizer_state"] == [["float32", True]] and run["optimizer_state_numel"] == ADAPTER
        assert run["base_unchanged"] is True
        assert run["base_dtypes_after_update"] == [stored]
    assert (
        runs["p40_bf16"]["actor_mixed_precision"] == "float32" and runs["t4_fp16"]["actor_mixed_precision"] == "float16"
    )
    assert runs["p40_bf16"]["log_prob_dtype"] == "float32"


def test_without_the_patch_the_key_changes_nothing(runs):
    before = runs["before_p40_bf16"]
    assert before["actor_stored"] == {"float32 frozen": BASE, "float32 trainable": ADAPTER}
    assert before["critic_stored"] == {"float32 frozen": CRITIC_BASE, "float32 trainable": CRITIC_TRAINABLE}


@pytest.mark.parametrize("sixteen, rounded", [("p40_bf16", "p40_rounded_fp32"), ("t4_fp16", "t4_rounded_fp32")])
def test_16_bit_base_computes_exactly_what_the_rounded_fp32_base_computes(runs, sixteen, rounded):
    a, b = runs[sixteen], runs[rounded]
    for key in COMPUTED:
        assert a[key] == b[key], key
    assert a["checkpoint"]["log_probs_after_load"] == b["checkpoint"]["log_probs_after_load"]


def test_adapters_outside_fsdp_compute_exactly_what_the_adapter_units_compute(runs):
    # patch 0027: the same t4 run (fp16 compute, fp16 base, loss scaling) with the adapters and the critic's value
    # head left out of FSDP: every rollout token, log-prob, update, value and the checkpoint round trip bit-identical
    units, outside = runs["t4_fp16"], runs["t4_fp16_outside"]
    for key in (*COMPUTED, "checkpoint", "actor_stored", "critic_stored", "optimizer_state", "adapter_dtypes"):
        assert outside[key] == units[key], key
    assert outside["checkpoint"]["loaded_equal_saved"] is True
    assert outside["checkpoint"]["adapter_dir"] == ["adapter_config.json", "adapter_model.safetensors"]
    # FSDP units: the root and the two decoder layers only, none trainable; stock: one per adapter Linear as well
    # (7 adapted Linears x 2 layers x lora_A, lora_B = 28; the critic's value head one more)
    assert units["actor_units"] == {"units": 31, "trainable": 28}
    assert outside["actor_units"] == {"units": 3, "trainable": 0}
    assert units["critic_units"] == {"units": 32, "trainable": 29}
    assert outside["critic_units"] == {"units": 3, "trainable": 0}
    # no adapter unit is cast to fp16 by FSDP during the update (the units' casts are what the patch saves)
    assert [kind for kind, _ in units["upcast_during_update"]["units"]].count("Linear") == 28
    assert outside["upcast_during_update"]["units"] == []


def test_rounding_the_base_is_visible_against_the_unrounded_fp32_checkpoint(runs):
    a, b = runs["p40_bf16"], runs["p40_fp32"]
    assert _max_diff(a["old_log_probs"], b["old_log_probs"]) > 1e-4
    assert _max_diff(a["ref_log_probs"], b["ref_log_probs"]) > 1e-4
    assert _max_diff(a["values"], b["values"]) > 1e-4


def test_rollout_through_the_fsdp_root_equals_the_unwrapped_one(runs):
    for label in ("p40_bf16", "t4_fp16"):
        rollout = runs[label]["rollout"]
        assert rollout["unwrapped"] == rollout["through_root"]
        assert len(rollout["unwrapped"]) == 2 and all(len(row) == 24 for row in rollout["unwrapped"])


def test_checkpoint_save_and_load_keep_the_16_bit_base(runs):
    checkpoint = runs["p40_bf16"]["checkpoint"]
    assert checkpoint["moved_after_save"] is True and checkpoint["loaded_equal_saved"] is True
    assert checkpoint["stored_after_load"] == {"bfloat16 frozen": BASE, "float32 trainable": ADAPTER}
    assert checkpoint["log_probs_after_load"] == runs["p40_bf16"]["log_probs_after_update"]
    assert checkpoint["adapter_dir"] == ["adapter_config.json", "adapter_model.safetensors"]
    assert checkpoint["saved_files"] == [
        "extra_state_world_size_1_rank_0.pt",
        "model_world_size_1_rank_0.pt",
        "optim_world_size_1_rank_0.pt",
    ]


ADAPTER_TENSORS = 2 * 7 * 2  # lora_A and lora_B of the 7 Linears of each of the 2 layers: AdamW's step is one each


def planned_checkpoint_bytes(frozen_base_dtype, dtype="float32"):
    """What verlfit's disk check and save-time estimate count for one actor checkpoint of the probe's run
    (:func:`verlfit.plan.time.checkpoint_bytes`: the base as stored, the adapters' fp32 weights and AdamW states)."""
    from verl_probe import LORA_RANK, make_qwen2
    from verlfit.model_shape import shape_from_config
    from verlfit.plan.memory import GIB, PlanRequest
    from verlfit.plan.time import checkpoint_bytes

    shape = shape_from_config(make_qwen2().config.to_dict())
    assert shape.actor_parameters == BASE
    request = PlanRequest(
        shape=shape,
        gpu_memory_bytes=GIB,
        dtype=dtype,
        algorithm="grpo",
        lora_rank=LORA_RANK,
        frozen_base_dtype=frozen_base_dtype,
    )
    return checkpoint_bytes(request, "actor")


def test_the_checkpoint_holds_what_the_disk_check_counts(runs):
    """verl's save_checkpoint writes the base as FSDP stores it (2 bytes a frozen parameter in 16 bits, 4 in fp32) and
    AdamW's states of the adapters only: the tensors of the model and optimizer shards are exactly what
    verlfit.plan.time.checkpoint_bytes counts, plus AdamW's step (one fp32 scalar per adapter tensor)."""
    for label, frozen, base_bytes in (("p40_bf16", "bfloat16", 2), ("t4_fp16", "bfloat16", 2), ("p40_fp32", None, 4)):
        saved = runs[label]["checkpoint"]["saved_tensor_bytes"]
        model, optimizer = saved["model_world_size_1_rank_0.pt"], saved["optim_world_size_1_rank_0.pt"]
        assert model == base_bytes * BASE + 4 * ADAPTER, label
        assert optimizer == 8 * ADAPTER + 4 * ADAPTER_TENSORS, label
        assert model + optimizer == planned_checkpoint_bytes(frozen) + 4 * ADAPTER_TENSORS, label


def test_the_p40_upcast_holds_the_root_unit_and_one_decoder_layer_at_a_time(runs):
    upcast = runs["p40_bf16"]["upcast_during_update"]
    assert upcast["units"] == [["Qwen2DecoderLayer", LAYER], ["Qwen2DecoderLayer", LAYER], ["root", ROOT]]
    assert sorted(map(tuple, upcast["largest_live"])) == [("Qwen2DecoderLayer", LAYER), ("root", ROOT)]
    assert upcast["max_live_units"] == 2 and upcast["samples"] > 0
    # the root's copy is freed when the model's forward returns, before verl's log-probs read the logits (and make
    # their temporaries), and cast again (with the last layer's, prefetched) for the LM head's backward, once the
    # logits' gradient has arrived: the planner counts it beside one logits-sized tensor, not beside the log-prob
    # temporaries (plan/memory.py _root_copy_meets_logits)
    assert upcast["live_at"] == {"log_probs": [[]], "lm_head_backward": [["Qwen2DecoderLayer", "root"]]}
    # fp16 stored and computed: no copy of a frozen unit; only the 28 fp32 adapter Linears get fp16 copies, as before
    t4_units = runs["t4_fp16"]["upcast_during_update"]["units"]
    assert (
        {kind for kind, _ in t4_units} == {"Linear"} and len(t4_units) == 28 and sum(n for _, n in t4_units) == ADAPTER
    )


# ---------------------------------------------------------------------------------------------- the helpers


@pytest.fixture(scope="module")
def frozen_base(tmp_path_factory):
    root = copy_verl(tmp_path_factory.mktemp("frozen_base_helpers"))
    run_apply(root, check_rc=0)
    return load_module_from(root / "verl" / "utils" / "frozen_base.py", "frozen_base_under_test")


def test_setting_values(frozen_base):
    assert [
        frozen_base.frozen_base_dtype(v) for v in ("bf16", "BFloat16", "fp16", 16, "float16", "fp32", 32, None)
    ] == [torch.bfloat16, torch.bfloat16, torch.float16, torch.float16, torch.float16, None, None, None]
    with pytest.raises(
        ValueError, match=r"unsupported frozen_base_dtype 'int8': use bf16/bfloat16, fp16/float16/16, or fp32"
    ):
        frozen_base.frozen_base_dtype("int8")


def test_fp16_refuses_a_weight_beyond_its_range(frozen_base):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    model[0].requires_grad_(False)
    with torch.no_grad():
        model[0].weight[0, 0] = 70000.0
    with pytest.raises(
        ValueError,
        match=r"frozen_base_dtype=fp16: 0.weight holds values beyond float16's range .*use frozen_base_dtype=bf16",
    ):
        frozen_base.store_frozen_base(model, torch.float16)
    model[0].weight.data[0, 0] = 1.0
    assert frozen_base.store_frozen_base(model, torch.float16) == (6, 6)
    assert [p.dtype for p in model.parameters()] == [torch.float16, torch.float16, torch.float32, torch.float32]


def test_upcast_for_compute_is_exact_and_restores_on_an_exception(frozen_base):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3))
    reference = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3))
    reference.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in model.state_dict().items()})
    model.to(torch.bfloat16)
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad(), frozen_base.upcast_for_compute(model) as hooked:
        out = model(ids)
        assert [p.dtype for p in model.parameters()] == [torch.bfloat16] * 3  # copies only during each forward
    assert hooked == 2 and out.dtype == torch.float32
    assert torch.equal(out, reference(ids))
    with pytest.raises(RuntimeError, match="boom"), frozen_base.upcast_for_compute(model):
        model[1].register_forward_pre_hook(lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))  # after the swap
        model(ids)
    assert [type(p) for p in model[1]._parameters.values()] == [torch.nn.Parameter] * 2
    assert [p.dtype for p in model.parameters()] == [torch.bfloat16] * 3
