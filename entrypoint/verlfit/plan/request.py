"""Building a :class:`verlfit.plan.memory.PlanRequest`: from a hardware profile (:func:`request_for_profile`),
from ``verlfit train``'s settings (:func:`request_from_settings`) and from ``verlfit plan``'s arguments
(:func:`request_from_args`, which also says where the usable memory figure came from).
"""

from __future__ import annotations

from verlfit.arguments import DEFAULT_LORA_ALPHA, DEFAULT_LORA_TARGET_MODULES, DEFAULT_SAMPLES
from verlfit.errors import VerlfitError
from verlfit.model_shape import ModelShape, load_model_shape
from verlfit.overrides import default_mini_batch
from verlfit.plan.memory import CUDA_CONTEXT_BYTES, DTYPE_BYTES, FRAGMENTATION_RESERVE_BYTES, GIB, PlanRequest, format_gib, usable_memory_bytes


def check_sizing_args(args) -> None:
    """Refuse sizing options (:func:`verlfit.arguments.add_sizing_arguments`) that do not go together, for
    ``verlfit train`` and ``verlfit plan`` alike.

    Raises:
        VerlfitError (exit status 2): ``--samples`` with ``--algo ppo``; ``--critic-lora-rank`` with ``--algo grpo``;
            ``--lora-alpha`` or ``--lora-target-modules`` without an adapter to apply them to.
    """
    if args.algo == "ppo" and args.samples is not None:
        raise VerlfitError(f"--samples {args.samples} with --algo ppo: PPO samples one response per prompt (its critic gives the baseline)", fix="use --algo grpo for several responses per prompt, or drop --samples", exit_code=2)
    if args.algo == "grpo" and args.critic_lora_rank is not None:
        raise VerlfitError(f"--critic-lora-rank {args.critic_lora_rank} with --algo grpo: GRPO has no critic", fix="drop --critic-lora-rank (--lora-rank sets the actor's), or use --algo ppo", exit_code=2)
    critic_rank = (args.lora_rank if args.critic_lora_rank is None else args.critic_lora_rank) if args.algo == "ppo" else 0
    if args.lora_rank == 0 and critic_rank == 0:
        unused = [flag for flag, value in (("--lora-alpha", args.lora_alpha), ("--lora-target-modules", args.lora_target_modules)) if value is not None]
        if unused:
            raise VerlfitError(f"{' and '.join(unused)} without LoRA: every parameter trains, so there is no adapter to apply {'them' if len(unused) > 1 else 'it'} to", fix="add --lora-rank N (e.g. 32), or drop " + " and ".join(unused), exit_code=2)


def sizing_from_args(args) -> dict:
    """The :class:`verlfit.overrides.TrainSettings` fields set by the shared sizing options
    (:func:`verlfit.arguments.add_sizing_arguments`): the one place ``verlfit train`` and ``verlfit plan`` take
    their defaults from, so the plan is sized as the run will be.

    Defaults: mini-batch half the batch (the whole batch when it is odd, :func:`verlfit.overrides.default_mini_batch`);
    micro-batches TrainSettings' (actor 4, log-prob 8, critic 4) or, with ``--micro-batch-size M``, M for actor and
    critic and 2M for log-prob; gradient checkpointing on; offload none; GRPO samples :data:`DEFAULT_SAMPLES`;
    LoRA off (rank 0); with LoRA alpha :data:`DEFAULT_LORA_ALPHA` and target modules
    :data:`DEFAULT_LORA_TARGET_MODULES` (verl's own defaults), and for PPO the critic at the actor's rank.

    Raises:
        VerlfitError: from :func:`check_sizing_args`.
    """
    check_sizing_args(args)
    fields = dict(
        algorithm=args.algo,
        rollout_n=args.samples if args.samples is not None else DEFAULT_SAMPLES,
        gpus=args.gpus,
        train_batch_size=args.batch_size,
        ppo_mini_batch_size=args.mini_batch_size if args.mini_batch_size is not None else default_mini_batch(args.batch_size),
        max_prompt_length=args.max_prompt_length,
        max_response_length=args.max_response_length,
        gradient_checkpointing=args.gradient_checkpointing is not False,
        lora_rank=args.lora_rank,
        critic_lora_rank=(args.lora_rank if args.critic_lora_rank is None else args.critic_lora_rank) if args.algo == "ppo" else None,
        lora_alpha=args.lora_alpha if args.lora_alpha is not None else DEFAULT_LORA_ALPHA,
        lora_target_modules=args.lora_target_modules if args.lora_target_modules is not None else DEFAULT_LORA_TARGET_MODULES,
    )
    if args.micro_batch_size is not None:
        fields.update(actor_micro_batch_size=args.micro_batch_size, critic_micro_batch_size=args.micro_batch_size, log_prob_micro_batch_size=2 * args.micro_batch_size)
    if args.offload:
        optimizer, param = args.offload in ("optimizer", "all"), args.offload == "all"
        fields.update(actor_optimizer_offload=optimizer, critic_optimizer_offload=optimizer, actor_param_offload=param, critic_param_offload=param)
    return fields


def sizing_keep(args) -> set[str]:
    """What ``--plan auto`` must not change (:data:`verlfit.plan.fit.KEEPABLE` names): the micro-batches, gradient
    checkpointing and offload the user set with the shared sizing options."""
    keep = set()
    if args.micro_batch_size is not None:
        keep.add("micro_batches")
    if args.gradient_checkpointing is not None:
        keep.add("gradient_checkpointing")
    if args.offload:
        keep.add("offload")
    return keep


def request_for_profile(profile, shape: ModelShape, gpu_memory_bytes: int, **fields) -> PlanRequest:
    """A :class:`PlanRequest` with the profile's dtype, attention, rollout and vLLM share.

    ``fused_kernels`` follows the attention that will run (``fields["attention"]`` or the profile's):
    on for FlashAttention-2 (its image ships flash-attn, whose Triton cross-entropy verl then uses, and
    the padding-free path computes entropy with torch.compile), off for sdpa and eager, where verl's
    padded path computes entropy eagerly (``dp_actor.py:266-268``) whatever the image holds.
    Other ``fields`` override.
    """
    attention = fields.get("attention", profile.attention)
    defaults = dict(
        shape=shape,
        gpu_memory_bytes=int(gpu_memory_bytes),
        dtype=profile.dtype if profile.dtype in DTYPE_BYTES else "bfloat16",
        attention=profile.attention,
        rollout=profile.rollout,
        vllm_gpu_memory_utilization=profile.vllm_gpu_memory_utilization or 0.5,
        fused_kernels=attention == "flash_attention_2",
    )
    defaults.update(fields)
    return PlanRequest(**defaults)


def request_from_settings(settings, profile, memory_bytes: int, shape: ModelShape | None = None, **fields) -> PlanRequest:
    """Map ``verlfit.overrides.TrainSettings`` onto a :class:`PlanRequest`: the one mapping ``verlfit train``
    (through :func:`verlfit.plan.fit.fit_for_train`) and ``verlfit plan`` (:func:`request_from_args`) use.
    ``fields`` (what-if choices such as ``dtype`` or ``use_reference``) override the mapped ones.

    ``cuda_graph`` (patch 0022) is what the run's override list will say for ``+actor_rollout_ref.rollout.cuda_graph``:
    the profile's, then verlfit's forcing (:func:`verlfit.overrides.forced_switches`: off with LoRA and on several
    GPUs), then the user's after ``--`` (``settings.extra_overrides``); only the HF rollout reads it."""
    from verlfit.overrides import CUDA_GRAPH_KEY, forced_switches, override_value

    s = settings
    shape = shape or load_model_shape(s.model)
    chosen = {key: value for key, value in (("rollout", getattr(s, "rollout", None)), ("attention", getattr(s, "attention", None))) if value}
    graph = override_value([*profile.overrides, *forced_switches(s, profile), *getattr(s, "extra_overrides", ())], CUDA_GRAPH_KEY)
    mapped = dict(
        chosen,
        algorithm=s.algorithm,
        rollout_n=s.rollout_n if s.algorithm == "grpo" else 1,
        train_batch_size=s.train_batch_size,
        ppo_mini_batch_size=s.ppo_mini_batch_size,
        actor_micro_batch_size=s.actor_micro_batch_size,
        log_prob_micro_batch_size=s.log_prob_micro_batch_size,
        critic_micro_batch_size=s.critic_micro_batch_size,
        rollout_micro_batch_size=getattr(s, "rollout_micro_batch_size", None),
        max_prompt_length=s.max_prompt_length,
        max_response_length=s.max_response_length,
        gradient_checkpointing=s.gradient_checkpointing,
        actor_param_offload=s.actor_param_offload,
        actor_optimizer_offload=s.actor_optimizer_offload,
        critic_param_offload=s.critic_param_offload,
        critic_optimizer_offload=s.critic_optimizer_offload,
        gpus=s.gpus * getattr(s, "nodes", 1),
        lora_rank=s.lora_rank,
        critic_lora_rank=s.critic_lora_rank,
        # run.json keeps a list of names as a JSON list
        lora_target_modules=s.lora_target_modules if isinstance(s.lora_target_modules, str) else tuple(s.lora_target_modules),
        cuda_graph=chosen.get("rollout", profile.rollout) == "hf" and graph is not None and graph.lower() == "true",
    )
    return request_for_profile(profile, shape, memory_bytes, **{**mapped, **fields})


def _resolve_card(args, nvml=None):
    """Return (profile, usable bytes, a line saying where the number came from)."""
    from verlfit.profiles import load_profile, select_profile

    if args.emulate:
        profile = load_profile(args.profile if args.profile in ("p40", "a10") else args.emulate)
        memory = args.gpu_memory if args.gpu_memory else load_profile(args.emulate).gpu_memory_gib
        return profile, int(memory * GIB), f"emulating {args.emulate}: {memory:g} GiB usable"
    gpu = None
    source = None
    if args.gpu_memory is None or args.profile in (None, "auto"):
        from verlfit.gpu import query_gpus

        report = query_gpus(nvml)
        gpu = report.gpus[0] if report.gpus else None
        if gpu is None:
            source = report.error or "no NVIDIA GPU visible"
    import os

    # like verlfit train and doctor: the image's VERLFIT_PROFILE when no --profile is given
    name = args.profile or os.environ.get("VERLFIT_PROFILE") or ("auto" if gpu else "p40")
    if name not in ("p40", "a10", "auto"):
        raise VerlfitError(f"VERLFIT_PROFILE={name} is not a profile", fix="set VERLFIT_PROFILE to p40 or a10, or pass --profile", exit_code=2)
    if name == "auto" and gpu is None:
        raise VerlfitError("--profile auto needs a visible GPU", fix="pass --profile p40 or --profile a10, or --emulate p40")
    profile = select_profile(name, gpu) if gpu is not None else load_profile(name)
    if args.gpu_memory is not None:  # checked by its argparse type (verlfit.arguments.memory_gib)
        return profile, int(args.gpu_memory * GIB), f"--gpu-memory {args.gpu_memory:g} GiB"
    if gpu is not None:
        usable = usable_memory_bytes(gpu)
        return profile, usable, f"GPU {gpu.index}: {gpu.name}, {format_gib(gpu.total_memory_bytes)} ({format_gib(gpu.free_memory_bytes)} free) less {format_gib(CUDA_CONTEXT_BYTES)} CUDA context and {format_gib(FRAGMENTATION_RESERVE_BYTES)} fragmentation reserve"
    return profile, int(profile.gpu_memory_gib * GIB), f"{source}: planning for the {profile.name} card ({profile.gpu_memory_gib:g} GiB usable); pass --gpu-memory or --emulate to choose"


def request_from_args(args, nvml=None) -> tuple[PlanRequest, str]:
    """Build the request from parsed ``verlfit plan`` arguments; return it with the memory source line."""
    from verlfit.profiles import customize

    profile, memory, source = _resolve_card(args, nvml)
    # the same rules as `verlfit train --rollout/--attention` (and so the same fused-kernel assumption)
    profile = customize(profile, rollout=args.rollout, attention=args.attention)
    if args.dtype == "bfloat16" and profile.min_compute_capability < (8, 0):
        raise VerlfitError(f"--dtype bfloat16 with the {profile.name} profile: bf16 needs compute capability 8.0", fix="leave --dtype to the profile (float32)", exit_code=2)
    if args.dtype == "float32" and profile.attention == "flash_attention_2" and args.attention:
        raise VerlfitError("--dtype float32 with --attention flash_attention_2: FlashAttention-2 has no fp32 kernels", fix="use --attention sdpa", exit_code=2)
    if args.vllm_gpu_memory_utilization is not None and profile.rollout != "vllm":
        raise VerlfitError(f"--vllm-gpu-memory-utilization with the {profile.rollout} rollout: it is vLLM's share of the card", fix="drop it, or plan for --rollout vllm (a10 profile)", exit_code=2)
    from verlfit.overrides import TrainSettings

    # the sizes as verlfit train takes them (same defaults, same refusals), then plan's per-role what-ifs
    settings = TrainSettings(model=args.model, **sizing_from_args(args))
    for role in ("actor", "log_prob", "critic", "rollout"):
        if getattr(args, f"{role}_micro_batch_size"):
            setattr(settings, f"{role}_micro_batch_size", getattr(args, f"{role}_micro_batch_size"))
    for name in ("actor_param_offload", "actor_optimizer_offload", "critic_param_offload", "critic_optimizer_offload"):
        if getattr(args, name):
            setattr(settings, name, True)
    fields = dict(use_reference=args.reference)
    if getattr(args, "cuda_graph", None) is not None and profile.rollout == "hf":
        fields["cuda_graph"] = args.cuda_graph  # --cuda-graph / --no-cuda-graph (the time model reads it too)
    if args.dtype:
        fields["dtype"] = args.dtype
    if args.vllm_gpu_memory_utilization is not None:
        fields["vllm_gpu_memory_utilization"] = args.vllm_gpu_memory_utilization
    if args.dtype == "float32" and profile.attention == "flash_attention_2":
        fields["attention"] = "sdpa"  # FlashAttention-2 has no fp32 kernels
    return request_from_settings(settings, profile, memory, load_model_shape(args.model), **fields), source
