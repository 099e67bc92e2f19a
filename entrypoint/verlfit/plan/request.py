"""Building a :class:`verlfit.plan.memory.PlanRequest`: from a hardware profile (:func:`request_for_profile`),
from ``verlfit train``'s settings (:func:`request_from_settings`, and the time model's inputs: :func:`inputs_for_train`)
and from ``verlfit plan``'s options
(:class:`PlanOptions`: :func:`resolve_plan_run` resolves the run once, card and switches included;
:func:`request_from_options` builds on it; :func:`time_report` estimates its time).
The sizing options both commands share come as :class:`verlfit.arguments.SizingOptions`, checked and mapped where
they are defined (:func:`verlfit.arguments.sizing_fields`, :func:`verlfit.arguments.sizing_keep`): typed values, never
the command line's namespace.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from verlfit.arguments import SizingOptions, sizing_fields, sizing_keep
from verlfit.cards import card_for_gpu_name, get_card
from verlfit.checks.data_folder import check_data_folder
from verlfit.checks.result import FAIL
from verlfit.errors import VerlfitError
from verlfit.gpu import query_gpus
from verlfit.model_shape import ModelShape, load_model_shape
from verlfit.run_settings import TrainSettings
from verlfit.patch_switches import PatchSwitches, TRAINING_ROLES
from verlfit.plan.memory import DTYPE_BYTES, GIB, NF4, PlanRequest, format_gib
from verlfit.plan.time import StepEstimate, TimeInputs, estimate, run_steps
from verlfit.profiles import (
    PROFILE_NAMES,
    beyond_the_card_note,
    check_card_options,
    customize,
    load_profile,
    select_profile,
)
from verlfit.prompt_lengths import measure_for_train
from verlfit.resolved_run import (
    CUDA_CONTEXT_BYTES,
    FRAGMENTATION_RESERVE_BYTES,
    ResolvedRun,
    run_switches,
    usable_memory_bytes,
)


@dataclasses.dataclass(frozen=True)
class PlanOptions:
    """``verlfit plan``'s options as typed values, one field per option (its argparse dest; the shared sizing options
    in ``sizing``), built by :func:`verlfit.commands.plan.plan_options`. None: not given (the profile's or the
    planner's choice). Memory in GiB, lengths in tokens, sizes in prompts (micro-batches: responses per GPU)."""

    model: str
    profile: str | None
    emulate: str | None
    gpu_memory: float | None
    sizing: SizingOptions
    actor_micro_batch_size: int | None
    log_prob_micro_batch_size: int | None
    critic_micro_batch_size: int | None
    rollout_micro_batch_size: int | None
    actor_param_offload: bool
    actor_optimizer_offload: bool
    critic_param_offload: bool
    critic_optimizer_offload: bool
    dtype: str | None
    rollout: str | None
    vllm_gpu_memory_utilization: float | None
    attention: str | None
    reference: bool | None
    data: str | None
    longest_prompt_length: int | None
    margin: float
    json: bool
    # the time estimate's (verlfit.commands.plan.add_time_arguments)
    card: str | None
    steps: int | None
    epochs: int | None
    dataset_size: int | None
    save_freq: int
    trim_padding: bool | None
    window_prompt_length: int | None
    window_response_length: int | None
    rollout_trim_padding: bool | None
    rollout_prompt_length: int | None
    cuda_graph: bool | None
    pack_sequences: bool
    mean_prompt_length: float | None
    mean_response_length: float | None


def plan_keep(options: PlanOptions) -> list[str]:
    """What ``verlfit plan --plan auto`` must not change, sorted: :func:`verlfit.arguments.sizing_keep` of the shared
    sizing options, and the micro-batches or offload when a per-role ``--*-micro-batch-size`` or ``--*-offload``
    option sets them (the rollout's apart: ``--rollout-micro-batch-size`` keeps only it)."""
    keep = sizing_keep(options.sizing)
    if any(getattr(options, f"{role}_micro_batch_size") for role in ("actor", "log_prob", "critic")):
        keep.add("micro_batches")
    if options.rollout_micro_batch_size:
        keep.add("rollout_micro_batch")
    if any(
        getattr(options, f"{role}_{kind}_offload") for role in ("actor", "critic") for kind in ("param", "optimizer")
    ):
        keep.add("offload")
    return sorted(keep)


def request_for_profile(profile, shape: ModelShape, gpu_memory_bytes: int, **fields) -> PlanRequest:
    """A :class:`PlanRequest` with the profile's dtype, attention, rollout and vLLM share.

    ``fused_kernels`` follows the attention that will run (``fields["attention"]`` or the profile's):
    on for FlashAttention-2 (its image ships flash-attn, whose Triton cross-entropy verl then uses, and
    the padding-free path computes entropy with torch.compile), off for sdpa and eager, where verl's
    padded path computes entropy eagerly (``dp_actor.py:266-268``) whatever the image holds.
    Other ``fields`` override.

    Raises:
        VerlfitError (exit status 2): prompt and response lengths beyond the model's context
            (:attr:`verlfit.model_shape.ModelShape.context_length`, where its config gives one).
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
    request = PlanRequest(**defaults)
    context = shape.context_length
    if context is not None and request.max_prompt_length + request.max_response_length > context:
        raise VerlfitError(
            f"--max-prompt-length {request.max_prompt_length:,} and --max-response-length "
            f"{request.max_response_length:,} make sequences of up to "
            f"{request.max_prompt_length + request.max_response_length:,} tokens, more than {shape.name}'s context of "
            f"{context:,} (max_position_embeddings in its config.json): positions past it are untrained",
            fix=f"keep the two within {context:,} tokens together, e.g. {_lengths_that_fit(request, context)}",
            exit_code=2,
        )
    return request


def _lengths_that_fit(request: PlanRequest, context: int) -> str:
    """The lengths to suggest when ``request``'s prompt and response lengths overrun ``context``: a shorter
    ``--max-prompt-length`` beside the response length, where one holds the data's longest prompt (when measured,
    else 1 token); a shorter ``--max-response-length`` beside the prompt length, where the prompt length leaves room;
    both, where neither does (the prompt at the data's longest prompt, else half the context)."""
    prompt, response, longest = request.max_prompt_length, request.max_response_length, request.longest_prompt_length
    floor = longest or 1
    data = f" (the data's longest prompt has {longest:,} tokens)" if longest else ""
    options = []
    if context - prompt >= 1:
        options.append(f"--max-response-length {context - prompt} or less (beside --max-prompt-length {prompt})")
    if context - response >= floor:
        options.append(f"--max-prompt-length {context - response}{data}")
    if options:
        return ", or ".join(options)
    prompt = longest if longest and longest < context else context // 2
    return f"--max-prompt-length {prompt}{data} and --max-response-length {context - prompt} or less"


def frozen_base_storage(settings, profile) -> str | None:
    """The dtype a run stores its LoRA base in (patch 0026; ``"nf4"``: patch 0028): ``settings.frozen_base_dtype``, or
    the profile's ``frozen_base_dtype`` when it is None; None when the run has no LoRA role or asks for float32 (stock
    verl: 4 bytes a frozen parameter). The same value for the actor and a LoRA critic. ``settings``:
    :class:`verlfit.run_settings.TrainSettings`; ``profile``: a :class:`verlfit.profiles.Profile`. Decided once, when
    the run's request is built (:func:`request_from_settings`): ``verlfit train`` hands the planned request's value to
    :func:`verlfit.overrides.build_overrides`.

    Raises:
        VerlfitError (exit status 2): a 16-bit dtype other than the profile's (the p40 and a10 profiles store bf16,
            the t4 and v100 profiles fp16: a base in the other 16-bit type would mix bf16 and fp16 arithmetic in the
            rollout), naming the profile's; ``nf4`` on several GPUs or with the vLLM rollout
            (:func:`check_nf4_base`).
    """
    if not settings.has_lora:
        return None
    wanted = settings.frozen_base_dtype or profile.frozen_base_dtype
    if wanted == "float32":
        return None
    if wanted == NF4:
        # the rollout generates with the actor: a critic-only NF4 base never reaches vLLM
        rollout = (settings.rollout or profile.rollout) if settings.lora_rank > 0 else "hf"
        check_nf4_base(settings.gpus * settings.nodes, rollout)
        return wanted
    if wanted != profile.frozen_base_dtype:
        why = (
            "the dtype it computes in"
            if profile.dtype == profile.frozen_base_dtype
            else f"as the checkpoints hold it, computed in {profile.dtype}"
        )
        raise VerlfitError(
            f"--frozen-base-dtype {wanted} with the {profile.name} profile: it stores a LoRA base in "
            f"{profile.frozen_base_dtype} ({why})",
            fix=f"use --frozen-base-dtype {profile.frozen_base_dtype}, nf4, or float32 (stock verl)",
            exit_code=2,
        )
    return wanted


def check_nf4_base(gpus: int, rollout: str) -> None:
    """Refuse what patch 0028's NF4 base cannot run with (verl/utils/frozen_base_nf4.py).

    Raises:
        VerlfitError (exit status 2): ``gpus`` above 1 (the quantisation constants live beside FSDP's flat
            parameters, neither sharded nor broadcast: the patch refuses a world size above 1); ``rollout`` vllm for an
            actor with LoRA (verl's vLLM sharding manager hands vLLM the FSDP state dict, whose packed 4-bit weights
            vLLM cannot load; pass "hf" for a critic-only NF4 base).
    """
    if gpus > 1:
        raise VerlfitError(
            f"--frozen-base-dtype nf4 on {gpus} GPUs: patch 0028 stores the quantisation constants beside FSDP's "
            "parameters, so it runs on one GPU only",
            fix=(
                "run on one GPU (--gpus 1, and --nodes 1 if you set --nodes), or the profile's 16-bit base on several "
                "GPUs"
            ),
            exit_code=2,
        )
    if rollout != "hf":
        raise VerlfitError(
            f"--frozen-base-dtype nf4 with the {rollout} rollout: verl hands vLLM the FSDP model's weights, and vLLM "
            "cannot load bitsandbytes' packed 4-bit ones",
            fix="add --rollout hf",
            exit_code=2,
        )


def request_from_settings(
    settings,
    profile,
    memory_bytes: int,
    shape: ModelShape | None = None,
    switches: PatchSwitches | None = None,
    **fields,
) -> PlanRequest:
    """Map ``verlfit.run_settings.TrainSettings`` onto a :class:`PlanRequest`: the one mapping ``verlfit train``
    (through :func:`verlfit.plan.fit.fit_for_train`) and ``verlfit plan`` (:func:`request_from_options`) use.
    ``fields`` (what-if choices such as ``dtype`` or ``use_reference``) override the mapped ones.

    ``switches``: the run's patch switches (:attr:`verlfit.resolved_run.ResolvedRun.switches`, read once from the
    profile's overrides, verlfit's forcing and the user's after ``--``); None: :func:`verlfit.resolved_run.run_switches`
    of ``settings`` and ``profile`` (for callers without a resolved run). ``cuda_graph`` (patch 0022) counts only on
    the HF rollout. With the trims (patches 0020-0021) ``settings.longest_prompt_length`` (when measured) narrows the
    prompt columns the planner counts (:attr:`verlfit.plan.memory.PlanRequest.prompt_window`).

    Raises:
        VerlfitError: the model's shape cannot be read; with ``switches`` None, a user override Hydra cannot parse.
    """
    s = settings
    shape = shape or load_model_shape(s.model)
    if switches is None:
        switches = run_switches(profile, s)
    chosen = {key: value for key, value in (("rollout", s.rollout), ("attention", s.attention)) if value}
    mapped = dict(
        chosen,
        algorithm=s.algorithm,
        rollout_n=s.rollout_n if s.algorithm == "grpo" else 1,
        train_batch_size=s.train_batch_size,
        ppo_mini_batch_size=s.ppo_mini_batch_size,
        actor_micro_batch_size=s.actor_micro_batch_size,
        log_prob_micro_batch_size=s.log_prob_micro_batch_size,
        critic_micro_batch_size=s.critic_micro_batch_size,
        rollout_micro_batch_size=s.rollout_micro_batch_size,
        max_prompt_length=s.max_prompt_length,
        max_response_length=s.max_response_length,
        gradient_checkpointing=s.gradient_checkpointing,
        critic_gradient_checkpointing=s.critic_gradient_checkpointing,
        actor_param_offload=s.actor_param_offload,
        actor_optimizer_offload=s.actor_optimizer_offload,
        critic_param_offload=s.critic_param_offload,
        critic_optimizer_offload=s.critic_optimizer_offload,
        gpus=s.gpus * s.nodes,
        lora_rank=s.lora_rank,
        critic_lora_rank=s.critic_lora_rank,
        # run.json keeps a list of names as a JSON list
        lora_target_modules=(
            s.lora_target_modules if isinstance(s.lora_target_modules, str) else tuple(s.lora_target_modules)
        ),
        cuda_graph=chosen.get("rollout", profile.rollout) == "hf" and switches.cuda_graph,
        trim_padding=switches.trim_padding,
        rollout_trim_padding=switches.rollout_trim_padding,
        longest_prompt_length=s.longest_prompt_length,
        frozen_base_dtype=frozen_base_storage(s, profile),
    )
    return request_for_profile(profile, shape, memory_bytes, **{**mapped, **fields})


def _profile_and_memory(options: PlanOptions, report) -> tuple:
    """(profile as loaded, usable bytes, a line saying where the number came from) for ``verlfit plan``'s options;
    ``report``: NVML's answer (:class:`verlfit.gpu.GpuReport`), or None where none was asked for."""

    if options.emulate:
        profile = load_profile(options.emulate)
        memory = options.gpu_memory if options.gpu_memory else load_profile(options.emulate).gpu_memory_gib
        return profile, int(memory * GIB), f"emulating {options.emulate}: {memory:g} GiB usable"
    gpu = None
    source = None
    if options.gpu_memory is None or options.profile in (None, "auto"):
        gpu = report.gpus[0] if report.gpus else None
        if gpu is None:
            source = report.error or "no NVIDIA GPU visible"

    # like verlfit train and doctor: the image's VERLFIT_PROFILE when no --profile is given
    name = options.profile or os.environ.get("VERLFIT_PROFILE") or ("auto" if gpu else "p40")
    if name not in (*PROFILE_NAMES, "auto"):
        raise VerlfitError(
            f"VERLFIT_PROFILE={name} is not a profile",
            fix=f"set VERLFIT_PROFILE to one of {', '.join(PROFILE_NAMES)}, or pass --profile",
            exit_code=2,
        )
    if name == "auto" and gpu is None:
        raise VerlfitError(
            "--profile auto needs a visible GPU", fix=f"pass --profile ({', '.join(PROFILE_NAMES)}), or --emulate p40"
        )
    profile = select_profile(name, gpu) if gpu is not None else load_profile(name)
    if options.gpu_memory is not None:  # checked by its argparse type (verlfit.arguments.memory_gib)
        beyond = beyond_the_card_note(profile, options.gpu_memory)
        return (
            profile,
            int(options.gpu_memory * GIB),
            f"--gpu-memory {options.gpu_memory:g} GiB" + (f" ({beyond})" if beyond else ""),
        )
    if gpu is not None:
        usable = usable_memory_bytes(gpu)
        return (
            profile,
            usable,
            f"GPU {gpu.index}: {gpu.name}, {format_gib(gpu.total_memory_bytes)} "
            f"({format_gib(gpu.free_memory_bytes)} free) less {format_gib(CUDA_CONTEXT_BYTES)} CUDA "
            f"context and {format_gib(FRAGMENTATION_RESERVE_BYTES)} fragmentation reserve",
        )
    chosen = ""
    if options.profile not in (None, "auto"):
        # the card was chosen: NVML's diagnosis ("is the NVIDIA driver installed ...?") would read as a problem
        source, chosen = "no NVIDIA GPU visible here", f"--profile {profile.name}: "
    return (
        profile,
        int(profile.gpu_memory_gib * GIB),
        f"{source}: planning for the {profile.name} card ({chosen}{profile.gpu_memory_gib:g} GiB usable); pass "
        "--gpu-memory or --emulate to choose",
    )


def _time_card(options: PlanOptions, report) -> tuple:
    """The card ``verlfit plan`` estimates time on, and a line saying why: ``--card``, ``--emulate``, the detected
    GPU (``report``'s first; NVML name, :func:`verlfit.cards.card_for_gpu_name`), else the profile's card."""

    if options.card:
        return get_card(options.card), f"--card {options.card}"
    if options.emulate:
        return get_card(options.emulate), f"--emulate {options.emulate}"
    profile = (
        options.profile
        if options.profile in PROFILE_NAMES
        else os.environ.get("VERLFIT_PROFILE")
        if os.environ.get("VERLFIT_PROFILE") in PROFILE_NAMES
        else None
    )
    if report.gpus:
        card = card_for_gpu_name(report.gpus[0].name)
        if card is not None:
            return card, f"GPU {report.gpus[0].index}: {report.gpus[0].name}"
        fallback = profile or "p40"
        return (
            get_card(fallback),
            f"no datasheet facts for {report.gpus[0].name}: estimating for the {fallback} profile's card",
        )
    return get_card(profile or "p40"), f"no GPU visible: the {profile or 'p40'} profile's card"


def _plan_switches(options: PlanOptions, profile) -> PatchSwitches:
    """The patch switches of a ``verlfit plan`` run with ``profile``: the override list ``verlfit train`` would build
    before the user's ``--`` ones (the profile's overrides, then :func:`verlfit.overrides.forced_switches` for the
    options' LoRA rank and GPUs), each replaced by its flag when given (``--trim-padding`` / ``--no-trim-padding``,
    ``--rollout-trim-padding``, ``--cuda-graph``); ``--dtype float32`` keeps the adapters FSDP units (patch 0027 is
    set for 16-bit compute only: :func:`verlfit.patch_switches.adapters_outside_fsdp_roles`)."""

    switches = run_switches(
        profile, TrainSettings(model=options.model, lora_rank=options.sizing.lora_rank, gpus=options.sizing.gpus)
    )
    flags = {
        name: getattr(options, name)
        for name in ("rollout_trim_padding", "cuda_graph")
        if getattr(options, name) is not None
    }
    if options.trim_padding is not None:
        flags["trim_padding"] = TRAINING_ROLES if options.trim_padding else ()
    if options.dtype == "float32":  # patch 0027 is for 16-bit compute: verlfit does not set it for an fp32 run
        flags["adapters_outside_fsdp"] = ()
    return dataclasses.replace(switches, **flags)


def resolve_plan_run(options: PlanOptions, nvml=None) -> ResolvedRun:
    """``verlfit plan``'s run, resolved once (:class:`verlfit.resolved_run.ResolvedRun`): NVML asked at most once
    (not with ``--emulate``, nor with ``--card``, ``--gpu-memory`` and a named ``--profile`` together), the profile
    (``--profile``, ``VERLFIT_PROFILE``, the detected card's, else p40) after ``--rollout``/``--attention``, the
    usable memory and its source, the time card, and the patch switches with the flags.

    With ``--dtype float32`` on a FlashAttention-2 profile (the request then runs SDPA), the time estimate assumes
    the switches of the profile's SDPA path (``time_switches``), while the memory plan keeps the profile's.

    Raises:
        VerlfitError (exit status 2): options that do not go together (:func:`verlfit.profiles.check_card_options`), a
            ``VERLFIT_PROFILE`` that is not a profile, ``--profile auto`` without a GPU (exit 1), a profile the GPU
            cannot run, a rollout or attention the profile cannot run (:func:`verlfit.profiles.customize`).
    """

    check_card_options(
        options.emulate, options.profile, options.gpu_memory, "--gpu-memory"
    )  # as verlfit train refuses them
    report = None
    if not options.emulate and (
        options.card is None or options.gpu_memory is None or options.profile in (None, "auto")
    ):
        report = query_gpus(nvml)
    loaded, memory, source = _profile_and_memory(options, report)
    # the same rules as `verlfit train --rollout/--attention` (and so the same fused-kernel assumption)
    profile = customize(loaded, rollout=options.rollout, attention=options.attention)
    card, card_source = _time_card(options, report)
    switches = _plan_switches(options, profile)
    time_switches = None
    if options.dtype == "float32" and profile.attention == "flash_attention_2" and not options.attention:
        time_switches = _plan_switches(options, customize(loaded, rollout=options.rollout, attention="sdpa"))
    return ResolvedRun(
        profile=profile,
        gpu=report.gpus[0] if report is not None and report.gpus else None,
        memory_bytes=memory,
        memory_source=source,
        card=card,
        card_source=card_source,
        switches=switches,
        emulate=options.emulate,
        time_switches=time_switches,
    )


def request_from_options(options: PlanOptions, nvml=None, run: ResolvedRun | None = None) -> tuple[PlanRequest, str]:
    """Build the request from ``verlfit plan``'s options and its resolved ``run`` (None: :func:`resolve_plan_run`
    asks ``nvml``); return it with the memory source line.

    Raises:
        VerlfitError (exit status 2): what :func:`resolve_plan_run` raises; ``--dtype`` or
            ``--vllm-gpu-memory-utilization`` the profile cannot take; sizes ``verlfit train`` refuses
            (:func:`verlfit.arguments.sizing_fields`).
    """
    run = run or resolve_plan_run(options, nvml)
    profile, memory, source = run.profile, run.memory_bytes, run.memory_source
    if options.dtype == "bfloat16" and profile.min_compute_capability < (8, 0):
        raise VerlfitError(
            f"--dtype bfloat16 with the {profile.name} profile: bf16 needs compute capability 8.0",
            fix=f"leave --dtype to the profile ({profile.dtype})",
            exit_code=2,
        )
    if options.dtype == "float32" and profile.attention == "flash_attention_2" and options.attention:
        raise VerlfitError(
            "--dtype float32 with --attention flash_attention_2: FlashAttention-2 has no fp32 kernels",
            fix="use --attention sdpa",
            exit_code=2,
        )
    if options.vllm_gpu_memory_utilization is not None and profile.rollout != "vllm":
        raise VerlfitError(
            f"--vllm-gpu-memory-utilization with the {profile.rollout} rollout: it is vLLM's share of the card",
            fix="drop it, or plan for --rollout vllm (a10 profile)",
            exit_code=2,
        )
    if options.rollout_micro_batch_size and profile.rollout == "vllm":
        raise VerlfitError(
            f"--rollout-micro-batch-size {options.rollout_micro_batch_size} with the vllm rollout: it sizes HF "
            "generate's calls, and vLLM schedules the whole batch itself",
            fix="drop it, or plan for --rollout hf",
            exit_code=2,
        )

    # the sizes as verlfit train takes them (same defaults, same refusals), then plan's per-role what-ifs
    settings = TrainSettings(model=options.model, **sizing_fields(options.sizing))
    for role in ("actor", "log_prob", "critic", "rollout"):
        if getattr(options, f"{role}_micro_batch_size"):
            setattr(settings, f"{role}_micro_batch_size", getattr(options, f"{role}_micro_batch_size"))
    for name in ("actor_param_offload", "actor_optimizer_offload", "critic_param_offload", "critic_optimizer_offload"):
        if getattr(options, name):
            setattr(settings, name, True)
    settings.longest_prompt_length = options.longest_prompt_length
    # the switches (with --trim-padding, --rollout-trim-padding, --cuda-graph) count for memory as for time
    fields = dict(use_reference=options.reference)
    if options.dtype:
        fields["dtype"] = options.dtype
    if options.vllm_gpu_memory_utilization is not None:
        fields["vllm_gpu_memory_utilization"] = options.vllm_gpu_memory_utilization
    if options.dtype == "float32" and profile.attention == "flash_attention_2":
        fields["attention"] = "sdpa"  # FlashAttention-2 has no fp32 kernels
    return (
        request_from_settings(
            settings, profile, memory, load_model_shape(options.model), switches=run.switches, **fields
        ),
        source,
    )


def inputs_for_train(settings, switches: PatchSwitches) -> TimeInputs:
    """:class:`verlfit.plan.time.TimeInputs` of a ``verlfit train`` run (``settings``: its
    :class:`verlfit.run_settings.TrainSettings`): its checkpoint frequency (``settings.save_freq``, steps; None when it
    never saves) and its patch switches; :func:`time_inputs_for_options` is ``verlfit plan``'s."""
    return TimeInputs(**_switch_fields(switches), save_freq=settings.save_freq if settings.save_freq > 0 else None)


def _switch_fields(switches: PatchSwitches) -> dict:
    """The :class:`verlfit.plan.time.TimeInputs` fields of the run's patch ``switches``: each switch under its own
    name (``trim_padding`` as its roles; the others as bools)."""
    return dict(
        trim_padding=switches.trim_padding,
        rollout_trim_padding=switches.rollout_trim_padding,
        cuda_graph=switches.cuda_graph,
        unwrap_fsdp=switches.unwrap_fsdp,
        adapters_outside_fsdp=switches.adapters_outside_fsdp,
    )


def time_inputs_for_options(options: PlanOptions, run: ResolvedRun) -> TimeInputs:
    """:class:`verlfit.plan.time.TimeInputs` for ``verlfit plan``'s options: the run's patch switches as the time
    estimate assumes them (:attr:`verlfit.resolved_run.ResolvedRun.switches_for_time`, the flags applied), the
    window and rollout lengths given, packed sequences, and the checkpoint frequency (``--save-freq``, steps; None
    when it never saves)."""
    return TimeInputs(
        **_switch_fields(run.switches_for_time),
        window_prompt_length=options.window_prompt_length,
        window_response_length=options.window_response_length,
        rollout_prompt_length=options.rollout_prompt_length,
        pack_sequences=options.pack_sequences,
        mean_prompt_length=options.mean_prompt_length,
        mean_response_length=options.mean_response_length,
        save_freq=options.save_freq if options.save_freq > 0 else None,
    )


def time_report(
    options: PlanOptions, request: PlanRequest, run: ResolvedRun
) -> tuple[StepEstimate, int | None, TimeInputs]:
    """(estimate on the run's card, run steps or None, the :class:`verlfit.plan.time.TimeInputs` estimated with) for
    ``verlfit plan``'s options and the ``request`` it plans (:func:`verlfit.plan.time.run_steps` of ``--steps``,
    ``--epochs`` and ``--dataset-size``)."""
    inputs = time_inputs_for_options(options, run)
    steps = run_steps(options.steps, options.epochs, options.dataset_size, request.train_batch_size)
    return estimate(request, run.card, inputs), steps, inputs


def measure_data(options: PlanOptions, environ=None) -> tuple[PlanOptions, list[str]]:
    """``options`` with ``--data``'s measurements filled in: its longest prompt
    (:func:`verlfit.prompt_lengths.measure_for_train`
    with ``--model``'s local tokenizer, prompt key ``prompt``) as ``longest_prompt_length`` and the training rows verl
    keeps as ``dataset_size``; and the note lines saying what was measured. Without ``--data``: as given, except a
    ``--longest-prompt-length`` above ``--max-prompt-length``, which becomes the limit with a note (verl drops the
    longer prompts, filter_overlong_prompts, as it drops ``--data``'s: a suggested shorter ``--max-prompt-length``
    then plans as offered).

    Raises:
        VerlfitError (exit status 2): ``--data`` with ``--longest-prompt-length`` or ``--dataset-size`` (``--data``
            measures them); ``--data`` not a folder, without train.parquet, or failing the data check verlfit train
            runs (:func:`verlfit.checks.data_folder.check_data_folder`: unreadable, not verl's columns, no rows);
            every training prompt longer than ``--max-prompt-length`` (verl would drop them all).
    """
    if options.data is None:
        longest, limit = options.longest_prompt_length, options.sizing.max_prompt_length
        if longest is None or longest <= limit:
            return options, []
        return dataclasses.replace(options, longest_prompt_length=limit), [
            f"note: --longest-prompt-length {longest} is above --max-prompt-length {limit}: verl drops the longer "
            f"prompts (filter_overlong_prompts), so the longest prompt a micro-batch holds is {limit} tokens"
        ]
    for flag, value in (
        ("--longest-prompt-length", options.longest_prompt_length),
        ("--dataset-size", options.dataset_size),
    ):
        if value is not None:
            raise VerlfitError(
                f"--data {options.data} and {flag} {value}: --data measures it", fix="drop one of them", exit_code=2
            )
    data = Path(options.data)
    if not data.is_dir():
        raise VerlfitError(
            f"--data {data} is not a folder",
            fix="pass the folder holding train.parquet and test.parquet (verlfit prepare-data or "
            "prepare-gsm8k make them)",
            exit_code=2,
        )
    if not (data / "train.parquet").is_file():
        raise VerlfitError(
            f"--data {data} has no train.parquet",
            fix=f"prepare it: verlfit prepare-data --train FILE --output {data} (your own task), or verlfit "
            f"prepare-gsm8k --output {data}",
            exit_code=2,
        )
    import pyarrow.parquet as pq  # lazy: only where parquet is read or written

    check = check_data_folder(data, os.environ if environ is None else environ)  # both files are there: no network
    if check.status == FAIL:
        raise VerlfitError(check.message, fix=check.fix, exit_code=2)
    measured = measure_for_train(data, options.model, options.sizing.max_prompt_length)
    rows = (
        measured.train.kept if measured.train is not None else pq.ParquetFile(data / "train.parquet").metadata.num_rows
    )  # read: the data check passed
    return dataclasses.replace(options, longest_prompt_length=measured.longest, dataset_size=rows or None), [
        f"note: {measured.note}"
    ]
