"""The data folder check (``--data``): are verl's parquet files there and well-formed, or can ``verlfit train``
prepare them (:func:`check_data_folder`)? Used by ``verlfit doctor`` (its ``data`` line) and so by the blocking
checks ``verlfit train`` runs before it launches.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Mapping

from verlfit import gsm8k
from verlfit.checks.disk import existing_parent
from verlfit.checks.result import CheckResult, FAIL, PASS, WARN
from verlfit.data_folder import (
    DataKeys,
    SPLIT_FILES,
    data_folder_refusal,
    data_folder_state,
    missing_verl_columns,
    written_by,
)
from verlfit.gsm8k import HUB_DATASET, HUB_TRAIN_FILE
from verlfit.hub import NETWORK_TIMEOUT_S, http_head, offline_variable, probe
from verlfit.input_files import kind_of


def datasets_cache_folder(dataset_id: str) -> str | None:
    """The ``datasets`` cache folder of hub dataset ``dataset_id`` when a load left it there (``owner___name``
    under ``HF_DATASETS_CACHE``, the name datasets 3.6's ``load.py`` gives it; offline loads read it), else None."""
    import datasets.config  # lazy: imports pyarrow and pandas; only where GSM8K is read

    folder = Path(datasets.config.HF_DATASETS_CACHE) / dataset_id.replace("/", "___")
    return str(folder) if folder.is_dir() and any(folder.iterdir()) else None


def folder_unwritable(folder: Path) -> str | None:
    """Why ``folder`` (created if missing, as ``verlfit train`` creates ``--data/verl``) cannot be written, in words
    naming its nearest existing folder: ``"PARENT is on a read-only file system"`` (``statvfs``'s ``ST_RDONLY``),
    ``"PARENT is not writable for this user"`` (``os.access``); None where it can."""

    where = existing_parent(folder)
    try:
        read_only = bool(os.statvfs(where).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False  # not measurable: os.access below still answers
    if read_only:
        return f"{where} is on a read-only file system"
    if not os.access(where, os.W_OK | os.X_OK):
        return f"{where} is not writable for this user"
    return None


def check_data_folder(
    data_dir: str | os.PathLike,
    environ: Mapping[str, str],
    timeout: float = NETWORK_TIMEOUT_S,
    head: Callable = http_head,
    dataset_cache_lookup: Callable[[str], str | None] | None = datasets_cache_folder,
    keys: DataKeys = DataKeys(),
) -> CheckResult:
    """The ``data`` check of ``data_dir`` (``--data``): PASS when verl's ``train.parquet`` and ``test.parquet`` are
    there, readable, with the columns verl reads under ``keys`` (``data.prompt_key``, ``data.reward_fn_key``:
    :func:`verlfit.data_folder.missing_verl_columns`) and rows; WARN when they are not prepared yet but ``verlfit
    train`` can prepare them into an absent or empty folder (from raw GSM8K files in ``data_dir``
    (:func:`verlfit.gsm8k.training_data`), the datasets cache or the hub); FAIL with the fix otherwise, also for raw
    JSON lines files with a line that is not one JSON object (:func:`verlfit.gsm8k.bad_json_line_refusal`: the file
    and line, as ``prepare-gsm8k`` names them). A folder
    holding the user's files (:func:`verlfit.data_folder.data_folder_state`: neither prepared nor writable) is a FAIL
    whose fix never prepares data over them (:func:`verlfit.data_folder.data_folder_refusal`).

    ``environ``: the environment (HF_ENDPOINT, the offline variables); ``timeout`` (s) and ``head``: the one hub
    HEAD request (:func:`verlfit.hub.probe`); ``dataset_cache_lookup``: where ``datasets`` keeps a loaded hub dataset
    (no network; tests pass fakes).
    """
    import pyarrow  # lazy: only where parquet is read or written
    import pyarrow.parquet as pq  # lazy: only where parquet is read or written

    data = Path(data_dir)
    if (data.exists() or data.is_symlink()) and not data.is_dir():
        return CheckResult(
            "data",
            FAIL,
            f"{data} is {kind_of(data)}, not a data directory",
            "pass --data the directory that holds (or will hold) train.parquet and test.parquet",
        )
    # raw GSM8K files in --data are prepared into --data/verl by train (an incomplete set raises: a FAIL with its fix)
    prepared, source = gsm8k.training_data(data)
    report = data_folder_state(prepared, keys)
    if not report.prepared and not report.writable:
        # the user's files: never a fix that prepares data over them
        refusal = data_folder_refusal(report)
        return CheckResult("data", FAIL, refusal.message, refusal.fix)
    fix = (
        f"verlfit prepare-gsm8k --input {source} --output {prepared}"
        if source is not None
        else f"verlfit prepare-gsm8k --output {prepared}"
    )
    if report.prepared and written_by(prepared) != "verlfit prepare-gsm8k":
        # the user's own task (verlfit prepare-data's, or verl-format data from elsewhere): never GSM8K over it
        fix = (
            "make train.parquet and test.parquet again from your own files (verlfit prepare-data --output "
            "NEW_FOLDER), or point --data at a folder with verl's files"
        )
    missing = [name for name in SPLIT_FILES if not (prepared / name).is_file()]
    if missing and source is not None:
        # what prepare-gsm8k --input refuses, refused here (naming the file and line), not when train prepares them
        for files in (gsm8k.raw_files(source) or {}).values():
            refusal = gsm8k.bad_json_line_refusal(files)
            if refusal is not None:
                return CheckResult("data", FAIL, refusal.message, refusal.fix)
        unwritable = folder_unwritable(prepared)
        if unwritable:
            return CheckResult(
                "data",
                FAIL,
                f"{source} holds raw GSM8K files, not prepared yet, and verlfit train cannot prepare verl's files "
                f"into {prepared}: {unwritable}",
                f"verlfit prepare-gsm8k --input {source} --output A_FOLDER_YOU_CAN_WRITE (e.g. ~/data/gsm8k), then "
                "pass --data that folder",
            )
        return CheckResult(
            "data",
            WARN,
            f"{source} holds raw GSM8K files, not prepared yet: verlfit train prepares verl's files from them into "
            f"{prepared}",
            fix,
        )
    if missing:
        result = _hub_data(prepared, missing, fix, environ, timeout, head, dataset_cache_lookup)
        if not data.exists() and "gsm8k" not in str(data).lower():
            # a folder that is not there and not named for GSM8K: most likely the user's own task (or a typo), not GSM8K
            said = "verlfit train would prepare GSM8K into it" + (
                "" if result.status == WARN else f", but cannot here ({result.message.split(', and ', 1)[-1]})"
            )
            return CheckResult(
                "data",
                result.status,
                f"{data} does not exist: {said}",
                "check the path; for your own task make the folder first: verlfit prepare-data --train FILE"
                f" --test-fraction 0.1 --data-source NAME --output {data}",
            )
        return result
    rows = {}
    for name in SPLIT_FILES:
        path = prepared / name
        try:
            metadata = pq.read_metadata(path)
            schema = metadata.schema.to_arrow_schema()
        except (OSError, pyarrow.ArrowException) as error:
            return CheckResult("data", FAIL, f"{path} is not readable parquet: {str(error).splitlines()[0]}", fix)
        absent = missing_verl_columns(schema, keys)
        if absent:
            return CheckResult(
                "data",
                FAIL,
                f"{path} lacks verl's column{'s' if len(absent) > 1 else ''} {', '.join(absent)} (has "
                f"{', '.join(sorted(schema.names))})",
                fix,
            )
        if metadata.num_rows == 0:
            return CheckResult("data", FAIL, f"{path} has no rows", fix)
        rows[name] = metadata.num_rows
    return CheckResult(
        "data",
        PASS,
        f"{prepared}: train.parquet {rows['train.parquet']} rows, test.parquet {rows['test.parquet']} rows, verl "
        "columns present",
    )


def _hub_data(
    data: Path,
    missing: list[str],
    fix: str,
    environ: Mapping[str, str],
    timeout: float,
    head: Callable,
    dataset_cache_lookup: Callable[[str], str | None] | None,
) -> CheckResult:
    """No verl files and no raw files in ``data``: train would prepare GSM8K from the hub. WARN when the datasets
    cache or the hub (one HEAD, ``timeout`` s) can give it; FAIL when neither can."""

    absent = f"{data} has no {' or '.join(missing)} and no raw GSM8K files"
    local = (
        "copy GSM8K's files (the hub's main/train-*.parquet and main/test-*.parquet, or train/test .jsonl with "
        f"question and answer) into {data} and run verlfit train (or "
        f"{fix.replace('prepare-gsm8k', 'prepare-gsm8k --input DIR')})"
    )
    cached = dataset_cache_lookup(HUB_DATASET) if dataset_cache_lookup is not None else None
    if cached:
        return CheckResult(
            "data",
            WARN,
            f"{absent}: not prepared yet (verlfit train prepares GSM8K there from the datasets cache, {cached})",
            fix,
        )
    offline = offline_variable(environ, datasets=True)
    if offline:
        return CheckResult(
            "data",
            FAIL,
            f"{absent}, and {HUB_DATASET} is not in the datasets cache while {offline} is set: verlfit train has "
            "nothing to prepare from",
            local,
        )
    answer = probe(HUB_DATASET, HUB_TRAIN_FILE, environ, timeout, head, repo_type="dataset")
    if answer.status is None:
        return CheckResult(
            "data",
            FAIL,
            f"{absent}, and {answer.endpoint} is unreachable ({answer.reason}): verlfit train has nothing to prepare "
            "from",
            f"{local}; or set HF_ENDPOINT to a reachable mirror",
        )
    if not answer.reachable:
        return CheckResult(
            "data",
            FAIL,
            f"{absent}, and {answer.endpoint} answered HTTP {answer.status} for {HUB_DATASET}",
            f"{local}; or set HF_ENDPOINT to a mirror that has {HUB_DATASET}",
        )
    return CheckResult(
        "data", WARN, f"{absent}: not prepared yet (verlfit train prepares GSM8K there from {answer.endpoint})", fix
    )
