"""Can the Hugging Face hub (or ``HF_ENDPOINT``'s mirror) be reached from here? One HEAD request with a short
timeout, and the offline switches, read the way ``huggingface_hub`` and ``datasets`` read them.

Used by ``verlfit doctor`` (model and data checks) and by ``prepare-gsm8k`` / ``train`` before they load a
tokenizer or GSM8K from the hub, so that a host without hub access is told so in seconds instead of after
``huggingface_hub``'s retries (about 50 s of tracebacks, measured on a host with no route to the hub).
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from verlfit.errors import VerlfitError

HUB_ENDPOINT = "https://huggingface.co"  # huggingface_hub.constants._HF_DEFAULT_ENDPOINT
NETWORK_TIMEOUT_S = 3.0  # one HEAD answers in well under a second where the hub is reachable
TRUE_VALUES = ("1", "true", "yes", "on")  # huggingface_hub.constants.ENV_VARS_TRUE_VALUES


def endpoint(environ: Mapping[str, str]) -> str:
    """``HF_ENDPOINT`` without a trailing slash, else ``https://huggingface.co``."""
    return (environ.get("HF_ENDPOINT") or HUB_ENDPOINT).rstrip("/")


def offline_variable(environ: Mapping[str, str], datasets: bool = False) -> str | None:
    """The name of the offline switch that is set (``HF_HUB_OFFLINE``; with ``datasets`` also
    ``HF_DATASETS_OFFLINE``, which ``datasets`` honours too), or None when neither is."""
    names = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if datasets else ("HF_HUB_OFFLINE",)
    return next((name for name in names if environ.get(name, "").strip().lower() in TRUE_VALUES), None)


def http_head(url: str, timeout: float, headers: Mapping[str, str] | None = None) -> int:
    """HEAD ``url`` (following redirects); return the HTTP status. Raises OSError when unreachable."""

    request = urllib.request.Request(url, method="HEAD", headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


@dataclass(frozen=True)
class HubAnswer:
    """What one HEAD of a repository file answered.

    Attributes:
        endpoint: the hub or mirror asked (no trailing slash).
        url: the file's ``resolve/main`` URL.
        status: the HTTP status, or None when the endpoint did not answer.
        reason: why it did not answer (None when it did).
    """

    endpoint: str
    url: str
    status: int | None
    reason: str | None = None

    @property
    def reachable(self) -> bool:
        return self.status is not None and 200 <= self.status < 400


def probe(
    repo_id: str,
    filename: str,
    environ: Mapping[str, str],
    timeout: float = NETWORK_TIMEOUT_S,
    head: Callable = http_head,
    repo_type: str = "model",
) -> HubAnswer:
    """HEAD ``filename`` of ``repo_id`` (``repo_type`` ``"model"`` or ``"dataset"``) at ``HF_ENDPOINT``,
    with ``HF_TOKEN`` when set. Never raises for an unreachable endpoint: ``status`` is then None.

    Args:
        timeout: seconds to wait for the answer.
        head: ``f(url, timeout, headers) -> status`` raising OSError when unreachable (tests pass a fake).
    """
    base = endpoint(environ)
    prefix = "datasets/" if repo_type == "dataset" else ""
    url = f"{base}/{prefix}{repo_id}/resolve/main/{filename}"
    headers = {"Authorization": f"Bearer {environ['HF_TOKEN']}"} if environ.get("HF_TOKEN") else {}
    try:
        return HubAnswer(base, url, head(url, timeout, headers))
    except (OSError, ValueError) as error:
        return HubAnswer(base, url, None, str(getattr(error, "reason", None) or error))


def is_hub_id(name: str) -> bool:
    """True when ``name`` has the form of a hub model id, ``owner/name``: exactly one ``/``, not starting with
    ``.``, ``/`` or ``~``, and valid by ``huggingface_hub.utils.validate_repo_id`` (word characters, ``-``, ``.``;
    no ``--`` or ``..``). Anything else (``/abs``, ``./x``, ``../x``, ``a/b/c``, a bare ``name``) is a path."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id  # lazy: only on the paths that reach the hub

    text = str(name)
    if text.count("/") != 1 or text.startswith((".", "/", "~")) or "\\" in text:
        return False
    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return True


def require_model_source(
    name: str,
    what: str,
    environ: Mapping[str, str],
    head: Callable = http_head,
    cache_lookup: Callable | None = None,
    timeout: float = NETWORK_TIMEOUT_S,
) -> str:
    """Check, in seconds, that ``from_pretrained(name)`` can find ``name``; return ``"local"``, ``"cache"`` or
    ``"hub"`` (where it will come from).

    The rule: an existing directory is local. A name that is not a hub id (:func:`is_hub_id`) is a path that does
    not exist. A hub id (``runs/typo`` is one too) is looked up in the local hub cache (its ``config.json``), then,
    unless ``HF_HUB_OFFLINE`` is set, with one HEAD of ``config.json`` at ``HF_ENDPOINT`` (``timeout`` seconds)
    instead of ``huggingface_hub``'s retries (about 50 s where the hub is unreachable).

    Args:
        what: how the user gave it, for messages (``"MODEL"``, ``"--compare"``).
        head: ``f(url, timeout, headers) -> status`` (tests pass a fake).
        cache_lookup: ``f(repo_id, filename) -> path | None`` (default ``huggingface_hub.try_to_load_from_cache``).

    Raises:
        VerlfitError: a file instead of a directory; a path that does not exist; a hub id that is not a local
            directory and cannot be had (offline and not cached, hub unreachable, HTTP 401/403/404).
    """

    path = Path(str(name)).expanduser()
    local_fix = (
        "pass a model directory (config.json, weights, tokenizer files: what verlfit export writes), "
        "a run directory made by verlfit train, or a hub id such as Qwen/Qwen2.5-0.5B-Instruct"
    )
    if path.is_dir():
        return "local"
    if path.exists():
        raise VerlfitError(f"{what} {name} is a file, not a model directory", fix=local_fix, exit_code=2)
    if not is_hub_id(name):
        raise VerlfitError(
            f"{what} {name}: no such directory (and not a hub id, which is owner/name)", fix=local_fix, exit_code=2
        )
    if cache_lookup is None:
        from huggingface_hub import try_to_load_from_cache as cache_lookup  # lazy: only on the paths that reach the hub
    try:
        cached = cache_lookup(str(name), "config.json")
    except Exception:  # an unreadable cache: same as not cached
        cached = None
    if isinstance(cached, (str, os.PathLike)) and Path(cached).is_file():
        return "cache"
    not_local = f"{what} {name} is not a local directory"
    download = (
        f"or download it where the hub is reachable (huggingface-cli download {name} --local-dir DIR) and pass DIR"
    )
    offline = offline_variable(environ)
    if offline:
        raise VerlfitError(
            f"{not_local} and the hub is unreachable ({offline}=1 is set, and it is not in the local hub cache)",
            fix=f"check the path (ls {path.parent}), {download}",
        )
    answer = probe(str(name), "config.json", environ, timeout, head)
    if answer.status is None:
        raise VerlfitError(
            f"{not_local} and the hub is unreachable ({answer.endpoint}: {answer.reason})",
            fix=f"check the path (ls {path.parent}), set HF_ENDPOINT to a reachable mirror, {download}",
        )
    if answer.status in (401, 403):
        raise VerlfitError(
            f"{not_local}, and {answer.endpoint} needs authorisation for it (HTTP {answer.status}): gated or private",
            fix="check the path, or accept the licence on the model page and export HF_TOKEN",
        )
    if answer.status == 404:
        raise VerlfitError(
            f"{not_local} and not a model at {answer.endpoint} (HTTP 404)",
            fix=f"check the path (ls {path.parent}) or the model id",
            exit_code=2,
        )
    return "hub"
