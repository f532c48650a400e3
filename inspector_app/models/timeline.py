"""The timeline of one thread: units → tool rounds → messages, in physical order, loaded in pages.

A thin adapter: grouping comes from ``engine.units`` (the same cut points compaction uses), token
counts from ``engine.meter`` (counted on a worker thread when the page is read). The compaction
boundary is a row of its own between the compacted history (dimmed) and the surface.

Loading is keyset paging from either end. Loaded messages form *segments* (contiguous runs); the
unloaded stretch before, between or after them is one *gap row* ("… N messages not loaded — Enter
to load") that asks for a page from its upper side (forward) or its lower side (backward) through
:meth:`TimelineModel.gap_request`. The owner reads the page off the GUI thread and splices it in
with :meth:`TimelineModel.insert_page`: only the rows at the gap's edges are regrouped, and rows
that already exist are updated in place (selection, expansion and scroll survive), so a page costs
O(page) however much is loaded. A unit cut by a gap is marked "continues" instead of "open round"
or "orphan": its missing part is not loaded, not missing.

The model keeps no message bodies: per message a bounded one-line preview, the shape grouping
needs (role, ids, call names) and its token count. The owner loads a body when it is selected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterator, Mapping, Sequence

from PySide6.QtCore import QAbstractItemModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QBrush, QFont

from engine.messages import META_EPHEMERAL, META_PRUNED, META_SYNTHETIC, Message, ToolCall
from engine.units import ToolRound, Unit, build_units, split_rounds
from engine.views import CompactionState, HistoryRecord, Offload, StoredMessage

from .. import theme

NodeKindRole = Qt.ItemDataRole.UserRole + 1
MessageRole = Qt.ItemDataRole.UserRole + 2
MarkersRole = Qt.ItemDataRole.UserRole + 3
TokensRole = Qt.ItemDataRole.UserRole + 4
CompactedRole = Qt.ItemDataRole.UserRole + 5
MessageIdRole = Qt.ItemDataRole.UserRole + 6
IconRole = Qt.ItemDataRole.UserRole + 7
BoundaryRole = Qt.ItemDataRole.UserRole + 8
OffloadRole = Qt.ItemDataRole.UserRole + 9

COLUMNS: tuple[str, ...] = ("Message", "Tokens", "Markers", "#")
COL_TEXT, COL_TOKENS, COL_MARKERS, COL_ID = range(len(COLUMNS))

MARKER_PRUNED = "pruned"
MARKER_SYNTHETIC = "synthetic"
MARKER_EPHEMERAL = "ephemeral"
MARKER_OPEN = "open round"
MARKER_ORPHAN = "orphan"
MARKER_CONTINUES = "continues"

PREVIEW_CHARS = 240
#: ``before_id`` that reads the newest page (ids are 64-bit; the store benchmark reads the end the same way)
NEWEST = 2**62
_WS = re.compile(r"\s+")
_Index = QModelIndex | QPersistentModelIndex
_KEPT_METADATA = (META_PRUNED, META_SYNTHETIC, META_EPHEMERAL)
_RUNNING_KINDS = ("round", "turn_user")


class _Unknown:
    """The keyset bound of a page side that the read did not establish."""

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()


def one_line(text: str, limit: int = PREVIEW_CHARS) -> str:
    """Whitespace collapsed to single spaces and cut to ``limit`` characters (the view elides)."""
    flat = _WS.sub(" ", text[: limit * 4]).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def message_matches(m: Message, needle: str) -> bool:
    """``needle`` (already case-folded) occurs in the content, a tool name or tool arguments."""
    return needle in m.content.casefold() or any(needle in c.arguments.casefold() or needle in c.name.casefold() for c in m.tool_calls)


@dataclass(frozen=True, slots=True)
class TimelinePage:
    """A contiguous run of messages (ascending ids) with their token counts and offloads.

    ``tokens`` count each message as the model sees it (a pruned result as its preview);
    ``original_tokens`` count the full text of the pruned ones. Where the page sits is told by its
    keyset bounds: no message of the thread lies between ``follows`` and the first message
    (``None``: the page starts the thread; :data:`UNKNOWN`: not established — :meth:`TimelineModel.append_page`
    fills in the newest loaded id), nor between the last message and ``precedes`` (``None``: not
    established); ``exhausted``: the page ends the thread."""

    messages: tuple[StoredMessage, ...]
    tokens: Mapping[int, int] = field(default_factory=dict)
    offloads: Mapping[int, Offload] = field(default_factory=dict)
    exhausted: bool = False
    original_tokens: Mapping[int, int] = field(default_factory=dict)
    follows: Any = UNKNOWN
    precedes: int | None = None


@dataclass(frozen=True, slots=True)
class PageRequest:
    """One keyset read for a gap: forward (the first ``limit`` after ``after_id``; ``None``: from the
    start) or backward (the last ``limit`` before ``before_id``; ``None``: the newest)."""

    after_id: int | None = None
    before_id: int | None = None
    backward: bool = False
    limit: int = 500

    def query(self) -> dict[str, Any]:
        """Keyword arguments for ``Service.messages_page``."""
        if self.backward:
            return {"before_id": NEWEST if self.before_id is None else self.before_id, "limit": self.limit}
        return {"after_id": self.after_id, "limit": self.limit}

    def page(
        self,
        rows: Sequence[StoredMessage],
        tokens: Mapping[int, int] | None = None,
        offloads: Mapping[int, Offload] | None = None,
        original_tokens: Mapping[int, int] | None = None,
    ) -> TimelinePage:
        """The answer to this read as a page with its keyset bounds."""
        full = len(rows) >= self.limit
        extra = {"tokens": tokens or {}, "offloads": offloads or {}, "original_tokens": original_tokens or {}}
        if self.backward:
            return TimelinePage(tuple(rows), follows=UNKNOWN if full else None, precedes=self.before_id, exhausted=self.before_id is None, **extra)
        return TimelinePage(tuple(rows), follows=self.after_id, exhausted=not full, **extra)


@dataclass(frozen=True, slots=True)
class MessageRow:
    """What the timeline keeps of one message: never its body, only a bounded preview, the shape
    grouping needs (role, id, call ids and names, the call answered, marker metadata) and flags."""

    id: int
    role: str
    preview: str
    created_at: datetime
    shape: Message
    pruned: bool

    @classmethod
    def of(cls, stored: StoredMessage) -> "MessageRow":
        m = stored.message
        shape = Message(
            m.role,
            "",
            id=m.id,
            tool_calls=tuple(ToolCall(c.id, c.name, "") for c in m.tool_calls),
            tool_call_id=m.tool_call_id,
            name=m.name,
            metadata={k: m.metadata[k] for k in _KEPT_METADATA if k in m.metadata},
        )
        return cls(stored.id, m.role, message_preview(m), stored.created_at, shape, bool(stored.offload_sha256 or m.metadata.get(META_PRUNED)))


@dataclass(frozen=True, slots=True)
class BoundaryInfo:
    """What the summary card shows: where compacted history ends, the summary, when and why."""

    boundary: int
    summary: str | None
    summary_tokens: int
    generation: int
    compact_count: int
    updated_at: datetime | None
    kind: str | None = None
    trigger: str | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None

    @classmethod
    def from_state(cls, state: CompactionState, history: Sequence[HistoryRecord] = ()) -> "BoundaryInfo | None":
        """The card for ``state`` (``None`` when nothing was compacted); the reason comes from the
        newest history record that moved the boundary."""
        if state.boundary is None:
            return None
        record = next((h for h in reversed(history) if h.kind in ("summary", "manual")), None)
        return cls(
            boundary=state.boundary,
            summary=state.summary,
            summary_tokens=state.summary_tokens,
            generation=state.generation,
            compact_count=state.compact_count,
            updated_at=state.updated_at or (record.created_at if record else None),
            kind=record.kind if record else None,
            trigger=record.trigger if record else None,
            tokens_before=record.tokens_before if record else None,
            tokens_after=record.tokens_after if record else None,
        )

    def headline(self) -> str:
        parts = [f"Compacted history ends at #{self.boundary}", f"summary {self.summary_tokens:,} tok", f"gen {self.generation}"]
        why = " ".join(filter(None, (self.kind, self.trigger and f"({self.trigger})")))
        if why:
            parts.append(why)
        if self.updated_at is not None:
            parts.append(self.updated_at.strftime("%Y-%m-%d %H:%M"))
        return " · ".join(parts)


class Node:
    """One row of the tree: a unit, a tool round, a message, the boundary or a gap.

    ``row`` is kept current (O(1) ``parent()``/``index()``); a gap knows the loaded ids around it
    (``first_id``: the last id above, ``last_id``: the first id below, ``None``: the thread's edge)."""

    __slots__ = ("kind", "parent", "children", "row", "info", "label", "icon", "tokens", "original_tokens", "markers", "compacted", "first_id", "last_id", "unit_kind", "count", "loading", "failed")

    def __init__(self, kind: str, parent: "Node | None" = None) -> None:
        self.kind = kind
        self.parent = parent
        self.children: list[Node] = []
        self.row = 0
        self.info: MessageRow | None = None
        self.label = ""
        self.icon = ""
        self.tokens: int | None = None  # what the model sees
        self.original_tokens: int | None = None  # the full text, when it was pruned
        self.markers: tuple[str, ...] = ()
        self.compacted = False
        self.first_id: int | None = None
        self.last_id: int | None = None
        self.unit_kind = ""
        self.count: int | None = None  # a gap: messages not loaded, when known
        self.loading = False
        self.failed = False

    def add(self, child: "Node") -> None:
        child.parent = self
        child.row = len(self.children)
        self.children.append(child)

    def walk(self) -> Iterator["Node"]:
        """This node's descendants in display order."""
        for child in self.children:
            yield child
            yield from child.walk()

    def infos(self) -> list[MessageRow]:
        """The messages under this node, in order."""
        return [n.info for n in ([self] if self.info else self.walk()) if n.info is not None]

    def state(self) -> tuple[Any, ...]:
        """Everything a row shows (a change emits dataChanged)."""
        return (self.label, self.icon, self.tokens, self.original_tokens, self.markers, self.compacted, self.first_id, self.last_id, self.count, self.loading, self.failed)

    def take(self, other: "Node") -> None:
        """Copy ``other``'s row fields (not its children) into this node."""
        self.info, self.label, self.icon, self.tokens, self.original_tokens = other.info, other.label, other.icon, other.tokens, other.original_tokens
        self.markers, self.compacted, self.first_id, self.last_id, self.unit_kind = other.markers, other.compacted, other.first_id, other.last_id, other.unit_kind
        self.count, self.loading, self.failed = other.count, other.loading, other.failed


def _markers(shape: Message, pruned: bool, *, orphan: bool = False, open_round: bool = False, continues: bool = False) -> tuple[str, ...]:
    out: list[str] = []
    if pruned:
        out.append(MARKER_PRUNED)
    if shape.is_synthetic:
        out.append(MARKER_SYNTHETIC)
    if shape.is_ephemeral:
        out.append(MARKER_EPHEMERAL)
    if open_round and shape.tool_calls:
        out.append(MARKER_OPEN)
    if orphan:
        out.append(MARKER_ORPHAN)
    if continues:
        out.append(MARKER_CONTINUES)
    return tuple(out)


def message_markers(stored: StoredMessage, *, orphan: bool = False, open_round: bool = False) -> tuple[str, ...]:
    """The markers a message row carries."""
    m = stored.message
    return _markers(m, bool(stored.offload_sha256 or m.metadata.get(META_PRUNED)), orphan=orphan, open_round=open_round)


def message_preview(m: Message) -> str:
    """The one-line text of a message row."""
    if m.role == "assistant" and m.tool_calls:
        calls = ", ".join(f"{c.name}({one_line(c.arguments, 60)})" for c in m.tool_calls)
        text = f"{one_line(m.content, 120)} → {calls}" if m.content.strip() else f"→ {calls}"
        return one_line(text)
    if m.role == "tool":
        return one_line(f"{m.name or m.tool_call_id}: {m.content}")
    return one_line(m.content) or "(empty)"


def _round_label(messages: Sequence[Message]) -> str:
    calls = [c for m in messages if m.role == "assistant" for c in m.tool_calls]
    if not calls:
        return "Tool results" if any(m.role == "tool" for m in messages) else "Notes"
    names = ", ".join(dict.fromkeys(c.name for c in calls))
    suffix = f" · {len(calls)} parallel calls" if len(calls) > 1 else ""
    return one_line(f"Tool round · {names}{suffix}")


def _flags(open_: bool, orphans: bool, *, open_continues: bool, orphans_continue: bool) -> tuple[str, ...]:
    """Group markers: an open round or orphans at a gap edge "continue" in the gap instead."""
    out = []
    if open_ and not open_continues:
        out.append(MARKER_OPEN)
    if orphans and not orphans_continue:
        out.append(MARKER_ORPHAN)
    if (open_ and open_continues) or (orphans and orphans_continue):
        out.append(MARKER_CONTINUES)
    return tuple(out)


class _Builder:
    """Turns a contiguous run of messages into top-level nodes (units with rounds and messages).

    ``cut_before``: a gap precedes the run (results may answer calls in it); ``cut_after``: a gap
    follows it (its last round may get its results there)."""

    def __init__(self, rows: Sequence[MessageRow], tokens: Mapping[int, int], original: Mapping[int, int], boundary: int | None, *, cut_before: bool, cut_after: bool) -> None:
        self._rows = {id(r.shape): r for r in rows}
        self._tokens = tokens
        self._original = original
        self._boundary = boundary
        self._cut_before = cut_before
        self._cut_after = cut_after

    def build(self, *, running: bool) -> list[Node]:
        units = build_units([r.shape for r in self._rows.values()], running_turn=running)
        last = len(units) - 1
        return [self._unit_node(u, first=i == 0, last=i == last) for i, u in enumerate(units)]

    def _message_node(self, m: Message, *, orphan: bool = False, open_round: bool = False, continues: bool = False) -> Node:
        row = self._rows[id(m)]
        node = Node("message")
        node.info = row
        node.label = row.preview
        node.icon = m.role
        node.tokens = self._tokens.get(row.id)
        node.original_tokens = self._original.get(row.id)
        node.markers = _markers(m, row.pruned, orphan=orphan, open_round=open_round, continues=continues)
        node.first_id = node.last_id = row.id
        node.compacted = self._boundary is not None and row.id <= self._boundary
        return node

    def _group(self, kind: str, label: str, icon: str, children: list[Node], markers: tuple[str, ...], unit_kind: str = "") -> Node:
        node = Node(kind)
        node.label, node.icon, node.markers, node.unit_kind = label, icon, markers, unit_kind
        for child in children:
            node.add(child)
        counted = [c.tokens for c in children if c.tokens is not None]
        node.tokens = sum(counted) if counted else None
        ids = [i for c in children for i in (c.first_id, c.last_id) if i is not None]
        node.first_id, node.last_id = (min(ids), max(ids)) if ids else (None, None)
        node.compacted = bool(children) and all(c.compacted for c in children)
        return node

    def _round_children(self, r: ToolRound, orphan_ids: set[int], *, open_continues: bool, orphans_continue: bool) -> list[Node]:
        out = []
        for m in r.messages:
            orphan = id(m) in orphan_ids
            cut_call = open_continues and r.open and bool(m.tool_calls)
            out.append(self._message_node(m, orphan=orphan and not orphans_continue, open_round=r.open and not open_continues, continues=cut_call or (orphan and orphans_continue)))
        return out

    def _round_nodes(self, r: ToolRound, orphan_ids: set[int], *, open_continues: bool, orphans_continue: bool) -> list[Node]:
        """A round with tool calls becomes a round row; a lone message stays a message row."""
        children = self._round_children(r, orphan_ids, open_continues=open_continues, orphans_continue=orphans_continue)
        if len(children) == 1 and not any(m.tool_calls for m in r.messages):
            return children
        markers = _flags(r.open, bool(r.orphans), open_continues=open_continues, orphans_continue=orphans_continue)
        return [self._group("round", _round_label(r.messages), "round", children, markers)]

    def _unit_node(self, unit: Unit, *, first: bool, last: bool) -> Node:
        msgs = unit.messages
        orphan_ids = {id(m) for m in unit.orphans}
        orphans_continue = first and self._cut_before and not any(m.role == "user" for m in msgs)
        open_continues = last and self._cut_after
        if unit.kind == "round":
            r = ToolRound(msgs, unit.open, unit.orphans)
            children = self._round_children(r, orphan_ids, open_continues=open_continues, orphans_continue=orphans_continue)
            markers = _flags(unit.open, bool(unit.orphans), open_continues=open_continues, orphans_continue=orphans_continue)
            return self._group("unit", _round_label(msgs) + " · running turn", "round", children, markers, "round")
        cut = next((i + 1 for i, m in enumerate(msgs) if m.role == "user"), 0)
        head, rest = msgs[:cut], msgs[cut:]
        user = head[-1] if head else None
        user_label = self._rows[id(user)].preview if user else ""
        if unit.kind == "turn_user":
            children = [self._message_node(m, orphan=id(m) in orphan_ids) for m in msgs]
            markers = _flags(False, bool(unit.orphans), open_continues=False, orphans_continue=False)
            return self._group("unit", one_line("Running turn · " + user_label), "turn", children, markers, "turn_user")
        children = [self._message_node(m) for m in head]
        rounds = split_rounds(rest)
        for i, r in enumerate(rounds):
            children.extend(self._round_nodes(r, orphan_ids, open_continues=open_continues and i == len(rounds) - 1, orphans_continue=orphans_continue))
        really_open = any(r.open for r in rounds[:-1]) or (bool(rounds) and rounds[-1].open and not open_continues)
        cut_open = open_continues and bool(rounds) and rounds[-1].open
        markers = _flags(really_open, bool(unit.orphans) and not orphans_continue, open_continues=False, orphans_continue=False)
        if cut_open or (unit.orphans and orphans_continue):
            markers += (MARKER_CONTINUES,)
        label = f"Turn · {user_label}" if user else "Turn (continued)"
        return self._group("unit", one_line(label), "turn", children, markers, "turn")


def _same(old: Node, new: Node) -> bool:
    """``old`` becomes ``new``: same kind and (for rows with messages) overlapping ids."""
    if old.kind != new.kind:
        return False
    if old.kind in ("gap", "boundary"):
        return True
    if old.kind == "message":
        return old.first_id == new.first_id
    if old.first_id is None or old.last_id is None or new.first_id is None or new.last_id is None:
        return False
    return old.first_id <= new.last_id and new.first_id <= old.last_id


class TimelineModel(QAbstractItemModel):
    """Units, tool rounds and messages of one thread, with the boundary row and gap rows."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._root = Node("root")
        self._key: str | None = None
        self._by_id: dict[int, Node] = {}
        self._gaps: list[Node] = []
        self._tokens: dict[int, int] = {}
        self._original_tokens: dict[int, int] = {}
        self._offloads: dict[int, Offload] = {}
        self._boundary: BoundaryInfo | None = None
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

    def gaps(self) -> list[Node]:
        """The gap rows, top to bottom."""
        return list(self._gaps)

    def reset(self, key: str | None, *, boundary: BoundaryInfo | None = None, running_turn: bool = False, total: int | None = None) -> None:
        """Forget everything and start over for ``key`` (the owner loads the first page)."""
        self.beginResetModel()
        self._root = Node("root")
        self._key = key
        self._by_id, self._gaps = {}, []
        self._tokens, self._original_tokens, self._offloads = {}, {}, {}
        self._boundary = boundary
        self._running_turn = running_turn
        self._total = total
        self._newest = None
        self.endResetModel()

    def set_total(self, total: int) -> None:
        """The thread's message count (from the service): the gap rows say how many are missing."""
        self._total = total
        self._update_gap_counts()

    # -- gaps ----------------------------------------------------------------------------------
    def gap_for(self, message_id: int) -> Node | None:
        """The gap whose unloaded stretch could hold ``message_id``."""
        return next((g for g in self._gaps if (g.first_id is None or g.first_id < message_id) and (g.last_id is None or message_id < g.last_id)), None)

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
            gap.label = self._gap_label(gap)
            self._changed(gap)

    @staticmethod
    def _gap_label(gap: Node) -> str:
        what = f"{gap.count:,} messages" if gap.count is not None else "More messages"
        if gap.loading:
            return f"… loading ({what.lower()} not loaded)"
        if gap.failed:
            return f"… {what} not loaded: loading failed — Enter to retry"
        return f"… {what} not loaded — Enter to load"

    def _new_gap(self, above: int | None, below: int | None) -> Node:
        gap = Node("gap")
        gap.first_id, gap.last_id = above, below
        gap.label = self._gap_label(gap)
        return gap

    def _update_gap_counts(self) -> None:
        """With a single gap its size is the thread's count minus what is loaded."""
        for gap in self._gaps:
            count = self._total - len(self._by_id) if self._total is not None and len(self._gaps) == 1 else None
            if count != gap.count:
                gap.count = count if count is None or count >= 0 else None
                gap.label = self._gap_label(gap)
                self._changed(gap)

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
        low: Any = page.follows
        high: Any = None if page.exhausted else (page.precedes if page.precedes is not None else UNKNOWN)
        fresh = 0
        run: list[MessageRow] = []
        for stored in page.messages:
            if stored.id in self._by_id:
                self._splice(low, run, stored.id)
                low, run = stored.id, []
            else:
                run.append(MessageRow.of(stored))
                fresh += 1
        self._splice(low, run, high)
        self._update_gap_counts()
        return fresh

    def _splice(self, low: Any, rows: list[MessageRow], high: Any) -> None:
        """Put ``rows`` (contiguous, none loaded) between the loaded rows around them.

        ``low``/``high`` are keyset bounds: no message lies between ``low`` and the first row, nor
        between the last row and ``high`` (``None``: the thread's start/end; UNKNOWN: unknown).
        With no rows the bounds may still prove that a gap is empty."""
        top = self._root.children
        gap: Node | None
        if rows:
            gap = self.gap_for(rows[0].id)
            if gap is not None and gap.last_id is not None and rows[-1].id >= gap.last_id:
                return  # the thread changed under the read: not a run of this gap
            if gap is None and self._by_id and (self._newest is None or rows[0].id < self._newest):
                return  # inside a loaded segment: nothing to add
        else:
            gap = next((g for g in self._gaps if g.first_id == low), None) if low is not UNKNOWN else None
            if gap is None:
                return
        # the loaded neighbours: ``above`` ends the segment before, ``below`` starts the one after
        if gap is not None:
            above, below, at, stop = gap.first_id, gap.last_id, gap.row, gap.row + 1
        else:  # nothing loaded yet, or the thread grew after its loaded end
            above, below, at, stop = self._newest, None, len(top), len(top)
        if low is UNKNOWN:
            attach_top = False
        elif above is None:
            attach_top = low is None
        else:
            attach_top = low is not None and low <= above
        if high is UNKNOWN:
            attach_bottom = False
        elif below is None:
            attach_bottom = high is None
        else:
            attach_bottom = high is not None and high >= below
        if not rows and not (attach_top and attach_bottom):
            return  # proves nothing about the gap
        b = self._boundary.boundary if self._boundary else None

        def side(i: int | None) -> bool:
            return b is None or i is None or i <= b

        # the units at the gap's edges that the new messages continue are regrouped with them
        start = at
        if attach_top and above is not None:
            probe = rows[0].id if rows else below
            while start > 0 and top[start - 1].kind == "unit" and side(top[start - 1].last_id) == side(probe):
                start -= 1
                if top[start].unit_kind != "round":
                    break  # a finished turn, or the user message that opens the running turn
        tail = stop
        running_tail = attach_bottom and below is None
        if attach_bottom and below is not None and stop < len(top) and top[stop].kind == "unit":
            edge = top[stop]
            if side(edge.first_id) == side(rows[-1].id if rows else above):
                running_tail = edge.unit_kind in _RUNNING_KINDS
                stop += 1
                if edge.last_id == b and stop < len(top) and top[stop].kind == "boundary":
                    stop += 1
        messages = [i for n in top[start:at] for i in n.infos()] + rows + [i for n in top[tail if gap is not None else at : stop] for i in n.infos()]
        new: list[Node] = []
        if not attach_top:
            new.append(self._new_gap(above, messages[0].id if messages else below))
        new += self._partition(messages, cut_before=not attach_top, cut_after=not attach_bottom, running=self._running_turn and running_tail)
        if not attach_bottom:
            new.append(self._new_gap(messages[-1].id if messages else above, below))
        index = self._gaps.index(gap) if gap is not None else len(self._gaps)
        self._reconcile(self._root, start, stop, new)
        self._gaps[index : index + (gap is not None)] = [n for n in top[start : start + len(new)] if n.kind == "gap"]
        if rows and (self._newest is None or rows[-1].id > self._newest):
            self._newest = rows[-1].id

    def _partition(self, rows: list[MessageRow], *, cut_before: bool, cut_after: bool, running: bool) -> list[Node]:
        """Units of a contiguous run, with the boundary row where the compacted part ends."""
        if not rows:
            return []
        b = self._boundary.boundary if self._boundary else None
        before = [r for r in rows if b is not None and r.id <= b]
        after = rows[len(before) :]
        placed = bool(before) and (bool(after) or before[-1].id == b)
        nodes: list[Node] = []
        if before:
            nodes += self._units(before, cut_before=cut_before, cut_after=cut_after and not placed, running=False)
        if placed:
            nodes.append(self._boundary_node())
        if after:
            nodes += self._units(after, cut_before=cut_before and not before, cut_after=cut_after, running=running)
        return nodes

    def _units(self, rows: list[MessageRow], *, cut_before: bool, cut_after: bool, running: bool) -> list[Node]:
        b = self._boundary.boundary if self._boundary else None
        return _Builder(rows, self._tokens, self._original_tokens, b, cut_before=cut_before, cut_after=cut_after).build(running=running)

    def _boundary_node(self) -> Node:
        assert self._boundary is not None
        node = Node("boundary")
        node.label = self._boundary.headline()
        node.icon = "boundary"
        node.tokens = self._boundary.summary_tokens
        return node

    # -- eviction ------------------------------------------------------------------------------
    def evict_before(self, row: int) -> int:
        """Forget the top-level rows above ``row`` (from the first unit at or after it): they become
        one gap row at the top. Returns how many messages were dropped. Keeps a long scroll's model
        (and every relayout of the view) bounded."""
        top = self._root.children
        while row < len(top) and top[row].kind != "unit":
            row += 1
        if row <= 0 or row >= len(top):
            return 0
        keep = top[row]
        stop = row + 2 if keep.last_id == self._b() and row + 1 < len(top) and top[row + 1].kind == "boundary" else row + 1
        cut_after = stop < len(top) and top[stop].kind == "gap"
        new = [self._new_gap(None, keep.first_id)] + self._partition(keep.infos(), cut_before=True, cut_after=cut_after, running=self._running_turn and keep.unit_kind in _RUNNING_KINDS)
        return self._drop(0, stop, new, [i for n in top[:row] for i in n.infos()])

    def evict_after(self, row: int) -> int:
        """Forget the top-level rows below ``row`` (from the last unit at or before it): they become
        one gap row at the bottom. Returns how many messages were dropped."""
        top = self._root.children
        while row >= 0 and row < len(top) and top[row].kind != "unit":
            row -= 1
        if row < 0 or row >= len(top) - 1:
            return 0
        keep = top[row]
        cut_before = row > 0 and top[row - 1].kind == "gap"
        new = self._partition(keep.infos(), cut_before=cut_before, cut_after=True, running=self._running_turn and keep.unit_kind in _RUNNING_KINDS) + [self._new_gap(keep.last_id, None)]
        dropped = self._drop(row, len(top), new, [i for n in top[row + 1 :] for i in n.infos()])
        self._newest = keep.last_id
        return dropped

    def _drop(self, start: int, stop: int, new: list[Node], dropped: list[MessageRow]) -> int:
        if not dropped:
            return 0
        self._reconcile(self._root, start, stop, new)
        self._gaps = [n for n in self._root.children if n.kind == "gap"]
        for info in dropped:
            self._tokens.pop(info.id, None)
            self._original_tokens.pop(info.id, None)
            self._offloads.pop(info.id, None)
        self._update_gap_counts()
        return len(dropped)

    def _b(self) -> int | None:
        return self._boundary.boundary if self._boundary else None

    def set_tokens(self, tokens: Mapping[int, int], original_tokens: Mapping[int, int] | None = None) -> None:
        """Token counts that arrived after their page (counted once the rows were shown): the
        message rows and the sums of their rounds and units are updated in place."""
        self._tokens.update(tokens)
        self._original_tokens.update(original_tokens or {})
        groups: dict[int, Node] = {}
        for message_id, count in tokens.items():
            node = self._by_id.get(message_id)
            if node is None:
                continue
            node.tokens = count
            node.original_tokens = self._original_tokens.get(message_id)
            self._changed(node)
            up = node.parent
            while up is not None and up is not self._root:
                groups[id(up)] = up
                up = up.parent
        for group in sorted(groups.values(), key=lambda n: -self._depth(n)):  # rounds before their units
            counted = [c.tokens for c in group.children if c.tokens is not None]
            group.tokens = sum(counted) if counted else None
            self._changed(group)

    @staticmethod
    def _depth(node: Node) -> int:
        depth = 0
        while node.parent is not None:
            node, depth = node.parent, depth + 1
        return depth

    # -- splicing ------------------------------------------------------------------------------
    def _reconcile(self, parent: Node, start: int, stop: int, new: list[Node]) -> None:
        """Make ``parent.children[start:stop]`` look like ``new``: rows that match (same kind,
        overlapping ids) are updated in place and recursed into, the others removed or inserted."""
        old = parent.children[start:stop]
        claimed: dict[int, int] = {}  # new position -> old position
        k = 0
        for i, o in enumerate(old):
            j = next((j for j in range(k, len(new)) if _same(o, new[j])), None)
            if j is not None:
                claimed[j] = i
                k = j + 1
        kept = set(claimed.values())
        pindex = self._index_of(parent)
        i = len(old) - 1
        while i >= 0:  # remove unmatched old rows, contiguous runs from the end
            if i in kept:
                i -= 1
                continue
            hi = i
            while i >= 0 and i not in kept:
                i -= 1
            lo = i + 1
            self.beginRemoveRows(pindex, start + lo, start + hi)
            gone = parent.children[start + lo : start + hi + 1]
            del parent.children[start + lo : start + hi + 1]
            self._renumber(parent, start + lo)
            for node in gone:
                self._forget(node)
            self.endRemoveRows()
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
            self.beginInsertRows(pindex, pos, pos + len(batch) - 1)
            for node in batch:
                node.parent = parent
            parent.children[pos:pos] = batch
            self._renumber(parent, pos)
            for node in batch:
                self._register(node)
            self.endInsertRows()
            pos += len(batch)
        for j, i in claimed.items():
            o, n = old[i], new[j]
            before = o.state()
            o.take(n)
            if o.info is not None:
                self._by_id[o.info.id] = o
            self._reconcile(o, 0, len(o.children), n.children)
            if o.state() != before:
                self._changed(o)

    @staticmethod
    def _renumber(parent: Node, start: int) -> None:
        children = parent.children
        for r in range(start, len(children)):
            children[r].row = r

    def _register(self, node: Node) -> None:
        for n in [node, *node.walk()]:
            if n.info is not None:
                self._by_id[n.info.id] = n

    def _forget(self, node: Node) -> None:
        for n in [node, *node.walk()]:
            if n.info is not None and self._by_id.get(n.info.id) is n:
                del self._by_id[n.info.id]

    def _index_of(self, node: Node) -> QModelIndex:
        return QModelIndex() if node is self._root else self.createIndex(node.row, 0, node)

    def _changed(self, node: Node) -> None:
        if node.parent is not None:
            self.dataChanged.emit(self.createIndex(node.row, 0, node), self.createIndex(node.row, len(COLUMNS) - 1, node))

    # -- lookups -------------------------------------------------------------------------------
    def node(self, index: _Index) -> Node | None:
        return index.internalPointer() if index.isValid() else None

    def index_of(self, node: Node, column: int = 0) -> QModelIndex:
        return self.createIndex(node.row, column, node)

    def index_for_message(self, message_id: int) -> QModelIndex:
        node = self._by_id.get(message_id)
        return self.index_of(node) if node else QModelIndex()

    def boundary_index(self) -> QModelIndex:
        b = self._boundary.boundary if self._boundary else None
        node = self._by_id.get(b) if b is not None else None
        while node is not None and node.parent is not self._root:
            node = node.parent
        if node is None:
            return QModelIndex()
        top = self._root.children
        nxt = top[node.row + 1] if node.row + 1 < len(top) else None
        return self.index_of(nxt) if nxt is not None and nxt.kind == "boundary" else QModelIndex()

    def message_nodes(self) -> list[Node]:
        return [n for n in self._root.walk() if n.kind == "message"]

    def message_ids(self) -> list[int]:
        """Loaded message ids in display order (walks the tree: for tests and tools, not per frame)."""
        return [n.info.id for n in self._root.walk() if n.info is not None]

    def newest_message_index(self) -> QModelIndex:
        """The newest loaded message row (invalid when nothing is loaded)."""
        return self.index_for_message(self._newest) if self._newest is not None else QModelIndex()

    # -- Qt model ------------------------------------------------------------------------------
    def index(self, row: int, column: int, parent: _Index = QModelIndex()) -> QModelIndex:
        owner = parent.internalPointer() if parent.isValid() else self._root
        if 0 <= row < len(owner.children) and 0 <= column < len(COLUMNS):
            return self.createIndex(row, column, owner.children[row])
        return QModelIndex()

    def parent(self, index: _Index = QModelIndex()) -> QModelIndex:  # type: ignore[override]
        if not index.isValid():
            return QModelIndex()
        up = index.internalPointer().parent
        if up is None or up is self._root:
            return QModelIndex()
        return self.createIndex(up.row, 0, up)

    def rowCount(self, parent: _Index = QModelIndex()) -> int:
        if not parent.isValid():
            return len(self._root.children)
        return len(parent.internalPointer().children) if parent.column() == 0 else 0

    def columnCount(self, parent: _Index = QModelIndex()) -> int:
        return len(COLUMNS)

    def hasChildren(self, parent: _Index = QModelIndex()) -> bool:
        if not parent.isValid():
            return bool(self._root.children)
        return parent.column() == 0 and bool(parent.internalPointer().children)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        return None

    def flags(self, index: _Index) -> Qt.ItemFlag:
        if not index.isValid():
            return _NO_FLAGS
        return _GROUP_FLAGS if index.internalPointer().children else _LEAF_FLAGS

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        """Roles are dispatched through a table: the view asks for a dozen roles per cell per paint."""
        handler = _ROLES.get(role)
        if handler is None or not index.isValid():
            return None
        return handler(self, index.internalPointer(), index.column())

    def _foreground(self, node: Node) -> QBrush | None:
        if node.kind == "boundary":
            return QBrush(theme.color("boundary_text"))
        if node.kind == "gap":
            return QBrush(theme.color("danger" if node.failed else "text_muted"))
        return QBrush(theme.color("text_dim")) if node.compacted else None

    @staticmethod
    def _font(node: Node) -> QFont | None:
        if node.kind not in ("boundary", "unit", "gap"):
            return None
        font = QFont()
        if node.kind == "gap":
            font.setItalic(True)
        else:
            font.setWeight(QFont.Weight.DemiBold if node.kind == "unit" else QFont.Weight.Bold)
        return font

    def _display(self, node: Node, col: int) -> str:
        if col == COL_TEXT:
            return node.label
        if col == COL_TOKENS:
            return "" if node.tokens is None else f"{node.tokens:,}"
        if col == COL_MARKERS:
            return " · ".join(node.markers)
        if node.kind == "message" and node.first_id is not None:
            return str(node.first_id)
        return ""

    def _icon(self, node: Node) -> Any:
        if not node.icon:
            return None
        if node.kind == "boundary":
            token = "boundary_text"
        elif node.compacted:
            token = "text_dim"
        elif MARKER_ORPHAN in node.markers:
            token = "danger"
        else:
            token = {"user": "cat_user", "assistant": "cat_assistant", "tool": "cat_tool_results", "system": "cat_system"}.get(node.icon, "text_muted")
        return theme.icon("orphan" if node.kind == "message" and MARKER_ORPHAN in node.markers else node.icon, token)

    def _tooltip(self, node: Node) -> str | None:
        lines: list[str] = []
        if node.kind == "boundary" and self._boundary is not None:
            return "Everything above is represented only by the rolling summary.\n" + self._boundary.headline()
        if node.kind == "gap":
            where = " and ".join(filter(None, (node.first_id is not None and f"after #{node.first_id}", node.last_id is not None and f"before #{node.last_id}")))
            return f"Messages {where or 'of this thread'} are not loaded yet: they load when this row scrolls into view, or press Enter."
        if node.compacted:
            lines.append("compacted: the model sees only the summary of this")
        if node.info is not None:
            offload = self._offloads.get(node.info.id)
            if offload is not None:
                full = node.original_tokens if node.original_tokens is not None else offload.original_tokens
                seen = node.tokens if node.original_tokens is not None and node.tokens is not None else offload.preview_tokens
                lines.append(f"pruned: the model sees a {seen:,}-token preview of {full:,} tokens ({full:,} → {seen:,})")
            elif MARKER_PRUNED in node.markers:
                lines.append("pruned: the model sees a preview")
        if MARKER_ORPHAN in node.markers:
            lines.append("orphan: answers no pending tool call")
        if MARKER_OPEN in node.markers:
            lines.append("open round: a call has no result yet")
        if MARKER_CONTINUES in node.markers:
            lines.append("continues: the rest of this is in messages not loaded yet")
        return "\n".join(lines) or None


_NO_FLAGS = Qt.ItemFlag.NoItemFlags
_GROUP_FLAGS = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
_LEAF_FLAGS = _GROUP_FLAGS | Qt.ItemFlag.ItemNeverHasChildren
_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
#: role -> (model, node, column) -> value
_ROLES: dict[int, Any] = {
    int(Qt.ItemDataRole.DisplayRole): lambda m, n, c: m._display(n, c),
    NodeKindRole: lambda m, n, c: n.kind,
    MessageRole: lambda m, n, c: n.info,
    MessageIdRole: lambda m, n, c: n.info.id if n.info else None,
    MarkersRole: lambda m, n, c: n.markers,
    TokensRole: lambda m, n, c: n.tokens,
    CompactedRole: lambda m, n, c: n.compacted,
    IconRole: lambda m, n, c: n.icon,
    BoundaryRole: lambda m, n, c: m.boundary if n.kind == "boundary" else None,
    OffloadRole: lambda m, n, c: m.offload(n.info.id) if n.info else None,
    int(Qt.ItemDataRole.DecorationRole): lambda m, n, c: m._icon(n) if c == COL_TEXT else None,
    int(Qt.ItemDataRole.ForegroundRole): lambda m, n, c: m._foreground(n),
    int(Qt.ItemDataRole.BackgroundRole): lambda m, n, c: QBrush(theme.color("boundary")) if n.kind == "boundary" else None,
    int(Qt.ItemDataRole.FontRole): lambda m, n, c: TimelineModel._font(n),
    int(Qt.ItemDataRole.ToolTipRole): lambda m, n, c: m._tooltip(n),
    int(Qt.ItemDataRole.TextAlignmentRole): lambda m, n, c: _RIGHT if c in (COL_TOKENS, COL_ID) else None,
}
