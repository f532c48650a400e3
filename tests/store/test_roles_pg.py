"""Roles on a shared PostgreSQL store (issue 23, docs/roles.md) on a real server.

The ``viewer`` and ``operator`` roles are created with the SQL blocks of docs/roles.md (read from
the file, so the documentation is what is tested), by the superuser connection; the test then
connects as each role (the server trusts the host) and drops them after. The viewer opens the
store read-only and every write says so in words (never a raw permission error); the operator can
do what its work needs (manual compaction, pin, revert, audit) and the database refuses what it
must not (DELETE, DDL).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from engine.core.errors import EngineError
from engine.core.messages import assistant, user
from engine.service import Service, open_service
from engine.store import migrate

pytestmark = pytest.mark.postgres

ROLES_DOC = Path(__file__).resolve().parents[2] / "docs" / "roles.md"


def role_sql(role: str) -> str:
    """The ```sql block of docs/roles.md that creates ``role`` (``viewer`` / ``operator``)."""
    blocks = re.findall(r"```sql\n(.*?)```", ROLES_DOC.read_text(encoding="utf-8"), flags=re.S)
    (block,) = [b for b in blocks if re.search(rf"^CREATE ROLE {role}\b", b, flags=re.M)]
    return block


def _statements(sql: str) -> list[str]:
    lines = [line.split("--", 1)[0] for line in sql.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


RoleFactory = Callable[[str], str]
#: a small window, so the seeded thread is long enough to compact
POLICY = {"context_window": 8000, "default": {"summary_max_tokens": 400}}


@pytest.fixture
def role_db(new_pg_database, pg_server) -> Iterator[tuple[str, RoleFactory]]:
    """A fresh migrated database and a factory creating a documented role (uniquely named: roles
    are server-wide) in it; returns the URL to log in as that role. Dropped after the test."""
    admin_url = new_pg_database()
    migrate(admin_url)
    made: list[str] = []

    def make(role: str) -> str:
        name = f"{role}_{uuid.uuid4().hex[:8]}"
        engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                for stmt in _statements(role_sql(role)):
                    conn.exec_driver_sql(re.sub(rf"\b{role}\b", name, stmt))
        finally:
            engine.dispose()
        made.append(name)
        return sa.make_url(admin_url).set(username=name).render_as_string(hide_password=False)

    yield admin_url, make
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        for name in made:
            conn.exec_driver_sql(f'DROP OWNED BY "{name}"')
    engine.dispose()
    with pg_server.connect() as conn:
        for name in made:
            conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = :n"), {"n": name})
            conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{name}"')


def seeded(admin_url: str, tmp_path: Path, key: str = "shared") -> None:
    """A long idle thread written by the schema owner (an agent)."""
    svc = open_service(admin_url, workdir=tmp_path / "wd", policies=POLICY)
    try:
        svc.runs.create_thread(key, title="shared thread", system_prompt="You are a careful support agent.")
        for i in range(20):
            svc.runs.append_message(key, user(f"Question {i}: what does section {i} say?"))
            svc.runs.append_message(key, assistant(("The quarterly report lists revenue by region and churn by cohort. " * 12) + f"Answer {i}."))
        svc.runs.append_message(key, user("Last question: who owns doc-42?"))
    finally:
        svc.close()


def as_role(url: str, tmp_path: Path) -> Service:
    return open_service(url, workdir=tmp_path / "wd", policies=POLICY)


def test_viewer_opens_read_only_and_every_write_says_so_in_words(role_db, tmp_path):
    admin_url, make = role_db
    seeded(admin_url, tmp_path)
    svc = as_role(make("viewer"), tmp_path)
    try:
        access = svc.steering.access()
        assert access["writable"] is False and access["reason"] == "role"
        assert access["words"] == "read-only: your database role cannot write"
        assert access["operator"].startswith("viewer_")
        # reading works: threads, pages, status, audit
        assert [t.key for t in svc.reads.list_threads()] == ["shared"]
        assert svc.compaction.status("shared").tokens > 0
        assert svc.steering.audit() == []
        for write in (lambda: svc.compaction.compact("shared"), lambda: svc.compaction.revert("shared"), lambda: svc.steering.pin("shared", 1)):
            with pytest.raises(EngineError) as caught:
                write()
            assert caught.value.code == "read_only"
            assert "read-only: your database role cannot write" in caught.value.message
            assert "permission denied" not in caught.value.message
    finally:
        svc.close()


def test_operator_can_compact_pin_revert_and_read_the_audit_but_not_delete(role_db, tmp_path):
    admin_url, make = role_db
    seeded(admin_url, tmp_path)
    url = make("operator")
    svc = as_role(url, tmp_path)
    try:
        assert svc.steering.access()["writable"] is True
        role = svc.steering.access()["operator"]
        assert svc.compaction.compact("shared", reason="support ticket 7").status == "completed"
        first = svc.reads.messages_page("shared", limit=1)[0].message.id
        svc.steering.pin("shared", first, reason="keep the opening question")
        svc.steering.unpin("shared", first)
        assert svc.compaction.revert("shared", reason="summary too short").action == "revert"
        assert svc.compaction.revert("shared").action == "redo"
        svc.steering.set_thread_policy("shared", {"threshold_ratio": 0.7})
        rows = svc.steering.audit(thread="shared")
        assert [a.action for a in rows] == ["compact", "pin", "unpin", "revert", "redo", "policy"]
        assert {a.operator for a in rows} == {role}
    finally:
        svc.close()
    engine = sa.create_engine(url)
    try:
        for stmt in ("DELETE FROM messages", "DELETE FROM audit_log", "DELETE FROM compaction_history", "DROP TABLE audit_log", "TRUNCATE compaction_events"):
            with engine.connect() as conn, pytest.raises(sa.exc.ProgrammingError) as caught:
                conn.exec_driver_sql(stmt)
            assert "InsufficientPrivilege" in type(caught.value.orig).__name__ or "must be owner" in str(caught.value.orig), stmt
    finally:
        engine.dispose()
