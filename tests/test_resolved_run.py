"""The run resolved once (verlfit.resolved_run) and its patch switches (verlfit.patch_switches)."""

import dataclasses

import pytest

from verlfit.errors import VerlfitError
from verlfit.gpu import GpuInfo
from verlfit.run_settings import TrainSettings
from verlfit.patch_switches import PatchSwitches
from verlfit.profiles import load_profile
from verlfit.profiles import run_profile
from verlfit.patch_switches import run_switches
from verlfit.resolved_run import card_for_train

A10 = GpuInfo(
    index=0,
    name="NVIDIA A10",
    compute_capability=(8, 6),
    total_memory_bytes=24_146_608_128,
    free_memory_bytes=24_000_000_000,
)
TRIMS = (
    "+actor_rollout_ref.actor.trim_padding=True",
    "+actor_rollout_ref.ref.trim_padding=True",
    "+critic.trim_padding=True",
)


def test_switches_are_read_in_order_into_typed_fields():
    switches = PatchSwitches.from_overrides(
        [
            *TRIMS,
            "+actor_rollout_ref.rollout.cuda_graph=True",
            "~critic.trim_padding",
            "actor_rollout_ref.rollout.cuda_graph=false",
        ]
    )
    assert switches == PatchSwitches(trim_padding=("actor", "ref"))
    assert switches.fields_set() == {"trim_padding": ("actor", "ref")}
    assert PatchSwitches().fields_set() == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        switches.cuda_graph = True
    with pytest.raises(VerlfitError, match="override 'critic.trim_padding=\\[' does not parse"):
        PatchSwitches.from_overrides(["critic.trim_padding=["])


def test_prompts_are_trimmed_by_a_training_trim_or_by_the_hf_rollouts():
    rollout_only = PatchSwitches(rollout_trim_padding=True)
    assert (rollout_only.trims_prompts("hf"), rollout_only.trims_prompts("vllm")) == (True, False)
    assert PatchSwitches(trim_padding=("critic",)).trims_prompts("vllm") is True
    assert PatchSwitches().trims_prompts("hf") is False


def test_a_runs_switches_are_the_profiles_then_verlfits_forcing_then_the_users():
    p40 = load_profile("p40")  # the trims of patches 0020-0021 and CUDA-graph decoding on
    assert run_switches(p40, TrainSettings()) == PatchSwitches(("actor", "ref", "critic"), True, True, False)
    # LoRA on one GPU: the profile's graphs stay, verlfit turns the unwrapped generation on
    # (patch_switches.forced_switches)
    assert run_switches(p40, TrainSettings(lora_rank=8)) == PatchSwitches(("actor", "ref", "critic"), True, True, True)
    # the user's value after -- wins over both
    user = TrainSettings(
        lora_rank=8,
        extra_overrides=["+actor_rollout_ref.rollout.unwrap_fsdp=False", "+actor_rollout_ref.rollout.cuda_graph=False"],
    )
    assert run_switches(p40, user) == PatchSwitches(("actor", "ref", "critic"), True, False, False)
    # two GPUs: no graphs, no unwrapping
    assert run_switches(p40, TrainSettings(lora_rank=8, gpus=2)) == PatchSwitches(
        ("actor", "ref", "critic"), True, False, False
    )


def test_the_profile_is_chosen_for_the_card_then_given_the_users_engines():
    chosen, customized = run_profile("auto", A10, rollout="hf", attention="sdpa")
    assert (chosen.name, chosen.rollout, chosen.attention) == ("a10", "vllm", "flash_attention_2")
    assert (customized.name, customized.rollout, customized.attention) == ("a10", "hf", "sdpa")
    assert run_profile("p40", None) == (load_profile("p40"), load_profile("p40"))
    with pytest.raises(VerlfitError, match="needs a visible GPU"):
        run_profile("auto", None)


def test_the_time_card_is_the_emulated_then_the_detected_then_the_profiles():
    p40 = load_profile("p40")
    assert card_for_train(p40, "NVIDIA H200", emulate="p40").key == "p40"
    assert card_for_train(p40, "NVIDIA H200").key == "h200"
    assert card_for_train(p40, None).key == "p40"
    assert card_for_train(load_profile("a10"), "an unknown card").key == "a10"


def test_an_override_value_hydra_reads_only_quoted_gets_quoting_as_its_fix():
    """New-user trial: `-- trainer.experiment_name=café` got "write overrides as section.key=value", which it was."""
    with pytest.raises(VerlfitError) as caught:
        PatchSwitches.from_overrides(["trainer.experiment_name=café"])
    assert (
        caught.value.fix == "quote the value for Hydra, inside the shell's quotes: \"trainer.experiment_name='café'\""
    )
    with pytest.raises(VerlfitError) as caught:
        PatchSwitches.from_overrides(["critic.trim_padding=["])
    assert caught.value.fix == "write overrides as section.key=value, e.g. actor_rollout_ref.actor.optim.lr=1e-6"
    assert PatchSwitches.from_overrides(["trainer.experiment_name='café'"]) == PatchSwitches()
