"""LoRA in the memory model (verlfit.plan.memory, docs/plan.md section 7): adapter sizes against PEFT's own
count, bytes by hand for the small config, no reference model, the 3B-on-a-P40 verdicts, and refusals."""

from dataclasses import replace

import pytest

from plan_inputs import QWEN, QWEN_1P5B, QWEN_3B, SMALL, SMALL_CONFIG, small_request
from verlfit.errors import VerlfitError
from verlfit.plan import memory
from verlfit.plan.fit import auto_fit, smallest_change
from verlfit.plan.memory import GIB, adapter_parameters, predict, role_parameters
from verlfit.plan.request import request_for_profile
from verlfit.profiles import load_profile

ACTOR, CRITIC = 138304, 138369  # the small config's parameters (tests/plan/test_memory.py)
# rank 8 on the small config: per layer q 8*(64+64), k and v 8*(64+32), o 8*(64+64), gate/up/down 8*(64+128)
SMALL_ADAPTER = 2 * (1024 + 768 + 768 + 1024 + 3 * 1536)  # 16,384
SMALL_CRITIC_ADAPTER = SMALL_ADAPTER + 64 + 1  # + the value head score = Linear(64, 1), trained in full (patch 0011)


def _peft_trainable(model_class, target_modules, rank=8):
    """Trainable and total parameters after verl's own get_peft_model call (fsdp_workers.py:278-283, 945-956;
    the critic with patch 0011's modules_to_save), and the names of the trainable tensors that are not
    lora_A/lora_B."""
    import torch
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import Qwen2Config

    config = Qwen2Config(**{k: v for k, v in SMALL_CONFIG.items() if k != "model_type"}, num_labels=1)
    torch.manual_seed(0)
    model = model_class.from_config(config)
    model.enable_input_require_grads()
    modules_to_save = [name for name in ("score", "v_head") if hasattr(model, name)] or None  # patch 0011
    lora = LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=rank,
        lora_alpha=16,
        target_modules=target_modules,
        bias="none",
        modules_to_save=modules_to_save,
    )
    peft_model = get_peft_model(model, lora)
    trainable = [(name, p) for name, p in peft_model.named_parameters() if p.requires_grad]
    total = sum(p.numel() for p in peft_model.parameters())
    return (
        sum(p.numel() for _, p in trainable),
        total,
        sorted(name for name, _ in trainable if "lora_A" not in name and "lora_B" not in name),
        {str(p.dtype) for _, p in trainable},
    )


@pytest.mark.parametrize(
    "target_modules, actor_expected, critic_expected",
    [
        ("all-linear", SMALL_ADAPTER, SMALL_CRITIC_ADAPTER),
        (["q_proj", "v_proj"], 2 * (1024 + 768), 2 * (1024 + 768) + 65),
        (["down_proj"], 2 * 1536, 2 * 1536 + 65),
        (["o_proj", "lm_head"], 2 * 1024 + 8 * (64 + 1000), 2 * 1024 + 65),
    ],
)
def test_adapter_parameters_equal_peft(target_modules, actor_expected, critic_expected):
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    targets = target_modules if isinstance(target_modules, str) else tuple(target_modules)
    heads = {
        "actor": [],
        "critic": [
            "base_model.model.score.modules_to_save.default.bias",
            "base_model.model.score.modules_to_save.default.weight",
        ],
    }
    for role, model_class, expected in (
        ("actor", AutoModelForCausalLM, actor_expected),
        ("critic", AutoModelForTokenClassification, critic_expected),
    ):
        trained, total, other_trainable, dtypes = _peft_trainable(model_class, target_modules)
        assert adapter_parameters(SMALL, role, 8, targets) == trained == expected, role
        assert role_parameters(small_request(lora_rank=8, lora_target_modules=targets), role) == (total, trained)
        assert other_trainable == heads[role]  # the base and lm_head stay frozen; the critic's head trains in full
        assert dtypes == {"torch.float32"}


def test_score_named_as_a_target_adapts_nothing_in_peft_so_it_is_refused():
    from transformers import AutoModelForTokenClassification

    trained, _, _, _ = _peft_trainable(AutoModelForTokenClassification, ["q_proj", "score"])
    assert trained == 2 * 1024 + 65  # q_proj's adapters and the head in full: no LoRA on score
    with pytest.raises(VerlfitError, match="the critic's value head is trained in full with LoRA"):
        predict(small_request(lora_rank=8, lora_target_modules=("q_proj", "score")))


def test_qwen25_adapter_sizes():
    assert adapter_parameters(QWEN, "actor", 32) == 24 * 32 * (1792 + 1024 + 1024 + 1792 + 3 * 5760) == 17_596_416
    assert adapter_parameters(QWEN, "critic", 32) == 17_596_416 + 897 == 17_597_313
    assert adapter_parameters(QWEN_1P5B, "actor", 32) == 28 * 32 * (3072 + 1792 + 1792 + 3072 + 3 * 10496) == 36_929_536
    assert adapter_parameters(QWEN_3B, "actor", 32) == 36 * 32 * (4096 + 2304 + 2304 + 4096 + 3 * 13056) == 59_867_136
    assert (
        QWEN_3B.actor_parameters == 3_085_938_688 and QWEN_1P5B.actor_parameters == 1_543_714_304
    )  # the models' reported sizes
    assert adapter_parameters(QWEN, "actor", 0) == 0


def test_lora_state_bytes_ppo():
    r = small_request(lora_rank=8)
    assert role_parameters(r, "actor") == (ACTOR + SMALL_ADAPTER, SMALL_ADAPTER)
    assert role_parameters(r, "critic") == (
        CRITIC + SMALL_CRITIC_ADAPTER,
        SMALL_CRITIC_ADAPTER,
    )  # the critic follows the actor's rank
    rollout = predict(r).phase("rollout")
    assert rollout.weights == 4 * (ACTOR + SMALL_ADAPTER) + 4 * (
        CRITIC + SMALL_CRITIC_ADAPTER
    )  # frozen base fp32 + fp32 adapter
    assert rollout.optimizer == 8 * SMALL_ADAPTER + 8 * SMALL_CRITIC_ADAPTER  # AdamW states for the adapters only
    moments = memory.update_moments(r, "actor")
    step = moments["optimizer step"]
    assert step.gradients == 4 * SMALL_ADAPTER
    assert step.optimizer == 8 * SMALL_ADAPTER + 8 * SMALL_CRITIC_ADAPTER + 4 * SMALL_ADAPTER
    # 2 micro-batches per optimizer step: the first's gradients + the last unit's transient; the largest
    # lora_A/lora_B is 8 x 128 = 1,024 parameters (down_proj's lora_A, gate/up's lora_B)
    assert moments["end of backward"].gradients == 4 * SMALL_ADAPTER + 8 * 1024
    # no lm_head/embedding gradient: the root unit is frozen
    assert moments["backward through the layers"].gradients == 4 * SMALL_ADAPTER
    critic = memory.update_moments(r, "critic")
    assert critic["optimizer step"].gradients == 4 * SMALL_CRITIC_ADAPTER
    assert (
        critic["backward through the layers"].gradients == 4 * SMALL_CRITIC_ADAPTER + 4 * 65
    )  # + the head's gradient, first


def test_lora_activations_add_the_adapter_rank_per_target():
    full = memory.training_activation_bytes(SMALL, 2, 64, "float32", "sdpa", checkpointing=False)
    lora = memory.training_activation_bytes(
        SMALL, 2, 64, "float32", "sdpa", checkpointing=False, adapter_widths=(7 * 8, 0)
    )
    tokens = 2 * 64
    # per token per layer: lora_A's output (rank 8) for each of the 7 projections, fp32; 2 layers saved,
    # 0.16 of a layer more in the backward workspace (memory.BACKWARD_WORKSPACE_LAYERS)
    full_layer = memory.layer_activation_bytes(SMALL, tokens, 64, "float32", "sdpa")
    assert lora[0] - full[0] == 2 * tokens * 56 * 4
    workspace = int(0.16 * (full_layer + tokens * 56 * 4)) - int(0.16 * full_layer)
    assert lora[1] - full[1] == 2 * tokens * 56 * 4 + workspace
    actor = memory.update_moments(small_request(lora_rank=8, gradient_checkpointing=False), "actor")[
        "backward through the logits"
    ]
    assert actor.activations == lora[0]
    # the critic's head trains in full: no adapter output of its own
    critic = memory.update_moments(small_request(lora_rank=8, gradient_checkpointing=False), "critic")[
        "backward through the logits"
    ]
    assert critic.activations == lora[0]


def test_grpo_lora_has_no_reference_model():
    full = predict(small_request(algorithm="grpo", rollout_n=2))
    lora = predict(small_request(algorithm="grpo", rollout_n=2, lora_rank=8))
    assert full.phase("rollout").weights == 4 * ACTOR + 4 * ACTOR  # fp32 actor + the ref's resident GPU copy
    assert lora.phase("rollout").weights == 4 * (ACTOR + SMALL_ADAPTER)  # the actor only
    ref, old = lora.phase("ref_log_prob"), lora.phase("old_log_prob")
    assert (ref.weights, ref.activations, ref.logits) == (
        old.weights,
        old.activations,
        old.logits,
    )  # the actor's compute_log_prob, entropy included
    assert "adapter disabled" in ref.detail[-1]
    assert [p.phase for p in lora.phases] == ["rollout", "old_log_prob", "ref_log_prob", "actor_update"]


def test_critic_lora_rank_apart():
    r = small_request(lora_rank=8, critic_lora_rank=0)
    assert role_parameters(r, "critic") == (CRITIC, CRITIC)  # a fully trained critic
    assert predict(r).phase("values").optimizer == 8 * SMALL_ADAPTER + 8 * CRITIC
    r = small_request(lora_rank=0, critic_lora_rank=4)
    assert role_parameters(r, "actor") == (ACTOR, ACTOR)
    assert role_parameters(r, "critic")[1] == SMALL_ADAPTER // 2 + 65


def test_lora_notes():
    notes = predict(small_request(lora_rank=8)).notes
    assert (
        notes[1]
        == "LoRA actor: rank 8 on q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj: 16,384 parameters"
        " train (11.85% of 138,304: adapters); the base is frozen, with no gradients or AdamW states; its weights"
        " are stored in float32 (4 bytes a parameter, 0.0 GiB)"
    )
    assert (
        notes[2]
        == "LoRA critic: rank 8 on q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj: 16,449 parameters"
        " train (11.89% of 138,369: adapters + the value head score in full (65)); the base is frozen, with no"
        " gradients or AdamW states; its weights are stored in float32 (4 bytes a parameter, 0.0 GiB)"
    )
    sixteen = predict(small_request(lora_rank=8, frozen_base_dtype="bfloat16")).notes
    assert sixteen[1].endswith(
        "; its weights are stored in bfloat16 (patch 0026: 2 bytes a parameter, 0.0 GiB; computed in float32: FSDP"
        " upcasts one unit at a time), the trained ones in float32"
    )
    half = predict(small_request(lora_rank=8, dtype="float16", frozen_base_dtype="float16")).notes
    assert half[1].endswith(
        "; its weights are stored in float16 (patch 0026: 2 bytes a parameter, 0.0 GiB; computed in float16: as"
        " stored), the trained ones in float32"
    )
    assert notes[-1] == memory.LORA_CALIBRATION_NOTE
    assert (
        predict(small_request(algorithm="grpo", rollout_n=2, lora_rank=8))
        .notes[1]
        .endswith("; the reference is the actor with its adapter disabled (no second model)")
    )
    assert not any("LoRA" in n for n in predict(small_request()).notes)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(lora_rank=-1), "LoRA rank must be a whole number >= 0 (0 = full fine-tuning), got -1"),
        (dict(lora_rank=8, critic_lora_rank=-2), "critic LoRA rank must be a whole number >= 0"),
        (
            dict(lora_rank=8, lora_target_modules=("q_proj", "qkv")),
            "LoRA target modules qkv: not a Linear layer of a qwen2 model",
        ),
        (dict(lora_rank=8, lora_target_modules=()), "LoRA target modules (none)"),
        (dict(lora_rank=8, lora_target_modules=("lm_head",)), "none is in the critic's model"),
        (dict(lora_rank=8, lora_target_modules="all"), "LoRA target modules 'all': the planner models 'all-linear'"),
    ],
)
def test_lora_refusals(fields, message):
    with pytest.raises(VerlfitError) as error:
        predict(small_request(**fields))
    assert message in str(error.value)


def test_lora_target_lm_head_on_grpo_is_accepted_without_a_critic():
    p = predict(small_request(algorithm="grpo", rollout_n=2, lora_rank=8, lora_target_modules=("lm_head",)))
    assert role_parameters(p.request, "actor")[1] == 8 * (64 + 1000)


def _p40(shape, **fields):
    base = dict(
        algorithm="grpo",
        rollout_n=4,
        train_batch_size=32,
        ppo_mini_batch_size=16,
        gradient_checkpointing=True,
        max_prompt_length=512,
        max_response_length=256,
    )
    base.update(fields)
    return request_for_profile(load_profile("p40"), shape, 22.5 * GIB, **base)


def test_3b_grpo_on_a_p40_fits_with_lora_only():
    full = auto_fit(_p40(QWEN_3B))
    assert not full.fits
    assert (
        full.suggestion
        == "smallest changes that would fit, each on its own: --lora-rank 32 (LoRA: the base weights freeze, only"
        " adapters train, with no gradients or AdamW states for the base and no separate reference model)"
    )
    lora = auto_fit(_p40(QWEN_3B, lora_rank=32))
    assert lora.fits and lora.plan.verdict == "fits"
    # the frozen fp32 base + the adapter, nothing else resident: no reference model, no critic
    assert lora.plan.phase("rollout").weights == 4 * (3_085_938_688 + 59_867_136)
    assert lora.plan.phase("rollout").optimizer == 8 * 59_867_136
    assert lora.request.rollout_n == 4 and lora.request.train_batch_size == 32


def test_1p5b_ppo_on_a_p40_fits_with_lora_only():
    full = auto_fit(_p40(QWEN_1P5B, algorithm="ppo", rollout_n=1))
    assert not full.fits
    assert "--lora-rank 32" in full.suggestion
    assert auto_fit(_p40(QWEN_1P5B, algorithm="ppo", rollout_n=1, lora_rank=32)).fits


def test_smallest_change_offers_the_critic_rank_when_only_the_critic_trains_fully():
    r = _p40(QWEN_1P5B, algorithm="ppo", rollout_n=1, lora_rank=32, critic_lora_rank=0)
    assert not auto_fit(r).fits
    assert "--critic-lora-rank 32 (LoRA: the base weights freeze" in smallest_change(r)
    # no LoRA to turn on once both roles use it: only a smaller rank, where one fits
    both = smallest_change(replace(_p40(QWEN_3B, lora_rank=32), max_prompt_length=4096))
    assert "(LoRA: the base weights freeze" not in both and "; --lora-rank 31 (from 32); " in both
