"""Live refresh: every few seconds (and on F5) the open thread is read again. New messages are
appended in place (the selection and scroll position stay); an outside compaction, or the thread
turning busy or idle, re-reads the whole view."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject, QTimer

from ..layout import InspectorLayout
from ..service_api import InspectorService
from ..service_client import ServiceClient
from .base import ThreadState, count_of
from .paging import PagingController
from .tasks import TaskSet, ThreadTasks, finished
from .threads import ThreadsController

#: what a refresh found: reload the thread with (key, message to keep, scroll position)
Reload = tuple[str, "int | None", int]


class RefreshController:
    """Polls the open thread; :attr:`timer` is the poll (stopped at shutdown)."""

    def __init__(
        self,
        ui: InspectorLayout,
        client: ServiceClient,
        tasks: TaskSet,
        view: ThreadTasks,
        state: ThreadState,
        *,
        threads: ThreadsController,
        paging: PagingController,
        busy: Callable[[], bool],
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
        self._busy = busy
        self.refreshing = False
        self.timer = QTimer(parent)
        self.timer.setInterval(poll_ms)
        self.timer.timeout.connect(self._on_poll)
        ui.refresh_action.triggered.connect(lambda: self.tasks.spawn(self.refresh(), "refresh"))

    def _on_poll(self) -> None:
        if not (self.refreshing or self._busy() or self.state.thread is None or not self.client.connected or self.loading):
            self.tasks.spawn(self.refresh(), "refresh")

    @property
    def loading(self) -> bool:
        """The open thread's first status is still being read (its view is loading): a poll now
        would only read it a second time, and that read waits on the first (the engine measures a
        thread once at a time) while holding the other background worker, so the token badges of
        End's page and the other panels would queue behind a cold measurement of a huge thread."""
        return self.state.status is None and not self.view.idle

    async def refresh(self) -> None:
        """Re-read the open thread; keep selection and scroll position. The reads are tasks of the
        thread's view (opening another thread cancels them); a re-read of the whole view, when one
        is needed, opens a new view."""
        if self.state.thread is None or self.refreshing:
            return
        self.refreshing = True
        try:
            task = self.view.spawn(self._reread(), "refresh")
            reload = task.result() if await finished(task) else None
            if reload is not None:
                key, keep, scroll = reload
                await self.threads.load_thread(key, keep=keep, scroll=scroll)
        finally:
            self.refreshing = False

    async def _reread(self) -> Reload | None:
        old = self.state.thread
        if old is None:
            return None
        key = old.key
        threads = await self.client.call(InspectorService.list_threads)
        info = await self.client.call(InspectorService.thread, key)
        state = await self.client.call(InspectorService.compaction_state, key)
        status = await self.client.call(InspectorService.status, key)
        self.ui.thread_model.set_threads(threads)
        self.threads.set_thread(info)
        boundary = self.ui.timeline_model.boundary
        moved = (boundary.boundary if boundary else None, boundary.generation if boundary else 0) != (state.boundary, state.generation)
        timeline = self.ui.timeline
        if moved or (old.busy_reason is None) != (info.busy_reason is None):
            return key, self.paging.selected_message_id(), timeline.verticalScrollBar().value()
        self.threads.apply_status(status)
        total, before = count_of(info), count_of(old)
        if total is not None:
            self.ui.timeline_model.set_total(total)
        if total is not None and before is not None and total > before and self.ui.timeline_model.reaches_end:
            scroll = timeline.verticalScrollBar().value()
            await self.paging.append_newer()  # rows are updated in place: the selection stays
            timeline.verticalScrollBar().setValue(scroll)
        return None
