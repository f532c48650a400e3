"""Rows to records: the plain :mod:`engine.core.views` records and :class:`engine.core.messages.Message`
built from ORM rows or plain column rows, and the column values of a new message row.

Nothing here opens a session: the write door (:mod:`.door`) and the store's reads (:mod:`.store`)
call these on rows they already hold.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal, overload

from sqlalchemy import Row, Text, type_coerce

from ..core.errors import EngineError
from ..core.messages import Attachment, InvalidMessage, Message, Reasoning, ToolCall
from ..core.views import CompactionEvent, CompactionState, HistoryRecord, LockedThread, ModelRequest, Offload, RunInfo, SourceCompaction
from .models import (
    CompactionEventRow,
    CompactionHistoryRow,
    CompactionStateRow,
    Conversation,
    MessageRow,
    ModelRequestRow,
    Run,
    SourceCompactionRow,
    ToolOffloadRow,
    utcnow,
)
from .rules import CorruptRow, as_int, check_json, checked, clean_text, tolerant_json_loads

#: the messages table (Core inserts go through it: see ``Locked.bulk_append``)
MESSAGES = MessageRow.__table__


@overload
def aware(dt: datetime) -> datetime: ...
@overload
def aware(dt: datetime | None) -> datetime | None: ...
def aware(dt: datetime | None) -> datetime | None:
    if dt is None:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


MESSAGE_COLUMNS = (
    MessageRow.id, MessageRow.role, MessageRow.content, MessageRow.tool_calls, MessageRow.tool_call_id, MessageRow.name,
    MessageRow.meta, MessageRow.parts, MessageRow.is_error, MessageRow.meta_kind, MessageRow.source_key,
)

#: :data:`MESSAGE_COLUMNS` with the JSON columns read as their text (decoded by
#: :func:`message_from_text_row` only when they hold something): the long-thread read path
MESSAGE_TEXT_COLUMNS = tuple(type_coerce(c, Text) if c.key in ("tool_calls", "meta", "parts") else c for c in MESSAGE_COLUMNS)
_EMPTY_JSON: dict[str, Any] = {"null": None, "[]": [], "{}": {}, "": None}


def _json(value: Any) -> Any:
    """A JSON column value as SQLAlchemy's JSON type reads it (text is decoded; a driver that
    already decoded it, psycopg's jsonb, gives the object)."""
    if not isinstance(value, str):
        return value
    if value in _EMPTY_JSON:
        empty = _EMPTY_JSON[value]
        return type(empty)() if empty is not None else None
    return tolerant_json_loads(value)  # a CorruptJSON marker, not an exception: build_message names the row


def message_from_text_row(row: Any) -> Message:
    """:func:`build_message` of a row of :data:`MESSAGE_TEXT_COLUMNS`."""
    id, role, content, tool_calls, tool_call_id, name, meta, parts, is_error, meta_kind, source_key = row
    return build_message(id, role, content, _json(tool_calls), tool_call_id, name, _json(meta), _json(parts), is_error, meta_kind, source_key)


def _parts(raw: Any) -> tuple[tuple[Reasoning, ...], tuple[Attachment, ...]]:
    """The ``parts`` column, read tolerantly: anything that is not a list of objects (NULL, the
    JSON text ``null``, a program that wrote it by hand) gives no parts; an unknown part type is
    skipped rather than refused (the message itself stays readable)."""
    if not isinstance(raw, list):
        return (), ()
    reasoning: list[Reasoning] = []
    attachments: list[Attachment] = []
    for p in raw:
        if not isinstance(p, dict):
            continue
        kind = p.get("type")
        try:
            if kind == "reasoning":
                reasoning.append(Reasoning.from_json(p))
            elif kind in ("image", "document"):
                attachments.append(Attachment.from_json(p))
        except InvalidMessage:
            continue
    return tuple(reasoning), tuple(attachments)


def to_message(row: Any) -> Message:
    """A domain message from an ORM row or a plain row of :data:`MESSAGE_COLUMNS`."""
    return build_message(
        row.id, row.role, row.content, row.tool_calls, row.tool_call_id, row.name, row.meta,
        getattr(row, "parts", None), getattr(row, "is_error", False), getattr(row, "meta_kind", None), getattr(row, "source_key", None),
    )


def checked_calls_and_meta(id: Any, role: Any, tool_calls: Any, tool_call_id: Any, meta: Any) -> tuple[Any, Any]:
    """The decoded ``tool_calls`` and ``metadata`` of message row ``id``, checked by the rules of
    docs/schema.md that a reader of its calls needs (:func:`build_message`, and the counted rows
    of ``reads``): a :class:`CorruptRow` for undecodable JSON, calls that are not a list of
    objects, or a tool result without the id of the call it answers."""
    tool_calls = checked(tool_calls, "messages", id, "tool_calls")
    meta = checked(meta, "messages", id, "metadata")
    # no calls (or an empty value of any type, as before): nothing to check
    if tool_calls and (not isinstance(tool_calls, list) or not all(isinstance(c, dict) for c in tool_calls)):
        raise CorruptRow("messages", id, "tool_calls", "not a list of objects")
    if role == "tool" and not tool_call_id:
        raise CorruptRow("messages", id, "tool_call_id", "a tool message without the id of the call it answers")
    return tool_calls, meta


def build_message(id: Any, role: Any, content: Any, tool_calls: Any, tool_call_id: Any, name: Any, meta: Any, parts: Any,
                  is_error: Any, meta_kind: Any, source_key: Any) -> Message:
    """A domain message from the values of :data:`MESSAGE_COLUMNS`, in that order (a plain row
    unpacks into it: ``build_message(*row)``, the long-thread read path).

    A row that breaks docs/schema.md raises :class:`CorruptRow` naming the message and the column."""
    tool_calls, meta = checked_calls_and_meta(id, role, tool_calls, tool_call_id, meta)
    parts = checked(parts, "messages", id, "parts")
    calls: tuple[ToolCall, ...] = ()
    if tool_calls:
        try:
            calls = tool_calls_of(tool_calls)
        except InvalidMessage as exc:
            raise CorruptRow("messages", id, "tool_calls", f"a malformed tool call ({exc.message})") from None
    reasoning, attachments = _parts(parts) if parts else ((), ())
    if not isinstance(content, str):
        raise CorruptRow("messages", id, "content", "not text")
    try:
        return _message(id, role, content, calls, tool_call_id, name, meta, reasoning, attachments, is_error, meta_kind, source_key)
    except InvalidMessage as exc:
        raise CorruptRow("messages", id, "role" if "role" in exc.message else "content", exc.message) from None


def tool_calls_of(decoded: list[Any]) -> tuple[ToolCall, ...]:
    """The calls of a ``tool_calls`` column value (a list of objects, checked): a malformed one
    raises :class:`InvalidMessage`."""
    return tuple(
        ToolCall(id=str(c.get("id") or ""), name=str(c.get("name") or ""), arguments=c.get("arguments") if isinstance(c.get("arguments"), str) else "{}")
        for c in decoded
    )


def _message(id: Any, role: Any, content: Any, calls: tuple[ToolCall, ...], tool_call_id: Any, name: Any, meta: Any,
             reasoning: tuple[Reasoning, ...], attachments: tuple[Attachment, ...], is_error: Any, meta_kind: Any, source_key: Any) -> Message:
    return Message(
        role=role,
        content=content,
        id=id,
        tool_calls=calls,
        tool_call_id=tool_call_id,
        name=name,
        metadata=meta if isinstance(meta, dict) else {},
        reasoning=reasoning,
        attachments=attachments,
        is_error=bool(is_error),
        meta_kind=meta_kind if isinstance(meta_kind, str) and meta_kind else None,
        source_key=source_key or None,
    )


#: the lengths of the messages table's bounded text columns (models.py; PostgreSQL enforces them)
_MESSAGE_LIMITS = {"tool_call_id": 200, "name": 200, "meta_kind": 64, "source_key": 300}
#: (field, its name in an error, limit) of each bounded column, in the order they are checked
_BOUNDED = tuple((k, f"message {k}", n) for k, n in _MESSAGE_LIMITS.items())


def message_values(conversation_id: int, m: Message, run_id: int | None) -> dict[str, Any]:
    """The column values of a new message row, under the data rules of :mod:`.rules` (the same on
    both backends): NUL in a text column escaped, lone surrogates, too-deep JSON and too-long
    bounded columns refused with ``invalid_message``."""
    if m.id is not None:
        raise EngineError(f"message already persisted with id {m.id}", code="already_persisted")
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls] or None
    meta = dict(m.metadata) or None
    check_json(calls, "tool calls")
    check_json(meta, "metadata")
    bounded = {k: None if (v := getattr(m, k)) is None else clean_text(v, field, limit=n) for k, field, n in _BOUNDED}
    parts = (m.parts_json() or None) if m.reasoning or m.attachments else None
    check_json(parts, "reasoning / attachments")
    return {
        "conversation_id": conversation_id,
        "role": m.role,
        "content": clean_text(m.content, "message content"),
        "tool_calls": calls,
        "tool_call_id": bounded["tool_call_id"],
        "name": bounded["name"],
        "meta": meta,
        "run_id": run_id,
        "created_at": utcnow(),
        "parts": parts,
        "is_error": m.is_error,
        "meta_kind": bounded["meta_kind"],
        "source_key": bounded["source_key"],
    }


def locked_thread_record(conv: Conversation) -> LockedThread:
    """The door's frozen copy of its locked row (callers outside the store never hold the ORM row)."""
    return LockedThread(id=conv.id, key=conv.thread_key, title=conv.title, provider=conv.provider, model=conv.model,
                        system_prompt=conv.system_prompt, source_format=conv.source_format,
                        reported_context_window=conv.reported_context_window, message_count=conv.message_count)


def conversation_tools(conv: Conversation) -> tuple[dict[str, Any], ...]:
    """The tool schemas of a conversation row; ``tools`` that is not a JSON list of objects is corrupt."""
    tools = checked(conv.tools, "conversations", conv.id, "tools")
    if tools is None:
        return ()
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise CorruptRow("conversations", conv.id, "tools", "not a JSON list of tool schemas")
    return tuple(tools)


def state_record(row: CompactionStateRow | None, conversation_id: int) -> CompactionState:
    if row is None:
        return CompactionState(conversation_id=conversation_id)
    return CompactionState(
        conversation_id=conversation_id,
        boundary=as_int(row.boundary_message_id, "compaction_state", conversation_id, "boundary_message_id"),
        summary=row.summary,
        summary_tokens=as_int(row.summary_tokens, "compaction_state", conversation_id, "summary_tokens") or 0,
        generation=as_int(row.generation, "compaction_state", conversation_id, "generation") or 0,
        boundary_hash=row.boundary_hash,
        compact_count=as_int(row.compact_count, "compaction_state", conversation_id, "compact_count") or 0,
        updated_at=aware(row.updated_at),
        pins_version=as_int(getattr(row, "pins_version", 0), "compaction_state", conversation_id, "pins_version") or 0,
    )


def offload_record(row: ToolOffloadRow | Row[Any]) -> Offload:
    return Offload(
        message_id=row.message_id,
        tool_name=row.tool_name,
        path=row.path,
        sha256=row.sha256,
        preview=row.preview,
        original_tokens=row.original_tokens,
        preview_tokens=row.preview_tokens,
        generation=row.generation,
        created_at=aware(row.created_at),
    )


def event_record(row: CompactionEventRow) -> CompactionEvent:
    return CompactionEvent(
        id=row.id,
        conversation_id=row.conversation_id,
        run_id=row.run_id,
        kind=row.kind,
        trigger=row.trigger,
        created_at=aware(row.created_at),
        # readers treat every key as optional (docs/schema.md): data that is not an object reads as {}
        data=_event_data(row),
    )


def _event_data(row: CompactionEventRow) -> dict[str, Any]:
    data = checked(row.data, "compaction_events", row.id, "data")
    return dict(data) if isinstance(data, dict) else {}


def history_record(row: CompactionHistoryRow) -> HistoryRecord:
    return HistoryRecord(
        id=row.id,
        conversation_id=row.conversation_id,
        kind=row.kind,  # type: ignore[arg-type]
        trigger=row.trigger,
        generation_before=row.generation_before,
        generation_after=row.generation_after,
        boundary_before=row.boundary_before,
        boundary_after=row.boundary_after,
        summary=row.summary,
        pruned_message_ids=_ids(checked(row.pruned_message_ids, "compaction_history", row.id, "pruned_message_ids")),
        tokens_before=row.tokens_before,
        tokens_after=row.tokens_after,
        created_at=aware(row.created_at),
    )


def _ids(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, list) else ()


def run_record(row: Run) -> RunInfo:
    return RunInfo(
        id=row.id,
        conversation_id=row.conversation_id,
        status=row.status,  # type: ignore[arg-type]
        created_at=aware(row.created_at),
        finished_at=aware(row.finished_at),
        error_code=row.error_code,
        error_message=row.error_message,
    )


def model_request_record(row: ModelRequestRow | Row[Any]) -> ModelRequest:
    return ModelRequest(
        id=row.id,
        conversation_id=row.conversation_id,
        run_id=row.run_id,
        step=row.step,
        provider=row.provider,
        model=row.model,
        estimated_tokens=row.estimated_tokens,
        threshold=row.threshold,
        reported_prompt_tokens=row.reported_prompt_tokens,
        reported_completion_tokens=row.reported_completion_tokens,
        outcome=row.outcome,
        error_code=row.error_code,
        error_message=row.error_message,
        created_at=aware(row.created_at),
        reported_cache_read_tokens=row.reported_cache_read_tokens,
        reported_cache_creation_tokens=row.reported_cache_creation_tokens,
        reported_reasoning_tokens=row.reported_reasoning_tokens,
        response_id=row.response_id,
        context_window=row.context_window,
        origin=_origin(row.id, row.origin),
        message_id=row.message_id,
    )


def _origin(row_id: Any, value: str | None) -> Literal["engine", "imported"]:
    """A request's ``origin`` column (CHECK ``engine`` / ``imported``; unset reads as ``engine``)."""
    if value is None or value == "engine":
        return "engine"
    if value == "imported":
        return "imported"
    raise CorruptRow("model_requests", row_id, "origin", f"neither engine nor imported: {value!r}")


def source_compaction_record(row: SourceCompactionRow | Row[Any]) -> SourceCompaction:
    def as_list(v: Any) -> tuple[Any, ...]:
        return tuple(v) if isinstance(v, list) else ()

    return SourceCompaction(
        id=row.id,
        conversation_id=row.conversation_id,
        source=row.source,
        kind=row.kind,  # type: ignore[arg-type]
        trigger=row.trigger,
        tokens_before=row.tokens_before,
        summary=row.summary,
        after_message_id=row.after_message_id,
        replaced_first_id=row.replaced_first_id,
        replaced_last_id=row.replaced_last_id,
        source_id=row.source_id,
        source_timestamp=row.source_timestamp,
        kept=as_list(checked(row.kept, "source_compactions", row.id, "kept")),
        forgotten=as_list(checked(row.forgotten, "source_compactions", row.id, "forgotten")),
        details=dict(details) if isinstance(details := checked(row.details, "source_compactions", row.id, "details"), dict) else {},
        created_at=aware(row.created_at),
    )


