"""What the detail pane shows: the current timeline row (a message's full body, read on selection,
and the verified original of a pruned result). Enter on a compaction row opens its before/after in
the replay panel (:mod:`inspector_app.panels.replay.controller`); a click on an event shows its row
(:mod:`inspector_app.panels.events.controller`)."""

from __future__ import annotations

import asyncio
from typing import Any

from PySide6.QtCore import QModelIndex

from engine.core.views import Offload

from ...logic.state import error_code, error_text
from ...logic.tasks import Report, ThreadTasks
from ...models.timeline import Node
from ...service_api import ReadsAPI
from ...service_client import FacetClient
from ..ports import Paging


class SelectionController:
    """Follows the timeline's current row into the detail pane."""

    def __init__(self, ui: Any, client: FacetClient, view: ThreadTasks, paging: Paging, report: Report) -> None:
        self.ui = ui
        self.client = client
        self.view = view
        self.paging = paging
        self.report = report
        self.model = ui.timeline_model
        self._gap_backward = False  # the current gap row was reached from below
        self._body: asyncio.Task[None] | None = None  # the current message's body being read
        ui.timeline.selectionModel().currentChanged.connect(self._on_current)
        ui.timeline.activated.connect(self._on_activated)
        ui.summary_button.clicked.connect(lambda: self.view.spawn(self.paging.show_boundary(), "show summary"))

    def _on_current(self, current: QModelIndex, previous: QModelIndex) -> None:
        if self._body is not None and not self._body.done():
            self._body.cancel()  # the selection moved on: the previous body (and original) is not shown
        node = self.model.node(current)
        if node is None:
            return
        timeline, detail = self.ui.timeline, self.ui.detail
        if node.kind == "boundary" and self.model.boundary is not None:
            detail.show_boundary(self.model.boundary)
        elif node.kind == "source" and node.source is not None:
            detail.show_source_compaction(node.source)
        elif node.kind == "message" and node.info is not None:
            self._body = self.view.spawn(self._show_body(node), "read message")
        elif node.kind == "gap":
            self._gap_backward = previous.isValid() and timeline.visualRect(previous).top() > timeline.visualRect(current).top()
            detail.show_text("Not loaded yet", f"{node.label}\nThese messages load when the row scrolls into view; Enter loads the next page.")
        else:
            ids = f"#{node.first_id}–#{node.last_id}" if node.first_id is not None else ""
            tokens = f"{node.tokens:,} tokens" if node.tokens is not None else ""
            lines = [node.label, " · ".join(filter(None, (f"{len(node.children)} rows", ids, tokens, *node.markers)))]
            if node.compacted:
                lines.append("Compacted: the model sees only the summary of this.")
            detail.show_text(node.kind.capitalize(), "\n".join(lines))

    async def _show_body(self, node: Node) -> None:
        """The selected message in full: its body is read now (the timeline keeps previews only).
        Selecting another row cancels this task."""
        key, info = self.model.key, node.info
        if key is None or info is None:
            return
        try:
            (stored,) = await self.client.call_interactive(ReadsAPI.messages_page, key, after_id=info.id - 1, limit=1) or (None,)
        except Exception as exc:  # noqa: BLE001 - the message shows why in place; the rest stays usable
            self.ui.detail.show_text(f"Message #{info.id} cannot be read", f"{error_code(exc)}: {error_text(exc)}")
            raise
        if stored is None or stored.id != info.id:
            return  # no longer in the thread
        offload = self.model.offload(info.id)
        self.ui.detail.show_message(stored, offload, tokens=node.tokens, original_tokens=node.original_tokens)
        if offload is not None:
            await self._read_original(offload)

    async def _read_original(self, offload: Offload) -> None:
        try:
            text = await self.client.call(ReadsAPI.read_original, offload)
        except Exception as exc:  # noqa: BLE001 - integrity and missing-file errors are shown in place
            self.ui.detail.show_original_error(offload, f"{error_code(exc)}: {error_text(exc)}")
            self.report(exc, "read original")
            return
        self.ui.detail.show_original(offload, text)

    def _on_activated(self, index: QModelIndex) -> None:
        node = self.model.node(index)
        if node is not None and node.kind == "gap":
            self.model.gap_cancelled(node)  # Enter retries a failed gap
            self.view.spawn(self.paging.load_gap(node, backward=self._gap_backward), "load messages")
            return
        if node is not None and node.kind in ("boundary", "source"):  # Enter on a compaction: its before/after (the replay panel's)
            return
        self.ui.tabs.setCurrentWidget(self.ui.detail)
        self.ui.detail.body.setFocus()
