"""The generic preview: labelled head / middle / tail slices of any text; error, URL and path
lines from the part left out replace the middle slice when there are any (cut shorter, then
reduced to the identifiers they name, when they do not all fit). The fallback of every shape."""

from __future__ import annotations

import bisect
import re
from typing import Sequence

from engine.core.specifics import extract_identifiers

from ._text import CONTROL, ELLIPSIS, CountTokens, Span, _Ruler, count_joined, fitted, probably_fits, snap_end, snap_start

__all__ = ["LINE_LEVELS", "NAMED_LABEL", "generic_preview"]


def _generic_layout(content: str, head_b: int, mid_b: int, tail_b: int, count: CountTokens) -> tuple[str, int]:
    """The head / middle / tail text and its count (each slice counted once, by the ruler that fitted it)."""
    n = len(content)
    head, head_ruler, tail, tail_ruler, rest = _slices(content, head_b, tail_b, count)
    head_end = len(head)
    tail_start = n - len(tail)
    middle, mid_start = "", tail_start
    mid_ruler, mid_from = None, 0  # middle is mid_ruler's text[mid_from:], before its strip
    if mid_b > 0 and tail_start > head_end:
        ratio = max(1, (head_end + n - tail_start) // max(1, _count(head_ruler, head, count) + _count(tail_ruler, tail, count)))
        mid_start = max(head_end, n // 2 - mid_b * ratio // 2)
        k, mid_ruler = fitted(content[mid_start:tail_start], mid_b, count)
        window = content[mid_start : mid_start + k]
        middle = snap_start(window)
        mid_from = len(window) - len(middle)
        mid_start += mid_from
        middle = snap_end(middle)
    parts: list[tuple[str, Span | None]] = [(f"[head: chars 0-{head_end} of {n}]", None), _part(head_ruler, head, 0, both=False)]
    if middle:
        parts += [
            (f"[... {mid_start - head_end} chars omitted ...]", None),
            (f"[middle: chars {mid_start}-{mid_start + len(middle)}]", None),
            _part(mid_ruler, middle, mid_from, both=True),
            (f"[... {tail_start - mid_start - len(middle)} chars omitted ...]", None),
        ]
    elif tail_start > head_end:
        parts.append((f"[... {tail_start - head_end} chars omitted ...]", None))
    if tail:
        parts += [(f"[tail: chars {tail_start}-{n}]", None), _part(tail_ruler, tail, len(rest) - len(tail), both=True)]
    return count_joined(parts, count)


def _slices(content: str, head_b: int, tail_b: int, count: CountTokens) -> tuple[str, _Ruler | None, str, _Ruler | None, str]:
    """(head, the ruler that fitted it, tail, the ruler that fitted it, the text after the head
    the tail was fitted in): the head fitted to ``head_b`` and cut at a line end, the tail fitted to
    ``tail_b`` in what the head leaves and cut at a line start."""
    k, head_ruler = fitted(content, head_b, count)
    head = snap_end(content[:k])
    rest = content[len(head) :]
    k, tail_ruler = fitted(rest, tail_b, count, from_end=True)
    return head, head_ruler, snap_start(rest[len(rest) - k :]), tail_ruler, rest


def _count(ruler: _Ruler | None, text: str, count: CountTokens) -> int:
    """The count of ``text``: the first (from_end: last) characters of what ``ruler`` fitted, or counted whole."""
    return count(text) if ruler is None else ruler(len(text))


def _part(ruler: _Ruler | None, text: str, at: int, *, both: bool) -> tuple[str, Span | None]:
    """``text`` (``ruler``'s text from ``at`` on) without the newlines at its end (``both``: at
    either end), and the span of it whose count ``ruler`` gives."""
    shown = text.strip("\n") if both else text.rstrip("\n")
    if ruler is None or not shown:
        return shown, None
    start = at + (len(text) - len(text.lstrip("\n")) if both else 0)
    return shown, ruler.span(start, start + len(shown))


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
#: a measured figure with its unit ("412 ms", "1,200 rps", "774 MiB", "99.5 %"): a line reporting
#: one (a load test's summary, a benchmark, a build's size) is notable beside the errors, since
#: the figure is what an agent quotes later and a head/tail cut loses it in the middle of a log
#: (``\d(?<![\w.,]\d)`` is ``(?<![\w.,])\d`` written digit first: the same matches, and the scan
#: jumps from digit to digit instead of trying the look-behind at every character)
_MEASURE = re.compile(
    r"\d(?<![\w.,]\d)[\d,]*(?:\.\d+)?\s?(?:ms|µs|us|ns|s|sec|secs|seconds|min|minutes|h|hours|rps|req/s|qps|ops/s|rows/s"
    r"|[KMGT]i?B|[kKMG]B/s|B|bytes|%|tokens|users|workers|threads|connections)(?![\w/])"
)
NOTABLE_LINE_CHARS = 240  # a kept line longer than this is cut around what made it notable
#: what each kept line may still hold when they do not all fit: its first characters around what
#: made it notable, shorter and shorter, then only the identifiers (paths, URLs, ids) it names
#: (an error line keeps its shortest cut instead)
LINE_LEVELS: tuple[int, ...] = (NOTABLE_LINE_CHARS, 120, 72, 0)
#: share of the preview the kept lines may take from head and tail when they need it (30 % to 70 %)
_KEPT_SHARE_MIN, _KEPT_SHARE_MAX = 30, 70
_NOTABLE_KINDS = ("errors", "URLs", "paths", "figures")


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
    measured: set[int] = set()
    if not content.isascii() or any(d in content for d in "0123456789"):  # each figure starts with a digit (one byte scan per digit)
        measured = {bisect.bisect_right(starts, m.start()) - 1 for m in _MEASURE.finditer(content)}
    candidates |= measured
    found: list[_Notable] = []
    for index in sorted(candidates):
        start = starts[index]
        end = starts[index + 1] if index + 1 < len(starts) else len(content)
        body = content[start:end].rstrip("\r\n")
        hit = None
        for priority, pattern in enumerate((_ERROR_LINE, _URL, _PATH, _MEASURE)):  # noqa: B007 - read after the loop  # noqa: B007 - priority is read after the loop
            hit = pattern.search(body)
            if hit:
                break
        if hit is None or not body.strip():
            continue
        if priority == 2 and _SUCCESS_LINE.search(body):
            priority = 3
        elif priority == 3:  # a figure with its unit and no path or URL: kept whole, after the errors
            priority = 0 if index in measured and not _SUCCESS_LINE.search(body) else 3
        found.append(_Notable(start, end, index + 1, priority, CONTROL.sub(" ", body).rstrip(), hit.start()))
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


def _notable_note(omitted: int, kept: int, of: int, levels: tuple[int, int]) -> str:
    """The line between the head and the kept lines: what was left out, what is kept and how."""
    how = "".join(
        f"; {what} {f'cut to {level} chars' if level else 'as the identifiers they name'}"
        for what, level in (("errors", levels[0] or LINE_LEVELS[-2]), ("others", levels[1])) if level != LINE_LEVELS[0]
    )
    return f"[... {omitted} chars omitted; {kept} of their {of} lines with {', '.join(_NOTABLE_KINDS)} kept below{how} ...]"


def _notable_layout(content: str, head_b: int, kept_b: int, tail_b: int, notable: Sequence[_Notable], levels: tuple[int, int],
                    count: CountTokens) -> tuple[str, int] | None:
    n = len(content)
    head, head_ruler, tail, tail_ruler, rest = _slices(content, head_b, tail_b, count)
    head_end = len(head)
    tail_start = n - len(tail)
    # a line the head or the tail slice cuts counts as left out too (its path may be cut in two)
    inside = [x for x in notable if x.end > head_end and x.start < tail_start]
    # what the slices leave of their share (they snap to line ends) goes to the kept lines
    kept_b += max(0, head_b - _count(head_ruler, head, count)) + max(0, tail_b - _count(tail_ruler, tail, count))
    picked, named, givers = _pick_notable(inside, kept_b, levels, count, shown=head + "\n" + tail)
    if not picked and not named:
        return None
    parts: list[tuple[str, Span | None]] = [
        (f"[head: chars 0-{head_end} of {n}]", None),
        _part(head_ruler, head, 0, both=False),
        (_notable_note(tail_start - head_end, len(picked) + givers, len(inside), levels), None),
        *((f"L{number}: {text}", None) for number, text in picked),
    ]
    if named:
        parts.append((NAMED_LABEL.format(lines=givers) + " " + " ".join(named), None))
    if tail:
        parts += [(f"[tail: chars {tail_start}-{n}]", None), _part(tail_ruler, tail, len(rest) - len(tail), both=True)]
    return count_joined(parts, count)


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
    if probably_fits(content, budget_tokens, count_tokens):
        return content
    n = len(content)
    short_labels = [f"[head: chars 0-{n} of {n}]", f"[... {n} chars omitted ...]", f"[tail: chars {n}-{n}]"]
    middle_labels = [f"[middle: chars {n}-{n}]", f"[... {n} chars omitted ...]"]
    avail = budget_tokens - count_tokens("\n".join(short_labels + middle_labels)) - 5
    avail0 = avail
    with_middle = avail >= 60  # below that, a middle slice would be a few words
    notable = _notable_lines(content) if with_middle else []
    # the kept lines' layout has no middle labels; its note line says more than the short label
    short_avail = budget_tokens - count_tokens("\n".join(short_labels)) - 3
    if not with_middle:
        avail = short_avail
    while avail > 0:
        laid = None
        if notable:
            share, levels = _notable_plan(notable, avail, count_tokens)
            # the note's cost comes out of the slices before they are split, so the kept lines
            # are not cut to pay for it
            note = count_tokens(_notable_note(n, len(notable), len(notable), levels)) - count_tokens(short_labels[1])
            room = avail + (short_avail - avail0) - max(0, note)
            kept_b = room * share // 100
            head_b = (room - kept_b) // 2
            laid = _notable_layout(content, head_b, kept_b, room - head_b - kept_b, notable, levels, count_tokens)
        if laid is None:
            head_b = avail * 45 // 100 if with_middle else avail // 2
            mid_b = avail * 15 // 100 if with_middle else 0
            laid = _generic_layout(content, head_b, mid_b, avail - head_b - mid_b, count_tokens)
        text, tokens = laid
        over = tokens - budget_tokens
        if over <= 0:
            return text
        avail -= max(over, avail // 10, 1)
    return ""
