"""The timeline tree view: uniform one-line rows, jumps to the newest page, loads gap rows on sight.

Scrolling to the end never walks the thread page by page: End, Ctrl+End and :meth:`scrollToBottom`
emit :attr:`TimelineView.jumpToEnd` while the newest page is not loaded (the owner loads it and calls
:meth:`TimelineView.show_end`); Home and Ctrl+Home emit :attr:`TimelineView.jumpToStart` likewise. A gap row that scrolls into view emits :attr:`TimelineView.gapVisible`
with the side to read from: its lower side (backward) when it shows in the upper half of the
viewport, its upper side otherwise.

The vertical scroll bar is always shown: a first page that overflows the viewport would otherwise
make it appear, narrowing the viewport and the stretched Message column, and ``QTreeView`` repaints
the whole viewport a second time from its column-resize timer in a later event-loop turn (an
extra full paint of every freshly opened thread, landing before or after the first one depending
on what else that turn does, e.g. a thread that opens on a selected row).

:meth:`TimelineView.painted_since` is a future resolved once the viewport has painted after a
given moment: the window starts what can wait (the side panels' reads, token badges) only once the
rows it just loaded are on screen, so that work never competes with the paint the user is waiting
for (and never asks for a paint of its own when the rows were painted already).
"""

from __future__ import annotations

import asyncio
from contextlib import contextmanager
from typing import Any, Iterator

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt, QTimer, Signal
from PySide6.QtGui import QKeyEvent, QPaintEvent
from PySide6.QtWidgets import QAbstractItemView, QTreeView, QWidget

from ..models.timeline import TimelineModel


class TimelineView(QTreeView):
    """A QTreeView over a :class:`TimelineModel` (set with :meth:`setModel`)."""

    #: the newest page is wanted (End, Ctrl+End, scrollToBottom) and is not loaded
    jumpToEnd = Signal()
    #: the first page is wanted (Home, Ctrl+Home) and is not loaded
    jumpToStart = Signal()
    #: a gap row is on screen: (gap node, read backward from its lower side)
    gapVisible = Signal(object, bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setUniformRowHeights(True)
        # the viewport keeps its width whether or not the rows overflow it (see the module doc)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOn)
        self._check = QTimer(self)
        self._check.setSingleShot(True)
        self._check.setInterval(0)
        self._check.timeout.connect(self._emit_visible_gaps)
        self.verticalScrollBar().valueChanged.connect(self._schedule)
        self.expanded.connect(self._schedule)
        self.collapsed.connect(self._schedule)
        self._paint_waiters: list[asyncio.Future[None]] = []
        self._paints = 0

    def timeline(self) -> TimelineModel | None:
        model = self.model()
        return model if isinstance(model, TimelineModel) else None

    def setModel(self, model: Any) -> None:  # noqa: N802 (Qt name)
        super().setModel(model)
        for signal in (model.rowsInserted, model.rowsRemoved, model.modelReset, model.dataChanged):
            signal.connect(self._schedule)

    # -- painting --------------------------------------------------------------------------------
    @property
    def paints(self) -> int:
        """How many times the viewport has painted (to ask later whether it has since)."""
        return self._paints

    def painted_since(self, paints: int) -> asyncio.Future[None]:
        """A future resolved once the viewport has painted after its :attr:`paints` was ``paints``:
        at once if it has already (or the view is not visible: nothing will paint), else at its next
        paint (asked for; Qt merges that with a paint already due). A caller that must not wait
        forever bounds its wait (a minimised window may never paint)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._paints > paints or not self.isVisible():
            future.set_result(None)
            return future
        self._paint_waiters.append(future)
        self.viewport().update()
        return future

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt name)
        super().paintEvent(event)
        self._paints += 1
        if self._paint_waiters:
            waiters, self._paint_waiters = self._paint_waiters, []
            for future in waiters:
                if not future.done():
                    future.set_result(None)

    # -- the end ---------------------------------------------------------------------------------
    def _end_missing(self) -> bool:
        model = self.timeline()
        return model is not None and model.key is not None and model.loaded_count() > 0 and not model.reaches_end

    def _start_missing(self) -> bool:
        model = self.timeline()
        return model is not None and model.key is not None and model.loaded_count() > 0 and not model.reaches_start

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt name)
        if event.key() == Qt.Key.Key_End and self._end_missing():
            event.accept()
            self.jumpToEnd.emit()
            return
        if event.key() == Qt.Key.Key_Home and self._start_missing():
            event.accept()
            self.jumpToStart.emit()
            return
        super().keyPressEvent(event)

    def scrollToBottom(self) -> None:  # noqa: N802 (Qt name)
        """Show the newest rows: asks for the newest page first when it is not loaded."""
        if self._end_missing():
            self.jumpToEnd.emit()
            return
        super().scrollToBottom()

    def last_row(self) -> QModelIndex:
        """The last visible row (what End moves to)."""
        model = self.model()
        index = model.index(model.rowCount() - 1, 0) if model is not None and model.rowCount() else QModelIndex()
        while index.isValid() and self.isExpanded(index) and model.rowCount(index):
            index = model.index(model.rowCount(index) - 1, 0, index)
        return index

    def show_start(self) -> None:
        """Make the first row current and scroll to the top (after the first page is in)."""
        model = self.model()
        if model is not None and model.rowCount():
            self.setCurrentIndex(model.index(0, 0))
        self.scrollToTop()

    def first_visible(self) -> QModelIndex:
        """The row at the top of the viewport."""
        return self.indexAt(self.viewport().rect().topLeft())

    def top_level_row(self, index: QModelIndex) -> int:
        """The top-level row ``index`` is in (-1 when invalid)."""
        while index.isValid() and index.parent().isValid():
            index = index.parent()
        return index.row() if index.isValid() else -1

    def show_end(self) -> None:
        """Make the last row current and scroll to the bottom (after the newest page is in)."""
        index = self.last_row()
        if index.isValid():
            self.setCurrentIndex(index)
        super().scrollToBottom()

    # -- what the user opened, closed and selected (kept across a re-read of the whole view) -------
    @staticmethod
    def row_key(node: Any) -> tuple[str, int | None]:
        """A row's identity that survives a re-read: its kind and its first message id."""
        return (node.kind, node.first_id if node.info is None else node.info.id)

    def expansion(self) -> dict[tuple[str, int | None], bool]:
        """The loaded groups the user opened or closed against their default (a unit or round
        opens unless compacted; anything else starts closed), by :meth:`row_key`."""
        model = self.timeline()
        out: dict[tuple[str, int | None], bool] = {}
        if model is None:
            return out
        for node in model.core.root.walk():
            if node.children:
                shown = self.isExpanded(model.index_of(node))
                if shown != _opens(node):
                    out[self.row_key(node)] = shown
        return out

    def apply_expansion(self, wanted: dict[tuple[str, int | None], bool]) -> None:
        """Open or close the loaded groups listed in ``wanted`` (what :meth:`expansion` kept)."""
        model = self.timeline()
        if model is None or not wanted:
            return
        for node in model.core.root.walk():
            if node.children:
                shown = wanted.get(self.row_key(node))
                if shown is not None:
                    self.setExpanded(model.index_of(node), shown)

    def index_of_key(self, key: tuple[str, int | None]) -> QModelIndex:
        """The loaded row whose :meth:`row_key` is ``key`` (invalid when none)."""
        model = self.timeline()
        if model is None:
            return QModelIndex()
        node = next((n for n in model.core.root.walk() if self.row_key(n) == key), None)
        return model.index_of(node) if node is not None else QModelIndex()

    # -- gaps --------------------------------------------------------------------------------------
    def _schedule(self, *_args: Any) -> None:
        self._check.start()

    def _emit_visible_gaps(self) -> None:
        model = self.timeline()
        if model is None or not self.isVisible():
            return
        viewport = self.viewport().rect()
        for gap in model.gaps():
            if gap.loading or gap.failed:
                continue
            rect = self.visualRect(model.index_of(gap))
            if rect.isValid() and rect.intersects(viewport):
                backward = gap.first_id is None or (gap.last_id is not None and rect.center().y() < viewport.height() // 2)
                self.gapVisible.emit(gap, backward)

    @contextmanager
    def anchored(self, row: QModelIndex) -> Iterator[None]:
        """Keep ``row`` where it is on screen while rows above it are inserted or removed (a gap
        filled from its lower side, rows far above dropped): what the user looks at stays put."""
        offset = self.visualRect(row).top() if row.isValid() else None
        anchor = QPersistentModelIndex(row) if offset is not None and -self.viewport().height() < offset < self.viewport().height() else QPersistentModelIndex()
        yield
        if not anchor.isValid() or offset is None:
            return
        self.executeDelayedItemsLayout()
        self.scrollTo(anchor, QAbstractItemView.ScrollHint.PositionAtTop)
        height = self.visualRect(anchor).height()
        if height > 0 and offset // height:
            bar = self.verticalScrollBar()
            bar.setValue(bar.value() - offset // height)


def _opens(node: Any) -> bool:
    """Whether a group row opens by itself when it is loaded (see ``PagingController._on_rows_inserted``)."""
    return node.kind in ("unit", "round") and not node.compacted
