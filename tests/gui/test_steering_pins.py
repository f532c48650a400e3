"""Steering from the inspector (issue 23) on a REAL SQLite database through ``open_service``:
the timeline's context menu pins and unpins a message (its row gets the pin marker, the database
its round's pins and an audit row); Compact now carries instructions and a reason; Compaction →
Thread policy… shows where each value comes from and sets the thread's threshold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.core.messages import ToolCall, assistant, tool_result, user
from engine.service import open_service
from inspector_app.models.timeline import MarkersRole, MessageIdRole
from tests.engine.conftest import filler
from tests.gui.conftest import run

pytestmark = pytest.mark.gui

KEY = "steer-gui"
POLICY = {"context_window": 8000, "default": {"summary_max_tokens": 400}}
WAIT = 15_000


def build(tmp_path: Path) -> tuple[str, Path, dict[str, int]]:
    db, workdir = str(tmp_path / "steer.db"), tmp_path / "wd"
    svc = open_service(db, workdir=workdir, summarizer=ExtractiveSummarizer(), policies=POLICY, create=True)
    try:
        svc.runs.create_thread(KEY, title="Steering", system_prompt="You are a support agent.")
        for i in range(3):
            svc.runs.append_message(KEY, user(f"Question {i}?"))
            svc.runs.append_message(KEY, assistant(filler(280, f"Answer {i}.")))
        call = ToolCall("call-t", "query_kb", '{"query": "T-9917"}')
        ids = {"user": svc.runs.append_message(KEY, user("Look up ticket T-9917.")),
               "call": svc.runs.append_message(KEY, assistant("Looking it up.", call)),
               "result": svc.runs.append_message(KEY, tool_result(call.id, "TICKET T-9917 owner=alice " + filler(300), name="query_kb"))}
        for i in range(16):
            svc.runs.append_message(KEY, user(f"Later question {i}?"))
            svc.runs.append_message(KEY, assistant(filler(280, f"Later answer {i}.")))
        svc.runs.append_message(KEY, user("Who owns doc-42?"))
    finally:
        svc.close()
    return db, workdir, ids


@pytest.fixture
def steer(tmp_path: Path, qtbot: Any, window_factory: Any) -> Any:
    db, workdir, ids = build(tmp_path)
    opener = lambda url: open_service(url, workdir=workdir, summarizer=ExtractiveSummarizer(), policies=POLICY)  # noqa: E731
    w = window_factory(opener)
    assert run(qtbot, w, w.open_database(db, select=KEY), timeout=WAIT)
    qtbot.waitUntil(lambda: w.idle and w.timeline_model.key == KEY, timeout=WAIT)

    def fresh() -> Any:
        return open_service(db, workdir=workdir, summarizer=ExtractiveSummarizer(), policies=POLICY)

    return w, ids, fresh


def row_pos(w: Any, message_id: int) -> Any:
    index = w.timeline_model.index_for_message(message_id)
    assert index.isValid()
    w.timeline.scrollTo(index)
    return w.timeline.visualRect(index).center()


def audit(svc: Any) -> list[dict[str, Any]]:
    from tests.engine.test_pins import audit_rows
    return audit_rows(svc, KEY)


def test_the_context_menu_pins_and_unpins_a_message(qtbot: Any, steer: Any) -> None:
    w, ids, fresh = steer
    menu = w.steering.context_menu(row_pos(w, ids["result"]))
    assert menu is not None and [a.text() for a in menu.actions()] == ["Pin"]
    menu.actions()[0].trigger()
    menu.close()
    qtbot.waitUntil(lambda: w.timeline_model.is_pinned(ids["result"]) and w.idle, timeout=WAIT)
    index = w.timeline_model.index_for_message(ids["result"])
    assert "pinned" in index.data(MarkersRole)
    assert w.timeline_model.is_pinned(ids["call"])  # its call too: the round is pinned
    svc = fresh()
    try:
        assert {p.message_id for p in svc.steering.pins(KEY)} == {ids["call"], ids["result"]}
        assert [(r["action"], r["operator"]) for r in audit(svc)] == [("pin", svc.steering.operator())]
    finally:
        svc.close()
    menu = w.steering.context_menu(row_pos(w, ids["call"]))
    assert [a.text() for a in menu.actions()] == ["Unpin"]
    menu.actions()[0].trigger()
    menu.close()
    qtbot.waitUntil(lambda: not w.timeline_model.is_pinned(ids["result"]) and w.idle, timeout=WAIT)
    assert "pinned" not in (w.timeline_model.index_for_message(ids["result"]).data(MarkersRole) or ())


def test_compact_now_carries_instructions_and_reason_and_keeps_the_pin(qtbot: Any, steer: Any) -> None:
    w, ids, fresh = steer
    run(qtbot, w, w.steering.pin(KEY, ids["result"]), timeout=WAIT)
    qtbot.mouseClick(w.compact_button, Qt.MouseButton.LeftButton)
    assert w.confirm.isVisible() and w.confirm.instructions.isVisible() and w.confirm.reason.isVisible()
    w.confirm.instructions.setText('keep "Answer 1" and T-9917')
    w.confirm.reason.setText("customer asked")
    qtbot.mouseClick(w.confirm.confirm_button, Qt.MouseButton.LeftButton)
    svc = fresh()
    try:
        qtbot.waitUntil(lambda: svc.reads.compaction_state(KEY).generation > 0 and w.idle, timeout=WAIT)
        ev = [e for e in svc.reads.events(KEY) if e.kind == "summary"][-1]
        assert ev.data["instructions"] == 'keep "Answer 1" and T-9917'
        rows = audit(svc)
        assert [r["action"] for r in rows] == ["pin", "compact"] and rows[-1]["reason"] == "customer asked"
        assert svc.reads.compaction_state(KEY).boundary > ids["result"]
    finally:
        svc.close()
    qtbot.waitUntil(lambda: w.timeline_model.is_pinned(ids["result"]), timeout=WAIT)
    index = w.timeline_model.index_for_message(ids["result"])
    assert index.isValid() and "pinned" in index.data(MarkersRole)


def test_the_thread_policy_dialog_shows_origins_and_sets_the_threshold(qtbot: Any, steer: Any) -> None:
    w, ids, fresh = steer
    w.steering.policy_action.trigger()
    qtbot.waitUntil(lambda: w.steering.policy_dialog is not None and w.steering.policy_dialog.isVisible(), timeout=WAIT)
    d = w.steering.policy_dialog
    assert d.origins["threshold_ratio"].text() == "from store default"
    assert "threshold 6,400" in d.effective.text()
    d.fields["threshold_ratio"].setValue(0.5)
    d.reason.setText("long agent runs")
    d.buttons.button(d.buttons.StandardButton.Save).click()
    svc = fresh()
    try:
        qtbot.waitUntil(lambda: svc.steering.thread_policy(KEY).threshold == 4000, timeout=WAIT)
        assert svc.steering.thread_policy(KEY).origins["threshold_ratio"] == "thread"
        [row] = audit(svc)
        assert (row["action"], row["reason"], row["after"]) == ("policy", "long agent runs", {"threshold_ratio": 0.5})
    finally:
        svc.close()
    qtbot.waitUntil(lambda: w.gauge.status is not None and w.gauge.status.threshold == 4000, timeout=WAIT)
    w.steering.policy_action.trigger()
    qtbot.waitUntil(lambda: d.isVisible() and d.origins["threshold_ratio"].text() == "from thread", timeout=WAIT)
    d.reject()
