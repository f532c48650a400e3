"""Previews of text shapes: a grep / rg / ls / find listing, a test run's log, a table (markdown,
CSV, TSV; read as records), a file read (numbered lines or a known path).

Each ``*_preview`` takes the parsed shape and a budget and returns text within it, or ``None``
(the caller falls back to the generic preview). Each degrades in steps that keep identifiers
longest: the matched lines → the paths with their line numbers → the paths → the count.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field

from ._text import CONTROL, ELLIPSIS, CountTokens, fit, truncate_tokens
from .generic import generic_preview
from .records import RecordSet, from_mappings

__all__ = [
    "FileRead",
    "GrepListing",
    "TestLog",
    "file_read_preview",
    "grep_preview",
    "parse_file_read",
    "parse_grep",
    "parse_table",
    "parse_test_log",
    "test_log_preview",
]

#: lines a detector looks at (a huge text is judged by its first lines)
SAMPLE_LINES = 400
_MATCH = re.compile(r"^(?P<path>[^\s:|][^\s:]{0,300}?)[:-](?P<line>\d{1,7})[:-](?P<text>.*)$")
_PATH_ONLY = re.compile(r"^(?:\./|/|~/)?[\w@.+-]+(?:/[\w@.+ -]+)*/?$")
_LS_LONG = re.compile(r"^[-dlcbps][rwxsStT-]{9}[.@+]?\s+\d+\s+\S+\s+\S+\s+[\d,.]+[KMG]?\s+\w{3}\s+\d{1,2}\s+[\d:]{4,5}\s+(?P<name>.+)$")
_RG_LINE = re.compile(r"^(?P<line>\d{1,7})[:-](?P<text>.*)$")


#: a line is judged by its first characters (bounded work on a huge single-line text)
LINE_CHARS = 2000


def _lines(text: str) -> list[str]:
    return [CONTROL.sub(" ", x[:LINE_CHARS]).rstrip() for x in text.split("\n")]


# -- grep / rg / ls / find -------------------------------------------------------------------------


@dataclass(slots=True)
class GrepListing:
    """Files in order of first appearance, each with its matched (line number, text) pairs (none for
    a plain listing of paths)."""

    files: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    matches: int = 0
    other: int = 0  # lines that were neither a match nor a path


def _grep_like(lines: list[str]) -> int:
    """How many of ``lines`` read as a match, an ``ls -l`` line or a path (rg's line numbers count
    after a path heading)."""
    good = 0
    heading = False
    for line in lines:
        m = _MATCH.match(line)
        if m and ("/" in m["path"] or "." in m["path"]):
            good += 1
        elif heading and _RG_LINE.match(line) or _LS_LONG.match(line):
            good += 1
        elif _PATH_ONLY.match(line.strip()) and ("/" in line or "." in line):
            good += 1
            heading = True
    return good


def parse_grep(text: str) -> GrepListing | None:
    """A grep / rg listing (``path:line:text``, ``path-line-text`` context, rg's heading mode), an
    ``ls`` / ``ls -l`` / ``find`` / glob listing of paths; ``None`` unless at least 3 lines and 70 %
    of the non-empty ones are such."""
    head = text[: SAMPLE_LINES * 400]
    if head.count("\n") < 2:  # fewer than 3 lines: not one (answered without cleaning the text's one or two long lines)
        return None
    first = [x for x in _lines(head) if x.strip() and x != "--"][:SAMPLE_LINES]
    if len(first) < 3 or _grep_like(first) * 10 < len(first) * 7:
        return None
    lines = [x for x in _lines(text) if x.strip() and x != "--"]
    sample = lines[:SAMPLE_LINES]
    out = GrepListing()
    heading: str | None = None
    good = 0
    for i, line in enumerate(lines):
        m = _MATCH.match(line)
        if m and ("/" in m["path"] or "." in m["path"]):
            out.files.setdefault(m["path"], []).append((int(m["line"]), m["text"]))
            out.matches += 1
            good += i < len(sample)
            continue
        r = _RG_LINE.match(line)
        if r and heading is not None:
            out.files[heading].append((int(r["line"]), r["text"]))
            out.matches += 1
            good += i < len(sample)
            continue
        ls = _LS_LONG.match(line)
        if ls:
            out.files.setdefault(ls["name"], [])
            good += i < len(sample)
            continue
        if _PATH_ONLY.match(line.strip()) and ("/" in line or "." in line):
            heading = line.strip()
            out.files.setdefault(heading, [])
            good += i < len(sample)
            continue
        out.other += 1
    if good * 10 < len(sample) * 7 or not out.files:
        return None
    return out


def grep_preview(listing: GrepListing, *, budget_tokens: int, count_tokens: CountTokens, text: str | None = None) -> str | None:
    """``N matches in M files`` (or ``M paths``), then per file: its path and its matched lines
    (``  12: text``, cut to 160 / 80 characters), else its path and line numbers
    (``path: 12, 40``), else its path, else as many paths as fit and how many are left out."""
    files = list(listing.files.items())
    head = f"{listing.matches} matches in {len(files)} files" if listing.matches else f"{len(files)} paths"
    if listing.other:
        head += f" ({listing.other} other line{'s' if listing.other != 1 else ''} below)"

    def block(path: str, hits: list[tuple[int, str]], level: int) -> list[str]:
        if level >= 80 and hits:
            return [path, *(f"  {n}: {t.strip()[:level]}{ELLIPSIS if len(t.strip()) > level else ''}" for n, t in hits)]
        if level == 1 and hits:
            return [f"{path}: {', '.join(str(n) for n, _ in hits)}"]
        return [path]

    def render(levels: list[int], limit: int | None = None) -> str:
        out = [head]
        for (path, hits), level in zip(files if limit is None else files[:limit], levels):
            out += block(path, hits, level)
        if limit is not None and limit < len(files):
            out.append(f"[... {len(files) - limit} more files left out]")
        return "\n".join(out)

    ladder = (160, 80, 1, 0)
    for index, level in enumerate(ladder):
        levels = [level] * len(files)
        found = render(levels)
        if count_tokens(found) <= budget_tokens:
            if index > 0:  # what is left goes to the first files, one level richer
                spare = budget_tokens - count_tokens(found)
                for i, (path, hits) in enumerate(files):
                    delta = count_tokens("\n".join(block(path, hits, ladder[index - 1]))) - count_tokens("\n".join(block(path, hits, level)))
                    if delta > spare - 2:
                        break
                    levels[i], spare = ladder[index - 1], spare - delta
                while levels[0] != level and count_tokens(render(levels)) > budget_tokens:
                    levels[max(i for i, x in enumerate(levels) if x != level)] = level
                found = render(levels)
            if listing.other and text is not None:  # the lines that were not matches: generic
                return with_rest(found, text, budget_tokens=budget_tokens, count_tokens=count_tokens)
            return found
    lo, hi = 0, len(files)  # the most paths that fit, with the count of the rest
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(render([0] * mid, mid)) <= budget_tokens:
            lo = mid
        else:
            hi = mid - 1
    found = render([0] * lo, lo)
    return found if count_tokens(found) <= budget_tokens else None


# -- test logs ---------------------------------------------------------------------------------------


_FAIL_NAME = re.compile(
    r"^(?:FAILED|ERROR)\s+(?P<a>\S+::\S+|\S+\.py\S*)"  # pytest short summary
    r"|^_{3,}\s+(?P<b>\S.*?\S)\s+_{3,}$"  # pytest section header
    r"|^\s*--- FAIL:\s+(?P<c>\S+)"  # go test
    r"|^\s*●\s+(?P<d>.+?)$"  # jest
    r"|^(?:FAIL|ERROR):\s+(?P<e>test\S*(?:\s+\([\w.]+\))?)"  # unittest
    r"|^---- (?P<f>\S+) stdout ----$"  # cargo test
    r"|^test (?P<g>\S+) \.\.\. FAILED$"  # cargo test line
    r"|^FAIL\s+(?P<h>\S+\.(?:test|spec)\.\w+)"  # jest file
)
_ERROR = re.compile(
    r"^E\s{2,}\S|Error\b|Exception\b|panicked at|assert|Expected|Received|expected|\bFAIL\b|^\s*at \S+ \(|:\d+:\d*:? |"
    r"Traceback|^\s*File \"[^\"]+\", line \d+"
)
_SUMMARY = re.compile(
    r"^=+ .*\b(?:passed|failed|error|errors|skipped|no tests ran)\b.* in [\d.]+s.*=+$"  # pytest
    r"|^(?:Tests|Test Suites|Snapshots):\s+.*\d+ (?:failed|passed|total)"  # jest
    r"|^(?:ok|FAIL)\s+\S+\s+[\d.]+s$|^FAIL$|^PASS$"  # go test
    r"|^Ran \d+ tests? in [\d.]+s$|^FAILED \((?:failures|errors)=\d+.*\)$|^OK(?: \(.*\))?$"  # unittest
    r"|^test result: (?:ok|FAILED)\."  # cargo
    r"|^\d+ (?:failed|passed)(?:, \d+ \w+)* in [\d.]+s"  # pytest -q
)
#: an error line of a failing test is cut at this many characters (as the generic preview cuts a kept line)
ERROR_CHARS = 240
_PASS_HINT = re.compile(r"\bPASSED\b|^\s*PASS\s|^ok\s|--- PASS:|\.\.\. ok$|✓")


@dataclass(slots=True)
class TestLog:
    """The summary lines, and each failing test with its error lines, in order."""

    __test__ = False  # not a pytest class

    summary: list[str] = field(default_factory=list)
    failures: dict[str, list[str]] = field(default_factory=dict)


def parse_test_log(text: str) -> TestLog | None:
    """A pytest / unittest / jest / go test / cargo test log: ``None`` unless it has a summary line
    or a failing test and looks like a test run (a summary line, or pass / fail markers)."""
    if not any(w in text for w in ("passed", "failed", "FAIL", "PASS", "Ran ", "test result:", "--- ", "●", "ok ")):
        return None
    lines = _lines(text)
    log = TestLog()
    current: str | None = None
    passes = 0
    for line in lines:
        s = _SUMMARY.match(line.strip())
        if s:
            if line.strip() not in log.summary:
                log.summary.append(line.strip())
            current = None
            continue
        m = _FAIL_NAME.match(line)
        if m:
            name = next(g for g in m.groups() if g)
            if m["b"] and not any(w in name.lower() for w in ("test", "::", ".")) or m["b"] in ("FAILURES", "ERRORS", "warnings summary", "short test summary info"):
                current = None
                continue
            if m["a"]:  # pytest's short summary names the test in full: the section of its name merges in
                short = m["a"].split("::")[-1]
                if short in log.failures and short != m["a"]:
                    log.failures[m["a"]] = log.failures.pop(short) + log.failures.get(m["a"], [])
            if m["a"] and line.strip() != m["a"]:  # FAILED x::y - Message: keep the message
                rest = line.strip()[len(line.split()[0]) + 1 + len(m["a"]):].lstrip(" -")
                log.failures.setdefault(m["a"], [])
                if rest and rest not in log.failures[m["a"]]:
                    log.failures[m["a"]].append(rest)
                current = m["a"]
                continue
            current = name
            log.failures.setdefault(name, [])
            continue
        if _PASS_HINT.search(line):
            passes += 1
            continue
        if current is not None and line.strip() and _ERROR.search(line):
            errors = log.failures[current]
            if len(errors) < 12 and line.strip() not in errors:
                errors.append(line.strip())
    if not log.summary and not log.failures:
        return None
    if not log.summary and passes == 0 and len(log.failures) < 2:
        return None
    return log


def test_log_preview(log: TestLog, text: str, *, budget_tokens: int, count_tokens: CountTokens) -> str | None:
    """The summary lines, then each failing test (``FAILED name``) with its error lines (up to 6,
    then 2, then 1, cut to :data:`ERROR_CHARS` characters), then names only, then as many names as fit and how many
    are left out; within three quarters of the budget when the log is longer. What the budget still holds is the
    generic preview of the log (head, the error, URL and path lines it leaves out, tail)."""
    failures = list(log.failures.items())
    n = len(failures)
    head = [f"test run: {n} failing test{'s' if n != 1 else ''}" if failures else "test run: no failing test found", *log.summary]

    def render(errors: int, limit: int | None = None) -> str:
        out = list(head)
        for name, lines in failures if limit is None else failures[:limit]:
            out.append(f"FAILED {name}")
            out += [f"  {x[:ERROR_CHARS]}{ELLIPSIS if len(x) > ERROR_CHARS else ''}" for x in lines[:errors]]
        if limit is not None and limit < len(failures):
            out.append(f"[... {len(failures) - limit} more failing tests left out]")
        return "\n".join(out)

    def structured(room: int) -> str | None:
        for errors in (6, 2, 1, 0):
            found = render(errors)
            if count_tokens(found) <= room:
                return found
        lo, hi = 0, len(failures)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count_tokens(render(0, mid)) <= room:
                lo = mid
            else:
                hi = mid - 1
        found = render(0, lo)
        return found if count_tokens(found) <= room else None

    part = structured(max(budget_tokens * 3 // 4, min(budget_tokens, 80)))
    return None if part is None else with_rest(part, text, budget_tokens=budget_tokens, count_tokens=count_tokens)


def with_rest(part: str, text: str, *, budget_tokens: int, count_tokens: CountTokens) -> str:
    """``part``, then the generic preview of ``text`` in what the budget still holds (60 tokens or
    more): the head, the error, URL and path lines, the tail the shaped part does not show."""
    rest = budget_tokens - count_tokens(part) - 1
    while rest >= 60:
        body = generic_preview(text, budget_tokens=rest, count_tokens=count_tokens)
        if not body or body == text:  # the whole text fits: no part needed
            return body or part
        whole = part + "\n" + body
        over = count_tokens(whole) - budget_tokens
        if over <= 0:
            return whole
        rest -= max(over, 1)
    return part


# -- tables ------------------------------------------------------------------------------------------


_MD_RULE = re.compile(r"^\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?$")


def parse_table(text: str) -> RecordSet | None:
    """A markdown table (header, ``|---|`` rule, rows), or CSV / TSV (at least 3 rows with the same
    number of cells, 2 or more): its rows as records (every column kept), or ``None``."""
    lines = [x for x in text.strip().split("\n") if x.strip()]
    if len(lines) < 3:
        return None
    if lines[0].lstrip().startswith("|") and _MD_RULE.match(lines[1].strip()):
        def cells(line: str) -> list[str]:
            return [c.strip() for c in line.strip().strip("|").split("|")]
        names = cells(lines[0])
        body = [cells(x) for x in lines[2:] if x.lstrip().startswith("|")]
        if len(body) < max(1, (len(lines) - 2) * 7 // 10):
            return None
    else:
        delim = "\t" if lines[0].count("\t") >= 1 else ","
        widths = [x.count(delim) for x in lines[:SAMPLE_LINES]]
        if widths[0] < 1 or sum(w == widths[0] for w in widths) * 10 < len(widths) * 9:
            return None
        try:
            rows = list(csv.reader(io.StringIO("\n".join(lines)), delimiter=delim))
        except csv.Error:
            return None
        names, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
        if len(body) < 2 or any(not n.strip() or len(n) > 40 or n.count(" ") > 3 for n in names):
            return None
    names = [n or f"col{i + 1}" for i, n in enumerate(names)]
    records = [dict(zip(names, r)) for r in body]
    rs = from_mappings(records, keep_unknown=True)
    rs.label = "rows"
    return rs if rs.columns else None


# -- file reads --------------------------------------------------------------------------------------


_NUMBERED = re.compile(r"^\s*(\d{1,7})(?:\t|→|: |\|)(.*)$")
_OUTLINE = re.compile(
    r"^\s*(?:(?:export\s+)?(?:default\s+)?(?:async\s+)?(?:def|class|function|interface|type|enum|struct|trait|impl|module|namespace)\s+\w"
    r"|(?:pub(?:\(\w+\))?\s+)?(?:async\s+)?fn\s+\w|func\s+(?:\([^)]*\)\s*)?\w|#{1,6}\s+\S|@\w+|(?:public|private|protected)\s+[\w<>\[\], ]+\s+\w+\s*\()"
)


@dataclass(slots=True)
class FileRead:
    """A file's text with its line numbers (``start`` the first), its path when known."""

    path: str | None
    lines: list[str]
    start: int = 1
    total: int | None = None


def parse_file_read(text: str, path: str | None = None) -> FileRead | None:
    """Numbered lines (``cat -n``, Claude Code's ``Read``: ``     1\\t…`` / ``1→…``), at least 5 and
    90 % of the lines; or any text whose ``path`` is known (a JSON file-read result)."""
    lines = text.split("\n")
    numbered = [_NUMBERED.match(x) for x in lines[:SAMPLE_LINES]]
    hits = sum(m is not None for m in numbered)
    if len(lines) >= 5 and hits * 10 >= len(numbered) * 9:
        body = [m[2] if m else x for m, x in zip((_NUMBERED.match(x) for x in lines), lines)]
        first = next((int(m[1]) for m in numbered if m), 1)
        return FileRead(path, body, first)
    if path is not None:
        return FileRead(path, lines)
    return None


def file_read_preview(read: FileRead, *, budget_tokens: int, count_tokens: CountTokens) -> str | None:
    """``file: <path> (lines a-b of N)``, its outline (definitions and headings with their line
    numbers, ``L12: def foo(x):``), then its first lines; the outline is cut to what fits, then
    the head shrinks, then goes."""
    end = read.start + len(read.lines) - 1
    where = f"lines {read.start}-{end}" + (f" of {read.total}" if read.total else "")
    head_line = f"file: {read.path} ({where})" if read.path else f"file read ({where})"
    outline = [f"L{read.start + i}: {x.strip()[:120]}" for i, x in enumerate(read.lines) if _OUTLINE.match(x)]
    if count_tokens(head_line) > budget_tokens:
        return None
    room = budget_tokens - count_tokens(head_line) - 1
    kept: list[str] = []
    used = 0
    outline_room = room * 6 // 10 if outline else 0
    for line in outline:
        c = count_tokens(line) + 1
        if used + c > outline_room:
            break
        kept.append(line)
        used += c
    parts = [head_line]
    if kept:
        parts.append(f"outline ({len(kept)} of {len(outline)} definitions):" if len(kept) < len(outline) else "outline:")
        parts += kept
    body = "\n".join(read.lines)
    while True:
        rest = budget_tokens - count_tokens("\n".join(parts)) - count_tokens("\nhead:\n") - 2
        head = fit(body, rest, count_tokens) if rest > 8 else ""
        cut = head.rfind("\n")
        head = head[:cut] if 0 < cut and len(head) < len(body) else head
        text = "\n".join(parts + (["head:", head] if head.strip() else []))
        if count_tokens(text) <= budget_tokens:
            return text
        if not head:
            if len(parts) > 1:
                parts.pop()
                continue
            return truncate_tokens(head_line, budget_tokens, count_tokens) or None
        body = body[: max(0, len(head) * 9 // 10)]
