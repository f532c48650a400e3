"""Gap and segment arithmetic of the timeline, as pure functions over ids and top-level rows.

Loaded messages form *segments* (contiguous runs of the thread); the unloaded stretch before, between
or after them is a *gap* (:class:`Span`). A keyset page proves that no message lies between its
bounds and its rows; :func:`split_runs` cuts a page at the messages already loaded, :func:`place`
finds the gap a run fills and which of its sides it closes, :func:`regroup` chooses the top-level
rows at the gap's edges that are rebuilt with it, and :func:`evict_before` / :func:`evict_after`
choose what an eviction keeps.

Bounds follow :class:`~inspector_app.logic.timeline.pages.TimelinePage`: ``None`` is the thread's
start (low side) or end (high side), :data:`~inspector_app.logic.timeline.pages.UNKNOWN` a side the
read did not establish.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Container, Protocol, Sequence

from .pages import UNKNOWN
from .tree import MARKER_ORPHAN, RUNNING_KINDS


class Row(Protocol):
    """What the arithmetic reads of a top-level row (a :class:`~inspector_app.logic.timeline.tree.Node`)."""

    kind: str
    unit_kind: str
    first_id: int | None
    last_id: int | None
    markers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Span:
    """An unloaded stretch: the messages strictly between ``above`` (the last loaded id before it;
    ``None``: the thread's start) and ``below`` (the first loaded id after it; ``None``: the end)."""

    above: int | None
    below: int | None

    def holds(self, message_id: int) -> bool:
        return (self.above is None or self.above < message_id) and (self.below is None or message_id < self.below)


@dataclass(frozen=True, slots=True)
class Run:
    """``page[start:stop]``: messages not loaded yet, with the keyset bounds around them."""

    low: Any
    start: int
    stop: int
    high: Any


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a run goes: into gap number ``gap`` (``None``: after the loaded end, or nothing is
    loaded), between the loaded ids ``above`` and ``below``; which sides it closes."""

    gap: int | None
    above: int | None
    below: int | None
    attach_top: bool
    attach_bottom: bool


@dataclass(frozen=True, slots=True)
class Regroup:
    """The top-level rows a splice rebuilds: ``top[start:at]`` (units above that the run continues),
    the gap row ``top[at:tail]`` (empty when there is none) and ``top[tail:stop]`` (units below);
    ``running``: the rebuilt stretch ends where the running turn may be."""

    start: int
    at: int
    tail: int
    stop: int
    running: bool


def find_gap(gaps: Sequence[Span], message_id: int) -> int | None:
    """The index of the gap that could hold ``message_id``."""
    return next((i for i, g in enumerate(gaps) if g.holds(message_id)), None)


def split_runs(ids: Sequence[int], loaded: Container[int], low: Any, high: Any) -> list[Run]:
    """Cut a page (ascending ``ids`` with bounds ``low``/``high``) at the ids already loaded: each
    loaded id bounds the run before it and starts the next. Empty runs are kept (they may prove
    that a gap holds nothing)."""
    runs: list[Run] = []
    start = 0
    for i, message_id in enumerate(ids):
        if message_id in loaded:
            runs.append(Run(low, start, i, message_id))
            low, start = message_id, i + 1
    runs.append(Run(low, start, len(ids), high))
    return runs


def attaches_above(low: Any, above: int | None) -> bool:
    """A run with low bound ``low`` continues the segment that ends at ``above``."""
    if low is UNKNOWN:
        return False
    if above is None:
        return low is None
    return low is not None and low <= above


def attaches_below(high: Any, below: int | None) -> bool:
    """A run with high bound ``high`` reaches the segment that starts at ``below``."""
    if high is UNKNOWN:
        return False
    if below is None:
        return high is None
    return high is not None and high >= below


def place(gaps: Sequence[Span], newest: int | None, ids: tuple[int, int] | None, low: Any, high: Any) -> Placement | None:
    """Where the run with (first, last) ``ids`` (``None``: an empty run) and bounds ``low``/``high``
    goes, given the gaps and the newest loaded id (``None``: nothing loaded); ``None`` when it adds
    nothing: it lies inside a loaded segment, the thread changed under the read (the run overruns
    its gap), or an empty run proves nothing."""
    if ids is not None:
        first, last = ids
        index = find_gap(gaps, first)
        if index is not None and gaps[index].below is not None and last >= gaps[index].below:  # type: ignore[operator]
            return None
        if index is None and newest is not None and first < newest:
            return None
    else:
        if low is UNKNOWN:
            return None
        index = next((i for i, g in enumerate(gaps) if g.above == low), None)
        if index is None:
            return None
    above, below = (gaps[index].above, gaps[index].below) if index is not None else (newest, None)
    top, bottom = attaches_above(low, above), attaches_below(high, below)
    if ids is None and not (top and bottom):
        return None
    return Placement(index, above, below, top, bottom)


def regroup(top: Sequence[Row], at: int, has_gap: bool, placement: Placement, ids: tuple[int, int] | None, boundary: int | None) -> Regroup:
    """The rows rebuilt when the run with (first, last) ``ids`` fills the gap at row ``at``
    (``has_gap`` False: it is appended at ``at == len(top)``).

    Above, a run that continues its segment takes the units of the turn it continues (back over
    the rounds of a running turn to the unit that opens it). Below, a run that reaches the next
    segment takes that segment's first unit (and the boundary row right after it); when that unit
    is a round of a running turn, the rounds after it up to the last one with an orphan come too
    (a late result answers a call of an earlier round). Nothing is regrouped across the boundary row;
    a unit right after the boundary is rebuilt when the run closes the gap at the boundary (it is no
    longer cut). The rows of a source's own compactions go with the unit before them (rebuilt with
    it, never without it)."""

    def side(i: int | None) -> bool:
        return boundary is None or i is None or i <= boundary

    start = at
    if placement.attach_top and placement.above is not None:
        probe = ids[0] if ids is not None else placement.above  # an empty run: the segment above ends the thread or meets the one below
        while True:
            prev = start - 1
            while prev >= 0 and top[prev].kind == "source":
                prev -= 1  # a source's compaction row goes with the unit before it
            if prev < 0 or top[prev].kind != "unit" or side(top[prev].last_id) != side(probe):
                break
            start = prev
            if top[start].unit_kind != "round":
                break  # a finished turn, or the user message that opens the running turn
    tail = stop = at + 1 if has_gap else at
    running = placement.attach_bottom and placement.below is None
    if placement.attach_bottom and placement.below is not None and stop < len(top) and top[stop].kind == "unit":
        edge = top[stop]
        seam = ids[1] if ids is not None else placement.above  # the last id before the edge
        if side(edge.first_id) == side(seam) or seam == boundary:  # at the boundary: rebuilt as after one
            running = edge.unit_kind in RUNNING_KINDS
            stop = with_sources(top, stop + 1)
            if edge.last_id == boundary and stop < len(top) and top[stop].kind == "boundary":
                stop += 1
            elif edge.unit_kind == "round":
                stop = with_sources(top, _late_results_end(top, stop))
    return Regroup(start, at, tail, stop, running)


def with_sources(top: Sequence[Row], stop: int) -> int:
    """Past the rows of source compactions right after ``top[stop - 1]``: they belong to the unit
    before them and are rebuilt with it."""
    while stop < len(top) and top[stop].kind == "source":
        stop += 1
    return stop


def _late_results_end(top: Sequence[Row], stop: int) -> int:
    """Past the rounds of a running turn that follow ``top[stop - 1]``, up to the last one marked
    orphan: its result may answer a call of the run above (a late result, not an orphan)."""
    end = stop
    while end < len(top) and top[end].kind in ("unit", "source") and (top[end].kind == "source" or top[end].unit_kind == "round"):
        end += 1
        if MARKER_ORPHAN in top[end - 1].markers:
            stop = end
    return stop


def evict_before(top: Sequence[Row], row: int, boundary: int | None) -> tuple[int, int] | None:
    """Dropping the rows above ``row``: (``keep``, ``stop``): ``top[:keep]`` is dropped and
    ``top[keep:stop]`` rebuilt after a new gap at the top — the first unit at or after ``row``, and
    the boundary row right after it. ``None`` when nothing would be dropped."""
    while row < len(top) and top[row].kind != "unit":
        row += 1
    if row <= 0 or row >= len(top):
        return None
    stop = with_sources(top, row + 1)
    if top[row].last_id == boundary and stop < len(top) and top[stop].kind == "boundary":
        stop += 1
    return row, stop


def evict_after(top: Sequence[Row], row: int) -> int | None:
    """Dropping the rows below ``row``: the row of the last unit at or before it (kept and rebuilt
    before a new gap at the bottom; everything after it is dropped). ``None`` when nothing would
    be dropped."""
    while 0 <= row < len(top) and top[row].kind != "unit":
        row -= 1
    if row < 0 or row >= len(top) - 1:
        return None
    return row


def gap_count(total: int | None, loaded: int, gaps: int) -> int | None:
    """How many messages a gap row hides, when that is known: with a single gap, the thread's
    count minus what is loaded."""
    if total is None or gaps != 1 or total - loaded < 0:
        return None
    return total - loaded


def gap_label(count: int | None, *, loading: bool, failed: bool) -> str:
    """The text of a gap row."""
    what = f"{count:,} messages" if count is not None else "More messages"
    if loading:
        return f"… loading ({what.lower()} not loaded)"
    if failed:
        return f"… {what} not loaded: loading failed — Enter to retry"
    return f"… {what} not loaded — Enter to load"
