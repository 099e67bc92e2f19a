"""The ``verlfit train`` subcommand: its options (:func:`register`), their typed form (:func:`train_options`, the one
place that reads the parsed namespace) and :func:`run`, which hands the run, resolved once, to the phases of
:mod:`verlfit.train`: resolve (:func:`verlfit.train.settings.build_launch`, or
:func:`verlfit.train.run_directory.resume_plan` for ``--resume``), then either rehearse
(:func:`verlfit.train.rehearsal.rehearse` and :func:`verlfit.train.describe.describe`, ``--dry-run``) or check and
record
(:func:`verlfit.train.preflight.start_run`) and launch (:func:`verlfit.train.supervise.launch`).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from verlfit.arguments import (
    SizingOptions,
    add_sizing_arguments,
    MAX_LEARNING_RATE,
    checkpoints_to_keep,
    frequency,
    learning_rate,
    memory_gib,
    parse_number,
    path_text,
    typed_options,
    whole_number,
)
from verlfit import gsm8k
from verlfit.errors import VerlfitError
from verlfit.overrides import managed_keys_help, user_overrides
from verlfit.profiles import ATTENTION, PROFILE_NAMES, ROLLOUTS
from verlfit.run_settings import DEFAULT_ACTOR_LR
from verlfit.train.describe import describe
from verlfit.train.rehearsal import rehearse
from verlfit.train.launch_plan import MEMORY_LIMIT_VARIABLE, LaunchPlan
from verlfit.train.preflight import start_run
from verlfit.train.run_directory import check_run_directory, resume_plan
from verlfit.train.settings import TrainOptions, build_launch
from verlfit.train.supervise import launch

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
            "`--` are extra verl overrides (key=value; they win over verlfit's), except the keys verlfit "
            "sets from its own options and checks against the GPU, the profile and the memory plan "
            "(model, algorithm, data files, batch sizes, micro-batches, lengths, rollout engine, n and "
            "vLLM's memory share, attention, dtype, gradient checkpointing, offload, the run directory's "
            "checkpoints and resuming, checkpoint and validation frequency and checkpoints kept, GPUs and "
            "nodes, steps and epochs): those are refused with the option to use, listed at the end."
        ),
        epilog=(
            "examples:\n"
            "  $ verlfit train --profile p40 --dry-run\n"
            "  $ verlfit train --emulate p40 --steps 50            # P40 code paths + 22.5 GiB per worker "
            "on a bigger GPU\n"
            "  $ verlfit train --algo grpo --steps 10 -- actor_rollout_ref.actor.optim.lr=5e-6\n"
            "  $ verlfit train --data data/mytask --reward-function reward.py:compute_score --dry-run   # "
            "your own task\n"
            "  $ verlfit train --resume runs/ppo-p40-20261129-143000\n"
            "\nverl keys verlfit sets itself (refused after --; the option to use instead: keys):\n"
            + managed_keys_help()
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--profile",
        type=str.lower,
        choices=(*PROFILE_NAMES, "auto"),
        help="hardware profile (default: $VERLFIT_PROFILE, else auto by compute capability)",
    )
    parser.add_argument(
        "--emulate",
        type=str.lower,
        choices=PROFILE_NAMES,
        help="run that profile's code paths and cap each worker at its card's usable memory (p40: 22.5 GiB), "
        "to rehearse on a bigger GPU",
    )
    parser.add_argument(
        "--gpu-memory-limit",
        type=memory_gib,
        metavar="GIB",
        help=f"cap each worker's GPU memory in GiB (sets {MEMORY_LIMIT_VARIABLE}; applied with "
        "torch.cuda.set_per_process_memory_fraction by the patched verl); with --emulate, at most the "
        "emulated card's (p40: 22.5)",
    )
    parser.add_argument(
        "--rollout",
        type=str.lower,
        choices=ROLLOUTS,
        help="rollout engine instead of the profile's: hf (transformers generate; any card) or vllm (a10 "
        "profile only; compute capability >= 7.0)",
    )
    parser.add_argument(
        "--attention",
        type=str.lower,
        choices=ATTENTION,
        help="attention instead of the profile's: sdpa, eager, or flash_attention_2 (a10 profile only: needs "
        "bf16 and compute capability >= 8.0)",
    )
    parser.add_argument(
        "--model",
        default="Qwen/Qwen2.5-0.5B-Instruct",
        type=path_text,
        help="HF model id or local directory (default: %(default)s)",
    )
    parser.add_argument(
        "--data",
        default=os.environ.get("VERLFIT_DATA_DIR", gsm8k.DEFAULT_OUTPUT),
        type=path_text,
        help="directory with train.parquet and test.parquet, prepared from the hub first if missing; or with "
        "raw GSM8K files (train/test .jsonl/.parquet with question and answer, or the hub's main/ "
        "folder), prepared from them into DIR/verl (default: %(default)s)",
    )
    parser.add_argument(
        "--reward-function",
        metavar="FILE[:NAME]",
        help=(
            "score responses with the function NAME (default: compute_score) of the Python file FILE, called as verl"
            " 0.4.1 calls it: NAME(data_source, solution_str, ground_truth, extra_info) returning a number or a dict"
            " with 'score' (verl's custom_reward_function.path/.name, which may be given after -- instead). Checked on"
            " every training and test row before launch (each call within 10 s), copied into the run directory and"
            " recorded in run.json (default: verl's scorer for each row's data_source)"
        ),
    )
    add_sizing_arguments(parser)  # --algo --samples --gpus --batch-size ... --plan: shared with verlfit plan
    parser.add_argument(
        "--steps", type=whole_number, help="total training steps (default: --epochs passes over the data)"
    )
    parser.add_argument(
        "--epochs",
        type=whole_number,
        help="passes over the training data when --steps is not given (default: 1; with --steps, --steps wins)",
    )
    parser.add_argument(
        "--nodes",
        type=whole_number,
        default=1,
        help="nodes of a running Ray cluster, --gpus each (trainer.nnodes; default: 1)",
    )
    parser.add_argument(
        "--actor-lr",
        type=learning_rate,
        default=DEFAULT_ACTOR_LR,
        help=f"actor learning rate (default: 1e-6, verl's, set for training every parameter; LoRA's learning checks "
        f"used 1e-4 with --lora-alpha 32; at most {MAX_LEARNING_RATE:g})",
    )
    parser.add_argument(
        "--critic-lr",
        type=learning_rate,
        default=1e-5,
        help=f"critic learning rate (default: 1e-5, verl's; at most {MAX_LEARNING_RATE:g})",
    )
    parser.add_argument(
        "--save-freq",
        type=frequency,
        default=25,
        metavar="N",
        help="checkpoint every N steps and at the last (default: 25; 0 or -1: never, as verl treats any value <= 0)",
    )
    parser.add_argument(
        "--keep-checkpoints",
        type=checkpoints_to_keep,
        metavar="N",
        help="keep the newest N >= 2 checkpoints, deleting older ones (default: 2; 0 keeps all, verl's "
        "default; a 0.5B PPO checkpoint is ~11 GiB). verl prunes only what its own session saved; verlfit "
        "removes the rest (checkpoints from before a --resume, the data.pt verl leaves) as new ones "
        "complete. May be given with --resume",
    )
    parser.add_argument(
        "--test-freq",
        type=frequency,
        default=25,
        metavar="N",
        help="validate every N steps and at the last (default: 25; 0 or -1: never, as verl treats any value <= 0)",
    )
    parser.add_argument("--no-validate-before-train", action="store_true", help="skip verl's validation at step 0")
    parser.add_argument("--tensorboard", action="store_true", help="also log to TensorBoard under RUN_DIR/tensorboard")
    parser.add_argument("--run-dir", type=path_text, help="run directory (default: runs/<algo>-<profile>-<time>)")
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a stopped run from its newest checkpoint, with its recorded settings (only "
        + ", ".join(option.partition(" (")[0] for option in _RESUMABLE_OPTIONS.values())
        + " may be given)",
    )
    parser.add_argument(
        "--stall-timeout",
        type=_stall_seconds,
        metavar="SECONDS",
        help="stop verl (as Ctrl-C does) when no step finishes for SECONDS, and record the run as stalled; "
        "before the first step record, 30 min of startup allowance (Ray start, model loading, the initial "
        "validation) is added, so SECONDS counts from the first record on (default, or 0: never stop; a "
        "stall is only reported, after 5 x the longest step, at least 10 min, + the same startup "
        "allowance, see verlfit.progress). May be given with --resume",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help=(
            "print the command, environment and resolved values, then exit: 0, or 2 when a real launch would refuse the"
            " run's inputs (its data folder, model folder, run directory or reward; the notes say why; what depends on"
            " this machine, such as engines not installed here or GSM8K not reachable from here, is a note). No GPU"
            " needed with --profile p40|a10"
        ),
    )
    parser.add_argument(
        "--skip-checks", action="store_true", help="do not run the doctor's blocking checks before launch"
    )
    parser.add_argument(
        "--no-validate",
        action="store_true",
        help="do not validate overrides against the installed verl (not recommended)",
    )
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="after --: extra verl overrides, key=value")
    parser.set_defaults(func=run)
    _DEFAULTS.update({action.dest: action.default for action in parser._actions})
    return parser


def train_options(args: argparse.Namespace) -> TrainOptions:
    """``verlfit train``'s parsed options as :class:`verlfit.train.settings.TrainOptions` (the sizing ones as
    :class:`verlfit.arguments.SizingOptions`): what the rest of :mod:`verlfit.train` reads."""
    parsed = vars(args)
    return typed_options(TrainOptions, parsed, sizing=typed_options(SizingOptions, parsed))


def prepare_launch(
    args: argparse.Namespace, environ: dict[str, str] | None = None, gpu=None, detect_gpu=True, gpu_report=None
) -> LaunchPlan:
    """The launch plan of parsed ``verlfit train`` options: :func:`verlfit.train.settings.build_launch` of
    :func:`train_options` (``environ``, ``gpu``, ``detect_gpu``, ``gpu_report`` as there); no side effects.

    Raises:
        VerlfitError: what build_launch raises (profile/GPU mismatch, bad sizes, an unknown override, ...).
    """
    return build_launch(train_options(args), environ=environ, gpu=gpu, detect_gpu=detect_gpu, gpu_report=gpu_report)


def refuse_new_run_options(args: argparse.Namespace) -> None:
    """Refuse ``--resume`` with an empty path, or with an option that only a new run takes (one given a value other
    than its default; a bare ``--`` changes nothing).

    Raises:
        VerlfitError (exit status 2): naming the options given and those a resume takes.
    """
    if not args.resume.strip():
        raise VerlfitError(
            "--resume was given an empty path",
            fix="pass the run directory to continue, e.g. `verlfit train --resume runs/ppo-p40-20261129-143000`",
            exit_code=2,
        )
    given = {name: getattr(args, name, default) for name, default in _DEFAULTS.items() if name not in _RESUMABLE}
    given["overrides"] = user_overrides(given.get("overrides") or [])  # a bare `--` changes nothing
    # a True/False against a None default (--gradient-checkpointing / --no-gradient-checkpointing) is a change too
    differs = {
        name
        for name, value in given.items()
        if (value != _DEFAULTS[name] if isinstance(value, bool) else (value or None) != (_DEFAULTS[name] or None))
    }
    labels = {
        "overrides": "overrides after --",
        "gradient_checkpointing": "--gradient-checkpointing/--no-gradient-checkpointing",
    }
    changed = sorted(labels.get(name, f"--{name.replace('_', '-')}") for name in differs)
    if changed:
        raise VerlfitError(
            f"--resume continues a run with its recorded settings; {', '.join(changed)} cannot be given with it",
            fix=f"resume with only {', '.join(_RESUMABLE_OPTIONS.values())}; or start a new run",
            exit_code=2,
        )


def run(args: argparse.Namespace) -> int:
    """Entry point of ``verlfit train``: the options typed once, the run resolved once (a new run's
    :class:`verlfit.train.launch_plan.LaunchPlan`, or the recorded one of ``--resume``), then the dry run's rehearsal
    and text, or the checks, the run directory and the launch. Returns the exit status: 0, verl's, or 130/143 when
    stopped.

    Raises:
        VerlfitError: a refused option or input (exit status 2), a failed pre-flight check, a dry run whose real
            launch would refuse the run's inputs (exit status 2).
    """
    options = train_options(args)
    if options.resume is not None:
        refuse_new_run_options(args)
        plan = resume_plan(Path(options.resume), steps=options.steps, keep_checkpoints=options.keep_checkpoints)
    else:
        if options.run_dir and not options.dry_run:
            # said before the GPU, model and data are looked at
            check_run_directory(options.run_dir, options.model, options.data)
        plan = build_launch(options)
    if options.dry_run:
        refusals = rehearse(plan, skip_checks=options.skip_checks)
        print(describe(plan, options.stall_timeout))
        if refusals:
            raise VerlfitError(
                f"a real launch would refuse this run: {'; '.join(refusals)} (the notes above say why)",
                fix="do what those notes say, then dry-run again",
                exit_code=2,
            )
        return 0
    run_dir = start_run(plan, skip_checks=options.skip_checks)
    return launch(plan, run_dir, stall_timeout=options.stall_timeout)
