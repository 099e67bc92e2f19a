"""GSM8K -> ``train.parquet`` / ``test.parquet`` in verl 0.4.1's schema (``verlfit prepare-gsm8k``:
:mod:`verlfit.commands.prepare_gsm8k`).

verl's own preprocessing script (``examples/data_preprocess/gsm8k.py``) is not in the PyPI wheel;
this module reproduces its logic exactly and adds what an air-gapped 24 GB user needs:

* sources: the Hugging Face hub (``datasets.load_dataset("openai/gsm8k", "main")``, which honours
  ``HF_ENDPOINT``, ``HF_HOME`` and ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` itself) or a local
  directory of parquet / jsonl / json files with ``question`` and ``answer`` (see
  :func:`discover_files` for the rules);
* rows, exactly as verl's script writes them through ``datasets``' ``to_parquet`` (same column
  order, struct field order and types, :data:`FEATURES`)::

      data_source  "openai/gsm8k"
      prompt       [{"role": "user", "content": question + " " + INSTRUCTION}]
      ability      "math"
      reward_model {"style": "rule", "ground_truth": first "#### <number>" of the answer, commas removed}
      extra_info   {"split": split, "index": row index in the source split, "answer": answer, "question": question}

* bad rows (empty question, no ``####``, no number after it) are reported with split and row index
  and skipped (``strict=True``: fatal); ``extra_info.index`` stays the row's index in the source
  split, so skipped or dropped rows leave gaps and every written row traces back to its source;
  with no row skipped or dropped (the real GSM8K) the indices are verl's ``0..n-1``;
* with a tokenizer, each prompt is measured the way verl's ``RLHFDataset`` does
  (``len(tokenizer.apply_chat_template(prompt, add_generation_prompt=True))``; verl keeps
  ``length <= data.max_prompt_length``), the distribution is printed and overlong rows are dropped,
  so ``data.max_prompt_length`` can never fail (``truncation=error``) many steps into a run;
* output is written as one folder (:func:`write_tables`, :mod:`verlfit.output_files`): both files and
  the marker are built beside the output and switched in together; an error or Ctrl-C leaves the
  previous folder untouched and nothing half-built behind; the same input gives byte-identical files
  (parquet holds no timestamp; the ``huggingface`` schema metadata is the fixed feature description).

``verlfit train`` uses :func:`training_data`, :func:`prepare` and :func:`is_prepared`: ``--data DIR`` holding raw
GSM8K files is prepared from them into ``DIR/verl`` (:data:`PREPARED_FOLDER`), as ``prepare-gsm8k --input DIR
--output DIR/verl`` does; a ``DIR`` with neither verl's files nor raw ones is prepared from the hub.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from verlfit import hub
from verlfit.data_folder import DataKeys, data_folder_state, schemas_match
from verlfit.errors import VerlfitError
from verlfit.output_files import check_output, replaced_text, write_folder

HUB_DATASET = "openai/gsm8k"
HUB_CONFIG = "main"
DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
# verl 0.4.1 examples/data_preprocess/gsm8k.py, extract_solution: the first match, commas removed
ANSWER_PATTERN = "#### (\\-?[0-9\\.\\,]+)"
SPLITS = ("train", "test")
DEFAULT_OUTPUT = "data/gsm8k"
# where `verlfit train --data DIR` writes verl's files when DIR holds raw GSM8K files (beside them they would
# make a second format there: discover_files refuses that, and train.parquet may be a raw file's name)
PREPARED_FOLDER = "verl"
VERL_REQUIRED_COLUMNS = ("data_source", "prompt", "reward_model")  # what RLHFDataset and the reward manager read
HUB_TRAIN_FILE = "main/train-00000-of-00001.parquet"  # openai/gsm8k's train split on the hub
# file suffix -> datasets builder that reads it
FORMATS = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}
# bad-row lines printed per split before "... and N more" (all of them are in PrepareResult.bad)
MAX_BAD_LINES = 20

EMPTY_QUESTION = "missing or blank question"
NO_ANSWER = "missing or blank answer"
NO_MARKER = 'answer has no "####"'
NO_NUMBER = 'no number after "####"'


@dataclass(frozen=True)
class BadRow:
    """A source row that cannot become a verl row: ``split``, ``index`` in that split, ``reason``."""

    split: str
    index: int
    reason: str
    line: str | None = None  # "FILE line N" (1-based) for a JSON lines source, as its other messages name lines

    def __str__(self) -> str:
        where = f" ({self.line})" if self.line else ""
        return f"{self.split} row {self.index}{where}: {self.reason}"


@dataclass(frozen=True)
class LengthStats:
    """Prompt lengths in tokens (chat template applied, generation prompt added) of one split.

    ``p95`` is the nearest-rank 95th percentile (the smallest length that at least 95% of the
    prompts do not exceed); ``over_limit`` is how many exceed the limit (None without a limit).
    """

    count: int
    min: int
    median: float
    p95: int
    max: int
    limit: int | None = None
    over_limit: int | None = None

    def describe(self) -> str:
        text = f"min {self.min}, median {self.median:g}, p95 {self.p95}, max {self.max} ({self.count} prompts)"
        if self.limit is not None:
            text += f"; {self.over_limit} over {self.limit}"
        return text


@dataclass
class PrepareResult:
    """What :func:`prepare` wrote.

    Attributes:
        output_dir: the directory holding the files.
        paths: split -> path of the written parquet file.
        rows: split -> rows written.
        bad: the skipped bad rows, in source order.
        dropped: split -> rows dropped for exceeding ``max_prompt_length``.
        lengths: split -> prompt length statistics of the good rows (empty without a tokenizer).
    """

    output_dir: Path
    paths: dict[str, Path] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    bad: list[BadRow] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    lengths: dict[str, LengthStats] = field(default_factory=dict)


@dataclass
class _RawSplit:
    name: str
    origin: str  # where the rows came from, for messages
    questions: list
    answers: list
    lines: list | None = None  # "FILE line N" of each row of a JSON lines source, else None


# --------------------------------------------------------------------------- conversion


def extract_ground_truth(answer: str) -> str | None:
    """verl's ``extract_solution``: the number of the first ``#### <number>``, commas removed.

    Returns None where verl's script would fail its ``assert`` (no match).
    """
    solution = re.search(ANSWER_PATTERN, answer)
    if solution is None:
        return None
    return solution.group(0).split("#### ")[1].replace(",", "")


def check_row(question: Any, answer: Any) -> tuple[str | None, str | None]:
    """Return ``(ground_truth, None)`` for a usable row, ``(None, reason)`` for a bad one.

    Bad: an empty (missing or blank) question; a missing or blank answer; an answer without ``####``;
    ``####`` not followed by a space and a number (a match of verl's pattern with no digit in it, such as
    ``#### .``, counts as no number, and one with two decimal points, such as ``#### 1.2.3``, as not a number).
    """
    if not isinstance(question, str) or not question.strip():
        return None, EMPTY_QUESTION
    if not isinstance(answer, str) or not answer.strip():
        return None, NO_ANSWER
    if "####" not in answer:
        return None, NO_MARKER
    ground_truth = extract_ground_truth(answer)
    if ground_truth is None or not any(char.isdigit() for char in ground_truth):
        return None, NO_NUMBER
    if ground_truth.count(".") > 1:
        return None, f'"{ground_truth}" after "####" is not a number'
    return ground_truth, None


def make_row(split: str, index: int, question: str, answer: str, ground_truth: str) -> dict:
    """One output row, built exactly like verl's ``process_fn`` (key order included)."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": question + " " + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


def features():
    """The ``datasets.Features`` verl's script ends up with (inferred there from its rows)."""
    from datasets import Features, Value  # lazy: imports pyarrow and pandas; only where GSM8K is read

    return Features(
        {
            "data_source": Value("string"),
            "prompt": [{"role": Value("string"), "content": Value("string")}],
            "ability": Value("string"),
            "reward_model": {"style": Value("string"), "ground_truth": Value("string")},
            "extra_info": {
                "split": Value("string"),
                "index": Value("int64"),
                "answer": Value("string"),
                "question": Value("string"),
            },
        }
    )


def length_stats(lengths: list[int], limit: int | None = None) -> LengthStats:
    """Summarise prompt lengths (see :class:`LengthStats`); ``lengths`` must not be empty."""
    ordered = sorted(lengths)
    p95 = ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]
    over = None if limit is None else sum(1 for length in ordered if length > limit)
    return LengthStats(len(ordered), ordered[0], statistics.median(ordered), p95, ordered[-1], limit, over)


# --------------------------------------------------------------------------- sources


def discover_files(directory: str | os.PathLike) -> dict[str, list[Path]]:
    """Find the train and test files of a local GSM8K copy.

    Rules: in ``directory`` (or, if it has none, in ``directory/main``: the hub's layout), the
    files of split S are ``S.parquet``, ``S.jsonl``, ``S.json`` and shards ``S-*.parquet`` /
    ``S-*.jsonl`` / ``S-*.json`` (such as the hub's ``train-00000-of-00001.parquet``), read in
    name order. All files of a split must share one suffix; both splits must be present; a split is either one
    whole file or shards, not both (``train.jsonl`` beside ``train-00001.jsonl`` would read its rows twice).

    Raises:
        VerlfitError: not a directory; no files; a split missing, in two formats, or whole and sharded at once.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise VerlfitError(
            f"--input {directory} is not a directory",
            fix="pass the directory holding train/test files (e.g. train.jsonl and test.jsonl)",
            exit_code=2,
        )
    for candidate in (directory, directory / "main"):
        if not candidate.is_dir():
            continue
        found = {split: _split_files(candidate, split) for split in SPLITS}
        if not any(found.values()):
            continue
        for split in SPLITS:
            if not found[split]:
                have = ", ".join(path.name for files in found.values() for path in files)
                raise VerlfitError(
                    f"{candidate} has no {split} file (found {have})",
                    fix=f"add {split}.parquet, {split}.jsonl or {split}.json (or {split}-*.parquet shards) next to "
                    "them",
                    exit_code=2,
                )
            suffixes = sorted({path.suffix for path in found[split]})
            if len(suffixes) > 1:
                names = ", ".join(path.name for path in found[split])
                raise VerlfitError(
                    f"{candidate} has {split} files in more than one format ({names})",
                    fix=f"keep one format of the {split} split in {candidate}",
                    exit_code=2,
                )
            whole = [path for path in found[split] if path.stem == split]
            shards = [path for path in found[split] if path.stem != split]
            if whole and shards:
                # the whole split and its shards: most likely the same rows twice (a download next to its parts)
                raise VerlfitError(
                    f"{candidate} has both {whole[0].name} and {split} shards"
                    f" ({', '.join(path.name for path in shards)}): verlfit would read them all, so the rows would most"
                    " likely count twice",
                    fix=f"keep either {whole[0].name} or its shards {split}-*{whole[0].suffix} in {candidate}",
                    exit_code=2,
                )
        return found
    raise VerlfitError(
        f"no GSM8K files in {directory}: expected train and test files named train.parquet/.jsonl/.json "
        f"or train-*.parquet shards (same for test), in {directory} or {directory / 'main'}",
        fix="point --input at the directory holding them, or leave --input out to download openai/gsm8k",
        exit_code=2,
    )


def _split_files(directory: Path, split: str) -> list[Path]:
    return sorted(
        path
        for path in directory.iterdir()
        if path.suffix in FORMATS and (path.stem == split or path.name.startswith(split + "-")) and path.is_file()
    )


def first_bad_json_line(files: list[Path]) -> str | None:
    """Where the first line of ``files`` (JSON lines) that is not one JSON object is, as ``"FILE line N (1-based):
    WHY"``, or None when every non-blank line parses (``json.loads``) to an object. Run after datasets failed, whose
    message names a row of pyarrow's block, not the file's line, and by the data check (:func:`bad_json_line_refusal`)
    before anything is prepared."""
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line.rstrip("\r\n"))
                except json.JSONDecodeError as error:
                    return f"{path} line {number}: not JSON ({error.msg} at character {error.pos + 1})"
                if not isinstance(value, dict):
                    return f"{path} line {number}: a JSON {type(value).__name__}, not an object"
    return None


def bad_json_line_refusal(files: list[Path]) -> VerlfitError | None:
    """The refusal of a split's raw files whose first bad line (:func:`first_bad_json_line`) is not one JSON object,
    naming the file and the line, as ``prepare-gsm8k`` refuses it (exit status 2); None for files that are not JSON
    lines (``.jsonl``) or whose every line parses. Reads each line once (GSM8K's train.jsonl, 7,473 lines: tens of
    milliseconds)."""
    bad_line = first_bad_json_line(files) if files and files[0].suffix == ".jsonl" else None
    if bad_line is None:
        return None
    return VerlfitError(
        f"cannot read {bad_line}",
        fix="repair or remove that line (each line of a .jsonl file is one JSON object; download the file again if it "
        "was cut), then run the command again",
        exit_code=2,
    )


@contextmanager
def _restored(datasets_module, verbosity: int):
    """Put datasets' logger back at ``verbosity`` on leaving the block."""
    try:
        yield
    finally:
        datasets_module.logging.set_verbosity(verbosity)


def _read_local(directory: str | os.PathLike, log: Callable[[str], None]) -> dict[str, _RawSplit]:
    import datasets  # lazy: imports pyarrow and pandas; only where GSM8K is read
    import pyarrow  # lazy: only where parquet is read or written

    found = discover_files(directory)
    splits = {}
    # datasets logs its own line for a file it cannot read ("Failed to load JSON from file ..."): verlfit's refusal
    # below says it, with the line, so its logger is quiet here and restored after
    verbosity = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    # a throwaway cache: reading local files must not fill (or depend on) HF_HOME
    with tempfile.TemporaryDirectory(prefix="verlfit-gsm8k-") as cache_dir, _restored(datasets, verbosity):
        for split, files in found.items():
            names = ", ".join(str(path) for path in files)
            try:
                dataset = datasets.load_dataset(
                    FORMATS[files[0].suffix],
                    data_files=[str(path) for path in files],
                    split="train",
                    cache_dir=cache_dir,
                    keep_in_memory=True,
                )
            except (datasets.exceptions.DatasetsError, pyarrow.ArrowException, ValueError, OSError) as error:
                empty = [str(path) for path in files if not path.read_bytes().strip()]
                if empty:
                    raise VerlfitError(
                        f"{', '.join(empty)}: the file is empty",
                        fix=f"put the {split} rows in it, or remove it",
                        exit_code=2,
                    ) from error
                refusal = bad_json_line_refusal(files)
                if refusal is not None:
                    raise refusal from error
                cause = f" ({error.__cause__})" if error.__cause__ else ""
                raise VerlfitError(
                    f"cannot read {names}: {error}{cause}",
                    fix="the files must be parquet, JSON lines (one JSON object per line: a line that does not parse "
                    "stops the whole file) or a JSON array of objects with question and answer",
                    exit_code=2,
                ) from error
            splits[split] = _raw_split(dataset, split, names)
            splits[split].lines = _row_lines(files, len(splits[split].questions))
    log(
        f"read {directory}: "
        + ", ".join(f"{split} {len(raw.questions)} rows ({raw.origin})" for split, raw in splits.items())
    )
    return splits


def _row_lines(files: list[Path], rows: int) -> list[str] | None:
    """``"FILE line N"`` (1-based) of each row of ``files`` where they are JSON lines (``.jsonl``): its non-blank
    lines in file order, as datasets reads them; None for other formats, or where the count is not ``rows``."""
    if not files or files[0].suffix != ".jsonl":
        return None
    lines = []
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines += [f"{path} line {number}" for number, line in enumerate(handle, 1) if line.strip()]
    return lines if len(lines) == rows else None


def _read_hub(
    log: Callable[[str], None], environ: Mapping[str, str] | None = None, head: Callable | None = None
) -> dict[str, _RawSplit]:
    """GSM8K from the hub through ``datasets.load_dataset``. When it is not in the datasets cache and no offline
    switch is set, one HEAD of its train file (:func:`verlfit.hub.probe`, 3 s) first: an unreachable hub fails in
    seconds instead of after ``datasets``' retries (about 24 s of tracebacks, measured with no network)."""
    import datasets  # lazy: imports pyarrow and pandas; only where GSM8K is read
    import huggingface_hub  # lazy: only on the paths that reach the hub

    environ = os.environ if environ is None else environ
    endpoint = huggingface_hub.constants.ENDPOINT
    cache = datasets.config.HF_DATASETS_CACHE
    offline = bool(datasets.config.HF_HUB_OFFLINE)
    by_hand = "copy the hub's main/train-*.parquet and main/test-*.parquet here by hand and pass --input DIR"
    folder = Path(cache) / HUB_DATASET.replace(
        "/", "___"
    )  # where datasets 3.6's load.py keeps it (as verlfit doctor looks)
    cached = folder.is_dir() and any(folder.iterdir())
    if not offline and not cached:
        answer = hub.probe(
            HUB_DATASET, HUB_TRAIN_FILE, environ, hub.NETWORK_TIMEOUT_S, head or hub.http_head, repo_type="dataset"
        )
        if answer.status is None:
            raise VerlfitError(
                f"cannot load {HUB_DATASET} (config {HUB_CONFIG}): {answer.endpoint} is unreachable ({answer.reason}) "
                f"and it is not in the datasets cache under {cache}",
                fix=f"set HF_ENDPOINT to a reachable mirror, or {by_hand}",
            )
    log(
        f"loading {HUB_DATASET} (config {HUB_CONFIG}) through datasets: endpoint {endpoint}, cache {cache}"
        + (", offline" if offline else "")
    )
    try:
        loaded = datasets.load_dataset(HUB_DATASET, HUB_CONFIG)
    except (datasets.exceptions.DatasetsError, OSError, ValueError) as error:
        if offline:
            fix = (
                f"offline mode (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) needs {HUB_DATASET} already in the cache "
                f"under {cache}: run once online with the same HF_HOME, or copy the hub's main/train-*.parquet "
                f"and main/test-*.parquet here by hand and pass --input DIR"
            )
        else:
            fix = (
                f"check the network and HF_ENDPOINT (now {endpoint}), or copy the hub's main/train-*.parquet and "
                f"main/test-*.parquet by hand and pass --input DIR"
            )
        raise VerlfitError(f"cannot load {HUB_DATASET} (config {HUB_CONFIG}): {error}", fix=fix) from error
    missing = [split for split in SPLITS if split not in loaded]
    if missing:
        raise VerlfitError(f"{HUB_DATASET} (config {HUB_CONFIG}) has no {missing[0]} split (has {', '.join(loaded)})")
    splits = {split: _raw_split(loaded[split], split, f"{HUB_DATASET} {HUB_CONFIG}/{split}") for split in SPLITS}
    log(f"loaded {HUB_DATASET}: " + ", ".join(f"{split} {len(raw.questions)} rows" for split, raw in splits.items()))
    return splits


def _raw_split(dataset, split: str, origin: str) -> _RawSplit:
    missing = [column for column in ("question", "answer") if column not in dataset.column_names]
    if missing and {"prompt", "reward_model"} <= set(dataset.column_names):
        raise VerlfitError(
            f"{origin} is already in verl's format (columns: {', '.join(dataset.column_names)}), not raw GSM8K",
            fix="train on it directly (verlfit train --data DIR), or point --input at the raw question/answer files",
            exit_code=2,
        )
    if missing:
        raise VerlfitError(
            f"{origin} has no {' or '.join(missing)} column (columns: {', '.join(dataset.column_names)})",
            fix="GSM8K rows need a question and an answer ending in '#### <number>'",
            exit_code=2,
        )
    for column in ("question", "answer"):
        dtype = getattr(dataset.features[column], "dtype", None)
        if dtype not in ("string", "large_string", "null"):
            raise VerlfitError(
                f"{origin}: column {column} holds {dtype or dataset.features[column]}, not text", exit_code=2
            )
    return _RawSplit(split, origin, dataset["question"], dataset["answer"])


# --------------------------------------------------------------------------- tokenizer


def load_tokenizer(
    name_or_path: str,
    environ: Mapping[str, str] | None = None,
    head: Callable | None = None,
    cache_lookup: Callable | None = None,
):
    """``AutoTokenizer.from_pretrained(name_or_path)`` (as verl loads it), or a clear error in seconds.

    A hub id (``owner/name``) is taken from the local hub cache when its ``tokenizer_config.json`` is there
    (``local_files_only``: no network). Otherwise ``HF_HUB_OFFLINE`` set means it cannot be had, and without it one
    HEAD of the hub (``HF_ENDPOINT``, :data:`verlfit.hub.NETWORK_TIMEOUT_S` = 3 s, the doctor's probe) decides
    before ``huggingface_hub`` would spend about 50 s in retries.

    Args:
        environ: environment variables (default ``os.environ``).
        head: ``f(url, timeout, headers) -> status`` for the hub probe (default :func:`verlfit.hub.http_head`).
        cache_lookup: ``f(repo_id, filename) -> path | None`` (default ``huggingface_hub.try_to_load_from_cache``).

    Raises:
        VerlfitError: a path that is not a directory or holds no tokenizer files; a hub id that is neither cached
            nor downloadable (offline, hub unreachable, gated, absent); a tokenizer that does not load.
    """

    environ = os.environ if environ is None else environ
    # hub ids are "owner/name": anything else that is not a directory is a mistyped path, not a hub lookup
    looks_local = str(name_or_path).startswith(("/", "./", "../", "~")) or str(name_or_path).count("/") != 1
    local = Path(name_or_path).expanduser()
    if looks_local and not local.is_dir():
        raise VerlfitError(
            f"--tokenizer {name_or_path}: no such directory (and not a hub name, which is owner/name)",
            fix="pass the model's local directory (holding tokenizer.json) or a hub name such as "
            "Qwen/Qwen2.5-0.5B-Instruct",
            exit_code=2,
        )
    if local.is_dir() and not any(
        (local / name).is_file()
        for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
    ):
        raise VerlfitError(
            f"--tokenizer {name_or_path}: the directory holds no tokenizer files (tokenizer.json, "
            "tokenizer_config.json)",
            fix="pass the model's directory as saved by save_pretrained, which includes its tokenizer",
            exit_code=2,
        )
    local_dir_fix = (
        "pass --tokenizer the model's local directory (holding tokenizer.json, as save_pretrained or "
        "`huggingface-cli download MODEL --local-dir DIR` on a connected machine leave it)"
    )
    from transformers import AutoTokenizer  # lazy: imports torch; only where a model or tokenizer is loaded

    if not local.is_dir():
        if cache_lookup is None:
            # lazy: only on the paths that reach the hub
            from huggingface_hub import try_to_load_from_cache as cache_lookup
        try:
            cached = cache_lookup(str(name_or_path), "tokenizer_config.json")
        except Exception:  # an invalid repo id, an unreadable cache: same as not cached
            cached = None
        if isinstance(cached, (str, os.PathLike)) and Path(cached).is_file():
            try:
                return AutoTokenizer.from_pretrained(name_or_path, local_files_only=True)
            except (OSError, ValueError):
                pass  # only part of it is cached: the hub decides below
        offline = hub.offline_variable(environ)
        if offline:
            raise VerlfitError(
                f"--tokenizer {name_or_path} is not in the local hub cache, and {offline}=1 is set, so it is not "
                "downloaded",
                fix=f"{local_dir_fix}, or fill the cache where the hub is reachable (huggingface-cli download "
                f"{name_or_path}) with the same HF_HOME",
            )
        answer = hub.probe(
            str(name_or_path), "tokenizer_config.json", environ, hub.NETWORK_TIMEOUT_S, head or hub.http_head
        )
        if answer.status is None:
            raise VerlfitError(
                f"--tokenizer {name_or_path} is not in the local hub cache and {answer.endpoint} is unreachable "
                f"({answer.reason})",
                fix=f"{local_dir_fix}, or set HF_ENDPOINT to a reachable mirror",
            )
        if answer.status in (401, 403):
            raise VerlfitError(
                f"--tokenizer {name_or_path} at {answer.endpoint} needs authorisation (HTTP {answer.status}): gated "
                "or private",
                fix="accept the licence on the model page and export HF_TOKEN, or " + local_dir_fix,
            )
        if answer.status == 404:
            raise VerlfitError(
                f"--tokenizer {name_or_path} does not exist at {answer.endpoint} (HTTP 404)",
                fix="check the model id, or " + local_dir_fix,
                exit_code=2,
            )
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    except (OSError, ValueError) as error:
        raise VerlfitError(
            f"cannot load tokenizer {name_or_path}: {error}", fix=local_dir_fix + " or a hub name reachable from here"
        ) from error
    return tokenizer


def prompt_length(tokenizer, messages: list[dict]) -> int:
    """Tokens of one prompt as verl 0.4.1's ``RLHFDataset`` measures it for ``filter_overlong_prompts``.

    ``RLHFDataset.__getitem__`` (``truncation=error``) counts ``tokenizer(apply_chat_template(...,
    tokenize=False), add_special_tokens=False)``, which is the same list of ids.
    """
    return len(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))


# --------------------------------------------------------------------------- output


def output_paths(output_dir: str | os.PathLike) -> dict[str, Path]:
    """split -> ``<output_dir>/<split>.parquet``."""
    return {split: Path(output_dir) / f"{split}.parquet" for split in SPLITS}


def _file_kind(path: Path) -> str:
    """``"raw"`` (a json/jsonl file, or parquet with question and answer columns), ``"verl"`` (parquet with verl's
    columns), else ``"other"`` (parquet with neither, or whose schema does not read: the data check reports it)."""
    if path.suffix != ".parquet":
        return "raw"
    import pyarrow  # lazy: only where parquet is read or written
    import pyarrow.parquet as pq  # lazy: only where parquet is read or written

    try:
        names = set(pq.read_schema(path).names)
    except (OSError, pyarrow.ArrowException):
        return "other"
    if set(VERL_REQUIRED_COLUMNS) <= names:
        return "verl"
    return "raw" if {"question", "answer"} <= names else "other"


def raw_files(directory: str | os.PathLike) -> dict[str, list[Path]] | None:
    """The raw GSM8K files of ``directory`` by :func:`discover_files`' rules (in it or in its ``main/``), or None
    when it holds none, or any parquet file in verl's format (it is then verl data, complete or not), or only
    parquet that is neither raw nor verl's (unreadable, other columns: the data check names what is wrong).

    Raises:
        VerlfitError: from :func:`discover_files`, for one split without the other or a split in two formats.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return None
    candidates = [c for c in (directory, directory / "main") if c.is_dir()]
    found = [path for c in candidates for split in SPLITS for path in _split_files(c, split)]
    kinds = {_file_kind(path) for path in found}
    if "raw" not in kinds or "verl" in kinds:
        return None  # nothing, or (some of) verl's own files: verl data, checked as such
    return discover_files(directory)


def training_data(data_dir: str | os.PathLike) -> tuple[Path, Path | None]:
    """Where ``verlfit train --data data_dir`` reads verl's ``train.parquet``/``test.parquet``, and the raw source
    they are prepared from when missing: ``(data_dir / PREPARED_FOLDER, data_dir)`` when ``data_dir`` holds raw GSM8K
    files; ``(data_dir, data_dir.parent)`` when ``data_dir`` is that folder already; else ``(data_dir, None)``
    (prepared there, or prepared from the hub). Looks at names and parquet schemas only.

    Raises:
        VerlfitError: from :func:`raw_files`, for an incomplete or mixed set of raw files.
    """
    data_dir = Path(data_dir)
    if data_dir.name == PREPARED_FOLDER and raw_files(data_dir.parent) is not None:
        return data_dir, data_dir.parent
    if raw_files(data_dir) is not None:
        return data_dir / PREPARED_FOLDER, data_dir
    return data_dir, None


def is_prepared(output_dir: str | os.PathLike, keys=None) -> bool:
    """True when ``output_dir`` holds a non-empty train.parquet and test.parquet verl reads: written by verlfit
    (:data:`verlfit.data_folder.MARKER_NAME`, unchanged since) or in verl's format by anyone (verl's own
    ``examples/data_preprocess/gsm8k.py``, whose struct fields pyarrow 20 writes in another order: schemas are compared
    by content, :func:`verlfit.data_folder.schemas_match`).

    Args:
        keys: the data keys verl runs with (:class:`verlfit.data_folder.DataKeys`; default ``prompt``/``data_source``).
    """
    import pyarrow  # lazy: only where parquet is read or written
    import pyarrow.parquet as pq  # lazy: only where parquet is read or written

    if not data_folder_state(output_dir, keys or DataKeys()).prepared:
        return False
    for path in output_paths(output_dir).values():
        try:
            if pq.read_metadata(path).num_rows == 0:
                return False
        except (OSError, pyarrow.ArrowException):
            return False
    return True


def has_gsm8k_schema(path: str | os.PathLike) -> bool:
    """True when the parquet file ``path`` has exactly the columns and types of verl's GSM8K script's output
    (:func:`features`), struct fields in any order."""
    import pyarrow  # lazy: only where parquet is read or written
    import pyarrow.parquet as pq  # lazy: only where parquet is read or written

    try:
        schema = pq.read_schema(path)
    except (OSError, pyarrow.ArrowException):
        return False
    return schemas_match(schema, features().arrow_schema)


def write_tables(output, tables: dict[str, Any]) -> dict[str, Path]:
    """Write every split's table as ``SPLIT.parquet`` into a folder built beside ``output`` and switch it in whole,
    with the marker listing them (:func:`verlfit.output_files.write_folder`): after any interruption the folder
    holds the old files or the new ones, never a mix. Whether ``output`` may be written is the caller's check
    (:func:`verlfit.output_files.check_output`). Returns split -> the path as the user named it.

    Raises:
        VerlfitError: the folder cannot be written (permission, a full disk), the previous files unchanged.
    """

    def build(folder: Path) -> None:
        for split, table in tables.items():
            table.to_parquet(str(folder / f"{split}.parquet"))

    write_folder(output, build)
    return output_paths(output.given)


@contextmanager
def _quiet_datasets() -> Iterator[None]:
    """No datasets progress bars while preparing (restored afterwards)."""
    import datasets  # lazy: imports pyarrow and pandas; only where GSM8K is read

    was_enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_enabled:
            datasets.enable_progress_bars()


# --------------------------------------------------------------------------- API


def prepare(
    source: str | os.PathLike | None = None,
    output_dir: str | os.PathLike = DEFAULT_OUTPUT,
    tokenizer: Any = None,
    max_prompt_length: int | None = None,
    strict: bool = False,
    log: Callable[[str], None] = print,
    force: bool = False,
) -> PrepareResult:
    """Prepare GSM8K for verl 0.4.1 and return what was written.

    Args:
        source: None for the hub (``openai/gsm8k``, config ``main``), else a local directory
            (rules in :func:`discover_files`).
        output_dir: where ``train.parquet`` and ``test.parquet`` go (created if missing).
        tokenizer: a tokenizer name or path (loaded with ``AutoTokenizer``) or a loaded tokenizer
            with a chat template; prints the prompt length distribution.
        max_prompt_length: with ``tokenizer``, drop prompts longer than this many tokens.
        strict: a bad row is fatal instead of skipped.
        log: receives each progress / summary line.
        force: replace what verlfit wrote into ``output_dir`` before (:mod:`verlfit.output_files`); a folder
            holding files verlfit did not write is refused even so.

    Raises:
        VerlfitError: unreadable source, bad rows with ``strict``, a split with nothing left,
            an unusable tokenizer, or an output directory that cannot be written (previous
            outputs are then left as they were); exit status 2 for an output the write policy refuses
            (:func:`verlfit.output_files.check_output`: files verlfit did not write, an input, a run directory, the
            current directory, an earlier output of another command or input without ``force``), checked before
            anything is read.
    """
    if max_prompt_length is not None and tokenizer is None:
        raise VerlfitError(
            "--max-prompt-length needs --tokenizer: prompt lengths are counted in the model's tokens",
            fix="add --tokenizer with the model you will train (e.g. Qwen/Qwen2.5-0.5B-Instruct or its local "
            "directory)",
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
    # realpath, not Path.resolve: a symbolic link loop stays a path here (Path.resolve raises RuntimeError), and the
    # reading or the output check below refuses it, naming it
    source_path = os.path.realpath(source) if source is not None else None
    if source_path is not None and os.path.realpath(output_dir) in (source_path, os.path.join(source_path, "main")):
        raise VerlfitError(
            f"--output {output_dir} is where --input's files are read from ({source}, or its main/ folder): verl's "
            "train.parquet/test.parquet would sit beside the raw files, and the next run would find two formats "
            "there",
            fix="pass --output another directory, e.g. data/gsm8k",
            exit_code=2,
        )
    if (
        source_path is not None
        and Path(os.path.realpath(output_dir)).is_relative_to(source_path)
        and os.path.realpath(output_dir) != os.path.join(source_path, PREPARED_FOLDER)
    ):
        # SOURCE/verl is allowed: verlfit train --data SOURCE prepares into it and reads it (training_data), and the
        # data check's fix names it
        prepared = Path(source) / PREPARED_FOLDER
        raise VerlfitError(
            f"--output {output_dir} lies inside --input {source}: verl's files would sit among the raw files they are "
            f"made from (moving, copying or cleaning {source} takes them along), and verlfit train --data {source} "
            f"reads {prepared}, not this folder",
            fix=f"pass --output a folder outside {source} (e.g. data/gsm8k), or {prepared}, where verlfit train --data "
            f"{source} reads (and would prepare) them",
            exit_code=2,
        )

    source_name = source if source is not None else f"hub {HUB_DATASET} {HUB_CONFIG}"
    output = check_output(output_dir, "verlfit prepare-gsm8k", force=force, inputs=[source_name])
    result = PrepareResult(output_dir=output_dir)
    # the tokenizer first: a hub id that cannot be had fails in seconds, before any data is read or downloaded
    if tokenizer is not None:
        if isinstance(tokenizer, (str, os.PathLike)):
            name = str(tokenizer)
            tokenizer = load_tokenizer(name)
        else:
            name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
        if not getattr(tokenizer, "chat_template", None):
            raise VerlfitError(
                f"tokenizer {name} has no chat template; verl renders every prompt with it",
                fix="pass the tokenizer of an instruct/chat model (e.g. Qwen/Qwen2.5-0.5B-Instruct)",
                exit_code=2,
            )
    with _quiet_datasets():
        raw = _read_hub(log) if source is None else _read_local(source, log)

        rows: dict[str, list[dict]] = {}
        for split in SPLITS:
            rows[split] = []
            for index, (question, answer) in enumerate(zip(raw[split].questions, raw[split].answers)):
                ground_truth, reason = check_row(question, answer)
                if reason is not None:
                    line = raw[split].lines[index] if raw[split].lines else None
                    result.bad.append(BadRow(split, index, reason, line))
                    continue
                rows[split].append(make_row(split, index, question, answer, ground_truth))
        if result.bad:
            if strict:
                lines = [str(bad) for bad in result.bad[:MAX_BAD_LINES]]
                if len(result.bad) > MAX_BAD_LINES:
                    lines.append(f"... and {len(result.bad) - MAX_BAD_LINES} more")
                raise VerlfitError(
                    f"{len(result.bad)} bad row(s) and --strict:\n  " + "\n  ".join(lines),
                    fix="fix those rows in the source, or leave out --strict to skip them",
                    exit_code=2,
                )
            for split in SPLITS:
                bad_here = [bad for bad in result.bad if bad.split == split]
                for bad in bad_here[:MAX_BAD_LINES]:
                    log(f"skipped {bad}")
                if len(bad_here) > MAX_BAD_LINES:
                    log(f"skipped {len(bad_here) - MAX_BAD_LINES} more bad {split} rows")

        if tokenizer is not None:
            for split in SPLITS:
                if not rows[split]:
                    continue
                lengths = [prompt_length(tokenizer, row["prompt"]) for row in rows[split]]
                stats = length_stats(lengths, max_prompt_length)
                result.lengths[split] = stats
                log(f"{split} prompt tokens ({name}, chat template + generation prompt): {stats.describe()}")
                if max_prompt_length is not None:
                    kept = [row for row, length in zip(rows[split], lengths) if length <= max_prompt_length]
                    result.dropped[split] = len(rows[split]) - len(kept)
                    rows[split] = kept
                    log(f"dropped {result.dropped[split]} {split} rows over {max_prompt_length} tokens")

        for split in SPLITS:
            if not rows[split]:
                bad = sum(1 for row in result.bad if row.split == split)
                raise VerlfitError(
                    f"no {split} rows left to write ({len(raw[split].questions)} read, {bad} bad, "
                    f"{result.dropped.get(split, 0)} over the prompt limit); nothing written to {output_dir}",
                    fix="check the source files, or raise --max-prompt-length",
                    exit_code=2,
                )

        from datasets import Dataset  # lazy: imports pyarrow and pandas; only where GSM8K is read

        schema = features()
        tables = {split: Dataset.from_list(rows[split], features=schema) for split in SPLITS}
        result.paths = write_tables(output, tables)
        if output.replaces:
            log(replaced_text(output))

    for split in SPLITS:
        result.rows[split] = len(rows[split])
        bad = sum(1 for row in result.bad if row.split == split)
        dropped = f", {result.dropped[split]} over {max_prompt_length} tokens" if split in result.dropped else ""
        log(f"{split}: {result.rows[split]} rows written ({bad} bad{dropped}) -> {result.paths[split]}")
    return result
