"""The names ``engine.summarizers.base`` has always offered, gathered from where they live now:
the protocol, request/result types and validation in :mod:`.protocol`, the environment factory in
:mod:`.factory`. Implementations import :mod:`.protocol`, never this module, so there is no cycle.
New code imports :mod:`.protocol` (compactor-side types) or :mod:`.factory` (choosing a summarizer)."""

from .factory import ENV_API_KEY, ENV_BASE_URL, ENV_MODEL, ENV_TIMEOUT, make_summarizer_from_env
from .protocol import (
    REJECT_EMPTY,
    REJECT_MISSING_REQUEST,
    REJECT_NOT_SMALLER,
    Summarizer,
    SummarizerError,
    SummaryRequest,
    SummaryResult,
    contains_verbatim,
    validate_summary,
)

__all__ = [
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MODEL",
    "ENV_TIMEOUT",
    "REJECT_EMPTY",
    "REJECT_MISSING_REQUEST",
    "REJECT_NOT_SMALLER",
    "Summarizer",
    "SummarizerError",
    "SummaryRequest",
    "SummaryResult",
    "contains_verbatim",
    "make_summarizer_from_env",
    "validate_summary",
]
