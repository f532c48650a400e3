"""``Store.versions``: the cheap marks the inspector's live refresh polls. Each write a reader would
see changes the thread's mark (and the list's), reading alone changes nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine.core.errors import ThreadNotFound
from engine.core.events import EventKind
from engine.core.messages import user
from engine.store import Store
from tests import door_ops


def test_marks_move_with_every_visible_write_and_only_then(store: Store, new_key: Callable[[str], str]) -> None:
    key = new_key("versions")
    store.create_conversation(key, title="marks")
    listing, mark = store.versions(key)
    assert store.versions(key) == (listing, mark)  # reading changes nothing
    store.messages_page(key)
    assert store.versions(key) == (listing, mark)

    def moved() -> tuple[bool, bool]:
        nonlocal listing, mark
        new_listing, new_mark = store.versions(key)
        out = (new_listing != listing, new_mark != mark)
        listing, mark = new_listing, new_mark
        return out

    door_ops.append_message(store, key, user("hello"))
    assert moved() == (True, True)  # a message: the list's message count and the thread's mark
    door_ops.add_event(store, key, EventKind.PROVIDER_ERROR, {"error_code": "x"})
    assert moved()[1]  # an event alone
    rid = door_ops.record_model_request(store, key, provider="p", model="m")
    assert moved()[1]  # a request recorded
    door_ops.complete_model_request(store, rid, outcome="ok", reported_prompt_tokens=10)
    assert moved()[1]  # ... and completed (its point on the chart changes)
    run = door_ops.start_run(store, key)
    assert moved() == (True, True)  # busy: the list's state column and the thread's header
    door_ops.finish_run(store, key, run)
    assert moved() == (True, True)
    assert moved() == (False, False)
    other = new_key("versions")
    store.create_conversation(other, title="another")
    assert moved() == (True, False)  # a new thread: the list only
    with pytest.raises(ThreadNotFound):
        store.versions(new_key("missing"))
    assert store.versions()[1] is None
