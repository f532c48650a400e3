"""``anthropic``: an Anthropic Messages API request body (JSON object), or a log of requests and responses.

Shape handled::

    {"model", "system": str | [{"type": "text", "text"}], "tools": [{"name", "description",
     "input_schema"}], "max_tokens", "messages": [{"role": "user" | "assistant",
     "content": str | [block]}], "usage"?}

Blocks: ``text``; ``image`` / ``document`` with ``source`` ``base64`` (media type, decoded size and,
for images, the pixel size from the header are kept; the bytes are dropped), ``url``, ``file`` or
``text``; ``thinking`` (text, signature → ``signed``);
``redacted_thinking`` (an empty, ``redacted`` reasoning part); ``tool_use {id, name, input}``
(arguments = ``input`` as JSON text); ``tool_result {tool_use_id, content: str | [text | image],
is_error}``. Other blocks (``server_tool_use``, ``web_search_tool_result``, …) are counted in
``unknown`` as ``block:<type>``.

Mapping: ``system`` → ``ImportedSession.system_prompt``; ``tools`` → ``tools``; each user message
becomes its ``tool_result`` blocks as ``tool`` messages (one per block, in order) and its other blocks
as ``user`` messages between them; each assistant message becomes one ``assistant`` message (text,
reasoning, calls). A top-level ``usage`` (a logged response) becomes one usage record on the last
assistant message. Source keys are ``m<index>`` (a split user message: ``m<index>.<block>`` for
each result, ``m<index>.t<block>`` for the text after it).

**Logs** (:func:`parse_log`): logged exchanges ``{request, response}`` (each a body, or an HTTP
record ``{method, url, headers, body}`` / ``{status_code, headers, body}`` whose body may be JSON text
or a streamed Server-Sent Events body), one JSON object, a JSON array of them, or JSON Lines. The
requests' messages are merged into one history by content (the client resends it, or only what
follows a compaction block); each response is an assistant message. Server-side context management:
a ``compaction`` block (``compact_20260112``) is a recorded compaction before the message it opens
(its ``content`` the summary; ``encrypted_content`` only: no readable summary; neither: a *failed*
compaction that replaced nothing), tokens before = the ``usage.iterations`` compaction step's input;
each ``context_management.applied_edits`` entry (``clear_tool_uses_20250919``: cleared tool uses,
``clear_thinking_20251015``: cleared thinking turns, with ``cleared_input_tokens``) is a ``prune``
compaction of the oldest results / thinking turns (the API reports how many, not which), its trigger
from the request's edit. The usage of the compaction step and of the message are two usage records.

The block conversion here is shared with the ``claude-code`` parser.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ._common import (
    NameSet,
    SessionBuilder,
    Source,
    as_int,
    as_json_text,
    as_list,
    as_map,
    as_str,
    base64_size,
    inline_image,
    map_or_none,
)
from .jsonl import json_error_text
from .model import (
    DocumentPart,
    ImagePart,
    ImportedMessage,
    ImportedSession,
    ImportedToolCall,
    ImportFormatError,
    Part,
    ReasoningPart,
    TextPart,
    UsageRecord,
)

FORMAT = "anthropic"
#: request/response logs live where the program that logged them put them: no default location
#: (discovery finds them in folders the user adds, by content)
DEFAULT_LOCATIONS: tuple[str, ...] = ()
CONTENT_BLOCKS = NameSet({"text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking",
                          "compaction"})


@dataclass(slots=True)
class ToolResultBlock:
    tool_use_id: str
    parts: list[Part]
    is_error: bool
    index: int


@dataclass(slots=True)
class CompactionBlock:
    """A server-side compaction block (``compact_20260112``): ``content`` is the summary, ``None``
    when only ``encrypted_content`` was kept or when the compaction failed (neither)."""

    content: str | None
    encrypted: bool
    index: int

    @property
    def failed(self) -> bool:
        return self.content is None and not self.encrypted


@dataclass(slots=True)
class Converted:
    """One message's blocks, split by kind, in source order."""

    items: list[Part | ImportedToolCall | ToolResultBlock] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    #: compaction blocks: not content of the message, the source's own compaction before it
    compactions: list[CompactionBlock] = field(default_factory=list)


def media_part(block: Mapping[str, Any]) -> ImagePart | DocumentPart:
    src = as_map(block.get("source"))
    stype = src.get("type") or "base64"
    media = src.get("media_type")
    size: int | None = None
    url: str | None = None
    if stype == "base64":
        size = base64_size(src.get("data"))
    elif stype == "text":
        data = src.get("data")
        size = len(data.encode()) if isinstance(data, str) else None
        media = media or "text/plain"
    elif stype == "url":
        url = src.get("url")
    elif stype == "file":
        url = src.get("file_id")
    if block.get("type") == "image":
        if stype == "base64":
            return inline_image(media, src.get("data"))
        return ImagePart(media_type=media, byte_size=size, source=stype, url=url)
    return DocumentPart(media_type=media, byte_size=size, source=stype, title=block.get("title"), url=url)


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def convert_blocks(content: object) -> Converted:
    """Anthropic content (a string or a list of blocks) → parts, calls and tool results."""
    out = Converted()
    if isinstance(content, str):
        if content:
            out.items.append(TextPart(content))
        return out
    if not isinstance(content, list):
        return out
    for i, block in enumerate(content):
        if isinstance(block, str):
            out.items.append(TextPart(block))
            continue
        if not isinstance(block, Mapping):
            out.unknown.append(f"block:{type(block).__name__}")
            continue
        btype = block.get("type")
        if btype == "text":
            out.items.append(TextPart(str(block.get("text") or "")))
        elif btype in ("image", "document"):
            out.items.append(media_part(block))
        elif btype == "thinking":
            out.items.append(ReasoningPart(str(block.get("thinking") or ""), signed=bool(block.get("signature")),
                                           signature=_opt_str(block.get("signature"))))
        elif btype == "redacted_thinking":
            out.items.append(ReasoningPart("", redacted=True, encrypted=bool(block.get("data")), blob=_opt_str(block.get("data"))))
        elif btype == "tool_use":
            out.items.append(ImportedToolCall(id=str(block.get("id") or f"tool_use_{i}"), name=str(block.get("name") or "?"),
                                              arguments=as_json_text(block.get("input", {})),
                                              synthetic_id=not block.get("id")))
        elif btype == "tool_result":
            inner = convert_blocks(block.get("content"))
            out.unknown.extend(inner.unknown)
            parts = [p for p in inner.items if isinstance(p, (TextPart, ImagePart, DocumentPart, ReasoningPart))]
            out.items.append(ToolResultBlock(str(block.get("tool_use_id") or ""), parts, bool(block.get("is_error")), i))
        elif btype == "compaction":
            content = block.get("content")
            out.compactions.append(CompactionBlock(content if isinstance(content, str) and content else None,
                                                   bool(block.get("encrypted_content")), i))
        else:
            out.unknown.append(f"block:{btype}")
    return out


def usage_record(usage: Mapping[str, Any], position: int, **fields: Any) -> UsageRecord | None:
    """Anthropic ``usage``: prompt = input + cache read + cache creation."""
    inp = as_int(usage.get("input_tokens"))
    if inp is None:
        return None
    read = as_int(usage.get("cache_read_input_tokens")) or 0
    created = as_int(usage.get("cache_creation_input_tokens")) or 0
    return UsageRecord(position=position, prompt_tokens=inp + read + created,
                       completion_tokens=as_int(usage.get("output_tokens")),
                       cache_read_tokens=read, cache_creation_tokens=created, **fields)


def system_text(system: object) -> str | None:
    if isinstance(system, str):
        return system or None
    if isinstance(system, list):
        texts = [as_str(b.get("text")) for b in system if isinstance(b, Mapping) and b.get("type") == "text"]
        return "\n\n".join(t for t in texts if t) or None
    return None


def looks_like(data: object) -> bool:
    """A Messages request body: ``messages`` whose content uses Anthropic blocks, or a top-level
    ``system`` / ``tools`` with ``input_schema`` / ``max_tokens`` without OpenAI-only markers."""
    if not isinstance(data, Mapping) or not isinstance(data.get("messages"), list):
        return False
    msgs = data["messages"]
    roles = {m.get("role") for m in msgs if isinstance(m, Mapping)}
    if roles & {"system", "developer", "tool", "function"}:
        return False
    if any(isinstance(m, Mapping) and (m.get("tool_calls") or m.get("tool_call_id")) for m in msgs):
        return False
    for m in msgs:
        content = m.get("content") if isinstance(m, Mapping) else None
        if isinstance(content, list):
            for b in content:
                if isinstance(b, Mapping) and b.get("type") in ("tool_use", "tool_result", "thinking",
                                                                 "redacted_thinking", "document"):
                    return True
                if isinstance(b, Mapping) and b.get("type") == "image" and "source" in b:
                    return True
                if isinstance(b, Mapping) and b.get("type") in ("image_url", "input_text", "input_image"):
                    return False
    tools = data.get("tools")
    if isinstance(tools, list) and any(isinstance(t, Mapping) and "input_schema" in t for t in tools):
        return True
    return "system" in data


def parse(source: Source, *, final: bool = True) -> list[ImportedSession]:
    text = source.read_text()
    try:
        data = json.loads(text)
    except ValueError as exc:
        entries = _jsonl_entries(text)
        if entries is None:
            raise ImportFormatError(f"{source.name}: not a {FORMAT} file (not JSON: {json_error_text(exc, line=True)})") from exc
        return [parse_log(source, entries, final=final)]
    if looks_like_log(data):
        pairs = data if isinstance(data, list) else [data]
        return [parse_log(source, [(None, e) for e in pairs], final=final)]
    if not isinstance(data, Mapping) or not isinstance(data.get("messages"), list):
        raise ImportFormatError(f"{source.name}: not an Anthropic Messages request (no 'messages' list)")
    for i, raw in enumerate(data["messages"]):
        if isinstance(raw, Mapping) and (raw.get("role") in ("system", "developer", "tool", "function")
                                         or raw.get("tool_calls") or raw.get("tool_call_id")):
            raise ImportFormatError(f"{source.name}: not an Anthropic Messages request (messages[{i}] is an OpenAI "
                                    f"chat message: role {raw.get('role')!r})")
    b = SessionBuilder(FORMAT, source)
    model = data.get("model") if isinstance(data.get("model"), str) else None
    for i, raw in enumerate(data["messages"]):
        if not isinstance(raw, Mapping) or raw.get("role") not in ("user", "assistant"):
            b.warn(f"messages[{i}]: not a user or assistant message; skipped")
            b.skipped["invalid_message"] += 1
            continue
        at = len(b.messages)
        for blk in add_message(b, raw["role"], raw.get("content"), key=f"m{i}", model=model if raw["role"] == "assistant" else None):
            _record_compaction(b, blk, at, f"m{i}", None, {})
    if isinstance(data.get("usage"), Mapping):
        last = max((j for j, m in enumerate(b.messages) if m.role == "assistant"), default=None)
        rec = usage_record(data["usage"], last if last is not None else max(len(b.messages) - 1, 0), model=model,
                           response_id=data.get("id") if isinstance(data.get("id"), str) else None)
        if rec:
            b.usage(rec)
    tools = tuple(t for t in as_list(data.get("tools")) if isinstance(t, Mapping))
    return [b.build(final=final, model=model, system_prompt=system_text(data.get("system")), tools=tools)]


def add_message(b: SessionBuilder, role: str, content: object, *, key: str, **common: Any) -> list[CompactionBlock]:
    """Append one Anthropic-shaped message: assistant → one message; user → results and user parts.
    Returns the message's compaction blocks (the caller records them)."""
    conv = convert_blocks(content)
    for u in conv.unknown:
        b.unknown[u] += 1
    if role == "assistant":
        parts = tuple(p for p in conv.items if not isinstance(p, (ImportedToolCall, ToolResultBlock)))
        calls = tuple(p for p in conv.items if isinstance(p, ImportedToolCall))
        b.add(ImportedMessage(role="assistant", parts=parts, tool_calls=calls, source_key=key, **common))
        return conv.compactions
    common.pop("model", None)
    pending: list[Part] = []
    has_results = any(isinstance(p, ToolResultBlock) for p in conv.items)

    def flush(j: int) -> None:
        if pending:
            b.add(ImportedMessage(role="user", parts=tuple(pending), source_key=f"{key}.t{j}" if has_results else key,
                                  **common))
            pending.clear()

    for j, item in enumerate(conv.items):
        if isinstance(item, ToolResultBlock):
            flush(j)
            b.add(ImportedMessage(role="tool", parts=tuple(item.parts), tool_call_id=item.tool_use_id,
                                  is_error=item.is_error, source_key=f"{key}.{item.index}", **common))
        elif isinstance(item, ImportedToolCall):
            b.unknown["block:tool_use_in_user_message"] += 1
        else:
            pending.append(item)
    flush(len(conv.items))
    return conv.compactions


# -- request / response logs ---------------------------------------------------------------------
#: keys of a logged HTTP exchange (``{request {method, url, headers, body}, response {status_code,
#: headers, body}}``) around the bodies
_HTTP_KEYS = ("body", "method", "url", "headers", "status_code", "status")
_VOLATILE = frozenset({"cache_control", "citations"})


def _body(part: object) -> Any:
    """A logged request or response → its JSON body (an HTTP wrapper is unwrapped, a string body
    parsed; a streamed body, Server-Sent Events text, is assembled into the message it streamed)."""
    if isinstance(part, Mapping) and "body" in part and any(k in part for k in _HTTP_KEYS[1:]):
        part = part["body"]
    if isinstance(part, str):
        stripped = part.lstrip()
        if stripped.startswith(("event:", "data:")):
            return _from_sse(part)
        try:
            return json.loads(part)
        except ValueError:
            return None
    return part


def _status(part: object) -> int | None:
    if isinstance(part, Mapping):
        return as_int(part.get("status_code")) or as_int(part.get("status"))
    return None


def _headers_say_anthropic(part: object) -> bool:
    headers = part.get("headers") if isinstance(part, Mapping) else None
    if isinstance(headers, Mapping):
        return any(str(k).lower() in ("anthropic-version", "anthropic-beta", "x-api-key") for k in headers)
    return False


def looks_like_log_entry(obj: object) -> bool:
    """One logged Messages API exchange: ``{request, response}`` whose request body has Anthropic
    ``messages`` (its URL is ``…/v1/messages``, its headers Anthropic's, its response a ``message``, or
    its content uses Anthropic blocks)."""
    if not isinstance(obj, Mapping) or "request" not in obj:
        return False
    req = _body(obj.get("request"))
    if not isinstance(req, Mapping) or not isinstance(req.get("messages"), list):
        return False
    raw = obj.get("request")
    url = raw.get("url") if isinstance(raw, Mapping) else None
    resp = _body(obj.get("response"))
    return ((isinstance(url, str) and "/v1/messages" in url) or _headers_say_anthropic(raw)
            or (isinstance(resp, Mapping) and resp.get("type") in ("message", "error") and "choices" not in resp)
            or "context_management" in req or looks_like(req))


def _pair_shaped(obj: object) -> bool:
    """``{request, …}`` whose request body has a ``messages`` list (one entry of a log that another
    entry showed to be Anthropic's)."""
    if not isinstance(obj, Mapping) or "request" not in obj:
        return False
    req = _body(obj.get("request"))
    return isinstance(req, Mapping) and isinstance(req.get("messages"), list)


def looks_like_log(data: object) -> bool:
    if isinstance(data, list):
        head = data[:8]
        return bool(head) and all(_pair_shaped(e) for e in head) and any(looks_like_log_entry(e) for e in head)
    return looks_like_log_entry(data)


def _jsonl_entries(text: str) -> list[tuple[int | None, Any]] | None:
    """JSON Lines of logged exchanges → (line, entry or None for a malformed line); None when no
    line is one."""
    out: list[tuple[int | None, Any]] = []
    found = False
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            out.append((n, None))
            continue
        found = found or looks_like_log_entry(obj)
        out.append((n, obj))
    return out if found else None


def _from_sse(text: str) -> dict[str, Any] | None:
    """A streamed Messages response (``message_start``, ``content_block_start`` / ``_delta`` /
    ``_stop``, ``message_delta``; a compaction block streams as one ``compaction_delta``) → the
    message it streamed."""
    msg: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    partial_json: dict[int, str] = {}
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue
        try:
            ev = json.loads(line[5:].strip())
        except ValueError:
            continue
        if not isinstance(ev, Mapping):
            continue
        t = ev.get("type")
        if t == "message_start" and isinstance(ev.get("message"), Mapping):
            msg = dict(ev["message"])
        elif t == "content_block_start" and isinstance(ev.get("content_block"), Mapping):
            blocks[as_int(ev.get("index")) or 0] = dict(ev["content_block"])
        elif t == "content_block_delta" and isinstance(ev.get("delta"), Mapping):
            i, d = as_int(ev.get("index")) or 0, ev["delta"]
            blk = blocks.setdefault(i, {})
            dt = d.get("type")
            if dt == "text_delta":
                blk["text"] = str(blk.get("text") or "") + str(d.get("text") or "")
            elif dt == "thinking_delta":
                blk["thinking"] = str(blk.get("thinking") or "") + str(d.get("thinking") or "")
            elif dt == "signature_delta":
                blk["signature"] = d.get("signature")
            elif dt == "input_json_delta":
                partial_json[i] = partial_json.get(i, "") + str(d.get("partial_json") or "")
            elif dt == "compaction_delta":
                blk["content"] = d.get("content")
                if d.get("encrypted_content"):
                    blk["encrypted_content"] = d.get("encrypted_content")
        elif t == "message_delta":
            msg = msg if msg is not None else {}
            delta = as_map(ev.get("delta"))
            msg.update({k: v for k, v in delta.items() if v is not None})
            if isinstance(ev.get("usage"), Mapping):
                msg["usage"] = {**(msg.get("usage") or {}), **ev["usage"]}
            if isinstance(ev.get("context_management"), Mapping):
                msg["context_management"] = ev["context_management"]
    if msg is None:
        return None
    for i, raw in partial_json.items():
        try:
            blocks.setdefault(i, {})["input"] = json.loads(raw) if raw else {}
        except ValueError:
            blocks.setdefault(i, {})["input"] = raw
    msg["content"] = [blocks[i] for i in sorted(blocks)]
    return msg


def _norm(value: object) -> Any:
    if isinstance(value, Mapping):
        return {k: _norm(v) for k, v in sorted(value.items()) if k not in _VOLATILE and v is not None}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    return value


def message_digest(role: object, content: object) -> str:
    """What identifies a message across the requests of one conversation (the client resends it):
    its role and content, without cache markers, citations or null fields."""
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    raw = json.dumps([role, _norm(content)], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha1(raw.encode("utf-8")).hexdigest()


def _overlap(merged: list[str], incoming: list[str]) -> int:
    """How many leading messages of a request the conversation already holds: all of it when the
    request repeats the whole history; else the longest tail of the history that the request starts
    with (a client that dropped the messages before a compaction block)."""
    n = len(merged)
    if incoming[:n] == merged:
        return n
    for k in range(min(n, len(incoming)), 0, -1):
        if merged[n - k:] == incoming[:k]:
            return k
    return 0


def _trigger_text(trigger: object, default: str | None) -> str | None:
    if isinstance(trigger, Mapping) and as_int(trigger.get("value")) is not None:
        return f"{trigger.get('type') or 'input_tokens'} ≥ {as_int(trigger.get('value')):,}"
    return default


def _edits(req: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    cm = req.get("context_management")
    edits = cm.get("edits") if isinstance(cm, Mapping) else None
    return {str(e.get("type")): e for e in as_list(edits) if isinstance(e, Mapping) and e.get("type")}


def _record_compaction(b: SessionBuilder, blk: CompactionBlock, position: int, key: str, ts: str | None,
                       edit: Mapping[str, Any], usage: Mapping[str, Any] | None = None) -> None:
    """A compaction block at ``position`` (the assistant message it opens): it replaced everything
    before it; a failed one (no content, nothing encrypted) replaced nothing (the API ignores it)."""
    iterations = [i for i in as_list((usage or {}).get("iterations")) if isinstance(i, Mapping)]
    comp = next((i for i in iterations if i.get("type") == "compaction"), None)
    after = next((i for i in iterations if i.get("type") == "message"), None)
    details: dict[str, Any] = {"edit": str(edit.get("type") or "compact_20260112"), "block": blk.index}
    if blk.failed:
        details["failed"] = True
    if blk.encrypted:
        details["encrypted"] = True
    if comp is not None:
        details["summary_input_tokens"] = as_int(comp.get("input_tokens"))
        details["summary_output_tokens"] = as_int(comp.get("output_tokens"))
    if after is not None:
        details["tokens_after"] = as_int(after.get("input_tokens"))
    if isinstance(edit.get("instructions"), str):
        details["instructions"] = edit["instructions"]
    if edit.get("pause_after_compaction"):
        details["pause_after_compaction"] = True
    b.compaction(position=position, replaced_start=position if blk.failed else 0, replaced_end=position,
                 kind="summary", trigger=_trigger_text(edit.get("trigger"), "auto"),
                 tokens_before=as_int(comp.get("input_tokens")) if comp is not None else None,
                 summary=blk.content, source_id=f"{key}:compaction:{blk.index}", timestamp=ts, details=details)


def _tool_results(b: SessionBuilder, upto: int, exclude: set[str]) -> list[int]:
    """Indexes of the tool results before ``upto`` whose call's tool is not excluded, oldest first."""
    names = {c.id: c.name for m in b.messages[:upto] for c in m.tool_calls}
    return [j for j, m in enumerate(b.messages[:upto])
            if m.role == "tool" and names.get(m.tool_call_id or "") not in exclude]


def _record_edit(b: SessionBuilder, applied: Mapping[str, Any], upto: int, key: str, n: int, ts: str | None,
                 edit: Mapping[str, Any], prompt_after: int | None) -> None:
    """One applied context edit → a ``prune`` compaction of the oldest results (or thinking turns)
    it cleared: the API says how many, never which; the oldest first is its documented order."""
    etype = str(applied.get("type") or "")
    cleared_tokens = as_int(applied.get("cleared_input_tokens"))
    details: dict[str, Any] = {"edit": etype, "cleared_input_tokens": cleared_tokens}
    ids: list[str] = []
    hit: list[int] = []
    if etype.startswith("clear_tool_uses"):
        count = as_int(applied.get("cleared_tool_uses")) or 0
        details["cleared_tool_uses"] = count
        exclude = {str(t) for t in as_list(edit.get("exclude_tools"))}
        hit = _tool_results(b, upto, exclude)[:count]
        ids = [b.messages[j].tool_call_id or "" for j in hit]
        if edit.get("clear_tool_inputs"):
            details["clear_tool_inputs"] = edit.get("clear_tool_inputs")
        default = "input_tokens ≥ 100,000"
    else:  # clear_thinking_…
        count = as_int(applied.get("cleared_thinking_turns")) or 0
        details["cleared_thinking_turns"] = count
        hit = [j for j, m in enumerate(b.messages[:upto]) if m.role == "assistant" and m.reasoning][:count]
        default = "every request with thinking"
    if isinstance(edit.get("keep"), (Mapping, str)):
        details["keep"] = edit["keep"]
    details["which"] = "inferred: the oldest first (the API reports only how many)"
    before = prompt_after + cleared_tokens if prompt_after is not None and cleared_tokens is not None else None
    b.compaction(position=upto, replaced_start=hit[0] if hit else upto, replaced_end=hit[-1] + 1 if hit else upto,
                 kind="prune", trigger=_trigger_text(edit.get("trigger"), default), tokens_before=before,
                 source_id=f"{key}:edit:{n}:{etype}", timestamp=ts, forgotten_ids=tuple(ids), details=details)


def parse_log(source: Source, entries: Iterable[tuple[int | None, Any]], *, final: bool = True) -> ImportedSession:
    """Logged exchanges of one conversation, in order, → one session.

    Each request carries the history the client holds; the messages the conversation does not hold
    yet are added (keys ``m<n>``, n their place in the merged history, so a grown log keeps its
    keys), then the response as one assistant message. A response's compaction blocks, its
    ``context_management.applied_edits`` and its usage (``usage.iterations`` split off the compaction
    step) are recorded on that message. An error response is counted in ``skipped`` and warned."""
    b = SessionBuilder(FORMAT, source)
    merged: list[str] = []
    model: str | None = None
    system: str | None = None
    tools: tuple[Mapping[str, Any], ...] = ()
    items = list(entries)
    for n, (line, entry) in enumerate(items):
        where = f"entry {n}" if line is None else None
        if entry is None:
            if final or n != len(items) - 1:  # a half-written last line of a growing log waits
                b.warn("malformed JSON; skipped", line)
                b.skipped["malformed_line"] += 1
            continue
        if not _pair_shaped(entry):
            b.warn(f"{where + ': ' if where else ''}not a logged Messages request; skipped", line)
            b.skipped["invalid_entry"] += 1
            continue
        req = _body(entry["request"])
        model = req.get("model") if isinstance(req.get("model"), str) else model
        system = system_text(req.get("system")) or system
        tools = tuple(t for t in as_list(req.get("tools")) if isinstance(t, Mapping)) or tools
        ts = next((entry.get(k) for k in ("timestamp", "time", "created_at") if isinstance(entry.get(k), str)), None)
        msgs = [m for m in req["messages"] if isinstance(m, Mapping) and m.get("role") in ("user", "assistant")]
        if len(msgs) != len(req["messages"]):
            b.warn(f"{where + ': ' if where else ''}a message that is not a user or assistant message; skipped", line)
            b.skipped["invalid_message"] += len(req["messages"]) - len(msgs)
        digests = [message_digest(m["role"], m.get("content")) for m in msgs]
        k = _overlap(merged, digests)
        edits = _edits(req)
        for m, d in zip(msgs[k:], digests[k:]):
            key = f"m{len(merged)}"
            at = len(b.messages)
            for blk in add_message(b, m["role"], m.get("content"), key=key, model=model if m["role"] == "assistant" else None,
                                   timestamp=ts):
                _record_compaction(b, blk, at, key, ts, edits.get("compact_20260112", {}))
            merged.append(d)
        resp_raw = entry.get("response")
        resp = _body(resp_raw)
        status = _status(resp_raw)
        if resp is None:
            continue
        if not isinstance(resp, Mapping) or resp.get("type") == "error" or (status is not None and status >= 400):
            err = as_map(resp.get("error") if isinstance(resp, Mapping) else None)
            b.warn(f"{where + ': ' if where else ''}the response is an error ({status or '?'}"
                   f"{': ' + str(err.get('message')) if err.get('message') else ''}); its request is kept", line)
            b.skipped["error_response"] += 1
            continue
        rmodel = resp.get("model") if isinstance(resp.get("model"), str) else model
        rid = resp.get("id") if isinstance(resp.get("id"), str) else None
        key = f"m{len(merged)}"
        at = len(b.messages)
        blocks = add_message(b, "assistant", resp.get("content"), key=key, model=rmodel, response_id=rid, timestamp=ts,
                             details={"stop_reason": resp["stop_reason"]} if isinstance(resp.get("stop_reason"), str) else {})
        merged.append(message_digest("assistant", resp.get("content")))
        usage = map_or_none(resp.get("usage"))
        for blk in blocks:
            _record_compaction(b, blk, at, key, ts, edits.get("compact_20260112", {}), usage)
        prompt_after = None
        if usage is not None:
            comp = next((i for i in as_list(usage.get("iterations")) if isinstance(i, Mapping) and i.get("type") == "compaction"), None)
            if comp is not None:  # the summarizing step is a request of its own, before the message's
                rec = usage_record(comp, at, model=rmodel, response_id=rid, timestamp=ts)
                if rec:
                    b.usage(rec)
            paused = comp is not None and not any(isinstance(i, Mapping) and i.get("type") == "message"
                                                  for i in as_list(usage.get("iterations")))
            rec = None if paused else usage_record(usage, at, model=rmodel, response_id=rid, timestamp=ts)
            if rec:
                b.usage(rec)
                prompt_after = rec.prompt_tokens
        cm = resp.get("context_management")
        for j, applied in enumerate(as_list(cm.get("applied_edits")) if isinstance(cm, Mapping) else []):
            if isinstance(applied, Mapping):
                _record_edit(b, applied, at, key, j, ts, edits.get(str(applied.get("type")), {}), prompt_after)
    if not b.messages and not b.warnings:
        raise ImportFormatError(f"{source.name}: no logged Anthropic Messages exchange in it")
    return b.build(final=final, model=model, system_prompt=system, tools=tools,
                   extra={"exchanges": sum(1 for _, e in items if e is not None)})
