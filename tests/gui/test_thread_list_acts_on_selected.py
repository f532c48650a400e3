"""Nothing acts on a thread other than the one the thread list shows selected (the user trial after
282dac8): between a click on another row and that thread's opening, the panels still show the
thread open before, so every action on "the open thread" — Compact now (button and menu), What
if…, Export, Revert (the summary card's button and Compaction → Revert last compaction), Thread
policy… and Pin/Unpin in the timeline's menu — is disabled with the reason "Can't: loading the
selected thread", and enabled again (as that thread's state allows) once it is open.

The real window over real stores: the 1,500-thread fleet store and a copy of the demo database.
"""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from inspector_app.main_window import MainWindow
from inspector_app.models.threads import KeyRole
from inspector_app.models.timeline import MessageIdRole
from tests.gui.conftest import run
from tests.gui.test_thread_list_paged import WAIT, db, fleet_db, opened  # noqa: F401 (fixtures)
from tests.gui.test_thread_list_selection import agree, open_key
from tests.gui.test_window_real import CODING, RESEARCH, WAIT_MS, Demo, demo, demo_copy, fresh, open_demo  # noqa: F401 (fixtures)

pytestmark = pytest.mark.gui

LOADING = "loading the selected thread"


def thread_actions(w: MainWindow) -> list[Any]:
    """Every control that acts on the open thread, as the window has them."""
    return [w.compact_button, w.compact_action, w.whatif_button, w.whatif_action, w.export_action, w.revert_audit.action, w.steering.policy_action]


def assert_held(w: MainWindow) -> None:
    for control in thread_actions(w):
        assert not control.isEnabled(), control.objectName() or control.text()
        assert LOADING in control.toolTip(), (control.objectName() or control.text(), control.toolTip())


def click_row(w: MainWindow, row: int) -> str:
    """A plain click on the list's ``row`` (loaded, on screen); its key."""
    view = w.thread_list
    index = w.thread_proxy.mapFromSource(w.thread_model.index(row, 0))
    rect = view.visualRect(index)
    assert rect.intersects(view.viewport().rect()) and w.thread_model.loaded(row)
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    return index.data(KeyRole)


def test_a_click_on_another_row_holds_every_action_until_that_thread_is_open(qtbot: Any, opened: MainWindow) -> None:
    w = opened
    before = open_key(w)
    assert before is not None and agree(w) and w.state.status is not None
    assert w.whatif_button.isEnabled() and w.export_action.isEnabled() and w.steering.policy_action.isEnabled()
    here = w.thread_list.currentIndex().row()  # the open thread's row, on screen
    row = here + 1 if w.thread_model.loaded(here + 1) else here - 1
    key = click_row(w, row)
    assert key != before and open_key(w) == before  # the panels still show the thread open before
    assert_held(w)
    seen: list[tuple[str | None, str | None, bool]] = []

    def opened_and_checked() -> bool:  # every poll while it loads: the panels' thread is not the selected one, so nothing acts
        apart = open_key(w) != key or w.view.key != open_key(w)
        seen.append((open_key(w), w.view.key, w.whatif_button.isEnabled()))
        if apart:
            assert_held(w)
        return w.idle and agree(w) and w.state.status is not None

    qtbot.waitUntil(opened_and_checked, timeout=WAIT)
    assert open_key(w) == key and not w.compaction.loading_selected
    for control in (w.whatif_button, w.whatif_action, w.export_action, w.steering.policy_action):
        assert control.isEnabled() and LOADING not in control.toolTip(), control.objectName()
    assert w.compact_button.isEnabled() == (not w.state.status.busy_reason) == w.compact_action.isEnabled()
    assert LOADING not in w.compact_button.toolTip()


def card_ready(w: MainWindow) -> bool:
    return w.idle and w.detail.stack.currentWidget() is w.detail.card and w.detail.revert_button.isEnabled()


def test_revert_and_pin_wait_for_the_selected_thread(qtbot: Any, open_demo: Any, demo_copy: Demo) -> None:
    """The summary card's Revert, Compaction → Revert last compaction and the timeline's Pin act on
    the thread the panels show: disabled, saying why, while another row is selected and loading."""
    with fresh(demo_copy) as svc:
        assert svc.compaction.compact(RESEARCH).status == "completed"  # something of ours to revert
        before = svc.reads.compaction_state(RESEARCH)
        audited = len(svc.steering.audit(thread=RESEARCH))
    w = open_demo(demo_copy, RESEARCH)
    assert run(qtbot, w, w.show_boundary(), timeout=WAIT_MS) is None
    qtbot.waitUntil(lambda: card_ready(w) and w.revert_audit.action.isEnabled(), timeout=WAIT_MS)
    message = w.timeline_model.newest_message_index()
    pos = w.timeline.visualRect(message).center()
    menu = w.steering.context_menu(pos)
    assert menu is not None and menu.actions()[0].isEnabled()
    menu.close()
    row = w.thread_model.row_of(CODING)
    assert row is not None
    assert click_row(w, row) == CODING and open_key(w) == RESEARCH
    button = w.detail.revert_button
    assert not button.isEnabled() and LOADING in button.toolTip()
    w.compaction_menu.aboutToShow.emit()  # read again as the menu opens: still held
    action = w.revert_audit.action
    assert not action.isEnabled() and LOADING in action.toolTip() and LOADING in action.statusTip()
    w.revert_audit._revert_requested("")  # the card's Revert, were it clicked: said, nothing asked of the store
    assert LOADING in w.statusBar().currentMessage()
    menu = w.steering.context_menu(w.timeline.visualRect(message).center()) if message.isValid() else None
    assert menu is not None
    pin = menu.actions()[0]
    assert pin.text() in ("Pin", "Unpin") and not pin.isEnabled() and LOADING in pin.toolTip()
    mid = message.data(MessageIdRole)
    menu.close()
    qtbot.waitUntil(lambda: w.idle and open_key(w) == CODING and w.revert_audit.target is not None and agree(w), timeout=WAIT_MS)
    assert LOADING not in w.revert_audit.action.toolTip()
    w.compaction_menu.aboutToShow.emit()
    assert LOADING not in w.revert_audit.action.toolTip()
    index = w.timeline_model.newest_message_index()
    menu = w.steering.context_menu(w.timeline.visualRect(index).center())
    assert menu is not None and menu.actions()[0].isEnabled() and LOADING not in menu.actions()[0].toolTip()
    menu.close()
    with fresh(demo_copy) as svc:  # nothing reverted nor pinned on the thread shown before
        assert svc.reads.compaction_state(RESEARCH) == before and len(svc.steering.audit(thread=RESEARCH)) == audited
        assert mid not in {p.message_id for p in svc.steering.pins(RESEARCH)}


def test_the_compact_question_goes_when_another_row_is_clicked(qtbot: Any, opened: MainWindow, db: str) -> None:
    """Compact now asked "Compact … now?" of the thread open; a click on another row takes the
    question away at once (it was about the thread the list no longer selects), and its Compact,
    were it pressed, compacts nothing."""
    from engine.service import open_service

    w = opened
    before = open_key(w)
    assert before is not None and w.state.status is not None and not w.state.status.busy_reason and w.compact_button.isEnabled()
    svc = open_service(db)
    try:
        was = svc.reads.compaction_state(before)
    finally:
        svc.close()
    w.compact_button.click()
    assert w.confirm.isVisible()
    here = w.thread_list.currentIndex().row()
    key = click_row(w, here + 1 if w.thread_model.loaded(here + 1) else here - 1)
    assert key != before and open_key(w) == before
    assert not w.confirm.isVisible()
    w.confirm.accepted.emit()  # pressed all the same (a key already on its way): nothing is compacted
    qtbot.waitUntil(lambda: w.idle and open_key(w) == key and agree(w), timeout=WAIT)
    assert not w.compaction.compacting
    svc = open_service(db)
    try:
        assert svc.reads.compaction_state(before) == was
    finally:
        svc.close()
