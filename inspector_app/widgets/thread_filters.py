"""The thread list's Filters button (issue 26): the filters people need (busy now, over the
threshold, over the hint line, a rejected summary, compacted in the last day), imported from a
format (or written live), and the sort, in one compact menu. The button says how many filters
are on; the database does the filtering (``ThreadQuery``)."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QMenu, QToolButton, QWidget

from engine.core.views import SOURCE_FORMATS, THREAD_FILTERS, THREAD_SORTS, ThreadQuery

from ..models.threads import SORT_LABELS

#: each filter in words (the menu's entries, in THREAD_FILTERS' order)
FILTER_LABELS: dict[str, str] = {
    "busy": "Busy now",
    "over_threshold": "Over the threshold",
    "over_hint": "Over the hint line (85%)",
    "rejected_summary": "Has a rejected summary",
    "compacted_last_day": "Compacted in the last day",
}
#: ``ThreadQuery.source_format``: any, written live, or imported from one format
LIVE = "live"


class ThreadFilters(QToolButton):
    """``changed(filters, source_format, sort, descending)`` when the user picks something."""

    changed = Signal(frozenset, object, str, bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("threadFilters")
        self.setText("Filters")
        self.setToolTip("Filter and sort the threads (the database does both)")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self)
        menu.setObjectName("threadFiltersMenu")
        self.filter_actions: dict[str, QAction] = {}
        for name in THREAD_FILTERS:
            action = menu.addAction(FILTER_LABELS.get(name, name))
            action.setCheckable(True)
            action.setObjectName(f"filter_{name}")
            action.toggled.connect(lambda _on: self._emit())
            self.filter_actions[name] = action
        sources = menu.addMenu("Imported from")
        sources.setObjectName("filterSource")
        self.source_group = QActionGroup(self)
        self.source_actions: dict[str | None, QAction] = {}
        for value, label in [(None, "Any source"), (LIVE, "Written live (not imported)")] + sorted(((k, f.name) for k, f in SOURCE_FORMATS.items()), key=lambda kv: kv[1].lower()):
            action = sources.addAction(label[:1].upper() + label[1:])
            action.setCheckable(True)
            action.setData(value)
            self.source_group.addAction(action)
            action.triggered.connect(lambda _c=False: self._emit())
            self.source_actions[value] = action
        self.source_actions[None].setChecked(True)
        menu.addSeparator()
        order = menu.addMenu("Sort by")
        order.setObjectName("sortBy")
        self.sort_group = QActionGroup(self)
        self.sort_actions: dict[str, QAction] = {}
        for sort in THREAD_SORTS:
            action = order.addAction(SORT_LABELS.get(sort, sort).capitalize())
            action.setCheckable(True)
            self.sort_group.addAction(action)
            action.triggered.connect(lambda _c=False: self._emit())
            self.sort_actions[sort] = action
        order.addSeparator()
        self.descending_action = order.addAction("Descending")
        self.descending_action.setCheckable(True)
        self.descending_action.toggled.connect(lambda _on: self._emit())
        menu.addSeparator()
        self.clear_action = menu.addAction("Clear filters")
        self.clear_action.triggered.connect(self.clear)
        self.setMenu(menu)
        self._quiet = False
        self.show_query(ThreadQuery(sort="key", descending=False))

    def filters(self) -> frozenset[str]:
        return frozenset(name for name, a in self.filter_actions.items() if a.isChecked())

    def source(self) -> str | None:
        checked = self.source_group.checkedAction()
        return checked.data() if checked is not None else None

    def sort(self) -> str:
        return next((s for s, a in self.sort_actions.items() if a.isChecked()), "key")

    def set_filter(self, name: str, on: bool = True) -> None:
        """Turn a filter on or off as the user would (emits :attr:`changed`)."""
        self.filter_actions[name].setChecked(on)

    def set_source(self, value: str | None) -> None:
        self.source_actions[value].trigger()

    def set_sort(self, sort: str, descending: bool) -> None:
        self._quiet = True
        self.sort_actions[sort].setChecked(True)
        self.descending_action.setChecked(descending)
        self._quiet = False
        self._emit()

    def clear(self) -> None:
        self._quiet = True
        for a in self.filter_actions.values():
            a.setChecked(False)
        self.source_actions[None].setChecked(True)
        self._quiet = False
        self._emit()

    def show_query(self, query: ThreadQuery) -> None:
        """Check what ``query`` uses (a heading click, a fleet band), without emitting."""
        self._quiet = True
        for name, a in self.filter_actions.items():
            a.setChecked(name in query.filters)
        action = self.source_actions.get(query.source_format)
        if action is not None:
            action.setChecked(True)
        if query.sort in self.sort_actions:
            self.sort_actions[query.sort].setChecked(True)
        self.descending_action.setChecked(query.descending)
        self._quiet = False
        self._label()

    def _label(self) -> None:
        on = len(self.filters()) + (self.source() is not None)
        self.setText(f"Filters ({on})" if on else "Filters")

    def _emit(self) -> None:
        if self._quiet:
            return
        self._label()
        self.changed.emit(self.filters(), self.source(), self.sort(), self.descending_action.isChecked())
