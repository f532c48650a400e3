"""Benchmark of the thread list and the fleet aggregates at scale (issue 26), SQLite and PostgreSQL.

Run: ``.venv/bin/python benchmarks/fleet.py [--quick] [--pg URL] [--repeats 5]``.
Builds (once; cached) a store of 100,000 threads / 5,000,000 messages with
:func:`engine.store.fleet_build.build_fleet_store` (``--quick``: 10,000 / 200,000): SQLite under
``/tmp/fleet-bench/``, PostgreSQL as database ``fleet_bench_<threads>`` on the server of ``--pg``
(default ``COMPACTION_TEST_PG_URL``). Then, through ``svc.threads`` on a freshly opened service,
measures (median of ``--repeats``, ms): the first page (200 threads with the total), a search by key
(``support-01400``) and by title, the last page (reached by keyset from the end: the other
direction's first page, and the cursor walk is counted separately), each filter, and ``stats``.
Targets: page / search / end < 300 ms, stats < 2 s on PostgreSQL.

``rows(quick, pg_url)`` returns the measured rows; ``section(quick, pg_url)`` the markdown section
``benchmarks/run_all.py`` can register in its ``EXTRA``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy as sa

from engine.core.views import THREAD_FILTERS, ThreadQuery
from engine.service import open_service
from engine.store import normalize_url
from engine.store.fleet_build import build_fleet_store, fleet_store_spec

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
CACHE = Path("/tmp/fleet-bench")
FULL, QUICK = (100_000, 5_000_000), (10_000, 200_000)
PAGE = 200


@dataclass(frozen=True)
class Row:
    backend: str
    threads: int
    what: str
    ms: float
    detail: str = ""

    @property
    def target_ms(self) -> float | None:
        if self.what.startswith("open"):
            return None  # opening the database (schema check, policies) is not a thread-list figure
        return 2000.0 if self.what.startswith("stats") else 300.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sqlite_store(threads: int, messages: int) -> str:
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"fleet-{threads}-{messages}.db"
    url = f"sqlite:///{path}"
    if path.exists() and fleet_store_spec(url) is not None:
        return url
    for leftover in CACHE.glob(f"{path.name}*"):
        leftover.unlink()
    log(f"building {path} ({threads:,} threads, {messages:,} messages)")
    t0 = time.perf_counter()
    build_fleet_store(url, threads=threads, messages=messages, progress=lambda m: log(f"  {m}"))
    log(f"  built in {time.perf_counter() - t0:.0f} s")
    return url


def pg_store(server_url: str, threads: int, messages: int) -> str | None:
    """The cached PostgreSQL fleet database on ``server_url``'s server (built when missing); None when unreachable."""
    name = f"fleet_bench_{threads}_{messages}"
    admin = sa.create_engine(normalize_url(server_url), isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    url = normalize_url(server_url).set(database=name).render_as_string(hide_password=False)
    try:
        with admin.connect() as conn:
            exists = conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).scalar()
            if exists and fleet_store_spec(url) is not None:
                return url
            if exists:
                conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except sa.exc.OperationalError as exc:
        log(f"PostgreSQL not reachable ({str(exc.orig).splitlines()[0]}): skipped")
        return None
    finally:
        admin.dispose()
    log(f"building PostgreSQL {name} ({threads:,} threads, {messages:,} messages)")
    t0 = time.perf_counter()
    build_fleet_store(url, threads=threads, messages=messages, progress=lambda m: log(f"  {m}"))
    log(f"  built in {time.perf_counter() - t0:.0f} s")
    return url


def median_ms(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), out


def measure(url: str, backend: str, threads: int, repeats: int) -> list[Row]:
    rows: list[Row] = []
    t0 = time.perf_counter()
    svc = open_service(url)
    rows.append(Row(backend, threads, "open (open_service)", (time.perf_counter() - t0) * 1000, "schema check, policies; no thread read"))
    try:
        t0 = time.perf_counter()
        first = svc.threads.page(ThreadQuery(), limit=PAGE)  # the inspector's first page, right after the database opens
        rows.append(Row(backend, threads, "first page, cold (right after open)", (time.perf_counter() - t0) * 1000,
                        f"{len(first.threads)} of {first.total:,}"))
        T = svc.threads

        def add(what: str, query: ThreadQuery, after: str | None = None) -> None:
            ms, page = median_ms(lambda: T.page(query, after=after, limit=PAGE), repeats)
            rows.append(Row(backend, threads, what, ms, f"{len(page.threads)} of {page.total:,}"))  # type: ignore[attr-defined]

        add("first page", ThreadQuery())
        add("search by key", ThreadQuery(text="support-01400"))
        add("search by title", ThreadQuery(text="invoice missing"))
        add("search CJK", ThreadQuery(text="退款"))
        add("last page (ascending from the end)", ThreadQuery(descending=False))
        for sort in ("pressure", "compactions", "messages", "title", "key"):
            add(f"first page by {sort}", ThreadQuery(sort=sort))
        # the end by keyset: walk every page of a filtered list (the cursor path), time the last hop
        q = ThreadQuery(filters=frozenset({"over_threshold"}))
        page, hops, t0 = T.page(q, limit=PAGE), 1, time.perf_counter()
        last_ms = 0.0
        while page.after is not None:
            t1 = time.perf_counter()
            page = T.page(q, after=page.after, limit=PAGE)
            last_ms, hops = (time.perf_counter() - t1) * 1000, hops + 1
        rows.append(Row(backend, threads, "keyset hop at the end", last_ms, f"page {hops} of an over-threshold list, walked in {time.perf_counter() - t0:.1f} s"))
        for f in THREAD_FILTERS:
            add(f"filter {f}", ThreadQuery(filters=frozenset({f})))
        add("filter imported from claude-code", ThreadQuery(source_format="claude-code"))
        ms, st = median_ms(lambda: T.stats(), max(1, min(repeats, 3)))
        rows.append(Row(backend, threads, "stats", ms, f"{st.threads:,} threads, {st.compactions:,} compactions"))  # type: ignore[attr-defined]
        ms, st = median_ms(lambda: T.stats(ThreadQuery(source_format="codex")), max(1, min(repeats, 3)))
        rows.append(Row(backend, threads, "stats (imported from codex)", ms, f"{st.threads:,} threads"))  # type: ignore[attr-defined]
    finally:
        svc.close()
    return rows


def rows(quick: bool, pg_url: str | None = None, repeats: int = 5) -> list[Row]:
    threads, messages = QUICK if quick else FULL
    out = measure(sqlite_store(threads, messages), "SQLite", threads, repeats)
    pg = pg_store(pg_url or os.environ.get("COMPACTION_TEST_PG_URL") or DEFAULT_PG_URL, threads, messages)
    if pg is not None:
        out += measure(pg, "PostgreSQL", threads, repeats)
    return out


def table(result: list[Row]) -> str:
    lines = ["| backend | threads | query | ms | target | result |", "|---|---:|---|---:|---:|---|"]
    for r in result:
        target = "–" if r.target_ms is None else f"{'✓' if r.ms < r.target_ms else '✗'} < {r.target_ms:.0f}"
        lines.append(f"| {r.backend} | {r.threads:,} | {r.what} | {r.ms:.1f} | {target} | {r.detail} |")
    return "\n".join(lines)


def section(quick: bool, pg_url: str) -> str:
    """The markdown section for docs/benchmarks.md (``run_all.EXTRA``)."""
    threads, messages = QUICK if quick else FULL
    return (f"A store of {threads:,} threads / {messages:,} messages built by `engine.store.fleet_build` (cached under "
            f"{CACHE}/ and as PostgreSQL database `fleet_bench_*`); `svc.threads` on a freshly opened service, 200-thread "
            f"pages with their total, median ms.\n\n" + table(rows(quick, pg_url)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10,000 threads / 200,000 messages")
    ap.add_argument("--pg", default=os.environ.get("COMPACTION_TEST_PG_URL") or DEFAULT_PG_URL, help="PostgreSQL server URL")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    print(table(rows(args.quick, args.pg, args.repeats)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
