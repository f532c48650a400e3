"""A thread that turns busy or idle regroups only its last turn, in place (the live refresh no longer
reads the whole view for it): whatever was loaded, the tree is then the one loading the whole thread
with the new state gives, and the change notices say exactly what happened."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, strategies as st

from inspector_app.logic.timeline import Timeline
from tests.gui.test_timeline_core import OPS, PROPERTY, Shadow, Thread, apply, check_invariants, fill, grow, loaded_at_once, signature, threads


@PROPERTY
@given(threads(), OPS, st.integers(1, 9))
def test_turning_busy_or_idle_regroups_the_last_turn_like_loading_everything(thread: Thread, ops: list[tuple[str, int, int, bool]], fill_limit: int) -> None:
    timeline = Timeline()
    shadow = Shadow(timeline)
    timeline.listener = shadow
    timeline.reset("t", boundary=thread.boundary_info(), running_turn=thread.running, total=len(thread.stored), sources=thread.sources)
    for op, pick, limit, with_tokens in ops:
        apply(timeline, thread, op, pick, limit, with_tokens)
    flipped = replace(thread, running=not thread.running)
    if not timeline.set_running_turn(flipped.running):
        return  # the last turn holds the boundary or a source's compaction: the window reads the view again
    shadow.check()
    check_invariants(timeline, flipped)
    grow(timeline, flipped, len(flipped.stored), fill_limit)
    fill(timeline, flipped, fill_limit)
    shadow.check()
    assert timeline.exhausted and signature(timeline.root) == signature(loaded_at_once(flipped).root)


def test_a_running_turn_that_finishes_becomes_one_turn_in_place() -> None:
    from engine.core.messages import Message, ToolCall
    from engine.core.views import StoredMessage
    from inspector_app.logic.timeline import PageRequest
    from tests.gui.test_timeline_core import T0

    msgs = [Message("user", "q1"), Message("assistant", "a1"), Message("user", "q2"),
            Message("assistant", "", tool_calls=(ToolCall("c1", "run", "{}"),)), Message("tool", "r1", tool_call_id="c1", name="run"),
            Message("assistant", "", tool_calls=(ToolCall("c2", "run", "{}"),)), Message("tool", "r2", tool_call_id="c2", name="run")]
    stored = [StoredMessage(Message(m.role, m.content, id=i + 1, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id, name=m.name), 1, T0) for i, m in enumerate(msgs)]
    thread = Thread(stored, True, None)
    timeline = Timeline()
    timeline.reset("t", running_turn=True, total=len(stored))
    timeline.insert_page(thread.read(PageRequest(limit=100)))
    assert [n.unit_kind for n in timeline.root.children][1:] == ["turn_user", "round", "round"]
    first = timeline.root.children[0]
    assert timeline.set_running_turn(False)
    assert len(timeline.root.children) == 2 and timeline.root.children[0] is first  # the first turn untouched
    assert signature(timeline.root) == signature(loaded_at_once(replace(thread, running=False)).root)
