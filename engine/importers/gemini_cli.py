"""``gemini-cli``: Gemini CLI saved sessions and checkpoints (``~/.gemini/tmp/<project>/…``).

Shapes handled:

- **session files** ``chats/session-<time>-<id>.jsonl`` (since spring 2026): a first line of metadata
  ``{sessionId, projectHash, startTime, lastUpdated, kind?}``, then one record per line: a message
  ``{id, timestamp, type, content, …}`` (a message written again with the same ``id`` replaces it: the
  CLI re-appends a message when its tokens or tool calls arrive), ``{"$set": {…}}`` metadata updates
  (``summary``; ``messages``: the whole history rebuilt), ``{"$rewindTo": id}`` (that message and
  everything after it were rewound). A sub-agent's file is ``chats/<parent session id>/<id>.jsonl``;
- **legacy session files** ``chats/session-*.json``: one document ``{sessionId, projectHash,
  startTime, lastUpdated, messages [...], summary?}``, rewritten as the session goes;
- **saved chats** (``/chat save <tag>``) ``checkpoint-<tag>.json``: a list of API contents ``[{role:
  user | model, parts [{text} | {text, thought} | {functionCall {id?, name, args}} |
  {functionResponse {id?, name, response}} | {inlineData} | {fileData}]}]``, or ``{history: [...],
  authType}``; **restore checkpoints** ``checkpoints/<time>-<file>-<tool>.json``: ``{history (UI
  items), clientHistory [contents], commitHash, toolCall {name, args}, messageId?}``.

Mapping (session files): message ``type`` ``user`` → a user message (its ``content``: a string or a
list of parts; the ``<session_context>`` environment setup is ``meta`` ``environment_context``); a
user message made only of ``functionResponse`` parts (newer CLIs record tool responses so) → the tool
results; ``gemini`` → an assistant message: ``content`` text, ``thoughts [{subject, description}]`` as
reasoning summaries, ``toolCalls [{id, name, args, status, result [{functionResponse}]}]`` as calls,
each result embedded in its call → a tool result right after (``is_error`` for status ``error``,
unless a ``functionResponse`` message answers it), ``tokens {input, output, cached, thoughts, tool,
total}`` → a usage record (prompt = ``input``, which includes ``cached``); ``info`` / ``error`` /
``warning`` (the CLI's notices) → ``skipped``.

**Chat compression** rewrites the history as ``[user: <state_snapshot>…</state_snapshot>, gemini:
"Got it. Thanks for the additional context!", …the kept recent turns]`` (a ``$set`` of ``messages``):
that is a recorded compaction (trigger ``auto``; the summary is the snapshot, the acknowledgement is
what it kept besides it; it replaced the messages the rebuilt history left out; ``tokens_before`` is
the prompt the last response before it reported, which is what the CLI compares with its
threshold). The snapshot and its acknowledgement are not messages. A ``$set`` that drops messages
without a snapshot (an aborted turn rolled back) and ``$rewindTo`` leave those messages out
(``skipped["rolled_back"]``, ``skipped["rewound"]``). In a saved chat, a ``<state_snapshot>`` user
content is a compaction whose replaced messages are not in the file. Legacy ``.json`` sessions
recorded no compression.

Source keys: the message ``id`` (a tool result ``<id>:<call id>``); in saved chats ``C<index>``.
Session id: ``sessionId``; a saved chat ``<file stem>@<project folder>``.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Mapping

from ._common import (
    NameSet,
    SessionBuilder,
    Source,
    as_int,
    as_json_text,
    as_list,
    as_map,
    inline_image,
    map_or_none,
    str_or_none,
)
from .jsonl import iter_lines
from .model import ImportedMessage, ImportedSession, ImportedToolCall, ImportFormatError, Part, ReasoningPart, TextPart, UsageRecord

FORMAT = "gemini-cli"

#: where the Gemini CLI keeps them (``~/.gemini/tmp/<project hash or name>/``)
DEFAULT_LOCATIONS: list[str] = [
    "~/.gemini/tmp/*/chats/*.jsonl",
    "~/.gemini/tmp/*/chats/*.json",
    "~/.gemini/tmp/*/chats/*/*.jsonl",
    "~/.gemini/tmp/*/checkpoint-*.json",
    "~/.gemini/tmp/*/checkpoints/*.json",
]

SNAPSHOT = "<state_snapshot>"
ENV_CONTEXT = ("<session_context>", "This is the Gemini CLI. We are setting up the context")
NOTICE_TYPES = NameSet({"info", "error", "warning"})


# -- detection -----------------------------------------------------------------------------------
def looks_like_line(obj: object) -> bool:
    """A line of a session file: the metadata line, a ``$set`` / ``$rewindTo`` record."""
    if not isinstance(obj, Mapping):
        return False
    return (isinstance(obj.get("sessionId"), str) and isinstance(obj.get("projectHash"), str)) or \
        isinstance(obj.get("$rewindTo"), str) or isinstance(obj.get("$set"), Mapping)


def _looks_like_contents(data: object) -> bool:
    if not isinstance(data, list) or not data:
        return False
    head = [c for c in data[:20]]
    ok = sum(isinstance(c, Mapping) and c.get("role") in ("user", "model") and isinstance(c.get("parts"), list) for c in head)
    return ok * 2 > len(head) and any(isinstance(c, Mapping) and c.get("role") == "model" for c in data[:50]) or (
        ok == len(head))


def looks_like_document(data: object) -> bool:
    if isinstance(data, Mapping):
        if looks_like_line(data) and isinstance(data.get("messages"), list):
            return True
        if isinstance(data.get("clientHistory"), list) and (isinstance(data.get("toolCall"), Mapping)
                                                             or isinstance(data.get("commitHash"), str)):
            return True  # a restore checkpoint (a tool's, or a manual one with ``name`` and no ``toolCall``)
        if isinstance(data.get("history"), list) and set(data) <= {"history", "authType"}:
            return _looks_like_contents(data["history"]) or not data["history"]
        return False
    return _looks_like_contents(data)


# -- parsing -------------------------------------------------------------------------------------
def parse(source: Source, *, final: bool = True) -> list[ImportedSession]:
    data = source.read_bytes()
    text = data.decode("utf-8", errors="replace")
    doc: Any = None
    try:
        doc = json.loads(text)
    except ValueError:
        pass
    if doc is not None and looks_like_document(doc) and not (isinstance(doc, Mapping) and "messages" not in doc
                                                             and looks_like_line(doc)):
        if isinstance(doc, Mapping) and isinstance(doc.get("messages"), list):
            return [_session(source, [(None, doc)], final=final, legacy=True)]
        return [_saved_chat(source, doc)]
    entries = list(iter_lines(data, final=final))
    if not any(e.error is None and (looks_like_line(e.value) or isinstance(e.value, Mapping) and "id" in e.value
                                    and "type" in e.value) for e in entries):
        raise ImportFormatError(f"{source.name}: not a Gemini CLI session or checkpoint")
    return [_session(source, [(e.line, e.value if e.error is None else e.error) for e in entries], final=final)]


class _State:
    def __init__(self) -> None:
        self.records: dict[str, dict] = {}  # id → last version written, in first-seen order
        self.order: list[str] = []  # the live history
        self.dropped: set[str] = set()  # rewound, rolled back, or the compactions' own messages
        self.compactions: list[dict[str, Any]] = []  # {"after": n records seen, "replaced": [ids], ...}
        self.meta: dict[str, Any] = {}


def _session(source: Source, lines: list[tuple[int | None, Any]], *, final: bool, legacy: bool = False) -> ImportedSession:
    b = SessionBuilder(FORMAT, source)
    st = _State()
    last_prompt: int | None = None
    for line, obj in lines:
        if isinstance(obj, str):  # a malformed line: its error text
            b.warn(obj, line)
            continue
        if not isinstance(obj, Mapping):
            b.warn("not a session record (not an object)", line)
            continue
        if legacy:
            st.meta.update({k: v for k, v in obj.items() if k != "messages"})
            for n, m in enumerate(as_list(obj.get("messages"))):
                if isinstance(m, Mapping) and isinstance(m.get("id"), str):
                    last_prompt = _record(st, m, last_prompt)
                else:
                    b.warn(f"messages[{n}] is not a message record (no id); skipped")
            continue
        if isinstance(obj.get("$rewindTo"), str):
            rid = obj["$rewindTo"]
            cut = st.order.index(rid) if rid in st.order else 0
            gone = st.order[cut:]
            st.dropped.update(gone)
            b.skipped["rewound"] += len(gone)
            st.order = st.order[:cut]
        elif isinstance(obj.get("$set"), Mapping):
            upd = obj["$set"]
            if isinstance(upd.get("messages"), list):
                _rebuild(st, b, upd["messages"], last_prompt, line)
            st.meta.update({k: v for k, v in upd.items() if k != "messages"})
        elif isinstance(obj.get("id"), str) and "type" in obj:
            last_prompt = _record(st, obj, last_prompt)
        elif looks_like_line(obj):
            st.meta.update(obj)
        else:
            b.warn("not a session record (no id, $set or $rewindTo)", line)
    _emit(b, st)
    parent = None
    if st.meta.get("kind") == "subagent" and source.path is not None and source.path.parent.name != "chats":
        parent = source.path.parent.name
    sid = str_or_none(st.meta.get("sessionId")) or (source.path.stem if source.path is not None else None)
    model = next((m.model for m in reversed(b.messages) if m.model), None)
    extra = {k: st.meta[k] for k in ("projectHash", "startTime", "lastUpdated", "kind", "directories") if st.meta.get(k)}
    return b.build(final=final, source_session_id=sid, parent_session_id=parent, model=model,
                   title=str_or_none(st.meta.get("summary")), extra=extra)


def _record(st: _State, m: Mapping[str, Any], last_prompt: int | None) -> int | None:
    mid = m["id"]
    if mid not in st.records:
        st.order.append(mid)
    st.records[mid] = dict(m)
    tokens = map_or_none(m.get("tokens"))
    if m.get("type") == "gemini" and tokens and as_int(tokens.get("input")):
        return as_int(tokens.get("input"))
    return last_prompt


def _is_snapshot(m: Mapping[str, Any]) -> bool:
    return m.get("type") == "user" and SNAPSHOT in _plain_text(m.get("content"))


def _rebuild(st: _State, b: SessionBuilder, messages: list, last_prompt: int | None, line: int | None) -> None:
    """A ``$set`` of the whole history: a compression (a new ``<state_snapshot>``), or a rollback."""
    new_ids: list[str] = []
    snapshot: Mapping[str, Any] | None = None
    ack: Mapping[str, Any] | None = None
    done = {c["summary_id"] for c in st.compactions}
    for m in messages:
        if not isinstance(m, Mapping) or not isinstance(m.get("id"), str):
            continue
        mid = m["id"]
        new_ids.append(mid)
        if snapshot is None and _is_snapshot(m) and mid not in done:
            snapshot = m
        elif snapshot is not None and ack is None and m.get("type") == "gemini" and mid != snapshot["id"]:
            ack = m
        if mid not in st.records:
            st.records[mid] = dict(m)
        elif st.records[mid].get("content") != m.get("content"):
            b.skipped["rewritten_content"] += 1  # masked or truncated tool output: the first version is kept
    keep = set(new_ids)
    gone = [i for i in st.order if i not in keep]
    if snapshot is not None:
        st.dropped.update({snapshot["id"]} | ({ack["id"]} if ack is not None else set()))
        st.compactions.append({"summary_id": snapshot["id"], "summary": _plain_text(snapshot.get("content")),
                               "replaced": [i for i in gone if i not in st.dropped], "ack": ack,
                               "timestamp": str_or_none(snapshot.get("timestamp")), "tokens_before": last_prompt,
                               "after": _last_live(st, gone), "line": line})
    else:
        st.dropped.update(gone)
        b.skipped["rolled_back"] += len(gone)
    st.order = [i for i in new_ids]


def _last_live(st: _State, gone: list[str]) -> str | None:
    """The last message id before the compaction (the compaction sits after it)."""
    ids = [i for i in st.records if i not in st.dropped]
    return ids[-1] if ids else None


def _emit(b: SessionBuilder, st: _State) -> None:
    answered = {str(fr.get("id")) for m in st.records.values() if m.get("type") == "user"
                for fr in _function_responses(m.get("content")) if fr.get("id")}
    first_of: dict[str, int] = {}
    pending_after: dict[str | None, list[dict]] = {}
    for c in st.compactions:
        pending_after.setdefault(c["after"], []).append(c)
    for c in pending_after.pop(None, []):
        _compaction(b, c, first_of)
    for mid, m in st.records.items():
        if mid not in st.dropped:
            before = len(b.messages)
            _message(b, m, answered)
            if len(b.messages) > before:  # a notice adds nothing
                first_of[mid] = before
        for c in pending_after.pop(mid, []):
            _compaction(b, c, first_of)
    for rest in pending_after.values():
        for c in rest:
            _compaction(b, c, first_of)


def _compaction(b: SessionBuilder, c: Mapping[str, Any], first_of: Mapping[str, int]) -> None:
    idx = sorted(first_of[i] for i in c["replaced"] if i in first_of)
    pos = len(b.messages)
    kept: tuple[ImportedMessage, ...] = ()
    if c["ack"] is not None:
        kept = (ImportedMessage(role="assistant", parts=(TextPart(_plain_text(c["ack"].get("content"))),),
                                source_key=str(c["ack"]["id"]), timestamp=str_or_none(c["ack"].get("timestamp"))),)
    b.compaction(replaced_start=idx[0] if idx else pos, replaced_end=idx[-1] + 1 if idx else pos, trigger="auto",
                 tokens_before=c["tokens_before"], summary=c["summary"] or None, source_id=str(c["summary_id"]),
                 timestamp=c["timestamp"], kept=kept, forgotten_ids=tuple(i for i in c["replaced"] if i in first_of),
                 details={"replaced_messages": len(idx), "tokens_before_from": "the last response's prompt"})


# -- content -------------------------------------------------------------------------------------
def _as_parts_list(content: object) -> list:
    if isinstance(content, str):
        return [{"text": content}]
    if isinstance(content, Mapping):
        return [content]
    return [p if not isinstance(p, str) else {"text": p} for p in as_list(content)]


def _plain_text(content: object) -> str:
    return "\n".join(p["text"] for p in _as_parts_list(content)
                     if isinstance(p, Mapping) and isinstance(p.get("text"), str) and not p.get("thought"))


def _function_responses(content: object) -> list[Mapping]:
    return [p["functionResponse"] for p in _as_parts_list(content)
            if isinstance(p, Mapping) and isinstance(p.get("functionResponse"), Mapping)]


def _parts(content: object) -> tuple[Part, ...]:
    out: list[Part] = []
    for p in _as_parts_list(content):
        if not isinstance(p, Mapping):
            continue
        if isinstance(p.get("text"), str) and p["text"]:
            out.append(ReasoningPart(p["text"], signed=bool(p.get("thoughtSignature"))) if p.get("thought")
                       else TextPart(p["text"]))
        elif isinstance(p.get("inlineData"), Mapping):
            d = p["inlineData"]
            out.append(inline_image(str_or_none(d.get("mimeType")), str_or_none(d.get("data"))))
        elif isinstance(p.get("fileData"), Mapping):
            d = p["fileData"]
            out.append(TextPart(f"[file {d.get('fileUri') or ''} ({d.get('mimeType') or '?'})]"))
    return tuple(out)


def _response_text(fr: Mapping[str, Any]) -> tuple[str, bool]:
    resp = fr.get("response")
    if isinstance(resp, Mapping):
        if isinstance(resp.get("output"), str):
            return resp["output"], False
        if isinstance(resp.get("error"), str):
            return resp["error"], True
        return as_json_text(dict(resp)), False
    return as_json_text(resp) if resp is not None else "", False


def _message(b: SessionBuilder, m: Mapping[str, Any], answered: set[str]) -> None:
    mid, mtype = str(m["id"]), m.get("type")
    ts = str_or_none(m.get("timestamp"))
    content = m.get("content")
    parts: tuple[Part, ...]
    if mtype == "user":
        responses = _function_responses(content)
        if responses:
            for n, fr in enumerate(responses):
                text, err = _response_text(fr)
                b.add(ImportedMessage(role="tool", parts=(TextPart(text),) if text else (),
                                      tool_call_id=str(fr.get("id") or f"{mid}:{n}"), tool_name=str_or_none(fr.get("name")),
                                      is_error=err, source_key=f"{mid}:{fr.get('id') or n}", source_ids=(mid,), timestamp=ts))
            parts = _parts(content)
            if not parts:
                return
        else:
            parts = _parts(content)
        text = _plain_text(content).lstrip()
        meta_kind = "environment_context" if text.startswith(ENV_CONTEXT) else None
        b.add(ImportedMessage(role="user", parts=parts, source_key=mid, source_ids=(mid,), timestamp=ts,
                              meta=meta_kind is not None, meta_kind=meta_kind))
    elif mtype == "gemini":
        parts = tuple(
            ReasoningPart(": ".join(x for x in (str_or_none(t.get("subject")), str_or_none(t.get("description"))) if x),
                          summary=True)
            for t in as_list(m.get("thoughts")) if isinstance(t, Mapping))
        parts += _parts(content)
        calls = [c for c in as_list(m.get("toolCalls")) if isinstance(c, Mapping)]
        tcs = tuple(ImportedToolCall(id=str(c.get("id") or f"{mid}#{n}"), name=str(c.get("name") or "?"),
                                     arguments=as_json_text(c.get("args") if c.get("args") is not None else {}),
                                     synthetic_id=not c.get("id"))
                    for n, c in enumerate(calls))
        model = str_or_none(m.get("model"))
        i = b.add(ImportedMessage(role="assistant", parts=parts, tool_calls=tcs, source_key=mid, source_ids=(mid,),
                                  timestamp=ts, model=model))
        tokens = map_or_none(m.get("tokens"))
        if tokens and as_int(tokens.get("input")) is not None:
            b.usage(UsageRecord(position=i, prompt_tokens=as_int(tokens.get("input")) or 0,
                                completion_tokens=as_int(tokens.get("output")),
                                cache_read_tokens=as_int(tokens.get("cached")),
                                reasoning_tokens=as_int(tokens.get("thoughts")), model=model, timestamp=ts))
        for c, tc in zip(calls, tcs):
            if tc.id in answered:
                continue  # a functionResponse message answers it
            result = c.get("result")
            if result is None:
                continue  # no result yet (or never): the repair marks it
            responses = _function_responses(result)
            if responses:
                texts = [_response_text(fr) for fr in responses]
                text, err = "\n".join(t for t, _ in texts), any(e for _, e in texts)
            else:
                text, err = _plain_text(result), False
            status = str_or_none(c.get("status"))
            b.add(ImportedMessage(role="tool", parts=(TextPart(text),) if text else (), tool_call_id=tc.id,
                                  tool_name=tc.name, is_error=err or status == "error", source_key=f"{mid}:{tc.id}",
                                  source_ids=(mid,), timestamp=str_or_none(c.get("timestamp")) or ts,
                                  details={"status": status} if status else {}))
    elif mtype in NOTICE_TYPES:
        b.skipped[str(mtype)] += 1
    else:
        b.unknown[str(mtype)] += 1


# -- saved chats and restore checkpoints ---------------------------------------------------------
def _saved_chat(source: Source, doc: Any) -> ImportedSession:
    b = SessionBuilder(FORMAT, source)
    extra: dict[str, Any] = {}
    if isinstance(doc, Mapping) and "clientHistory" in doc:
        contents = as_list(doc.get("clientHistory"))
        tool = as_map(doc.get("toolCall"))
        extra.update({"checkpoint": "restore", "pending_tool": str_or_none(tool.get("name")),
                      "commitHash": str_or_none(doc.get("commitHash")), "checkpoint_name": str_or_none(doc.get("name")),
                      "messageId": str_or_none(doc.get("messageId"))})
    elif isinstance(doc, Mapping):
        contents = as_list(doc.get("history"))
        extra["checkpoint"] = "chat save"
        if doc.get("authType") is not None:
            extra["authType"] = str(doc["authType"])
    else:
        contents, extra["checkpoint"] = doc, "chat save"
    pending: list[tuple[str, str]] = []  # (call id, name) not answered yet
    counter: Counter[str] = Counter()
    skip_ack = False
    for n, c in enumerate(contents):
        key = f"C{n}"
        if not isinstance(c, Mapping) or c.get("role") not in ("user", "model"):
            b.warn(f"contents[{n}] is not a content (role user / model with parts); skipped")
            continue
        parts_raw = [p for p in as_list(c.get("parts")) if isinstance(p, Mapping)]
        if c["role"] == "model":
            if skip_ack:
                skip_ack = False
                b.compaction_drafts[-1]["kept"] = (ImportedMessage(role="assistant", parts=_parts(parts_raw), source_key=key),)
                continue
            calls: list[ImportedToolCall] = []
            for p in parts_raw:
                fc = p.get("functionCall")
                if isinstance(fc, Mapping):
                    counter["call"] += 1
                    cid = str(fc.get("id") or f"gc-{n}-{len(calls)}")
                    calls.append(ImportedToolCall(id=cid, name=str(fc.get("name") or "?"),
                                                  arguments=as_json_text(fc.get("args") if fc.get("args") is not None else {}),
                                                  synthetic_id=not fc.get("id")))
            pending = [(t.id, t.name) for t in calls]
            b.add(ImportedMessage(role="assistant", parts=_parts(parts_raw), tool_calls=tuple(calls), source_key=key))
            continue
        responses = [p["functionResponse"] for p in parts_raw if isinstance(p.get("functionResponse"), Mapping)]
        for k, fr in enumerate(responses):
            cid = fr.get("id")
            if not cid or (str(cid) not in {p[0] for p in pending} and any(p[1] == fr.get("name") for p in pending)):
                # no id, or the CLI's own call id (``<name>-<ms>-<hex>``) on a response whose call has none:
                # the first open call of that name
                match = next((p for p in pending if p[1] == fr.get("name")), pending[0] if pending else None)
                cid = match[0] if match else f"gc-{n}-r{k}"
            pending = [p for p in pending if p[0] != cid]
            text, err = _response_text(fr)
            b.add(ImportedMessage(role="tool", parts=(TextPart(text),) if text else (), tool_call_id=str(cid),
                                  tool_name=str_or_none(fr.get("name")), is_error=err, source_key=f"{key}:{k}"))
        rest = _parts([p for p in parts_raw if "functionResponse" not in p])
        if not rest:
            continue
        text = _plain_text(parts_raw)
        if SNAPSHOT in text:
            b.compaction(replaced_start=len(b.messages), replaced_end=len(b.messages), trigger="auto", summary=text,
                         source_id=key, details={"replaced_messages": None,
                                                 "note": "the replaced history is not in a saved chat"})
            skip_ack = True
            continue
        meta_kind = "environment_context" if text.lstrip().startswith(ENV_CONTEXT) else None
        b.add(ImportedMessage(role="user", parts=rest, source_key=key, meta=meta_kind is not None, meta_kind=meta_kind))
    stem = source.path.stem if source.path is not None else "checkpoint"
    project = None
    if source.path is not None:
        folder = source.path.parent.parent if source.path.parent.name == "checkpoints" else source.path.parent
        project = folder.name
    sid = f"{stem}@{project[:16]}" if project else stem
    return b.build(final=True, source_session_id=sid, extra={k: v for k, v in extra.items() if v is not None})


__all__ = ["FORMAT", "DEFAULT_LOCATIONS", "looks_like_line", "looks_like_document", "parse"]
