"""The live refresh leaves a thread alone while its first status is still being read: a second
status read would wait for the first in the engine and hold the other background worker, so the
token badges of the timeline's pages would wait for a cold measurement of a huge thread."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from engine.core.messages import user
from inspector_app.main_window import MainWindow
from tests.gui.fake_service import FakeService

pytestmark = pytest.mark.gui


def test_poll_waits_for_the_first_status_and_badges_do_not(qtbot: Any, make_window: Any, fake: FakeService) -> None:
    gate = threading.Event()
    status = fake.status
    in_flight: list[str] = []

    def slow_status(key: str) -> Any:  # a cold measurement of a huge thread
        in_flight.append(key)
        gate.wait(10)
        return status(key)

    fake.status = slow_status  # type: ignore[method-assign]
    window: MainWindow = make_window()
    opened = window.spawn(window.open_database("sqlite:///fake.db", select="acme-vat"), "open")
    try:
        qtbot.waitUntil(lambda: bool(in_flight) and window.timeline_model.loaded_count() > 0, timeout=5000)
        assert window.live.loading
        window.live._on_poll()  # the poll timer fires while the status is measured
        qtbot.wait(100)
        assert not window.live.refreshing and in_flight == ["acme-vat"]  # no second status read
        # the first page's token badges came through the other background worker meanwhile
        qtbot.waitUntil(lambda: any(n.tokens is not None for n in window.timeline_model.message_nodes()), timeout=5000)
    finally:
        gate.set()
    qtbot.waitUntil(opened.done, timeout=5000)
    qtbot.waitUntil(lambda: window.idle, timeout=5000)
    assert not window.live.loading and window.state.status is not None
    before = len(in_flight)  # the first read, and the thread list's pressure column
    window.live._on_poll()  # loaded, and nothing changed: the poll reads no status
    qtbot.waitUntil(lambda: window.idle and fake.called("versions") >= 2, timeout=5000)
    assert len(in_flight) == before
    fake.append("acme-vat", user("one more"))
    window.live._on_poll()  # loaded, and the thread changed: the poll reads its status again
    qtbot.waitUntil(lambda: len(in_flight) == before + 1 and in_flight[-1] == "acme-vat", timeout=5000)
    qtbot.waitUntil(lambda: window.idle, timeout=5000)
