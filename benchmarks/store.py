"""Benchmark of the session store: bulk intake and keyset page reads on SQLite and PostgreSQL.

Run: ``.venv/bin/python benchmarks/store.py [--pg-url URL] [--rows 100000] [--repeats 50]``.
Inserts ``--rows`` messages into one conversation with ``Locked.bulk_append`` (one transaction,
timed through the commit), then reads 100-row pages at the start, the middle and the end with
``Store.messages_page`` (``after_id`` forward, ``before_id`` backward) and prints the median latency,
right after the import and again after ``ANALYZE`` (PostgreSQL plans on stale statistics until
autovacuum analyzes the table).
SQLite runs on a temp file; PostgreSQL on a fresh temp database (dropped after), server from
``--pg-url`` / ``COMPACTION_TEST_PG_URL``; an unreachable server is reported and skipped.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy as sa  # noqa: E402

from engine.core.messages import Message, ToolCall, assistant, tool_result, user  # noqa: E402
from engine.store import Store, migrate, normalize_url  # noqa: E402

PAGE = 100
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
WORDS = "the order refund ticket customer database latency cache retry summary context window token".split()


def make_messages(n: int, seed: int = 7) -> list[Message]:
    """A realistic mix: user turns, assistant tool calls, tool results (some large), answers."""
    rnd = random.Random(seed)

    def text(k: int) -> str:
        return " ".join(rnd.choice(WORDS) for _ in range(k))

    out: list[Message] = []
    i = 0
    while len(out) < n:
        out.append(user(text(rnd.randint(5, 40))))
        call = ToolCall(id=f"call_{i}", name="query_kb", arguments=f'{{"q": "{text(4)}"}}')
        out.append(assistant("", call))
        out.append(tool_result(call.id, text(rnd.choice((30, 60, 400))), name="query_kb", source="bench"))
        out.append(assistant(text(rnd.randint(10, 80))))
        i += 1
    return out[:n]


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm the pool and caches
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def bench(url: str, messages: list[Message], repeats: int) -> dict[str, dict[str, float]]:
    """Insert timing, then median page latencies right after the import and after ANALYZE."""
    migrate(url)
    store = Store.open(url)
    try:
        key = f"bench-{uuid.uuid4().hex[:8]}"
        store.create_conversation(key)
        t0 = time.perf_counter()
        with store.locked(key) as tx:
            n = tx.bulk_append(messages)
        insert_s = time.perf_counter() - t0
        assert n == len(messages) == store.thread(key).message_count

        first_page = store.messages_page(key, limit=PAGE)
        first, last = first_page[0].id, store.messages_page(key, before_id=2**62, limit=1)[0].id
        mid = first + (last - first) // 2
        checks = {
            "start": lambda: store.messages_page(key, limit=PAGE),
            "middle after_id": lambda: store.messages_page(key, after_id=mid, limit=PAGE),
            "middle before_id": lambda: store.messages_page(key, before_id=mid, limit=PAGE),
            "end": lambda: store.messages_page(key, before_id=last + 1, limit=PAGE),
        }
        for name, read in checks.items():  # every page is full and in ascending order
            ids = [s.id for s in read()]  # type: ignore[attr-defined]
            assert len(ids) == PAGE and ids == sorted(ids), name
        results = {"": {name: median_ms(read, repeats) for name, read in checks.items()}}
        with store.engine.begin() as conn:  # what autovacuum (PostgreSQL) does shortly after an import
            conn.execute(sa.text("ANALYZE"))
        results["analyzed"] = {name: median_ms(read, repeats) for name, read in checks.items()}
        for r in results.values():
            r.update(rows=float(n), insert_s=insert_s, rows_per_s=n / insert_s)
        return results
    finally:
        store.close()


@contextmanager
def temp_pg_database(admin_url: str) -> Iterator[str]:
    admin = sa.create_engine(normalize_url(admin_url), isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    name = f"bench_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        try:
            yield normalize_url(admin_url).set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pg-url", default=os.environ.get("COMPACTION_TEST_PG_URL") or DEFAULT_PG_URL)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args(argv)
    if args.rows < 2 * PAGE:
        ap.error(f"--rows must be at least {2 * PAGE}")

    messages = make_messages(args.rows)
    results: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = bench(str(Path(tmp) / "bench.db"), messages, args.repeats)
    try:
        with temp_pg_database(args.pg_url) as url:
            results["postgresql"] = bench(url, messages, args.repeats)
    except sa.exc.OperationalError as exc:
        where = normalize_url(args.pg_url).render_as_string(hide_password=True)
        print(f"postgresql: skipped, not reachable at {where}: {str(exc.orig).splitlines()[0]}")

    cols = ["start", "middle after_id", "middle before_id", "end"]
    print(f"\n{args.rows} messages, one conversation; page = {PAGE} rows, median of {args.repeats} reads (ms)")
    header = f"{'backend':<21} {'insert s':>9} {'rows/s':>9} " + " ".join(f"{c:>17}" for c in cols)
    print(header)
    print("-" * len(header))
    for backend, runs in results.items():
        for stats, r in runs.items():
            label = f"{backend} ({stats})" if stats else backend
            print(f"{label:<21} {r['insert_s']:>9.2f} {r['rows_per_s']:>9.0f} " + " ".join(f"{r[c]:>17.2f}" for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
