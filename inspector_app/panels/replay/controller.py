"""What the replay pane shows: every request's envelope and the before/after view of a compaction,
read off the GUI thread when they are first looked at (moved from the selection controller, issue 24)."""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

from engine.core.views import CompactionEntry, PressurePoint, RequestEnvelope, SourceCompaction

from ...logic.state import error_text
from ...logic.tasks import Report, ThreadTasks
from ...models.timeline import Node
from ...service_api import ReadsAPI
from ...service_client import FacetClient
from ...widgets.diff import DiffWindow
from ..ports import Paging
from .model import RequestRow, request_rows
from .widget import ReplayPanel


class ReplayController:
    """Feeds the replay pane (:class:`~inspector_app.panels.replay.widget.ReplayPanel`): the requests'
    envelopes (``Service.reads.request_envelopes``) and the before/after of a compaction
    (``Service.reads.compaction_history`` + ``Service.reads.compaction_diff``), each read as a task of the open
    thread's view (opening another thread cancels it) the first time its page is shown. A click on
    a point of the pressure chart opens that request; Enter on a boundary row of the timeline (or
    :meth:`show_compaction`, e.g. from the summary card) opens that compaction's before/after."""

    def __init__(self, ui: Any, client: FacetClient, view: ThreadTasks, paging: Paging, report: Report) -> None:
        self.ui = ui
        self.client = client
        self.view = view
        self.report = report
        self.panel: ReplayPanel = ui.replay
        self.window: DiffWindow | None = None
        self._entries: list[CompactionEntry] | None = None
        self._diff_task: asyncio.Task[None] | None = None
        ui.timeline_model.modelReset.connect(self._on_reset)
        self._sequence: Sequence[RequestEnvelope] | None = None  # the open thread's (lazy) envelopes
        self._build_task: asyncio.Task[None] | None = None
        self._building: int | None = None
        self.panel.requestsWanted.connect(lambda: self.view.spawn(self.load_requests(), "replay requests"))
        self.panel.envelopeWanted.connect(self._want_envelope)
        ui.chart.pointsChanged.connect(lambda: self.panel.set_points(self.ui.chart.points()))
        self.panel.diffWanted.connect(self.load_diff_soon)
        self.panel.diff.popOutRequested.connect(self.pop_out)
        self.panel.requests_model.currentChanged.connect(self._follow_request)
        ui.chart.pointClicked.connect(self._on_point)
        compare = getattr(ui.detail, "compareRequested", None)  # a card's "Before / after" (the detail pane's signal, if it has one)
        if compare is not None:
            compare.connect(self.compare)
        self.panel.messageActivated.connect(lambda message_id: self.view.spawn(paging.go_to(message_id), "show message"))
        ui.timeline.activated.connect(self._on_activated)

    def _on_activated(self, index: Any) -> None:
        """Enter on a boundary row (our summary) or a source's compaction row: its before/after
        (moved from the selection controller, which leaves those rows to this one)."""
        node = self.ui.timeline_model.node(index)
        if node is not None and node.kind in ("boundary", "source"):
            self.show_node(node)

    # -- a new view ----------------------------------------------------------------------------
    def _on_reset(self) -> None:
        """The timeline was reset for a thread (another one, or a fresh view): nothing of what the
        pages showed stays; they read again when looked at."""
        self._entries = None
        self._sequence = None
        for task in (self._diff_task, self._build_task):
            if task is not None and not task.done():
                task.cancel()
        self.ui.chart.set_selected(None)
        self.panel.clear_thread(self.ui.timeline_model.key)
        if self.window is not None:
            self.window.view.clear("Another thread is open: choose a compaction of it in the replay pane.")

    # -- requests ------------------------------------------------------------------------------
    async def load_requests(self) -> None:
        """The open thread's requests: ``Service.reads.request_envelopes`` answers a lazy sequence (read
        on a worker); each envelope is rebuilt when indexed, on a worker too (:meth:`_build`),
        the current row's first."""
        key = self.panel.key
        if key is None:
            return
        self.panel.requests_loading()
        try:
            envelopes = await self.client.call(ReadsAPI.request_envelopes, key)
            count = await self.client.run(len, envelopes)
        except Exception as exc:  # noqa: BLE001 - said in the page, and in the banner
            if self.panel.key == key:
                self.panel.requests_failed(error_text(exc))
            raise
        if self.panel.key != key:
            return
        points, episodes = self.ui.chart.points(), self.panel.model.episodes()
        rows: list[RequestRow] | None = await self.client.run(request_rows, count, points, episodes)  # made off the GUI thread
        if self.panel.key != key:
            return
        self._sequence = envelopes
        if self.ui.chart.points() != points or self.panel.model.episodes() != episodes:
            rows = None  # the chart or the episodes changed meanwhile: made again from what is there now
        self.panel.set_requests(count, self.ui.chart.points(), rows=rows)

    def _want_envelope(self, index: int) -> None:
        if self._sequence is None:
            return
        if self._build_task is not None and not self._build_task.done():
            if self._building == index:
                return
            self._build_task.cancel()  # the cursor moved on: its envelope is not needed first
        self._building = index
        self._build_task = self.view.spawn(self._build(self._sequence, index), "rebuild envelope")

    async def _build(self, envelopes: Sequence[RequestEnvelope], index: int) -> None:
        key = self.panel.key
        try:
            envelope = await self.client.run(envelopes.__getitem__, index)
        except Exception as exc:  # noqa: BLE001 - said in place, and in the banner
            if self.panel.key == key:
                self.panel.request_surface_title.setText(f"The envelope of request {index + 1} cannot be rebuilt: {error_text(exc)}")
            raise
        if self.panel.key == key and self._sequence is envelopes:
            self.panel.set_envelope(envelope)

    def _on_point(self, index: int, point: PressurePoint) -> None:
        """A point of the pressure chart was clicked: that request in the replay pane."""
        self.go_to_request(request_id=point.request_id)

    def go_to_request(self, index: int | None = None, *, request_id: int | None = None) -> None:
        """Show the Requests page on request ``index`` (0-based) or the one recorded as ``request_id``."""
        self.ui.tabs.setCurrentWidget(self.panel)
        self.panel.select_request(index, request_id=request_id)
        self.panel.show_page("requests")

    def _follow_request(self, _row: int) -> None:
        """The chart rings the point of the request the Requests page shows."""
        model = self.panel.requests_model
        current = model.current()
        if current is None or current.replay_step is not None:
            return
        envelope = model.envelope(current.index)
        request_id = current.point.request_id if current.point is not None else envelope.request_id if envelope is not None else None
        points = self.ui.chart.points()
        at = next((i for i, p in enumerate(points) if request_id is not None and p.request_id == request_id), None)
        self.ui.chart.set_selected(at)

    # -- before / after ------------------------------------------------------------------------
    def load_diff_soon(self, index: Any = None) -> None:
        """Read compaction ``index`` (None: the latest), dropping a read still running."""
        if self._diff_task is not None and not self._diff_task.done():
            self._diff_task.cancel()
        self.panel.diff_state = "loading"
        self._diff_task = self.view.spawn(self.load_diff(index), "before/after")

    async def entries(self) -> list[CompactionEntry]:
        """The open thread's compactions (read once per view)."""
        key = self.panel.key
        if self._entries is None and key is not None:
            entries = await self.client.call(ReadsAPI.compaction_history, key)
            if self.panel.key != key:  # another view meanwhile (its reset cleared the pages)
                return []
            self._entries = entries
            for view in self._views():
                view.set_entries(entries)
        return list(self._entries or ())

    async def load_diff(self, index: int | None = None) -> None:
        key = self.panel.key
        if key is None:
            return
        views = self._views()
        for view in views:
            view.show_loading(index)
        try:
            entries = await self.entries()
            if not entries:
                for view in views:
                    view.clear()
                self.panel.diff_state = "loaded"
                return
            diff = await self.client.call(ReadsAPI.compaction_diff, key, index)
        except Exception as exc:  # noqa: BLE001 - said in the view, and in the banner
            self.panel.diff_state = "error"
            for view in views:
                view.show_error(error_text(exc))
            raise
        if self.panel.key != key:
            return
        self.panel.diff_state = "loaded"
        for view in self._views():
            view.show_diff(diff, key if view is not self.panel.diff else None)  # the pane's thread is in the header

    def _views(self) -> list[Any]:
        out: list[Any] = [self.panel.diff]
        if self.window is not None:
            out.append(self.window.view)
        return out

    def show_compaction(self, index: int | None = None) -> None:
        """The before/after of compaction ``index`` (1-based; None: the latest) in the replay pane."""
        if self.panel.key is None:
            return
        self.ui.tabs.setCurrentWidget(self.panel)
        self.load_diff_soon(index)  # first: the page then does not ask for the latest itself
        self.panel.show_page("diff")

    def show_node(self, node: Node) -> None:
        """Enter on a boundary row (our summary) or a source's compaction row: its before/after."""
        self.compare(node.source if node.kind == "source" else None)

    def compare(self, target: Any = None) -> None:
        """The before/after of ``target``: a compaction's 1-based ordinal, a ``SourceCompaction``
        (the source's own, e.g. from its card), or None / anything else: our current boundary's
        summary (the newest of ours)."""
        if isinstance(target, int) and not isinstance(target, bool):
            self.show_compaction(target)
            return
        source = target if isinstance(target, SourceCompaction) else None
        self.view.spawn(self._show_node(source), "before/after")

    async def _show_node(self, source: Any) -> None:
        entries = await self.entries()
        if source is None:  # our boundary: the newest summary of ours
            ours = [e.index for e in entries if e.origin == "engine" and e.kind != "prune"]
            self.show_compaction(ours[-1] if ours else None)
            return
        sources = sorted(self.ui.timeline_model.core.sources, key=lambda s: ((s.after_message_id or 0), s.id))
        theirs = [e.index for e in entries if e.origin != "engine"]
        k = next((i for i, s in enumerate(sources) if s.id == source.id), None)
        self.show_compaction(theirs[k] if k is not None and k < len(theirs) else None)

    def pop_out(self) -> None:
        """The before/after view in a window of its own, showing what the pane shows."""
        if self.window is None:
            self.window = DiffWindow(self.ui)
            self.window.view.compactionChosen.connect(self.load_diff_soon)
        view, pane = self.window.view, self.panel.diff
        view.set_entries(pane.entries())
        diff = pane.current_diff()
        if diff is not None:
            view.show_diff(diff, self.panel.key)
        self.window.setWindowTitle(f"Before / after compaction — {self.panel.key}" if self.panel.key else "Before / after compaction")
        self.window.show()
        self.window.raise_()
