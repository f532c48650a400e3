"""SQLAlchemy 2 typed models: the session store schema (documented in docs/schema.md).

Every schema change goes through an Alembic migration in ``engine/store/migrations``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

#: BIGINT on PostgreSQL, INTEGER (the rowid alias, monotonic) on SQLite
BigId = BigInteger().with_variant(Integer(), "sqlite")
#: optional JSON: Python None is stored as SQL NULL (plain JSON would store the JSON text 'null')
NullableJSON = JSON(none_as_null=True)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}
    #: every model here declares its table (``__tablename__``): its ``__table__`` is a Table (SQLAlchemy
    #: types it as any FromClause), what insert() and update() take
    __table__: ClassVar[Table]


class Conversation(Base):
    __tablename__ = "conversations"
    __table_args__ = (  # the thread list's sorts (keyset: the sort value, then the id; migration 0006)
        Index("ix_conversations_updated_at_id", "updated_at", "id"),
        Index("ix_conversations_pressure_id", "pressure_ppm", "id"),
        Index("ix_conversations_compactions_id", "compactions", "id"),
        Index("ix_conversations_message_count_id", "message_count", "id"),
        Index("ix_conversations_title_id", "title", "id"),
        Index("ix_conversations_source_format_id", "source_format", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    thread_key: Mapped[str] = mapped_column(String(200), unique=True, nullable=False)
    title: Mapped[str] = mapped_column(String(500), nullable=False, default="")
    agent: Mapped[str | None] = mapped_column(String(200))
    provider: Mapped[str | None] = mapped_column(String(100))
    model: Mapped[str | None] = mapped_column(String(200))
    system_prompt: Mapped[str] = mapped_column(Text, nullable=False, default="")
    tools: Mapped[list[Any]] = mapped_column(JSON, nullable=False, default=list)
    message_count: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    last_message_id: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    # where an imported thread came from (all NULL for threads our harness or a platform wrote)
    source_format: Mapped[str | None] = mapped_column(String(32))
    source_file: Mapped[str | None] = mapped_column(Text)
    source_session_id: Mapped[str | None] = mapped_column(String(200))
    source_cwd: Mapped[str | None] = mapped_column(Text)
    reported_context_window: Mapped[int | None] = mapped_column(Integer)
    parent_source_session_id: Mapped[str | None] = mapped_column(String(200))
    source_meta: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON)
    #: ``--follow``: the byte offset and line number the next read of the source file starts at
    follow_offset: Mapped[int | None] = mapped_column(BigInteger)
    follow_line: Mapped[int | None] = mapped_column(BigInteger)
    #: the thread list's pressure (migration 0006): the kept tokens (``PressureStatus.tokens``), the
    #: threshold and context window of the thread's last measurement (written back by every status;
    #: the door adds each appended message's count); NULL: never measured. ``pressure_ppm`` is
    #: kept × 1,000,000 // threshold (−1 when unknown or no threshold), the sort and filter column
    kept_tokens: Mapped[int | None] = mapped_column(Integer)
    kept_threshold: Mapped[int | None] = mapped_column(Integer)
    kept_window: Mapped[int | None] = mapped_column(Integer)
    pressure_ppm: Mapped[int] = mapped_column(BigInteger, nullable=False, default=-1, server_default=text("-1"))
    #: compactions of the thread, ours (``compaction_state.compact_count``) and its source's
    #: (``source_compactions`` rows): ``ThreadInfo.compact_count``, kept by the door for the sort
    compactions: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0, server_default=text("0"))


#: the thread search's text (key, title, source format, model, one per line), indexed for substring
#: search with pg_trgm on PostgreSQL (migration 0006 creates it with ``gin_trgm_ops``;
#: engine.store.fleet.search_text is this expression). Declared as PostgreSQL reflects it, so
#: autogenerate compares it; never created on SQLite.
Index(
    "ix_conversations_search_trgm",
    text("((((((thread_key::text || chr(10)) || title::text) || chr(10)) || COALESCE(source_format, ''::character varying)::text)"
         " || chr(10)) || COALESCE(model, ''::character varying)::text)"),
    _table=Conversation.__table__,
    postgresql_using="gin",
).ddl_if(callable_=lambda *_a, **_k: False)  # created by migration 0006 only (it needs pg_trgm and gin_trgm_ops)


class MessageRow(Base):
    __tablename__ = "messages"
    __table_args__ = (
        Index("ix_messages_conversation_id_id", "conversation_id", "id"),
        CheckConstraint("role IN ('system','developer','user','assistant','tool')", name="ck_messages_role"),
        UniqueConstraint("conversation_id", "source_key", name="uq_messages_conversation_source_key"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"), nullable=False)
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    content: Mapped[str] = mapped_column(Text, nullable=False, default="")
    tool_calls: Mapped[list[Any] | None] = mapped_column(NullableJSON)
    tool_call_id: Mapped[str | None] = mapped_column(String(200))
    name: Mapped[str | None] = mapped_column(String(200))
    meta: Mapped[dict[str, Any] | None] = mapped_column("metadata", NullableJSON)
    run_id: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    #: reasoning blocks and attachments (``Message.parts_json()``); NULL when none
    parts: Mapped[list[Any] | None] = mapped_column(NullableJSON)
    #: server default false: a program written for the 0001 schema that inserts SQL directly still works
    is_error: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False, server_default=false())
    meta_kind: Mapped[str | None] = mapped_column(String(64))
    source_key: Mapped[str | None] = mapped_column(String(300))
    #: the message's token count as the meter counts it (framing included) under ``tokens_key``
    #: (``TokenMeter.count_key``: encoding and framing version), written by the door with the row;
    #: NULL when not counted (rows written before 0003, or by a program that inserts SQL itself).
    #: A cold status sums these instead of encoding every message again (engine/snapshots.py).
    tokens: Mapped[int | None] = mapped_column(Integer)
    tokens_key: Mapped[str | None] = mapped_column(String(40))


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_conversation_status", "conversation_id", "status"),
        CheckConstraint(
            "status IN ('queued','running','waiting_for_user','completed','failed','cancelled')",
            name="ck_runs_status",
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"), nullable=False)
    status: Mapped[str] = mapped_column(String(32), nullable=False)
    request_id: Mapped[int | None] = mapped_column(BigInteger)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class QueuedRequest(Base):
    __tablename__ = "queued_requests"
    __table_args__ = (
        Index("ix_queued_requests_conversation_status", "conversation_id", "status"),
        CheckConstraint("status IN ('queued','started','cancelled')", name="ck_queued_requests_status"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"), nullable=False)
    content: Mapped[str] = mapped_column(Text, nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False, default="queued")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)


class ModelRequestRow(Base):
    __tablename__ = "model_requests"
    __table_args__ = (
        Index("ix_model_requests_conversation_id_id", "conversation_id", "id"),
        CheckConstraint("origin IN ('engine','imported')", name="ck_model_requests_origin"),
        UniqueConstraint("conversation_id", "source_key", name="uq_model_requests_conversation_source_key"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"), nullable=False)
    run_id: Mapped[int | None] = mapped_column(BigInteger)
    step: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    provider: Mapped[str] = mapped_column(String(100), nullable=False)
    model: Mapped[str] = mapped_column(String(200), nullable=False)
    estimated_tokens: Mapped[int | None] = mapped_column(Integer)
    threshold: Mapped[int | None] = mapped_column(Integer)
    reported_prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    reported_completion_tokens: Mapped[int | None] = mapped_column(Integer)
    outcome: Mapped[str] = mapped_column(String(32), nullable=False, default="pending")
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    reported_cache_read_tokens: Mapped[int | None] = mapped_column(Integer)
    reported_cache_creation_tokens: Mapped[int | None] = mapped_column(Integer)
    reported_reasoning_tokens: Mapped[int | None] = mapped_column(Integer)
    response_id: Mapped[str | None] = mapped_column(String(200))
    context_window: Mapped[int | None] = mapped_column(Integer)
    #: ``engine``: sent by our harness / a platform; ``imported``: a usage record of a source
    origin: Mapped[str] = mapped_column(String(16), nullable=False, default="engine", server_default=text("'engine'"))
    #: imported requests: the (last) message that response produced, and the importer's key
    message_id: Mapped[int | None] = mapped_column(BigInteger)
    source_key: Mapped[str | None] = mapped_column(String(300))


class SourceCompactionRow(Base):
    """A compaction the source itself recorded (Claude Code ``compact_boundary``, Codex
    ``compacted``, OpenHands ``Condensation``): shown, never applied to our surface."""

    __tablename__ = "source_compactions"
    __table_args__ = (
        Index("ix_source_compactions_conversation_id_id", "conversation_id", "id"),
        UniqueConstraint("conversation_id", "source_id", name="uq_source_compactions_conversation_source_id"),
        CheckConstraint("kind IN ('summary','prune')", name="ck_source_compactions_kind"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"), nullable=False)
    source: Mapped[str] = mapped_column(String(32), nullable=False)
    kind: Mapped[str] = mapped_column(String(16), nullable=False)
    trigger: Mapped[str | None] = mapped_column(String(32))
    tokens_before: Mapped[int | None] = mapped_column(Integer)
    summary: Mapped[str | None] = mapped_column(Text)
    #: the compaction happened right after this message (NULL: before the first one)
    after_message_id: Mapped[int | None] = mapped_column(BigInteger)
    replaced_first_id: Mapped[int | None] = mapped_column(BigInteger)
    replaced_last_id: Mapped[int | None] = mapped_column(BigInteger)
    source_id: Mapped[str] = mapped_column(String(300), nullable=False)
    source_timestamp: Mapped[str | None] = mapped_column(String(64))
    kept: Mapped[list[Any] | None] = mapped_column(NullableJSON)
    forgotten: Mapped[list[Any] | None] = mapped_column(NullableJSON)
    details: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)


class CompactionStateRow(Base):
    __tablename__ = "compaction_state"

    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    boundary_message_id: Mapped[int | None] = mapped_column(BigInteger)
    boundary_hash: Mapped[str | None] = mapped_column(String(64))
    summary: Mapped[str | None] = mapped_column(Text)
    summary_tokens: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    generation: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0)
    compact_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    #: bumped by every pin / unpin of the thread; read with a compaction's snapshot and compared
    #: when it writes (a pin changed meanwhile: CompareAndSwapConflict, nothing written)
    pins_version: Mapped[int] = mapped_column(BigInteger, nullable=False, default=0, server_default=text("0"))


class CompactionHistoryRow(Base):
    __tablename__ = "compaction_history"
    __table_args__ = (
        Index("ix_compaction_history_conversation_id_id", "conversation_id", "id"),
        Index("ix_compaction_history_created_at", "created_at"),
        CheckConstraint("kind IN ('prune','summary','manual')", name="ck_compaction_history_kind"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"), nullable=False)
    run_id: Mapped[int | None] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(16), nullable=False)
    trigger: Mapped[str] = mapped_column(String(32), nullable=False)
    generation_before: Mapped[int] = mapped_column(BigInteger, nullable=False)
    generation_after: Mapped[int] = mapped_column(BigInteger, nullable=False)
    boundary_before: Mapped[int | None] = mapped_column(BigInteger)
    boundary_after: Mapped[int | None] = mapped_column(BigInteger)
    summary: Mapped[str | None] = mapped_column(Text)
    pruned_message_ids: Mapped[list[Any] | None] = mapped_column(NullableJSON)
    tokens_before: Mapped[int | None] = mapped_column(Integer)
    tokens_after: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)


class ToolOffloadRow(Base):
    __tablename__ = "tool_offloads"
    __table_args__ = (
        UniqueConstraint("message_id", name="uq_tool_offloads_message_id"),
        Index("ix_tool_offloads_conversation_id", "conversation_id", "message_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"), nullable=False)
    message_id: Mapped[int] = mapped_column(ForeignKey("messages.id", ondelete="CASCADE"), nullable=False)
    tool_name: Mapped[str] = mapped_column(String(200), nullable=False)
    path: Mapped[str] = mapped_column(Text, nullable=False)
    sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    preview: Mapped[str] = mapped_column(Text, nullable=False)
    original_tokens: Mapped[int] = mapped_column(Integer, nullable=False)
    preview_tokens: Mapped[int] = mapped_column(Integer, nullable=False)
    generation: Mapped[int] = mapped_column(BigInteger, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    #: the generation of the revert that brought this result back verbatim (NULL: the preview shows);
    #: a redo clears it. The row is never deleted (migration 0005)
    reverted_generation: Mapped[int | None] = mapped_column(BigInteger)


class CompactionEventRow(Base):
    __tablename__ = "compaction_events"
    __table_args__ = (
        Index("ix_compaction_events_conversation_id_id", "conversation_id", "id"),
        Index("ix_compaction_events_kind_conversation_id", "kind", "conversation_id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"), nullable=False)
    run_id: Mapped[int | None] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    trigger: Mapped[str | None] = mapped_column(String(32))
    data: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)



class Setting(Base):
    """Store-wide settings shared by every agent and inspector on this database (e.g. the policy)."""

    __tablename__ = "settings"

    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)


#: the actions an audit row records (``audit_log.action``)
AUDIT_ACTIONS: tuple[str, ...] = ("compact", "revert", "redo", "pin", "unpin", "instructions", "policy")


class MessagePin(Base):
    """A message an operator pinned: never pruned or summarized (widened to its tool round when read)."""

    __tablename__ = "message_pins"
    __table_args__ = (UniqueConstraint("conversation_id", "message_id", name="uq_message_pins_conversation_message"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"), nullable=False)
    message_id: Mapped[int] = mapped_column(ForeignKey("messages.id", ondelete="CASCADE"), nullable=False)
    pinned_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    pinned_by: Mapped[str] = mapped_column(String(200), nullable=False)
    reason: Mapped[str | None] = mapped_column(Text)


class ThreadPolicyRow(Base):
    """One thread's policy overrides (``threshold_ratio``, ``context_window``, ``retained_tail_tokens``,
    …) and its standing compaction ``instructions``; what is absent comes from the route / store."""

    __tablename__ = "thread_policies"

    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True)
    overrides: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    updated_by: Mapped[str | None] = mapped_column(String(200))


class AuditRow(Base):
    """One operator action, written in the same transaction as the action (``Locked.record_audit``).
    ``conversation_id`` is set NULL when the thread is deleted; ``thread_key`` still names it."""

    __tablename__ = "audit_log"
    __table_args__ = (
        Index("ix_audit_log_conversation_id_id", "conversation_id", "id"),
        CheckConstraint(
            "action IN ('compact','revert','redo','pin','unpin','instructions','policy')", name="ck_audit_log_action"
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    conversation_id: Mapped[int | None] = mapped_column(ForeignKey("conversations.id", ondelete="SET NULL"))
    thread_key: Mapped[str | None] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(32), nullable=False)
    operator: Mapped[str] = mapped_column(String(200), nullable=False)
    display_name: Mapped[str | None] = mapped_column(String(200))
    reason: Mapped[str | None] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
    before: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON)
    after: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON)
