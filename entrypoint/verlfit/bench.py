"""Measure this card with two short runs, as one table and a JSON record to share (``verlfit bench``:
:mod:`verlfit.commands.bench` parses the options, prints the table and writes the record).

Steps (no network):

0. the profile each run will use (``--emulate``, ``--profile``, or the GPU's compute capability, as ``verlfit train``
   chooses it) and its rollout and attention after ``--rollout``/``--attention``: the packages they import (vllm for
   the vLLM rollout, flash_attn for FlashAttention-2: :func:`verlfit.checks.engines.missing_engine_packages`) must be
   there, else it stops at once (exit status 1, as train's pre-flight FAIL engines; nothing written) naming them and
   the options that run without them;
1. the doctor's blocking checks for the profile (driver, GPU capability, Triton shared memory, CUDA, verl patched): a
   FAIL stops here with the doctor's fix;
2. a random-weight model of Qwen2.5-0.5B's exact shape (``--shape``: 1.5B, 3B) and a locally trained tokenizer
   with Qwen's chat template (:mod:`verlfit.synthetic_model`), once, under ``--work``;
3. data: ``--gsm8k DIR`` (the real GSM8K as ``train.jsonl``/``test.jsonl``) or generated GSM8K-format problems
   (:mod:`verlfit.synthetic_gsm8k`), prepared as ``verlfit prepare-gsm8k`` does (:func:`verlfit.gsm8k.prepare`);
4. ``--steps`` steps of each configuration (``benchmarks/device_run.sh`` stage_public and stage_tuned, 256/256):
   ``public-recipe``: the public P40 recipe (batch 1, mini-batch 1, micro-batch 1, eager attention, fp32, planner
   off); ``verlfit``: verlfit's own (batch 32, the planner's micro-batches, checkpointing and offload), both
   through ``verlfit train`` on the card as it is (``--emulate`` only when asked), ``--rollout`` passed to both,
   ``--attention`` to the verlfit run only (the public recipe's attention is eager), into
   ``--work``/runs/<start time>-<random>/<configuration> (a new folder per bench);
5. a table: s/step (mean of the steps after the first), seconds per phase, tokens/s (verl's
   ``perf/total_num_tokens`` / ``timing_s/step``), peak allocated (``perf/max_memory_allocated_gb``, GiB), the
   time model's estimate for the same settings on this card
   (``verlfit.plan.train_estimate.train_step_estimate``, the one ``verlfit train`` prints, with the prompt and
   response lengths the run measured) against the measurement, and the card, driver, CUDA, torch, verl and patch
   series; the header line and each run's JSON row name the code paths that ran (profile, rollout, attention,
   dtype: from the run's ``run.json``); written atomically as JSON to ``--output``.

Everything it runs is in the package: it works from an installed verlfit (the images) with no checkout.
"""

from __future__ import annotations

from importlib import metadata
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from verlfit import gsm8k as gsm8k_data, synthetic_gsm8k, synthetic_model
from verlfit.cards import card_for_gpu_name
from verlfit.checks.engines import missing_engine_packages
from verlfit.checks.patches import installed_verl_dir
from verlfit.errors import VerlfitError
from verlfit.gpu import cuda_visible_gpus, query_gpus
from verlfit.metrics import consolidate, read_metrics
from verlfit.model_shape import load_model_shape
from verlfit.output_files import build_new_folder, check_output, enclosing_run, resolved, write_output_file
from verlfit.patch_switches import PatchSwitches
from verlfit.plan.time import MeasuredLengths
from verlfit.plan.train_estimate import train_step_estimate
from verlfit.profiles import load_profile, run_profile
from verlfit.readiness import blocking_checks
from verlfit.run_files import load_run
from verlfit.train.launch_plan import recorded_settings

PUBLIC_RECIPE_ATTENTION = "eager"  # the blog posts' P40 recipe: no FlashAttention-2 below compute capability 8.0
CONFIGS = {
    # device_run.sh stage_public: the blog posts' P40 shape
    "public-recipe": [
        "--plan",
        "off",
        "--attention",
        PUBLIC_RECIPE_ATTENTION,
        "--batch-size",
        "1",
        "--mini-batch-size",
        "1",
        "--micro-batch-size",
        "1",
    ],
    # device_run.sh stage_tuned: verlfit's p40 configuration, the planner's choice at batch 32
    "verlfit": [],
}
MAX_PROMPT_LENGTH = 256  # device_run.sh's 256/256; longer prompts are dropped when the data is prepared
COMMON = [
    "--max-prompt-length",
    str(MAX_PROMPT_LENGTH),
    "--max-response-length",
    "256",
    "--skip-checks",
    "--no-validate-before-train",
    "--test-freq",
    "-1",
    "--save-freq",
    "-1",
]
PHASES = ("gen", "old_log_prob", "ref", "values", "update_critic", "update_actor")
# verlfit.synthetic_model.SHAPES that are real Qwen2.5-Instruct configurations (the others are test shapes)
MODEL_SHAPES = ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b")
# generated problems without --gsm8k: benchmarks/gsm8k_synthetic.py's default sizes (train, test); a few steps at
# batch 32 use 32 per step
SYNTHETIC_SIZES = (5000, 500)


@dataclass(frozen=True)
class BenchOptions:
    """What ``verlfit bench`` was asked to measure (the command checks each before it builds this).

    Attributes:
        configs: the configurations to run, in order, each once (:data:`CONFIGS` keys).
        steps: steps per configuration, at least 2 (the first is warm-up and not timed).
        gsm8k: a folder holding the real GSM8K's ``train.jsonl`` and ``test.jsonl``; None: generated problems.
        shape: the random-weight model's shape (:data:`MODEL_SHAPES`).
        emulate: the card to emulate (a profile name), None for the card as it is.
        profile: the profile when not emulating (a profile name or ``auto``: by the GPU).
        rollout, attention: ``verlfit train --rollout`` / ``--attention`` (None: the profile's); the attention is
            the verlfit run's only.
        work: the folder of the model, the data and the run directories.
        output: the JSON record's path; None: ``verlfit-bench-<card>.json`` in the current directory.
        force: replace an earlier bench record at ``output``.
    """

    configs: tuple[str, ...] = tuple(CONFIGS)
    steps: int = 4
    gsm8k: Path | None = None
    shape: str = "qwen2.5-0.5b"
    emulate: str | None = None
    profile: str = "auto"
    rollout: str | None = None
    attention: str | None = None
    work: Path = Path("~/.cache/verlfit-bench").expanduser()
    output: Path | None = None
    force: bool = False


def run_attention(name: str, options: BenchOptions) -> str | None:
    """The ``--attention`` a configuration passes to ``verlfit train``: the public recipe's own
    (:data:`PUBLIC_RECIPE_ATTENTION`), else bench's ``--attention`` (None: the profile's)."""
    return PUBLIC_RECIPE_ATTENTION if name == "public-recipe" else options.attention


def planned_code_paths(options: BenchOptions, gpu) -> tuple[str, dict[str, dict]] | None:
    """The profile and, per configuration, the code paths ``verlfit train`` will run: (how the profile was chosen,
    {name: {"profile", "rollout", "attention", "dtype"}} for each of ``options.configs``), resolved as train resolves
    them (:func:`verlfit.profiles.run_profile` on ``gpu``, a :class:`verlfit.gpu.GpuInfo` or None, with
    ``--rollout`` and :func:`run_attention`). None for ``--profile auto`` without a visible GPU (the doctor's driver and
    gpu checks then say why).

    Raises:
        VerlfitError: what run_profile raises: a profile the GPU cannot run, vLLM or
            FlashAttention-2 on the p40 profile (exit status 2).
    """

    name = options.emulate or options.profile
    if name == "auto" and gpu is None:
        return None
    chosen_by = (
        f"--emulate {options.emulate}"
        if options.emulate
        else f"--profile {options.profile}"
        if options.profile != "auto"
        else f"chosen for {gpu.name}, compute capability {gpu.compute_capability_text}"
    )
    paths = {}
    for run in options.configs:
        profile, chosen = run_profile(name, gpu, options.rollout, run_attention(run, options))
        paths[run] = {
            "profile": profile.name,
            "rollout": chosen.rollout,
            "attention": chosen.attention,
            "dtype": chosen.dtype,
        }
    return chosen_by, paths


def check_engine_packages(chosen_by: str, paths: dict[str, dict], find_spec=None) -> None:
    """Refuse a bench whose runs need a package this Python cannot import (vllm for the vLLM rollout, flash_attn for
    FlashAttention-2: :func:`verlfit.checks.engines.missing_engine_packages`), before anything is made or launched: verl
    would fail a minute in, deep in a Ray traceback.

    Raises:
        VerlfitError (exit status 1, as ``verlfit train``'s FAIL engines before a launch: this Python lacks a package,
            the options are not wrong): naming the profile, each missing package, what needs it and which runs, and
            the options that run without them (``--rollout hf``, ``--attention sdpa``, or ``--emulate p40``).
    """

    missing: dict[tuple[str, str, str], list[str]] = {}
    for run, path in paths.items():
        for entry in missing_engine_packages(path["rollout"], path["attention"], find_spec=find_spec):
            missing.setdefault(entry, []).append(run)
    if not missing:
        return
    profile = next(iter(paths.values()))["profile"]
    needs = " and ".join(f"{package} for {what} ({', '.join(runs)})" for (package, what, _), runs in missing.items())
    packages = [package for package, _, _ in missing]
    options = " ".join(option for _, _, option in missing)
    raise VerlfitError(
        f"bench: the {profile} profile ({chosen_by}) needs {needs}; this Python ({sys.executable}) has "
        f"{'no ' + packages[0] if len(packages) == 1 else 'neither'}",
        fix=f"pass {options} (this card without {' and '.join(packages)}), or --emulate p40 (the P40's code paths); "
        "or run the bench in the verlfit:a10 image (it has vLLM and flash-attn)",
        exit_code=1,
    )


# --------------------------------------------------------------------------------------
# summarising a recorded run (pure apart from reading the run directory)
# --------------------------------------------------------------------------------------


def summarise_run(run_dir: Path, card_key: str | None) -> dict:
    """One configuration's row from its run directory (``run.json`` + ``metrics.jsonl``)."""

    record = load_run(run_dir)
    steps = [r for r in consolidate(read_metrics(run_dir)) if "timing_s/step" in r]
    if not steps:
        raise VerlfitError(f"{run_dir}: verl recorded no step", fix=f"see {run_dir / 'train.log'}")
    later = steps[1:] or steps
    mean = lambda key: statistics.mean(r[key] for r in later)  # noqa: E731
    step_s = mean("timing_s/step")
    settings = record["settings"]
    row = {
        "run": run_dir.name,
        **ran_code_paths(record),
        "steps_timed": len(later),
        "batch": settings["train_batch_size"],
        "micro_batch": {
            "actor": settings["actor_micro_batch_size"],
            "log_prob": settings["log_prob_micro_batch_size"],
            "critic": settings["critic_micro_batch_size"],
        },
        "step_s": round(step_s, 3),
        "phases_s": {p: round(mean(f"timing_s/{p}"), 3) for p in PHASES if all(f"timing_s/{p}" in r for r in later)},
        "tokens_per_s": round(statistics.mean(r["perf/total_num_tokens"] / r["timing_s/step"] for r in later), 1)
        if all("perf/total_num_tokens" in r for r in later)
        else None,
        "peak_allocated_gib": round(max(r.get("perf/max_memory_allocated_gb", 0.0) for r in steps), 2),
        "estimate_step_s": None,
    }
    if card_key:
        lengths = measured_lengths(later)
        row["estimate_step_s"] = round(_estimate(record, card_key, lengths), 3)
        row["estimate_error"] = round(row["estimate_step_s"] / step_s - 1, 4)
        row["estimate_lengths"] = dataclasses.asdict(lengths) if lengths is not None else None
    return row


def measured_lengths(records: list[dict]):
    """The lengths the timed steps ran with (:class:`verlfit.plan.time.MeasuredLengths`, tokens): the mean over
    ``records`` of verl's ``prompt_length/mean``, ``prompt_length/max``, ``response_length/mean`` and
    ``response_length/max``; None when a record lacks one (the estimate then assumes GSM8K's lengths)."""

    keys = {
        "prompt_mean": "prompt_length/mean",
        "prompt_max": "prompt_length/max",
        "response_mean": "response_length/mean",
        "response_max": "response_length/max",
    }
    if not records or not all(key in r for r in records for key in keys.values()):
        return None
    return MeasuredLengths(**{field: statistics.mean(r[key] for r in records) for field, key in keys.items()})


def ran_code_paths(record: dict) -> dict:
    """The code paths a run ran, from its ``run.json`` record: {"profile", "rollout", "attention", "dtype"}.

    Rollout and attention are the verl overrides it launched with (``actor_rollout_ref.rollout.name``,
    ``actor_rollout_ref.model.attn_implementation``; the last one given wins, as in Hydra), else train's recorded
    settings, else the profile's own; dtype is the profile's (``dtype:`` in its YAML).
    """

    profile = load_profile(record["profile"])
    given = {}
    for override in record.get("overrides", ()):
        key, _, value = override.lstrip("+").partition("=")
        given[key] = value
    settings = record["settings"]
    return {
        "profile": profile.name,
        "rollout": given.get("actor_rollout_ref.rollout.name") or settings.get("rollout") or profile.rollout,
        "attention": given.get("actor_rollout_ref.model.attn_implementation")
        or settings.get("attention")
        or profile.attention,
        "dtype": profile.dtype,
    }


def code_paths_line(runs: list[dict]) -> str:
    """``profile a10, rollout hf, attention eager (public-recipe) / sdpa (verlfit), bfloat16``: each of the runs'
    code paths once when they agree, else per run."""

    def one(key: str) -> str:
        values = [row.get(key) for row in runs]
        if len(set(values)) == 1:
            return str(values[0])
        return " / ".join(f"{value} ({row['run']})" for value, row in zip(values, runs))

    return f"profile {one('profile')}, rollout {one('rollout')}, attention {one('attention')}, {one('dtype')}"


def _estimate(record: dict, card_key: str, lengths=None) -> float:
    """The time model's seconds per step on ``card_key`` for a recorded run (its ``run.json``): the estimate
    ``verlfit train`` prints for the same settings
    (:func:`verlfit.plan.train_estimate.train_step_estimate` of the recorded settings,
    :func:`verlfit.train.launch_plan.recorded_settings`, with the code paths the run ran, :func:`ran_code_paths`,
    and its override list's speed switches and checkpoint frequency), with ``lengths``
    (:class:`verlfit.plan.time.MeasuredLengths`, from the run's metrics: :func:`measured_lengths`) the prompts and
    responses the run actually had instead of GSM8K's (the generated problems' prompts are ~75 tokens). A model
    folder that is not on this machine is estimated as Qwen2.5-0.5B."""

    ran = ran_code_paths(record)
    settings = recorded_settings(record, rollout=ran["rollout"], attention=ran["attention"])
    config = Path(settings.model) / "config.json"
    shape = load_model_shape(str(config) if config.is_file() else "Qwen/Qwen2.5-0.5B-Instruct")
    profile = load_profile(record["profile"])
    switches = PatchSwitches.from_overrides(record.get("overrides", []))  # the run's final override list
    return train_step_estimate(settings, profile, card_key, switches, lengths, shape=shape).step_seconds


def write_json(result: dict, output) -> None:
    """Write ``result`` to the checked file output ``output`` (:func:`verlfit.output_files.check_output` with
    ``kind="file"``) through a temporary file in the same folder and a rename (never half a file).

    Raises:
        VerlfitError: the file cannot be written (:func:`verlfit.output_files.write_error`).
    """

    write_output_file(output, json.dumps(result, indent=2) + "\n")


# --------------------------------------------------------------------------------------
# the machine and the runs (I/O)
# --------------------------------------------------------------------------------------


def machine_facts(nvml=None) -> dict:
    """Card, driver, CUDA, torch, verl and patch series of this machine (what is missing says so)."""

    report = query_gpus(nvml)
    gpu = report.gpus[0] if report.gpus else None
    try:
        import torch  # lazy: seconds to import; only where tensors are made

        torch_text = f"{torch.__version__} (CUDA {torch.version.cuda})"
    except ImportError:
        torch_text = "not installed"
    try:
        verl = metadata.version("verl")
    except metadata.PackageNotFoundError:
        verl = "not installed"
    patches = patch_series(os.environ)
    return {
        "card": gpu.name if gpu else (report.error or "no GPU"),
        "compute_capability": gpu.compute_capability_text if gpu else None,
        "memory_gib": round(gpu.total_memory_bytes / 1024**3, 1) if gpu else None,
        "driver": report.driver_version,
        "cuda": ".".join(map(str, report.cuda_driver_version)) if report.cuda_driver_version else None,
        "torch": torch_text,
        "verl": verl,
        "patches": patches,
    }


def patch_series(environ, verl_dir: Path | None | str = "auto") -> str:
    """The verl patches this machine runs, comma-separated: the installed verl's ``.verlfit-patches`` marker
    (``patches/apply.py`` writes it, ``sha256  name`` a line, ``#`` comments); "not patched" when verl is installed
    without a marker (what runs is stock verl, whatever series a checkout holds); "unknown" without verl.
    ``environ`` is unused (kept for callers).
    """

    verl_dir = installed_verl_dir() if verl_dir == "auto" else verl_dir
    if not verl_dir:
        return "unknown"
    marker = Path(verl_dir) / ".verlfit-patches"
    if marker.is_file():
        names = [
            line.split("  ", 1)[-1].strip()
            for line in marker.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")
        ]
        return ", ".join(names) or "none (empty marker)"
    return "not patched"


def prepare_inputs(
    work: Path,
    shape: str = "qwen2.5-0.5b",
    gsm8k: Path | None = None,
    synthetic_sizes: tuple[int, int] = SYNTHETIC_SIZES,
    log: Callable[[str], None] = print,
) -> tuple[Path, Path]:
    """Make the bench's model and data under ``work`` once; return (model folder, prepared data folder).

    * model: ``work/<shape>-random``, a random-weight ``Qwen2ForCausalLM`` of ``shape`` (a
      :data:`verlfit.synthetic_model.SHAPES` key; the CLI offers :data:`MODEL_SHAPES`) with a locally trained
      tokenizer (:func:`verlfit.synthetic_model.make_model`, seed 0): loadable with
      ``AutoModelForCausalLM``/``AutoTokenizer.from_pretrained``;
    * data: ``work/gsm8k`` prepared from ``gsm8k`` (train.jsonl, test.jsonl), or ``work/gsm8k-synthetic`` prepared
      from ``synthetic_sizes`` (train, test) generated problems written to ``work/synthetic-raw``
      (:func:`verlfit.synthetic_gsm8k.write_splits`, seed 0); verl's ``train.parquet``/``test.parquet``, prompts
      measured with the model's tokenizer and those over :data:`MAX_PROMPT_LENGTH` tokens dropped
      (:func:`verlfit.gsm8k.prepare`).

    What exists already is reused (the model: its config.json; the data: :func:`verlfit.gsm8k.is_prepared`). The
    model and the raw problems are written to a hidden folder beside their final name and renamed when complete,
    so an interrupted bench leaves nothing a later one takes for whole. No network.

    Raises:
        VerlfitError: a leftover incomplete model or raw-data folder in the way, or what
            :func:`verlfit.gsm8k.prepare` raises (no usable row, an unwritable folder).
    """

    work.mkdir(parents=True, exist_ok=True)
    model = work / f"{shape}-random"
    data = work / ("gsm8k" if gsm8k else "gsm8k-synthetic")
    if not (model / "config.json").is_file():
        log(f"bench: making a random-weight {shape}-shape model and its tokenizer in {model}")
        _make_folder(model, lambda tmp: synthetic_model.make_model(str(tmp), shape=shape, seed=0))
    if not gsm8k_data.is_prepared(data):
        source = gsm8k
        if source is None:
            source = work / "synthetic-raw"
            if not all((source / f"{split}.jsonl").is_file() for split in ("train", "test")):
                n_train, n_test = synthetic_sizes
                log(f"bench: generating {n_train} + {n_test} GSM8K-format problems in {source}")
                _make_folder(
                    source, lambda tmp: synthetic_gsm8k.write_splits(str(tmp), n_train=n_train, n_test=n_test, seed=0)
                )
        log(f"bench: preparing {source} into {data}")
        gsm8k_data.prepare(
            source=str(source), output_dir=str(data), tokenizer=str(model), max_prompt_length=MAX_PROMPT_LENGTH, log=log
        )
    return model, data


def _make_folder(target: Path, make: Callable[[Path], object]) -> None:
    """Run ``make(folder)`` on a fresh hidden folder beside ``target``, then rename it to ``target``
    (:func:`verlfit.output_files.build_new_folder`); on any error nothing is left."""

    if target.exists():
        raise VerlfitError(
            f"{target} exists but is incomplete (an earlier bench stopped while writing it?)",
            fix=f"remove {target} and run the bench again",
        )
    build_new_folder(check_output(target, "verlfit bench", flag="--work", kind="new-folder", force_flag=None), make)


def train_args(name: str, options: BenchOptions, model: Path, data: Path, run_dir: Path) -> list[str]:
    """``verlfit train`` arguments of one configuration: bench's ``--rollout`` for both, its ``--attention`` for the
    verlfit run only (the public recipe passes its own, :data:`PUBLIC_RECIPE_ATTENTION`)."""
    card = ["--emulate", options.emulate] if options.emulate else ["--profile", options.profile]
    engines = (["--rollout", options.rollout] if options.rollout else []) + (
        ["--attention", options.attention] if options.attention and name != "public-recipe" else []
    )
    return [
        "train",
        "--run-dir",
        str(run_dir),
        *card,
        "--model",
        str(model),
        "--data",
        str(data),
        "--steps",
        str(options.steps),
        *CONFIGS[name],
        *engines,
        *COMMON,
    ]


def launch(argv: list[str]) -> int:
    """Run ``python -m verlfit ARGV`` with its progress on this terminal; return its exit status (:func:`run_in_group`:
    a stop while it runs waits for it, then raises KeyboardInterrupt)."""
    return run_in_group([sys.executable, "-m", "verlfit", *argv])


def run_in_group(command: list[str]) -> int:
    """Run ``command`` in this process group and return its exit status.

    A stop reaches the whole group: Ctrl-C at a terminal, and ``docker stop``'s SIGTERM through the images' ``tini -g``.
    The run (``verlfit train``) then stops verl cleanly by itself (up to 60 s + 30 s, :mod:`verlfit.train.supervise`),
    so SIGINT and SIGTERM are only noted here while it runs: this process neither dies under it nor kills it (as
    ``subprocess.run`` would, 0.25 s after a Ctrl-C). Once it has exited, KeyboardInterrupt (``"signal N"``, the first
    signal) is raised, so no further configuration starts. Signal handlers exist on the main thread only; elsewhere the
    signals keep their handlers.

    Raises:
        KeyboardInterrupt: SIGINT or SIGTERM came while the command ran.
        OSError: the command could not be started.
    """
    received: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM) if threading.current_thread() is threading.main_thread() else ()
    previous = {signum: signal.signal(signum, lambda number, frame: received.append(number)) for signum in held}
    try:
        with subprocess.Popen(command) as process:
            status = process.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        raise KeyboardInterrupt(f"signal {received[0]}")
    return status


def run_bench(
    options: BenchOptions,
    nvml=None,
    run: Callable[[list[str]], int] = launch,
    find_spec: Callable | None = None,
    log: Callable[[str], None] = print,
):
    """Measure the card: the checks, the model and data (:func:`prepare_inputs`), each configuration's ``verlfit
    train`` (``run``: :func:`launch`), each run summarised (:func:`summarise_run`). Returns ``(result, output)``: the
    record (``verlfit_bench``, the options, ``machine``: :func:`machine_facts`, ``runs``: one row each) and the checked
    file output it goes to (:func:`verlfit.output_files.check_output`, checked before the runs; write it with
    :func:`write_json`). ``log`` gets each run's command line as it starts.

    Args:
        nvml: passed to :func:`verlfit.gpu.query_gpus` (a fake in tests).
        find_spec: ``importlib.util.find_spec``-like lookup for the engine packages (None: the real one).

    Raises:
        VerlfitError: a package the runs need is missing (:func:`check_engine_packages`), a blocking check FAILs
            (:func:`verlfit.readiness.blocking_checks`: driver, GPU, Triton shared memory, CUDA, patches),
            ``output`` is refused, ``work`` lies inside a run directory (exit status 2), or a run fails.
    """

    # first, what needs only NVML and importlib (milliseconds): the profile's rollout and attention packages
    report = query_gpus(nvml)
    visible = cuda_visible_gpus(report.gpus, os.environ) if not report.error else []
    planned = planned_code_paths(options, visible[0] if visible else None)
    if planned is not None:
        check_engine_packages(*planned, find_spec=find_spec)
    profile = options.emulate or (None if options.profile == "auto" else options.profile)
    # engines: checked above per run (the public recipe's attention is its own), with bench's options in the fix
    failures = [f for f in blocking_checks(profile_name=profile) if f.name not in ("data", "model", "engines")]
    if failures:
        lines = "; ".join(f"{f.name}: {f.message}" for f in failures)
        raise VerlfitError(
            f"this machine cannot run the bench: {lines}",
            fix="; ".join(dict.fromkeys(f.fix for f in failures if f.fix)) or "run verlfit doctor",
        )
    machine = machine_facts(nvml)
    card = card_for_gpu_name(machine["card"])
    work = options.work

    # where the record goes, checked before the runs (minutes): never over a file verlfit did not write
    emulated = "-emulate-" + options.emulate if options.emulate else ""
    given = options.output or Path(f"verlfit-bench-{(card.key if card else 'gpu')}{emulated}.json")
    output = check_output(given, "verlfit bench", kind="file", force=options.force)
    inside = enclosing_run(resolved(work))
    if inside is not None:
        raise VerlfitError(
            f"--work {work} is or lies inside the run directory {inside}: bench writes its model, data and runs there",
            fix="pass --work a folder of its own (default ~/.cache/verlfit-bench)",
            exit_code=2,
        )
    # the tokenizer is trained and used here, then verl's processes are started: without this, tokenizers warns
    # in each child that parallelism was used before the fork (device_run.sh sets the same)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    model, data = prepare_inputs(work, shape=options.shape, gsm8k=options.gsm8k)
    # one folder per bench under work/runs, named by its start time: verlfit train refuses an existing run
    # directory, so a second bench with the same --work must not reuse the first one's
    (work / "runs").mkdir(parents=True, exist_ok=True)
    runs = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=work / "runs"))
    rows = []
    for i, name in enumerate(options.configs, 1):
        run_dir = runs / name
        argv = train_args(name, options, model, data, run_dir)
        log(f"bench: [{i}/{len(options.configs)}] {name}: verlfit {' '.join(argv)}")
        status = run(argv)
        if status != 0:
            raise VerlfitError(
                f"bench: the {name} run failed (verl exited with status {status})", fix=f"see {run_dir / 'train.log'}"
            )
        rows.append(summarise_run(run_dir, card.key if card else None))
    # rollout/attention: the options as given (None: the profile's); each run's row has the code paths it ran
    result = {
        "verlfit_bench": 1,
        "emulate": options.emulate,
        "profile": rows[0]["profile"],
        "rollout": options.rollout,
        "attention": options.attention,
        "steps": options.steps,
        "model": options.shape,
        "data": "gsm8k" if options.gsm8k else "generated",
        "machine": machine,
        "runs": rows,
    }
    return result, output
