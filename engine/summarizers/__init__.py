"""Summarizers behind one small synchronous protocol: OpenAI-compatible (httpx) and offline extractive."""

from .base import (
    Summarizer,
    SummarizerError,
    SummaryRequest,
    SummaryResult,
    contains_verbatim,
    make_summarizer_from_env,
    validate_summary,
)
from .extractive import ExtractiveSummarizer
from .openai_compat import OpenAICompatSummarizer

__all__ = [
    "ExtractiveSummarizer",
    "OpenAICompatSummarizer",
    "Summarizer",
    "SummarizerError",
    "SummaryRequest",
    "SummaryResult",
    "contains_verbatim",
    "make_summarizer_from_env",
    "validate_summary",
]
