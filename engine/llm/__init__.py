"""Talking to OpenAI-compatible model endpoints: the one client, its response parsing, the error
classifier and the retry policy. Used by the agent harness and by the summarizer alike.

Layering: this package imports only the pure core (``engine.core.errors``, ``engine.core.messages``) and httpx;
never the store, the summarizers, the harness, the compactor or the service.
"""

from .client import ChatClient
from .errors import (
    AUTH_FAILED,
    BAD_REQUEST,
    CANCELLED,
    CONNECTION_ERROR,
    CONTEXT_WINDOW_EXCEEDED,
    MALFORMED_RESPONSE,
    RATE_LIMITED,
    SERVER_ERROR,
    TIMEOUT,
    ProviderError,
    classify_http_error,
    classify_inband,
    is_context_overflow,
)
from .parse import Completion, int_or_none
from .retry import NO_RETRY, RetryPolicy

__all__ = [
    "AUTH_FAILED",
    "BAD_REQUEST",
    "CANCELLED",
    "CONNECTION_ERROR",
    "CONTEXT_WINDOW_EXCEEDED",
    "MALFORMED_RESPONSE",
    "NO_RETRY",
    "RATE_LIMITED",
    "SERVER_ERROR",
    "TIMEOUT",
    "ChatClient",
    "Completion",
    "ProviderError",
    "RetryPolicy",
    "classify_http_error",
    "classify_inband",
    "int_or_none",
    "is_context_overflow",
]
