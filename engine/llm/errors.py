"""Provider error normalization: every provider failure becomes one :class:`ProviderError`.

Overflow recovery (docs/contract.md §3.1) triggers on exactly one code,
:data:`CONTEXT_WINDOW_EXCEEDED`, so the classifier's job is to find every way a provider says "the request is too long" and never
say it for anything else. The provider's original error (parsed body, text or stream event) is kept
on the error as ``original`` and its text as ``message``, so a run that cannot recover reports what
the provider said, unchanged.

All matching lives in one ordered table, :data:`RULES`; the first matching row wins. Each row names
the provider wording it was written for, and the error records that name as ``rule`` so the
inspector can show *why* an error was classified the way it was. Rows match whatever the provider
label says, because OpenAI-compatible proxies relay other providers' wordings (an Anthropic
"prompt is too long" behind an OpenAI-style gateway); the label is kept for display only.

Decisions, in table order:

- HTTP 429 is a rate limit whatever its text says. OpenAI's "Request too large for gpt-4o ... on
  tokens per min (TPM)" and Azure's "exceeded token rate limit" mention tokens and size but are
  quota errors: waiting (or a bigger quota) fixes them, compaction does not.
- HTTP 413 (Request Entity Too Large) is an overflow whatever its body (HTML from nginx, Anthropic's
  ``request_too_large``, an empty body): the request was too big, and a smaller surface is the remedy.
- An explicit overflow code or type wins next (``context_length_exceeded``,
  ``exceed_context_size_error`` ...), even on a 5xx (llama.cpp sends its overflow with code 500).
- Rate-limit codes and wordings come before overflow wordings, so no quota text can match as overflow.
- An output budget the model can never produce ("max_tokens is too large: 100000. This model supports
  at most 16384 completion tokens", vLLM's "'max_tokens' or 'max_completion_tokens' is too large")
  is ``BAD_REQUEST``: the request's own ``max_tokens`` is wrong, and compacting the conversation would
  hide a configuration error behind a summary. A combined "input plus completion exceed the window"
  (DeepSeek's "you requested 70000 tokens (62000 in the messages, 8000 in the completion)",
  Anthropic's "input length and `max_tokens` exceed context limit") *is* an overflow: a smaller input fixes it.
- A per-string length limit (OpenAI ``string_above_max_length``) is ``BAD_REQUEST``: it is about one
  oversized field, not the context window.
- In-band, ``finish_reason == "length"`` means the *output* hit ``max_tokens``: a normal completion,
  never an overflow. Stop reasons that name the window (``model_context_window_exceeded``, Mistral's
  ``model_length``) are overflows: the window, not the output budget, ended the turn.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from http import HTTPStatus
from typing import Any, Callable, Mapping

from engine.core.errors import EngineError

__all__ = [
    "AUTH_FAILED",
    "BAD_REQUEST",
    "CANCELLED",
    "CODES",
    "CONNECTION_ERROR",
    "CONTEXT_WINDOW_EXCEEDED",
    "MALFORMED_RESPONSE",
    "OVERFLOW_FINISH_REASONS",
    "RATE_LIMITED",
    "RULES",
    "SERVER_ERROR",
    "TIMEOUT",
    "ErrorFacts",
    "ProviderError",
    "Rule",
    "classify_http_error",
    "classify_inband",
    "error_facts",
    "is_context_overflow",
]

CONTEXT_WINDOW_EXCEEDED = "CONTEXT_WINDOW_EXCEEDED"
RATE_LIMITED = "RATE_LIMITED"
AUTH_FAILED = "AUTH_FAILED"
BAD_REQUEST = "BAD_REQUEST"
SERVER_ERROR = "SERVER_ERROR"
TIMEOUT = "TIMEOUT"
CONNECTION_ERROR = "CONNECTION_ERROR"
MALFORMED_RESPONSE = "MALFORMED_RESPONSE"
CANCELLED = "CANCELLED"

CODES: frozenset[str] = frozenset(
    {
        CONTEXT_WINDOW_EXCEEDED,
        RATE_LIMITED,
        AUTH_FAILED,
        BAD_REQUEST,
        SERVER_ERROR,
        TIMEOUT,
        CONNECTION_ERROR,
        MALFORMED_RESPONSE,
        CANCELLED,
    }
)

#: codes a caller may retry unchanged (after a pause); an overflow needs a smaller request first
_RETRYABLE = frozenset({RATE_LIMITED, SERVER_ERROR, TIMEOUT, CONNECTION_ERROR})

#: in-band stop reasons that say the context window (not max_tokens) ended the turn
OVERFLOW_FINISH_REASONS: frozenset[str] = frozenset(
    {"model_context_window_exceeded", "model_length", "context_length_exceeded"}
)


class ProviderError(EngineError):
    """A normalized provider failure.

    ``code`` is one of :data:`CODES`; ``message`` is the provider's own text; ``original`` is what the
    provider sent (parsed JSON body, raw text, stream event) or the transport exception; ``status``
    is the HTTP status (for an in-band error: the status code embedded in the error object, if any);
    ``rule`` names the :data:`RULES` row (or transport condition) that decided the code.
    ``retryable`` and ``retry_after`` (seconds the provider asked to wait) drive the client's retries
    (:class:`engine.llm.retry.RetryPolicy`); ``attempts`` is how many requests the call made before
    giving up with this error.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        provider: str,
        status: int | None = None,
        original: object = None,
        retryable: bool | None = None,
        retry_after: float | None = None,
        inband: bool = False,
        rule: str = "",
        attempts: int = 1,
    ) -> None:
        if code not in CODES:
            raise ValueError(f"unknown provider error code {code!r}")
        super().__init__(message, code=code)
        self.provider = provider
        self.status = status
        self.original = original
        self.retryable = code in _RETRYABLE if retryable is None else retryable
        self.retry_after = retry_after
        self.inband = inband
        self.rule = rule
        self.attempts = attempts

    def __str__(self) -> str:
        where = f"HTTP {self.status}" if self.status is not None else ("in-band" if self.inband else "no status")
        return f"{self.code} from {self.provider} ({where}): {self.message}"

    def __repr__(self) -> str:
        return (
            f"ProviderError({self.code!r}, provider={self.provider!r}, status={self.status!r}, "
            f"rule={self.rule!r}, message={self.message[:80]!r})"
        )

    def to_json(self) -> dict:
        return {
            "error": {
                "code": self.code,
                "message": self.message,
                "provider": self.provider,
                "status": self.status,
                "inband": self.inband,
                "retryable": self.retryable,
                "rule": self.rule,
            }
        }


def is_context_overflow(err: BaseException | None) -> bool:
    """True when ``err`` is a provider error normalized to :data:`CONTEXT_WINDOW_EXCEEDED`."""
    return isinstance(err, ProviderError) and err.code == CONTEXT_WINDOW_EXCEEDED


# -- facts: what an error body says, extracted once -------------------------------------------------


@dataclass(frozen=True, slots=True)
class ErrorFacts:
    """The fields of an error body the rules look at (``code``/``type``/``param`` lower-cased)."""

    status: int | None
    message: str
    code: str
    type: str
    param: str
    original: Any


def _parse(body: bytes | str | Mapping[str, Any] | list | None) -> Any:
    if body is None or isinstance(body, (Mapping, list)):
        return body
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        return json.loads(text)
    except ValueError:
        return text


def _status_from(value: Any) -> int | None:
    """An HTTP-like status embedded in an error object (vLLM ``"code": 400``, Azure ``"code": "429"``)."""
    if isinstance(value, bool):
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return n if 100 <= n <= 599 else None


def error_facts(status: int | None, body: bytes | str | Mapping[str, Any] | list | None) -> ErrorFacts:
    """Pull message, code, type and param out of any known error body shape.

    Shapes: OpenAI/DeepSeek/Azure/llama.cpp ``{"error": {...}}``; vLLM and Mistral
    ``{"object": "error", "message": ...}``; Anthropic ``{"type": "error", "error": {...}}``;
    Ollama ``{"error": "text"}``; Gemini ``[{"error": {...}}]``; FastAPI ``{"detail": ...}``;
    and non-JSON text or HTML. With no HTTP status, a status embedded in the object is used.
    """
    original = _parse(body)
    node: Any = original[0] if isinstance(original, list) and original else original
    message = code = type_ = param = ""
    embedded: int | None = None
    if isinstance(node, Mapping):
        inner = node.get("error")
        if isinstance(inner, Mapping):
            node = inner
        elif isinstance(inner, str) and inner:
            message = inner
        if not message:
            for key in ("message", "detail", "msg", "error_message"):
                value = node.get(key)
                if isinstance(value, str) and value:
                    message = value
                    break
                if value:  # FastAPI validation details are a list of objects
                    message = json.dumps(value, ensure_ascii=False)
                    break
        raw_code = node.get("code")
        code = "" if raw_code is None else str(raw_code).lower()
        type_ = str(node.get("type") or node.get("status") or "").lower()
        param = str(node.get("param") or "").lower()
        embedded = _status_from(raw_code)
    elif isinstance(node, str):
        message = node.strip()
    effective = status if status is not None else embedded
    if not message:
        if effective is not None:
            try:
                message = f"HTTP {effective} {HTTPStatus(effective).phrase}"
            except ValueError:
                message = f"HTTP {effective}"
        else:
            message = "provider error without a message"
    return ErrorFacts(status=effective, message=message, code=code, type=type_, param=param, original=original)


# -- the table ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    """One row: when ``test`` holds for the facts, the error gets ``code``."""

    name: str  # "<wording family>:<what it matches>", recorded on the error
    code: str
    test: Callable[[ErrorFacts], bool]


def _status(*statuses: int) -> Callable[[ErrorFacts], bool]:
    return lambda f: f.status in statuses


def _status_range(lo: int, hi: int) -> Callable[[ErrorFacts], bool]:
    return lambda f: f.status is not None and lo <= f.status <= hi


def _code_or_type(*values: str) -> Callable[[ErrorFacts], bool]:
    wanted = frozenset(values)
    return lambda f: f.code in wanted or f.type in wanted


def _param(*values: str) -> Callable[[ErrorFacts], bool]:
    wanted = frozenset(values)
    return lambda f: f.param in wanted


def _text(pattern: str) -> Callable[[ErrorFacts], bool]:
    rx = re.compile(pattern, re.IGNORECASE | re.DOTALL)
    return lambda f: rx.search(f.message) is not None


#: first match wins; see the module docstring for why the rows are in this order
RULES: tuple[Rule, ...] = (
    Rule("http:429", RATE_LIMITED, _status(429)),
    Rule("http:413", CONTEXT_WINDOW_EXCEEDED, _status(413)),
    Rule(
        "code:context-overflow",
        CONTEXT_WINDOW_EXCEEDED,
        _code_or_type(
            "context_length_exceeded",  # OpenAI, Azure OpenAI, Groq, OpenRouter
            "exceed_context_size_error",  # llama.cpp server
            "model_context_window_exceeded",  # z.ai, Anthropic stop reason surfaced as an error
            "request_too_large",  # Anthropic 413 type relayed with another status
        ),
    ),
    Rule(
        "code:rate-limit",
        RATE_LIMITED,
        _code_or_type("rate_limit_exceeded", "rate_limit_error", "too_many_requests", "insufficient_quota", "resource_exhausted"),
    ),
    Rule("text:rate-limit", RATE_LIMITED, _text(r"rate.?limit|too many requests|tokens per min|requests per min|\b[TR]PM\b|exceeded .*quota")),
    Rule(
        "text:output-budget",
        BAD_REQUEST,
        _text(r"^\W*max_(completion_)?tokens\W*( or \W*max_completion_tokens\W*)? *(is too large|must be|should be)|invalid max_tokens"),
    ),
    Rule("param:output-budget", BAD_REQUEST, _param("max_tokens", "max_completion_tokens", "max_output_tokens")),
    Rule("code:string-too-long", BAD_REQUEST, _code_or_type("string_above_max_length")),
    # wordings; each names the providers it was taken from
    Rule("openai:maximum-context-length", CONTEXT_WINDOW_EXCEEDED, _text(r"maximum context length")),  # OpenAI, DeepSeek, vLLM, Azure, Mistral, OpenRouter
    Rule("openai:exceeds-context-window", CONTEXT_WINDOW_EXCEEDED, _text(r"exceeds? the context window")),  # OpenAI Responses
    Rule("anthropic:prompt-too-long", CONTEXT_WINDOW_EXCEEDED, _text(r"prompt is too long")),
    Rule("anthropic:input-and-max-tokens", CONTEXT_WINDOW_EXCEEDED, _text(r"input length and .?max_tokens.? exceed context limit")),
    Rule("vllm:longer-than-max-model-len", CONTEXT_WINDOW_EXCEEDED, _text(r"is longer than the maximum model length")),  # V1 engine
    Rule("ollama:exceeds-context-length", CONTEXT_WINDOW_EXCEEDED, _text(r"input( length)? exceeds (the |maximum )?context length")),
    Rule("ollama:prompt-too-long", CONTEXT_WINDOW_EXCEEDED, _text(r"prompt too long; exceeded (max )?context length")),
    Rule("llamacpp:exceeds-context-size", CONTEXT_WINDOW_EXCEEDED, _text(r"exceeds the available context size")),
    Rule("gemini:input-token-count", CONTEXT_WINDOW_EXCEEDED, _text(r"input token count .*exceeds the maximum number of tokens")),
    Rule("bedrock:input-too-long", CONTEXT_WINDOW_EXCEEDED, _text(r"input is too long for requested model")),
    Rule("gateway:entity-too-large", CONTEXT_WINDOW_EXCEEDED, _text(r"request entity too large")),
    Rule("text:context-length-exceeded", CONTEXT_WINDOW_EXCEEDED, _text(r"context[_ ]length[_ ]exceeded")),
    # what is left goes by status, then by in-band error type
    Rule("http:auth", AUTH_FAILED, _status(401, 403)),
    Rule("code:auth", AUTH_FAILED, _code_or_type("authentication_error", "permission_error", "invalid_api_key", "unauthenticated")),
    Rule("http:408", TIMEOUT, _status(408)),
    Rule("http:5xx", SERVER_ERROR, _status_range(500, 599)),
    Rule("http:4xx", BAD_REQUEST, _status_range(400, 499)),
    Rule("code:bad-request", BAD_REQUEST, _code_or_type("invalid_request_error", "badrequesterror", "invalid_argument")),
    Rule("default", SERVER_ERROR, lambda f: True),  # an unexplained failure: assume the server
)

_NOT_RETRYABLE_RATE_LIMITS = frozenset({"insufficient_quota"})


def _classify(provider: str, facts: ErrorFacts, *, inband: bool, retry_after: float | None) -> ProviderError:
    rule = next(r for r in RULES if r.test(facts))
    retryable = None
    if rule.code == RATE_LIMITED and (facts.code in _NOT_RETRYABLE_RATE_LIMITS or facts.type in _NOT_RETRYABLE_RATE_LIMITS):
        retryable = False  # a spent quota does not come back by waiting
    return ProviderError(
        rule.code,
        facts.message,
        provider=provider,
        status=facts.status,
        original=facts.original,
        retryable=retryable,
        retry_after=retry_after,
        inband=inband,
        rule=rule.name,
    )


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date)."""
    if not headers:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        if "retry-after-ms" in lower:
            return max(0.0, float(lower["retry-after-ms"]) / 1000.0)
        value = lower.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            return max(0.0, (parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds())
    except (TypeError, ValueError):
        return None


def classify_http_error(
    provider: str,
    status: int,
    body: bytes | str | Mapping[str, Any] | list | None,
    headers: Mapping[str, str] | None = None,
) -> ProviderError:
    """Normalize a non-2xx HTTP response (status, body as received, optional headers)."""
    return _classify(provider, error_facts(status, body), inband=False, retry_after=_retry_after(headers))


def classify_inband(provider: str, payload: Mapping[str, Any]) -> ProviderError | None:
    """The error carried inside a 200 body or a stream chunk, or ``None`` for a normal payload.

    An error object (``"error"`` key, Anthropic ``"type": "error"``, vLLM ``"object": "error"``) is
    classified like an HTTP error using the status embedded in it. Otherwise a stop reason naming the
    context window is an overflow and ``finish_reason == "error"`` is a server error;
    ``finish_reason == "length"`` (output hit ``max_tokens``) is a normal completion.
    """
    if not isinstance(payload, Mapping):
        return None
    if payload.get("error") or payload.get("type") == "error" or payload.get("object") == "error":
        return _classify(provider, error_facts(None, payload), inband=True, retry_after=None)
    reasons: list[str] = []
    for choice in payload.get("choices") or ():
        if isinstance(choice, Mapping):
            if choice.get("error"):
                return _classify(provider, error_facts(None, {"error": choice["error"]}), inband=True, retry_after=None)
            if choice.get("finish_reason"):
                reasons.append(str(choice["finish_reason"]))
    for key in ("stop_reason", "done_reason"):  # Anthropic / Ollama native passed through a proxy
        if isinstance(payload.get(key), str):
            reasons.append(payload[key])
    for reason in reasons:
        if reason.lower() in OVERFLOW_FINISH_REASONS:
            return ProviderError(
                CONTEXT_WINDOW_EXCEEDED,
                f"finish_reason={reason}",
                provider=provider,
                original=dict(payload),
                inband=True,
                rule=f"finish:{reason.lower()}",
            )
        if reason.lower() == "error":
            return ProviderError(
                SERVER_ERROR, "finish_reason=error", provider=provider, original=dict(payload), inband=True, rule="finish:error"
            )
    return None
