"""Summarizers behind one small synchronous protocol: OpenAI-compatible (through :mod:`engine.llm`)
and offline extractive. :func:`make_summarizer` picks one from the user's settings (environment variables overriding).

Module order (no cycles): :mod:`.protocol` < :mod:`.extractive` < :mod:`.openai_compat` (it appends
the extractive identifier index to a model's summary) < :mod:`.factory`."""

from .extractive import ExtractiveSummarizer
from .factory import ConnectionReport, check_connection, make_summarizer, make_summarizer_from_env, provenance
from .openai_compat import OpenAICompatSummarizer
from .protocol import (
    Summarizer,
    SummarizerError,
    SummaryRequest,
    SummaryResult,
    contains_verbatim,
    validate_summary,
)

__all__ = [
    "ExtractiveSummarizer",
    "OpenAICompatSummarizer",
    "Summarizer",
    "SummarizerError",
    "SummaryRequest",
    "SummaryResult",
    "ConnectionReport",
    "check_connection",
    "contains_verbatim",
    "make_summarizer",
    "make_summarizer_from_env",
    "provenance",
    "validate_summary",
]
