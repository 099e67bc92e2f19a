"""The run's data and reward, checked the same way by the dry run and by the launch (:func:`check_run_data`): the
data folder's state read once (:func:`data_ready`: :func:`verlfit.data_folder.data_folder_state`), GSM8K prepared where
it is missing and the launch may write it, at least one batch of training rows (:func:`check_data_size`), and the
reward on every training and test row (the run's function, or verl's scorer for every ``data_source``).
"""

from __future__ import annotations

import os
from pathlib import Path

from verlfit import gsm8k
from verlfit.data_folder import DataKeys, data_folder_refusal, data_folder_state
from verlfit.errors import VerlfitError
from verlfit.run_settings import TrainSettings
from verlfit.reward_function import (
    RewardFunction,
    check_reward_function,
    check_verl_scores,
    describe_printed,
    describe_scores,
    verl_ground_truth_note,
)
from verlfit.train.reward import REWARD_FOLDER


def check_run_data(
    settings: TrainSettings, keys: DataKeys, reward: RewardFunction | None, prepare: bool = False
) -> tuple[str | None, RewardFunction | None]:
    """Check the run's data folder (``settings.data_dir``) and its reward on it, as the launch does before it starts;
    return the note that says how the reward was checked (None: nothing to say) and the reward function with the
    modules it imports from its folder (:attr:`verlfit.reward_function.RewardFunction.modules`, which the run
    directory copies; ``reward`` as given where it was not checked).

    First the folder (:func:`data_ready`, its state read once under the run's ``keys``). ``prepare`` (the launch):
    GSM8K is prepared first where the folder holds no prepared data, then the training rows are counted
    (:func:`check_data_size`) and the reward is called on every row of ``train.parquet`` and ``test.parquet`` (verl
    validates on the test split with the same reward), whatever the folder held. Without ``prepare`` (the dry run)
    nothing is written: the rows are counted where ``train.parquet`` is there, and the reward is checked once the
    data is prepared (the note then says it will be; None without a reward function).

    The reward: ``reward``'s function (:func:`verlfit.reward_function.check_reward_function`: in a child process
    whose current directory is a scratch directory, the import within
    :data:`verlfit.reward_function.IMPORT_TIME_LIMIT_S` and each call within
    :data:`verlfit.reward_function.CALL_TIME_LIMIT_S`), or without one verl's ``default_compute_score`` for every
    ``data_source`` (:func:`verlfit.reward_function.check_verl_scores`); the note says what the calls returned
    (:func:`verlfit.reward_function.describe_scores`) and which modules beside the file it imports.

    Raises:
        VerlfitError: exit status 2: a folder of the user's files (``prepare`` only, :func:`data_ready`), a
            ``train.parquet`` that does not read or holds less than a batch; a reward that fails on a row (naming the
            file, the function, the split and the row), hangs, exits the process, or data sources verl cannot score
            (the fix: ``--reward-function``).
    """
    refuse_missing_own_task_data(settings, reward)
    prepared = data_ready(settings, keys, prepare)
    if prepare or (Path(settings.data_dir) / "train.parquet").is_file():
        check_data_size(settings)
    if not prepared:
        if reward is None:
            return None, None
        return (
            f"reward function: {reward.name} in {reward.path} (checked on the training and test rows once the data is"
            " prepared)"
        ), reward
    if reward is not None:
        checked = check_reward_function(reward, settings.data_dir, keys)
        reward = checked.reward
        modules = ""
        if reward.modules:
            names = ", ".join(str(file.relative_to(reward.path.parent)) for file in reward.modules)
            modules = (
                f"; it imports {names} from its folder: copied with it into RUN_DIR/{REWARD_FOLDER}, which verl's"
                " workers get on PYTHONPATH"
            )
        return (
            f"reward function: {reward.name} in {reward.path} (called on every row as the ground truth, then as an"
            f" empty response, in a scratch directory: {describe_scores(checked.scores)}{modules}"
            f"{describe_printed(checked.printed)})"
        ), reward
    scored = check_verl_scores(settings.data_dir, keys)
    return (
        f"reward function: verl's default_compute_score for the data's {keys.reward_fn_key} (called on every row:"
        f" {describe_scores(scored)}{verl_ground_truth_note(scored)})"
    ), None


def refuse_missing_own_task_data(settings: TrainSettings, reward: RewardFunction | None) -> None:
    """Refuse an own reward function with a ``--data`` folder that does not exist (a mistyped path), other than the
    GSM8K default: the launch would prepare GSM8K into it and train the user's reward on GSM8K's rows.

    Raises:
        VerlfitError: exit status 2, naming the folder and both fixes.
    """
    data = Path(settings.data_dir)
    default = Path(os.environ.get("VERLFIT_DATA_DIR", gsm8k.DEFAULT_OUTPUT))  # train --data's default
    if reward is None or data.exists() or data.absolute() == default.absolute():
        return
    if gsm8k.training_data(data)[1] is not None:
        return  # --data/verl of a folder of raw GSM8K files: prepared from them
    raise VerlfitError(
        f"--data {data}: no such folder, and --reward-function {reward.path} is your own: verlfit would prepare GSM8K"
        " into it and train your reward on GSM8K's rows",
        fix=f"check the path, or prepare your task into it first (verlfit prepare-data --train FILE --output {data});"
        f" for GSM8K with your reward, verlfit prepare-gsm8k --output {data}",
        exit_code=2,
    )


def data_ready(settings: TrainSettings, keys: DataKeys, prepare: bool) -> bool:
    """Whether ``settings.data_dir`` holds verl's prepared files for the run: its state read once
    (:func:`verlfit.data_folder.data_folder_state` under the run's data keys, ``data.prompt_key`` /
    ``data.reward_fn_key``, :attr:`verlfit.train.launch_plan.LaunchPlan.data_keys`): verlfit's, or verl's format by
    anyone (used as it is).

    ``prepare`` (the launch): where it holds no prepared data, GSM8K is prepared into it first (then True), and only
    where that loses nothing: a folder that is absent, empty or holds data verlfit wrote; from the raw GSM8K files of
    ``--data`` when it holds some (``settings.data_dir`` is then ``--data/verl``, :func:`verlfit.gsm8k.training_data`),
    else from the hub. Without ``prepare`` (the dry run) nothing is written.

    Raises:
        VerlfitError: exit status 2 (``prepare`` only), writing nothing, when ``settings.data_dir`` holds the user's
            files (e.g. a train.parquet without test.parquet, or files that are not verl's): the fix names the missing
            file, or asks for a folder with both (:func:`verlfit.data_folder.data_folder_refusal`).
    """
    folder = data_folder_state(settings.data_dir, keys)
    if folder.prepared or not prepare:
        return folder.prepared
    if not folder.writable:
        raise data_folder_refusal(folder)
    data = Path(settings.data_dir)
    _, source = gsm8k.training_data(data)
    print(
        f"verlfit: {data} has no train.parquet/test.parquet: preparing GSM8K first, from "
        + (f"the raw files in {source}" if source is not None else "the hub")
    )
    gsm8k.prepare(
        source=source, output_dir=data, tokenizer=settings.model, max_prompt_length=settings.max_prompt_length
    )
    return True


def check_data_size(settings: TrainSettings) -> None:
    """Refuse a training set smaller than one batch (verl asserts "Train dataloader is empty!" after Ray starts).

    Raises:
        VerlfitError: naming the file, its row count and the batch size; or the file that does not read as parquet.
    """
    import pyarrow  # lazy: only where parquet is read or written
    import pyarrow.parquet as pq  # lazy: only where parquet is read or written

    path = Path(settings.data_dir) / "train.parquet"
    try:
        rows = pq.ParquetFile(path).metadata.num_rows
    except (OSError, pyarrow.ArrowException) as error:
        raise VerlfitError(
            f"{path} does not read as parquet: {str(error).splitlines()[0] if str(error) else type(error).__name__}",
            fix="prepare the data again (verlfit prepare-data, or verlfit prepare-gsm8k into a new folder), "
            "or point --data at a folder with verl's train.parquet and test.parquet",
            exit_code=2,
        ) from error
    if rows == 0:
        raise VerlfitError(
            f"{path} has no rows",
            fix="prepare the data again (verlfit prepare-data --output NEW_FOLDER from your own files, or "
            "verlfit prepare-gsm8k into a new folder), or point --data at a folder with verl's "
            "train.parquet and test.parquet",
            exit_code=2,
        )
    if rows < settings.train_batch_size:
        raise VerlfitError(
            f"{path} has {rows} rows, fewer than one batch of {settings.train_batch_size} prompts",
            fix=f"use --batch-size {rows} or less, or more data",
            exit_code=2,
        )
