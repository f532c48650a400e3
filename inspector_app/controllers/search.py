"""Search in the open thread: the whole thread is scanned off the GUI thread, a page per worker
trip, without loading it into the timeline; only the page around a match is loaded.

Each thread has its own search: the text typed for a thread comes back when it is opened again
and never carries over to another thread or another database. The status bar says where the
current match is among all of them ("Match 3 of 12: message #45"); Enter goes to the next match,
Shift+Enter to the previous one (both wrap around). The matches of a text are kept while the
thread does not change, so stepping through them reads nothing again."""

from __future__ import annotations

import asyncio
import bisect
from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QKeyEvent

from ..layout import InspectorLayout
from ..logic.state import ThreadState, plural
from ..logic.tasks import ThreadTasks
from ..models.timeline import message_matches
from ..service_api import InspectorService
from ..service_client import FacetClient
from .paging import PagingController

SEARCH_PAGE = 1000  # messages a search reads per worker trip


class SearchController(QObject):
    """The search box: typing searches from the start, Enter finds the next match, Shift+Enter the
    previous one."""

    def __init__(self, ui: InspectorLayout, client: FacetClient, view: ThreadTasks, state: ThreadState, paging: PagingController) -> None:
        super().__init__(ui)
        self.ui = ui
        self.client = client
        self.view = view
        self.state = state
        self.paging = paging
        self._task: asyncio.Task[Any] | None = None
        #: (database, thread) -> the text typed in the search box for it
        self._texts: dict[tuple[str | None, str], str] = {}
        self._thread: tuple[str | None, str] | None = None
        #: the matches of the last completed scan: ((thread, needle, message count), ids in order)
        self._matches: tuple[tuple[str, str, int], list[int]] | None = None
        ui.search.textChanged.connect(lambda _text: self.find_next(from_start=True))
        ui.search.returnPressed.connect(self.find_next)
        ui.search.installEventFilter(self)
        ui.timeline_model.modelReset.connect(self._on_thread)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt name)
        """Shift+Enter in the search box: the previous match."""
        if watched is self.ui.search and event.type() == QEvent.Type.KeyPress:
            key = event
            assert isinstance(key, QKeyEvent)
            if key.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and key.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.find_previous()
                return True
        return super().eventFilter(watched, event)

    # == one search per thread ===================================================================
    def _on_thread(self) -> None:
        """The timeline was reset: another thread (or database) shows its own search text; a fresh
        view of the same thread keeps it."""
        key = self.ui.timeline_model.key
        now = (self.state.database, key) if key is not None else None
        if now == self._thread:
            return
        if self._thread is not None:
            text = self.ui.search.text()
            if text:
                self._texts[self._thread] = text
            else:
                self._texts.pop(self._thread, None)
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._thread = now
        self._matches = None
        search = self.ui.search
        search.blockSignals(True)  # showing the thread's text is not a new search
        search.setText(self._texts.get(now, "") if now is not None else "")
        search.blockSignals(False)

    def text_of(self, database: str | None, key: str) -> str:
        """The search text kept for ``key`` of ``database`` (the open thread's is the box's)."""
        return self.ui.search.text() if (database, key) == self._thread else self._texts.get((database, key), "")

    # == finding =================================================================================
    def find_next(self, *, from_start: bool = False) -> None:
        """Select the next message whose full text matches the search box, after the current row
        (wrapping around). A new search cancels the one still running."""
        self._find(forward=True, from_start=from_start)

    def find_previous(self) -> None:
        """Select the previous match, before the current row (wrapping around)."""
        self._find(forward=False, from_start=False)

    def _find(self, *, forward: bool, from_start: bool) -> None:
        text = self.ui.search.text()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if not text.strip():
            self._matches = None
            return
        model = self.ui.timeline_model
        node = None if from_start else model.node(self.ui.timeline.currentIndex())
        after: int | None = None
        if node is not None and node.info is not None:
            after = node.info.id
        elif node is not None and node.kind == "gap":
            after = node.first_id
        elif node is not None and node.first_id is not None:
            after = node.first_id - 1
        elif node is not None and node.kind == "boundary" and model.boundary is not None:
            after = model.boundary.boundary
        self._task = self.view.spawn(self.search(text, after, forward=forward), "search")

    def _known(self, key: str, needle: str) -> list[int] | None:
        """The matches of ``needle`` in ``key`` when they were all found and the thread has not changed since."""
        if self._matches is None:
            return None
        (k, n, count), ids = self._matches
        return ids if (k, n, count) == (key, needle, self.state.total) else None

    async def search(self, text: str, after: int | None, *, forward: bool = True) -> None:
        """Go to the match after ``after`` (``forward``; wrapping to the first) or before it; the
        thread is scanned once for all its matches, and the first one ahead is shown as soon as
        it is found."""
        key = self.ui.timeline_model.key
        if key is None:
            return
        bar = self.ui.statusBar()
        needle = text.casefold().strip()
        total = self.state.total
        ids = self._known(key, needle)
        shown: int | None = None
        if ids is None:
            ids = []
            cursor: int | None = None
            scanned = 0
            done = False
            while not done:
                try:
                    found, cursor, count, done = await self.client.apply(scan_matches, key, needle, cursor, SEARCH_PAGE)
                except Exception:  # noqa: BLE001 - the banner says why (the task's report); the bar must not say "Searching…"
                    bar.showMessage(f"Search for {text!r} stopped: part of the thread cannot be read")
                    raise
                ids += found
                scanned += count
                if forward and shown is None and after is not None and found and found[-1] > after:
                    shown = next(i for i in found if i > after)  # the next match: shown now, counted on
                    await self.paging.go_to(shown)
                elif forward and shown is None and after is None and found:
                    shown = found[0]
                    await self.paging.go_to(shown)
                if not done:
                    where = f"match {ids.index(shown) + 1} of {len(ids)}+ · " if shown is not None else ""
                    bar.showMessage(f"Searching for {text!r}: {where}{min(scanned, total):,} of {plural(total, 'message')} read…")
            self._matches = ((key, needle, total), ids)
        if not ids:
            bar.showMessage(f"No match for {text!r} in {plural(total, 'message')}")
            return
        if shown is None:
            shown = pick(ids, after, forward=forward)
            if not await self.paging.go_to(shown):
                return
        bar.showMessage(f"Match {ids.index(shown) + 1} of {len(ids):,}: message #{shown}")


def pick(ids: list[int], after: int | None, *, forward: bool) -> int:
    """The match after ``after`` (forward) or before it, wrapping around; the first (forward) or
    the last without ``after``."""
    if after is None:
        return ids[0] if forward else ids[-1]
    if forward:
        at = bisect.bisect_right(ids, after)
        return ids[at] if at < len(ids) else ids[0]
    at = bisect.bisect_left(ids, after)
    return ids[at - 1] if at > 0 else ids[-1]


def scan_matches(service: InspectorService, key: str, needle: str, after_id: int | None, limit: int) -> tuple[list[int], int | None, int, bool]:
    """On a worker: the ids of one page's messages after ``after_id`` that match ``needle``.
    Returns (matches, where to go on, messages read, the thread is done)."""
    rows = service.reads.messages_page(key, after_id=after_id, limit=limit)
    found = [stored.id for stored in rows if message_matches(stored.message, needle)]
    return found, rows[-1].id if rows else after_id, len(rows), len(rows) < limit
