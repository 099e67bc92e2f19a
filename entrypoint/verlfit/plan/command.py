"""The ``verlfit plan`` subcommand: its arguments (:func:`register`), their typed form (:func:`plan_options`, the one
place that reads the parsed namespace) and its run (:func:`_run`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from verlfit.arguments import SizingOptions, add_sizing_arguments, memory_gib, typed_options, whole_number
from verlfit.errors import VerlfitError
from verlfit.model_shape import BUILTIN_SHAPES, DEFAULT_MODEL
from verlfit.plan.fit import auto_fit
from verlfit.plan.memory import DEFAULT_MARGIN, predict
from verlfit.plan.render import plan_to_dict, render_table
from verlfit.plan import time as plan_time
from verlfit.plan.request import (
    PlanOptions,
    request_from_options,
    resolve_plan_run,
    sizing_keep,
    time_inputs_for_options,
    time_report,
)
from verlfit.profiles import PROFILE_NAMES


# the sizes `verlfit plan --gpus N` (N > 1) compares at N GPUs and at 1: Qwen2.5 shapes (verlfit.model_shape.BUILTIN_SHAPES)
SIZE_MODELS = ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-3B-Instruct")


def size_rows(request, margin: float = DEFAULT_MARGIN) -> list[dict]:
    """Which model sizes ``request.gpus`` cards open up: for each of :data:`SIZE_MODELS` and each algorithm, the
    auto-fitted (:func:`verlfit.plan.fit.auto_fit`) full-parameter plan at 1 GPU and at ``request.gpus``, with the
    request's card, dtype, rollout, batch and lengths. GRPO takes the request's samples when it is GRPO, else
    :data:`verlfit.arguments.DEFAULT_SAMPLES`; each algorithm its own reference default.

    Returns:
        One dict per (model, algorithm): ``model``, ``algorithm``, ``samples``, and per GPU count (``"1"``,
        ``"<N>"``) ``{"fits": bool, "required_bytes": peak + allocator headroom per GPU, "offload": [pieces]}``.
    """
    import dataclasses

    from verlfit.arguments import DEFAULT_SAMPLES
    from verlfit.model_shape import load_model_shape

    rows = []
    for model in SIZE_MODELS:
        for algorithm in ("ppo", "grpo"):
            same = algorithm == request.algorithm
            samples = 1 if algorithm == "ppo" else (request.rollout_n if same else DEFAULT_SAMPLES)
            row = {"model": model, "algorithm": algorithm, "samples": samples}
            for gpus in (1, request.gpus):
                trial = dataclasses.replace(
                    request,
                    shape=load_model_shape(model),
                    algorithm=algorithm,
                    rollout_n=samples,
                    use_reference=request.use_reference if same else None,
                    gpus=gpus,
                )
                decision = auto_fit(trial, margin=margin)
                chosen = decision.request
                offload = [
                    name.replace("_offload", "").replace("_", " ")
                    for name in (
                        "actor_param_offload",
                        "actor_optimizer_offload",
                        "critic_param_offload",
                        "critic_optimizer_offload",
                    )
                    if getattr(chosen, name)
                ]
                row[str(gpus)] = {
                    "fits": decision.fits,
                    "required_bytes": decision.plan.required_bytes,
                    "offload": offload,
                }
            rows.append(row)
    return rows


def _size_cell(cell: dict) -> str:
    from verlfit.plan.memory import gib

    if not cell["fits"]:
        return f"no: {gib(cell['required_bytes']):.1f} GiB"
    return f"fits {gib(cell['required_bytes']):.1f} GiB" + (
        f", offload {', '.join(cell['offload'])}" if cell["offload"] else ""
    )


def render_sizes(rows: list[dict], gpus: int, usable_bytes: int, console) -> None:
    """Print :func:`size_rows` as a table: one row per model and algorithm, 1 GPU against ``gpus``."""
    from rich.table import Table

    from verlfit.plan.memory import format_gib

    console.print(
        f"model sizes at {gpus} GPUs against 1: full-parameter, this batch and lengths, auto-fitted; predicted peak per GPU + allocator headroom, of {format_gib(usable_bytes)} usable",
        highlight=False,
        soft_wrap=True,
    )
    table = Table()
    for column in ("model", "algorithm", "1 GPU", f"{gpus} GPUs"):
        table.add_column(column)
    for row in rows:
        algorithm = "PPO" if row["algorithm"] == "ppo" else f"GRPO n={row['samples']}"
        table.add_row(
            row["model"].removeprefix("Qwen/").removesuffix("-Instruct"),
            algorithm,
            _size_cell(row["1"]),
            _size_cell(row[str(gpus)]),
        )
    console.print(table)


# printed after every plan made with --plan off, whatever its verdict: the planner did not choose
PLAN_OFF_HINT = "--plan off: micro-batches, gradient checkpointing and offload as given (as verlfit train --plan off runs them); without --plan off the planner chooses them to fit, as verlfit train does by default"


def register(subparsers):
    parser = subparsers.add_parser(
        "plan",
        help="predict peak GPU memory per PPO/GRPO phase, with micro-batches, checkpointing and offload chosen as verlfit train chooses them (--plan off: as given)",
        description=(
            "Predict the peak GPU memory of each phase of a verl 0.4.1 PPO/GRPO step (rollout, old log-prob, "
            "ref log-prob, values, critic update, actor update), split into weights, gradients, optimizer state, "
            "activations, logits and KV cache, and say whether it fits. Offline: reads the model's config.json "
            f"(built in: {', '.join(sorted(BUILTIN_SHAPES))})."
        ),
        epilog=(
            "examples:\n"
            "  $ verlfit plan --emulate p40                      # what verlfit train --emulate p40 will choose\n"
            "  $ verlfit plan --profile p40 --gpu-memory 22.5 --batch-size 64 --micro-batch-size 8 --plan off\n"
            "  $ verlfit plan --emulate p40 --algo grpo --samples 8\n"
            "  $ verlfit plan --emulate t4                       # fp16 with loss scaling on a 16 GB T4\n"
            "  $ verlfit plan --emulate p40 --gpus 2                # per-GPU memory, and which Qwen2.5 sizes 2 cards open up\n"
            "  $ verlfit plan --model ./my-model/config.json --profile a10 --json\n"
            "\nverdicts: fits (peak + headroom within --margin of the usable memory; exit status 0); tight (above the margin,\n"
            "within the card: it can still run out of memory, and verlfit train's planner does not choose it; exit 1);\n"
            "does not fit (exit 1); unsupported (verl 0.4.1 cannot run it at any size; exit 1)"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help="model directory, its config.json, or a hub id found built in or in the local cache (default: %(default)s)",
    )
    parser.add_argument(
        "--profile",
        choices=(*PROFILE_NAMES, "auto"),
        help="hardware profile: dtype, attention and rollout (default: by the visible GPU; p40 without one)",
    )
    parser.add_argument(
        "--emulate",
        choices=PROFILE_NAMES,
        help="plan for that profile's card: its usable memory (p40 22.5, t4 14, v100 30.5 GiB) and datasheet rates",
    )
    parser.add_argument(
        "--gpu-memory",
        type=memory_gib,
        metavar="GIB",
        help="usable memory per GPU in GiB (default: --emulate's, else the detected card less the CUDA context); with --emulate, at most the emulated card's (p40: 22.5)",
    )
    # the options that size the run: the same definitions, defaults and refusals as verlfit train's
    add_sizing_arguments(parser)
    parser.add_argument(
        "--auto-fit",
        dest="plan",
        action="store_const",
        const="auto",
        default="auto",
        help="the same as --plan auto (the default)",
    )
    parser.add_argument(
        "--actor-micro-batch-size",
        type=whole_number,
        help="actor update only (default: --micro-batch-size, else as verlfit train)",
    )
    parser.add_argument(
        "--log-prob-micro-batch-size",
        type=whole_number,
        help="old and ref log-prob only (default: twice --micro-batch-size, else as verlfit train)",
    )
    parser.add_argument(
        "--critic-micro-batch-size",
        type=whole_number,
        help="values and critic update only (default: --micro-batch-size, else as verlfit train)",
    )
    parser.add_argument(
        "--rollout-micro-batch-size",
        type=whole_number,
        help="prompts per HF generate call per GPU (default: the whole batch)",
    )
    for role in ("actor", "critic"):
        for kind in ("param", "optimizer"):
            parser.add_argument(f"--{role}-{kind}-offload", action="store_true", help=f"{role} {kind} offload")
    parser.add_argument(
        "--dtype", choices=("float32", "bfloat16", "float16"), help="compute dtype (default: the profile's)"
    )
    parser.add_argument("--rollout", choices=("hf", "vllm"), help="rollout engine (default: the profile's)")
    parser.add_argument(
        "--vllm-gpu-memory-utilization", type=float, help="vLLM's share of the card (default: the profile's)"
    )
    parser.add_argument(
        "--attention",
        choices=("sdpa", "eager", "flash_attention_2"),
        help="attention implementation (default: the profile's)",
    )
    parser.add_argument(
        "--reference",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a reference model runs (default: grpo yes, ppo no)",
    )
    parser.add_argument(
        "--data",
        metavar="DIR",
        help="your verl-format data folder (train.parquet, test.parquet): its longest prompt is measured with --model's local tokenizer, as verlfit train measures it, and its rows give --dataset-size",
    )
    parser.add_argument(
        "--longest-prompt-length",
        type=whole_number,
        metavar="TOKENS",
        help="the longest prompt of your training data, in tokens with the model's chat template (verlfit train measures it from --data): with the profile's trims (patches 0020-0021) memory is counted for it instead of --max-prompt-length (default: not known, the prompt limit is counted)",
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=DEFAULT_MARGIN,
        help="fraction of usable memory to stay under (default %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    plan_time.add_arguments(parser)
    parser.set_defaults(func=_run)
    return parser


def plan_options(args: argparse.Namespace) -> PlanOptions:
    """``verlfit plan``'s parsed options as :class:`verlfit.plan.request.PlanOptions` (the sizing ones as
    :class:`verlfit.arguments.SizingOptions`): what the rest of the planner reads."""
    parsed = vars(args)
    return typed_options(PlanOptions, parsed, sizing=typed_options(SizingOptions, parsed))


def measure_data(options: PlanOptions, environ=None) -> tuple[PlanOptions, list[str]]:
    """``options`` with ``--data``'s measurements filled in: its longest prompt (:func:`verlfit.prompt_lengths.measure_for_train`
    with ``--model``'s local tokenizer, prompt key ``prompt``) as ``longest_prompt_length`` and the training rows verl
    keeps as ``dataset_size``; and the note lines saying what was measured. Without ``--data``: as given, no note.

    Raises:
        VerlfitError (exit status 2): ``--data`` with ``--longest-prompt-length`` or ``--dataset-size`` (``--data``
            measures them); ``--data`` not a folder, without train.parquet, or failing the data check verlfit train
            runs (:func:`verlfit.checks.data_folder.check_data_folder`: unreadable, not verl's columns, no rows);
            every training prompt longer than ``--max-prompt-length`` (verl would drop them all).
    """
    import os

    if options.data is None:
        return options, []
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
            fix="pass the folder holding train.parquet and test.parquet (verlfit prepare-data or prepare-gsm8k make them)",
            exit_code=2,
        )
    if not (data / "train.parquet").is_file():
        raise VerlfitError(
            f"--data {data} has no train.parquet",
            fix=f"prepare it: verlfit prepare-data --train FILE --output {data} (your own task), or verlfit prepare-gsm8k --output {data}",
            exit_code=2,
        )
    from verlfit.checks.data_folder import check_data_folder
    from verlfit.checks.result import FAIL
    import pyarrow.parquet as pq

    from verlfit.prompt_lengths import measure_for_train

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


def _run(args: argparse.Namespace, nvml=None, out=None) -> int:
    out = out or sys.stdout
    options = plan_options(args)
    if not 0 < options.margin <= 1:
        raise VerlfitError(f"--margin {options.margin} must be in (0, 1]", exit_code=2)
    options, data_notes = measure_data(options)
    run = resolve_plan_run(options, nvml)  # the profile, the card (NVML asked once) and the switches
    request, source = request_from_options(options, run=run)
    keep = sorted(sizing_keep(options.sizing))  # what --plan auto keeps, as in verlfit train
    if (
        any(getattr(options, f"{k}_micro_batch_size") for k in ("actor", "log_prob", "critic"))
        and "micro_batches" not in keep
    ):
        keep = sorted({*keep, "micro_batches"})
    if (
        any(getattr(options, f"{r}_{k}_offload") for r in ("actor", "critic") for k in ("param", "optimizer"))
        and "offload" not in keep
    ):
        keep = sorted({*keep, "offload"})
    decision = None
    if options.sizing.plan == "auto":  # the fastest of what fits, by the estimate for the card the time is estimated on
        decision = auto_fit(
            request, margin=options.margin, keep=keep, card=run.card, inputs=time_inputs_for_options(options, run)
        )
    plan = decision.plan if decision else predict(request, margin=options.margin)
    timing, steps, switches = time_report(options, plan.request, run)
    card_line = run.card_source
    length_notes = data_notes + plan_time.length_notes(options, plan.request, switches)
    if options.steps is not None and options.epochs is not None:  # as verlfit train says it
        length_notes.append(
            f"note: --steps {options.steps} and --epochs {options.epochs}: --steps wins: the run's time is of {options.steps} steps (--epochs counts only without --steps)"
        )
    if options.json:
        data = plan_to_dict(plan)
        data["memory_source"] = source
        if decision:
            speed = [{"configuration": label, "step_s": round(seconds, 2)} for label, seconds in decision.speed]
            data["auto_fit"] = {
                "fits": decision.fits,
                "reasons": list(decision.reasons),
                "suggestion": decision.suggestion,
                "kept": keep,
                "speed": speed,
            }
        data["time"] = {
            **plan_time.estimate_to_dict(timing, steps),
            "card_source": card_line,
            "notes": [line.removeprefix("note: ") for line in length_notes],
        }
        if plan.request.gpus > 1:
            data["sizes"] = size_rows(plan.request, options.margin)
        out.write(json.dumps(data, indent=2) + "\n")
    else:
        from rich.console import Console

        console = Console(file=out, width=120)
        console.print(f"memory: {source}", highlight=False)
        if decision:
            console.print("auto-fit:" if decision.fits else "auto-fit: nothing fits", highlight=False)
            for line in decision.reasons:
                console.print(f"  {line}", highlight=False, soft_wrap=True)
            if decision.suggestion:
                console.print(f"  {decision.suggestion}", highlight=False, soft_wrap=True)
            r = decision.request
            console.print(
                f"  chosen: actor micro-batch {r.actor_micro_batch_size}, log-prob {r.log_prob_micro_batch_size}"
                + (f", critic {r.critic_micro_batch_size}" if r.has_critic else "")
                + (
                    f", rollout {r.rollout_prompts_per_call} prompt{'' if r.rollout_prompts_per_call == 1 else 's'}"
                    if r.rollout == "hf"
                    else ""
                )
                + f"; gradient checkpointing {'on' if r.gradient_checkpointing else 'off'}"
                + (
                    f" (critic {'on' if r.checkpointing_of('critic') else 'off'})"
                    if r.has_critic and r.checkpointing_of("critic") != r.gradient_checkpointing
                    else ""
                )
                + "; offload: "
                + (
                    ", ".join(
                        n.replace("_offload", "").replace("_", " ")
                        for n in (
                            "actor_param_offload",
                            "actor_optimizer_offload",
                            "critic_param_offload",
                            "critic_optimizer_offload",
                        )
                        if getattr(r, n)
                    )
                    or "none"
                )
                + (
                    f"; LoRA base in {r.frozen_base_dtype or 'float32'}"
                    if r.lora_rank > 0 or (r.has_critic and r.lora_rank_of("critic") > 0)
                    else ""
                ),
                highlight=False,
                soft_wrap=True,
            )
        render_table(plan, console)
        console.print(f"card: {card_line}", highlight=False, soft_wrap=True)
        for line in plan_time.estimate_lines(timing, steps, options.dataset_size, plan.request.train_batch_size):
            console.print(line, highlight=False, soft_wrap=True)
        if plan.request.lora_rank_of("actor") > 0:
            console.print(
                plan_time.lora_generation_note(plan.request.rollout, switches.unwrap_fsdp),
                highlight=False,
                soft_wrap=True,
            )
        if plan.request.rollout == "vllm":
            console.print(plan_time.VLLM_NOTE, highlight=False, soft_wrap=True)
        for line in length_notes:
            console.print(line, highlight=False, soft_wrap=True)
        if decision is None:
            console.print(PLAN_OFF_HINT, highlight=False, soft_wrap=True)
        if plan.request.gpus > 1:  # the question --gpus N asks: what N cards open up (12 auto-fits, ~50 ms)
            render_sizes(size_rows(plan.request, options.margin), plan.request.gpus, plan.usable_bytes, console)
    # one meaning for every verdict: 0 only for "fits" (within the margin, what verlfit train's planner accepts);
    # "tight" (above the margin, within the card), "does not fit" and "unsupported" exit 1, with or without auto-fit
    if decision is not None and not decision.fits:
        return 1
    return 0 if plan.verdict == "fits" else 1
