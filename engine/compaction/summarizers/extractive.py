"""The offline extractive summarizer: no language model, deterministic, always available.

It copies instead of writing: the previous summary, the user's requests verbatim (the current request
always in full), the identifiers, paths and URLs seen (each once, those sharing a directory, URL prefix or id
head on one line as a shell's brace expansion writes them: ``- src/app/{main,util}.py``,
``- doc-{123456,123457}``; :func:`engine.core.specifics.group_identifiers`), the tool calls with
their key arguments, and the latest assistant conclusions. When that exceeds the budget, the least important
and oldest parts go first: older conclusions, the previous summary beyond a quarter of the budget,
older tool calls, the rest of an older request beyond its head and of the latest conclusion beyond
15 % of the budget, the older requests beyond a tenth of the budget (the newest stay), identifiers (those of the oldest messages first), then the newest older requests. Part ids
(chunk ids) are left out before any other identifier. Every reader of a summary reads a grouped
form back with :func:`engine.core.specifics.expand_grouped` (the carry-over into the next summary,
dropped specifics, the budget's identifier count, the benchmarks' checks). Identifier lines
may also use the request's ``identifier_tokens`` (the identifier room), the rest stays within
``max_tokens``. The identifiers left out are listed in the result's ``dropped_identifiers``.

Identifiers that stay visible anyway are not repeated: those the current request (always in the
summary) or the retained tail (verbatim after it) show. A pruned result is read as its preview
without the engine's frame (the offload header's SHA-256 and file name are not the tool's output).
Same input, same output: ordering is positional, nothing depends on time or randomness.

:func:`identifier_index` writes the same identifier section alone, within the identifier room, for
a summary a language model wrote (:mod:`.openai_compat` appends it): the identifiers the model's
text does not show, the previous summary's section carried forward.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Callable, Iterable

from ...core.messages import META_PRUNED, Message
from ...core.meter import default_meter
from ...core.previews import replacement_preview
from ...core.specifics import expand_grouped, extract_identifiers, group_identifiers, group_key
from .facts import constraint_lines, fact_lines
from .protocol import SummarizerError, SummaryRequest, SummaryResult, contains_verbatim, instruction_terms

HEADER = "[Extractive summary: copied from the compacted messages by fixed rules, not written by a language model.]"
MODEL_NAME = "extractive"

#: tool-call argument keys worth keeping (everything else is dropped unless nothing matches)
KEY_ARGUMENTS = (
    "query", "q", "question", "keywords", "search", "url", "urls", "path", "paths", "file", "file_path",
    "filename", "command", "cmd", "sql", "pattern", "id", "ids", "doc_id", "document_id", "chunk_id",
    "file_id", "kb_id", "knowledge_base_id", "name",
)  # fmt: skip
_ARG_VALUE_CHARS = 200
_CONCLUSIONS = 3
_MIN_TRUNCATED_TOKENS = 16
#: share of the budget the previous summary's head keeps ahead of new material (then it goes first)
_PREVIOUS_SHARE = 0.25
#: an older request longer than this keeps its head ahead of the identifiers, the rest after them
REQUEST_HEAD_TOKENS = 40
#: share of the budget the newest older requests (their heads) keep ahead of the identifiers
REQUESTS_SHARE = 0.1
#: share of the budget the latest conclusion (its head, at least REQUEST_HEAD_TOKENS) keeps ahead of them
CONCLUSION_SHARE = 0.15


@dataclass(frozen=True, slots=True)
class _Item:
    """One line (or block) of the summary. Lower ``rank`` is kept first; ``order`` is the output order.

    An identifier item holds the ``parts`` (identifiers) one message showed: when they do not fit
    whole it keeps its first parts; the section writes every kept part grouped (:func:`_render`).
    ``full``: the whole text of an item shown shortened (an older request's head), put back when
    the budget still has room at the end."""

    section: str
    order: tuple[int, int]
    rank: tuple[float, int]
    text: str
    truncatable: bool = False
    parts: tuple[str, ...] = ()
    full: str | None = None


_S_PREVIOUS = "Previous summary (carried forward)"
_S_CURRENT = "Current user request (verbatim)"
_S_GOAL = "Task goal: current user request (verbatim)"
_S_REQUESTS = "User requests (verbatim)"
_S_TOOLS = "Tool calls made"
_S_ACTIONS = "Actions done (tool calls)"
_S_IDS = "Identifiers, paths and URLs seen"
_S_FACTS = "Facts: decisions, errors and fixes, edits, figures"
_S_CONCLUSIONS = "Latest assistant conclusions"
_S_STATE = "Current state"
#: what the compaction's instructions named (``instruction_terms``), kept ahead of everything but the request
_S_INSTRUCTED = "Kept as instructed"
_SECTION_ORDER = (_S_PREVIOUS, _S_CURRENT, _S_GOAL, _S_INSTRUCTED, _S_REQUESTS, _S_FACTS, _S_TOOLS, _S_ACTIONS, _S_IDS, _S_CONCLUSIONS, _S_STATE)

# ranks: (tier, age); lower tier is more important, within a tier newer (smaller age) first.
# Identifiers rank above tool-call lines: a call's line is mostly its arguments, and the ids a later
# step may need (a document, a file, a URL) are what a summary cannot rebuild.
# Ids of parts of something listed (a result's chunk ids next to its document id and URL) come after
# every other identifier. Older requests beyond a share of the budget (the newest first) come after them.
_T_MANDATORY, _T_LATEST, _T_REQUESTS, _T_IDS, _T_PART_IDS, _T_REQUESTS_OLDER, _T_TOOLS, _T_PREVIOUS, _T_OLDER = range(9)
_ID_TIERS = (_T_IDS, _T_PART_IDS)
#: what the instructions named: right after the mandatory request, before every other tier
_T_INSTRUCTED = 0.5
#: lines of one message an instruction term keeps (each clipped)
_INSTRUCTED_LINES = 3
#: facts (engine.compaction.summarizers.facts: decisions, errors and fixes, edits, figures), the newest first,
#: ahead of the identifiers while they fit FACTS_SHARE of the budget, the others right after them
_T_FACTS, _T_FACTS_OLDER = 2.5, 3.5
FACTS_SHARE = 0.1
#: the label suffix of a line of part ids: ``- (#3) query_kb parts: chunk-1 chunk-2``
PARTS_LABEL = " parts"
#: the heading of the identifier section: the extractive summary's, and the identifier index
#: appended to a language model's summary (:func:`identifier_index`)
IDENTIFIER_HEADING = f"## {_S_IDS}"
#: the identifier section's first line when it groups identifiers: how to read a grouped form
GROUPED_LEGEND = "(grouped as in a shell: dir/{a,b}.py is dir/a.py dir/b.py)"


class ExtractiveSummarizer:
    """Deterministic rule-based summaries. ``count_tokens`` defaults to the engine's token meter."""

    name = MODEL_NAME

    def __init__(self, count_tokens: Callable[[str], int] | None = None) -> None:
        self._count = count_tokens or default_meter().count_text

    def __repr__(self) -> str:
        return "ExtractiveSummarizer()"

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        goal = _S_GOAL if request.running_turn else _S_CURRENT
        mandatory = [_Item(goal, (0, 0), (_T_MANDATORY, 0), request.current_request)] if request.current_request else []
        items = mandatory + self._rank_facts(self._rank_requests(_unique_facts(list(self._candidates(request))), request.max_tokens), request.max_tokens)
        text, kept = self._fit(mandatory, items, request.max_tokens, request.identifier_tokens)
        # identifiers a kept request or conclusion already shows (those rank above every identifier
        # line, so they stay) are not listed again: the room goes to the next identifiers
        above = _listed_forms(it.text for it in kept if it.rank[0] < _T_IDS)
        if any(part in above for it in items for part in it.parts):
            items = [_without(it, above) if it.parts else it for it in items]
            text, kept = self._fit(mandatory, [it for it in items if it.text], request.max_tokens, request.identifier_tokens)
        shown = _listed_forms([text])
        dropped = tuple(dict.fromkeys(part for it in items for part in it.parts if part not in shown))
        return SummaryResult(text=text, model=MODEL_NAME, prompt_tokens=None, completion_tokens=None, calls=0, extractive=True, dropped_identifiers=dropped)

    def identifier_index(self, request: SummaryRequest, written: str = "") -> tuple[str, tuple[str, ...]]:
        """The identifier section this summarizer would write for ``request``, within
        ``request.identifier_tokens`` tokens (counted exactly, heading included), for a summary
        whose other text is ``written`` (a language model's): the same lines, ranking and part-id
        lines, the previous summary's identifier section carried forward, and only identifiers
        that neither ``written``, the current request nor the retained tail shows. Returns the
        section (``""`` when nothing is left to list or the room is 0) and the identifiers it left
        out."""
        if request.identifier_tokens <= 0:
            return "", ()
        msgs = [m for m in request.messages if m.role != "system"]
        visible = _visible_identifiers(request) | _listed_forms([written])
        groups, listed, parts_of = _identifier_groups(msgs, visible)
        carried = split_identifier_section(request.previous_summary or "")[1]
        items = list(self._carry_over(f"{IDENTIFIER_HEADING}\n{carried}", len(msgs), request, _S_TOOLS, visible | listed)) if carried else []
        items += _identifier_lines(groups, parts_of, len(msgs))
        if not items:
            return "", ()
        text, _ = self._fit([], items, 0, request.identifier_tokens, header=None)
        shown = _listed_forms([text])
        return text, tuple(dict.fromkeys(part for it in items for part in it.parts if part not in shown))

    # -- candidates ------------------------------------------------------------------------------
    def _candidates(self, request: SummaryRequest) -> Iterable[_Item]:
        msgs = [m for m in request.messages if m.role != "system"]
        n = len(msgs)
        actions = _S_ACTIONS if request.running_turn else _S_TOOLS
        visible = _visible_identifiers(request)
        groups, listed, parts_of = _identifier_groups(msgs, visible)
        if request.previous_summary and request.previous_summary.strip().startswith(HEADER):
            # our own format: merge its sections instead of nesting it (a rolling summary stays flat)
            yield from self._carry_over(request.previous_summary.strip()[len(HEADER) :], n, request, actions, visible | listed)
        elif request.previous_summary:
            previous = request.previous_summary.strip()
            reserved = request.max_tokens * _PREVIOUS_SHARE
            for i, line in enumerate(previous.splitlines()):  # its head is kept, its tail goes first
                reserved -= self._count(line) + 1
                tier = _T_LATEST if reserved >= 0 else _T_PREVIOUS
                line = "#" + line if line.startswith("#") else line  # nest its headings one level down
                yield _Item(_S_PREVIOUS, (0, i), (tier, n + i), line, truncatable=True)
        results = {m.tool_call_id: m for m in msgs if m.role == "tool"}
        conclusions = [i for i, m in enumerate(msgs) if m.role == "assistant" and m.content.strip()][-_CONCLUSIONS:]
        # the user messages that hold the current request (kept whole, so neither a request nor facts here)
        current = request.current_request
        holds_current = {i for i, m in enumerate(msgs) if current and m.role == "user" and not m.is_synthetic and contains_verbatim(m.content, current)}
        for i, m in enumerate(msgs):
            age = n - i
            if m.role == "user" and not m.is_synthetic and m.content.strip():
                if i in holds_current:
                    continue
                yield self._request_item(_Item(_S_REQUESTS, (i, 0), (_T_REQUESTS, age), f"- {_ref(m)}{_indent(m.content.strip())}", True))
            for k, call in enumerate(m.tool_calls):
                result = results.get(call.id)
                outcome = f"result: {len(result.content)} chars" if result is not None else "no result in this range"
                line = f"- {_ref(m)}{call.name}({_key_arguments(call.arguments)}) [{call.id}; {outcome}]"
                yield _Item(actions, (i, k), (_T_TOOLS, age), line)
            if i in conclusions:
                item = _Item(_S_CONCLUSIONS, (i, 0), (_T_LATEST if i == conclusions[-1] else _T_OLDER, age), f"- {_ref(m)}{_indent(m.content.strip())}", True)
                # the latest: its head ahead of the identifiers, the whole of it when room is left
                yield self._shortened(item, max(REQUEST_HEAD_TOKENS, int(request.max_tokens * CONCLUSION_SHARE))) if i == conclusions[-1] else item
        yield from _instructed(msgs, request)
        for i, m in enumerate(msgs):
            if m.role == "user" and (m.is_synthetic or i in holds_current):
                continue  # the current request is kept whole
            for k, line in enumerate(fact_lines(m, _shown_text(m))):
                yield _Item(_S_FACTS, (i, k), (_T_FACTS, n - i), f"- {_ref(m)}{line}", truncatable=True)
        yield from _identifier_lines(groups, parts_of, n)
        if request.running_turn and msgs:
            yield _Item(_S_STATE, (0, 0), (_T_LATEST, 0), _state_line(msgs[-1]))

    def _rank_facts(self, items: list[_Item], max_tokens: int) -> list[_Item]:
        """Facts ahead of the identifiers, the newest first, while they fit :data:`FACTS_SHARE` of
        the budget; the others right after the identifiers."""
        reserved = max_tokens * FACTS_SHARE
        order = sorted((k for k, it in enumerate(items) if it.section == _S_FACTS), key=lambda k: items[k].rank)
        for k in order:
            reserved -= self._count(items[k].text) + 1
            if reserved < 0:
                items[k] = _reranked(items[k], _T_FACTS_OLDER)
        return items

    def _rank_requests(self, items: list[_Item], max_tokens: int) -> list[_Item]:
        """Older requests ahead of the identifiers, the newest first, while their heads fit
        :data:`REQUESTS_SHARE` of the budget; the others right after the identifiers."""
        reserved = max_tokens * REQUESTS_SHARE
        order = sorted((k for k, it in enumerate(items) if it.section == _S_REQUESTS), key=lambda k: items[k].rank)
        for k in order:
            reserved -= self._count(items[k].text) + 1
            if reserved < 0:
                items[k] = _reranked(items[k], _T_REQUESTS_OLDER)
        return items

    def _request_item(self, item: _Item) -> _Item:
        """An older request: its head ahead of the identifiers, the whole of it when room is left."""
        return self._shortened(item, REQUEST_HEAD_TOKENS)

    def _shortened(self, item: _Item, head_tokens: int) -> _Item:
        """``item`` as its head of ``head_tokens``, the whole text put back when room is left."""
        if self._count(item.text) <= head_tokens + _MIN_TRUNCATED_TOKENS:
            return item
        return replace(item, text=self._truncate(item.text, head_tokens), full=item.text)

    def _carry_over(self, body: str, n: int, request: SummaryRequest, actions: str, elsewhere: set[str]) -> Iterable[_Item]:
        """Items of a previous extractive summary, placed before (and ranked below) the new material.
        Its identifier lines lose the identifiers shown ``elsewhere`` (new lines, the request, the
        retained tail)."""
        tiers = {_S_REQUESTS: _T_REQUESTS, actions: _T_TOOLS, _S_IDS: _T_IDS, _S_CONCLUSIONS: _T_OLDER, _S_PREVIOUS: _T_PREVIOUS, _S_INSTRUCTED: _T_INSTRUCTED,
                 _S_FACTS: _T_FACTS}
        section: str | None = None
        blocks: list[tuple[str, list[str]]] = []
        for line in body.strip().splitlines():
            if line.startswith("## "):
                section = line[3:].strip()
                section = actions if section in (_S_TOOLS, _S_ACTIONS) else section
                continue
            if section is None or not line.strip():
                continue
            if blocks and blocks[-1][0] == section and not line.startswith("- ") and section in (_S_REQUESTS, _S_CONCLUSIONS, _S_CURRENT, _S_GOAL):
                blocks[-1][1].append(line)  # continuation of a multi-line item
            else:
                blocks.append((section, [line]))
        total = len(blocks)
        for k, (sec, lines) in enumerate(blocks):
            text = "\n".join(lines)
            age = n + total - k
            if sec in (_S_CURRENT, _S_GOAL):
                # the previous current request: still kept verbatim, as an earlier request
                if request.current_request and contains_verbatim(text, request.current_request):
                    continue
                yield self._request_item(_Item(_S_REQUESTS, (-1, total), (_T_REQUESTS, n), "- " + _indent(text.strip()), truncatable=True))
                for j, line in enumerate(constraint_lines(text)):  # its constraints stay if only its head does
                    yield _Item(_S_FACTS, (-1, j), (_T_FACTS, n), f"- {line}", truncatable=True)
                continue
            if sec not in tiers:
                continue  # e.g. the previous "Current state": replaced by the new one
            if sec == _S_IDS:
                if not text.startswith("- "):
                    continue  # the legend
                prefix, parts = _split_id_line(text)  # an older summary's ``- (#3) query_kb: a b`` too
                parts = tuple(x for x in expand_grouped(" ".join(parts)).split() if x not in elsewhere)
                older = prefix.endswith(PARTS_LABEL + ": ")
                main = tuple(x for x in parts if not older and not _is_part_id(x))
                if main:
                    yield _id_item((-1, k), (_T_IDS, age), main)
                if len(main) < len(parts):
                    yield _id_item((-1, k), (_T_PART_IDS, age), tuple(x for x in parts if x not in main))
                continue
            yield self._request_item(_Item(sec, (-1, k), (tiers[sec], age), text, truncatable=True)) if sec == _S_REQUESTS else _Item(
                sec, (-1, k), (tiers[sec], age), text, truncatable=sec in (_S_CONCLUSIONS, _S_PREVIOUS, _S_INSTRUCTED, _S_FACTS)
            )

    # -- budget ----------------------------------------------------------------------------------
    def _fit(
        self, mandatory: list[_Item], items: list[_Item], max_tokens: int, identifier_tokens: int = 0, header: str | None = HEADER
    ) -> tuple[str, list[_Item]]:
        """Keep items by rank while the estimate fits; an identifier line that does not fit keeps
        the identifiers that do, another truncatable item its head; put back the whole of a
        shortened item while room is left; then drop the lowest-ranked items until the exact count
        fits. The summary fits ``max_tokens + identifier_tokens``; everything but the identifier
        lines fits ``max_tokens``. Returns the text (under ``header``; none: the sections alone)
        and the items kept (a shortened item is its shortened copy)."""
        if self._count(_render(mandatory, header)) > max_tokens:
            raise SummarizerError(
                f"the current user request alone does not fit the summary budget of {max_tokens} tokens", "over_budget"
            )
        total = max_tokens + identifier_tokens
        kept: list[_Item] = []
        used = prose = self._count(header) + 1 if header else 0  # the whole estimate, and that of the non-identifier part
        sections: set[str] = set()
        headings: dict[tuple[str, bool], int] = {}  # a section's heading tokens (with the legend above identifiers), counted once
        grouped = _GroupedCost(self._count)
        for item in sorted(items, key=lambda it: it.rank):
            is_id = bool(item.parts)
            if item.section in sections:
                heading = 0
            elif (item.section, is_id) in headings:
                heading = headings[item.section, is_id]
            else:
                heading = headings[item.section, is_id] = self._count(f"\n## {item.section}\n") + 1 + (self._count(GROUPED_LEGEND) + 1 if is_id else 0)
            limit = total - used if is_id else min(total - used, max_tokens - prose)
            if not is_id and limit <= heading:
                continue  # it costs more than its heading and a line break, and no head of it fits: not counted
            cost = (grouped.cost(item.parts) if is_id else self._count(item.text) + 1) + heading
            if cost <= limit:
                kept.append(item)
                sections.add(item.section)
                used += cost
                prose += 0 if is_id else cost
                if is_id:
                    grouped.add(item.parts)
                continue
            room = limit - heading
            if is_id:
                part = self._fit_parts(item, room, grouped)
                if part is not None:
                    kept.append(part)
                    sections.add(item.section)
                    used += grouped.cost(part.parts) + heading
                    grouped.add(part.parts)
                continue
            room -= 1
            if item.truncatable and room >= _MIN_TRUNCATED_TOKENS:
                kept.append(replace(item, text=self._truncate(item.text, room), full=None))  # never an id: not truncatable
                sections.add(item.section)
                used += room + heading + 1
                prose += room + heading + 1
        fitted = sorted(kept, key=lambda it: it.rank)
        for k, item in enumerate(kept):  # put back the whole of a shortened item, most important first
            if item.full is not None:
                extra = self._count(item.full) - self._count(item.text)
                if used + extra <= total and prose + extra <= max_tokens:
                    kept[k] = replace(item, text=item.full, full=None)
                    used += extra
                    prose += extra
        kept.sort(key=lambda it: it.rank)
        text = _render(kept, header)
        if kept != fitted and not self._fits(kept, text, max_tokens, total, header):  # the estimate was short: no item pays for them
            kept, text = fitted, _render(fitted, header)
        if self._count(text) > total and any(it.parts for it in kept):  # the grouped estimate was short: the last identifiers go
            kept, text = self._trim_identifiers(kept, total, header)
        while kept and kept[-1].rank[0] != _T_MANDATORY and not self._fits(kept, text, max_tokens, total, header):
            drop = len(kept) - 1
            if self._count(text) <= total:  # only the part without identifiers is over: drop its last item
                drop = max(k for k, it in enumerate(kept) if not it.parts)
                if kept[drop].rank[0] == _T_MANDATORY:
                    break
            kept.pop(drop)
            text = _render(kept, header)
        return text, kept

    def _fits(self, kept: list[_Item], text: str, max_tokens: int, total: int, header: str | None = HEADER) -> bool:
        """Exact counts: ``text`` within ``total``, and (when identifier lines have room of their
        own) the summary without them within ``max_tokens``."""
        if self._count(text) > total:
            return False
        return total == max_tokens or self._count(_render([it for it in kept if not it.parts], header)) <= max_tokens

    def _fit_parts(self, item: _Item, room: int, grouped: "_GroupedCost") -> _Item | None:
        """``item`` with as many of its first identifiers as fit ``room`` tokens (estimated as
        they join the section's groups), or ``None``."""
        lo, hi = 0, len(item.parts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if grouped.cost(item.parts[:mid]) <= room:
                lo = mid
            else:
                hi = mid - 1
        return _id_item(item.order, item.rank, item.parts[:lo]) if lo else None

    def _trim_identifiers(self, kept: list[_Item], total: int, header: str | None) -> tuple[list[_Item], str]:
        """``kept`` (sorted by rank) keeping the most identifiers, most important first, whose
        rendering fits ``total`` tokens exactly (the other items as they are)."""
        order = [(k, j) for k, it in enumerate(kept) if it.parts for j in range(len(it.parts))]

        def keep(n: int) -> list[_Item]:
            last: dict[int, int] = {}
            for k, j in order[:n]:
                last[k] = j + 1
            out = []
            for k, it in enumerate(kept):
                if not it.parts:
                    out.append(it)
                elif k in last:
                    out.append(it if last[k] == len(it.parts) else _id_item(it.order, it.rank, it.parts[: last[k]]))
            return out

        lo, hi = 0, len(order)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._count(_render(keep(mid), header)) <= total:
                lo = mid
            else:
                hi = mid - 1
        out = keep(lo)
        return out, _render(out, header)

    def _truncate(self, text: str, max_tokens: int) -> str:
        """The longest head of ``text`` that fits ``max_tokens`` together with the omission marker."""
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._count(_cut(text, mid)) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        return _cut(text, lo)


def identifier_index(request: SummaryRequest, written: str = "", *, count_tokens: Callable[[str], int] | None = None) -> tuple[str, tuple[str, ...]]:
    """The identifier index for a summary whose text is ``written`` (see
    :meth:`ExtractiveSummarizer.identifier_index`; ``count_tokens`` defaults to the engine's token
    meter, as the extractive summarizer's): ``(section, identifiers left out)``."""
    return ExtractiveSummarizer(count_tokens).identifier_index(request, written)


def split_identifier_section(summary: str) -> tuple[str, str]:
    """``summary`` without its identifier section (:data:`IDENTIFIER_HEADING` up to the next
    ``## `` heading or the end; every such section), and the lines of those sections. A summary
    without one is returned as it is, with ``""``."""
    lines = summary.splitlines()
    if not any(line.rstrip() == IDENTIFIER_HEADING for line in lines):
        return summary, ""
    rest: list[str] = []
    ids: list[str] = []
    inside = False
    for line in lines:
        if line.rstrip() == IDENTIFIER_HEADING:
            inside = True
        elif inside and line.startswith("## "):
            inside = False
            rest.append(line)
        else:
            (ids if inside else rest).append(line)
    return "\n".join(rest).rstrip(), "\n".join(line for line in ids if line.strip())


_FACT_REF = re.compile(r"^- (?:\(#\d+\) )?")


def _unique_facts(items: list[_Item]) -> list[_Item]:
    """``items`` with each fact line once: a fact whose text (its ``(#N)`` reference aside) a newer
    one repeats is left out, the newest kept (a test that fails the same way at every run, the
    previous summary's copy of a fact seen again), so the room goes to the next fact or identifier."""
    newest: dict[str, tuple[float, int]] = {}
    for it in items:
        if it.section == _S_FACTS:
            key = _FACT_REF.sub("", it.text, count=1)
            newest[key] = min(newest.get(key, it.rank), it.rank, key=lambda r: r[1])
    seen: set[str] = set()
    out = []
    for it in items:
        if it.section == _S_FACTS:
            key = _FACT_REF.sub("", it.text, count=1)
            if key in seen or it.rank != newest[key]:
                continue
            seen.add(key)
        out.append(it)
    return out


def _reranked(item: _Item, tier: float) -> _Item:
    """``item`` in ``tier``, its age kept (``dataclasses.replace`` without its field lookup: a range
    of thousands of requests moves most of them)."""
    return _Item(item.section, item.order, (tier, item.rank[1]), item.text, item.truncatable, item.parts, item.full)


def _is_part_id(ident: str) -> bool:
    """Whether ``ident`` (as found) names a part of something listed next to it: a chunk id."""
    key, sep, value = ident.partition("=")
    return key == "chunk_id" if sep else ident.lower().startswith(("chunk-", "chunk_"))


def _id_item(order: tuple[int, int], rank: tuple[float, int], parts: tuple[str, ...]) -> _Item:
    """The identifiers one message showed (rendered with the whole section's, grouped: :func:`_render`)."""
    return _Item(_S_IDS, order, rank, " ".join(parts), parts=parts)


class _GroupedCost:
    """The estimated tokens identifiers add to the identifier section as they join it, written
    grouped (:func:`engine.core.specifics.group_identifiers`): a new group costs its line, a member
    of an open group its text after a comma (the second member also the braces)."""

    def __init__(self, count: Callable[[str], int]) -> None:
        self._count = count
        self.members: dict[tuple[str, str] | str, int] = {}

    def cost(self, parts: Iterable[str]) -> int:
        extra = 0
        pending: dict[tuple[str, str] | str, int] = {}
        for x in parts:
            split = group_key(x)
            key: tuple[str, str] | str = x if split is None else (split[0], split[2])
            n = self.members.get(key, 0) + pending.get(key, 0)
            if n == 0:
                extra += self._count("- " + x) + 1
            elif split is not None:
                extra += self._count("," + split[1]) + (2 if n == 1 else 0)
            pending[key] = pending.get(key, 0) + 1
        return extra

    def add(self, parts: Iterable[str]) -> None:
        for x in parts:
            split = group_key(x)
            key: tuple[str, str] | str = x if split is None else (split[0], split[2])
            self.members[key] = self.members.get(key, 0) + 1


def _identifier_groups(msgs: list[Message], visible: set[str]) -> tuple[list[tuple[int, Message, list[str]]], set[str], set[str]]:
    """The identifiers of ``msgs`` not ``visible`` elsewhere, each once, grouped under the first
    message that shows it: (index, message, listed forms) groups, every listed form, and the
    listed forms of part ids (chunk ids)."""
    groups: list[tuple[int, Message, list[str]]] = []
    listed: set[str] = set()
    parts_of: set[str] = set()
    for i, m in enumerate(msgs):
        found = []
        for raw in extract_identifiers(_identifier_text(m)):
            x = _shown_form(raw)
            if x not in visible and x not in listed:
                listed.add(x)
                found.append(x)
                if _is_part_id(raw):
                    parts_of.add(x)
        if found:
            groups.append((i, m, found))
    return groups, listed, parts_of


def _identifier_lines(groups: list[tuple[int, Message, list[str]]], parts_of: set[str], n: int) -> Iterable[_Item]:
    """One identifier item per group (the identifiers a message showed first), its part ids in
    an item of their own, ranked after every other identifier."""
    for i, _m, found in groups:
        main = tuple(x for x in found if x not in parts_of)
        part = tuple(x for x in found if x in parts_of)
        if main:
            yield _id_item((i, 0), (_T_IDS, n - i), main)
        if part:
            yield _id_item((i, 1), (_T_PART_IDS, n - i), part)


def _without(item: _Item, shown: set[str]) -> _Item:
    """An identifier line without the identifiers ``shown`` elsewhere (empty text when none is left)."""
    parts = tuple(x for x in item.parts if x not in shown)
    return item if parts == item.parts else (_id_item(item.order, item.rank, parts) if parts else replace(item, text="", parts=()))


def _listed_forms(texts: Iterable[str]) -> set[str]:
    """The identifiers ``texts`` show (a grouped form read back), as found and in their listed form.

    Those of ``texts`` joined by newlines, found text by text (each one's extraction is remembered:
    the retained tail is the next summary's range): no identifier spans a newline, and no grouped
    form does, but for a JSON id pair (``"doc_id"`` and its value may stand on two lines), so texts
    with a ``_id"`` are read joined."""
    expanded = [expand_grouped(t) for t in texts]
    if any('_id"' in t for t in expanded):
        found = extract_identifiers("\n".join(expanded))
    else:
        found = [x for t in expanded for x in extract_identifiers(t)]
    return set(found) | {_shown_form(x) for x in found}


def _split_id_line(line: str) -> tuple[str, tuple[str, ...]]:
    """(prefix, identifiers) of an identifier line: ``- (#3) query_kb: a b`` or the older ``- a``."""
    label, sep, rest = line.partition(": ")
    core = label.removesuffix(PARTS_LABEL)
    if sep and " " not in core[2:].replace("(#", "").split(") ", 1)[-1] and "://" not in core:
        return label + sep, tuple(rest.split())
    return "- ", tuple(line[2:].split()) if line.startswith("- ") else tuple(line.split())


def _shown_text(m: Message) -> str:
    """What the model saw of a message's text: a pruned result's preview without the engine's frame."""
    return replacement_preview(m.content) if m.role == "tool" and m.metadata.get(META_PRUNED) else m.content


def _identifier_text(m: Message) -> str:
    """What a message showed, identifiers included: a pruned result's preview without the
    engine's frame, and the arguments of its calls."""
    return "\n".join([_shown_text(m)] + [c.arguments for c in m.tool_calls])


@lru_cache(maxsize=65536)
def _shown_form(ident: str) -> str:
    """How an identifier is listed: ``doc_id=doc-9`` as ``doc-9`` (the value names itself), but
    ``doc_id=9`` as it is."""
    key, sep, value = ident.partition("=")
    if sep and key.isidentifier() and extract_identifiers(value) == [value]:
        return value
    return ident


def _visible_identifiers(request: SummaryRequest) -> set[str]:
    """Identifiers that stay visible without the summary listing them: those the current request
    (kept verbatim in it) and the retained tail (verbatim after it) show, in their listed form too."""
    return _listed_forms([request.current_request or ""] + [_identifier_text(m) for m in request.retained])


def _source(m: Message) -> str:
    return (m.name or "tool") if m.role == "tool" else m.role


def _cut(text: str, chars: int) -> str:
    return text if chars >= len(text) else f"{text[:chars]} [… {len(text) - chars} more characters not kept]"


def _render(items: list[_Item], header: str | None = HEADER) -> str:
    """The summary text: ``header``, then the sections in fixed order, items in message order
    (no header: the sections alone, from the first heading)."""
    out = [header] if header else []
    for section in _SECTION_ORDER:
        chosen = sorted((it for it in items if it.section == section), key=lambda it: it.order)
        if chosen and section == _S_IDS:
            lines = group_identifiers(x for it in chosen for x in it.parts)
            out.append(f"\n## {section}")
            out.extend(([GROUPED_LEGEND] if any("{" in x for x in lines) else []) + [f"- {x}" for x in lines])
        elif chosen:
            out.append(f"\n## {section}")
            out.extend(it.text for it in chosen)
    return "\n".join(out) if header else "\n".join(out).lstrip("\n")


def _ref(m: Message) -> str:
    return f"(#{m.id}) " if m.id is not None else ""


def _indent(text: str) -> str:
    return text.replace("\n", "\n  ")


def _key_arguments(arguments: str) -> str:
    """``key=value`` pairs of the interesting arguments (all of them if none is known)."""
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return _clip(arguments)
    if not isinstance(parsed, dict):
        return _clip(arguments)
    keys = [k for k in KEY_ARGUMENTS if k in parsed] or sorted(parsed)
    return ", ".join(f"{k}={_clip(json.dumps(parsed[k], ensure_ascii=False))}" for k in keys)


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _ARG_VALUE_CHARS else text[:_ARG_VALUE_CHARS] + "…"


def _state_line(last: Message) -> str:
    if last.role == "tool":
        step = f"the result of {last.name or 'a tool'} [{last.tool_call_id}]"
    elif last.tool_calls:
        step = "the call(s) " + ", ".join(f"{c.name} [{c.id}]" for c in last.tool_calls)
    else:
        step = f"the {last.role} message {_ref(last)}".rstrip()
    return f"- The task is still running. The last compacted step was {step}; newer steps follow verbatim."


def _instructed(msgs: list[Message], request: SummaryRequest) -> Iterable[_Item]:
    """Lines of the range that name what the instructions name (:func:`instruction_terms`, or a
    tool the range called by its name), ranked right after the current request: a path, an id or
    a tool's call and result head the operator asked to keep."""
    terms = list(instruction_terms(request.instructions))
    if request.instructions:
        words = set(request.instructions.replace(",", " ").split())
        terms += [c.name for m in msgs for c in m.tool_calls if c.name in words and c.name not in terms]
    if not terms:
        return
    n = len(msgs)
    names = {c.id: c.name for m in msgs for c in m.tool_calls}
    for i, m in enumerate(msgs):
        tool = m.name or names.get(m.tool_call_id or "") if m.role == "tool" else None
        calls = [f"{c.name}({_key_arguments(c.arguments)}) [{c.id}]" for c in m.tool_calls]
        lines = [ln.strip() for ln in (m.content or "").splitlines() if ln.strip()] + calls
        hit: list[str] = []
        for term in terms:
            if tool == term or any(c.name == term for c in m.tool_calls):
                hit.extend(lines[:1] if tool == term else [c for c in calls if c.startswith(term + "(")])
            if term.startswith("#") and term[1:].isdigit() and m.id == int(term[1:]):
                hit.extend(lines)
            hit.extend(_around(ln, term) for ln in lines if term in ln)
        hit = list(dict.fromkeys(hit))[:_INSTRUCTED_LINES]
        if hit:
            label = f"{tool} result" if tool else m.role
            text = f"- {_ref(m)}{label}: " + "\n  ".join(_clip(h) for h in hit)
            yield _Item(_S_INSTRUCTED, (i, 0), (_T_INSTRUCTED, n - i), text, truncatable=True)


def _around(line: str, term: str) -> str:
    """``line`` when it is short, else the part of it around ``term`` (what a clip keeps)."""
    line = " ".join(line.split())
    if len(line) <= _ARG_VALUE_CHARS:
        return line
    at = line.find(term)
    start = max(0, at - (_ARG_VALUE_CHARS - len(term)) // 2)
    return ("…" if start else "") + line[start:start + _ARG_VALUE_CHARS - 2]
