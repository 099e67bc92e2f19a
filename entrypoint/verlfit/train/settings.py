"""Building a ``verlfit train`` launch (no side effects): the profile against the GPU, the environment, the
:class:`verlfit.overrides.TrainSettings` from the command's options, the planner's sizes (``--plan auto``) and the
validated override list, as one :class:`verlfit.train.launch_plan.LaunchPlan` (:func:`prepare_launch`).

One concept, prepare_launch's many checks: each refusal stands before the next decision that depends on it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from verlfit import gsm8k
from verlfit.errors import VerlfitError
from verlfit.metrics import logger_overrides
from verlfit.overrides import CUDA_GRAPH_KEY, CUDA_GRAPH_SEVERAL_GPUS_NOTE, LORA_CUDA_GRAPH_NOTE, LORA_UNWRAP_NOTE, UNWRAP_KEY, UNWRAP_SEVERAL_GPUS_NOTE, TrainSettings, build_overrides, hf_rollout_only_note, override_value, unwraps_lora_generation, user_overrides, validate_overrides
from verlfit.profiles import PROFILE_NAMES, check_rollout_dtype, customize, profile_choice_note, resolve_environment, select_profile
from verlfit.train.gpus import find_gpu, memory_limit_gib, nccl_settings
from verlfit.train.launch_plan import MEMORY_LIMIT_VARIABLE, LaunchPlan, hydra_run_dir_override, total_steps


def settings_from_args(args, run_dir: str) -> TrainSettings:
    """Map parsed ``verlfit train`` arguments onto :class:`TrainSettings` (pure). The sizes come from
    :func:`verlfit.plan.request.sizing_from_args`, as ``verlfit plan``'s do.

    Raises:
        VerlfitError: sizes refused by ``sizing_from_args``, or a managed key after ``--``.
    """
    from verlfit.plan.request import sizing_from_args

    return TrainSettings(
        **sizing_from_args(args),
        model=args.model,
        data_dir=args.data,
        run_dir=run_dir,
        steps=args.steps,
        epochs=args.epochs,
        nodes=args.nodes,
        actor_lr=args.actor_lr,
        critic_lr=args.critic_lr,
        save_freq=args.save_freq,
        keep_checkpoints=2 if args.keep_checkpoints is None else args.keep_checkpoints,
        test_freq=args.test_freq,
        validate_before_train=not args.no_validate_before_train,
        loggers=("console", "tensorboard") if args.tensorboard else ("console",),
        extra_overrides=user_overrides(args.overrides),
    )


def prepare_launch(args, environ: dict[str, str] | None = None, gpu=None, detect_gpu=True, gpu_report=None) -> LaunchPlan:
    """Resolve profile, environment, plan and overrides for ``args``; validate; no side effects.

    ``gpu``: the GPU to plan for, instead of asking NVML; ``gpu_report``: NVML's answer to use instead of asking
    (tests: a fake NVML's :func:`verlfit.gpu.query_gpus`); it also gives the pairs for NCCL's P2P fallback.

    Raises:
        VerlfitError: profile/GPU mismatch, bad sizes, an allocator setting vLLM rejects, an
            override that verl does not know, or a ``--data`` / ``--run-dir`` that is an existing file.
    """
    environ = dict(os.environ if environ is None else environ)
    notes: list[str] = []
    report = None
    from verlfit.plan.request import check_sizing_args

    check_sizing_args(args)  # before the GPU is looked for: the same refusals as verlfit plan's
    if args.emulate and args.profile not in (None, "auto", args.emulate):
        raise VerlfitError(f"--profile {args.profile} and --emulate {args.emulate} disagree", fix=f"--emulate {args.emulate} already selects the {args.emulate} profile: drop --profile", exit_code=2)
    profile_name = args.profile or environ.get("VERLFIT_PROFILE") or "auto"
    if not args.profile and profile_name not in (*PROFILE_NAMES, "auto"):
        raise VerlfitError(f"VERLFIT_PROFILE={profile_name} is not a profile", fix=f"set VERLFIT_PROFILE to one of {', '.join(PROFILE_NAMES)}, or pass --profile", exit_code=2)
    if args.emulate:
        if detect_gpu and gpu is None and not args.dry_run:
            gpu, report = find_gpu(need=True, profile_named=True, environ=environ, report=gpu_report, gpus=args.gpus)
        # emulation runs the profile's code paths on a card at least as capable: refuse a weaker one
        profile = select_profile(args.emulate, gpu)
        notes.append(f"emulating {profile.name}: its code paths on {gpu.name if gpu else 'this machine'}")
    else:
        if detect_gpu and gpu is None and (profile_name == "auto" or not args.dry_run):
            gpu, report = find_gpu(need=profile_name == "auto" or not args.dry_run, profile_named=profile_name != "auto", environ=environ, report=gpu_report, gpus=args.gpus)
        profile = select_profile(profile_name, gpu)
        choice = profile_choice_note(profile.name, gpu) if gpu is not None else None  # a 6.0 or 7.x card on p40: say why
        if choice:
            notes.append(choice)
    chosen = customize(profile, rollout=args.rollout, attention=args.attention)
    changes = [(what, getattr(chosen, what), getattr(profile, what)) for what in ("rollout", "attention") if getattr(chosen, what) != getattr(profile, what)]
    if changes:
        first, *rest = changes
        notes.append("; ".join([f"{first[0]} {first[1]} instead of the {profile.name} profile's {first[2]}", *(f"{what} {new} instead of {old}" for what, new, old in rest)]))
    profile = chosen
    environment = resolve_environment(profile, environ)
    if report is not None and report.gpus:
        notes += nccl_settings(report, environ, environment, args.gpus, args.nodes)
    # Triton and bf16 decisions use the real GPU, or the profile's own card when emulating or without a GPU
    compute_capability = gpu.compute_capability if gpu is not None and not args.emulate else profile.min_compute_capability
    where = f"{gpu.name} (compute capability {gpu.compute_capability_text})" if gpu is not None and not args.emulate else f"the {profile.name} profile's cards (compute capability below 8.0)"
    check_rollout_dtype(profile, environment, compute_capability, where)
    limit = memory_limit_gib(args, profile, environ)
    if limit is not None:
        if gpu is not None and limit * 1024**3 > gpu.total_memory_bytes:
            raise VerlfitError(f"--gpu-memory-limit {limit} GiB is more than {gpu.name}'s {gpu.total_memory_bytes / 1024**3:.1f} GiB", exit_code=2)
        environment[MEMORY_LIMIT_VARIABLE] = f"{limit:g}"
    for option, given, what in (("--data", args.data, "with train.parquet and test.parquet, or raw GSM8K files"), ("--run-dir", args.run_dir, "that does not exist yet: verlfit creates it")):
        if given and Path(given).exists() and not Path(given).is_dir():
            raise VerlfitError(f"{option} {given} is a file: it must be a directory", fix=f"pass a directory {what}", exit_code=2)
    # absolute paths, so the recorded command and --resume work from any directory
    run_dir = str(Path(args.run_dir or Path("runs") / f"{args.algo}-{profile.name}-{time.strftime('%Y%m%d-%H%M%S')}").resolve())
    if args.tensorboard:
        environment.update(logger_overrides(True, run_dir)[1])  # TENSORBOARD_DIR under the run directory
    settings = settings_from_args(args, run_dir)
    settings.rollout, settings.attention = profile.rollout, profile.attention
    settings.data_dir = str(gsm8k.training_data(Path(settings.data_dir).resolve())[0])  # raw GSM8K files in --data: verl's files go to --data/verl
    if Path(settings.model).exists():
        settings.model = str(Path(settings.model).resolve())
    if args.plan == "auto":
        notes += apply_plan(settings, profile, args, gpu, limit)
    else:
        from verlfit.plan import unsupported_reason

        reason = unsupported_reason(profile.rollout, settings.actor_param_offload)
        if reason:
            raise VerlfitError(f"verl 0.4.1 cannot run this configuration: {reason}", fix="use --offload optimizer", exit_code=2)
    share = None
    if profile.rollout == "vllm" and limit is not None and gpu is not None:
        # vLLM sizes its pool as a fraction of the whole card, not of the per-process cap (patch 0006):
        # keep the profile's share of the *capped* memory
        share = round(profile.vllm_gpu_memory_utilization * limit * 1024**3 / gpu.total_memory_bytes, 4)
        notes.append(f"vLLM's share {profile.vllm_gpu_memory_utilization} of the {limit:g} GiB limit is {share} of {gpu.name}'s {gpu.total_memory_bytes / 1024**3:.1f} GiB (vLLM takes its share of the whole card)")
    overrides = build_overrides(settings, profile, environment, compute_capability, vllm_card_fraction=share)
    if f"+{CUDA_GRAPH_KEY}=False" in overrides and f"+{CUDA_GRAPH_KEY}=True" in profile.overrides:
        if settings.lora_rank:
            notes.append(LORA_CUDA_GRAPH_NOTE)
        if settings.gpus * settings.nodes > 1:
            notes.append(CUDA_GRAPH_SEVERAL_GPUS_NOTE)
    if unwraps_lora_generation(settings, profile) and override_value(overrides, UNWRAP_KEY) in ("True", "true"):
        notes.append(LORA_UNWRAP_NOTE)  # not when the user turned it off after --
    if settings.gpus * settings.nodes > 1 and override_value(overrides, UNWRAP_KEY) in ("True", "true"):
        notes.append(UNWRAP_SEVERAL_GPUS_NOTE)  # only the user can set it there
    if profile.rollout != "hf":
        for key in (CUDA_GRAPH_KEY, UNWRAP_KEY, "actor_rollout_ref.rollout.trim_padding"):
            if override_value(overrides, key) in ("True", "true"):  # only the user can set them on a non-HF rollout
                notes.append(hf_rollout_only_note(f"+{key}=True", profile.rollout))
    if not args.no_validate:
        validate_overrides(overrides)
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides, hydra_run_dir_override(run_dir)]
    gpu_text = f"{gpu.name} (compute capability {gpu.compute_capability_text}, {gpu.total_memory_bytes / 1024**3:.1f} GiB)" if gpu else "none detected"
    return LaunchPlan(settings, profile.name, gpu_text, environment, overrides, command, notes)


def apply_plan(settings: TrainSettings, profile, args, gpu, limit_gib: float | None) -> list[str]:
    """Let the planner choose micro-batches, checkpointing and offload; return what it said.

    The user's explicit ``--micro-batch-size`` / ``--offload`` / ``--no-gradient-checkpointing``
    are kept. Raises VerlfitError when nothing fits, with the smallest change that would.
    """
    from verlfit import plan as planner

    if limit_gib is not None:
        memory_bytes = int(limit_gib * 1024**3)
    elif gpu is not None and not args.emulate:
        memory_bytes = planner.usable_memory_bytes(gpu)
    else:
        memory_bytes = int(profile.gpu_memory_gib * 1024**3)
    from verlfit.plan import time as plan_time
    from verlfit.plan.request import sizing_keep

    keep = sizing_keep(args)
    lines = planner.fit_for_train(settings, profile, memory_bytes, keep_micro_batch="micro_batches" in keep, keep_offload="offload" in keep, keep_checkpointing="gradient_checkpointing" in keep)
    # no override list yet: for_train reads the switches as the run will get them (the profile's, what verlfit
    # forces for LoRA and several GPUs, the user's)
    return lines + plan_time.for_train(settings, profile, gpu.name if gpu is not None else None, total_steps(settings), args.emulate)[0]
