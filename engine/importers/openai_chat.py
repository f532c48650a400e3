"""``openai-chat``: OpenAI chat-completions messages (a JSON array, or a request body).

Shape handled: ``[message…]`` or ``{"model", "messages": [message…], "tools": [{"type": "function",
"function": {name, description, parameters}}], "usage"?}``; a message is ``{role: system |
developer | user | assistant | tool | function, content: str | null | [text | image_url {url} |
input_audio | file {filename, file_data | file_id}], name?, tool_calls?: [{id, type: "function",
function {name, arguments}}], tool_call_id?, reasoning_content? | reasoning?, refusal?}``.

Mapping: roles kept (``function`` → ``tool``, its ``name`` as the call id when there is none);
``image_url`` parts become image references (a ``data:`` URL gives media type and decoded size; the
bytes are dropped), ``file`` parts document references, ``input_audio`` is counted as ``unknown``;
``reasoning_content`` / ``reasoning`` (DeepSeek, vLLM, OpenRouter) become a reasoning part before the
text; ``arguments`` given as an object are turned into JSON text. ``tools`` → ``ImportedSession.tools``;
a top-level ``usage {prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens}`` →
one usage record on the last assistant message. Source keys are ``m<index>``.

:func:`chat_message` is shared with the ``swe-agent`` and ``openhands`` parsers.
"""

from __future__ import annotations

from typing import Any, Mapping, cast

from ._common import NameSet, SessionBuilder, Source, as_int, as_json_text, as_list, as_map, base64_size, image_from_url
from .model import (
    DocumentPart,
    ImportedMessage,
    ImportedRole,
    ImportedSession,
    ImportedToolCall,
    ImportFormatError,
    Part,
    ReasoningPart,
    TextPart,
    UsageRecord,
)

FORMAT = "openai-chat"
ROLES = NameSet({"system", "developer", "user", "assistant", "tool", "function"})
ANTHROPIC_ONLY = NameSet({"tool_use", "tool_result", "thinking", "redacted_thinking"})


def chat_parts(content: object, b: SessionBuilder) -> tuple[Part, ...]:
    if isinstance(content, str):
        return (TextPart(content),) if content else ()
    parts: list[Part] = []
    for p in content if isinstance(content, list) else ():
        if isinstance(p, str):
            parts.append(TextPart(p))
            continue
        if not isinstance(p, Mapping):
            continue
        t = p.get("type")
        if t == "text":
            parts.append(TextPart(str(p.get("text") or "")))
        elif t == "image_url":
            iu = p.get("image_url")
            parts.append(image_from_url(iu.get("url") if isinstance(iu, Mapping) else iu))
        elif t == "file":
            f = as_map(p.get("file"))
            data = f.get("file_data")
            media, size = None, None
            if isinstance(data, str) and data.startswith("data:"):
                ref = image_from_url(data)
                media, size = ref.media_type, ref.byte_size
            elif isinstance(data, str):
                size = base64_size(data)
            parts.append(DocumentPart(media_type=media, byte_size=size, source="base64" if data else "file",
                                      title=f.get("filename"), url=f.get("file_id")))
        else:
            b.unknown[f"part:{t}"] += 1
    return tuple(parts)


def chat_calls(calls: object, b: SessionBuilder, key: str) -> tuple[ImportedToolCall, ...]:
    out: list[ImportedToolCall] = []
    for j, c in enumerate(calls if isinstance(calls, list) else ()):
        if not isinstance(c, Mapping):
            b.warn(f"{key}: tool call {j} is not an object; skipped")
            continue
        fn = as_map(c.get("function"))
        cid = c.get("id")
        out.append(ImportedToolCall(id=str(cid or f"{key}.call{j}"), name=str(fn.get("name") or c.get("name") or "?"),
                                    arguments=as_json_text(fn.get("arguments", c.get("arguments", "{}"))),
                                    synthetic_id=not cid))
    return tuple(out)


def chat_message(raw: Mapping[str, Any], b: SessionBuilder, key: str, **common: Any) -> ImportedMessage | None:
    """One chat-completions message (``None`` with a warning when it is not one)."""
    role = raw.get("role")
    if role not in ROLES:
        b.warn(f"{key}: unknown role {role!r}; skipped")
        b.skipped[f"role:{role}"] += 1
        return None
    parts = chat_parts(raw.get("content"), b)
    reasoning = raw.get("reasoning_content") or raw.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        parts = (ReasoningPart(reasoning),) + parts
    if isinstance(raw.get("refusal"), str) and raw["refusal"]:
        parts = parts + (TextPart(raw["refusal"]),)
    name = raw.get("name") if isinstance(raw.get("name"), str) else None
    if role in ("tool", "function"):
        call_id = raw.get("tool_call_id") or (name if role == "function" else None)
        return ImportedMessage(role="tool", parts=parts, source_key=key, tool_call_id=str(call_id or ""),
                               tool_name=name, name=name, **common)
    calls = chat_calls(raw.get("tool_calls"), b, key) if role == "assistant" else ()
    if role == "assistant" and isinstance(raw.get("function_call"), Mapping):  # legacy single call
        fc = raw["function_call"]
        calls = calls + (ImportedToolCall(id=str(fc.get("name") or key), name=str(fc.get("name") or "?"),
                                          arguments=as_json_text(fc.get("arguments", "{}")), synthetic_id=True),)
    # ROLES less "tool" and "function" (returned above): an imported role
    return ImportedMessage(role=cast(ImportedRole, role), parts=parts, source_key=key, tool_calls=calls, name=name,
                           **common)


def usage_record(usage: Mapping[str, Any], position: int, **fields: Any) -> UsageRecord | None:
    prompt = as_int(usage.get("prompt_tokens"))
    if prompt is None:
        return None
    details = as_map(usage.get("prompt_tokens_details"))
    out = as_map(usage.get("completion_tokens_details"))
    return UsageRecord(position=position, prompt_tokens=prompt, completion_tokens=as_int(usage.get("completion_tokens")),
                       cache_read_tokens=as_int(details.get("cached_tokens")),
                       reasoning_tokens=as_int(out.get("reasoning_tokens")), **fields)


def looks_like(data: object) -> bool:
    msgs = data.get("messages") if isinstance(data, Mapping) else data
    if not isinstance(msgs, list) or not msgs:
        return False
    if not all(isinstance(m, Mapping) and "role" in m and "type" not in m for m in msgs):
        return False
    return sum(m["role"] in ROLES for m in msgs) * 2 > len(msgs)  # mostly chat roles (odd ones are warned about)


def parse(source: Source, *, final: bool = True) -> list[ImportedSession]:
    data = source.load_json(FORMAT)
    msgs = data.get("messages") if isinstance(data, Mapping) else data
    if not isinstance(msgs, list) or not any(isinstance(m, Mapping) and "role" in m for m in msgs):
        raise ImportFormatError(f"{source.name}: not OpenAI chat messages (no messages with a role)")
    for i, raw in enumerate(msgs):
        content = raw.get("content") if isinstance(raw, Mapping) else None
        for part in content if isinstance(content, list) else ():
            if isinstance(part, Mapping) and part.get("type") in ANTHROPIC_ONLY:
                raise ImportFormatError(f"{source.name}: not OpenAI chat messages (messages[{i}] has an Anthropic "
                                        f"{part['type']!r} block)")
    b = SessionBuilder(FORMAT, source)
    body: Mapping[str, Any] = data if isinstance(data, Mapping) else {}
    model = body.get("model") if isinstance(body.get("model"), str) else None
    for i, raw in enumerate(msgs):
        if not isinstance(raw, Mapping):
            b.warn(f"messages[{i}] is not an object; skipped")
            continue
        m = chat_message(raw, b, f"m{i}", model=model if raw.get("role") == "assistant" else None)
        if m is not None:
            b.add(m)
    if isinstance(body.get("usage"), Mapping):
        last = max((j for j, m in enumerate(b.messages) if m.role == "assistant"), default=len(b.messages) - 1)
        rec = usage_record(body["usage"], max(last, 0), model=model)
        if rec:
            b.usage(rec)
    tools = tuple(t for t in as_list(body.get("tools")) if isinstance(t, Mapping))
    return [b.build(final=final, model=model, tools=tools)]
