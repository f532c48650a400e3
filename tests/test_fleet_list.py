"""The thread list at scale (issue 26), on SQLite and PostgreSQL: keyset paging complete and stable
under concurrent inserts, search beyond the first page, every sort and every filter against a
brute-force reference made from the per-thread reads, CJK, literal % and _."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engine.core.messages import assistant, user
from engine.core.views import THREAD_FILTERS, THREAD_SORTS, ThreadInfo, ThreadQuery
from engine.service import Service, open_service
from engine.store import InvalidThreadQuery, Store
from engine.store.fleet_build import build_fleet_store
from tests import door_ops

THREADS = 1_500


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def fleet_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store of 1,500 threads built by bulk SQL (busy, compacted, rejected, imported, unmeasured ones)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('fleet') / 'fleet.db'}"
    else:
        url = request.getfixturevalue("new_pg_database")()
    build_fleet_store(url, threads=THREADS, messages=15_000, seed=7)
    return url


@pytest.fixture(scope="module")
def svc(fleet_url: str) -> Iterator[Service]:
    s = open_service(fleet_url)
    yield s
    s.close()


def walk(svc: Service, query: ThreadQuery, limit: int = 97, between: Callable[[int], None] | None = None) -> list[ThreadInfo]:
    """Every page of ``query``; ``between(n)`` runs after the n-th page is read."""
    out: list[ThreadInfo] = []
    page = svc.threads.page(query, limit=limit)
    n = 1
    while True:
        assert len(page.threads) <= limit
        out.extend(page.threads)
        if page.after is None:
            return out
        if between is not None:
            between(n)
        page = svc.threads.page(query, after=page.after, limit=limit)
        n += 1


@pytest.fixture(scope="module")
def reference(svc: Service) -> dict[str, dict]:
    """Per thread, from the per-thread reads (not the list's SQL): its ThreadInfo, events, history, source compactions."""
    keys = [t.key for t in svc.store.list_threads(limit=10_000)]
    assert len(keys) == THREADS
    out = {}
    for k in keys:
        out[k] = {"info": svc.reads.thread(k), "events": {e.kind for e in svc.reads.events(k)}, "history": svc.reads.history(k),
                  "sources": svc.reads.source_compactions(k)}
    return out


def _ppm(t: ThreadInfo) -> int:
    return t.kept_tokens * 1_000_000 // t.threshold if t.kept_tokens is not None and t.threshold else -1


def _ref_filter(name: str, r: dict, now: datetime) -> bool:
    t: ThreadInfo = r["info"]
    if name == "busy":
        return t.busy
    if name == "over_threshold":
        return t.kept_tokens is not None and bool(t.threshold) and t.kept_tokens >= t.threshold  # type: ignore[operator]
    if name == "over_hint":
        return t.kept_tokens is not None and bool(t.threshold) and t.kept_tokens * 1000 >= t.threshold * 850  # type: ignore[operator]
    if name == "rejected_summary":
        return "summary_rejected" in r["events"]
    if name == "compacted_last_day":
        since = now - timedelta(days=1)
        return (any(h.created_at >= since for h in r["history"])
                or any((s.source_timestamp or "")[:19] >= since.strftime("%Y-%m-%dT%H:%M:%S") for s in r["sources"]))
    raise AssertionError(name)


def _sort_value(sort: str, t: ThreadInfo):
    return {"activity": t.updated_at, "pressure": _ppm(t), "compactions": t.compact_count, "messages": t.message_count,
            "title": t.title, "key": t.key}[sort]


def test_paging_walks_every_thread_once(svc: Service) -> None:
    seen = walk(svc, ThreadQuery())
    assert len(seen) == THREADS == len({t.id for t in seen})
    first = svc.threads.page(ThreadQuery(), limit=200)
    assert first.total == THREADS and len(first.threads) == 200 and first.after is not None


def test_search_finds_a_thread_beyond_the_first_page(svc: Service) -> None:
    first = svc.threads.page(ThreadQuery(sort="key", descending=False), limit=500)
    assert "support-01400" not in {t.key for t in first.threads}  # beyond the old 500-thread list
    page = svc.threads.page(ThreadQuery(text="SUPPORT-01400"))
    assert [t.key for t in page.threads] == ["support-01400"] and page.total == 1 and page.after is None
    assert svc.threads.count(ThreadQuery(text="support-01400")) == 1


@pytest.mark.parametrize("descending", [True, False])
@pytest.mark.parametrize("sort", THREAD_SORTS)
def test_every_sort_matches_the_reference(svc: Service, reference: dict, sort: str, descending: bool) -> None:
    got = [t.key for t in walk(svc, ThreadQuery(sort=sort, descending=descending), limit=211)]
    infos = [r["info"] for r in reference.values()]
    want = [t.key for t in sorted(infos, key=lambda t: (_sort_value(sort, t), t.id), reverse=descending)]
    assert got == want


@pytest.mark.parametrize("name", THREAD_FILTERS)
def test_every_filter_matches_the_reference(svc: Service, reference: dict, name: str) -> None:
    now = datetime.now(UTC)
    want = {k for k, r in reference.items() if _ref_filter(name, r, now)}
    assert want, f"the built store has no thread for filter {name}: the comparison would check nothing"
    got = walk(svc, ThreadQuery(filters=frozenset({name})), limit=50)
    assert {t.key for t in got} == want
    assert svc.threads.count(ThreadQuery(filters=frozenset({name}))) == len(want)


def test_filters_combine_and_with_source_and_text(svc: Service, reference: dict) -> None:
    now = datetime.now(UTC)
    q = ThreadQuery(text="refund", filters=frozenset({"over_hint", "busy"}), source_format="live")
    want = {k for k, r in reference.items() if "refund" in r["info"].title.lower() and r["info"].source_format is None
            and _ref_filter("over_hint", r, now) and _ref_filter("busy", r, now)}
    assert {t.key for t in walk(svc, q)} == want
    for fmt in ("claude-code", "codex", "openhands", "live"):
        want = {k for k, r in reference.items() if r["info"].source_format == (None if fmt == "live" else fmt)}
        assert want and {t.key for t in walk(svc, ThreadQuery(source_format=fmt), limit=400)} == want


def test_cjk_search(svc: Service, reference: dict) -> None:
    want = {k for k, r in reference.items() if "退款" in r["info"].title}
    assert want
    assert {t.key for t in walk(svc, ThreadQuery(text="退款"))} == want


def test_unknown_sort_filter_or_foreign_cursor_is_refused(svc: Service) -> None:
    with pytest.raises(InvalidThreadQuery):
        svc.threads.page(ThreadQuery(sort="size"))
    with pytest.raises(InvalidThreadQuery):
        svc.threads.page(ThreadQuery(filters=frozenset({"fast"})))
    after = svc.threads.page(ThreadQuery(sort="key"), limit=5).after
    with pytest.raises(InvalidThreadQuery, match="sorted by key"):
        svc.threads.page(ThreadQuery(sort="title"), after=after)
    with pytest.raises(InvalidThreadQuery):
        svc.threads.page(ThreadQuery(), after="not-a-cursor")


# -- a store written through the door -------------------------------------------------------------
@pytest.fixture
def fresh_url(db_url: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty migrated database on the backend of ``db_url``."""
    if db_url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path / 'fresh.db'}"
    else:
        url = request.getfixturevalue("new_pg_database")()
    from engine.store import migrate

    migrate(url)
    return url


def test_literal_percent_and_underscore(fresh_url: str) -> None:
    svc = open_service(fresh_url)
    try:
        for key, title in (("pct-1", "100% done"), ("pct-2", "1000 done"), ("und-1", "a_b"), ("und-2", "axb")):
            svc.runs.create_thread(key, title=title)
        assert {t.key for t in svc.threads.page(ThreadQuery(text="0%")).threads} == {"pct-1"}
        assert {t.key for t in svc.threads.page(ThreadQuery(text="a_b")).threads} == {"und-1"}
        assert svc.threads.count(ThreadQuery(text="%")) == 1 and svc.threads.count(ThreadQuery(text="_")) == 1
    finally:
        svc.close()


@pytest.mark.parametrize("sort,descending", [("activity", True), ("key", False), ("key", True), ("title", False)])
def test_paging_is_stable_under_concurrent_inserts(fresh_url: str, sort: str, descending: bool) -> None:
    """While another connection inserts threads between the page reads (keys and titles that land
    before, inside and after the pages already read), every thread that existed before the walk
    is shown exactly once and no thread twice."""
    svc = open_service(fresh_url)
    writer = Store.open(fresh_url)
    try:
        for i in range(300):
            key = f"t-{i * 10:05d}"
            svc.runs.create_thread(key, title=f"title {i * 10:05d}")
            svc.runs.append_message(key, user(f"question {i}"))
        before = {t.key for t in walk(svc, ThreadQuery())}
        assert len(before) == 300
        inserted: list[str] = []

        def insert(n: int) -> None:
            def run() -> None:  # another thread, another connection
                for j in range(7):
                    key = f"t-{(n * 37 + j * 411) % 3000:05d}x{n}"
                    writer.create_conversation(key, title=f"title {key}")
                    door_ops.append_message(writer, key, user("new"))
                    inserted.append(key)
            t = threading.Thread(target=run)
            t.start()
            t.join(30)
            assert not t.is_alive()

        seen = walk(svc, ThreadQuery(sort=sort, descending=descending), limit=23, between=insert)
        keys = [t.key for t in seen]
        assert len(keys) == len(set(keys)), "a thread was shown twice"
        assert before <= set(keys), f"skipped: {sorted(before - set(keys))[:5]}"
        assert len(inserted) > 50 and set(keys) <= before | set(inserted)
    finally:
        writer.close()
        svc.close()


def test_list_figure_is_the_status_figure(fresh_url: str, tmp_path: Path) -> None:
    """One number per quantity: after a status, the list's kept tokens / threshold / window are the
    status's, for a thread written live and an imported one; an append keeps them in step."""
    from tests.engine.imported_sessions import write_claude_code_session

    svc = open_service(fresh_url)
    try:
        svc.runs.create_thread("live-1", title="live")
        svc.runs.append_messages("live-1", [user("what is the refund policy?"), assistant("Thirty days, with the receipt.")])
        path = write_claude_code_session(tmp_path)
        [report] = svc.imports.import_file(path)
        for key in ("live-1", report.thread):
            st = svc.compaction.status(key)
            listed = {t.key: t for t in svc.threads.page(ThreadQuery()).threads}[key]
            assert (listed.kept_tokens, listed.threshold, listed.window) == (st.tokens, st.threshold or None, st.context_window or None)
            assert listed.pressure == (st.tokens / st.threshold if st.threshold else None)
        svc.runs.append_message("live-1", user("and for digital goods?"))
        listed = svc.threads.page(ThreadQuery(text="live-1")).threads[0]
        assert listed.kept_tokens == svc.compaction.status("live-1").tokens  # the door added the count; the status agrees
    finally:
        svc.close()


@pytest.mark.parametrize("plant", [
    "UPDATE conversations SET message_count = 'abc' WHERE thread_key = :k",
    "UPDATE conversations SET updated_at = 'garbage' WHERE thread_key = :k",
])
def test_a_broken_row_is_one_marked_thread_not_a_failed_page(tmp_path: Path, plant: str) -> None:
    """SQLite stores what a program writing SQL puts there: the page lists the broken thread with its
    ``error`` and every other one (as ``Store.list_threads`` does)."""
    import sqlalchemy as sa

    from engine.store import migrate

    url = f"sqlite:///{tmp_path / 'broken.db'}"
    migrate(url)
    svc = open_service(url)
    try:
        for key in ("good-1", "bad-1", "good-2"):
            svc.runs.create_thread(key)
            svc.runs.append_message(key, user("hello"))
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.execute(sa.text(plant), {"k": "bad-1"})
        engine.dispose()
        for sort in ("activity", "key"):
            page = svc.threads.page(ThreadQuery(sort=sort), limit=10)
            by_key = {t.key: t for t in page.threads}
            assert set(by_key) == {"good-1", "bad-1", "good-2"} and page.total == 3
            assert by_key["good-1"].error is None and by_key["good-2"].error is None
            assert by_key["bad-1"].error and by_key["bad-1"].error.startswith("corrupt row in conversations")
    finally:
        svc.close()


def test_a_repeated_status_writes_nothing(fresh_url: str) -> None:
    """The write-back happens once per measured state: the refresh poll's status of an unchanged
    thread opens no write transaction."""
    from sqlalchemy import event

    svc = open_service(fresh_url)
    try:
        svc.runs.create_thread("poll-1")
        svc.runs.append_message("poll-1", user("is my order shipped?"))
        svc.compaction.status("poll-1")
        writes: list[str] = []
        event.listen(svc.store.engine, "before_cursor_execute", lambda _c, _cur, stmt, *_a: writes.append(stmt) if stmt.lstrip().upper().startswith(("UPDATE", "BEGIN IMMEDIATE")) else None)
        for _ in range(3):
            svc.compaction.status("poll-1")
        assert writes == []
        svc.runs.append_message("poll-1", assistant("Yes, yesterday."))
        writes.clear()
        st = svc.compaction.status("poll-1")
        assert svc.threads.page(ThreadQuery(text="poll-1")).threads[0].kept_tokens == st.tokens
    finally:
        svc.close()


def test_a_built_store_holds_the_figures_a_status_measures(fresh_url: str) -> None:
    """The bench store's counts are the engine's: opening (measuring) any of its threads through the
    service leaves its kept tokens, threshold and window as built, so the pressure column never
    changes under the user; a thread built unmeasured takes the status's figure."""
    build_fleet_store(fresh_url, threads=240, messages=6_000, seed=3)
    svc = open_service(fresh_url)
    try:
        built = {t.key: t for t in walk(svc, ThreadQuery(sort="key"), limit=500)}
        assert len(built) == 240
        measured = [t for t in built.values() if t.kept_tokens is not None]
        assert 0 < len(measured) < 240 and {t.source_format for t in measured} > {None}  # live and imported ones
        bands = {(t.kept_tokens or 0) * 100 // (t.threshold or 1) // 50 for t in measured}
        assert len(bands) >= 3  # below half, between half and the threshold, over it
        for key, t in built.items():
            st = svc.compaction.status(key)
            if t.kept_tokens is not None:
                assert (t.kept_tokens, t.threshold, t.window) == (st.tokens, st.threshold, st.context_window), key
        after = {t.key: t for t in walk(svc, ThreadQuery(sort="key"), limit=500)}
        for key, t in built.items():
            if t.kept_tokens is not None:
                assert (after[key].kept_tokens, after[key].threshold, after[key].window) == (t.kept_tokens, t.threshold, t.window)
            else:
                assert after[key].kept_tokens == svc.compaction.status(key).tokens
        assert all(a.kept_tokens is not None for a in after.values())
    finally:
        svc.close()


def test_deferred_write_backs_land_in_one_batch_and_keep_their_guard(fresh_url: str) -> None:
    """Inside ``svc.threads.deferred()`` (a bulk import) a status stores nothing at once; the block's
    end writes every figure, and a thread appended to after its measurement keeps the newer count
    (the door's), not the older measurement."""
    svc = open_service(fresh_url)
    try:
        for key in ("d-1", "d-2", "d-3"):
            svc.runs.create_thread(key)
            svc.runs.append_message(key, user(f"question about {key}"))
        svc.compaction.status("d-3")  # measured before the block

        def listed() -> dict[str, ThreadInfo]:
            return {t.key: t for t in svc.threads.page(ThreadQuery(sort="key")).threads}

        with svc.threads.deferred():
            measured = {k: svc.compaction.status(k) for k in ("d-1", "d-2")}
            svc.runs.append_message("d-3", assistant("an answer"))
            svc.compaction.status("d-3")
            svc.runs.append_message("d-3", user("and a follow-up"))  # after its measurement: the stored figure must not go back
            inside = listed()
            assert inside["d-1"].kept_tokens is None and inside["d-2"].kept_tokens is None
        after = listed()
        for k, st in measured.items():
            assert (after[k].kept_tokens, after[k].threshold, after[k].window) == (st.tokens, st.threshold, st.context_window)
        assert after["d-3"].kept_tokens == svc.compaction.status("d-3", remember=False).tokens
    finally:
        svc.close()


def test_a_thread_written_under_a_policy_this_process_lacks_keeps_its_figure(fresh_url: str, tmp_path: Path) -> None:
    """A user trial: an agent ran with a 16,000-token window for a model no catalogue knows
    (threshold 12,800, recorded with every request, its measurements stored for the list); an
    inspector without that policy would only assume 128,000. Its status is measured against the
    recorded threshold (``window_source`` ``recorded``), so it is the list's figure, and writing it
    back changes nothing the list shows; a window this process knows is still its own."""
    from engine.core import figures
    from tests.agent_threads import AGENT_THRESHOLD, MODEL, PROVIDER, write_agent_threads

    write_agent_threads(fresh_url, tmp_path / "agent", {"agent-a": 12, "agent-b": 6})
    inspector = open_service(fresh_url, workdir=tmp_path / "inspector", policies=None)
    try:
        before = {t.key: t for t in inspector.threads.page(ThreadQuery()).threads}
        assert {k: t.threshold for k, t in before.items()} == {"agent-a": AGENT_THRESHOLD, "agent-b": AGENT_THRESHOLD}
        assert before["agent-a"].pressure is not None and before["agent-a"].pressure > 0.85  # the hint band: the agent compacts soon
        for key in ("agent-a", "agent-b"):
            st = inspector.compaction.status(key)
            assert (st.threshold, st.context_window, st.window_source) == (AGENT_THRESHOLD, 0, "recorded")
            assert "12,800 recorded with the thread's last model request" in (st.window_detail or "")
            assert "would assume 128,000 (threshold 102,400)" in (st.window_detail or "")
            assert figures.percent(st.pressure_ratio) == figures.percent(before[key].pressure)
            after = {t.key: t for t in inspector.threads.page(ThreadQuery()).threads}[key]
            assert (after.kept_tokens, after.threshold) == (st.tokens, AGENT_THRESHOLD)
            assert figures.percent(after.pressure) == figures.percent(before[key].pressure)
        assert inspector.threads.count(ThreadQuery(filters=frozenset({"over_hint"}))) == 1  # the filters read the same figure
    finally:
        inspector.close()
    known = open_service(fresh_url, workdir=tmp_path / "known",
                         policies={"models": [{"provider": PROVIDER, "model": MODEL, "context_window": 32_000}]})
    try:  # a window this process is configured with is not replaced by a recorded threshold
        st = known.compaction.status("agent-a", remember=False)
        assert (st.threshold, st.context_window, st.window_source) == (25_600, 32_000, "override")
    finally:
        known.close()


def test_compact_now_on_such_a_thread_plans_and_compacts_against_the_recorded_threshold(fresh_url: str, tmp_path: Path) -> None:
    """The same thread, compacted by hand from the inspector's process: the plan and the compaction
    use the threshold the status shows (12,800, recorded), not the assumed window's 102,400 (a user
    trial: the header said 98.8 % and 'consider compacting now' while Compact now answered
    'nothing to compact: threshold 102400')."""
    from tests.agent_threads import AGENT_THRESHOLD, write_agent_threads

    write_agent_threads(fresh_url, tmp_path / "agent", {"agent-a": 12})
    inspector = open_service(fresh_url, workdir=tmp_path / "inspector", policies=None)
    try:
        before = inspector.compaction.status("agent-a")
        plan = inspector.compaction.plan("agent-a")
        assert plan.threshold == before.threshold == AGENT_THRESHOLD and plan.summarizes
        result = inspector.compaction.compact("agent-a", summarizer="extractive")
        assert result.status == "completed" and result.after_tokens < before.tokens
        after = inspector.compaction.status("agent-a")
        assert (after.threshold, after.window_source) == (AGENT_THRESHOLD, "recorded") and after.tokens == result.after_tokens
    finally:
        inspector.close()
