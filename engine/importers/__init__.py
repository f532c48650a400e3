"""Importers: read other agents' transcripts into the neutral model of :mod:`.model`.

Pure reading (files in, frozen records out); writing them into the store is the caller's job.
Depends only on the standard library and :mod:`engine.core.errors`.

>>> sessions = parse("~/.claude/projects/x/abc.jsonl")   # format detected from the content
>>> parse(path, format="codex")                            # or named (a mismatch: ImportFormatError)

Formats (one module each; its docstring states the shape handled and the mapping): ``claude-code``,
``codex``, ``openai-chat``, ``openai-responses``, ``anthropic``, ``openhands``, ``swe-agent``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from . import agents_sdk, aider, anthropic, claude_code, cline, codex, gemini_cli, openai_chat, openai_responses, opencode, openhands, openhands_eval, swe_agent
from ._common import Source, as_source
from .jsonl import JsonlEntry, JsonlFollower, iter_new_entries
from .model import (
    DUPLICATE_RESULT,
    MISSING_RESULT,
    MISSING_RESULT_TEXT,
    ORPHAN,
    DocumentPart,
    ImagePart,
    ImportedMessage,
    ImportedSession,
    ImportedToolCall,
    ImportFormatError,
    ParseWarning,
    ReasoningPart,
    RecordedCompaction,
    TextPart,
    UsageRecord,
)

__all__ = [
    "FORMATS", "JSONL_FORMATS", "DATABASE_FORMATS", "detect_format", "parse", "iter_new_entries", "JsonlEntry", "JsonlFollower",
    "ImportFormatError", "ImportedSession", "ImportedMessage", "ImportedToolCall", "RecordedCompaction",
    "UsageRecord", "ParseWarning", "TextPart", "ImagePart", "DocumentPart", "ReasoningPart",
    "MISSING_RESULT", "ORPHAN", "DUPLICATE_RESULT", "MISSING_RESULT_TEXT",
]

Parser = Callable[..., list[ImportedSession]]

#: format name → parser (``parser(source, *, final=True) -> list[ImportedSession]``)
FORMATS: dict[str, Parser] = {
    claude_code.FORMAT: claude_code.parse,
    codex.FORMAT: codex.parse,
    openai_chat.FORMAT: openai_chat.parse,
    openai_responses.FORMAT: openai_responses.parse,
    anthropic.FORMAT: anthropic.parse,
    openhands.FORMAT: openhands.parse,
    swe_agent.FORMAT: swe_agent.parse,
    openhands_eval.FORMAT: openhands_eval.parse,
    aider.FORMAT: aider.parse,
    gemini_cli.FORMAT: gemini_cli.parse,
    agents_sdk.FORMAT: agents_sdk.parse,
    cline.FORMAT: cline.parse,
    opencode.FORMAT: opencode.parse,
}
#: the formats kept in another tool's SQLite database: recognized from the file's first bytes, read
#: (read-only) by the caller that may speak SQL (``engine.importing`` through ``engine.store.foreign``),
#: whose rows go to ``parse(..., tables=rows)``
DATABASE_FORMATS: dict[str, agents_sdk.DatabaseFormat] = {
    agents_sdk.FORMAT: agents_sdk.DATABASE,
    opencode.FORMAT: opencode.DATABASE,  # newer opencode: opencode.db (its JSON storage folder is read as files)
}
#: the formats that are append-only JSON Lines files (``--follow`` can tail them)
JSONL_FORMATS: frozenset[str] = frozenset({claude_code.FORMAT, codex.FORMAT,
                                           # append-only too (re-read whole; their keys are stable under appends)
                                           openhands_eval.FORMAT, aider.FORMAT, gemini_cli.FORMAT})

_SNIFF_LINES = 8


def _first_lines(lines: Any) -> list[str]:
    """The first few non-blank lines (a JSONL line may be megabytes long: lines are read whole)."""
    out: list[str] = []
    for raw in lines:
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
        if text.strip():
            out.append(text.strip())
            if len(out) >= _SNIFF_LINES:
                break
    return out


def _sniff_jsonl(lines: list[str]) -> str | None:
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue  # a malformed (or cut) line, or a pretty-printed document: look at the next one
        if openhands_eval.looks_like(obj):
            return openhands_eval.FORMAT
        if gemini_cli.looks_like_line(obj):
            return gemini_cli.FORMAT
        if codex.looks_like(obj) or codex.looks_like_legacy_header(obj) or (
                isinstance(obj, dict) and "record_type" in obj):
            return codex.FORMAT
        if claude_code.looks_like(obj):
            return claude_code.FORMAT
        if anthropic.looks_like_log_entry(obj):
            return anthropic.FORMAT
    return None


def _sniff_json(data: object) -> str | None:
    if cline.looks_like(data):  # before anthropic: an api history is Anthropic messages with ts
        return cline.FORMAT
    if anthropic.looks_like_log(data):  # logged request/response pairs
        return anthropic.FORMAT
    if openhands_eval.looks_like_document(data):
        return openhands_eval.FORMAT
    if gemini_cli.looks_like_document(data):
        return gemini_cli.FORMAT
    if swe_agent.looks_like(data):
        return swe_agent.FORMAT
    if openhands.looks_like_v0(data):
        return openhands.FORMAT
    if openai_responses.looks_like(data):
        return openai_responses.FORMAT
    if anthropic.looks_like(data):
        return anthropic.FORMAT
    if openai_chat.looks_like(data):
        return openai_chat.FORMAT
    return None


def detect_format(path_or_text: str | Path) -> str | None:
    """The format of a file, directory or literal text, judged from its content; ``None`` if none fits.

    JSON Lines formats are recognized from their first lines; whole-document formats (JSON) from the
    parsed document.
    """
    src = as_source(path_or_text)
    p = src.path.expanduser() if src.path is not None else None
    if p is not None:
        if p.is_dir():
            if cline.looks_like_path(p):  # a task folder (files of JSON, not one file)
                return cline.FORMAT
            if opencode.looks_like_path(p):  # the storage folder, or a session's message folder
                return opencode.FORMAT
            return openhands.FORMAT if openhands.looks_like_v1(p) else None
        if p.name == "base_state.json" and openhands.looks_like_v1(p.parent):
            return openhands.FORMAT
        if not p.is_file():
            return None
        if cline.looks_like_path(p):  # a file of a task folder: the folder is the session
            return cline.FORMAT
        if opencode.looks_like_path(p):  # a session / message / part file of opencode's storage
            return opencode.FORMAT
        try:
            with p.open("rb") as fh:
                if fh.read(len(agents_sdk.SQLITE_MAGIC)) == agents_sdk.SQLITE_MAGIC:  # a database: its schema names the format
                    fh.seek(0)
                    first = fh.read(agents_sdk.SNIFF_BYTES)
                    return next((f for f, d in DATABASE_FORMATS.items() if d.sniff(first)), None)
                fh.seek(0)
                head = _first_lines(fh)
        except OSError:
            return None
    else:
        head = _first_lines((src.text or "").splitlines())
    found = _sniff_jsonl(head)
    if found:
        return found
    if head and aider.looks_like(head[0]):
        return aider.FORMAT
    if not head or not head[0].startswith(("{", "[")):
        return None
    try:
        data = json.loads(p.read_text(encoding="utf-8", errors="replace") if p is not None else src.text or "")
    except (ValueError, OSError):
        return None
    return _sniff_json(data)


def parse(path_or_text: str | Path, format: str | None = None, *, final: bool = True,
          tables: object = None) -> tuple[ImportedSession, ...]:
    """Read one source into sessions (a Claude Code session comes with its sub-agents).

    ``format`` names the format (else it is detected); a source that is not that format raises
    :class:`ImportFormatError` with a one-line message. ``final=False`` reads a file that is still
    being written: a half-written last line is left out and the calls of the trailing assistant
    message are not given ``missing_result`` repairs yet. ``tables``: the rows of a database format
    (``DATABASE_FORMATS``), read by the caller.
    """
    src = as_source(path_or_text)
    if src.path is not None:
        path = src.path.expanduser()
        src = Source(src.name, path=path)
        if not path.exists():
            raise ImportFormatError(f"{src.name}: no such file or directory", code="import_not_found")
    if format is None:
        format = detect_format(src.path if src.path is not None else src.text or "")
        if format is None:
            raise ImportFormatError(f"{src.name}: not a recognized session format (known: {', '.join(FORMATS)})")
    parser = FORMATS.get(format)
    if parser is None:
        raise ImportFormatError(f"unknown format {format!r} (known: {', '.join(FORMATS)})", code="unknown_format")
    if format in DATABASE_FORMATS:
        return tuple(parser(src, final=final, tables=tables))
    return tuple(parser(src, final=final))
