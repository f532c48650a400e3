"""What the timeline reads and keeps: keyset page requests and answers, one-line rows, the boundary card.

Plain Python (no Qt): the Qt model in :mod:`inspector_app.models.timeline` and the tests use these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Sequence

from engine.core.messages import META_EPHEMERAL, META_PRUNED, META_SYNTHETIC, Message, ToolCall
from engine.core.units import CLOSING_FLAGS, is_closing_marker
from engine.core.views import (
    SOURCE_FORMATS,
    CompactionState,
    HistoryRecord,
    Offload,
    SourceCompaction,
    StoredMessage,
    source_format_name as source_name,  # re-exported: the inspector names a source from here
)

PREVIEW_CHARS = 240
#: ``before_id`` that reads the newest page (ids are 64-bit; the store benchmark reads the end the same way)
NEWEST = 2**62
_WS = re.compile(r"\s+")
#: metadata the row keeps: its markers, and what grouping reads (closing markers of dangling calls)
_KEPT_METADATA = (META_PRUNED, META_SYNTHETIC, META_EPHEMERAL, *CLOSING_FLAGS, "repair")

#: the flags a message row shows beside pruned / synthetic / ephemeral (see :func:`message_flags`)
FLAG_THINKING = "thinking"
FLAG_IMAGE = "image"
FLAG_DOCUMENT = "document"
FLAG_ERROR = "error"
FLAG_META = "meta"
FLAG_NO_RESULT = "no result"

def source_badge(fmt: str | None) -> str:
    """``Claude`` for ``claude-code``: the thread list's Source badge (``SourceFormat.badge``; a
    format the table does not know reads as written)."""
    if not fmt:
        return ""
    known = SOURCE_FORMATS.get(fmt)
    return known.badge if known is not None else fmt


def human_size(n: int | None) -> str:
    """``1.2 MB``, ``340 KB``, ``12 B``; ``size unknown`` for None."""
    if n is None:
        return "size unknown"
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def message_flags(m: Message) -> tuple[str, ...]:
    """What the message carries beyond its text, as row markers: reasoning blocks, image and
    document attachments, an error result, a meta message (not a request: its kind), a closing
    marker (no result was recorded in the source, or it was closed since)."""
    out: list[str] = []
    if m.reasoning:
        out.append(FLAG_THINKING)
    kinds = [a.kind for a in m.attachments]
    if "image" in kinds:
        out.append(FLAG_IMAGE if kinds.count("image") == 1 else f"{kinds.count('image')} images")
    if "document" in kinds:
        out.append(FLAG_DOCUMENT if kinds.count("document") == 1 else f"{kinds.count('document')} documents")
    if m.is_error:
        out.append(FLAG_ERROR)
    if is_closing_marker(m):
        out.append(FLAG_NO_RESULT)
    elif m.meta_kind:
        out.append(FLAG_META)  # its kind is in the tooltip and the detail pane
    return tuple(out)


class _Unknown:
    """The keyset bound of a page side that the read did not establish."""

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()


def one_line(text: str, limit: int = PREVIEW_CHARS) -> str:
    """Whitespace collapsed to single spaces and cut to ``limit`` characters (the view elides)."""
    flat = _WS.sub(" ", text[: limit * 4]).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def message_matches(m: Message, needle: str) -> bool:
    """``needle`` (already case-folded) occurs in the content, a tool name or tool arguments."""
    return needle in m.content.casefold() or any(needle in c.arguments.casefold() or needle in c.name.casefold() for c in m.tool_calls)


def message_preview(m: Message) -> str:
    """The one-line text of a message row."""
    if m.role == "assistant" and m.tool_calls:
        calls = ", ".join(f"{c.name}({one_line(c.arguments, 60)})" for c in m.tool_calls)
        text = f"{one_line(m.content, 120)} → {calls}" if m.content.strip() else f"→ {calls}"
        return one_line(text)
    if m.role == "tool":
        return one_line(f"{m.name or m.tool_call_id}: {m.content}")
    text = one_line(m.content)
    if not text and m.attachments:
        text = ", ".join(attachment_line(a) for a in m.attachments)
    if not text and m.reasoning:
        text = "(thinking) " + one_line(m.reasoning[0].text or m.reasoning[0].summary or "")
    return one_line(text) or "(empty)"


def attachment_line(a: Any) -> str:
    """``image/png 640×480 · 12.0 KB`` (an :class:`engine.core.messages.Attachment`)."""
    bits = [a.media_type or a.kind]
    if a.width and a.height:
        bits.append(f"{a.width}×{a.height}")
    bits.append(human_size(a.byte_size))
    if a.title:
        bits.append(repr(a.title))
    if a.source != "base64" and a.url:
        bits.append(f"{a.source} {a.url}")
    return f"[{a.kind}] " + " · ".join(bits)


@dataclass(frozen=True, slots=True)
class TimelinePage:
    """A contiguous run of messages (ascending ids) with their token counts and offloads.

    ``tokens`` count each message as the model sees it (a pruned result as its preview);
    ``original_tokens`` count the full text of the pruned ones. Where the page sits is told by its
    keyset bounds: no message of the thread lies between ``follows`` and the first message
    (``None``: the page starts the thread; :data:`UNKNOWN`: not established — ``append_page``
    fills in the newest loaded id), nor between the last message and ``precedes`` (``None``: not
    established); ``exhausted``: the page ends the thread."""

    messages: tuple[StoredMessage, ...]
    tokens: Mapping[int, int] = field(default_factory=dict)
    offloads: Mapping[int, Offload] = field(default_factory=dict)
    exhausted: bool = False
    original_tokens: Mapping[int, int] = field(default_factory=dict)
    follows: Any = UNKNOWN
    precedes: int | None = None

    def bounds(self) -> tuple[Any, Any]:
        """(low, high) keyset bounds of the whole page: ``None`` is the thread's start / end,
        :data:`UNKNOWN` a side the read did not establish."""
        high: Any = None if self.exhausted else (self.precedes if self.precedes is not None else UNKNOWN)
        return self.follows, high


@dataclass(frozen=True, slots=True)
class PageRequest:
    """One keyset read for a gap: forward (the first ``limit`` after ``after_id``; ``None``: from the
    start) or backward (the last ``limit`` before ``before_id``; ``None``: the newest)."""

    after_id: int | None = None
    before_id: int | None = None
    backward: bool = False
    limit: int = 500

    def query(self) -> dict[str, Any]:
        """Keyword arguments for ``Service.reads.messages_page``."""
        if self.backward:
            return {"before_id": NEWEST if self.before_id is None else self.before_id, "limit": self.limit}
        return {"after_id": self.after_id, "limit": self.limit}

    def page(
        self,
        rows: Sequence[StoredMessage],
        tokens: Mapping[int, int] | None = None,
        offloads: Mapping[int, Offload] | None = None,
        original_tokens: Mapping[int, int] | None = None,
    ) -> TimelinePage:
        """The answer to this read as a page with its keyset bounds."""
        full = len(rows) >= self.limit
        if self.backward:
            return TimelinePage(tuple(rows), follows=UNKNOWN if full else None, precedes=self.before_id, exhausted=self.before_id is None,
                                tokens=tokens or {}, offloads=offloads or {}, original_tokens=original_tokens or {})
        return TimelinePage(tuple(rows), follows=self.after_id, exhausted=not full,
                            tokens=tokens or {}, offloads=offloads or {}, original_tokens=original_tokens or {})


@dataclass(frozen=True, slots=True)
class MessageRow:
    """What the timeline keeps of one message: never its body, only a bounded preview, the shape
    grouping needs (role, id, call ids and names, the call answered, marker metadata) and flags."""

    id: int
    role: str
    preview: str
    created_at: datetime
    shape: Message
    pruned: bool
    #: :func:`message_flags` of the message (thinking, image, error, meta …)
    flags: tuple[str, ...] = ()

    @classmethod
    def of(cls, stored: StoredMessage) -> "MessageRow":
        m = stored.message
        shape = Message(
            m.role,
            "",
            id=m.id,
            tool_calls=tuple(ToolCall(c.id, c.name, "") for c in m.tool_calls),
            tool_call_id=m.tool_call_id,
            name=m.name,
            metadata={k: m.metadata[k] for k in _KEPT_METADATA if k in m.metadata},
            is_error=m.is_error,
            meta_kind=m.meta_kind,
        )
        pruned = bool(stored.offload_sha256 or m.metadata.get(META_PRUNED))
        return cls(stored.id, m.role, message_preview(m), stored.created_at, shape, pruned, message_flags(m))


@dataclass(frozen=True, slots=True)
class BoundaryInfo:
    """What the summary card shows: where compacted history ends, the summary, when and why."""

    boundary: int
    summary: str | None
    summary_tokens: int
    generation: int
    compact_count: int
    updated_at: datetime | None
    kind: str | None = None
    trigger: str | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None

    @classmethod
    def from_state(cls, state: CompactionState, history: Sequence[HistoryRecord] = ()) -> "BoundaryInfo | None":
        """The card for ``state`` (``None`` when nothing was compacted); the reason comes from the
        newest history record that moved the boundary."""
        if state.boundary is None:
            return None
        record = next((h for h in reversed(history) if h.kind in ("summary", "manual")), None)
        return cls(
            boundary=state.boundary,
            summary=state.summary,
            summary_tokens=state.summary_tokens,
            generation=state.generation,
            compact_count=state.compact_count,
            updated_at=state.updated_at or (record.created_at if record else None),
            kind=record.kind if record else None,
            trigger=record.trigger if record else None,
            tokens_before=record.tokens_before if record else None,
            tokens_after=record.tokens_after if record else None,
        )

    def headline(self) -> str:
        parts = [f"Compacted history ends at #{self.boundary}", f"summary {self.summary_tokens:,} tok", f"gen {self.generation}"]
        why = " ".join(filter(None, (self.kind, self.trigger and f"({self.trigger})")))
        if why:
            parts.append(why)
        if self.updated_at is not None:
            parts.append(self.updated_at.strftime("%Y-%m-%d %H:%M"))
        return " · ".join(parts)


def _source_what(sc: SourceCompaction, who: str) -> str:
    """What the source did, in words: compacted, a failed compaction (Anthropic: a block with no
    content, which the API ignores), pruned tool results, cleared thinking (Anthropic context edits)."""
    details = sc.details or {}
    if sc.kind == "summary":
        if details.get("failed"):
            return f"{who} tried to compact here: failed, no summary (ignored)"
        return f"{who} compacted here"
    edit = str(details.get("edit") or "")
    if edit.startswith("clear_thinking"):
        return f"{who} cleared {details.get('cleared_thinking_turns', '?')} thinking turn(s) here"
    if edit.startswith("clear_tool_uses"):
        return f"{who} cleared {details.get('cleared_tool_uses', '?')} tool result(s) here"
    return f"{who} pruned tool results here"


def source_headline(sc: SourceCompaction) -> str:
    """The one line of a source's own compaction row: who recorded it, what, tokens before, trigger."""
    who = source_name(sc.source)
    parts = [_source_what(sc, who)]
    if sc.tokens_before is not None:
        parts.append(f"{sc.tokens_before:,} tokens before")
    if sc.trigger:
        parts.append(f"trigger {sc.trigger}")
    parts.append("recorded by the source")
    return " · ".join(parts)
