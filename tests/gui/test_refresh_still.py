"""What a refresh keeps and the small things around it (issue 22, "a view that holds still"): an
outside compaction re-reads the view and puts back what the user made of it; the list is listed
again only when it changed, in place; status messages belong to their thread; each thread has its
own search, with a match count and Shift+Enter back; one form of the database name in the title."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from engine.core.messages import user
from inspector_app.logic.choices import TABS
from inspector_app.main_window import MainWindow
from inspector_app.models.threads import COL_TITLE, KeyRole
from inspector_app.models.timeline import MessageIdRole
from tests.gui.conftest import run
from tests.gui.fake_service import FakeService, support_conversation

pytestmark = pytest.mark.gui


def open_thread(qtbot: Any, w: MainWindow, key: str) -> None:
    row = w.thread_model.row_of(key)
    assert row is not None
    w.thread_list.setCurrentIndex(w.thread_proxy.mapFromSource(w.thread_model.index(row, 0)))
    qtbot.waitUntil(lambda: w.idle and w.timeline_model.key == key, timeout=5000)


def poll(qtbot: Any, w: MainWindow) -> None:
    """One tick of the poll timer, waited for."""
    w.live._on_poll()
    qtbot.waitUntil(lambda: w.idle and not w.live.refreshing, timeout=5000)


def test_an_outside_compaction_rereads_the_view_and_puts_back_what_the_user_made_of_it(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    w = window
    model, view = w.timeline_model, w.timeline
    last_unit = model.core.root.children[-1]
    assert last_unit.kind == "unit" and view.isExpanded(model.index_of(last_unit))
    w.timeline.setCurrentIndex(model.index_for_message(10))
    view.collapse(model.index_of(last_unit))  # the user closes the last turn (the selected row's)
    w.show_tab("replay")
    w.replay.show_page("recoveries")
    w.replay.episodes.setCurrentIndex(1)
    w.replay.model.go(2)
    w.search.blockSignals(True)
    w.search.setText("invoice")
    w.search.blockSignals(False)
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    resets: list[int] = []
    model.modelReset.connect(lambda: resets.append(1))
    fake.set_boundary("acme-vat", 9, "someone else compacted")  # another process compacts
    poll(qtbot, w)
    assert resets and w.live.reloads == 1 and model.boundary is not None and model.boundary.boundary == 9  # read again
    assert view.currentIndex().data(MessageIdRole) == 10
    unit = next(n for n in model.core.root.children if n.kind == "unit" and n.first_id == last_unit.first_id)
    assert not view.isExpanded(model.index_of(unit))  # still closed
    assert w.tabs.currentIndex() == TABS.index("replay") and w.replay.page() == "recoveries"
    assert (w.replay.model.episode_index, w.replay.model.step_index) == (1, 2)
    assert w.search.text() == "invoice"
    resets.clear()
    poll(qtbot, w)  # nothing changed since: nothing is read again
    assert not resets and w.live.reloads == 1


def test_the_list_is_listed_again_only_when_it_changed_and_in_place(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    w = window
    listed = fake.called("threads.page")
    resets: list[int] = []
    w.thread_model.modelReset.connect(lambda: resets.append(1))
    poll(qtbot, w)
    poll(qtbot, w)
    assert fake.called("threads.page") == listed  # nothing changed: not listed again
    fake.add_thread("aaa-new", support_conversation()[:2], title="A new thread, first in the key order")
    poll(qtbot, w)
    assert fake.called("threads.page") == listed + 1 and "aaa-new" in w.thread_model.keys()
    assert not resets and w.thread_list.currentIndex().data(KeyRole) == "acme-vat"  # inserted in place: the selection stays
    assert w.timeline_model.key == "acme-vat"


def test_status_messages_belong_to_their_thread(qtbot: Any, window: MainWindow) -> None:
    w = window
    assert w.statusBar().currentMessage() == "5 threads"  # about the database: it stays while a thread opens
    w.statusBar().showMessage("Compacted 502 messages: 90,000 → 30,000 tokens, generation 2")  # about acme-vat
    open_thread(qtbot, w, "omega-long")
    assert w.statusBar().currentMessage() == ""  # not about the thread now open


def test_one_thread_is_one_thread(qtbot: Any, make_window: Any, fake: FakeService) -> None:
    for key in [k for k in fake.threads if k != "acme-vat"]:
        del fake.threads[key]
    w = make_window()
    assert run(qtbot, w, w.open_database("sqlite:///fake.db"))
    assert w.statusBar().currentMessage() == "1 thread"


def test_each_thread_has_its_own_search_with_a_match_count_and_shift_enter_back(qtbot: Any, window: MainWindow) -> None:
    w = window
    bar = w.statusBar()
    qtbot.keyClicks(w.search, "corrected invoice")
    qtbot.waitUntil(lambda: w.idle and bar.currentMessage() == "Match 1 of 2: message #10", timeout=5000)
    QTest.keyClick(w.search, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: w.idle and bar.currentMessage() == "Match 2 of 2: message #12", timeout=5000)
    QTest.keyClick(w.search, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)  # back
    qtbot.waitUntil(lambda: w.idle and bar.currentMessage() == "Match 1 of 2: message #10", timeout=5000)
    QTest.keyClick(w.search, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)  # back again: wraps to the last
    qtbot.waitUntil(lambda: w.idle and bar.currentMessage() == "Match 2 of 2: message #12", timeout=5000)
    assert w.timeline.currentIndex().data(MessageIdRole) == 12
    open_thread(qtbot, w, "omega-long")
    assert w.search.text() == ""  # another thread: its own (empty) search
    qtbot.keyClicks(w.search, "question 123 ")
    qtbot.waitUntil(lambda: w.idle and bar.currentMessage().startswith("Match 1 of 1:"), timeout=5000)
    open_thread(qtbot, w, "acme-vat")
    assert w.search.text() == "corrected invoice"  # back: the thread's own search
    assert run(qtbot, w, w.open_database("sqlite:///another.db", select="acme-vat"))  # another database
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    assert w.search.text() == ""


def test_the_title_names_a_database_one_way(qtbot: Any, make_window: Any, tmp_path: Any) -> None:
    w = make_window()
    path = str(tmp_path / "threads.db")
    titles = []
    for url in (path, f"sqlite:///{path}", path):
        assert run(qtbot, w, w.open_database(url))
        titles.append(w.windowTitle())
    assert titles == [f"Compaction Inspector · {path}"] * 3


def test_the_thread_list_tooltip_has_the_full_title(window: MainWindow) -> None:
    model = window.thread_model
    row = model.row_of("acme-vat")
    assert model.index(row, COL_TITLE).data(Qt.ItemDataRole.ToolTipRole).splitlines()[0] == "ACME VAT correction"


def test_new_messages_appear_in_place(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    w = window
    w.timeline.setCurrentIndex(w.timeline_model.index_for_message(10))
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    resets: list[int] = []
    w.timeline_model.modelReset.connect(lambda: resets.append(1))
    new = fake.append("acme-vat", user("One more question"))
    poll(qtbot, w)
    assert w.timeline_model.contains(new.id) and not resets and w.live.reloads == 0
    assert w.timeline.currentIndex().data(MessageIdRole) == 10


def test_a_run_that_ends_regroups_the_last_turn_in_place(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    from dataclasses import replace

    w = window
    open_thread(qtbot, w, "beta-running")
    model = w.timeline_model
    assert [n.unit_kind for n in model.core.root.children][-2:] == ["turn_user", "round"]  # the running turn
    first = model.core.root.children[0]
    w.timeline.setCurrentIndex(model.index_of(first))
    w.timeline.collapse(model.index_of(first))
    resets: list[int] = []
    model.modelReset.connect(lambda: resets.append(1))
    t = fake.threads["beta-running"]
    t.info = replace(t.info, busy_reason=None)  # the run ended
    poll(qtbot, w)
    assert not resets and w.live.reloads == 0
    assert model.core.root.children[-1].unit_kind == "turn" and len(model.core.root.children) == 2  # one turn again
    assert model.core.root.children[0] is first and not w.timeline.isExpanded(model.index_of(first))
    assert w.timeline.currentIndex() == model.index_of(first)
    assert w.thread_model.index(w.thread_model.row_of("beta-running"), 5).data() == "idle"


def test_a_selected_turn_row_stays_selected_through_a_reread(qtbot: Any, window: MainWindow, fake: FakeService) -> None:
    w = window
    model = w.timeline_model
    unit = model.core.root.children[-1]
    w.timeline.setCurrentIndex(model.index_of(unit))  # the turn's own row, not a message
    qtbot.waitUntil(lambda: w.idle, timeout=5000)
    fake.set_boundary("acme-vat", 9, "someone else compacted")
    poll(qtbot, w)
    assert w.live.reloads == 1
    node = model.node(w.timeline.currentIndex())
    assert node is not None and (node.kind, node.first_id) == ("unit", unit.first_id)
