# Over 500 lines: generic, structured and replacement previews share one set of budget helpers (one invariant).
"""Tool-result previews: what the model sees of a tool result once its full text is offloaded.

Pure functions, no I/O. Every function takes ``count_tokens`` (normally
``engine.meter.default_meter().count_text``) and never returns text that counts more than the
budget it was given: the final text is always measured as a whole, so tokenizer effects at the
joins cannot push it over.

- :func:`generic_preview`: labelled head / middle / tail slices; error, URL and path lines from the
  part left out replace the middle slice when there are any (cut shorter, then reduced to the
  identifiers they name, when they do not all fit).
- :func:`structured_preview`: for ``query_kb`` / ``web_search`` JSON, one compact JSON line per
  result with only the keep-listed fields (ids, source, title, URL, site, time, scores) and a
  bounded content preview, in the original order. A tight budget shortens the content, then drops
  it, then shows ids (and URLs) only; results are dropped from the end, and counted in
  ``omitted_results: N``, only when one id each does not fit. Any other key (internal paths,
  embeddings, ...) is dropped.
- :func:`render_preview`: structured for those tools, generic otherwise or when the JSON is bad.
- :func:`build_replacement`: header (tool, ~tokens, full SHA-256, saved path) + preview + a line
  saying how much was left out; the whole text fits the budget or :class:`PreviewBudgetError`.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from typing import Any, Callable, Mapping, Sequence

from engine.errors import EngineError
from engine.specifics import extract_identifiers

__all__ = [
    "STRUCTURED_TOOLS",
    "PreviewBudgetError",
    "build_replacement",
    "generic_preview",
    "is_structured_tool",
    "render_preview",
    "replacement_preview",
    "structured_preview",
]

CountTokens = Callable[[str], int]

#: tools whose JSON output gets a structured preview (matched on the last name segment)
STRUCTURED_TOOLS: frozenset[str] = frozenset({"query_kb", "web_search"})

#: keys that may hold the result list, tried in this order (at the top level and one level down)
RESULT_LIST_KEYS: tuple[str, ...] = (
    "results", "documents", "items", "data", "chunks", "hits", "docs", "search_results", "organic_results", "web",
)
#: nested objects of a result whose keep-listed keys are lifted (LangChain metadata, Elasticsearch _source)
NESTED_KEYS: tuple[str, ...] = ("metadata", "meta", "_source", "document")
#: the keep list, in output order; keys are matched after camelCase -> snake_case and lower-casing
KEEP_FIELDS: tuple[str, ...] = (
    # identifiers: result, document, chunk, file, knowledge base
    "id", "_id", "result_id", "doc_id", "document_id", "docid", "chunk_id", "chunk_index",
    "file_id", "file_name", "filename", "kb_id", "knowledge_base_id", "kb_name", "knowledge_base_name", "dataset_id",
    "source",
    "title", "doc_title", "document_title",
    "url", "link", "href", "source_url",
    "site", "site_name", "domain", "display_link", "displayed_link",
    "published_at", "publish_time", "published_time", "published_date", "published", "date",
    "score", "_score", "relevance_score", "rerank_score", "similarity", "similarity_score", "distance",
)
#: text fields a result's content preview is taken from, first present wins
CONTENT_FIELDS: tuple[str, ...] = (
    "content", "page_content", "text", "snippet", "chunk_text", "passage", "body", "description", "summary",
)
#: top-level keys kept besides the result count
TOP_LEVEL_FIELDS: tuple[str, ...] = ("query", "total", "total_results", "total_count")

MAX_FIELD_CHARS = 300  # a kept scalar field longer than this is cut (with an ellipsis)
CONTENT_TOKENS_MIN = 16  # per-result content preview bounds, in tokens
CONTENT_TOKENS_MAX = 160
ELLIPSIS = "…"

_KEEP_RANK = {name: i for i, name in enumerate(KEEP_FIELDS)}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SEGMENTS = re.compile(r"__|[.:/]")


class PreviewBudgetError(EngineError, ValueError):
    """The token budget cannot even hold the replacement header: a configuration error."""

    code = "preview_budget"

    def __init__(self, budget_tokens: int, needed_tokens: int) -> None:
        super().__init__(
            f"preview budget of {budget_tokens} tokens cannot hold the replacement header "
            f"(needs at least {needed_tokens})"
        )
        self.budget_tokens = budget_tokens
        self.needed_tokens = needed_tokens


# -- slicing helpers --------------------------------------------------------------------------------


def _fit(text: str, max_tokens: int, count: CountTokens, *, from_end: bool = False) -> str:
    """The longest prefix (or suffix) of ``text`` with at most ``max_tokens``: galloping, then bisection."""
    if max_tokens <= 0 or not text:
        return ""
    n = len(text)

    def piece(k: int) -> str:
        return text[n - k :] if from_end else text[:k]

    lo, hi = 0, min(n, max_tokens * 4)
    while count(piece(hi)) <= max_tokens:
        if hi == n:
            return text
        lo, hi = hi, min(n, hi * 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count(piece(mid)) <= max_tokens:
            lo = mid
        else:
            hi = mid
    return piece(lo)


def _snap_end(piece: str) -> str:
    """Cut ``piece`` after its last newline when that loses at most a quarter of it."""
    cut = piece.rfind("\n")
    return piece[: cut + 1] if cut >= len(piece) * 3 // 4 else piece


def _snap_start(piece: str) -> str:
    """Drop ``piece`` up to its first newline when that loses at most a quarter of it."""
    cut = piece.find("\n")
    return piece[cut + 1 :] if 0 <= cut < len(piece) // 4 else piece


def _truncate_tokens(text: str, max_tokens: int, count: CountTokens) -> str:
    """``text`` if it fits ``max_tokens``, else its longest fitting prefix ending in an ellipsis."""
    if _probably_fits(text, max_tokens, count):
        return text
    return _fit(text, max_tokens - 1, count).rstrip() + ELLIPSIS if max_tokens > 1 else ""


def _probably_fits(content: str, budget_tokens: int, count: CountTokens) -> bool:
    # no token of the packaged encodings is longer than 128 bytes, so a longer text cannot fit
    return len(content) <= budget_tokens * 128 and count(content) <= budget_tokens


# -- generic preview --------------------------------------------------------------------------------


def _generic_layout(content: str, head_b: int, mid_b: int, tail_b: int, count: CountTokens) -> str:
    n = len(content)
    head = _snap_end(_fit(content, head_b, count))
    head_end = len(head)
    tail = _snap_start(_fit(content[head_end:], tail_b, count, from_end=True))
    tail_start = n - len(tail)
    middle, mid_start = "", tail_start
    if mid_b > 0 and tail_start > head_end:
        ratio = max(1, (head_end + n - tail_start) // max(1, count(head) + count(tail)))
        mid_start = max(head_end, n // 2 - mid_b * ratio // 2)
        window = _fit(content[mid_start:tail_start], mid_b, count)
        middle = _snap_start(window)
        mid_start += len(window) - len(middle)
        middle = _snap_end(middle)
    parts = [f"[head: chars 0-{head_end} of {n}]", head.rstrip("\n")]
    if middle:
        parts += [
            f"[... {mid_start - head_end} chars omitted ...]",
            f"[middle: chars {mid_start}-{mid_start + len(middle)}]",
            middle.strip("\n"),
            f"[... {tail_start - mid_start - len(middle)} chars omitted ...]",
        ]
    elif tail_start > head_end:
        parts.append(f"[... {tail_start - head_end} chars omitted ...]")
    if tail:
        parts += [f"[tail: chars {tail_start}-{n}]", tail.strip("\n")]
    return "\n".join(parts)


#: lines worth keeping from the part of a log a preview leaves out, by priority (0 first)
_ERROR_LINE = re.compile(
    r"Traceback \(most recent call last\)|(?:Error|Exception)\b|\bFAILED\b|\bFAIL\b|\bERROR\b"
    r"|\b(?:error|fatal|panic)(?:\[\w+\])?:|\bexit (?:code|status)\b|\bexited with\b|returned non-zero"
    r"|Segmentation fault|command not found|No such file or directory|Permission denied|^E {2,}\S|\bKilled\b"
    r"|^\s*File \"[^\"]+\", line \d+",  # a Python traceback frame: where the error happened
)
_URL = re.compile(r"\bhttps?://[^\s\"'<>()]+")
_PATH = re.compile(r"(?<![\w/.~])(?:~|\.{1,2})?/[\w.@%+-]+(?:/[\w.@%+-]+)+|\b[\w.-]+(?:/[\w.@%+-]+)+\.\w{1,8}\b")
#: a line reporting a success (a passed or skipped test, an ``ok`` step): notable only for its path,
#: and after every other path line (a verbose test run prints one per test)
_SUCCESS_LINE = re.compile(r"\b(?:PASSED|PASS|passed|SKIPPED|skipped|XFAIL|xfail|ok|OK)\b")
NOTABLE_LINE_CHARS = 240  # a kept line longer than this is cut around what made it notable
#: what each kept line may still hold when they do not all fit: its first characters around what
#: made it notable, shorter and shorter, then only the identifiers (paths, URLs, ids) it names
#: (an error line keeps its shortest cut instead)
LINE_LEVELS: tuple[int, ...] = (NOTABLE_LINE_CHARS, 120, 72, 0)
#: share of the preview the kept lines may take from head and tail when they need it (30 % to 70 %)
_KEPT_SHARE_MIN, _KEPT_SHARE_MAX = 30, 70
_NOTABLE_KINDS = ("errors", "URLs", "paths")


#: literals one of which every notable line contains: found with str.find (fast), then checked
_NOTABLE_LITERALS: tuple[str, ...] = (
    "Traceback", "Error", "Exception", "FAIL", "ERROR", "error", "fatal", "panic", "exit", "non-zero",
    "Segmentation", "not found", "No such file", "Permission denied", "Killed", "E  ", "://", "/", 'File "',
)


def _lines_containing(content: str, literal: str, starts: Sequence[int], into: set[int]) -> None:
    at = content.find(literal)
    while at >= 0:
        index = bisect.bisect_right(starts, at) - 1
        into.add(index)
        if index + 1 >= len(starts):
            return
        at = content.find(literal, starts[index + 1])


class _Notable:
    """One error / URL / path line of a log, renderable at each of :data:`LINE_LEVELS`."""

    __slots__ = ("start", "end", "number", "priority", "body", "hit", "_texts")

    def __init__(self, start: int, end: int, number: int, priority: int, body: str, hit: int) -> None:
        self.start, self.end, self.number, self.priority, self.body, self.hit = start, end, number, priority, body, hit
        self._texts: dict[int, str] = {}

    @property
    def names(self) -> bool:
        """Whether the line names a path, URL or id (an error line that does comes first: which
        test failed and where, then the messages)."""
        return self.priority != 0 or "/" in self.body and bool(extract_identifiers(self.body))

    def text(self, level: int) -> str:
        """The line cut to ``level`` characters around its hit; level 0: its identifiers only
        (an error line: its shortest cut; ``""`` when a line names none)."""
        if level not in self._texts:
            if level == 0:
                self._texts[0] = self.text(LINE_LEVELS[-2]) if self.priority == 0 else " ".join(extract_identifiers(self.body))
            elif len(self.body) <= level:
                self._texts[level] = self.body
            else:
                left = max(0, min(self.hit - level // 4, len(self.body) - level))
                self._texts[level] = (ELLIPSIS if left else "") + self.body[left : left + level - 2] + ELLIPSIS
        return self._texts[level]


def _notable_lines(content: str) -> list[_Notable]:
    """Every error / URL / path line of ``content``, in order, with its priority (0 first)."""
    starts = [0, *(m.end() for m in re.finditer("\n", content))]
    candidates: set[int] = set()
    for literal in _NOTABLE_LITERALS:
        _lines_containing(content, literal, starts, candidates)
    found: list[_Notable] = []
    for index in sorted(candidates):
        start = starts[index]
        end = starts[index + 1] if index + 1 < len(starts) else len(content)
        body = content[start:end].rstrip("\r\n")
        hit = None
        for priority, pattern in enumerate((_ERROR_LINE, _URL, _PATH)):
            hit = pattern.search(body)
            if hit:
                break
        if hit is None or not body.strip():
            continue
        if priority == 2 and _SUCCESS_LINE.search(body):
            priority = 3
        found.append(_Notable(start, end, index + 1, priority, _CONTROL.sub(" ", body).rstrip(), hit.start()))
    return found


#: the line listing, at the poorest level, the identifiers the other kept lines name
NAMED_LABEL = "identifiers in {lines} more lines:"


def _pick_notable(
    lines: Sequence[_Notable], budget: int, levels: tuple[int, int], count: CountTokens, *, shown: str = ""
) -> tuple[list[tuple[int, str]], list[str], int]:
    """Lines by priority, then in order, deduplicated, within ``budget``: error lines at
    ``levels[0]``, the others at ``levels[1]``. At level 0 the other lines give only the
    identifiers they name, each once and none ``shown`` already holds, listed together on one line
    (denser than one numbered line each). Returns the numbered (line number, text) in document
    order, the identifiers listed, and how many lines gave them."""
    chosen: dict[int, str] = {}
    named: list[str] = []
    seen: set[str] = set(extract_identifiers(shown)) if levels[1] == 0 else set()
    used = 0
    givers = 0
    label = count(NAMED_LABEL.format(lines=len(lines))) + 1 if levels[1] == 0 else 0
    for line in sorted(lines, key=lambda x: (x.priority, not x.names, x.start)):
        if budget - used < 3:  # nothing costs less
            break
        level = levels[0] if line.priority == 0 else levels[1]
        if level == 0 and line.priority != 0:
            fresh = [i for i in line.text(0).split(" ") if i and i not in seen]
            added = False
            for ident in fresh:
                cost = count(" " + ident) + (0 if named else label)
                if used + cost > budget:
                    continue
                named.append(ident)
                seen.add(ident)
                used += cost
                added = True
            givers += added
            continue
        text = line.text(level)
        key = text.strip()
        if not key or key in seen:
            continue
        cost = count(f"L{line.number}: {text}") + 1
        if used + cost > budget:
            continue  # a shorter line of the same or a later kind may still fit
        seen.add(key)
        chosen[line.number] = text
        used += cost
    return sorted(chosen.items()), named, givers


def _need(lines: Sequence[_Notable], level: int, room: int, count: CountTokens) -> int:
    """Tokens ``lines`` take at ``level`` (each text once); stops counting past ``room``."""
    texts: set[str] = set()
    need = 0
    for line in lines:
        text = line.text(level)
        if text and text not in texts:
            texts.add(text)
            need += count(f"L{line.number}: {text}") + 1
            if need > room:
                break
    return need


def _notable_plan(lines: Sequence[_Notable], avail: int, count: CountTokens) -> tuple[int, tuple[int, int]]:
    """(share of ``avail`` for the kept lines, in %, and the levels of the error lines and of the
    others): the error lines at the richest level at which they fit 70 %, then the others at the
    richest level at which they fit what is left (the poorest otherwise); 30 % when that is
    enough, up to 70 % when they need it."""
    room = avail * _KEPT_SHARE_MAX // 100
    errors = [x for x in lines if x.priority == 0]
    others = [x for x in lines if x.priority != 0]
    chosen: list[int] = []
    need = 0
    for group in (errors, others):
        level, used = LINE_LEVELS[-1], room
        for candidate in LINE_LEVELS:
            used = _need(group, candidate, room - need, count)
            if used <= room - need:
                level = candidate
                break
        chosen.append(level)
        need += min(used, room - need)
    return max(_KEPT_SHARE_MIN, -(-100 * need // max(1, avail))), (chosen[0], chosen[1])


def _notable_layout(content: str, head_b: int, kept_b: int, tail_b: int, notable: Sequence[_Notable], levels: tuple[int, int], count: CountTokens) -> str | None:
    n = len(content)
    head = _snap_end(_fit(content, head_b, count))
    head_end = len(head)
    tail = _snap_start(_fit(content[head_end:], tail_b, count, from_end=True))
    tail_start = n - len(tail)
    # a line the head or the tail slice cuts counts as left out too (its path may be cut in two)
    inside = [x for x in notable if x.end > head_end and x.start < tail_start]
    picked, named, givers = _pick_notable(inside, kept_b, levels, count, shown=head + "\n" + tail)
    if not picked and not named:
        return None
    how = "".join(
        f"; {what} {f'cut to {level} chars' if level else 'as the identifiers they name'}"
        for what, level in (("errors", levels[0] or LINE_LEVELS[-2]), ("others", levels[1])) if level != LINE_LEVELS[0]
    )
    parts = [
        f"[head: chars 0-{head_end} of {n}]",
        head.rstrip("\n"),
        f"[... {tail_start - head_end} chars omitted; {len(picked) + givers} of their {len(inside)} lines with "
        f"{', '.join(_NOTABLE_KINDS)} kept below{how} ...]",
        *(f"L{number}: {text}" for number, text in picked),
    ]
    if named:
        parts.append(NAMED_LABEL.format(lines=givers) + " " + " ".join(named))
    if tail:
        parts += [f"[tail: chars {tail_start}-{n}]", tail.strip("\n")]
    return "\n".join(parts)


def generic_preview(content: str, *, budget_tokens: int, count_tokens: CountTokens) -> str:
    """Labelled head, middle and tail slices of ``content`` within ``budget_tokens``.

    When the part between head and tail holds error lines (``Traceback``, ``…Error``, ``FAILED``,
    ``exit code``, traceback frames ``File "…", line N`` …), URLs or paths, they replace the middle
    slice: head and tail share what the kept lines leave, the lines take 30% of the budget, up to 70%
    when they need it, numbered ``L<n>:``. When they do not all fit even then they are cut around
    what made them notable (:data:`LINE_LEVELS`: 240, 120, 72 characters), then reduced to the
    identifiers they name (paths, URLs, ids, each once, on one ``identifiers in N more lines:``
    line; an error line keeps 72 characters), and the note line says so; what still does not fit goes by priority (errors, those naming a path or URL
    first, URL lines, path lines, path lines of passed / skipped tests), then in order. Otherwise head (45%), a slice from the
    middle (15%) and tail (40%). ``content`` itself when it fits; ``""`` when the budget cannot hold
    even the labels.
    """
    if budget_tokens <= 0:
        return ""
    if _probably_fits(content, budget_tokens, count_tokens):
        return content
    n = len(content)
    short_labels = [f"[head: chars 0-{n} of {n}]", f"[... {n} chars omitted ...]", f"[tail: chars {n}-{n}]"]
    middle_labels = [f"[middle: chars {n}-{n}]", f"[... {n} chars omitted ...]"]
    avail = budget_tokens - count_tokens("\n".join(short_labels + middle_labels)) - 5
    with_middle = avail >= 60  # below that, a middle slice would be a few words
    notable = _notable_lines(content) if with_middle else []
    if not with_middle:
        avail = budget_tokens - count_tokens("\n".join(short_labels)) - 3
    while avail > 0:
        text = None
        if notable:
            share, levels = _notable_plan(notable, avail, count_tokens)
            kept_b = avail * share // 100
            head_b = (avail - kept_b) // 2
            text = _notable_layout(content, head_b, kept_b, avail - head_b - kept_b, notable, levels, count_tokens)
        if text is None:
            head_b = avail * 45 // 100 if with_middle else avail // 2
            mid_b = avail * 15 // 100 if with_middle else 0
            text = _generic_layout(content, head_b, mid_b, avail - head_b - mid_b, count_tokens)
        over = count_tokens(text) - budget_tokens
        if over <= 0:
            return text
        avail -= max(over, avail // 10, 1)
    return ""


# -- structured preview -----------------------------------------------------------------------------


def is_structured_tool(tool_name: str) -> bool:
    """True for ``query_kb`` / ``web_search``, also namespaced (``mcp__kb__query_kb``, ``kb.query_kb``)."""
    return _SEGMENTS.split(tool_name.strip())[-1].lower() in STRUCTURED_TOOLS


def _norm_key(key: Any) -> str:
    return _CAMEL.sub("_", str(key)).lower().replace("-", "_") if isinstance(key, str) else ""


def _find_results(value: Any, depth: int = 0) -> list[Mapping[str, Any]] | None:
    """The result list of a parsed tool output: a top-level list or a list under a known key."""
    if isinstance(value, list):
        return value if all(isinstance(r, Mapping) for r in value) else None
    if not isinstance(value, Mapping) or depth > 1:
        return None
    by_norm = {_norm_key(k): v for k, v in value.items()}
    for key in RESULT_LIST_KEYS:
        if key in by_norm:
            found = _find_results(by_norm[key], depth + 1)
            if found is not None:
                return found
    return None


def _clip(value: str) -> str:
    return value if len(value) <= MAX_FIELD_CHARS else value[: MAX_FIELD_CHARS - 1] + ELLIPSIS


def _kept_scalars(result: Mapping[str, Any]) -> dict[str, Any]:
    """Keep-listed scalar fields of ``result`` and its nested metadata, in keep-list order."""
    found: dict[str, tuple[int, str, Any]] = {}  # norm key -> (rank, original key, value)
    sources = [result] + [v for k, v in result.items() if _norm_key(k) in NESTED_KEYS and isinstance(v, Mapping)]
    for source in sources:
        for key, value in source.items():
            norm = _norm_key(key)
            if norm not in _KEEP_RANK or norm in found:
                continue
            if isinstance(value, float) and math.isfinite(value):
                found[norm] = (_KEEP_RANK[norm], key, float(f"{value:.6g}"))  # 0.8400000000000001 -> 0.84
            elif isinstance(value, (bool, int)):
                found[norm] = (_KEEP_RANK[norm], key, value)
            elif isinstance(value, str) and value.strip():
                found[norm] = (_KEEP_RANK[norm], key, _clip(_CONTROL.sub(" ", value)))
    return {key: value for _, key, value in sorted(found.values(), key=lambda t: t[0])}


def _content_of(result: Mapping[str, Any]) -> str | None:
    sources = [result] + [v for k, v in result.items() if _norm_key(k) in NESTED_KEYS and isinstance(v, Mapping)]
    for field in CONTENT_FIELDS:
        for source in sources:
            for key, value in source.items():
                if _norm_key(key) == field and isinstance(value, str) and value.strip():
                    return value
    return None


#: identifier fields, the last thing a result keeps (matched like KEEP_FIELDS)
ID_FIELDS: tuple[str, ...] = (
    "id", "_id", "result_id", "doc_id", "document_id", "docid", "chunk_id", "file_id", "file_name", "filename",
)
URL_FIELDS: tuple[str, ...] = ("url", "link", "href", "source_url")
#: per-result content budgets tried, richest first, before the content is left out
CONTENT_LEVELS: tuple[int, ...] = (CONTENT_TOKENS_MAX, 120, 80, 48, 32, CONTENT_TOKENS_MIN)
#: the degraded levels after the content ones: what each result line still holds
#: (a result's first id and its URL come before its other ids: they name and cite the document,
#: a chunk id only locates a passage in it)
_FIELD_LEVELS: tuple[str, ...] = ("no_content", "ids_and_urls", "id_and_url", "ids", "primary_id")
_LEVEL_NOTE = {
    "no_content": "content left out",
    "ids_and_urls": "ids and URLs only",
    "id_and_url": "first id and URL only",
    "ids": "ids only",
    "primary_id": "one id per result",
}


class _Row:
    """One result: its kept fields and content, rendered per level on demand (cached)."""

    __slots__ = ("scalars", "content", "_lines")

    def __init__(self, result: Mapping[str, Any]) -> None:
        self.scalars = _kept_scalars(result)
        self.content = _content_of(result)
        self._lines: dict[int | str, str] = {}

    def _ids(self) -> dict[str, Any]:
        return {k: v for k, v in self.scalars.items() if _norm_key(k) in ID_FIELDS}

    def _urls(self) -> dict[str, Any]:
        return {k: v for k, v in self.scalars.items() if _norm_key(k) in URL_FIELDS}

    def _fields(self, level: int | str, count: CountTokens) -> dict[str, Any]:
        if isinstance(level, int):
            row = dict(self.scalars)
            if self.content is not None:
                text = " ".join(self.content[: level * 128].split())
                row["content"] = _truncate_tokens(text, level, count)
            return row
        if level == "no_content":
            return dict(self.scalars)
        ids, urls = self._ids(), self._urls()
        if level == "ids_and_urls":
            return {**ids, **urls} if ids or urls else dict(list(self.scalars.items())[:1])
        if level == "id_and_url":
            return {**dict(list(ids.items())[:1]), **dict(list(urls.items())[:1])} if ids or urls else dict(list(self.scalars.items())[:1])
        if level == "ids" and ids:
            return ids
        primary = ids or urls or self.scalars  # no id: the URL names the result, else its first field
        return dict(list(primary.items())[:1])

    def line(self, level: int | str, count: CountTokens) -> str:
        if level not in self._lines:
            self._lines[level] = json.dumps(self._fields(level, count), ensure_ascii=False, separators=(",", ":"))
        return self._lines[level]


def _top_level_lines(parsed: Any, result_count: int) -> list[str]:
    lines = [f"result_count: {result_count}"]
    if isinstance(parsed, Mapping):
        by_norm = {_norm_key(k): v for k, v in parsed.items()}
        for key in TOP_LEVEL_FIELDS:
            value = by_norm.get(key)
            if isinstance(value, str) and value.strip():
                lines.append(f"{key}: {json.dumps(_clip(value), ensure_ascii=False)}")
            elif isinstance(value, int) and not isinstance(value, bool):
                lines.append(f"{key}: {value}")
    return lines


def structured_preview(content: str, *, budget_tokens: int, count_tokens: CountTokens) -> str | None:
    """A structured preview of search/knowledge-base JSON, or ``None`` (caller falls back) when the
    content is not JSON, has no result list, or the budget cannot hold its first lines.

    Format (every line parseable): ``key: <JSON value>`` lines (``result_count``, then ``query`` and
    ``total`` when the tool reported them), one compact JSON object per shown result in the original
    order, ``shown: "<what was left out>"`` when the results had to be shortened beyond their content,
    and ``omitted_results: N`` when N results were dropped from the end.

    Degradation keeps identifiers longest. Every result is shown at the richest level at which *all*
    of them fit: content cut to 160 … 16 tokens, then no content, then ids and URLs, then the first
    id and the URL (a chunk id goes before the URL that cites the document), then ids, then one id
    per result (the URL when a result has no id); the leftover budget then upgrades results
    from the first one to the next richer level. Only when one id per result does not fit are
    results dropped from the end, and counted.
    """
    try:
        parsed = json.loads(content)
    except (ValueError, RecursionError):
        return None
    results = _find_results(parsed)
    if results is None:
        return None
    n = len(results)
    head = "\n".join(_top_level_lines(parsed, n))
    if n == 0:
        return head if count_tokens(head) <= budget_tokens else None
    omitted_reserve = count_tokens(f"omitted_results: {n}") + 1
    if count_tokens(head) + omitted_reserve > budget_tokens:
        return None
    levels: list[int | str] = [*CONTENT_LEVELS, *_FIELD_LEVELS]
    rows: list[_Row] = []

    def row(i: int) -> _Row:
        while len(rows) <= i:
            rows.append(_Row(results[len(rows)]))
        return rows[i]

    def note(level: int | str) -> str:
        return f"shown: {json.dumps(_LEVEL_NOTE[level])}" if isinstance(level, str) else ""

    def note_cost(level: int | str) -> int:
        return count_tokens(note(level)) + 1 if note(level) else 0

    def cost(i: int, level: int | str) -> int:
        return count_tokens(row(i).line(level, count_tokens)) + 1

    def fits_all(level: int | str, room: int) -> bool:
        used = note_cost(level)
        for i in range(n):
            used += cost(i, level)
            if used > room:
                return False
        return True

    room = budget_tokens - count_tokens(head)
    chosen: list[int | str] | None = None
    for index, level in enumerate(levels):
        if fits_all(level, room):
            chosen = [level] * n
            spare = room - note_cost(level) - sum(cost(i, level) for i in range(n))
            if index > 0:  # spend what is left on the first results, one level richer
                richer = levels[index - 1]  # the note line names the poorest level shown: `level`
                for i in range(n):
                    delta = cost(i, richer) - cost(i, level)
                    if delta > spare:
                        break
                    chosen[i], spare = richer, spare - delta
            break
    if chosen is None:  # not even one id each: as many as fit, in order, the rest counted
        level = levels[-1]
        used = note_cost(level) + omitted_reserve
        chosen = []
        for i in range(n):
            used += cost(i, level)
            if used > room:
                break
            chosen.append(level)

    def assemble(shown: list[int | str]) -> str:
        lines = [head]
        poorest = next((lv for lv in reversed(levels) if lv in shown), None)
        if poorest is not None and note(poorest):
            lines.append(note(poorest))
        lines += [row(i).line(lv, count_tokens) for i, lv in enumerate(shown)]
        if len(shown) < n:
            lines.append(f"omitted_results: {n - len(shown)}")
        return "\n".join(lines)

    text = assemble(chosen)
    while count_tokens(text) > budget_tokens and chosen:  # joins may tokenize differently than the parts
        richer = [i for i, lv in enumerate(chosen) if levels.index(lv) < len(levels) - 1]
        if richer:  # take one result down a level before dropping any
            i = richer[-1]
            chosen[i] = levels[levels.index(chosen[i]) + 1]
        else:
            chosen.pop()
        text = assemble(chosen)
    return text if count_tokens(text) <= budget_tokens else None


# -- dispatch and replacement -----------------------------------------------------------------------


def render_preview(tool_name: str, content: str, *, budget_tokens: int, count_tokens: CountTokens) -> str:
    """Structured preview for ``query_kb`` / ``web_search`` when their JSON allows it, else generic."""
    if is_structured_tool(tool_name):
        structured = structured_preview(content, budget_tokens=budget_tokens, count_tokens=count_tokens)
        if structured is not None:
            return structured
    return generic_preview(content, budget_tokens=budget_tokens, count_tokens=count_tokens)


def _header(tool_name: str, original_tokens: int, sha256: str, path: str) -> str:
    name = _CONTROL.sub(" ", tool_name)
    return (
        f"[tool result offloaded: {name}, ~{original_tokens} tokens]\n"
        f"sha256: {sha256}\n"
        f"saved: {_CONTROL.sub(' ', path)}\n"
        f"preview:"
    )


def replacement_preview(text: str) -> str:
    """The preview inside a replacement of :func:`build_replacement`, its frame (the header with
    the tool, tokens, SHA-256 and saved file, and the closing line) left out; ``text`` itself when
    it is not one. What the tool output showed, without what the engine added around it."""
    if not text.startswith("[tool result offloaded: "):
        return text
    _, found, rest = text.partition("\npreview:")
    if not found:
        return text
    body, closing, _ = rest.rpartition("\n[end of preview: ")
    return (body if closing else "").lstrip("\n")


def _footer(left_out: int) -> str:
    return f"[end of preview: ~{left_out} tokens left out; the full result is in the saved file]"


def build_replacement(
    tool_name: str,
    content: str,
    *,
    sha256: str,
    path: str,
    original_tokens: int,
    budget_tokens: int,
    count_tokens: CountTokens,
) -> str:
    """Header + preview + left-out line, counting at most ``budget_tokens`` as a whole.

    Raises :class:`PreviewBudgetError` when the budget cannot hold the header and the footer.
    """
    header = _header(tool_name, original_tokens, sha256, path)
    frame = count_tokens(header + "\n" + _footer(original_tokens))
    if frame > budget_tokens:
        raise PreviewBudgetError(budget_tokens, frame)
    preview_budget = budget_tokens - frame - 2  # the newline around the preview
    while True:
        preview = render_preview(tool_name, content, budget_tokens=preview_budget, count_tokens=count_tokens)
        left_out = max(0, original_tokens - count_tokens(preview))
        parts: Sequence[str] = (header, preview, _footer(left_out)) if preview else (header, _footer(left_out))
        text = "\n".join(parts)
        over = count_tokens(text) - budget_tokens
        if over <= 0:
            return text
        if not preview:
            raise PreviewBudgetError(budget_tokens, budget_tokens + over)
        preview_budget = max(0, preview_budget - over)
