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
reward), in a child process verlfit can stop (:mod:`verlfit.reward_process`: a scratch directory as its current
directory, the import within :data:`IMPORT_TIME_LIMIT_S`, each call within :data:`CALL_TIME_LIMIT_S`), so that a reward
that cannot be computed, hangs, exits the process or returns what verl cannot use fails in seconds, naming the file,
the function, the split and the row; it also finds the modules the file imports from its own folder, which the run
directory copies. The functions here take typed values (no argparse);
``verlfit train --reward-function FILE[:NAME]`` and the doctor call them.
"""

from __future__ import annotations

import math
import numbers
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from verlfit.data_folder import DataKeys, missing_verl_columns
from verlfit.durations import format_duration
from verlfit.errors import VerlfitError
from verlfit.input_files import require_regular_file
from verlfit.reward_process import (
    CALL_KEYWORDS,
    ImportedModules,
    PrintedOutput,
    Returned,
    RewardClosedOutput,
    RewardExited,
    RewardProcess,
    RewardRaised,
    RewardRefused,
    RewardTimedOut,
)

DEFAULT_FUNCTION_NAME = "compute_score"  # verl 0.4.1 ppo_trainer.yaml: custom_reward_function.name
# Seconds one call of the reward may take in the check before it is reported as hanging. verl 0.4.1's naive reward
# manager calls it once per response with no time limit, so a reward that hangs on a row hangs the run there; a
# rule reward answers in microseconds to milliseconds, so 10 s is a bound verlfit sets, not a verl number.
CALL_TIME_LIMIT_S = 10.0
# Seconds the import of the reward file may take in the check. verl imports it once per worker, with no time limit;
# a file importing torch and transformers takes some seconds on a loaded 2-core machine, so 60 s is a bound verlfit
# sets that only a file hanging at import (a sleep, a loop, a download that never ends) reaches.
IMPORT_TIME_LIMIT_S = 60.0
# The largest reward magnitude the check accepts. verl's scorers return 0..1 (gsm8k.py: 0 or 1; math: 0 or 1); a
# reward a million times that swamps the KL penalty (coefficient ~1e-3) and the critic's squared value loss, and
# 1e300 overflows float32 (verl keeps rewards in a float32 tensor: naive.py reward_tensor). A bound verlfit sets.
REWARD_MAGNITUDE_LIMIT = 1e6
# Why a reward that closes standard output or error is refused (RewardClosedOutput), and the fix
CLOSED_OUTPUT_WHY = (
    ": verl's reward manager prints the first responses and their scores right after scoring them (verl 0.4.1"
    ' naive.py, print("[prompt]", ...)), so the run would stop at its first step (ValueError: I/O operation on closed'
    " file, or OSError: Bad file descriptor)"
)
CLOSED_OUTPUT_FIX = (
    "leave standard output and error open in the reward (to silence what it prints, wrap the prints in"
    " contextlib.redirect_stdout(io.StringIO()))"
)
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
    # the modules it imports from its own folder (absolute files, found by :func:`check_reward_function`): copied
    # with it into the run directory, whose reward folder verl's workers then find on PYTHONPATH
    modules: tuple[Path, ...] = ()

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


def parse_reward_function(spec: str, base: str | os.PathLike | None = None) -> RewardFunction:
    """``FILE[:NAME]`` -> :class:`RewardFunction` (``NAME`` defaults to :data:`DEFAULT_FUNCTION_NAME`), the file made
    absolute against ``base`` (default: the current directory). A ``:`` followed by something that is not a Python
    name is part of the file name, and so is a ``:`` before the file's ``.py`` (``my:dir/r.py:score``).

    Raises:
        VerlfitError: exit status 2 for an empty spec, an empty name after ``:``, or more than one ``:`` after the
            ``.py`` file (``a.py:b:c`` read as the file ``a.py:b`` and the function ``c`` named a file that does not
            exist).
    """
    text = str(spec).strip()
    python_end = text.rfind(".py:") + len(".py")
    if python_end >= len(".py") and ":" in text[python_end + 1 :]:
        python_file, first_name = text[:python_end], text[python_end + 1 :].split(":")[0] or DEFAULT_FUNCTION_NAME
        raise VerlfitError(
            f"--reward-function {spec!r}: more than one ':' after the file {python_file}: expected PATH.py:FUNCTION, "
            "one function name after the file",
            fix=f"pass --reward-function {python_file}:FUNCTION, e.g. {python_file}:{first_name}",
            exit_code=2,
        )
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


# A check slower than this says how far it got, every PROGRESS_EVERY_S seconds, on standard error (verlfit's choices:
# a GSM8K check of a reward taking 50 ms a call is 17,584 calls, about 15 minutes, silent before)
PROGRESS_AFTER_S = 5.0
PROGRESS_EVERY_S = 10.0


class CheckProgress:
    """Progress lines for a long check (:func:`call_on_rows`'s ``progress``): once ``after_s`` seconds have passed,
    one line every ``every_s`` seconds on ``stream``, e.g.
    ``"verlfit: checking score in /abs/reward.py: 4,000 of 17,584 calls in 40s, about 2m16s left"`` (durations as
    :func:`verlfit.durations.format_duration` writes them); nothing for a
    check that ends sooner. ``clock`` is :func:`time.monotonic` (a test passes its own)."""

    def __init__(
        self,
        label: str,
        total_calls: int,
        stream=None,
        after_s: float = PROGRESS_AFTER_S,
        every_s: float = PROGRESS_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.label, self.total, self.after_s, self.every_s, self.clock = label, total_calls, after_s, every_s, clock
        self.stream = stream if stream is not None else sys.stderr
        self.started = clock()
        self.next_line = self.started + after_s

    def __call__(self, calls_done: int) -> None:
        now = self.clock()
        if now < self.next_line or calls_done >= self.total:
            return
        elapsed = now - self.started
        left = elapsed / calls_done * (self.total - calls_done) if calls_done else 0.0
        self.stream.write(
            f"verlfit: checking {self.label}: {calls_done:,} of {self.total:,} calls in {format_duration(elapsed)}, "
            f"about {format_duration(left)} left\n"
        )
        self.stream.flush()
        self.next_line = now + self.every_s


def load_reward_function(
    reward: RewardFunction,
    call_time_limit_s: float = CALL_TIME_LIMIT_S,
    import_time_limit_s: float = IMPORT_TIME_LIMIT_S,
    capture_output: bool = False,
) -> RewardProcess:
    """Import ``reward.path`` as verl's ``get_custom_reward_fn`` does, in a child process
    (:class:`verlfit.reward_process.RewardProcess`: a scratch directory, the file's folder first on ``sys.path``,
    stopped at ``import_time_limit_s`` seconds), check that its function ``reward.name`` takes verl's keywords, and
    return the running process: called like the function (keywords only, each call stopped at
    ``call_time_limit_s``). The caller closes it (a context manager).

    Raises:
        VerlfitError (exit status 2), the process closed: the file is missing or not a file; it does not import (the
            exception and its line); it does not finish importing within ``import_time_limit_s``; it exits the
            process while importing (``sys.exit``, ``exit()``, ``os._exit``); it has no attribute ``name`` (listing
            the functions it has); the attribute is not callable; its signature cannot take ``data_source,
            solution_str, ground_truth, extra_info`` as keywords.
    """

    path = require_regular_file(
        reward.path,
        "reward function file",
        fix="pass --reward-function the .py file holding the function, e.g. reward.py:compute_score",
    )
    process = RewardProcess(path, reward.name, call_time_limit_s, capture_output=capture_output)
    try:
        process.load(import_time_limit_s)
    except BaseException as error:
        process.close()
        if isinstance(error, (RewardTimedOut, RewardExited, RewardRaised, RewardRefused, RewardClosedOutput)):
            raise _load_refusal(error, path, reward.name) from error
        raise
    return process


def _load_refusal(error: Exception, path: Path, name: str) -> VerlfitError:
    """The refusal for a reward file that failed to load in its child process (:func:`load_reward_function`)."""
    runs = f"fix the file so that `python {path}` runs; verl imports it the same way in every worker"
    if isinstance(error, RewardTimedOut):
        return VerlfitError(
            f"reward function file {path} did not finish importing within {error.seconds:g} s (stopped there): verl"
            " imports it in every worker before the first step, so the run would hang there",
            fix="move slow work (a sleep, a loop, a download) out of the file's top level so that importing it takes"
            " seconds",
            exit_code=2,
        )
    if isinstance(error, RewardClosedOutput):
        return VerlfitError(
            f"reward function file {path} closes {error} when imported{CLOSED_OUTPUT_WHY}",
            fix=CLOSED_OUTPUT_FIX,
            exit_code=2,
        )
    if isinstance(error, RewardExited):
        return VerlfitError(
            f"the reward function exited the process while {path} was imported ({error.how}): verl would lose the"
            " worker that imports it",
            fix="remove the exit call from the file (raise an exception for an error)",
            exit_code=2,
        )
    if isinstance(error, RewardRaised):
        line = f" (line {error.line})" if error.line else ""
        installs = error.type_name in ("ImportError", "ModuleNotFoundError")
        return VerlfitError(
            f"reward function file {path} does not import: {error.type_name}: {error.text}{line}",
            fix=(
                "install what it imports in this Python (and in the image), or fix the file so that `python"
                f" {path}` runs; verl imports it the same way in every worker"
                if installs
                else runs
            ),
            exit_code=2,
        )
    if error.reason == "not_python":
        return VerlfitError(
            f"reward function file {path}: Python cannot import it (not a .py file?)",
            fix="pass a Python source file (.py)",
            exit_code=2,
        )
    if error.reason == "no_function":
        functions = error.detail
        have = f"its functions: {', '.join(functions)}" if functions else "it defines no function"
        suggestion = (
            f"--reward-function {path}:{functions[0]}"
            if len(functions) == 1
            else f"--reward-function {path}:NAME with one of them"
        )
        return VerlfitError(
            f"reward function file {path} has no function {name!r} ({have})",
            fix=f"pass {suggestion}, or rename the function",
            exit_code=2,
        )
    if error.reason == "not_callable":
        return VerlfitError(
            f"{name} in {path} is a {error.detail}, not a function",
            fix="point --reward-function at a function",
            exit_code=2,
        )
    return VerlfitError(
        f"{name} in {path} cannot be called as verl 0.4.1 calls it, with the keywords "
        f"{', '.join(CALL_KEYWORDS)} ({error.detail})",
        fix=f"define it as def {name}(data_source, solution_str, ground_truth, extra_info=None): ... "
        "returning a number (or a dict with 'score')",
        exit_code=2,
    )


def check_imported_modules(reward: RewardFunction, imported: ImportedModules) -> RewardFunction:
    """``reward`` with the modules it imports from its own folder (:attr:`RewardFunction.modules`).

    Raises:
        VerlfitError (exit status 2): one of them has the name of another module this Python has (the standard
            library's ``random``, an installed package): the run's copy of the folder, first on verl's PYTHONPATH,
            would hide that module from verl itself.
    """
    if reward.path.stem in imported.shadowing:
        raise VerlfitError(
            f"reward function file {reward.path} is named like another module of this Python"
            f" ({reward.path.stem}), and the modules it imports from beside it put its folder's copy first on verl's"
            " PYTHONPATH, where it would hide that module from verl",
            fix=f"rename it (e.g. {reward.path.stem}_reward.py) and pass the new name to --reward-function",
            exit_code=2,
        )
    if imported.shadowing:
        names = ", ".join(imported.shadowing)
        beside = [
            file
            for file in imported.files
            if file.relative_to(reward.path.parent).parts[0].removesuffix(".py") in imported.shadowing
        ]
        raise VerlfitError(
            f"reward function file {reward.path} imports {names} from beside it ({', '.join(map(str, beside))}), and"
            " this Python has another module of that name: the run's copy of the folder goes first on verl's"
            " PYTHONPATH, where it would hide that module from verl",
            fix=f"rename {names} (e.g. {imported.shadowing[0]}_reward) and the imports of it",
            exit_code=2,
        )
    return replace(reward, modules=imported.files)


def score_value(result: Any) -> float | None:
    """The reward in what a scoring function returned, as the naive reward manager takes it: a real number (bools
    included; ``reward_tensor[i, j] = reward``), or a dict's ``"score"`` that is one; None for anything else. A
    non-finite number is returned as is (the caller refuses it)."""
    if isinstance(result, Mapping):
        result = result.get("score")
    if isinstance(result, numbers.Real):
        return float(result)
    return None


def result_shape(result: Any) -> str:
    """What a scoring function returned, as far as verl's naive reward manager keeps it per response: ``"a number"``,
    or ``"a dict with keys 'acc', 'score'"`` (each key goes into ``reward_extra_info``, naive.py)."""
    if isinstance(result, Mapping):
        return "a dict with keys " + ", ".join(repr(key) for key in sorted(result, key=str))
    return "a number"


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
    progress: Callable[[int], None] | None = None,
) -> list[ScoredRow]:
    """Call ``function`` as the naive reward manager does on each row (a dict of a split's columns plus ``"_row"``,
    its index, and where known ``"_split"`` and ``"_file"``: :func:`reward_rows`), once with the ground truth as the
    response and once with an empty response.

    Args:
        function: the scoring function: a :class:`verlfit.reward_process.RewardProcess` (the user's, each call
            stopped at its time limit) or a function of this process (verl's scorer).
        rows: from :func:`reward_rows`.
        keys: the data keys (``data.reward_fn_key`` names the ``data_source`` column).
        label: how messages name the function (e.g. ``"score in /abs/reward.py"``).
        reward_kwargs: ``custom_reward_function.reward_kwargs``, added to every call as verl's wrapper does.
        progress: called with the number of calls made after each one (e.g. a :class:`CheckProgress`).

    Returns:
        One :class:`ScoredRow` per call.

    Raises:
        VerlfitError (exit status 2): a call raises, runs past the process's time limit, exits the process, or returns
            neither a number nor a dict with a numeric ``"score"``, or a number that is not finite (NaN would poison
            every advantage in its group) or larger in magnitude than :data:`REWARD_MAGNITUDE_LIMIT`, or dicts whose
            keys differ from the first call's (or a dict on some calls and a number on others: verl's validation
            asserts one value per response for each key, :func:`result_shape`); the message names the function, the
            split, the file, the row and the response.
    """
    scored = []
    first_shape: tuple[str, str] | None = None  # the first call's result_shape and where it was returned
    for row in rows:
        ground_truth = row["reward_model"]["ground_truth"]
        for solution in (ground_truth if isinstance(ground_truth, str) else str(ground_truth), ""):
            shown = "the ground truth" if solution else "an empty response"
            where = f"{row_place(row)} (data_source {row.get(keys.reward_fn_key)!r}, ground truth {ground_truth!r})"
            try:
                result = function(
                    data_source=row.get(keys.reward_fn_key),
                    solution_str=solution,
                    ground_truth=ground_truth,
                    extra_info=row.get("extra_info"),
                    **dict(reward_kwargs or {}),
                )
            except Exception as error:  # the user's code: any failure is reported with the row, then chained
                raise call_refusal(error, label, where, shown) from error
            value = score_value(result)
            if value is None:
                kind = result.type_name if isinstance(result, Returned) else type(result).__name__
                raise VerlfitError(
                    f"{label} returned {result!r} ({kind}) on {where} with {shown} as the response: "
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
            shape, said = result_shape(result), f"{row_place(row)} with {shown} as the response"
            if first_shape is None:
                first_shape = (shape, said)
            elif shape != first_shape[0]:
                raise VerlfitError(
                    f"{label} returns {first_shape[0]} on {first_shape[1]}, but {shape} on {said}: verl 0.4.1 collects"
                    " each key of the dicts once per response, and its validation asserts that every key has a value"
                    " for every response (ray_trainer.py:696, assert len(lst) == 0 or len(lst) =="
                    " len(sample_scores)), so the first validation would stop the run",
                    fix="return a dict with the same keys for every response (e.g. 'acc': 0.0 where it does not"
                    " apply), or a number for every response",
                    exit_code=2,
                )
            scored.append(ScoredRow(row["_row"], solution, value, row.get("_split", "train")))
            if progress is not None:
                progress(len(scored))
    return scored


def call_refusal(error: Exception, label: str, where: str | None = None, response: str | None = None) -> VerlfitError:
    """The refusal (exit status 2) for one call of ``label`` that failed on ``where`` (``"training row 3 of FILE
    (...)"``; None: the caller names the row) with ``response`` (``"the ground truth"``; None: not said): it ran past
    its limit, exited the process, left standard output or error closed, or raised (in the child,
    :class:`verlfit.reward_process.RewardRaised`, or here)."""
    place = (f" on {where}" if where else "") + (f" with {response} as the response" if response else "")
    if isinstance(error, RewardTimedOut):
        return VerlfitError(
            f"{label} did not return within {error.seconds:g} s{place}: verl calls it once per response with no"
            " time limit, so the run would hang there",
            fix="make it return for every response, including an empty one (no network call or loop without a"
            " bound in a reward)",
            exit_code=2,
        )
    if isinstance(error, RewardClosedOutput):
        return VerlfitError(f"{label} closes {error}{place}{CLOSED_OUTPUT_WHY}", fix=CLOSED_OUTPUT_FIX, exit_code=2)
    if isinstance(error, RewardExited):
        return VerlfitError(
            f"the reward function exited the process: {label}{place} ({error.how}); verl would lose the worker"
            " scoring the batch",
            fix="remove the exit call (return a number for every response; raise an exception for an error)",
            exit_code=2,
        )
    type_name, text = (
        (error.type_name, error.text) if isinstance(error, RewardRaised) else (type(error).__name__, str(error))
    )
    if type_name == "NotImplementedError":
        return VerlfitError(
            f"{label} cannot score{' ' + where if where else ''}: NotImplementedError: {text}",
            fix="pass --reward-function FILE.py:FUNCTION with a function that scores this data_source, or "
            "prepare the data with a data_source verl scores",
            exit_code=2,
        )
    return VerlfitError(
        f"{label} raised {type_name}: {text}{place}",
        fix="make it return a number (or a dict with 'score') for every response, including an empty one",
        exit_code=2,
    )


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


def verl_ground_truth_note(scored: Sequence[ScoredRow]) -> str:
    """For verl's own scorers: why a ground truth that scored 0 on every row is no fault, as a clause to append to
    :func:`describe_scores` (``""`` when some ground truth scored otherwise). verl 0.4.1's scorers read the answer in
    the form a response gives it (``verl/utils/reward_score/gsm8k.py``: the number after ``####``, strict), which the
    bare ground truth (``"72"``) lacks."""
    if any(row.score != 0 for row in scored[::2]):
        return ""
    return (
        "; 0 for the ground truth is expected: verl's scorers read the answer in a response's own form (GSM8K's the"
        " number after '####'), which the bare ground truth lacks"
    )


def reward_rows(parquet: str | os.PathLike, keys: DataKeys = DataKeys(), count: int | None = None) -> list[dict]:
    """The rows of a parquet split (the first ``count``; all when None) as the reward manager sees them: each a dict
    with the ``data.reward_fn_key`` column, ``reward_model``, ``extra_info`` (when present), ``"_row"`` (the row's
    index), ``"_split"`` (the file's name without ``.parquet``) and ``"_file"`` (its path).

    Raises:
        VerlfitError: the file does not read as parquet, or lacks the columns the reward manager reads.
    """
    import pyarrow  # lazy: only where parquet is read or written
    import pyarrow.parquet as pq  # lazy: only where parquet is read or written

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
    # lazy: imports torch; only where verl's own config or scorers are read
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


@dataclass(frozen=True)
class RewardCheck:
    """What :func:`check_reward_function` found: the reward with the modules it imports from its folder
    (:attr:`RewardFunction.modules`), and the scores it gave (two per row: ground truth, empty response)."""

    reward: RewardFunction
    scores: list[ScoredRow]
    printed: PrintedOutput = PrintedOutput(0, ())


def check_reward_function(
    reward: RewardFunction,
    data: str | os.PathLike | Sequence[str | os.PathLike],
    keys: DataKeys = DataKeys(),
    reward_kwargs: Mapping[str, Any] | None = None,
    count: int | None = None,
    time_limit_s: float = CALL_TIME_LIMIT_S,
    import_time_limit_s: float = IMPORT_TIME_LIMIT_S,
) -> RewardCheck:
    """Load the reward function in a child process (:func:`load_reward_function`: a scratch directory as its current
    directory, the import stopped at ``import_time_limit_s`` seconds) and call it on every row (the first ``count``
    of each file where given) of ``data``'s splits (:func:`split_files`: a data folder's train.parquet and
    test.parquet, or the files given), each call stopped at ``time_limit_s`` seconds (:func:`call_on_rows`); then
    ask which modules it imported from its own folder (:func:`check_imported_modules`).

    Returns:
        :class:`RewardCheck`: the reward with its modules, and the scores split by split.

    Raises:
        VerlfitError: exit status 2, naming the file, the function, the split and the row.
    """
    files = split_files(data)
    rows = [row for path in files for row in reward_rows(path, keys, count)]
    if not rows:
        raise VerlfitError(
            f"{', '.join(map(str, files))} {'has' if len(files) == 1 else 'have'} no rows to check the reward"
            " function on",
            fix="prepare the data again (verlfit prepare-data)",
            exit_code=2,
        )
    with load_reward_function(reward, time_limit_s, import_time_limit_s, capture_output=True) as process:
        label = f"{reward.name} in {reward.path}"
        progress = CheckProgress(label, 2 * len(rows))
        scores = call_on_rows(process, rows, keys, label=label, reward_kwargs=reward_kwargs, progress=progress)
        imported = process.imported_modules()
        printed = process.printed()
    return RewardCheck(check_imported_modules(reward, imported), scores, printed)


def describe_printed(printed: PrintedOutput) -> str:
    """A clause for the check's line about what the reward printed (``""`` when nothing), e.g.
    ``"; it printed 96 lines while checked, the first 'scoring 72'"``: verl's workers print them too, on every call
    of every step."""
    if not printed.lines:
        return ""
    first = ", ".join(repr(line) for line in printed.first)
    return (
        f"; it printed {printed.lines} line{'' if printed.lines == 1 else 's'} while checked (first"
        f" {first}), which verl's workers print too, at every call of every step"
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
        # lazy: imports torch; only where verl's own config or scorers are read
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
    label = "verl's default_compute_score"
    return call_on_rows(default_compute_score, rows, keys, label=label, progress=CheckProgress(label, 2 * len(rows)))
