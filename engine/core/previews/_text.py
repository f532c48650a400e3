"""Budget helpers shared by every preview: token-bounded slicing, the one budget error.

Pure functions, no I/O. ``count_tokens`` is normally ``engine.core.meter.default_meter().count_text``.
"""

from __future__ import annotations

import bisect
import re
from typing import Callable, Sequence

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
    ``b`` starts with a space, ``count(a + b) == count(a) + count(b)``, and the tokens of ``a + b``
    are those of ``a`` then those of ``b``.

    True of a byte-pair encoding's ordinary count (``TokenMeter.count_text``: cl100k_base and
    o200k_base): each splits the text into pieces with a regular expression (no look-behind) and
    encodes each piece alone, and no piece of either holds a non-space character followed by a
    space, so such a point ends a piece in ``a + b``, in ``a`` and in every longer prefix. Who wraps
    a counter vouches for it (:func:`engine.compaction.pruning.prune_surface` wraps the meter's only).
    :func:`fit` then encodes a long text once, in chunks between such points (:class:`_Ruler`), and
    counts each probe of its bisection as a known count plus a short rest, not the whole prefix
    again; a text joined from parts of known counts is counted from them (:func:`count_joined`):
    the same answers. Equal (and hashed) as the counter it wraps, so a memo keyed by it is not split.

    ``piece``: the same count without a cache (``TokenMeter.count_piece``), for the pieces and
    probes of :func:`fit`: each is counted once and never asked again, so keeping it would only
    push the counts worth keeping out of the cache (default: ``count``). ``ends``: where each token
    of a text ends (``TokenMeter.token_ends``; ``None`` for a text it cannot say it of): the count at
    every split point of a chunk from its one encoding; without it a chunk is a count of its own,
    about :data:`_PIECE_CHARS` characters long. ``remember``: hands a count :func:`count_joined`
    made to ``count``'s cache (``TokenMeter.remember_text``), so asking ``count`` for that text
    later encodes nothing."""

    __slots__ = ("count", "piece", "ends", "remember")

    def __init__(self, count: CountTokens, piece: CountTokens | None = None, *,
                 ends: Callable[[str], list[int] | None] | None = None, remember: Callable[[str, int], None] | None = None) -> None:
        self.count = count
        self.piece = piece or count
        self.ends = ends
        self.remember = remember

    def __call__(self, text: str) -> int:
        return self.count(text)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SpaceSplitCounter) and other.count == self.count

    def __hash__(self) -> int:
        return hash(self.count)


#: characters of a chunk of :class:`_Ruler` whose token ends are not known (at least): a probe
#: counts at most about this many characters beyond a known count
_PIECE_CHARS = 192


def _split_after(text: str, at: int) -> int:
    """The first split point of ``text`` (a space after a printable ASCII character, see
    :class:`SpaceSplitCounter`) at ``at`` or after (``-1``: none)."""
    j = text.find(" ", max(1, at))
    while j > 0 and not ("!" <= text[j - 1] <= "~"):
        j = text.find(" ", j + 1)
    return j


def _split_before(text: str, at: int) -> int:
    """The last split point of ``text`` at ``at`` or before (``-1``: none)."""
    j = text.rfind(" ", 0, at + 1) if at >= 0 else -1
    while j > 0 and not ("!" <= text[j - 1] <= "~"):
        j = text.rfind(" ", 0, j)
    return j if j > 0 else -1


#: a part of a text whose count is known inside: (start, stop, count of ``part[start:stop]``), both
#: split points of the part (a space after a printable ASCII character, so ``0 < start``, and
#: ``stop < len(part)``)
Span = tuple[int, int, int]


class _Ruler:
    """Exact counts of ``text[:k]`` (or ``text[len(text) - k:]``, ``from_end``) for any ``k``, and of
    spans inside it, for a :class:`SpaceSplitCounter`: ``text`` is encoded once, as far as asked, in
    chunks between split points, growing from its start (its end). The count of the text up to
    (from) a split point inside a chunk is read off where the chunk's tokens end (``ends``; the
    tokens of a text are its chunks' tokens, see :class:`SpaceSplitCounter`), so a probe encodes
    only the characters between the split point before it (after it) and its end (start). A chunk
    whose token ends are not known is about :data:`_PIECE_CHARS` characters long and counted whole:
    a probe inside it counts from the chunk's own end.

    :meth:`within` (the probes of :func:`fit`) encodes no further than the limit needs: the count
    of a text is at least that of its part up to (from) a split point, so once the chunks count
    more than the limit, no longer probe fits; and the rest of a probe after a known count costs
    at least one token and at most one per byte, so a probe is encoded only when that leaves its
    answer open."""

    __slots__ = ("text", "piece", "ends_of", "from_end", "bounds", "totals", "ends")

    def __init__(self, text: str, count: SpaceSplitCounter, from_end: bool) -> None:
        self.text, self.piece, self.ends_of, self.from_end = text, count.piece, count.ends, from_end
        #: the chunks' bounds, ascending: split points, and 0 or len(text) where the chunks start
        self.bounds = [len(text) if from_end else 0]
        #: at each bound: the count of the text before it (from_end: from it on)
        self.totals = [0]
        #: chunk i (bounds[i] to bounds[i + 1]): where its tokens end, from its start (None: unknown)
        self.ends: list[list[int] | None] = []

    def _reach(self, left: int, known: int, at: int) -> int:
        """About how many characters ``left`` more tokens take, from ``known`` tokens in ``at`` characters."""
        return (left * at // known if known > 0 else left * 4) + 8

    def _grow(self, to: int, limit: int | None = None) -> None:
        """Encode the chunks up to the split point ``to`` (from_end: down to it); with a ``limit``,
        stop once they count more (a chunk then reaches about as far as the limit)."""
        text, bounds, totals, ends = self.text, self.bounds, self.totals, self.ends
        if not self.from_end:
            while bounds[-1] < to:
                start, total = bounds[-1], totals[-1]
                if limit is not None and total > limit:
                    return
                stop = to
                if limit is not None:
                    near = _split_after(text, start + self._reach(limit - total + 1, total, start))
                    stop = near if 0 < near < to else to
                found = self.ends_of(text[start:stop]) if self.ends_of else None
                if found is None:
                    near = _split_after(text, start + _PIECE_CHARS)
                    stop = near if 0 < near < stop else stop
                    totals.append(total + self.piece(text[start:stop]))
                else:
                    totals.append(total + len(found))
                bounds.append(stop)
                ends.append(found)
            return
        n = len(text)
        while bounds[0] > to:
            stop, total = bounds[0], totals[0]
            if limit is not None and total > limit:
                return
            start = to
            if limit is not None:
                near = stop - self._reach(limit - total + 1, total, n - stop)
                start = max(to, _split_before(text, near)) if near > to else to
            found = self.ends_of(text[start:stop]) if self.ends_of else None
            if found is None:
                near = _split_before(text, stop - _PIECE_CHARS) if stop - _PIECE_CHARS > start else -1
                start = near if near > start else start
                totals.insert(0, total + self.piece(text[start:stop]))
            else:
                totals.insert(0, total + len(found))
            bounds.insert(0, start)
            ends.insert(0, found)

    def _at(self, point: int) -> tuple[int, int]:
        """(a bound or split point at or before ``point`` (from_end: at or after it), the count of
        the text before it (from it on)), ``point`` itself when its chunk's token ends are known.
        ``point`` is a split point the chunks cover."""
        bounds, totals = self.bounds, self.totals
        i = bisect.bisect_right(bounds, point) - 1
        if bounds[i] == point:
            return point, totals[i]
        ends = self.ends[i]
        if not self.from_end:
            return (bounds[i], totals[i]) if ends is None else (point, totals[i] + bisect.bisect_right(ends, point - bounds[i]))
        if ends is None:
            return bounds[i + 1], totals[i + 1]
        return point, totals[i + 1] + len(ends) - bisect.bisect_right(ends, point - bounds[i])

    def _known(self, k: int, limit: int | None) -> tuple[str, int] | None:
        """(the part of the probe ``k`` after (from_end: before) the split point before (after) it
        whose count the chunks give, that count), the chunks grown as far as it takes; ``None`` when
        they count more than ``limit`` before reaching that point. (One function, the lookups of
        :meth:`_at` inline: :func:`fit` probes ~10 times per slice.)"""
        text, bounds = self.text, self.bounds
        if not self.from_end:
            split = text.rfind(" ", 0, k + 1)
            while split > 0 and not ("!" <= text[split - 1] <= "~"):
                split = text.rfind(" ", 0, split)
            if split <= 0:
                return text[:k], 0
            if bounds[-1] < split:
                self._grow(split, limit)
                if bounds[-1] < split:
                    return None
            i = bisect.bisect_right(bounds, split) - 1
            at, total = bounds[i], self.totals[i]
            if at != split:
                ends = self.ends[i]
                if ends is not None:
                    total += bisect.bisect_right(ends, split - at)
                    at = split
            return text[at:k], total
        start = len(text) - k
        split = text.find(" ", max(1, start))
        while split > 0 and not ("!" <= text[split - 1] <= "~"):
            split = text.find(" ", split + 1)
        if split < 0:
            return text[start:], 0
        if bounds[0] > split:
            self._grow(split, limit)
            if bounds[0] > split:
                return None
        i = bisect.bisect_right(bounds, split) - 1
        at, total = bounds[i], self.totals[i]
        if at != split:
            ends = self.ends[i]
            at, total = bounds[i + 1], self.totals[i + 1]
            if ends is not None:
                total += len(ends) - bisect.bisect_right(ends, split - bounds[i])
                at = split
        return text[start:at], total

    def __call__(self, k: int) -> int:
        """The count of the first (from_end: last) ``k`` characters."""
        rest, total = self._known(k, None)  # type: ignore[misc]  # None only past a limit
        return total + self.piece(rest) if rest else total

    def within(self, k: int, limit: int) -> bool:
        """Whether the first (from_end: last) ``k`` characters count at most ``limit``."""
        known = self._known(k, limit)
        if known is None:
            return False
        rest, total = known
        if not rest:
            return total <= limit
        if total >= limit:  # the rest is at least one token
            return False
        if total + len(rest) * (1 if rest.isascii() else 4) <= limit:  # a token is at least one byte
            return True
        return total + self.piece(rest) <= limit

    def span(self, start: int, stop: int) -> Span | None:
        """The :data:`Span` of ``text[start:stop]`` whose count the chunks give: between its first
        and last split points (``None`` when it has none, or one lies in a chunk whose token ends
        are not known)."""
        text = self.text
        first = _split_after(text, start + 1)
        if first < 0 or first >= stop:
            return None
        last = _split_before(text, stop - 1)
        self._grow(first if self.from_end else last)
        at_first, first_total = self._at(first)
        at_last, last_total = self._at(last)
        if at_first != first or at_last != last:
            return None
        return first - start, last - start, first_total - last_total if self.from_end else last_total - first_total


def fitted(text: str, max_tokens: int, count: CountTokens, *, from_end: bool = False) -> tuple[int, _Ruler | None]:
    """How many characters :func:`fit` keeps of ``text``, and the :class:`_Ruler` that counted them
    (with a :class:`SpaceSplitCounter`; ``None`` otherwise): counts of the kept part's spans are
    then known without encoding it again."""
    if max_tokens <= 0 or not text:
        return 0, None
    n = len(text)
    ruler = _Ruler(text, count, from_end) if isinstance(count, SpaceSplitCounter) else None
    fits: Callable[[int], bool]
    if ruler is not None:
        def fits(k: int) -> bool:
            return ruler.within(k, max_tokens)
    else:
        def fits(k: int) -> bool:
            return count(text[n - k :] if from_end else text[:k]) <= max_tokens

    lo, hi = 0, min(n, max_tokens * 4)
    while fits(hi):
        if hi == n:
            return n, ruler
        lo, hi = hi, min(n, hi * 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, ruler


def fit(text: str, max_tokens: int, count: CountTokens, *, from_end: bool = False) -> str:
    """The longest prefix (or suffix) of ``text`` with at most ``max_tokens``: galloping, then bisection.

    With a :class:`SpaceSplitCounter` each probe is counted as a known count plus a short rest
    (:class:`_Ruler`: the same counts, so the same answer)."""
    k, _ = fitted(text, max_tokens, count, from_end=from_end)
    return text[len(text) - k :] if from_end else text[:k]


def count_joined(parts: Sequence[tuple[str, Span | None]], count: CountTokens) -> tuple[str, int]:
    """``"\n".join`` of the parts' texts and its count. With a :class:`SpaceSplitCounter`, the span
    of a part whose count is known is not encoded again (a span's ends are split points of the
    joined text too, so its count adds up); only the rest is, in the pieces between the spans. The
    count is handed to the counter's cache (``remember``): the caller and whoever counts the same
    text next get it without encoding it."""
    text = "\n".join(part for part, _ in parts)
    if not isinstance(count, SpaceSplitCounter):
        return text, count(text)
    total = 0
    rest: list[str] = []
    for i, (part, span) in enumerate(parts):
        if i:
            rest.append("\n")
        if span is None:
            rest.append(part)
            continue
        start, stop, inner = span
        rest.append(part[:start])
        total += count.piece("".join(rest)) + inner
        rest = [part[stop:]]
    total += count.piece("".join(rest))
    if count.remember is not None:
        count.remember(text, total)
    return text, total


def known_span(text: str, total: int, count: CountTokens) -> Span | None:
    """The :data:`Span` of ``text`` between its first and last split points, its count taken from
    ``total`` (``count(text)``, known) less the pieces outside it; ``None`` without a
    :class:`SpaceSplitCounter` or a split point."""
    if not isinstance(count, SpaceSplitCounter):
        return None
    first = _split_after(text, 1)
    if first < 0:
        return None
    last = _split_before(text, len(text) - 1)
    return first, last, total - count.piece(text[:first]) - count.piece(text[last:])


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
