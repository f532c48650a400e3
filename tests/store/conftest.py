"""Store fixtures: an open Store per backend, unique conversations, fresh databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.store import Store

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """An open Store on the session database of each backend."""
    s = Store.open(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))
    yield s
    s.close()


@pytest.fixture
def new_key() -> Callable[[str], str]:
    """Thread keys unique to this test (the session database is shared)."""
    return lambda prefix="t": f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def conv(store: Store, new_key: Callable[[str], str]) -> str:
    """The key of a new, empty conversation."""
    key = new_key("conv")
    store.create_conversation(key, title="a conversation")
    return key


@pytest.fixture(params=BACKENDS)
def fresh_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database with nothing in it: an empty SQLite file, or a new empty PostgreSQL database."""
    if request.param == "sqlite":
        path = tmp_path / "fresh.db"
        path.touch()
        return f"sqlite:///{path}"
    return request.getfixturevalue("new_pg_database")()

