"""The timeline of one thread without Qt: the tree, its gaps, page splicing and eviction.

Loading is keyset paging from either end. Loaded messages form segments; the unloaded stretch
before, between or after them is one *gap row* that asks for a page from its upper side (forward)
or its lower side (backward) through :meth:`Timeline.gap_request`. The owner reads the page off the
GUI thread and splices it in with :meth:`Timeline.insert_page`: only the rows at the gap's edges are
regrouped, and rows that already exist are updated in place (selection, expansion and scroll
survive), so a page costs O(page) however much is loaded (plus the rounds of a running turn it
continues: their grouping depends on the calls before them).

Every structural change is told to a :class:`TreeListener` before and after it happens, in the
order a ``QAbstractItemModel`` must signal it; :class:`inspector_app.models.timeline.TimelineModel`
is that listener. Without one (tests, tools) the timeline works the same, silently.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from engine.core.views import Offload, SourceCompaction

from . import segments
from .pages import UNKNOWN, BoundaryInfo, MessageRow, PageRequest, TimelinePage
from .segments import Span
from .tree import RUNNING_KINDS, Node, partition, same


class TreeListener(Protocol):
    """Told about every change of the tree, in ``QAbstractItemModel`` order (``parent`` is the root
    node for top-level rows; ``first``/``last`` are inclusive row numbers)."""

    def begin_reset(self) -> None: ...
    def end_reset(self) -> None: ...
    def begin_insert(self, parent: Node, first: int, last: int) -> None: ...
    def end_insert(self) -> None: ...
    def begin_remove(self, parent: Node, first: int, last: int) -> None: ...
    def end_remove(self) -> None: ...
    def changed(self, node: Node) -> None: ...
    def tokens_changed(self, parent: Node, first: int, last: int) -> None: ...


class Silent:
    """A listener that ignores everything."""

    def begin_reset(self) -> None: ...
    def end_reset(self) -> None: ...
    def begin_insert(self, parent: Node, first: int, last: int) -> None: ...
    def end_insert(self) -> None: ...
    def begin_remove(self, parent: Node, first: int, last: int) -> None: ...
    def end_remove(self) -> None: ...
    def changed(self, node: Node) -> None: ...
    def tokens_changed(self, parent: Node, first: int, last: int) -> None: ...


class Timeline:
    """Units, tool rounds and messages of one thread, with the boundary row and gap rows."""

    def __init__(self, listener: TreeListener | None = None) -> None:
        self.listener: TreeListener = listener or Silent()
        self.root = Node("root")
        self._key: str | None = None
        self._by_id: dict[int, Node] = {}
        self._gaps: list[Node] = []
        self._tokens: dict[int, int] = {}
        self._original_tokens: dict[int, int] = {}
        self._offloads: dict[int, Offload] = {}
        self._boundary: BoundaryInfo | None = None
        self._sources: tuple[SourceCompaction, ...] = ()
        self._running_turn = False
        self._total: int | None = None
        self._newest: int | None = None

    # -- state ---------------------------------------------------------------------------------
    @property
    def key(self) -> str | None:
        return self._key

    @property
    def boundary(self) -> BoundaryInfo | None:
        return self._boundary

    @property
    def sources(self) -> tuple[SourceCompaction, ...]:
        """The compactions the thread's source recorded (shown as their own rows)."""
        return self._sources

    def source_nodes(self) -> list[Node]:
        """The rows of the source's compactions that are loaded, top to bottom."""
        return [n for n in self.root.children if n.kind == "source"]

    @property
    def reaches_end(self) -> bool:
        """The newest message of the thread is loaded (nothing unloaded after the last row)."""
        return bool(self._by_id) and not (self._gaps and self._gaps[-1].last_id is None)

    @property
    def reaches_start(self) -> bool:
        """The first message of the thread is loaded."""
        return bool(self._by_id) and not (self._gaps and self._gaps[0].first_id is None)

    @property
    def exhausted(self) -> bool:
        """Everything is loaded: no gap row is left."""
        return bool(self._by_id) and not self._gaps

    @property
    def loading(self) -> bool:
        return any(g.loading for g in self._gaps)

    def loaded_count(self) -> int:
        return len(self._by_id)

    def last_id(self) -> int | None:
        """The newest loaded message id."""
        return self._newest

    def offload(self, message_id: int) -> Offload | None:
        return self._offloads.get(message_id)

    def contains(self, message_id: int) -> bool:
        return message_id in self._by_id

    def node_for(self, message_id: int) -> Node | None:
        """The row of a loaded message."""
        return self._by_id.get(message_id)

    def gaps(self) -> list[Node]:
        """The gap rows, top to bottom."""
        return list(self._gaps)

    def message_ids(self) -> list[int]:
        """Loaded message ids in display order (walks the tree: for tests and tools, not per frame)."""
        return [n.info.id for n in self.root.walk() if n.info is not None]

    def message_nodes(self) -> list[Node]:
        return [n for n in self.root.walk() if n.kind == "message"]

    def boundary_node(self) -> Node | None:
        """The boundary row, when its place is loaded."""
        b = self._boundary.boundary if self._boundary else None
        node = self._by_id.get(b) if b is not None else None
        while node is not None and node.parent is not self.root:
            node = node.parent
        if node is None:
            return None
        top = self.root.children
        after = segments.with_sources(top, node.row + 1)  # a source's own compaction at the same place comes first
        nxt = top[after] if after < len(top) else None
        return nxt if nxt is not None and nxt.kind == "boundary" else None

    def reset(
        self, key: str | None, *, boundary: BoundaryInfo | None = None, running_turn: bool = False, total: int | None = None,
        sources: tuple[SourceCompaction, ...] = (),
    ) -> None:  # fmt: skip
        """Forget everything and start over for ``key`` (the owner loads the first page);
        ``sources``: the compactions the thread's source recorded."""
        self.listener.begin_reset()
        self._sources = tuple(sources)
        self.root = Node("root")
        self._key = key
        self._by_id, self._gaps = {}, []
        self._tokens, self._original_tokens, self._offloads = {}, {}, {}
        self._boundary = boundary
        self._running_turn = running_turn
        self._total = total
        self._newest = None
        self.listener.end_reset()

    def set_running_turn(self, running: bool) -> bool:
        """The thread turned busy (its last turn is running: cut into the user's head and one row
        per round) or idle (one turn again). Only the last turn's rows are regrouped, in place
        (rows that stay keep their expansion and selection); when the last turn is not loaded it
        groups this way when it is. False when the last turn cannot be regrouped alone (the
        boundary row or a source's compaction inside it): the owner reads the view again."""
        if running == self._running_turn:
            return True
        self._running_turn = running
        top = self.root.children
        if not self._by_id or not self.reaches_end:
            return True
        start = len(top)
        while start > 0 and (top[start - 1].kind == "source" or (top[start - 1].kind == "unit" and top[start - 1].unit_kind == "round")):
            start -= 1  # the rounds of a running turn (and the source's compactions after them)...
        if start > 0 and top[start - 1].kind == "unit":
            start -= 1  # ...and the unit that opens it (or the last finished turn)
        units = [n for n in top[start:] if n.kind == "unit"]
        if not units:
            return True
        if top[start].kind != "unit" or any(n.kind not in ("unit", "source") for n in top[start:]):
            return False
        cut_before = start > 0 and top[start - 1].kind == "gap"
        rows = [i for n in units for i in n.infos()]
        b = self._boundary.boundary if self._boundary else None
        if b is not None and rows[0].id <= b:
            return False
        self._reconcile(self.root, start, len(top), self._partition(rows, cut_before=cut_before, cut_after=False, running=True))
        return True

    def set_total(self, total: int) -> None:
        """The thread's message count (from the service): the gap rows say how many are missing."""
        self._total = total
        self._update_gap_counts()

    # -- gaps ----------------------------------------------------------------------------------
    def _spans(self) -> list[Span]:
        return [Span(g.first_id, g.last_id) for g in self._gaps]

    def gap_for(self, message_id: int) -> Node | None:
        """The gap whose unloaded stretch could hold ``message_id``."""
        index = segments.find_gap(self._spans(), message_id)
        return None if index is None else self._gaps[index]

    def gap_request(self, gap: Node, *, backward: bool, limit: int) -> PageRequest | None:
        """The read that fills ``gap`` from its lower side (``backward``) or upper side; ``None``
        while a read for it is in flight. The gap shows it is loading until the page arrives."""
        if gap not in self._gaps or gap.loading:
            return None
        self._set_gap(gap, loading=True, failed=False)
        if backward:
            return PageRequest(before_id=gap.last_id, backward=True, limit=limit)
        return PageRequest(after_id=gap.first_id, limit=limit)

    def end_request(self, limit: int) -> PageRequest | None:
        """The read of the newest page (``None`` when it is loaded already)."""
        if self.reaches_end or self._key is None:
            return None
        gap = self._gaps[-1] if self._gaps else None
        if gap is not None and not gap.loading:
            self._set_gap(gap, loading=True, failed=False)
        return PageRequest(backward=True, limit=limit)

    def gap_failed(self, gap: Node | None = None) -> None:
        """A read failed: the gap stops loading by itself (activating it retries)."""
        for g in [gap] if gap is not None else self._gaps:
            if g in self._gaps:
                self._set_gap(g, loading=False, failed=True)

    def gap_cancelled(self, gap: Node | None = None) -> None:
        """A read was dropped (the view moved on): the gap may be asked again."""
        for g in [gap] if gap is not None else self._gaps:
            if g in self._gaps:
                self._set_gap(g, loading=False, failed=False)

    def _set_gap(self, gap: Node, *, loading: bool, failed: bool) -> None:
        if (gap.loading, gap.failed) != (loading, failed):
            gap.loading, gap.failed = loading, failed
            gap.label = segments.gap_label(gap.count, loading=loading, failed=failed)
            self.listener.changed(gap)

    @staticmethod
    def _new_gap(above: int | None, below: int | None) -> Node:
        gap = Node("gap")
        gap.first_id, gap.last_id = above, below
        gap.label = segments.gap_label(None, loading=False, failed=False)
        return gap

    def _update_gap_counts(self) -> None:
        count = segments.gap_count(self._total, len(self._by_id), len(self._gaps))
        for gap in self._gaps:
            if count != gap.count:
                gap.count = count
                gap.label = segments.gap_label(count, loading=gap.loading, failed=gap.failed)
                self.listener.changed(gap)

    # -- pages ---------------------------------------------------------------------------------
    def append_page(self, page: TimelinePage) -> None:
        """Add a page read forward after the newest loaded id (the first page when nothing is loaded)."""
        if page.follows is UNKNOWN:
            page = TimelinePage(page.messages, page.tokens, page.offloads, page.exhausted, page.original_tokens, follows=self._newest, precedes=page.precedes)
        self.insert_page(page)

    def insert_page(self, page: TimelinePage) -> int:
        """Splice a page in where its ids belong; returns how many messages were new.

        Messages already loaded are skipped; what the page proves about its neighbours closes or
        shrinks the gaps around it."""
        self._tokens.update(page.tokens)
        self._original_tokens.update(page.original_tokens)
        self._offloads.update(page.offloads)
        low, high = page.bounds()
        fresh = 0
        for run in segments.split_runs([s.id for s in page.messages], self._by_id, low, high):
            rows = [MessageRow.of(s) for s in page.messages[run.start : run.stop]]
            fresh += len(rows)
            self._splice(run.low, rows, run.high)
        self._update_gap_counts()
        return fresh

    def _splice(self, low: Any, rows: list[MessageRow], high: Any) -> None:
        """Put ``rows`` (contiguous, none loaded) between the loaded rows around them; with no rows
        the bounds may still prove that a gap is empty."""
        ids = (rows[0].id, rows[-1].id) if rows else None
        where = segments.place(self._spans(), self._newest, ids, low, high)
        if where is None:
            return
        top = self.root.children
        gap = self._gaps[where.gap] if where.gap is not None else None
        b = self._boundary.boundary if self._boundary else None
        cut = segments.regroup(top, gap.row if gap is not None else len(top), gap is not None, where, ids, b)
        messages = [i for n in top[cut.start : cut.at] for i in n.infos()] + rows + [i for n in top[cut.tail : cut.stop] for i in n.infos()]
        new: list[Node] = []
        if not where.attach_top:
            new.append(self._new_gap(where.above, messages[0].id if messages else where.below))
        new += self._partition(messages, cut_before=not where.attach_top, cut_after=not where.attach_bottom, running=cut.running)
        if not where.attach_bottom:
            new.append(self._new_gap(messages[-1].id if messages else where.above, where.below))
        index = where.gap if where.gap is not None else len(self._gaps)
        self._reconcile(self.root, cut.start, cut.stop, new)
        self._gaps[index : index + (gap is not None)] = [n for n in top[cut.start : cut.start + len(new)] if n.kind == "gap"]
        if rows and (self._newest is None or rows[-1].id > self._newest):
            self._newest = rows[-1].id

    def _partition(self, rows: list[MessageRow], *, cut_before: bool, cut_after: bool, running: bool) -> list[Node]:
        return partition(
            rows, self._tokens, self._original_tokens, self._boundary, cut_before=cut_before, cut_after=cut_after,
            running=self._running_turn and running, sources=self._sources,
        )  # fmt: skip

    # -- eviction ------------------------------------------------------------------------------
    def evict_before(self, row: int) -> int:
        """Forget the top-level rows above ``row`` (from the first unit at or after it): they become
        one gap row at the top. Returns how many messages were dropped. Keeps a long scroll's model
        (and every relayout of the view) bounded."""
        top = self.root.children
        b = self._boundary.boundary if self._boundary else None
        cut = segments.evict_before(top, row, b)
        if cut is None:
            return 0
        row, stop = cut
        keep = top[row]
        cut_after = stop < len(top) and top[stop].kind == "gap"
        new = [self._new_gap(None, keep.first_id)] + self._partition(keep.infos(), cut_before=True, cut_after=cut_after, running=keep.unit_kind in RUNNING_KINDS)
        return self._drop(0, stop, new, [i for n in top[:row] for i in n.infos()])

    def evict_after(self, row: int) -> int:
        """Forget the top-level rows below ``row`` (from the last unit at or before it): they become
        one gap row at the bottom. Returns how many messages were dropped."""
        top = self.root.children
        kept = segments.evict_after(top, row)
        if kept is None:
            return 0
        keep = top[kept]
        cut_before = kept > 0 and top[kept - 1].kind == "gap"
        new = self._partition(keep.infos(), cut_before=cut_before, cut_after=True, running=keep.unit_kind in RUNNING_KINDS) + [self._new_gap(keep.last_id, None)]
        dropped = self._drop(kept, len(top), new, [i for n in top[kept + 1 :] for i in n.infos()])
        self._newest = keep.last_id
        return dropped

    def _drop(self, start: int, stop: int, new: list[Node], dropped: list[MessageRow]) -> int:
        if not dropped:
            return 0
        self._reconcile(self.root, start, stop, new)
        self._gaps = [n for n in self.root.children if n.kind == "gap"]
        for info in dropped:
            self._tokens.pop(info.id, None)
            self._original_tokens.pop(info.id, None)
            self._offloads.pop(info.id, None)
        self._update_gap_counts()
        return len(dropped)

    # -- tokens --------------------------------------------------------------------------------
    def set_tokens(self, tokens: Mapping[int, int], original_tokens: Mapping[int, int] | None = None) -> None:
        """Token counts that arrived after their page (counted once the rows were shown): the
        message rows and the sums of their rounds and units are updated in place, and the listener
        hears one :meth:`TreeListener.tokens_changed` per parent (the row range that changed), not
        one notice per row: a page's counts cost a few dozen notices instead of one per message and
        group (each one a Python/Qt round trip that waits for the GIL while a side panel measures
        the thread on a worker)."""
        self._tokens.update(tokens)
        self._original_tokens.update(original_tokens or {})
        touched: dict[int, Node] = {}
        groups: dict[int, Node] = {}
        for message_id, count in tokens.items():
            node = self._by_id.get(message_id)
            if node is None:
                continue
            original = self._original_tokens.get(message_id)
            if (node.tokens, node.original_tokens) != (count, original):
                node.tokens, node.original_tokens = count, original
                touched[id(node)] = node
            up = node.parent
            while up is not None and up is not self.root:
                groups[id(up)] = up
                up = up.parent
        for group in sorted(groups.values(), key=lambda n: -n.depth()):  # rounds before their units
            counted = [c.tokens for c in group.children if c.tokens is not None]
            total = sum(counted) if counted else None
            if total != group.tokens:
                group.tokens = total
                touched[id(group)] = group
        spans: dict[int, tuple[Node, int, int]] = {}
        for node in touched.values():
            parent = node.parent
            assert parent is not None
            _, first, last = spans.get(id(parent), (parent, node.row, node.row))
            spans[id(parent)] = (parent, min(first, node.row), max(last, node.row))
        for parent, first, last in spans.values():
            self.listener.tokens_changed(parent, first, last)

    # -- splicing ------------------------------------------------------------------------------
    def _reconcile(self, parent: Node, start: int, stop: int, new: list[Node]) -> None:
        """Make ``parent.children[start:stop]`` look like ``new``: rows that match (same kind,
        overlapping ids) are updated in place and recursed into, the others removed or inserted."""
        old = parent.children[start:stop]
        claimed: dict[int, int] = {}  # new position -> old position
        k = 0
        for i, o in enumerate(old):
            j = next((j for j in range(k, len(new)) if same(o, new[j])), None)
            if j is not None:
                claimed[j] = i
                k = j + 1
        kept = set(claimed.values())
        i = len(old) - 1
        while i >= 0:  # remove unmatched old rows, contiguous runs from the end
            if i in kept:
                i -= 1
                continue
            hi = i
            while i >= 0 and i not in kept:
                i -= 1
            lo = i + 1
            self.listener.begin_remove(parent, start + lo, start + hi)
            gone = parent.children[start + lo : start + hi + 1]
            del parent.children[start + lo : start + hi + 1]
            _renumber(parent, start + lo)
            for node in gone:
                self._forget(node)
            self.listener.end_remove()
        pos = start
        j = 0
        while j < len(new):  # insert unmatched new rows between the kept ones
            if j in claimed:
                pos += 1
                j += 1
                continue
            batch = []
            while j < len(new) and j not in claimed:
                batch.append(new[j])
                j += 1
            self.listener.begin_insert(parent, pos, pos + len(batch) - 1)
            for node in batch:
                node.parent = parent
            parent.children[pos:pos] = batch
            _renumber(parent, pos)
            for node in batch:
                self._register(node)
            self.listener.end_insert()
            pos += len(batch)
        for j, i in claimed.items():
            o, n = old[i], new[j]
            before = o.state()
            o.take(n)
            if o.info is not None:
                self._by_id[o.info.id] = o
            self._reconcile(o, 0, len(o.children), n.children)
            if o.state() != before:
                self.listener.changed(o)

    def _register(self, node: Node) -> None:
        for n in [node, *node.walk()]:
            if n.info is not None:
                self._by_id[n.info.id] = n

    def _forget(self, node: Node) -> None:
        for n in [node, *node.walk()]:
            if n.info is not None and self._by_id.get(n.info.id) is n:
                del self._by_id[n.info.id]


def _renumber(parent: Node, start: int) -> None:
    children = parent.children
    for r in range(start, len(children)):
        children[r].row = r
