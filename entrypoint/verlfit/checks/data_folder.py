"""The data folder check (``--data``): are verl's parquet files there and well-formed, or can ``verlfit train``
prepare them (:func:`check_data_folder`)? Used by ``verlfit doctor`` (its ``data`` line) and so by the blocking
checks ``verlfit train`` runs before it launches.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Mapping

from verlfit.checks.result import FAIL, PASS, WARN, CheckResult
from verlfit.gsm8k import VERL_REQUIRED_COLUMNS  # what RLHFDataset and the reward manager read
from verlfit.hub import NETWORK_TIMEOUT_S, http_head, offline_variable, probe

def datasets_cache_folder(dataset_id: str) -> str | None:
    """The ``datasets`` cache folder of hub dataset ``dataset_id`` when a load left it there (``owner___name``
    under ``HF_DATASETS_CACHE``, the name datasets 3.6's ``load.py`` gives it; offline loads read it), else None."""
    import datasets.config

    folder = Path(datasets.config.HF_DATASETS_CACHE) / dataset_id.replace("/", "___")
    return str(folder) if folder.is_dir() and any(folder.iterdir()) else None


def check_data_folder(data_dir: str | os.PathLike, environ: Mapping[str, str], timeout: float = NETWORK_TIMEOUT_S, head: Callable = http_head, dataset_cache_lookup: Callable[[str], str | None] | None = datasets_cache_folder) -> CheckResult:
    """The ``data`` check of ``data_dir`` (``--data``): PASS when verl's ``train.parquet`` and ``test.parquet`` are
    there, readable, with verl's columns (:data:`verlfit.gsm8k.VERL_REQUIRED_COLUMNS`) and rows; WARN when they are
    not prepared yet but ``verlfit train`` can prepare them (from raw GSM8K files in ``data_dir``
    (:func:`verlfit.gsm8k.training_data`), the datasets cache or the hub); FAIL with the fix otherwise.

    ``environ``: the environment (HF_ENDPOINT, the offline variables); ``timeout`` (s) and ``head``: the one hub
    HEAD request (:func:`verlfit.hub.probe`); ``dataset_cache_lookup``: where ``datasets`` keeps a loaded hub dataset
    (no network; tests pass fakes).
    """
    import pyarrow
    import pyarrow.parquet as pq

    from verlfit import gsm8k

    data = Path(data_dir)
    if data.exists() and not data.is_dir():
        return CheckResult("data", FAIL, f"{data} is a file, not a data directory", "pass --data the directory that holds (or will hold) train.parquet and test.parquet")
    # raw GSM8K files in --data are prepared into --data/verl by train (an incomplete set raises: a FAIL with its fix)
    prepared, source = gsm8k.training_data(data)
    fix = f"verlfit prepare-gsm8k --input {source} --output {prepared}" if source is not None else f"verlfit prepare-gsm8k --output {prepared}"
    missing = [name for name in ("train.parquet", "test.parquet") if not (prepared / name).is_file()]
    if missing and source is not None:
        return CheckResult("data", WARN, f"{source} holds raw GSM8K files, not prepared yet: verlfit train prepares verl's files from them into {prepared}", fix)
    if missing:
        return _hub_data(prepared, missing, fix, environ, timeout, head, dataset_cache_lookup)
    rows = {}
    for name in ("train.parquet", "test.parquet"):
        path = prepared / name
        try:
            metadata = pq.read_metadata(path)
            columns = set(metadata.schema.to_arrow_schema().names)
        except (OSError, pyarrow.ArrowException) as error:
            return CheckResult("data", FAIL, f"{path} is not readable parquet: {str(error).splitlines()[0]}", fix)
        absent = [c for c in VERL_REQUIRED_COLUMNS if c not in columns]
        if absent:
            return CheckResult("data", FAIL, f"{path} lacks verl's column{'s' if len(absent) > 1 else ''} {', '.join(absent)} (has {', '.join(sorted(columns))})", fix)
        if metadata.num_rows == 0:
            return CheckResult("data", FAIL, f"{path} has no rows", fix)
        rows[name] = metadata.num_rows
    return CheckResult("data", PASS, f"{prepared}: train.parquet {rows['train.parquet']} rows, test.parquet {rows['test.parquet']} rows, verl columns present")


def _hub_data(data: Path, missing: list[str], fix: str, environ: Mapping[str, str], timeout: float, head: Callable, dataset_cache_lookup: Callable[[str], str | None] | None) -> CheckResult:
    """No verl files and no raw files in ``data``: train would prepare GSM8K from the hub. WARN when the datasets
    cache or the hub (one HEAD, ``timeout`` s) can give it; FAIL when neither can."""
    from verlfit.gsm8k import HUB_DATASET, HUB_TRAIN_FILE

    absent = f"{data} has no {' or '.join(missing)} and no raw GSM8K files"
    local = f"copy GSM8K's files (the hub's main/train-*.parquet and main/test-*.parquet, or train/test .jsonl with question and answer) into {data} and run verlfit train (or {fix.replace('prepare-gsm8k', 'prepare-gsm8k --input DIR')})"
    cached = dataset_cache_lookup(HUB_DATASET) if dataset_cache_lookup is not None else None
    if cached:
        return CheckResult("data", WARN, f"{absent}: not prepared yet (verlfit train prepares GSM8K there from the datasets cache, {cached})", fix)
    offline = offline_variable(environ, datasets=True)
    if offline:
        return CheckResult("data", FAIL, f"{absent}, and {HUB_DATASET} is not in the datasets cache while {offline} is set: verlfit train has nothing to prepare from", local)
    answer = probe(HUB_DATASET, HUB_TRAIN_FILE, environ, timeout, head, repo_type="dataset")
    if answer.status is None:
        return CheckResult("data", FAIL, f"{absent}, and {answer.endpoint} is unreachable ({answer.reason}): verlfit train has nothing to prepare from", f"{local}; or set HF_ENDPOINT to a reachable mirror")
    if not answer.reachable:
        return CheckResult("data", FAIL, f"{absent}, and {answer.endpoint} answered HTTP {answer.status} for {HUB_DATASET}", f"{local}; or set HF_ENDPOINT to a mirror that has {HUB_DATASET}")
    return CheckResult("data", WARN, f"{absent}: not prepared yet (verlfit train prepares GSM8K there from {answer.endpoint})", fix)
