"""Budget helpers shared by every preview: token-bounded slicing, the one budget error.

Pure functions, no I/O. ``count_tokens`` is normally ``engine.meter.default_meter().count_text``.
"""

from __future__ import annotations

import re
from typing import Callable

from engine.errors import EngineError

CountTokens = Callable[[str], int]

ELLIPSIS = "…"
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class PreviewBudgetError(EngineError, ValueError):
    """The token budget cannot even hold the replacement header: a configuration error."""

    code = "preview_budget"

    def __init__(self, budget_tokens: int, needed_tokens: int) -> None:
        super().__init__(
            f"preview budget of {budget_tokens} tokens cannot hold the replacement header "
            f"(needs at least {needed_tokens})"
        )
        self.budget_tokens = budget_tokens
        self.needed_tokens = needed_tokens


def fit(text: str, max_tokens: int, count: CountTokens, *, from_end: bool = False) -> str:
    """The longest prefix (or suffix) of ``text`` with at most ``max_tokens``: galloping, then bisection."""
    if max_tokens <= 0 or not text:
        return ""
    n = len(text)

    def piece(k: int) -> str:
        return text[n - k :] if from_end else text[:k]

    lo, hi = 0, min(n, max_tokens * 4)
    while count(piece(hi)) <= max_tokens:
        if hi == n:
            return text
        lo, hi = hi, min(n, hi * 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count(piece(mid)) <= max_tokens:
            lo = mid
        else:
            hi = mid
    return piece(lo)


def snap_end(piece: str) -> str:
    """Cut ``piece`` after its last newline when that loses at most a quarter of it."""
    cut = piece.rfind("\n")
    return piece[: cut + 1] if cut >= len(piece) * 3 // 4 else piece


def snap_start(piece: str) -> str:
    """Drop ``piece`` up to its first newline when that loses at most a quarter of it."""
    cut = piece.find("\n")
    return piece[cut + 1 :] if 0 <= cut < len(piece) // 4 else piece


def truncate_tokens(text: str, max_tokens: int, count: CountTokens) -> str:
    """``text`` if it fits ``max_tokens``, else its longest fitting prefix ending in an ellipsis."""
    if probably_fits(text, max_tokens, count):
        return text
    return fit(text, max_tokens - 1, count).rstrip() + ELLIPSIS if max_tokens > 1 else ""


def probably_fits(content: str, budget_tokens: int, count: CountTokens) -> bool:
    # no token of the packaged encodings is longer than 128 bytes, so a longer text cannot fit
    return len(content) <= budget_tokens * 128 and count(content) <= budget_tokens
