"""``codex``: a Codex CLI rollout file (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

Shape handled: one ``{timestamp, type, payload}`` object per line.

- ``session_meta {id, cwd, cli_version, originator, instructions | base_instructions, git}`` →
  session id, cwd, ``system_prompt`` (base instructions) and ``extra``;
- ``turn_context {model, effort, approval_policy, sandbox_policy, cwd}`` → the model of the
  following items (the session's model is the last one);
- ``response_item`` → a Responses item, read by :class:`engine.importers.openai_responses.ItemReader`
  (messages incl. the ``developer`` role, ``function_call`` / ``function_call_output``,
  ``custom_tool_call`` (+ output; arguments kept as free text), ``local_shell_call`` (a ``local_shell``
  call whose arguments are its ``action``), ``reasoning``). User messages that are injected context,
  not requests, are ``meta``: ``environment_context``, ``user_instructions`` (incl. ``AGENTS.md``
  instructions), ``turn_aborted``, ``shell_command`` (``<user_shell_command>``). A function output
  ``{"output", "metadata": {"exit_code"}}`` keeps its text as written (what the model saw), its exit
  code in ``details["exit_code"]`` and is ``is_error`` when that code is not 0;
- ``event_msg`` ``token_count {info {last_token_usage {input_tokens, cached_input_tokens,
  output_tokens, reasoning_output_tokens}, model_context_window}}`` → a usage record on the last
  message (repeats of the same totals are dropped), ``model_context_window`` → the session's
  ``context_window``; it also closes the current assistant message (one response). Every other
  ``event_msg`` (``user_message``, ``agent_message``, ``agent_reasoning`` … duplicates or telemetry)
  is ``skipped["event_msg:<type>"]``;
- ``compacted {message, replacement_history}`` → a recorded compaction replacing everything before
  it: summary = ``message`` (``None`` when empty: the summary is then only encrypted), ``kept`` = the
  replacement history's messages; the history is not added again as messages.

Bare-era rollouts (before the ``{timestamp, type, payload}`` envelope) are read too: a first line
``{id, timestamp, instructions, git}`` is the session meta, bare items are response items and
``{"record_type": "state"}`` lines are skipped. A sub-agent's ``session_meta.source.subagent
.thread_spawn.parent_thread_id`` is its ``parent_session_id``; a fork's repeated parent
``session_meta`` is skipped (the first one wins).

Source keys are ``L<line>`` (the rollout is append-only, so they are stable under appends).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Mapping

from ._common import NameSet, SessionBuilder, Source, as_int, map_or_none, str_or_none
from .jsonl import iter_lines
from .model import ImportedSession, ImportFormatError
from .openai_responses import ITEM_TYPES, ItemReader, usage_record

FORMAT = "codex"
#: where Codex CLI keeps rollouts, relative to the home directory (engine.discovery)
DEFAULT_LOCATIONS = (".codex/sessions/**/rollout-*.jsonl",)
LINE_TYPES = NameSet({"session_meta", "turn_context", "response_item", "event_msg", "compacted"})

_META_PREFIXES = (
    ("<environment_context>", "environment_context"),
    ("<user_instructions>", "user_instructions"),
    ("# AGENTS.md instructions", "user_instructions"),
    ("<turn_aborted>", "turn_aborted"),
    ("<user_shell_command>", "shell_command"),
)


def looks_like(obj: object) -> bool:
    return isinstance(obj, Mapping) and obj.get("type") in LINE_TYPES and "payload" in obj


def meta_kind(role: str, text: str) -> str | None:
    t = text.lstrip()
    for prefix, kind in _META_PREFIXES:
        if t.startswith(prefix):
            return kind
    return None


def looks_like_legacy_header(obj: object) -> bool:
    """The first line of a bare-era rollout: ``{id, timestamp, instructions?, git?}``, no ``type``."""
    return (isinstance(obj, Mapping) and "type" not in obj and "id" in obj and "timestamp" in obj
            and ("instructions" in obj or "git" in obj))


def _parent_thread(source: object) -> str | None:
    """A sub-agent's parent: ``source.subagent.thread_spawn.parent_thread_id``."""
    spawn = source.get("subagent") if isinstance(source, Mapping) else None
    spawn = spawn.get("thread_spawn") if isinstance(spawn, Mapping) else None
    parent = spawn.get("parent_thread_id") if isinstance(spawn, Mapping) else None
    return parent if isinstance(parent, str) else None


def _exit_code(text: str) -> int | None:
    """``metadata.exit_code`` of a shell output written as ``{"output", "metadata"}`` JSON."""
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    meta = data.get("metadata") if isinstance(data, Mapping) else None
    return as_int(meta.get("exit_code")) if isinstance(meta, Mapping) else None


def parse(source: Source, *, final: bool = True) -> list[ImportedSession]:
    data = source.read_bytes()
    b = SessionBuilder(FORMAT, source)
    reader = ItemReader(b, meta=meta_kind)
    recognized = 0
    model: str | None = None
    session: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    last_total: Any = None
    for e in iter_lines(data, final=final):
        if e.error is not None:
            b.warn(e.error, e.line)
            continue
        obj = e.value
        if isinstance(obj, Mapping) and "payload" not in obj:  # the bare (legacy) era
            if "record_type" in obj:
                recognized += 1
                b.skipped[f"record_type:{obj['record_type']}"] += 1
                continue
            if looks_like_legacy_header(obj) and recognized == 0:
                obj = {"timestamp": obj.get("timestamp"), "type": "session_meta", "payload": obj}
            elif obj.get("type") in ITEM_TYPES:
                obj = {"timestamp": obj.get("timestamp"), "type": "response_item", "payload": obj}
        if not looks_like(obj):
            if isinstance(obj, Mapping) and "type" in obj:
                b.unknown[str(obj.get("type"))] += 1
            else:
                b.warn("not a rollout line ({timestamp, type, payload})", e.line)
            continue
        recognized += 1
        key = f"L{e.line}"
        ts = obj.get("timestamp") if isinstance(obj.get("timestamp"), str) else None
        payload = obj.get("payload")
        if not isinstance(payload, Mapping):
            b.warn(f"{obj['type']} line without a payload object", e.line)
            continue
        kind = obj["type"]
        if kind == "session_meta":
            meta_raw = payload.get("meta")
            meta: Mapping[str, Any] = meta_raw if isinstance(meta_raw, Mapping) else payload
            if "source_session_id" in session:  # a fork repeats its parent's meta: keep the first
                b.skipped["session_meta:repeated"] += 1
                continue
            session["source_session_id"] = str_or_none(meta.get("id")) or str_or_none(meta.get("session_id"))
            parent = _parent_thread(meta.get("source"))
            if parent:
                session["parent_session_id"] = parent
            session.setdefault("cwd", str_or_none(meta.get("cwd")))
            instr = meta.get("base_instructions") or meta.get("instructions")
            if isinstance(instr, Mapping):
                instr = instr.get("text")
            if isinstance(instr, str) and instr:
                session.setdefault("system_prompt", instr)
            for k in ("cli_version", "originator", "source", "model_provider"):
                if meta.get(k) is not None:
                    extra.setdefault(k, meta[k])
            if isinstance(payload.get("git"), Mapping):
                extra.setdefault("git", dict(payload["git"]))
        elif kind == "turn_context":
            if isinstance(payload.get("model"), str):
                model = payload["model"]
            if payload.get("effort") is not None:
                extra["effort"] = payload["effort"]
        elif kind == "response_item":
            before = len(b.messages)
            reader.item(payload, key, ts=ts, model=model, line=e.line)
            if len(b.messages) > before and b.messages[-1].role == "tool":
                last = b.messages[-1]
                code = _exit_code(last.text)
                if code is not None:
                    b.replace_at(len(b.messages) - 1, replace(last, is_error=last.is_error or code != 0,
                                                              details={**last.details, "exit_code": code}))
        elif kind == "event_msg":
            etype = payload.get("type")
            if etype == "token_count":
                reader.close()
                info = map_or_none(payload.get("info"))
                if info is None:
                    b.skipped["event_msg:token_count"] += 1
                    continue
                window = as_int(info.get("model_context_window"))
                if window:
                    session["context_window"] = window
                total = info.get("total_token_usage")
                last_usage = info.get("last_token_usage")
                if total is not None and total == last_total or not isinstance(last_usage, Mapping) or not b.messages:
                    b.skipped["event_msg:token_count"] += 1
                    continue
                last_total = total
                rec = usage_record(last_usage, len(b.messages) - 1, model=model, timestamp=ts, context_window=window)
                if rec:
                    b.usage(rec)
            else:
                b.skipped[f"event_msg:{etype}"] += 1
        elif kind == "compacted":
            reader.close()
            _compacted(b, payload, key, ts, model)
    if recognized == 0:
        raise ImportFormatError(f"{source.name}: not a Codex rollout (no session_meta/response_item lines)")
    return [b.build(final=final, model=model, extra=extra, **session)]


def _compacted(b: SessionBuilder, payload: Mapping[str, Any], key: str, ts: str | None, model: str | None) -> None:
    """Read ``replacement_history`` with a scratch builder: what Codex kept, not new messages."""
    scratch = SessionBuilder(FORMAT, b.source)
    reader = ItemReader(scratch, meta=meta_kind)
    encrypted = False
    history = payload.get("replacement_history")
    for i, item in enumerate(history if isinstance(history, list) else ()):
        if isinstance(item, Mapping) and item.get("type") == "compaction":
            encrypted = True
            continue
        reader.item(item, f"{key}.kept.{i}", ts=ts, model=model)
    for u, n in scratch.unknown.items():
        b.unknown[u] += n
    message = payload.get("message")
    b.compaction(summary=message if isinstance(message, str) and message else None, source_id=key, timestamp=ts,
                 kept=tuple(scratch.messages),
                 details={"encrypted": encrypted,
                          "replacement_items": len(history) if isinstance(history, list) else 0})
