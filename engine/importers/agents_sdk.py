"""``agents-sdk``: an OpenAI Agents SDK ``SQLiteSession`` database (one SQLite file, many sessions).

Shape handled (the SDK's ``agents.memory.SQLiteSession``, also its ``AdvancedSQLiteSession`` and
``SQLAlchemySession`` on SQLite, which use the same two tables)::

    agent_sessions (session_id TEXT PRIMARY KEY, created_at, updated_at)
    agent_messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id, message_data TEXT, created_at)

Each ``message_data`` is one Responses API input item as JSON (what ``Runner`` stores: user
messages, possibly without ``type``; assistant ``message``; ``reasoning``; ``function_call`` /
``function_call_output``; ``compaction {encrypted_content}`` written by the SDK's
``OpenAIResponsesCompactionSession``, which replaces the session's items by the compacted output).
The tables may have other names (``SQLiteSession(sessions_table=…, messages_table=…)``): any table
with ``session_id`` and ``message_data`` columns is read.

The file is read by :mod:`engine.store.foreign` (read-only; SQL lives in the store) and the rows
are handed to :func:`parse`; this module never opens the database. :func:`looks_like_database`
recognizes the file from its first bytes (the schema text SQLite keeps on the first pages).

Mapping: one session per ``session_id`` (several sessions in one file → several threads, keyed
``agents-sdk:<session_id>``); items in row-id order (``created_at`` has second precision and is
shared by items written together) go through the Responses item reader (:class:`ItemReader`), so
consecutive assistant-side items make one assistant message with parallel calls. Source keys are
``r<row id>``: stable when the SDK appends, so a re-import adds only new rows. ``created_at`` (UTC)
→ timestamps. A ``compaction`` item → a recorded compaction (summary kept encrypted).

Repairs: a ``message_data`` that is not JSON → a warning naming the row, skipped; empty
``call_id``\\ s (some databases have them) → calls and outputs paired by order (synthetic ids);
placeholder item ids (``__fake_id__``) are dropped.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ._common import SessionBuilder, Source
from .jsonl import json_error_text
from .model import ImportedSession, ImportFormatError
from .openai_responses import ItemReader

FORMAT = "agents-sdk"
#: the SDK has no default location: a ``SQLiteSession`` lives where the program puts it (``:memory:``
#: unless given a path), so discovery finds these databases only in folders the user adds
DEFAULT_LOCATIONS: tuple[str, ...] = ()

SQLITE_MAGIC = b"SQLite format 3\x00"
FAKE_ID = "__fake_id__"
#: how many leading bytes :func:`looks_like_database` searches for the schema text
SNIFF_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class DatabaseFormat:
    """A format kept in another tool's SQLite database: how to recognize its first bytes and which
    tables and columns to read (``pick(schema) -> {table: (columns, order by)}``)."""

    sniff: Callable[[bytes], bool]
    pick: Callable[[Mapping[str, tuple[str, ...]]], Mapping[str, tuple[tuple[str, ...], str | None]]]


def looks_like_database(head: bytes) -> bool:
    """A SQLite file whose schema names a ``message_data`` column beside ``session_id``."""
    return head.startswith(SQLITE_MAGIC) and b"message_data" in head and b"session_id" in head


def _message_tables(schema: Mapping[str, tuple[str, ...]]) -> list[str]:
    return sorted(t for t, cols in schema.items() if "session_id" in cols and "message_data" in cols)


def pick(schema: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[tuple[str, ...], str | None]]:
    """The tables to read: every messages table, and the sessions table(s) beside them."""
    out: dict[str, tuple[tuple[str, ...], str | None]] = {}
    for t in _message_tables(schema):
        out[t] = (("id", "session_id", "message_data", "created_at"), "id")
    for t, cols in schema.items():
        if t not in out and "session_id" in cols and "message_data" not in cols and ("created_at" in cols or "updated_at" in cols):
            out[t] = (("session_id", "created_at", "updated_at"), "created_at")
    return out


DATABASE = DatabaseFormat(sniff=looks_like_database, pick=pick)


def _iso(value: object) -> str | None:
    """SQLite ``CURRENT_TIMESTAMP`` text (UTC, ``YYYY-MM-DD HH:MM:SS``) → ISO 8601 with ``Z``."""
    if not isinstance(value, str) or len(value) < 19:
        return None
    return value[:10] + "T" + value[11:19] + "Z"


def _pair_by_order(items: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """Give calls and outputs with an empty ``call_id`` synthetic ids, pairing them by order; drop
    placeholder item ids."""
    open_calls: list[str] = []
    out: list[tuple[int, Any]] = []
    for rid, item in items:
        if isinstance(item, dict):
            if item.get("id") == FAKE_ID:
                item = {k: v for k, v in item.items() if k != "id"}
            t = item.get("type")
            if t in ("function_call", "custom_tool_call") and not item.get("call_id"):
                cid = f"r{rid}:call"
                item = {**item, "call_id": cid}
                open_calls.append(cid)
            elif t in ("function_call_output", "custom_tool_call_output") and not item.get("call_id") and open_calls:
                item = {**item, "call_id": open_calls.pop(0)}
        out.append((rid, item))
    return out


def parse(source: Source, *, final: bool = True, tables: Mapping[str, list[Mapping[str, Any]]] | None = None) -> list[ImportedSession]:
    """Sessions from the rows :func:`engine.store.foreign.read_tables` read with :func:`pick`.

    Without ``tables`` there is nothing to read: a database is opened by the caller that may speak
    SQL (``engine.importing.import_path`` does), so this raises :class:`ImportFormatError`."""
    if tables is None:
        head = source.read_bytes()[:len(SQLITE_MAGIC)] if source.path is not None and source.path.is_file() else b""
        if head != SQLITE_MAGIC:
            raise ImportFormatError(f"{source.name}: not an Agents SDK session database (not a SQLite file)")
        raise ImportFormatError(f"{source.name}: an Agents SDK SQLite database is read through engine.importing "
                                f"(compaction import), which opens it read-only", code="import_database")
    msg_tables = [t for t, rows in tables.items() if rows and "message_data" in rows[0]]
    started: dict[str, str | None] = {}
    for t, rows in tables.items():
        if t in msg_tables:
            continue
        for r in rows:
            if isinstance(r.get("session_id"), str):
                started[r["session_id"]] = _iso(r.get("created_at"))
    sessions: list[ImportedSession] = []
    several = len(msg_tables) > 1
    for table in msg_tables:
        by_session: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        for r in tables[table]:
            by_session[str(r.get("session_id"))].append(r)
        for sid, rows in by_session.items():
            sessions.append(_session(source, table if several else None, sid, rows, started.get(sid), final=final))
    return sessions


def _session(source: Source, table: str | None, sid: str, rows: list[Mapping[str, Any]], started: str | None, *,
             final: bool = True) -> ImportedSession:
    b = SessionBuilder(FORMAT, source)
    reader = ItemReader(b)
    items: list[tuple[int, Any]] = []
    stamps: dict[int, str | None] = {}
    for r in rows:
        rid = r.get("id")
        rid = rid if isinstance(rid, int) else len(items)
        data = r.get("message_data")
        if isinstance(data, bytes):
            data = data.decode("utf-8", errors="replace")
        try:
            item = json.loads(data) if isinstance(data, str) else None
        except ValueError as exc:
            b.warn(f"session {sid!r}, row {rid}: message_data is not JSON ({json_error_text(exc)}); skipped")
            b.skipped["malformed_row"] += 1
            continue
        if not isinstance(item, dict):
            b.warn(f"session {sid!r}, row {rid}: message_data is not a JSON object; skipped")
            b.skipped["malformed_row"] += 1
            continue
        items.append((rid, item))
        stamps[rid] = _iso(r.get("created_at"))
    for rid, item in _pair_by_order(items):
        reader.item(item, f"r{rid}", ts=stamps.get(rid), line=None)
    reader.close()
    model = next((m.model for m in b.messages if m.model), None)
    return b.build(final=final, source_session_id=f"{table}:{sid}" if table else sid, model=model,
                   extra={"table": table or "agent_messages", "started": started, "rows": len(rows)})
