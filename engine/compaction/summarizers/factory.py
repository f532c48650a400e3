"""The summarizer a process uses: chosen by the user's settings (:mod:`engine.core.config`: the settings
file, the OS keyring for the API key), environment variables overriding; who wrote a summary
(:func:`provenance`); and the Preferences' *Test connection* (:func:`check_connection`)."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import urlsplit

from ...core.config import ENV_API_KEY, ENV_BASE_URL, ENV_MODEL, ENV_TIMEOUT, SettingError, Settings
from ...llm.client import ChatClient
from ...llm.errors import (
    AUTH_FAILED,
    BAD_REQUEST,
    CONNECTION_ERROR,
    CONTEXT_WINDOW_EXCEEDED,
    MALFORMED_RESPONSE,
    RATE_LIMITED,
    SERVER_ERROR,
    TIMEOUT,
    ProviderError,
)
from .extractive import ExtractiveSummarizer
from .openai_compat import OpenAICompatSummarizer
from .protocol import Summarizer, SummarizerError

__all__ = [
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MODEL",
    "ENV_TIMEOUT",
    "ConnectionReport",
    "check_connection",
    "endpoint_host",
    "make_summarizer",
    "make_summarizer_from_env",
    "provenance",
]


def make_summarizer_from_env(env: Mapping[str, str] = os.environ) -> Summarizer:
    """The OpenAI-compatible summarizer when ``COMPACTION_SUMMARY_BASE_URL`` and
    ``COMPACTION_SUMMARY_MODEL`` are set (API key and timeout optional), else the extractive one.
    The environment alone (no settings file): :func:`make_summarizer` is what processes use."""
    base_url = env.get(ENV_BASE_URL, "").strip()
    model = env.get(ENV_MODEL, "").strip()
    if not base_url and not model:
        return ExtractiveSummarizer()
    if not (base_url and model):
        missing = ENV_MODEL if base_url else ENV_BASE_URL
        present = ENV_BASE_URL if base_url else ENV_MODEL
        raise SummarizerError(f"{present} is set but {missing} is not: set both, or neither for the extractive summarizer", "config")
    raw_timeout = env.get(ENV_TIMEOUT, "").strip()
    timeout = 60.0
    if raw_timeout:
        try:
            timeout = float(raw_timeout)
        except ValueError:
            timeout = -1.0
        if not (math.isfinite(timeout) and timeout > 0):
            raise SummarizerError(f"{ENV_TIMEOUT} must be a positive number of seconds, got {raw_timeout!r}", "config")
    return OpenAICompatSummarizer(base_url, model, api_key=env.get(ENV_API_KEY) or None, timeout=timeout)


def make_summarizer(settings: Settings | None = None) -> Summarizer:
    """The summarizer the user's settings choose (``summarizer.kind``), environment variables
    overriding each value (``COMPACTION_SUMMARY_*``; setting the base URL or the model in the
    environment chooses the endpoint). The API key comes from the environment, else the OS
    keyring (or this session's key, where there is no keyring)."""
    settings = settings if settings is not None else Settings()
    try:
        s = settings.summarizer()
    except SettingError as exc:
        raise SummarizerError(exc.message, "config") from None
    if s.kind != "openai":
        return ExtractiveSummarizer()
    if not (s.base_url and s.model):
        names = {"summarizer.base_url": ENV_BASE_URL, "summarizer.model": ENV_MODEL}
        missing = [n for n, v in (("summarizer.base_url", s.base_url), ("summarizer.model", s.model)) if not v]
        said = " and ".join(f"{n} ({s.sources[n].where()})" for n in names if n not in missing)
        which = " and ".join(f"{n} (or {names[n]})" for n in missing)
        raise SummarizerError(
            f"the OpenAI-compatible summarizer needs a base URL and a model: {which} "
            f"{'is' if len(missing) == 1 else 'are'} not set{f', {said} is' if said else ''}; set "
            f"{'it' if len(missing) == 1 else 'them'} in Preferences or with `compaction config set`, or use the extractive summarizer", "config")
    return OpenAICompatSummarizer(s.base_url, s.model, api_key=s.api_key, timeout=s.timeout)


def endpoint_host(url: str | None) -> str | None:
    """The host (and a port other than the scheme's) of an endpoint URL; never its path, query or credentials."""
    if not url:
        return None
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return None
    default = {"http": 80, "https": 443}.get(parts.scheme)
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{host}:{port}" if port and port != default else host


def provenance(summarizer: object) -> dict[str, str | None]:
    """Who writes a summarizer's summaries, for the compaction's event: its ``summarizer`` name
    (``extractive``, ``openai-compatible:<model>``) and ``summarizer_host``, the endpoint's host
    (``None`` for an offline summarizer). Never the key."""
    name = getattr(summarizer, "name", type(summarizer).__name__)
    url = getattr(summarizer, "url", None)
    return {"summarizer": str(name), "summarizer_host": endpoint_host(url) if isinstance(url, str) else None}


# == Test connection ===============================================================================
@dataclass(frozen=True, slots=True)
class ConnectionReport:
    """What one tiny request to an endpoint showed: ``ok``, the model that answered and the latency,
    or the classified error (``error_code`` from :mod:`engine.llm.errors`) and ``message`` in words."""

    ok: bool
    message: str
    model: str | None = None
    latency_ms: float | None = None
    error_code: str | None = None
    status: int | None = None
    host: str | None = None


_IN_WORDS = {
    AUTH_FAILED: "the endpoint refused the API key (check the key, or whether this endpoint needs one)",
    RATE_LIMITED: "the endpoint is rate-limiting this key (or its quota is spent): try again later",
    SERVER_ERROR: "the endpoint had a server error",
    TIMEOUT: "no answer within the timeout",
    CONNECTION_ERROR: "cannot reach the endpoint (is the URL right and the server running?)",
    MALFORMED_RESPONSE: "the endpoint answered, but not like an OpenAI-compatible chat-completions API",
    CONTEXT_WINDOW_EXCEEDED: "the endpoint says even a one-word request is too long for the model",
}


def _model_missing(err: ProviderError) -> bool:
    text = (err.message or "").lower()
    return err.status == 404 or "model_not_found" in text or ("model" in text and ("not found" in text or "does not exist" in text or "unknown" in text))


def check_connection(base_url: str, model: str, *, api_key: str | None = None, timeout: float = 10.0) -> ConnectionReport:
    """Send one tiny chat request (``max_tokens`` 1, no retry) through :class:`engine.llm.ChatClient`
    and report the model that answered and the latency, or the classified error in words. The API
    key goes only into the Authorization header and is masked out of any message."""
    host = endpoint_host(base_url)
    if not base_url or not model:
        return ConnectionReport(False, "Set the base URL and the model first.", error_code="config", host=host)
    try:
        client = ChatClient(base_url, provider="summarizer", api_key=api_key or None, timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - an unusable URL is reported, not raised into a dialog
        return ConnectionReport(False, f"The base URL cannot be used: {exc}", error_code="config", host=host)
    body = {"messages": [{"role": "user", "content": "Reply with the single word: ok"}], "max_tokens": 1, "temperature": 0}
    started = time.perf_counter()
    try:
        completion = client.complete_blocking(body, model=model)
    except ProviderError as err:
        code = err.code
        if code in (BAD_REQUEST,) or _model_missing(err):
            words = f"the endpoint does not serve model {model!r} (or refused the request)" if _model_missing(err) else "the endpoint refused the request"
        else:
            words = _IN_WORDS.get(code, "the request failed")
        detail = " ".join((err.message or "").split())[:200]
        if api_key:
            detail = detail.replace(api_key, "***")
        status = f"HTTP {err.status}, " if err.status else ""
        message = f"Failed: {words} ({status}{code}{f': {detail}' if detail else ''})."
        return ConnectionReport(False, message, model=model, error_code=code, status=err.status, host=host,
                                latency_ms=(time.perf_counter() - started) * 1000)
    except Exception as exc:  # noqa: BLE001
        text = str(exc).replace(api_key, "***") if api_key else str(exc)
        return ConnectionReport(False, f"Failed: {text}", error_code="unexpected_error", host=host)
    latency = (time.perf_counter() - started) * 1000
    answered = completion.model or model
    return ConnectionReport(True, f"Connected to {host}: model {answered} answered in {latency:,.0f} ms.",
                            model=answered, latency_ms=latency, host=host)
