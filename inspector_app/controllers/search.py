"""Search in the open thread: the whole thread is scanned off the GUI thread, a page per worker
trip, without loading it into the timeline; only the page around a match is loaded."""

from __future__ import annotations

import asyncio
from typing import Any

from ..layout import InspectorLayout
from ..models.timeline import message_matches
from ..service_api import InspectorService
from ..service_client import ServiceClient
from .base import ThreadState
from .paging import PagingController
from .tasks import ThreadTasks

SEARCH_PAGE = 1000  # messages a search reads per worker trip


class SearchController:
    """The search box: typing searches from the start, Enter finds the next match."""

    def __init__(self, ui: InspectorLayout, client: ServiceClient, view: ThreadTasks, state: ThreadState, paging: PagingController) -> None:
        self.ui = ui
        self.client = client
        self.view = view
        self.state = state
        self.paging = paging
        self._task: asyncio.Task[Any] | None = None
        ui.search.textChanged.connect(lambda _text: self.find_next(from_start=True))
        ui.search.returnPressed.connect(self.find_next)

    def find_next(self, *, from_start: bool = False) -> None:
        """Select the next message whose full text matches the search box, after the current row
        (wrapping around). A new search cancels the one still running."""
        text = self.ui.search.text()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if not text.strip():
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
        self._task = self.view.spawn(self.search(text, after), "search")

    async def search(self, text: str, after: int | None) -> None:
        """Scan after ``after`` to the end, then from the start up to ``after`` (inclusive)."""
        key = self.ui.timeline_model.key
        if key is None:
            return
        bar = self.ui.statusBar()
        needle = text.casefold().strip()
        total = self.state.total
        scanned = 0
        for cursor, until in [(after, None)] + ([(None, after)] if after is not None else []):
            done = False
            while not done:
                try:
                    found, cursor, count, done = await self.client.apply(scan_page, key, needle, cursor, SEARCH_PAGE, until)
                except Exception:  # noqa: BLE001: the banner says why (the task's report); the bar must not say "Searching…"
                    bar.showMessage(f"Search for {text!r} stopped: part of the thread cannot be read")
                    raise
                if found is not None:
                    if await self.paging.go_to(found):
                        bar.showMessage(f"Match: message #{found}")
                    return
                scanned += count
                bar.showMessage(f"Searching for {text!r}: {min(scanned, total):,} of {total:,} messages read…")
        bar.showMessage(f"No match for {text!r} in {total:,} messages")


def scan_page(service: InspectorService, key: str, needle: str, after_id: int | None, limit: int, until: int | None) -> tuple[int | None, int | None, int, bool]:
    """On a worker: the first message after ``after_id`` (up to ``until``) matching ``needle``, read
    one page at a time. Returns (match, where to go on, messages read, the range is done)."""
    rows = service.messages_page(key, after_id=after_id, limit=limit)
    for n, stored in enumerate(rows):
        if until is not None and stored.id > until:
            return None, stored.id, n, True
        if message_matches(stored.message, needle):
            return stored.id, stored.id, n + 1, False
    return None, rows[-1].id if rows else after_id, len(rows), len(rows) < limit or (until is not None and bool(rows) and rows[-1].id >= until)
