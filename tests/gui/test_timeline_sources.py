"""Where an imported session's own compactions stand in the timeline: a source that compacted in
the middle of a long agentic turn (Claude Code's auto compaction between two model calls) ran its
next requests from its summary, so the rest of the turn comes after the compaction's row, as a unit
of its own, not all of the compactions bunched after the whole turn."""

from __future__ import annotations

from engine.core.messages import Message, ToolCall
from engine.core.views import SourceCompaction, StoredMessage
from inspector_app.logic.timeline import PageRequest, Timeline
from tests.gui.test_timeline_core import T0, Thread, loaded_at_once


def long_turn() -> Thread:
    msgs = [Message("user", "port the exporter")]
    for k in range(6):
        msgs.append(Message("assistant", "", tool_calls=(ToolCall(f"c{k}", "run", '{"cmd": "pytest"}'),)))
        msgs.append(Message("tool", f"result {k}", tool_call_id=f"c{k}", name="run"))
    msgs.append(Message("assistant", "done"))
    stored = [
        StoredMessage(Message(m.role, m.content, id=10 + 2 * i, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id, name=m.name), 1, T0, None)
        for i, m in enumerate(msgs)
    ]
    after_round = {k: stored[2 + 2 * k].id for k in range(6)}  # the result of round k
    sources = tuple(
        SourceCompaction(i + 1, 1, "claude-code", "summary", "auto", 90_000 + i, "summary", after_round[k], None, None, f"u{i}", None)
        for i, k in enumerate((1, 3))
    )
    return Thread(stored, False, None, len(stored), sources)


def top_rows(timeline: Timeline) -> list[tuple[str, str]]:
    return [(n.kind, n.label.split(" · ")[0]) for n in timeline.root.children]


def test_a_compaction_inside_a_turn_splits_it_at_its_place() -> None:
    thread = long_turn()
    whole = loaded_at_once(thread)
    kinds = top_rows(whole)
    assert [k for k, _ in kinds] == ["unit", "source", "unit", "source", "unit"]
    assert kinds[0][1] == "Turn" and kinds[2][1] == kinds[4][1] == "Turn (continued)"
    first, second, third = (n for n in whole.root.children if n.kind == "unit")
    s1, s2 = thread.sources
    assert first.last_id == s1.after_message_id and second.first_id > s1.after_message_id
    assert second.last_id == s2.after_message_id and third.first_id > s2.after_message_id
    # no round is cut: every call has its result in the same unit, and nothing is an orphan
    assert not any("orphan" in n.markers or "open round" in n.markers for n in whole.root.walk())


def test_loaded_page_by_page_it_groups_as_loaded_whole() -> None:
    thread = long_turn()
    for limit in (1, 2, 3, 4, 5):
        paged = Timeline()
        paged.reset("t", boundary=None, running_turn=False, total=len(thread.stored), sources=thread.sources)
        paged.insert_page(thread.read(PageRequest(limit=limit)))  # the first page, then the thread grows page by page
        while not paged.exhausted or paged.gaps():
            if paged.gaps():
                paged.insert_page(thread.read(paged.gap_request(paged.gaps()[0], backward=False, limit=limit)))  # type: ignore[arg-type]
            else:
                paged.append_page(thread.read(PageRequest(after_id=paged.last_id(), limit=limit)))
        assert top_rows(paged) == top_rows(loaded_at_once(thread)), limit
