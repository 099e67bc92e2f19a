"""Patch 0027's helper, verl/utils/adapters_outside_fsdp.py: which modules a LoRA model hands FSDP as ignored, and the
refusals. What the workers compute with it is test_frozen_base.py's (bit-identical to the adapter units)."""

import pytest
import torch
from peft import LoraConfig, get_peft_model
from torch import nn

from verl_patch_helpers import load_module_from

pytestmark = pytest.mark.needs_gnu_patch


@pytest.fixture(scope="module")
def helper(trees):
    return load_module_from(trees["patched"] / "verl" / "utils" / "adapters_outside_fsdp.py", "adapters_outside_fsdp")


class TwoLinears(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)

    def forward(self, x):
        return self.down(self.up(x))


def peft_model():
    torch.manual_seed(0)
    return get_peft_model(TwoLinears(), LoraConfig(r=2, lora_alpha=2, target_modules=["up", "down"]))


def test_the_trainable_leaves_are_the_units_verl_would_make(helper):
    model = peft_model()
    leaves = helper.adapters_outside_fsdp(True, model, 1, "fsdp")
    names = {module: name for name, module in model.named_modules()}
    assert [names[leaf] for leaf in leaves] == [
        "base_model.model.up.lora_A.default",
        "base_model.model.up.lora_B.default",
        "base_model.model.down.lora_A.default",
        "base_model.model.down.lora_B.default",
    ]


@pytest.mark.parametrize("setting", [None, False])
def test_unset_is_stock(helper, setting):
    assert helper.adapters_outside_fsdp(setting, peft_model(), 4, "fsdp2") is None


def test_several_gpus_are_refused(helper):
    with pytest.raises(ValueError) as err:
        helper.adapters_outside_fsdp(True, peft_model(), 2, "fsdp")
    assert str(err.value) == (
        "model.adapters_outside_fsdp needs one GPU (world size 1), got 2: FSDP does not all-reduce the gradients of "
        "parameters it ignores; leave the key unset on several GPUs"
    )


def test_fsdp2_and_a_model_without_adapters_are_refused(helper):
    with pytest.raises(
        ValueError, match=r"^model.adapters_outside_fsdp is for FSDP1 \(strategy fsdp\), got strategy fsdp2$"
    ):
        helper.adapters_outside_fsdp(True, peft_model(), 1, "fsdp2")
    # without LoRA: a plain model whose every leaf trains (full fine-tuning) and one whose every leaf is frozen
    for plain in (TwoLinears(), TwoLinears().requires_grad_(False)):
        with pytest.raises(ValueError) as err:
            helper.adapters_outside_fsdp(True, plain, 1, "fsdp")
        assert str(err.value) == (
            "model.adapters_outside_fsdp needs LoRA (model.lora_rank > 0): the model is not a PEFT model with "
            "trainable adapters"
        )


def test_place_adapters_moves_only_the_leaves(helper):
    model = peft_model().to(torch.float64)
    leaves = helper.adapters_outside_fsdp(True, model, 1, "fsdp")
    helper.place_adapters(leaves, torch.device("meta"))
    assert {str(p.device) for n, p in model.named_parameters() if "lora_" in n} == {"meta"}
    assert {str(p.device) for n, p in model.named_parameters() if "lora_" not in n} == {"cpu"}
    helper.place_adapters(None, torch.device("meta"))  # stock: nothing to move
