"""``svc.threads.stats`` and ``compaction stats`` (issue 26) on SQLite and PostgreSQL: every aggregate
against a brute-force reference made from the per-thread reads, with and without a filter; the CLI
report and its JSON; migration 0006 up and down on a database holding threads."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from engine.apps.cli import main
from engine.core.messages import assistant, user
from engine.core.views import PRESSURE_BANDS, ThreadInfo, ThreadQuery
from engine.service import Service, open_service
from engine.store import Store, migrate, normalize_url
from engine.store.db import code_head, downgrade
from engine.store.fleet import DROPPED_BUCKETS
from engine.store.fleet_build import build_fleet_store

THREADS = 400


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def stats_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('fleet-stats') / 'fleet.db'}"
    else:
        url = request.getfixturevalue("new_pg_database")()
    build_fleet_store(url, threads=THREADS, messages=4_000, seed=11)
    return url


@pytest.fixture(scope="module")
def svc(stats_url: str) -> Iterator[Service]:
    s = open_service(stats_url)
    yield s
    s.close()


def _band(t: ThreadInfo) -> str:
    if t.kept_tokens is None or not t.threshold:
        return "unknown"
    ppm = t.kept_tokens * 1_000_000 // t.threshold
    return "below_50" if ppm < 500_000 else "50_85" if ppm < 850_000 else "85_100" if ppm < 1_000_000 else "over_100"


def reference(svc: Service, keys: list[str], since: datetime) -> dict:
    """The stats, one thread at a time through the per-thread reads."""
    bands: Counter[str] = Counter()
    per_day: Counter[tuple[str, str, str]] = Counter()
    buckets = [0] * len(DROPPED_BUCKETS)
    worst: list[tuple[int, str, int, int, int]] = []
    calls = prompt = completion = saved = compactions = busy = 0
    for k in keys:
        t = svc.reads.thread(k)
        bands[_band(t)] += 1
        busy += t.busy
        history = svc.reads.history(k)
        sources = svc.reads.source_compactions(k)
        compactions += len(history) + len(sources)
        for h in history:
            if h.created_at >= since:
                per_day[(h.created_at.astimezone(UTC).date().isoformat(), h.kind, "engine")] += 1
            if h.tokens_before is not None and h.tokens_after is not None:
                saved += h.tokens_before - h.tokens_after
        for sc in sources:
            ts = sc.source_timestamp or ""
            if len(ts) > 10 and ts[10] == "T" and ts[:19] >= since.strftime("%Y-%m-%dT%H:%M:%S"):
                per_day[(ts[:10], sc.kind, sc.source)] += 1
        dropped = []
        for e in svc.reads.events(k):
            if e.kind in ("summary", "summary_rejected"):
                usage = e.data.get("usage") or {}
                calls += e.data.get("calls", 1)
                prompt += usage.get("prompt_tokens") or 0
                completion += usage.get("completion_tokens") or 0
            if e.kind == "summary" and isinstance(e.data.get("dropped_specifics"), int):
                n = e.data["dropped_specifics"]
                buckets[next(i for i, (_l, low, high) in enumerate(DROPPED_BUCKETS) if n >= low and (high is None or n <= high))] += 1
                dropped.append(n)
        if any(dropped):
            worst.append((t.id, k, sum(dropped), sum(1 for n in dropped if n > 0), max(dropped)))
    worst.sort(key=lambda w: (-w[2], w[0]))
    return {"threads": len(keys), "busy": busy, "bands": bands, "per_day": per_day, "buckets": buckets, "worst": worst[:10],
            "calls": calls, "prompt": prompt, "completion": completion, "saved": saved, "compactions": compactions}


@pytest.mark.parametrize("query", [None, ThreadQuery(source_format="codex"), ThreadQuery(filters=frozenset({"over_hint"})),
                                   ThreadQuery(text="refund")], ids=["all", "codex", "over_hint", "text"])
def test_stats_match_the_brute_force_reference(svc: Service, query: ThreadQuery | None) -> None:
    now = datetime.now(UTC)
    stats = svc.threads.stats(query, days=30, now=now)
    since = (now - timedelta(days=29)).replace(hour=0, minute=0, second=0, microsecond=0)
    keys = [t.key for t in svc.store.list_threads(limit=10_000)]
    if query is not None:  # the threads the query matches, by the list (checked against its own reference in test_fleet_list)
        keys = [t.key for t in svc.threads.page(query, limit=10_000).threads]
    ref = reference(svc, keys, since)
    assert ref["compactions"] and ref["calls"] and ref["worst"], "the built store must hold compactions to compare"
    assert stats.threads == ref["threads"] and stats.busy == ref["busy"]
    assert {b.band: b.threads for b in stats.bands} == {b: ref["bands"].get(b, 0) for b in PRESSURE_BANDS}
    assert Counter({(d.day, d.kind, d.source): d.count for d in stats.per_day}) == ref["per_day"]
    assert stats.compactions == ref["compactions"]
    assert [b.compactions for b in stats.dropped_buckets] == ref["buckets"]
    assert [(w.thread_id, w.key, w.dropped, w.compactions, w.worst) for w in stats.worst_threads] == ref["worst"]
    assert (stats.summarizer_calls, stats.summarizer_prompt_tokens, stats.summarizer_completion_tokens) == (ref["calls"], ref["prompt"], ref["completion"])
    assert stats.tokens_saved == ref["saved"]
    assert stats.summarizer_cost is not None and stats.summarizer_cost > 0 and stats.currency == "USD"
    json.dumps(stats.to_json())


def test_cli_stats_report_and_json(stats_url: str, svc: Service, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", "--db", stats_url, "--json", "--source", "codex", "--worst", "3"]) == 0
    data = json.loads(capsys.readouterr().out)
    expected = svc.threads.stats(ThreadQuery(source_format="codex"), worst=3).to_json()
    assert data["threads"] == expected["threads"] and data["bands"] == expected["bands"] and len(data["worst_threads"]) == 3
    assert main(["stats", "--db", stats_url, "--over-threshold"]) == 0
    out = capsys.readouterr().out
    n = svc.threads.count(ThreadQuery(filters=frozenset({"over_threshold"})))
    assert out.startswith(f"{n:,} threads") and "Pressure (kept tokens / threshold):" in out and "Summarizer:" in out


def test_cli_stats_on_a_closed_pipe_is_silent(stats_url: str) -> None:
    """The reader of standard output left before the first line (``| head`` that exited): no
    traceback, no message, the pipe exit code."""
    import os
    import subprocess
    import sys

    from engine.apps.cli.output import EXIT_PIPE

    for extra in ([], ["--json"]):
        read, write = os.pipe()
        os.close(read)  # every write to the pipe fails with EPIPE
        try:
            proc = subprocess.run([sys.executable, "-m", "engine.apps.cli", "stats", "--db", stats_url, *extra], stdout=write,
                                  stderr=subprocess.PIPE, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
        finally:
            os.close(write)
        assert proc.stderr == "" and proc.returncode == EXIT_PIPE, (proc.returncode, proc.stderr[-2000:])


# -- migration 0006 on a database holding threads -----------------------------------------------
@pytest.fixture
def old_url(db_url: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if db_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'old.db'}"
    return request.getfixturevalue("new_pg_database")()


def test_migration_0006_up_and_down_with_data(old_url: str) -> None:
    migrate(old_url, "0005")
    engine = sa.create_engine(normalize_url(old_url))
    try:
        with engine.begin() as conn:  # a 0005 store with threads, a compaction of ours and one of a source
            for i, key in enumerate(("old-1", "old-2")):
                conn.execute(sa.text("INSERT INTO conversations (id, thread_key, title, system_prompt, tools, message_count, created_at, updated_at) "
                                     "VALUES (:id, :k, :t, '', '[]', 0, :now, :now)"), {"id": i + 1, "k": key, "t": key.upper(), "now": datetime(2026, 1, 1)})
                conn.execute(sa.text("INSERT INTO compaction_state (conversation_id, generation, compact_count, summary_tokens, updated_at, pins_version) "
                                     "VALUES (:id, :n, :n, 0, :now, 0)"), {"id": i + 1, "n": 2 * i, "now": datetime(2026, 1, 1)})
            conn.execute(sa.text("INSERT INTO source_compactions (conversation_id, source, kind, source_id, created_at) "
                                 "VALUES (1, 'codex', 'summary', 's1', :now)"), {"now": datetime(2026, 1, 1)})
        migrate(old_url)
        svc = open_service(old_url)
        try:
            listed = {t.key: t for t in svc.threads.page(ThreadQuery(sort="compactions")).threads}
            assert [t.key for t in svc.threads.page(ThreadQuery(sort="compactions")).threads] == ["old-2", "old-1"]
            assert listed["old-1"].compact_count == 1 and listed["old-2"].compact_count == 2  # backfilled: ours + the source's
            assert listed["old-1"].kept_tokens is None and listed["old-1"].pressure is None  # never measured: unknown
            svc.runs.append_message("old-1", user("hello again"))
            svc.runs.append_message("old-1", assistant("hi"))
            st = svc.compaction.status("old-1")
            assert svc.threads.page(ThreadQuery(text="old-1")).threads[0].kept_tokens == st.tokens
        finally:
            svc.close()
        assert downgrade(old_url, "0005") == (code_head(), "0005")
        with engine.connect() as conn:
            columns = {c["name"] for c in sa.inspect(conn).get_columns("conversations")}
            assert not columns & {"kept_tokens", "kept_threshold", "kept_window", "pressure_ppm", "compactions"}
            assert conn.execute(sa.text("SELECT count(*) FROM conversations")).scalar_one() == 2
            assert conn.execute(sa.text("SELECT count(*) FROM messages")).scalar_one() == 2
        migrate(old_url)
        store = Store.open(old_url)
        try:
            assert store.schema.status == "current"
        finally:
            store.close()
    finally:
        engine.dispose()


def test_cli_tables_align_cjk_in_terminal_cells(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``compaction threads`` and the worst-threads block of ``compaction stats`` pad their columns
    by terminal cells: with CJK keys and titles (two cells a character) every row's columns start
    where the header's do."""
    from engine.apps.cli.output import display_width

    url = f"sqlite:///{tmp_path / 'cjk.db'}"
    build_fleet_store(url, threads=120, messages=1_200, seed=11)
    svc = open_service(url)
    try:
        worst = [t.key for t in svc.threads.stats(worst=4).worst_threads]
    finally:
        svc.close()
    assert len(worst) == 4
    engine = sa.create_engine(normalize_url(url))
    with engine.begin() as conn:  # CJK keys of different lengths, among the worst threads and first in key order
        for i, key in enumerate(worst[:3]):
            conn.execute(sa.text("UPDATE conversations SET thread_key = :new, title = :title WHERE thread_key = :k"),
                         {"new": "a-检索" + "延迟" * i, "title": "中文会话：检索延迟回退分析" + "！" * i, "k": key})
    engine.dispose()
    assert main(["threads", "--db", url, "--sort", "key", "--limit", "8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("THREAD") and any("检索" in ln for ln in lines[1:])

    def col(line: str, at: int) -> int:  # the terminal column of the ``at``-th character
        return display_width(line[:at])

    # the MSGS column ends where the header's does, on every row (CJK keys or not)
    end = col(lines[0], lines[0].index("MSGS") + 4)
    for ln in lines[1:]:
        k = len(ln.split("  ")[0])
        first_number = k + len(ln[k:]) - len(ln[k:].lstrip())
        assert col(ln, first_number + len(ln[first_number:].split()[0])) == end, ln
    assert main(["stats", "--db", url, "--worst", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    head = out.index("Threads whose summaries dropped the most:") + 1
    block = out[head : head + 5]
    assert block[0].split() == ["THREAD", "DROPPED", "SUMMARIES", "WORST", "TITLE"]
    title_at = col(block[0], block[0].index("TITLE"))
    worst_end = col(block[0], block[0].index("WORST") + 5)
    assert sum("检索" in ln for ln in block) == 3
    for ln in block[1:]:
        title = ln.split("  ")[-1]
        assert col(ln, ln.rindex(title)) == title_at, ln  # the titles start in one column
        numbers_end = ln.rindex(title) - 2
        assert col(ln, numbers_end) == worst_end, ln  # the numbers are right-aligned under their headers
