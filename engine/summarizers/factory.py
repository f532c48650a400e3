"""The summarizer a process uses, chosen from its environment."""

from __future__ import annotations

import math
import os
from typing import Mapping

from .extractive import ExtractiveSummarizer
from .openai_compat import OpenAICompatSummarizer
from .protocol import Summarizer, SummarizerError

__all__ = ["ENV_API_KEY", "ENV_BASE_URL", "ENV_MODEL", "ENV_TIMEOUT", "make_summarizer_from_env"]

ENV_BASE_URL = "COMPACTION_SUMMARY_BASE_URL"
ENV_MODEL = "COMPACTION_SUMMARY_MODEL"
ENV_API_KEY = "COMPACTION_SUMMARY_API_KEY"
ENV_TIMEOUT = "COMPACTION_SUMMARY_TIMEOUT"


def make_summarizer_from_env(env: Mapping[str, str] = os.environ) -> Summarizer:
    """The OpenAI-compatible summarizer when ``COMPACTION_SUMMARY_BASE_URL`` and
    ``COMPACTION_SUMMARY_MODEL`` are set (API key and timeout optional), else the extractive one."""
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
