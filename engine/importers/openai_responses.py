"""``openai-responses``: an OpenAI Responses API request and/or response (JSON).

Shape handled: an object with ``instructions``, ``input`` (a string or a list of items), ``output``
(items), ``tools``, ``model``, ``id``, ``usage {input_tokens, output_tokens,
input_tokens_details.cached_tokens, output_tokens_details.reasoning_tokens}``; or a bare list of
items. Items:

- ``message {role: user | assistant | system | developer, content: str | [input_text |
  output_text | input_image {image_url | file_id} | input_file {file_data | file_id | file_url,
  filename} | refusal]}`` (``type`` may be omitted: "easy input messages");
- ``function_call {call_id, name, arguments, id}``, ``custom_tool_call {call_id, name, input}``,
  ``local_shell_call {call_id, action}`` → calls; ``function_call_output`` /
  ``custom_tool_call_output {call_id, output: str | [parts] | {content, success}}`` → tool results;
- ``reasoning {summary: [{summary_text}], content: [{reasoning_text}], encrypted_content}`` → a
  reasoning part (``summary`` when only the summary exists, ``encrypted`` when the rest is opaque);
- ``compaction {encrypted_content}`` → a recorded compaction with no readable summary;
- ``ghost_snapshot`` (Codex workspace snapshots) → ``skipped``; anything else (``web_search_call``,
  ``file_search_call``, ``computer_call``, …) → ``unknown``.

Mapping: consecutive assistant-side items (reasoning, assistant message, calls) become one
``assistant`` message with parallel calls, like one chat completion; a user / developer message or a
tool result closes it. ``instructions`` → ``system_prompt``; ``usage`` → one usage record on the last
output message. Source keys: ``input.<i>`` / ``output.<i>`` of the item that opened the message.

The item conversion (:class:`ItemReader`) is shared with the ``codex`` parser.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping

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
    image_from_url,
)
from .model import (
    DocumentPart,
    ImportedMessage,
    ImportedSession,
    ImportedToolCall,
    ImportFormatError,
    Part,
    ReasoningPart,
    TextPart,
    UsageRecord,
)

FORMAT = "openai-responses"
ITEM_TYPES = NameSet({"message", "function_call", "function_call_output", "custom_tool_call",
                        "custom_tool_call_output", "local_shell_call", "reasoning", "compaction"})


#: items that carry no conversation (Codex's workspace snapshots)
BOOKKEEPING_ITEMS = NameSet({"ghost_snapshot"})


def content_parts(content: object, unknown: Callable[[str], None]) -> tuple[Part, ...]:
    if isinstance(content, str):
        return (TextPart(content),) if content else ()
    parts: list[Part] = []
    for p in content if isinstance(content, list) else ():
        if not isinstance(p, Mapping):
            continue
        t = p.get("type")
        if t in ("input_text", "output_text", "text", "summary_text"):
            parts.append(TextPart(str(p.get("text") or "")))
        elif t == "refusal":
            parts.append(TextPart(str(p.get("refusal") or "")))
        elif t == "input_image":
            if p.get("image_url"):
                parts.append(image_from_url(p.get("image_url")))
            else:
                parts.append(replace(image_from_url(None), source="file", url=p.get("file_id")))
        elif t == "input_file":
            data = p.get("file_data")
            media = None
            size = None
            if isinstance(data, str) and data.startswith("data:"):
                img = image_from_url(data)
                media, size = img.media_type, img.byte_size
            elif isinstance(data, str):
                size = base64_size(data)
            src = "base64" if data else ("url" if p.get("file_url") else "file")
            parts.append(DocumentPart(media_type=media, byte_size=size, source=src, title=p.get("filename"),
                                      url=p.get("file_url") or p.get("file_id")))
        else:
            unknown(f"part:{t}")
    return tuple(parts)


def reasoning_part(item: Mapping[str, Any]) -> ReasoningPart:
    full = [as_str(c.get("text")) for c in as_list(item.get("content")) if isinstance(c, Mapping)]
    summary = [as_str(s.get("text")) if isinstance(s, Mapping) else as_str(s) for s in as_list(item.get("summary"))]
    blob = item.get("encrypted_content") if isinstance(item.get("encrypted_content"), str) and item.get("encrypted_content") else None
    encrypted = blob is not None
    if any(full):
        return ReasoningPart("\n\n".join(t for t in full if t), encrypted=encrypted, blob=blob)
    return ReasoningPart("\n\n".join(t for t in summary if t), summary=True, encrypted=encrypted, blob=blob)


def output_text(output: object, unknown: Callable[[str], None]) -> tuple[tuple[Part, ...], bool]:
    """A tool output → (parts, is_error). ``{content, success: false}`` is an error."""
    if isinstance(output, Mapping):
        parts, _ = output_text(output.get("content"), unknown)
        return parts, output.get("success") is False
    if isinstance(output, list):
        return content_parts(output, unknown), False
    if output is None:
        return (), False
    return (TextPart(str(output)),), False


class ItemReader:
    """Feeds Responses items into a builder, merging each model turn into one assistant message."""

    def __init__(self, b: SessionBuilder, *, meta: Callable[[str, str], str | None] | None = None) -> None:
        self.b = b
        self.meta = meta or (lambda role, text: None)
        self.open: int | None = None  # index of the assistant message being filled

    def close(self) -> None:
        self.open = None

    def _assistant(self, key: str, ts: str | None, model: str | None, response_id: str | None) -> int:
        if self.open is None:
            self.open = self.b.add(ImportedMessage(role="assistant", parts=(), source_key=key, timestamp=ts,
                                                   model=model, response_id=response_id))
        return self.open

    def _extend(self, parts: tuple[Part, ...] = (), calls: tuple[ImportedToolCall, ...] = (),
                source_id: str | None = None) -> None:
        assert self.open is not None
        old = self.b.messages[self.open]
        self.b.replace_at(self.open, replace(old, parts=old.parts + parts, tool_calls=old.tool_calls + calls,
                                             source_ids=old.source_ids + ((source_id,) if source_id else ())))

    def item(self, item: object, key: str, *, ts: str | None = None, model: str | None = None,
             response_id: str | None = None, line: int | None = None) -> None:
        b = self.b
        if not isinstance(item, Mapping):
            b.warn(f"{key}: item is not an object", line)
            return
        t = item.get("type") or ("message" if "role" in item else None)
        sid = item.get("id") if isinstance(item.get("id"), str) else None
        unknown = b.unknown.update
        if t == "message":
            role = item.get("role")
            parts = content_parts(item.get("content"), lambda u: unknown([u]))
            if role == "assistant":
                self._assistant(key, ts, model, response_id)
                self._extend(parts, source_id=sid)
                return
            self.close()
            if role not in ("user", "system", "developer"):
                b.warn(f"{key}: message with unknown role {role!r}; skipped", line)
                b.skipped[f"message:{role}"] += 1
                return
            text = "\n\n".join(p.text for p in parts if isinstance(p, TextPart))
            kind = self.meta(role, text) if role == "user" else None
            b.add(ImportedMessage(role=role, parts=parts, source_key=key, meta=kind is not None, meta_kind=kind,
                                  source_ids=(sid,) if sid else (), timestamp=ts))
        elif t == "reasoning":
            self._assistant(key, ts, model, response_id)
            self._extend((reasoning_part(item),), source_id=sid)
        elif t in ("function_call", "custom_tool_call", "local_shell_call"):
            call_id = item.get("call_id") or sid
            if t == "function_call":
                call = ImportedToolCall(id=str(call_id or key), name=str(item.get("name") or "?"),
                                        arguments=as_json_text(item.get("arguments", "{}")), source_id=sid,
                                        synthetic_id=not call_id)
            elif t == "custom_tool_call":
                call = ImportedToolCall(id=str(call_id or key), name=str(item.get("name") or "?"),
                                        arguments=str(item.get("input") or ""), kind="custom", source_id=sid,
                                        synthetic_id=not call_id)
            else:
                call = ImportedToolCall(id=str(call_id or key), name="local_shell",
                                        arguments=as_json_text(item.get("action") or {}), kind="local_shell",
                                        source_id=sid, synthetic_id=not call_id)
            self._assistant(key, ts, model, response_id)
            self._extend(calls=(call,))
        elif t in ("function_call_output", "custom_tool_call_output"):
            self.close()
            parts, is_error = output_text(item.get("output"), lambda u: unknown([u]))
            b.add(ImportedMessage(role="tool", parts=parts, source_key=key, tool_call_id=str(item.get("call_id") or ""),
                                  is_error=is_error, source_ids=(sid,) if sid else (), timestamp=ts))
        elif t == "compaction":
            self.close()
            b.compaction(summary=None, source_id=sid, timestamp=ts, details={"encrypted": bool(item.get("encrypted_content"))})
        elif t in BOOKKEEPING_ITEMS:
            b.skipped[f"item:{t}"] += 1
        else:
            b.unknown[f"item:{t}"] += 1


def usage_record(usage: Mapping[str, Any], position: int, **fields: Any) -> UsageRecord | None:
    """Responses / Codex usage: ``input_tokens`` already include the cached ones."""
    inp = as_int(usage.get("input_tokens"))
    if inp is None:
        return None
    details = as_map(usage.get("input_tokens_details"))
    out_details = as_map(usage.get("output_tokens_details"))
    cached = as_int(usage.get("cached_input_tokens"))
    if cached is None:
        cached = as_int(details.get("cached_tokens"))
    reasoning = as_int(usage.get("reasoning_output_tokens"))
    if reasoning is None:
        reasoning = as_int(out_details.get("reasoning_tokens"))
    return UsageRecord(position=position, prompt_tokens=inp, completion_tokens=as_int(usage.get("output_tokens")),
                       cache_read_tokens=cached, reasoning_tokens=reasoning, **fields)


def looks_like(data: object) -> bool:
    if isinstance(data, Mapping):
        if data.get("object") == "response" or isinstance(data.get("output"), list):
            return True
        items = data.get("input")
        return isinstance(items, list) and "messages" not in data and _items_like(items)
    return isinstance(data, list) and _items_like(data)


def _items_like(items: list) -> bool:
    typed = [i for i in items if isinstance(i, Mapping) and "type" in i]
    if not typed:
        return False
    if any(i.get("type") in ITEM_TYPES and i.get("type") != "message" for i in typed):
        return True
    return any(isinstance(p, Mapping) and p.get("type") in ("input_text", "output_text", "input_image")
               for i in typed for p in as_list(i.get("content")))


def _compaction_trigger(b: SessionBuilder, body: Mapping[str, Any]) -> None:
    """Why the compaction items of this body were made: a ``/responses/compact`` result
    (``object: "response.compaction"``) was asked for (trigger ``manual``, tokens before = its
    ``usage.input_tokens``); a create request's ``context_management`` compaction fires at its
    ``compact_threshold`` (trigger ``compact_threshold ≥ N``, else ``auto``)."""
    usage = as_map(body.get("usage"))
    cm = [e for e in as_list(body.get("context_management")) if isinstance(e, Mapping) and e.get("type") == "compaction"]
    for draft in b.compaction_drafts:
        if body.get("object") == "response.compaction":
            draft.update(trigger="manual", tokens_before=as_int(usage.get("input_tokens")),
                         details={**draft.get("details", {}), "endpoint": "/responses/compact"})
        elif cm:
            threshold = as_int(cm[0].get("compact_threshold"))
            draft.update(trigger=f"compact_threshold ≥ {threshold:,}" if threshold is not None else "auto")


def parse(source: Source, *, final: bool = True) -> list[ImportedSession]:
    data = source.load_json(FORMAT)
    if not looks_like(data):
        raise ImportFormatError(f"{source.name}: not an OpenAI Responses request or response (no input/output items)")
    b = SessionBuilder(FORMAT, source)
    reader = ItemReader(b)
    body: Mapping[str, Any] = data if isinstance(data, Mapping) else {"input": data}
    model = body.get("model") if isinstance(body.get("model"), str) else None
    rid = body.get("id") if isinstance(body.get("id"), str) else None
    inp = body.get("input")
    if isinstance(inp, str):
        b.add(ImportedMessage(role="user", parts=(TextPart(inp),), source_key="input"))
    for i, item in enumerate(inp if isinstance(inp, list) else ()):
        reader.item(item, f"input.{i}", model=model)
    reader.close()
    for i, item in enumerate(as_list(body.get("output"))):
        reader.item(item, f"output.{i}", model=model, response_id=rid)
    _compaction_trigger(b, body)
    if isinstance(body.get("usage"), Mapping) and b.messages:
        rec = usage_record(body["usage"], len(b.messages) - 1, model=model, response_id=rid)
        if rec:
            b.usage(rec)
    instructions = body.get("instructions") if isinstance(body.get("instructions"), str) else None
    tools = tuple(t for t in as_list(body.get("tools")) if isinstance(t, Mapping))
    return [b.build(final=final, model=model, system_prompt=instructions or None, tools=tools,
                    source_session_id=rid)]
