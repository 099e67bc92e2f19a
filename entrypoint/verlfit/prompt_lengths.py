"""The longest prompt of a verl data folder, in tokens as verl 0.4.1 counts them: what the planner's prompt columns
are with the trims on (patches 0020-0021 run each micro-batch on its own longest prompt, so no micro-batch of the run
is wider than the data's longest prompt plus the response limit). The test split counts too: validation generates
from its prompts with the same rollout micro-batches.

verl's ``RLHFDataset`` counts a prompt as ``tokenizer(apply_chat_template(messages, add_generation_prompt=True,
tokenize=False), add_special_tokens=False)`` (``rl_dataset.py``; :func:`verlfit.gsm8k.prompt_length` is the same
count for one prompt) and drops the prompts longer than ``data.max_prompt_length`` (``filter_overlong_prompts``, on
in verlfit's overrides).

Public API: :func:`prompt_lengths` (pure: a parquet path and a tokenizer in, :class:`PromptLengths` out);
:func:`measure_for_train` (the I/O edge ``verlfit train`` uses: the model's tokenizer, read only from local files).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from verlfit.errors import VerlfitError

# Rows measured at most: GSM8K's 7473 take ~2.6 s with a fast tokenizer on a 2-core machine (measured here), so
# 100,000 rows ~35 s. A larger data folder is not measured: the planner then counts the prompt limit.
MEASURED_ROWS_LIMIT = 100_000
TOKENIZE_BATCH_ROWS = 4096  # conversations per batched apply_chat_template + tokenizer call
SPLITS = ("train.parquet", "test.parquet")


@dataclass(frozen=True)
class PromptLengths:
    """Prompt tokens of one parquet file, as verl counts them.

    Attributes:
        rows: rows in the file.
        kept: rows at or under the prompt limit (what ``filter_overlong_prompts`` keeps; all rows without a limit).
        longest: tokens of the longest kept prompt (None when none is kept).
        shortest: tokens of the shortest prompt of the file (None for an empty file).
    """

    rows: int
    kept: int
    longest: int | None
    shortest: int | None


@dataclass(frozen=True)
class PromptMeasurement:
    """What :func:`measure_for_train` found.

    Attributes:
        longest: tokens of the longest prompt verl keeps, over train.parquet and test.parquet, or None when not
        measured.
        note: one line for the run's notes: the measured length, or why it was not measured; empty where there is no
            train.parquet yet (the run's data check says what happens then).
        train: train.parquet's counts (None when not measured).
    """

    longest: int | None
    note: str
    train: PromptLengths | None = None


def prompt_lengths(
    parquet: str | os.PathLike, tokenizer, prompt_key: str = "prompt", max_prompt_length: int | None = None
) -> PromptLengths:
    """The prompt tokens of ``parquet``'s ``prompt_key`` column (chat messages, verl's format), counted as verl counts
    them (module docstring); with ``max_prompt_length``, prompts longer than it are not kept, as verl's
    ``filter_overlong_prompts`` drops them.

    Raises:
        KeyError: ``prompt_key`` is not a column of ``parquet`` (naming it).
        ValueError: a row whose prompt is not a list of chat messages (naming the row).
        OSError, pyarrow.ArrowException: ``parquet`` cannot be read.
    """
    import pyarrow.parquet as pq  # lazy: only where parquet is read or written

    path = Path(parquet)
    if prompt_key not in pq.read_schema(path).names:
        raise KeyError(f"{path} has no column {prompt_key!r}")
    prompts = pq.read_table(path, columns=[prompt_key]).column(prompt_key).to_pylist()
    for row, messages in enumerate(prompts):
        if not isinstance(messages, list) or not all(isinstance(message, dict) for message in messages):
            raise ValueError(
                f"{path} row {row}: {prompt_key} is not a list of chat messages (verl's format: [{{'role': "
                "'user', 'content': ...}])"
            )
    lengths = []
    for start in range(0, len(prompts), TOKENIZE_BATCH_ROWS):
        texts = tokenizer.apply_chat_template(
            prompts[start : start + TOKENIZE_BATCH_ROWS], add_generation_prompt=True, tokenize=False
        )
        lengths += [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    kept = [length for length in lengths if max_prompt_length is None or length <= max_prompt_length]
    return PromptLengths(len(lengths), len(kept), max(kept, default=None), min(lengths, default=None))


def measure_for_train(
    data_dir: str | os.PathLike, model: str, max_prompt_length: int, prompt_key: str = "prompt", trimmed: bool = True
) -> PromptMeasurement:
    """The longest prompt of ``data_dir``'s train.parquet and test.parquet for ``verlfit train``'s planner, with
    ``model``'s tokenizer read from local files only (a folder, or the Hugging Face cache: nothing is downloaded to
    plan).
    ``trimmed``: the run trims padding (patches 0020-0021), so the planner counts the longest prompt; without the
    trims it counts the limit, and the measurement only checks what verl's filter keeps.

    Does not raise for what the run's own checks report (no data yet, a file pyarrow cannot read, a missing column,
    prompts that are not messages, no local tokenizer, no transformers in this Python): the measurement is then None
    and the note says why; the
    planner counts the prompt limit (``max_prompt_length``), as without the trims.

    Raises:
        VerlfitError (exit status 2): every prompt of train.parquet is longer than ``max_prompt_length``, so verl's
            ``filter_overlong_prompts`` would leave the run no data (the fix names the shortest prompt's length).
    """
    import pyarrow  # lazy: only where parquet is read or written
    import pyarrow.parquet as pq  # lazy: only where parquet is read or written

    limit_note = f"the planner counts the prompt limit, {max_prompt_length} tokens"
    paths = [Path(data_dir) / name for name in SPLITS]
    if not paths[0].is_file():
        return PromptMeasurement(None, "")  # no data yet (the run's data check says what it will do): nothing to say
    paths = [path for path in paths if path.is_file()]
    rows = 0
    for path in paths:
        try:
            rows += pq.ParquetFile(path).metadata.num_rows
        except (OSError, pyarrow.ArrowException) as error:
            return PromptMeasurement(
                None,
                f"prompt lengths not measured: {path} does not read as parquet ({str(error).rstrip('.')}); "
                f"{limit_note}",
            )
    if rows > MEASURED_ROWS_LIMIT:
        return PromptMeasurement(
            None,
            f"prompt lengths not measured: {rows:,} rows in {', '.join(path.name for path in paths)} "
            f"(verlfit measures up to {MEASURED_ROWS_LIMIT:,}); {limit_note}",
        )
    try:
        from transformers import AutoTokenizer  # lazy: imports torch; only where a model or tokenizer is loaded
    except ImportError as error:  # the launcher installed alone (pyproject.toml): no tokenizer to count with
        return PromptMeasurement(
            None,
            f"prompt lengths not measured: this Python has no transformers ({error}), which counts tokens with "
            f"{model}'s tokenizer (install it, or run inside the verlfit image); {limit_note}",
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    except (OSError, ValueError) as error:
        return PromptMeasurement(
            None,
            f"prompt lengths not measured: no local tokenizer for {model} ({str(error).splitlines()[0]}); {limit_note}",
        )
    try:
        measured = {path.name: prompt_lengths(path, tokenizer, prompt_key, max_prompt_length) for path in paths}
    except (KeyError, ValueError, OSError, pyarrow.ArrowException) as error:
        message = error.args[0] if isinstance(error, KeyError) else str(error)  # str() of a KeyError is its repr
        return PromptMeasurement(None, f"prompt lengths not measured: {message}; {limit_note}")
    train = measured[SPLITS[0]]
    if not train.rows:
        return PromptMeasurement(None, f"prompt lengths not measured: {paths[0]} has no rows; {limit_note}", train)
    if not train.kept:
        raise VerlfitError(
            f"every prompt of {paths[0]} is longer than --max-prompt-length {max_prompt_length} tokens "
            f"(the shortest has {train.shortest}, "
            "with the model's chat template): verl's filter_overlong_prompts would drop them all and "
            "leave the run no data",
            fix=f"use --max-prompt-length {train.shortest} or more, or shorter prompts",
            exit_code=2,
        )
    longest = max((lengths.longest for lengths in measured.values() if lengths.longest is not None), default=None)
    if longest is None:
        return PromptMeasurement(
            None, f"prompt lengths not measured: no prompt in {', '.join(measured)}; {limit_note}", train
        )
    counts = ", ".join(
        f"{name} {lengths.rows:,} rows"
        + (f" ({lengths.rows - lengths.kept:,} over the limit: verl drops them)" if lengths.kept < lengths.rows else "")
        for name, lengths in measured.items()
    )
    measured_text = f"longest prompt {longest} tokens of {max_prompt_length} ({counts}; {model}'s chat template)"
    if not trimmed:
        return PromptMeasurement(
            None,
            f"{measured_text}: without the trims (patches 0020-0021) every micro-batch is padded to the "
            "limit, which the planner counts",
            train,
        )
    return PromptMeasurement(
        longest,
        f"{measured_text}: with the trims (patches 0020-0021) the planner counts {longest} prompt columns",
        train,
    )


def measure_prompts(settings, run, prompt_key: str = "prompt") -> list[str]:
    """Measure the data of ``verlfit train``'s ``settings`` (:class:`verlfit.run_settings.TrainSettings`) for the
    resolved ``run`` (:class:`verlfit.resolved_run.ResolvedRun`) with :func:`measure_for_train` (the run's
    ``data.prompt_key``: ``prompt_key``) and return the line saying what was measured or why not (nothing without data
    yet). Where the run trims padding (patches 0020-0021: ``run.switches``), ``settings.longest_prompt_length`` is the
    longest prompt; where verl's ``filter_overlong_prompts`` drops some, ``settings.train_prompts_kept`` is what it
    keeps.

    Raises:
        VerlfitError (exit status 2): verl's ``filter_overlong_prompts`` would leave train.parquet no prompt, or fewer
            than one batch (verl asserts "Train dataloader is empty!" after Ray starts).
    """
    trimmed = run.switches.trims_prompts(run.profile.rollout)
    measured = measure_for_train(
        settings.data_dir,
        settings.model,
        settings.max_prompt_length,
        prompt_key,
        trimmed,
    )
    train = measured.train
    if train is not None and train.kept < train.rows:
        if train.kept < settings.train_batch_size:
            path = Path(settings.data_dir) / "train.parquet"
            raise VerlfitError(
                f"{path} has {train.kept} of its {train.rows} prompts within --max-prompt-length "
                f"{settings.max_prompt_length} tokens (verl's filter_overlong_prompts drops the others), "
                f"fewer than one batch of {settings.train_batch_size} prompts",
                fix=f"use --batch-size {train.kept} or less, or a longer --max-prompt-length",
                exit_code=2,
            )
        settings.train_prompts_kept = train.kept  # the steps an epoch takes are counted from these
    settings.longest_prompt_length = measured.longest
    return [measured.note] if measured.note else []
