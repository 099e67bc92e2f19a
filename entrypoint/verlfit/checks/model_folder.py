"""The model check (``--model``): is it a usable local model directory, or a hub id that is cached or reachable
(:func:`check_model_folder`)? Used by ``verlfit doctor`` (its ``model`` line) and so by the blocking checks
``verlfit train`` runs before it launches.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Mapping

from verlfit.checks.result import CheckResult, FAIL, PASS
from verlfit.errors import VerlfitError
from verlfit.hub import NETWORK_TIMEOUT_S, http_head, offline_variable, probe
from verlfit.model_files import inspect_model_dir
from verlfit.model_shape import load_model_shape


def hub_cache_file(repo_id: str, filename: str):
    """``filename`` of hub repo ``repo_id`` in the local hub cache (huggingface_hub's ``try_to_load_from_cache``: a
    path, None, or a marker that it is known to be missing); no network."""
    from huggingface_hub import try_to_load_from_cache  # lazy: only on the paths that reach the hub

    return try_to_load_from_cache(repo_id, filename)


def planner_refusal(model: str, hub_cache_lookup: Callable | None) -> VerlfitError | None:
    """What :func:`verlfit.model_shape.load_model_shape` (the reader ``verlfit plan`` and the dry run size the model
    with) says of ``model``'s ``config.json``, as an error to report: transformers cannot build it
    (:func:`verlfit.model_shape.check_transformers_builds`), a key the count needs is missing or not a positive whole
    number, a mixture of experts; None when it reads. So the doctor passes no model that the plan refuses."""

    try:
        load_model_shape(model, hub_cache_lookup=hub_cache_lookup)
    except VerlfitError as error:
        return error
    return None


def check_model_folder(
    model: str,
    environ: Mapping[str, str],
    timeout: float = NETWORK_TIMEOUT_S,
    head: Callable = http_head,
    hub_cache_lookup: Callable | None = hub_cache_file,
) -> CheckResult:
    """The ``model`` check of ``model`` (``--model``: a local directory or a hub id): PASS for a model directory
    with config, weights and tokenizer (:func:`verlfit.model_files.inspect_model_dir`), a hub id in the local cache,
    or one the hub answers for; FAIL with the fix otherwise (a file, a folder without weights, gated, missing,
    unreachable, offline; a config.json the planner refuses: :func:`planner_refusal`).

    ``environ``: the environment (HF_ENDPOINT, HF_HUB_OFFLINE); ``timeout`` (s) and ``head``: the one hub HEAD
    request (:func:`verlfit.hub.probe`); ``hub_cache_lookup``: ``f(repo_id, filename) -> path | None`` (no network).
    """

    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            return CheckResult(
                "model",
                FAIL,
                f"{path} is a file, not a model directory",
                "point --model at a Hugging Face model directory (config.json, weights, tokenizer) or pass a hub id",
            )
        try:
            found = inspect_model_dir(path)
        except VerlfitError as error:
            return CheckResult("model", FAIL, error.message, error.fix)
        refusal = planner_refusal(str(path), hub_cache_lookup)
        if refusal is not None:
            return CheckResult("model", FAIL, refusal.message, refusal.fix)
        return CheckResult("model", PASS, f"{path} is a local model directory: {found.describe()}")
    if model.count("/") != 1 or model.startswith((".", "/", "~")):
        return CheckResult(
            "model",
            FAIL,
            f"{model!r} is neither a local directory nor a hub id (owner/name)",
            "pass --model /path/to/model or a hub id such as Qwen/Qwen2.5-0.5B-Instruct",
        )
    if hub_cache_lookup is not None:
        try:
            cached = hub_cache_lookup(model, "config.json")
        except Exception:
            cached = None
        if isinstance(cached, (str, os.PathLike)) and Path(cached).is_file():
            refusal = planner_refusal(str(cached), hub_cache_lookup)
            if refusal is not None:
                return CheckResult("model", FAIL, refusal.message, refusal.fix)
            return CheckResult("model", PASS, f"{model} is in the local hub cache")
    if offline_variable(environ):
        return CheckResult(
            "model",
            FAIL,
            f"{model} is not in the local hub cache and HF_HUB_OFFLINE is set",
            "download it first (huggingface-cli download MODEL) or pass --model /path/to/model",
        )
    answer = probe(model, "config.json", environ, timeout, head)
    endpoint, status = answer.endpoint, answer.status
    if status is None:
        return CheckResult(
            "model",
            FAIL,
            f"{model} is not local and {endpoint} is unreachable ({answer.reason})",
            "set HF_ENDPOINT to a reachable mirror, or download the model and pass --model /path/to/model",
        )
    if answer.reachable:
        return CheckResult(
            "model", PASS, f"{model} is reachable at {endpoint} (HTTP {status}); it downloads at the first run"
        )
    if status in (401, 403):
        return CheckResult(
            "model",
            FAIL,
            f"{model} at {endpoint} needs authorisation (HTTP {status}): gated or private",
            "accept the licence on the model page and export HF_TOKEN",
        )
    if status == 404:
        return CheckResult(
            "model",
            FAIL,
            f"{model} does not exist at {endpoint} (HTTP 404)",
            "check the model id, or pass --model /path/to/model",
        )
    return CheckResult(
        "model",
        FAIL,
        f"{model}: {endpoint} answered HTTP {status}",
        "retry later, set HF_ENDPOINT to a mirror, or pass --model /path/to/model",
    )
