"""Compaction state: prune records and offloads, the summary compare-and-swap, append-only history."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest

from engine.core.errors import CompareAndSwapConflict, EngineError
from engine.core.messages import ToolCall, assistant, tool_result, user
from engine.core.views import Offload
from engine.store import Locked, Store
from tests import door_ops


def _offload(message_id: int, text: str = "full text") -> Offload:
    digest = hashlib.sha256(text.encode()).hexdigest()
    return Offload(
        message_id=message_id, tool_name="query_kb", path=f"/workdir/{digest}.txt", sha256=digest,
        preview=f"[query_kb result, {digest[:8]}…]", original_tokens=5000, preview_tokens=120,
    )


@pytest.fixture
def turn(store: Store, conv: str) -> tuple[str, list[int]]:
    """A conversation with two finished turns, each with a tool round; returns its key and ids."""
    msgs = []
    for i in range(2):
        msgs += [
            user(f"question {i}"),
            assistant("", ToolCall(id=f"c{i}", name="query_kb", arguments="{}")),
            tool_result(f"c{i}", f"huge result {i} " * 100, name="query_kb"),
            assistant(f"answer {i}"),
        ]
    with store.locked(conv) as tx:
        ids = tx.append_messages(msgs)
    return conv, ids


def _persist(tx: Locked, *, expected: int | None, expected_hash: str | None, new: int, new_hash: str | None = None,
             summary: str = "summary", kind: str = "summary") -> int:
    if new_hash is None:
        msg = tx.message(new)
        assert msg is not None
        new_hash = msg.content_hash()
    return tx.persist_summary(
        expected_boundary=expected, expected_boundary_hash=expected_hash, new_boundary=new, new_boundary_hash=new_hash,
        summary=summary, summary_tokens=42, kind=kind, trigger="pressure", run_id=None, tokens_before=9000, tokens_after=3000,
    )


# -- prune ------------------------------------------------------------------------------------


def test_record_prune_bumps_generation_and_writes_history_and_offloads(store: Store, turn: tuple[str, list[int]]) -> None:
    key, ids = turn
    tool_ids = [ids[2], ids[6]]
    with store.locked(key) as tx:
        gen = tx.record_prune([_offload(i, f"text {i}") for i in tool_ids], trigger="pressure", tokens_before=12000, tokens_after=4000)
        assert set(tx.offloads()) == set(tool_ids)
    assert gen == 1
    state = store.compaction_state(key)
    assert (state.generation, state.compact_count, state.boundary) == (1, 0, None)  # a prune is not a summary
    [h] = store.history(key)
    assert (h.kind, h.trigger, h.generation_before, h.generation_after) == ("prune", "pressure", 0, 1)
    assert (h.pruned_message_ids, h.tokens_before, h.tokens_after, h.summary) == (tuple(tool_ids), 12000, 4000, None)
    offs = store.offloads(key)
    assert set(offs) == set(tool_ids)
    o = offs[ids[2]]
    expected = _offload(ids[2], f"text {ids[2]}")
    assert (o.tool_name, o.path, o.sha256, o.preview, o.original_tokens, o.preview_tokens, o.generation) == (
        expected.tool_name, expected.path, expected.sha256, expected.preview, 5000, 120, 1,
    )
    assert store.offloads(key, [ids[6]]).keys() == {ids[6]}
    assert store.offloads(key, []) == {}
    # the raw message is untouched; the page says it was pruned
    page = {s.id: s for s in store.messages_page(key)}
    assert page[ids[2]].message.content == "huge result 0 " * 100
    assert page[ids[2]].offload_sha256 == o.sha256 and page[ids[0]].offload_sha256 is None


def test_each_prune_is_its_own_generation(store: Store, turn: tuple[str, list[int]]) -> None:
    key, ids = turn
    with store.locked(key) as tx:
        assert tx.record_prune([_offload(ids[2])], trigger="pressure") == 1
    with store.locked(key) as tx:
        assert tx.record_prune([_offload(ids[6])], trigger="overflow") == 2
    assert [(h.generation_before, h.generation_after, h.trigger) for h in store.history(key)] == [(0, 1, "pressure"), (1, 2, "overflow")]
    assert store.offloads(key)[ids[6]].generation == 2 and store.thread(key).generation == 2


def test_a_result_is_never_pruned_twice(store: Store, turn: tuple[str, list[int]]) -> None:
    key, ids = turn
    with store.locked(key) as tx:
        tx.record_prune([_offload(ids[2])], trigger="pressure")
    with pytest.raises(EngineError) as err:
        with store.locked(key) as tx:
            tx.record_prune([_offload(ids[6]), _offload(ids[2], "other text")], trigger="pressure")
    assert err.value.code == "already_pruned"
    assert store.compaction_state(key).generation == 1
    assert len(store.history(key)) == 1 and set(store.offloads(key)) == {ids[2]}  # ids[6] was not written either


def test_an_empty_prune_is_refused(store: Store, conv: str) -> None:
    with pytest.raises(EngineError) as err:
        with store.locked(conv) as tx:
            tx.record_prune([], trigger="pressure")
    assert err.value.code == "empty_prune"
    assert store.compaction_state(conv).generation == 0 and store.history(conv) == []


# -- summary compare-and-swap -----------------------------------------------------------------


def test_persist_summary_success(store: Store, turn: tuple[str, list[int]]) -> None:
    key, ids = turn
    with store.locked(key) as tx:
        assert tx.state().boundary is None
        gen = _persist(tx, expected=None, expected_hash=None, new=ids[3], summary="first summary")
        boundary_hash = tx.message(ids[3]).content_hash()  # type: ignore[union-attr]
    assert gen == 1
    state = store.compaction_state(key)
    assert (state.boundary, state.boundary_hash, state.summary, state.summary_tokens) == (ids[3], boundary_hash, "first summary", 42)
    assert (state.generation, state.compact_count) == (1, 1) and state.updated_at is not None
    info = store.thread(key)
    assert (info.boundary, info.generation, info.compact_count) == (ids[3], 1, 1)
    [h] = store.history(key)
    assert (h.kind, h.trigger, h.boundary_before, h.boundary_after, h.generation_before, h.generation_after) == (
        "summary", "pressure", None, ids[3], 0, 1,
    )
    assert (h.summary, h.tokens_before, h.tokens_after) == ("first summary", 9000, 3000)
    # rolling: the next summary compares against the stored boundary and hash
    with store.locked(key) as tx:
        gen = _persist(tx, expected=ids[3], expected_hash=boundary_hash, new=ids[7], summary="second", kind="manual")
    assert gen == 2
    state = store.compaction_state(key)
    assert (state.boundary, state.summary, state.generation, state.compact_count) == (ids[7], "second", 2, 2)
    assert [(h.kind, h.boundary_before, h.boundary_after) for h in store.history(key)] == [
        ("summary", None, ids[3]), ("manual", ids[3], ids[7]),
    ]
    assert store.count_messages(key) == 8  # raw messages are never deleted


def test_prune_then_summary_share_one_generation_counter(store: Store, turn: tuple[str, list[int]]) -> None:
    key, ids = turn
    with store.locked(key) as tx:
        tx.record_prune([_offload(ids[6])], trigger="pressure")
        assert _persist(tx, expected=None, expected_hash=None, new=ids[3]) == 2
    state = store.compaction_state(key)
    assert (state.generation, state.compact_count) == (2, 1)
    [prune, summary] = store.history(key)
    assert (prune.boundary_before, prune.boundary_after) == (None, None)
    assert (summary.generation_before, summary.generation_after) == (1, 2)


def _compacted_once(store: Store, key: str, ids: list[int]) -> str:
    with store.locked(key) as tx:
        _persist(tx, expected=None, expected_hash=None, new=ids[3], summary="first")
    state = store.compaction_state(key)
    assert state.boundary_hash is not None
    return state.boundary_hash


def _assert_unchanged(store: Store, key: str, state_before: object, history_len: int) -> None:
    assert store.compaction_state(key) == state_before
    assert len(store.history(key)) == history_len


def test_stale_expected_boundary_conflicts_and_writes_nothing(store: Store, turn: tuple[str, list[int]]) -> None:
    key, ids = turn
    _compacted_once(store, key, ids)
    before = store.compaction_state(key)
    with pytest.raises(CompareAndSwapConflict, match="nothing written") as err:
        with store.locked(key) as tx:  # a writer that read the state before the first summary
            _persist(tx, expected=None, expected_hash=None, new=ids[7], summary="lost")
    assert err.value.code == "cas_conflict"
    _assert_unchanged(store, key, before, 1)


def test_changed_boundary_hash_conflicts(store: Store, turn: tuple[str, list[int]]) -> None:
    key, ids = turn
    _compacted_once(store, key, ids)
    before = store.compaction_state(key)
    with pytest.raises(CompareAndSwapConflict):
        with store.locked(key) as tx:
            _persist(tx, expected=ids[3], expected_hash="0" * 64, new=ids[7], summary="lost")
    _assert_unchanged(store, key, before, 1)


def test_new_boundary_hash_must_match_the_message(store: Store, turn: tuple[str, list[int]]) -> None:
    key, ids = turn
    before = store.compaction_state(key)
    with pytest.raises(CompareAndSwapConflict, match="changed or is missing"):
        with store.locked(key) as tx:
            _persist(tx, expected=None, expected_hash=None, new=ids[3], new_hash="f" * 64)
    with pytest.raises(CompareAndSwapConflict, match="changed or is missing"):
        with store.locked(key) as tx:
            _persist(tx, expected=None, expected_hash=None, new=10**12, new_hash="f" * 64)
    _assert_unchanged(store, key, before, 0)


def test_new_boundary_in_another_conversation_conflicts(store: Store, turn: tuple[str, list[int]], new_key: Callable[[str], str]) -> None:
    key, _ = turn
    other = new_key("other")
    store.create_conversation(other)
    foreign = door_ops.append_message(store, other, user("not yours"))
    before = store.compaction_state(key)
    with pytest.raises(CompareAndSwapConflict):
        with store.locked(key) as tx:
            _persist(tx, expected=None, expected_hash=None, new=foreign, new_hash=user("not yours").content_hash())
    _assert_unchanged(store, key, before, 0)


@pytest.mark.parametrize("offset", [0, -1])
def test_non_advancing_boundary_conflicts(store: Store, turn: tuple[str, list[int]], offset: int) -> None:
    key, ids = turn
    boundary_hash = _compacted_once(store, key, ids)
    before = store.compaction_state(key)
    with pytest.raises(CompareAndSwapConflict, match="does not advance"):
        with store.locked(key) as tx:
            _persist(tx, expected=ids[3], expected_hash=boundary_hash, new=ids[3 + offset], summary="lost")
    _assert_unchanged(store, key, before, 1)


def test_locked_state_and_messages_after(store: Store, turn: tuple[str, list[int]]) -> None:
    key, ids = turn
    _compacted_once(store, key, ids)
    with store.locked(key) as tx:
        assert tx.state() == store.compaction_state(key)
        assert [m.id for m in tx.messages_after(tx.state().boundary)] == ids[4:]
        assert [m.id for m in tx.messages_after(None)] == ids
