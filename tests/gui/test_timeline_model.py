"""The thin Qt model over the timeline core, checked by Qt's own ``QAbstractItemModelTester``
(mode Fatal: any broken model rule aborts) through inserts from both ends, gap fills, evictions,
late token counts and resets; what the model answers is what the core holds, and a persistent index
never ends up on another message."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtTest import QAbstractItemModelTester
from PySide6.QtWidgets import QApplication

from engine.core.messages import Message, ToolCall
from engine.core.views import StoredMessage
from inspector_app.logic.timeline import UNKNOWN, Node
from inspector_app.logic.timeline.tree import display_text
from inspector_app.models.timeline import COLUMNS, CompactedRole, MarkersRole, MessageIdRole, NodeKindRole, PageRequest, TimelineModel, TimelinePage, TokensRole
from tests.gui.test_timeline_core import OPS, T0, Thread, apply, fill, grow, loaded_at_once, meta_message, signature, threads

pytestmark = pytest.mark.gui
ROOT = QModelIndex()
FATAL = QAbstractItemModelTester.FailureReportingMode.Fatal


def qt_tree(model: TimelineModel, parent: QModelIndex = ROOT) -> tuple[Any, ...]:
    """The tree as a view sees it, through the model API only."""
    rows = []
    for r in range(model.rowCount(parent)):
        index = model.index(r, 0, parent)
        cells = tuple(model.data(model.index(r, c, parent)) for c in range(len(COLUMNS)))
        rows.append((model.data(index, NodeKindRole), cells, model.data(index, MarkersRole), model.data(index, TokensRole),
                     model.data(index, CompactedRole), model.data(index, MessageIdRole), qt_tree(model, index)))
    return tuple(rows)


def core_tree(node: Node) -> tuple[Any, ...]:
    """The same shape read from the core's nodes."""
    return tuple((c.kind, tuple(display_text(c, col) for col in range(len(COLUMNS))), c.markers, c.tokens, c.compacted,
                  c.info.id if c.info else None, core_tree(c)) for c in node.children)


def scripted_thread() -> Thread:
    """Finished turns with parallel calls, a pruned result, an orphan and a late result; meta user
    messages of an imported session (a leading caveat and command, a reminder and an interruption
    inside turns: no turn of their own); a boundary after the second turn; a running last turn."""
    def call(*names: str) -> Message:
        return Message("assistant", "", tool_calls=tuple(ToolCall(n, "lookup", f'{{"q": "{n}"}}') for n in names))

    def result(name: str) -> Message:
        return Message("tool", f"result {name}", tool_call_id=name, name="lookup")

    messages: list[Message] = [Message("system", "you are helpful"), meta_message(0), meta_message(1)]
    for turn in range(6):
        messages += [Message("user", f"question {turn}"), call(f"a{turn}", f"b{turn}"), result(f"b{turn}"), result(f"a{turn}"), Message("assistant", f"answer {turn}")]
        if turn in (2, 4):
            messages += [meta_message(3 if turn == 2 else 4)]
    messages += [Message("tool", "stray", tool_call_id="zz", name="lookup"), Message("user", "and now?"), call("x"), call("y"), result("x"), result("y"), call("z")]
    stored, next_id = [], 10
    for m in messages:
        pruned = m.role == "tool" and m.tool_call_id in ("a1", "b4")
        stored.append(StoredMessage(Message(m.role, m.content, id=next_id, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id, name=m.name, metadata=m.metadata, meta_kind=m.meta_kind), 1, T0, "cd" * 32 if pruned else None))
        next_id += 1 + next_id % 3
    boundary = next(s.id for s in stored if s.message.content == "answer 1")
    return Thread(stored, True, boundary)


def check(model: TimelineModel) -> None:
    assert qt_tree(model) == core_tree(model.core.root)


def test_a_scripted_session_keeps_every_model_rule(qapp: QApplication) -> None:
    model = TimelineModel()
    tester = QAbstractItemModelTester(model, FATAL)
    signals: dict[str, int] = {"inserted": 0, "removed": 0, "changed": 0, "reset": 0}
    model.rowsInserted.connect(lambda *_: signals.__setitem__("inserted", signals["inserted"] + 1))
    model.rowsRemoved.connect(lambda *_: signals.__setitem__("removed", signals["removed"] + 1))
    model.dataChanged.connect(lambda *_: signals.__setitem__("changed", signals["changed"] + 1))
    model.modelReset.connect(lambda: signals.__setitem__("reset", signals["reset"] + 1))
    thread = scripted_thread()
    ids = thread.ids
    model.reset("t", boundary=thread.boundary_info(), running_turn=True, total=len(ids), sources=thread.sources)
    assert model.rowCount() == 0 and signals["reset"] == 1
    model.insert_page(thread.read(PageRequest(limit=6)))  # the first page
    request = model.end_request(5)
    assert request is not None
    model.insert_page(thread.read(request, with_tokens=False))  # the newest page, counted later
    check(model)
    newest = model.newest_message_index()
    assert newest.data(MessageIdRole) == ids[-1] and newest.siblingAtColumn(1).data() == ""
    first = QPersistentModelIndex(model.index_for_message(ids[0]))
    model.set_tokens(*thread.tokens(list(thread.page(before_id=ids[-1] + 1, limit=5))))
    assert model.newest_message_index().siblingAtColumn(1).data() == str(ids[-1] % 13 + 1)
    check(model)
    (gap,) = model.gaps()
    model.insert_page(thread.read(model.gap_request(gap, backward=True, limit=4)))  # from below
    model.insert_page(thread.read(model.gap_request(model.gaps()[0], backward=False, limit=4)))  # from above
    check(model)
    assert first.isValid() and first.data(MessageIdRole) == ids[0]  # far from the splices: the same row
    around = thread.page(before_id=thread.boundary + 1, limit=3) + thread.page(after_id=thread.boundary, limit=3)  # type: ignore[operator]
    model.insert_page(TimelinePage(tuple(around), follows=UNKNOWN))  # as the summary card reads it: counted afterwards
    model.set_tokens(*thread.tokens(around))
    check(model)
    while model.gaps():
        gap = model.gaps()[0]
        model.insert_page(thread.read(model.gap_request(gap, backward=gap.first_id is None, limit=4)))
        check(model)
    assert model.exhausted and model.message_ids() == ids and model.boundary_index().isValid()
    assert signature(model.core.root) == signature(loaded_at_once(thread).root)
    # evictions from both ends, then reloading them
    dropped = model.evict_before(model.rowCount() // 2)
    assert dropped > 0 and not first.isValid() and not model.reaches_start
    assert model.evict_after(model.rowCount() - 2) > 0 and not model.reaches_end
    check(model)
    model.gap_failed()
    assert all(g.failed for g in model.gaps()) and model.data(model.index_of(model.gaps()[0]), Qt.ItemDataRole.ForegroundRole) is not None
    model.gap_cancelled()
    fill(model.core, thread, 3)
    check(model)
    assert signature(model.core.root) == signature(loaded_at_once(thread).root)
    # a reset to another thread, then to nothing
    other = Thread(thread.stored[:8], False, None)
    model.reset("u", total=8)
    model.insert_page(other.read(PageRequest(limit=100)))
    assert model.key == "u" and model.exhausted and not model.boundary_index().isValid()
    check(model)
    model.reset(None)
    assert model.rowCount() == 0 and model.key is None
    assert signals["inserted"] and signals["removed"] and signals["changed"] and signals["reset"] == 3
    del tester


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(threads(), OPS, st.integers(1, 6), st.data())
def test_random_sessions_keep_every_model_rule(qapp: QApplication, thread: Thread, ops: list[tuple[str, int, int, bool]], fill_limit: int, data: Any) -> None:
    model = TimelineModel()
    tester = QAbstractItemModelTester(model, FATAL)
    model.reset("t", boundary=thread.boundary_info(), running_turn=thread.running, total=len(thread.stored), sources=thread.sources)
    pinned: list[tuple[QPersistentModelIndex, int]] = []
    for op, pick, limit, with_tokens in ops:
        apply(model.core, thread, op, pick, limit, with_tokens)
        check(model)
        for index, message_id in pinned:  # selection follows its message or is dropped, never moved to another
            assert not index.isValid() or index.data(MessageIdRole) == message_id
        loaded = model.message_ids()
        if loaded:
            message_id = loaded[data.draw(st.integers(0, len(loaded) - 1))]
            pinned.append((QPersistentModelIndex(model.index_for_message(message_id)), message_id))
    grow(model.core, thread, len(thread.stored), fill_limit)
    fill(model.core, thread, fill_limit)
    check(model)
    assert signature(model.core.root) == signature(loaded_at_once(thread).root)
    model.set_tokens({i: 1 for i in thread.ids})
    assert model.data(model.index(0, 0), TokensRole) is not None
    check(model)
    model.reset(None)
    assert model.rowCount() == 0
    del tester
