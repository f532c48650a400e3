"""Provider error normalization, kept importable here for the harness: the classifier lives in
:mod:`engine.llm.errors` (shared with the summarizer). Import from there in new code."""

from engine.llm.errors import *  # noqa: F401,F403
from engine.llm.errors import __all__  # noqa: F401
