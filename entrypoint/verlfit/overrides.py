"""verl Hydra overrides: build the complete list for ``verl.trainer.main_ppo`` and validate it.

Building is pure (:func:`build_overrides` turns :class:`TrainSettings`, a profile and the
resolved environment knobs into ``key=value`` strings). Validation (:func:`validate_overrides`)
composes the list with Hydra against the *installed* verl's own ``ppo_trainer.yaml``, so a key
that verl does not have fails before Ray starts, with the closest valid keys as a suggestion.

Keys that verl 0.4.1 reads but its yaml lacks need a leading ``+`` (Hydra's "append"); Hydra
accepts any ``+key``, so such keys are checked against :data:`KNOWN_ADDED_KEYS` instead: a
``+key`` verl never reads would otherwise be ignored silently.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from verlfit.errors import VerlfitError
from verlfit.run_files import TENSORBOARD_DIR
from verlfit.run_settings import LEARNING_RATE_LIMIT_WHY, MAX_LEARNING_RATE, TrainSettings

# Keys absent from verl 0.4.1's ppo_trainer.yaml that verl (or our patch series) reads.
# Source: fsdp_workers.py:214 (model_dtype), :292-296 / :964-968 (mixed_precision.*),
# hf_rollout.py:46 (rollout.micro_batch_size), fsdp_workers.py:503/895 (override_config.*),
# patches/verl-0.4.1 (attn_implementation, autocast_dtype, trim_padding, cuda_graph, unwrap_fsdp, loss_scaling.*).
KNOWN_ADDED_KEYS = (
    "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype",
    "actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype",
    "actor_rollout_ref.actor.fsdp_config.mixed_precision.buffer_dtype",
    "actor_rollout_ref.actor.fsdp_config.model_dtype",
    "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype",
    "actor_rollout_ref.ref.fsdp_config.mixed_precision.reduce_dtype",
    "actor_rollout_ref.ref.fsdp_config.mixed_precision.buffer_dtype",
    "actor_rollout_ref.ref.fsdp_config.model_dtype",
    "critic.model.fsdp_config.mixed_precision.param_dtype",
    "critic.model.fsdp_config.mixed_precision.reduce_dtype",
    "critic.model.fsdp_config.mixed_precision.buffer_dtype",
    "critic.model.fsdp_config.model_dtype",
    "actor_rollout_ref.rollout.micro_batch_size",
    "actor_rollout_ref.model.attn_implementation",
    "critic.model.attn_implementation",
    "actor_rollout_ref.actor.autocast_dtype",
    "actor_rollout_ref.ref.autocast_dtype",
    "critic.autocast_dtype",
    # patches 0020-0022 (issue 13): no compute on padding, CUDA-graph decoding in the HF rollout
    "actor_rollout_ref.actor.trim_padding",
    "actor_rollout_ref.ref.trim_padding",
    "critic.trim_padding",
    "actor_rollout_ref.rollout.trim_padding",
    "actor_rollout_ref.rollout.cuda_graph",
    # patch 0023: HF generate through the unwrapped module, without FSDP's per-unit hooks (LoRA rollout speed)
    "actor_rollout_ref.rollout.unwrap_fsdp",
    # patch 0026 (issue 36): a LoRA run's frozen base stored in 16 bits (verl/utils/frozen_base.py)
    "actor_rollout_ref.model.frozen_base_dtype",
    "critic.model.frozen_base_dtype",
    # patch 0027: a LoRA run's adapters kept out of FSDP on one GPU (verl/utils/adapters_outside_fsdp.py)
    "actor_rollout_ref.model.adapters_outside_fsdp",
    "critic.model.adapters_outside_fsdp",
    # patch 0024 (issue 27): dynamic loss scaling of fp16 actor and critic updates (verl/utils/loss_scaling.py)
    *(
        f"{role}.loss_scaling.{name}"
        for role in ("actor_rollout_ref.actor", "critic")
        for name in ("enabled", "init_scale", "growth_interval", "max_consecutive_skips")
    ),
)
# The switches of patches 0020-0024 and 0027, read as bool(config.get(key, False)) by the patched verl: any non-empty
# word would turn one on, so their values are checked as true/false (_check_value_types)
SWITCH_ADDED_KEYS = tuple(
    key
    for key in KNOWN_ADDED_KEYS
    if key.endswith((".trim_padding", ".cuda_graph", ".unwrap_fsdp", ".adapters_outside_fsdp", ".loss_scaling.enabled"))
)
# Any key below these prefixes is passed to the HF config as-is (fsdp_workers.py:503, :895).
KNOWN_ADDED_PREFIXES = ("actor_rollout_ref.model.override_config.", "critic.model.override_config.")

# Keys that public recipes use but verl has never had, and what to use instead.
KNOWN_MISTAKES = {
    "cpu_offload": "verl's FSDP offload keys are fsdp_config.param_offload and fsdp_config.optimizer_offload",
    "offload_params": "verl's FSDP offload keys are fsdp_config.param_offload and fsdp_config.optimizer_offload",
    "offload_optimizer": "verl's FSDP offload keys are fsdp_config.param_offload and fsdp_config.optimizer_offload",
}

# A Triton kernel that asks for more shared memory per block than this is refused on a card
# with less ("out of resource: shared memory, Required: 81920, Hardware limit: 49152", the error
# P40 users report from Triton kernels). Below it, verlfit turns every Triton-backed verl feature off.
TRITON_MIN_SHARED_MEMORY = 81920

GSM8K_DATA_SOURCE = "openai/gsm8k"


def keep_checkpoints_overrides(keep: int) -> list[str]:
    """verl's checkpoint retention for ``--keep-checkpoints`` (0: verl's null, keep every checkpoint)."""
    return [f"trainer.max_actor_ckpt_to_keep={keep or 'null'}", f"trainer.max_critic_ckpt_to_keep={keep or 'null'}"]


def logger_overrides(
    tensorboard: bool, run_dir: str | os.PathLike, check: bool = True
) -> tuple[list[str], dict[str, str]]:
    """The verl overrides and environment for verl's loggers in a run directory.

    The console logger is always on (verlfit reads it). With ``tensorboard``, verl 0.4.1's
    ``_TensorboardAdapter`` writes event files to ``$TENSORBOARD_DIR`` (its default would be
    ``tensorboard_log/<project>/<experiment>`` under the working directory); the variable reaches the
    Ray workers because ``ray.init()`` starts the local cluster from the driver's environment.

    Args:
        tensorboard: add the TensorBoard backend (full-precision scalars, unlike the console's 3 decimals).
        run_dir: the run directory; event files go to ``run_dir/tensorboard``.
        check: refuse when the ``tensorboard`` package is missing (torch's SummaryWriter needs it and
            verl would fail only after the models loaded).

    Returns:
        (overrides, env): e.g.
        ``(["trainer.logger=['console','tensorboard']"], {"TENSORBOARD_DIR": ".../tensorboard"})``.

    Raises:
        VerlfitError: ``tensorboard`` requested, ``check`` on, and the package is not importable.
    """
    if not tensorboard:
        return ["trainer.logger=['console']"], {}
    if check and importlib.util.find_spec("tensorboard") is None:
        raise VerlfitError(
            "--tensorboard needs the tensorboard package, which is not installed here "
            "(verl 0.4.1 writes through torch.utils.tensorboard.SummaryWriter)",
            fix="pip install tensorboard, or run without --tensorboard",
        )
    return ["trainer.logger=['console','tensorboard']"], {
        "TENSORBOARD_DIR": str(Path(run_dir).resolve() / TENSORBOARD_DIR)
    }


def lora_overrides(section: str, rank: int, alpha: float, target_modules: str | tuple[str, ...]) -> list[str]:
    """verl's three LoRA keys under ``section`` (``actor_rollout_ref.model`` or ``critic.model``,
    ppo_trainer.yaml:124-132, 650-657), or none when ``rank`` is 0 (verl's default: no adapter).

    ``target_modules`` is ``"all-linear"`` or Linear names, written as a Hydra list (``[q_proj,v_proj]``), which
    verl turns into a Python list for PEFT (``convert_to_regular_types``, fsdp_workers.py:282, 953).
    """
    if rank <= 0:
        return []
    alpha_text = str(int(alpha)) if float(alpha).is_integer() else repr(float(alpha))
    targets = target_modules if isinstance(target_modules, str) else "[" + ",".join(target_modules) + "]"
    return [f"{section}.lora_rank={rank}", f"{section}.lora_alpha={alpha_text}", f"{section}.target_modules={targets}"]


FROZEN_BASE_KEYS = ("actor_rollout_ref.model.frozen_base_dtype", "critic.model.frozen_base_dtype")
_FROZEN_BASE_VALUES = {"bfloat16": "bf16", "float16": "fp16", "nf4": "nf4"}


def frozen_base_overrides(settings: TrainSettings, storage: str | None) -> list[str]:
    """Patch 0026's keys for the LoRA roles of a run whose base is stored in 16 bits (``storage``: ``"bfloat16"`` or
    ``"float16"``; ``"nf4"``: patch 0028's value of the same keys), as the run's request was planned
    (:func:`verlfit.plan.request.frozen_base_storage`; None: the fp32 base of stock verl):
    ``+actor_rollout_ref.model.frozen_base_dtype=bf16`` with an actor adapter, ``+critic.model.frozen_base_dtype=bf16``
    with a PPO critic adapter (fp16 on the t4 and v100 profiles); none otherwise."""
    if storage is None:
        return []
    value = _FROZEN_BASE_VALUES[storage]
    out = [f"+{FROZEN_BASE_KEYS[0]}={value}"] if settings.lora_rank > 0 else []
    critic_rank = settings.effective_critic_lora_rank
    if settings.algorithm == "ppo" and critic_rank > 0:
        out.append(f"+{FROZEN_BASE_KEYS[1]}={value}")
    return out


def triton_allowed(environment: dict[str, str], compute_capability: tuple[int, int] | None) -> bool:
    """True when Triton-backed features (torch.compile, liger, fused kernels) may be enabled.

    Needs ``TRITON_MAX_SHARED_MEMORY`` (bytes) >= :data:`TRITON_MIN_SHARED_MEMORY` and, when the
    GPU is known, compute capability >= 7.0 (Triton cannot target older GPUs).

    Raises:
        VerlfitError: when ``TRITON_MAX_SHARED_MEMORY`` is not a whole number of bytes.
    """
    text = environment["TRITON_MAX_SHARED_MEMORY"]
    try:
        shared_memory = int(text)
    except ValueError:
        raise VerlfitError(
            f"TRITON_MAX_SHARED_MEMORY={text!r} is not a number of bytes",
            fix="unset it, or set e.g. TRITON_MAX_SHARED_MEMORY=49152 (48 KiB)",
            exit_code=2,
        ) from None
    if compute_capability is not None and compute_capability < (7, 0):
        return False
    return shared_memory >= TRITON_MIN_SHARED_MEMORY


def check_allocator_config(environment: dict[str, str], rollout: str) -> None:
    """Refuse ``expandable_segments:True`` with vLLM rollout.

    verl always enables vLLM's sleep mode, and vLLM's CuMemAllocator asserts that
    ``PYTORCH_CUDA_ALLOC_CONF`` does not enable expandable segments (vllm/device_allocator/cumem.py).

    Raises:
        VerlfitError: naming the variable, the reason and the fix.
    """
    conf = environment.get("PYTORCH_CUDA_ALLOC_CONF", "")
    options = dict(part.split(":", 1) for part in conf.split(",") if ":" in part)
    if rollout == "vllm" and options.get("expandable_segments", "").strip().lower() == "true":
        raise VerlfitError(
            f"PYTORCH_CUDA_ALLOC_CONF={conf!r} enables expandable_segments, which vLLM rejects: "
            "verl runs vLLM in sleep mode, whose memory pool cannot use expandable segments",
            fix="unset PYTORCH_CUDA_ALLOC_CONF (the a10 profile sets max_split_size_mb:256) or use --rollout hf",
            exit_code=2,
        )


def _bool(value: bool) -> str:
    return "True" if value else "False"


def quote_value(value: str) -> str:
    """Quote a value for Hydra's override grammar when it holds characters outside the plain set.

    Raises:
        VerlfitError: for ``${`` (OmegaConf would resolve it as an interpolation) or a backslash (Hydra keeps
            escapes only before quotes, so the path would change): such values cannot pass through verl's config.
    """
    if "${" in value or "\\" in value:
        raise VerlfitError(
            f"{value!r} holds "
            f"{'${' if '${' in value else 'a backslash'}, which verl's Hydra/OmegaConf config would rewrite",
            fix="use a path without ${ and backslashes (rename the directory, or pass another "
            "--run-dir/--data/--model)",
            exit_code=2,
        )
    if re.fullmatch(r"[A-Za-z0-9_./:~@+\-]*", value) and value not in ("", "null", "true", "false"):
        return value
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


LORA_UNWRAP_NOTE = (
    "LoRA on the HF rollout generates through the unwrapped module (patch 0023, "
    "+actor_rollout_ref.rollout.unwrap_fsdp=True): "
    "FSDP's hooks on every adapter unit ran for every token (1.5B PPO: 63.5 s of generation a step "
    "without it, 24.8 s with "
    "it, both sharing the device's GPU: docs/benchmarks.md section 4.2); one GPU only; "
    "`-- +actor_rollout_ref.rollout.unwrap_fsdp=False` turns it off"
)


ACTOR_LR_KEY = "actor_rollout_ref.actor.optim.lr"
LORA_LEARNING_RATE_NOTE = (
    "LoRA at the actor learning rate 1e-06 (verl's default, set for training every parameter): an adapter barely "
    "moves at it; verlfit's LoRA learning checks trained at --actor-lr 1e-4 with --lora-alpha 32 (and --critic-lr "
    "5e-4 for a LoRA critic): docs/benchmarks.md sections 4.2 and 4.7"
)


CUDA_GRAPH_SEVERAL_GPUS_NOTE = (
    "CUDA-graph decoding (patch 0022) is off on several GPUs: it is written and tested for FSDP1 on one GPU only "
    "(NO_SHARD: the full parameters are in place; on several GPUs every rank would gather the whole model for "
    "generation, untested: the patch's header); `-- +actor_rollout_ref.rollout.cuda_graph=True` turns it on"
)


UNWRAP_SEVERAL_GPUS_NOTE = (
    "+actor_rollout_ref.rollout.unwrap_fsdp=True on several GPUs is untested (patch 0023's header): every rank gathers "
    "the whole model in full precision for generation (the planner counts a gathered fp32 model in the rollout)"
)


def hf_rollout_only_note(subject: str, rollout: str) -> str:
    """The note for a patch switch of verl's HF rollout (0021's ``rollout.trim_padding``, 0022's ``cuda_graph``,
    0023's ``unwrap_fsdp``) asked for on another ``rollout``, which never reads it; ``subject`` names what asked
    (``verlfit plan``'s flag, or the override ``verlfit train`` was given)."""
    return (
        f"{subject} has no effect with the {rollout} rollout: its patch changes verl's HF rollout only (--rollout hf)"
    )


def build_overrides(
    settings: TrainSettings,
    profile,
    environment: dict[str, str],
    compute_capability: tuple[int, int] | None = None,
    vllm_card_fraction: float | None = None,
    *,
    forced: Sequence[str],
    frozen_base: str | None,
) -> list[str]:
    """Return the complete override list for ``python -m verl.trainer.main_ppo``.

    Order: data, model, algorithm, batch and micro-batch sizes, memory, the profile's
    overrides, what the environment knobs decide, trainer settings, then the user's
    ``extra_overrides``; later entries for the same key replace earlier ones
    (:func:`merge_overrides`), so the user always wins.

    Args:
        settings: the training request.
        profile: a :class:`verlfit.profiles.Profile`.
        environment: the resolved knobs (:func:`verlfit.profiles.resolve_environment`).
        compute_capability: the GPU's, when known (decides Triton features).
        vllm_card_fraction: vLLM's ``gpu_memory_utilization`` when it differs from the profile's share
            (a memory cap on a bigger card: vLLM takes its fraction of the whole card).
        forced: what verlfit sets over the profile's patch switches for this run, as the run was resolved
            (:attr:`verlfit.resolved_run.ResolvedRun.forced_overrides`, :func:`verlfit.patch_switches.forced_switches`);
            written after the profile's overrides and before the user's, so the user's own value still wins.
        frozen_base: the dtype a LoRA run stores its frozen base in (``"bfloat16"``, ``"float16"``; None: fp32,
            stock verl), as the planner decided it (:attr:`verlfit.plan.memory.PlanRequest.frozen_base_dtype` of the
            run's request: :func:`verlfit.plan.request.frozen_base_storage`, or ``--plan auto``'s choice):
            :func:`frozen_base_overrides` writes it.

    Raises:
        VerlfitError: for an unknown algorithm, sizes that do not divide, or a rejected
            allocator configuration.
    """
    s = settings
    if s.algorithm not in ("ppo", "grpo"):
        raise VerlfitError(
            f"--algo {s.algorithm!r} is not supported",
            fix="use --algo ppo (GAE with a critic) or --algo grpo",
            exit_code=2,
        )
    if s.train_batch_size % s.ppo_mini_batch_size:
        raise VerlfitError(
            f"--mini-batch-size {s.ppo_mini_batch_size} does not divide --batch-size {s.train_batch_size}",
            fix="choose a mini-batch size that divides the batch size",
            exit_code=2,
        )
    samples = s.rollout_n if s.algorithm == "grpo" else 1
    per_gpu_mini = s.ppo_mini_batch_size * samples // max(s.gpus * s.nodes, 1)
    for name, micro in (("actor", s.actor_micro_batch_size), ("critic", s.critic_micro_batch_size)):
        if per_gpu_mini % micro:
            raise VerlfitError(
                f"{name} micro-batch {micro} does not divide the per-GPU mini-batch of {per_gpu_mini} responses",
                fix="use a power of two no larger than the mini-batch (or leave micro-batches to the planner)",
                exit_code=2,
            )
    check_allocator_config(environment, profile.rollout)
    data = Path(s.data_dir)
    out = [
        f"data.train_files={quote_value(str(data / 'train.parquet'))}",
        f"data.val_files={quote_value(str(data / 'test.parquet'))}",
        f"data.train_batch_size={s.train_batch_size}",
        f"data.val_batch_size={s.val_batch_size}",
        f"data.max_prompt_length={s.max_prompt_length}",
        f"data.max_response_length={s.max_response_length}",
        "data.filter_overlong_prompts=True",
        "data.truncation=error",
        f"actor_rollout_ref.model.path={quote_value(s.model)}",
        f"actor_rollout_ref.model.enable_gradient_checkpointing={_bool(s.gradient_checkpointing)}",
        *lora_overrides("actor_rollout_ref.model", s.lora_rank, s.lora_alpha, s.lora_target_modules),
        f"actor_rollout_ref.actor.optim.lr={s.actor_lr}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={s.ppo_mini_batch_size}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={s.actor_micro_batch_size}",
        f"actor_rollout_ref.actor.fsdp_config.param_offload={_bool(s.actor_param_offload)}",
        f"actor_rollout_ref.actor.fsdp_config.optimizer_offload={_bool(s.actor_optimizer_offload)}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={s.log_prob_micro_batch_size}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={s.log_prob_micro_batch_size}",
        f"actor_rollout_ref.ref.fsdp_config.param_offload={_bool(s.actor_param_offload)}",
        f"actor_rollout_ref.rollout.dtype={environment['VLLM_DTYPE']}",
    ]
    if s.algorithm == "ppo":
        critic_checkpointing = s.critic_gradient_checkpointing
        if critic_checkpointing is None:
            critic_checkpointing = s.gradient_checkpointing
        out += [
            "algorithm.adv_estimator=gae",
            "actor_rollout_ref.rollout.n=1",
            "actor_rollout_ref.actor.use_kl_loss=False",
            "algorithm.use_kl_in_reward=False",
            f"critic.model.path={quote_value(s.model)}",
            f"critic.optim.lr={s.critic_lr}",
            f"critic.model.enable_gradient_checkpointing={_bool(critic_checkpointing)}",
            *lora_overrides(
                "critic.model",
                s.effective_critic_lora_rank,
                s.lora_alpha,
                s.lora_target_modules,
            ),
            f"critic.ppo_micro_batch_size_per_gpu={s.critic_micro_batch_size}",
            f"critic.model.fsdp_config.param_offload={_bool(s.critic_param_offload)}",
            f"critic.model.fsdp_config.optimizer_offload={_bool(s.critic_optimizer_offload)}",
        ]
    else:
        out += [
            "algorithm.adv_estimator=grpo",
            f"actor_rollout_ref.rollout.n={s.rollout_n}",
            "actor_rollout_ref.actor.use_kl_loss=True",
            f"actor_rollout_ref.actor.kl_loss_coef={s.kl_loss_coef}",
            "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
            "actor_rollout_ref.actor.entropy_coeff=0",
            "algorithm.use_kl_in_reward=False",
        ]
    out += list(profile.overrides)
    out += frozen_base_overrides(s, frozen_base)
    out += forced  # the notes say why; the user's own value after -- still wins
    if profile.rollout == "hf":
        out.append(f"+actor_rollout_ref.rollout.micro_batch_size={s.rollout_micro_batch_size or s.train_batch_size}")
    else:
        out += [
            "actor_rollout_ref.rollout.gpu_memory_utilization="
            f"{vllm_card_fraction or profile.vllm_gpu_memory_utilization}",
            "actor_rollout_ref.rollout.max_num_batched_tokens="
            f"{max(8192, s.max_prompt_length + s.max_response_length)}",
        ]
    if not triton_allowed(environment, compute_capability):
        out += [
            "actor_rollout_ref.actor.use_torch_compile=False",
            "actor_rollout_ref.model.use_liger=False",
            "actor_rollout_ref.model.use_fused_kernels=False",
        ]
    loggers = ",".join(f"'{name}'" for name in s.loggers)
    out += [
        "trainer.project_name=verlfit",
        f"trainer.experiment_name={quote_value(Path(s.run_dir).name)}",
        f"trainer.default_local_dir={quote_value(str(Path(s.run_dir) / 'checkpoints'))}",
        f"trainer.logger=[{loggers}]",
        f"trainer.n_gpus_per_node={s.gpus}",
        f"trainer.nnodes={s.nodes}",
        # with --steps, epochs only bound the loop: one step per epoch at least, so steps suffice
        f"trainer.total_epochs={s.steps if s.steps is not None else s.epochs}",
        f"trainer.total_training_steps={s.steps if s.steps is not None else 'null'}",
        f"trainer.save_freq={s.save_freq}",
        *keep_checkpoints_overrides(s.keep_checkpoints),
        f"trainer.test_freq={s.test_freq}",
        f"trainer.val_before_train={_bool(s.validate_before_train)}",
        f"trainer.resume_mode={'auto' if s.resume else 'disable'}",
        "trainer.critic_warmup=0",
    ]
    return merge_overrides(out + list(s.extra_overrides))


# ---------------------------------------------------------------------------------------------------------------
# Managed keys: the verl keys verlfit sets from its own options and checks (against the GPU, the profile and the
# planner's memory plan). A raw override after `--` would skip those checks: `data.train_batch_size=8` under a
# mini-batch of 16 makes verl assert after Ray starts, and the plan sized for another batch; SDPA with
# use_remove_padding=True makes packed sequences attend across each other; vLLM on a P40 fails at its first
# kernel. So every key below (and a whole section holding one) is refused with the option to use instead
# (user_overrides). The one rule, the one table: key -> the option. Keys verl interpolates from a managed key
# (rollout.prompt_length from data.max_prompt_length, critic.forward_micro_batch_size* from critic.ppo_*) are
# managed too, so the interpolation cannot be cut. LoRA's keys are managed (--lora-rank ...): the planner counts
# what trains. So are the keys that decide what the plan sizes and what the run directory records (the model, the
# algorithm, the data files), and the run directory's own layout (checkpoints in RUN_DIR/checkpoints, where --resume,
# report and export look; resume_mode, which --resume sets), and the HF rollout's prompts per generate call
# (`+actor_rollout_ref.rollout.micro_batch_size`, no option of its own: --plan auto sizes it).
# ---------------------------------------------------------------------------------------------------------------
_MICRO_BATCH = "--micro-batch-size (or leave micro-batches to the planner: --plan auto)"
_OFFLOAD = "--offload none|optimizer|all"
_CHECKPOINTING = "--gradient-checkpointing / --no-gradient-checkpointing"
_DTYPE = "--profile (the profile decides the dtype from the card)"
_ATTENTION = "--attention sdpa|eager|flash_attention_2"
_PACKING = "--attention (packing is on only with flash_attention_2)"
_KEEP = "--keep-checkpoints (0, or 2 and more)"
_MODEL = "--model (the planner sizes the model it reads; actor, reference and critic start from it)"
_ALGO = "--algo ppo|grpo (the planner counts the critic, the reference model and the samples it implies)"
_DATA = "--data (a directory with train.parquet and test.parquet; the step count and the batch check read it)"
MANAGED_KEYS: dict[str, str] = {
    # what is trained, how and on what (the plan, run.json and report follow these options)
    "actor_rollout_ref.model.path": _MODEL,
    "critic.model.path": _MODEL,
    "algorithm.adv_estimator": _ALGO,
    "actor_rollout_ref.actor.use_kl_loss": _ALGO,
    "algorithm.use_kl_in_reward": _ALGO,
    "data.train_files": _DATA,
    "data.val_files": _DATA,
    # batch and mini-batch sizes (prompts)
    "data.train_batch_size": "--batch-size",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "--mini-batch-size",
    "critic.ppo_mini_batch_size": "--mini-batch-size",
    # micro-batches (responses per GPU; the global forms verl 0.4.1 still reads conflict with the per-GPU ones)
    "actor_rollout_ref.actor.ppo_micro_batch_size": _MICRO_BATCH,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": _MICRO_BATCH,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size": _MICRO_BATCH,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": _MICRO_BATCH,
    "actor_rollout_ref.ref.log_prob_micro_batch_size": _MICRO_BATCH,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": _MICRO_BATCH,
    "critic.ppo_micro_batch_size": _MICRO_BATCH,
    "critic.ppo_micro_batch_size_per_gpu": _MICRO_BATCH,
    "critic.forward_micro_batch_size": _MICRO_BATCH,
    "critic.forward_micro_batch_size_per_gpu": _MICRO_BATCH,
    # the HF rollout's prompts per generate call (hf_rollout.py:46): the planner sizes it and checks that it divides
    # the per-GPU batch (DataProto.chunk); a value given after -- would run unplanned
    "actor_rollout_ref.rollout.micro_batch_size": "--plan auto (it sizes the HF rollout's prompts per generate "
    "call: the largest that fits; verlfit plan shows what another size would need)",
    # lengths (tokens)
    "data.max_prompt_length": "--max-prompt-length",
    "data.max_response_length": "--max-response-length",
    "actor_rollout_ref.rollout.prompt_length": "--max-prompt-length",
    "actor_rollout_ref.rollout.response_length": "--max-response-length",
    # the rollout: engine, responses per prompt, dtype
    "actor_rollout_ref.rollout.name": "--rollout hf|vllm",
    "actor_rollout_ref.rollout.n": "--samples (with --algo grpo)",
    "actor_rollout_ref.rollout.dtype": "the VLLM_DTYPE environment variable (checked against the GPU)",
    # vLLM's memory pool: the planner counts it; the profile's share, scaled to a --gpu-memory-limit on a bigger card
    "actor_rollout_ref.rollout.gpu_memory_utilization": "the profile (its vLLM share of the card, which the "
    "planner counts; --gpu-memory-limit scales it)",
    # attention and packing
    "actor_rollout_ref.model.attn_implementation": _ATTENTION,
    "critic.model.attn_implementation": _ATTENTION,
    "actor_rollout_ref.model.use_remove_padding": _PACKING,
    "critic.model.use_remove_padding": _PACKING,
    # gradient checkpointing
    "actor_rollout_ref.model.enable_gradient_checkpointing": _CHECKPOINTING,
    "critic.model.enable_gradient_checkpointing": _CHECKPOINTING,
    # offload
    "actor_rollout_ref.actor.fsdp_config.param_offload": "--offload (actor param offload cannot run with the "
    "HF rollout)",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": _OFFLOAD,
    "actor_rollout_ref.ref.fsdp_config.param_offload": _OFFLOAD,
    "critic.model.fsdp_config.param_offload": _OFFLOAD,
    "critic.model.fsdp_config.optimizer_offload": _OFFLOAD,
    # dtype
    "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype": _DTYPE,
    "critic.model.fsdp_config.mixed_precision.param_dtype": _DTYPE,
    "actor_rollout_ref.actor.autocast_dtype": _DTYPE,
    "actor_rollout_ref.ref.autocast_dtype": _DTYPE,
    "critic.autocast_dtype": _DTYPE,
    # LoRA: what trains (the planner counts adapters, frozen weights and the missing reference model)
    "actor_rollout_ref.model.frozen_base_dtype": "--frozen-base-dtype",
    "critic.model.frozen_base_dtype": "--frozen-base-dtype",
    "actor_rollout_ref.model.lora_rank": "--lora-rank",
    "actor_rollout_ref.model.lora_alpha": "--lora-alpha",
    "actor_rollout_ref.model.target_modules": "--lora-target-modules",
    "critic.model.lora_rank": "--critic-lora-rank",
    "critic.model.lora_alpha": "--lora-alpha",
    "critic.model.target_modules": "--lora-target-modules",
    # the run directory's layout and resuming: checkpoints go to RUN_DIR/checkpoints, where --resume and export look
    "trainer.default_local_dir": "--run-dir (checkpoints go to RUN_DIR/checkpoints, "
    "where --resume, report and export look)",
    "trainer.resume_mode": "--resume RUN_DIR (continues from RUN_DIR/checkpoints; a new run starts from step 0)",
    # checkpoints: how often and how many are kept; validation: how often and before training
    "trainer.save_freq": "--save-freq",
    "trainer.max_actor_ckpt_to_keep": _KEEP,
    "trainer.max_critic_ckpt_to_keep": _KEEP,
    "trainer.test_freq": "--test-freq",
    "trainer.val_before_train": "--no-validate-before-train",
    # GPUs and nodes, steps and epochs
    "trainer.nnodes": "--nodes (the batch is checked against every GPU)",
    "trainer.n_gpus_per_node": "--gpus (the batch is checked against every GPU)",
    "trainer.total_training_steps": "--steps (the progress display, --resume and report count against it)",
    "trainer.total_epochs": "--steps or --epochs (the progress display, --resume and report count against them)",
}


def managed_key_option(key: str) -> str | None:
    """The option to use instead of overriding ``key`` (a key of :data:`MANAGED_KEYS`, or a section holding
    some: their options joined by "; "), or None when verlfit leaves ``key`` to the user."""
    if key in MANAGED_KEYS:
        return MANAGED_KEYS[key]
    inside = sorted({option for managed, option in MANAGED_KEYS.items() if managed.startswith(key + ".")})
    return "; ".join(inside) if inside else None


def user_overrides(raw: list[str]) -> list[str]:
    """The verl overrides a user gave after ``--`` (a leading ``--`` dropped), each checked to be ``key=value``
    and to leave :data:`MANAGED_KEYS` alone.

    Raises:
        VerlfitError (exit status 2): an override that is not ``key=value``, or one that sets a managed key or a
            section holding one, with the option to use instead as the fix.
    """
    extras = raw[1:] if raw and raw[0] == "--" else list(raw)
    for override in extras:
        _, key, _ = split_override(override)  # raises a clear error for anything that is not key=value
        option = managed_key_option(key)
        if option:
            raise VerlfitError(
                f"override {override!r}: verlfit sets {key} itself from its options and checks it against "
                "the GPU, the profile and the memory plan",
                fix=f"use {option} instead",
                exit_code=2,
            )
    return extras


@dataclass(frozen=True)
class UserOverrides:
    """The verl overrides a user gave after ``--``, checked and parsed once (:func:`parse_user_overrides`), so what
    reads them asks no more of this module.

    Attributes:
        words: the overrides as given (``key=value``, ``+key=value``, ``~key``), in order.
        keys: each override's key, without its prefix and value (the key of ``words[i]`` at ``i``).
        values: each key's value as its last override sets it, as written (``"True"``), read-only; None where the last
            one deletes it (``~key``). A key no override sets is absent, so ``values.get(key)`` answers as
            :func:`override_value` does.
    """

    words: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    values: Mapping[str, str | None] = field(default_factory=lambda: MappingProxyType({}))


def parse_user_overrides(raw: list[str]) -> UserOverrides:
    """The :class:`UserOverrides` of the words after ``--`` (:func:`user_overrides`' checks, then each key and each
    key's last value read once).

    Raises:
        VerlfitError (exit status 2): what :func:`user_overrides` raises.
    """
    words = user_overrides(raw)
    return UserOverrides(
        words=tuple(words),
        keys=tuple(split_override(override)[1] for override in words),
        values=MappingProxyType(override_values(words)),
    )


def managed_keys_help() -> str:
    """The managed keys grouped by the option that sets them, one line each, for ``verlfit train --help``."""
    by_option: dict[str, list[str]] = {}
    for key, option in MANAGED_KEYS.items():
        by_option.setdefault(option, []).append(key)
    return "\n".join(f"  {option}: {', '.join(keys)}" for option, keys in by_option.items())


def split_override(override: str) -> tuple[str, str, str]:
    """Split ``[+|++|~]key=value`` into ``(prefix, key, value)``.

    Raises:
        VerlfitError: when there is no ``=`` (``~key`` deletions are allowed without one).
    """
    match = re.fullmatch(r"(\+\+|\+|~)?([A-Za-z0-9_.\-/@]+)(?:=(.*))?", override, flags=re.S)
    if not match or (match.group(3) is None and match.group(1) != "~"):
        raise VerlfitError(
            f"override {override!r} is not key=value",
            fix="write overrides as section.key=value, e.g. actor_rollout_ref.actor.optim.lr=1e-6",
            exit_code=2,
        )
    return match.group(1) or "", match.group(2), match.group(3) if match.group(3) is not None else ""


def override_value(overrides: list[str], key: str) -> str | None:
    """The value the last override of ``key`` (any ``+``/``++`` prefix) sets in a verl override list, as written
    (``"True"``), or None when none sets it or the last one deletes it (``~key``)."""
    return override_values(overrides).get(key)


def override_values(overrides: list[str]) -> dict[str, str | None]:
    """Each key of a verl override list (any ``+``/``++`` prefix) with the value its last override sets, as written
    (``"True"``), or None where the last one deletes it (``~key``); in the order the keys first appear.

    Raises:
        VerlfitError: an override that is not ``key=value`` (:func:`split_override`).
    """
    values: dict[str, str | None] = {}
    for override in overrides:
        prefix, key, text = split_override(override)
        values[key] = None if prefix == "~" else text
    return values


def merge_overrides(overrides: list[str]) -> list[str]:
    """Keep one override per key: the last value wins, at the position of the first.

    The prefix (``+`` or none) of the first occurrence is kept, because verlfit's own entries
    come first and know whether verl's yaml has the key; a user repeating a ``+key`` must not
    make Hydra fail with "an item is already at".
    """
    position: dict[str, int] = {}
    merged: list[list[str]] = []
    for override in overrides:
        prefix, key, value = split_override(override)
        if key in position:
            merged[position[key]][2] = value
            if prefix == "~":
                merged[position[key]][0] = "~"
        else:
            position[key] = len(merged)
            merged.append([prefix, key, value])
    return [f"{prefix}{key}" if prefix == "~" else f"{prefix}{key}={value}" for prefix, key, value in merged]


def verl_config_dir() -> Path:
    """Return the installed verl's ``verl/trainer/config`` directory.

    Raises:
        VerlfitError: when verl is not importable.
    """

    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise VerlfitError(
            "verl is not installed in this Python, so overrides cannot be validated",
            fix="pip install verl==0.4.1 (the images install it), or pass --no-validate",
        )
    config_dir = Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config"
    if not (config_dir / "ppo_trainer.yaml").is_file():
        raise VerlfitError(f"{config_dir / 'ppo_trainer.yaml'} is missing: is this a complete verl install?")
    return config_dir


def config_keys(config) -> list[str]:
    """All dotted key paths of an OmegaConf tree (leaves and sections), unresolved."""
    from omegaconf import DictConfig  # lazy: only where verl's config is composed

    keys: list[str] = []

    def walk(node, prefix: str) -> None:
        for key in node.keys():
            path = f"{prefix}{key}"
            keys.append(path)
            child = node._get_node(key)
            if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
                walk(child, path + ".")

    walk(config, "")
    return keys


def suggest_keys(key: str, valid: list[str], limit: int = 3) -> list[str]:
    """Closest valid keys to ``key``: same-leaf keys under the same section first, then difflib."""
    leaf = key.rsplit(".", 1)[-1]
    section = key.rsplit(".", 1)[0] if "." in key else ""
    hint_keys = []
    if leaf in KNOWN_MISTAKES:
        hint_keys = [
            k
            for k in valid
            if k.startswith(section + ".") and k.rsplit(".", 1)[-1] in ("param_offload", "optimizer_offload")
        ]
    close = difflib.get_close_matches(key, valid, n=limit, cutoff=0.6)
    same_section = [k for k in valid if k.startswith(section + ".") and k.count(".") == key.count(".")]
    close += difflib.get_close_matches(key, same_section, n=limit, cutoff=0.0)
    seen: list[str] = []
    for candidate in hint_keys + close:
        if candidate not in seen:
            seen.append(candidate)
    return seen[: max(limit, len(hint_keys))]


def _unknown_key_error(key: str, valid: list[str], added: bool) -> VerlfitError:
    leaf = key.rsplit(".", 1)[-1]
    suggestions = suggest_keys(key, valid + list(KNOWN_ADDED_KEYS))
    why = KNOWN_MISTAKES.get(leaf)
    what = "verl never reads" if added else "verl 0.4.1's ppo_trainer.yaml has no key"
    message = f"{what} {key!r}"
    if why:
        message += f" ({why})"
    return VerlfitError(
        message,
        fix="did you mean: " + ", ".join(suggestions) if suggestions else "see verl's ppo_trainer.yaml",
        exit_code=2,
    )


# Hydra keys verlfit's launch command sets after the user's overrides (train/launch_plan.py hydra_run_dir_override):
# a user's value for one would be replaced without a word
VERLFIT_HYDRA_KEYS = frozenset({"hydra.run.dir"})


def validate_overrides(overrides: list[str], config_dir: Path | None = None, user: list[str] | None = None):
    """Compose ``overrides`` with Hydra against verl's ``ppo_trainer.yaml``; return the config.

    ``hydra.*`` overrides are skipped (they configure Hydra itself, not verl), except that a user's
    ``hydra.run.dir`` (:data:`VERLFIT_HYDRA_KEYS`, which verlfit sets) is refused. ``+key``
    overrides must name a key in :data:`KNOWN_ADDED_KEYS` or under
    :data:`KNOWN_ADDED_PREFIXES`. ``user``: the overrides the user gave after ``--``, as given: a ``+`` on a key
    the yaml has is refused there too, though :func:`merge_overrides` would have folded it into verlfit's own
    entry for the key (``+actor_rollout_ref.actor.optim.lr=1e-6`` is what Hydra refuses when run by hand).

    Returns:
        The composed ``omegaconf.DictConfig`` (unresolved), for the dry run and run record.

    Raises:
        VerlfitError: for an unknown key (with the closest valid keys; for ``cpu_offload`` or
            ``offload_params`` pointing to ``param_offload`` / ``optimizer_offload``), a ``+`` on
            a key that already exists, a value Hydra cannot parse, or a value whose type is not the
            one verl's yaml gives the key (a word for a number, a number for true/false): verl's
            yaml is not typed, so Hydra takes ``optim.lr=abc`` and the run would fail minutes later.
    """
    from hydra import compose, initialize_config_dir  # lazy: only where verl's config is composed
    from hydra.core.global_hydra import GlobalHydra  # lazy: only where verl's config is composed
    from hydra.errors import HydraException  # lazy: only where verl's config is composed
    from omegaconf import OmegaConf  # lazy: only where verl's config is composed

    config_dir = config_dir or verl_config_dir()
    base = OmegaConf.load(config_dir / "ppo_trainer.yaml")
    valid = config_keys(base)
    valid_set = set(valid)
    for override in user or []:
        prefix, key, _ = split_override(override)
        if key in VERLFIT_HYDRA_KEYS:
            raise VerlfitError(
                f"{override!r}: verlfit sets {key} itself (Hydra's outputs go to RUN_DIR/hydra, beside the "
                "run's records), "
                "so yours would be silently replaced",
                fix="drop it; choose where the run goes with --run-dir",
                exit_code=2,
            )
        if prefix == "+" and key in valid_set:
            raise VerlfitError(
                f"{override!r}: verl's yaml already has {key!r}, so '+' (add a new key) is refused by Hydra",
                fix=f"drop the '+': {override.lstrip('+')}",
                exit_code=2,
            )
    verl_overrides = []
    for override in overrides:
        prefix, key, _ = split_override(override)
        if key.startswith("hydra."):
            continue
        if prefix in ("+", "++"):
            if key in valid_set and prefix == "+":
                raise VerlfitError(
                    f"{override!r}: verl's yaml already has {key!r}, so '+' (add a new key) is refused by Hydra",
                    fix=f"drop the '+': {override.lstrip('+')}",
                    exit_code=2,
                )
            if key not in KNOWN_ADDED_KEYS and not key.startswith(KNOWN_ADDED_PREFIXES) and key not in valid_set:
                raise _unknown_key_error(key, valid, added=True)
        elif prefix == "~" and key in valid_set:
            # verl reads its yaml's keys as attributes (config.actor.optim.lr): a deleted one fails after Ray starts
            default = OmegaConf.select(base, key, default=None, throw_on_resolution_failure=False)
            raise VerlfitError(
                f"{override!r} deletes {key}, which verl 0.4.1 reads (every key of its ppo_trainer.yaml is "
                "read where its feature runs): the run would fail after Ray starts",
                fix=f"set a value instead: {key}=VALUE"
                + (f" (verl's default: {default})" if not OmegaConf.is_config(default) and default is not None else ""),
                exit_code=2,
            )
        elif prefix == "" and key not in valid_set:
            if key in KNOWN_ADDED_KEYS or key.startswith(KNOWN_ADDED_PREFIXES):
                raise VerlfitError(
                    f"{override!r}: {key!r} is not in verl's yaml, so it needs a leading '+'",
                    fix=f"write +{override}",
                    exit_code=2,
                )
            raise _unknown_key_error(key, valid, added=False)
        verl_overrides.append(override)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            composed = compose(config_name="ppo_trainer", overrides=verl_overrides)
    except HydraException as error:
        raise VerlfitError(f"Hydra rejected the overrides: {error}", exit_code=2) from error
    finally:
        GlobalHydra.instance().clear()
    _check_value_types(verl_overrides, base, composed)
    check_values(composed)
    return composed


# Values verl 0.4.1 takes without a word but that break a run or train nothing: (key, test, what it must be, why).
# Checked on the composed config (interpolations resolved: critic.ppo_epochs follows the actor's).
VALUE_RULES = (
    (
        "actor_rollout_ref.actor.ppo_epochs",
        lambda v: v >= 1,
        "a whole number from 1",
        "0 passes over each batch: the actor never updates (verl 0.4.1 dp_actor.py:401 loops ppo_epochs times)",
    ),
    (
        "critic.ppo_epochs",
        lambda v: v >= 1,
        "a whole number from 1",
        "0 passes over each batch: the critic never updates (dp_critic.py:206)",
    ),
    (
        "actor_rollout_ref.actor.optim.lr",
        lambda v: v >= 0,
        "a learning rate from 0",
        "a negative learning rate climbs the loss",
    ),
    ("critic.optim.lr", lambda v: v >= 0, "a learning rate from 0", "a negative learning rate climbs the loss"),
    # the limit of --actor-lr / --critic-lr, for the same keys set after --
    (
        "actor_rollout_ref.actor.optim.lr",
        lambda v: v <= MAX_LEARNING_RATE,
        f"a learning rate at most {MAX_LEARNING_RATE:g} (--actor-lr's limit)",
        LEARNING_RATE_LIMIT_WHY,
    ),
    (
        "critic.optim.lr",
        lambda v: v <= MAX_LEARNING_RATE,
        f"a learning rate at most {MAX_LEARNING_RATE:g} (--critic-lr's limit)",
        LEARNING_RATE_LIMIT_WHY,
    ),
    # Above 0, not from 0: verl 0.4.1 hands rollout.temperature to the actor's log-probabilities on every engine
    # (fsdp_workers.py:744, data.meta_info["temperature"] = self.config.rollout.temperature), which divide by it
    # (dp_actor.py:264, logits.div_(temperature)); and its HF rollout samples with it (hf_rollout.py:83-87, the
    # do_sample branch: "do_sample": True, ... "temperature": temperature), where transformers' generate builds
    # TemperatureLogitsWarper(temperature), which raises ValueError for a temperature that is not > 0
    # (logits_process.py: "`temperature` (=0) has to be a strictly positive float").
    (
        "actor_rollout_ref.rollout.temperature",
        lambda v: v > 0,
        "a temperature above 0",
        "the actor divides its logits by it (verl 0.4.1 dp_actor.py:264, on every rollout engine: 0 makes them "
        "infinite), and the HF rollout samples with it, which transformers' generate refuses at 0 or below "
        "(TemperatureLogitsWarper) at the first rollout",
    ),
    (
        "actor_rollout_ref.rollout.val_kwargs.temperature",
        lambda v: v >= 0,
        "a temperature from 0",
        "sampling divides the logits by it: below 0 the least likely tokens win",
    ),
    (
        "actor_rollout_ref.rollout.top_p",
        lambda v: 0 < v <= 1,
        "a probability in (0, 1]",
        "the share of probability mass sampled from",
    ),
)
REWARD_MODEL_KEY = "reward_model.enable"
ROLLOUT_NAME_KEY = "actor_rollout_ref.rollout.name"
VALIDATION_SAMPLING_KEYS = (
    "actor_rollout_ref.rollout.val_kwargs.do_sample",
    "actor_rollout_ref.rollout.val_kwargs.temperature",
)


def check_values(config) -> None:
    """Refuse values verl 0.4.1 accepts but that break a run or train nothing (:data:`VALUE_RULES`: ``ppo_epochs=0``,
    a negative learning rate or one above --actor-lr's limit, a rollout temperature of 0 or below, ``top_p`` outside
    (0, 1], a sampled validation at temperature 0 or below on the HF rollout, an interpolation in a checked value that
    does not resolve), and a reward model (``reward_model.enable=True``):
    ``config`` is the composed verl config (OmegaConf).

    Raises:
        VerlfitError (exit status 2): naming the key, its value, what it must be and why; for the reward model, what
            verlfit scores with instead.
    """
    from omegaconf import OmegaConf  # lazy: only where verl's config is composed

    for key, test, must, why in VALUE_RULES:
        value, interpolation = _checked_value(config, key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not test(value):
            raise VerlfitError(
                f"{key}={value}{f' (from {interpolation})' if interpolation else ''}: it must be {must}; {why}",
                fix=f"set {key} to {must}, or leave it to verl's default",
                exit_code=2,
            )
    do_sample_key, temperature_key = VALIDATION_SAMPLING_KEYS
    do_sample, _ = _checked_value(config, do_sample_key)
    temperature, _ = _checked_value(config, temperature_key)
    if (
        OmegaConf.select(config, ROLLOUT_NAME_KEY, default=None, throw_on_resolution_failure=False) == "hf"
        and do_sample is True
        and isinstance(temperature, (int, float))
        and not temperature > 0
    ):
        # verl 0.4.1 hf_rollout.py:70-78, the validation branch: "do_sample": True, ... "temperature":
        # self.config.val_kwargs.temperature, refused by transformers as above (vLLM samples greedily at 0)
        raise VerlfitError(
            f"{temperature_key}={temperature} with {do_sample_key}=True on the HF rollout: validation samples with it, "
            "which transformers' generate refuses at 0 or below (TemperatureLogitsWarper), so the first validation "
            "would stop the run",
            fix=f"set {temperature_key} above 0 (e.g. 1.0), or {do_sample_key}=False for greedy validation (verl's "
            "default)",
            exit_code=2,
        )
    if OmegaConf.select(config, REWARD_MODEL_KEY, default=False, throw_on_resolution_failure=False) is True:
        raise VerlfitError(
            f"{REWARD_MODEL_KEY}=True: verlfit does not run a reward model: the planner does not count its "
            "memory, and verl 0.4.1's reward-model "
            "loader asks for FlashAttention-2 (fsdp_workers.py:1241), which no card below compute capability 8.0 has",
            fix="drop reward_model.enable=True: verlfit scores GSM8K with verl's rule-based reward "
            "(default_compute_score); for your own reward, "
            "a reward function (verl's custom_reward_function.path and .name)",
            exit_code=2,
        )


def _checked_value(config, key: str):
    """The value of ``key`` in the composed ``config`` as verl will read it, and the ``${...}`` text it comes from
    (None where the value is written out). A value verlfit checks must resolve here: verl resolves its whole config
    as it starts (verl 0.4.1 ``main_ppo.py:77``, ``OmegaConf.resolve(config)``), so one that does not would stop the
    run there, and verlfit cannot check what it would be.

    Raises:
        VerlfitError (exit status 2): an interpolation that does not resolve, naming the key, its text and why.
    """
    from omegaconf import OmegaConf  # lazy: only where verl's config is composed
    from omegaconf.errors import InterpolationResolutionError  # lazy: only where verl's config is composed

    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(config, parent_key, default=None, throw_on_resolution_failure=False)
    if not (OmegaConf.is_config(parent) and leaf in parent and OmegaConf.is_interpolation(parent, leaf)):
        return OmegaConf.select(config, key, default=None, throw_on_resolution_failure=False), None
    interpolation = parent._get_node(leaf)._value()
    try:
        return OmegaConf.select(config, key, default=None), interpolation
    except InterpolationResolutionError as error:
        default = OmegaConf.select(_verl_defaults(), key, default=None, throw_on_resolution_failure=False)
        raise VerlfitError(
            f"{key}={interpolation}: verlfit cannot check this value: the interpolation does not resolve here "
            f"({_resolution_words(error)}); verl resolves its whole config as it starts (main_ppo.py:77, "
            "OmegaConf.resolve) and would stop on it",
            fix=f"write the value itself, e.g. {key}={default} (verl's default), or interpolate a key verl's "
            "config has",
            exit_code=2,
        ) from error


def _resolution_words(error: Exception) -> str:
    """What OmegaConf said of an interpolation it could not resolve, in a message's words: ``"no key NAME in verl's
    config"`` for a missing key, else its own first line."""
    from omegaconf.errors import InterpolationKeyError  # lazy: only where verl's config is composed

    if isinstance(error, InterpolationKeyError):
        missing = re.search(r"Interpolation key '([^']*)' not found", str(error))
        if missing:
            return f"no key {missing.group(1)} in verl's config"
    return str(error).splitlines()[0]


def _verl_defaults():
    """verl's ``ppo_trainer.yaml`` as it ships (OmegaConf), for the defaults a message names."""
    from omegaconf import OmegaConf  # lazy: only where verl's config is composed

    return OmegaConf.load(verl_config_dir() / "ppo_trainer.yaml")


def _check_value_types(overrides: list[str], base, composed) -> None:
    """Refuse an override whose value is not of the type of verl's default for that key (numbers may be
    int or float). ``base`` is verl's yaml, ``composed`` the config with the overrides (OmegaConf). A default
    or a value that is a ``${...}`` interpolation is judged by what it resolves to (a value that does not resolve here
    is left to :func:`check_values`, which refuses it for the keys it checks); a key whose default is null or a
    string is not checked. The patch series' switches (:data:`SWITCH_ADDED_KEYS`, added with
    ``+``) must be true or false."""
    from omegaconf import OmegaConf  # lazy: only where verl's config is composed
    from omegaconf.errors import InterpolationResolutionError  # lazy: only where verl's config is composed

    for override in overrides:
        prefix, key, _ = split_override(override)
        if prefix in ("+", "++") and key in SWITCH_ADDED_KEYS:
            if not isinstance(OmegaConf.select(composed, key, default=None), bool):
                raise VerlfitError(
                    f"{override!r}: {key} is a switch of verlfit's patch series, true or false (the "
                    "patched verl reads bool(value), so a word such as 'maybe' would turn it on)",
                    fix=f"write +{key}=True or +{key}=False",
                    exit_code=2,
                )
            continue
        if prefix:
            continue
        parent_key, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(composed, parent_key) if parent_key else composed
        interpolation = None
        if OmegaConf.is_config(parent) and OmegaConf.is_interpolation(parent, leaf):
            # judged by what it resolves to, as verl reads it once main_ppo.py:77 has resolved the config (new-user
            # trial: ${oc.env:HOME} became the temperature "/root"); one that does not resolve here is check_values'
            interpolation = parent._get_node(leaf)._value()
            try:
                value = OmegaConf.select(composed, key, default=None)
            except InterpolationResolutionError:
                continue
        else:
            value = OmegaConf.select(composed, key, default=None)
        default = OmegaConf.select(base, key, default=None, throw_on_resolution_failure=False)
        resolved = f", and {interpolation} resolves to {value!r} ({type(value).__name__})" if interpolation else ""
        decode = (
            "; an environment variable's text becomes a number through '${oc.decode:${oc.env:NAME}}'"
            if interpolation
            else ""
        )
        if isinstance(default, bool) and not isinstance(value, bool):
            raise VerlfitError(
                f"{override!r}: verl expects true or false for {key} (its default is {str(default).lower()}){resolved}",
                fix=f"write {key}=True or {key}=False",
                exit_code=2,
            )
        if (
            isinstance(default, (int, float))
            and not isinstance(default, bool)
            and (isinstance(value, bool) or not isinstance(value, (int, float)))
        ):
            raise VerlfitError(
                f"{override!r}: verl expects a number for {key} (its default is {default}){resolved}",
                fix=f"write a number, e.g. {key}={default}{decode}",
                exit_code=2,
            )
