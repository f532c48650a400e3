"""Specifics: the concrete things a conversation mentions that a summary must not lose.

One extractor, shared by the extractive summarizer (which keeps them first), the compactor (which
records the ones a compaction dropped) and the benchmarks. Pure functions over text, no I/O (the
extraction of a text is remembered in a bounded cache: the same result, sooner).

- :func:`extract_identifiers`: URLs, hashes, UUIDs, paths, document / chunk / kb ids (the
  summarizer's list, unchanged).
- :func:`extract_specifics`: those, classified, plus shell commands, numbers with units, error
  messages and decisions, each a :class:`Specific`.
- :func:`dropped_specifics`: which specifics visible before a compaction are neither in its summary
  nor on the surface after it (:class:`DroppedSpecifics`), over texts, so the caller decides what
  the model saw; :func:`message_texts` is what the engine counts as seen of a message.
- :func:`group_identifiers` / :func:`expand_grouped`: how a summary writes identifiers that share a
  directory, URL prefix or id head (``src/app/{a,b}.py``, a shell's brace expansion) and the one
  rule every reader of a summary uses to read them back (``src/app/a.py src/app/b.py``).

Every pattern uses ASCII classes: CJK text around a specific never becomes part of it, and a
specific inside Chinese text is found as in English.
"""

from __future__ import annotations

import bisect
import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Mapping, Self, Sequence

from .messages import Message

__all__ = [
    "KINDS",
    "MAX_DROPPED",
    "MAX_VALUE_CHARS",
    "DroppedSpecific",
    "DroppedSpecifics",
    "Specific",
    "SpecificKind",
    "dropped_at_compaction",
    "dropped_specifics",
    "extract_identifiers",
    "expand_grouped",
    "extract_specifics",
    "group_identifiers",
    "group_key",
    "message_texts",
]

SpecificKind = Literal["identifier", "path", "url", "command", "quantity", "error", "decision"]
#: the kinds, in the order a list of specifics is grouped by
KINDS: tuple[str, ...] = ("identifier", "path", "url", "command", "quantity", "error", "decision")
#: dropped specifics listed in full at most (the counts are always complete)
MAX_DROPPED = 500
#: a command, error or decision longer than this is kept as its head (and matched by it)
MAX_VALUE_CHARS = 240

# ASCII-only classes: CJK text around an identifier must not become part of it. A word boundary or a
# look-ahead on the first character (which changes no match) lets a scan skip the positions that
# cannot start one.
_URL = re.compile(r"https?://[A-Za-z0-9\-._~:/?#@!$&*+,;=%]+", re.ASCII)
_SHA256 = re.compile(r"\b[0-9a-fA-F]{64}\b", re.ASCII)
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b", re.ASCII)
_ABS_PATH = re.compile(r"(?=[~./])(?<![\w.:/~-])(?:~|\.\.?)?/(?:[\w.\-]+/)+[\w.\-]+", re.ASCII)
_REL_PATH = re.compile(r"(?<![\w.\-/])(?:[\w\-.]+/)+[\w\-]+\.[A-Za-z][A-Za-z0-9]{0,7}\b", re.ASCII)
_PREFIXED_ID = re.compile(
    r"\b(?=[DdCcKkFfTtOoIiRr])(?:doc|docs|document|chunk|kb|file|ticket|order|case|item|ref)[-_](?=[\w\-]*\d)[A-Za-z0-9][\w\-]*",
    re.ASCII | re.IGNORECASE,
)
_ID_KEYS = r"doc_id|document_id|chunk_id|kb_id|knowledge_base_id|file_id|source_id"
_JSON_ID = re.compile(rf'"({_ID_KEYS})"\s*:\s*"?([A-Za-z0-9][\w\-.:]*)', re.ASCII)
_TRAILING = ".,;:!?'\")"

# only in extract_specifics (extract_identifiers keeps its list)
#: ``doc_id=doc-9`` as a summary writes a JSON pair back
_PAIR_ID = re.compile(rf"(?<![\w\"])({_ID_KEYS})=([A-Za-z0-9][\w\-.:]*)", re.ASCII)
#: a run of lower-case hex: a git commit hash when 7-40 long, with a letter and a digit, alone
_HEX_RUN = re.compile(r"\b(?=[0-9a-f]{7})[0-9a-f]++\b", re.ASCII)

_CMD_LINE = re.compile(r"^[ \t]*\$[ \t]+(\S[^\n]*)", re.ASCII | re.MULTILINE)
_CMD_ARG = re.compile(r'"(?:command|cmd)"\s*:\s*("(?:[^"\\\n]|\\.)*"|\[[^\]\n]*\])', re.ASCII)

#: IPv4 addresses (identifiers), versions and numbers with units (quantities), in one scan (the
#: look-ahead on the first character and the possessive repeats keep it from backtracking)
_UNITS = (
    r"[ \t]?(?:[KMGTP]i?B|[kKMG]b(?:ps)?|[KMG]Bps|bytes|ms|us|ns|sec|secs|seconds?|mins?|minutes?|hrs?|hours?|days?"
    r"|tokens?|[kMG]?Hz|rps|qps|req/s|cores?|s|h)(?![A-Za-z0-9_])"
    r"|[ \t]?%|[kKM](?:[ \t](?:tokens?|rows|messages|requests))?(?![A-Za-z0-9_])|x(?![A-Za-z0-9_])"
)
_NUMERIC = re.compile(
    r"\b(?=[v\d])(?<![\w.,\-])(?:(?P<ip>(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?)(?!\w|\.\w)"
    r"|(?P<version>(?:v\d++(?:\.\d++){1,3}|\d++\.\d++\.\d++)(?:-[0-9A-Za-z]++(?:\.[0-9A-Za-z]++)*+)?+)(?!\w|\.\w)"
    rf"|(?P<quantity>\d++(?:,\d{{3}})*+(?:\.\d+)?+(?:{_UNITS})))",
    re.ASCII,
)
_DECADE = re.compile(r"\d{4}s", re.ASCII)  # "the 1990s" is not a duration

_TRACEBACK = "Traceback (most recent call last):"
#: the tail of ``ValueError: …`` / ``pkg.SomeException: …``; the dotted name before it is read back in code
_EXCEPTION_TAIL = re.compile(r"(?:Error|Exception):[ \t]+\S[^\n]*", re.ASCII)
_EXCEPTION_START = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*\Z", re.ASCII)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")
_ERROR_LINE = re.compile(
    r"(?=[EFpef])(?:(?:^|(?<=[\s:\]]))(?:Error|ERROR|FATAL|Fatal|panic)|(?:^|(?<=:)|(?<=: ))(?:error|fatal))(?:\[[\w\-]+\])?:[ \t]+\S[^\n]*",
    re.ASCII | re.MULTILINE,
)
_FAILED_LINE = re.compile(r"^[ \t]*+(?:FAILED|FAIL:?)[ \t]+\S[^\n]*", re.ASCII | re.MULTILINE)
_EXCEPTION_NAME = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning))\b", re.ASCII)
_FAILED_TEST = re.compile(r"^(?:FAILED|FAIL:?)[ \t]+(\S+)", re.ASCII)

_DECISION = re.compile(
    r"(?=[WwLlDd决确我])(?:"
    r"(?<![A-Za-z])(?:(?:[Ww]e(?:'ll| will| are going to| shall| have decided to| decided to| agreed to| chose to))|[Ll]et's|[Dd]ecided to)"
    r"[ \t]+(?:use|go with|switch to|stick with|adopt|migrate to|move to|pin|standardi[sz]e on|replace|drop|remove|disable|enable|revert)\b"
    r"[^.;!?\n]*"
    r"|(?<![A-Za-z])[Dd]ecision:[ \t]+\S[^\n]*"
    r"|(?:我们|我)?(?:决定|确定)(?:使用|采用|改用|用|保留|不再|放弃)[^。；！？\n]*"
    r"|我们(?:将|会)(?:使用|采用|改用)[^。；！？\n]*)",
    re.ASCII,
)

#: literals one of which every error / decision match contains: texts without any are not scanned
_ERROR_WORDS = ("rror", "ERROR", "FATAL", "atal", "anic", "FAIL", "Exception", "Traceback")
_DECISION_WORDS = ("e'll", "e will", "e are going", "e shall", "ecided", "greed to", "hose to", "et's", "ecision:", "决定", "确定", "我们将", "我们会")

#: an ASCII digit: every git hash, IPv4 address, version, number with a unit and prefixed id has one
_DIGIT = re.compile(r"[0-9]", re.ASCII)
#: a text's bytes (ASCII, anything else as ``?``) with each hex digit as ``h``, ``-`` as itself and
#: anything else as a space: a SHA-256 needs 64 ``h`` in a row, a UUID its shape
_HEX_MASK = bytes(ord("h") if chr(i) in "0123456789abcdefABCDEF" else ord("-") if chr(i) == "-" else 32 for i in range(256))
_HEX_64 = b"h" * 64
_UUID_SHAPE = b"hhhhhhhh-hhhh-hhhh-hhhh-hhhhhhhhhhhh"
#: the same bytes with the last letter of each prefix of a prefixed id (doc, docs, chunk, kb, ticket, ...)
#: as ``p`` and ``-`` / ``_`` as ``-``: a prefixed id needs a ``p-``
_PREFIX_MASK = bytes(ord("p") if chr(i) in "cstkbermfCSTKBERMF" else ord("-") if chr(i) in "-_" else 32 for i in range(256))

_SPACE = re.compile(r"\s+")
#: what a text shows, for lookups: runs of URL characters that neither start nor end with
#: punctuation, and runs of path / id characters inside them (possessive: linear on any input)
_TOKEN = re.compile(r"[A-Za-z0-9\-_~/#@$&*+=%]++(?:[.,;:!?]++[A-Za-z0-9\-_~/#@$&*+=%]++)*+", re.ASCII)
_TAIL = re.compile(r"/(?=([^\n]+))")
_PIECE = re.compile(r"[A-Za-z0-9\-_~/]++(?:\.++[A-Za-z0-9\-_~/]++)*+", re.ASCII)
_HEX = re.compile(r"[0-9a-fA-F\-]+", re.ASCII)


@dataclass(frozen=True, slots=True)
class Specific:
    """One concrete thing a text mentions: ``kind`` is one of :data:`KINDS`, ``value`` as written
    (an identifier from a JSON pair as ``key=value``; a command, error or decision with its
    whitespace collapsed and at most :data:`MAX_VALUE_CHARS` long)."""

    kind: SpecificKind
    value: str


def extract_identifiers(text: str) -> list[str]:
    """URLs, SHA-256 hashes, UUIDs, file paths and document/chunk/kb ids in ``text``, in order."""
    return list(_IDENTIFIERS.get(text, _identifiers)[1])


_Hits = tuple[tuple[int, int, str, str], ...]


def _identifiers(text: str) -> tuple[_Hits, tuple[str, ...]]:
    """(the identifier hits of ``text``, :func:`_identifier_hits` without ``more``; the distinct
    identifiers among them, in order): :func:`extract_specifics` of the same text reuses the hits
    when they are its own (see there)."""
    hits = tuple(_identifier_hits(text, more=False))
    seen: dict[str, None] = {}
    for *_, ident in hits:
        seen.setdefault(ident, None)
    return hits, tuple(seen)


# -- grouped identifiers (a summary's compact form) ------------------------------------------------
#: an extension a grouped form factors out of its members (``.py``, ``.html``)
_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}$", re.ASCII)
#: the letters and digits after an id's last ``-`` / ``_`` (``doc-123456``)
_ID_TAIL = re.compile(r"[A-Za-z0-9]+", re.ASCII)
#: a brace list of at least two members: ``{a,b}`` (no space, brace or empty member inside)
_BRACES = re.compile(r"\{([^\s{},]+(?:,[^\s{},]+)+)\}")
#: what may stand right before or after a brace list, as part of the same identifier
_BESIDE = re.compile(r"[^\s{},]*")


def group_key(ident: str) -> tuple[str, str, str] | None:
    """``(head, member, tail)`` of an identifier a grouped form may write: a path or URL split at
    its last ``/`` (the directory or URL prefix is the head), else an id split after its last
    ``-`` or ``_`` when letters and digits follow (``doc-`` + ``123456``); the member's extension
    (``.py``, ``.html``) is the tail. ``None`` for what is written whole: no such split, or a
    space, comma or brace in it (a hash, a UUID's head is its own group, ``doc_id=9``)."""
    if any(c in ident for c in " \t\n,{}"):
        return None
    cut = ident.rfind("/")
    if cut < 0:
        cut = max(ident.rfind("-"), ident.rfind("_"))
        if cut <= 0 or not _ID_TAIL.fullmatch(ident, cut + 1):
            return None
    elif cut == len(ident) - 1:
        return None
    head, name = ident[: cut + 1], ident[cut + 1 :]
    ext = _EXTENSION.search(name)
    if ext is not None and ext.start() > 0:
        return head, name[: ext.start()], name[ext.start() :]
    return head, name, ""


def group_identifiers(idents: Iterable[str]) -> list[str]:
    """``idents`` written compactly, one entry per group, in order of each group's first member:
    identifiers with the same head and tail (:func:`group_key`) as ``head{a,b,c}tail`` (a shell's
    brace expansion, members in order), any other as it is. :func:`expand_grouped` of the entries
    joined by spaces gives ``idents`` back, each once."""
    groups: dict[tuple[str, str] | str, list[str]] = {}
    for x in dict.fromkeys(idents):
        key = group_key(x)
        if key is None:
            groups[x] = [x]
        else:
            groups.setdefault((key[0], key[2]), []).append(key[1])
    out = []
    for k, members in groups.items():
        if isinstance(k, str):
            out.append(k)
        elif len(members) == 1:
            out.append(k[0] + members[0] + k[1])
        else:
            out.append(f"{k[0]}{{{','.join(members)}}}{k[1]}")
    return out


def expand_grouped(text: str) -> str:
    """``text`` with every grouped form ``head{a,b}tail`` (head and tail: the characters right
    before and after the braces up to a space, comma or brace; at least two members, none empty)
    written out as ``headatail headbtail``, as a shell's brace expansion gives them. Text without
    a brace list is returned as it is. The one reading rule of :func:`group_identifiers`."""
    if "{" not in text:
        return text
    out: list[str] = []
    at = 0
    for m in _BRACES.finditer(text):
        start = m.start()
        while start > at and text[start - 1] not in " \t\n\r\f\v{},":
            start -= 1
        tail = _BESIDE.match(text, m.end())
        end = tail.end() if tail is not None else m.end()
        head, rest = text[start : m.start()], text[m.end() : end]
        out.append(text[at:start])
        out.append(" ".join(head + x + rest for x in m.group(1).split(",")))
        at = end
    out.append(text[at:])
    return "".join(out)


def extract_specifics(text: str) -> list[Specific]:
    """Every specific ``text`` mentions, in order of first appearance, each ``(kind, value)`` once:
    identifiers (those of :func:`extract_identifiers`, ``doc_id=…`` pairs, git hashes, IPv4
    addresses), paths, URLs, shell commands (``$ …`` lines, ``"command"`` / ``"cmd"`` values of
    tool-call arguments), numbers with units (``512 MB``, ``3.2s``, ``45%``, ``3x``, ``v1.2.3``),
    error messages (a traceback's last line, ``ValueError: …``, ``Error: …``, ``error: …`` after a
    location, ``FAILED …``) and decisions (``we will use …``, ``let's switch to …``, ``decided to
    …``, ``Decision: …``, 决定使用…). Conservative: ordinary prose gives nothing but what it names."""
    # ``more`` differs only where the text holds "_id=" (a key=value pair): elsewhere the hits
    # extract_identifiers found for this text (the plan and the summarizer ask first) are these
    known = None if "_id=" in text else _IDENTIFIERS.peek(text)
    spans: Sequence[tuple[int, int, str, str]] = known[0] if known is not None else _identifier_hits(text, more=True)
    hits = [(start, kind, value) for start, _, kind, value in spans]
    if _DIGIT.search(text) is not None:  # each git hash, IPv4 address, version and quantity has one
        hits.extend(_more_hits(text, spans))
    if "$" in text or '"c' in text:
        hits.extend(_command_hits(text))
    if any(w in text for w in _ERROR_WORDS):
        hits.extend(_error_hits(text))
    if any(w in text for w in _DECISION_WORDS):
        hits.extend((m.start(), "decision", _clip(m.group())) for m in _DECISION.finditer(text))
    if not hits:
        return []
    seen: dict[tuple[str, str], None] = {}
    for _, kind, value in sorted(hits, key=lambda h: h[0]):
        if value:
            seen.setdefault((kind, value), None)
    return [Specific(kind, value) for kind, value in seen]  # type: ignore[arg-type]


def message_texts(messages: Iterable[Message], *, shown: Callable[[str], str] | None = None) -> list[str]:
    """What a model sees of ``messages``, as texts: each content (a pruned result's preview when
    the messages are a surface's) and each tool call as ``name arguments``. Reasoning blocks and
    attachment bytes are not counted as seen. ``shown`` maps a tool result's content to what the
    tool said (``engine.core.previews.replacement_preview``: the engine's offload frame, with its SHA-256
    and token count, is not a specific of the conversation)."""
    out: list[str] = []
    for m in messages:
        if m.content:
            out.append(shown(m.content) if shown is not None and m.role == "tool" else m.content)
        out.extend(f"{c.name} {c.arguments}" for c in m.tool_calls)
    return out


# -- dropped specifics ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DroppedSpecific:
    """A specific visible before a compaction that neither its summary nor the surface after it
    shows. ``referenced``: the current request or the retained tail names it (or a short form of
    it), so the model is asked about something it can no longer see."""

    kind: str
    value: str
    referenced: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value, "referenced": self.referenced}

    @classmethod
    def from_json(cls, data: Any) -> "DroppedSpecific | None":
        """Tolerant: ``None`` unless an object with string ``kind`` and ``value`` (also an object
        with those attributes, such as an event's entry)."""
        if not isinstance(data, Mapping):
            data = {k: getattr(data, k, None) for k in ("kind", "value", "referenced")}
        kind, value = data.get("kind"), data.get("value")
        if not isinstance(kind, str) or not kind or not isinstance(value, str) or not value:
            return None
        return cls(kind, value, data.get("referenced") is True)


@dataclass(frozen=True, slots=True)
class DroppedSpecifics:
    """What one compaction dropped. ``seen``: distinct specifics visible before it; ``dropped``: the
    dropped ones in order of appearance, at most :data:`MAX_DROPPED` (the referenced ones kept first
    when there are more; ``truncated`` says so); ``dropped_count`` / ``referenced_count``: all of
    them, listed or not (default: counted from ``dropped``)."""

    seen: int
    dropped: tuple[DroppedSpecific, ...] = ()
    truncated: bool = False
    dropped_count: int | None = None
    referenced_count: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.dropped, tuple):
            object.__setattr__(self, "dropped", tuple(self.dropped))
        if self.dropped_count is None:
            object.__setattr__(self, "dropped_count", len(self.dropped))
        if self.referenced_count is None:
            object.__setattr__(self, "referenced_count", sum(1 for d in self.dropped if d.referenced))

    @property
    def referenced(self) -> tuple[DroppedSpecific, ...]:
        """The listed dropped specifics the request or the retained tail refers to."""
        return tuple(d for d in self.dropped if d.referenced)

    def by_kind(self) -> dict[str, tuple[DroppedSpecific, ...]]:
        """The listed dropped specifics grouped by kind, in :data:`KINDS` order (unknown kinds last)."""
        order = {k: i for i, k in enumerate(KINDS)}
        groups: dict[str, list[DroppedSpecific]] = {}
        for d in sorted(self.dropped, key=lambda d: order.get(d.kind, len(KINDS))):
            groups.setdefault(d.kind, []).append(d)
        return {k: tuple(v) for k, v in groups.items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "seen": self.seen,
            "dropped_count": self.dropped_count,
            "referenced_count": self.referenced_count,
            "truncated": self.truncated,
            "dropped": [d.to_json() for d in self.dropped],
        }

    def event_fields(self) -> dict[str, Any]:
        """The ``summary`` event keys (docs/events.md): ``specifics_seen``, ``dropped_specifics``,
        ``dropped_referenced``, ``dropped`` (a list of ``{kind, value, referenced}``),
        ``dropped_truncated``."""
        return {
            "specifics_seen": self.seen,
            "dropped_specifics": self.dropped_count,
            "dropped_referenced": self.referenced_count,
            "dropped": [d.to_json() for d in self.dropped],
            "dropped_truncated": self.truncated,
        }

    @classmethod
    def from_json(cls, data: Any) -> "DroppedSpecifics | None":
        """Tolerant read of :meth:`to_json` or of a ``summary`` event's data (:meth:`event_fields`'
        keys; a parsed ``SummaryEvent`` too): ``None`` when ``data`` carries no count of specifics
        seen (not an object, or an event written before these keys existed). Entries that are not
        ``{kind, value}`` objects are skipped; a count missing or of the wrong type is recounted."""
        if not isinstance(data, Mapping):
            if not hasattr(data, "specifics_seen"):
                return None
            data = {k: getattr(data, k, None) for k in ("specifics_seen", "dropped_specifics", "dropped_referenced", "dropped", "dropped_truncated")}
        event = "specifics_seen" in data
        seen = data.get("specifics_seen" if event else "seen")
        if not _count(seen):
            return None
        raw = data.get("dropped")
        items = tuple(d for d in (DroppedSpecific.from_json(x) for x in (raw if isinstance(raw, (list, tuple)) else ())) if d is not None)
        total = data.get("dropped_specifics" if event else "dropped_count")
        referenced = data.get("dropped_referenced" if event else "referenced_count")
        truncated = data.get("dropped_truncated" if event else "truncated")
        return cls(
            seen=seen,
            dropped=items,
            truncated=truncated is True,
            dropped_count=total if _count(total) and total >= len(items) else None,
            referenced_count=referenced if _count(referenced) else None,
        )


def dropped_specifics(*, before: Sequence[str], summary: str | None, after: Sequence[str], referenced: Sequence[str] = (), limit: int = MAX_DROPPED) -> DroppedSpecifics:
    """The specifics of ``before`` that are neither in ``summary`` nor in ``after``.

    ``before``: the texts visible before the compaction in the range it replaced (a pruned result
    as its preview) and the previous summary; ``after``: every text on the surface after it (system
    prompt, kept messages, previews); ``referenced``: the current request and the retained tail.

    Kept means shown again: the same value is among the tokens of the summary or the surface (a
    number with its unit regardless of spacing and case, an id of a ``doc_id=…`` pair also by its
    bare value, a path or id also at the end of a longer path or URL), or, for a command, an error
    or a decision, the text contains it verbatim (for a command also JSON-escaped). A dropped specific
    is ``referenced`` when the ``referenced`` texts name it or a short form of it: a path's or URL's
    trailing part (``main.py``), a hash's 7+-character prefix, a pair's bare value, an error's
    exception name or failed test. A summary's grouped identifiers (``dir/{a,b}.py``) are read
    as their members (:func:`expand_grouped`); so is the previous summary in
    :func:`dropped_at_compaction`."""
    return _dropped_of(_specifics_of(before), summary, lambda: after, lambda: referenced, limit)


def _dropped_of(
    seen: list[Specific], summary: str | None, after_texts: Callable[[], Sequence[str]], referenced_texts: Callable[[], Sequence[str]], limit: int
) -> DroppedSpecifics:
    """:func:`dropped_specifics` of the specifics ``seen`` before; the texts after and the
    referenced ones are asked for only when something was seen (nothing to look up otherwise)."""
    if not seen:
        return DroppedSpecifics(seen=0)
    after, referenced = after_texts(), referenced_texts()
    summary = expand_grouped(summary) if summary else summary  # its grouped identifiers, read back whole
    shown_texts = [t for t in ([summary] if summary else []) + list(after) if t]
    # the retained tail is on the surface after: its texts are indexed once, for both lookups
    on_surface = set(shown_texts)
    both = _Index([t for t in referenced if t in on_surface])
    taken = set(both.texts)
    shown = _Index.union(both, _Index([t for t in shown_texts if t not in taken]))
    dropped = [s for s in seen if not shown.has(s)]
    if not dropped:
        return DroppedSpecifics(seen=len(seen))
    refs = _References.union(both, _Index([t for t in referenced if t and t not in on_surface]))
    flagged = [DroppedSpecific(s.kind, s.value, refs.names(s)) for s in dropped]
    total_ref = sum(1 for d in flagged if d.referenced)
    listed = flagged
    if len(flagged) > limit:
        first = [i for i, d in enumerate(flagged) if d.referenced][:limit]
        rest = [i for i, d in enumerate(flagged) if not d.referenced][: limit - len(first)]
        listed = [flagged[i] for i in sorted(first + rest)]
    return DroppedSpecifics(seen=len(seen), dropped=tuple(listed), truncated=len(listed) < len(flagged), dropped_count=len(flagged), referenced_count=total_ref)


def dropped_at_compaction(
    *,
    summarized: Sequence[Message],
    previous_summary: str | None,
    summary: str | None,
    kept: Sequence[Message],
    system_prompt: str | None = None,
    current_request: str | None = None,
    retained: Sequence[Message] | None = None,
    limit: int = MAX_DROPPED,
    shown: Callable[[str], str] | None = None,
) -> DroppedSpecifics:
    """:func:`dropped_specifics` of one compaction, over messages, as the compactor records it:
    before = what the model saw of ``summarized`` (as shown: a pruned result as its preview) and
    ``previous_summary``; after = ``summary``, ``system_prompt`` and ``kept`` (the new surface's
    messages as shown); referenced = ``current_request`` and ``retained`` (default: ``kept``).
    For a source's recorded compactions and what-if runs, so every view counts the same way."""
    before = message_texts(summarized, shown=shown) + ([expand_grouped(previous_summary)] if previous_summary else [])
    return _dropped_of(
        _specifics_of(before),
        summary,
        lambda: ([system_prompt] if system_prompt else []) + message_texts(kept, shown=shown),
        lambda: ([current_request] if current_request else []) + message_texts(kept if retained is None else retained, shown=shown),
        limit,
    )


# -- extraction -----------------------------------------------------------------------------------


def _identifier_hits(text: str, *, more: bool) -> list[tuple[int, int, str, str]]:
    """(start, end, kind, value) of every identifier, path and URL; ``more`` adds the kinds only
    :func:`extract_specifics` reports (pairs, git hashes, IPv4)."""
    found = [(m.start(), m.end(), "url", m.group().rstrip(_TRAILING)) for m in _URL.finditer(text)]
    rest = _URL.sub(_blank, text) if found else text  # same offsets, URL innards hidden from the other patterns
    pairs = [(m.start(), m.end(), "identifier", f"{m.group(1)}={m.group(2).rstrip(_TRAILING)}") for m in _JSON_ID.finditer(rest)]
    if more and "_id=" in rest:
        pairs.extend((m.start(), m.end(), "identifier", f"{m.group(1)}={m.group(2).rstrip(_TRAILING)}") for m in _PAIR_ID.finditer(rest))
    if pairs:  # "doc_id": "doc-9" gives doc_id=doc-9, not also doc-9
        rest = _blank_spans(rest, pairs)
        found.extend(pairs)
    slash = "/" in rest
    raw = rest.encode("ascii", "replace")  # one byte per character: the masks below keep no offsets
    hexes = raw.translate(_HEX_MASK)
    for pattern, kind, needed in (
        (_SHA256, "identifier", _HEX_64 in hexes),
        (_UUID, "identifier", _UUID_SHAPE in hexes),
        (_ABS_PATH, "path", slash),
        (_REL_PATH, "path", slash),
        (_PREFIXED_ID, "identifier", b"p-" in raw.translate(_PREFIX_MASK) and _DIGIT.search(rest) is not None),
    ):
        if needed:  # a pattern whose required character is absent cannot match
            found.extend((m.start(), m.end(), kind, m.group().rstrip(_TRAILING)) for m in pattern.finditer(rest))
    found.sort(key=lambda f: f[0])
    return [f for f in found if len(f[3]) > 3]


def _more_hits(text: str, spans: Sequence[tuple[int, int, str, str]]) -> Iterable[tuple[int, str, str]]:
    """Git hashes, IPv4 addresses, versions and numbers with units outside the identifiers, paths
    and URLs (``spans``, sorted by start)."""
    starts = [sp[0] for sp in spans]
    reach: list[int] = []  # reach[i]: the furthest end of spans[0..i]
    for sp in spans:
        reach.append(max(sp[1], reach[-1]) if reach else sp[1])

    def inside(a: int, b: int) -> bool:
        i = bisect.bisect_left(starts, b)
        return i > 0 and reach[i - 1] > a

    for m in _HEX_RUN.finditer(text):
        value = m.group()
        if len(value) <= 40 and not value.isdigit() and any(c.isdigit() for c in value) and not inside(*m.span()):
            yield m.start(), "identifier", value
    for m in _NUMERIC.finditer(text):
        if spans and inside(*m.span()):
            continue
        if m.lastgroup == "ip":
            yield m.start(), "identifier", m.group()
        elif m.lastgroup == "version":
            yield m.start(), "quantity", m.group()
        elif not _DECADE.fullmatch(m.group()):
            yield m.start(), "quantity", _SPACE.sub(" ", m.group())


def _command_hits(text: str) -> Iterable[tuple[int, str, str]]:
    """``$ …`` lines and ``"command"`` / ``"cmd"`` values (none without a ``$`` or a ``"c``)."""
    if "$" in text:
        for m in _CMD_LINE.finditer(text):
            yield m.start(1), "command", _clip(m.group(1))
    if '"c' not in text:
        return
    for m in _CMD_ARG.finditer(text):
        try:
            value = json.loads(m.group(1))
        except ValueError:
            continue
        if isinstance(value, list):
            value = " ".join(v for v in value if isinstance(v, str))
        if isinstance(value, str):
            yield m.start(1), "command", _clip(value)


def _error_hits(text: str) -> list[tuple[int, str, str]]:
    hits: list[tuple[int, int, str]] = []
    at = text.find(_TRACEBACK)
    while at >= 0:  # the exception line: the first unindented line after the frames
        pos = text.find("\n", at) + 1
        while 0 < pos < len(text):
            end = text.find("\n", pos)
            end = len(text) if end < 0 else end
            line = text[pos:end]
            if line.strip() and not line[0].isspace():
                if not line.startswith(_TRACEBACK):
                    hits.append((pos, end, line))
                break
            pos = end + 1
        at = text.find(_TRACEBACK, max(pos, at + len(_TRACEBACK)))  # frames are read once
    hits.extend((m.start(), m.end(), m.group()) for m in _ERROR_LINE.finditer(text))
    if "FAIL" in text:
        hits.extend((m.start(), m.end(), m.group()) for m in _FAILED_LINE.finditer(text))
    for m in _EXCEPTION_TAIL.finditer(text):  # the exception's dotted name, read back from "Error:"
        a = m.start()
        stop = max(0, a - 200)  # no exception name is longer
        while a > stop and text[a - 1] in _NAME_CHARS:
            a -= 1
        name = text[a : m.start()].lstrip(".")
        if _EXCEPTION_START.match(name + "E"):
            a = m.start() - len(name)
            hits.append((a, m.end(), text[a : m.end()]))
    out: list[tuple[int, str, str]] = []
    covered = -1
    for start, end, value in sorted(hits, key=lambda h: (h[0], -h[1])):  # one error per span
        if start >= covered:
            out.append((start, "error", _clip(value)))
            covered = end
    return out


def _clip(text: str) -> str:
    return _SPACE.sub(" ", text).strip()[:MAX_VALUE_CHARS].rstrip()


def _blank(match: re.Match[str]) -> str:
    return " " * len(match.group())


def _blank_spans(text: str, spans: Iterable[tuple[int, int, Any, Any]]) -> str:
    """``text`` with each ``(start, end, ...)`` span replaced by spaces (same offsets)."""
    out: list[str] = []
    at = 0
    for start, end, *_ in sorted(spans, key=lambda s: s[0]):
        if start < at:
            start = at
        if end <= start:
            continue
        out.append(text[at:start])
        out.append(" " * (end - start))
        at = end
    out.append(text[at:])
    return "".join(out)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# -- matching -------------------------------------------------------------------------------------

_VERBATIM = frozenset({"command", "error", "decision"})


def _specifics_of(texts: Iterable[str]) -> list[Specific]:
    """The distinct specifics of ``texts``, in order (a text that repeats is extracted once)."""
    out: dict[Specific, None] = {}
    done: set[str] = set()
    for text in texts:
        if not text or text in done:
            continue
        done.add(text)
        for s in _cached_specifics(text):
            out.setdefault(s, None)
    return list(out)


class _TextCache:
    """Results computed from a text, by text, least recently used dropped first, holding at most
    ``limit`` characters of text: the same messages are seen again by the next compaction (its
    surface after), by what-if runs and by history views. Thread-safe; a result never depends on it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chars = 0
        self.entries: OrderedDict[str, Any] = OrderedDict()
        self.lock = threading.Lock()

    def peek(self, text: str) -> Any:
        """The result kept for ``text`` (``None``: none), computing nothing."""
        with self.lock:
            hit = self.entries.get(text)
            if hit is not None:
                self.entries.move_to_end(text)
            return hit

    def get(self, text: str, compute: Any) -> Any:
        with self.lock:
            hit = self.entries.get(text)
            if hit is not None:
                self.entries.move_to_end(text)
                return hit
        found = compute(text)
        if len(text) <= self.limit // 8:
            with self.lock:
                if text not in self.entries:
                    self.entries[text] = found
                    self.chars += len(text)
                    while self.chars > self.limit and self.entries:
                        old, _ = self.entries.popitem(last=False)
                        self.chars -= len(old)
        return found

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.chars = 0


_EXTRACTED = _TextCache(8_000_000)  # extract_specifics by text
_SHOWN = _TextCache(8_000_000)  # what a text shows (tokens, numbers with units) by text
_IDENTIFIERS = _TextCache(8_000_000)  # extract_identifiers (its hits too) by text: the summarizer, the plan and extract_specifics ask again


def _cached_specifics(text: str) -> tuple[Specific, ...]:
    return _EXTRACTED.get(text, lambda t: tuple(extract_specifics(t)))  # type: ignore[no-any-return]


def _shown(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """The tokens of ``text`` (with their pieces and trailing parts) and its numbers with units."""
    tokens = set(_TOKEN.findall(text))
    tokens.update(_PIECE.findall(" ".join(tokens)))  # pieces of the distinct tokens only
    slashed = "\n".join([t for t in tokens if "/" in t and len(t) <= _MAX_TAILED_TOKEN and t.count("/") <= _MAX_TAILS])
    tokens.update(_TAIL.findall(slashed))  # every trailing part of those, at each "/"
    quantities = frozenset(_key(Specific("quantity", m.group())) for m in _NUMERIC.finditer(text) if m.lastgroup != "ip")
    return frozenset(tokens), quantities


def _key(s: Specific) -> str:
    return s.value.replace(" ", "").lower() if s.kind == "quantity" else s.value


def _pair_value(s: Specific) -> str | None:
    """``doc-9`` of ``doc_id=doc-9``."""
    if s.kind == "identifier" and "=" in s.value:
        value = s.value.split("=", 1)[1]
        return value if len(value) > 3 else None
    return None


#: trailing parts looked at per path or URL, from its end (a path is not named by its first segments)
_MAX_TAILS = 16
#: tokens longer than this get no trailing parts indexed (a base64 blob is not a path)
_MAX_TAILED_TOKEN = 400


def _tails(value: str) -> Iterable[str]:
    """The trailing parts of a path or URL at each ``/``, from the end, at most :data:`_MAX_TAILS`:
    ``a/b/c.py`` gives ``c.py``, ``b/c.py``."""
    at = len(value)
    for _ in range(_MAX_TAILS):
        at = value.rfind("/", 0, at)
        if at < 0:
            return
        if at + 1 < len(value):
            yield value[at + 1 :]


class _Index:
    """What a set of texts shows, for looking specifics up without extracting them all: its
    tokens (runs of URL characters, trailing punctuation left out), their pieces (runs of path and
    id characters), the trailing parts of both at each ``/``, its numbers with units, and the text
    itself for verbatim lookups."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = [t for t in texts if t]
        self.joined = "\n".join(self.texts)
        parts = [_SHOWN.get(t, _shown) for t in self.texts]
        self.tokens: set[str] = set().union(*(p[0] for p in parts))
        self.quantities: set[str] = set().union(*(p[1] for p in parts))

    @classmethod
    def union(cls, *parts: "_Index") -> Self:
        out = cls.__new__(cls)
        out.texts = [t for p in parts for t in p.texts]
        out.joined = "\n".join(p.joined for p in parts)
        out.tokens = set().union(*(p.tokens for p in parts))
        out.quantities = set().union(*(p.quantities for p in parts))
        return out

    def has(self, s: Specific) -> bool:
        if s.kind in _VERBATIM:
            if s.value in self.joined:
                return True
            escaped = json.dumps(s.value, ensure_ascii=False)[1:-1]
            return s.kind == "command" and escaped != s.value and escaped in self.joined
        if s.kind == "quantity":
            return _key(s) in self.quantities
        if s.value in self.tokens:
            return True
        if s.kind == "identifier":
            bare = _pair_value(s)
            return bare is not None and bare in self.tokens
        return s.kind == "path" and s.value.lstrip("./~") in self.tokens


class _References(_Index):
    """The request and the retained tail: their tokens name a dropped specific or a short form of it."""

    def names(self, s: Specific) -> bool:
        if self.has(s):
            return True
        words = self.tokens
        if s.kind in ("path", "url"):
            # a trailing part that says something (a file name, a segment with a digit), not "a" or "docs"
            return any(t in words for t in _tails(s.value) if len(t) >= 4 and ("." in t or "/" in t or any(c.isdigit() for c in t)))
        if s.kind == "identifier":
            bare = _pair_value(s)
            if bare is not None:
                return bare in words
            if _HEX.fullmatch(s.value) and len(s.value) > 7:
                return any(s.value[:n] in words for n in range(7, len(s.value)))
            return False
        if s.kind == "error":
            failed = _FAILED_TEST.match(s.value)
            if failed:
                node = failed.group(1)
                return node in words or node.rsplit("::", 1)[-1] in words
            name = _EXCEPTION_NAME.match(s.value)
            return name is not None and name.group(1) in words
        return False
