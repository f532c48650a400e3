"""JSON Lines reading: whole files (for parsing) and resumable reads from a byte offset (for
``--follow``), which never hand out a line that is still being written."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

__all__ = ["JsonlEntry", "JsonlFollower", "iter_new_entries", "iter_lines"]


@dataclass(frozen=True, slots=True)
class JsonlEntry:
    """One line: its parsed value (``None`` when malformed, with ``error`` saying why)."""

    line: int  # 1-based line number (relative to ``start_line`` for offset reads)
    offset: int  # byte offset of the line's start
    value: Any = None
    error: str | None = None


def _parse(raw: bytes, line: int, offset: int) -> JsonlEntry | None:
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        return JsonlEntry(line, offset, json.loads(text))
    except ValueError as exc:
        return JsonlEntry(line, offset, None, f"malformed JSON: {json_error_text(exc, column=True)}")


def json_error_text(exc: ValueError, *, line: bool = False, column: bool = False) -> str:
    """What ``json.loads`` objected to: the message, ``at line <n>`` with ``line``, ``(column <n>)`` with
    ``column``. Not every ValueError it raises is a JSONDecodeError (an integer literal past Python's
    digit limit is a plain ValueError, with no position): those give their own text."""
    if not isinstance(exc, json.JSONDecodeError):
        return str(exc)
    text = exc.msg
    if line:
        text += f" at line {exc.lineno}"
    if column:
        text += f" (column {exc.colno})"
    return text


def iter_lines(data: bytes, *, final: bool = True) -> Iterator[JsonlEntry]:
    """Every non-blank line of ``data``. With ``final`` a last line without a newline is read too
    (a finished file may lack the trailing newline); otherwise it is left for later."""
    offset = 0
    line = 0
    n = len(data)
    while offset < n:
        end = data.find(b"\n", offset)
        if end < 0:
            if not final:
                return
            end = n
        line += 1
        entry = _parse(data[offset:end], line, offset)
        if entry is not None:
            yield entry
        offset = end + 1


def iter_new_entries(path: str | Path, offset: int = 0, *, start_line: int = 1) -> tuple[list[JsonlEntry], int]:
    """The complete lines written to ``path`` since byte ``offset``, and the offset to resume from.

    A last line without its newline is never returned (it may be half-written); the returned offset
    stops before it, so the next call reads it once it is complete. Malformed complete lines come back
    as entries with ``error`` set. ``start_line`` is the line number of the line at ``offset``
    (:class:`JsonlFollower` keeps the numbering across calls).
    A file that shrank below ``offset`` (rewritten) is read again from the start.
    """
    p = Path(path)
    with p.open("rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        if size < offset:
            offset, start_line = 0, 1
        fh.seek(offset)
        data = fh.read(size - offset)
    cut = data.rfind(b"\n") + 1  # 0 when no complete line yet
    complete = data[:cut]
    entries: list[JsonlEntry] = []
    line = start_line - 1
    pos = 0
    while pos < len(complete):
        end = complete.find(b"\n", pos)
        line += 1
        entry = _parse(complete[pos:end], line, offset + pos)
        if entry is not None:
            entries.append(entry)
        pos = end + 1
    return entries, offset + cut


class JsonlFollower:
    """Tails one JSONL file: each :meth:`read_new` returns the lines completed since the last call,
    numbered from the start of the file."""

    def __init__(self, path: str | Path, offset: int = 0, line: int = 1) -> None:
        self.path = Path(path)
        self.offset = offset
        self.next_line = line

    def read_new(self) -> list[JsonlEntry]:
        if self.path.stat().st_size < self.offset:  # rewritten from scratch: start over
            self.offset, self.next_line = 0, 1
        before = self.offset
        entries, self.offset = iter_new_entries(self.path, before, start_line=self.next_line)
        with self.path.open("rb") as fh:
            fh.seek(before)
            self.next_line += fh.read(self.offset - before).count(b"\n")
        return entries
