"""Tool-result previews: what the model sees of a tool result once its full text is offloaded.

Pure functions, no I/O. Every function takes ``count_tokens`` (normally
``engine.core.meter.default_meter().count_text``) and never returns text that counts more than the
budget it was given: the final text is always measured as a whole, so tokenizer effects at the
joins cannot push it over.

- :func:`render_preview`: the preview the content's shape calls for, whatever the tool is called
  (:mod:`.shapes`): records of JSON (also inside text, an MCP ``content`` list, Claude Code's
  ``toolUseResult`` shapes) as one compact line per record (:mod:`.records`), a test log's failing
  tests and summary, a grep / ls listing's paths and line numbers, a table's rows, a file read's
  path, outline and head (:mod:`.texts`); else :func:`generic_preview` (:mod:`.generic`): labelled
  head / middle / tail slices keeping error, URL and path lines. A tool can be configured to a
  shape (``shapes``; :data:`DEFAULT_TOOL_SHAPES`).
- :func:`structured_preview`: the records preview of JSON content, or ``None``.
- :func:`build_replacement`: one header line (tool, the saved file, whose name holds the SHA-256
  or its first :data:`SHORT_HASH` hex digits) + preview + a line saying how much was left out; the whole text fits the budget or
  :class:`PreviewBudgetError`. :func:`replacement_preview` reads the preview back (also from the
  older frame with its own ``sha256:`` and ``saved:`` lines).
"""

from __future__ import annotations

import logging
import re
from typing import Mapping, Sequence

from ._text import CONTROL, CountTokens, PreviewBudgetError, Span, count_joined, known_span
from .generic import generic_preview
from .records import parse_records, records_preview
from .shapes import SHAPES, records_of_json, shaped_preview, unwrapped_text

__all__ = [
    "DEFAULT_TOOL_SHAPES",
    "SHAPES",
    "SHORT_HASH",
    "STRUCTURED_TOOLS",
    "PreviewBudgetError",
    "build_replacement",
    "generic_preview",
    "has_records",
    "is_structured_tool",
    "parse_records",
    "render_preview",
    "replacement_preview",
    "shape_for_tool",
    "structured_preview",
    "unwrapped_text",
]

log = logging.getLogger(__name__)

#: tools configured to a shape by default (matched on the last name segment): their previews are
#: records whenever their JSON has a result list, as before detection by content existed
DEFAULT_TOOL_SHAPES: Mapping[str, str] = {"query_kb": "records", "web_search": "records"}
#: the tools whose output is a result list by configuration (kept for callers of the old API)
STRUCTURED_TOOLS: frozenset[str] = frozenset(DEFAULT_TOOL_SHAPES)

_SEGMENTS = re.compile(r"__|[.:/]")


def shape_for_tool(tool_name: str, shapes: Mapping[str, str] | None = None) -> str | None:
    """The shape ``tool_name`` is configured to (exact name first, then its last segment:
    ``mcp__kb__query_kb``, ``kb.query_kb``), or ``None`` (detected from the content)."""
    table = DEFAULT_TOOL_SHAPES if shapes is None else shapes
    name = tool_name.strip()
    shape = table.get(name) or table.get(_SEGMENTS.split(name)[-1]) or table.get(_SEGMENTS.split(name)[-1].lower())
    if shape is not None and shape not in SHAPES:
        raise ValueError(f"unknown preview shape {shape!r} for tool {tool_name!r} (one of {', '.join(SHAPES)})")
    return shape


def is_structured_tool(tool_name: str, shapes: Mapping[str, str] | None = None) -> bool:
    """True for a tool configured to the ``records`` shape (``query_kb`` / ``web_search`` by
    default, also namespaced)."""
    return shape_for_tool(tool_name, shapes) == "records"


def structured_preview(content: str, *, budget_tokens: int, count_tokens: CountTokens) -> str | None:
    """The records preview of JSON ``content`` (:mod:`.records`), or ``None`` when it is not JSON,
    holds no list of records, or the budget cannot hold its first lines."""
    rs = records_of_json(content)
    return None if rs is None else records_preview(rs, budget_tokens=budget_tokens, count_tokens=count_tokens)


def has_records(content: str) -> bool:
    """Whether ``content`` is JSON holding a list of records (its preview lists them)."""
    return records_of_json(content) is not None


def render_preview(tool_name: str, content: str, *, budget_tokens: int, count_tokens: CountTokens,
                   shapes: Mapping[str, str] | None = None) -> str:
    """The shaped preview of ``content`` when it has a shape, else the generic one; never raises
    on any content (a shape that fails to read falls back to the generic preview)."""
    forced = shape_for_tool(tool_name, shapes)
    if budget_tokens > 0 and content.strip():
        try:
            shaped = shaped_preview(content, budget_tokens=budget_tokens, count_tokens=count_tokens, forced=forced)
        except (ValueError, TypeError, KeyError, IndexError, RecursionError, OverflowError):
            log.warning("shaped preview of a %s result failed; using the generic one", tool_name, exc_info=True)
            shaped = None
        if shaped is not None:
            return shaped
    return generic_preview(content, budget_tokens=budget_tokens, count_tokens=count_tokens)


HEADER_PREFIX = "[tool result offloaded: "
FOOTER_PREFIX = "[end of preview: "


#: hex digits of the SHA-256 a frame shows when it names the saved file in short (as git abbreviates)
SHORT_HASH = 12


def _header(tool_name: str, path: str) -> str:
    return f"{HEADER_PREFIX}{CONTROL.sub(' ', tool_name)}; full text: {CONTROL.sub(' ', path)}]"


def _footer(left_out: int) -> str:
    return f"{FOOTER_PREFIX}~{left_out} tokens left out]"


def replacement_preview(text: str) -> str:
    """The preview inside a replacement of :func:`build_replacement`, its frame (the header line
    and the closing line; the older frame's ``sha256:``, ``saved:`` and ``preview:`` lines too)
    left out; ``text`` itself when it is not one. What the tool output showed, without what the
    engine added around it."""
    if not text.startswith(HEADER_PREFIX):
        return text
    _, newline, rest = text.partition("\n")
    if not newline:
        return ""
    if rest.startswith("sha256: "):  # the frame before the hash was said once: sha256:, saved:, preview:
        _, found, rest = rest.partition("\npreview:")
        if not found:
            return ""
    body, closing, _ = rest.rpartition("\n" + FOOTER_PREFIX)
    return (body if closing else "").lstrip("\n")


def build_replacement(
    tool_name: str,
    content: str,
    *,
    sha256: str,
    path: str,
    original_tokens: int,
    budget_tokens: int,
    count_tokens: CountTokens,
    shapes: Mapping[str, str] | None = None,
) -> str:
    """Header + preview + left-out line, counting at most ``budget_tokens`` as a whole. The header
    names the tool and the saved file (``path``), whose name holds ``sha256`` (or its first
    :data:`SHORT_HASH` hex digits); the hash is written out on its own only when ``path`` holds
    neither. The frame gives one figure, the tokens the preview leaves out (``original_tokens``
    less the preview's): the full size is the offload record's, shown by the inspector and the CLI.

    Raises :class:`PreviewBudgetError` when the budget cannot hold the header and the footer.
    """
    shown = path if sha256[:SHORT_HASH] in path else f"{path} (sha256 {sha256})"
    header = _header(tool_name, shown)
    frame = count_tokens(header + "\n" + _footer(original_tokens))
    if frame > budget_tokens:
        raise PreviewBudgetError(budget_tokens, frame)
    preview_budget = budget_tokens - frame - 2  # the newline around the preview
    while True:
        preview = render_preview(tool_name, content, budget_tokens=preview_budget, count_tokens=count_tokens, shapes=shapes)
        preview_tokens = count_tokens(preview)
        left_out = max(0, original_tokens - preview_tokens)
        middle: Sequence[tuple[str, Span | None]] = ((preview, known_span(preview, preview_tokens, count_tokens)),) if preview else ()
        text, tokens = count_joined([(header, None), *middle, (_footer(left_out), None)], count_tokens)
        over = tokens - budget_tokens
        if over <= 0:
            return text
        if not preview:
            raise PreviewBudgetError(budget_tokens, budget_tokens + over)
        preview_budget = max(0, preview_budget - over)
