"""Model requests and compaction events: recording, completion, keyset reads."""

from __future__ import annotations

import pytest

from engine.core.errors import EngineError
from engine.store import Store
from tests import door_ops


def test_record_and_complete_a_model_request(store: Store, conv: str) -> None:
    run = door_ops.start_run(store, conv)
    rid = door_ops.record_model_request(store, conv, provider="openai", model="gpt-4o", run_id=run, step=3, estimated_tokens=9100, threshold=102400)
    [pending] = store.model_requests(conv)
    assert (pending.id, pending.run_id, pending.step, pending.provider, pending.model) == (rid, run, 3, "openai", "gpt-4o")
    assert (pending.estimated_tokens, pending.outcome, pending.reported_prompt_tokens) == (9100, "pending", None)
    assert pending.created_at.tzinfo is not None
    assert store.last_completed_request(conv) is None  # pending is not completed
    # recording a request routes the thread to that provider/model
    assert (store.thread(conv).provider, store.thread(conv).model) == ("openai", "gpt-4o")
    door_ops.complete_model_request(store, rid, outcome="ok", reported_prompt_tokens=9000, reported_completion_tokens=250)
    done = store.last_completed_request(conv)
    assert done is not None and done.id == rid
    assert (done.outcome, done.reported_prompt_tokens, done.reported_completion_tokens) == ("ok", 9000, 250)


def test_last_completed_request_is_the_newest_ok_one(store: Store, conv: str) -> None:
    ok1 = door_ops.record_model_request(store, conv, provider="p", model="m1")
    door_ops.complete_model_request(store, ok1, outcome="ok")
    ok2 = door_ops.record_model_request(store, conv, provider="p", model="m2")
    door_ops.complete_model_request(store, ok2, outcome="ok")
    failed = door_ops.record_model_request(store, conv, provider="p", model="m3")
    door_ops.complete_model_request(store, failed, outcome="error", error_code="CONTEXT_WINDOW_EXCEEDED", error_message="too long")
    door_ops.record_model_request(store, conv, provider="p", model="m4")  # still pending
    last = store.last_completed_request(conv)
    assert last is not None and (last.id, last.model) == (ok2, "m2")
    [*_, err, _pending] = store.model_requests(conv)
    assert (err.id, err.outcome, err.error_code, err.error_message) == (failed, "error", "CONTEXT_WINDOW_EXCEEDED", "too long")


def test_model_requests_keyset(store: Store, conv: str) -> None:
    ids = [door_ops.record_model_request(store, conv, provider="p", model="m", step=i) for i in range(5)]
    assert ids == sorted(ids)
    assert [r.id for r in store.model_requests(conv)] == ids
    assert [r.id for r in store.model_requests(conv, after_id=ids[1], limit=2)] == ids[2:4]
    assert store.model_requests(conv, after_id=ids[-1]) == []


def test_completing_an_unknown_request_fails(store: Store) -> None:
    with pytest.raises(EngineError) as err:
        door_ops.complete_model_request(store, 10**12, outcome="ok")
    assert err.value.code == "not_found"


def test_events_add_list_keyset_and_kinds(store: Store, conv: str) -> None:
    run = door_ops.start_run(store, conv)
    e1 = door_ops.add_event(store, conv, "provider_error", {"code": "CONTEXT_WINDOW_EXCEEDED", "message": "too long"}, trigger="overflow", run_id=run)
    with store.locked(conv) as tx:
        e2 = tx.add_event("prune", {"tokens_before": 9000, "tokens_after": 4000, "pruned": [1, 2]}, trigger="overflow", run_id=run)
        e3 = tx.add_event("summary", {"generation_after": 2, "nested": {"ok": True, "note": "日本語"}})
    e4 = door_ops.add_event(store, conv, "retry", {})
    assert [e1, e2, e3, e4] == sorted([e1, e2, e3, e4])
    events = store.events(conv)
    assert [(e.id, e.kind, e.trigger, e.run_id) for e in events] == [
        (e1, "provider_error", "overflow", run), (e2, "prune", "overflow", run), (e3, "summary", None, None), (e4, "retry", None, None),
    ]
    assert events[1].data == {"tokens_before": 9000, "tokens_after": 4000, "pruned": [1, 2]}
    assert events[2].data == {"generation_after": 2, "nested": {"ok": True, "note": "日本語"}}
    assert events[0].conversation_id == store.thread(conv).id and events[0].created_at.tzinfo is not None
    assert [e.id for e in store.events(conv, after_id=e1, limit=2)] == [e2, e3]
    assert [e.id for e in store.events(conv, after_id=e4)] == []
    assert [e.id for e in store.events(conv, kinds=["prune", "retry"])] == [e2, e4]
    assert [e.id for e in store.events(conv, kinds=["prune", "retry"], after_id=e2)] == [e4]
    assert [e.id for e in store.events(conv, kinds=["nothing"])] == []


def test_an_event_written_in_a_rolled_back_lock_is_gone(store: Store, conv: str) -> None:
    with pytest.raises(RuntimeError):
        with store.locked(conv) as tx:
            tx.add_event("summary", {"x": 1})
            raise RuntimeError("summarizer failed after the event")
    assert store.events(conv) == []
