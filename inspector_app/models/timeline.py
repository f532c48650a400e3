"""The timeline of one thread: units → tool rounds → messages, in physical order, paged by id.

A thin adapter: grouping comes from ``engine.units`` (the same cut points compaction uses), token
counts from ``engine.meter`` (counted on a worker thread when the page is loaded). The compaction
boundary is a row of its own between the compacted history (dimmed) and the surface.

Paging is keyset paging driven by ``canFetchMore``/``fetchMore``: ``fetchMore`` emits
:attr:`TimelineModel.fetchRequested` with the last loaded id and the owner answers, off the GUI
thread, with :meth:`TimelineModel.append_page`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterator, Mapping, Sequence

from PySide6.QtCore import QAbstractItemModel, QModelIndex, QPersistentModelIndex, Qt, Signal
from PySide6.QtGui import QBrush, QFont

from engine.messages import META_PRUNED, Message
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

PREVIEW_CHARS = 240
_WS = re.compile(r"\s+")
_Index = QModelIndex | QPersistentModelIndex


def one_line(text: str, limit: int = PREVIEW_CHARS) -> str:
    """Whitespace collapsed to single spaces and cut to ``limit`` characters (the view elides)."""
    flat = _WS.sub(" ", text[: limit * 4]).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class TimelinePage:
    """One page of messages with their token counts and the offloads of the pruned ones.

    ``tokens`` count each message as the model sees it (a pruned result as its preview);
    ``original_tokens`` count the full text of the pruned ones."""

    messages: tuple[StoredMessage, ...]
    tokens: Mapping[int, int] = field(default_factory=dict)
    offloads: Mapping[int, Offload] = field(default_factory=dict)
    exhausted: bool = False
    original_tokens: Mapping[int, int] = field(default_factory=dict)


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
    """One row of the tree: a unit, a tool round, a message or the boundary."""

    __slots__ = ("kind", "parent", "children", "row", "stored", "label", "icon", "tokens", "original_tokens", "markers", "compacted", "first_id", "last_id")

    def __init__(self, kind: str, parent: "Node | None" = None) -> None:
        self.kind = kind
        self.parent = parent
        self.children: list[Node] = []
        self.row = 0
        self.stored: StoredMessage | None = None
        self.label = ""
        self.icon = ""
        self.tokens: int | None = None  # what the model sees
        self.original_tokens: int | None = None  # the full text, when it was pruned
        self.markers: tuple[str, ...] = ()
        self.compacted = False
        self.first_id: int | None = None
        self.last_id: int | None = None

    def add(self, child: "Node") -> None:
        child.parent = self
        child.row = len(self.children)
        self.children.append(child)

    def walk(self) -> Iterator["Node"]:
        """This node's descendants in display order."""
        for child in self.children:
            yield child
            yield from child.walk()


def message_markers(stored: StoredMessage, *, orphan: bool = False, open_round: bool = False) -> tuple[str, ...]:
    """The markers a message row carries."""
    m = stored.message
    out: list[str] = []
    if stored.offload_sha256 or m.metadata.get(META_PRUNED):
        out.append(MARKER_PRUNED)
    if m.is_synthetic:
        out.append(MARKER_SYNTHETIC)
    if m.is_ephemeral:
        out.append(MARKER_EPHEMERAL)
    if open_round and m.tool_calls:
        out.append(MARKER_OPEN)
    if orphan:
        out.append(MARKER_ORPHAN)
    return tuple(out)


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


class _Builder:
    """Turns a run of stored messages into top-level nodes (units with rounds and messages)."""

    def __init__(self, by_identity: Mapping[int, StoredMessage], tokens: Mapping[int, int], original: Mapping[int, int], boundary: int | None) -> None:
        self._stored = by_identity
        self._tokens = tokens
        self._original = original
        self._boundary = boundary

    def _message_node(self, m: Message, *, orphan: bool, open_round: bool) -> Node:
        stored = self._stored[id(m)]
        node = Node("message")
        node.stored = stored
        node.label = message_preview(m)
        node.icon = m.role
        node.tokens = self._tokens.get(stored.id)
        node.original_tokens = self._original.get(stored.id)
        node.markers = message_markers(stored, orphan=orphan, open_round=open_round)
        node.first_id = node.last_id = stored.id
        node.compacted = self._boundary is not None and stored.id <= self._boundary
        return node

    def _group(self, kind: str, label: str, icon: str, children: list[Node], markers: tuple[str, ...]) -> Node:
        node = Node(kind)
        node.label, node.icon, node.markers = label, icon, markers
        for child in children:
            node.add(child)
        counted = [c.tokens for c in children if c.tokens is not None]
        node.tokens = sum(counted) if counted else None
        ids = [i for c in children for i in (c.first_id, c.last_id) if i is not None]
        node.first_id, node.last_id = (min(ids), max(ids)) if ids else (None, None)
        node.compacted = bool(children) and all(c.compacted for c in children)
        return node

    def _round_children(self, r: ToolRound, orphan_ids: set[int]) -> list[Node]:
        return [self._message_node(m, orphan=id(m) in orphan_ids, open_round=r.open) for m in r.messages]

    def _round_node(self, r: ToolRound, orphan_ids: set[int]) -> list[Node]:
        """A round with tool calls becomes a round row; a lone message stays a message row."""
        children = self._round_children(r, orphan_ids)
        has_calls = any(m.tool_calls for m in r.messages)
        if len(children) == 1 and not has_calls:
            return children
        markers = tuple(x for x, on in ((MARKER_OPEN, r.open), (MARKER_ORPHAN, bool(r.orphans))) if on)
        return [self._group("round", _round_label(r.messages), "round", children, markers)]

    def unit_node(self, unit: Unit) -> Node:
        orphan_ids = {id(m) for m in unit.orphans}
        markers = tuple(x for x, on in ((MARKER_OPEN, unit.open), (MARKER_ORPHAN, bool(unit.orphans))) if on)
        msgs = unit.messages
        if unit.kind == "round":
            r = ToolRound(msgs, unit.open, unit.orphans)
            children = self._round_children(r, orphan_ids)
            return self._group("unit", _round_label(msgs) + " · running turn", "round", children, markers)
        cut = next((i + 1 for i, m in enumerate(msgs) if m.role == "user"), 0)
        head, rest = msgs[:cut], msgs[cut:]
        user = head[-1] if head else None
        children: list[Node] = []
        if unit.kind == "turn_user":
            children = [self._message_node(m, orphan=id(m) in orphan_ids, open_round=False) for m in msgs]
            label = "Running turn · " + (message_preview(user) if user else "")
            return self._group("unit", one_line(label), "turn", children, markers)
        children = [self._message_node(m, orphan=False, open_round=False) for m in head]
        for r in split_rounds(rest):
            children.extend(self._round_node(r, orphan_ids))
        label = f"Turn · {message_preview(user)}" if user else "Turn (continued)"
        return self._group("unit", one_line(label), "turn", children, markers)


class TimelineModel(QAbstractItemModel):
    """Units, tool rounds and messages of one thread, with the boundary row; paged by id."""

    #: the view wants more rows: load the page after this id (``None`` = from the start)
    fetchRequested = Signal(object)

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._root = Node("root")
        self._key: str | None = None
        self._messages: list[StoredMessage] = []
        self._tokens: dict[int, int] = {}
        self._original_tokens: dict[int, int] = {}
        self._offloads: dict[int, Offload] = {}
        self._boundary: BoundaryInfo | None = None
        self._running_turn = False
        self._exhausted = True
        self._loading = False
        self._failed = False

    # -- state ---------------------------------------------------------------------------------
    @property
    def key(self) -> str | None:
        return self._key

    @property
    def boundary(self) -> BoundaryInfo | None:
        return self._boundary

    @property
    def exhausted(self) -> bool:
        return self._exhausted

    @property
    def loading(self) -> bool:
        return self._loading

    def loaded_count(self) -> int:
        return len(self._messages)

    def last_id(self) -> int | None:
        return self._messages[-1].id if self._messages else None

    def offload(self, message_id: int) -> Offload | None:
        return self._offloads.get(message_id)

    def reset(self, key: str | None, *, boundary: BoundaryInfo | None = None, running_turn: bool = False) -> None:
        """Forget everything and start over for ``key`` (pages are requested through fetchMore)."""
        self.beginResetModel()
        self._root = Node("root")
        self._key = key
        self._messages, self._tokens, self._original_tokens, self._offloads = [], {}, {}, {}
        self._boundary = boundary
        self._running_turn = running_turn
        self._exhausted = key is None
        self._loading = self._failed = False
        self.endResetModel()

    def cancel_fetch(self) -> None:
        """The owner declined a requested page (not needed yet): fetchMore may ask again."""
        self._loading = False

    def page_failed(self) -> None:
        """The requested page could not be loaded: stop asking until the next reset."""
        self._loading = False
        self._failed = True

    def append_page(self, page: TimelinePage) -> None:
        """Add a page (ascending ids after the last loaded one); regroups only the trailing unit."""
        self._loading = False
        self._exhausted = page.exhausted
        last = self.last_id()
        fresh = [s for s in page.messages if last is None or s.id > last]
        self._tokens.update(page.tokens)
        self._original_tokens.update(page.original_tokens)
        self._offloads.update(page.offloads)
        if not fresh:
            return
        top = self._root.children
        start_row = len(top)
        start_msg = len(self._messages)
        for row in range(len(top) - 1, -1, -1):  # the trailing unit may continue on this page
            if top[row].kind != "boundary":
                start_row = row
                first = top[row].first_id
                start_msg = next(i for i, s in enumerate(self._messages) if s.id == first)
                break
        self._messages.extend(fresh)
        boundary_before = any(n.kind == "boundary" for n in top[:start_row])
        nodes = self._build(self._messages[start_msg:], boundary_placed=boundary_before)
        if start_row < len(top):
            self.beginRemoveRows(QModelIndex(), start_row, len(top) - 1)
            del top[start_row:]
            self.endRemoveRows()
        self.beginInsertRows(QModelIndex(), start_row, start_row + len(nodes) - 1)
        for node in nodes:
            self._root.add(node)
        self.endInsertRows()

    def _build(self, stored: Sequence[StoredMessage], *, boundary_placed: bool) -> list[Node]:
        b = self._boundary.boundary if self._boundary else None
        builder = _Builder({id(s.message): s for s in stored}, self._tokens, self._original_tokens, b)
        if b is None or boundary_placed:
            return self._units(builder, stored, running=self._running_turn and self._exhausted)
        before = [s for s in stored if s.id <= b]
        after = [s for s in stored if s.id > b]
        nodes = self._units(builder, before, running=False)
        if after or self._exhausted:
            nodes.append(self._boundary_node())
            nodes.extend(self._units(builder, after, running=self._running_turn and self._exhausted))
        return nodes

    @staticmethod
    def _units(builder: _Builder, stored: Sequence[StoredMessage], *, running: bool) -> list[Node]:
        units = build_units([s.message for s in stored], running_turn=running)
        return [builder.unit_node(u) for u in units]

    def _boundary_node(self) -> Node:
        assert self._boundary is not None
        node = Node("boundary")
        node.label = self._boundary.headline()
        node.icon = "boundary"
        node.tokens = self._boundary.summary_tokens
        node.first_id = node.last_id = None
        return node

    # -- lookups -------------------------------------------------------------------------------
    def node(self, index: _Index) -> Node | None:
        return index.internalPointer() if index.isValid() else None

    def index_of(self, node: Node, column: int = 0) -> QModelIndex:
        return self.createIndex(node.row, column, node)

    def index_for_message(self, message_id: int) -> QModelIndex:
        node = next((n for n in self._root.walk() if n.kind == "message" and n.first_id == message_id), None)
        return self.index_of(node) if node else QModelIndex()

    def boundary_index(self) -> QModelIndex:
        node = next((n for n in self._root.children if n.kind == "boundary"), None)
        return self.index_of(node) if node else QModelIndex()

    def message_nodes(self) -> list[Node]:
        return [n for n in self._root.walk() if n.kind == "message"]

    def newest_message_index(self) -> QModelIndex:
        """The last loaded message row (invalid when nothing is loaded)."""
        nodes = self.message_nodes()
        return self.index_of(nodes[-1]) if nodes else QModelIndex()

    def find(self, text: str, after: QModelIndex | None = None, *, wrap: bool = True) -> QModelIndex:
        """The next loaded message after ``after`` (wrapping to the start if ``wrap``) whose text
        contains ``text``, case-insensitive."""
        needle = text.casefold().strip()
        if not needle:
            return QModelIndex()
        nodes = self.message_nodes()
        current = self.node(after) if after is not None else None
        start = next((i + 1 for i, n in enumerate(nodes) if n is current), 0)
        for n in nodes[start:] + (nodes[:start] if wrap else []):
            m = n.stored.message if n.stored else None
            if m and (needle in m.content.casefold() or any(needle in c.arguments.casefold() or needle in c.name.casefold() for c in m.tool_calls)):
                return self.index_of(n)
        return QModelIndex()

    # -- Qt model ------------------------------------------------------------------------------
    def index(self, row: int, column: int, parent: _Index = QModelIndex()) -> QModelIndex:
        owner = self.node(parent) or self._root
        if 0 <= row < len(owner.children) and 0 <= column < len(COLUMNS):
            return self.createIndex(row, column, owner.children[row])
        return QModelIndex()

    def parent(self, index: _Index = QModelIndex()) -> QModelIndex:  # type: ignore[override]
        node = self.node(index)
        if node is None or node.parent is None or node.parent is self._root:
            return QModelIndex()
        return self.createIndex(node.parent.row, 0, node.parent)

    def rowCount(self, parent: _Index = QModelIndex()) -> int:
        if parent.isValid() and parent.column() != 0:
            return 0
        return len((self.node(parent) or self._root).children)

    def columnCount(self, parent: _Index = QModelIndex()) -> int:
        return len(COLUMNS)

    def hasChildren(self, parent: _Index = QModelIndex()) -> bool:
        return self.rowCount(parent) > 0

    def canFetchMore(self, parent: _Index) -> bool:
        return not parent.isValid() and self._key is not None and not (self._exhausted or self._loading or self._failed)

    def fetchMore(self, parent: _Index) -> None:
        if not self.canFetchMore(parent):
            return
        self._loading = True
        self.fetchRequested.emit(self.last_id())

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        return None

    def flags(self, index: _Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        node = self.node(index)
        if node is None:
            return None
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self._display(node, col)
        if role == NodeKindRole:
            return node.kind
        if role == MessageRole:
            return node.stored
        if role == MessageIdRole:
            return node.stored.id if node.stored else None
        if role == MarkersRole:
            return node.markers
        if role == TokensRole:
            return node.tokens
        if role == CompactedRole:
            return node.compacted
        if role == IconRole:
            return node.icon
        if role == BoundaryRole:
            return self._boundary if node.kind == "boundary" else None
        if role == OffloadRole:
            return self._offloads.get(node.stored.id) if node.stored else None
        if role == Qt.ItemDataRole.DecorationRole and col == COL_TEXT:
            return self._icon(node)
        if role == Qt.ItemDataRole.ForegroundRole:
            if node.kind == "boundary":
                return QBrush(theme.color("boundary_text"))
            if node.compacted:
                return QBrush(theme.color("text_dim"))
            return None
        if role == Qt.ItemDataRole.BackgroundRole and node.kind == "boundary":
            return QBrush(theme.color("boundary"))
        if role == Qt.ItemDataRole.FontRole and node.kind in ("boundary", "unit"):
            font = QFont()
            font.setWeight(QFont.Weight.DemiBold if node.kind == "unit" else QFont.Weight.Bold)
            return font
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(node)
        if role == Qt.ItemDataRole.TextAlignmentRole and col in (COL_TOKENS, COL_ID):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

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
        if node.compacted:
            lines.append("compacted: the model sees only the summary of this")
        if node.stored is not None:
            offload = self._offloads.get(node.stored.id)
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
        return "\n".join(lines) or None
