"""Patch 0028: with LoRA, the frozen base of the actor and the critic stored in 4 bits, NF4 with double quantisation
through bitsandbytes (+actor_rollout_ref.model.frozen_base_dtype=nf4, +critic.model.frozen_base_dtype=nf4).

The probe (frozen_base_probe.py, as for patch 0026) drives verl's own workers on the tiny random Qwen2 on CPU. The
sharp comparison: the NF4 base computes exactly what the stock fp32 base computes when that base holds the values
the NF4 base computes with (the "nf4-rounded" checkpoint: bitsandbytes' own quantize_4bit / dequantize_4bit of each
adapted weight cast to the profile's param_dtype, the other weights rounded to the dtype they are stored in), so
every rollout token, log-prob, update, value and the checkpoint round trip is bit-identical; against the unrounded
checkpoint they differ (the quantisation is visible, so the equality is not vacuous).
"""

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from speed_probes import run_speed_probe
from test_frozen_base import (
    ADAPTER,
    ADAPTER_TENSORS,
    COMPUTED,
    CRITIC_TRAINABLE,
    ROOT,
    _max_diff,
    planned_checkpoint_bytes,
)
from verl_patch_helpers import copy_verl, load_module_from, run_apply

pytestmark = pytest.mark.needs_gnu_patch

PROBE = Path(__file__).resolve().parent / "frozen_base_probe.py"
# the tiny model (verl_probe.make_qwen2): per layer the 7 adapted Linears hold q/o 64x64, k/v 32x64, gate/up/down
# 128x64 weights; the layer's other frozen parameters are the q/k/v biases (64 + 32 + 32) and two norms (2 x 64)
NF4_WEIGHTS = 2 * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 128 * 64)  # 73728, in 2 layers
LAYER_OTHER = 2 * (64 + 32 + 32 + 2 * 64)  # 512
PACKED_FP32 = NF4_WEIGHTS // 8  # two 4-bit weights a byte, four bytes a float32 element
PACKED_FP16 = NF4_WEIGHTS // 4
CRITIC_ROOT = 300 * 64 + 64 + 65  # embeddings, final norm, the frozen original value head (no LM head)
RUNS = {  # label: (profile, checkpoint, frozen_base_dtype[, adapters])
    "p40_nf4": ("p40", "original", "nf4"),
    "p40_nf4_rounded_fp32": ("p40", "nf4-rounded", "fp32"),
    "p40_fp32": ("p40", "original", "fp32"),
    "t4_nf4": ("t4", "original", "nf4"),
    "t4_nf4_rounded_fp32": ("t4", "nf4-rounded", "fp32"),
    "t4_nf4_outside": ("t4", "original", "nf4", "outside"),
}


def test_size_formulas():
    assert (NF4_WEIGHTS, LAYER_OTHER, PACKED_FP32, PACKED_FP16, CRITIC_ROOT) == (73728, 512, 9216, 18432, 19329)


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    root = copy_verl(tmp_path_factory.mktemp("frozen_base_nf4") / "patched")
    run_apply(root, check_rc=0)
    return root


@pytest.fixture(scope="module")
def runs(patched):
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            label: pool.submit(run_speed_probe, patched, "run", *args, script=PROBE) for label, args in RUNS.items()
        }
        return {label: future.result() for label, future in futures.items()}


def test_decoder_layers_stored_as_nf4_packed_in_param_dtype_the_root_in_16_bits(runs):
    p40, t4 = runs["p40_nf4"], runs["t4_nf4"]
    # p40: param_dtype fp32, so the packed weights and the layers' norms and biases are one fp32 flat parameter per
    # layer; the root in bf16 (0026's rule where param_dtype is not 16-bit)
    assert p40["actor_stored"] == {
        "float32 frozen": PACKED_FP32 + LAYER_OTHER,
        "bfloat16 frozen": ROOT,
        "float32 trainable": ADAPTER,
    }
    assert p40["critic_stored"] == {
        "float32 frozen": PACKED_FP32 + LAYER_OTHER,
        "bfloat16 frozen": CRITIC_ROOT,
        "float32 trainable": CRITIC_TRAINABLE,
    }
    # t4: everything frozen in fp16, the packed weights as fp16 elements
    assert t4["actor_stored"] == {"float16 frozen": PACKED_FP16 + LAYER_OTHER + ROOT, "float32 trainable": ADAPTER}
    assert t4["critic_stored"] == {
        "float16 frozen": PACKED_FP16 + LAYER_OTHER + CRITIC_ROOT,
        "float32 trainable": CRITIC_TRAINABLE,
    }
    for run, dtype in ((p40, "float32"), (t4, "float16")):
        for report in (run["nf4"], run["critic_nf4"]):
            assert report == {
                "linears": 14,
                "quant": [["nf4", 64, True, dtype]],
                "storage": [dtype],
                "devices": ["cpu"],
            }
        assert run["adapter_dtypes"] == ["float32"] and run["value_head_dtypes"] == ["float32"]
        assert run["optimizer_state"] == [["float32", True]] and run["optimizer_state_numel"] == ADAPTER
        assert run["base_unchanged"] is True
    # the p40's decoder layers are never cast by FSDP (already param_dtype): only the bf16 root is upcast
    assert p40["upcast_during_update"]["units"] == [["root", ROOT]]
    # and freed before verl's log-probs read the logits, cast again for the LM head's backward (plan/memory.py
    # _root_compute_copy: the 7B P40 NF4 target's 4.06 GiB copy never meets the log-prob temporaries)
    assert p40["upcast_during_update"]["live_at"] == {"log_probs": [[]], "lm_head_backward": [["root"]]}


@pytest.mark.parametrize("nf4, rounded", [("p40_nf4", "p40_nf4_rounded_fp32"), ("t4_nf4", "t4_nf4_rounded_fp32")])
def test_nf4_base_computes_exactly_what_the_fp32_base_holding_its_values_computes(runs, nf4, rounded):
    a, b = runs[nf4], runs[rounded]
    for key in COMPUTED:
        assert a[key] == b[key], key
    assert a["checkpoint"]["log_probs_after_load"] == b["checkpoint"]["log_probs_after_load"]


def test_the_quantisation_is_visible_against_the_unquantised_base(runs):
    a, b = runs["p40_nf4"], runs["p40_fp32"]
    assert _max_diff(a["old_log_probs"], b["old_log_probs"]) > 1e-3
    assert _max_diff(a["ref_log_probs"], b["ref_log_probs"]) > 1e-3
    assert _max_diff(a["values"], b["values"]) > 1e-3


def test_checkpoint_round_trip_keeps_the_nf4_base(runs):
    checkpoint = runs["p40_nf4"]["checkpoint"]
    assert checkpoint["moved_after_save"] is True and checkpoint["loaded_equal_saved"] is True
    assert checkpoint["stored_after_load"] == runs["p40_nf4"]["actor_stored"]
    assert checkpoint["log_probs_after_load"] == runs["p40_nf4"]["log_probs_after_update"]
    assert checkpoint["adapter_dir"] == ["adapter_config.json", "adapter_model.safetensors"]


def test_rollout_through_the_fsdp_root_equals_the_unwrapped_one(runs):
    for label in ("p40_nf4", "t4_nf4"):
        rollout = runs[label]["rollout"]
        assert rollout["unwrapped"] == rollout["through_root"]


def test_with_the_adapters_outside_fsdp_the_same_results(runs):
    units, outside = runs["t4_nf4"], runs["t4_nf4_outside"]
    for key in (*COMPUTED, "checkpoint", "actor_stored", "critic_stored", "nf4"):
        assert outside[key] == units[key], key
    assert outside["actor_units"] == {"units": 3, "trainable": 0}


@pytest.mark.parametrize(
    "world_size, error",
    [
        (
            2,
            "actor: model.frozen_base_dtype=nf4 needs one GPU (world size 1), got 2: the quantisation constants are "
            "not sharded; use bf16 or fp16 on several GPUs",
        ),
        (
            1,
            "model.frozen_base_dtype=nf4: the model names no decoder layer class (_no_split_modules); set "
            "fsdp_config.wrap_policy.transformer_layer_cls_to_wrap",
        ),
    ],
)
def test_refusals_in_the_worker(patched, world_size, error):
    assert run_speed_probe(patched, "refusal", world_size, script=PROBE)["error"] == error


# ---------------------------------------------------------------------------------------------- the helpers


@pytest.fixture(scope="module")
def nf4_module(patched):
    return load_module_from(patched / "verl" / "utils" / "frozen_base_nf4.py", "frozen_base_nf4_under_test")


def _peft_model(seed=0):
    from peft import LoraConfig, get_peft_model

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(64, 32)
            self.other = torch.nn.Linear(64, 64, bias=False)  # not adapted: quantised all the same
            self.norm = torch.nn.LayerNorm(64)

    class Model(torch.nn.Module):
        _no_split_modules = ["Layer"]

        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 64)
            self.layers = torch.nn.ModuleList([Layer(), Layer()])
            self.head = torch.nn.Linear(64, 10)

    torch.manual_seed(seed)
    return get_peft_model(Model(), LoraConfig(r=4, target_modules=["proj", "head"]))


def test_setting_values(nf4_module):
    assert [nf4_module.is_nf4(v) for v in ("nf4", " NF4", "bf16", None, 4)] == [True, True, False, False, False]


def test_layer_classes_follow_verls_wrap_policy(nf4_module):
    model = _peft_model()
    assert nf4_module.nf4_layer_class_names(model, None) == ["Layer"]
    assert nf4_module.nf4_layer_class_names(model, {"transformer_layer_cls_to_wrap": ["Block"]}) == ["Block"]
    with pytest.raises(
        ValueError, match="needs FSDP units per decoder layer: unset fsdp_config.wrap_policy.min_num_params"
    ):
        nf4_module.nf4_layer_class_names(model, {"min_num_params": 100})


def test_quantise_every_linear_of_the_layers_without_touching_the_rng(nf4_module):
    model = _peft_model()
    torch.manual_seed(7)
    counts = nf4_module.quantize_frozen_base(model, torch.float32, ["Layer"])
    after = torch.rand(3)
    torch.manual_seed(7)
    assert torch.equal(after, torch.rand(3))  # no random initialisation ran
    # 2 layers x (proj 32 x 64 + other 64 x 64); other layer parameters: proj bias 32, norm 64 + 64; root: embedding
    # 640, head 650
    assert counts == {"nf4": 12288, "layer": 320, "root": 1290, "trainable": 2 * 4 * (64 + 32) + 4 * (64 + 10)}
    linears = nf4_module.nf4_linears(model)
    assert len(linears) == 4 and all(type(m.weight).__name__ == "Params4bit" for m in linears)
    layer = model.base_model.model.layers[0]
    assert type(layer.other).__name__ == "Linear4bit" and type(layer.proj.base_layer).__name__ == "Linear4bit"
    head = model.base_model.model.head  # adapted but outside the layers: a 16-bit (bf16 for fp32 compute) Linear
    assert type(head.base_layer) is torch.nn.Linear and head.base_layer.weight.dtype == torch.bfloat16
    assert model.base_model.model.layers[0].norm.weight.dtype == torch.float32


def test_a_model_without_layer_linears_is_refused(nf4_module):
    model = _peft_model()
    with pytest.raises(ValueError, match=r"no Linear inside a decoder layer \(Block\) to quantise"):
        nf4_module.quantize_frozen_base(model, torch.float16, ["Block"])


def test_without_bitsandbytes_the_error_names_the_fix(nf4_module, monkeypatch):
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)
    with pytest.raises(ImportError, match=r"model.frozen_base_dtype=nf4 needs bitsandbytes \(pip install bitsandbytes"):
        nf4_module.quantize_frozen_base(_peft_model(), torch.float16, ["Layer"])


def test_place_quant_states_moves_every_constant(nf4_module):
    model = _peft_model()
    nf4_module.quantize_frozen_base(model, torch.float16, ["Layer"])
    assert nf4_module.place_quant_states(model, torch.device("meta")) == 4
    for linear in nf4_module.nf4_linears(model):
        state = linear.quant_state
        assert {t.device.type for t in (state.absmax, state.code, state.state2.absmax, state.state2.code)} == {"meta"}


# ---------------------------------------------------------------------------------------------- the export


def test_the_checkpoint_saves_the_quantisation_constants(runs):
    assert runs["p40_nf4"]["checkpoint"]["quant_state_file"] is True
    assert runs["p40_nf4_rounded_fp32"]["checkpoint"]["quant_state_file"] is False  # no NF4 base: no file


def test_the_checkpoint_holds_what_the_disk_check_counts(runs):
    """The model shard holds the packed weights (4 bits a weight, in the quant storage dtype), the layers' other
    frozen parameters in the compute dtype, the root in 16 bits and the adapters in fp32: with the optimizer shard,
    exactly what verlfit.plan.time.checkpoint_bytes counts less the quantisation constants (one byte a block of 64
    weights and an fp32 a block of 256 of those: NF4_BYTES_PER_WEIGHT - 0.5), which nf4_quant_state.safetensors holds
    with, per Linear, bitsandbytes' two code tables (16 + 256 fp32), a nested absmax and a packed description of under
    200 bytes (1.3 KB a Linear, 0.25 MB for a 7B's 196: left out of the count)."""
    import math

    from verlfit.plan.memory import NF4_BYTES_PER_WEIGHT

    constants = math.ceil(NF4_WEIGHTS * NF4_BYTES_PER_WEIGHT) - NF4_WEIGHTS // 2
    linears = 2 * 7
    for label, other_bytes, dtype in (("p40_nf4", 4, "float32"), ("t4_nf4", 2, "bfloat16")):
        saved = runs[label]["checkpoint"]["saved_tensor_bytes"]
        model, optimizer = saved["model_world_size_1_rank_0.pt"], saved["optim_world_size_1_rank_0.pt"]
        assert model == NF4_WEIGHTS // 2 + other_bytes * LAYER_OTHER + 2 * ROOT + 4 * ADAPTER, label
        assert model + optimizer == planned_checkpoint_bytes("nf4", dtype) - constants + 4 * ADAPTER_TENSORS, label
        described = saved["nf4_quant_state.safetensors"] - NF4_WEIGHTS // 64 - linears * (16 + 256 + 1) * 4
        assert linears * 100 < described < linears * 200, label


def _as_run_directory(checkpoint_path, run_dir):
    """The probe's saved step laid out as a verlfit run directory: checkpoints/global_step_1/actor with a tokenizer
    (the probe saved with a stand-in one), the trainer's data.pt, verl's marker, and the config.yaml export reads
    lora_alpha from. Returns the actor's folder."""
    import shutil

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from verl_probe import LORA_ALPHA

    actor = run_dir / "checkpoints" / "global_step_1" / "actor"
    shutil.copytree(checkpoint_path, actor)
    backend = Tokenizer(models.WordLevel({"<unk>": 0, "<eos>": 1, "a": 2}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", unk_token="<unk>").save_pretrained(
        actor / "huggingface"
    )
    torch.save({}, actor.parent / "data.pt")
    (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("1")
    (run_dir / "config.yaml").write_text(f"actor_rollout_ref:\n  model:\n    lora_alpha: {LORA_ALPHA}\n")
    return actor


def test_export_merges_the_adapter_into_the_dequantised_base_the_run_trained_on(runs, tmp_path):
    from transformers import AutoModelForCausalLM

    from verl_probe import PROMPT_LEN
    from verlfit import export

    run = runs["p40_nf4"]
    run_dir = tmp_path / "run"
    _as_run_directory(run["checkpoint_path"], run_dir)
    result = export.export(run_dir, output=tmp_path / "model")
    # the p40 packs the layers as fp32 (FSDP's param_dtype), its bf16 root counting fewer elements
    assert result.written == {
        "actor": "model: the adapter merged into its NF4 base as dequantised in training (float32), saved in float32"
    }
    model = AutoModelForCausalLM.from_pretrained(result.output, torch_dtype=torch.float32).eval()
    ids = {k: torch.tensor(v) for k, v in run["probe_ids"].items()}
    with torch.no_grad():
        logits = model(
            input_ids=ids["input_ids"], attention_mask=ids["attention_mask"], position_ids=ids["position_ids"]
        ).logits
    responses = ids["input_ids"][:, PROMPT_LEN:]
    log_probs = torch.log_softmax(logits[:, PROMPT_LEN - 1 : -1].float(), -1).gather(-1, responses[..., None])[..., 0]
    # the saved weights' log-probs as verl's worker computed them (NF4 base, unmerged adapter): the merged model is
    # that model, up to the merge's rounding (W + s B A against W x + s B (A x))
    trained = torch.tensor(run["checkpoint"]["log_probs_after_load"])
    mask = ids["attention_mask"][:, PROMPT_LEN:].bool()
    assert (log_probs - trained)[mask].abs().max() < 1e-4
    # against the unquantised base with the same adapter the difference is the quantisation's, far larger
    assert (
        torch.tensor(run["checkpoint"]["log_probs_after_load"])
        - torch.tensor(runs["p40_fp32"]["checkpoint"]["log_probs_after_load"])
    )[mask].abs().max() > 1e-3


def test_export_without_the_constants_is_refused_and_the_adapter_exported_alone(runs, tmp_path):
    from safetensors.torch import load_file, save_file

    from verlfit import export
    from verlfit.errors import VerlfitError

    run_dir = tmp_path / "run"
    actor = _as_run_directory(runs["p40_nf4"]["checkpoint_path"], run_dir)
    original = tmp_path / "constants.safetensors"
    (actor / "nf4_quant_state.safetensors").rename(original)
    with pytest.raises(VerlfitError) as error:
        export.export(run_dir, output=tmp_path / "model")
    assert error.value.message == (
        f"{actor}: the base was stored in NF4 (--frozen-base-dtype nf4; 14 packed weights such as "
        "base_model.model.model.layers.0.mlp.down_proj.base_layer.weight) and the checkpoint has no "
        "nf4_quant_state.safetensors (the quantisation constants patch 0028 saves beside the shards), so verlfit "
        "cannot rebuild the base the adapter was trained on"
    )
    assert error.value.exit_code == 2 and not (tmp_path / "model").exists()
    # a damaged constants file, and one whose constants belong to other weights: refused, nothing written
    (actor / "nf4_quant_state.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(
        VerlfitError,
        match=r"nf4_quant_state.safetensors cannot dequantise this checkpoint's NF4 base: "
        r"it does not read",
    ) as error:
        export.export(run_dir, output=tmp_path / "model")
    assert error.value.fix.startswith("export the adapter with --adapter-only") and error.value.exit_code == 2
    swapped = {
        name.replace("mlp.down_proj", "SWAP")
        .replace("self_attn.q_proj", "mlp.down_proj")
        .replace("SWAP", "self_attn.q_proj"): tensor
        for name, tensor in load_file(str(original)).items()
    }
    save_file(swapped, str(actor / "nf4_quant_state.safetensors"))
    with pytest.raises(
        VerlfitError,
        match=r"its constants for base_model.model.model.layers.0.mlp.down_proj.base_layer"
        r".weight do not match the packed weight",
    ):
        export.export(run_dir, output=tmp_path / "model")
    assert not (tmp_path / "model").exists()
    adapter = export.export(run_dir, output=tmp_path / "adapter", adapter_only=True)
    assert sorted(p.name for p in adapter.output.iterdir() if not p.name.startswith(".")) == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
