"""The facts an agent needs next, found by fixed rules in the messages a summary replaces.

Identifiers are one kind of fact; the others are what compactions are known to lose (deja-vu#543:
decisions, commands, numbers) and what probe-based evaluations ask about: a decision and its reason,
an error and its fix, a file edited and how, a figure with its unit. The extractive summarizer keeps
these lines (:func:`fact_lines`) ahead of the identifier lines, within a share of its budget; a
language model is asked for the same in its prompt (``prompts/system.txt``).

Per message, at most :data:`LINES_PER_MESSAGE` lines, each clipped to :data:`LINE_CHARS` characters
around what made it a fact:

- an assistant's line that decides (``Decision:``, ``Settled:``, ``we will use``, ``go with``, ``rather
  than``, ``because`` …), that
  fixes or edits something it names (a path, an identifier or a ``function()``), or that reports a
  figure with its unit next to a metric word;
- a user's constraint sentences (``do not …``, ``never …``, ``only …``, ``leave … alone``, ``no exceptions``,
  ``Constraint: …``; a capitalised imperative such as ``Keep`` starts a sentence even without a
  full stop before it);
- a tool output's (the text its JSON wrapper holds: Codex's ``output``, MCP text, ``stdout``) error lines (``FAILED …``, ``AssertionError: …``, a traceback's last line) and its
  lines that give a figure with its unit next to a metric word (``p95 latency: 412 ms at 1,200 rps``),
  the last ones first (a log's summary is at its end);
- an edit call (``edit_file``, ``str_replace``, ``write``, ``apply_patch`` … or arguments with
  ``old_string`` / ``new_string`` / ``diff``): the tool, the path and the functions or classes its
  text defines.

Pure and deterministic; nothing depends on time or randomness.
"""

from __future__ import annotations

import json
import re
from typing import Iterable, Iterator

from ...core.messages import Message
from ...core.previews import unwrapped_text
from ...core.specifics import _DECISION_WORDS, _ERROR_WORDS, extract_specifics

#: lines kept per message at most (errors first, then figures; the newest lines of a log first)
LINES_PER_MESSAGE = 3
#: a fact line is clipped to this many characters around what made it a fact
LINE_CHARS = 240

_DECIDES = re.compile(
    r"\b(?:decision|decided|decide|we(?:'ll| will| are going to| should)? (?:use|go with|switch|keep|pin|adopt|stay with)|"
    r"go(?:ing)? with|chose|choose|pick(?:ed)?|prefer(?:red)?|switch(?:ed|ing)? to|opt(?:ed)? for|settled(?: on)?|because|instead of|rather than|"
    r"the other option)\b",
    re.IGNORECASE,
)
_CHANGES = re.compile(
    r"\b(?:fix(?:ed|es)?|edit(?:ed|ing|s)?|chang(?:ed|es|ing)|updat(?:ed|es|ing)|patch(?:ed|ing)?|rewr(?:ote|ite|iting)|"
    r"renam(?:ed|ing)|add(?:ed|ing)|remov(?:ed|ing)|mov(?:ed|ing)|refactor(?:ed|ing)?|replac(?:ed|ing)|root cause|the cause)\b",
    re.IGNORECASE,
)
_METRIC = re.compile(
    r"\b(?:latency|p50|p90|p95|p99|throughput|rps|qps|req/s|ops/s|tps|memory|rss|heap|peak|mean|median|avg|average|"
    r"total|duration|elapsed|took|benchmark|load test|speed|size|budget|limit|timeout|cost|error rate|success rate)\b",
    re.IGNORECASE,
)
_STRONG_METRIC = re.compile(
    r"\b(?:latency|p50|p90|p95|p99|throughput|rps|qps|req/s|ops/s|tps|aggregated|summary|total|mean|median|average|"
    r"error rate|success rate|load test)\b",
    re.IGNORECASE,
)
_CONSTRAINT = re.compile(
    r"\b(?:constraint|do not|don't|never|must not|mustn't|must|only|without|avoid|keep [\w ]{0,30}(?:unchanged|as is)|"
    r"leave \S+(?: \S+){0,4} (?:alone|as is|untouched)|always|^keep|no exceptions|(?:needs?|requires?) [\w ]{0,30}\bfirst|"
    r"no more than|at most|at least)\b",
    re.IGNORECASE,
)
#: a literal one of which an error line of a tool output has (a line: one scan instead of six ``in``)
_QUICK_ERROR = re.compile("rror|FAIL|Exception|Traceback|anic|atal")
#: the same literals, for a whole text (six ``in`` over a long text: faster than the scan)
_ERROR_LITERALS = ("rror", "FAIL", "Exception", "Traceback", "anic", "atal")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
#: where a constraint starts when the text before it has no full stop: a capitalised imperative
_IMPERATIVE = re.compile(r"\s+(?=(?:Keep|Always|Never|Leave|Don't|Do not|Only|Avoid|Every)\b)")
_NAMED = re.compile(r"[\w.-]+/[\w./-]+|\b[\w-]+\.(?:py|js|ts|tsx|go|rs|java|rb|c|h|cpp|md|json|ya?ml|toml|sql|txt|cfg|ini)\b|\b\w+\(\)")
_DEFINES = re.compile(r"\b(?:def|class|function|func|fn)\s+([A-Za-z_]\w*)")
_EDIT_TOOLS = re.compile(r"edit|write|replace|patch|apply|create_file|insert|str_replace|multiedit", re.IGNORECASE)
_EDIT_KEYS = ("old_string", "new_string", "old_str", "new_str", "diff", "patch", "edits", "content", "file_text")
_PATH_KEYS = ("path", "file_path", "file", "filename", "target_file")


#: fact lines by (role, text, tool calls): a sweep summarizes the same messages in every run, and
#: a rolling summary sees its range's messages again; cleared whole past :data:`_CACHE_CHARS`
_CACHE: dict[tuple[str, str, tuple[tuple[str, str], ...]], tuple[str, ...]] = {}
_CACHE_CHARS = 2_000_000
_cached_chars = 0


def fact_lines(message: Message, shown: str | None = None) -> list[str]:
    """The fact lines of ``message`` (see the module docstring), in the order it shows them.
    ``shown``: the text the model saw of it (a pruned result's preview), default its content.
    Pure: a result is remembered by what it depends on (role, text, tool calls' names and arguments)."""
    global _cached_chars
    text = message.content if shown is None else shown
    if message.role not in ("assistant", "tool", "user"):
        return []
    calls = tuple((c.name, c.arguments) for c in message.tool_calls) if message.role == "assistant" else ()
    key = (message.role, text, calls)
    hit = _CACHE.get(key)
    if hit is None:
        hit = tuple(_fact_lines(message, text))
        size = len(text) + sum(len(a) + len(b) for a, b in calls)
        if _cached_chars + size > _CACHE_CHARS:
            _CACHE.clear()
            _cached_chars = 0
        if size <= _CACHE_CHARS // 8:
            _CACHE[key] = hit
            _cached_chars += size
    return list(hit)


def _fact_lines(message: Message, text: str) -> list[str]:
    found: list[str] = []
    if message.role == "assistant":
        found = list(_assistant_lines(text))
        for call in message.tool_calls:  # an edit the text already names (path and functions) is not repeated
            line = _edit_line(call.name, call.arguments)
            if line and not all(part in " ".join(found) for part in _edit_parts(line)):
                found.append(line)
        return _unique(found)[: LINES_PER_MESSAGE + len(message.tool_calls)]
    if message.role == "tool":  # a JSON wrapper's text (Codex's {"output": …}, MCP, stdout): its lines
        return _tool_lines(unwrapped_text(text) if "{" in text or "[" in text else text)  # a wrapper is a JSON object or list
    if message.role == "user":
        return constraint_lines(text)
    return []


def constraint_lines(text: str) -> list[str]:
    """The sentences of a user's request that constrain the work (``do not …``, ``never …``,
    ``only …``, ``Constraint: …``), at most :data:`LINES_PER_MESSAGE`: they stay when an older
    request is kept only as its head."""
    if text.isascii():  # lower-cased, each alternative of _CONSTRAINT has one of these words
        lowered = text.lower()
        if not any(w in lowered for w in _CONSTRAINT_WORDS):
            return []
    sentences = (part for sent in _SENTENCE.split(text) for part in _IMPERATIVE.split(sent))
    out = [_clip(" ".join(sent.split()), 0) for sent in sentences if sent.strip() and _search(_CONSTRAINT, _CONSTRAINT_LOWER, sent)]
    return _unique(out)[:LINES_PER_MESSAGE]


def _unique(lines: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(lines))


def _split(text: str) -> Iterator[str]:
    for line in text.splitlines():
        line = " ".join(line.split())
        if line:
            yield line


def _assistant_lines(text: str) -> Iterator[str]:
    if not text.strip():
        return
    kept = 0
    for line in _split(text):
        decides = _decides(line)
        changes = _search(_CHANGES, _CHANGES_LOWER, line) if decides is None and _names(line) else None
        hit = decides or changes
        if hit is None and len(line) < 4 * LINE_CHARS and _may_specify(line):
            # only then do the line's specifics decide (a figure with a metric word, a decision, an error)
            kinds = {s.kind for s in extract_specifics(line)}
            hit = _search(_METRIC, _METRIC_LOWER, line) if "quantity" in kinds else None
            if hit is None and kinds & {"decision", "error"}:
                yield _clip(line, 0)
                kept += 1
                if kept >= LINES_PER_MESSAGE:
                    return
                continue
        if hit:
            at = hit.start() if hit else 0
            yield _clip(line, at)
            kept += 1
            if kept >= LINES_PER_MESSAGE:
                return


#: :data:`_DECIDES`, :data:`_CHANGES`, :data:`_METRIC` and :data:`_CONSTRAINT` without IGNORECASE, for a
#: line already lower-cased (their patterns are lower case)
_DECIDES_LOWER = re.compile(_DECIDES.pattern)
_CHANGES_LOWER = re.compile(_CHANGES.pattern)
_METRIC_LOWER = re.compile(_METRIC.pattern)
_CONSTRAINT_LOWER = re.compile(_CONSTRAINT.pattern)
#: a word (lower case) each alternative of :data:`_CONSTRAINT` contains
_CONSTRAINT_WORDS = ("constraint", "do not", "don't", "never", "must", "only", "without", "avoid", "keep", "leave", "always", "no exceptions",
                     "need", "require", "no more than", "at most", "at least")


def _search(pattern: re.Pattern[str], lower: re.Pattern[str], line: str) -> re.Match[str] | None:
    """``pattern.search(line)`` of an IGNORECASE ``pattern``; an ASCII line is lower-cased first and
    searched by ``lower`` (``pattern`` without IGNORECASE: same offsets, same match, as ASCII case
    folding is lower-casing), about twice as fast. (Not for a non-ASCII line: IGNORECASE also
    matches ``ſ`` to ``s`` and the Kelvin sign to ``k``.)"""
    if line.isascii():
        return lower.search(line.lower())
    return pattern.search(line)


def _decides(line: str) -> re.Match[str] | None:
    """``_DECIDES.search(line)`` (:func:`_search`)."""
    return _search(_DECIDES, _DECIDES_LOWER, line)


def _names(line: str) -> bool:
    """``_NAMED.search(line)`` found something: each of its forms needs a ``/``, a ``.`` or ``()``,
    so a line with none is answered without the (slow, backtracking) search."""
    return ("/" in line or "." in line or "()" in line) and _NAMED.search(line) is not None


def _tool_lines(text: str) -> list[str]:
    if not text.strip():
        return []
    # asked of the whole text once: a line has an error's literal, or a digit, only if the text does
    may_error = any(w in text for w in _ERROR_LITERALS)
    may_figure = not text.isascii() or _ASCII_DIGIT.search(text) is not None
    if not (may_error or may_figure):
        return []
    errors: list[str] = []
    figures: list[tuple[int, int, str]] = []  # (score, position, line)
    shapes: set[str] = set()  # a figure line's shape (digits blanked): one line per shape (worker-01 …, worker-02 …)
    lines = list(_split(text))
    for pos in range(len(lines) - 1, -1, -1):  # a log's summary and its last error are at its end
        line = lines[pos]
        if len(line) > 8 * LINE_CHARS:  # one-line JSON and the like: no line to quote
            continue
        quick_error = may_error and _QUICK_ERROR.search(line) is not None
        # a figure needs a digit and a metric word: the digit first (one scan; a long line of prose has none, and the
        # metric regex tries its alternatives at every position)
        quick_figure = _search(_METRIC, _METRIC_LOWER, line) if may_figure and _has_digit(line) else None
        if not (quick_error or quick_figure):
            continue
        specifics = extract_specifics(line)
        kinds = {x.kind for x in specifics}
        if "error" in kinds:
            if len(errors) < LINES_PER_MESSAGE:
                errors.append(_clip(line, 0))
            continue
        if "quantity" in kinds and quick_figure:
            shape = re.sub(r"\d+", "0", line)
            if shape in shapes:
                continue
            shapes.add(shape)
            score = 2 * len(_STRONG_METRIC.findall(line)) + sum(1 for x in specifics if x.kind == "quantity")
            figures.append((score, pos, _clip(line, quick_figure.start())))
    best = sorted(figures, key=lambda f: (-f[0], -f[1]))[: max(0, LINES_PER_MESSAGE - min(len(errors), 2))]
    chosen = _unique(errors[: LINES_PER_MESSAGE - len(best)] + [f[2] for f in best])
    order = {line: i for i, line in enumerate(lines)}
    return sorted(chosen, key=lambda x: order.get(x, -1))


_ASCII_DIGIT = re.compile(r"[0-9]")


def _may_specify(line: str) -> bool:
    """Can :func:`extract_specifics` find a decision or an error in ``line``, or a quantity that a
    metric word makes a figure? Its decisions and errors each need one of its literals, its
    quantities an ASCII digit."""
    if any(w in line for w in _ERROR_WORDS) or any(w in line for w in _DECISION_WORDS):
        return True
    return (not line.isascii() or _ASCII_DIGIT.search(line) is not None) and _search(_METRIC, _METRIC_LOWER, line) is not None


def _has_digit(line: str) -> bool:
    r"""``any(c.isdigit() for c in line)``: one regex scan for an ASCII line (``isascii`` is O(1)),
    the character loop otherwise (``str.isdigit`` takes more than ``\d``: superscripts and the like)."""
    if line.isascii():
        return _ASCII_DIGIT.search(line) is not None
    return any(c.isdigit() for c in line)


def _edit_line(name: str, arguments: str) -> str | None:
    """``edit_file services/x.py: apply_discount`` for an edit call, else None."""
    if not _EDIT_TOOLS.search(name) and "\\" not in arguments and not any(k in arguments for k in _EDIT_KEYS[:6]):
        return None  # no edit tool, and no edit key in the (unescaped) JSON: nothing to parse
    try:
        args = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return None
    if not isinstance(args, dict):
        return None
    if not (_EDIT_TOOLS.search(name) or any(k in args for k in _EDIT_KEYS[:6])):
        return None
    path = next((str(args[k]) for k in _PATH_KEYS if isinstance(args.get(k), str)), None)
    if path is None:
        return None
    body = "\n".join(str(args[k]) for k in _EDIT_KEYS if k in args)
    names = list(dict.fromkeys(_DEFINES.findall(body)))[:4]
    return f"{name} {path}" + (f": {', '.join(names)}" if names else "")


def _edit_parts(line: str) -> list[str]:
    """The path and the function names of an edit line (``tool path: f, g``)."""
    head, _, names = line.partition(": ")
    return [head.split(" ", 1)[-1], *(n for n in names.split(", ") if n)]


def _clip(line: str, at: int) -> str:
    """``line`` when short, else :data:`LINE_CHARS` characters of it starting a little before ``at``."""
    if len(line) <= LINE_CHARS:
        return line
    start = max(0, min(at - LINE_CHARS // 4, len(line) - LINE_CHARS))
    return ("…" if start else "") + line[start : start + LINE_CHARS] + ("…" if start + LINE_CHARS < len(line) else "")
