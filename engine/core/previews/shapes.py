"""Which preview a tool result gets, from its content: JSON (also inside text, an MCP ``content``
list, Claude Code's ``toolUseResult`` shapes) holding records, a test log, a grep / ls listing, a
table, a file read; whatever the tool is called. A configured tool name can force a shape
(:data:`SHAPES`); when the content does not have that shape, detection decides as for any tool.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

from ._text import CountTokens
from .generic import generic_preview
from .records import RecordSet, clip, from_mappings, norm_key, records_preview, top_level_lines
from .texts import GrepListing, file_read_preview, grep_preview, parse_file_read, parse_grep, parse_table, parse_test_log, test_log_preview

__all__ = ["SHAPES", "find_records", "parse_json", "shaped_preview", "unwrapped_text"]

#: the shapes a tool can be configured to (``generic``: head / tail slices whatever the content)
SHAPES: tuple[str, ...] = ("records", "test_log", "grep", "table", "file_read", "generic")
#: keys that may hold a result list: preferred when two lists name as many records
RESULT_LIST_KEYS: tuple[str, ...] = (
    "results", "documents", "items", "data", "chunks", "hits", "docs", "search_results", "organic_results", "web",
    "records", "rows", "entries", "files", "filenames", "matches", "issues", "nodes", "edges", "objects",
)
#: a JSON object's text field that is the result itself (Bash's stdout, a Grep in content mode)
TEXT_KEYS: tuple[str, ...] = ("content", "text", "stdout", "output", "result", "body", "markdown", "data")
MAX_DEPTH = 4  # how deep records are looked for
MAX_NODES = 4000  # how many JSON values a search visits (a huge result is judged by its start)
MAX_NESTING = 3  # text inside JSON inside text …: how many times content is unwrapped
EMBEDDED_SHARE = 0.6  # JSON inside text is the result when it is at least this share of it

Render = Callable[[int], "str | None"]


def _grep_with_text(listing: GrepListing, text: str, *, budget_tokens: int, count_tokens: CountTokens) -> str | None:
    return grep_preview(listing, budget_tokens=budget_tokens, count_tokens=count_tokens, text=text)


def _render(fn: Callable[..., "str | None"], shape: object, count: CountTokens, *extra: str) -> Render:
    """``fn(shape, *extra, budget_tokens=b, count_tokens=count)`` as a function of the budget ``b``."""
    return lambda b: fn(shape, *extra, budget_tokens=b, count_tokens=count)


_VALUE_STARTS = {"{": frozenset('"}'), "[": frozenset('"]{[-0123456789tfnNI')}  # NaN, Infinity: Python's json takes them
_JSON_SPACE = " \t\n\r"


def _may_open(text: str, i: int) -> bool:
    """Whether the bracket at ``i`` can open a JSON value: the next non-space character must be
    one a value (or the bracket's close) starts with. Exact: when it is not, decoding would fail,
    so the decoder's exception is skipped (a pruned result's ``[head: …`` preview raised up to nine)."""
    j = i + 1
    n = len(text)
    while j < n and text[j] in _JSON_SPACE:
        j += 1
    return j < n and text[j] in _VALUE_STARTS[text[i]]


def parse_json(content: str) -> tuple[Any, str, str] | None:
    """(value, text before, text after) of ``content`` when it is JSON, or holds one JSON value of
    at least :data:`EMBEDDED_SHARE` of its length (``Results:\\n{...}``); ``None`` otherwise."""
    text = content.strip()
    if not text:
        return None
    if text[0] in "[{" and _may_open(text, 0):
        try:
            return json.loads(text), "", ""
        except (ValueError, RecursionError):
            pass
    decoder = json.JSONDecoder()
    start = -1
    for _ in range(8):  # the first few openings at a line start (or the very start)
        start = min((i for i in (text.find("\n{", start + 1), text.find("\n[", start + 1)) if i >= 0), default=-1)
        if start < 0:
            break
        if not _may_open(text, start + 1):
            continue
        try:
            value, end = decoder.raw_decode(text, start + 1)
        except (ValueError, RecursionError):
            continue
        if (end - start) >= len(text) * EMBEDDED_SHARE and isinstance(value, (dict, list)):
            return value, text[:start].strip(), text[end:].strip()
    return None


def _identified(item: Any) -> bool:
    """A JSON object with a field naming it (an id, URL, title, name or path)."""
    if not isinstance(item, Mapping):
        return False
    rs = from_mappings([item])
    return any(role <= 2 for _, role in rs.columns)


def find_records(value: Any) -> tuple[list[Any], Mapping[str, Any] | None] | None:
    """The list of records in a parsed JSON value and the object holding it: of every list of
    objects (depth :data:`MAX_DEPTH`), the one with the most identified records, a list under a
    known key (``results``, ``items``, …) or nearer the top when two tie; ``None`` when none."""
    best: tuple[tuple[int, int, int], list[Any], Mapping[str, Any] | None] | None = None
    visited = 0
    stack: list[tuple[Any, int, Mapping[str, Any] | None, bool]] = [(value, 0, None, True)]
    while stack and visited < MAX_NODES:
        node, depth, parent, known = stack.pop()
        visited += 1
        if isinstance(node, list):
            objects = [x for x in node[:200] if isinstance(x, Mapping)]
            if objects and len(objects) * 2 >= min(len(node), 200) or not node and known:
                named = sum(_identified(x) for x in objects[:50])
                score = (named if len(node) <= 50 else named * len(node) // 50, int(known), -depth)
                if named or known:
                    if best is None or score > best[0]:
                        best = (score, node, parent)
            if depth < MAX_DEPTH:
                stack.extend((x, depth + 1, parent, False) for x in node[:50] if isinstance(x, (list, Mapping)))
        elif isinstance(node, Mapping) and depth < MAX_DEPTH:
            for k, v in node.items():
                if isinstance(v, (list, Mapping)):
                    stack.append((v, depth + 1, node, norm_key(k) in RESULT_LIST_KEYS))
    if best is None:
        return None
    return best[1], best[2]


def _mcp_text(value: Any) -> str | None:
    """The text of an MCP tool result: ``[{"type": "text", "text": …}, …]`` or
    ``{"content": [...], "isError": …}`` (``structuredContent`` is read by the caller first)."""
    blocks = value.get("content") if isinstance(value, Mapping) else value
    if not isinstance(blocks, list) or not blocks:
        return None
    if not all(isinstance(b, Mapping) and isinstance(b.get("type"), str) for b in blocks):
        return None
    texts = [b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)]
    return "\n".join(texts) if texts else None


def _json_renderers(value: Any, before: str, after: str, count: CountTokens, nesting: int, forced: str | None) -> list[Render]:
    notes = [f"{key}: {json.dumps(clip(t), ensure_ascii=False)}" for key, t in (("text_before", before), ("text_after", after)) if t]
    if isinstance(value, Mapping) and isinstance(value.get("structuredContent"), (Mapping, list)):
        return _json_renderers(value["structuredContent"], before, after, count, nesting, forced)
    mcp = _mcp_text(value)
    if mcp is not None:
        return _inner(mcp, count, nesting, forced)
    if isinstance(value, Mapping):
        file = value.get("file")
        if isinstance(file, Mapping) and isinstance(file.get("filePath"), str) and isinstance(file.get("content"), str):
            read = parse_file_read(file["content"], str(file["filePath"]))
            if read is not None:
                start, total = file.get("startLine"), file.get("totalLines")
                read.start = start if isinstance(start, int) and start > 0 else read.start
                read.total = total if isinstance(total, int) else None
                return [_render(file_read_preview, read, count)]
        if isinstance(value.get("stdout"), str):
            stderr = value.get("stderr")
            text = value["stdout"] + (f"\n{stderr}" if isinstance(stderr, str) and stderr.strip() else "")
            return _inner(text, count, nesting, forced)
    found = find_records(value)
    if found is not None:
        items, parent = found
        strings = [x for x in items if isinstance(x, str)]
        if strings and len(strings) == len(items):  # a list of file names: a listing
            listing = parse_grep("\n".join(strings))
            if listing is not None:
                return [_render(grep_preview, listing, count)]
        top = notes + top_level_lines(value) + (top_level_lines(parent) if parent is not value else [])
        rs = from_mappings(items, top=list(dict.fromkeys(top)))
        return [_render(records_preview, rs, count)]
    if isinstance(value, list) and value and all(isinstance(x, str) for x in value):
        listing = parse_grep("\n".join(value))
        if listing is not None:
            return [_render(grep_preview, listing, count)]
    if isinstance(value, Mapping):
        by_norm = {norm_key(k): v for k, v in value.items()}
        for key in TEXT_KEYS:
            text = by_norm.get(key)
            if isinstance(text, str) and len(text) >= 200:
                path = next((v for k, v in by_norm.items() if k in ("file_path", "filepath", "path", "filename") and isinstance(v, str)), None)
                if path is not None:
                    read = parse_file_read(text, path)
                    if read is not None:
                        return [_render(file_read_preview, read, count)]
                return _inner(text, count, nesting, forced)
    return []


def _generic(text: str, *, budget_tokens: int, count_tokens: CountTokens) -> str | None:
    return generic_preview(text, budget_tokens=budget_tokens, count_tokens=count_tokens) or None


def _inner(text: str, count: CountTokens, nesting: int, forced: str | None) -> list[Render]:
    """The renderers of a text a JSON wrapper holds (an MCP text block, Bash's stdout, Codex's
    ``{"output": …, "metadata": …}``); a text of no shape gets the generic preview of the text
    itself, whose lines are real lines (the wrapper's JSON is one line: a log's error and figure
    lines could not be kept from it)."""
    return _renderers(text, count, nesting + 1, forced) or [_render(_generic, text, count)]


def unwrapped_text(content: str) -> str:
    """The text a tool result's JSON wrapper holds (an MCP text block, ``stdout`` and ``stderr``, a
    lone long text field such as Codex's ``output``), unwrapped up to :data:`MAX_NESTING` times;
    ``content`` itself when it is not such a wrapper (records, any other JSON, text)."""
    for _ in range(MAX_NESTING):
        parsed = parse_json(content)
        if parsed is None or parsed[1] or parsed[2]:
            return content
        value = parsed[0]
        if isinstance(value, Mapping) and isinstance(value.get("structuredContent"), (Mapping, list)):
            return content
        inner = _mcp_text(value)
        if inner is None and isinstance(value, Mapping):
            if isinstance(value.get("stdout"), str):
                stderr = value.get("stderr")
                inner = value["stdout"] + (f"\n{stderr}" if isinstance(stderr, str) and stderr.strip() else "")
            elif find_records(value) is None:
                by_norm = {norm_key(k): v for k, v in value.items()}
                inner = next((t for t in (by_norm.get(k) for k in TEXT_KEYS) if isinstance(t, str) and len(t) >= 200), None)
        if inner is None:
            return content
        content = inner
    return content


def _text_renderers(text: str, count: CountTokens, forced: str | None) -> list[Render]:
    out: list[Render] = []
    order = ["test_log", "grep", "file_read", "table"]
    if forced in order:
        order.remove(forced)
        order.insert(0, forced)
    for shape in order:
        if shape == "test_log":
            log = parse_test_log(text)
            if log is not None:
                out.append(_render(test_log_preview, log, count, text))
        elif shape == "grep":
            listing = parse_grep(text)
            if listing is not None:
                out.append(_render(_grep_with_text, listing, count, text))
        elif shape == "table":
            rs = parse_table(text)
            if rs is not None:
                out.append(_render(records_preview, rs, count))
        else:
            read = parse_file_read(text)
            if read is not None:
                out.append(_render(file_read_preview, read, count))
        if out:
            return out
    return out


def _renderers(content: str, count: CountTokens, nesting: int, forced: str | None) -> list[Render]:
    if nesting > MAX_NESTING:
        return []
    parsed = parse_json(content)
    if parsed is not None:
        found = _json_renderers(*parsed, count, nesting, forced)
        if found:
            return found
    return _text_renderers(content, count, forced)


def shaped_preview(content: str, *, budget_tokens: int, count_tokens: CountTokens, forced: str | None = None) -> str | None:
    """The preview the content's shape calls for, within ``budget_tokens``; ``None`` when it has no
    shape (or its preview does not fit): the caller uses the generic one. ``forced`` (one of
    :data:`SHAPES`) is tried first among the text shapes; ``generic`` skips detection."""
    if forced == "generic":
        return None
    for render in _renderers(content, count_tokens, 0, forced):
        text = render(budget_tokens)
        if text is not None and count_tokens(text) <= budget_tokens:
            return text
    return None


def records_of_json(content: str) -> RecordSet | None:
    """The records of JSON ``content`` (no text around it), or ``None``."""
    try:
        value = json.loads(content)
    except (ValueError, RecursionError):
        return None
    found = find_records(value)
    if found is None or not all(isinstance(x, Mapping) for x in found[0]):
        return None
    items, parent = found
    top = top_level_lines(value) + (top_level_lines(parent) if parent is not value else [])
    return from_mappings(items, top=list(dict.fromkeys(top)))
