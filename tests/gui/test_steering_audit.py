"""Revert on the summary card, the Audit tab and read-only stores (issue 23), in the REAL main
window over the real service: a copy of the demo database (SQLite) and, for the viewer role, a real
PostgreSQL server with the role of docs/roles.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QDialog, QMessageBox

from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.service import open_service
from inspector_app.main_window import MainWindow
from tests.gui.conftest import run
from tests.gui.test_window_real import CODING, RESEARCH, WAIT_MS, Demo, demo, demo_copy, fresh, open_demo  # noqa: F401 (fixtures)
from tests.store.test_roles_pg import POLICY, role_db, seeded  # noqa: F401 (fixtures)

pytestmark = pytest.mark.gui

READ_ONLY_ROLE = "read-only: your database role cannot write"


def card_ready(w: MainWindow) -> bool:
    return w.idle and w.detail.stack.currentWidget() is w.detail.card and w.detail.revert_button.isEnabled()


def test_the_summary_cards_revert_restores_the_previous_summary_and_redo_the_compacted_one(qtbot: Any, open_demo: Any, demo_copy: Demo) -> None:
    with fresh(demo_copy) as svc:
        previous = svc.reads.compaction_state(RESEARCH)  # the demo's pressure summary
        assert previous.boundary is not None
        assert svc.compaction.compact(RESEARCH).status == "completed"  # a manual compaction on top of it
        compacted = svc.reads.compaction_state(RESEARCH)
        before_ours = len(svc.steering.audit(thread=RESEARCH))
    w = open_demo(demo_copy, RESEARCH)
    assert run(qtbot, w, w.show_boundary(), timeout=WAIT_MS) is None
    qtbot.waitUntil(lambda: card_ready(w), timeout=WAIT_MS)
    assert w.detail.revert_button.text() == "Revert" and "nothing is deleted" in w.detail.revert_button.toolTip()
    qtbot.keyClicks(w.detail.revert_reason, "the summary lost the p95 figure")
    qtbot.mouseClick(w.detail.revert_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: w.revert_audit.last_result is not None and w.idle, timeout=WAIT_MS)
    with fresh(demo_copy) as svc:
        state = svc.reads.compaction_state(RESEARCH)
        audit = svc.steering.audit(thread=RESEARCH)
    assert (state.boundary, state.summary) == (previous.boundary, previous.summary)
    assert state.generation == compacted.generation + 1
    assert [(a.action, a.reason) for a in audit[before_ours:]] == [("revert", "the summary lost the p95 figure")]
    assert not w.banner.isVisible()
    # the view was read again: the card shows the restored summary, and offers Redo
    assert run(qtbot, w, w.show_boundary(), timeout=WAIT_MS) is None
    qtbot.waitUntil(lambda: card_ready(w) and w.detail.revert_button.text() == "Redo", timeout=WAIT_MS)
    assert w.detail.card_text.toPlainText() == previous.summary
    assert w.revert_audit.action.text() == "Redo the reverted compaction" and w.revert_audit.action.isEnabled()
    qtbot.mouseClick(w.detail.revert_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: w.revert_audit.last_result.action == "redo" and w.idle, timeout=WAIT_MS)
    with fresh(demo_copy) as svc:
        state = svc.reads.compaction_state(RESEARCH)
    assert (state.boundary, state.summary) == (compacted.boundary, compacted.summary)
    # the Audit tab lists both, filters by action and operator, and widens to every thread
    panel = w.revert_audit.panel
    qtbot.waitUntil(lambda: w.idle and panel.model.rowCount() == before_ours + 2, timeout=WAIT_MS)
    assert [e.action for e in panel.model.entries()] == ["compact", "revert", "redo"]
    panel.action.setCurrentText("redo")
    qtbot.waitUntil(lambda: w.idle and [e.action for e in panel.model.entries()] == ["redo"], timeout=WAIT_MS)
    operator = panel.model.entries()[0].operator
    assert panel.operator.findText(operator) > 0
    panel.action.setCurrentText("All")
    panel.operator.setCurrentText(operator)
    panel.this_thread.setChecked(False)
    qtbot.waitUntil(lambda: w.idle and panel.model.rowCount() == 3 and not panel.view.isColumnHidden(2), timeout=WAIT_MS)
    panel.operator.setCurrentText("All")
    qtbot.waitUntil(lambda: w.idle and panel.operator.currentText() == "All", timeout=WAIT_MS)
    assert "3 actions on every thread" in panel.status.text()
    # Compaction → Revert last compaction does what the card's button does
    qtbot.waitUntil(lambda: w.revert_audit.action.isEnabled() and w.revert_audit.action.text() == "Revert last compaction", timeout=WAIT_MS)
    w.revert_audit.action.trigger()
    qtbot.waitUntil(lambda: w.revert_audit.last_result.generation_after == compacted.generation + 3 and w.idle, timeout=WAIT_MS)
    with fresh(demo_copy) as svc:
        assert svc.reads.compaction_state(RESEARCH).boundary == previous.boundary


def test_forced_read_only_disables_every_write_with_the_reason(qtbot: Any, window_factory: Any, demo_copy: Demo) -> None:
    def opener(_url: str) -> Any:
        return open_service(demo_copy.url, workdir=demo_copy.workdir, summarizer=ExtractiveSummarizer(), read_only=True)

    w = window_factory(opener)
    assert run(qtbot, w, w.open_database(demo_copy.url, select=RESEARCH), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: w.idle and w.revert_audit.read_only is not None, timeout=WAIT_MS)
    words = "read-only: opened with --read-only"
    assert w.revert_audit.badge.isVisible() and words in w.revert_audit.badge.text()
    assert "read-only" in w.windowTitle()
    for control in (w.compact_button, w.compact_action, w.import_action, w.revert_audit.action, w.detail.revert_button):
        assert not control.isEnabled() and control.toolTip() == words, control.objectName()
    assert run(qtbot, w, w.show_boundary(), timeout=WAIT_MS) is None
    qtbot.waitUntil(lambda: w.idle, timeout=WAIT_MS)
    assert not w.detail.revert_button.isEnabled() and w.detail.revert_button.toolTip() == words
    assert not w.banner.isVisible()
    # Thread policy… and the timeline's Pin write too: disabled with the reason, also after another thread opened
    policy = w.steering.policy_action
    assert not policy.isEnabled() and policy.toolTip() == words
    index = w.timeline_model.newest_message_index()
    menu = w.steering.context_menu(w.timeline.visualRect(index).center())
    assert menu is not None and not menu.actions()[0].isEnabled() and menu.actions()[0].toolTip() == words
    menu.close()
    row = w.thread_model.row_of(CODING)
    assert row is not None
    w.thread_list.setCurrentIndex(w.thread_proxy.mapFromSource(w.thread_model.index(row, 0)))
    qtbot.waitUntil(lambda: w.idle and w.state.thread is not None and w.state.thread.key == CODING, timeout=WAIT_MS)
    assert not policy.isEnabled() and policy.toolTip() == words


@pytest.mark.postgres
def test_the_viewer_role_opens_read_only_with_no_error_dialog(qtbot: Any, window_factory: Any, role_db: Any, tmp_path: Path) -> None:
    admin_url, make = role_db
    seeded(admin_url, tmp_path)
    owner = open_service(admin_url, workdir=tmp_path / "wd", policies=POLICY)
    try:
        owner.compaction.compact("shared")  # a compaction the viewer may look at but not revert
    finally:
        owner.close()
    url = make("viewer")
    w = window_factory(lambda u: open_service(u, workdir=tmp_path / "wd", policies=POLICY))
    failures: list[tuple[str, str]] = []
    w.failed.connect(lambda code, text: failures.append((code, text)))
    assert run(qtbot, w, w.open_database(url, select="shared"), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: w.idle and w.revert_audit.read_only is not None, timeout=WAIT_MS)
    assert w.revert_audit.badge.isVisible() and w.revert_audit.badge.text().startswith(READ_ONLY_ROLE)
    assert not w.compact_button.isEnabled() and w.compact_button.toolTip() == READ_ONLY_ROLE
    assert not w.compact_action.isEnabled() and not w.import_action.isEnabled()
    # the thread opened on its summary card before the access was known: its Revert stays disabled
    assert w.detail.stack.currentWidget() is w.detail.card
    assert not w.detail.revert_button.isEnabled() and w.detail.revert_button.toolTip() == READ_ONLY_ROLE
    assert run(qtbot, w, w.show_boundary(), timeout=WAIT_MS) is None
    qtbot.waitUntil(lambda: w.idle and w.detail.stack.currentWidget() is w.detail.card, timeout=WAIT_MS)
    assert not w.detail.revert_button.isEnabled() and w.detail.revert_button.toolTip() == READ_ONLY_ROLE
    # no error anywhere: no banner, no failure, no dialog; the audit log is readable
    assert failures == [] and not w.banner.isVisible()
    assert not [d for d in QApplication.topLevelWidgets() if isinstance(d, (QDialog, QMessageBox)) and d.isVisible()]
    qtbot.waitUntil(lambda: w.idle and w.revert_audit.panel.model.rowCount() == 1, timeout=WAIT_MS)
    assert w.revert_audit.panel.model.entries()[0].action == "compact"


def test_revert_on_a_busy_thread_is_disabled_with_the_reason_and_the_cards_button_says_so(qtbot: Any, open_demo: Any, demo_copy: Demo) -> None:
    """Issue 26's trial: Compaction → Revert last compaction was enabled on a running thread and
    answered with the store's raw thread_busy error. Now it reads as Compact now does ("(can't:
    running)"), and the card's button says why in the status bar without asking the store."""
    with fresh(demo_copy) as svc:
        assert svc.compaction.compact(RESEARCH).status == "completed"
        svc.runs.start_run(RESEARCH)  # a run starts on it: the thread is busy
        before = svc.reads.compaction_state(RESEARCH)
        audited = len(svc.steering.audit(thread=RESEARCH))
    w = open_demo(demo_copy, RESEARCH)
    qtbot.waitUntil(lambda: w.idle and w.state.status is not None and w.revert_audit.target is not None, timeout=WAIT_MS)
    w.compaction_menu.aboutToShow.emit()
    action = w.revert_audit.action
    assert not action.isEnabled() and action.text() == "Revert last compaction (can't: running)"
    assert action.toolTip() == "Revert needs an idle thread; this one is running."
    w.revert_audit._revert_requested("")  # the card's Revert clicked
    assert w.statusBar().currentMessage().startswith("Can't revert: the thread is running")
    qtbot.wait(200)
    assert not w.banner.isVisible()
    with fresh(demo_copy) as svc:
        assert svc.reads.compaction_state(RESEARCH) == before and len(svc.steering.audit(thread=RESEARCH)) == audited
