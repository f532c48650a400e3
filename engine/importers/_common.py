"""What every parser shares: the session builder (repairs, tool-name resolution, position fixing),
source loading and small content helpers (data URLs, base64 sizes)."""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
import re
import struct
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Iterable, Mapping

from .jsonl import json_error_text
from .model import (
    DUPLICATE_RESULT,
    MISSING_RESULT,
    MISSING_RESULT_TEXT,
    ORPHAN,
    ImagePart,
    ImportedMessage,
    ImportedSession,
    ImportFormatError,
    ParseWarning,
    RecordedCompaction,
    TextPart,
    UsageRecord,
)


# -- sources -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Source:
    """What a parser reads: a file or directory on disk, or text handed over directly."""

    name: str  # what warnings and errors call it (the path, or ``<text>``)
    path: Path | None = None
    text: str | None = None

    def read_bytes(self) -> bytes:
        if self.text is not None:
            return self.text.encode("utf-8")
        assert self.path is not None
        try:
            return self.path.read_bytes()
        except OSError as exc:
            raise ImportFormatError(f"{self.name}: cannot read ({exc.strerror or exc})") from exc

    def read_text(self) -> str:
        if self.text is not None:
            return self.text
        return self.read_bytes().decode("utf-8", errors="replace")

    def load_json(self, fmt: str) -> Any:
        text = self.read_text()
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ImportFormatError(f"{self.name}: not a {fmt} file (not JSON: {json_error_text(exc, line=True)})") from exc


def as_source(path_or_text: str | Path) -> Source:
    """A path (``Path``, or a string naming an existing file or directory) or literal text."""
    if isinstance(path_or_text, Path):
        return Source(str(path_or_text), path=path_or_text)
    text = str(path_or_text)
    stripped = text.lstrip()
    if "\n" not in text and not stripped.startswith(("{", "[")) and len(text) < 4096:
        return Source(text, path=Path(text))
    return Source("<text>", text=text)


class NameSet(frozenset):
    """A set of type / role names. Asking about a value that is not a string (real files hold
    junk where a name should be) is simply ``False``, never a ``TypeError``."""

    def __contains__(self, item: object) -> bool:
        return isinstance(item, str) and frozenset.__contains__(self, item)


# -- content helpers -----------------------------------------------------------------------------
_DATA_URL = re.compile(r"^data:([^;,]*)(;base64)?,", re.I)


def base64_size(data: str | None) -> int | None:
    """Decoded size of base64 text, without decoding it."""
    if not isinstance(data, str):
        return None
    n = len(data.strip())
    if n == 0:
        return 0
    pad = len(data) - len(data.rstrip("="))
    return n * 3 // 4 - pad


_HEAD_CHARS = 64 * 1024  # base64 characters decoded to find an image's size (JPEG headers can be long)
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def image_size(head: bytes) -> tuple[int, int] | None:
    """(width, height) from the first bytes of a PNG, GIF, WebP or JPEG file; ``None`` otherwise."""
    try:
        if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR":
            w, h = struct.unpack(">II", head[16:24])
            return w, h
        if head[:6] in (b"GIF87a", b"GIF89a"):
            w, h = struct.unpack("<HH", head[6:10])
            return w, h
        if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
            chunk = head[12:16]
            if chunk == b"VP8X":
                return 1 + int.from_bytes(head[24:27], "little"), 1 + int.from_bytes(head[27:30], "little")
            if chunk == b"VP8 ":
                w, h = struct.unpack("<HH", head[26:30])
                return w & 0x3FFF, h & 0x3FFF
            if chunk == b"VP8L":
                b = head[21:25]
                return 1 + (((b[1] & 0x3F) << 8) | b[0]), 1 + (((b[3] & 0x0F) << 10) | (b[2] << 2) | (b[1] >> 6))
        if head[:2] == b"\xff\xd8":
            i = 2
            while i + 9 <= len(head):
                if head[i] != 0xFF:
                    i += 1
                    continue
                marker = head[i + 1]
                if marker in _JPEG_SOF:
                    h, w = struct.unpack(">HH", head[i + 5:i + 9])
                    return w, h
                if marker == 0xFF:
                    i += 1
                elif marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:
                    i += 2
                else:
                    i += 2 + struct.unpack(">H", head[i + 2:i + 4])[0]
    except (struct.error, IndexError):
        return None
    return None


def base64_image_size(data: str | None) -> tuple[int, int] | None:
    """The pixel size of base64 image data, decoding only its first bytes."""
    if not isinstance(data, str):
        return None
    chunk = data[:_HEAD_CHARS].strip()
    chunk = chunk[: len(chunk) // 4 * 4]
    try:
        return image_size(base64.b64decode(chunk))
    except (binascii.Error, ValueError):
        return None


def inline_image(media_type: str | None, data: str | None) -> ImagePart:
    """An inline (base64) image: media type, decoded size and pixel size; the bytes are dropped."""
    wh = base64_image_size(data)
    return ImagePart(media_type=media_type, byte_size=base64_size(data), source="base64",
                     width=wh[0] if wh else None, height=wh[1] if wh else None)


def image_from_url(url: str | None, media_type: str | None = None) -> ImagePart:
    """An image reference from a URL: a ``data:`` URL gives media type and size, nothing is kept."""
    if not isinstance(url, str):
        return ImagePart(media_type=media_type, byte_size=None, source="url")
    m = _DATA_URL.match(url)
    if m:
        payload = url[m.end():]
        if m.group(2):
            return inline_image(m.group(1) or media_type, payload)
        return ImagePart(media_type=m.group(1) or media_type, byte_size=len(payload.encode()), source="base64")
    guessed = media_type or mimetypes.guess_type(url.split("?", 1)[0])[0]
    return ImagePart(media_type=guessed, byte_size=None, source="url", url=url)


def as_json_text(value: object) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def iso_from_ms(ms: object) -> str | None:
    """Epoch milliseconds (an int, or a float) as ISO 8601 UTC with ``Z``; None for junk, zero,
    negative or out of range."""
    n = as_int(ms) if not isinstance(ms, float) else int(ms)
    if n is None or n <= 0:
        return None
    try:
        return datetime.fromtimestamp(n / 1000, tz=UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None


def str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def as_str(value: object) -> str:
    """Text fields that hold junk become ``""`` (numbers are kept as their text)."""
    if isinstance(value, str):
        return value
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else ""


def as_list(value: object) -> list:
    """``value`` if it is a list, else ``[]`` (a field that should be a list but holds junk)."""
    return value if isinstance(value, list) else []


def as_map(value: object) -> Mapping[str, Any]:
    """``value`` if it is a mapping (a JSON object), else ``{}`` (a field that should be an object but
    holds junk or is missing)."""
    return value if isinstance(value, Mapping) else {}


def map_or_none(value: object) -> Mapping[str, Any] | None:
    """``value`` if it is a mapping (a JSON object), else None."""
    return value if isinstance(value, Mapping) else None


def text_parts(text: object) -> tuple[TextPart, ...]:
    return (TextPart(text),) if isinstance(text, str) and text else ()


# -- the builder ---------------------------------------------------------------------------------
class SessionBuilder:
    """Collects messages, compactions and usage in source order, then repairs and freezes them.

    Parsers call :meth:`add`, :meth:`compaction` and :meth:`usage` with positions as they are while
    reading; :meth:`build` inserts synthetic results and re-maps every position.
    """

    def __init__(self, fmt: str, source: Source) -> None:
        self.format = fmt
        self.source = source
        self.messages: list[ImportedMessage] = []
        self._compactions: list[dict[str, Any]] = []
        self._usage: list[UsageRecord] = []
        self.warnings: list[ParseWarning] = []
        self.skipped: Counter[str] = Counter()
        self.unknown: Counter[str] = Counter()
        self.extra: dict[str, Any] = {}

    # recording ------------------------------------------------------------------------------
    def add(self, message: ImportedMessage) -> int:
        self.messages.append(message)
        return len(self.messages) - 1

    def replace_at(self, index: int, message: ImportedMessage) -> None:
        self.messages[index] = message

    def warn(self, reason: str, line: int | None = None) -> None:
        self.warnings.append(ParseWarning(self.source.name, line, reason))

    def compaction(self, *, position: int | None = None, replaced_start: int = 0, replaced_end: int | None = None,
                   **fields: Any) -> dict[str, Any]:
        """Record a compaction at ``position`` (default: after the messages so far). Returns the draft
        so a later entry (Claude Code's summary) can fill it in."""
        pos = len(self.messages) if position is None else position
        draft = {"source": self.format, "position": pos, "replaced_start": replaced_start,
                 "replaced_end": pos if replaced_end is None else replaced_end, **fields}
        self._compactions.append(draft)
        return draft

    @property
    def compaction_drafts(self) -> list[dict[str, Any]]:
        return self._compactions

    def usage(self, record: UsageRecord) -> None:
        self._usage.append(record)

    # building -------------------------------------------------------------------------------
    def _unique_keys(self) -> list[ImportedMessage]:
        """Source keys must be unique: a repeated source id (real files have them) gets ``~<n>``."""
        seen: set[str] = set()
        out: list[ImportedMessage] = []
        for m in self.messages:
            key = m.source_key
            if key in seen:
                n = 2
                while f"{key}~{n}" in seen:
                    n += 1
                self.warn(f"source id {key!r} appears more than once; the repeat is keyed {key}~{n}")
                key = f"{key}~{n}"
                m = replace(m, source_key=key)
            seen.add(key)
            out.append(m)
        return out

    def build(self, *, final: bool = True, **session: Any) -> ImportedSession:
        messages, index_map = repair(self._unique_keys(), final=final)

        def remap(pos: int) -> int:
            return index_map[pos] if pos < len(index_map) else len(messages)

        compactions = tuple(
            RecordedCompaction(**{**d, "position": remap(d["position"]), "replaced_start": remap(d["replaced_start"]),
                                  "replaced_end": remap(d["replaced_end"])})
            for d in self._compactions
        )
        usage = tuple(replace(u, position=index_map[u.position]) if u.position < len(index_map) else u
                      for u in self._usage)
        extra = {**self.extra, **session.pop("extra", {})}
        stable = len(messages)
        if not final and messages and messages[-1].role == "assistant":
            stable -= 1  # its remaining blocks may not be written yet
        return ImportedSession(
            format=self.format,
            source_file=self.source.name,
            messages=tuple(messages),
            compactions=compactions,
            usage=usage,
            warnings=tuple(self.warnings),
            skipped=dict(sorted(self.skipped.items())),
            unknown=dict(sorted(self.unknown.items())),
            extra=extra,
            stable_messages=stable,
            **session,
        )


def repair(messages: Iterable[ImportedMessage], *, final: bool = True) -> tuple[list[ImportedMessage], list[int]]:
    """Resolve tool names from their calls and make every call/result pairing visible.

    - a result answers the latest earlier call with its id: it gets that call's tool name;
    - a result with no earlier call is kept and marked ``orphan``; a second result for an answered
      call (or one arriving after the conversation moved on and the call was given a synthetic
      result) is kept and marked ``duplicate_result``;
    - a call nobody answered gets a synthetic result marked ``missing_result``, placed after the
      results that follow its assistant message. With ``final=False`` (a file still being written)
      the calls of a trailing assistant message are left open: their results may still come.

    Returns the new list and, for every old index, its new index.
    """
    src = list(messages)
    names: dict[str, str] = {}
    answered: set[str] = set()
    out: list[ImportedMessage] = []
    index_map: list[int] = []
    pending: list[tuple[str, str]] = []  # (call id, name) of the last assistant message, unanswered
    pending_owner: ImportedMessage | None = None

    def flush_pending() -> None:
        nonlocal pending, pending_owner
        for call_id, name in pending:
            if call_id in answered:
                continue
            answered.add(call_id)
            owner_key = pending_owner.source_key if pending_owner else ""
            out.append(ImportedMessage(
                role="tool",
                parts=(TextPart(MISSING_RESULT_TEXT),),
                source_key=f"{owner_key}#missing:{call_id}",
                tool_call_id=call_id,
                tool_name=name,
                repair=MISSING_RESULT,
                timestamp=pending_owner.timestamp if pending_owner else None,
            ))
        pending = []
        pending_owner = None

    for m in src:
        if m.role == "tool":
            call = m.tool_call_id or ""
            if call in names and call not in answered:
                answered.add(call)
                fixed = m if m.tool_name == names[call] else replace(m, tool_name=names[call])
            elif call in names:
                fixed = replace(m, tool_name=m.tool_name or names[call], repair=m.repair or DUPLICATE_RESULT)
            else:
                fixed = replace(m, repair=m.repair or ORPHAN)
            index_map.append(len(out))
            out.append(fixed)
            continue
        flush_pending()
        index_map.append(len(out))
        out.append(m)
        if m.tool_calls:
            for c in m.tool_calls:
                names[c.id] = c.name
                answered.discard(c.id)  # a reused id is a new call
            pending = [(c.id, c.name) for c in m.tool_calls]
            pending_owner = m
    if final:
        flush_pending()
    return out, index_map

