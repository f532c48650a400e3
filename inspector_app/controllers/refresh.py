"""Live refresh: every few seconds (and on F5) the open thread is looked at again, and nothing the
user sees changes unless the data did.

A poll reads only the marks of the thread list and of the open thread
(``ReadsAPI.versions``: a few aggregate reads). Equal marks: nothing is read and nothing on
screen is touched. The list's rows around what is on screen are read again only when its mark moved,
and updated in place (the selection, the rows on screen, the sort and the search stay). When the open thread's mark moved, its
header, status and new messages are read and applied in place (the selected row, the scroll
position, the opened and closed turns, the side tab, the replay pane's page, episode, step and
request, the selected event and the search all stay); the side panels change only where their
data did. Only when the thread's timeline itself changed (an outside compaction or prune: the
boundary, the generation, the compactions or the source's compactions moved) is the whole view
read again, and then everything the user made of the view is put back (:class:`~.base.ViewState`).
A thread that starts or ends a run regroups only its last turn, in place. F5 reads the header and status
even when the marks are equal (still in place)."""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer

from ..layout import InspectorLayout
from ..logic.state import ThreadState, ViewState, count_of
from ..logic.tasks import TaskSet, ThreadTasks, finished
from ..logic.window import Window
from ..service_api import CompactionAPI, ReadsAPI
from ..service_client import FacetClient
from .paging import PagingController
from .threads import ThreadsController, capture_view, compaction_of

#: busy reasons whose last turn is running (grouped as the user's head and one row per round)
RUNNING = ("running", "waiting_for_user")
#: what a refresh found: reload the thread with (key, what the user made of its view)
Reload = tuple[str, ViewState]


class RefreshController:
    """Polls the open thread; :attr:`timer` is the poll (stopped at shutdown). :attr:`reloads`
    counts the re-reads of the whole view it made (what a user would see flash)."""

    def __init__(
        self,
        ui: InspectorLayout,
        client: FacetClient,
        tasks: TaskSet,
        view: ThreadTasks,
        state: ThreadState,
        *,
        threads: ThreadsController,
        paging: PagingController,
        window: Window,
        poll_ms: int,
        parent: QObject,
    ) -> None:
        self.ui = ui
        self.client = client
        self.tasks = tasks
        self.view = view
        self.state = state
        self.threads = threads
        self.paging = paging
        self.window = window
        self.refreshing = False
        self.reloads = 0
        self.timer = QTimer(parent)
        self.timer.setInterval(poll_ms)
        self.timer.timeout.connect(self._on_poll)
        ui.refresh_action.triggered.connect(lambda: self.tasks.spawn(self.refresh(), "refresh"))

    def _on_poll(self) -> None:
        if not (self.refreshing or self.window.compacting or self.state.thread is None or not self.client.connected or self.loading):
            self.tasks.spawn(self.refresh(force=False), "refresh")

    @property
    def loading(self) -> bool:
        """The open thread's first status is still being read (its view is loading): a poll now
        would only read it a second time, and that read waits on the first (the engine measures a
        thread once at a time) while holding the other background worker, so the token badges of
        End's page and the other panels would queue behind a cold measurement of a huge thread."""
        return self.state.status is None and not self.view.idle

    async def refresh(self, *, force: bool = True) -> None:
        """Look at the open thread again (see the module doc); ``force`` (F5, and a caller's
        refresh): read its header and status even when its mark did not move (the poll does not). The reads are tasks of the thread's view
        (opening another thread cancels them); a re-read of the whole view, when one is needed,
        opens a new view of it with the user's view put back."""
        if self.state.thread is None or self.refreshing:
            return
        self.refreshing = True
        try:
            task = self.view.spawn(self._reread(force), "refresh")
            reload = task.result() if await finished(task) else None
            if reload is not None:
                key, kept = reload
                self.reloads += 1
                await self.threads.load_thread(key, restore=kept)
        finally:
            self.refreshing = False

    async def _reread(self, force: bool = False) -> Reload | None:
        old = self.state.thread
        if old is None:
            return None
        key = old.key
        listing, mark = await self.client.call(ReadsAPI.versions, key)
        if listing != self.state.listing:  # the rows around what is on screen, read again in place
            await self.threads.list.refresh(listing)
            self.state.listing = listing
        if mark == self.state.mark and not force:
            return None
        info = await self.client.call(ReadsAPI.thread, key)
        state = await self.client.call(ReadsAPI.compaction_state, key)
        sources = await self.client.call(ReadsAPI.source_compactions, key) if info.source_format else ()
        running = info.busy_reason in RUNNING
        if compaction_of(state, sources) != self.state.compaction or (running != (old.busy_reason in RUNNING) and not self.ui.timeline_model.set_running_turn(running)):
            return key, capture_view(self.ui, self.paging)
        status = await self.client.call(CompactionAPI.status, key)
        if info != old:
            self.threads.set_thread(info)
        if status != self.state.status or info != old:  # the header shows both
            self.threads.apply_status(status)
        total, before = count_of(info), count_of(old)
        if total is not None and total != before:
            self.ui.timeline_model.set_total(total)
        if total is not None and before is not None and total > before and self.ui.timeline_model.reaches_end:
            timeline = self.ui.timeline
            scroll = timeline.verticalScrollBar().value()
            await self.paging.append_newer()  # rows are updated in place: the selection stays
            timeline.verticalScrollBar().setValue(scroll)
        if mark != self.state.mark:
            await self.threads.update_side(key)
        self.state.mark = mark
        return None
