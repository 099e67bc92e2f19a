"""The reward a run is scored with, checked in seconds before a GPU minute is spent.

Two ways verl 0.4.1 scores a response (``verl/trainer/ppo/reward.py``, ``load_reward_manager``):

* a reward function file: ``custom_reward_function.path`` / ``.name`` (``ppo_trainer.yaml``: ``name`` defaults to
  ``compute_score``). ``get_custom_reward_fn`` loads the file with ``importlib.util.spec_from_file_location``, takes
  the attribute ``name`` and wraps it so that ``custom_reward_function.reward_kwargs`` are added; the naive reward
  manager (``verl/workers/reward_manager/naive.py``) then calls, for each response,
  ``compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...)`` (keywords only): the row's
  ``data.reward_fn_key`` column, the decoded response, ``reward_model["ground_truth"]`` and the ``extra_info`` column
  (None where the data has none). It must return a number, or a dict whose ``"score"`` is the number (the other keys
  are logged);
* otherwise verl's ``default_compute_score`` (``verl/utils/reward_score/__init__.py``), which dispatches on the
  ``data_source`` string and raises ``NotImplementedError`` for one it does not know: at the first validation, after
  Ray has started and the model has loaded. :func:`verl_scores` asks the same function, so its answer is verl's.

:func:`check_reward_function` loads the file as verl does and calls the function on real rows of the training set
(once with the ground truth as the response, once with an empty response) so that a reward that cannot be computed
fails in seconds, naming the file, the function and the row. The functions here take typed values (no argparse);
``verlfit train --reward-function FILE[:NAME]`` and the doctor call them.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import numbers
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from verlfit.data_folder import DataKeys
from verlfit.errors import VerlfitError

DEFAULT_FUNCTION_NAME = "compute_score"  # verl 0.4.1 ppo_trainer.yaml: custom_reward_function.name
# the keywords the naive reward manager passes (verl/workers/reward_manager/naive.py, NaiveRewardManager.__call__)
CALL_KEYWORDS = ("data_source", "solution_str", "ground_truth", "extra_info")
ROWS_CHECKED = 3  # training rows the function is called on (twice each: the ground truth, and an empty response)


@dataclass(frozen=True)
class RewardFunction:
    """A reward function named as verl's ``custom_reward_function`` names it.

    Attributes:
        path: the file, absolute (verl opens it from each worker's own working directory).
        name: the function's name in it.
    """

    path: Path
    name: str = DEFAULT_FUNCTION_NAME

    @property
    def overrides(self) -> list[str]:
        """verl's Hydra overrides that select it: ``custom_reward_function.path=...`` and ``.name=...``."""
        return [f"custom_reward_function.path={self.path}", f"custom_reward_function.name={self.name}"]

    def __str__(self) -> str:
        return f"{self.path}:{self.name}"


@dataclass(frozen=True)
class ScoredRow:
    """One call of the check: the row (index in the training file), the response given, and the reward returned."""

    row: int
    solution: str
    score: float


def parse_reward_function(spec: str, base: str | os.PathLike | None = None) -> RewardFunction:
    """``FILE[:NAME]`` -> :class:`RewardFunction` (``NAME`` defaults to :data:`DEFAULT_FUNCTION_NAME`), the file made
    absolute against ``base`` (default: the current directory). A ``:`` followed by something that is not a Python
    name is part of the file name.

    Raises:
        VerlfitError: exit status 2 for an empty spec or an empty name after ``:``.
    """
    text = str(spec).strip()
    file_part, separator, name = text.rpartition(":")
    if not separator or ("/" in name) or (name and not name.isidentifier()):
        file_part, name = text, DEFAULT_FUNCTION_NAME
    if not file_part:
        raise VerlfitError(f"--reward-function {spec!r}: no file given", fix="pass --reward-function FILE.py[:FUNCTION], e.g. reward.py:compute_score", exit_code=2)
    if not name:
        raise VerlfitError(f"--reward-function {spec!r}: no function name after ':'", fix=f"pass --reward-function {file_part}:FUNCTION, or {file_part} alone for {DEFAULT_FUNCTION_NAME}", exit_code=2)
    path = Path(os.path.expanduser(file_part))
    if not path.is_absolute():
        path = Path(base or os.getcwd()) / path
    return RewardFunction(Path(os.path.normpath(path)), name)


def from_overrides(path: str | None, name: str | None, base: str | os.PathLike | None = None) -> RewardFunction | None:
    """The :class:`RewardFunction` named by verl's keys ``custom_reward_function.path`` / ``.name`` as a user passed
    them after ``--`` (None without a path; the name defaults as in verl's config), made absolute like
    :func:`parse_reward_function`."""
    if not path or str(path) in ("null", "None"):
        return None
    return parse_reward_function(f"{path}:{name or DEFAULT_FUNCTION_NAME}", base)


def load_reward_function(reward: RewardFunction) -> Callable:
    """Import ``reward.path`` as verl's ``get_custom_reward_fn`` does (``spec_from_file_location``, then
    ``exec_module``) and return its function ``reward.name``, after checking that verl's call binds to its signature.

    The module is imported under a private name (verl uses ``custom_module``), and removed from ``sys.modules``
    again; importing runs the file's top-level code, as verl will.

    Raises:
        VerlfitError: the file is missing or not a file; it does not import (the exception and its line); it has no
            attribute ``name`` (listing the functions it has); the attribute is not callable; its signature cannot
            take ``data_source, solution_str, ground_truth, extra_info`` as keywords.
    """
    path = reward.path
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise VerlfitError(f"reward function file {path} {what}", fix="pass --reward-function the .py file holding the function, e.g. reward.py:compute_score", exit_code=2)
    module_name = f"verlfit_reward_check_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise VerlfitError(f"reward function file {path}: Python cannot import it (not a .py file?)", fix="pass a Python source file (.py)", exit_code=2)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as error:  # the user's file: any failure (a sys.exit too) is reported, chained
        raise VerlfitError(
            f"reward function file {path} does not import: {type(error).__name__}: {error}{_where(error, path)}",
            fix=f"fix the file so that `python {path}` runs; verl imports it the same way in every worker",
            exit_code=2,
        ) from error
    finally:
        sys.modules.pop(module_name, None)
    if not hasattr(module, reward.name):
        functions = sorted(name for name, value in vars(module).items() if inspect.isfunction(value) and value.__module__ == module_name)
        have = f"its functions: {', '.join(functions)}" if functions else "it defines no function"
        suggestion = f"--reward-function {path}:{functions[0]}" if len(functions) == 1 else f"--reward-function {path}:NAME with one of them"
        raise VerlfitError(f"reward function file {path} has no function {reward.name!r} ({have})", fix=f"pass {suggestion}, or rename the function", exit_code=2)
    function = getattr(module, reward.name)
    if not callable(function):
        raise VerlfitError(f"{reward.name} in {path} is a {type(function).__name__}, not a function", fix="point --reward-function at a function", exit_code=2)
    try:
        inspect.signature(function).bind(**{keyword: None for keyword in CALL_KEYWORDS})
    except TypeError as error:
        raise VerlfitError(
            f"{reward.name} in {path} cannot be called as verl 0.4.1 calls it, with the keywords {', '.join(CALL_KEYWORDS)} ({error})",
            fix=f"define it as def {reward.name}(data_source, solution_str, ground_truth, extra_info=None): ... returning a number (or a dict with 'score')",
            exit_code=2,
        ) from error
    except ValueError:
        pass  # a builtin without a readable signature: the calls on real rows decide
    return function


def _where(error: BaseException, path: Path) -> str:
    """`` (line N)`` of the deepest frame of ``error``'s traceback in ``path`` (or of a SyntaxError), else ``""``."""
    if isinstance(error, SyntaxError):
        return ""  # its message names the file and line already
    line = None
    for frame, number in _frames(error.__traceback__):
        if Path(frame.f_code.co_filename) == path:
            line = number
    return f" (line {line})" if line else ""


def _frames(trace) -> Iterable:
    while trace is not None:
        yield trace.tb_frame, trace.tb_lineno
        trace = trace.tb_next


def score_value(result: Any) -> float | None:
    """The reward in what a scoring function returned, as the naive reward manager takes it: a real number (bools
    included; ``reward_tensor[i, j] = reward``), or a dict's ``"score"`` that is one; None for anything else. A
    non-finite number is returned as is (the caller refuses it)."""
    if isinstance(result, Mapping):
        result = result.get("score")
    if isinstance(result, numbers.Real):
        return float(result)
    return None


def call_on_rows(function: Callable, rows: list[dict], keys: DataKeys = DataKeys(), label: str = "the reward function", reward_kwargs: Mapping[str, Any] | None = None) -> list[ScoredRow]:
    """Call ``function`` as the naive reward manager does on each row (a dict of the training parquet's columns plus
    ``"_row"``, its index), once with the ground truth as the response and once with an empty response.

    Args:
        function: the scoring function.
        rows: from :func:`training_rows`.
        keys: the data keys (``data.reward_fn_key`` names the ``data_source`` column).
        label: how messages name the function (e.g. ``"score in /abs/reward.py"``).
        reward_kwargs: ``custom_reward_function.reward_kwargs``, added to every call as verl's wrapper does.

    Returns:
        One :class:`ScoredRow` per call.

    Raises:
        VerlfitError: a call raises, or returns neither a number nor a dict with a numeric ``"score"``, or a number
            that is not finite (NaN would poison every advantage in its group); the message names the function, the
            row and the response.
    """
    scored = []
    for row in rows:
        ground_truth = row["reward_model"]["ground_truth"]
        for solution in (ground_truth if isinstance(ground_truth, str) else str(ground_truth), ""):
            shown = "the ground truth" if solution else "an empty response"
            where = f"training row {row['_row']} (data_source {row.get(keys.reward_fn_key)!r}, ground truth {ground_truth!r})"
            try:
                result = function(
                    data_source=row.get(keys.reward_fn_key),
                    solution_str=solution,
                    ground_truth=ground_truth,
                    extra_info=row.get("extra_info"),
                    **dict(reward_kwargs or {}),
                )
            except NotImplementedError as error:
                raise VerlfitError(
                    f"{label} cannot score {where}: NotImplementedError: {error}",
                    fix="pass --reward-function FILE.py:FUNCTION with a function that scores this data_source, or prepare the data with a data_source verl scores",
                    exit_code=2,
                ) from error
            except Exception as error:  # the user's code: any exception is reported with the row, then chained
                raise VerlfitError(
                    f"{label} raised {type(error).__name__}: {error} on {where} with {shown} as the response",
                    fix="make it return a number (or a dict with 'score') for every response, including an empty one",
                    exit_code=2,
                ) from error
            value = score_value(result)
            if value is None:
                raise VerlfitError(
                    f"{label} returned {result!r} ({type(result).__name__}) on {where} with {shown} as the response: verl needs a number, or a dict with a numeric 'score'",
                    fix="return a float (e.g. 1.0 for a correct answer, 0.0 otherwise), or {'score': float, ...}",
                    exit_code=2,
                )
            if not math.isfinite(value):
                raise VerlfitError(f"{label} returned {value} on {where} with {shown} as the response", fix="return a finite number", exit_code=2)
            scored.append(ScoredRow(row["_row"], solution, value))
    return scored


def training_rows(parquet: str | os.PathLike, count: int = ROWS_CHECKED, keys: DataKeys = DataKeys()) -> list[dict]:
    """The first ``count`` rows of a training parquet file as the reward manager sees them: each a dict with the
    ``data.reward_fn_key`` column, ``reward_model``, ``extra_info`` (when present) and ``"_row"``, the row's index.

    Raises:
        VerlfitError: the file does not read as parquet, or lacks the columns the reward manager reads.
    """
    import pyarrow
    import pyarrow.parquet as pq

    from verlfit.data_folder import missing_verl_columns

    try:
        parquet_file = pq.ParquetFile(parquet)
        missing = [name for name in missing_verl_columns(parquet_file.schema_arrow, keys) if name != keys.prompt_key]
        if missing:
            raise VerlfitError(f"{parquet} lacks {', '.join(missing)}, which verl's reward manager reads", fix="prepare the data with verlfit prepare-data (or set data.reward_fn_key to the column naming the task)", exit_code=2)
        columns = [name for name in (keys.reward_fn_key, "reward_model", "extra_info") if name in parquet_file.schema_arrow.names]
        table = next(parquet_file.iter_batches(batch_size=max(1, count), columns=columns), None)
    except (OSError, pyarrow.ArrowException) as error:
        raise VerlfitError(f"{parquet} does not read as parquet ({error})", fix="prepare the data with verlfit prepare-data or verlfit prepare-gsm8k", exit_code=2) from error
    rows = [] if table is None else table.to_pylist()
    return [{**row, "_row": index} for index, row in enumerate(rows[:count])]


def data_sources(parquet: str | os.PathLike, keys: DataKeys = DataKeys()) -> list[str]:
    """The distinct values of the ``data.reward_fn_key`` column of a parquet file, sorted (None shown as ``"None"``).

    Raises:
        VerlfitError: the file does not read or has no such column.
    """
    import pyarrow
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        column = pq.read_table(parquet, columns=[keys.reward_fn_key]).column(0)
    except (OSError, pyarrow.ArrowException, KeyError) as error:
        raise VerlfitError(f"{parquet}: cannot read its {keys.reward_fn_key} column ({error})", fix="prepare the data with verlfit prepare-data (or set data.reward_fn_key)", exit_code=2) from error
    return sorted(str(value) for value in pc.unique(column).to_pylist())


def verl_scores(data_source: str, ground_truth: Any = "0") -> bool:
    """True when verl 0.4.1's ``default_compute_score`` has a scorer for ``data_source``: decided by verl's own
    dispatch (``verl/utils/reward_score/__init__.py``), called with an empty response and ``ground_truth`` (pass a
    real row's: some scorers need their own form, e.g. search-R1's ``{"target": [...]}``); only its
    ``NotImplementedError`` means no.

    Raises:
        VerlfitError: the scorer verl dispatches to fails on that input for another reason (e.g. geo3k's
            ``mathruler`` is not installed, or the ground truth is not in the form it reads), naming the data source
            and the error.
    """
    from verl.utils.reward_score import default_compute_score

    try:
        default_compute_score(data_source, "", ground_truth)
    except NotImplementedError:
        return False
    except Exception as error:  # the dispatch found a scorer, and that scorer cannot score this row here
        raise VerlfitError(
            f"verl's scorer for data_source {data_source!r} fails on an empty response with ground truth {ground_truth!r}: {type(error).__name__}: {error}",
            fix="install what the scorer needs in the image and give the ground truth the form it reads, or pass --reward-function FILE.py:FUNCTION",
            exit_code=2,
        ) from error
    return True


def check_reward_function(reward: RewardFunction, train_parquet: str | os.PathLike, keys: DataKeys = DataKeys(), reward_kwargs: Mapping[str, Any] | None = None, count: int = ROWS_CHECKED) -> list[ScoredRow]:
    """Load the reward function (:func:`load_reward_function`) and call it on the first ``count`` rows of
    ``train_parquet`` (:func:`call_on_rows`).

    Returns:
        The scores it gave (two per row: ground truth, empty response).

    Raises:
        VerlfitError: exit status 2, naming the file, the function and the row.
    """
    function = load_reward_function(reward)
    rows = training_rows(train_parquet, count, keys)
    if not rows:
        raise VerlfitError(f"{train_parquet} has no rows to check the reward function on", fix="prepare the data again (verlfit prepare-data)", exit_code=2)
    return call_on_rows(function, rows, keys, label=f"{reward.name} in {reward.path}", reward_kwargs=reward_kwargs)


def check_verl_scores(train_parquet: str | os.PathLike, keys: DataKeys = DataKeys(), count: int = ROWS_CHECKED) -> list[ScoredRow]:
    """Without a reward function: every ``data_source`` of ``train_parquet`` must be one verl's
    ``default_compute_score`` scores (:func:`verl_scores`), and it is called on the first ``count`` rows
    (:func:`call_on_rows`).

    Raises:
        VerlfitError: exit status 2, naming the data sources verl cannot score and the fix (a reward function).
    """
    from verl.utils.reward_score import default_compute_score

    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(train_parquet, columns=[keys.reward_fn_key, "reward_model"])
    unscored = []
    for source in data_sources(train_parquet, keys):
        first = table.filter(pc.equal(table.column(keys.reward_fn_key).cast("string"), source)).slice(0, 1).to_pylist()
        if not verl_scores(source, first[0]["reward_model"]["ground_truth"] if first else "0"):
            unscored.append(source)
    if unscored:
        raise VerlfitError(
            f"verl 0.4.1 has no scorer for data_source {', '.join(repr(source) for source in unscored)} in {train_parquet} "
            "(verl/utils/reward_score/__init__.py: default_compute_score raises NotImplementedError at the first validation)",
            fix="pass a reward function: --reward-function FILE.py:FUNCTION (or after --: custom_reward_function.path=FILE.py custom_reward_function.name=FUNCTION)",
            exit_code=2,
        )
    return call_on_rows(default_compute_score, training_rows(train_parquet, count, keys), keys, label="verl's default_compute_score")
