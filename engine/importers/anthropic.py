"""``anthropic``: an Anthropic Messages API request body (JSON object).

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

The block conversion here is shared with the ``claude-code`` parser.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ._common import NameSet, SessionBuilder, Source, as_int, as_json_text, as_list, as_str, base64_size, inline_image
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
CONTENT_BLOCKS = NameSet({"text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking"})


@dataclass(slots=True)
class ToolResultBlock:
    tool_use_id: str
    parts: list[Part]
    is_error: bool
    index: int


@dataclass(slots=True)
class Converted:
    """One message's blocks, split by kind, in source order."""

    items: list[Part | ImportedToolCall | ToolResultBlock] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


def media_part(block: Mapping[str, Any]) -> ImagePart | DocumentPart:
    src = block.get("source") if isinstance(block.get("source"), Mapping) else {}
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


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def convert_blocks(content: Any) -> Converted:
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


def system_text(system: Any) -> str | None:
    if isinstance(system, str):
        return system or None
    if isinstance(system, list):
        texts = [as_str(b.get("text")) for b in system if isinstance(b, Mapping) and b.get("type") == "text"]
        return "\n\n".join(t for t in texts if t) or None
    return None


def looks_like(data: Any) -> bool:
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
    data = source.load_json(FORMAT)
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
        add_message(b, raw["role"], raw.get("content"), key=f"m{i}", model=model if raw["role"] == "assistant" else None)
    if isinstance(data.get("usage"), Mapping):
        last = max((j for j, m in enumerate(b.messages) if m.role == "assistant"), default=None)
        rec = usage_record(data["usage"], last if last is not None else max(len(b.messages) - 1, 0), model=model,
                           response_id=data.get("id") if isinstance(data.get("id"), str) else None)
        if rec:
            b.usage(rec)
    tools = tuple(t for t in as_list(data.get("tools")) if isinstance(t, Mapping))
    return [b.build(final=final, model=model, system_prompt=system_text(data.get("system")), tools=tools)]


def add_message(b: SessionBuilder, role: str, content: Any, *, key: str, **common: Any) -> None:
    """Append one Anthropic-shaped message: assistant → one message; user → results and user parts."""
    conv = convert_blocks(content)
    for u in conv.unknown:
        b.unknown[u] += 1
    if role == "assistant":
        parts = tuple(p for p in conv.items if not isinstance(p, (ImportedToolCall, ToolResultBlock)))
        calls = tuple(p for p in conv.items if isinstance(p, ImportedToolCall))
        b.add(ImportedMessage(role="assistant", parts=parts, tool_calls=calls, source_key=key, **common))
        return
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
