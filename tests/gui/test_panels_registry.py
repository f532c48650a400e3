"""Issue 24: the side panels from one list, and each controller given only the service facets it
calls (``ServiceClient.facets``) and the window's interface (``logic.window.Window``)."""

from __future__ import annotations

from typing import Any

import pytest

from inspector_app.logic.choices import TABS
from inspector_app.panels.registry import PANELS
from inspector_app.service_api import CompactionAPI, ReadsAPI, SteeringAPI, ThreadsFacet
from inspector_app.service_client import FacetClient, ServiceClient, ServiceView
from tests.gui.conftest import run
from tests.gui.fake_service import FakeService

pytestmark = pytest.mark.gui


def test_the_panels_are_the_side_tabs_in_their_order(window: Any) -> None:
    assert tuple(p.name for p in PANELS) == TABS
    assert [window.tabs.widget(i) for i in range(window.tabs.count())] == [window.pages[name] for name in TABS]
    assert set(window.panels) == {p.name for p in PANELS if p.controller is not None}


def test_a_facet_client_calls_only_the_facets_it_was_granted(qtbot: Any, window: Any, fake: FakeService) -> None:
    reads = window.client.facets(ReadsAPI)
    assert isinstance(reads, FacetClient) and reads.facets == {"reads"}
    info = run(qtbot, window, reads.call(ReadsAPI.thread, "acme-vat"))
    assert info.key == "acme-vat"
    with pytest.raises(TypeError, match="compaction.status is not granted"):
        run(qtbot, window, reads.call(CompactionAPI.status, "acme-vat"))
    assert run(qtbot, window, reads.apply(lambda svc: svc.reads.thread("acme-vat").key)) == "acme-vat"
    with pytest.raises(AttributeError, match="'compaction' is not granted"):
        run(qtbot, window, reads.apply(lambda svc: svc.compaction.status("acme-vat")))
    with pytest.raises(TypeError):
        ServiceClient().facets(int)


def test_the_service_view_hides_close_and_other_facets(fake: FakeService) -> None:
    view = ServiceView(fake, frozenset({"threads"}))
    assert view.threads is fake.threads
    for name in ("reads", "imports", "close"):
        with pytest.raises(AttributeError):
            getattr(view, name)


def test_each_controller_is_given_the_facets_it_calls(window: Any) -> None:
    granted = {
        "paging": {"reads", "compaction"}, "search_control": {"reads"}, "compaction": {"compaction", "reads"},
        "thread_pages": {"threads", "reads"}, "fleet": {"threads"}, "importer": {"imports"}, "sessions": {"imports"},
        "steering": {"steering"}, "threads": {"threads", "reads", "compaction"}, "live": {"reads", "compaction"},
    }  # fmt: skip
    for attr, facets in granted.items():
        assert getattr(window, attr).client.facets == facets, attr
    panels = {"detail": {"reads"}, "replay": {"reads"}, "checks": {"reads"}, "audit": {"compaction", "steering"}}
    for name, facets in panels.items():
        assert window.panels[name].client.facets == facets, name
    assert ThreadsFacet and SteeringAPI  # the Protocols named above


def test_the_controllers_reach_the_window_through_its_interface(window: Any) -> None:
    for control in (window.compaction, window.thread_pages, window.importer, window.sessions, window.steering, window.live, window.revert_audit):
        assert control.window is window
    assert window.fleet.main is window
    assert window.current_key() == "acme-vat" and not window.compacting
