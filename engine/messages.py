"""Frozen domain types: messages, tool calls, the surface and the envelope.

These types are pure data. They never touch a database, a disk or a network. The store converts
its rows into :class:`Message`; the compactor builds :class:`Surface`; the harness sends an
:class:`Envelope` to a provider.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Mapping

from .errors import EngineError

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})

#: metadata keys the engine itself sets on messages that are *not* persisted history
META_SYNTHETIC = "synthetic"  # the synthetic user message after a summary
META_EPHEMERAL = "ephemeral"  # an in-memory system message of a running run
META_SUMMARY = "summary"  # the rolling summary rendered as a message
META_PRUNED = "pruned"  # a tool result whose surface text is a preview (value: sha256)


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
class Message:
    """One message. ``id`` is the persisted, monotonic id (physical order); ``None`` for messages
    that are not persisted history (ephemeral system messages, the synthetic user message, the
    rendered summary)."""

    role: Role
    content: str
    id: int | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

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

    def content_hash(self) -> str:
        """SHA-256 over everything that makes this message what it is (compare-and-swap key)."""
        h = hashlib.sha256()
        h.update(self.role.encode())
        h.update(b"\x00")
        h.update(self.content.encode("utf-8"))
        for c in self.tool_calls:
            h.update(b"\x00" + c.id.encode() + b"\x01" + c.name.encode() + b"\x01" + c.arguments.encode("utf-8"))
        h.update(b"\x00" + (self.tool_call_id or "").encode())
        return h.hexdigest()

    def with_content(self, content: str, **metadata: Any) -> "Message":
        meta = dict(self.metadata)
        meta.update(metadata)
        return Message(
            role=self.role,
            content=content,
            id=self.id,
            tool_calls=self.tool_calls,
            tool_call_id=self.tool_call_id,
            name=self.name,
            metadata=meta,
        )

    def to_openai(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
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
        if content is None:
            content = ""
        elif isinstance(content, list):  # content parts: keep the text parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        calls = data.get("tool_calls") or ()
        if not isinstance(calls, (list, tuple)):
            raise InvalidMessage("tool_calls must be a list")
        return cls(
            role=data.get("role"),  # type: ignore[arg-type]
            content=str(content),
            id=id,
            tool_calls=tuple(ToolCall.from_openai(c) for c in calls),
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
        )


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
