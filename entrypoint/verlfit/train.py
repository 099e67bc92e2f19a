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
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from verlfit.errors import VerlfitError
from verlfit.metrics import logger_overrides
from verlfit.overrides import TrainSettings, build_overrides, split_override, validate_overrides
from verlfit.profiles import PROFILE_NAMES, load_profile, resolve_environment, select_profile

MEMORY_LIMIT_VARIABLE = "VERLFIT_GPU_MEMORY_LIMIT_GIB"
RUN_FILE = "run.json"


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help="run verl PPO (or GRPO) on GSM8K with the profile's settings",
        description=(
            "Build, validate and launch `python -m verl.trainer.main_ppo` for this GPU. Every override "
            "is checked against the installed verl's ppo_trainer.yaml before Ray starts. Arguments after "
            "`--` are extra verl overrides (key=value; they win over verlfit's)."
        ),
        epilog=(
            "examples:\n"
            "  $ verlfit train --profile p40 --dry-run\n"
            "  $ verlfit train --emulate p40 --steps 50            # P40 code paths + 22.5 GiB per worker on a bigger GPU\n"
            "  $ verlfit train --algo grpo --steps 10 -- actor_rollout_ref.actor.optim.lr=5e-6\n"
            "  $ verlfit train --resume runs/ppo-p40-20261129-143000\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--profile", default=os.environ.get("VERLFIT_PROFILE", "auto"), choices=(*PROFILE_NAMES, "auto"), help="hardware profile (default: $VERLFIT_PROFILE, else auto by compute capability)")
    parser.add_argument("--emulate", choices=PROFILE_NAMES, help="run that profile's code paths and cap each worker at its card's usable memory (p40: 22.5 GiB), to rehearse on a bigger GPU")
    parser.add_argument("--gpu-memory-limit", type=float, metavar="GIB", help=f"cap each worker's GPU memory in GiB (sets {MEMORY_LIMIT_VARIABLE}; applied with torch.cuda.set_per_process_memory_fraction by the patched verl)")
    parser.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct", help="HF model id or local directory (default: %(default)s)")
    parser.add_argument("--data", default=os.environ.get("VERLFIT_DATA_DIR", "data/gsm8k"), help="directory with train.parquet and test.parquet; prepared from the hub first if missing (default: %(default)s)")
    parser.add_argument("--algo", default="ppo", choices=("ppo", "grpo"), help="ppo: GAE with a critic; grpo: no critic, --samples responses per prompt, KL loss (default: ppo)")
    parser.add_argument("--steps", type=int, help="total training steps (default: --epochs passes over the data)")
    parser.add_argument("--epochs", type=int, default=1, help="passes over the training data when --steps is not given (default: 1)")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs per node (default: 1)")
    parser.add_argument("--batch-size", type=int, default=32, help="prompts per step (data.train_batch_size, default: 32)")
    parser.add_argument("--mini-batch-size", type=int, help="prompts per PPO update (default: half the batch)")
    parser.add_argument("--micro-batch-size", type=int, help="responses per forward/backward on each GPU for actor and critic (default: chosen by the planner)")
    parser.add_argument("--samples", type=int, default=4, help="GRPO responses per prompt (default: 4)")
    parser.add_argument("--max-prompt-length", type=int, default=512, help="tokens; longer prompts are dropped when data is prepared (default: 512)")
    parser.add_argument("--max-response-length", type=int, default=256, help="tokens (default: 256)")
    parser.add_argument("--actor-lr", type=float, default=1e-6, help="actor learning rate (default: 1e-6)")
    parser.add_argument("--critic-lr", type=float, default=1e-5, help="critic learning rate (default: 1e-5)")
    parser.add_argument("--save-freq", type=int, default=25, help="checkpoint every N steps (default: 25; -1 never)")
    parser.add_argument("--test-freq", type=int, default=25, help="validate every N steps (default: 25; -1 never)")
    parser.add_argument("--no-validate-before-train", action="store_true", help="skip verl's validation at step 0")
    parser.add_argument("--plan", choices=("auto", "off"), default="auto", help="auto: the planner picks micro-batches, gradient checkpointing and offload to fit the card; off: keep your numbers (default: auto)")
    parser.add_argument("--offload", choices=("none", "optimizer", "all"), help="FSDP offload for actor and critic (default: the planner decides; none with --plan off)")
    parser.add_argument("--no-gradient-checkpointing", action="store_true", help="keep all activations (faster, more memory)")
    parser.add_argument("--tensorboard", action="store_true", help="also log to TensorBoard under RUN_DIR/tensorboard")
    parser.add_argument("--run-dir", help="run directory (default: runs/<algo>-<profile>-<time>)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped run from its newest checkpoint")
    parser.add_argument("--dry-run", action="store_true", help="print the command, environment and resolved values, then exit (no GPU needed with --profile p40|a10)")
    parser.add_argument("--skip-checks", action="store_true", help="do not run the doctor's blocking checks before launch")
    parser.add_argument("--no-validate", action="store_true", help="do not validate overrides against the installed verl (not recommended)")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="after --: extra verl overrides, key=value")
    parser.set_defaults(func=run)
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


def _extra_overrides(raw: list[str]) -> list[str]:
    extras = raw[1:] if raw and raw[0] == "--" else list(raw)
    for override in extras:
        split_override(override)  # raises a clear error for anything that is not key=value
    return extras


def _detect_gpu(need: bool):
    """Return the first visible GPU, or None when none is visible and ``need`` is False."""
    from verlfit.gpu import query_gpus

    report = query_gpus()
    if report.error:
        if need:
            raise VerlfitError(report.error, fix="run `verlfit doctor`; for a dry run pass --profile p40 or --profile a10")
        return None, report
    return report.gpus[0], report


def settings_from_args(args, run_dir: str) -> TrainSettings:
    """Map parsed ``verlfit train`` arguments onto :class:`TrainSettings` (pure)."""
    mini = args.mini_batch_size or max(args.batch_size // 2, 1)
    settings = TrainSettings(
        model=args.model,
        data_dir=args.data,
        run_dir=run_dir,
        algorithm=args.algo,
        steps=args.steps,
        epochs=args.epochs,
        gpus=args.gpus,
        train_batch_size=args.batch_size,
        ppo_mini_batch_size=mini,
        max_prompt_length=args.max_prompt_length,
        max_response_length=args.max_response_length,
        rollout_n=args.samples,
        actor_lr=args.actor_lr,
        critic_lr=args.critic_lr,
        save_freq=args.save_freq,
        test_freq=args.test_freq,
        validate_before_train=not args.no_validate_before_train,
        gradient_checkpointing=not args.no_gradient_checkpointing,
        loggers=("console", "tensorboard") if args.tensorboard else ("console",),
        extra_overrides=_extra_overrides(args.overrides),
    )
    if args.micro_batch_size:
        settings.actor_micro_batch_size = settings.critic_micro_batch_size = args.micro_batch_size
        settings.log_prob_micro_batch_size = args.micro_batch_size * 2
    if args.offload:
        optimizer = args.offload in ("optimizer", "all")
        param = args.offload == "all"
        settings.actor_optimizer_offload = settings.critic_optimizer_offload = optimizer
        settings.actor_param_offload = settings.critic_param_offload = param
    return settings


def memory_limit_gib(args, profile) -> float | None:
    """The per-worker memory cap in GiB: ``--gpu-memory-limit``, else the emulated card's usable memory."""
    if args.gpu_memory_limit is not None:
        if args.gpu_memory_limit <= 0:
            raise VerlfitError(f"--gpu-memory-limit {args.gpu_memory_limit} must be a positive number of GiB", exit_code=2)
        return args.gpu_memory_limit
    if args.emulate:
        return profile.gpu_memory_gib
    return None


def prepare_launch(args, environ: dict[str, str] | None = None, gpu=None, detect_gpu=True) -> LaunchPlan:
    """Resolve profile, environment, plan and overrides for ``args``; validate; no side effects.

    Raises:
        VerlfitError: profile/GPU mismatch, bad sizes, an allocator setting vLLM rejects, or an
            override that verl does not know.
    """
    environ = dict(os.environ if environ is None else environ)
    notes: list[str] = []
    if args.emulate:
        profile = load_profile(args.emulate)
        if detect_gpu and gpu is None and not args.dry_run:
            gpu, _ = _detect_gpu(need=True)
        notes.append(f"emulating {profile.name}: its code paths on {gpu.name if gpu else 'this machine'}")
    else:
        if detect_gpu and gpu is None and (args.profile == "auto" or not args.dry_run):
            gpu, _ = _detect_gpu(need=args.profile == "auto" or not args.dry_run)
        profile = select_profile(args.profile, gpu)
    environment = resolve_environment(profile, environ)
    limit = memory_limit_gib(args, profile)
    if limit is not None:
        if gpu is not None and limit * 1024**3 > gpu.total_memory_bytes:
            raise VerlfitError(f"--gpu-memory-limit {limit} GiB is more than {gpu.name}'s {gpu.total_memory_bytes / 1024**3:.1f} GiB", exit_code=2)
        environment[MEMORY_LIMIT_VARIABLE] = f"{limit:g}"
    run_dir = args.run_dir or str(Path("runs") / f"{args.algo}-{profile.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    if args.tensorboard:
        environment.update(logger_overrides(True, run_dir)[1])  # TENSORBOARD_DIR under the run directory
    settings = settings_from_args(args, run_dir)
    if args.plan == "auto":
        notes += apply_plan(settings, profile, args, gpu, limit)
    overrides = build_overrides(settings, profile, environment, gpu.compute_capability if gpu and not args.emulate else None)
    if not args.no_validate:
        validate_overrides(overrides)
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides, f"hydra.run.dir={Path(run_dir) / 'hydra'}"]
    gpu_text = f"{gpu.name} (compute capability {gpu.compute_capability_text}, {gpu.total_memory_bytes / 1024**3:.1f} GiB)" if gpu else "none detected"
    return LaunchPlan(settings, profile.name, gpu_text, environment, overrides, command, notes)


def apply_plan(settings: TrainSettings, profile, args, gpu, limit_gib: float | None) -> list[str]:
    """Let the planner choose micro-batches, checkpointing and offload; return what it said.

    The user's explicit ``--micro-batch-size`` / ``--offload`` / ``--no-gradient-checkpointing``
    are kept. Raises VerlfitError when nothing fits, with the smallest change that would.
    """
    try:
        from verlfit import plan as planner

        fit_for_train = planner.fit_for_train
    except (ImportError, AttributeError):
        return ["planner unavailable: keeping the default micro-batches"]
    if limit_gib is not None:
        memory_bytes = int(limit_gib * 1024**3)
    elif gpu is not None:
        memory_bytes = min(gpu.total_memory_bytes, int(profile.gpu_memory_gib * 1024**3)) if args.emulate else gpu.total_memory_bytes
    else:
        memory_bytes = int(profile.gpu_memory_gib * 1024**3)
    return fit_for_train(settings, profile, memory_bytes, keep_micro_batch=bool(args.micro_batch_size), keep_offload=bool(args.offload), keep_checkpointing=args.no_gradient_checkpointing)


def describe(plan: LaunchPlan) -> str:
    """The dry-run text: values that matter, the environment, and the exact command."""
    s = plan.settings
    lines = [
        f"profile: {plan.profile_name}    GPU: {plan.gpu_description}",
        f"algorithm: {s.algorithm}{f' (n={s.rollout_n})' if s.algorithm == 'grpo' else ''}    model: {s.model}",
        f"data: {s.data_dir}    run directory: {s.run_dir}",
        f"steps: {s.steps if s.steps is not None else f'{s.epochs} epoch(s)'}    batch: {s.train_batch_size} prompts, mini-batch {s.ppo_mini_batch_size}",
        f"micro-batches per GPU: actor {s.actor_micro_batch_size}, critic {s.critic_micro_batch_size}, log-prob {s.log_prob_micro_batch_size}, rollout {s.rollout_micro_batch_size or s.train_batch_size} prompts",
        f"lengths: prompt <= {s.max_prompt_length}, response <= {s.max_response_length} tokens",
        f"gradient checkpointing: {s.gradient_checkpointing}    offload: actor params {s.actor_param_offload}, optimizer {s.actor_optimizer_offload}; critic params {s.critic_param_offload}, optimizer {s.critic_optimizer_offload}",
    ]
    lines += [f"note: {note}" for note in plan.notes]
    lines.append("environment:")
    lines += [f"  {key}={value}" for key, value in plan.environment.items()]
    lines.append("command:")
    head = " ".join(shlex.quote(part) for part in plan.command[:3])
    lines.append("  " + " \\\n    ".join([head, *(shlex.quote(part) for part in plan.command[3:])]))
    return "\n".join(lines)


def _write_atomic(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as handle:
        handle.write(text)
        temporary = Path(handle.name)
    os.replace(temporary, path)


def create_run_directory(plan: LaunchPlan, config_yaml: str | None) -> Path:
    """Create the run directory atomically: build it under a hidden temporary name, then rename.

    Raises:
        VerlfitError: when the directory already exists (use --resume) or cannot be created.
    """
    run_dir = Path(plan.settings.run_dir)
    if run_dir.exists():
        raise VerlfitError(f"run directory {run_dir} already exists", fix=f"continue it with `verlfit train --resume {run_dir}`, or pass another --run-dir")
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
        (staging / "command.sh").write_text("#!/usr/bin/env bash\n# The exact verl launch of this run (written by verlfit train).\n" + exports + " \\\n  ".join(shlex.quote(part) for part in plan.command) + "\n")
        if config_yaml is not None:
            (staging / "config.yaml").write_text(config_yaml)
        (staging / "checkpoints").mkdir()
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
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise VerlfitError(f"{run_dir} is not a verlfit run directory (no {RUN_FILE})", fix="pass a directory created by `verlfit train`") from None
    except json.JSONDecodeError as error:
        raise VerlfitError(f"{path} is not valid JSON ({error})") from None
    return record


def resume_plan(run_dir: Path) -> LaunchPlan:
    """The launch plan of a stopped run with ``trainer.resume_mode=auto``."""
    record = load_run(run_dir)
    overrides = [o if not o.startswith("trainer.resume_mode=") else "trainer.resume_mode=auto" for o in record["overrides"]]
    if "trainer.resume_mode=auto" not in overrides:
        overrides.append("trainer.resume_mode=auto")
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides, f"hydra.run.dir={Path(run_dir) / 'hydra'}"]
    settings = TrainSettings(**{**record["settings"], "loggers": tuple(record["settings"]["loggers"]), "resume": True})
    return LaunchPlan(settings, record["profile"], record["gpu"], record["environment"], overrides, command, ["resuming from the newest checkpoint"])


def total_steps(settings: TrainSettings) -> int | None:
    """Training steps the run will take: ``--steps``, else epochs x batches in train.parquet."""
    if settings.steps is not None:
        return settings.steps
    try:
        import pyarrow.parquet as pq

        rows = pq.ParquetFile(Path(settings.data_dir) / "train.parquet").metadata.num_rows
    except (OSError, ImportError):
        return None
    return settings.epochs * (rows // settings.train_batch_size)


def launch(plan: LaunchPlan, run_dir: Path, stream=None) -> int:
    """Run verl, feeding every output line to the progress watcher; return verl's exit status.

    Ctrl-C sends SIGINT to verl's whole process group (verl's driver shuts its local Ray cluster
    down on exit), waits up to 60 s, then SIGTERM, then SIGKILL. Checkpoints are not damaged:
    verl writes ``latest_checkpointed_iteration.txt`` only after a checkpoint is complete.
    """
    from verlfit.progress import StepWatcher

    stream = stream or sys.stdout
    # VERLFIT_CONSOLE_FULL_PRECISION: patch 0008 prints exact metric values, so metrics.jsonl keeps them
    environment = {**os.environ, **plan.environment, "PYTHONUNBUFFERED": "1", "VERLFIT_CONSOLE_FULL_PRECISION": "1"}
    watcher = StepWatcher(run_dir, total_steps(plan.settings), stream=stream)
    process = subprocess.Popen(plan.command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1, start_new_session=True)
    try:
        for line in process.stdout:
            watcher.feed(line)
        status = process.wait()
        if status != 0 and not watcher.verbose:
            print("verlfit: the last lines verl printed:", file=sys.stderr)
            for line in list(watcher.tail_lines)[-40:]:
                print(f"  {line}", file=sys.stderr)
        return status
    except KeyboardInterrupt:
        print("\nverlfit: stopping verl (Ctrl-C again is not needed; waiting up to 60 s)", file=sys.stderr)
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
        _drain(process.stdout, watcher, seconds=10)  # verl's last words go to train.log too
        print(f"verlfit: stopped. Continue with: verlfit train --resume {run_dir}", file=sys.stderr)
        return 130
    finally:
        watcher.close()


def _drain(stream, watcher, seconds: float) -> None:
    """Feed what is left in ``stream`` to ``watcher`` for at most ``seconds`` (a Ray process that
    outlives verl's driver can hold the pipe open, so reading to the end could block forever)."""
    import threading

    def read() -> None:
        for line in stream:
            watcher.feed(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(seconds)


def run(args) -> int:
    """Entry point of ``verlfit train`` (see the module docstring for the flow)."""
    if args.resume:
        run_dir = Path(args.resume)
        plan = resume_plan(run_dir)
        if args.dry_run:
            print(describe(plan))
            return 0
        return launch(plan, run_dir)
    plan = prepare_launch(args)
    if args.dry_run:
        print(describe(plan))
        return 0
    if not args.skip_checks:
        run_blocking_checks(plan)
    ensure_data(plan.settings)
    config_yaml = None
    if not args.no_validate:
        from omegaconf import OmegaConf

        config_yaml = OmegaConf.to_yaml(validate_overrides(plan.overrides))
    for note in plan.notes:
        print(f"verlfit: {note}")
    run_dir = create_run_directory(plan, config_yaml)
    print(f"verlfit: run directory {run_dir}")
    status = launch(plan, run_dir)
    if status not in (0, 130):
        print(f"verlfit: verl exited with status {status}; the full log is {run_dir / 'train.log'}", file=sys.stderr)
    return status


def run_blocking_checks(plan: LaunchPlan) -> None:
    """Run the doctor's fast blocking checks; raise on any FAIL so a hopeless launch stops in seconds."""
    try:
        from verlfit.doctor import blocking_checks
    except ImportError:
        return
    failures = blocking_checks(profile_name=plan.profile_name, data_dir=plan.settings.data_dir, model=plan.settings.model, environment=plan.environment)
    if failures:
        raise VerlfitError("pre-flight checks failed:\n" + "\n".join(f"  FAIL {f.name}: {f.message}" + (f"\n       fix: {f.fix}" if f.fix else "") for f in failures), fix="run `verlfit doctor` for the full report, or --skip-checks to launch anyway")


def ensure_data(settings: TrainSettings) -> None:
    """Prepare GSM8K into ``settings.data_dir`` when its parquet files are missing."""
    from verlfit import gsm8k

    data = Path(settings.data_dir)
    if gsm8k.is_prepared(data):
        return

    print(f"verlfit: {data} has no train.parquet/test.parquet: preparing GSM8K first")
    gsm8k.prepare(source=None, output_dir=data, tokenizer=settings.model, max_prompt_length=settings.max_prompt_length)
