"""Shared fixtures: session databases on both backends.

``sqlite_url`` and ``pg_url`` are migrated databases created once per test session (keep tests
independent with unique thread keys); ``db_url`` runs a test on each. PostgreSQL comes from
``COMPACTION_TEST_PG_URL``; when it is unreachable the PostgreSQL tests skip, or fail when
``COMPACTION_REQUIRE_PG=1`` (CI).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL

from engine.store import migrate, normalize_url

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _admin_url() -> URL:
    return normalize_url(os.environ.get("COMPACTION_TEST_PG_URL") or DEFAULT_PG_URL)


def _admin_engine() -> sa.Engine:
    return sa.create_engine(_admin_url(), isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})


@pytest.fixture(scope="session")
def pg_server() -> Iterator[sa.Engine]:
    """An autocommit engine on the PostgreSQL server's admin database; skips (or fails) if unreachable."""
    engine = _admin_engine()
    error = None
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.SQLAlchemyError as exc:
        engine.dispose()
        error = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
    if error is not None:  # outside the except block: the report shows only this line
        reason = f"PostgreSQL not reachable at {_admin_url().render_as_string(hide_password=True)}: {error}"
        if os.environ.get("COMPACTION_REQUIRE_PG") == "1":
            pytest.fail(f"{reason} (COMPACTION_REQUIRE_PG=1)", pytrace=False)
        pytest.skip(reason)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def new_pg_database(pg_server: sa.Engine) -> Iterator[Callable[[], str]]:
    """Factory: create an empty database ``ci_<random>`` and return its URL; all are dropped at the end."""
    created: list[str] = []

    def make() -> str:
        name = f"ci_{uuid.uuid4().hex[:12]}"
        with pg_server.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        created.append(name)
        return _admin_url().set(database=name).render_as_string(hide_password=False)

    yield make
    with pg_server.connect() as conn:
        for name in created:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_url(new_pg_database: Callable[[], str]) -> str:
    """URL of a fresh, migrated PostgreSQL database for this test session."""
    url = new_pg_database()
    migrate(url)
    return url


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """URL of a fresh, migrated SQLite file for this test session."""
    path: Path = tmp_path_factory.mktemp("sqlite") / "store.db"
    url = f"sqlite:///{path}"
    migrate(url)
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """A migrated database URL, once per backend."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


@pytest.fixture(autouse=True)
def _own_user_settings(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test gets an empty settings directory (issue #28: never the person's own
    ~/.config/compaction) and no API key kept from another test's session."""
    from engine.core import config

    monkeypatch.setenv(config.ENV_CONFIG_DIR, str(tmp_path_factory.mktemp("user-config")))
    config._SESSION_KEYS.clear()
    yield
    config._SESSION_KEYS.clear()


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A settings directory of this test's own (not yet created) and none of the settings'
    environment variables set: what the file and the keyring say is what the test sees."""
    from engine.core import config

    d = tmp_path / "config"
    monkeypatch.setenv(config.ENV_CONFIG_DIR, str(d))
    for var in (config.ENV_BASE_URL, config.ENV_MODEL, config.ENV_API_KEY, config.ENV_TIMEOUT):
        monkeypatch.delenv(var, raising=False)
    return d


@pytest.fixture
def memory_keyring() -> Iterator[object]:
    """A real in-memory ``keyring`` backend (tests/keyring_backends.py) for this test; the previous
    backend is put back after it."""
    import keyring

    from tests.keyring_backends import MemoryKeyring

    before = keyring.get_keyring()
    ring = MemoryKeyring()
    keyring.set_keyring(ring)
    try:
        yield ring
    finally:
        keyring.set_keyring(before)
