"""The user's own question/answer files -> ``train.parquet`` / ``test.parquet`` in verl 0.4.1's schema (``verlfit
prepare-data``: :mod:`verlfit.commands.prepare_data`), the same five columns verl's GSM8K script writes
(:func:`verlfit.gsm8k.features`)::

    data_source  the name the user gives (--data-source): what verl's reward manager dispatches on
    prompt       [{"role": "system", "content": --system-prompt} (when given),
                  {"role": "user", "content": --prompt-template with {question} replaced (default: the question)}]
    ability      --ability (default "custom")
    reward_model {"style": "rule", "ground_truth": the answer column, as text}
    extra_info   {"split": "train"/"test", "index": the row's position in its file, "answer": as ground_truth,
                  "question": the question column}

Input: ``.jsonl`` (one JSON object per line; blank lines skipped), ``.json`` (an array of objects), ``.csv`` (a header
line, then rows), ``.parquet``. The text formats are read with Python's ``json`` and ``csv`` modules line by line, so
a bad row is named by its line number (and no type is inferred across rows: an answer may be ``42`` in one row and
``"x"`` in the next); parquet with pyarrow, rows named by index. A row is bad (named with its file, line or row, and
column; skipped, or fatal with ``--strict``) when its question is missing, not text or blank, or its answer is
missing, blank, or neither text nor a number, or either holds a lone surrogate (JSON's ``\\ud800`` escape without its
pair: not text UTF-8 can write). A line that is not JSON, or not an object, is a bad row too.

Split: ``--test FILE``, or ``--test-fraction F`` of the good rows of ``--train`` chosen by ``random.Random(--seed)``
(at least one row each side). Lengths: with ``--tokenizer`` (the model you train), each prompt is measured as verl's
``RLHFDataset`` measures it (:func:`verlfit.gsm8k.prompt_length`) and, with ``--max-prompt-length N``, prompts over N
tokens are dropped, as ``prepare-gsm8k`` does. Output: as ``prepare-gsm8k`` (a folder built whole beside the output
and switched in with its marker, :func:`verlfit.output_files.write_folder`), under the write policy of
:func:`verlfit.output_files.check_output`: never over files verlfit did not write, an input, a run directory or the
current directory.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from verlfit import gsm8k
from verlfit.errors import VerlfitError, os_error_words
from verlfit.input_files import require_regular_file
from verlfit.output_files import check_output, replaced_text

DEFAULT_ABILITY = "custom"
SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
MAX_BAD_LINES = 20
# a placeholder in --prompt-template: {name}, {0} or {} (str.format's fields); only {question} is filled in
# (str.replace, so other braces stay text)
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*|[0-9]*)\}")
EXACT_INTEGER_LIMIT = 2**53  # float64 holds every integer up to this exactly (IEEE 754: 53-bit significand)
# a UTF-16 surrogate code point: in a Python str only a lone one (JSON's "\ud800" escape without its pair; json joins a
# pair into one character), which no UTF-8 writer (pyarrow's) encodes
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class SourceRow:
    """One row read from a file: where it is (``"train.jsonl line 3"``), its index among the file's rows, and its
    values (a dict, or None for a line that is not a JSON object: ``problem`` says why)."""

    where: str
    index: int
    values: dict | None
    problem: str = ""


@dataclass(frozen=True)
class BadRow:
    """A row that cannot become a verl row: where it is, the column, and why."""

    where: str
    column: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}, column {self.column}: {self.reason}" if self.column else f"{self.where}: {self.reason}"


@dataclass
class PrepareDataResult:
    """What :func:`prepare_data` wrote: folder, paths and rows per split, bad rows, rows dropped per split for
    length, and the prompt length statistics per split (with a tokenizer)."""

    output_dir: Path
    paths: dict[str, Path] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    read: dict[str, int] = field(default_factory=dict)
    bad: list[BadRow] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    lengths: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- reading


def read_rows(path: str | os.PathLike, flag: str = "--train") -> list[SourceRow]:
    """Every row of a ``.jsonl`` / ``.json`` / ``.csv`` / ``.parquet`` file with where it is; ``flag`` names the
    option that gave the file in messages.

    Raises:
        VerlfitError: the path is not a regular file (missing, a folder, a FIFO, a dangling link: said as such,
            :func:`verlfit.input_files.require_regular_file`), has another suffix, is empty or holds no row, or does
            not parse as a whole (a JSON array that does not parse, a parquet file that does not read, a csv without a
            header or with a column named twice).
    """

    path = require_regular_file(
        Path(path), flag, fix="pass the file holding your questions and answers (.jsonl, .json, .csv or .parquet)"
    )
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise VerlfitError(
            f"{path}: cannot read {suffix or 'a file without a suffix'}",
            fix=f"give the file one of the suffixes {', '.join(SUFFIXES)} (and that format)",
            exit_code=2,
        )
    if path.stat().st_size == 0:
        raise VerlfitError(
            f"{flag} {path} is empty (0 bytes)",
            fix="put your rows in it (a question and an answer each), or pass the file that holds them",
            exit_code=2,
        )
    try:
        if suffix == ".jsonl":
            rows = list(_jsonl_rows(path))
        elif suffix == ".json":
            rows = _json_rows(path)
        elif suffix == ".csv":
            rows = list(_csv_rows(path))
        else:
            rows = _parquet_rows(path)
    except UnicodeDecodeError as error:
        compressed = compression_of(path)
        if compressed is not None:
            name, command = compressed
            raise VerlfitError(
                f"{flag} {path} is {name}-compressed (its first bytes are {name}'s), not {suffix[1:]} text",
                fix=f"decompress it first ({command} {path} > {path.stem}.plain{suffix}) and pass that file",
                exit_code=2,
            ) from error
        raise VerlfitError(f"{path} is not UTF-8 text ({error})", fix="save the file as UTF-8", exit_code=2) from error
    except OSError as error:  # a file this user may not read (its mode, or a folder above it), a disk error
        raise VerlfitError(
            f"cannot read {flag} {path}: {os_error_words(error)}",
            fix=f"give your user read access to {path} (or copy it somewhere you can read), then run again",
            exit_code=2,
        ) from error
    if not rows:
        holds = {".csv": "a header line and no row", ".json": "an empty array", ".parquet": "no row"}.get(
            suffix, "blank lines only"
        )
        raise VerlfitError(
            f"{flag} {path} holds {holds}: it is empty of data",
            fix="put your rows in it (a question and an answer each), or pass the file that holds them",
            exit_code=2,
        )
    return rows


def _jsonl_rows(path: Path) -> Iterator[SourceRow]:
    # utf-8-sig: a byte-order mark before the first line (some Windows editors save one) is read as such, not as text
    with open(path, encoding="utf-8-sig") as handle:
        index = 0
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path} line {number}"
            try:
                values = json.loads(line)
            except json.JSONDecodeError as error:
                yield SourceRow(where, index, None, f"not JSON ({error.msg}, column {error.colno})")
            else:
                yield (
                    SourceRow(where, index, values, "")
                    if isinstance(values, dict)
                    else SourceRow(where, index, None, f"a JSON {type(values).__name__}, not an object")
                )
            index += 1


def _json_rows(path: Path) -> list[SourceRow]:
    try:
        content = json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as error:
        raise VerlfitError(
            f"{path} is not JSON: {error.msg} at line {error.lineno}, column {error.colno}",
            fix="a .json file holds one array of objects; for one object per line name it .jsonl",
            exit_code=2,
        ) from error
    if not isinstance(content, list):
        raise VerlfitError(
            f"{path} holds a JSON {type(content).__name__}, not an array of objects",
            fix="a .json file holds one array of objects; for one object per line name it .jsonl",
            exit_code=2,
        )
    return [
        SourceRow(f"{path} item {index}", index, item)
        if isinstance(item, dict)
        else SourceRow(f"{path} item {index}", index, None, f"a JSON {type(item).__name__}, not an object")
        for index, item in enumerate(content)
    ]


def _csv_rows(path: Path) -> Iterator[SourceRow]:
    """The rows of a CSV file under its header (Python's ``csv`` module, which keeps each row's line number). Read as
    ``utf-8-sig``: the byte-order mark Excel puts before "UTF-8 CSV" files is dropped, not read into the first
    column's name. A row with more fields than the header is bad (a comma in an unquoted text shifts every field
    after it); a row with fewer leaves the missing columns empty, as the csv module reads it. The separator is the
    comma, or the semicolon or tab when the header line holds one of those and no comma (Excel writes ``;`` where the
    comma is the decimal mark, e.g. in German). Strict parsing: a quote left open is an error naming its line, not a
    row that swallows the rest of the file."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        header = handle.readline()
        handle.seek(0)  # utf-8-sig drops the byte-order mark again after the rewind
        delimiter = next((mark for mark in (";", "\t") if mark in header and "," not in header), ",")
        reader = csv.DictReader(handle, restkey=_EXTRA_FIELDS, delimiter=delimiter, strict=True)
        yield from _csv_dict_rows(path, reader)


def _csv_dict_rows(path: Path, reader: csv.DictReader) -> Iterator[SourceRow]:
    """The rows of ``reader`` (see :func:`_csv_rows`), each with its line."""
    if reader.fieldnames is None:
        raise VerlfitError(
            f"{path} is empty: a .csv file needs a header line naming its columns",
            fix="add a header line, e.g. question,answer",
            exit_code=2,
        )
    twice = sorted({name for name in reader.fieldnames if reader.fieldnames.count(name) > 1})
    if twice:
        raise VerlfitError(
            f"{path}'s header names the column{'s' if len(twice) > 1 else ''} {', '.join(map(repr, twice))} more"
            f" than once ({','.join(reader.fieldnames)}): the csv module would keep only the last of each",
            fix="give each column its own name in the header line",
            exit_code=2,
        )
    start = reader.line_num + 1
    index = 0
    while True:
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as error:  # the row starting at line `start` never ends well: a quote left open, say
            raise VerlfitError(
                f"{path} line {start}: not valid CSV ({error})",
                fix='close the quote that is left open (a text holding quotes writes each as two: ""), or save the file'
                " again from your spreadsheet as CSV",
                exit_code=2,
            ) from error
        extra = values.pop(_EXTRA_FIELDS, None)
        where = f"{path} line {start}"
        if extra is not None:
            yield SourceRow(
                where,
                index,
                None,
                f"{len(reader.fieldnames) + len(extra)} fields, but the header names {len(reader.fieldnames)}"
                " (quote a text holding a comma)",
            )
        else:
            yield SourceRow(where, index, values)
        start = reader.line_num + 1
        index += 1


_EXTRA_FIELDS = "\0extra fields"  # DictReader's restkey: no header can name it


def _parquet_rows(path: Path) -> list[SourceRow]:
    import pyarrow  # lazy: only where parquet is read or written
    import pyarrow.parquet as pq  # lazy: only where parquet is read or written

    try:
        table = pq.read_table(path)
    except (OSError, pyarrow.ArrowException) as error:
        raise VerlfitError(
            f"{path} does not read as parquet ({error})",
            fix="pass a parquet file, or the data as .jsonl/.json/.csv",
            exit_code=2,
        ) from error
    return [SourceRow(f"{path} row {index}", index, values) for index, values in enumerate(table.to_pylist())]


# --------------------------------------------------------------------------- rows


def answer_text(value: Any) -> str | None:
    """The ground truth as text: a string as is, a whole number as its digits (also a float that holds one exactly,
    as a parquet or pandas column of integers with a null becomes float64: ``3.0`` -> ``"3"``, up to
    :data:`EXACT_INTEGER_LIMIT`), another finite number as Python writes it (``0.5``); None for anything else
    (missing, bool, NaN, a list, an object)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, float) and value.is_integer() and abs(value) <= EXACT_INTEGER_LIMIT:
        return str(int(value))
    return str(value)


def check_row(row: SourceRow, question_column: str, answer_column: str) -> tuple[tuple[str, str] | None, BadRow | None]:
    """``((question, ground_truth), None)`` for a usable row, ``(None, BadRow)`` naming the first bad column."""
    if row.values is None:
        return None, BadRow(row.where, "", row.problem)
    question = row.values.get(question_column)
    if question_column not in row.values:
        return None, BadRow(row.where, question_column, "missing")
    if not isinstance(question, str) or not question.strip():
        return None, BadRow(
            row.where,
            question_column,
            "blank" if isinstance(question, str) or question is None else f"a {type(question).__name__}, not text",
        )
    if answer_column not in row.values:
        return None, BadRow(row.where, answer_column, "missing")
    answer = answer_text(row.values.get(answer_column))
    if answer is None:
        value = row.values.get(answer_column)
        return None, BadRow(
            row.where, answer_column, "blank" if value is None else f"{value!r} is neither text nor a number"
        )
    if not answer.strip():
        return None, BadRow(row.where, answer_column, "blank")
    for column, text in ((question_column, question), (answer_column, answer)):
        surrogate = LONE_SURROGATE.search(text)
        if surrogate:
            return None, BadRow(
                row.where,
                column,
                f"holds the lone surrogate \\u{ord(surrogate.group()):04x} (half of a UTF-16 pair, from a \\u escape):"
                " it is not text and cannot be written",
            )
    return (question, answer), None


def check_columns(path: str | os.PathLike, rows: list[SourceRow], flags: dict[str, str]) -> None:
    """Refuse a column that no row of ``path`` has, once, listing the columns the file has (a CSV's header, else
    the keys of its rows in the order first seen), instead of one bad-row line per row.

    Args:
        path: the file (for the message).
        rows: its rows (:func:`read_rows`).
        flags: option -> the column it names, e.g. ``{"--question-column": "q", "--answer-column": "a"}``.

    Raises:
        VerlfitError: exit status 2, naming the option, the column, the file and its columns.
    """
    seen = list(dict.fromkeys(key for row in rows if row.values is not None for key in row.values))
    if not seen:
        return  # no row parsed: the bad rows say why
    for flag, column in flags.items():
        if column not in seen:
            raise VerlfitError(
                f"{flag} {column}: no row of {path} has that column; its columns are {', '.join(seen)}",
                fix=f"pass {flag} with one of them",
                exit_code=2,
            )


def render_prompt(question: str, system_prompt: str | None = None, template: str | None = None) -> list[dict]:
    """The chat messages of one row: an optional system message, then the user message (``template`` with
    ``{question}`` replaced, or the question itself)."""
    content = question if template is None else template.replace("{question}", question)
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return messages + [{"role": "user", "content": content}]


def make_row(
    split: str,
    index: int,
    question: str,
    answer: str,
    data_source: str,
    ability: str,
    system_prompt: str | None,
    template: str | None,
) -> dict:
    """One verl row (column and field order as verl's GSM8K script writes them, :func:`verlfit.gsm8k.make_row`)."""
    return {
        "data_source": data_source,
        "prompt": render_prompt(question, system_prompt, template),
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


def split_indices(count: int, test_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, test) positions of ``count`` rows: ``round(count * test_fraction)`` test rows (at least 1, at most
    ``count - 1``) drawn by ``random.Random(seed).sample``; both lists in ascending order.

    Raises:
        VerlfitError: fewer than 2 rows, or a fraction outside (0, 1).
    """
    if not 0 < test_fraction < 1:
        raise VerlfitError(
            f"--test-fraction {test_fraction}: must be between 0 and 1 (exclusive)",
            fix="e.g. --test-fraction 0.1",
            exit_code=2,
        )
    if count < 2:
        raise VerlfitError(
            f"{count} good row(s): a train/test split needs at least 2",
            fix="add rows, or pass --test FILE",
            exit_code=2,
        )
    test_count = min(count - 1, max(1, round(count * test_fraction)))
    test = sorted(random.Random(seed).sample(range(count), test_count))
    chosen = set(test)
    return [index for index in range(count) if index not in chosen], test


# --------------------------------------------------------------------------- API


def prepare_data(
    train: str | os.PathLike,
    data_source: str,
    output_dir: str | os.PathLike,
    test: str | os.PathLike | None = None,
    test_fraction: float | None = None,
    seed: int = 0,
    question_column: str = "question",
    answer_column: str = "answer",
    system_prompt: str | None = None,
    prompt_template: str | None = None,
    ability: str = DEFAULT_ABILITY,
    tokenizer: Any = None,
    max_prompt_length: int | None = None,
    strict: bool = False,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> PrepareDataResult:
    """Turn the user's files into verl's ``train.parquet`` / ``test.parquet`` (see the module docstring).

    Args:
        train: the training rows (``.jsonl``/``.json``/``.csv``/``.parquet``).
        data_source: the ``data_source`` of every row (what the reward function or verl's scorer dispatches on).
        output_dir: where the two files go.
        test: the held-out rows; or None with ``test_fraction``.
        test_fraction: the share of ``train``'s good rows held out (with ``seed``).
        seed: the split's random seed.
        question_column, answer_column: the columns holding them.
        system_prompt: a system message put before each question.
        prompt_template: the user message, with ``{question}`` where the question goes.
        ability: verl's ``ability`` column.
        tokenizer: a tokenizer name or path (or a loaded one) to measure prompts with.
        max_prompt_length: with ``tokenizer``: drop prompts over this many tokens.
        strict: a bad row is fatal instead of skipped.
        force: replace what verlfit wrote into ``output_dir`` before (from other inputs or another command); a
            folder holding files verlfit did not write is refused even so.
        log: receives each progress line.

    Raises:
        VerlfitError: exit status 2 for bad arguments, a folder verlfit may not write (before anything is read), an
            unreadable file, bad rows with ``strict``, or a split with no row left; 1 for a write that fails.
    """

    if (test is None) == (test_fraction is None):
        raise VerlfitError(
            "give the held-out rows one way: --test FILE or --test-fraction F",
            fix="e.g. --test test.jsonl, or --test-fraction 0.1 --seed 0",
            exit_code=2,
        )
    if not data_source or not data_source.strip():
        raise VerlfitError(
            "--data-source is empty",
            fix="name your task, e.g. --data-source my/unit-conversion (your reward function receives it)",
            exit_code=2,
        )
    if prompt_template is not None and "{question}" not in prompt_template:
        raise VerlfitError(
            f"--prompt-template {prompt_template!r} has no {{question}}",
            fix="put {question} where the question goes, e.g. --prompt-template 'Convert: {question} Answer after "
            "####.'",
            exit_code=2,
        )
    others = sorted({name for name in PLACEHOLDER.findall(prompt_template or "") if name != "question"})
    if others:
        shown = ", ".join(f"{{{name}}}" for name in others)
        raise VerlfitError(
            f"--prompt-template {prompt_template!r} has {shown}: only {{question}} is filled in, so the model would"
            f" read {shown} as it is"
            + (
                " (and the answer must not be in the prompt: the reward compares the response with it)"
                if "answer" in others
                else ""
            ),
            fix=f"remove {shown} from the template; only {{question}} is replaced",
            exit_code=2,
        )
    if question_column == answer_column:
        raise VerlfitError(
            f"--question-column and --answer-column are both {question_column!r}: the answer would be the question"
            " itself",
            fix="pass --answer-column the column that holds the answers",
            exit_code=2,
        )
    if test is not None and _same_file(train, test):
        raise VerlfitError(
            f"--test {test} is the same file as --train {train}: every test row would also be a training row, so"
            " validation would not measure held-out data",
            fix="pass --test a file of other rows, or --test-fraction F to hold out a share of --train's rows",
            exit_code=2,
        )
    if max_prompt_length is not None and tokenizer is None:
        raise VerlfitError(
            "--max-prompt-length needs --tokenizer: prompt lengths are counted in the model's tokens",
            fix="add --tokenizer with the model you will train (its folder or hub name)",
            exit_code=2,
        )
    if max_prompt_length is not None and max_prompt_length < 1:
        raise VerlfitError(
            f"--max-prompt-length must be at least 1, not {max_prompt_length}",
            fix="give the prompt limit verlfit train will run with, in tokens (its default: 512), or leave it out to "
            "keep every row",
            exit_code=2,
        )
    output_dir = Path(output_dir)
    inputs = [train] + ([test] if test is not None else [])
    output = check_output(output_dir, "verlfit prepare-data", force=force, inputs=inputs)
    name = None
    if tokenizer is not None:
        if isinstance(tokenizer, (str, os.PathLike)):
            name = str(tokenizer)
            tokenizer = gsm8k.load_tokenizer(name)
        else:
            name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
        if not getattr(tokenizer, "chat_template", None):
            raise VerlfitError(
                f"tokenizer {name} has no chat template; verl renders every prompt with it",
                fix="pass the tokenizer of an instruct/chat model",
                exit_code=2,
            )

    result = PrepareDataResult(output_dir=output_dir)
    sources = (
        {"train": read_rows(train, "--train")}
        if test is None
        else {"train": read_rows(train, "--train"), "test": read_rows(test, "--test")}
    )
    for split, source_rows in sources.items():
        check_columns(
            train if split == "train" else test,
            source_rows,
            {"--question-column": question_column, "--answer-column": answer_column},
        )
    good: dict[str, list[tuple[int, str, str]]] = {}
    for split, source_rows in sources.items():
        result.read[split] = len(source_rows)
        good[split] = []
        for row in source_rows:
            values, bad = check_row(row, question_column, answer_column)
            if bad is not None:
                result.bad.append(bad)
            else:
                good[split].append((row.index, *values))
        log(f"read {train if split == 'train' else test}: {len(source_rows)} rows, {len(good[split])} good")
    if result.bad:
        lines = [str(bad) for bad in result.bad[:MAX_BAD_LINES]] + (
            [f"... and {len(result.bad) - MAX_BAD_LINES} more"] if len(result.bad) > MAX_BAD_LINES else []
        )
        if strict:
            raise VerlfitError(
                f"{len(result.bad)} bad row(s) and --strict:\n  " + "\n  ".join(lines),
                fix="fix those rows, or leave out --strict to skip them",
                exit_code=2,
            )
        for line in lines:
            log(f"skipped {line}")
    if test is None:
        if not good["train"]:
            raise VerlfitError(
                f"no good rows in {train} ({result.read['train']} read, {len(result.bad)} bad); nothing written",
                fix=f"check the columns: --question-column {question_column} --answer-column {answer_column}",
                exit_code=2,
            )
        train_at, test_at = split_indices(len(good["train"]), test_fraction, seed)
        good = {"train": [good["train"][i] for i in train_at], "test": [good["train"][i] for i in test_at]}
        log(
            f"split {len(train_at) + len(test_at)} good rows with seed {seed}: {len(train_at)} train, {len(test_at)} "
            "test"
        )

    for line in split_warnings(good, test_given=test is not None):
        log(line)
    rows = {
        split: [
            make_row(split, index, question, answer, data_source, ability, system_prompt, prompt_template)
            for index, question, answer in good[split]
        ]
        for split in ("train", "test")
    }
    if tokenizer is not None:
        for split in ("train", "test"):
            if not rows[split]:
                continue
            lengths = [gsm8k.prompt_length(tokenizer, row["prompt"]) for row in rows[split]]
            stats = gsm8k.length_stats(lengths, max_prompt_length)
            result.lengths[split] = stats
            log(f"{split} prompt tokens ({name}, chat template + generation prompt): {stats.describe()}")
            if max_prompt_length is not None:
                kept = [row for row, length in zip(rows[split], lengths) if length <= max_prompt_length]
                result.dropped[split] = len(rows[split]) - len(kept)
                rows[split] = kept
                log(f"dropped {result.dropped[split]} {split} rows over {max_prompt_length} tokens")
    for split in ("train", "test"):
        if not rows[split]:
            raise VerlfitError(
                f"no {split} rows left to write ({len(good[split])} good, {result.dropped.get(split, 0)} over the "
                f"prompt limit); nothing written to {output_dir}",
                fix="check the source files and columns, or raise --max-prompt-length",
                exit_code=2,
            )

    from datasets import Dataset  # lazy: imports pyarrow and pandas; only where GSM8K is read

    with gsm8k._quiet_datasets():
        tables = {split: Dataset.from_list(rows[split], features=gsm8k.features()) for split in ("train", "test")}
        result.paths = gsm8k.write_tables(output, tables)
        if output.replaces:
            log(replaced_text(output))
    for split in ("train", "test"):
        result.rows[split] = len(rows[split])
        dropped = (
            f", {result.dropped[split]} over {max_prompt_length} tokens dropped" if split in result.dropped else ""
        )
        log(f"{split}: {result.rows[split]} rows written{dropped} -> {result.paths[split]}")
    return result


# The first bytes of compressed files (each format's magic number: RFC 1952 gzip, bzip2's "BZh", the xz file format,
# RFC 8878 zstd, PKWARE's zip local file header) -> (name, the command that writes its content to stdout)
COMPRESSED_MAGIC = (
    (b"\x1f\x8b", ("gzip", "gunzip -c")),
    (b"BZh", ("bzip2", "bunzip2 -c")),
    (b"\xfd7zXZ\x00", ("xz", "xz -dc")),
    (b"\x28\xb5\x2f\xfd", ("zstd", "zstd -dc")),
    (b"PK\x03\x04", ("zip", "unzip -p")),
)


def compression_of(path: Path) -> tuple[str, str] | None:
    """(format name, decompress-to-stdout command) when ``path`` starts with a compressed format's magic number
    (:data:`COMPRESSED_MAGIC`), else None."""
    with open(path, "rb") as handle:
        start = handle.read(8)
    return next((found for magic, found in COMPRESSED_MAGIC if start.startswith(magic)), None)


def split_warnings(good: dict[str, list[tuple[int, str, str]]], test_given: bool = True) -> list[str]:
    """``warning: ...`` lines, each with its fix, for splits that would train or validate other than a user expects
    (written all the same: each can be meant). ``good``: split -> its (row index, question, answer) rows;
    ``test_given``: the test rows came from ``--test`` (else ``--test-fraction`` held them out of ``--train``).

    * a split with rows that repeat an earlier row's question and answer: each copy is trained on (or scored) again,
      weighing those rows more;
    * test rows whose question is also a training row's: validation would score data the model trained on;
    * a test split larger than the training split: verl scores every test row at each validation.
    """
    lines = []
    for split in ("train", "test"):
        pairs = [(question, answer) for _, question, answer in good[split]]
        repeats = len(pairs) - len(set(pairs))
        if repeats:
            lines.append(
                f"warning: {split}: {repeats:,} of {len(pairs):,} rows repeat an earlier row's question and answer "
                f"({len(set(pairs)):,} distinct): each copy is {'trained on' if split == 'train' else 'scored'} again, "
                f"weighing those rows more; fix: drop the repeats from --{split} (or keep them if that is meant)"
            )
    questions = {question for _, question, _ in good["train"]}
    seen = sum(question in questions for _, question, _ in good["test"])
    if seen:
        lines.append(
            f"warning: {seen:,} of {len(good['test']):,} test rows ask a question that a training row asks too: "
            "validation would score them on data the model trained on, not held-out data; fix: "
            + (
                "remove them from --test, or pass --test-fraction F instead of --test to hold out a share of --train's "
                "rows"
                if test_given
                else "drop the repeated questions from --train, so that --test-fraction holds out questions the "
                "training rows do not ask"
            )
        )
    if len(good["test"]) > len(good["train"]):
        ratio = len(good["test"]) / len(good["train"])
        times = f"{ratio:,.0f}" if ratio >= 10 else f"{ratio:.1f}"
        lines.append(
            f"warning: test has {len(good['test']):,} rows, {times}x train's "
            f"{len(good['train']):,}: verl scores every test row at each validation (--test-freq), so validation "
            "would take longer than the training between; fix: swap --train and --test if they are the wrong way "
            "round, or pass a smaller --test"
        )
    return lines


def _same_file(first: str | os.PathLike, second: str | os.PathLike) -> bool:
    """Whether two paths name one file: the same inode where both exist (a link, ``./`` or another spelling), else
    the same resolved path (``os.path.realpath``, which leaves a symbolic link loop as it is where ``Path.resolve``
    raises: reading the file refuses it later, naming it)."""
    try:
        return os.path.samefile(first, second)
    except OSError:
        return os.path.realpath(first) == os.path.realpath(second)
