"""The timeline's pages: the first page, gap rows filled from either side, End / Home jumps, the
page around a message, the live refresh's newer page, and trimming what scrolled far away.

Every read is a keyset page on the interactive lane; token badges follow once the rows are shown
(``CompactionAPI.visible_tokens`` on the background lane). Everything here runs in the open
thread's :class:`~.tasks.ThreadTasks`: opening another view cancels it, so a page of an older view
is never spliced into the new one.
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

from PySide6.QtCore import QModelIndex

from engine.core.views import Offload, StoredMessage

from ..layout import InspectorLayout
from ..logic.state import ThreadState, count_of, plural
from ..logic.tasks import ThreadTasks
from ..models.timeline import UNKNOWN, Node, PageRequest, TimelinePage
from ..service_api import CompactionAPI, InspectorService, ReadsAPI
from ..service_client import FacetClient, invoke

PAINT_WAIT_S = 0.25  # the longest work that waits for the timeline's paint waits (a window that never paints)
JUMP_PAGE = 200  # messages End reads (a few screens; the gap row above loads more as it shows)
TRIM_ROWS = 500  # top-level rows loaded beyond the screen on one side that trigger dropping them...
KEEP_ROWS = 250  # ...down to this many (the model and every relayout stay bounded on a long scroll)


class PagingController:
    """Reads pages of the open thread into :attr:`InspectorLayout.timeline_model`."""

    def __init__(self, ui: InspectorLayout, client: FacetClient, view: ThreadTasks, state: ThreadState, *, page_size: int) -> None:
        self.ui = ui
        self.client = client
        self.view = view
        self.state = state
        self.page_size = page_size
        self.model = ui.timeline_model
        self._jump_task: asyncio.Task[Any] | None = None
        self.model.rowsInserted.connect(self._on_rows_inserted)
        ui.timeline.jumpToEnd.connect(self.request_newest)
        ui.timeline.jumpToStart.connect(self.request_oldest)
        ui.timeline.gapVisible.connect(self._on_gap_visible)
        ui.newest_action.triggered.connect(self.request_newest)

    # == reads ==================================================================================
    async def _read(self, key: str, request: PageRequest) -> TimelinePage:
        """One keyset read for the timeline, with its offloads, in one trip on the interactive lane
        (token counts follow once the rows are shown: :meth:`_count_tokens`)."""
        return await self.client.apply_interactive(read_page, key, request)

    async def _read_around(self, key: str, message_id: int) -> TimelinePage:
        """A page around ``message_id`` (a quarter before it, the rest from it on): jumping into a
        gap loads one page there instead of every page on the way."""
        return await self.client.apply_interactive(read_page_around, key, message_id, self.page_size)

    async def painted(self, paints: int) -> None:
        """Until the timeline has painted after its ``paints`` count (taken before rows were put in;
        at most :data:`PAINT_WAIT_S`): what can wait starts after that paint instead of competing
        with it."""
        await asyncio.wait([self.ui.timeline.painted_since(paints)], timeout=PAINT_WAIT_S)

    async def _count_tokens(self, key: str, page: TimelinePage, paints: int) -> None:
        """Token badges of a page that is already shown: what the model sees of each message,
        counted by the service on a background worker once the rows are painted; applied after a
        jump in flight."""
        await self.painted(paints)
        counts = await self.client.call(CompactionAPI.visible_tokens, key, list(page.messages), dict(page.offloads))
        jump = self._jump_task
        if jump is not None and not jump.done():
            # an End / Home jump in flight goes first: it never waits behind the badges (and the
            # repaint they cause) of the rows it is leaving
            await asyncio.wait([jump])
        self.model.set_tokens(counts.seen, counts.original)

    def _insert(self, page: TimelinePage, *, below: Node | None = None) -> None:
        """Splice ``page`` in (its token badges follow); filled from below ``below`` (a gap), the
        rows under it stay on screen."""
        model, view = self.model, self.ui.timeline
        paints = view.paints
        if below is not None and below in model.gaps():
            with view.anchored(view.indexBelow(model.index_of(below))):
                model.insert_page(page)
        else:
            model.insert_page(page)
        self._trim()
        # lay the rows out now: a layout left to the paint changes the view's geometry in the
        # middle of that paint, and Qt paints the whole viewport a second time right after it
        view.executeDelayedItemsLayout()
        self.show_counts()
        if page.messages and model.key is not None:
            self.view.spawn(self._count_tokens(model.key, page, paints), "count tokens")

    # == gaps ===================================================================================
    async def load_first(self, page: TimelinePage | None = None) -> None:
        """The first page of a freshly reset timeline (``page``: already read, see
        :func:`first_request`)."""
        if page is None:
            await self.load_gap(None, backward=False)
        elif self.model.key is not None:
            self._insert(page)

    def first_request(self) -> PageRequest:
        """The read of a freshly reset timeline's first page."""
        return PageRequest(limit=self.page_size)

    async def load_gap(self, gap: Node | None, *, backward: bool) -> None:
        """Fill ``gap`` by one page from its lower (``backward``) or upper side; ``None``: the first page."""
        model = self.model
        key = model.key
        if key is None:
            return
        request = self.first_request() if gap is None else model.gap_request(gap, backward=backward, limit=self.page_size)
        if request is None:
            return
        try:
            page = await self._read(key, request)
        except Exception:
            if gap is not None:
                model.gap_failed(gap)
            raise
        timeline = self.ui.timeline
        move = gap is not None and model.node(timeline.currentIndex()) is gap
        self._insert(page, below=gap if backward else None)
        if move and page.messages:  # Enter on a gap row: go on with the rows it loaded
            landing = page.messages[-1 if backward else 0].id
            timeline.setCurrentIndex(model.index_for_message(landing))

    def _on_gap_visible(self, gap: Node, backward: bool) -> None:
        self.view.spawn(self.load_gap(gap, backward=backward), "load messages")

    def _trim(self) -> None:
        """Drop what lies far above or below the screen (never the current row): a long scroll
        keeps a bounded model; what was dropped is a gap row again and reloads when shown."""
        model, view = self.model, self.ui.timeline
        if model.rowCount() <= TRIM_ROWS:
            return
        view.executeDelayedItemsLayout()
        first = view.first_visible()
        top = view.top_level_row(first)
        bottom = view.top_level_row(view.indexAt(view.viewport().rect().bottomLeft()))
        bottom = model.rowCount() - 1 if bottom < 0 else bottom
        current = view.top_level_row(view.currentIndex())
        if top - TRIM_ROWS > 0 and (current < 0 or current >= top - KEEP_ROWS):
            with view.anchored(first):
                model.evict_before(top - KEEP_ROWS)
        if model.rowCount() - 1 - bottom > TRIM_ROWS and (current < 0 or current <= bottom + KEEP_ROWS):
            model.evict_after(bottom + KEEP_ROWS)

    # == jumps ==================================================================================
    def request_oldest(self) -> None:
        """Jump to the first messages (Home, Ctrl+Home) when they are not loaded."""
        if self._jump_task is None or self._jump_task.done():
            self._jump_task = self.view.spawn(self.jump_to_oldest(), "load messages")

    async def jump_to_oldest(self) -> None:
        """Load the first page (one read) and show its first row."""
        key = self.model.key
        if key is not None and not self.model.reaches_start:
            self._insert(await self._read(key, PageRequest(limit=min(self.page_size, JUMP_PAGE))))
        self.ui.timeline.show_start()

    def request_newest(self) -> None:
        """Jump to the newest messages (End, Ctrl+End, scrollToBottom, "Jump to newest")."""
        if self._jump_task is None or self._jump_task.done():
            self._jump_task = self.view.spawn(self.jump_to_newest(), "load messages")

    async def jump_to_newest(self) -> None:
        """Load the newest page (one read, whatever the thread's length) and show its last row;
        what lies between stays one gap row."""
        model = self.model
        key = model.key
        request = model.end_request(min(self.page_size, JUMP_PAGE)) if key is not None else None
        if key is not None and request is not None:
            try:
                page = await self._read(key, request)
            except Exception:
                model.gap_failed()
                raise
            self._insert(page)
        self.ui.timeline.show_end()

    async def ensure_loaded(self, message_id: int) -> bool:
        """Load the page around ``message_id`` if it lies in a gap; False if it is not in the thread."""
        model = self.model
        if model.contains(message_id):
            return True
        key = model.key
        if key is None or model.gap_for(message_id) is None:
            return False
        self._insert(await self._read_around(key, message_id))
        return model.contains(message_id)

    async def go_to(self, message_id: int) -> bool:
        """Select ``message_id`` (loading the page around it if needed); False if it is not in the thread."""
        await self.ensure_loaded(message_id)
        index = self.model.index_for_message(message_id)
        if not index.isValid():
            self.ui.statusBar().showMessage(f"No message #{message_id} in this thread")
            return False
        self.ui.select_row(index)
        return True

    async def show_boundary(self) -> None:
        """Select the boundary row (loading the page around it if needed) and show the summary card."""
        boundary = self.model.boundary
        if boundary is None:
            return
        await self.ensure_loaded(boundary.boundary)
        index = self.model.boundary_index()
        if index.isValid():
            self.ui.select_row(index)
        else:
            self.ui.detail.show_boundary(boundary)
        self.ui.show_tab("detail")

    async def append_newer(self) -> None:
        """Live refresh: the page after the newest loaded message."""
        if self.model.key is not None:
            self._insert(await self._read(self.model.key, PageRequest(after_id=self.model.last_id(), limit=self.page_size)))

    # == view ===================================================================================
    def selected_message_id(self) -> int | None:
        node = self.model.node(self.ui.timeline.currentIndex())
        return node.info.id if node is not None and node.info is not None else None

    def show_counts(self) -> None:
        """The permanent status-bar label: how much of the thread the timeline holds."""
        loaded = self.model.loaded_count()
        total = count_of(self.state.thread)  # None: no thread, or a stored count that is not a number
        total = loaded if total is None else total
        self.ui.counts_label.setText(f"{loaded:,} of {plural(total, 'message')} loaded")
        self.ui.counts_label.setToolTip("" if self.model.exhausted else "Scroll to a gap row or press Enter on it to load more; End loads the newest")

    def _on_rows_inserted(self, parent: QModelIndex, first: int, last: int) -> None:
        """New units open expanded (not compacted ones); new rounds open inside an open unit."""
        model, timeline = self.model, self.ui.timeline
        if parent.isValid() and not timeline.isExpanded(parent):
            return
        for row in range(first, last + 1):
            index = model.index(row, 0, parent)
            node = model.node(index)
            if node is not None and node.children and node.kind in ("unit", "round") and not node.compacted:
                timeline.expandRecursively(index)


# == reads on a worker (one trip each) =============================================================
def read_page(service: InspectorService, key: str, request: PageRequest) -> TimelinePage:
    """``request``'s messages and the offloads of its pruned results (runs on a worker)."""
    stored = invoke(service, ReadsAPI.messages_page, key, **request.query())
    return request.page(stored, {}, offloads_of(service, key, stored), {})


def read_page_around(service: InspectorService, key: str, message_id: int, size: int) -> TimelinePage:
    """A page of ``size`` messages around ``message_id``: a quarter before it, the rest from it
    on (runs on a worker)."""
    context = max(1, size // 4)
    before = invoke(service, ReadsAPI.messages_page, key, before_id=message_id + 1, limit=context)
    after = invoke(service, ReadsAPI.messages_page, key, after_id=message_id, limit=size - context)
    rows = tuple(before + after)
    follows = None if len(before) < context else UNKNOWN
    return TimelinePage(rows, {}, offloads_of(service, key, rows), len(after) < size - context, {}, follows=follows)


def offloads_of(service: InspectorService, key: str, stored: Sequence[StoredMessage]) -> dict[int, Offload]:
    pruned = [s.id for s in stored if s.offload_sha256]
    return invoke(service, ReadsAPI.offloads, key, pruned) if pruned else {}
