"""Opening a database the user pointed at: every bad input gives a one-line, password-free
StoreError naming the problem, and writes nothing."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from engine.core.messages import user
from engine.store import (
    DatabaseUnreachable,
    InvalidDatabaseURL,
    NotADatabase,
    SchemaMissing,
    SchemaOutdated,
    SchemaTooNew,
    Store,
    StoreError,
    db as store_db,
    migrate,
    normalize_url,
)
from engine.store.models import Base
from tests import door_ops

from .support import fingerprint

PASSWORD = "s3cret-Pa55"


def _with_password(url: str) -> str:
    """The URL with a password in it (PostgreSQL), so messages can be checked for leaks."""
    u = normalize_url(url)
    if u.get_backend_name() != "postgresql":
        return url
    if u.password is None:
        u = u.set(password=PASSWORD)
    return u.render_as_string(hide_password=False)


def _assert_one_line(err: StoreError, *, secret: str | None = PASSWORD) -> None:
    assert err.message and "\n" not in err.message and "Traceback" not in err.message
    assert str(err) == err.message
    if secret:
        assert secret not in err.message


def _both_ways(url: str) -> list[Callable[[], object]]:
    return [lambda: Store.open(url), lambda: Store.open(url, create=True), lambda: migrate(url)]


@pytest.mark.parametrize(
    "url",
    [
        "notascheme://x",
        f"mysql://root:{PASSWORD}@127.0.0.1/app",
        f"mysql+pymysql://root:{PASSWORD}@127.0.0.1/app",
        f"postgresql+asyncpg://u:{PASSWORD}@127.0.0.1/app",
        f"oracle://u:{PASSWORD}@h/db",
        "",
        "   ",
    ],
)
def test_invalid_url(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for attempt in _both_ways(url):
        with pytest.raises(InvalidDatabaseURL) as err:
            attempt()
        _assert_one_line(err.value)
        assert err.value.code == "invalid_db_url"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("url", ["notascheme://x", f"mysql://root:{PASSWORD}@h/db"])
def test_invalid_url_names_the_scheme(url: str) -> None:
    with pytest.raises(InvalidDatabaseURL, match=r"unsupported database '(notascheme|mysql)' \(use sqlite or postgresql\)"):
        Store.open(url)


def test_unreachable_postgresql() -> None:
    url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/app"
    for attempt in _both_ways(url):
        with pytest.raises(DatabaseUnreachable) as err:
            attempt()
        _assert_one_line(err.value)
        assert err.value.message.startswith("cannot connect to postgresql+psycopg://postgres:***@127.0.0.1:1/app")
        assert err.value.code == "db_unreachable"


@pytest.mark.parametrize(
    "content",
    [os.urandom(8192), b"Dear diary, this is not a database.\n" * 50, b"SQLite format 3\x00" + os.urandom(200)],
    ids=["random-bytes", "text", "bad-header"],
)
def test_a_file_that_is_not_a_database(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "session.db"
    path.write_bytes(content)
    for attempt in _both_ways(str(path)):
        with pytest.raises(NotADatabase, match="is not a SQLite database") as err:
            attempt()
        _assert_one_line(err.value)
        assert str(path) in err.value.message
    assert path.read_bytes() == content
    assert [p.name for p in tmp_path.iterdir()] == ["session.db"]  # no -wal / -journal files either


def test_a_directory(tmp_path: Path) -> None:
    (tmp_path / "inside.txt").write_text("keep")
    for attempt in _both_ways(str(tmp_path)):
        with pytest.raises(NotADatabase, match="is a directory") as err:
            attempt()
        _assert_one_line(err.value)
    assert [p.name for p in tmp_path.iterdir()] == ["inside.txt"]


@pytest.mark.parametrize("relative", ["missing.db", "no/such/dir/missing.db"])
def test_a_missing_sqlite_file_is_not_created(tmp_path: Path, relative: str) -> None:
    path = tmp_path / relative
    for url in (str(path), f"sqlite:///{path}"):
        with pytest.raises(DatabaseUnreachable) as err:
            Store.open(url)
        _assert_one_line(err.value)
        assert f"no database file at {path}" in err.value.message
        assert "compaction migrate --db" in err.value.message
    assert list(tmp_path.iterdir()) == []


def test_create_makes_a_missing_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "new" / "session.db"
    store = Store.open(str(path), create=True)
    try:
        assert store.writable and store.schema.status == "current"
        store.create_conversation("first")
        assert store.thread("first").message_count == 0
    finally:
        store.close()
    assert path.is_file()


# -- schema versions --------------------------------------------------------------------------


def _stamp(url: str, revision: str) -> None:
    engine = sa.create_engine(normalize_url(url))
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    finally:
        engine.dispose()


def test_missing_schema(fresh_db: str) -> None:
    url = _with_password(fresh_db)
    before = fingerprint(fresh_db)
    with pytest.raises(SchemaMissing) as err:
        Store.open(url)
    _assert_one_line(err.value)
    assert "has no compaction schema" in err.value.message
    assert "create it with: compaction migrate --db '" in err.value.message
    assert fingerprint(fresh_db) == before


def test_tables_without_a_version_stamp_are_refused(fresh_db: str) -> None:
    engine = sa.create_engine(normalize_url(fresh_db))
    Base.metadata.create_all(engine)
    engine.dispose()
    before = fingerprint(fresh_db)
    with pytest.raises(SchemaOutdated) as err:
        Store.open(_with_password(fresh_db))
    _assert_one_line(err.value)
    assert "no schema version stamp" in err.value.message
    assert fingerprint(fresh_db) == before
    # migrate refuses too, instead of failing half-way with "table already exists"
    with pytest.raises(SchemaOutdated):
        migrate(fresh_db)
    assert fingerprint(fresh_db) == before


def test_an_older_known_revision_is_outdated(fresh_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    migrate(fresh_db)
    before = fingerprint(fresh_db)
    current = store_db.code_head()
    monkeypatch.setattr(store_db, "code_head", lambda: "9999_next")  # this program now expects a newer head
    with pytest.raises(SchemaOutdated) as err:
        Store.open(_with_password(fresh_db))
    _assert_one_line(err.value)
    assert f"has schema revision {current}, this version needs 9999_next" in err.value.message
    assert "compaction migrate --db" in err.value.message
    assert fingerprint(fresh_db) == before


def test_a_newer_schema_opens_read_only_and_refuses_every_write(fresh_db: str, new_key: Callable[[str], str]) -> None:
    migrate(fresh_db)
    seed = Store.open(fresh_db)
    key = new_key("old")
    seed.create_conversation(key, title="from before")
    msg_id = door_ops.append_message(seed, key, user("hello"))
    run = door_ops.start_run(seed, key)
    req = door_ops.record_model_request(seed, key, provider="p", model="m")
    seed.close()
    _stamp(fresh_db, "ffff_from_the_future")
    before = fingerprint(fresh_db)

    store = Store.open(_with_password(fresh_db))
    try:
        assert store.schema.status == "too_new" and not store.writable
        # reads work
        assert store.thread(key).title == "from before"
        assert [s.id for s in store.messages_page(key)] == [msg_id]
        assert [t.key for t in store.list_threads(text=key)] == [key]
        assert store.busy_reason(key) == "running" and store.compaction_state(key).generation == 0
        assert [r.id for r in store.model_requests(key)] == [req]
        # every write refuses
        writes: list[Callable[[], object]] = [
            lambda: store.create_conversation(new_key("new")),
            lambda: door_ops.append_message(store, key, user("x")),
            lambda: door_ops.queue_request(store, key, "x"),
            lambda: door_ops.start_run(store, key),
            lambda: door_ops.finish_run(store, key, run),
            lambda: door_ops.interrupt_run(store, key, run),
            lambda: door_ops.cancel_run(store, key, run),
            lambda: door_ops.set_route(store, key, provider="q", model="n"),
            lambda: door_ops.record_model_request(store, key, provider="p", model="m"),
            lambda: door_ops.complete_model_request(store, req, outcome="ok"),
            lambda: door_ops.add_event(store, key, "retry", {}),
            lambda: store.locked(key).__enter__(),
        ]
        for write in writes:
            with pytest.raises(SchemaTooNew) as err:
                write()
            _assert_one_line(err.value)
            assert "ffff_from_the_future" in err.value.message and "refusing to write" in err.value.message
    finally:
        store.close()
    for attempt in (lambda: migrate(fresh_db), lambda: Store.open(fresh_db, create=True)):
        with pytest.raises(SchemaTooNew):
            attempt()
    assert fingerprint(fresh_db) == before
