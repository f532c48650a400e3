"""The documentation is self-contained and true to the code.

- No file in the repository points at design notes that live outside it (a reader of the repository
  never sees them): the behavioural contract is ``docs/contract.md``.
- Every "§N" / "§N.M" cited anywhere (code comments, docstrings, tests, docs) is a numbered heading of
  ``docs/contract.md``.
- Relative links in the docs and the README lead to files (and headings) that exist.
- The defaults table of the contract, and the CLI synopses and JSON keys of ``docs/cli.md``, match
  the code.

This file names the forbidden references in order to find them, so it does not scan itself.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CONTRACT = DOCS / "contract.md"
SELF = Path(__file__).resolve()

SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", ".hypothesis", ".pytest_cache", ".mypy_cache", ".ruff_cache", "build", "dist", "node_modules"}
MAX_BYTES = 2_000_000

#: references to material outside the repository, with what each one is
OUTSIDE = [
    (re.compile(r"\.\./shared\b"), "a path into ../shared"),
    (re.compile(r"shared/(?:design|seeds)\b"), "the shared design folder"),
    (re.compile(r"/work/shared\b"), "the shared design folder"),
    (re.compile(r"COMPACTION_MODEL"), "the shared compaction model (use docs/contract.md)"),
    (re.compile(r"PLATFORM_NOTES"), "the shared platform notes"),
    (re.compile(r"\bFORMATS\.md"), "the shared transcript-format notes"),
    (re.compile(r"\bARCHITECTURE\.md"), "the shared architecture proposal (ours is docs/architecture.md)"),
    (re.compile(r"\bseeds?\s+0\d\d\b", re.IGNORECASE), "a numbered source design note"),
    (re.compile(r"\bseed\s+(?:platform|design|document|note)s?\b", re.IGNORECASE), "the source design notes"),
]

CITATION = re.compile(r"§\s?(\d+(?:\.\d+)*)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
SECTION_NUMBER = re.compile(r"^(\d+(?:\.\d+)*)\.?\s")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def repo_text_files() -> Iterator[Path]:
    """Every text file of the work tree (not git's own, the virtualenv, caches or build output)."""
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.resolve() == SELF:
                continue
            try:
                if path.stat().st_size > MAX_BYTES:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            if b"\0" in data[:8192]:
                continue
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            yield path


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def headings(path: Path) -> list[str]:
    """The heading texts of a Markdown file, outside fenced code blocks."""
    out: list[str] = []
    fenced = False
    for line in lines_of(path):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = HEADING.match(line)
        if m and not fenced:
            out.append(m.group(2))
    return out


def contract_sections() -> set[str]:
    out: set[str] = set()
    for text in headings(CONTRACT):
        m = SECTION_NUMBER.match(text)
        if m:
            out.add(m.group(1))
    return out


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]{2,}|`", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


# -- self-contained ----------------------------------------------------------------------------------


def test_the_scan_sees_the_tree() -> None:
    """Guard for the scans below: they read code, tests and docs (and skip binaries and this file)."""
    seen = {rel(p) for p in repo_text_files()}
    assert {"docs/contract.md", "engine/compaction/compactor.py", "README.md", "pyproject.toml"} <= seen
    assert rel(SELF) not in seen
    assert not any(s.endswith(".png") for s in seen)


def test_no_reference_to_files_outside_the_repository() -> None:
    hits: list[str] = []
    for path in repo_text_files():
        for number, line in enumerate(lines_of(path), 1):
            for pattern, what in OUTSIDE:
                if pattern.search(line):
                    hits.append(f"{rel(path)}:{number}: {what}: {line.strip()[:160]}")
    assert not hits, "references to material outside the repository:\n" + "\n".join(hits)


def test_the_contract_says_what_section_numbers_refer_to() -> None:
    head = "\n".join(lines_of(CONTRACT)[:12])
    assert "§N" in head and "this document" in head


def test_the_contract_numbers_its_sections() -> None:
    sections = contract_sections()
    assert {str(n) for n in range(1, 8)} <= sections
    for s in sections:  # every subsection sits under an existing section
        parent = s.rsplit(".", 1)[0]
        assert parent == s or parent in sections, f"§{s} has no parent section §{parent}"


def test_every_cited_section_exists_in_the_contract() -> None:
    sections = contract_sections()
    missing: list[str] = []
    for path in repo_text_files():
        for number, line in enumerate(lines_of(path), 1):
            for m in CITATION.finditer(line):
                if m.group(1) not in sections:
                    missing.append(f"{rel(path)}:{number}: §{m.group(1)}: {line.strip()[:160]}")
    assert not missing, "sections cited but not in docs/contract.md:\n" + "\n".join(missing)


def test_relative_links_in_the_docs_resolve() -> None:
    broken: list[str] = []
    for doc in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for number, line in enumerate(lines_of(doc), 1):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                    continue  # http:, https:, mailto:
                path_part, _, fragment = target.partition("#")
                dest = (doc.parent / path_part).resolve() if path_part else doc
                if not dest.exists():
                    broken.append(f"{rel(doc)}:{number}: {target}: no such file")
                elif fragment and dest.suffix == ".md" and fragment not in {slug(h) for h in headings(dest)}:
                    broken.append(f"{rel(doc)}:{number}: {target}: no such heading")
    assert not broken, "broken links:\n" + "\n".join(broken)


# -- true to the code ----------------------------------------------------------------------------------


def _section(path: Path, number: str) -> str:
    """The text of the numbered section ``number`` of a Markdown file (up to the next heading of the
    same or a higher level)."""
    lines = lines_of(path)
    start = level = None
    for i, line in enumerate(lines):
        m = HEADING.match(line)
        if not m:
            continue
        n = SECTION_NUMBER.match(m.group(2))
        if start is None and n and n.group(1) == number:
            start, level = i, len(m.group(1))
        elif start is not None and len(m.group(1)) <= level:  # type: ignore[operator]
            return "\n".join(lines[start:i])
    assert start is not None, f"{rel(path)} has no section {number}"
    return "\n".join(lines[start:])


def _parse_default(text: str) -> object:
    text = text.strip().replace("\u202f", "").replace(" ", "")
    if text == "unset":
        return None
    if text in ("true", "false"):
        return text == "true"
    return float(text) if "." in text else int(text)


def test_the_defaults_table_is_the_code() -> None:
    from engine.core.policy import CompactionPolicy
    from engine.service import DEFAULT_CONTEXT_WINDOW

    rows = re.findall(r"^\|\s*`(\w+)`\s*\|\s*([^|]+?)\s*\|", _section(CONTRACT, "7"), re.MULTILINE)
    documented = {name: _parse_default(value) for name, value in rows}
    code = {f.name: getattr(CompactionPolicy(), f.name) for f in dataclasses.fields(CompactionPolicy)}
    code["context_window"] = DEFAULT_CONTEXT_WINDOW  # the configured window; a policy's own is an override
    assert documented == code


def _cli_doc() -> str:
    return (DOCS / "cli.md").read_text(encoding="utf-8")


def _synopses(doc: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"`compaction (\w+)([^`]*)`", doc) if m.group(1) != "COMMAND"}


def _paragraph(doc: str, command: str) -> str:
    start = doc.index(f"`compaction {command}")
    nxt = doc.find("`compaction ", start + 1)
    return doc[start : nxt if nxt != -1 else len(doc)]


def test_the_cli_doc_has_every_command_and_option() -> None:
    import argparse

    from engine.apps.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    synopses = _synopses(_cli_doc())
    assert set(synopses) == set(sub.choices), "commands in docs/cli.md differ from the parser"
    for name, p in sub.choices.items():
        options = {o for a in p._actions if a.help != argparse.SUPPRESS for o in a.option_strings if o.startswith("--") and o != "--help"}
        shown = set(re.findall(r"--[a-z][a-z-]*", synopses[name]))
        assert shown == options, f"compaction {name}: documented {sorted(shown)}, parser has {sorted(options)}"


def test_the_cli_doc_has_the_json_keys_and_exit_codes() -> None:
    from engine.apps import cli
    from engine.core.meter import CATEGORIES
    from engine.core.views import ManualResult, PressureStatus

    doc = _cli_doc()
    st = PressureStatus("t", 10, 100, 128, dict.fromkeys(CATEGORIES, 0), None, 0, 0, None)
    status = _paragraph(doc, "status")
    for key in [*cli.status_json(st), *CATEGORIES]:
        assert f'"{key}"' in status, f"status JSON key {key!r} is not in docs/cli.md"
    compact = _paragraph(doc, "compact ")
    for f in dataclasses.fields(ManualResult):
        assert f'"{f.name}"' in compact, f"compact JSON key {f.name!r} is not in docs/cli.md"
    table = {int(c) for c in re.findall(r"^\|\s*(\d+)\s*\|", doc, re.MULTILINE)}
    assert {cli.EXIT_OK, cli.EXIT_FAILED, cli.EXIT_USAGE, cli.EXIT_BUSY} <= table
