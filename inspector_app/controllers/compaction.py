"""*Compact now*: the button and what it says about a busy thread, the non-blocking confirmation,
and the manual compaction itself (off the GUI thread, then the thread is read again)."""

from __future__ import annotations

from typing import Awaitable, Callable

from engine.errors import CannotCompact, EngineError, ThreadBusy, rejection_detail

from ..layout import InspectorLayout
from ..pressure_text import manual_outcome
from ..service_api import InspectorService
from ..service_client import ServiceClient
from .base import ThreadState
from .tasks import Report, TaskSet, ThreadTasks

BUSY_TEXT = {"running": "running", "waiting_for_user": "waiting for the user", "queued": "queued"}
BUSY_NOTE = {
    "running": "A run is in progress: compact by hand once it has finished.",
    "waiting_for_user": "The agent is waiting for the user's answer: compact by hand once the turn is over.",
    "queued": "A request is queued for this thread: compact by hand once it has run.",
}

#: ``reload(key, keep)``: read the thread afresh, re-selecting message ``keep``
Reload = Callable[[str, "int | None"], Awaitable[None]]
#: ``reread_status(key)``: read the thread's header and status again
Reread = Callable[[str], Awaitable[None]]


class CompactionController:
    """Manual compaction of the open thread.

    The compaction is a window-wide task: it goes on (and reports) if another thread is opened
    meanwhile; only the re-read that follows is skipped then.
    """

    def __init__(
        self,
        ui: InspectorLayout,
        client: ServiceClient,
        tasks: TaskSet,
        view: ThreadTasks,
        state: ThreadState,
        report: Report,
        *,
        reload: Reload,
        reread_status: Reread,
        selected: Callable[[], "int | None"],
    ) -> None:
        self.ui = ui
        self.client = client
        self.tasks = tasks
        self.view = view
        self.state = state
        self.report = report
        self._reload = reload
        self._reread_status = reread_status
        self._selected = selected
        self.compacting = False
        #: thread key -> (its message count then, why the last manual compaction could not bring it
        #: under its threshold): the header's "cannot compact: <reason>" until the thread changes
        self._blocked: dict[str, tuple[object, str]] = {}
        ui.compact_button.clicked.connect(self.ask)
        ui.confirm.accepted.connect(self._confirmed)

    def ask(self) -> None:
        thread = self.state.thread
        if thread is not None:
            self.ui.confirm.ask(f"Compact “{thread.title}” now? All complete history before the retained tail is summarized; the raw messages are kept.")

    def _confirmed(self) -> None:
        if self.state.thread is not None:
            self.tasks.spawn(self.compact(self.state.thread.key), "compact")

    async def compact(self, key: str) -> None:
        """Manual compaction off the GUI thread; on success re-read everything from the service."""
        ui, bar = self.ui, self.ui.statusBar()
        self.compacting = True
        ui.busy.show()
        self.update_button()
        bar.showMessage("Compacting…")
        try:
            result = await self.client.call(InspectorService.compact, key)
        except EngineError as exc:
            if isinstance(exc, CannotCompact) and exc.code == "summary_rejected":
                await self._explain(key, exc)
            if isinstance(exc, CannotCompact):
                self._block(key, exc.detail or exc.reason or exc.message)
            self.report(exc, "compact")
            bar.showMessage("Compaction refused: nothing changed")
            if isinstance(exc, (ThreadBusy, CannotCompact)) and self.view.key == key:  # busy since we looked, or cannot compact: show it
                await self._reread_status(key)
            return
        finally:
            self.compacting = False
            ui.busy.hide()
            self.update_button()
        why = manual_outcome(result.status, result.reason, result.still_over_threshold, result.note)
        if why:
            self._block(key, why)
        else:
            self._blocked.pop(key, None)
        if self.view.key == key:  # still the open thread
            ui.banner.clear()
            await self._reload(key, self._selected())
        if result.status == "no_op":
            bar.showMessage(f"Nothing to compact ({result.reason})")
        else:
            done = f"Compacted {result.compacted_messages} messages: {result.before_tokens:,} → {result.after_tokens:,} tokens, generation {result.generation}"
            if result.still_over_threshold:
                done += f" · still over the threshold: {result.note or 'the retained part alone reaches it'}"
            bar.showMessage(done)

    def _block(self, key: str, why: str) -> None:
        thread = self.state.thread
        self._blocked[key] = (thread.message_count if thread is not None and thread.key == key else None, why)

    def blocked_reason(self, key: str) -> str | None:
        """Why the last manual compaction of ``key`` could not bring it under its threshold, while
        the thread has not changed since (None otherwise)."""
        kept = self._blocked.get(key)
        thread = self.state.thread
        if kept is None:
            return None
        if thread is not None and thread.key == key and kept[0] is not None and thread.message_count != kept[0]:
            del self._blocked[key]  # new messages: compaction may help now
            return None
        return kept[1]

    async def _explain(self, key: str, exc: CannotCompact) -> None:
        """Put the cause of a rejected summary (recorded in the thread's newest ``summary_rejected``
        event, e.g. ``HTTP 429 from … after 2 attempts``) into its message. Best effort."""
        if exc.detail:
            return
        try:
            events = await self.client.call(InspectorService.events, key, limit=100_000)
        except Exception:  # noqa: BLE001: the rejection itself is what must be shown
            return
        newest = next((e for e in reversed(events) if e.kind == "summary_rejected"), None)
        detail = rejection_detail(exc, dict(newest.data) if newest is not None else None)
        if detail:
            exc.explain(detail)

    def update_button(self) -> None:
        """Enabled on an idle thread; otherwise it (and the note under the title) says why not."""
        button, note = self.ui.compact_button, self.ui.busy_label
        if self.compacting:
            button.setEnabled(False)
            button.setText("Compacting…")
            button.setToolTip("A manual compaction is running")
            return
        status = self.state.status
        reason = status.busy_reason if status else None
        note.setText(BUSY_NOTE.get(reason, reason) if reason else "")
        note.setVisible(bool(reason))
        if status is None:
            button.setEnabled(False)
            button.setText("Compact now")
            button.setToolTip("Select a thread")
        elif reason:
            busy = BUSY_TEXT.get(reason, reason)
            button.setEnabled(False)
            button.setText(f"Can't compact: {busy}")
            button.setToolTip(f"Manual compaction needs an idle thread; this one is {busy}.")
        else:
            button.setEnabled(True)
            button.setText("Compact now")
            blocked = self.blocked_reason(status.thread)
            button.setToolTip(
                f"The last manual compaction could not bring this thread under its threshold: {blocked}" if blocked else "Summarize all complete history before the retained tail"
            )
