"""verl overrides: the complete lists per profile and algorithm, Hydra validation against verl 0.4.1's yaml; the
loggers' overrides and environment."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verlfit.errors import VerlfitError
from verlfit.overrides import (
    build_overrides,
    logger_overrides,
    merge_overrides,
    triton_allowed,
    validate_overrides,
)
from verlfit.run_settings import TrainSettings
from verlfit.patch_switches import forced_switches
from verlfit.plan.request import frozen_base_storage
from verlfit.profiles import customize, load_profile, resolve_environment

COMMON_HEAD = [
    "data.train_files=/data/gsm8k/train.parquet",
    "data.val_files=/data/gsm8k/test.parquet",
    "data.train_batch_size=32",
    "data.val_batch_size=256",
    "data.max_prompt_length=512",
    "data.max_response_length=256",
    "data.filter_overlong_prompts=True",
    "data.truncation=error",
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.actor.optim.lr=1e-06",
    "actor_rollout_ref.actor.ppo_mini_batch_size=16",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.ref.fsdp_config.param_offload=False",
]
PPO = [
    "algorithm.adv_estimator=gae",
    "actor_rollout_ref.rollout.n=1",
    "actor_rollout_ref.actor.use_kl_loss=False",
    "algorithm.use_kl_in_reward=False",
    "critic.model.path=Qwen/Qwen2.5-0.5B-Instruct",
    "critic.optim.lr=1e-05",
    "critic.model.enable_gradient_checkpointing=True",
    "critic.ppo_micro_batch_size_per_gpu=4",
    "critic.model.fsdp_config.param_offload=False",
    "critic.model.fsdp_config.optimizer_offload=False",
]
GRPO = [
    "algorithm.adv_estimator=grpo",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "actor_rollout_ref.actor.entropy_coeff=0",
    "algorithm.use_kl_in_reward=False",
]
P40 = [
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=fp32",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.buffer_dtype=fp32",
    "+actor_rollout_ref.ref.fsdp_config.model_dtype=fp32",
    "+actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=fp32",
    "+critic.model.fsdp_config.mixed_precision.param_dtype=fp32",
    "+critic.model.fsdp_config.mixed_precision.reduce_dtype=fp32",
    "+critic.model.fsdp_config.mixed_precision.buffer_dtype=fp32",
    "+actor_rollout_ref.actor.autocast_dtype=fp32",
    "+actor_rollout_ref.ref.autocast_dtype=fp32",
    "+critic.autocast_dtype=fp32",
    "+actor_rollout_ref.model.attn_implementation=sdpa",
    "+critic.model.attn_implementation=sdpa",
    "actor_rollout_ref.model.use_remove_padding=False",
    "critic.model.use_remove_padding=False",
    "actor_rollout_ref.rollout.name=hf",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.do_sample=True",
    "+actor_rollout_ref.actor.trim_padding=True",
    "+actor_rollout_ref.ref.trim_padding=True",
    "+critic.trim_padding=True",
    "+actor_rollout_ref.rollout.trim_padding=True",
    "+actor_rollout_ref.rollout.cuda_graph=True",
    "+actor_rollout_ref.rollout.micro_batch_size=32",
    "actor_rollout_ref.actor.use_torch_compile=False",
    "actor_rollout_ref.model.use_liger=False",
    "actor_rollout_ref.model.use_fused_kernels=False",
]
A10 = [
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
    "+critic.model.fsdp_config.mixed_precision.param_dtype=bf16",
    "+actor_rollout_ref.actor.autocast_dtype=bf16",
    "+actor_rollout_ref.ref.autocast_dtype=bf16",
    "+critic.autocast_dtype=bf16",
    "+actor_rollout_ref.model.attn_implementation=flash_attention_2",
    "+critic.model.attn_implementation=flash_attention_2",
    "actor_rollout_ref.model.use_remove_padding=True",
    "critic.model.use_remove_padding=True",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.enforce_eager=False",
    "actor_rollout_ref.rollout.free_cache_engine=True",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.35",
    "actor_rollout_ref.rollout.max_num_batched_tokens=8192",
]


def trainer(name):
    return [
        "trainer.project_name=verlfit",
        f"trainer.experiment_name={name}",
        f"trainer.default_local_dir=/runs/{name}/checkpoints",
        "trainer.logger=['console']",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        "trainer.total_epochs=50",
        "trainer.total_training_steps=50",
        "trainer.save_freq=25",
        "trainer.max_actor_ckpt_to_keep=2",
        "trainer.max_critic_ckpt_to_keep=2",
        "trainer.test_freq=25",
        "trainer.val_before_train=True",
        "trainer.resume_mode=disable",
        "trainer.critic_warmup=0",
    ]


def overrides_for(profile_name, algorithm, environ=None, compute_capability=None, **changes):
    profile = load_profile(profile_name)
    settings = TrainSettings(
        algorithm=algorithm, steps=50, data_dir="/data/gsm8k", run_dir=f"/runs/{algorithm}-{profile_name}", **changes
    )
    environment = resolve_environment(profile, environ or {})
    return build_overrides(
        settings,
        profile,
        environment,
        compute_capability,
        forced=forced_switches(settings, profile),
        frozen_base=frozen_base_storage(settings, profile),
    )


@pytest.mark.parametrize(
    "profile_name, algorithm, expected",
    [
        ("p40", "ppo", COMMON_HEAD + ["actor_rollout_ref.rollout.dtype=float32"] + PPO + P40 + trainer("ppo-p40")),
        ("p40", "grpo", COMMON_HEAD + ["actor_rollout_ref.rollout.dtype=float32"] + GRPO + P40 + trainer("grpo-p40")),
        ("a10", "ppo", COMMON_HEAD + ["actor_rollout_ref.rollout.dtype=bfloat16"] + PPO + A10 + trainer("ppo-a10")),
        ("a10", "grpo", COMMON_HEAD + ["actor_rollout_ref.rollout.dtype=bfloat16"] + GRPO + A10 + trainer("grpo-a10")),
    ],
)
def test_complete_override_list_is_accepted_by_verl_config(profile_name, algorithm, expected):
    overrides = overrides_for(profile_name, algorithm, compute_capability=(6, 1) if profile_name == "p40" else (8, 6))
    assert overrides == expected
    config = validate_overrides(overrides)
    assert config.actor_rollout_ref.rollout.name == ("hf" if profile_name == "p40" else "vllm")
    assert config.algorithm.adv_estimator == ("gae" if algorithm == "ppo" else "grpo")
    assert config.actor_rollout_ref.actor.use_torch_compile is (profile_name != "p40")


def test_vllm_dtype_knob_sets_rollout_dtype():
    assert "actor_rollout_ref.rollout.dtype=float16" in overrides_for("p40", "ppo", {"VLLM_DTYPE": "float16"})


def test_triton_knob_turns_triton_features_off_on_a10_when_small():
    overrides = overrides_for("a10", "ppo", {"TRITON_MAX_SHARED_MEMORY": "49152"}, compute_capability=(8, 6))
    assert overrides[-18:-15] == [
        "actor_rollout_ref.actor.use_torch_compile=False",
        "actor_rollout_ref.model.use_liger=False",
        "actor_rollout_ref.model.use_fused_kernels=False",
    ]
    assert triton_allowed({"TRITON_MAX_SHARED_MEMORY": "101376"}, (8, 6)) is True
    assert triton_allowed({"TRITON_MAX_SHARED_MEMORY": "101376"}, (6, 1)) is False
    with pytest.raises(VerlfitError, match="TRITON_MAX_SHARED_MEMORY='48k' is not a number of bytes") as caught:
        triton_allowed({"TRITON_MAX_SHARED_MEMORY": "48k"}, None)
    assert caught.value.exit_code == 2  # a bad environment value is a usage error


def test_expandable_segments_refused_with_vllm_and_allowed_with_hf():
    with pytest.raises(VerlfitError) as caught:
        overrides_for("a10", "ppo", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert "vLLM rejects" in str(caught.value) and "sleep mode" in str(caught.value)
    assert caught.value.exit_code == 2  # a bad environment value is a usage error
    assert overrides_for("p40", "ppo", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})


def test_user_overrides_win_and_keep_the_plus_of_the_first():
    overrides = overrides_for(
        "p40",
        "ppo",
        extra_overrides=["+critic.autocast_dtype=bf16", "trainer.save_freq=5", "trainer.val_before_train=False"],
    )
    assert "+critic.autocast_dtype=bf16" in overrides and "+critic.autocast_dtype=fp32" not in overrides
    assert overrides.count("trainer.save_freq=5") == 1 and "trainer.save_freq=25" not in overrides
    validate_overrides(overrides)
    assert merge_overrides(["a.b=1", "c=2", "a.b=3"]) == ["a.b=3", "c=2"]


@pytest.mark.parametrize(
    "override, fragments",
    [
        (
            "actor_rollout_ref.actor.fsdp_config.cpu_offload=True",
            [
                "has no key 'actor_rollout_ref.actor.fsdp_config.cpu_offload'",
                "param_offload and fsdp_config.optimizer_offload",
                (
                    "did you mean: actor_rollout_ref.actor.fsdp_config.param_offload,"
                    " actor_rollout_ref.actor.fsdp_config.optimizer_offload"
                ),
            ],
        ),
        (
            "+actor_rollout_ref.actor.fsdp_config.offload_params=True",
            [
                "verl never reads 'actor_rollout_ref.actor.fsdp_config.offload_params'",
                "did you mean: actor_rollout_ref.actor.fsdp_config.param_offload",
            ],
        ),
        (
            "actor_rollout_ref.actor.optim.lrr=1e-6",
            ["has no key 'actor_rollout_ref.actor.optim.lrr'", "did you mean: actor_rollout_ref.actor.optim.lr"],
        ),
        (
            "+actor_rollout_ref.actor.use_torch_compile=False",
            [
                "already has 'actor_rollout_ref.actor.use_torch_compile'",
                "drop the '+': actor_rollout_ref.actor.use_torch_compile=False",
            ],
        ),
        ("critic.autocast_dtype=fp32", ["needs a leading '+'", "write +critic.autocast_dtype=fp32"]),
        ("trainer.total_training_steps", ["is not key=value"]),
    ],
)
def test_bad_keys_are_refused_with_a_suggestion(override, fragments):
    with pytest.raises(VerlfitError) as caught:
        validate_overrides([override])
    text = str(caught.value)
    for fragment in fragments:
        assert fragment in text


def test_micro_batch_must_divide_mini_batch():
    with pytest.raises(
        VerlfitError, match="actor micro-batch 3 does not divide the per-GPU mini-batch of 16 responses"
    ):
        overrides_for("p40", "ppo", actor_micro_batch_size=3)


@pytest.mark.parametrize(
    "override, message, fix",
    [
        (
            "actor_rollout_ref.actor.optim.lr=abc",
            (
                "'actor_rollout_ref.actor.optim.lr=abc': verl expects a number for actor_rollout_ref.actor.optim.lr"
                " (its default is 1e-06)"
            ),
            "write a number, e.g. actor_rollout_ref.actor.optim.lr=1e-06",
        ),
        (
            "trainer.val_before_train=yes",
            (
                "'trainer.val_before_train=yes': verl expects true or false for trainer.val_before_train (its default"
                " is true)"
            ),
            "write trainer.val_before_train=True or trainer.val_before_train=False",
        ),
        (
            "data.train_batch_size=true",
            "'data.train_batch_size=true': verl expects a number for data.train_batch_size (its default is 1024)",
            "write a number, e.g. data.train_batch_size=1024",
        ),
        # a default that is an interpolation is judged by what it resolves to (${actor_rollout_ref.actor.shuffle})
        (
            "critic.shuffle=yes",
            "'critic.shuffle=yes': verl expects true or false for critic.shuffle (its default is false)",
            "write critic.shuffle=True or critic.shuffle=False",
        ),
    ],
)
def test_a_value_of_the_wrong_type_is_refused(override, message, fix):
    with pytest.raises(VerlfitError) as error:
        validate_overrides([override])
    assert (error.value.message, error.value.fix) == (message, fix)


def test_values_of_the_right_type_pass_including_int_for_float_and_null_defaults():
    config = validate_overrides(
        [
            # an int where verl's default is a float (1.0); a learning rate of 1 is above --actor-lr's limit
            "actor_rollout_ref.rollout.top_p=1",
            "trainer.val_before_train=False",
            "data.val_batch_size=64",
            "trainer.max_actor_ckpt_to_keep=null",
        ]
    )
    assert (config.actor_rollout_ref.rollout.top_p, config.trainer.val_before_train, config.data.val_batch_size) == (
        1,
        False,
        64,
    )


def test_every_managed_key_is_a_key_verl_reads():
    """The managed-key table names real keys: each is in verl 0.4.1's ppo_trainer.yaml or one verl reads without it."""
    from omegaconf import OmegaConf

    from verlfit.overrides import KNOWN_ADDED_KEYS, MANAGED_KEYS, config_keys, verl_config_dir

    valid = set(config_keys(OmegaConf.load(verl_config_dir() / "ppo_trainer.yaml"))) | set(KNOWN_ADDED_KEYS)
    assert sorted(key for key in MANAGED_KEYS if key not in valid) == []


@pytest.mark.parametrize(
    "key, option",
    [
        ("data.train_batch_size", "--batch-size"),
        (
            "critic.forward_micro_batch_size_per_gpu",
            "--micro-batch-size (or leave micro-batches to the planner: --plan auto)",
        ),
        ("actor_rollout_ref.rollout.n", "--samples (with --algo grpo)"),
        # a section holding managed keys: their options, sorted, once each
        (
            "critic.model",
            (
                "--attention (packing is on only with flash_attention_2); --attention sdpa|eager|flash_attention_2;"
                " --critic-lora-rank; --frozen-base-dtype; --gradient-checkpointing / --no-gradient-checkpointing;"
                " --lora-alpha; --lora-target-modules; --model (the planner sizes the model it reads; actor, reference"
                " and critic start from it); --offload none|optimizer|all; --profile (the profile decides the dtype"
                " from the card)"
            ),
        ),
        # what the plan sizes and the run directory's layout (new-user trial: these were accepted after --)
        (
            "actor_rollout_ref.model.path",
            "--model (the planner sizes the model it reads; actor, reference and critic start from it)",
        ),
        (
            "algorithm",
            "--algo ppo|grpo (the planner counts the critic, the reference model and the samples it implies)",
        ),
        (
            "trainer.default_local_dir",
            "--run-dir (checkpoints go to RUN_DIR/checkpoints, where --resume, report and export look)",
        ),
        (
            "data.val_files",
            "--data (a directory with train.parquet and test.parquet; the step count and the batch check read it)",
        ),
        # LoRA: what trains, so what the planner counts
        ("actor_rollout_ref.model.lora_rank", "--lora-rank"),
        ("actor_rollout_ref.model.target_modules", "--lora-target-modules"),
        ("critic.model.lora_alpha", "--lora-alpha"),
        ("critic.model.lora_rank", "--critic-lora-rank"),
        # left to the user: learning rates
        ("actor_rollout_ref.actor.optim.lr", None),
        ("data.train_batch", None),  # a prefix of a key's name, not a section holding it
    ],
)
def test_managed_key_option(key, option):
    from verlfit.overrides import managed_key_option

    assert managed_key_option(key) == option


def test_user_overrides_drop_the_separator_and_refuse_managed_keys():
    from verlfit.overrides import user_overrides

    assert user_overrides(["--", "actor_rollout_ref.actor.optim.lr=5e-6"]) == ["actor_rollout_ref.actor.optim.lr=5e-6"]
    with pytest.raises(VerlfitError) as caught:
        user_overrides(["--", "actor_rollout_ref.actor.optim.lr=5e-6", "+data.max_prompt_length=128"])
    assert caught.value.message.startswith(
        "override '+data.max_prompt_length=128': verlfit sets data.max_prompt_length itself"
    )
    assert (caught.value.fix, caught.value.exit_code) == ("use --max-prompt-length instead", 2)
    # the HF rollout's prompts per call: a user's 32 or 5 would run unplanned (5 does not divide a batch of 32)
    with pytest.raises(VerlfitError) as caught:
        user_overrides(["--", "+actor_rollout_ref.rollout.micro_batch_size=5"])
    assert caught.value.fix == (
        "use --plan auto (it sizes the HF rollout's prompts per generate call: the largest that fits; verlfit plan "
        "shows what another size would need) instead"
    )


def test_speed_patch_keys_are_accepted_with_plus_and_reach_the_config():
    # patches 0020-0023 read these with .get(key, False); verl's yaml lacks them, so they take a leading '+'
    keys = [
        "actor_rollout_ref.actor.trim_padding",
        "actor_rollout_ref.ref.trim_padding",
        "critic.trim_padding",
        "actor_rollout_ref.rollout.trim_padding",
        "actor_rollout_ref.rollout.cuda_graph",
        "actor_rollout_ref.rollout.unwrap_fsdp",
    ]
    config = validate_overrides([f"+{key}=True" for key in keys])
    from omegaconf import OmegaConf

    assert [OmegaConf.select(config, key) for key in keys] == [True] * 6
    with pytest.raises(VerlfitError, match="needs a leading '\\+'"):
        validate_overrides(["actor_rollout_ref.rollout.cuda_graph=True"])
    with pytest.raises(VerlfitError, match="needs a leading '\\+'"):
        validate_overrides(["actor_rollout_ref.rollout.unwrap_fsdp=True"])


def test_override_value_is_the_last_setting_of_the_key_whatever_its_prefix():
    from verlfit.overrides import override_value

    key = "actor_rollout_ref.rollout.unwrap_fsdp"
    assert override_value([f"+{key}=True", "a.b=1", f"{key}=False"], key) == "False"
    assert override_value([f"++{key}=True"], key) == "True"
    assert override_value([f"+{key}=True", f"~{key}"], key) is None
    assert override_value(["a.b=1"], key) is None


def test_a_patch_switch_must_be_true_or_false():
    # a new-user trial's `-- +actor_rollout_ref.rollout.unwrap_fsdp=maybe` was accepted; the patched verl reads
    # bool("maybe"), which is on
    from verlfit.errors import VerlfitError
    from verlfit.overrides import SWITCH_ADDED_KEYS, validate_overrides

    assert SWITCH_ADDED_KEYS == (
        "actor_rollout_ref.actor.trim_padding",
        "actor_rollout_ref.ref.trim_padding",
        "critic.trim_padding",
        "actor_rollout_ref.rollout.trim_padding",
        "actor_rollout_ref.rollout.cuda_graph",
        "actor_rollout_ref.rollout.unwrap_fsdp",
        "actor_rollout_ref.model.adapters_outside_fsdp",
        "critic.model.adapters_outside_fsdp",
        "actor_rollout_ref.actor.loss_scaling.enabled",
        "critic.loss_scaling.enabled",
    )
    with pytest.raises(
        VerlfitError,
        match=(
            r"'\+actor_rollout_ref.rollout.unwrap_fsdp=maybe': actor_rollout_ref.rollout.unwrap_fsdp is a switch of"
            r" verlfit's patch series, true or false \(the patched verl reads bool\(value\), so a word such as 'maybe'"
            r" would turn it on\)"
        ),
    ) as error:
        validate_overrides(["+actor_rollout_ref.rollout.unwrap_fsdp=maybe"])
    assert (
        error.value.fix
        == "write +actor_rollout_ref.rollout.unwrap_fsdp=True or +actor_rollout_ref.rollout.unwrap_fsdp=False"
    )
    with pytest.raises(VerlfitError, match="critic.trim_padding is a switch"):
        validate_overrides(["+critic.trim_padding=1"])
    validate_overrides(["+critic.trim_padding=False", "+actor_rollout_ref.rollout.cuda_graph=true"])


def test_several_gpus_turn_the_p40_profiles_cuda_graph_decoding_off_and_the_user_can_turn_it_back_on():
    # patch 0022 is written and tested for FSDP1 on one GPU (NO_SHARD); the p40 profile turns it on
    from verlfit.overrides import CUDA_GRAPH_SEVERAL_GPUS_NOTE
    from verlfit.patch_switches import forced_switches

    p40 = load_profile("p40")
    assert [o for o in p40.overrides if "cuda_graph" in o] == ["+actor_rollout_ref.rollout.cuda_graph=True"]

    def graph(**changes):
        return [o for o in overrides_for("p40", "ppo", **changes) if "cuda_graph" in o or "unwrap_fsdp" in o]

    assert graph() == ["+actor_rollout_ref.rollout.cuda_graph=True"]
    assert graph(gpus=2) == ["+actor_rollout_ref.rollout.cuda_graph=False"]
    assert graph(gpus=1, nodes=2) == ["+actor_rollout_ref.rollout.cuda_graph=False"]
    assert graph(gpus=2, extra_overrides=["+actor_rollout_ref.rollout.cuda_graph=True"]) == [
        "+actor_rollout_ref.rollout.cuda_graph=True"
    ]
    # LoRA keeps the graphs (tests/gpu/test_cuda_graph_lora.py) and on one GPU gets patch 0023 too; on several neither
    assert graph(lora_rank=32) == [
        "+actor_rollout_ref.rollout.cuda_graph=True",
        "+actor_rollout_ref.rollout.unwrap_fsdp=True",
    ]
    assert graph(lora_rank=32, extra_overrides=["+actor_rollout_ref.rollout.cuda_graph=False"]) == [
        "+actor_rollout_ref.rollout.cuda_graph=False",
        "+actor_rollout_ref.rollout.unwrap_fsdp=True",
    ]
    assert forced_switches(TrainSettings(model="m", lora_rank=32), p40) == [
        "+actor_rollout_ref.rollout.unwrap_fsdp=True"
    ]
    assert graph(lora_rank=32, gpus=2) == ["+actor_rollout_ref.rollout.cuda_graph=False"]
    assert forced_switches(TrainSettings(model="m", gpus=4), p40) == ["+actor_rollout_ref.rollout.cuda_graph=False"]
    assert forced_switches(TrainSettings(model="m", gpus=4), load_profile("a10")) == []  # nothing to turn off there
    # patch 0027: the adapters outside FSDP where LoRA computes in 16 bits with the HF rollout on one GPU; the
    # critic's too with a PPO critic adapter; never in fp32 (the p40 above), with vLLM, or on several GPUs
    t4, a10_hf = load_profile("t4"), customize(load_profile("a10"), rollout="hf", attention="sdpa")
    assert forced_switches(TrainSettings(model="m", lora_rank=32, algorithm="grpo"), t4) == [
        "+actor_rollout_ref.rollout.unwrap_fsdp=True",
        "+actor_rollout_ref.model.adapters_outside_fsdp=True",
    ]
    assert forced_switches(TrainSettings(model="m", lora_rank=32), a10_hf) == [
        "+actor_rollout_ref.rollout.unwrap_fsdp=True",
        "+actor_rollout_ref.model.adapters_outside_fsdp=True",
        "+critic.model.adapters_outside_fsdp=True",
    ]
    assert forced_switches(TrainSettings(model="m", lora_rank=32, critic_lora_rank=0), t4)[-1] == (
        "+actor_rollout_ref.model.adapters_outside_fsdp=True"
    )
    assert forced_switches(TrainSettings(model="m", lora_rank=32), load_profile("a10")) == []  # vLLM
    assert forced_switches(TrainSettings(model="m", lora_rank=32, gpus=2), t4) == [
        "+actor_rollout_ref.rollout.cuda_graph=False"
    ]
    assert (
        CUDA_GRAPH_SEVERAL_GPUS_NOTE
        == "CUDA-graph decoding (patch 0022) is off on several GPUs: it is written and tested for FSDP1 on one GPU"
        " only "
        "(NO_SHARD: the full parameters are in place; on several GPUs every rank would gather the whole model for "
        "generation, untested: the patch's header); `-- +actor_rollout_ref.rollout.cuda_graph=True` turns it on"
    )


def test_offload_keeps_the_p40_profiles_cuda_graph_decoding_and_actor_param_offload_never_meets_it():
    # the critic's parameter offload (what auto-fit chooses with the HF rollout) and the optimizers' do not touch the
    # module generated with: the CUDA graph stays on
    kept = overrides_for(
        "p40", "ppo", critic_param_offload=True, actor_optimizer_offload=True, critic_optimizer_offload=True
    )
    assert [o for o in kept if "cuda_graph" in o or "param_offload" in o] == [
        "actor_rollout_ref.actor.fsdp_config.param_offload=False",
        "actor_rollout_ref.ref.fsdp_config.param_offload=False",
        "critic.model.fsdp_config.param_offload=True",
        "+actor_rollout_ref.rollout.cuda_graph=True",
    ]
    # the actor's parameter offload cannot reach the HF rollout: verlfit refuses it (verl 0.4.1 would generate on
    # CPU tensors), and `--` cannot set it
    from verlfit.overrides import user_overrides
    from verlfit.plan.memory import unsupported_reason

    assert unsupported_reason("hf", True).startswith(
        "actor param offload with HF rollout: verl 0.4.1 generates without loading offloaded parameters back"
    )
    with pytest.raises(VerlfitError, match="verlfit sets actor_rollout_ref.actor.fsdp_config.param_offload itself"):
        user_overrides(["actor_rollout_ref.actor.fsdp_config.param_offload=True"])


# ------------------------------------------------------------------------ values that break a run (issue 28, item 5)


@pytest.mark.parametrize(
    "override, message, fix",
    [
        (
            "~actor_rollout_ref.actor.optim.lr",
            (
                "'~actor_rollout_ref.actor.optim.lr' deletes actor_rollout_ref.actor.optim.lr, which verl 0.4.1 reads"
                " (every key of its ppo_trainer.yaml is read where its feature runs): the run would fail after Ray"
                " starts"
            ),
            "set a value instead: actor_rollout_ref.actor.optim.lr=VALUE (verl's default: 1e-06)",
        ),
        (
            "actor_rollout_ref.actor.ppo_epochs=0",
            (
                "actor_rollout_ref.actor.ppo_epochs=0: it must be a whole number from 1; 0 passes over each batch: the"
                " actor never updates (verl 0.4.1 dp_actor.py:401 loops ppo_epochs times)"
            ),
            "set actor_rollout_ref.actor.ppo_epochs to a whole number from 1, or leave it to verl's default",
        ),
        (
            "critic.ppo_epochs=0",
            (
                "critic.ppo_epochs=0: it must be a whole number from 1; 0 passes over each batch: the critic never"
                " updates (dp_critic.py:206)"
            ),
            "set critic.ppo_epochs to a whole number from 1, or leave it to verl's default",
        ),
        (
            "actor_rollout_ref.rollout.temperature=-0.5",
            (
                "actor_rollout_ref.rollout.temperature=-0.5: it must be a temperature above 0; the actor divides its"
                " logits by it (verl 0.4.1 dp_actor.py:264, on every rollout engine: 0 makes them infinite), and the HF"
                " rollout samples with it, which transformers' generate refuses at 0 or below (TemperatureLogitsWarper)"
                " at the first rollout"
            ),
            "set actor_rollout_ref.rollout.temperature to a temperature above 0, or leave it to verl's default",
        ),
        (
            "actor_rollout_ref.rollout.temperature=0",
            (
                "actor_rollout_ref.rollout.temperature=0: it must be a temperature above 0; the actor divides its"
                " logits by it (verl 0.4.1 dp_actor.py:264, on every rollout engine: 0 makes them infinite), and the HF"
                " rollout samples with it, which transformers' generate refuses at 0 or below (TemperatureLogitsWarper)"
                " at the first rollout"
            ),
            "set actor_rollout_ref.rollout.temperature to a temperature above 0, or leave it to verl's default",
        ),
        (
            "actor_rollout_ref.rollout.top_p=0",
            (
                "actor_rollout_ref.rollout.top_p=0: it must be a probability in (0, 1]; the share of probability mass"
                " sampled from"
            ),
            "set actor_rollout_ref.rollout.top_p to a probability in (0, 1], or leave it to verl's default",
        ),
        (
            "critic.optim.lr=-1e-5",
            "critic.optim.lr=-1e-05: it must be a learning rate from 0; a negative learning rate climbs the loss",
            "set critic.optim.lr to a learning rate from 0, or leave it to verl's default",
        ),
    ],
)
def test_values_that_silently_break_a_run_are_refused(override, message, fix):
    with pytest.raises(VerlfitError) as error:
        validate_overrides([override])
    assert (error.value.message, error.value.fix, error.value.exit_code) == (message, fix, 2)


def test_ppo_epochs_of_the_actor_reaches_the_critic_through_verls_interpolation():
    # critic.ppo_epochs is ${actor_rollout_ref.actor.ppo_epochs}: 0 on the actor is caught on the actor first
    with pytest.raises(VerlfitError, match=r"^actor_rollout_ref\.actor\.ppo_epochs=0"):
        validate_overrides(["actor_rollout_ref.actor.ppo_epochs=0", "critic.ppo_epochs=2"])
    config = validate_overrides(
        [
            "actor_rollout_ref.actor.ppo_epochs=2",
            "actor_rollout_ref.rollout.temperature=0.5",
            "+actor_rollout_ref.rollout.cuda_graph=False",
        ]
    )
    assert (config.critic.ppo_epochs, config.actor_rollout_ref.rollout.temperature) == (2, 0.5)


def test_sampled_validation_at_temperature_0_is_refused_on_the_hf_rollout_only():
    # verl's default validation is greedy (val_kwargs.do_sample=False) at val_kwargs.temperature 0: fine everywhere
    assert (
        validate_overrides(["actor_rollout_ref.rollout.name=hf"]).actor_rollout_ref.rollout.val_kwargs.temperature == 0
    )
    sampled = [
        "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
        "actor_rollout_ref.rollout.val_kwargs.temperature=0",
    ]
    with pytest.raises(VerlfitError) as error:
        validate_overrides(["actor_rollout_ref.rollout.name=hf", *sampled])
    assert (error.value.message, error.value.fix, error.value.exit_code) == (
        (
            "actor_rollout_ref.rollout.val_kwargs.temperature=0 with"
            " actor_rollout_ref.rollout.val_kwargs.do_sample=True on the HF rollout: validation samples with it, which"
            " transformers' generate refuses at 0 or below (TemperatureLogitsWarper), so the first validation would"
            " stop the run"
        ),
        (
            "set actor_rollout_ref.rollout.val_kwargs.temperature above 0 (e.g. 1.0), or "
            "actor_rollout_ref.rollout.val_kwargs.do_sample=False for greedy validation (verl's default)"
        ),
        2,
    )
    # vLLM samples greedily at temperature 0 (vllm_rollout_spmd.py)
    assert (
        validate_overrides(
            ["actor_rollout_ref.rollout.name=vllm", *sampled]
        ).actor_rollout_ref.rollout.val_kwargs.do_sample
        is True
    )


def test_an_interpolation_in_a_checked_value_is_checked_as_it_resolves_or_refused_when_it_does_not():
    # resolved: its value is checked, and the message shows where it came from
    with pytest.raises(VerlfitError) as error:
        validate_overrides(
            ["actor_rollout_ref.rollout.temperature=${actor_rollout_ref.rollout.val_kwargs.temperature}"]
        )
    assert error.value.message.startswith(
        "actor_rollout_ref.rollout.temperature=0 (from ${actor_rollout_ref.rollout.val_kwargs.temperature}): it must be"
        " a temperature above 0;"
    )
    config = validate_overrides(["actor_rollout_ref.rollout.temperature=${actor_rollout_ref.rollout.top_p}"])
    assert config.actor_rollout_ref.rollout.temperature == 1.0
    # not resolvable here: verlfit cannot check it, and verl would stop on it when it resolves its config
    with pytest.raises(VerlfitError) as error:
        validate_overrides(["actor_rollout_ref.rollout.temperature=${something}"])
    assert (error.value.message, error.value.fix, error.value.exit_code) == (
        (
            "actor_rollout_ref.rollout.temperature=${something}: verlfit cannot check this value: the interpolation"
            " does not resolve here (no key something in verl's config); verl resolves its whole config as it starts"
            " (main_ppo.py:77, OmegaConf.resolve) and would stop on it"
        ),
        (
            "write the value itself, e.g. actor_rollout_ref.rollout.temperature=1.0 (verl's default), or interpolate a "
            "key verl's config has"
        ),
        2,
    )


LR_LIMIT_WHY = (
    "AdamW moves every weight by about the learning rate each step, so the pretrained model would be gone within a few"
    " steps (verl's defaults: actor 1e-6, critic 1e-5; LoRA runs use up to about 1e-4)"
)


@pytest.mark.parametrize(
    "override, message, fix",
    [
        (
            "actor_rollout_ref.actor.optim.lr=10",
            f"actor_rollout_ref.actor.optim.lr=10: it must be a learning rate at most 0.01 (--actor-lr's limit); "
            f"{LR_LIMIT_WHY}",
            "set actor_rollout_ref.actor.optim.lr to a learning rate at most 0.01 (--actor-lr's limit), or leave it to"
            " verl's default",
        ),
        (
            "critic.optim.lr=${actor_rollout_ref.rollout.temperature}",
            "critic.optim.lr=1.0 (from ${actor_rollout_ref.rollout.temperature}): it must be a learning rate at most"
            f" 0.01 (--critic-lr's limit); {LR_LIMIT_WHY}",
            "set critic.optim.lr to a learning rate at most 0.01 (--critic-lr's limit), or leave it to verl's default",
        ),
    ],
)
def test_a_learning_rate_after_the_double_dash_has_the_options_limit(override, message, fix):
    """New-user trial (finding 7): `-- actor_rollout_ref.actor.optim.lr=10` was taken, though --actor-lr 10 is refused
    ("above 0.01"); so was a critic lr interpolated from the temperature (1.0)."""
    with pytest.raises(VerlfitError) as error:
        validate_overrides([override])
    assert (error.value.message, error.value.fix, error.value.exit_code) == (message, fix, 2)
    # the options' own limit is the same number, and 0.01 itself is taken as --actor-lr 0.01 is
    from verlfit.arguments import MAX_LEARNING_RATE

    assert MAX_LEARNING_RATE == 0.01
    assert validate_overrides(["actor_rollout_ref.actor.optim.lr=0.01"]).actor_rollout_ref.actor.optim.lr == 0.01


@pytest.mark.parametrize(
    "key, default",
    [("actor_rollout_ref.actor.optim.lr", "1e-06"), ("actor_rollout_ref.rollout.temperature", "1.0")],
)
def test_an_interpolation_that_resolves_to_a_word_is_refused_as_the_word_is(key, default, monkeypatch):
    """New-user trial (finding 8): `-- 'actor_rollout_ref.rollout.temperature=${oc.env:HOME}'` was taken, though
    `temperature="0"` is refused: the value it resolves to ("/root") was not checked for its type."""
    monkeypatch.setenv("HOME", "/root")
    with pytest.raises(VerlfitError) as error:
        validate_overrides([f"{key}=${{oc.env:HOME}}"])
    assert (error.value.message, error.value.fix, error.value.exit_code) == (
        f"'{key}=${{oc.env:HOME}}': verl expects a number for {key} (its default is {float(default)}), and"
        " ${oc.env:HOME} resolves to '/root' (str)",
        f"write a number, e.g. {key}={float(default)}; an environment variable's text becomes a number through"
        " '${oc.decode:${oc.env:NAME}}'",
        2,
    )
    # the number an environment variable holds, decoded, is a number, checked like one
    monkeypatch.setenv("VERLFIT_TEST_VALUE", "0.005")
    config = validate_overrides([f"{key}='${{oc.decode:${{oc.env:VERLFIT_TEST_VALUE}}}}'"])
    assert OmegaConf.select(config, key) == 0.005
    # a true/false key whose interpolation resolves to a word is refused as the word is
    with pytest.raises(VerlfitError) as error:
        validate_overrides(["actor_rollout_ref.rollout.do_sample=${oc.env:HOME}"])
    assert error.value.message == (
        "'actor_rollout_ref.rollout.do_sample=${oc.env:HOME}': verl expects true or false for"
        " actor_rollout_ref.rollout.do_sample (its default is true), and ${oc.env:HOME} resolves to '/root' (str)"
    )


def test_a_reward_model_is_refused_with_what_verlfit_scores_with():
    with pytest.raises(VerlfitError) as error:
        validate_overrides(["reward_model.enable=True"])
    assert error.value.message.startswith(
        "reward_model.enable=True: verlfit does not run a reward model: the planner does not count its memory"
    )
    assert "fsdp_workers.py:1241" in error.value.message and error.value.exit_code == 2
    assert error.value.fix.startswith(
        "drop reward_model.enable=True: verlfit scores GSM8K with verl's rule-based reward (default_compute_score)"
    )
    assert validate_overrides(["reward_model.enable=False"]).reward_model.enable is False


def test_a_plus_on_a_key_verl_has_is_refused_also_where_verlfit_sets_that_key_itself(capsys):
    """issue 32 item 17: `-- +actor_rollout_ref.actor.optim.lr=1e-6` was folded into verlfit's own lr entry, and
    taken."""
    from verlfit import cli

    assert (
        cli.main(
            [
                "train",
                "--profile",
                "p40",
                "--plan",
                "off",
                "--dry-run",
                "--skip-checks",
                "--",
                "+actor_rollout_ref.actor.optim.lr=1e-6",
            ]
        )
        == 2
    )
    assert (
        capsys.readouterr().err == "verlfit: error: '+actor_rollout_ref.actor.optim.lr=1e-6': verl's yaml already has"
        " 'actor_rollout_ref.actor.optim.lr', so '+' (add a new key) is refused by Hydra\n  fix: drop the '+':"
        " actor_rollout_ref.actor.optim.lr=1e-6\n"
    )
    with pytest.raises(VerlfitError, match=r"drop the '\+': critic.optim.lr=1e-5"):
        validate_overrides(["critic.optim.lr=1e-5"], user=["+critic.optim.lr=1e-5"])
    # a key verl's yaml lacks: '+' is right
    validate_overrides(["+critic.autocast_dtype=bf16"], user=["+critic.autocast_dtype=bf16"])


def test_a_users_hydra_run_dir_is_refused_as_verlfit_sets_it(capsys):
    """New-user trial: `-- hydra.run.dir=/` was printed in the command, then replaced by verlfit's own, silently."""
    from verlfit import cli

    assert (
        cli.main(["train", "--profile", "p40", "--plan", "off", "--dry-run", "--skip-checks", "--", "hydra.run.dir=/"])
        == 2
    )
    err = capsys.readouterr().err
    assert (
        err
        == "verlfit: error: 'hydra.run.dir=/': verlfit sets hydra.run.dir itself (Hydra's outputs go to RUN_DIR/hydra,"
        " beside the run's records), so yours would be silently replaced\n  fix: drop it; choose where the run goes"
        " with --run-dir\n"
    )


def test_logger_overrides(tmp_path, monkeypatch):
    assert logger_overrides(False, tmp_path) == (["trainer.logger=['console']"], {})
    assert logger_overrides(True, tmp_path, check=False) == (
        ["trainer.logger=['console','tensorboard']"],
        {"TENSORBOARD_DIR": str(tmp_path.resolve() / "tensorboard")},
    )
    monkeypatch.setattr("verlfit.overrides.importlib.util.find_spec", lambda name: None)
    with pytest.raises(VerlfitError) as caught:
        logger_overrides(True, tmp_path)
    assert "tensorboard package" in str(caught.value) and "pip install tensorboard" in str(caught.value)


def test_tensorboard_env_name_is_the_one_verl_reads():
    import importlib.util

    source = (Path(importlib.util.find_spec("verl").origin).parent / "utils" / "tracking.py").read_text()
    assert 'os.environ.get("TENSORBOARD_DIR"' in source
    assert '"tensorboard", "console", "clearml"' in source  # both backends exist in supported_backend
