"""What opening a store and reading a timeline page cost in statements (each one a round trip on
PostgreSQL), on both backends: issue #16's first paint is mostly such trips. Counts, not timings."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from engine.core.errors import ThreadNotFound
from engine.core.messages import assistant, user
from engine.store import Store, db as store_db
from tests import door_ops


@pytest.fixture
def statements() -> Iterator[list[str]]:
    """Every statement any engine sends while the test runs (the store makes its own engine), but
    SQLite's ``BEGIN`` (our begin hook's, in-process: PostgreSQL's starts with the first statement)."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if not statement.startswith("BEGIN"):
            seen.append(" ".join(statement.split()))

    sa.event.listen(sa.Engine, "before_cursor_execute", record)
    yield seen
    sa.event.remove(sa.Engine, "before_cursor_execute", record)


def test_opening_a_current_database_checks_it_in_three_statements(db_url: str, statements: list[str]) -> None:
    """Reachable (SQLite: and a database file), the stamp table, the stamp, on one connection: no
    listing of the tables (only a database without a stamp needs that)."""
    Store.open(db_url).close()
    statements.clear()
    store = Store.open(db_url)
    try:
        assert store.schema.status == "current"
        assert len(statements) == (4 if store.is_sqlite else 3), statements
        assert statements[0] == "SELECT 1" and statements[-1].startswith("SELECT alembic_version.version_num")
    finally:
        store.close()


def test_the_migrations_are_read_once_per_process(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    Store.open(db_url).close()

    def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("the migration scripts were read again")

    from alembic.script import ScriptDirectory  # imported by engine.store.db where it is used

    monkeypatch.setattr(ScriptDirectory, "from_config", refuse)
    store = Store.open(db_url)
    try:
        assert store.schema.status == "current" and store.schema.head == store_db.code_head()
    finally:
        store.close()


def test_a_page_is_one_statement_and_only_an_empty_one_asks_for_the_thread(store: Store, new_key: Callable[[str], str], statements: list[str]) -> None:
    key = new_key("page")
    store.create_conversation(key, title="pages")
    door_ops.append_messages(store, key, [user("one"), assistant("two"), user("three")])
    statements.clear()
    page = store.messages_page(key, limit=2)
    assert [s.message.content for s in page] == ["one", "two"] and len(statements) == 1
    statements.clear()
    newest = store.messages_page(key, before_id=2**62, limit=2)
    assert [s.message.content for s in newest] == ["two", "three"] and len(statements) == 1
    assert all(s.conversation_id == page[0].conversation_id and s.created_at.tzinfo is not None for s in newest)
    statements.clear()
    assert store.messages_page(key, after_id=newest[-1].id, limit=5) == [] and len(statements) == 2  # then: does the thread exist?
    with pytest.raises(ThreadNotFound):
        store.messages_page(new_key("missing"), limit=5)


def test_attaching_reads_without_the_migration_code(db_url: str) -> None:
    """``Store.attach`` (a process that only reads a database another one opened, the stream
    worker) neither checks the schema nor imports Alembic (about 11 MB of a worker's memory)."""
    import subprocess
    import sys

    code = ("import sys; from engine.store import Store; s = Store.attach(sys.argv[1]); "
            "print(s.read_only, s.list_threads(limit=1) is not None, 'alembic' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code, db_url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "False"]
