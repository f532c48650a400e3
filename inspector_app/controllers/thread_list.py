"""The thread list over the store (issue 26): pages fetched as the user scrolls, sorted, searched
and filtered by the database, never more than about a thousand rows held.

The model (:class:`~..models.threads.ThreadListModel`) has a row for every thread the query
matches; what is on screen is fetched off the GUI thread, from the nearest anchor (the start, the
end through the reversed query, or a page fetched before), a page of :data:`PAGE` at a time. The
filter box searches the database (debounced, the previous search cancelled); the Filters button
holds the filters and the sort; a click on a column heading sorts by it. The live refresh
(:meth:`ThreadListController.refresh`) reads the rows around what is on screen again and applies
them in place: the selection, the rows on screen and the sort stay.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any, Callable

from PySide6.QtCore import QItemSelectionModel, QModelIndex, QPersistentModelIndex, QPoint, Qt, QTimer
from PySide6.QtWidgets import QAbstractItemView

from engine.core.views import ThreadPage, ThreadQuery

from ..layout import InspectorLayout
from ..logic.state import plural
from ..logic.tasks import Report, TaskSet
from ..logic.window import Window
from ..models.threads import CACHE_ROWS, COLUMN_SORTS, PAGE, KeyRole
from ..service_api import InspectorService, ReadsAPI
from ..service_client import FacetClient, invoke

#: the filter box waits this long after the last key before it searches
SEARCH_DEBOUNCE_MS = 250
#: a row further than this from the nearest anchor is fetched by a jump (the database skips to
#: it: ``page(offset=)``) rather than by following cursors page by page
JUMP_AFTER = 2 * PAGE
#: the default order: by key (a sub-agent under its parent), as the list always was
DEFAULT_QUERY = ThreadQuery(sort="key", descending=False)
#: a column heading's first click: title A→Z, the others the most first
ASCENDING_FIRST = ("title", "key")


@dataclass(frozen=True)
class Walk:
    """What a worker read walking from an anchor: the anchors it passed (offset from the anchor,
    cursor) and the page that covers the row asked for, at ``offset`` from the anchor."""

    anchors: tuple[tuple[int, str], ...]
    offset: int
    page: ThreadPage


def reversed_query(query: ThreadQuery) -> ThreadQuery:
    return replace(query, descending=not query.descending)


def read_page(service: InspectorService, query: ThreadQuery, after: str | None, limit: int) -> ThreadPage:
    """One page of the list (on a worker)."""
    return service.threads.page(query, after=after, limit=limit)


def read_first(service: InspectorService, query: ThreadQuery, limit: int) -> tuple[Any, ThreadPage, int]:
    """The list's mark, its first page and the threads in the store (the M of "N of M") in one
    worker trip (the mark first: a change in between is seen by the next poll; a mark that cannot
    be read is None, and the next poll reads again)."""
    try:
        listing = invoke(service, ReadsAPI.versions, None)[0]
    except Exception:  # noqa: BLE001 - the list itself says what is wrong, if anything
        listing = None
    page = read_page(service, query, None, limit)
    return listing, page, store_total(service, query, page.total)


def store_total(service: InspectorService, query: ThreadQuery, matching: int) -> int:
    """Every thread of the store (on a worker): ``matching`` itself when ``query`` narrows nothing
    (its sort aside), else counted by the database."""
    everything = ThreadQuery(sort=query.sort, descending=query.descending)
    return matching if query == everything else service.threads.count(everything)


def walk(service: InspectorService, query: ThreadQuery, cursor: str | None, distance: int, limit: int = PAGE) -> Walk:
    """From the anchor ``cursor``, the page that starts ``distance`` rows further (on a worker):
    the database skips those rows (``offset``), the page's own cursor goes on from there."""
    page = service.threads.page(query, after=cursor, offset=distance, limit=limit)
    return Walk((), distance, page)


def find_thread(service: InspectorService, query: ThreadQuery, key: str) -> Walk | None:
    """The page of the list of ``query`` that holds thread ``key`` near its middle (on a worker),
    however far down it is: its row counted by the database, then one page read from there.
    None when the query does not match it."""
    row = service.threads.position(query, key)
    if row is None:
        return None
    start = max(0, row - PAGE // 2)
    page = service.threads.page(query, offset=start, limit=PAGE)
    return Walk((), start, page)


def count_text(matching: int, total: int, filtered: bool) -> str:
    """"N of M": ``matching`` threads the search and filters match (counted by the database, not
    the rows the list holds) of the ``total`` in the store ("12 of 100,000 threads"); unfiltered
    the list is the store: "100,000 threads"."""
    if not total:
        return "No threads"
    return f"{matching:,} of {plural(total, 'thread')}" if filtered else plural(total, "thread")


class ThreadListController:
    """Owns :attr:`query` and the paging of the list; :meth:`load` reads a first page."""

    def __init__(self, ui: InspectorLayout, client: FacetClient, tasks: TaskSet, report: Report, *, window: Window) -> None:
        self.ui = ui
        self.client = client
        self.tasks = tasks
        self.report = report
        self.window = window
        self.query = DEFAULT_QUERY
        self.listing: Any = None
        #: every thread of the store (the M of "N of M"; the N is the model's row count)
        self.store_total = 0
        #: bumped by every new list (query, database, refresh): pages of an older one are dropped
        self.epoch = 0
        self._fetch: asyncio.Task[Any] | None = None
        self._search: asyncio.Task[Any] | None = None
        self.model = ui.thread_model
        self.view = ui.thread_list
        self._search_timer = QTimer(ui)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(SEARCH_DEBOUNCE_MS)
        self._search_timer.timeout.connect(self._search_now)
        ui.thread_filter.textChanged.connect(lambda _t: self._search_timer.start())
        self._scroll_timer = QTimer(ui)
        self._scroll_timer.setSingleShot(True)
        self._scroll_timer.setInterval(15)
        self._scroll_timer.timeout.connect(self.ensure_shown)
        bar = self.view.verticalScrollBar()
        bar.valueChanged.connect(lambda _v: self._scroll_timer.start())
        bar.rangeChanged.connect(lambda _a, _b: self._scroll_timer.start())
        for signal in (self.model.modelReset, self.model.rowsInserted, self.model.rowsRemoved):
            signal.connect(lambda *_a: self._scroll_timer.start())  # rows on screen that are not held yet
        #: the current row the keyboard moved to before its page arrived (Ctrl+End, Page Down):
        #: its thread opens once the page lands, if the row is still current (:meth:`_open_pending`)
        self._pending = QPersistentModelIndex()
        #: told True while the list's selected thread is not the thread the panels show (:attr:`apart`:
        #: Compact now and the like must not act on the one shown), False once they agree again
        self.pending_changed: Callable[[bool], None] | None = None
        #: the thread a view is open or opening for (set by the threads controller: its view's key)
        self.opening: Callable[[], str | None] = lambda: None
        self._was_apart = False
        self.view.selectionModel().currentRowChanged.connect(self._on_current)
        self.view.selectionModel().selectionChanged.connect(lambda *_a: self.recheck())  # a click selects after it moves the current row
        self.model.dataChanged.connect(lambda *_a: self._open_pending())
        self.model.modelReset.connect(lambda: self.recheck())
        header = self.view.header()
        header.setSectionsClickable(True)
        header.setSortIndicatorShown(False)
        header.sectionClicked.connect(self._on_heading)
        ui.thread_filters.changed.connect(self._on_filters)

    # == queries ================================================================================
    @property
    def filtered(self) -> bool:
        q = self.query
        return bool(q.text or q.filters or q.source_format)

    def set_query(self, query: ThreadQuery) -> asyncio.Task[Any] | None:
        """Show the list of ``query`` (the previous search or fetch cancelled); the task reading
        its first page (None: that list is shown already)."""
        if query == self.query:
            return None
        self.query = query
        self._show_sort()
        self.ui.thread_filters.show_query(query)
        if self._search is not None:
            self._search.cancel()
        self._search = self.tasks.spawn(self.reload(), "search threads")
        return self._search

    def _search_now(self) -> None:
        text = self.ui.thread_filter.text().strip() or None
        self.set_query(replace(self.query, text=text))

    def _on_filters(self, filters: frozenset[str], source: str | None, sort: str, descending: bool) -> None:
        self.set_query(replace(self.query, filters=filters, source_format=source, sort=sort, descending=descending))

    def _on_heading(self, column: int) -> None:
        sort = COLUMN_SORTS.get(column)
        if sort is None:
            self._show_sort()  # not a sort of its own: the indicator stays where it was
            return
        descending = (not self.query.descending) if self.query.sort == sort else sort not in ASCENDING_FIRST
        self.set_query(replace(self.query, sort=sort, descending=descending))

    def _show_sort(self) -> None:
        header = self.view.header()
        column = next((c for c, s in COLUMN_SORTS.items() if s == self.query.sort), None)
        header.blockSignals(True)
        if column is None:
            header.setSortIndicatorShown(False)
        else:
            header.setSortIndicatorShown(True)
            header.setSortIndicator(column, Qt.SortOrder.DescendingOrder if self.query.descending else Qt.SortOrder.AscendingOrder)
        header.blockSignals(False)

    # == reading ================================================================================
    async def load(self) -> ThreadPage:
        """The first page of :attr:`query` (and the list's mark) in one trip on the interactive lane (the
        user waits for it; the background lane may still be measuring the previous thread): the list starts over."""
        self._new_epoch()
        listing, page, total = await self.client.apply_interactive(read_first, self.query, PAGE)
        self.listing = listing
        self.store_total = total
        self.model.start(page.threads, page.total, page.after)
        self.view.scrollToTop()  # a new list starts at its top
        self.show_count()
        return page

    async def reload(self) -> None:
        """A new query: its first page, shown from its top; the open thread stays selected
        wherever the new list has it (its row counted by the database when it is not on the first
        page: selected in place, the list not scrolled to it), and no row is when the new list
        does not have it."""
        await self.load()
        self.window.say(self.count_text())
        current = self.window.current_key()
        if current is None:
            return
        row = self.model.row_of(current)
        if row is not None:  # on the first page: selected (and shown)
            self.select_row(row)
        else:
            await self.reveal(current, scroll=False)

    def _new_epoch(self) -> None:
        self.epoch += 1
        if self._fetch is not None and not self._fetch.done():
            self._fetch.cancel()
        self._fetch = None

    def count_text(self) -> str:
        total = self.store_total if self.filtered else self.model.total  # unfiltered: the list is the store
        return count_text(self.model.total, max(total, self.model.total), self.filtered)

    def show_count(self) -> None:
        """"N of M" under the list, and in the status bar while the status bar says the count."""
        before, text = self.ui.thread_count.text(), self.count_text()
        self.ui.thread_count.setText(text)
        bar = self.ui.statusBar()
        if before and text != before and bar.currentMessage() == before:
            self.window.say(text)

    def visible_rows(self) -> tuple[int, int]:
        """The first and last rows on screen (-1, -1 for an empty list)."""
        total = self.model.total
        if not total:
            return -1, -1
        view = self.view
        first = view.indexAt(QPoint(2, 2)).row()
        first = 0 if first < 0 else first
        last = view.indexAt(QPoint(2, max(2, view.viewport().height() - 2))).row()
        if last < 0:
            height = max(1, view.sizeHintForRow(0) if total else 20)
            last = min(total - 1, first + view.viewport().height() // height + 1)
        return first, last

    def ensure_shown(self) -> None:
        """Fetch what is on screen and not held yet (one fetch at a time; called again when it lands)."""
        if self._fetch is not None and not self._fetch.done() or not self.client.connected:
            return
        first, last = self.visible_rows()
        if first < 0:
            return
        missing = self.model.missing(first - PAGE // 4, last + PAGE // 4)
        if not missing:
            return
        on_screen = [r for r in missing if first <= r <= last]
        target = on_screen[0] if on_screen else missing[0]
        self._fetch = self.tasks.spawn(self._fetch_rows(target, self.epoch), "read threads")

    def plan(self, row: int) -> tuple[int, str | None, int]:
        """The anchor to fetch ``row`` from: (anchor row, cursor, direction)."""
        model = self.model
        before = max((a for a in model.fwd if a <= row), default=0)
        after = min((a for a in model.bwd if a >= row), default=None)
        if after is not None and after - row < row - before:
            return after, model.bwd[after], -1
        return before, model.fwd.get(before), 1

    async def _fetch_rows(self, row: int, epoch: int) -> None:
        anchor, cursor, direction = self.plan(row)
        query = self.query if direction > 0 else reversed_query(self.query)
        distance = abs(row - anchor)
        if distance > JUMP_AFTER:  # far from any anchor: a jump from the nearer end of the list
            total = self.model.total
            from_top = row <= total // 2
            anchor, cursor, direction = (0, None, 1) if from_top else (total - 1, None, -1)
            query = self.query if from_top else reversed_query(self.query)
            distance = row if from_top else total - 1 - row
        start = max(0, distance - PAGE // 2) if distance >= PAGE else 0  # the row asked for mid-page
        result = await self.client.apply_interactive(walk, query, cursor, start)
        if epoch != self.epoch:
            return
        self._place(anchor, direction, result)
        self._scroll_timer.start()  # more on screen to fetch, if any

    def _place(self, anchor: int, direction: int, result: Walk) -> None:
        model = self.model
        anchors = model.fwd if direction > 0 else model.bwd
        for offset, cursor in result.anchors:
            anchors.setdefault(anchor + offset * direction, cursor)
        model.place(anchor + result.offset * direction, result.page.threads, direction, result.page.after)
        first, last = self.visible_rows()
        current = self.view.currentIndex().row()
        model.evict(first, last, keep=current)
        self.show_count()

    # == the selection and the open thread agree ==============================================
    def _on_current(self, current: QModelIndex, _previous: QModelIndex) -> None:
        """The current row moved (the keyboard, a click): a row whose page is not held yet (Ctrl+End
        to the end of 100,000 threads) is remembered; its thread opens when the page arrives."""
        row = self.ui.thread_proxy.mapToSource(current).row() if current.isValid() else -1
        self._pending = QPersistentModelIndex(current) if row >= 0 and not self.model.loaded(row) else QPersistentModelIndex()
        if self._pending.isValid():
            self._scroll_timer.start()  # on screen (the view scrolled to it): fetched right away
        self.recheck()

    @property
    def pending(self) -> bool:
        """A row is current whose page has not arrived: its thread is not open yet."""
        return self._pending.isValid()

    def selected_key(self) -> str | None:
        """The thread of the row the list shows selected (None: no row, or one not held)."""
        rows = self.view.selectionModel().selectedRows()
        return rows[0].data(KeyRole) if len(rows) == 1 else None

    @property
    def apart(self) -> bool:
        """The list's selected thread is not the one the panels show: a row current whose page has
        not arrived (Ctrl+End), a row selected whose thread has not opened yet (a click), or
        another thread still loading. With no thread open there is nothing to act on anyway."""
        if self.pending:
            return True
        shown = self.window.current_key()
        if shown is None:
            return False
        selected = self.selected_key()
        loading = self.opening()
        return (selected is not None and selected != shown) or (loading is not None and loading != shown)

    def recheck(self) -> None:
        """Tell :attr:`pending_changed` when :attr:`apart` changed (the selection, the open thread
        or the thread loading moved)."""
        apart = self.apart
        if apart != self._was_apart:
            self._was_apart = apart
            if self.pending_changed is not None:
                self.pending_changed(apart)

    def _open_pending(self) -> None:
        """The page of the row the keyboard moved to has arrived: the selection model says the
        current row changed once more (from no thread to this one), and the thread opens as for
        any move of the selection. The panels never stay on another thread than the one shown
        selected. Nothing happens when the user has moved on."""
        pending = self._pending
        if not pending.isValid():
            self.recheck()  # its row went with a new list
            return
        view = self.view
        index = view.currentIndex()
        if QPersistentModelIndex(index) != pending:
            self._pending = QPersistentModelIndex()
            self.recheck()
            return
        if not self.model.loaded(self.ui.thread_proxy.mapToSource(index).row()):
            return
        self._pending = QPersistentModelIndex()
        selection = view.selectionModel()
        selection.blockSignals(True)
        selection.setCurrentIndex(QModelIndex(), QItemSelectionModel.SelectionFlag.NoUpdate)
        selection.blockSignals(False)
        selection.setCurrentIndex(index, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows)
        self.recheck()  # after the thread began to open (its state is being read)

    # == a thread chosen elsewhere ==============================================================
    async def reveal(self, key: str, *, scroll: bool = True) -> bool:
        """Select ``key``'s row without opening it again, fetching the page that holds it when it
        is not held (its row counted by the database: however far down the list). False when the
        list's query does not match it."""
        row = self.model.row_of(key)
        tries = 3  # a live refresh between the count and its page (the open thread's pressure written back) is read again
        while row is None and tries:
            tries -= 1
            epoch, query = self.epoch, self.query
            found = await self.client.apply(find_thread, query, key)
            if query != self.query or found is None:
                return False
            if epoch != self.epoch:
                row = self.model.row_of(key)
                continue
            self._place(0, 1, found)
            row = self.model.row_of(key)
        if row is None:
            return False
        self.select_row(row, scroll=scroll)
        return True

    def select_row(self, row: int, *, scroll: bool = True) -> None:
        """Make ``row`` the list's current row without the selection's signal (the thread is
        opened by whoever asked)."""
        index = self.ui.thread_proxy.mapFromSource(self.model.index(row, 0))
        view = self.view
        selection = view.selectionModel()
        if view.currentIndex().row() != index.row() or [i.row() for i in selection.selectedRows()] != [index.row()]:
            selection.blockSignals(True)
            selection.setCurrentIndex(index, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows)
            selection.blockSignals(False)
            view.viewport().update()
        if scroll and not view.visualRect(index).intersects(view.viewport().rect()):
            view.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtCenter)
        self.recheck()

    def clear_selection(self) -> None:
        """No row selected (the thread open is not in the list)."""
        selection = self.view.selectionModel()
        selection.blockSignals(True)
        selection.clear()
        selection.blockSignals(False)
        self.view.viewport().update()
        self.recheck()

    # == the live refresh =======================================================================
    async def refresh(self, listing: Any) -> None:
        """The list changed (its mark moved): the rows around what is on screen are read again
        and applied in place; the count too. The selected thread stays selected and the row at the
        top of the list stays at the top."""
        model, view = self.model, self.view
        first, last = self.visible_rows()
        top_key = model.thread_at(first).key if first >= 0 and model.loaded(first) else None
        selected = view.currentIndex().data(KeyRole)
        start = first if first >= 0 else 0
        while start - 1 >= 0 and model.loaded(start - 1):
            start -= 1
        end = max(start, last)
        while model.loaded(end + 1):
            end += 1
        anchor = max((a for a in model.fwd if a <= start), default=0)
        back = min((a for a in model.bwd if a >= end), default=None)
        epoch = self._bump_for_refresh()
        everything = await self.client.apply(store_total, self.query, 0) if self.filtered else None  # the M of "N of M"
        if epoch != self.epoch:
            return
        if everything is not None:
            self.store_total = everything
        if start - anchor <= 2 * PAGE or back is None or back - start > CACHE_ROWS + PAGE:
            want = min(end + 1 - anchor, CACHE_ROWS + PAGE) if model.total else PAGE
            page = await self.client.apply(read_page, self.query, model.fwd.get(anchor), max(want, PAGE))
            if epoch != self.epoch:
                return
            threads = page.threads[start - anchor:] if start > anchor else page.threads
            after = page.after if start + len(threads) >= anchor + len(page.threads) else None
        else:  # rows read from the end (the reversed query): read again from there, counted from the end
            first_key = model.thread_at(start).key if model.loaded(start) else None
            page = await self.client.apply(read_page, reversed_query(self.query), model.bwd[back], back - start + 1 + PAGE // 4)
            if epoch != self.epoch:
                return
            ordered = tuple(reversed(page.threads))
            keys = [t.key for t in ordered]
            # aligned on the first row held: rows added before it leave the rows on screen where they are
            threads = ordered[keys.index(first_key):] if first_key in keys else ordered[-(back - start + 1):]
            after = None
        model.replace_window(start, threads, page.total, after)
        self.listing = listing
        if selected is not None:
            row = model.row_of(selected)
            if row is not None:
                self.select_row(row, scroll=False)
        if top_key is not None:
            row = model.row_of(top_key)
            if row is not None and row != view.indexAt(QPoint(2, 2)).row():  # the rows on screen stay on screen
                view.scrollTo(self.ui.thread_proxy.mapFromSource(model.index(row, 0)), QAbstractItemView.ScrollHint.PositionAtTop)
        self.show_count()
        self._scroll_timer.start()

    def _bump_for_refresh(self) -> int:
        self._new_epoch()
        return self.epoch
