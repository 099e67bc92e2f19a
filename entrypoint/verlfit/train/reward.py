"""The reward a ``verlfit train`` run is scored with: chosen from ``--reward-function FILE[:NAME]`` or verl's
``custom_reward_function.path`` / ``.name`` after ``--`` (:func:`run_reward_function`, made absolute), pointed at
its copy in the run directory (:func:`reward_overrides`, :data:`REWARD_FOLDER`); it is checked on every training and
test row before launch with the run's data (:func:`verlfit.train.inputs.check_run_data`). The copy makes
``--resume``, ``verlfit export`` and ``verlfit eval`` use the rule the run trained with, even when the user's file
changes later.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from verlfit.data_folder import DataKeys
from verlfit.errors import VerlfitError
from verlfit.input_files import require_regular_file
from verlfit.overrides import UserOverrides, quote_value
from verlfit.reward_function import RewardFunction, from_overrides, parse_reward_function

REWARD_FOLDER = "reward"  # RUN_DIR/reward/<the file's name>: the copy verl loads
PATH_KEY = "custom_reward_function.path"
NAME_KEY = "custom_reward_function.name"


def data_keys(values: Mapping[str, str | None]) -> DataKeys:
    """The :class:`DataKeys` verl runs with under overrides setting ``values`` (each key's value:
    :func:`verlfit.overrides.override_values`, or :attr:`verlfit.overrides.UserOverrides.values`; ``data.prompt_key``,
    ``data.reward_fn_key``; verl 0.4.1's defaults ``prompt`` / ``data_source`` where not set)."""
    return DataKeys(
        prompt_key=values.get("data.prompt_key") or "prompt",
        reward_fn_key=values.get("data.reward_fn_key") or "data_source",
    )


def run_reward_function(
    spec: str | None, overrides: UserOverrides, base: str | os.PathLike | None = None
) -> tuple[RewardFunction | None, list[str]]:
    """The run's reward function and the user's overrides without the ``custom_reward_function.path`` / ``.name``
    keys (verlfit sets them again, pointing at the run directory's copy: :func:`reward_overrides`).

    Args:
        spec: ``--reward-function``'s ``FILE[:NAME]`` (None: not given).
        overrides: the user's overrides after ``--``, parsed (:func:`verlfit.overrides.parse_user_overrides`).
        base: the folder relative paths are read against (default: the current directory).

    Raises:
        VerlfitError: exit status 2: both ``--reward-function`` and ``custom_reward_function.path`` given; a name
            without a path; what :func:`verlfit.reward_function.parse_reward_function` raises; a file that is not
            there or is no regular file (:func:`verlfit.input_files.require_regular_file`).
    """
    path, name = overrides.values.get(PATH_KEY), overrides.values.get(NAME_KEY)
    rest = [word for word, key in zip(overrides.words, overrides.keys) if key not in (PATH_KEY, NAME_KEY)]
    if spec is not None and (path or name):
        raise VerlfitError(
            f"--reward-function {spec} and {PATH_KEY}/{NAME_KEY} after -- both name a reward function",
            fix="give it once: --reward-function FILE.py:FUNCTION (the keys after -- mean the same)",
            exit_code=2,
        )
    reward = parse_reward_function(spec, base) if spec is not None else from_overrides(path, name, base)
    if reward is not None:
        # at once, whatever else is missing: the check that calls it on the rows waits for prepared data
        require_regular_file(
            reward.path,
            "--reward-function" if spec is not None else PATH_KEY,
            fix="pass the Python file that defines your reward function: --reward-function FILE.py[:FUNCTION]",
        )
    if spec is not None:
        return reward, rest
    if reward is None and name:
        raise VerlfitError(
            f"{NAME_KEY}={name} after -- without {PATH_KEY}: verl ignores the name and scores with its own "
            "default_compute_score",
            fix=f"pass --reward-function FILE.py:{name}",
            exit_code=2,
        )
    return reward, rest


def reward_copy_path(run_dir: str | os.PathLike, reward: RewardFunction) -> Path:
    """Where the run directory keeps its copy of the reward file: ``RUN_DIR/reward/<file name>``."""
    return Path(run_dir) / REWARD_FOLDER / reward.path.name


def reward_python_path(run_dir: str | os.PathLike, inherited: str | None = None) -> str:
    """``PYTHONPATH`` for verl's processes when the reward imports modules from its folder: the run directory's reward
    folder (:data:`REWARD_FOLDER`, which holds their copies) first, then ``inherited`` (the launching environment's
    own ``PYTHONPATH``, where set). verl 0.4.1 loads the file by its path (``spec_from_file_location``) and adds no
    folder to ``sys.path``, so the folder must be on it for ``from helper import ...`` to work in its workers."""
    folder = str(Path(run_dir) / REWARD_FOLDER)
    return folder + (os.pathsep + inherited if inherited else "")


def reward_overrides(run_dir: str | os.PathLike, reward: RewardFunction) -> list[str]:
    """verl's overrides selecting the run directory's copy of ``reward`` (absolute, quoted for Hydra)."""

    return [f"{PATH_KEY}={quote_value(str(reward_copy_path(run_dir, reward)))}", f"{NAME_KEY}={reward.name}"]
