"""The data rules the store applies on both backends: what it reads and what it lets through the
write door (docs/schema.md, "Data rules").

Reading: a row another program wrote that breaks docs/schema.md becomes :class:`CorruptRow`
(``corrupt_row``, naming table, id and column), never a raw ``ValueError`` / ``RecursionError``.
JSON columns are decoded by :func:`tolerant_json_loads` (the engine's ``json_deserializer``), which
gives a :class:`CorruptJSON` marker instead of raising; :func:`checked` turns a marker into the error
where the row's table and id are known.

Writing: NUL (``\\x00``) in a text column is stored as the six visible characters ``\\u0000`` (PostgreSQL
text cannot hold NUL; SQLite would take it: both now store the same); a lone surrogate anywhere is
refused (it is not text: neither backend can encode it); a value longer than its column is refused
before the database sees it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..core.errors import EngineError

#: what NUL is stored as in a text column (docs/schema.md, "Data rules")
NUL_ESCAPE = "\\u0000"
#: JSON nested deeper than this is refused at the write door (and cannot be decoded on read)
MAX_JSON_DEPTH = 200


class CorruptRow(EngineError):
    """A stored row breaks docs/schema.md: ``table``, ``id`` and ``column`` name where."""

    code = "corrupt_row"

    def __init__(self, table: str | None, id: Any, column: str | None, why: str) -> None:
        if table:
            where = f" in {table}" + (f" (id {id})" if id is not None else "") + (f", column {column}" if column else "")
        else:  # SQLite did not say which row (an unparsable timestamp, text that is not UTF-8)
            where = f" (column {column})" if column else ""
        super().__init__(f"corrupt row{where}: {why}")
        self.table = table
        self.id = id
        self.column = column
        self.why = why

    def to_json(self) -> dict:
        return {"error": {"code": self.code, "message": self.message, "table": self.table, "id": self.id, "column": self.column}}


class InvalidSetting(EngineError):
    """A store-wide setting holds something that is not what its key needs."""

    code = "invalid_setting"


class ReadOnlyDatabase(EngineError):
    """The database was opened read-only (a file or directory without write permission)."""

    code = "read_only"


class CorruptJSON:
    """What :func:`tolerant_json_loads` gives for a JSON column value that cannot be decoded."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"CorruptJSON({self.why!r})"


#: the decoder ``json.loads`` uses (default settings), for its value-only step
_raw_decode = json.JSONDecoder().raw_decode


def tolerant_json_loads(text: str | bytes) -> Any:
    """``json.loads`` that never raises: undecodable or too deeply nested text gives a :class:`CorruptJSON`.

    Text that is one JSON value from its first character to its last (what the store writes) is
    decoded without ``json.loads``' own steps around the decoder (a BOM check, whitespace either
    side), about 3 times faster on a short value and the same value; anything else goes through
    ``json.loads``."""
    if type(text) is str:
        try:
            value, end = _raw_decode(text)
        except (ValueError, RecursionError):
            pass
        else:
            if end == len(text):
                return value
    try:
        return json.loads(text)
    except RecursionError:
        return CorruptJSON("a JSON value nested too deeply to read")
    except ValueError as exc:
        msg = getattr(exc, "msg", None) or "not valid JSON"
        pos = getattr(exc, "pos", None)
        return CorruptJSON(f"not valid JSON ({msg}{f' at character {pos}' if pos is not None else ''})")


def checked(value: Any, table: str, id: Any, column: str) -> Any:
    """``value``, or :class:`CorruptRow` when it is a :class:`CorruptJSON` marker."""
    if isinstance(value, CorruptJSON):
        raise CorruptRow(table, id, column, value.why)
    return value


def as_int(value: Any, table: str, id: Any, column: str) -> int | None:
    """An integer column's value (``None`` stays ``None``); anything not a whole number is corrupt."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    try:
        if isinstance(value, str):
            return int(value.strip())
        if isinstance(value, float) and value.is_integer():
            return int(value)
    except ValueError:
        pass
    raise CorruptRow(table, id, column, f"not a whole number ({str(value)[:40]!r})")


# -- writing ------------------------------------------------------------------------------------
def _has_surrogate(s: str) -> bool:
    if s.isascii():  # no surrogate in ASCII text (most text): no encoded copy to make
        return False
    try:
        s.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def clean_text(value: Any, field: str, *, code: str = "invalid_message", limit: int | None = None) -> Any:
    """A text value as the store writes it: NUL escaped as :data:`NUL_ESCAPE`; a lone surrogate,
    or more than ``limit`` characters, refused with ``code`` naming ``field``. Non-text passes."""
    if not isinstance(value, str):
        return value
    if _has_surrogate(value):
        raise EngineError(f"{field} holds a lone surrogate (not text: it cannot be stored as UTF-8)", code=code)
    if "\x00" in value:
        value = value.replace("\x00", NUL_ESCAPE)
    if limit is not None and len(value) > limit:
        raise EngineError(f"{field} is {len(value)} characters long; at most {limit} can be stored", code=code)
    return value


def check_json(value: Any, field: str, *, code: str = "invalid_message") -> None:
    """Refuse a JSON value the store could not write or read back the same on both backends: a
    lone surrogate in any key or string, or nesting deeper than :data:`MAX_JSON_DEPTH`. NUL inside
    JSON needs nothing (it is written as the escape ``\\u0000`` and read back as NUL). Iterative:
    a 100k-deep value is refused, not a ``RecursionError``."""
    if value is None:  # nothing to check (most message rows: no calls, metadata or parts)
        return
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, str):
            if _has_surrogate(v):
                raise EngineError(f"{field} holds a lone surrogate (not text: it cannot be stored as UTF-8)", code=code)
        elif isinstance(v, (dict, list, tuple)):
            if depth >= MAX_JSON_DEPTH:
                raise EngineError(f"{field} is nested deeper than {MAX_JSON_DEPTH} levels", code=code)
            items = list(v.items()) if isinstance(v, dict) else [(None, x) for x in v]
            for k, x in items:
                if isinstance(k, str) and _has_surrogate(k):
                    raise EngineError(f"{field} holds a lone surrogate in a key", code=code)
                stack.append((x, depth + 1))


def scrub_text(value: Any) -> Any:
    """Diagnostic text the engine records about a failure (event data, run and request error
    messages) must always be recordable: a lone surrogate becomes U+FFFD, NUL the escape. Strings
    inside lists and objects are scrubbed too, to :data:`MAX_JSON_DEPTH` levels (deeper raises
    ``invalid_event``); anything else passes unchanged."""
    return _scrub(value, 0)


def _scrub(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        if _has_surrogate(value):
            value = _SURROGATE.sub("\ufffd", value)
        return value.replace("\x00", NUL_ESCAPE) if "\x00" in value else value
    if isinstance(value, (dict, list, tuple)) and depth >= MAX_JSON_DEPTH:
        raise EngineError(f"event data is nested deeper than {MAX_JSON_DEPTH} levels", code="invalid_event")
    if isinstance(value, dict):
        return {_scrub(k, depth + 1): _scrub(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(v, depth + 1) for v in value]
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")
