"""Budget helpers shared by every preview: token-bounded slicing, the one budget error.

Pure functions, no I/O. ``count_tokens`` is normally ``engine.core.meter.default_meter().count_text``.
"""

from __future__ import annotations

import bisect
import re
from typing import Callable

from engine.core.errors import EngineError

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


class SpaceSplitCounter:
    """A token counter (``count``, called as it is) known to add up at a space: for texts ``a`` and
    ``b`` where ``a`` ends with a printable ASCII character other than a space (``!`` to ``~``) and
    ``b`` starts with a space, ``count(a + b) == count(a) + count(b)``.

    True of a byte-pair encoding's ordinary count (``TokenMeter.count_text``: cl100k_base and
    o200k_base): each splits the text into pieces with a regular expression (no look-behind) and
    encodes each piece alone, and no piece of either holds a non-space character followed by a
    space, so such a point ends a piece in ``a + b``, in ``a`` and in every longer prefix. Who wraps
    a counter vouches for it (:func:`engine.compaction.pruning.prune_surface` wraps the meter's only).
    :func:`fit` then counts a long text's prefixes (or suffixes) once in pieces and each probe of its
    bisection as a known piece plus a short rest, not the whole prefix again: the same answers.
    Equal (and hashed) as the counter it wraps, so a memo keyed by it is not split.

    ``piece``: the same count without a cache (``TokenMeter.count_piece``), for the pieces and
    probes of :func:`fit`: each is counted once and never asked again, so keeping it would only
    push the counts worth keeping out of the cache (default: ``count``)."""

    __slots__ = ("count", "piece")

    def __init__(self, count: CountTokens, piece: CountTokens | None = None) -> None:
        self.count = count
        self.piece = piece or count

    def __call__(self, text: str) -> int:
        return self.count(text)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SpaceSplitCounter) and other.count == self.count

    def __hash__(self) -> int:
        return hash(self.count)


#: characters between two split points of :class:`_Pieces` (at least): a probe counts at most about this
#: many characters beyond a known point
_PIECE_CHARS = 192


class _Pieces:
    """``count(text[:k])`` (or ``count(text[n - k:])`` ``from_end``) for any ``k``, exactly, from the
    counts of pieces between split points (a space after a printable ASCII character, see
    :class:`SpaceSplitCounter`) about :data:`_PIECE_CHARS` apart, found and counted as far as asked."""

    __slots__ = ("text", "count", "from_end", "points", "totals", "done")

    def __init__(self, text: str, count: CountTokens, from_end: bool) -> None:
        self.text, self.count, self.from_end = text, count, from_end
        # prefix: split points ascending from 0, totals[i] = count(text[:points[i]]);
        # suffix: split points descending from len(text), totals[i] = count(text[points[i]:])
        self.points = [len(text) if from_end else 0]
        self.totals = [0]
        self.done = False  # no split point left beyond the last one

    def _split_after(self, at: int) -> int:
        """The first split point at ``at`` or after (``-1``: none)."""
        text = self.text
        j = text.find(" ", max(1, at))
        while j > 0 and not ("!" <= text[j - 1] <= "~"):
            j = text.find(" ", j + 1)
        return j

    def _split_before(self, at: int) -> int:
        """The last split point at ``at`` or before (``-1``: none)."""
        text = self.text
        j = text.rfind(" ", 0, at + 1)
        while j > 0 and not ("!" <= text[j - 1] <= "~"):
            j = text.rfind(" ", 0, j)
        return j if j > 0 else -1

    def __call__(self, k: int) -> int:
        text, points, totals = self.text, self.points, self.totals
        n = len(text)
        if not self.from_end:
            while not self.done and points[-1] + _PIECE_CHARS < k:
                j = self._split_after(points[-1] + _PIECE_CHARS)
                if j < 0 or j > k:
                    self.done = j < 0
                    break
                totals.append(totals[-1] + self.count(text[points[-1] : j]))
                points.append(j)
            i = bisect.bisect_right(points, k) - 1
            return totals[i] + self.count(text[points[i] : k])
        start = n - k
        while not self.done and points[-1] - _PIECE_CHARS > start:
            j = self._split_before(points[-1] - _PIECE_CHARS)
            if j < 0 or j < start:
                self.done = j < 0
                break
            totals.append(totals[-1] + self.count(text[j : points[-1]]))
            points.append(j)
        # points descend: the smallest split point at start or after
        lo, hi = 0, len(points)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if points[mid] >= start:
                lo = mid
            else:
                hi = mid
        return totals[lo] + self.count(text[start : points[lo]])


def fit(text: str, max_tokens: int, count: CountTokens, *, from_end: bool = False) -> str:
    """The longest prefix (or suffix) of ``text`` with at most ``max_tokens``: galloping, then bisection.

    With a :class:`SpaceSplitCounter` each probe is counted as a known piece plus a short rest (the
    same counts, so the same answer)."""
    if max_tokens <= 0 or not text:
        return ""
    n = len(text)

    def piece(k: int) -> str:
        return text[n - k :] if from_end else text[:k]

    size: Callable[[int], int]
    if isinstance(count, SpaceSplitCounter) and n > 2 * _PIECE_CHARS:
        size = _Pieces(text, count.piece, from_end)
    elif isinstance(count, SpaceSplitCounter):  # a short text: each probe counted whole, uncached
        piece_count = count.piece

        def size(k: int) -> int:
            return piece_count(piece(k))
    else:
        def size(k: int) -> int:
            return count(piece(k))

    lo, hi = 0, min(n, max_tokens * 4)
    while size(hi) <= max_tokens:
        if hi == n:
            return text
        lo, hi = hi, min(n, hi * 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if size(mid) <= max_tokens:
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
