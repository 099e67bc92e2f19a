"""Building a ``verlfit train`` launch (no side effects): the profile against the GPU, the environment, the
:class:`verlfit.run_settings.TrainSettings` from the command's options, the planner's sizes (``--plan auto``) and the
validated override list, as one :class:`verlfit.train.launch_plan.LaunchPlan` (:func:`build_launch`).

One concept, build_launch's many checks: each refusal stands before the next decision that depends on it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import time
from pathlib import Path

from verlfit import gsm8k
from verlfit.arguments import SizingOptions, sizing_fields, sizing_keep
from verlfit.checks.disk import PSEUDO_FILE_SYSTEMS, existing_parent, file_system_type
from verlfit.errors import VerlfitError
from verlfit.input_files import kind_of
from verlfit.model_shape import check_model_argument
from verlfit.output_files import check_name_lengths
from verlfit.overrides import (
    ACTOR_LR_KEY,
    CUDA_GRAPH_SEVERAL_GPUS_NOTE,
    LORA_LEARNING_RATE_NOTE,
    LORA_UNWRAP_NOTE,
    UNWRAP_SEVERAL_GPUS_NOTE,
    UserOverrides,
    build_overrides,
    hf_rollout_only_note,
    logger_overrides,
    merge_overrides,
    override_value,
    parse_user_overrides,
    validate_overrides,
)
from verlfit.run_settings import DEFAULT_ACTOR_LR, TrainSettings
from verlfit.patch_switches import CUDA_GRAPH_KEY, OUTSIDE_FSDP_KEYS, UNWRAP_KEY
from verlfit.plan.fit import plan_for_train
from verlfit.profiles import (
    MEMORY_LIMIT_VARIABLE,
    PROFILE_NAMES,
    beyond_the_card_note,
    check_card_options,
    check_rollout_dtype,
    memory_limit_gib,
    profile_choice_note,
    resolve_environment,
    run_profile,
)
from verlfit.prompt_lengths import measure_prompts
from verlfit.resolved_run import train_run
from verlfit.train.gpus import find_gpu
from verlfit.train.launch_plan import LaunchPlan, hydra_run_dir_override, total_steps
from verlfit.train.reward import data_keys, reward_overrides, run_reward_function


@dataclasses.dataclass(frozen=True)
class TrainOptions:
    """``verlfit train``'s options as typed values, one field per option (its argparse dest; the shared
    sizing options in ``sizing``), built by :func:`verlfit.commands.train.train_options`. None: not given (the
    profile's, the planner's or verlfit's default applies). Memory in GiB; ``overrides``: the words after ``--``."""

    profile: str | None
    emulate: str | None
    gpu_memory_limit: float | None
    rollout: str | None
    attention: str | None
    model: str
    data: str
    sizing: SizingOptions
    steps: int | None
    epochs: int | None
    nodes: int
    actor_lr: float
    critic_lr: float
    save_freq: int
    keep_checkpoints: int | None
    test_freq: int
    no_validate_before_train: bool
    tensorboard: bool
    run_dir: str | None
    dry_run: bool
    no_validate: bool
    overrides: list[str]
    reward_function: str | None = None  # --reward-function FILE[:NAME]
    # what the run does beside its settings: continue RUN_DIR, stop after SECONDS without a step, skip the doctor's
    # checks
    resume: str | None = None
    stall_timeout: float | None = None
    skip_checks: bool = False


def refuse_unwritable_run_dir(run_dir: Path) -> None:
    """Refuse (exit status 2) a ``--run-dir`` that verlfit could not create or write: its nearest existing folder
    (itself, or the first parent that exists) lies on a pseudo file system of the kernel (proc, sysfs, devtmpfs,
    cgroup, ...: :data:`verlfit.checks.disk.PSEUDO_FILE_SYSTEMS`, the type read from ``/proc/self/mountinfo``;
    root passes ``os.access`` there and the mount is not read-only), lets this user neither write nor enter it, or
    lies on a read-only file system (``os.statvfs``'s ``ST_RDONLY``). The dry run writes nothing, so it asks instead
    of trying.

    Raises:
        VerlfitError: naming the folder and why (the file system's type for a pseudo one), with the fix.
    """
    existing = existing_parent(run_dir)
    kind = file_system_type(existing)
    if kind in PSEUDO_FILE_SYSTEMS:
        why = f"is on {kind}, a pseudo file system the kernel fills with its own state: it holds no run's files"
    elif os.statvfs(existing).f_flag & os.ST_RDONLY:
        why = "is on a read-only file system"
    elif not os.access(existing, os.W_OK | os.X_OK):
        why = "is not writable by this user"
    else:
        return
    where = "it" if existing == run_dir.expanduser().absolute() else f"{existing}, the folder it would be created in,"
    raise VerlfitError(
        f"--run-dir {run_dir} cannot be written: {where} {why}",
        fix="pass --run-dir a folder under one you can write (e.g. ./runs/NAME; in the image, under the mounted /runs)",
        exit_code=2,
    )


def train_settings(options: TrainOptions, run_dir: str, sizes: dict, user: UserOverrides) -> TrainSettings:
    """Map ``verlfit train``'s options onto :class:`TrainSettings` (pure). ``sizes``: the fields of the shared
    sizing options (:func:`verlfit.arguments.sizing_fields` of ``options.sizing``, as ``verlfit plan``'s);
    ``user``: the overrides after ``--``, parsed (:func:`verlfit.overrides.parse_user_overrides`)."""
    return TrainSettings(
        **sizes,
        model=options.model,
        data_dir=options.data,
        run_dir=run_dir,
        steps=options.steps,
        epochs=1 if options.epochs is None else options.epochs,
        nodes=options.nodes,
        actor_lr=options.actor_lr,
        critic_lr=options.critic_lr,
        save_freq=options.save_freq,
        keep_checkpoints=2 if options.keep_checkpoints is None else options.keep_checkpoints,
        test_freq=options.test_freq,
        validate_before_train=not options.no_validate_before_train,
        loggers=("console", "tensorboard") if options.tensorboard else ("console",),
        extra_overrides=list(user.words),
    )


def build_launch(
    options: TrainOptions, environ: dict[str, str] | None = None, gpu=None, detect_gpu=True, gpu_report=None
) -> LaunchPlan:
    """Resolve profile, environment, plan and overrides for ``options``; validate; no side effects.

    ``gpu``: the GPU to plan for, instead of asking NVML; ``gpu_report``: NVML's answer to use instead of asking
    (tests: a fake NVML's :func:`verlfit.gpu.query_gpus`); it also gives the pairs for NCCL's P2P fallback.

    Raises:
        VerlfitError: profile/GPU mismatch, bad sizes, an allocator setting vLLM rejects, an
            override that verl does not know, or a ``--data`` / ``--run-dir`` that is an existing file.
    """
    environ = dict(os.environ if environ is None else environ)
    notes: list[str] = []
    nccl_notes: list[str] = []
    nccl_environment: dict[str, str] = {}

    # the folders named, checked first: they depend on nothing else
    for option, given, what in (
        ("--data", options.data, "with train.parquet and test.parquet, or raw GSM8K files"),
        ("--run-dir", options.run_dir, "that does not exist yet: verlfit creates it"),
    ):
        if given:
            check_name_lengths(Path(given), option)  # before a stat fails with ENAMETOOLONG
            kind = kind_of(given)
            if kind.startswith("not reachable"):  # a symbolic link loop, a folder one may not search
                raise VerlfitError(f"{option} {given} is {kind}", fix=f"pass a directory {what}", exit_code=2)
        if given and Path(given).exists() and not Path(given).is_dir():
            raise VerlfitError(
                f"{option} {given} is a file: it must be a directory", fix=f"pass a directory {what}", exit_code=2
            )
    if options.run_dir:
        refuse_unwritable_run_dir(Path(options.run_dir))
    # the sizing options, checked and mapped before the GPU is looked for: the same refusals as verlfit plan's
    keep = sizing_keep(options.sizing)
    sizes = sizing_fields(options.sizing)
    check_card_options(options.emulate, options.profile, options.gpu_memory_limit, "--gpu-memory-limit")
    profile_name = options.profile or environ.get("VERLFIT_PROFILE") or "auto"
    if not options.profile and profile_name not in (*PROFILE_NAMES, "auto"):
        raise VerlfitError(
            f"VERLFIT_PROFILE={profile_name} is not a profile",
            fix=f"set VERLFIT_PROFILE to one of {', '.join(PROFILE_NAMES)}, or pass --profile",
            exit_code=2,
        )
    # the GPU: needed to choose an auto profile, and by every real launch (a dry run with a named profile goes without)
    need = not options.dry_run or (profile_name == "auto" and not options.emulate)
    if detect_gpu and gpu is None and need:
        found = find_gpu(
            need=True,
            profile_named=bool(options.emulate) or profile_name != "auto",
            environ=environ,
            report=gpu_report,
            gpus=options.sizing.gpus,
            nodes=options.nodes,
        )
        gpu, nccl_environment, nccl_notes = found.gpu, found.nccl_environment, found.nccl_notes
    # emulation runs the profile's code paths on a card at least as capable: select_profile refuses a weaker one
    profile, chosen = run_profile(options.emulate or profile_name, gpu, options.rollout, options.attention)
    if options.emulate:
        notes.append(f"emulating {profile.name}: its code paths on {gpu.name if gpu else 'this machine'}")
    else:
        choice = (
            profile_choice_note(profile.name, gpu) if gpu is not None else None
        )  # a 6.0 or 7.x card on p40: say why
        if choice:
            notes.append(choice)
    changes = [
        (what, getattr(chosen, what), getattr(profile, what))
        for what in ("rollout", "attention")
        if getattr(chosen, what) != getattr(profile, what)
    ]
    if changes:
        first, *rest = changes
        notes.append(
            "; ".join(
                [
                    f"{first[0]} {first[1]} instead of the {profile.name} profile's {first[2]}",
                    *(f"{what} {new} instead of {old}" for what, new, old in rest),
                ]
            )
        )
    profile = chosen
    environment = resolve_environment(profile, environ)
    # Triton and bf16 decisions use the real GPU, or the profile's own card when emulating or without a GPU
    compute_capability = (
        gpu.compute_capability if gpu is not None and not options.emulate else profile.min_compute_capability
    )
    where = (
        f"{gpu.name} (compute capability {gpu.compute_capability_text})"
        if gpu is not None and not options.emulate
        else f"the {profile.name} profile's cards (compute capability below 8.0)"
    )
    check_rollout_dtype(profile, environment, compute_capability, where)
    limit = memory_limit_gib(options.gpu_memory_limit, options.emulate, profile, environ)
    environment.update(nccl_environment)  # NCCL's P2P fallback where two visible GPUs cannot reach each other
    notes += nccl_notes
    if limit is not None:
        if gpu is not None and limit * 1024**3 > gpu.total_memory_bytes:
            raise VerlfitError(
                f"--gpu-memory-limit {limit} GiB is more than {gpu.name}'s {gpu.total_memory_bytes / 1024**3:.1f} GiB",
                exit_code=2,
            )
        environment[MEMORY_LIMIT_VARIABLE] = f"{limit:g}"
        beyond = beyond_the_card_note(profile, limit)
        if beyond:
            notes.append(
                f"{'--gpu-memory-limit' if options.gpu_memory_limit is not None else MEMORY_LIMIT_VARIABLE} "
                f"{limit:g} GiB is {beyond}"
            )
    # absolute paths, so the recorded command and --resume work from any directory
    run_dir = str(
        Path(
            options.run_dir or Path("runs") / f"{options.sizing.algo}-{profile.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        ).resolve()
    )
    if options.tensorboard:
        # TENSORBOARD_DIR under the run directory; a dry run notes a missing package (this machine's, as for vLLM)
        if options.dry_run and importlib.util.find_spec("tensorboard") is None:
            notes.append(
                "a real run would refuse --tensorboard here: the tensorboard package is not installed (verl 0.4.1 "
                "writes through torch.utils.tensorboard.SummaryWriter; pip install tensorboard)"
            )
        environment.update(logger_overrides(True, run_dir, check=not options.dry_run)[1])
    user = parse_user_overrides(options.overrides)  # refuses a managed key after --
    settings = train_settings(options, run_dir, sizes, user)

    keys = data_keys(user.values)  # the columns verl reads: read once, for every later check
    # --reward-function, or verl's keys after --: one check, made absolute, and verl pointed at the run directory's copy
    reward, settings.extra_overrides = run_reward_function(options.reward_function, user)
    if options.steps is not None and options.epochs is not None:
        notes.append(
            f"--steps {options.steps} and --epochs {options.epochs}: --steps wins: the run stops after "
            f"{options.steps} steps, however many epochs that is (--epochs counts only without --steps)"
        )
    settings.rollout, settings.attention = profile.rollout, profile.attention
    # raw GSM8K files in --data: verl's files go to --data/verl, prepared from them
    prepared, raw = gsm8k.training_data(Path(settings.data_dir).resolve())
    settings.data_dir, settings.raw_data_dir = str(prepared), (str(raw) if raw is not None else None)

    check_model_argument(options.model)  # a config.json file is not a model folder
    if Path(settings.model).exists():
        settings.model = str(Path(settings.model).resolve())
    # the run, resolved once (its usable memory included): what the memory and time models read from here on
    run = train_run(profile, gpu, limit, settings, options.emulate)
    notes += measure_prompts(settings, run, keys.prompt_key)
    # the planner: sizes chosen (--plan auto, written into settings) or checked as given, and the run's step time

    steps = total_steps(settings)
    plan_lines, step_seconds, request = plan_for_train(settings, run, keep, options.sizing.plan == "auto", steps)
    notes += plan_lines
    share = None
    if profile.rollout == "vllm" and limit is not None and gpu is not None:
        # vLLM sizes its pool as a fraction of the whole card, not of the per-process cap (patch 0006):
        # keep the profile's share of the *capped* memory
        share = round(profile.vllm_gpu_memory_utilization * limit * 1024**3 / gpu.total_memory_bytes, 4)
        notes.append(
            f"vLLM's share {profile.vllm_gpu_memory_utilization} of the {limit:g} GiB limit is {share} of "
            f"{gpu.name}'s {gpu.total_memory_bytes / 1024**3:.1f} GiB (vLLM takes its share of the whole "
            "card)"
        )
    overrides = build_overrides(
        settings,
        profile,
        environment,
        compute_capability,
        vllm_card_fraction=share,
        forced=run.forced_overrides,
        frozen_base=request.frozen_base_dtype,
    )
    if reward is not None:
        overrides = merge_overrides(overrides + reward_overrides(run_dir, reward))
    if (
        f"+{CUDA_GRAPH_KEY}=False" in overrides
        and f"+{CUDA_GRAPH_KEY}=True" in profile.overrides
        and settings.gpus * settings.nodes > 1
    ):
        notes.append(CUDA_GRAPH_SEVERAL_GPUS_NOTE)
    if settings.lora_rank > 0 and settings.actor_lr == DEFAULT_ACTOR_LR and ACTOR_LR_KEY not in user.values:
        notes.append(LORA_LEARNING_RATE_NOTE)  # the default left (by --actor-lr and after --) with an adapter to train
    if f"+{UNWRAP_KEY}=True" in run.forced_overrides and override_value(overrides, UNWRAP_KEY) in ("True", "true"):
        notes.append(LORA_UNWRAP_NOTE)  # not when the user turned it off after --
    if settings.gpus * settings.nodes > 1 and override_value(overrides, UNWRAP_KEY) in ("True", "true"):
        notes.append(UNWRAP_SEVERAL_GPUS_NOTE)  # only the user can set it there
    if settings.gpus * settings.nodes > 1:  # only the user can set patch 0027's keys there; its workers refuse them
        for role, key in OUTSIDE_FSDP_KEYS.items():
            if override_value(overrides, key) in ("True", "true"):
                raise VerlfitError(
                    f"+{key}=True keeps the {role}'s LoRA adapters out of FSDP (patch 0027), which works on one GPU "
                    f"only: on {settings.gpus * settings.nodes} GPUs FSDP would not all-reduce their gradients",
                    fix=f"leave {key} unset on several GPUs (verlfit sets it where it applies)",
                    exit_code=2,
                )
    if profile.rollout != "hf":
        for key in (CUDA_GRAPH_KEY, UNWRAP_KEY, "actor_rollout_ref.rollout.trim_padding"):
            if override_value(overrides, key) in ("True", "true"):  # only the user can set them on a non-HF rollout
                notes.append(hf_rollout_only_note(f"+{key}=True", profile.rollout))
    config_yaml = None
    if not options.no_validate:  # composed once: the run directory's config.yaml is the config validated here
        from omegaconf import OmegaConf  # lazy: only where verl's config is composed

        config_yaml = OmegaConf.to_yaml(validate_overrides(overrides, user=settings.extra_overrides))
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides, hydra_run_dir_override(run_dir)]
    gpu_text = (
        f"{gpu.name} (compute capability {gpu.compute_capability_text}, {gpu.total_memory_bytes / 1024**3:.1f} GiB)"
        if gpu
        else "none detected"
    )
    return LaunchPlan(
        settings,
        profile.name,
        gpu_text,
        environment,
        overrides,
        command,
        notes,
        reward,
        keys,
        total_steps=steps,
        estimated_step_seconds=step_seconds,
        config_yaml=config_yaml,
    )
