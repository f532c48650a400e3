"""The dropped specifics of a compaction (the summary card's, a source compaction's card's and the
before/after view's): :class:`DroppedView` reads them without Qt from a ``summary`` event's data or
``compaction_diff(...).dropped``; :class:`DroppedModel` and :class:`DroppedList` show them. Moved out
of the detail pane (issue 24) so the detail panel and the before/after view share them without a cycle."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping, Sequence

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QBrush
from PySide6.QtWidgets import QHeaderView, QStyleOptionViewItem, QTreeView, QWidget

from engine.core import figures
from engine.core.events import written_by
from engine.core.views import CompactionEvent

from .. import theme
from ..models.table import RecordTableModel
from ..models.timeline import BoundaryInfo

# == dropped specifics (Qt-free) ================================================================

#: the keys of a ``summary`` event's data that describe the dropped specifics (SPEC14 §S)
DROPPED_KEYS: tuple[str, ...] = ("specifics_seen", "dropped_specifics", "dropped_referenced", "dropped", "dropped_truncated")
REFERENCED_NOTE = "the current request or the retained tail still refers to it"


@dataclass(frozen=True, slots=True)
class DroppedItem:
    """One specific the compaction dropped; ``referenced``: the request or the retained tail names it."""

    kind: str
    value: str
    referenced: bool


def _count(data: Mapping[str, Any], key: str, problems: list[str]) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        problems.append(f"{key} is not a count ({str(value)[:40]!r})")
        return None
    return value


def _items(raw: Any, problems: list[str]) -> tuple[DroppedItem, ...] | None:
    """The ``dropped`` list (dicts or DroppedSpecific-like objects); entries that cannot be read are
    counted in ``problems``, the rest kept."""
    if raw is None:
        return None
    if isinstance(raw, (str, bytes)) or not isinstance(raw, (list, tuple)):
        problems.append(f"the dropped list is not a list ({type(raw).__name__})")
        return None
    out: list[DroppedItem] = []
    bad = 0
    for entry in raw:
        get = entry.get if isinstance(entry, Mapping) else (lambda k, _e=entry: getattr(_e, k, None))
        kind, value, referenced = get("kind"), get("value"), get("referenced")
        if not isinstance(value, str) or not value or not (kind is None or isinstance(kind, str)) or not (referenced is None or isinstance(referenced, bool)):
            bad += 1
            continue
        out.append(DroppedItem(kind or "?", value, bool(referenced)))
    if bad:
        problems.append(f"{bad} entr{'y' if bad == 1 else 'ies'} of the dropped list could not be read")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class DroppedView:
    """What a card says about the specifics one compaction dropped.

    ``state``: ``recorded`` (counts known), ``not_recorded`` (an older event, or no event for this
    compaction), ``reading`` (asked for, not answered yet) or ``error`` (nothing usable: ``problems``
    says why). ``problems`` may also be set on a recorded view (some entries unreadable)."""

    state: Literal["recorded", "not_recorded", "reading", "error"]
    seen: int | None = None
    count: int = 0
    referenced: int = 0
    items: tuple[DroppedItem, ...] = ()
    truncated: bool = False
    problems: tuple[str, ...] = ()
    why: str | None = None  # why not recorded
    #: who wrote the summary (``engine.core.events.written_by``) and who asked for it (a manual
    #: compaction's ``operator``), from the same summary event (issue #28)
    written_by: str | None = None
    operator: str | None = None

    @classmethod
    def not_recorded(cls, why: str | None = None) -> "DroppedView":
        return cls("not_recorded", why=why)

    @classmethod
    def reading(cls) -> "DroppedView":
        return cls("reading")

    @classmethod
    def failed(cls, message: str) -> "DroppedView":
        return cls("error", problems=(message,))

    @classmethod
    def from_event_data(cls, data: Any) -> "DroppedView":
        """From a ``summary`` event's data; tolerant of missing keys (older events: not recorded)
        and of wrong types (shown as a problem, never raised)."""
        if not isinstance(data, Mapping):
            return cls.failed("the event's data is not an object")
        view = cls._from_event_data(data)
        operator = data.get("operator")
        return replace(view, written_by=written_by(data), operator=operator if isinstance(operator, str) and operator else None)

    @classmethod
    def _from_event_data(cls, data: Mapping[str, Any]) -> "DroppedView":
        if all(data.get(k) is None for k in DROPPED_KEYS):
            return cls.not_recorded("this compaction was recorded before dropped specifics were tracked")
        problems: list[str] = []
        seen = _count(data, "specifics_seen", problems)
        count = _count(data, "dropped_specifics", problems)
        referenced = _count(data, "dropped_referenced", problems)
        items = _items(data.get("dropped"), problems)
        truncated = data.get("dropped_truncated")
        if truncated is not None and not isinstance(truncated, bool):
            problems.append(f"dropped_truncated is not true/false ({str(truncated)[:40]!r})")
            truncated = None
        return cls._make(seen, count, referenced, items, bool(truncated), problems)

    @classmethod
    def from_specifics(cls, dropped: Any) -> "DroppedView":
        """From a ``DroppedSpecifics`` (``seen``, ``dropped``, ``truncated``, ``dropped_count``,
        ``referenced_count``: what ``CompactionDiff.dropped`` holds); None is "not recorded"."""
        if dropped is None:
            return cls.not_recorded("no dropped specifics are recorded for this compaction")
        problems: list[str] = []
        fields = {k: getattr(dropped, k, None) for k in ("seen", "dropped_count", "referenced_count")}
        seen = _count(fields, "seen", problems)
        count = _count(fields, "dropped_count", problems)
        referenced = _count(fields, "referenced_count", problems)
        items = _items(getattr(dropped, "dropped", None), problems)
        truncated = getattr(dropped, "truncated", False)
        return cls._make(seen, count, referenced, items, truncated is True, problems)

    @classmethod
    def _make(cls, seen: int | None, count: int | None, referenced: int | None, items: tuple[DroppedItem, ...] | None, truncated: bool, problems: list[str]) -> "DroppedView":
        if count is None and items is None:
            return cls("error", seen=seen, problems=tuple(problems) or ("the number of dropped specifics is not recorded",))
        listed = items or ()
        count = count if count is not None else len(listed)
        if referenced is None:
            referenced = sum(1 for i in listed if i.referenced)
        ordered = tuple(sorted(listed, key=lambda i: not i.referenced))  # what the model still needs first
        return cls("recorded", seen, count, referenced, ordered, truncated or len(listed) < count, tuple(problems))

    # -- words ---------------------------------------------------------------------------------
    def headline(self) -> str:
        if self.state == "reading":
            return "Dropped specifics: reading …"
        if self.state == "not_recorded":
            return "Dropped specifics: not recorded" + (f" ({self.why})" if self.why else "")
        if self.state == "error":
            return "Dropped specifics cannot be shown"
        seen = f" of {self.seen:,} seen" if self.seen is not None else ""
        if not self.count:
            return f"No specifics dropped{f' ({self.seen:,} seen before the compaction)' if self.seen is not None else ''}: everything it saw is in the summary or still on the surface"
        listed = f" (the list shows the {figures.capped(len(self.items), self.count)})" if len(self.items) < self.count else ""
        return f"{figures.plural(self.count, 'specific')} dropped{seen}: in neither the summary nor what the model still sees{listed}"

    def warning(self) -> str | None:
        """The card's warning, when something dropped is still referred to."""
        if self.state != "recorded" or not self.referenced:
            return None
        n = self.referenced
        return (
            f"{n:,} dropped specific{'s are' if n != 1 else ' is'} still referred to by the current request or the retained tail: "
            "the model can no longer see what " + ("they resolve to" if n != 1 else "it resolves to")
        )

    def error(self) -> str | None:
        return "; ".join(self.problems) if self.problems else None

    def lines(self) -> list[str]:
        """The list as text (kind, value, referenced), for the clipboard and the export."""
        out = [f"{i.kind}\t{i.value}" + ("\treferenced" if i.referenced else "") for i in self.items]
        if self.truncated:
            out.append(f"… {self.count - len(self.items):,} more not recorded (the list is capped)")
        return out


def boundary_dropped(events: Sequence[CompactionEvent], boundary: BoundaryInfo, conversation_id: int | None = None) -> DroppedView:
    """The dropped specifics of the compaction that made ``boundary``: the newest ``summary`` event
    (of ``conversation_id`` when given) whose data ends at this boundary, preferring the one of the
    boundary's generation; "not recorded" when there is none."""
    match: CompactionEvent | None = None
    for e in reversed(events):
        if e.kind != "summary" or (conversation_id is not None and e.conversation_id != conversation_id):
            continue
        data = e.data if isinstance(e.data, Mapping) else {}
        if data.get("boundary_after") != boundary.boundary:
            continue
        if data.get("generation_after") == boundary.generation:
            match = e
            break
        match = match or e
    if match is None:
        return DroppedView.not_recorded("no summary event of this boundary was recorded")
    return DroppedView.from_event_data(match.data)


class DroppedModel(RecordTableModel[DroppedItem]):
    """Kind, value and whether the request or retained tail still refers to it (those first)."""

    COLUMNS = ("Kind", "Value", "Referenced")

    def set_items(self, items: Sequence[DroppedItem]) -> None:
        self.beginResetModel()
        self._rows = list(items)
        self.endResetModel()

    def items(self) -> list[DroppedItem]:
        return list(self._rows)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        item, col = self._rows[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return (item.kind, item.value, "yes" if item.referenced else "")[col]
        if role == Qt.ItemDataRole.ToolTipRole:
            return f"{item.kind}: {item.value}" + (f"\n{REFERENCED_NOTE}, but the model can no longer see it" if item.referenced else "")
        if role == Qt.ItemDataRole.ForegroundRole and item.referenced:
            return QBrush(theme.color("danger"))
        if role == Qt.ItemDataRole.DecorationRole and col == 2 and item.referenced:
            return theme.icon("warning", "danger")
        return None


class DroppedList(QTreeView):
    """The dropped list. Its narrow columns (kind, referenced) fit their contents, measured on one
    row per distinct value: a cell's width depends only on its kind / on whether it is referenced,
    so the width is that of every row, without asking the model for each row each time the card
    is polished or the list reset (issue #11: 500 rows were 80,000 ``data`` calls a show).

    Set up once here for both places that show the list (the summary card, the before/after view):
    flat rows of one height, the value elided in the middle and stretched between the two narrow
    columns."""

    def __init__(self, model: DroppedModel, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(name)
        self.setModel(model)
        self.setRootIsDecorated(False)
        self.setUniformRowHeights(True)
        self.setAllColumnsShowFocus(True)
        self.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        head = self.header()
        head.setStretchLastSection(False)
        head.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        head.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        head.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)

    def sizeHintForColumn(self, column: int) -> int:
        model = self.model()
        if not isinstance(model, DroppedModel) or column not in (0, 2) or not model.rowCount():
            return super().sizeHintForColumn(column)
        self.ensurePolished()
        option = QStyleOptionViewItem()
        self.initViewItemOption(option)
        delegate = self.itemDelegateForColumn(column) or self.itemDelegate()
        rows: dict[object, int] = {}
        for row, item in enumerate(model.items()):
            rows.setdefault(item.kind if column == 0 else item.referenced, row)
        return max(delegate.sizeHint(option, model.index(row, column)).width() for row in rows.values())
