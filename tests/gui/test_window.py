"""The main window against the fake service, on a per-test qasync loop (sync tests + qtbot.waitUntil)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint, QSettings, Qt
from PySide6.QtGui import QFontDatabase, QImage
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QAbstractItemView, QLabel, QListView, QPushButton

from engine.core.messages import assistant, user
from inspector_app.main_window import MainWindow
from inspector_app.models.timeline import NEWEST, CompactedRole, MessageIdRole, NodeKindRole
from inspector_app.panels.detail.widget import message_body
from inspector_app.widgets.connect import RecentConnections, strip_password
from tests.gui.conftest import run
from tests.gui.fake_service import FakeService, long_conversation

pytestmark = pytest.mark.gui
ROOT = Path(__file__).resolve().parents[2]


def select_message(qtbot: Any, w: MainWindow, message_id: int) -> None:
    index = w.timeline_model.index_for_message(message_id)
    assert index.isValid(), message_id
    w.timeline.setCurrentIndex(index)
    qtbot.waitUntil(lambda: w.idle, timeout=5000)


def test_selecting_a_thread_fills_the_timeline_and_the_gauge(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    assert window.findChild(object, "threadList").model().rowCount() == 5
    assert window.timeline_model.loaded_count() == 12
    assert window.gauge.status is not None and window.gauge.status.thread == "acme-vat"
    assert window.gauge.status.tokens == 62_000
    assert window.chart.points() and window.thread_title.text() == "ACME VAT correction"

    window.thread_list.setCurrentIndex(window.thread_proxy.index(4, 0))  # omega-long (sorted by key)
    qtbot.waitUntil(lambda: window.idle and window.timeline_model.key == "omega-long", timeout=5000)
    pages = [args for name, args in fake.calls if name == "messages_page" and args[0] == "omega-long"]
    assert pages[0] == ("omega-long", None, 500, None)  # keyset paging from the start, 500 per page
    assert window.timeline_model.loaded_count() == 500  # the gap row below is off screen: nothing more is read
    assert window.gauge.status.thread == "omega-long"
    assert window.timeline_model.boundary_index().isValid() is False


def test_boundary_row_carries_the_summary_card_and_compacted_rows_are_dimmed(qtbot: Any, window: MainWindow) -> None:
    model = window.timeline_model
    boundary = model.boundary_index()
    assert boundary.isValid() and boundary.row() == 1
    first_unit = model.index(0, 0)
    assert model.data(first_unit, CompactedRole) is True
    assert model.data(first_unit, Qt.ItemDataRole.ForegroundRole) is not None
    assert model.data(model.index(2, 0), CompactedRole) is False
    window.timeline.setCurrentIndex(boundary)
    assert window.detail.stack.currentWidget() is window.detail.card
    assert "invoice #4411" in window.detail.card_text.toPlainText()
    assert "generation 1" in window.detail.card_title.text() and "summary / pressure" in window.detail.card_title.text()


def test_hint_shows_at_85_percent_and_not_at_84_9(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    run(qtbot, window, window.select_thread("omega-long"))
    assert fake.threads["omega-long"].tokens == 84_900
    assert not window.gauge.hint_active and window.hint_label.isHidden()
    fake.threads["omega-long"].tokens = 85_000
    run(qtbot, window, window.refresh())
    assert window.gauge.hint_active and not window.hint_label.isHidden()
    window.gauge.grab()  # the highlighted hint paints without error


def test_compact_on_an_idle_thread_calls_the_service_and_rereads(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    button = window.findChild(QPushButton, "compactButton")
    assert button.isEnabled() and button.text() == "Compact now"
    before = window.timeline_model.boundary
    assert before is not None and before.boundary == 4
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert window.confirm.isVisible() and fake.called("compact") == 0  # non-blocking confirmation first
    reads_before = fake.called("messages_page")
    qtbot.mouseClick(window.confirm.confirm_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.idle and fake.called("compact") == 1, timeout=5000)
    after = window.timeline_model.boundary
    assert after is not None and after.boundary == 9 and after.generation == 2
    assert fake.called("messages_page") > reads_before  # the view re-read from the service
    assert window.gauge.status.tokens == 62_000 // 3
    assert "Compacted" in window.statusBar().currentMessage()
    assert not window.banner.isVisible()


@pytest.mark.parametrize(("key", "reason"), [("beta-running", "running"), ("gamma-waiting", "waiting for the user"), ("delta-queued", "queued")])
def test_busy_thread_disables_compact_with_the_reason(qtbot: Any, window: MainWindow, key: str, reason: str) -> None:
    run(qtbot, window, window.select_thread(key))
    button = window.compact_button
    assert not button.isEnabled()
    assert reason in button.text() and reason in button.toolTip()


def test_thread_busy_race_lands_in_the_error_banner_and_nothing_changes(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    fake.compact_race = "running"
    failures: list[tuple[str, str]] = []
    window.failed.connect(lambda code, msg: failures.append((code, msg)))
    qtbot.mouseClick(window.compact_button, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(window.confirm.confirm_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.idle and bool(failures), timeout=5000)
    assert failures[0][0] == "thread_busy"
    assert window.banner.isVisible() and window.banner.text().startswith("thread_busy")
    assert window.timeline_model.boundary.boundary == 4
    assert window.compact_button.isEnabled() and window.busy.isHidden()


def test_replay_steps_forward_and_back(qtbot: Any, window: MainWindow) -> None:
    panel = window.findChild(object, "replayPanel")
    assert panel.episodes.count() == 2
    back, forward = panel.findChild(QPushButton, "replayBack"), panel.findChild(QPushButton, "replayForward")
    assert not back.isEnabled() and panel.kind.text() == "Step 1 of 4: provider_error"
    qtbot.mouseClick(forward, Qt.MouseButton.LeftButton)
    assert panel.kind.text() == "Step 2 of 4: prune"
    assert panel.facts["tokens"].text() == "131,000 → 104,000" and panel.facts["generation"].text() == "1 → 2"
    assert panel.findChild(QListView, "replaySurface").model().rowCount() == 8
    qtbot.mouseClick(forward, Qt.MouseButton.LeftButton)
    assert panel.surface_model.rowCount() == 5  # summary + synthetic user + 3 messages
    qtbot.mouseClick(back, Qt.MouseButton.LeftButton)
    assert panel.kind.text() == "Step 2 of 4: prune"
    panel.episodes.setCurrentIndex(1)
    assert panel.no_progress.isHidden()
    qtbot.mouseClick(forward, Qt.MouseButton.LeftButton)
    assert not panel.findChild(QLabel, "noProgress").isHidden()


def test_pruned_result_shows_preview_beside_the_verified_original(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    offload = fake.threads["acme-vat"].offloads[7]
    select_message(qtbot, window, 7)
    assert window.detail.showing_pruned
    assert window.detail.preview.toPlainText() == offload.preview
    assert window.detail.original.toPlainText().startswith("Reverse charge applies")
    assert "SHA-256 verified" in window.detail.original_status.text()


def test_tampered_original_is_an_error_not_silently_shown(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    offload = fake.threads["acme-vat"].offloads[7]
    Path(offload.path).write_text("tampered", encoding="utf-8")
    select_message(qtbot, window, 7)
    assert window.detail.original.toPlainText() == ""
    assert "workdir_integrity" in window.detail.original_status.text()
    assert window.banner.text().startswith("workdir_integrity")


def test_tool_arguments_are_pretty_printed(qtbot: Any, window: MainWindow) -> None:
    select_message(qtbot, window, 6)
    body = window.detail.body.toPlainText()
    assert '→ query_kb  [c2]\n{\n  "q": "reverse charge"\n}' in body


def test_live_refresh_appends_and_keeps_the_selection(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    select_message(qtbot, window, 10)
    fake.append("acme-vat", user("One more question about the credit note"))
    fake.append("acme-vat", assistant("Sure, here it is."))
    run(qtbot, window, window.refresh())
    assert window.timeline_model.loaded_count() == 14
    assert window.timeline.currentIndex().data(MessageIdRole) == 10
    assert window.timeline_model.index_for_message(fake.threads["acme-vat"].messages[-1].id).isValid()


def test_refresh_after_an_outside_compaction_rereads_and_keeps_the_selection(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    select_message(qtbot, window, 11)
    fake.set_boundary("acme-vat", 9, "someone else compacted")
    run(qtbot, window, window.refresh())
    assert window.timeline_model.boundary.boundary == 9
    assert window.timeline.currentIndex().data(MessageIdRole) == 11


def test_search_and_keyboard_enter_opens_the_detail(qtbot: Any, window: MainWindow) -> None:
    window.tabs.setCurrentIndex(1)
    qtbot.keyClicks(window.search, "corrected invoice")
    qtbot.waitUntil(lambda: window.idle and window.timeline.currentIndex().data(MessageIdRole) == 10, timeout=5000)
    QTest.keyClick(window.search, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.idle and window.timeline.currentIndex().data(MessageIdRole) == 12, timeout=5000)
    assert window.statusBar().currentMessage() == "Match 2 of 2: message #12"
    window.timeline.setFocus()
    QTest.keyClick(window.timeline, Qt.Key.Key_Return)
    assert window.tabs.currentWidget() is window.detail
    QTest.keyClick(window.timeline, Qt.Key.Key_Home)
    assert window.timeline.currentIndex().row() == 0 and window.timeline.currentIndex().data(NodeKindRole) == "unit"


def test_scrolling_fetches_the_next_page(qtbot: Any, make_window: Any, fake: FakeService) -> None:
    w = make_window(page_size=100)
    assert run(qtbot, w, w.open_database("sqlite:///x.db", select="omega-long"))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    assert w.timeline_model.loaded_count() == 100 and not w.timeline_model.reaches_end
    w.timeline.scrollToBottom()
    qtbot.waitUntil(lambda: w.idle and w.timeline_model.loaded_count() >= 200, timeout=5000)
    assert w.timeline_model.message_ids()[:3] == [m.id for m in fake.threads["omega-long"].messages[:3]]


def test_opens_the_thread_with_compaction_history_by_default(qtbot: Any, make_window: Any) -> None:
    w = make_window()
    assert run(qtbot, w, w.open_database("sqlite:///x.db"))
    assert w.timeline_model.key == "acme-vat"  # the only thread with a compaction
    assert w.detail.stack.currentWidget() is w.detail.card  # opened on its summary card


def test_open_failure_is_shown_in_the_banner(qtbot: Any, make_window: Any) -> None:
    def broken(_url: str) -> Any:
        raise ConnectionError("could not connect to server: Connection refused")

    w = make_window(opener=broken)
    assert run(qtbot, w, w.open_database("postgresql://u@127.0.0.1:1/x")) is False
    assert w.banner.isVisible() and "Connection refused" in w.banner.text()
    assert not w.compact_button.isEnabled()


def test_service_calls_run_off_the_gui_thread(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    seen: list[str] = []
    original = fake.status
    fake.status = lambda key: (seen.append(threading.current_thread().name), original(key))[1]  # type: ignore[method-assign]
    run(qtbot, window, window.refresh())
    assert seen and all(name.startswith("inspector-service") for name in seen)


def test_recent_connections_never_store_passwords(settings: QSettings, tmp_path: Path) -> None:
    recent = RecentConnections(settings)
    recent.add("postgresql+psycopg://alice:s3cret@db.example:5432/threads")
    recent.add("sqlite:////tmp/a.db")
    assert recent.urls() == ["sqlite:////tmp/a.db", "postgresql+psycopg://alice@db.example:5432/threads"]
    assert "s3cret" not in (tmp_path / "inspector.ini").read_text()
    assert strip_password("postgresql://:pw@h/db") == "postgresql://h/db"


def test_screenshot_renders_the_loaded_window_offscreen(qapp: Any, tmp_path: Path) -> None:
    assert any("DejaVu" in f for f in QFontDatabase.families()), "no real font: the screenshot would have no text"
    out = tmp_path / "shot.png"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.gui.run_fake_inspector", "--db", "demo.db", "--thread", "acme-vat", "--screenshot", str(out), "--theme", "dark"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, env={"QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    image = QImage(str(out))
    assert image.width() >= 1200 and image.height() >= 700
    # text was drawn: the thread title area has many light (text) pixels on the dark theme
    light = sum(1 for x in range(360, 900) for y in range(60, 110) if image.pixelColor(x, y).lightness() > 180)
    assert light > 200


def test_showing_the_window_again_keeps_the_splitter(qtbot: Any, window: MainWindow) -> None:
    sizes = window.splitter.sizes()
    assert sizes[0] > 0 and sizes[2] > 0
    window.hide()
    window.show()  # a second showEvent must not recompute (or fail to compute) the proportions
    assert window.splitter.sizes() == sizes


def test_events_tab_lists_the_thread_events(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    assert fake.called("events") >= 1
    assert window.events_model.rowCount() == 0 and not window.events_empty.isHidden()
    assert window.tabs.tabText(3) == "Events"
    window.show_tab("events")
    assert window.tabs.currentIndex() == 3


# -- long threads: the end in one read, gap rows on demand ----------------------------------------

HUGE = 20_000


@pytest.fixture
def huge(qtbot: Any, make_window: Any, fake: FakeService) -> MainWindow:
    """A window on a 20,000-message thread with 200-message pages, first page shown."""
    fake.add_thread("zeta-huge", long_conversation(HUGE), title="Zeta: a very long thread")
    w = make_window(page_size=200)
    assert run(qtbot, w, w.open_database("sqlite:///x.db", select="zeta-huge"))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    assert w.timeline_model.loaded_count() == 200
    return w


def page_reads(fake: FakeService) -> list[tuple[Any, ...]]:
    """(key, after_id, limit, before_id) of every timeline page read of the long thread (not body reads)."""
    return [args for name, args in fake.calls if name == "messages_page" and args[0] == "zeta-huge" and args[2] > 1]


@pytest.mark.parametrize("how", ["end", "ctrl_end", "action", "scroll_to_bottom"])
def test_end_jumps_to_the_newest_page_without_reading_the_middle(qtbot: Any, huge: MainWindow, fake: FakeService, how: str) -> None:
    w, messages = huge, fake.threads["zeta-huge"].messages
    w.timeline.setFocus()
    if how == "end":
        QTest.keyClick(w.timeline, Qt.Key.Key_End)
    elif how == "ctrl_end":
        QTest.keyClick(w.timeline, Qt.Key.Key_End, Qt.KeyboardModifier.ControlModifier)
    elif how == "action":
        w.newest_action.trigger()
    else:
        w.timeline.scrollToBottom()
    qtbot.waitUntil(lambda: w.idle and w.timeline_model.reaches_end, timeout=5000)
    assert page_reads(fake) == [("zeta-huge", None, 200, None), ("zeta-huge", None, 200, NEWEST)]  # two pages, not a hundred
    assert w.timeline_model.loaded_count() == 400
    newest = messages[-1]
    assert w.timeline.currentIndex().data(MessageIdRole) == newest.id
    assert w.timeline.viewport().rect().contains(w.timeline.visualRect(w.timeline.currentIndex()).center())
    bar = w.timeline.verticalScrollBar()
    assert bar.value() == bar.maximum()
    (gap,) = w.timeline_model.gaps()
    assert w.timeline_model.index_of(gap).data() == f"… {HUGE - 400:,} messages not loaded — Enter to load"
    qtbot.waitUntil(lambda: w.detail.body.toPlainText() == message_body(newest.message), timeout=5000)  # its body, read on selection


def test_scrolling_up_from_the_end_loads_the_gap_from_below_and_keeps_the_rows_in_place(qtbot: Any, huge: MainWindow, fake: FakeService) -> None:
    w = huge
    w.request_newest()
    qtbot.waitUntil(lambda: w.idle and w.timeline_model.reaches_end, timeout=5000)
    model = w.timeline_model
    (gap,) = model.gaps()
    below = gap.last_id
    w.timeline.scrollTo(model.index_of(gap), QAbstractItemView.ScrollHint.PositionAtTop)  # the gap row shows at the top
    anchor = w.timeline.indexAt(w.timeline.viewport().rect().topLeft() + QPoint(5, 25))
    anchored = anchor.data(MessageIdRole) or model.node(anchor).first_id
    qtbot.waitUntil(lambda: w.idle and model.loaded_count() >= 600, timeout=5000)
    assert ("zeta-huge", None, 200, below) in page_reads(fake)  # read backward from the gap's lower side
    assert model.gaps() == [gap] and gap.last_id < below
    index = model.index_for_message(anchored)
    assert w.timeline.viewport().rect().contains(w.timeline.visualRect(index).center())  # what was on screen stayed


def test_enter_on_the_gap_row_loads_the_next_page_and_moves_into_it(qtbot: Any, huge: MainWindow, fake: FakeService) -> None:
    w = huge
    model = w.timeline_model
    (gap,) = model.gaps()
    above = gap.first_id
    w.timeline.setCurrentIndex(model.index_for_message(above))
    w.timeline.setFocus()
    QTest.keyClick(w.timeline, Qt.Key.Key_Down)
    assert w.timeline.currentIndex().data(NodeKindRole) == "gap"
    QTest.keyClick(w.timeline, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: w.idle and model.loaded_count() >= 400, timeout=5000)
    first_new = fake.threads["zeta-huge"].messages[200].id
    assert ("zeta-huge", above, 200, None) in page_reads(fake)
    assert w.timeline.currentIndex().data(MessageIdRole) == first_new  # on the first row the gap gave
    assert model.gaps()[0].first_id > first_new


def test_a_boundary_deep_in_a_gap_still_opens_on_its_summary_card(qtbot: Any, make_window: Any, fake: FakeService) -> None:
    messages = fake.add_thread("zeta-huge", long_conversation(HUGE)).messages
    b = next(messages[i].id for i in range(HUGE // 2, HUGE) if messages[i + 1].message.role == "user")
    fake.set_boundary("zeta-huge", b, "Half a thread, summarized.")
    w = make_window(page_size=200)
    assert run(qtbot, w, w.open_database("sqlite:///x.db", select="zeta-huge"))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    model = w.timeline_model
    assert not model.boundary_index().isValid() and not model.contains(b)
    assert w.detail.stack.currentWidget() is w.detail.card and "Half a thread" in w.detail.card_text.toPlainText()
    assert w.summary_button.isVisible()
    qtbot.mouseClick(w.summary_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: w.idle and model.boundary_index().isValid(), timeout=5000)
    assert w.timeline.currentIndex() == model.boundary_index()
    assert model.data(model.index(model.boundary_index().row() - 1, 0), CompactedRole) is True
    reads = page_reads(fake)
    assert reads[1:3] == [("zeta-huge", None, 50, b + 1), ("zeta-huge", b, 150, None)]  # the page around the boundary
    assert len(reads) <= 4 and model.loaded_count() <= 800  # (and the gap row above it, shown on screen), not the thread


def test_a_long_scroll_keeps_the_model_bounded_and_home_goes_back_to_the_start(qtbot: Any, huge: MainWindow, fake: FakeService) -> None:
    w, model = huge, huge.timeline_model
    bar = w.timeline.verticalScrollBar()
    peak = 0
    for _ in range(30):  # 6,000 messages, page by page, as dragging the scroll bar down does
        newest = model.last_id()
        bar.setValue(bar.maximum())
        qtbot.waitUntil(lambda: w.idle and model.last_id() != newest, timeout=5000)
        peak = max(peak, model.loaded_count())
    assert model.last_id() >= fake.threads["zeta-huge"].messages[6000].id
    assert peak < 4000 and not model.reaches_start  # the rows far above were dropped back into a gap row
    assert model.data(model.index(0, 0), NodeKindRole) == "gap"
    w.timeline.setFocus()
    QTest.keyClick(w.timeline, Qt.Key.Key_Home)
    qtbot.waitUntil(lambda: w.idle and model.reaches_start, timeout=5000)
    first = fake.threads["zeta-huge"].messages[0].id
    assert w.timeline.currentIndex() == model.index(0, 0) and model.index_for_message(first).isValid()
    assert ("zeta-huge", None, 200, None) in page_reads(fake)[1:]  # one read of the first page again
