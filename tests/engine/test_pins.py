"""Pins (issue 23): a pinned message is never pruned or summarized and stays verbatim in its place
with its tool round; pins count against the envelope and say so when they alone exceed the
target; a pin change is part of the compaction state (the summary's compare-and-swap); every pin
and unpin writes one audit row with the operator. On SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest

from engine.compaction.compactor import RunState
from engine.core.errors import EngineError
from engine.core.messages import ToolCall, assistant, tool_result, user
from engine.core.surface import build_surface, history_part
from engine.core.units import is_balanced

from .conftest import Counting, add, filler, finished_turns, new_thread, route

FACTORIES = [pytest.param("make_pg_service", marks=pytest.mark.postgres), "make_service"]
MARK = "PINNED-RESULT kb://tickets/T-9917 owner=alice@example.com"


def audit_rows(svc, key):
    from sqlalchemy import text  # the test reads the table itself: the reading side is another helper's
    with svc.store.engine.connect() as c:
        rows = [dict(r._mapping) for r in c.execute(text("SELECT * FROM audit_log WHERE thread_key = :k ORDER BY id"), {"k": key})]
    for r in rows:  # SQLite hands JSON back as text
        for k in ("before", "after"):
            if isinstance(r[k], str):
                r[k] = json.loads(r[k])
    return rows


def pinned_thread(svc, key):
    """Turns, then a tool round whose big result (over the 2000-token prune limit) is pinned by its
    result id, then more turns: pressure would prune and summarize it."""
    new_thread(svc, key)
    finished_turns(svc, key, 4)
    call = ToolCall("call-pin", "query_kb", '{"query": "T-9917"}')
    call_id, result_id = add(svc, key, user("Look up ticket T-9917."), assistant("Looking it up.", call),
                             tool_result(call.id, MARK + "\n" + filler(2600, "ticket body"), name="query_kb"))[1:]
    finished_turns(svc, key, 14)
    add(svc, key, user("Now, who owns doc-42?"))
    return call_id, result_id


def surface_of(svc, key):
    return build_surface(svc.store.snapshot(key))


@pytest.mark.parametrize("factory", FACTORIES)
def test_pinned_tool_result_survives_pressure_verbatim_with_its_call(request, new_key, factory):
    svc = request.getfixturevalue(factory)(Counting())
    key = new_key("pin-pressure")
    call_id, result_id = pinned_thread(svc, key)
    original = {m.id: m.content for m in svc.store.messages_after(key, None)}
    change = svc.steering.pin(key, result_id, reason="the ticket is the evidence")
    assert set(change.covered) == {call_id, result_id} and set(change.changed) == {call_id, result_id}
    route(svc, key)

    out = svc.steps.compact_for_pressure(key, RunState())

    assert out.action == "summarized"
    state = svc.reads.compaction_state(key)
    assert state.boundary is not None and state.boundary > result_id  # the summary passed the pinned round
    assert result_id not in svc.reads.offloads(key)  # never pruned though over the limit
    surface = surface_of(svc, key)
    shown = {m.id: m for m in history_part(surface)}
    assert shown[result_id].content == original[result_id]  # verbatim
    assert shown[call_id].content == original[call_id] and shown[call_id].tool_calls[0].id == "call-pin"
    ids = [m.id for m in surface.messages if m.id is not None]
    assert ids.index(call_id) + 1 == ids.index(result_id)  # in its place: the call, then its result
    assert is_balanced(history_part(surface))
    assert MARK not in (state.summary or "")  # kept outside the summary, not summarized
    ev = [e for e in svc.reads.events(key) if e.kind == "summary"][-1]
    assert set(ev.data["pinned"]) >= {call_id, result_id}


@pytest.mark.parametrize("factory", FACTORIES)
def test_pinned_tool_result_survives_manual_compaction_verbatim(request, new_key, factory):
    counter = Counting()
    svc = request.getfixturevalue(factory)(counter)
    key = new_key("pin-manual")
    call_id, result_id = pinned_thread(svc, key)
    original = {m.id: m.content for m in svc.store.messages_after(key, None)}
    svc.steering.pin(key, call_id)  # pinning the call pins its result

    result = svc.compaction.compact(key, reason="tidy up", instructions=None)

    assert result.status == "completed" and result.boundary > result_id
    assert all(m.id not in (call_id, result_id) for r in counter.requests for m in r.messages)  # never given to the summarizer
    shown = {m.id: m for m in history_part(surface_of(svc, key))}
    assert shown[call_id].content == original[call_id] and shown[result_id].content == original[result_id]
    # a second compaction keeps it too
    finished_turns(svc, key, 12)
    assert svc.compaction.compact(key).status == "completed"
    shown = {m.id: m for m in history_part(surface_of(svc, key))}
    assert shown[result_id].content == original[result_id] and call_id in shown


@pytest.mark.parametrize("factory", FACTORIES)
def test_pins_over_target_say_so(request, new_key, factory):
    svc = request.getfixturevalue(factory)(Counting())
    key = new_key("pin-over")
    new_thread(svc, key)
    ids = finished_turns(svc, key, 22, answer_tokens=300)
    add(svc, key, user("What now?"))
    for mid in ids[:40]:  # ~20 answers of 300 tokens: more than the 3200-token target
        svc.steering.pin(key, mid)

    result = svc.compaction.compact(key)

    assert result.reason == "pinned_over_target"
    assert "pinned messages alone hold" in (result.note or "") and "target" in result.note
    finished_turns(svc, key, 6)  # back over the threshold with unpinned turns
    route(svc, key)
    out = svc.steps.compact_for_pressure(key, RunState())
    assert out.reason == "pinned_over_target" and out.tokens_after > out.threshold // 2


@pytest.mark.parametrize("factory", FACTORIES)
def test_unpin_lets_compaction_take_it_and_each_action_is_audited(request, new_key, factory):
    svc = request.getfixturevalue(factory)(Counting())
    key = new_key("pin-audit")
    call_id, result_id = pinned_thread(svc, key)
    svc.steering.pin(key, result_id, reason="keep")
    assert svc.steering.pin(key, result_id).changed == ()  # pinned already: nothing changes, no audit row
    svc.steering.unpin(key, call_id, reason="no longer needed")
    assert svc.steering.pins(key) == []
    rows = audit_rows(svc, key)
    assert [r["action"] for r in rows] == ["pin", "unpin"]
    assert all(r["operator"] == svc.steering.operator() and r["operator"] for r in rows)
    assert rows[0]["reason"] == "keep" and rows[1]["reason"] == "no longer needed"
    assert svc.compaction.compact(key).status == "completed"
    assert [r["action"] for r in audit_rows(svc, key)] == ["pin", "unpin", "compact"]
    snap = svc.store.snapshot(key)
    assert result_id not in {m.id for m in snap.messages} and not snap.pinned  # summarized now


@pytest.mark.parametrize("factory", FACTORIES)
def test_a_pin_made_during_a_pressure_summary_is_a_cas_conflict(request, new_key, factory):
    holder = {}

    def before(i: int) -> None:
        if i == 0:
            holder["svc"].steering.pin(holder["key"], holder["pin"])

    from .conftest import Hooked
    svc = request.getfixturevalue(factory)(Hooked(before))
    key = new_key("pin-cas")
    new_thread(svc, key)
    ids = finished_turns(svc, key, 24)
    add(svc, key, user("What now?"))
    holder.update(svc=svc, key=key, pin=ids[1])
    route(svc, key)

    svc.steps.compact_for_pressure(key, RunState())

    rejected = [e for e in svc.reads.events(key) if e.kind == "summary_rejected"]
    assert rejected and rejected[0].data["reason"] == "cas_conflict"
    shown = {m.id for m in history_part(surface_of(svc, key))}
    assert ids[1] in shown  # the pin made meanwhile holds


def test_pin_of_an_unknown_message_is_refused(make_service, new_key):
    svc = make_service(Counting())
    key = new_thread(svc, new_key("pin-unknown"))
    with pytest.raises(EngineError) as caught:
        svc.steering.pin(key, 10**9)
    assert caught.value.code == "message_not_found"
    assert audit_rows(svc, key) == []


@pytest.mark.parametrize("factory", FACTORIES)
def test_the_history_rebuilds_the_pinned_surface(request, new_key, factory):
    """The replay / history knows the pins: the rebuilt surface after a compaction shows the
    pinned round verbatim, as the model saw it."""
    svc = request.getfixturevalue(factory)(Counting())
    key = new_key("pin-history")
    call_id, result_id = pinned_thread(svc, key)
    svc.steering.pin(key, result_id)
    assert svc.compaction.compact(key).status == "completed"
    diff = svc.reads.compaction_diff(key)
    after = {m.id: m for m in diff.after if m.id is not None}
    assert call_id in after and result_id in after and MARK in after[result_id].content
    assert result_id not in {m.id for m in diff.summarized}


@pytest.mark.parametrize("factory", FACTORIES)
def test_a_result_pruned_before_its_pin_stays_its_preview(request, new_key, factory):
    from engine.core.messages import META_PRUNED
    svc = request.getfixturevalue(factory)(Counting())
    key = new_key("pin-pruned")
    call_id, result_id = pinned_thread(svc, key)
    route(svc, key)
    svc.steps.compact_for_pressure(key, RunState())  # prunes the big result (and summarizes)
    if svc.reads.compaction_state(key).boundary and svc.reads.compaction_state(key).boundary >= result_id:
        pytest.skip("the pressure summary already took the round")
    assert result_id in svc.reads.offloads(key)
    svc.steering.pin(key, result_id)
    finished_turns(svc, key, 10)
    assert svc.compaction.compact(key).status == "completed" and svc.reads.compaction_state(key).boundary > result_id
    shown = {m.id: m for m in history_part(surface_of(svc, key))}
    assert shown[result_id].metadata.get(META_PRUNED) and shown[result_id].content.startswith("[tool result offloaded")  # as when pinned
    assert call_id in shown
