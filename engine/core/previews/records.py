"""The records preview: a list of results (search hits, documents, table rows, file names) as one
compact line per record under a header naming the fields once.

Format (every line parseable, :func:`parse_records`)::

    query: "how do I rotate the signing key?"
    12 results; fields: doc_id | chunk_id | kb_id | url | title | score | content
    doc-0 | doc-0#c0 | kb-security | https://docs.example.com/keys/0 | Key rotation guide | 0.95 | word0 word1 …
    omitted_results: 3                      <- only when some records did not fit at all

A cell is the value as written when that is unambiguous, else its JSON string; ``-`` is a missing
value, trailing missing cells are left out, so a record shown at a poorer level simply has fewer
cells (no line says which level was shown: the cells do, and the frame says how much was left
out). The count of records is said once, on the line naming the fields. The fields are ordered by what they are, which is also the order they are given up in:
identifiers (result, document, chunk, file, knowledge base, collection and source names), URLs,
titles, scores, other kept metadata (site, date), content. The ladder, the same for every shape:
content (160 … 16 tokens) → every kept field → ids, URLs, titles, scores → ids, URLs, titles → ids and
URLs → ids → the
first id (the URL when a record has no id) → records dropped from the end and counted.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from ._text import CONTROL, ELLIPSIS, CountTokens, truncate_tokens

__all__ = [
    "CONTENT_FIELDS",
    "FIELD_LEVELS",
    "ID_FIELDS",
    "RecordSet",
    "URL_FIELDS",
    "parse_records",
    "records_preview",
]

#: identifier fields, in output order (matched after camelCase -> snake_case and lower-casing): the
#: record, its document and chunk, the file, the knowledge base / collection and the source it came from
ID_FIELDS: tuple[str, ...] = (
    "id", "_id", "result_id", "doc_id", "document_id", "docid", "chunk_id", "chunk_index",
    "file_id", "file_name", "filename", "file_path", "filepath", "path", "file",
    "kb_id", "knowledge_base_id", "kb_name", "knowledge_base_name", "dataset_id", "dataset", "collection_id",
    "collection", "collection_name", "index", "document_name", "doc_name", "source_name", "source", "document",
    "name", "key", "number", "uuid",
)
URL_FIELDS: tuple[str, ...] = ("url", "link", "href", "source_url", "uri", "permalink", "html_url", "web_url")
TITLE_FIELDS: tuple[str, ...] = ("title", "doc_title", "document_title", "headline", "subject")
SCORE_FIELDS: tuple[str, ...] = (
    "score", "_score", "relevance_score", "rerank_score", "similarity", "similarity_score", "distance", "rank",
)
META_FIELDS: tuple[str, ...] = (
    "site", "site_name", "domain", "display_link", "displayed_link",
    "published_at", "publish_time", "published_time", "published_date", "published", "date",
)
#: text fields a record's content preview is taken from, first present wins
CONTENT_FIELDS: tuple[str, ...] = (
    "content", "page_content", "text", "snippet", "chunk_text", "passage", "body", "description", "summary",
)
#: nested objects of a record whose fields are lifted (LangChain metadata, Elasticsearch _source)
NESTED_KEYS: tuple[str, ...] = ("metadata", "meta", "_source", "document", "fields")
#: top-level keys kept besides the record count
TOP_LEVEL_FIELDS: tuple[str, ...] = ("query", "total", "total_results", "total_count", "num_files", "mode")

ROLES: tuple[str, ...] = ("id", "url", "title", "score", "meta")
_ROLE_OF: dict[str, tuple[int, int]] = {}
for _index, _names in enumerate((ID_FIELDS, URL_FIELDS, TITLE_FIELDS, SCORE_FIELDS, META_FIELDS)):
    for _rank, _name in enumerate(_names):
        _ROLE_OF.setdefault(_name, (_index, _rank))
#: a key that names an identifier without being listed: ``ticket_id``, ``orderId``, ``sha``
_ID_KEY = re.compile(r"(?:^|_)(?:id|uuid|sha|ref|slug)$")
_URL_VALUE = re.compile(r"https?://\S+$")

MAX_FIELD_CHARS = 300  # a kept field longer than this is cut (with an ellipsis)
CONTENT_TOKENS_MAX = 160
#: per-record content budgets tried, richest first, before the content is left out
CONTENT_LEVELS: tuple[int, ...] = (CONTENT_TOKENS_MAX, 120, 80, 48, 32, 16)
#: the levels after the content ones: the roles each record line still holds
FIELD_LEVELS: tuple[str, ...] = ("no_content", "ids_titles_urls_scores", "ids_urls_titles", "ids_and_urls", "ids", "primary_id")
_LEVEL_ROLES: dict[str, int] = {"no_content": 5, "ids_titles_urls_scores": 4, "ids_urls_titles": 3, "ids_and_urls": 2, "ids": 1, "primary_id": 1}
#: share of the budget a records preview fills when it holds more than every record's ids, URLs and
#: titles (content, scores, metadata); the full budget goes to those identifiers when they need it
CONTENT_FILL = 0.7
SEPARATOR = " | "
COUNT_SEPARATOR = "; "  # between the count of records and the fields they show: "12 results; fields: …"
MISSING = "-"

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")


def norm_key(key: Any) -> str:
    """``siteName`` -> ``site_name``; ``""`` for a key that is not a string."""
    return _CAMEL.sub("_", key).lower().replace("-", "_").replace(" ", "_") if isinstance(key, str) else ""


def clip(value: str) -> str:
    return value if len(value) <= MAX_FIELD_CHARS else value[: MAX_FIELD_CHARS - 1] + ELLIPSIS


def cell(value: Any) -> str:
    """One value as a cell: as written when unambiguous, else JSON."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    text = str(value)
    if (not text or text == MISSING or text[0] in "\"'" or text != text.strip() or "\n" in text
            or SEPARATOR.strip() in text or text.startswith(("fields:", "omitted_results:")) or text in ("true", "false")
            or _NUMBER.fullmatch(text)):
        return json.dumps(text, ensure_ascii=False)
    return text


@dataclass(slots=True)
class RecordSet:
    """Records ready to preview: the kept fields of each (by column), the columns in output order
    with their role (index into :data:`ROLES`), each record's content, and top-level lines."""

    columns: list[tuple[str, int]]
    rows: list[dict[str, Any]]
    contents: list[str | None]
    top: list[str] = field(default_factory=list)
    label: str = "results"  # what the records are called on the count line (a table's: rows)


def _scalar(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.6g}") if math.isfinite(value) else None
    if isinstance(value, (bool, int)):
        return value
    if isinstance(value, str) and value.strip():
        return clip(CONTROL.sub(" ", value).strip())
    return None


def _role(norm: str, value: Any, keep_unknown: bool) -> tuple[int, int] | None:
    known = _ROLE_OF.get(norm)
    if known is not None:
        return known
    if _ID_KEY.search(norm) and not norm.startswith("_"):
        return (0, len(ID_FIELDS))
    if isinstance(value, str) and _URL_VALUE.match(value):
        return (1, len(URL_FIELDS))
    if keep_unknown and not norm.startswith("_"):
        return (4, len(META_FIELDS))
    return None


def _content_of(sources: Sequence[Mapping[str, Any]]) -> str | None:
    for name in CONTENT_FIELDS:
        for source in sources:
            for key, value in source.items():
                if norm_key(key) == name and isinstance(value, str) and value.strip():
                    return value
    return None


def from_mappings(items: Sequence[Any], *, keep_unknown: bool = False, top: Iterable[str] = ()) -> RecordSet:
    """A :class:`RecordSet` of JSON objects (anything else in ``items`` becomes a record of its
    own text). Kept: the fields of a known role (and of ``_id``-like keys, URL values) at the top
    of each object and in its nested metadata; other keys only with ``keep_unknown`` (a table's
    columns), never ``_private`` ones. Lists, objects and the content fields are never a column."""
    placed: dict[str, tuple[int, int, int]] = {}  # column -> (role, rank, first seen)
    rows: list[dict[str, Any]] = []
    contents: list[str | None] = []
    for item in items:
        row: dict[str, Any] = {}
        if not isinstance(item, Mapping):
            value = _scalar(item if not isinstance(item, (list, dict)) else json.dumps(item, ensure_ascii=False))
            if value is not None:
                placed.setdefault("value", (0, 0, len(placed)))
                row["value"] = value
            rows.append(row)
            contents.append(None)
            continue
        sources = [item] + [v for k, v in item.items() if norm_key(k) in NESTED_KEYS and isinstance(v, Mapping)]
        seen_norm: set[str] = set()
        content = _content_of(sources)
        for depth, source in enumerate(sources):
            for key, raw in source.items():
                norm = norm_key(key)
                if not norm or norm in seen_norm or norm in CONTENT_FIELDS:
                    continue
                value = _scalar(raw)
                if value is None:
                    continue
                role = _role(norm, value, keep_unknown and depth == 0)
                if role is None:
                    continue
                seen_norm.add(norm)
                name = str(key)
                if name not in placed:
                    placed[name] = (*role, len(placed))
                row[name] = value
        rows.append(row)
        contents.append(content)
    columns = sorted(placed, key=lambda c: placed[c])
    return RecordSet([(c, placed[c][0]) for c in columns], rows, contents, list(top))


def top_level_lines(parsed: Any) -> list[str]:
    """``query: "…"`` / ``total: N`` lines of a parsed JSON object."""
    lines: list[str] = []
    if isinstance(parsed, Mapping):
        by_norm = {norm_key(k): v for k, v in parsed.items()}
        for key in TOP_LEVEL_FIELDS:
            value = by_norm.get(key)
            if isinstance(value, str) and value.strip():
                lines.append(f"{key}: {json.dumps(clip(value), ensure_ascii=False)}")
            elif isinstance(value, int) and not isinstance(value, bool):
                lines.append(f"{key}: {value}")
    return lines


class _Lines:
    """The record lines at each level, rendered on demand (cached)."""

    def __init__(self, rs: RecordSet, count: CountTokens) -> None:
        self.rs = rs
        self.count = count
        roles = {r for _, r in rs.columns}
        #: the key role: ids, else URLs (a URL names a result that has no id), else the first column
        self.key_role = 0 if 0 in roles else (1 if 1 in roles else (rs.columns[0][1] if rs.columns else 0))
        self._cache: dict[tuple[int, int | str], str] = {}

    def columns(self, level: int | str) -> list[str]:
        if isinstance(level, int):
            return [c for c, _ in self.rs.columns]
        limit = _LEVEL_ROLES[level]
        if level in ("ids", "primary_id"):
            return [c for c, r in self.rs.columns if r == self.key_role]
        return [c for c, r in self.rs.columns if r < limit or r == self.key_role]

    def has_content(self) -> bool:
        return any(c is not None for c in self.rs.contents)

    def line(self, i: int, level: int | str) -> str:
        cached = self._cache.get((i, level))
        if cached is not None:
            return cached
        row = self.rs.rows[i]
        cells = [cell(row.get(c)) for c in self.columns(level)]
        if level == "primary_id":  # up to the first id the record has
            first = next((k for k, c in enumerate(cells) if c != MISSING), 0)
            cells = cells[: first + 1]
        if isinstance(level, int):
            content = self.rs.contents[i]
            text = "" if content is None else truncate_tokens(" ".join(content[: level * 128].split()), level, self.count)
            cells.append(cell(text) if text else MISSING)
        while cells and cells[-1] == MISSING:
            cells.pop()
        out = SEPARATOR.join(cells) if cells else MISSING
        self._cache[(i, level)] = out
        return out

    def header(self, level: int | str) -> str:
        names = self.columns(level) + (["content"] if isinstance(level, int) and self.has_content() else [])
        return "fields: " + SEPARATOR.join(cell(n) for n in names) if names else ""


def records_preview(rs: RecordSet, *, budget_tokens: int, count_tokens: CountTokens) -> str | None:
    """The records of ``rs`` within ``budget_tokens``, or ``None`` when not even the count fits.

    Every record is shown at the richest level at which *all* of them fit; the leftover budget then
    upgrades records from the first one to the next richer level (the header names the richest
    level's fields). Levels richer than ids, URLs and titles (content, scores, other fields) fill at
    most :data:`CONTENT_FILL` of the budget; the rest of it is only spent on those identifiers. Only
    when one id per record does not fit are records dropped from the end, and counted
    (``omitted_results: N``). When not every record keeps its ids and URLs, the top-level lines
    (``query``, ``total``) are left out for them."""
    n = len(rs.rows)
    counted = f"{n} {rs.label.removesuffix('s') if n == 1 else rs.label}"
    head = "\n".join([*rs.top, counted])
    if n == 0:
        return head if count_tokens(head) <= budget_tokens else None
    omitted_reserve = count_tokens(f"omitted_results: {n}") + 1
    if count_tokens(head) + omitted_reserve > budget_tokens:
        return None
    lines = _Lines(rs, count_tokens)
    levels: list[int | str] = [*(CONTENT_LEVELS if lines.has_content() else ()), *FIELD_LEVELS]

    def cost(i: int, level: int | str) -> int:
        return count_tokens(lines.line(i, level)) + 1

    def frame_cost(richest: int | str) -> int:
        return count_tokens(COUNT_SEPARATOR + lines.header(richest))

    def choose(room: int, start: int) -> list[int | str] | None:
        """Every record at the richest level from ``levels[start]`` on at which all fit ``room``,
        the first ones one level richer with what is left; ``None`` when one id each does not fit."""
        for index in range(start, len(levels)):
            level = levels[index]
            used = frame_cost(level)
            for i in range(n):
                used += cost(i, level)
                if used > room:
                    break
            else:
                chosen = [level] * n
                if index > start:  # spend what is left on the first records, one level richer
                    richer = levels[index - 1]
                    spare = room - used - (frame_cost(richer) - frame_cost(level))
                    for i in range(n):
                        delta = cost(i, richer) - cost(i, level)
                        if delta > spare:
                            break
                        chosen[i], spare = richer, spare - delta
                return chosen
        return None

    room = budget_tokens - count_tokens(head) - 1
    # the content takes at most CONTENT_FILL of the budget: the ids, URLs and titles of every record
    # come first, and a preview that keeps them all costs less on every later request
    cap = levels.index("ids_urls_titles")
    filled = choose(int(budget_tokens * CONTENT_FILL) - count_tokens(head) - 1, 0)
    if filled is not None and all(levels.index(lv) <= cap for lv in filled):
        chosen: list[int | str] | None = filled
    else:
        chosen = choose(room, cap)
    if chosen is None:  # not even one id each: as many as fit, in order, the rest counted
        level = levels[-1]
        used = frame_cost(level) + omitted_reserve
        chosen = []
        for i in range(n):
            used += cost(i, level)
            if used > room:
                break
            chosen.append(level)

    def assemble(shown: list[int | str]) -> str:
        out = [*rs.top]
        if shown:
            header = lines.header(shown[0])
            out.append(counted + (COUNT_SEPARATOR + header if header else ""))
            out += [lines.line(i, lv) for i, lv in enumerate(shown)]
        else:
            out.append(counted)
        if len(shown) < n:
            out.append(f"omitted_results: {n - len(shown)}")
        return "\n".join(x for x in out if x)

    text = assemble(chosen)
    while count_tokens(text) > budget_tokens and chosen:  # joins may tokenize differently than the parts
        richer_rows = [i for i, lv in enumerate(chosen) if levels.index(lv) < len(levels) - 1]
        if richer_rows:  # take one record down a level before dropping any
            i = richer_rows[-1]
            chosen[i] = levels[levels.index(chosen[i]) + 1]
        else:
            chosen.pop()
        text = assemble(chosen)
    if rs.top and (len(chosen) < n or any(levels.index(lv) > levels.index("ids_and_urls") for lv in chosen)):
        # not every record keeps its ids and URLs: the query and totals (the call's arguments say
        # the query) give their room to the records
        bare = records_preview(replace(rs, top=[]), budget_tokens=budget_tokens, count_tokens=count_tokens)
        if bare is not None:
            return bare
    return text if count_tokens(text) <= budget_tokens else None


def _split_cells(line: str) -> list[Any]:
    cells: list[Any] = []
    decoder = json.JSONDecoder()
    i = 0
    while i <= len(line):
        if line.startswith('"', i):
            try:
                value, end = decoder.raw_decode(line, i)
            except ValueError:
                value, end = None, -1
            if end >= 0 and (end == len(line) or line.startswith(SEPARATOR, end)):
                cells.append(value)
                i = end + len(SEPARATOR)
                continue
        end = line.find(SEPARATOR, i)
        end = len(line) if end < 0 else end
        raw = line[i:end]
        if raw == MISSING:
            cells.append(None)
        else:
            try:
                number = json.loads(raw) if raw and (raw[0].isdigit() or raw[0] == "-") else None
            except ValueError:
                number = None
            cells.append(number if isinstance(number, (int, float)) and not isinstance(number, bool) else
                         {"true": True, "false": False}.get(raw, raw))
        i = end + len(SEPARATOR)
    return cells


_COUNTED = re.compile(r"(\d+) (result|row)s?(?:; fields: (.*))?")
_COUNT_KEYS = {"result": "result_count", "row": "rows"}


def parse_records(text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read a records preview back: its ``key: value`` lines and one dict per record line (the
    header's field names; missing cells left out)."""
    meta: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    names: list[Any] | None = None
    for line in text.split("\n"):  # not splitlines(): a value may hold U+0085 or U+2028 unescaped
        if names is None:
            counted = _COUNTED.fullmatch(line)
            if counted:
                meta[_COUNT_KEYS[counted[2]]] = int(counted[1])
                if counted[3] is not None:
                    names = [str(c) for c in _split_cells(counted[3])]
                continue
            key, _, value = line.partition(": ")
            if key == "fields":
                names = [str(c) for c in _split_cells(value)]
                continue
            try:
                meta[key] = json.loads(value)
            except ValueError:
                meta[key] = value
        elif re.fullmatch(r"omitted_results: \d+", line):
            meta["omitted_results"] = int(line.split(": ")[1])
        else:
            cells = _split_cells(line)
            rows.append({str(k): v for k, v in zip(names, cells) if v is not None})
    return meta, rows
