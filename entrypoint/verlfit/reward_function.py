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

:func:`check_reward_function` loads the file as verl does and calls the function on every row of the training and
test sets (once with the ground truth as the response, once with an empty response; milliseconds a row for a rule
reward), each call under a time limit (:data:`CALL_TIME_LIMIT_S`), so that a reward that cannot be computed, hangs, or
returns what verl cannot use fails in seconds, naming the file, the function, the split and the row. The functions
here take typed values (no argparse);
``verlfit train --reward-function FILE[:NAME]`` and the doctor call them.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import numbers
import os
import signal
import sys
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from verlfit.data_folder import DataKeys
from verlfit.errors import VerlfitError

DEFAULT_FUNCTION_NAME = "compute_score"  # verl 0.4.1 ppo_trainer.yaml: custom_reward_function.name
# the keywords the naive reward manager passes (verl/workers/reward_manager/naive.py, NaiveRewardManager.__call__)
CALL_KEYWORDS = ("data_source", "solution_str", "ground_truth", "extra_info")
# Seconds one call of the reward may take in the check before it is reported as hanging. verl 0.4.1's naive reward
# manager calls it once per response with no time limit, so a reward that hangs on a row hangs the run there; a
# rule reward answers in microseconds to milliseconds, so 10 s is a bound verlfit sets, not a verl number.
CALL_TIME_LIMIT_S = 10.0
# The largest reward magnitude the check accepts. verl's scorers return 0..1 (gsm8k.py: 0 or 1; math: 0 or 1); a
# reward a million times that swamps the KL penalty (coefficient ~1e-3) and the critic's squared value loss, and
# 1e300 overflows float32 (verl keeps rewards in a float32 tensor: naive.py reward_tensor). A bound verlfit sets.
REWARD_MAGNITUDE_LIMIT = 1e6
SPLIT_WORDS = {"train": "training", "test": "test"}  # how a message names a row of train.parquet / test.parquet


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
    """One call of the check: the row (index in its file), the response given, the reward returned, and the split
    (``"train"``, ``"test"``: the file's name without ``.parquet``)."""

    row: int
    solution: str
    score: float
    split: str = "train"


class _CallTimedOut(BaseException):
    """Raised in the reward's frame when a call runs past its time limit (a BaseException, so that the user's
    ``except Exception`` cannot swallow it)."""


@contextmanager
def time_limit(seconds: float | None):
    """Raise :class:`_CallTimedOut` inside the ``with`` block once ``seconds`` (wall clock) have passed, through
    ``SIGALRM`` (``signal.setitimer``): it interrupts Python code and sleeps, not a C call that never returns to the
    interpreter. No limit where ``seconds`` is falsy, off the main thread, or without ``setitimer`` (Windows): the
    check then runs unguarded."""
    if not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum, frame):
        raise _CallTimedOut()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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
        raise VerlfitError(
            f"--reward-function {spec!r}: no file given",
            fix="pass --reward-function FILE.py[:FUNCTION], e.g. reward.py:compute_score",
            exit_code=2,
        )
    if not name:
        raise VerlfitError(
            f"--reward-function {spec!r}: no function name after ':'",
            fix=f"pass --reward-function {file_part}:FUNCTION, or {file_part} alone for {DEFAULT_FUNCTION_NAME}",
            exit_code=2,
        )
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
    from verlfit.input_files import require_regular_file

    path = require_regular_file(
        reward.path,
        "reward function file",
        fix="pass --reward-function the .py file holding the function, e.g. reward.py:compute_score",
    )
    module_name = f"verlfit_reward_check_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise VerlfitError(
            f"reward function file {path}: Python cannot import it (not a .py file?)",
            fix="pass a Python source file (.py)",
            exit_code=2,
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except ImportError as error:
        beside = _module_beside(path, error.name)
        if beside is None:
            raise VerlfitError(
                f"reward function file {path} does not import: {type(error).__name__}: {error}{_where(error, path)}",
                fix=(
                    "install what it imports in this Python (and in the image), or fix the file so that `python"
                    f" {path}` runs; verl imports it the same way in every worker"
                ),
                exit_code=2,
            ) from error
        raise _helper_refusal(path, beside) from error
    except (Exception, SystemExit) as error:  # the user's file: any failure (a sys.exit too) is reported, chained
        raise VerlfitError(
            f"reward function file {path} does not import: {type(error).__name__}: {error}{_where(error, path)}",
            fix=f"fix the file so that `python {path}` runs; verl imports it the same way in every worker",
            exit_code=2,
        ) from error
    finally:
        sys.modules.pop(module_name, None)
    if not hasattr(module, reward.name):
        functions = sorted(
            name
            for name, value in vars(module).items()
            if inspect.isfunction(value) and value.__module__ == module_name
        )
        have = f"its functions: {', '.join(functions)}" if functions else "it defines no function"
        suggestion = (
            f"--reward-function {path}:{functions[0]}"
            if len(functions) == 1
            else f"--reward-function {path}:NAME with one of them"
        )
        raise VerlfitError(
            f"reward function file {path} has no function {reward.name!r} ({have})",
            fix=f"pass {suggestion}, or rename the function",
            exit_code=2,
        )
    function = getattr(module, reward.name)
    for value in vars(module).values():  # imported here because the folder is on sys.path, but absent from the run
        source = value if inspect.ismodule(value) else sys.modules.get(getattr(value, "__module__", None) or "")
        beside = _module_beside(path, getattr(source, "__name__", None))
        if beside is not None:
            raise _helper_refusal(path, beside)
    if not callable(function):
        raise VerlfitError(
            f"{reward.name} in {path} is a {type(function).__name__}, not a function",
            fix="point --reward-function at a function",
            exit_code=2,
        )
    try:
        inspect.signature(function).bind(**{keyword: None for keyword in CALL_KEYWORDS})
    except TypeError as error:
        raise VerlfitError(
            f"{reward.name} in {path} cannot be called as verl 0.4.1 calls it, with the keywords "
            f"{', '.join(CALL_KEYWORDS)} ({error})",
            fix=f"define it as def {reward.name}(data_source, solution_str, ground_truth, extra_info=None): ... "
            "returning a number (or a dict with 'score')",
            exit_code=2,
        ) from error
    except ValueError:
        pass  # a builtin without a readable signature: the calls on real rows decide
    return function


def _module_beside(path: Path, module_name: str | None) -> Path | None:
    """The file or package of the top-level module ``module_name`` in the reward file's own folder
    (``helper.py`` or ``helper/``), or None: a module the reward imports from beside it."""
    if not module_name:
        return None
    top = module_name.split(".")[0]
    for candidate in (path.parent / f"{top}.py", path.parent / top / "__init__.py"):
        if candidate.is_file() and candidate != path:
            return candidate if candidate.name != "__init__.py" else candidate.parent
    return None


def _helper_refusal(path: Path, beside: Path) -> VerlfitError:
    """The error for a reward file that imports ``beside``, a module in its own folder."""
    return VerlfitError(
        f"reward function file {path} imports {beside.name.removesuffix('.py')} from {beside}, beside it: verlfit"
        f" copies only {path.name} into the run directory (RUN_DIR/reward/{path.name}, which verl loads in every"
        " worker), so that import would fail in the run",
        fix=(
            f"put what it uses from {beside.name} into {path.name}, or install it as a package (pip install) in the"
            " image"
        ),
        exit_code=2,
    )


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


def row_place(row: Mapping) -> str:
    """How messages name a row from :func:`reward_rows`: ``"training row 4 of /data/train.parquet"``, ``"test row 0 of
    /data/test.parquet"`` (``"row 4"`` for a row without its file)."""
    split = row.get("_split", "train")
    where = f" of {row['_file']}" if row.get("_file") else ""
    return f"{SPLIT_WORDS.get(split, split)} row {row['_row']}{where}"


def call_on_rows(
    function: Callable,
    rows: list[dict],
    keys: DataKeys = DataKeys(),
    label: str = "the reward function",
    reward_kwargs: Mapping[str, Any] | None = None,
    time_limit_s: float | None = CALL_TIME_LIMIT_S,
) -> list[ScoredRow]:
    """Call ``function`` as the naive reward manager does on each row (a dict of a split's columns plus ``"_row"``,
    its index, and where known ``"_split"`` and ``"_file"``: :func:`reward_rows`), once with the ground truth as the
    response and once with an empty response, each call under ``time_limit_s`` seconds (:func:`time_limit`).

    Args:
        function: the scoring function.
        rows: from :func:`reward_rows`.
        keys: the data keys (``data.reward_fn_key`` names the ``data_source`` column).
        label: how messages name the function (e.g. ``"score in /abs/reward.py"``).
        reward_kwargs: ``custom_reward_function.reward_kwargs``, added to every call as verl's wrapper does.
        time_limit_s: seconds per call (default :data:`CALL_TIME_LIMIT_S`; None: no limit).

    Returns:
        One :class:`ScoredRow` per call.

    Raises:
        VerlfitError (exit status 2): a call raises, runs past ``time_limit_s``, or returns neither a number nor a
            dict with a numeric ``"score"``, or a number that is not finite (NaN would poison every advantage in its
            group) or larger in magnitude than :data:`REWARD_MAGNITUDE_LIMIT`; the message names the function, the
            split, the file, the row and the response.
    """
    scored = []
    for row in rows:
        ground_truth = row["reward_model"]["ground_truth"]
        for solution in (ground_truth if isinstance(ground_truth, str) else str(ground_truth), ""):
            shown = "the ground truth" if solution else "an empty response"
            where = f"{row_place(row)} (data_source {row.get(keys.reward_fn_key)!r}, ground truth {ground_truth!r})"
            try:
                with time_limit(time_limit_s):
                    result = function(
                        data_source=row.get(keys.reward_fn_key),
                        solution_str=solution,
                        ground_truth=ground_truth,
                        extra_info=row.get("extra_info"),
                        **dict(reward_kwargs or {}),
                    )
            except _CallTimedOut as error:
                raise VerlfitError(
                    f"{label} did not return within {time_limit_s:g} s on {where} with {shown} as the response: "
                    "verl calls it once per response with no time limit, so the run would hang there",
                    fix=(
                        "make it return for every response, including an empty one (no network call or loop without a"
                        " bound in a reward)"
                    ),
                    exit_code=2,
                ) from error
            except NotImplementedError as error:
                raise VerlfitError(
                    f"{label} cannot score {where}: NotImplementedError: {error}",
                    fix="pass --reward-function FILE.py:FUNCTION with a function that scores this data_source, or "
                    "prepare the data with a data_source verl scores",
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
                    f"{label} returned {result!r} ({type(result).__name__}) on {where} with {shown} as the response: "
                    "verl needs a number, or a dict with a numeric 'score'",
                    fix="return a float (e.g. 1.0 for a correct answer, 0.0 otherwise), or {'score': float, ...}",
                    exit_code=2,
                )
            if not math.isfinite(value):
                raise VerlfitError(
                    f"{label} returned {value} on {where} with {shown} as the response",
                    fix="return a finite number",
                    exit_code=2,
                )
            if abs(value) > REWARD_MAGNITUDE_LIMIT:
                raise VerlfitError(
                    f"{label} returned {value:g} on {where} with {shown} as the response: larger in magnitude than"
                    f" {REWARD_MAGNITUDE_LIMIT:g}, which swamps the KL penalty and the critic's value loss (verl's own"
                    " scorers return 0 to 1) and overflows float32 past 3.4e38",
                    fix="scale the reward to a few units (e.g. 1.0 for a correct answer, 0.0 otherwise)",
                    exit_code=2,
                )
            scored.append(ScoredRow(row["_row"], solution, value, row.get("_split", "train")))
    return scored


def describe_scores(scored: Sequence[ScoredRow]) -> str:
    """What the check saw, for the dry run and the doctor: the rows per split and the rewards given to the ground
    truth and to an empty response (:func:`call_on_rows` scores each row twice, in that order), each as
    ``value xcount``, most common first, at most 3, e.g.
    ``"40 training and 8 test rows; the ground truth scored 1 x48; an empty response scored 0 x48"``."""
    rows = Counter(s.split for s in scored[::2])
    counted = " and ".join(f"{count} {SPLIT_WORDS.get(split, split)}" for split, count in rows.items())
    parts = [f"{counted} row{'' if len(scored) == 2 else 's'}"]
    for shown, calls in (("the ground truth", scored[::2]), ("an empty response", scored[1::2])):
        counts = Counter(s.score for s in calls)
        common = counts.most_common(3)
        rest = len(calls) - sum(count for _, count in common)
        parts.append(
            f"{shown} scored "
            + ", ".join(f"{value:g} x{count}" for value, count in common)
            + (f" and {rest} other" if rest else "")
        )
    return "; ".join(parts)


def reward_rows(parquet: str | os.PathLike, keys: DataKeys = DataKeys(), count: int | None = None) -> list[dict]:
    """The rows of a parquet split (the first ``count``; all when None) as the reward manager sees them: each a dict
    with the ``data.reward_fn_key`` column, ``reward_model``, ``extra_info`` (when present), ``"_row"`` (the row's
    index), ``"_split"`` (the file's name without ``.parquet``) and ``"_file"`` (its path).

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
            raise VerlfitError(
                f"{parquet} lacks {', '.join(missing)}, which verl's reward manager reads",
                fix="prepare the data with verlfit prepare-data (or set data.reward_fn_key to the column naming the "
                "task)",
                exit_code=2,
            )
        columns = [
            name
            for name in (keys.reward_fn_key, "reward_model", "extra_info")
            if name in parquet_file.schema_arrow.names
        ]
        table = parquet_file.read(columns=columns)
    except (OSError, pyarrow.ArrowException) as error:
        raise VerlfitError(
            f"{parquet} does not read as parquet ({error})",
            fix="prepare the data with verlfit prepare-data or verlfit prepare-gsm8k",
            exit_code=2,
        ) from error
    if count is not None:
        table = table.slice(0, count)
    split = Path(parquet).name.removesuffix(".parquet")
    return [
        {**row, "_row": index, "_split": split, "_file": str(parquet)} for index, row in enumerate(table.to_pylist())
    ]


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
            f"verl's scorer for data_source {data_source!r} fails on an empty response with ground truth "
            f"{ground_truth!r}: {type(error).__name__}: {error}",
            fix="install what the scorer needs in the image and give the ground truth the form it reads, or pass "
            "--reward-function FILE.py:FUNCTION",
            exit_code=2,
        ) from error
    return True


def split_files(data: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    """The parquet files a check reads: ``data`` itself for a file or a list of files; for a data folder its
    ``train.parquet`` and, when present, ``test.parquet`` (verl validates on it: its rows are scored too)."""
    if isinstance(data, (str, os.PathLike)):
        path = Path(data)
        if not path.is_dir():
            return [path]
        return [
            path / name
            for name in ("train.parquet", "test.parquet")
            if name == "train.parquet" or (path / name).is_file()
        ]
    return [Path(item) for item in data]


def check_reward_function(
    reward: RewardFunction,
    data: str | os.PathLike | Sequence[str | os.PathLike],
    keys: DataKeys = DataKeys(),
    reward_kwargs: Mapping[str, Any] | None = None,
    count: int | None = None,
    time_limit_s: float | None = CALL_TIME_LIMIT_S,
) -> list[ScoredRow]:
    """Load the reward function (:func:`load_reward_function`) and call it on every row (the first ``count`` of each
    file where given) of ``data``'s splits (:func:`split_files`: a data folder's train.parquet and test.parquet, or
    the files given), each call within ``time_limit_s`` seconds (:func:`call_on_rows`).

    Returns:
        The scores it gave (two per row: ground truth, empty response), split by split.

    Raises:
        VerlfitError: exit status 2, naming the file, the function, the split and the row.
    """
    function = load_reward_function(reward)
    files = split_files(data)
    rows = [row for path in files for row in reward_rows(path, keys, count)]
    if not rows:
        raise VerlfitError(
            f"{', '.join(map(str, files))} {'has' if len(files) == 1 else 'have'} no rows to check the reward"
            " function on",
            fix="prepare the data again (verlfit prepare-data)",
            exit_code=2,
        )
    return call_on_rows(
        function,
        rows,
        keys,
        label=f"{reward.name} in {reward.path}",
        reward_kwargs=reward_kwargs,
        time_limit_s=time_limit_s,
    )


def check_verl_scores(
    data: str | os.PathLike | Sequence[str | os.PathLike], keys: DataKeys = DataKeys(), count: int | None = None
) -> list[ScoredRow]:
    """Without a reward function: every ``data_source`` of ``data``'s splits (:func:`split_files`: train.parquet and
    test.parquet of a data folder; verl validates on the test split with the same scorer) must be one verl's
    ``default_compute_score`` scores (:func:`verl_scores`), and it is called on every row (the first ``count`` of each
    file where given: :func:`call_on_rows`).

    Raises:
        VerlfitError: exit status 2, naming the data sources verl cannot score, the files holding them and the fix (a
            reward function); or verl missing from this Python.
    """
    try:
        from verl.utils.reward_score import default_compute_score
    except ImportError as error:
        raise VerlfitError(
            f"verl is not installed in this Python ({error}), so its scorer cannot be checked on the data",
            fix="pip install verl==0.4.1 (the images install it), or pass --reward-function FILE.py:FUNCTION",
            exit_code=2,
        ) from error

    files = split_files(data)
    rows = [row for path in files for row in reward_rows(path, keys, count)]
    # data_source -> (the ground truth of its first row, the files holding it)
    first: dict[str, tuple[Any, set[str]]] = {}
    for row in rows:
        source = str(row.get(keys.reward_fn_key))
        first.setdefault(source, (row["reward_model"]["ground_truth"], set()))[1].add(Path(row["_file"]).name)
    unscored = [source for source in sorted(first) if not verl_scores(source, first[source][0])]
    if unscored:
        named = ", ".join(
            f"{source!r} (in {', '.join(sorted(first[source][1], key=lambda name: name != 'train.parquet'))})"
            for source in unscored
        )
        raise VerlfitError(
            f"verl 0.4.1 has no scorer for data_source {named} of {', '.join(map(str, files))} "
            "(verl/utils/reward_score/__init__.py: default_compute_score raises NotImplementedError at the first "
            "validation)",
            fix="pass a reward function: --reward-function FILE.py:FUNCTION (or after --: "
            "custom_reward_function.path=FILE.py custom_reward_function.name=FUNCTION)",
            exit_code=2,
        )
    return call_on_rows(default_compute_score, rows, keys, label="verl's default_compute_score")
