"""Can the Hugging Face hub (or ``HF_ENDPOINT``'s mirror) be reached from here? One HEAD request with a short
timeout, and the offline switches, read the way ``huggingface_hub`` and ``datasets`` read them.

Used by ``verlfit doctor`` (model and data checks) and by ``prepare-gsm8k`` / ``train`` before they load a
tokenizer or GSM8K from the hub, so that a host without hub access is told so in seconds instead of after
``huggingface_hub``'s retries (about 50 s of tracebacks, measured on a host with no route to the hub).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

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
    import urllib.error
    import urllib.request

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


def probe(repo_id: str, filename: str, environ: Mapping[str, str], timeout: float = NETWORK_TIMEOUT_S, head: Callable = http_head, repo_type: str = "model") -> HubAnswer:
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
