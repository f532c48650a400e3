"""Conversations: creation, configuration, the threads list and thread()."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine.core.errors import EngineError, ThreadNotFound
from engine.core.messages import user
from engine.store import DuplicateThread, Store
from tests import door_ops


def test_create_conversation_stores_its_configuration(store: Store, new_key: Callable[[str], str]) -> None:
    key = new_key("cfg")
    tools = [{"type": "function", "function": {"name": "query_kb", "parameters": {"type": "object"}}}]
    cid = store.create_conversation(
        key, title="Refund for order 42", agent="support-bot", provider="openai", model="gpt-4o",
        system_prompt="You are helpful.", tools=tools,
    )
    info = store.thread(key)
    assert (info.id, info.key, info.title, info.agent, info.provider, info.model) == (
        cid, key, "Refund for order 42", "support-bot", "openai", "gpt-4o",
    )
    assert (info.message_count, info.generation, info.compact_count, info.boundary, info.busy_reason) == (0, 0, 0, None, None)
    assert info.created_at.tzinfo is not None and info.updated_at >= info.created_at
    assert store.conversation_config(key) == ("You are helpful.", tuple(tools), "openai", "gpt-4o")
    state = store.compaction_state(key)
    assert (state.conversation_id, state.boundary, state.summary, state.generation, state.compact_count) == (cid, None, None, 0, 0)


def test_duplicate_key_is_refused_and_the_first_is_kept(store: Store, new_key: Callable[[str], str]) -> None:
    key = new_key("dup")
    first = store.create_conversation(key, title="first")
    with pytest.raises(DuplicateThread, match=key) as err:
        store.create_conversation(key, title="second")
    assert err.value.code == "duplicate_thread"
    assert store.thread(key).id == first and store.thread(key).title == "first"
    assert [t.key for t in store.list_threads(text=key)] == [key]


@pytest.mark.parametrize("bad", ["", None, 42])
def test_invalid_key_is_refused(store: Store, bad: object) -> None:
    with pytest.raises(EngineError) as err:
        store.create_conversation(bad)  # type: ignore[arg-type]
    assert err.value.code == "invalid_thread_key"


def test_unknown_thread_raises_thread_not_found_everywhere(store: Store, new_key: Callable[[str], str]) -> None:
    missing = new_key("missing")
    calls = [
        lambda: store.thread(missing),
        lambda: store.messages_page(missing),
        lambda: door_ops.append_message(store, missing, user("hi")),
        lambda: store.busy_reason(missing),
        lambda: store.compaction_state(missing),
        lambda: door_ops.record_model_request(store, missing, provider="p", model="m"),
        lambda: door_ops.add_event(store, missing, "retry", {}),
    ]
    for call in calls:
        with pytest.raises(ThreadNotFound, match=missing):
            call()


def test_locked_accepts_the_numeric_id(store: Store, conv: str) -> None:
    cid = store.thread(conv).id
    with store.locked(cid) as tx:
        assert (tx.conversation_id, tx.thread_key) == (cid, conv)


def test_set_route_changes_provider_and_model(store: Store, conv: str) -> None:
    door_ops.set_route(store, conv, provider="deepseek", model="deepseek-chat")
    info = store.thread(conv)
    assert (info.provider, info.model) == ("deepseek", "deepseek-chat")


def test_list_threads_filters_by_key_or_title_case_insensitively(store: Store, new_key: Callable[[str], str]) -> None:
    tag = new_key("lst")
    store.create_conversation(f"{tag}-a", title="Billing question")
    store.create_conversation(f"{tag}-b", title="Shipping delay")
    store.create_conversation(new_key("other"), title=f"About {tag.upper()} shipping")
    assert [t.key for t in store.list_threads(text=f"{tag}-")] == [f"{tag}-a", f"{tag}-b"]
    # the third matches by title only (upper case); results are ordered by key ("lst-…" < "other-…")
    assert [t.title for t in store.list_threads(text=tag)] == ["Billing question", "Shipping delay", f"About {tag.upper()} shipping"]
    assert [t.key for t in store.list_threads(text=f"{tag}-A")] == [f"{tag}-a"]
    assert store.list_threads(text=f"{tag}-zzz") == []


def test_list_threads_text_is_a_literal_substring(store: Store, new_key: Callable[[str], str]) -> None:
    tag = new_key("lit")
    store.create_conversation(f"{tag}-a_b")
    store.create_conversation(f"{tag}-axb")
    store.create_conversation(f"{tag}-100%")
    assert [t.key for t in store.list_threads(text=f"{tag}-a_b")] == [f"{tag}-a_b"]
    assert [t.key for t in store.list_threads(text="100%") if t.key.startswith(tag)] == [f"{tag}-100%"]


def test_list_threads_pages_by_key(store: Store, new_key: Callable[[str], str]) -> None:
    tag = new_key("page")
    keys = [f"{tag}-{i:02d}" for i in range(7)]
    for k in reversed(keys):
        store.create_conversation(k)
    pages, after = [], None
    while True:
        page = store.list_threads(text=tag, after_key=after, limit=3)
        if not page:
            break
        pages.append([t.key for t in page])
        after = page[-1].key
    assert pages == [keys[0:3], keys[3:6], keys[6:7]]


def test_list_threads_reports_counts_generation_and_busy_reason(store: Store, new_key: Callable[[str], str]) -> None:
    tag = new_key("info")
    idle, running = f"{tag}-idle", f"{tag}-running"
    store.create_conversation(idle)
    store.create_conversation(running)
    door_ops.append_message(store, idle, user("one"))
    door_ops.append_message(store, idle, user("two"))
    door_ops.start_run(store, running)
    infos = {t.key: t for t in store.list_threads(text=tag)}
    assert infos[idle].message_count == 2 and infos[idle].busy_reason is None and not infos[idle].busy
    assert infos[running].busy_reason == "running" and infos[running].busy
    assert store.thread(running).busy_reason == "running"
