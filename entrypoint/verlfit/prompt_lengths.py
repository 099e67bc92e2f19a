"""The longest prompt of a verl training set, in tokens as verl 0.4.1 counts them: what the planner's prompt columns
are with the trims on (patches 0020-0021 run each micro-batch on its own longest prompt, so no micro-batch of the run
is wider than the data's longest prompt plus the response limit).

verl's ``RLHFDataset`` counts a prompt as ``tokenizer(apply_chat_template(messages, add_generation_prompt=True,
tokenize=False), add_special_tokens=False)`` (``rl_dataset.py``; :func:`verlfit.gsm8k.prompt_length` is the same
count for one prompt) and drops the prompts longer than ``data.max_prompt_length`` (``filter_overlong_prompts``, on
in verlfit's overrides).

Public API: :func:`longest_prompt_length` (pure: a parquet path and a tokenizer in, tokens out);
:func:`measure_for_train` (the I/O edge ``verlfit train`` uses: the model's tokenizer, read only from local files).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Rows measured at most: GSM8K's 7473 take ~2.6 s with a fast tokenizer on a 2-core machine (measured here), so
# 100,000 rows ~35 s. A larger training set is not measured: the planner then counts the prompt limit.
MEASURED_ROWS_LIMIT = 100_000
TOKENIZE_BATCH_ROWS = 4096  # conversations per batched apply_chat_template + tokenizer call


@dataclass(frozen=True)
class PromptMeasurement:
    """What :func:`measure_for_train` found.

    Attributes:
        longest: tokens of the longest prompt at or under the prompt limit (what verl keeps), or None when not measured.
        note: one line for the run's notes: the measured length, or why it was not measured.
    """

    longest: int | None
    note: str


def longest_prompt_length(parquet: str | os.PathLike, tokenizer, prompt_key: str = "prompt", max_prompt_length: int | None = None) -> tuple[int, int]:
    """(tokens of the longest prompt, rows measured) of ``parquet``'s ``prompt_key`` column (chat messages, verl's
    format), counted as verl counts them (module docstring). With ``max_prompt_length``, prompts longer than it are
    left out, as verl's ``filter_overlong_prompts`` drops them.

    Raises:
        KeyError: ``prompt_key`` is not a column of ``parquet`` (naming it).
        OSError, pyarrow.ArrowException: ``parquet`` cannot be read.
        ValueError: a row whose prompt is not a list of chat messages (naming the row); no prompt left to measure (an
            empty file, or every prompt over the limit).
    """
    import pyarrow.parquet as pq

    path = Path(parquet)
    if prompt_key not in pq.read_schema(path).names:
        raise KeyError(f"{path} has no column {prompt_key!r}")
    prompts = pq.read_table(path, columns=[prompt_key]).column(prompt_key).to_pylist()
    for row, messages in enumerate(prompts):
        if not isinstance(messages, list) or not all(isinstance(message, dict) for message in messages):
            raise ValueError(f"{path} row {row}: {prompt_key} is not a list of chat messages (verl's format: [{{'role': 'user', 'content': ...}}])")
    longest = None
    for start in range(0, len(prompts), TOKENIZE_BATCH_ROWS):
        texts = tokenizer.apply_chat_template(prompts[start:start + TOKENIZE_BATCH_ROWS], add_generation_prompt=True, tokenize=False)
        for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
            if (max_prompt_length is None or len(ids) <= max_prompt_length) and (longest is None or len(ids) > longest):
                longest = len(ids)
    if longest is None:
        raise ValueError(f"{path}: no prompt {'at or under ' + str(max_prompt_length) + ' tokens ' if max_prompt_length is not None else ''}to measure")
    return longest, len(prompts)


def measure_for_train(data_dir: str | os.PathLike, model: str, max_prompt_length: int, prompt_key: str = "prompt") -> PromptMeasurement:
    """The longest prompt of ``data_dir/train.parquet`` for ``verlfit train``'s planner, with ``model``'s tokenizer read
    from local files only (a folder, or the Hugging Face cache: nothing is downloaded to plan).

    Never raises for what the run's own checks report (no train.parquet yet, a file pyarrow cannot read, a missing
    column, no local tokenizer): the measurement is then None and the note says why; the planner counts the prompt
    limit (``max_prompt_length``), as without the trims.
    """
    import pyarrow
    import pyarrow.parquet as pq

    limit_note = f"the planner counts the prompt limit, {max_prompt_length} tokens"
    path = Path(data_dir) / "train.parquet"
    if not path.is_file():
        return PromptMeasurement(None, f"prompt lengths not measured: no {path} yet; {limit_note}")
    try:
        rows = pq.ParquetFile(path).metadata.num_rows
    except (OSError, pyarrow.ArrowException) as error:
        return PromptMeasurement(None, f"prompt lengths not measured: {path} does not read as parquet ({error}); {limit_note}")
    if rows > MEASURED_ROWS_LIMIT:
        return PromptMeasurement(None, f"prompt lengths not measured: {rows:,} rows in {path} (verlfit measures up to {MEASURED_ROWS_LIMIT:,}); {limit_note}")
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    except (OSError, ValueError) as error:
        return PromptMeasurement(None, f"prompt lengths not measured: no local tokenizer for {model} ({str(error).splitlines()[0]}); {limit_note}")
    try:
        longest, measured = longest_prompt_length(path, tokenizer, prompt_key, max_prompt_length)
    except (KeyError, ValueError, OSError, pyarrow.ArrowException) as error:
        message = error.args[0] if isinstance(error, KeyError) else str(error)  # str() of a KeyError is its repr
        return PromptMeasurement(None, f"prompt lengths not measured: {message}; {limit_note}")
    return PromptMeasurement(longest, f"longest prompt {longest} tokens of {max_prompt_length} ({measured:,} rows of {path.name}, {model}'s chat template): with the trims (patches 0020-0021) the planner counts {longest} prompt columns")
