"""The timeline of one thread as a Qt item model: a thin ``QAbstractItemModel`` over
:class:`inspector_app.logic.timeline.Timeline`.

Everything that is not Qt — the page types, the unit → round → message tree, the gap/segment
arithmetic, splicing and eviction — lives in the Qt-free package :mod:`inspector_app.logic.timeline`
(tested without a QApplication). This module turns the core's change notices into Qt's
begin/end signals, maps nodes to indexes and answers the roles (colours, fonts, icons come from
:mod:`inspector_app.theme`). The names the window and widgets use are re-exported from here.

The model keeps no message bodies: per message a bounded one-line preview, the shape grouping
needs (role, ids, call names) and its token count. The owner loads a body when it is selected.
"""

from __future__ import annotations

from typing import Any, Mapping

from PySide6.QtCore import QAbstractItemModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QBrush, QFont

from engine.core.views import Offload, SourceCompaction

from .. import theme
from ..logic.timeline import (
    COL_ID,
    COL_MARKERS,
    COL_TEXT,
    COL_TOKENS,
    COLUMNS,
    MARKER_CONTINUES,
    MARKER_EPHEMERAL,
    MARKER_OPEN,
    MARKER_ORPHAN,
    MARKER_PRUNED,
    MARKER_SYNTHETIC,
    NEWEST,
    PREVIEW_CHARS,
    UNKNOWN,
    BoundaryInfo,
    MessageRow,
    Node,
    PageRequest,
    Timeline,
    TimelinePage,
    message_markers,
    message_matches,
    message_preview,
    one_line,
)
from ..logic.timeline.tree import display_text, tooltip_text

__all__ = [
    "BoundaryRole", "COLUMNS", "COL_ID", "COL_MARKERS", "COL_TEXT", "COL_TOKENS", "CompactedRole", "IconRole", "MARKER_CONTINUES",
    "MARKER_EPHEMERAL", "MARKER_OPEN", "MARKER_ORPHAN", "MARKER_PRUNED", "MARKER_SYNTHETIC", "MarkersRole", "MessageIdRole",
    "MessageRole", "NEWEST", "SourceRole", "NodeKindRole", "OffloadRole", "PREVIEW_CHARS", "TokensRole", "UNKNOWN", "BoundaryInfo",
    "MessageRow", "Node", "PageRequest", "TimelineModel", "TimelinePage", "message_markers", "message_matches",
    "message_preview", "one_line",
]

NodeKindRole = Qt.ItemDataRole.UserRole + 1
MessageRole = Qt.ItemDataRole.UserRole + 2
MarkersRole = Qt.ItemDataRole.UserRole + 3
TokensRole = Qt.ItemDataRole.UserRole + 4
CompactedRole = Qt.ItemDataRole.UserRole + 5
MessageIdRole = Qt.ItemDataRole.UserRole + 6
IconRole = Qt.ItemDataRole.UserRole + 7
BoundaryRole = Qt.ItemDataRole.UserRole + 8
OffloadRole = Qt.ItemDataRole.UserRole + 9
SourceRole = Qt.ItemDataRole.UserRole + 10

_Index = QModelIndex | QPersistentModelIndex


class _Signals:
    """Turns the core's change notices into the model's begin/end calls and dataChanged."""

    def __init__(self, model: "TimelineModel") -> None:
        self._model = model

    def begin_reset(self) -> None:
        self._model.beginResetModel()

    def end_reset(self) -> None:
        self._model.endResetModel()

    def begin_insert(self, parent: Node, first: int, last: int) -> None:
        self._model.beginInsertRows(self._model._parent_index(parent), first, last)

    def end_insert(self) -> None:
        self._model.endInsertRows()

    def begin_remove(self, parent: Node, first: int, last: int) -> None:
        self._model.beginRemoveRows(self._model._parent_index(parent), first, last)

    def end_remove(self) -> None:
        self._model.endRemoveRows()

    def changed(self, node: Node) -> None:
        if node.parent is not None:
            m = self._model
            m.dataChanged.emit(m.createIndex(node.row, 0, node), m.createIndex(node.row, len(COLUMNS) - 1, node))

    def tokens_changed(self, parent: Node, first: int, last: int) -> None:
        """One notice for the token badges of ``parent``'s rows ``first..last``."""
        m, rows = self._model, parent.children
        m.dataChanged.emit(m.createIndex(first, COL_TOKENS, rows[first]), m.createIndex(last, COL_TOKENS, rows[last]), _TOKEN_ROLES)


class TimelineModel(QAbstractItemModel):
    """Units, tool rounds and messages of one thread, with the boundary row and gap rows."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.core = Timeline(_Signals(self))
        #: ids of the thread's pinned messages (``Service.steering.pins``): their rows carry a ``pinned`` marker
        self.pinned: frozenset[int] = frozenset()

    def set_pinned(self, ids: "frozenset[int] | set[int]") -> None:
        """The pinned messages of the open thread; the rows whose pin changed repaint."""
        ids = frozenset(ids)
        changed, self.pinned = ids ^ self.pinned, ids
        for mid in changed:
            index = self.index_for_message(mid)
            if index.isValid():
                self.dataChanged.emit(index.siblingAtColumn(0), index.siblingAtColumn(self.columnCount() - 1))

    def is_pinned(self, message_id: int | None) -> bool:
        return message_id is not None and message_id in self.pinned

    # -- the core, as the window uses it ---------------------------------------------------------
    @property
    def key(self) -> str | None:
        return self.core.key

    @property
    def boundary(self) -> BoundaryInfo | None:
        return self.core.boundary

    @property
    def reaches_end(self) -> bool:
        """The newest message of the thread is loaded (nothing unloaded after the last row)."""
        return self.core.reaches_end

    @property
    def reaches_start(self) -> bool:
        """The first message of the thread is loaded."""
        return self.core.reaches_start

    @property
    def exhausted(self) -> bool:
        """Everything is loaded: no gap row is left."""
        return self.core.exhausted

    @property
    def loading(self) -> bool:
        return self.core.loading

    def loaded_count(self) -> int:
        return self.core.loaded_count()

    def last_id(self) -> int | None:
        """The newest loaded message id."""
        return self.core.last_id()

    def offload(self, message_id: int) -> Offload | None:
        return self.core.offload(message_id)

    def contains(self, message_id: int) -> bool:
        return self.core.contains(message_id)

    def gaps(self) -> list[Node]:
        """The gap rows, top to bottom."""
        return self.core.gaps()

    def reset(
        self, key: str | None, *, boundary: BoundaryInfo | None = None, running_turn: bool = False, total: int | None = None,
        sources: tuple[SourceCompaction, ...] = (),
    ) -> None:  # fmt: skip
        """Forget everything and start over for ``key`` (the owner loads the first page);
        ``sources``: the compactions the thread's source recorded (rows of their own)."""
        self.core.reset(key, boundary=boundary, running_turn=running_turn, total=total, sources=sources)

    def source_indexes(self) -> list[QModelIndex]:
        """The loaded rows of the source's own compactions."""
        return [self.index_of(n) for n in self.core.source_nodes()]

    def set_total(self, total: int) -> None:
        """The thread's message count (from the service): the gap rows say how many are missing."""
        self.core.set_total(total)

    def set_running_turn(self, running: bool) -> bool:
        """The thread turned busy or idle: its last turn is regrouped in place (False: it cannot
        be regrouped alone, read the view again)."""
        return self.core.set_running_turn(running)

    def gap_for(self, message_id: int) -> Node | None:
        """The gap whose unloaded stretch could hold ``message_id``."""
        return self.core.gap_for(message_id)

    def gap_request(self, gap: Node, *, backward: bool, limit: int) -> PageRequest | None:
        """The read that fills ``gap`` from its lower side (``backward``) or upper side; ``None``
        while a read for it is in flight."""
        return self.core.gap_request(gap, backward=backward, limit=limit)

    def end_request(self, limit: int) -> PageRequest | None:
        """The read of the newest page (``None`` when it is loaded already)."""
        return self.core.end_request(limit)

    def gap_failed(self, gap: Node | None = None) -> None:
        """A read failed: the gap stops loading by itself (activating it retries)."""
        self.core.gap_failed(gap)

    def gap_cancelled(self, gap: Node | None = None) -> None:
        """A read was dropped (the view moved on): the gap may be asked again."""
        self.core.gap_cancelled(gap)

    def append_page(self, page: TimelinePage) -> None:
        """Add a page read forward after the newest loaded id (the first page when nothing is loaded)."""
        self.core.append_page(page)

    def insert_page(self, page: TimelinePage) -> int:
        """Splice a page in where its ids belong; returns how many messages were new."""
        return self.core.insert_page(page)

    def evict_before(self, row: int) -> int:
        """Forget the top-level rows above ``row`` (they become one gap row); returns how many
        messages were dropped."""
        return self.core.evict_before(row)

    def evict_after(self, row: int) -> int:
        """Forget the top-level rows below ``row`` (they become one gap row); returns how many
        messages were dropped."""
        return self.core.evict_after(row)

    def set_tokens(self, tokens: Mapping[int, int], original_tokens: Mapping[int, int] | None = None) -> None:
        """Token counts that arrived after their page: rows and their sums are updated in place."""
        self.core.set_tokens(tokens, original_tokens)

    def message_nodes(self) -> list[Node]:
        return self.core.message_nodes()

    def message_ids(self) -> list[int]:
        """Loaded message ids in display order (walks the tree: for tests and tools, not per frame)."""
        return self.core.message_ids()

    # -- lookups -------------------------------------------------------------------------------
    def _parent_index(self, node: Node) -> QModelIndex:
        return QModelIndex() if node is self.core.root else self.createIndex(node.row, 0, node)

    def node(self, index: _Index) -> Node | None:
        return index.internalPointer() if index.isValid() else None

    def index_of(self, node: Node, column: int = 0) -> QModelIndex:
        return self.createIndex(node.row, column, node)

    def index_for_message(self, message_id: int) -> QModelIndex:
        node = self.core.node_for(message_id)
        return self.index_of(node) if node else QModelIndex()

    def boundary_index(self) -> QModelIndex:
        node = self.core.boundary_node()
        return self.index_of(node) if node is not None else QModelIndex()

    def newest_message_index(self) -> QModelIndex:
        """The newest loaded message row (invalid when nothing is loaded)."""
        newest = self.core.last_id()
        return self.index_for_message(newest) if newest is not None else QModelIndex()

    # -- Qt model ------------------------------------------------------------------------------
    def index(self, row: int, column: int, parent: _Index = QModelIndex()) -> QModelIndex:
        owner = parent.internalPointer() if parent.isValid() else self.core.root
        if 0 <= row < len(owner.children) and 0 <= column < len(COLUMNS):
            return self.createIndex(row, column, owner.children[row])
        return QModelIndex()

    def parent(self, index: _Index = QModelIndex()) -> QModelIndex:  # type: ignore[override]
        if not index.isValid():
            return QModelIndex()
        up = index.internalPointer().parent
        if up is None or up is self.core.root:
            return QModelIndex()
        return self.createIndex(up.row, 0, up)

    def rowCount(self, parent: _Index = QModelIndex()) -> int:
        if not parent.isValid():
            return len(self.core.root.children)
        return len(parent.internalPointer().children) if parent.column() == 0 else 0

    def columnCount(self, parent: _Index = QModelIndex()) -> int:
        return len(COLUMNS)

    def hasChildren(self, parent: _Index = QModelIndex()) -> bool:
        if not parent.isValid():
            return bool(self.core.root.children)
        return parent.column() == 0 and bool(parent.internalPointer().children)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole and 0 <= section < len(COLUMNS):
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

    def _tooltip(self, node: Node) -> str | None:
        return tooltip_text(node, self.core.boundary, self.core.offload(node.info.id) if node.info is not None else None)


def _foreground(node: Node) -> QBrush | None:
    if node.kind == "boundary":
        return QBrush(theme.color("boundary_text"))
    if node.kind == "source":
        return QBrush(theme.color("info"))
    if node.kind == "gap":
        return QBrush(theme.color("danger" if node.failed else "text_muted"))
    return QBrush(theme.color("text_dim")) if node.compacted else None


def _background(node: Node) -> QBrush | None:
    if node.kind == "boundary":
        return QBrush(theme.color("boundary"))
    if node.kind == "source":  # the source's own boundary: a tint of its own, never our boundary colour
        tint = theme.color("info")
        tint.setAlpha(38)
        return QBrush(tint)
    return None


def _font(node: Node) -> QFont | None:
    if node.kind not in ("boundary", "unit", "gap", "source"):
        return None
    font = QFont()
    if node.kind in ("gap", "source"):
        font.setItalic(True)
        if node.kind == "source":
            font.setWeight(QFont.Weight.DemiBold)
    else:
        font.setWeight(QFont.Weight.DemiBold if node.kind == "unit" else QFont.Weight.Bold)
    return font


def _icon(node: Node) -> Any:
    if not node.icon:
        return None
    if node.kind == "boundary":
        token = "boundary_text"
    elif node.kind == "source":
        token = "info"
    elif node.compacted:
        token = "text_dim"
    elif MARKER_ORPHAN in node.markers:
        token = "danger"
    else:
        token = {"user": "cat_user", "assistant": "cat_assistant", "tool": "cat_tool_results", "system": "cat_system", "developer": "cat_system"}.get(node.icon, "text_muted")
    if node.kind == "message":  # every role and meta kind has its icon (theme.role_icon); an orphan shows as one
        name = "orphan" if MARKER_ORPHAN in node.markers else theme.role_icon(node.icon, node.info.shape.meta_kind if node.info is not None else None)
    else:
        name = node.icon
    return theme.icon(name, token)


#: the marker of a pinned message (kept verbatim through compaction; issue 23)
MARKER_PINNED = "pinned"

#: what a message row says when its source recorded no text for it (never a blank row)
PLACEHOLDER_EMPTY = "(empty)"
PLACEHOLDER_REDACTED = "[redacted by the source]"


def _display(node: Node, col: int) -> str:
    """The row's text; a message row with no text of its own says why in a labelled placeholder."""
    text = display_text(node, col)
    if col != COL_TEXT or node.kind != "message":
        return text
    flat = text.strip()
    if flat == "(thinking)":  # reasoning whose text the source withheld (redacted or encrypted)
        return f"(thinking) {PLACEHOLDER_REDACTED}"
    if not flat:
        return PLACEHOLDER_EMPTY
    shape = node.info.shape if node.info is not None else None
    if shape is not None and shape.role == "tool" and flat == f"{shape.name or shape.tool_call_id}:":  # a result with no output
        return f"{flat} {PLACEHOLDER_EMPTY}"
    return text


_TOKEN_ROLES = [int(Qt.ItemDataRole.DisplayRole), TokensRole, int(Qt.ItemDataRole.ToolTipRole)]
_NO_FLAGS = Qt.ItemFlag.NoItemFlags
_GROUP_FLAGS = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
_LEAF_FLAGS = _GROUP_FLAGS | Qt.ItemFlag.ItemNeverHasChildren
_RIGHT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
#: role -> (model, node, column) -> value
_ROLES: dict[int, Any] = {
    int(Qt.ItemDataRole.DisplayRole): lambda m, n, c: _display(n, c),
    NodeKindRole: lambda m, n, c: n.kind,
    MessageRole: lambda m, n, c: n.info,
    MessageIdRole: lambda m, n, c: n.info.id if n.info else None,
    MarkersRole: lambda m, n, c: (*n.markers, MARKER_PINNED) if n.info is not None and n.info.id in m.pinned else n.markers,
    TokensRole: lambda m, n, c: n.tokens,
    # a pinned message behind the boundary is still on the surface (issue 23): not shown as compacted
    CompactedRole: lambda m, n, c: n.compacted and not (n.info is not None and n.info.id in m.pinned),
    IconRole: lambda m, n, c: n.icon,
    BoundaryRole: lambda m, n, c: m.boundary if n.kind == "boundary" else None,
    OffloadRole: lambda m, n, c: m.offload(n.info.id) if n.info else None,
    SourceRole: lambda m, n, c: n.source,
    int(Qt.ItemDataRole.DecorationRole): lambda m, n, c: _icon(n) if c == COL_TEXT else None,
    int(Qt.ItemDataRole.ForegroundRole): lambda m, n, c: None if n.compacted and n.info is not None and n.info.id in m.pinned else _foreground(n),
    int(Qt.ItemDataRole.BackgroundRole): lambda m, n, c: _background(n),
    int(Qt.ItemDataRole.FontRole): lambda m, n, c: _font(n),
    int(Qt.ItemDataRole.ToolTipRole): lambda m, n, c: m._tooltip(n),
    int(Qt.ItemDataRole.TextAlignmentRole): lambda m, n, c: _RIGHT if c in (COL_TOKENS, COL_ID) else None,
}
