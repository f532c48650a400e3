"""The side panels, registered from one list (issue 24): :data:`PANELS`, in the order of
:data:`inspector_app.logic.choices.SIDE_TABS` (the Qt-free list of names and titles the command
line reads). Each entry names its tab, builds its page (the layout builds every page from here) and
makes its controller from :class:`PanelDeps`, taking only what it uses: the facets of the service it
calls (``deps.client.facets(ReadsAPI)``), the window's task groups, the open thread's state, the
window's interface (:class:`~inspector_app.logic.window.Window`).

Adding a side panel: its package (``panels/<name>/``: widget, model, controller), its line in
``SIDE_TABS`` and its line here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from PySide6.QtWidgets import QWidget

from ..logic.choices import TABS
from ..logic.state import ThreadState
from ..logic.tasks import Report, TaskSet, ThreadTasks
from ..logic.window import Window
from ..service_api import CompactionAPI, ReadsAPI, SteeringAPI
from ..service_client import ServiceClient
from ..widgets.dropped import boundary_dropped
from .audit.controller import RevertAuditController
from .audit.widget import AuditPanel
from .checks.controller import ChecksController
from .checks.widget import ChecksPanel
from .detail.controller import SelectionController
from .detail.widget import DetailPane
from .events.controller import EventsController
from .events.widget import EventsPanel
from .ports import Paging
from .pressure.widget import PressurePage
from .replay.controller import ReplayController
from .replay.widget import ReplayPanel

C = TypeVar("C")


@dataclass(frozen=True)
class PanelDeps:
    """What the window offers the panels' controllers; each takes what it uses."""

    #: the window's widgets (its layout: the panels' pages, the timeline, the header, the menus)
    ui: Any
    #: the service client; a controller is handed only the facets it calls (:meth:`ServiceClient.facets`)
    client: ServiceClient
    tasks: TaskSet
    view: ThreadTasks
    state: ThreadState
    report: Report
    paging: Paging
    #: Compact now (whether the open thread is idle, held or read-only; told of a read-only store)
    compaction: Any
    window: Window


@dataclass(frozen=True)
class Panel:
    """One side panel: its tab's name, its page, and its controller (None: the page only shows what
    another component gives it)."""

    name: str
    page: Callable[[], QWidget]
    controller: Callable[[PanelDeps], object] | None = None


def _detail(d: PanelDeps) -> SelectionController:
    control = SelectionController(d.ui, d.client.facets(ReadsAPI), d.view, d.paging, d.report)
    # the summary card's dropped specifics come from the open thread's summary events
    d.ui.detail.boundary_dropped = lambda info: boundary_dropped(
        d.ui.events_model.events(), info, d.state.thread.id if d.state.thread is not None else None
    )
    d.ui.events_model.modelReset.connect(d.ui.detail.refresh_dropped)
    return control


def _replay(d: PanelDeps) -> ReplayController:
    return ReplayController(d.ui, d.client.facets(ReadsAPI), d.view, d.paging, d.report)


def _events(d: PanelDeps) -> EventsController:
    return EventsController(d.ui, d.view, d.paging)


def _checks(d: PanelDeps) -> ChecksController:
    return ChecksController(d.ui.checks_panel, d.ui.tabs, d.ui.set_checks_count, d.client.facets(ReadsAPI), d.view)


def _audit(d: PanelDeps) -> RevertAuditController:
    # issue 23: Revert on the summary card, the Audit tab, a store that cannot be written
    control = RevertAuditController(d.ui, d.client.facets(CompactionAPI, SteeringAPI), d.tasks, d.view, d.state, d.report,
                                    window=d.window, compaction=d.compaction)  # fmt: skip
    d.ui.threadLoaded.connect(control.thread_loaded)
    return control


#: the side panels, in the order of their tabs
PANELS: tuple[Panel, ...] = (
    Panel("detail", DetailPane, _detail),
    Panel("pressure", PressurePage),  # the gauge and chart: fed with the thread's status (controllers.threads)
    Panel("replay", ReplayPanel, _replay),
    Panel("events", EventsPanel, _events),
    Panel("checks", ChecksPanel, _checks),
    Panel("audit", AuditPanel, _audit),
)
if tuple(p.name for p in PANELS) != TABS:  # the one list of tabs and this one name the same panels in the same order
    raise RuntimeError(f"panels {[p.name for p in PANELS]} are not the side tabs {list(TABS)}")


def build_pages() -> dict[str, QWidget]:
    """Every panel's page, by name (for :meth:`inspector_app.layout.InspectorLayout.add_side_tabs`)."""
    return {p.name: p.page() for p in PANELS}


class Controllers(dict[str, object]):
    """The panels' controllers by name; :meth:`of` hands one back typed."""

    def of(self, name: str, kind: type[C]) -> C:
        control = self[name]
        if not isinstance(control, kind):
            raise TypeError(f"the {name} panel's controller is a {type(control).__name__}, not a {kind.__name__}")
        return control


def build_controllers(deps: PanelDeps) -> Controllers:
    """Every panel's controller, in the list's order."""
    return Controllers({p.name: p.controller(deps) for p in PANELS if p.controller is not None})
