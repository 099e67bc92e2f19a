"""The reward check: a FILE[:NAME] reward function loaded as verl 0.4.1's get_custom_reward_fn loads it and called as
its naive reward manager calls it, on real training rows; and whether verl's default_compute_score scores a
data_source, by verl's own dispatch."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verlfit import reward_function as rewards
from verlfit.data_folder import DataKeys
from verlfit.errors import VerlfitError

GOOD = """
import re


def helper(text):
    return text.strip()


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    found = re.findall(r"#### (\\S+)", solution_str)
    return 1.0 if found and found[-1] == ground_truth else 0.0


def score_dict(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
    return {"score": float(solution_str == ground_truth) + bonus, "exact": solution_str == ground_truth}
"""


def write_train(folder: Path, rows=None) -> Path:
    rows = rows or [
        {
            "data_source": "my/units",
            "prompt": [{"role": "user", "content": f"q{i}"}],
            "ability": "custom",
            "reward_model": {"style": "rule", "ground_truth": str(i)},
            "extra_info": {"split": "train", "index": i},
        }
        for i in range(5)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "train.parquet")
    return folder / "train.parquet"


def reward_file(tmp_path: Path, text: str = GOOD, name: str = "reward.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_parse_defaults_the_name_and_makes_the_path_absolute(tmp_path):
    assert rewards.parse_reward_function("r.py", base=tmp_path) == rewards.RewardFunction(
        tmp_path / "r.py", "compute_score"
    )
    assert rewards.parse_reward_function("sub/r.py:score", base=tmp_path) == rewards.RewardFunction(
        tmp_path / "sub" / "r.py", "score"
    )
    assert rewards.parse_reward_function("/abs/r.py:score").overrides == [
        "custom_reward_function.path=/abs/r.py",
        "custom_reward_function.name=score",
    ]
    assert rewards.from_overrides("r.py", None, base=tmp_path) == rewards.RewardFunction(
        tmp_path / "r.py", "compute_score"
    )
    assert rewards.from_overrides("null", "x") is None
    with pytest.raises(VerlfitError, match="no function name after ':'"):
        rewards.parse_reward_function("r.py:")


def test_more_than_one_colon_after_the_py_file_is_refused_with_the_expected_form(tmp_path):
    # "a.py:b:c" was read as the file "a.py:b" (then "does not exist") and the function c (new-user trial)
    with pytest.raises(VerlfitError) as error:
        rewards.parse_reward_function("a.py:b:c", base=tmp_path)
    assert (error.value.message, error.value.fix, error.value.exit_code) == (
        (
            "--reward-function 'a.py:b:c': more than one ':' after the file a.py: expected PATH.py:FUNCTION, one "
            "function name after the file"
        ),
        "pass --reward-function a.py:FUNCTION, e.g. a.py:b",
        2,
    )
    with pytest.raises(
        VerlfitError, match=r"^--reward-function 'sub/r\.py::score': more than one ':' after the file sub/r\.py"
    ):
        rewards.parse_reward_function("sub/r.py::score", base=tmp_path)
    # a ':' in a folder's name, before the file, is still part of the path
    assert rewards.parse_reward_function("my:dir/r.py:score", base=tmp_path) == rewards.RewardFunction(
        tmp_path / "my:dir" / "r.py", "score"
    )
    assert rewards.parse_reward_function("my:dir/r.py", base=tmp_path) == rewards.RewardFunction(
        tmp_path / "my:dir" / "r.py", "compute_score"
    )


def test_a_good_function_is_called_on_real_rows_with_the_truth_and_an_empty_response(tmp_path):
    train = write_train(tmp_path / "data")
    scored = rewards.check_reward_function(rewards.RewardFunction(reward_file(tmp_path), "compute_score"), train).scores
    # every row, twice: the ground truth alone has no "#### ", so this function gives 0 both times: the call ran,
    # which is the check
    assert [(s.row, s.solution, s.score) for s in scored] == [
        (row, solution, 0.0) for row in range(5) for solution in (str(row), "")
    ]
    assert (
        rewards.describe_scores(scored)
        == "5 training rows; the ground truth scored 0 x5; an empty response scored 0 x5"
    )
    scored = rewards.check_reward_function(
        rewards.RewardFunction(reward_file(tmp_path), "score_dict"), train, reward_kwargs={"bonus": 0.5}, count=1
    ).scores
    assert [(s.solution, s.score) for s in scored] == [("0", 1.5), ("", 0.5)]


def test_a_wrong_name_lists_the_functions_the_file_has(tmp_path):
    path = reward_file(tmp_path)
    with pytest.raises(VerlfitError) as caught:
        rewards.load_reward_function(rewards.RewardFunction(path, "score"))
    assert caught.value.exit_code == 2
    assert (
        str(caught.value)
        == f"reward function file {path} has no function 'score' (its functions: compute_score, helper, score_dict)\n"
        f"  fix: pass --reward-function {path}:NAME with one of them, or rename the function"
    )


def test_missing_file_import_error_and_signature(tmp_path):
    with pytest.raises(VerlfitError, match=f"^reward function file {tmp_path / 'none.py'} does not exist"):
        rewards.load_reward_function(rewards.RewardFunction(tmp_path / "none.py"))
    broken = reward_file(tmp_path, "import os\n\nraise_here = 1 / 0\n", "broken.py")
    with pytest.raises(VerlfitError) as caught:
        rewards.load_reward_function(rewards.RewardFunction(broken))
    assert (
        caught.value.message
        == f"reward function file {broken} does not import: ZeroDivisionError: division by zero (line 3)"
    )
    syntax = reward_file(tmp_path, "def compute_score(:\n", "syntax.py")
    with pytest.raises(VerlfitError, match=r"does not import: SyntaxError: invalid syntax \(syntax\.py, line 1\)\n"):
        rewards.load_reward_function(rewards.RewardFunction(syntax))
    two_args = reward_file(tmp_path, "def compute_score(solution, truth):\n    return 0.0\n", "two.py")
    with pytest.raises(VerlfitError) as caught:
        rewards.load_reward_function(rewards.RewardFunction(two_args))
    assert caught.value.message.startswith(
        f"compute_score in {two_args} cannot be called as verl 0.4.1 calls it, with the keywords data_source,"
        " solution_str, ground_truth, extra_info ("
    )
    # verl's keywords are passed by name, so **kwargs takes them all
    with rewards.load_reward_function(
        rewards.RewardFunction(reward_file(tmp_path, "def compute_score(**kwargs):\n    return 1\n", "kw.py"))
    ) as function:
        assert function(data_source="d", solution_str="s", ground_truth="g", extra_info=None) == 1


@pytest.mark.parametrize(
    "body, message",
    [
        (
            "    return 'yes'\n",
            (
                "compute_score in {path} returned 'yes' (str) on training row 0 of {train} (data_source 'my/units',"
                " ground truth '0') with the ground truth as the response: verl needs a number, or a dict with a"
                " numeric 'score'"
            ),
        ),
        (
            "    return {'acc': 1.0}\n",
            (
                "compute_score in {path} returned {{'acc': 1.0}} (dict) on training row 0 of {train} (data_source"
                " 'my/units', ground truth '0') with the ground truth as the response: verl needs a number, or a dict"
                " with a numeric 'score'"
            ),
        ),
        (
            "    return float(solution_str)\n",
            (
                "compute_score in {path} raised ValueError: could not convert string to float: '' on training row 0 of"
                " {train} (data_source 'my/units', ground truth '0') with an empty response as the response"
            ),
        ),
        (
            "    return float('nan')\n",
            (
                "compute_score in {path} returned nan on training row 0 of {train} (data_source 'my/units', ground"
                " truth '0') with the ground truth as the response"
            ),
        ),
        (
            "    return 1.0 if int(ground_truth) < 2 else extra_info['missing']\n",
            (
                "compute_score in {path} raised KeyError: 'missing' on training row 2 of {train} (data_source"
                " 'my/units', ground truth '2') with the ground truth as the response"
            ),
        ),
    ],
)
def test_a_reward_that_cannot_be_computed_fails_naming_the_row(tmp_path, body, message):
    path = reward_file(
        tmp_path, "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" + body
    )
    train = write_train(tmp_path / "data")
    with pytest.raises(VerlfitError) as caught:
        rewards.check_reward_function(rewards.RewardFunction(path), train)
    assert caught.value.message == message.format(path=path, train=train)


def test_reward_fn_key_names_the_data_source_column(tmp_path):
    rows = [
        {
            "task": "t",
            "prompt": [{"role": "user", "content": "p"}],
            "reward_model": {"style": "rule", "ground_truth": "7"},
        }
    ]
    train = write_train(tmp_path / "data", rows)
    seen = reward_file(
        tmp_path,
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0 if (data_source,"
        " extra_info) == ('t', None) else 0.0\n",
    )
    scored = rewards.check_reward_function(
        rewards.RewardFunction(seen), train, keys=DataKeys(reward_fn_key="task")
    ).scores
    assert [s.score for s in scored] == [1.0, 1.0]
    with pytest.raises(VerlfitError, match="lacks data_source, which verl's reward manager reads"):
        rewards.reward_rows(train)


def test_verl_scores_matches_verls_dispatch():
    for source in (
        "openai/gsm8k",
        "lighteval/MATH",
        "DigitalLearningGmbH/MATH-lighteval",
        "math_dapo",
        "aime2024",
        "numina_olympiads",
    ):
        assert rewards.verl_scores(source), source
    assert rewards.verl_scores("searchR1_nq", {"target": ["Paris"]})  # its scorer reads this form of ground truth
    # verl dispatches hiyouga/geometry3k to geo3k, whose scorer imports mathruler (not installed here, nor in the
    # images)
    with pytest.raises(
        VerlfitError,
        match=(
            "^verl's scorer for data_source 'hiyouga/geometry3k' fails on an empty response with ground truth '0':"
            " ModuleNotFoundError: No module named 'mathruler'"
        ),
    ):
        rewards.verl_scores("hiyouga/geometry3k")
    for source in ("my/units", "gsm8k", "openai/gsm8k ", "MATH", "hendrycks_math"):
        assert not rewards.verl_scores(source), source


def test_a_data_source_verl_cannot_score_is_refused_with_the_fix(tmp_path):
    train = write_train(tmp_path / "data")
    with pytest.raises(VerlfitError) as caught:
        rewards.check_verl_scores(train)
    assert caught.value.exit_code == 2
    assert caught.value.message.startswith(
        f"verl 0.4.1 has no scorer for data_source 'my/units' (in train.parquet) of {train} "
    )
    assert caught.value.fix.startswith("pass a reward function: --reward-function FILE.py:FUNCTION")
    gsm = write_train(
        tmp_path / "gsm",
        [
            {
                "data_source": "openai/gsm8k",
                "prompt": [{"role": "user", "content": "p"}],
                "reward_model": {"style": "rule", "ground_truth": "72"},
            }
        ],
    )
    assert [(s.solution, s.score) for s in rewards.check_verl_scores(gsm)] == [
        ("72", 0.0),
        ("", 0.0),
    ]  # no "#### 72": 0, as verl scores it


def write_split(folder: Path, name: str, sources: list[str]) -> Path:
    """``folder/name`` with one row per entry of ``sources`` (its data_source), ground truth str(row)."""
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.Table.from_pylist(
            [
                {
                    "data_source": source,
                    "prompt": [{"role": "user", "content": f"q{i}"}],
                    "ability": "custom",
                    "reward_model": {"style": "rule", "ground_truth": str(i)},
                    "extra_info": {"index": i},
                }
                for i, source in enumerate(sources)
            ]
        ),
        folder / name,
    )
    return folder / name


def test_every_training_and_test_row_is_checked_naming_the_split_file_and_row(tmp_path):
    """issue 32 items 13-14: a reward failing on 1 row in 6 passed the 3-row check; test rows were never tried."""
    data = tmp_path / "data"
    train, test = (
        write_split(data, "train.parquet", ["my/units"] * 6),
        write_split(data, "test.parquet", ["my/units"] * 2),
    )
    one_in_six = reward_file(
        tmp_path,
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return 1.0 / (int(ground_truth) - 4)\n",
        "one_in_six.py",
    )
    with pytest.raises(VerlfitError) as caught:
        rewards.check_reward_function(rewards.RewardFunction(one_in_six), data)
    assert caught.value.exit_code == 2
    assert (
        caught.value.message
        == f"compute_score in {one_in_six} raised ZeroDivisionError: float division by zero on training row 4 of"
        f" {train} "
        "(data_source 'my/units', ground truth '4') with the ground truth as the response"
    )
    test_only = reward_file(
        tmp_path,
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return extra_info['index'] * 0.0 if extra_info['index'] != 1 or len(ground_truth) > 1 else None\n",
        "test_only.py",
    )
    write_split(data, "train.parquet", ["my/units"] * 1)  # row 1 exists only in test.parquet now
    with pytest.raises(VerlfitError) as caught:
        rewards.check_reward_function(rewards.RewardFunction(test_only), data)
    assert caught.value.message.startswith(
        f"compute_score in {test_only} returned None (NoneType) on test row 1 of {test} (data_source 'my/units', ground"
        " truth '1')"
    )
    scored = rewards.check_reward_function(rewards.RewardFunction(reward_file(tmp_path)), data).scores
    assert [(s.split, s.row, s.solution) for s in scored] == [
        ("train", 0, "0"),
        ("train", 0, ""),
        ("test", 0, "0"),
        ("test", 0, ""),
        ("test", 1, "1"),
        ("test", 1, ""),
    ]
    assert (
        rewards.describe_scores(scored)
        == "1 training and 2 test rows; the ground truth scored 0 x3; an empty response scored 0 x3"
    )


@pytest.mark.parametrize(
    "body",
    [
        "    import time\n    time.sleep(60 if ground_truth == '3' else 0)\n    return 0.0\n",
        "    while ground_truth == '3':\n        pass\n    return 0.0\n",
        (
            "    try:\n        while ground_truth == '3':\n            pass\n    except Exception:\n        pass\n   "
            " return 0.0\n"
        ),
    ],
)
def test_a_reward_that_hangs_on_a_row_is_reported_with_the_row_not_a_hang(tmp_path, body):
    import time

    train = write_train(tmp_path / "data")
    path = reward_file(
        tmp_path, "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" + body
    )
    started = time.monotonic()
    with pytest.raises(VerlfitError) as caught:
        rewards.check_reward_function(rewards.RewardFunction(path), train, time_limit_s=0.2)
    assert time.monotonic() - started < 5
    assert (
        str(caught.value)
        == f"compute_score in {path} did not return within 0.2 s on training row 3 of {train} (data_source 'my/units',"
        " ground truth '3') with the ground truth as the response: verl calls it once per response with no time"
        " limit, so the run would hang there\n  fix: make it return for every response, including an empty one (no"
        " network call or loop without a bound in a reward)"
    )
    import signal

    # nothing left armed
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_DFL and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert rewards.CALL_TIME_LIMIT_S == 10.0


@pytest.mark.parametrize(
    "value, shown",
    [
        ("1e300", "1e+300 on training row 0"),
        ("-2e6", "-2e+06 on training row 0"),
        ("float('inf')", "inf on training row 0"),
    ],
)
def test_a_reward_that_is_not_finite_or_absurdly_large_is_refused(tmp_path, value, shown):
    train = write_train(tmp_path / "data")
    path = reward_file(
        tmp_path, f"def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return {value}\n"
    )
    with pytest.raises(VerlfitError) as caught:
        rewards.check_reward_function(rewards.RewardFunction(path), train)
    assert caught.value.message.startswith(f"compute_score in {path} returned {shown} of {train}")
    if "inf" not in value:
        assert "larger in magnitude than 1e+06" in caught.value.message
        assert caught.value.fix == "scale the reward to a few units (e.g. 1.0 for a correct answer, 0.0 otherwise)"
    ok = reward_file(
        tmp_path,
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return -1e6\n",
        "ok.py",
    )
    assert {s.score for s in rewards.check_reward_function(rewards.RewardFunction(ok), train).scores} == {
        -1e6
    }  # the bound itself passes


def test_a_data_source_verl_cannot_score_in_test_parquet_is_refused_naming_the_file(tmp_path):
    data = tmp_path / "data"
    write_split(data, "train.parquet", ["openai/gsm8k"] * 2)
    write_split(data, "test.parquet", ["openai/gsm8k", "my/units"])
    with pytest.raises(VerlfitError) as caught:
        rewards.check_verl_scores(data)
    assert caught.value.message.startswith(
        f"verl 0.4.1 has no scorer for data_source 'my/units' (in test.parquet) of {data / 'train.parquet'},"
        f" {data / 'test.parquet'} "
    )
    write_split(data, "test.parquet", ["openai/gsm8k"])
    assert [(s.split, s.row) for s in rewards.check_verl_scores(data)] == [
        ("train", 0),
        ("train", 0),
        ("train", 1),
        ("train", 1),
        ("test", 0),
        ("test", 0),
    ]


def test_without_verl_the_scorer_check_is_one_clean_error(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "verl.utils.reward_score", None)
    with pytest.raises(VerlfitError) as caught:
        rewards.check_verl_scores(write_train(tmp_path / "data"))
    assert caught.value.message.startswith("verl is not installed in this Python (")
    assert (
        caught.value.fix
        == "pip install verl==0.4.1 (the images install it), or pass --reward-function FILE.py:FUNCTION"
    )


def test_a_reward_importing_modules_beside_it_works_and_says_which_so_the_run_copies_them(tmp_path, monkeypatch):
    """issue 44 item 4 (issue 32 item 18 refused it): a reward split into files works as `python reward.py` runs it,
    a module imported inside a call (a package's submodule) included; the modules are named for the run's copy."""
    folder = tmp_path / "task"
    (folder / "parts").mkdir(parents=True)
    (folder / "helpers.py").write_text("def normalize(text):\n    return text.strip()\n")
    (folder / "parts" / "__init__.py").write_text("")
    (folder / "parts" / "late.py").write_text("BONUS = 0.5\n")
    (folder / "unused.py").write_text("raise RuntimeError('never imported')\n")
    path = reward_file(
        folder,
        "from helpers import normalize\n\n\ndef compute_score(data_source, solution_str, ground_truth,"
        " extra_info=None):\n    from parts.late import BONUS\n\n    return float(normalize(solution_str) =="
        " ground_truth) + BONUS\n",
    )
    monkeypatch.chdir(tmp_path)  # not the reward's folder: its folder is put on sys.path by the check itself
    checked = rewards.check_reward_function(rewards.RewardFunction(path), write_train(tmp_path / "data"), count=1)
    assert [(s.solution, s.score) for s in checked.scores] == [("0", 1.5), ("", 0.5)]
    assert checked.reward == rewards.RewardFunction(
        path, "compute_score", (folder / "helpers.py", folder / "parts" / "__init__.py", folder / "parts" / "late.py")
    )
    assert "helpers" not in sys.modules and "parts" not in sys.modules  # imported in the child only
    other = reward_file(tmp_path, "import not_installed_anywhere\n", "other.py")
    with pytest.raises(
        VerlfitError,
        match=(
            r"does not import: ModuleNotFoundError: No module named 'not_installed_anywhere' \(line 1\)\n  fix: install"
            r" what it imports"
        ),
    ):
        rewards.load_reward_function(rewards.RewardFunction(other))
    with pytest.raises(VerlfitError, match=f"^reward function file {tmp_path} is a folder, not a file"):
        rewards.load_reward_function(rewards.RewardFunction(tmp_path))


def test_a_module_beside_the_reward_hiding_another_module_of_this_python_is_refused(tmp_path):
    """On verl's PYTHONPATH first, a helper named statistics.py would be verl's `statistics` too."""
    (tmp_path / "statistics.py").write_text("def pick():\n    return 1.0\n")
    path = reward_file(
        tmp_path,
        "from statistics import pick\n\n\ndef compute_score(data_source, solution_str, ground_truth,"
        " extra_info=None):\n    return pick()\n",
    )
    with pytest.raises(VerlfitError) as caught:
        rewards.check_reward_function(rewards.RewardFunction(path), write_train(tmp_path / "data"), count=1)
    assert (str(caught.value), caught.value.exit_code) == (
        (
            f"reward function file {path} imports statistics from beside it ({tmp_path / 'statistics.py'}), and this"
            " Python has another module of that name: the run's copy of the folder goes first on verl's PYTHONPATH,"
            " where it would hide that module from verl\n  fix: rename statistics (e.g. statistics_reward) and the"
            " imports of it"
        ),
        2,
    )


def test_a_reward_file_named_like_another_module_is_refused_once_its_folder_goes_on_pythonpath(tmp_path):
    """random.py importing a helper beside it: the run's copy of its folder first on verl's PYTHONPATH would be every
    `import random` of verl's processes (torch's among them). Alone, with no helper, nothing goes on PYTHONPATH."""
    (tmp_path / "helper.py").write_text("def pick():\n    return 1.0\n")
    path = tmp_path / "random.py"
    path.write_text(
        "from helper import pick\n\n\ndef compute_score(data_source, solution_str, ground_truth,"
        " extra_info=None):\n    return pick()\n"
    )
    with pytest.raises(VerlfitError) as caught:
        rewards.check_reward_function(rewards.RewardFunction(path), write_train(tmp_path / "data"), count=1)
    assert (str(caught.value), caught.value.exit_code) == (
        (
            f"reward function file {path} is named like another module of this Python (random), and the modules it"
            " imports from beside it put its folder's copy first on verl's PYTHONPATH, where it would hide that module"
            " from verl\n  fix: rename it (e.g. random_reward.py) and pass the new name to --reward-function"
        ),
        2,
    )
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "random.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"
    )
    checked = rewards.check_reward_function(
        rewards.RewardFunction(alone / "random.py"), write_train(tmp_path / "data2"), count=1
    )
    assert checked.reward.modules == ()


HANGS_AT_IMPORT = {
    "sleep": "import time\ntime.sleep(600)\n",
    "loop with SIGALRM ignored": (
        "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass\n"
    ),
}


@pytest.mark.parametrize("top", HANGS_AT_IMPORT.values(), ids=HANGS_AT_IMPORT.keys())
def test_a_reward_hanging_at_import_is_stopped_at_the_limit_and_says_how_long(tmp_path, top):
    """issue 44 item 1: the 10 s limit covered calls only; an import that sleeps or loops hung the dry run."""
    path = reward_file(tmp_path, top + GOOD)
    started = time.monotonic()
    with pytest.raises(VerlfitError) as caught:
        rewards.check_reward_function(
            rewards.RewardFunction(path), write_train(tmp_path / "data"), import_time_limit_s=0.5
        )
    assert time.monotonic() - started < 10
    assert (str(caught.value), caught.value.exit_code) == (
        (
            f"reward function file {path} did not finish importing within 0.5 s (stopped there): verl imports it in"
            " every worker before the first step, so the run would hang there\n  fix: move slow work (a sleep, a loop,"
            " a download) out of the file's top level so that importing it takes seconds"
        ),
        2,
    )
    assert rewards.IMPORT_TIME_LIMIT_S == 60.0


def test_a_call_looping_with_sigalrm_ignored_is_stopped_at_the_limit_naming_the_row(tmp_path):
    train = write_train(tmp_path / "data")
    path = reward_file(
        tmp_path,
        "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n\n\ndef compute_score(data_source,"
        " solution_str, ground_truth, extra_info=None):\n    while ground_truth == '1' and solution_str == '':\n       "
        " pass\n    return 0.0\n",
    )
    started = time.monotonic()
    with pytest.raises(VerlfitError) as caught:
        rewards.check_reward_function(rewards.RewardFunction(path), train, time_limit_s=0.3)
    assert time.monotonic() - started < 10
    assert (
        caught.value.message
        == f"compute_score in {path} did not return within 0.3 s on training row 1 of {train} (data_source 'my/units',"
        " ground truth '1') with an empty response as the response: verl calls it once per response with no time"
        " limit, so the run would hang there"
    )


def test_a_reward_starting_a_non_daemon_thread_lets_the_process_end(tmp_path):
    """issue 44 item 1: the dry run printed everything and never exited; here a Python that checks such a reward
    exits as soon as the check is done (the thread lived in the child, which is killed)."""
    path = reward_file(
        tmp_path, "import threading, time\nthreading.Thread(target=time.sleep, args=(600,)).start()\n" + GOOD
    )
    train = write_train(tmp_path / "data")
    script = (
        "import sys\nfrom pathlib import Path\nfrom verlfit import reward_function as rewards\n"
        f"checked = rewards.check_reward_function(rewards.RewardFunction(Path({str(path)!r})), {str(train)!r})\n"
        "print(rewards.describe_scores(checked.scores))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (
        0,
        "5 training rows; the ground truth scored 0 x5; an empty response scored 0 x5\n",
    )


@pytest.mark.parametrize(
    "top, body, how, place",
    [
        ("import sys\nsys.exit(0)\n", "    return 0.0\n", "SystemExit(0): sys.exit() or exit()", None),
        ("exit()\n", "    return 0.0\n", "SystemExit(None): sys.exit() or exit()", None),
        ("import os\nos._exit(0)\n", "    return 0.0\n", "exit status 0 without SystemExit: os._exit()", None),
        (
            "import sys\n",
            "    if ground_truth == '2':\n        sys.exit(1)\n    return 0.0\n",
            "SystemExit(1): sys.exit() or exit()",
            (2, "the ground truth"),
        ),
        (
            "import os\n",
            "    if not solution_str:\n        os._exit(0)\n    return 0.0\n",
            "exit status 0 without SystemExit: os._exit()",
            (0, "an empty response"),
        ),
    ],
    ids=[
        "sys.exit(0) at import",
        "exit() at import",
        "os._exit(0) at import",
        "sys.exit(1) in a call",
        "os._exit(0) in a call",
    ],
)
def test_a_reward_exiting_the_process_is_refused_naming_where(tmp_path, top, body, how, place):
    """issue 44 item 2: the dry run and eval exited 0 (or 1), printing and writing nothing."""
    train = write_train(tmp_path / "data")
    path = reward_file(
        tmp_path, top + "\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" + body
    )
    with pytest.raises(VerlfitError) as caught:
        rewards.check_reward_function(rewards.RewardFunction(path), train)
    if place is None:
        expected = (
            f"the reward function exited the process while {path} was imported ({how}): verl would lose the worker"
            " that imports it\n  fix: remove the exit call from the file (raise an exception for an error)"
        )
    else:
        row, response = place
        expected = (
            f"the reward function exited the process: compute_score in {path} on training row {row} of {train}"
            f" (data_source 'my/units', ground truth '{row}') with {response} as the response ({how}); verl would"
            " lose the worker scoring the batch\n  fix: remove the exit call (return a number for every response;"
            " raise an exception for an error)"
        )
    assert (str(caught.value), caught.value.exit_code) == (expected, 2)


def test_the_check_runs_in_a_scratch_directory_and_never_touches_the_users_files(tmp_path, monkeypatch, capsys):
    """issue 44 item 3: a reward writing notes.txt overwrote the user's notes.txt during the dry run (item 4, a reward
    closing stdout: test_a_reward_closing_standard_output_is_refused_naming_where)."""
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("mine\n")
    monkeypatch.chdir(user)
    path = reward_file(
        tmp_path,
        "import os, sys\nopen('notes.txt', 'w').write('at import')\nseen = os.getcwd()\n"
        f"open({str(tmp_path / 'cwd.txt')!r}, 'w').write(seen)\n\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    open('notes.txt', 'a').write(solution_str)\n"
        "    return 1.0 if os.getcwd() == seen != " + repr(str(user)) + " else 0.0\n",
    )
    checked = rewards.check_reward_function(rewards.RewardFunction(path), write_train(tmp_path / "data"))
    assert {s.score for s in checked.scores} == {1.0}  # every call ran in the same directory, not the user's
    assert sorted(p.name for p in user.iterdir()) == ["notes.txt"] and (user / "notes.txt").read_text() == "mine\n"
    assert not (tmp_path / "notes.txt").exists()
    print("verlfit still prints")
    assert capsys.readouterr().out == "verlfit still prints\n"
    scratch = Path((tmp_path / "cwd.txt").read_text())
    assert scratch.name.startswith("verlfit-reward-check-") and not scratch.exists()  # removed, with notes.txt


def test_a_return_value_that_does_not_pickle_is_named_by_its_repr(tmp_path):
    path = reward_file(
        tmp_path,
        "class Score:\n    def __repr__(self):\n        return 'Score()'\n    def __reduce__(self):\n        raise"
        " TypeError('no')\n\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n   "
        " return Score()\n",
    )
    train = write_train(tmp_path / "data")
    with pytest.raises(VerlfitError) as caught:
        rewards.check_reward_function(rewards.RewardFunction(path), train)
    assert caught.value.message.startswith(
        f"compute_score in {path} returned Score() (Score) on training row 0 of {train} (data_source 'my/units',"
    )


def test_the_child_dies_with_verlfit_even_when_verlfit_is_killed(tmp_path):
    """A verlfit ended by SIGKILL (or SIGTERM) while a reward sleeps at import leaves no process behind."""
    import os
    import signal

    started = tmp_path / "importing"
    path = reward_file(tmp_path, f"import time\nopen({str(started)!r}, 'w').close()\ntime.sleep(600)\n" + GOOD)
    script = (
        "from pathlib import Path\nfrom verlfit import reward_function as rewards\n"
        f"rewards.load_reward_function(rewards.RewardFunction(Path({str(path)!r})), import_time_limit_s=600)\n"
    )
    verlfit = subprocess.Popen([sys.executable, "-c", script])

    def children() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[1] == str(verlfit.pid) and fields[0] != "Z":
                found.append(int(entry.name))
        return found

    deadline = time.monotonic() + 30
    while not started.exists() and time.monotonic() < deadline:  # the reward's import is running
        time.sleep(0.1)
    (child,) = children()
    verlfit.send_signal(signal.SIGKILL)
    verlfit.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break  # gone and reaped
        if state == "Z":
            break  # dead, waiting for init to reap it
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError(f"the reward's process {child} outlived verlfit")


def test_the_ground_truth_note_explains_a_zero_only_when_every_ground_truth_scored_zero():
    from verlfit.reward_function import ScoredRow, verl_ground_truth_note

    # rows alternate: the ground truth as the response, then an empty response (call_on_rows' order)
    zeros = [ScoredRow(0, "72", 0.0), ScoredRow(0, "", 0.0), ScoredRow(1, "3", 0.0), ScoredRow(1, "", 0.0)]
    assert (
        verl_ground_truth_note(zeros)
        == "; 0 for the ground truth is expected: verl's scorers read the answer in a response's own form (GSM8K's the"
        " number after '####'), which the bare ground truth lacks"
    )
    one_scored = [ScoredRow(0, "72", 1.0), ScoredRow(0, "", 0.0), ScoredRow(1, "3", 0.0), ScoredRow(1, "", 0.0)]
    assert verl_ground_truth_note(one_scored) == ""
    # an empty response's reward does not count: only the ground truth's calls are read
    assert verl_ground_truth_note([ScoredRow(0, "72", 0.0), ScoredRow(0, "", 1.0)]).startswith("; 0 for the ground")


def test_what_the_reward_prints_while_checked_is_counted_not_poured_onto_the_terminal(tmp_path, capfd):
    """A reward printing on every call flooded the dry run (two lines per row: 17,584 on GSM8K): the check keeps what
    it prints and the line about it says how much, with the first lines."""
    path = reward_file(
        tmp_path,
        "print('loaded')\n\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    print(f'scoring {solution_str!r} against {ground_truth!r}')\n    return 0.0\n",
    )
    checked = rewards.check_reward_function(rewards.RewardFunction(path), write_train(tmp_path / "data"))
    assert capfd.readouterr() == ("", "")
    assert checked.printed == rewards.PrintedOutput(11, ("loaded", "scoring '0' against '0'", "scoring '' against '0'"))
    assert (
        rewards.describe_printed(checked.printed)
        == "; it printed 11 lines while checked (first 'loaded', \"scoring '0' against '0'\", \"scoring '' against"
        " '0'\"), which verl's workers print too, at every call of every step"
    )
    assert rewards.describe_printed(rewards.PrintedOutput(0, ())) == ""


def test_a_failed_check_passes_on_what_the_reward_printed(tmp_path, capfd):
    # the reward's own prints are how its author finds the fault: a refused check shows them, as before
    path = reward_file(
        tmp_path,
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    print(f'row with {ground_truth}')\n    if ground_truth == '1':\n        raise ValueError('bad row')\n"
        "    return 0.0\n",
    )
    with pytest.raises(VerlfitError, match="raised ValueError: bad row"):
        rewards.check_reward_function(rewards.RewardFunction(path), write_train(tmp_path / "data"))
    assert capfd.readouterr() == ("", "row with 0\nrow with 0\nrow with 1\n")


def test_a_long_check_says_how_far_it_got_on_standard_error():
    """A reward taking 50 ms a call checked GSM8K for 15 minutes without a word: after 5 s, a line every 10 s."""
    import io

    now = [100.0]
    stream = io.StringIO()
    progress = rewards.CheckProgress("score in /abs/reward.py", 17584, stream=stream, clock=lambda: now[0])
    for calls, at in ((1, 101.0), (99, 104.9), (100, 105.0), (150, 110.0), (300, 115.0), (17584, 999.0)):
        now[0] = at
        progress(calls)
    assert stream.getvalue().splitlines() == [
        # 100 calls in 5 s: 17,484 left at 20 calls a second
        "verlfit: checking score in /abs/reward.py: 100 of 17,584 calls in 5s, about 14m34s left",
        "verlfit: checking score in /abs/reward.py: 300 of 17,584 calls in 15s, about 14m24s left",
    ]


def test_the_check_reports_progress_after_each_call(tmp_path):
    seen = []
    path = reward_file(tmp_path)
    with rewards.load_reward_function(rewards.RewardFunction(path)) as process:
        rewards.call_on_rows(process, rewards.reward_rows(write_train(tmp_path / "data")), progress=seen.append)
    assert seen == list(range(1, 11))  # 5 rows, twice each


def test_a_reward_returning_its_own_object_or_an_array_is_judged_by_the_value_not_by_a_transport_error(tmp_path):
    """new-user trial: a reward returning an instance of its own class was reported as having raised
    ModuleNotFoundError ('No module named ...'), one returning a torch tensor as AuthenticationError: the parent could
    not unpickle them. Now the value is judged: a one-element array or tensor is its number (verl's reward_tensor
    takes it), another object is refused by its repr and type."""
    train = write_train(tmp_path / "data")
    own = reward_file(
        tmp_path,
        "class Score:\n    def __repr__(self):\n        return 'Score()'\n\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return Score()\n",
        name="own_object.py",
    )
    with pytest.raises(VerlfitError) as caught:
        rewards.check_reward_function(rewards.RewardFunction(own), train)
    assert str(caught.value).startswith(
        f"compute_score in {own} returned Score() (Score) on training row 0 of {train} (data_source 'my/units', ground"
        " truth '0') with the ground truth as the response: verl needs a number, or a dict with a numeric 'score'"
    )
    array = reward_file(
        tmp_path,
        "import numpy\n\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return {'score': numpy.array(0.5), 'parts': [numpy.float32(1.0), 2]}\n",
        name="array.py",
    )
    checked = rewards.check_reward_function(rewards.RewardFunction(array), train)
    assert {row.score for row in checked.scores} == {0.5}


def test_what_the_reward_writes_to_standard_error_is_kept_with_its_prints(tmp_path, capfd):
    # new-user trial: the prints were summarised while sys.stderr.write passed 10,000 characters a call to the terminal
    path = reward_file(
        tmp_path,
        "import sys\n\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    sys.stderr.write('E' * 10000 + '\\n')\n    return 0.0\n",
    )
    checked = rewards.check_reward_function(rewards.RewardFunction(path), write_train(tmp_path / "data"))
    assert capfd.readouterr() == ("", "")
    assert checked.printed.lines == 10 and checked.printed.first == ("E" * 120,) * 3


CLOSED_OUTPUT_WHY = (
    ": verl's reward manager prints the first responses and their scores right after scoring them (verl 0.4.1"
    ' naive.py, print("[prompt]", ...)), so the run would stop at its first step (ValueError: I/O operation on closed'
    " file, or OSError: Bad file descriptor)"
)
CLOSED_OUTPUT_FIX = (
    "  fix: leave standard output and error open in the reward (to silence what it prints, wrap the prints in"
    " contextlib.redirect_stdout(io.StringIO()))"
)


@pytest.mark.parametrize(
    "top, body, closed, place",
    [
        (
            "import os\nos.close(1); os.close(2)\n",
            "    return 0.0\n",
            "file descriptor 1 (standard output) and file descriptor 2 (standard error)",
            None,
        ),
        ("import sys\n", "    sys.stdout.close()\n    return 0.0\n", "sys.stdout", (0, "the ground truth")),
        (
            "import sys\n",
            "    if not solution_str:\n        sys.stderr.close()\n    return 0.0\n",
            "sys.stderr",
            (0, "an empty response"),
        ),
    ],
    ids=["os.close(1) and (2) at import", "sys.stdout.close() in a call", "sys.stderr.close() in a call"],
)
def test_a_reward_closing_standard_output_is_refused_naming_where(tmp_path, top, body, closed, place, capsys):
    """New-user trial (finding 16): a reward calling sys.stdout.close() (or os.close(1) at import) passed the check;
    verl's NaiveRewardManager prints right after the first score, so the run stops at step 1."""
    train = write_train(tmp_path / "data")
    path = reward_file(
        tmp_path, top + "\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" + body
    )
    with pytest.raises(VerlfitError) as caught:
        rewards.check_reward_function(rewards.RewardFunction(path), train)
    if place is None:
        expected = f"reward function file {path} closes {closed} when imported{CLOSED_OUTPUT_WHY}\n{CLOSED_OUTPUT_FIX}"
    else:
        row, response = place
        expected = (
            f"compute_score in {path} closes {closed} on training row {row} of {train} (data_source 'my/units', ground"
            f" truth '{row}') with {response} as the response{CLOSED_OUTPUT_WHY}\n{CLOSED_OUTPUT_FIX}"
        )
    assert (str(caught.value), caught.value.exit_code) == (expected, 2)
    print("verlfit still prints")  # the child's streams, not verlfit's
    assert capsys.readouterr().out == "verlfit still prints\n"


KEYS_WHY = (
    ": verl 0.4.1 collects each key of the dicts once per response, and its validation asserts that every key has a"
    " value for every response (ray_trainer.py:696, assert len(lst) == 0 or len(lst) == len(sample_scores)), so the"
    " first validation would stop the run\n  fix: return a dict with the same keys for every response (e.g. 'acc': 0.0"
    " where it does not apply), or a number for every response"
)


@pytest.mark.parametrize(
    "body, first, then, row, response",
    [
        (
            "    if solution_str:\n        return {'score': 1.0, 'acc': 1.0}\n    return {'score': 0.0}\n",
            "a dict with keys 'acc', 'score'",
            "a dict with keys 'score'",
            0,
            "an empty response",
        ),
        (
            "    if ground_truth == '3':\n        return 0.5\n    return {'score': 1.0}\n",
            "a dict with keys 'score'",
            "a number",
            3,
            "the ground truth",
        ),
    ],
    ids=["a key missing on an empty response", "a number on one row"],
)
def test_a_reward_whose_dict_keys_vary_by_row_is_refused_naming_the_keys_and_rows(
    tmp_path, body, first, then, row, response
):
    """New-user trial (finding 17): {"score", "acc"} for a non-empty response and {"score"} for an empty one passed
    the check; verl's _validate asserts one value per response for every key, so validation would fail."""
    train = write_train(tmp_path / "data")
    head = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    path = reward_file(tmp_path, head + body)
    with pytest.raises(VerlfitError) as caught:
        rewards.check_reward_function(rewards.RewardFunction(path), train)
    expected = (
        f"compute_score in {path} returns {first} on training row 0 of {train} with the ground truth as the response,"
        f" but {then} on training row {row} of {train} with {response} as the response{KEYS_WHY}"
    )
    assert (str(caught.value), caught.value.exit_code) == (expected, 2)
    # the same keys on every row, or numbers only: taken
    same = "    return {'score': float(bool(solution_str)), 'acc': 0.0}\n"
    path = reward_file(tmp_path, head + same)
    assert len(rewards.check_reward_function(rewards.RewardFunction(path), train).scores) == 10
