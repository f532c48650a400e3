"""Imported threads: where a thread came from, its source's usage records and recorded compactions.

:class:`SourceWrites` is part of the write door (:class:`engine.store.Locked` inherits it): every
method runs inside the locked transaction. Messages themselves are written with the door's
``bulk_append`` / ``append_messages`` (the invariants are checked there); what is here has no
conversation invariant beyond idempotency, which the unique keys enforce:
``UNIQUE(conversation_id, source_key)`` on messages and model requests,
``UNIQUE(conversation_id, source_id)`` on ``source_compactions``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping, Sequence

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from ..core.errors import EngineError
from .models import Conversation, MessageRow, ModelRequestRow, SourceCompactionRow, utcnow
from .rules import check_json, clean_text

__all__ = ["SourceWrites"]


class SourceWrites:
    """The import half of the write door (mixed into :class:`engine.store.Locked`)."""

    session: Session
    conv: Conversation

    def set_source(
        self,
        *,
        format: str,
        file: str | None = None,
        session_id: str | None = None,
        cwd: str | None = None,
        context_window: int | None = None,
        parent_session_id: str | None = None,
        meta: Mapping[str, Any] | None = None,
        title: str | None = None,
    ) -> None:
        """Record where the thread came from (an unset argument keeps what is stored). Text is
        checked by the data rules (docs/schema.md): ``invalid_thread`` for a lone surrogate or a
        value longer than its column."""
        rule = "invalid_thread"
        format = clean_text(format, "source format", limit=32, code=rule)
        file, cwd = clean_text(file, "source file", code=rule), clean_text(cwd, "source directory", code=rule)
        session_id = clean_text(session_id, "source session id", limit=200, code=rule)
        parent_session_id = clean_text(parent_session_id, "parent session id", limit=200, code=rule)
        title = clean_text(title, "thread title", limit=500, code=rule)
        check_json(meta, "source meta", code=rule)
        c = self.conv
        c.source_format = format
        if file is not None:
            c.source_file = file
        if session_id is not None:
            c.source_session_id = session_id
        if cwd is not None:
            c.source_cwd = cwd
        if context_window is not None:
            c.reported_context_window = context_window
        if parent_session_id is not None:
            c.parent_source_session_id = parent_session_id
        if meta is not None:
            merged = dict(c.source_meta or {})
            merged.update(meta)
            c.source_meta = merged
        if title and not c.title:
            c.title = title[:500]
        c.updated_at = utcnow()

    def set_follow_position(self, offset: int, line: int) -> None:
        """Where the next read of a followed source file starts (byte offset, line number)."""
        self.conv.follow_offset = offset
        self.conv.follow_line = line

    def message_source_keys(self) -> dict[str, int]:
        """``source_key`` → message id of every imported message of this thread."""
        rows = self.session.execute(
            select(MessageRow.source_key, MessageRow.id).where(
                MessageRow.conversation_id == self.conv.id, MessageRow.source_key.is_not(None)
            )
        )
        return {k: i for k, i in rows if k is not None}  # the query keeps only rows with a key

    def request_source_keys(self) -> set[str]:
        return set(
            self.session.scalars(
                select(ModelRequestRow.source_key).where(
                    ModelRequestRow.conversation_id == self.conv.id, ModelRequestRow.source_key.is_not(None)
                )
            )
        )

    def source_compaction_ids(self) -> set[str]:
        return set(self.session.scalars(select(SourceCompactionRow.source_id).where(SourceCompactionRow.conversation_id == self.conv.id)))

    def record_imported_requests(self, requests: Sequence[Mapping[str, Any]]) -> int:
        """Insert a source's usage records as model requests (``origin='imported'``, outcome ``ok``).

        Each mapping holds ``provider``, ``model``, ``source_key`` and optionally
        ``reported_prompt_tokens``, ``reported_completion_tokens``, ``reported_cache_read_tokens``,
        ``reported_cache_creation_tokens``, ``reported_reasoning_tokens``, ``response_id``,
        ``context_window``, ``message_id``, ``created_at``. The last one's route becomes the thread's."""
        if not requests:
            return 0
        rows = []
        for r in requests:
            if not r.get("source_key") or not r.get("provider") or not r.get("model"):
                raise EngineError("an imported model request needs provider, model and source_key", code="invalid_request")
            rows.append(
                {
                    "conversation_id": self.conv.id,
                    "run_id": None,
                    "step": 0,
                    "provider": r["provider"],
                    "model": r["model"],
                    "estimated_tokens": None,
                    "threshold": None,
                    "reported_prompt_tokens": r.get("reported_prompt_tokens"),
                    "reported_completion_tokens": r.get("reported_completion_tokens"),
                    "reported_cache_read_tokens": r.get("reported_cache_read_tokens"),
                    "reported_cache_creation_tokens": r.get("reported_cache_creation_tokens"),
                    "reported_reasoning_tokens": r.get("reported_reasoning_tokens"),
                    "response_id": r.get("response_id"),
                    "context_window": r.get("context_window"),
                    "origin": "imported",
                    "message_id": r.get("message_id"),
                    "source_key": r["source_key"],
                    "outcome": "ok",
                    "error_code": None,
                    "error_message": None,
                    "created_at": r.get("created_at") or utcnow(),
                }
            )
        self.session.execute(insert(ModelRequestRow.__table__), rows)
        self.conv.provider, self.conv.model = rows[-1]["provider"], rows[-1]["model"]
        return len(rows)

    def record_source_compaction(
        self,
        *,
        source: str,
        source_id: str,
        kind: str = "summary",
        trigger: str | None = None,
        tokens_before: int | None = None,
        summary: str | None = None,
        after_message_id: int | None = None,
        replaced_first_id: int | None = None,
        replaced_last_id: int | None = None,
        source_timestamp: str | None = None,
        kept: Sequence[Mapping[str, Any]] = (),
        forgotten: Sequence[str] = (),
        details: Mapping[str, Any] | None = None,
        created_at: datetime | None = None,
    ) -> int:
        """Record one compaction the source made (``kind`` ``summary`` or ``prune``)."""
        if kind not in ("summary", "prune"):
            raise EngineError(f"unknown source compaction kind {kind!r} (expected summary or prune)", code="invalid_compaction")
        # the data rules of the door (docs/schema.md): NUL escaped, lone surrogates and over-long keys refused
        summary = clean_text(summary, "source compaction summary", code="invalid_compaction")
        source_id = clean_text(source_id, "source compaction id", code="invalid_compaction", limit=300)
        source_timestamp = clean_text(source_timestamp, "source timestamp", code="invalid_compaction", limit=64)
        for field, value in (("kept", list(kept)), ("forgotten", list(forgotten)), ("details", details)):
            check_json(value, f"source compaction {field}", code="invalid_compaction")
        row = SourceCompactionRow(
            conversation_id=self.conv.id,
            source=source,
            kind=kind,
            trigger=trigger,
            tokens_before=tokens_before,
            summary=summary,
            after_message_id=after_message_id,
            replaced_first_id=replaced_first_id,
            replaced_last_id=replaced_last_id,
            source_id=source_id,
            source_timestamp=source_timestamp,
            kept=[dict(k) for k in kept] or None,
            forgotten=list(forgotten) or None,
            details=dict(details or {}) or None,
            created_at=created_at or utcnow(),
        )
        self.session.add(row)
        self.session.flush()
        self.conv.compactions += 1  # ours and the source's: the thread list's compactions sort (migration 0006)
        self.conv.updated_at = utcnow()
        return row.id
