"""Specifics: the concrete things a conversation mentions that a summary must not lose.

One extractor, shared by the extractive summarizer (which keeps them first), the compactor (which
records the ones a compaction dropped) and the benchmarks. Pure functions over text: no I/O, no state.
"""

from __future__ import annotations

import re

__all__ = ["extract_identifiers"]

# ASCII-only classes: CJK text around an identifier must not become part of it.
_URL = re.compile(r"https?://[A-Za-z0-9\-._~:/?#@!$&*+,;=%]+", re.ASCII)
_SHA256 = re.compile(r"\b[0-9a-fA-F]{64}\b", re.ASCII)
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b", re.ASCII)
_ABS_PATH = re.compile(r"(?<![\w.:/~-])(?:~|\.\.?)?/(?:[\w.\-]+/)+[\w.\-]+", re.ASCII)
_REL_PATH = re.compile(r"(?<![\w.\-/])(?:[\w\-.]+/)+[\w\-]+\.[A-Za-z][A-Za-z0-9]{0,7}\b", re.ASCII)
_PREFIXED_ID = re.compile(
    r"\b(?:doc|docs|document|chunk|kb|file|ticket|order|case|item|ref)[-_](?=[\w\-]*\d)[A-Za-z0-9][\w\-]*",
    re.ASCII | re.IGNORECASE,
)
_JSON_ID = re.compile(
    r'"(doc_id|document_id|chunk_id|kb_id|knowledge_base_id|file_id|source_id)"\s*:\s*"?([A-Za-z0-9][\w\-.:]*)',
    re.ASCII,
)
_TRAILING = ".,;:!?'\")"


def extract_identifiers(text: str) -> list[str]:
    """URLs, SHA-256 hashes, UUIDs, file paths and document/chunk/kb ids in ``text``, in order."""
    found = [(m.start(), m.group().rstrip(_TRAILING)) for m in _URL.finditer(text)]
    rest = _URL.sub(_blank, text)  # same offsets, URL innards hidden from the other patterns
    found.extend((m.start(), f"{m.group(1)}={m.group(2).rstrip(_TRAILING)}") for m in _JSON_ID.finditer(rest))
    rest = _JSON_ID.sub(_blank, rest)  # "doc_id": "doc-1" gives doc_id=doc-1, not also doc-1
    for pattern in (_SHA256, _UUID, _ABS_PATH, _REL_PATH, _PREFIXED_ID):
        found.extend((m.start(), m.group().rstrip(_TRAILING)) for m in pattern.finditer(rest))
    seen: dict[str, None] = {}
    for _, ident in sorted(found, key=lambda f: f[0]):
        if len(ident) > 3:
            seen.setdefault(ident, None)
    return list(seen)


def _blank(match: re.Match[str]) -> str:
    return " " * len(match.group())
