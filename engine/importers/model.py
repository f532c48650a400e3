"""The neutral intermediate model every importer produces (pure data, no I/O).

A parser reads one source format into :class:`ImportedSession` records; a later writer turns them
into threads through the store's one write door. Nothing here knows about the database: the model
keeps everything a real transcript carries (content parts, reasoning, tool-call ids, error flags,
meta user messages, source ids and timestamps, the source's own compactions and usage) so that the
writer can decide what to persist without going back to the file.

Positions are indexes into :attr:`ImportedSession.messages` *after* repairs were applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Mapping

from engine.core.errors import EngineError

__all__ = [
    "ImportFormatError",
    "ParseWarning",
    "TextPart",
    "ImagePart",
    "DocumentPart",
    "ReasoningPart",
    "Part",
    "ImportedToolCall",
    "ImportedMessage",
    "RecordedCompaction",
    "UsageRecord",
    "ImportedSession",
    "MISSING_RESULT",
    "ORPHAN",
    "DUPLICATE_RESULT",
    "MISSING_RESULT_TEXT",
]

ImportedRole = Literal["system", "developer", "user", "assistant", "tool"]
IMPORTED_ROLES: frozenset[str] = frozenset({"system", "developer", "user", "assistant", "tool"})

#: repair marks (``ImportedMessage.repair``)
MISSING_RESULT = "missing_result"  # synthetic tool result for a call the source never answered
ORPHAN = "orphan"  # a tool result whose call is not in the source (kept as is)
DUPLICATE_RESULT = "duplicate_result"  # a second result for a call that was already answered
MISSING_RESULT_TEXT = "[no result was recorded in the source for this tool call]"


class ImportFormatError(EngineError, ValueError):
    """The input is not (a readable instance of) the format: one line, nothing imported."""

    code = "import_format"


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True)
class ParseWarning:
    """Something in the source was unreadable or odd; the rest was imported."""

    file: str
    line: int | None
    reason: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.reason}"


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ImagePart:
    """A reference to an image: its bytes are not kept, only what it is and how big."""

    media_type: str | None
    byte_size: int | None
    #: where the bytes were: ``base64`` (inline), ``url``, ``file`` (a provider file id or path)
    source: str = "base64"
    url: str | None = None  # a remote URL or file id (never a data: URL)
    #: pixel size read from the image header of inline data (PNG, JPEG, GIF, WebP), for token costs
    width: int | None = None
    height: int | None = None
    kind: Literal["image"] = "image"


@dataclass(frozen=True, slots=True)
class DocumentPart:
    """A reference to a document (PDF, text file, …) sent to the model; bytes not kept."""

    media_type: str | None
    byte_size: int | None
    source: str = "base64"
    title: str | None = None
    url: str | None = None
    kind: Literal["document"] = "document"


@dataclass(frozen=True, slots=True)
class ReasoningPart:
    """A thinking / reasoning block. ``text`` may be empty when the source only kept it encrypted
    (``encrypted``) or redacted (``redacted``); ``summary`` marks a reasoning *summary*."""

    text: str
    summary: bool = False
    encrypted: bool = False
    redacted: bool = False
    signed: bool = False
    #: the opaque provider blob (Anthropic ``redacted_thinking.data``, Responses
    #: ``encrypted_content``) and the Anthropic ``signature``, kept for lossless round trips
    blob: str | None = None
    signature: str | None = None
    kind: Literal["reasoning"] = "reasoning"


Part = TextPart | ImagePart | DocumentPart | ReasoningPart


@dataclass(frozen=True, slots=True)
class ImportedToolCall:
    """One call. ``arguments`` is the raw text the model produced (JSON for ``function`` calls; free
    text for ``custom`` tools such as Codex ``apply_patch``). ``synthetic_id`` is set when the source
    had no call id and the importer made one up (OpenHands resolver dumps, classic SWE-agent)."""

    id: str
    name: str
    arguments: str = "{}"
    kind: Literal["function", "custom", "local_shell"] = "function"
    synthetic_id: bool = False
    #: the source's own item id when it differs from the call id (Responses ``fc_…``)
    source_id: str | None = None


@dataclass(frozen=True, slots=True)
class ImportedMessage:
    """One message as the source recorded it.

    ``source_key`` is stable across re-parses of the same (or an appended) source and unique within
    its session: a writer skips messages whose key it already stored.
    """

    role: ImportedRole
    parts: tuple[Part, ...]
    source_key: str
    tool_calls: tuple[ImportedToolCall, ...] = ()
    #: tool results: the call answered, and its tool name resolved from that call
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    #: user-role messages that are not requests (``meta_kind`` says which kind)
    meta: bool = False
    meta_kind: str | None = None
    #: ``missing_result`` / ``orphan`` / ``duplicate_result`` when the importer repaired the source
    repair: str | None = None
    #: entry ids the message was built from (Claude Code uuids, OpenHands event ids, …)
    source_ids: tuple[str, ...] = ()
    #: the provider response this message came from (Anthropic ``msg_…``, OpenAI ``resp_…``)
    response_id: str | None = None
    #: source timestamp, as the source wrote it (ISO 8601 text)
    timestamp: str | None = None
    model: str | None = None
    name: str | None = None  # chat ``name`` field
    #: small source facts with no field: ``exit_code``, ``observation`` (OpenHands kind),
    #: ``stop_reason``, ``api_error`` (a locally made Claude Code error message)
    details: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if self.role not in IMPORTED_ROLES:
            raise ValueError(f"unknown role {self.role!r}")
        if not isinstance(self.details, MappingProxyType):
            object.__setattr__(self, "details", _frozen(self.details))
        if not isinstance(self.parts, tuple):
            object.__setattr__(self, "parts", tuple(self.parts))
        if not isinstance(self.tool_calls, tuple):
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        if not isinstance(self.source_ids, tuple):
            object.__setattr__(self, "source_ids", tuple(self.source_ids))

    @property
    def text(self) -> str:
        """The text parts joined by blank lines (what a text-only model would hold)."""
        return "\n\n".join(p.text for p in self.parts if isinstance(p, TextPart) and p.text)

    @property
    def reasoning(self) -> tuple[ReasoningPart, ...]:
        return tuple(p for p in self.parts if isinstance(p, ReasoningPart))

    @property
    def attachments(self) -> tuple[ImagePart | DocumentPart, ...]:
        return tuple(p for p in self.parts if isinstance(p, (ImagePart, DocumentPart)))

    @property
    def call_ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.tool_calls)


@dataclass(frozen=True, slots=True)
class RecordedCompaction:
    """A compaction the source itself performed (not ours).

    ``position`` is the index of the first message after it; the messages it replaced are
    ``messages[replaced_start:replaced_end]``. ``summary`` is ``None`` when the source kept it only
    encrypted (Codex, Responses ``compaction`` items). ``kept`` holds what the source put back in the
    context besides the summary (Codex ``replacement_history``).

    ``kind`` is ``summary`` (the history was replaced by a summary) or ``prune`` (only some tool
    results were cleared, e.g. Claude Code's microcompaction: ``forgotten_ids`` names their calls and
    ``replaced_start``/``replaced_end`` span them).
    """

    source: str
    position: int
    replaced_start: int
    replaced_end: int
    kind: Literal["summary", "prune"] = "summary"
    trigger: str | None = None
    tokens_before: int | None = None
    summary: str | None = None
    source_id: str | None = None
    timestamp: str | None = None
    kept: tuple[ImportedMessage, ...] = ()
    #: source ids of what was forgotten, when the source names them (OpenHands)
    forgotten_ids: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "kept", tuple(self.kept))
        object.__setattr__(self, "forgotten_ids", tuple(self.forgotten_ids))
        if not isinstance(self.details, MappingProxyType):
            object.__setattr__(self, "details", _frozen(self.details))


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """What the provider reported for one model request.

    ``position`` is the index of the (last) message that response produced. ``prompt_tokens`` is the
    whole prompt: input + cache read + cache creation (Anthropic counts them apart; OpenAI's
    ``input_tokens`` already include the cached ones).
    """

    position: int
    prompt_tokens: int
    completion_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_creation_tokens: int | None = None
    reasoning_tokens: int | None = None
    model: str | None = None
    response_id: str | None = None
    timestamp: str | None = None
    context_window: int | None = None


@dataclass(frozen=True, slots=True)
class ImportedSession:
    """One conversation read from a source (a sub-agent is its own session, linked by parent id)."""

    format: str
    source_file: str
    messages: tuple[ImportedMessage, ...]
    source_session_id: str | None = None
    cwd: str | None = None
    model: str | None = None
    #: the context window the source reported (Codex ``model_context_window``)
    context_window: int | None = None
    parent_session_id: str | None = None
    title: str | None = None
    #: a system prompt the source keeps apart from its messages (Anthropic ``system``, Codex
    #: base instructions, OpenHands system action); system *messages* stay in ``messages``
    system_prompt: str | None = None
    tools: tuple[Mapping[str, Any], ...] = ()
    compactions: tuple[RecordedCompaction, ...] = ()
    usage: tuple[UsageRecord, ...] = ()
    warnings: tuple[ParseWarning, ...] = ()
    #: entries that carry no conversation, by type (``file-history-snapshot``: 3, …)
    skipped: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    #: entry / block types the importer does not know, by type
    unknown: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    #: per-format metadata that has no field (cli version, git branch, exit status, …)
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: how many leading messages are final. Parsed with ``final=False`` (a file still being written),
    #: a trailing assistant message may still gain blocks or calls from lines not written yet, so a
    #: follower should write only ``messages[:stable_messages]`` and re-read the rest later.
    stable_messages: int | None = None

    def __post_init__(self) -> None:
        for name in ("messages", "tools", "compactions", "usage", "warnings"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        for name in ("skipped", "unknown", "extra"):
            value = getattr(self, name)
            if not isinstance(value, MappingProxyType):
                object.__setattr__(self, name, _frozen(value))
        if self.stable_messages is None:
            object.__setattr__(self, "stable_messages", len(self.messages))

    @property
    def tool_call_count(self) -> int:
        return sum(len(m.tool_calls) for m in self.messages)

    def repaired(self, kind: str) -> tuple[ImportedMessage, ...]:
        return tuple(m for m in self.messages if m.repair == kind)
