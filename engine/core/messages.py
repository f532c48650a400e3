"""Frozen domain types: messages, tool calls, the surface and the envelope.

These types are pure data. They never touch a database, a disk or a network. The store converts
its rows into :class:`Message`; the compactor builds :class:`Surface`; the harness sends an
:class:`Envelope` to a provider.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal, Mapping, Protocol, TypeGuard

from .errors import EngineError

Role = Literal["system", "developer", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "developer", "user", "assistant", "tool"})


class Tagged(Protocol):
    """What a reader of a message's role and metadata alone needs: a :class:`Message`, or a row read
    for counting only (``engine.store.reads.CountedRow``)."""

    @property
    def role(self) -> str: ...

    @property
    def metadata(self) -> Mapping[str, Any]: ...


def is_role(value: object) -> TypeGuard[Role]:
    """Is ``value`` one of the message roles (:data:`ROLES`)?"""
    return isinstance(value, str) and value in ROLES

#: metadata keys the engine itself sets on messages that are *not* persisted history
META_SYNTHETIC = "synthetic"  # the synthetic user message after a summary
META_EPHEMERAL = "ephemeral"  # an in-memory system message of a running run
META_SUMMARY = "summary"  # the rolling summary rendered as a message
META_PRUNED = "pruned"  # a tool result whose surface text is a preview (value: sha256)

#: ``Attachment.kind`` and ``Attachment.source`` values
ATTACHMENT_KINDS: frozenset[str] = frozenset({"image", "document"})
ATTACHMENT_SOURCES: frozenset[str] = frozenset({"base64", "url", "file"})


class InvalidMessage(EngineError, ValueError):
    """A message that cannot exist: unknown role, tool result without call id, bad tool call."""

    code = "invalid_message"


def _freeze(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call an assistant asked for. ``arguments`` is the raw JSON text the model produced."""

    id: str
    name: str
    arguments: str = "{}"

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidMessage("tool call needs a non-empty string id")
        if not isinstance(self.name, str) or not self.name:
            raise InvalidMessage(f"tool call {self.id!r} needs a non-empty name")
        if not isinstance(self.arguments, str):
            raise InvalidMessage(f"tool call {self.id!r}: arguments must be JSON text")

    def parsed_arguments(self) -> dict[str, Any] | None:
        """The arguments as a dict, or ``None`` when the model produced malformed JSON."""
        try:
            value = json.loads(self.arguments) if self.arguments.strip() else {}
        except (ValueError, TypeError):
            return None
        return value if isinstance(value, dict) else None

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> "ToolCall":
        if not isinstance(data, Mapping):
            raise InvalidMessage(f"tool call must be an object, got {type(data).__name__}")
        fn = data.get("function") or {}
        if not isinstance(fn, Mapping):
            raise InvalidMessage("tool call 'function' must be an object")
        args = fn.get("arguments", "{}")
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False)
        return cls(id=str(data.get("id") or ""), name=str(fn.get("name") or ""), arguments=args)


@dataclass(frozen=True, slots=True)
class Reasoning:
    """A thinking / reasoning block an assistant produced.

    ``text`` is the reasoning as the provider showed it (may be empty); ``summary`` a reasoning
    summary (OpenAI Responses), ``encrypted`` the opaque provider blob (Anthropic
    ``redacted_thinking.data``, Responses ``encrypted_content``) kept only for lossless round
    trips, ``redacted`` marks a block whose text the provider withheld, ``signature`` Anthropic's
    thinking signature."""

    text: str = ""
    summary: str | None = None
    encrypted: str | None = None
    redacted: bool = False
    signature: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise InvalidMessage("reasoning text must be text")
        for name in ("summary", "encrypted", "signature"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise InvalidMessage(f"reasoning {name} must be text or None")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "reasoning", "text": self.text}
        if self.summary is not None:
            out["summary"] = self.summary
        if self.encrypted is not None:
            out["encrypted"] = self.encrypted
        if self.redacted:
            out["redacted"] = True
        if self.signature is not None:
            out["signature"] = self.signature
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Reasoning":
        """Tolerant: wrong types become the defaults."""
        def opt(key: str) -> str | None:
            v = data.get(key)
            return v if isinstance(v, str) else None

        text = data.get("text")
        return cls(text=text if isinstance(text, str) else "", summary=opt("summary"), encrypted=opt("encrypted"),
                   redacted=data.get("redacted") is True, signature=opt("signature"))


@dataclass(frozen=True, slots=True)
class Attachment:
    """An image or document sent to the model. Never the bytes: what it is and how big, so its
    presence and its token cost do not vanish (:mod:`engine.core.meter` counts it).

    ``source`` says where the bytes were: ``base64`` (inline), ``url`` (``url`` holds it) or
    ``file`` (a provider file id or a path, in ``url``)."""

    kind: Literal["image", "document"]
    media_type: str | None = None
    byte_size: int | None = None
    width: int | None = None
    height: int | None = None
    source: Literal["base64", "url", "file"] = "base64"
    url: str | None = None
    title: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ATTACHMENT_KINDS:
            raise InvalidMessage(f"unknown attachment kind {self.kind!r} (expected image or document)")
        if self.source not in ATTACHMENT_SOURCES:
            raise InvalidMessage(f"unknown attachment source {self.source!r} (expected base64, url or file)")
        for name in ("byte_size", "width", "height"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise InvalidMessage(f"attachment {name} must be a non-negative integer or None")
        for name in ("media_type", "url", "title"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise InvalidMessage(f"attachment {name} must be text or None")
        if self.url is not None and self.url.startswith("data:"):
            raise InvalidMessage("an attachment never holds its bytes (a data: URL)")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.kind, "source": self.source}
        for name in ("media_type", "byte_size", "width", "height", "url", "title"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Attachment":
        """Tolerant: wrong types become None, an unknown source ``file``."""
        def opt_int(key: str) -> int | None:
            v = data.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None

        def opt_str(key: str) -> str | None:
            v = data.get(key)
            return v if isinstance(v, str) else None

        source = data.get("source")
        url = opt_str("url")
        return cls(
            kind="document" if data.get("type") == "document" else "image",
            media_type=opt_str("media_type"),
            byte_size=opt_int("byte_size"),
            width=opt_int("width"),
            height=opt_int("height"),
            source=source if source in ATTACHMENT_SOURCES else "file",
            url=None if url is not None and url.startswith("data:") else url,
            title=opt_str("title"),
        )

    def describe(self) -> str:
        """One line for a model that cannot see it (or a text-only rendering)."""
        what = [self.media_type or self.kind]
        if self.width and self.height:
            what.append(f"{self.width}x{self.height}")
        if self.byte_size is not None:
            what.append(f"{self.byte_size} bytes")
        if self.title:
            what.append(repr(self.title))
        return f"[{self.kind}: {', '.join(what)}; not kept]"


@dataclass(frozen=True, slots=True)
class Message:
    """One message. ``id`` is the persisted, monotonic id (physical order); ``None`` for messages
    that are not persisted history (ephemeral system messages, the synthetic user message, the
    rendered summary).

    Beyond the text: ``reasoning`` (an assistant's thinking blocks), ``attachments`` (images and
    documents, without their bytes), ``is_error`` (a tool result that reports a failure),
    ``meta_kind`` (set on a message that is not part of the conversation proper; on a user /
    system / developer message: not a request, e.g. an imported command, its output, an injected
    context or skill text, ``orphan_result``; on any role: an in-context ``demo``; see
    docs/import.md) and ``source_key`` (an importer's stable key, unique within a thread: a
    re-import skips what it already wrote). ``name`` on a tool result is the tool's name."""

    role: Role
    content: str
    id: int | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    reasoning: tuple[Reasoning, ...] = ()
    attachments: tuple[Attachment, ...] = ()
    is_error: bool = False
    meta_kind: str | None = None
    source_key: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise InvalidMessage(f"unknown role {self.role!r} (expected one of {', '.join(sorted(ROLES))})")
        if not isinstance(self.content, str):
            raise InvalidMessage(f"message content must be text, got {type(self.content).__name__}")
        if self.role == "tool" and not self.tool_call_id:
            raise InvalidMessage("a tool message must answer a tool_call_id")
        if self.tool_calls and self.role != "assistant":
            raise InvalidMessage(f"only assistant messages carry tool_calls (got role {self.role!r})")
        if not isinstance(self.tool_calls, tuple):
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        if not isinstance(self.metadata, MappingProxyType):
            object.__setattr__(self, "metadata", _freeze(self.metadata))
        if not isinstance(self.reasoning, tuple):
            object.__setattr__(self, "reasoning", tuple(self.reasoning))
        if not isinstance(self.attachments, tuple):
            object.__setattr__(self, "attachments", tuple(self.attachments))
        if self.reasoning and not all(isinstance(r, Reasoning) for r in self.reasoning):
            raise InvalidMessage("reasoning must be Reasoning blocks")
        if self.attachments and not all(isinstance(a, Attachment) for a in self.attachments):
            raise InvalidMessage("attachments must be Attachment records")
        if self.meta_kind is not None and (not isinstance(self.meta_kind, str) or not self.meta_kind):
            raise InvalidMessage("meta_kind must be a non-empty string or None")
        if self.source_key is not None and (not isinstance(self.source_key, str) or not self.source_key):
            raise InvalidMessage("source_key must be a non-empty string or None")
        if not isinstance(self.is_error, bool):
            object.__setattr__(self, "is_error", bool(self.is_error))

    # -- convenience ---------------------------------------------------------------------------
    @property
    def is_synthetic(self) -> bool:
        return bool(self.metadata.get(META_SYNTHETIC))

    @property
    def is_ephemeral(self) -> bool:
        return bool(self.metadata.get(META_EPHEMERAL))

    @property
    def call_ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.tool_calls)

    @property
    def is_meta(self) -> bool:
        """A user / system / developer message that is not a request (``meta_kind`` set)."""
        return self.meta_kind is not None

    def parts_json(self) -> list[dict[str, Any]]:
        """Reasoning blocks and attachments as the JSON list the store keeps (``[]`` if none)."""
        return [r.to_json() for r in self.reasoning] + [a.to_json() for a in self.attachments]

    def content_hash(self) -> str:
        """SHA-256 over everything that makes this message what it is (compare-and-swap key).

        The bytes of docs/schema.md: role, content, calls, tool_call_id; then, only when present
        (so a message without them hashes as it always did), the reasoning and attachments (their
        canonical JSON), ``is_error`` and ``meta_kind``."""
        h = hashlib.sha256()
        h.update(self.role.encode())
        h.update(b"\x00")
        h.update(self.content.encode("utf-8"))
        for c in self.tool_calls:
            h.update(b"\x00" + c.id.encode() + b"\x01" + c.name.encode() + b"\x01" + c.arguments.encode("utf-8"))
        h.update(b"\x00" + (self.tool_call_id or "").encode())
        if self.reasoning or self.attachments:
            h.update(b"\x00parts\x01" + json.dumps(self.parts_json(), sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        if self.is_error:
            h.update(b"\x00is_error")
        if self.meta_kind is not None:
            h.update(b"\x00meta\x01" + self.meta_kind.encode("utf-8"))
        return h.hexdigest()

    def with_content(self, content: str, **metadata: Any) -> "Message":
        """The same message with another text (a preview, a rendering) and extra metadata."""
        meta = dict(self.metadata)
        meta.update(metadata)
        return replace(self, content=content, metadata=meta)

    def to_openai(self) -> dict[str, Any]:
        """The chat-completions message. Attachments are rendered back as content parts: an image
        with a URL as an ``image_url`` part, anything whose bytes were not kept as a text part that
        says what it was. Reasoning is not sent (chat completions has no field for it)."""
        content: Any = self.content
        if self.attachments:
            parts: list[dict[str, Any]] = [{"type": "text", "text": self.content}] if self.content else []
            for a in self.attachments:
                if a.kind == "image" and a.source == "url" and a.url:
                    parts.append({"type": "image_url", "image_url": {"url": a.url}})
                else:
                    parts.append({"type": "text", "text": a.describe()})
            content = parts
        out: dict[str, Any] = {"role": self.role, "content": content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        if self.role == "tool":
            out["tool_call_id"] = self.tool_call_id
            if self.name:
                out["name"] = self.name
        return out

    @classmethod
    def from_openai(cls, data: Mapping[str, Any], *, id: int | None = None) -> "Message":
        if not isinstance(data, Mapping):
            raise InvalidMessage(f"message must be an object, got {type(data).__name__}")
        content = data.get("content")
        attachments: list[Attachment] = []
        if content is None:
            content = ""
        elif isinstance(content, list):  # content parts: the text parts, and images as attachments
            texts: list[str] = []
            for p in content:
                if not isinstance(p, Mapping):
                    continue
                if p.get("type") == "image_url":
                    attachments.append(_image_attachment(p.get("image_url")))
                elif p.get("type") in (None, "text"):
                    texts.append(str(p.get("text") or ""))
            content = "".join(texts)
        calls = data.get("tool_calls") or ()
        if not isinstance(calls, (list, tuple)):
            raise InvalidMessage("tool_calls must be a list")
        role = data.get("role")
        if not is_role(role):
            raise InvalidMessage(f"unknown role {role!r} (expected one of {', '.join(sorted(ROLES))})")
        return cls(
            role=role,
            content=str(content),
            id=id,
            tool_calls=tuple(ToolCall.from_openai(c) for c in calls),
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            attachments=tuple(attachments),
        )


def _image_attachment(ref: object) -> Attachment:
    """An ``image_url`` part as an attachment: a ``data:`` URL gives media type and decoded size
    (the bytes are dropped), any other URL is kept."""
    url = ref.get("url") if isinstance(ref, Mapping) else ref
    if not isinstance(url, str):
        return Attachment("image", source="url")
    if url.startswith("data:"):
        head, _, payload = url.partition(",")
        media = head[5:].split(";", 1)[0] or None
        size = None
        if ";base64" in head:
            stripped = payload.strip().rstrip("=")
            size = len(stripped) * 3 // 4
        else:
            size = len(payload.encode("utf-8"))
        return Attachment("image", media_type=media, byte_size=size, source="base64")
    return Attachment("image", source="url", url=url)


def system(content: str, **meta: Any) -> Message:
    return Message("system", content, metadata=meta)


def user(content: str, id: int | None = None, **meta: Any) -> Message:
    return Message("user", content, id=id, metadata=meta)


def assistant(content: str = "", *calls: ToolCall, id: int | None = None, **meta: Any) -> Message:
    return Message("assistant", content, id=id, tool_calls=tuple(calls), metadata=meta)


def tool_result(call_id: str, content: str, name: str | None = None, id: int | None = None, **meta: Any) -> Message:
    return Message("tool", content, id=id, tool_call_id=call_id, name=name, metadata=meta)


@dataclass(frozen=True, slots=True)
class Surface:
    """What the model sees of the conversation.

    ``messages`` is already in final order: [synthetic user message?] + messages after the boundary
    (pruned tool results carry their preview as content) + ephemeral system messages. The summary is
    kept apart so the meter can attribute it; :meth:`Envelope.messages` renders it first.
    """

    messages: tuple[Message, ...]
    summary: str | None = None
    boundary: int | None = None
    generation: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.messages, tuple):
            object.__setattr__(self, "messages", tuple(self.messages))


SUMMARY_PREFIX = "Summary of the earlier conversation (older messages were compacted into it):\n\n"


def summary_message(summary: str) -> Message:
    return Message("system", SUMMARY_PREFIX + summary, metadata={META_SUMMARY: True})


@dataclass(frozen=True, slots=True)
class Envelope:
    """Exactly what is sent to the provider: system prompt + tool schemas + surface."""

    system_prompt: str
    surface: Surface
    tools: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.tools, tuple):
            object.__setattr__(self, "tools", tuple(self.tools))

    def messages(self) -> list[Message]:
        out: list[Message] = []
        if self.system_prompt:
            out.append(system(self.system_prompt))
        if self.surface.summary:
            out.append(summary_message(self.surface.summary))
        out.extend(self.surface.messages)
        return out

    def to_openai(self) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": [m.to_openai() for m in self.messages()]}
        if self.tools:
            body["tools"] = [dict(t) for t in self.tools]
        return body
