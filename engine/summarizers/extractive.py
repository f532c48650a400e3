"""The offline extractive summarizer: no language model, deterministic, always available.

It copies instead of writing: the previous summary, the user's requests verbatim (the current request
always in full), the identifiers, paths and URLs seen (each once), the tool calls with their key
arguments, and the latest assistant conclusions. When that exceeds the budget, the least important
and oldest parts go first: older conclusions, the previous summary beyond a quarter of the budget,
older tool calls, then identifiers (those the current request or the retained tail mention last,
the others newest first), then older requests. The identifiers left out are listed in the result's
``dropped_identifiers``.
Same input, same output: ordering is positional, nothing depends on time or randomness.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Iterable

from ..messages import Message
from ..meter import default_meter
from ..specifics import extract_identifiers
from .protocol import SummarizerError, SummaryRequest, SummaryResult, contains_verbatim

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

@dataclass(frozen=True, slots=True)
class _Item:
    """One line (or block) of the summary. Lower ``rank`` is kept first; ``order`` is the output order."""

    section: str
    order: tuple[int, int]
    rank: tuple[int, int]
    text: str
    truncatable: bool = False


_S_PREVIOUS = "Previous summary (carried forward)"
_S_CURRENT = "Current user request (verbatim)"
_S_GOAL = "Task goal: current user request (verbatim)"
_S_REQUESTS = "User requests (verbatim)"
_S_TOOLS = "Tool calls made"
_S_ACTIONS = "Actions done (tool calls)"
_S_IDS = "Identifiers, paths and URLs seen"
_S_CONCLUSIONS = "Latest assistant conclusions"
_S_STATE = "Current state"
_SECTION_ORDER = (_S_PREVIOUS, _S_CURRENT, _S_GOAL, _S_REQUESTS, _S_TOOLS, _S_ACTIONS, _S_IDS, _S_CONCLUSIONS, _S_STATE)

# ranks: (tier, age); lower tier is more important, within a tier newer (smaller age) first.
# Identifiers rank above tool-call lines: a call's line is mostly its arguments, and the ids a later
# step may need (a document, a file, a URL) are what a summary cannot rebuild.
_T_MANDATORY, _T_LATEST, _T_REQUESTS, _T_IDS_FIRST, _T_IDS, _T_TOOLS, _T_PREVIOUS, _T_OLDER = range(8)


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
        items = mandatory + list(self._candidates(request))
        text, kept = self._fit(mandatory, items, request.max_tokens)
        chosen = {id(it) for it in kept}
        dropped = tuple(it.text[2:] for it in items if it.section == _S_IDS and id(it) not in chosen)
        return SummaryResult(text=text, model=MODEL_NAME, prompt_tokens=None, completion_tokens=None, calls=0, extractive=True, dropped_identifiers=dropped)

    # -- candidates ------------------------------------------------------------------------------
    def _candidates(self, request: SummaryRequest) -> Iterable[_Item]:
        msgs = [m for m in request.messages if m.role != "system"]
        n = len(msgs)
        actions = _S_ACTIONS if request.running_turn else _S_TOOLS
        carried_ids: set[str] = set()
        first = _priority_identifiers(request)
        if request.previous_summary and request.previous_summary.strip().startswith(HEADER):
            # our own format: merge its sections instead of nesting it (a rolling summary stays flat)
            for item in self._carry_over(request.previous_summary.strip()[len(HEADER) :], n, request, actions, first):
                if item.section == _S_IDS:
                    carried_ids.add(item.text)
                yield item
        elif request.previous_summary:
            previous = request.previous_summary.strip()
            reserved = request.max_tokens * _PREVIOUS_SHARE
            for i, line in enumerate(previous.splitlines()):  # its head is kept, its tail goes first
                reserved -= self._count(line) + 1
                tier = _T_LATEST if reserved >= 0 else _T_PREVIOUS
                line = "#" + line if line.startswith("#") else line  # nest its headings one level down
                yield _Item(_S_PREVIOUS, (0, i), (tier, n + i), line, truncatable=True)
        results = {m.tool_call_id: m for m in msgs if m.role == "tool"}
        last_seen: dict[str, int] = {}
        first_seen: dict[str, tuple[int, int]] = {}
        conclusions = [i for i, m in enumerate(msgs) if m.role == "assistant" and m.content.strip()][-_CONCLUSIONS:]
        for i, m in enumerate(msgs):
            age = n - i
            texts = [m.content] + [c.arguments for c in m.tool_calls]
            for j, ident in enumerate(extract_identifiers("\n".join(texts))):
                first_seen.setdefault(ident, (i, j))
                last_seen[ident] = i
            if m.role == "user" and not m.is_synthetic and m.content.strip():
                if request.current_request and contains_verbatim(m.content, request.current_request):
                    continue
                yield _Item(_S_REQUESTS, (i, 0), (_T_REQUESTS, age), f"- {_ref(m)}{_indent(m.content.strip())}", True)
            for k, call in enumerate(m.tool_calls):
                result = results.get(call.id)
                outcome = f"result: {len(result.content)} chars" if result is not None else "no result in this range"
                line = f"- {_ref(m)}{call.name}({_key_arguments(call.arguments)}) [{call.id}; {outcome}]"
                yield _Item(actions, (i, k), (_T_TOOLS, age), line)
            if i in conclusions:
                tier = _T_LATEST if i == conclusions[-1] else _T_OLDER
                yield _Item(_S_CONCLUSIONS, (i, 0), (tier, age), f"- {_ref(m)}{_indent(m.content.strip())}", True)
        for ident in last_seen:  # each once; the budget decides how many stay
            if f"- {ident}" in carried_ids:
                continue
            tier = _T_IDS_FIRST if ident in first else _T_IDS
            yield _Item(_S_IDS, first_seen[ident], (tier, n - last_seen[ident]), f"- {ident}")
        if request.running_turn and msgs:
            yield _Item(_S_STATE, (0, 0), (_T_LATEST, 0), _state_line(msgs[-1]))

    def _carry_over(self, body: str, n: int, request: SummaryRequest, actions: str, first: set[str]) -> Iterable[_Item]:
        """Items of a previous extractive summary, placed before (and ranked below) the new material."""
        tiers = {_S_REQUESTS: _T_REQUESTS, actions: _T_TOOLS, _S_IDS: _T_IDS, _S_CONCLUSIONS: _T_OLDER, _S_PREVIOUS: _T_PREVIOUS}
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
                yield _Item(_S_REQUESTS, (-1, total), (_T_REQUESTS, n), "- " + _indent(text.strip()), truncatable=True)
                continue
            if sec not in tiers:
                continue  # e.g. the previous "Current state": replaced by the new one
            tier = _T_IDS_FIRST if sec == _S_IDS and text[2:] in first else tiers[sec]
            yield _Item(sec, (-1, k), (tier, age), text, truncatable=sec in (_S_REQUESTS, _S_CONCLUSIONS, _S_PREVIOUS))

    # -- budget ----------------------------------------------------------------------------------
    def _fit(self, mandatory: list[_Item], items: list[_Item], max_tokens: int) -> tuple[str, list[_Item]]:
        """Keep items by rank while the estimate fits, truncate the first one that does not (if it
        may be truncated), then drop the lowest-ranked items until the exact count fits. Returns
        the text and the items kept (a truncated item is its shortened copy)."""
        if self._count(_render(mandatory)) > max_tokens:
            raise SummarizerError(
                f"the current user request alone does not fit the summary budget of {max_tokens} tokens", "over_budget"
            )
        kept: list[_Item] = []
        used = self._count(HEADER) + 1
        sections: set[str] = set()
        for item in sorted(items, key=lambda it: it.rank):
            heading = 0 if item.section in sections else self._count(f"\n## {item.section}\n") + 1
            cost = self._count(item.text) + 1 + heading
            if used + cost <= max_tokens:
                kept.append(item)
                sections.add(item.section)
                used += cost
                continue
            room = max_tokens - used - heading - 1
            if item.truncatable and room >= _MIN_TRUNCATED_TOKENS:
                kept.append(_Item(item.section, item.order, item.rank, self._truncate(item.text, room)))  # never an id: not truncatable
                sections.add(item.section)
                used += room + heading + 1
        kept.sort(key=lambda it: it.rank)
        text = _render(kept)
        while kept and kept[-1].rank[0] != _T_MANDATORY and self._count(text) > max_tokens:
            kept.pop()
            text = _render(kept)
        return text, kept

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


def _priority_identifiers(request: SummaryRequest) -> set[str]:
    """Identifiers the current request or the retained tail mention: a summary keeps them first."""
    texts = [request.current_request or ""]
    for m in request.retained:
        texts.append(m.content)
        texts.extend(c.arguments for c in m.tool_calls)
    return set(extract_identifiers("\n".join(texts)))


def _cut(text: str, chars: int) -> str:
    return text if chars >= len(text) else f"{text[:chars]} [… {len(text) - chars} more characters not kept]"


def _render(items: list[_Item]) -> str:
    """The summary text: header, then the sections in fixed order, items in message order."""
    out = [HEADER]
    for section in _SECTION_ORDER:
        chosen = sorted((it for it in items if it.section == section), key=lambda it: it.order)
        if chosen:
            out.append(f"\n## {section}")
            out.extend(it.text for it in chosen)
    return "\n".join(out)


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
