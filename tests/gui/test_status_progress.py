"""Issue #16: a cold measurement of a huge thread shows its progress ("measuring pressure: N of M
messages counted") in the header and on the gauge until the status replaces it; the progress of a
measurement of a thread no longer open is dropped."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from inspector_app.main_window import MainWindow
from inspector_app.panels.pressure.widget import measuring_text
from tests.gui.fake_service import FakeService

pytestmark = pytest.mark.gui
OLD, NEW = "omega-long", "beta-running"


def click_thread(w: MainWindow, key: str) -> None:
    """Select ``key`` in the thread list as a click does."""
    row = w.thread_proxy.mapFromSource(w.thread_model.index(w.thread_model.row_of(key), 0))
    w.thread_list.setCurrentIndex(row)


def test_a_slow_cold_measurement_shows_its_progress_then_the_status(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    total = len(fake.threads[OLD].messages)
    assert total > 2 * fake.STATUS_PAGE  # several pages
    gate = fake.status_gates[OLD] = threading.Event()
    click_thread(window, OLD)
    first = f"measuring pressure: {fake.STATUS_PAGE} of {total:,} messages counted"
    qtbot.waitUntil(lambda: first in window.thread_meta.text(), timeout=5000)
    assert window.thread_meta.text() == f"{total:,} messages · {first}"
    assert window.gauge.progress == (fake.STATUS_PAGE, total) and window.gauge.progress_text == first == measuring_text(fake.STATUS_PAGE, total)
    assert window.gauge.toolTip() == first
    assert not window.gauge.grab().isNull()  # the determinate state paints
    assert window.state.status is None and window.timeline_model.key == OLD  # the timeline is already shown

    gate.set()
    qtbot.waitUntil(lambda: window.state.status is not None and window.state.status.thread == OLD and window.idle, timeout=5000)
    qtbot.wait(50)  # any late progress update reaches the loop (and must be dropped: the status is in)
    assert window.gauge.progress is None and window.gauge.progress_text is None
    assert window.gauge.status is not None and window.gauge.status.thread == OLD and window.gauge.status.tokens == 84_900
    meta = window.thread_meta.text()
    assert "measuring" not in meta and "generation 0" in meta and "of threshold" in meta
    assert "measuring" not in window.gauge.toolTip()
    assert fake.called("status_with_progress") >= 2  # acme-vat when the window opened, then omega-long


def test_the_progress_of_a_thread_no_longer_open_is_ignored(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    controller = window.threads
    seen: list[tuple[str, int]] = []
    show = controller._show_status_progress

    def spy(token: tuple[str, int], counted: int, total: int | None, meta: str) -> None:
        seen.append((token[0], counted))
        show(token, counted, total, meta)

    controller._show_status_progress = spy  # type: ignore[method-assign]
    total = len(fake.threads[OLD].messages)
    gate = fake.status_gates[OLD] = threading.Event()
    click_thread(window, OLD)
    qtbot.waitUntil(lambda: "measuring pressure" in window.thread_meta.text(), timeout=5000)
    click_thread(window, NEW)  # the old measurement goes on on its worker, its view is gone
    qtbot.waitUntil(lambda: window.state.status is not None and window.state.status.thread == NEW and window.idle, timeout=5000)
    mark = len(seen)
    gate.set()
    qtbot.waitUntil(lambda: (OLD, total) in seen[mark:], timeout=5000)  # the old thread's last page reached the GUI thread
    qtbot.wait(50)
    qtbot.waitUntil(lambda: window.idle, timeout=5000)
    assert window.gauge.progress is None and window.gauge.status is not None and window.gauge.status.thread == NEW
    meta = window.thread_meta.text()
    assert "measuring" not in meta and "generation" in meta and window.thread_title.text() == "Beta refund (running)"
    assert window.state.status.thread == NEW and not window.banner.isVisible()
