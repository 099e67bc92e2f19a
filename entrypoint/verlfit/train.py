"""``verlfit train``: validated verl PPO/GRPO launch with a run directory.

Flow (each step fails before Ray starts when it can):

1. choose the profile (``--profile p40|a10|auto`` or ``--emulate p40|a10``) against the GPU;
2. resolve the environment knobs (user values win) and the optional per-worker memory limit;
3. size micro-batches, gradient checkpointing and offload with the planner (``--plan auto``);
4. build the override list and validate every key with Hydra against the installed verl;
5. ``--dry-run`` prints the command, the environment and the values that matter, and stops;
6. otherwise: pre-flight checks, GSM8K prepared if missing, a run directory created atomically,
   then ``python -m verl.trainer.main_ppo <overrides>`` runs with its output watched.

A run directory holds ``run.json`` (settings, overrides, environment), ``command.sh`` (the exact
command, re-runnable), ``config.yaml`` (the composed verl config), ``train.log`` (verl's full
output), ``metrics.jsonl`` and ``checkpoints/``. ``--resume RUN_DIR`` relaunches the same command
with ``trainer.resume_mode=auto``: verl loads the newest complete checkpoint
(``checkpoints/latest_checkpointed_iteration.txt``, written only after a checkpoint is saved).
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from verlfit import gsm8k
from verlfit.arguments import add_sizing_arguments, checkpoints_to_keep, frequency, memory_gib, parse_number, positive_number, whole_number
from verlfit.checkpoints import CHECKPOINTS_DIR, TRACKER, CheckpointKeeper, checkpoints_to_prune, latest_checkpoint, remove_cut_short
from verlfit.errors import VerlfitError
from verlfit.metrics import logger_overrides
from verlfit.overrides import CUDA_GRAPH_KEY, CUDA_GRAPH_SEVERAL_GPUS_NOTE, LORA_CUDA_GRAPH_NOTE, LORA_UNWRAP_NOTE, UNWRAP_KEY, UNWRAP_SEVERAL_GPUS_NOTE, TrainSettings, hf_rollout_only_note, override_value, unwraps_lora_generation, build_overrides, keep_checkpoints_overrides, managed_keys_help, user_overrides, validate_overrides
from verlfit.profiles import ATTENTION, PROFILE_NAMES, ROLLOUTS, check_rollout_dtype, customize, load_profile, profile_choice_note, resolve_environment, select_profile

MEMORY_LIMIT_VARIABLE = "VERLFIT_GPU_MEMORY_LIMIT_GIB"
RUN_FILE = "run.json"


# the defaults of every option, filled by register(): --resume refuses options that differ from them
_DEFAULTS: dict[str, object] = {}
# options that may be given with --resume (what each does there); the fix of a refused one lists them all
_RESUMABLE_OPTIONS = {
    "steps": "--steps (the run's new total, to extend it)",
    "keep_checkpoints": "--keep-checkpoints",
    "stall_timeout": "--stall-timeout",
    "dry_run": "--dry-run",
    "skip_checks": "--skip-checks",
    "no_validate": "--no-validate",
}
_RESUMABLE = {"resume", "func", "command", *_RESUMABLE_OPTIONS}
STALLED_STATUS = 124  # launch()'s status after --stall-timeout stopped verl (timeout(1)'s convention)


def _stall_seconds(text: str) -> float:
    """argparse type for --stall-timeout: seconds, 0 (never stop) or more."""
    value = parse_number(text, float, "a number of seconds")
    if not 0 <= value < float("inf"):  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} must be 0 (never stop) or a number of seconds")
    return value


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help="run verl PPO (or GRPO) on GSM8K with the profile's settings",
        description=(
            "Build, validate and launch `python -m verl.trainer.main_ppo` for this GPU. Every override "
            "is checked against the installed verl's ppo_trainer.yaml before Ray starts. Arguments after "
            "`--` are extra verl overrides (key=value; they win over verlfit's), except the keys verlfit sets from its own options and checks against the GPU, the profile and the memory plan (model, algorithm, data files, batch sizes, micro-batches, lengths, rollout engine, n and vLLM's memory share, attention, dtype, gradient checkpointing, offload, the run directory's checkpoints and resuming, checkpoint and validation frequency and checkpoints kept, GPUs and nodes, steps and epochs): those are refused with the option to use, listed at the end."
        ),
        epilog=(
            "examples:\n"
            "  $ verlfit train --profile p40 --dry-run\n"
            "  $ verlfit train --emulate p40 --steps 50            # P40 code paths + 22.5 GiB per worker on a bigger GPU\n"
            "  $ verlfit train --algo grpo --steps 10 -- actor_rollout_ref.actor.optim.lr=5e-6\n"
            "  $ verlfit train --resume runs/ppo-p40-20261129-143000\n"
            "\nverl keys verlfit sets itself (refused after --; the option to use instead: keys):\n" + managed_keys_help()
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--profile", choices=(*PROFILE_NAMES, "auto"), help="hardware profile (default: $VERLFIT_PROFILE, else auto by compute capability)")
    parser.add_argument("--emulate", choices=PROFILE_NAMES, help="run that profile's code paths and cap each worker at its card's usable memory (p40: 22.5 GiB), to rehearse on a bigger GPU")
    parser.add_argument("--gpu-memory-limit", type=memory_gib, metavar="GIB", help=f"cap each worker's GPU memory in GiB (sets {MEMORY_LIMIT_VARIABLE}; applied with torch.cuda.set_per_process_memory_fraction by the patched verl)")
    parser.add_argument("--rollout", choices=ROLLOUTS, help="rollout engine instead of the profile's: hf (transformers generate; any card) or vllm (a10 profile only; compute capability >= 7.0)")
    parser.add_argument("--attention", choices=ATTENTION, help="attention instead of the profile's: sdpa, eager, or flash_attention_2 (a10 profile only: needs bf16 and compute capability >= 8.0)")
    parser.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct", help="HF model id or local directory (default: %(default)s)")
    parser.add_argument("--data", default=os.environ.get("VERLFIT_DATA_DIR", "data/gsm8k"), help="directory with train.parquet and test.parquet, prepared from the hub first if missing; or with raw GSM8K files (train/test .jsonl/.parquet with question and answer, or the hub's main/ folder), prepared from them into DIR/verl (default: %(default)s)")
    add_sizing_arguments(parser)  # --algo --samples --gpus --batch-size ... --plan: shared with verlfit plan
    parser.add_argument("--steps", type=whole_number, help="total training steps (default: --epochs passes over the data)")
    parser.add_argument("--epochs", type=whole_number, default=1, help="passes over the training data when --steps is not given (default: 1)")
    parser.add_argument("--nodes", type=whole_number, default=1, help="nodes of a running Ray cluster, --gpus each (trainer.nnodes; default: 1)")
    parser.add_argument("--actor-lr", type=positive_number, default=1e-6, help="actor learning rate (default: 1e-6)")
    parser.add_argument("--critic-lr", type=positive_number, default=1e-5, help="critic learning rate (default: 1e-5)")
    parser.add_argument("--save-freq", type=frequency, default=25, metavar="N", help="checkpoint every N steps and at the last (default: 25; 0 or -1: never, as verl treats any value <= 0)")
    parser.add_argument("--keep-checkpoints", type=checkpoints_to_keep, metavar="N", help="keep the newest N >= 2 checkpoints, deleting older ones (default: 2; 0 keeps all, verl's default; a 0.5B PPO checkpoint is ~11 GiB). verl prunes only what its own session saved; verlfit removes the rest (checkpoints from before a --resume, the data.pt verl leaves) as new ones complete. May be given with --resume")
    parser.add_argument("--test-freq", type=frequency, default=25, metavar="N", help="validate every N steps and at the last (default: 25; 0 or -1: never, as verl treats any value <= 0)")
    parser.add_argument("--no-validate-before-train", action="store_true", help="skip verl's validation at step 0")
    parser.add_argument("--tensorboard", action="store_true", help="also log to TensorBoard under RUN_DIR/tensorboard")
    parser.add_argument("--run-dir", help="run directory (default: runs/<algo>-<profile>-<time>)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped run from its newest checkpoint, with its recorded settings (only " + ", ".join(option.partition(" (")[0] for option in _RESUMABLE_OPTIONS.values()) + " may be given)")
    parser.add_argument("--stall-timeout", type=_stall_seconds, metavar="SECONDS", help="stop verl (as Ctrl-C does) when no step finishes for SECONDS, and record the run as stalled; before the first step record, 30 min of startup allowance (Ray start, model loading, the initial validation) is added, so SECONDS counts from the first record on (default, or 0: never stop; a stall is only reported, after 5 x the longest step, at least 10 min, + the same startup allowance, see verlfit.progress). May be given with --resume")
    parser.add_argument("--dry-run", action="store_true", help="print the command, environment and resolved values, then exit (no GPU needed with --profile p40|a10)")
    parser.add_argument("--skip-checks", action="store_true", help="do not run the doctor's blocking checks before launch")
    parser.add_argument("--no-validate", action="store_true", help="do not validate overrides against the installed verl (not recommended)")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="after --: extra verl overrides, key=value")
    parser.set_defaults(func=run)
    _DEFAULTS.update({action.dest: action.default for action in parser._actions})
    return parser


@dataclasses.dataclass
class LaunchPlan:
    """Everything needed to start verl: the command, its environment additions and the record."""

    settings: TrainSettings
    profile_name: str
    gpu_description: str
    environment: dict[str, str]
    overrides: list[str]
    command: list[str]
    notes: list[str]


def _detect_gpu(need: bool, profile_named: bool = False, environ=None, report=None, gpus: int = 1):
    """Return the first GPU a CUDA process sees (``CUDA_VISIBLE_DEVICES``, PCI bus order) and NVML's report, or
    (None, report) when none is visible and ``need`` is False.

    ``profile_named``: a profile was chosen (``--profile p40|a10``, ``--emulate``, ``VERLFIT_PROFILE``), so the
    GPU was needed only because this is not a dry run: the fix then points to ``--dry-run``. ``report``: NVML's
    answer when the caller has it (tests), else :func:`verlfit.gpu.query_gpus` asks.

    Raises:
        VerlfitError: no GPU (when ``need``); visible cards of several kinds, or fewer than ``gpus``
            (:func:`verlfit.gpu.refuse_mixed_cards`, :func:`verlfit.gpu.refuse_too_few`).
    """
    from verlfit.gpu import cuda_visible_gpus, query_gpus, refuse_mixed_cards, refuse_too_few

    report = report if report is not None else query_gpus()
    if report.error:
        if need:
            dry_run = "for a dry run without a GPU add --dry-run" if profile_named else "for a dry run without a GPU pass --dry-run with --profile p40 or --profile a10"
            raise VerlfitError(report.error, fix=f"run `verlfit doctor`; {dry_run}")
        return None, report
    environ = {} if environ is None else environ
    visible = cuda_visible_gpus(report.gpus, environ)
    refuse_mixed_cards(report.gpus, visible, environ)  # before the profile is chosen from the first of them
    if need:
        refuse_too_few(visible, gpus, environ)
    return (visible[0] if visible else None), report


def _nccl_settings(report, environ, environment: dict[str, str], gpus: int, nodes: int) -> list[str]:
    """Add NCCL's peer-to-peer fallback to ``environment`` where NVML says two of the visible GPUs cannot reach
    each other (:func:`verlfit.gpu.nccl_environment`; the user's NCCL variables win); return the notes."""
    from verlfit.gpu import cuda_visible_gpus, links_among, nccl_environment

    added, notes = nccl_environment(links_among(report.links, cuda_visible_gpus(report.gpus, environ)), gpus, environ)
    environment.update(added)
    if added and nodes > 1:
        notes.append("with --nodes, the workers of a running Ray cluster take their environment from `ray start`, not from verlfit: start every node with NCCL_P2P_DISABLE=1 too")
    return notes


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


def memory_limit_gib(args, profile, environ: dict[str, str] | None = None) -> float | None:
    """The per-worker memory cap in GiB: ``--gpu-memory-limit``, else the emulated card's usable memory,
    else a ``VERLFIT_GPU_MEMORY_LIMIT_GIB`` the user set (validated here, so the planner sizes for it)."""
    if args.gpu_memory_limit is not None:  # checked by its argparse type (verlfit.arguments.memory_gib)
        return args.gpu_memory_limit
    if args.emulate:
        if environ and environ.get(MEMORY_LIMIT_VARIABLE):
            raise VerlfitError(f"--emulate {args.emulate} sets {MEMORY_LIMIT_VARIABLE}={profile.gpu_memory_gib:g} (the card's usable memory), but {MEMORY_LIMIT_VARIABLE}={environ[MEMORY_LIMIT_VARIABLE]} is set", fix=f"unset {MEMORY_LIMIT_VARIABLE}, or use --profile {args.emulate} --gpu-memory-limit GIB", exit_code=2)
        return profile.gpu_memory_gib
    if environ and environ.get(MEMORY_LIMIT_VARIABLE):
        text = environ[MEMORY_LIMIT_VARIABLE]
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not 1 <= value < float("inf"):  # also false for nan
            raise VerlfitError(f"{MEMORY_LIMIT_VARIABLE}={text!r} is not a number of GiB from 1 up", fix=f"unset it, or use --gpu-memory-limit GIB (e.g. {MEMORY_LIMIT_VARIABLE}=22.5)", exit_code=2)
        return value
    return None


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
            gpu, report = _detect_gpu(need=True, profile_named=True, environ=environ, report=gpu_report, gpus=args.gpus)
        # emulation runs the profile's code paths on a card at least as capable: refuse a weaker one
        profile = select_profile(args.emulate, gpu)
        notes.append(f"emulating {profile.name}: its code paths on {gpu.name if gpu else 'this machine'}")
    else:
        if detect_gpu and gpu is None and (profile_name == "auto" or not args.dry_run):
            gpu, report = _detect_gpu(need=profile_name == "auto" or not args.dry_run, profile_named=profile_name != "auto", environ=environ, report=gpu_report, gpus=args.gpus)
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
        notes += _nccl_settings(report, environ, environment, args.gpus, args.nodes)
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


def hydra_run_dir_override(run_dir) -> str:
    """``hydra.run.dir=RUN_DIR/hydra``, quoted for Hydra's override grammar (a path with ``,`` ``=`` ``(`` ``'``
    or a space would otherwise be read as a sweep or fail to parse when verl starts)."""
    from verlfit.overrides import quote_value

    return f"hydra.run.dir={quote_value(str(Path(run_dir) / 'hydra'))}"


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


def shell_command(command: list[str], indent: str) -> str:
    """``command`` quoted for a shell: ``python -m module`` on the first line, one override per continued line."""
    head = " ".join(shlex.quote(part) for part in command[:3])
    return f" \\\n{indent}".join([head, *(shlex.quote(part) for part in command[3:])])


def _lora_line(s: TrainSettings) -> str:
    """The dry run's LoRA line: each role's rank (0 = fully trained), alpha and target modules."""
    critic = s.lora_rank if s.critic_lora_rank is None else s.critic_lora_rank
    ranks = [f"actor rank {s.lora_rank}"] + ([f"critic rank {critic}"] if s.algorithm == "ppo" else [])
    if s.lora_rank == 0 and (s.algorithm != "ppo" or critic == 0):
        return "LoRA: off (every parameter trains)"
    targets = s.lora_target_modules if isinstance(s.lora_target_modules, str) else ",".join(s.lora_target_modules)
    return f"LoRA: {', '.join(ranks)} (0 = fully trained), alpha {s.lora_alpha:g}, target modules {targets}"


def _steps_text(s: TrainSettings) -> str:
    """The dry run's step count: ``--steps``; else, when train.parquet is there, the steps verl will take
    (``"233 (1 epoch(s) of 7473 rows // 32 prompts a batch)"``); else ``"1 epoch(s)"``."""
    if s.steps is not None:
        return str(s.steps)
    rows = training_rows(s)
    if rows is None:
        return f"{s.epochs} epoch(s)"
    return f"{total_steps(s)} ({s.epochs} epoch(s) of {rows} rows // {s.train_batch_size} prompts a batch)"


def describe(plan: LaunchPlan, stall_timeout: float | None = None) -> str:
    """The dry-run text: values that matter, the environment, and the exact command; ``stall_timeout``
    (``--stall-timeout``, seconds) adds its line when given (not 0)."""
    s = plan.settings
    lines = [
        f"profile: {plan.profile_name}    GPU: {plan.gpu_description}",
        *([f"rollout: {s.rollout}    attention: {s.attention}"] if s.rollout and s.attention else []),
        f"algorithm: {s.algorithm}{f' (n={s.rollout_n})' if s.algorithm == 'grpo' else ''}    model: {s.model}",
        f"data: {s.data_dir}    run directory: {s.run_dir}",
        f"steps: {_steps_text(s)}    batch: {s.train_batch_size} prompts, mini-batch {s.ppo_mini_batch_size}",
        "micro-batches per GPU: " + ", ".join(
            [f"actor {s.actor_micro_batch_size}"]
            + ([f"critic {s.critic_micro_batch_size}"] if s.algorithm == "ppo" else [])
            + [f"log-prob {s.log_prob_micro_batch_size}"]
            + ([f"HF rollout {s.rollout_micro_batch_size or s.train_batch_size} prompts"] if "actor_rollout_ref.rollout.name=hf" in plan.overrides else [])
        ),
        f"lengths: prompt <= {s.max_prompt_length}, response <= {s.max_response_length} tokens    checkpoints: every {s.save_freq} steps, {f'newest {s.keep_checkpoints}' if s.keep_checkpoints else 'all'} kept" if s.save_freq > 0 else f"lengths: prompt <= {s.max_prompt_length}, response <= {s.max_response_length} tokens    checkpoints: none (--save-freq {s.save_freq})",
        f"gradient checkpointing: {s.gradient_checkpointing}    offload: actor params {s.actor_param_offload}, optimizer {s.actor_optimizer_offload}"
        + (f"; critic params {s.critic_param_offload}, optimizer {s.critic_optimizer_offload}" if s.algorithm == "ppo" else ""),
        _lora_line(s),
    ]
    if stall_timeout:
        from verlfit.progress import STARTUP_ALLOWANCE_S

        lines.append(f"stall timeout: stop verl after {stall_timeout:g} s without a finished step (--stall-timeout; + {STARTUP_ALLOWANCE_S / 60:g} min of startup before the first record)")
    if s.extra_overrides:
        lines.append("your overrides (after --, applied last; they win over the values above): " + " ".join(s.extra_overrides))
    lines += [f"note: {note}" for note in plan.notes]
    lines.append("environment:")
    lines += [f"  {key}={value}" for key, value in plan.environment.items()]
    lines.append("command:")
    lines.append("  " + shell_command(plan.command, indent="    "))
    return "\n".join(lines)


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in its folder and a rename.

    Raises:
        OSError: the write or the rename failed (a full disk: ``ENOSPC``); the temporary file is removed and
            ``path`` is as it was.
    """
    handle = tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False)
    temporary = Path(handle.name)
    try:
        with handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def create_run_directory(plan: LaunchPlan, config_yaml: str | None) -> Path:
    """Create the run directory atomically: build it under a hidden temporary name, then rename.

    Raises:
        VerlfitError: when the directory already exists (use --resume) or cannot be created.
    """
    run_dir = Path(plan.settings.run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise VerlfitError(f"--run-dir {run_dir} is a file, not a directory", fix="pass a directory path that does not exist yet")
    if run_dir.exists():
        raise VerlfitError(f"run directory {run_dir} already exists", fix=f"continue it with `verlfit train --resume {shlex.quote(str(run_dir))}`, or pass another --run-dir")
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=run_dir.parent, prefix=f".{run_dir.name}.building-"))
    except OSError as error:
        raise VerlfitError(f"cannot create the run directory {run_dir}: {error.strerror}", fix="choose a writable --run-dir") from error
    try:
        record = {
            "verlfit_run": 1,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "pid": os.getpid(),  # the verlfit process watching verl; `verlfit report` tells running from interrupted
            "profile": plan.profile_name,
            "gpu": plan.gpu_description,
            "settings": dataclasses.asdict(plan.settings),
            "total_steps": plan.settings.steps,
            "environment": plan.environment,
            "overrides": plan.overrides,
            "command": plan.command,
            "notes": plan.notes,
        }
        (staging / RUN_FILE).write_text(json.dumps(record, indent=2) + "\n")
        exports = "".join(f"export {key}={shlex.quote(value)}\n" for key, value in plan.environment.items())
        (staging / "command.sh").write_text("#!/usr/bin/env bash\n# The exact verl launch of this run (written by verlfit train).\n" + exports + shell_command(plan.command, indent="  ") + "\n")
        if config_yaml is not None:
            (staging / "config.yaml").write_text(config_yaml)
        (staging / "checkpoints").mkdir()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o777 & ~umask)  # mkdtemp makes it 0700; a run directory is shared like any other
        os.replace(staging, run_dir)
    except BaseException:
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
        raise
    return run_dir


def load_run(run_dir: Path) -> dict:
    """Read ``run.json`` of a run directory.

    Raises:
        VerlfitError: when ``run_dir`` is not a verlfit run directory.
    """
    path = Path(run_dir) / RUN_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, IsADirectoryError) as error:
        raise VerlfitError(f"{path} is not a verlfit run record ({type(error).__name__})", fix="resume only directories created by `verlfit train`") from None
    except FileNotFoundError:
        raise VerlfitError(f"{run_dir} is not a verlfit run directory (no {RUN_FILE})", fix="pass a directory created by `verlfit train`") from None
    except NotADirectoryError:
        raise VerlfitError(f"{run_dir} is a file, not a verlfit run directory", fix="pass the directory created by `verlfit train`") from None
    except json.JSONDecodeError as error:
        raise VerlfitError(f"{path} is not valid JSON ({error})") from None
    required = {"overrides": list, "settings": dict, "environment": dict, "profile": str, "gpu": str}
    missing = [key for key, kind in required.items() if not isinstance(record, dict) or not isinstance(record.get(key), kind)]
    if not missing and not all(isinstance(o, str) for o in record["overrides"]):
        missing = ["overrides"]
    if missing:
        raise VerlfitError(f"{path} is not a verlfit run record (missing or wrong: {', '.join(missing)})", fix="resume only directories created by `verlfit train`")
    return record


def resume_plan(run_dir: Path, steps: int | None = None, keep_checkpoints: int | None = None) -> LaunchPlan:
    """The launch plan of a stopped run: its recorded overrides with ``trainer.resume_mode=auto``.

    ``keep_checkpoints`` (0: all) replaces the recorded ``--keep-checkpoints``, e.g. to keep fewer when the disk fills.

    The run directory's own path replaces the recorded one in ``trainer.default_local_dir``, so a run
    moved or resumed from another working directory still finds its checkpoints. ``steps`` extends
    (or shortens) the run's total training steps.
    """
    from verlfit.overrides import merge_overrides, quote_value

    from verlfit.report import process_alive

    run_dir = Path(run_dir).resolve()
    record = load_run(run_dir)
    pid = record.get("pid")
    if pid != os.getpid() and process_alive(pid, "verlfit"):
        raise VerlfitError(f"{run_dir} is still being trained by process {pid} (verlfit train): a second run would write the same checkpoints and metrics", fix=f"stop it first (Ctrl-C in its terminal, or kill -INT {pid}), then resume")
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        save_freq = record["settings"].get("save_freq")
        when = f"the first is saved at step {save_freq}" if isinstance(save_freq, int) and save_freq > 0 else f"this run saves none (--save-freq {save_freq if isinstance(save_freq, int) else -1})"
        raise VerlfitError(f"{run_dir} has no complete checkpoint ({run_dir / CHECKPOINTS_DIR / TRACKER} is missing or names no checkpoint; {when}): verl would start again from step 0", fix="start a new run with another --run-dir (or delete this one)")
    known = {f.name for f in dataclasses.fields(TrainSettings)}
    values = {k: v for k, v in record["settings"].items() if k in known}
    settings = TrainSettings(**{**values, "loggers": tuple(values.get("loggers", ("console",))), "resume": True, "run_dir": str(run_dir)})
    recorded_total = record.get("total_steps")
    if recorded_total is None and settings.steps is None:
        recorded_total = total_steps(settings)  # a run sized by --epochs: epochs x batches of its train.parquet, as verl counts it
    if steps is None and isinstance(recorded_total, int) and record["settings"].get("steps") not in (None, recorded_total) and checkpoint < recorded_total:
        steps = recorded_total  # extended by an earlier --resume --steps in a run.json written before it kept the settings too
    if steps is None and isinstance(recorded_total, int) and checkpoint >= recorded_total:
        raise VerlfitError(f"{run_dir} has finished: its newest checkpoint is step {checkpoint} of its {recorded_total} steps, and verl would train one more and stop", fix=f"pass --steps above {checkpoint} to train further, e.g. `verlfit train --resume {shlex.quote(str(run_dir))} --steps {checkpoint + recorded_total}`", exit_code=2)
    changes = ["trainer.resume_mode=auto", f"trainer.default_local_dir={quote_value(str(run_dir / 'checkpoints'))}"]
    if steps is not None:
        if steps <= checkpoint:
            if isinstance(recorded_total, int) and checkpoint >= recorded_total:  # finished: without --steps it is refused too
                fix = f"pass --steps above {checkpoint} (the run's new total; it has finished its {recorded_total} steps), e.g. `verlfit train --resume {shlex.quote(str(run_dir))} --steps {checkpoint + recorded_total}`"
            else:
                fix = f"pass --steps above {checkpoint} (the run's new total), or leave it out to finish the run's own " + (f"{recorded_total} steps" if isinstance(recorded_total, int) else "steps")
            raise VerlfitError(f"--steps {steps} with --resume: the newest checkpoint of {run_dir} is already at step {checkpoint}", fix=fix, exit_code=2)
        changes += [f"trainer.total_training_steps={steps}", f"trainer.total_epochs={steps}"]
    if keep_checkpoints is not None:
        changes += keep_checkpoints_overrides(keep_checkpoints)
    overrides = merge_overrides(record["overrides"] + changes)
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides, hydra_run_dir_override(run_dir)]
    environment = dict(record["environment"])
    if "TENSORBOARD_DIR" in environment:
        environment["TENSORBOARD_DIR"] = str(run_dir / "tensorboard")
    if steps is not None:
        settings.steps = steps
    if keep_checkpoints is not None:
        settings.keep_checkpoints = keep_checkpoints
    return LaunchPlan(settings, record["profile"], record["gpu"], environment, overrides, command, [f"resuming from the checkpoint of step {checkpoint}"])


def record_resume(run_dir: Path, plan: LaunchPlan) -> None:
    """Note a resume in ``run.json`` (atomically): this process's pid, the time, and what the resume changed.

    ``--steps`` and ``--keep-checkpoints`` given with ``--resume`` become the run's own settings and overrides, so
    a later ``--resume`` without them keeps the extended total instead of going back to the first one.
    """
    record = load_run(run_dir)
    record["pid"] = os.getpid()
    if plan.settings.steps is not None:
        record["total_steps"] = plan.settings.steps
        record["settings"]["steps"] = plan.settings.steps
    record["settings"]["keep_checkpoints"] = plan.settings.keep_checkpoints
    record["overrides"] = list(plan.overrides)
    record["command"] = list(plan.command)
    record.setdefault("resumed", []).append(time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    _write_atomic(Path(run_dir) / RUN_FILE, json.dumps(record, indent=2) + "\n")


def training_rows(settings: TrainSettings) -> int | None:
    """Rows (prompts) of ``settings.data_dir/train.parquet`` from its metadata, or None when it cannot be read."""
    try:
        import pyarrow.parquet as pq

        return pq.ParquetFile(Path(settings.data_dir) / "train.parquet").metadata.num_rows
    except (OSError, ImportError):
        return None


def total_steps(settings: TrainSettings) -> int | None:
    """Training steps the run will take: ``--steps``, else epochs x whole batches in train.parquet (verl's
    dataloader drops the last partial batch, ``drop_last=True``, ``ray_trainer.py:507``)."""
    if settings.steps is not None:
        return settings.steps
    rows = training_rows(settings)
    if rows is None:
        return None
    return settings.epochs * (rows // settings.train_batch_size)


def _estimated_step_seconds(plan: LaunchPlan) -> float | None:
    """The time model's step estimate on the run's GPU, for the ETA before the first step (None: no estimate)."""
    from verlfit.plan import time as plan_time
    from verlfit.profiles import load_profile

    try:
        return plan_time.for_train(plan.settings, load_profile(plan.profile_name), plan.gpu_description, None, overrides=plan.overrides)[1]
    except VerlfitError:  # a model whose shape cannot be read: the ETA waits for the first step, as before
        return None


def launch(plan: LaunchPlan, run_dir: Path, stream=None, stall_timeout: float | None = None, poll_seconds: float = 5.0) -> int:
    """Run verl, feeding every output line to the progress watcher; return verl's exit status.

    Ctrl-C sends SIGINT to verl's whole process group (verl's driver shuts its local Ray cluster
    down on exit), waits up to 60 s, then SIGTERM, then SIGKILL. Checkpoints are not damaged:
    verl writes ``latest_checkpointed_iteration.txt`` only after a checkpoint is complete.

    verl's output is read by a thread, so the watcher's stall check (:meth:`verlfit.progress.StepWatcher.check_stall`)
    runs every ``poll_seconds`` even when verl prints nothing. With ``stall_timeout`` (``--stall-timeout``, seconds)
    a stall stops verl the way Ctrl-C does, ``run.json`` records ``outcome`` ``{"status": "stalled", ...}`` and the
    status is :data:`STALLED_STATUS`. Checkpoints beyond ``--keep-checkpoints`` are removed before verl starts, each
    time verl's marker names a new step and when verl exits (:class:`verlfit.checkpoints.CheckpointKeeper`: verl prunes
    only its own session's saves, and leaves their ``data.pt``). A resumed run (``plan.settings.resume``) first drops the records after its
    checkpoint from ``metrics.jsonl``: verl trains those steps again (:func:`verlfit.metrics.drop_after_checkpoint`).

    When verl fails, the diagnosis (:func:`report_failure`) reads the watcher's in-memory copy of this session's last
    lines, so it works when ``train.log`` could not be written (a full disk: the watcher says so and goes on reading
    verl's output, :mod:`verlfit.progress`); the closing line then names the log as incomplete. An unexpected error in
    verlfit itself stops verl's process group before its traceback, so verl is never left running unwatched.
    """
    import queue
    import threading

    from verlfit.progress import StepWatcher

    stream = stream or sys.stdout
    # VERLFIT_CONSOLE_FULL_PRECISION: patch 0008 prints exact metric values, so metrics.jsonl keeps them
    environment = {**os.environ, **plan.environment, "PYTHONUNBUFFERED": "1", "VERLFIT_CONSOLE_FULL_PRECISION": "1"}
    resume_step = latest_checkpoint(run_dir) if plan.settings.resume else None
    watcher = StepWatcher(run_dir, total_steps(plan.settings), stream=stream, initial_step_seconds=_estimated_step_seconds(plan), resume_step=resume_step, stall_timeout=stall_timeout)
    keeper = CheckpointKeeper(run_dir, plan.settings.keep_checkpoints, watcher.say)
    keeper.check(force=True)  # a resumed run: the checkpoints from before it, which verl will not prune
    process = subprocess.Popen(plan.command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1, start_new_session=True)
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        try:
            for line in process.stdout:
                lines.put(line)
        finally:
            lines.put(None)  # end of output

    threading.Thread(target=read, daemon=True).start()
    try:
        while True:
            try:
                line = lines.get(timeout=poll_seconds)
            except queue.Empty:
                line = ""
            if line is None:
                break
            if line:
                watcher.feed(line)
            watcher.check_stall()
            keeper.check()
            if watcher.stop_requested:
                stall = watcher.stall
                _stop(process, lines, watcher)
                outcome = {"status": "stalled", "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "reason": "stall", "seconds_without_a_step": round(stall.seconds, 1),
                           "limit_seconds": stall.limit, "step": stall.next_step, "phase": stall.phase, "message": stall.message(), "log_line": stall.last_line}
                _record_outcome(run_dir, outcome)
                print(f"verlfit: stopped verl: {stall.message().removesuffix('; stopping verl (--stall-timeout)')}", file=sys.stderr)
                _say_how_to_continue(plan, run_dir)
                return STALLED_STATUS
        status = process.wait()
        if status != 0 and not watcher.verbose:
            print("verlfit: the last lines verl printed:", file=sys.stderr)
            for line in list(watcher.tail_lines)[-40:]:
                print(f"  {line}", file=sys.stderr)
        if status not in (0, 130, -signal.SIGINT):
            report_failure(plan, run_dir, status, log_lines=list(watcher.log_lines), write_error=watcher.log_error or watcher.metrics_error)
            log = f"the full log is {watcher.log_path}" if watcher.log_error is None else f"the log {watcher.log_path} is incomplete (writing it failed: {watcher.log_error})"
            print(f"verlfit: verl exited with status {status}; {log}", file=sys.stderr)
        return status
    except KeyboardInterrupt:
        print("\nverlfit: stopping verl (Ctrl-C again is not needed; waiting up to 60 s)", file=sys.stderr)
        _stop(process, lines, watcher)
        _say_how_to_continue(plan, run_dir)
        return 130
    except Exception:
        print("verlfit: stopping verl after an error in verlfit itself (its traceback follows)", file=sys.stderr)
        _stop(process, lines, None)  # not fed to the watcher: it may be what failed
        raise
    finally:
        keeper.check(force=True)  # the last save (and a Ctrl-C's or failure's) is settled now
        watcher.close()


def _stop(process, lines, watcher) -> None:
    """Stop verl's process group: SIGINT, 60 s, SIGTERM, 30 s, SIGKILL; then feed its last words to the watcher
    (``watcher`` None: they are left unread)."""
    for sig, wait in ((signal.SIGINT, 60), (signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    if watcher is not None:
        _drain(lines, watcher, seconds=10)  # verl's last words go to train.log too


def _say_how_to_continue(plan: LaunchPlan, run_dir: Path) -> None:
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        print(f"verlfit: stopped before the first checkpoint (--save-freq {plan.settings.save_freq}): nothing to resume; start a new run", file=sys.stderr)
    else:
        print(f"verlfit: stopped. Continue from step {checkpoint} with: verlfit train --resume {shlex.quote(str(run_dir))}", file=sys.stderr)


def _record_outcome(run_dir: Path, outcome: dict) -> bool:
    """Set ``outcome`` in ``run_dir/run.json`` (atomically); nothing when there is no run.json. Return whether it was
    recorded: a write that fails (a full disk) is said on stderr, run.json stays as it was and no temporary file is
    left (:func:`_write_atomic`), since the run's failure, already explained, is what the user needs to see."""
    record_path = run_dir / RUN_FILE
    if not record_path.is_file():
        return False
    record = json.loads(record_path.read_text())
    try:
        _write_atomic(record_path, json.dumps({**record, "outcome": outcome}, indent=2) + "\n")
    except OSError as error:
        print(f"verlfit: could not update {record_path} with the outcome: {error}; it is unchanged", file=sys.stderr)
        return False
    return True


def report_failure(plan: LaunchPlan, run_dir: Path, status: int, log_lines: list[str] | None = None, write_error: OSError | None = None) -> dict | None:
    """Say why verl stopped (verlfit.failure) and record it in ``run.json`` as ``outcome``; return that record.

    Reads the last 4000 lines of ``train.log`` unless ``log_lines`` is given. Nothing recognised: the outcome
    still says failed, with verl's exit status and reason None. The run directory is otherwise untouched, except
    that a checkpoint folder newer than verl's marker (a save the failure cut short: verl writes
    ``latest_checkpointed_iteration.txt`` after the save, ``ray_trainer.py:830-835``) is removed after a full disk,
    so the space it held is free again and ``--resume`` starts from the marker's step.

    ``write_error``: verlfit's own write into the run directory that failed during the run (the watcher's
    ``train.log`` or ``metrics.jsonl``). An ``ENOSPC`` there makes the diagnosis a full disk when verl's lines say
    nothing more specific (none recognised, or only dead workers: :func:`verlfit.failure.disk_full_seen_by_verlfit`);
    torch's own save error does not always name ``ENOSPC``. A ``run.json`` that cannot be written is said on stderr
    (:func:`_record_outcome`).
    """
    import shutil

    from verlfit import failure as failures

    if log_lines is None:
        log = run_dir / "train.log"
        log_lines = log.read_text(errors="replace").splitlines()[-4000:] if log.is_file() else []
    found = failures.diagnose(log_lines)
    if write_error is not None and write_error.errno == errno.ENOSPC and (found is None or found.kind == "worker_died"):
        found = failures.disk_full_seen_by_verlfit(log_lines, f"verlfit could not write to {run_dir}: {write_error}")
    outcome = {"status": "failed", "exit_status": status, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "reason": None}
    if found is not None:
        request = None
        try:
            request = _run_request(plan)
        except (VerlfitError, OSError, ValueError) as error:  # the explanation goes on without the planner's figures
            print(f"verlfit: (the planner could not size this run for the explanation: {error})", file=sys.stderr)
        step = latest_checkpoint(run_dir)
        free = path = None
        if found.kind == "disk_full":
            checkpoints = run_dir / CHECKPOINTS_DIR
            for partial in remove_cut_short(run_dir):
                print(f"verlfit: removed {partial}: a checkpoint the full disk cut short (verl had not marked it complete)", file=sys.stderr)
            path = str(checkpoints if checkpoints.is_dir() else run_dir)
            free = shutil.disk_usage(path).free
        message, fix = failures.explain(found, request, run_dir=shlex.quote(str(run_dir)), checkpoint_step=step, disk_free_bytes=free, disk_path=path)
        print(f"verlfit: {message}\n  fix: {fix}", file=sys.stderr)
        outcome.update(reason=found.kind, phase=found.phase, worker_method=found.worker_method, message=message, fix=fix, log_line=found.detail)
    _record_outcome(run_dir, outcome)
    return outcome


def _drain(lines, watcher, seconds: float) -> None:
    """Feed what is left in ``lines`` (launch's queue of verl's output, None at its end) to ``watcher`` for at most
    ``seconds`` (a Ray process that outlives verl's driver can hold the pipe open, so waiting for the end could
    block forever)."""
    import queue

    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            return
        if line is None:
            return
        watcher.feed(line)


def run(args) -> int:
    """Entry point of ``verlfit train`` (see the module docstring for the flow)."""
    if args.resume is not None:
        if not args.resume.strip():
            raise VerlfitError("--resume was given an empty path", fix="pass the run directory to continue, e.g. `verlfit train --resume runs/ppo-p40-20261129-143000`", exit_code=2)
        given = {name: getattr(args, name, default) for name, default in _DEFAULTS.items() if name not in _RESUMABLE}
        given["overrides"] = user_overrides(given.get("overrides") or [])  # a bare `--` changes nothing
        # a True/False against a None default (--gradient-checkpointing / --no-gradient-checkpointing) is a change too
        differs = {name for name, value in given.items() if (value != _DEFAULTS[name] if isinstance(value, bool) else (value or None) != (_DEFAULTS[name] or None))}
        labels = {"overrides": "overrides after --", "gradient_checkpointing": "--gradient-checkpointing/--no-gradient-checkpointing"}
        changed = sorted(labels.get(name, f"--{name.replace('_', '-')}") for name in differs)
        if changed:
            raise VerlfitError(f"--resume continues a run with its recorded settings; {', '.join(changed)} cannot be given with it", fix=f"resume with only {', '.join(_RESUMABLE_OPTIONS.values())}; or start a new run", exit_code=2)
        plan = resume_plan(Path(args.resume), steps=args.steps, keep_checkpoints=args.keep_checkpoints)
        run_dir = Path(plan.settings.run_dir)
        if args.dry_run:
            doomed = checkpoints_to_prune(run_dir / CHECKPOINTS_DIR, plan.settings.keep_checkpoints)
            if doomed:  # what the real resume's first check removes (CheckpointKeeper in launch), said in the rehearsal
                plan.notes.append(f"the resume would first remove {', '.join(f'global_step_{step}' for step in doomed)} "
                                  f"(--keep-checkpoints {plan.settings.keep_checkpoints}; verl keeps only its own session's saves, so verlfit prunes the rest)")
            print(describe(plan, args.stall_timeout))
            return 0
        record_resume(run_dir, plan)
        warning = checkpoint_space_warning(plan, resumed_from=latest_checkpoint(run_dir), resume=True)
        if warning:
            print(f"verlfit: {warning}")
        return launch(plan, run_dir, stall_timeout=args.stall_timeout)
    plan = prepare_launch(args)
    if args.dry_run:
        if Path(plan.settings.run_dir).exists():
            plan.notes.append(f"{plan.settings.run_dir} exists: a real run would refuse it (use --resume, or another --run-dir)")
        from verlfit.doctor import missing_engine_packages

        missing = missing_engine_packages(plan.settings.rollout, plan.settings.attention)
        if missing and not args.skip_checks:
            # the engines check a real launch makes (verlfit doctor's), said here so a rehearsal does not hide it
            plan.notes.append(f"this Python has no {' and no '.join(package for package, _, _ in missing)}: a real run would refuse it "
                              f"(FAIL engines; {', '.join(option for _, _, option in missing)}, or the verlfit:a10 image)")
        if (Path(plan.settings.data_dir) / "train.parquet").is_file():
            # the refusal a real launch makes, as the dry run's failure (exit 2): no plan verdict for a run that cannot start
            check_data_size(plan.settings)
        print(describe(plan, args.stall_timeout))
        return 0
    if not args.skip_checks:
        run_blocking_checks(plan)
    ensure_data(plan.settings)
    check_data_size(plan.settings)
    config_yaml = None
    if not args.no_validate:
        from omegaconf import OmegaConf

        config_yaml = OmegaConf.to_yaml(validate_overrides(plan.overrides))
    warning = checkpoint_space_warning(plan)
    if warning:
        plan.notes.append(warning)
    for note in plan.notes:
        print(f"verlfit: {note}")
    run_dir = create_run_directory(plan, config_yaml)
    print(f"verlfit: run directory {run_dir}")
    return launch(plan, run_dir, stall_timeout=args.stall_timeout)


def checkpoint_space_warning(plan: LaunchPlan, resumed_from: int | None = None, disk_usage=None, resume: bool = False) -> str | None:
    """A pre-launch warning when the run directory's file system cannot hold the checkpoints this run keeps at once;
    None when it can, when the run saves none, or when the model's shape cannot be read.

    One checkpoint is :func:`verlfit.failure.checkpoint_bytes` of the run's plan request; the run holds
    :func:`verlfit.doctor.checkpoints_held` of them (``--keep-checkpoints`` K: K at the peak, since verl deletes the
    oldest before writing the next; never more than the saves this session makes: one every ``--save-freq`` steps
    and one at the last step, ``ray_trainer.py:1158-1160``). ``resumed_from``: the checkpoint step a resume
    continues from (the saves counted start after it; the checkpoints already there are pruned by verlfit as new ones
    complete, so counting K more is generous: a resumed run holds at most K + 1 at once);
    ``resume``: a ``--resume`` (its fix then names only what a resume can change: :func:`verlfit.doctor.checkpoint_space`).
    Always a WARN, even where ``verlfit doctor`` says FAIL (not even one fits): the run launches after it.
    Text: ``"WARN disk: 30.0 GiB free at /runs; this run holds 2 checkpoints of 11.1 GiB at once (22.2 GiB) ...;
    not blocking: the run starts anyway (fix: ...)"``.
    """
    from verlfit import doctor
    from verlfit.failure import checkpoint_bytes

    settings = plan.settings
    if settings.save_freq <= 0:
        return None
    try:
        one = checkpoint_bytes(_run_request(plan))
    except (VerlfitError, OSError, ValueError):
        return None
    total, start = total_steps(settings), resumed_from or 0
    saves = None if total is None else max(0, total // settings.save_freq - start // settings.save_freq) + (1 if total % settings.save_freq and total > start else 0)
    if saves == 0:
        return None
    result = doctor.checkpoint_space(settings.run_dir, one, doctor.checkpoints_held(settings.keep_checkpoints, saves), disk_usage or shutil.disk_usage, resume=resume)
    if result.status == doctor.PASS:
        return None
    # WARN whatever the doctor's verdict: the run launches after it (doctor's FAIL means blocking; this check is not)
    return f"WARN disk: {result.message}; not blocking: the run starts anyway (fix: {result.fix})"


def _run_request(plan: LaunchPlan):
    """The planner's :class:`verlfit.plan.PlanRequest` of a launch plan, sized for its memory limit (else its card's).

    Raises:
        VerlfitError: the model's shape cannot be read; ValueError: a malformed memory limit.
    """
    from verlfit.plan import request_from_settings

    profile = load_profile(plan.profile_name)
    limit = plan.environment.get(MEMORY_LIMIT_VARIABLE) or os.environ.get(MEMORY_LIMIT_VARIABLE)
    memory = int(float(limit) * 1024**3) if limit else int(profile.gpu_memory_gib * 1024**3)
    return request_from_settings(plan.settings, profile, memory)


def run_blocking_checks(plan: LaunchPlan) -> None:
    """Run the doctor's fast blocking checks (:func:`verlfit.doctor.blocking_checks`: among them the engines check of
    the plan's rollout and attention, after ``--rollout`` / ``--attention``); raise on any FAIL so a hopeless launch
    stops in seconds."""
    from verlfit.doctor import blocking_checks

    settings = plan.settings
    failures = blocking_checks(profile_name=plan.profile_name, data_dir=settings.data_dir, model=settings.model, environment=plan.environment, rollout=settings.rollout, attention=settings.attention)
    if failures:
        raise VerlfitError("pre-flight checks failed:\n" + "\n".join(f"  FAIL {f.name}: {f.message}" + (f"\n       fix: {f.fix}" if f.fix else "") for f in failures), fix="run `verlfit doctor` for the full report, or --skip-checks to launch anyway")


def check_data_size(settings: TrainSettings) -> None:
    """Refuse a training set smaller than one batch (verl asserts "Train dataloader is empty!" after Ray starts).

    Raises:
        VerlfitError: naming the file, its row count and the batch size.
    """
    import pyarrow.parquet as pq

    path = Path(settings.data_dir) / "train.parquet"
    rows = pq.ParquetFile(path).metadata.num_rows
    if rows < settings.train_batch_size:
        raise VerlfitError(f"{path} has {rows} rows, fewer than one batch of {settings.train_batch_size} prompts", fix=f"use --batch-size {rows} or less, or more data", exit_code=2)


def ensure_data(settings: TrainSettings) -> None:
    """Prepare GSM8K into ``settings.data_dir`` when its parquet files are missing: from the raw GSM8K files of
    ``--data`` when it holds some (``settings.data_dir`` is then ``--data/verl``, :func:`verlfit.gsm8k.training_data`),
    else from the hub."""
    data = Path(settings.data_dir)
    if gsm8k.is_prepared(data):
        return
    _, source = gsm8k.training_data(data)
    print(f"verlfit: {data} has no train.parquet/test.parquet: preparing GSM8K first, from " + (f"the raw files in {source}" if source is not None else "the hub"))
    gsm8k.prepare(source=source, output_dir=data, tokenizer=settings.model, max_prompt_length=settings.max_prompt_length)
