"""Helpers for the importer tests: the fixture directory and a compact view of parsed messages."""

from __future__ import annotations

from pathlib import Path

from engine.importers import ImportedMessage, ImportedSession

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sessions"


def row(m: ImportedMessage) -> tuple:
    """(role, source_key, text, calls as (id, name), tool_call_id, tool_name, is_error, meta_kind, repair)."""
    return (m.role, m.source_key, m.text, tuple((c.id, c.name) for c in m.tool_calls), m.tool_call_id, m.tool_name,
            m.is_error, m.meta_kind, m.repair)


def rows(s: ImportedSession) -> list[tuple]:
    return [row(m) for m in s.messages]


def kinds(m: ImportedMessage) -> list[str]:
    return [p.kind for p in m.parts]
