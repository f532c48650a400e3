"""Shared fixture of the importer tests that go through the real service."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database URL for this test, once per backend: a new SQLite file, or a new
    PostgreSQL database (``new_pg_database`` of tests/conftest.py; skips when unreachable)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return request.getfixturevalue("new_pg_database")()
