"""What a click (or Enter) on an event does: its subject shown in the timeline (the new boundary, or
the first pruned result; a source's compaction: the message it came after), the page around it
loaded when it is not yet (moved from the selection controller, issue 24). Also the events list
itself: set with the thread's events (the source's compactions first), and its selection kept
across a refresh (moved from the threads controller)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QModelIndex

from ...logic.tasks import ThreadTasks
from ..ports import Paging
from .model import EventRole, TargetRole, event_target


class EventsController:
    """The Events tab: its rows, and a click on one shows its subject in the timeline."""

    def __init__(self, ui: Any, view: ThreadTasks, paging: Paging) -> None:
        self.ui = ui
        self.view = view
        self.paging = paging
        self.model = ui.timeline_model
        ui.events_view.activated.connect(self._on_event_activated)
        ui.events_view.clicked.connect(self._on_event_activated)

    def _on_event_activated(self, index: QModelIndex) -> None:
        """Show the event's subject in the timeline: the new boundary, or the first pruned result."""
        event = index.siblingAtColumn(0).data(EventRole)
        # a source's compaction (no event of ours): the message it came after
        target = event_target(event) if event is not None else index.siblingAtColumn(0).data(TargetRole)
        if target is None:
            return
        boundary = self.model.boundary
        on_boundary = event is not None and boundary is not None and event.data.get("boundary_after") == boundary.boundary
        found = self.model.boundary_index() if on_boundary else self.model.index_for_message(target)
        if found.isValid():
            self.ui.timeline.setCurrentIndex(found)
            self.ui.timeline.scrollTo(found)
        else:  # in a part not loaded yet: load the page around it
            self.view.spawn(self.paging.show_boundary() if on_boundary else self.paging.go_to(target), "show event")


    def set_events(self, events: list[Any]) -> None:
        """The thread's events, the source's compactions first; the tab's title counts them."""
        set_events(self.ui, events)

    def selected(self) -> int | None:
        """The id of the event selected in the Events tab (None: none)."""
        return selected_event(self.ui)

    def select(self, event_id: int | None) -> None:
        """Select event ``event_id`` again (after a refresh), when it is still listed."""
        select_event(self.ui, event_id)


def set_events(ui: Any, events: list[Any]) -> None:
    ui.events_model.set_events(events, sources=ui.timeline_model.core.sources)  # the source's compactions first
    ui.set_events_count(ui.events_model.rowCount())


def selected_event(ui: Any) -> int | None:
    """The id of the event selected in the Events tab (None: none)."""
    event = ui.events_view.currentIndex().siblingAtColumn(0).data(EventRole)
    return getattr(event, "id", None)


def select_event(ui: Any, event_id: int | None) -> None:
    if event_id is None:
        return
    model = ui.events_model
    row = model.row_of(event_id)
    if row is not None:
        ui.events_view.setCurrentIndex(model.index(row, 0))
