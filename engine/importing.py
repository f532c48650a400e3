# Over 500 lines: the conversion, the visible repairs, the one-transaction writer and the follower share the report and key rules; split them only together.
"""Writing imported sessions: :class:`engine.importers.ImportedSession` → threads, through the door.

The parsers (:mod:`engine.importers`) read a transcript into the neutral model; this module turns
each session into :class:`engine.core.messages.Message` records and writes them, with the session's
usage records (model requests of origin ``imported``) and its recorded compactions, in **one
transaction per session** (``Store.locked_or_created``): a failure leaves nothing of that session.

Repairs are visible, never silent (docs/import.md): a result whose call is missing (``orphan``),
a second result for a call (``duplicate_result``) and a result the write door would refuse for
any other reason (``late_result``: its call is no longer pending) become ``user`` messages with
that ``meta_kind``, the text kept and the call id in their metadata, and are counted in the
report's ``repairs`` and warnings. A call the source never answered already has the parser's
``missing_result`` marker (a closing marker for :mod:`engine.core.units`).

Idempotency: every message carries the parser's ``source_key`` (``UNIQUE(conversation_id,
source_key)``); a usage record ``usage:<message key>:<n>``; a compaction its ``source_id``.
Re-importing writes only keys not stored yet, so the same file adds nothing and an appended file
adds what is new. A follower (``final=False``) writes only ``ImportedSession.stable_messages``.

Thread keys (docs/import.md): ``<format>:<source session id>`` (the file's stem when the source has
no id), or the caller's ``thread``; a sub-agent is ``<parent key>/<its session id>`` and records
its parent's key in ``source_meta["parent_thread"]``.
"""

from __future__ import annotations

import hashlib
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .core.errors import EngineError
from .core.messages import Attachment, InvalidMessage, Message, Reasoning, ToolCall
from .core.units import META_MISSING_RESULT
from .importers import (
    DATABASE_FORMATS,
    DUPLICATE_RESULT,
    JSONL_FORMATS,
    MISSING_RESULT,
    ORPHAN,
    DocumentPart,
    ImagePart,
    ImportedMessage,
    ImportedSession,
    ImportFormatError,
    ReasoningPart,
    detect_format,
    parse,
)
from .store import Store
from .store.foreign import ForeignDatabaseError, read_tables
from .store.invariants import CallLedger
from .store.reads import request_title

__all__ = [
    "ImportReport",
    "LATE_RESULT",
    "ORPHAN_RESULT",
    "DUPLICATE_RESULT_KIND",
    "import_path",
    "import_sessions",
    "follow_path",
    "thread_key_for",
    "provider_for",
    "to_message",
]

#: ``meta_kind`` of the user messages that carry a tool result the door cannot store as one
ORPHAN_RESULT = "orphan_result"  # its call is not in the source
DUPLICATE_RESULT_KIND = "duplicate_result"  # its call was already answered
LATE_RESULT = "late_result"  # its call is no longer pending (a newer assistant message came first)
_REPAIR_KIND = {ORPHAN: ORPHAN_RESULT, DUPLICATE_RESULT: DUPLICATE_RESULT_KIND}

#: the provider a format's usage is reported by, when the model name does not say
_FORMAT_PROVIDER = {
    "claude-code": "anthropic",
    "anthropic": "anthropic",
    "codex": "openai",
    "openai-chat": "openai",
    "openai-responses": "openai",
    "openhands": "openhands",
    "swe-agent": "swe-agent",
}
_KEY_LIMIT = 200  # conversations.thread_key


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What one session's import wrote (the CLI prints it; counts are of *new* rows)."""

    thread: str
    source: str  # the file (or directory) it came from
    format: str
    messages: int
    tool_calls: int
    compactions: int
    #: source entries that carry no conversation, and entry types the parser did not know, by type
    skipped: Mapping[str, int] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    #: repairs made so that the door could store the session (``orphan_result``: 2, …)
    repairs: Mapping[str, int] = field(default_factory=dict)
    requests: int = 0
    #: messages already stored by an earlier import (skipped by their source key)
    already_stored: int = 0
    created: bool = False
    parent_thread: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "thread": self.thread,
            "source": self.source,
            "format": self.format,
            "messages": self.messages,
            "tool_calls": self.tool_calls,
            "compactions": self.compactions,
            "skipped": dict(self.skipped),
            "warnings": list(self.warnings),
            "repairs": dict(self.repairs),
            "requests": self.requests,
            "already_stored": self.already_stored,
            "created": self.created,
            "parent_thread": self.parent_thread,
        }


# -- keys and providers --------------------------------------------------------------------------


def _bounded(key: str) -> str:
    if len(key) <= _KEY_LIMIT:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return key[: _KEY_LIMIT - 17] + "~" + digest


def thread_key_for(session: ImportedSession, *, parent_key: str | None = None, thread: str | None = None) -> str:
    """The thread key of a session (module docstring): deterministic, so a re-import finds it."""
    sid = session.source_session_id or Path(session.source_file).stem or "session"
    if parent_key is not None:
        return _bounded(f"{parent_key}/{sid}")
    if thread:
        return thread
    if session.parent_session_id:
        return _bounded(f"{session.format}:{session.parent_session_id}/{sid}")
    return _bounded(f"{session.format}:{sid}")


def provider_for(fmt: str, model: str | None) -> str:
    """The provider of a usage record: a ``provider/model`` prefix, a well-known model family,
    else the format's own provider."""
    if model:
        low = model.lower()
        if "/" in low:
            return low.split("/", 1)[0]
        if low.startswith("claude"):
            return "anthropic"
        if low.startswith(("gpt", "o1", "o3", "o4", "codex", "chatgpt")):
            return "openai"
    return _FORMAT_PROVIDER.get(fmt, fmt)


def _timestamp(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


# -- one message -------------------------------------------------------------------------------


def _reasoning(p: ReasoningPart) -> Reasoning:
    text = p.text if isinstance(p.text, str) else ""
    blob, signature = _text(p.blob), _text(p.signature)
    if p.summary:
        return Reasoning(text="", summary=text, encrypted=blob, redacted=bool(p.redacted), signature=signature)
    return Reasoning(text=text, encrypted=blob, redacted=bool(p.redacted), signature=signature)


def _size(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _attachment(p: ImagePart | DocumentPart) -> Attachment:
    """Whatever a (mangled) source said, a valid attachment: sizes that are not non-negative
    integers and names that are not text become unknown."""
    source = p.source if p.source in ("base64", "url", "file") else "file"
    url = _text(p.url)
    url = None if url is not None and url.startswith("data:") else url
    if isinstance(p, ImagePart):
        return Attachment("image", media_type=_text(p.media_type), byte_size=_size(p.byte_size), width=_size(p.width),
                          height=_size(p.height), source=source, url=url)  # type: ignore[arg-type]
    return Attachment("document", media_type=_text(p.media_type), byte_size=_size(p.byte_size), source=source,  # type: ignore[arg-type]
                      url=url, title=_text(p.title))


def _metadata(m: ImportedMessage) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if m.timestamp:
        meta["source_timestamp"] = m.timestamp
    if m.response_id:
        meta["response_id"] = m.response_id
    if m.model:
        meta["model"] = m.model
    if len(m.source_ids) > 1 or (m.source_ids and m.source_ids[0] != m.source_key):
        meta["source_ids"] = list(m.source_ids)
    if m.details:
        meta["details"] = dict(m.details)
    kinds = {c.id: c.kind for c in m.tool_calls if c.kind != "function"}
    if kinds:
        meta["call_kinds"] = kinds
    synthetic = [c.id for c in m.tool_calls if c.synthetic_id]
    if synthetic:
        meta["synthetic_call_ids"] = synthetic
    if m.repair:
        meta["repair"] = m.repair
        if m.repair == MISSING_RESULT:
            meta[META_MISSING_RESULT] = True
    if m.meta:
        meta["meta"] = True  # the flag engine.core.units reads (meta_kind says which kind)
    return meta


def to_message(m: ImportedMessage) -> Message:
    """One imported message as a :class:`Message` (no repair of its pairing: see :func:`_admit`)."""
    reasoning = tuple(_reasoning(p) for p in m.reasoning)
    attachments = tuple(_attachment(p) for p in m.attachments)
    meta_kind = (_text(m.meta_kind) or "meta") if m.meta else None
    seen: set[str] = set()
    calls: list[ToolCall] = []
    for i, c in enumerate(m.tool_calls):
        call_id = _text(c.id) or f"{m.source_key}#call{i}"
        if call_id in seen:  # one message never repeats a call id (the door refuses it): keep the first
            continue
        seen.add(call_id)
        calls.append(ToolCall(call_id, _text(c.name) or "?", c.arguments if isinstance(c.arguments, str) else "{}"))
    role = m.role
    if role == "tool":
        return Message("tool", m.text, tool_call_id=_text(m.tool_call_id) or "?", name=_text(m.tool_name), metadata=_metadata(m),
                       reasoning=reasoning, attachments=attachments, is_error=bool(m.is_error), source_key=m.source_key)
    return Message(role, m.text, tool_calls=tuple(calls) if role == "assistant" else (), name=_text(m.name), metadata=_metadata(m),
                   reasoning=reasoning, attachments=attachments, is_error=bool(m.is_error), meta_kind=meta_kind,
                   source_key=m.source_key)


def _as_carrier(m: Message, kind: str) -> Message:
    """A tool result the door cannot store as one, kept visibly as a meta user message."""
    meta = dict(m.metadata)
    meta.update({"tool_call_id": m.tool_call_id, "tool_name": m.name, "repair": meta.get("repair") or kind, "meta": True})
    meta.pop(META_MISSING_RESULT, None)
    return Message("user", m.content, metadata=meta, attachments=m.attachments, is_error=m.is_error, meta_kind=kind,
                   source_key=m.source_key)


def _admit(ledger: CallLedger, m: Message, repairs: Counter[str]) -> Message:
    """``m`` as the door will accept it after what the ledger has seen (the ledger advances)."""
    if m.role == "tool":
        kind = _REPAIR_KIND.get(str(m.metadata.get("repair"))) or (ORPHAN_RESULT if m.tool_call_id == "?" else None)
        if kind is None:
            try:
                ledger.admit(m)
                return m
            except InvalidMessage as exc:
                kind = DUPLICATE_RESULT_KIND if "answered twice" in exc.message else LATE_RESULT
        repairs[kind] += 1
        carrier = _as_carrier(m, kind)
        ledger.admit(carrier)
        return carrier
    ledger.admit(m)
    return m


# -- one session -------------------------------------------------------------------------------


def _kept(messages: Iterable[ImportedMessage]) -> list[dict[str, Any]]:
    out = []
    for k in messages:
        item: dict[str, Any] = {"role": k.role, "text": k.text}
        if k.meta_kind:
            item["meta_kind"] = k.meta_kind
        if k.tool_calls:
            item["tool_calls"] = [{"id": c.id, "name": c.name} for c in k.tool_calls]
        out.append(item)
    return out


def session_title(session: ImportedSession) -> str:
    """The title of an imported session: the source's own (a Claude Code ``summary`` entry …), else
    its first real user request (no meta message: not a command, reminder or demonstration), one
    line of at most 80 characters (:func:`engine.store.reads.request_title`, which also titles an
    older import that has none, at read time)."""
    own = " ".join((session.title or "").split())
    if own:
        return own if len(own) <= 200 else own[:199] + "…"
    first = next((m for m in session.messages if m.role == "user" and not m.meta and not m.repair and m.text.strip()), None)
    return request_title(first.text) if first is not None else ""


def _write_session(store: Store, session: ImportedSession, key: str, *, final: bool, parent_key: str | None) -> ImportReport:
    limit = len(session.messages) if final else int(session.stable_messages or 0)
    converted = [to_message(m) for m in session.messages[:limit]]
    repairs: Counter[str] = Counter()
    warnings = [str(w) for w in session.warnings]
    title = session_title(session)
    with store.locked_or_created(key, title=title) as (tx, created):
        row = tx.thread()
        if not created and row.source_format is None:
            raise EngineError(f"thread {key!r} exists and was not imported; give another --thread", code="thread_not_imported")
        if not created and row.source_format != session.format:
            raise EngineError(
                f"thread {key!r} was imported from {row.source_format}, not {session.format}", code="thread_format_mismatch"
            )
        tx.set_source(
            format=session.format,
            file=session.source_file,
            session_id=session.source_session_id,
            cwd=session.cwd,
            context_window=session.context_window,
            parent_session_id=session.parent_session_id,
            meta={**({"extra": dict(session.extra)} if session.extra else {}),
                  **({"parent_thread": parent_key} if parent_key else {}),
                  **({"model": session.model} if session.model else {})},
            title=title or None,  # a thread imported untitled takes it now (the door keeps a title it has)
        )
        if created:
            tx.configure(system_prompt=session.system_prompt or "", tools=session.tools)
        elif session.system_prompt and not tx.thread().system_prompt:
            tx.configure(system_prompt=session.system_prompt)
        stored = tx.message_source_keys()
        ledger = tx.call_ledger().copy()
        new: list[Message] = []
        for m in converted:
            if m.source_key in stored:
                continue
            new.append(_admit(ledger, m, repairs))
        if new and not tx.thread().model:
            # the route the import ends with (below: the newest usage record's model, else the
            # session's), set before the messages so the door keeps their counts for its encoding
            last = next((u for u in reversed(session.usage) if 0 <= u.position < limit), None)
            model = (last.model or session.messages[last.position].model) if last is not None else None
            model = model or session.model
            if model:
                tx.set_route(provider=provider_for(session.format, model), model=model)
        written = tx.bulk_append(new) if new else 0
        ids = tx.message_source_keys() if written else stored
        position_ids = [ids.get(m.source_key or "") for m in converted]

        # usage records → model requests (origin 'imported')
        have = tx.request_source_keys()
        per_position: Counter[int] = Counter()
        requests: list[dict[str, Any]] = []
        for u in session.usage:
            if not 0 <= u.position < limit:
                continue
            n = per_position[u.position]
            per_position[u.position] += 1
            skey = f"usage:{session.messages[u.position].source_key}:{n}"
            if skey in have:
                continue
            model = u.model or session.messages[u.position].model or session.model or "unknown"
            requests.append({
                "provider": provider_for(session.format, model),
                "model": model,
                "source_key": skey,
                "reported_prompt_tokens": u.prompt_tokens,
                "reported_completion_tokens": u.completion_tokens,
                "reported_cache_read_tokens": u.cache_read_tokens,
                "reported_cache_creation_tokens": u.cache_creation_tokens,
                "reported_reasoning_tokens": u.reasoning_tokens,
                "response_id": u.response_id,
                "context_window": u.context_window,
                "message_id": position_ids[u.position],
                "created_at": _timestamp(u.timestamp or session.messages[u.position].timestamp),
            })
        n_requests = tx.record_imported_requests(requests)
        if not n_requests and not tx.thread().model and session.model:
            tx.set_route(provider=provider_for(session.format, session.model), model=session.model)

        # the source's own compactions
        known = tx.source_compaction_ids()
        n_compactions = 0
        for c in session.compactions:
            if c.position > limit:
                continue
            sid = c.source_id or f"pos:{c.position}:{c.kind}"
            if sid in known:
                continue
            known.add(sid)
            first_id = position_ids[c.replaced_start] if 0 <= c.replaced_start < len(position_ids) and c.replaced_end > c.replaced_start else None
            last_id = position_ids[c.replaced_end - 1] if 0 < c.replaced_end <= len(position_ids) and c.replaced_end > c.replaced_start else None
            tx.record_source_compaction(
                source=session.format,
                source_id=sid,
                kind=c.kind,
                trigger=c.trigger,
                tokens_before=c.tokens_before,
                summary=c.summary,
                after_message_id=position_ids[c.position - 1] if 0 < c.position <= len(position_ids) else None,
                replaced_first_id=first_id,
                replaced_last_id=last_id,
                source_timestamp=c.timestamp,
                kept=_kept(c.kept),
                forgotten=c.forgotten_ids,
                details=c.details,
            )
            n_compactions += 1
    for kind, n in sorted(repairs.items()):
        warnings.append(f"{session.source_file}: {n} tool result(s) kept as {kind} meta messages (the door cannot store them as results)")
    missing = sum(1 for m in new if m.metadata.get(META_MISSING_RESULT))
    if missing:
        repairs[MISSING_RESULT] += missing
        warnings.append(f"{session.source_file}: {missing} call(s) without a result in the source got a missing_result marker")
    skipped = Counter(dict(session.skipped))
    skipped.update({f"unknown:{k}": v for k, v in session.unknown.items()})
    return ImportReport(
        thread=key,
        source=session.source_file,
        format=session.format,
        messages=written,
        tool_calls=sum(len(m.tool_calls) for m in new),
        compactions=n_compactions,
        skipped=dict(skipped),
        warnings=tuple(warnings),
        repairs=dict(repairs),
        requests=n_requests,
        already_stored=len(converted) - len(new),
        created=created,
        parent_thread=parent_key,
    )


def import_sessions(store: Store, sessions: Sequence[ImportedSession], *, thread: str | None = None, final: bool = True) -> list[ImportReport]:
    """Write parsed sessions (main sessions first, then sub-agents), one transaction each.

    ``thread`` names the main session's thread (or, when there is no main session, the first
    one's); sub-agents are ``<their parent's key>/<their id>``."""
    ordered = sorted(sessions, key=lambda s: s.parent_session_id is not None)
    has_main = any(s.parent_session_id is None for s in ordered)
    keys: dict[str, str] = {}  # source session id -> thread key
    reports: list[ImportReport] = []
    for i, s in enumerate(ordered):
        parent_key: str | None = None
        if thread and i == 0:
            key = thread
        elif s.parent_session_id is None:
            key = thread_key_for(s)
        else:
            parent_key = keys.get(s.parent_session_id) or (thread if thread and has_main else None) or _bounded(
                f"{s.format}:{s.parent_session_id}")
            key = thread_key_for(s, parent_key=parent_key)
        if s.source_session_id:
            keys.setdefault(s.source_session_id, key)
        reports.append(_write_session(store, s, key, final=final, parent_key=parent_key))
    return reports


def _is_sqlite(p: Path) -> bool:
    """A SQLite file (a format kept both as a database and as files, opencode, is read by what ``p`` is)."""
    try:
        with p.open("rb") as fh:
            return fh.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def import_path(store: Store, path: str | Path, *, format: str | None = None, thread: str | None = None,
                final: bool = True) -> list[ImportReport]:
    """Parse one file or directory and write its sessions. Raises
    :class:`engine.importers.ImportFormatError` (one line) when it is not (a readable) ``format``."""
    p = Path(path).expanduser()
    fmt = format or (detect_format(p) if p.is_file() else None)
    if fmt in DATABASE_FORMATS and _is_sqlite(p):  # another tool's database: read here, read-only (SQL lives in engine.store)
        try:
            tables = read_tables(p, DATABASE_FORMATS[fmt].pick)
        except ForeignDatabaseError as exc:
            raise ImportFormatError(f"{p}: not a readable {fmt} database ({exc})") from exc
        sessions = parse(p, fmt, final=final, tables=tables)
    else:
        sessions = parse(p, format, final=final)
    if not sessions:
        raise ImportFormatError(f"{path}: no session in it")
    return import_sessions(store, sessions, thread=thread, final=final)


# -- following a growing file --------------------------------------------------------------------


def follow_path(
    store: Store,
    path: str | Path,
    *,
    format: str | None = None,
    thread: str | None = None,
    poll_seconds: float = 0.5,
    stop: threading.Event | None = None,
    seconds: float | None = None,
    on_reports: Callable[[list[ImportReport]], None] | None = None,
) -> list[ImportReport]:
    """Tail a growing Claude Code / Codex JSONL file: each time it grows (checked every
    ``poll_seconds``, at most 5 s), re-read it as a file still being written (``final=False``) and
    write what became stable (idempotent by source keys, so only the new entries are added). Runs
    until ``stop`` is set, ``seconds`` have passed, or SIGINT / SIGTERM (in the main thread).
    Returns the reports of the passes that wrote something, merged per thread."""
    p = Path(path).expanduser()
    fmt = format or detect_format(p)
    if fmt is None:
        raise ImportFormatError(f"{p}: not a recognized session format (--follow needs {', '.join(sorted(JSONL_FORMATS))})")
    if fmt not in JSONL_FORMATS:
        raise ImportFormatError(f"{p}: --follow reads growing JSONL files ({', '.join(sorted(JSONL_FORMATS))}), not {fmt}",
                                code="import_not_followable")
    poll = min(max(poll_seconds, 0.05), 5.0)
    stop = stop or threading.Event()
    restore: list[tuple[int, Any]] = []
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            restore.append((sig, signal.signal(sig, lambda *_: stop.set())))
    deadline = time.monotonic() + seconds if seconds is not None else None
    totals: dict[str, ImportReport] = {}
    seen: tuple[int, int] | None = None
    try:
        while True:
            try:
                st = p.stat()
                state = (st.st_size, st.st_mtime_ns)
            except FileNotFoundError:
                state = None
            if state is not None and state != seen:
                seen = state
                reports = import_path(store, p, format=fmt, thread=thread, final=False)
                with store.locked(reports[0].thread) as tx:
                    tx.set_follow_position(state[0], _line_count(p))
                wrote = [r for r in reports if r.messages or r.compactions or r.requests or r.created]
                for r in wrote:
                    totals[r.thread] = _merge(totals.get(r.thread), r)
                if wrote and on_reports is not None:
                    on_reports(wrote)
            if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                break
            wait = poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic()))
            stop.wait(wait)
    finally:
        for signum, handler in restore:
            signal.signal(signum, handler)
    return list(totals.values())


def _line_count(p: Path) -> int:
    with p.open("rb") as fh:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b"")) + 1


def _merge(a: ImportReport | None, b: ImportReport) -> ImportReport:
    if a is None:
        return b
    repairs = Counter(dict(a.repairs))
    repairs.update(dict(b.repairs))
    return ImportReport(
        thread=b.thread, source=b.source, format=b.format, messages=a.messages + b.messages, tool_calls=a.tool_calls + b.tool_calls,
        compactions=a.compactions + b.compactions, skipped=b.skipped, warnings=tuple(dict.fromkeys(a.warnings + b.warnings)),
        repairs=dict(repairs), requests=a.requests + b.requests, already_stored=a.already_stored, created=a.created or b.created,
        parent_thread=b.parent_thread,
    )
