"""Jumps into the thread list (issue 26): ``page(offset=)`` and ``position(key)`` against the
complete keyset walk of the same query, for every sort in both directions and with filters, on
SQLite and PostgreSQL (the 1,500-thread store of tests/test_fleet_list.py)."""

from __future__ import annotations

import pytest

from engine.core.views import THREAD_SORTS, ThreadQuery
from engine.service import Service
from engine.store import InvalidThreadQuery

from .test_fleet_list import fleet_url, svc, walk  # noqa: F401 (the module-scoped fixtures, shared)


@pytest.mark.parametrize("descending", [True, False])
@pytest.mark.parametrize("sort", THREAD_SORTS)
def test_offset_and_position_agree_with_the_walk(svc: Service, sort: str, descending: bool) -> None:  # noqa: F811
    query = ThreadQuery(sort=sort, descending=descending)
    keys = [t.key for t in walk(svc, query, limit=500)]
    for offset in (0, 1, 199, 777, len(keys) - 3):
        page = svc.threads.page(query, offset=offset, limit=50)
        assert [t.key for t in page.threads] == keys[offset:offset + 50]
        assert page.total == len(keys)
        if page.after is not None:  # the pages after a jump go on by cursor, without a gap or a repeat
            nxt = svc.threads.page(query, after=page.after, limit=50)
            assert [t.key for t in nxt.threads] == keys[offset + 50:offset + 100]
    for row in (0, 1, 640, 1111, len(keys) - 1):
        assert svc.threads.position(query, keys[row]) == row


def test_position_under_a_filter_and_of_a_thread_it_does_not_match(svc: Service) -> None:  # noqa: F811
    query = ThreadQuery(source_format="codex", sort="messages")
    keys = [t.key for t in walk(svc, query, limit=100)]
    assert len(keys) > 10
    assert [svc.threads.position(query, k) for k in keys] == list(range(len(keys)))
    live = walk(svc, ThreadQuery(source_format="live"), limit=100)[0].key
    assert svc.threads.position(query, live) is None
    assert svc.threads.position(query, "no-such-thread") is None


def test_a_negative_offset_is_refused(svc: Service) -> None:  # noqa: F811
    with pytest.raises(InvalidThreadQuery, match="offset"):
        svc.threads.page(ThreadQuery(), offset=-1)
