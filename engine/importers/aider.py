"""``aider``: Aider's chat history (``.aider.chat.history.md`` in the project's root).

Shape handled (Markdown, appended as aider runs, the way aider's own ``split_chat_history_markdown``
reads it back):

- ``# aider chat started at <local time>`` opens a session (one file holds every session run in that
  project; each is a session of its own); other ``# `` lines are skipped;
- ``#### `` lines are the user's input (a multi-line prompt is several ``#### `` lines; trailing
  Markdown line breaks are dropped). Slash commands (``/add``, ``/run``, ``/clear`` …) are ``meta``
  ``command`` messages, except ``/ask``, ``/code``, ``/architect`` and ``/context`` with a prompt, which
  are requests; ``<blank>`` (an empty input) is skipped;
- ``> `` lines are aider's console output, not messages (counted in ``skipped["console"]``). From them:
  ``Main model: <model> with …`` / ``Model: …`` → the session's model; ``Tokens: 4.2k sent, 1.1k cache
  write, 2.0k cache hit, 312 received.`` → a usage record on the assistant message before it (aider
  rounds to a tenth of a thousand: ``details`` say so); ``Applied edit to <file>`` and ``Commit <hash>
  <message>`` → that message's ``details`` (``applied_edits``, ``commits``);
- everything else is the assistant's reply (edits stay in it as SEARCH/REPLACE blocks: aider does not
  use tool calls, so no calls are imported).

Aider's own compaction (its chat history summarization, run in the background when the history
outgrows the model's budget) leaves a record only with ``--verbose``: ``> Finished summarizing chat
history.`` → a recorded compaction (trigger ``auto``; no summary, and which messages it replaced is
not written). ``> Chat history summarization failed, continuing with full history`` is a warning.

Session id: ``<project folder>@<start time>``; source keys ``L<line>`` (stable under appends).
"""

from __future__ import annotations

import re
from dataclasses import replace

from ._common import SessionBuilder, Source
from .model import ImportedMessage, ImportedSession, ImportFormatError, TextPart, UsageRecord

FORMAT = "aider"

#: aider writes the history into the project (git root) it runs in; no home-relative default, only the
#: usual project folders (``--chat-history-file`` can put it anywhere)
DEFAULT_LOCATIONS: list[str] = [
    "~/.aider.chat.history.md",
    "~/*/.aider.chat.history.md",
    "~/*/*/.aider.chat.history.md",
    "~/*/*/*/.aider.chat.history.md",
]

HEADER = "# aider chat started at "
REQUEST_COMMANDS = ("/ask", "/code", "/architect", "/context")
_TOKENS = re.compile(r"Tokens: ([\d.]+k?) sent(?:, ([\d.]+k?) cache write)?(?:, ([\d.]+k?) cache hit)?, ([\d.]+k?) received")
_MODEL = re.compile(r"^(?:Main model|Model): (\S+)")
_EDIT = re.compile(r"^Applied edit to (.+)$")
_COMMIT = re.compile(r"^Commit ([0-9a-f]{7,40}) (.*)$")


def looks_like(text: str) -> bool:
    """The file starts (after blank lines) with aider's session header."""
    return text.lstrip().startswith(HEADER)


def _count(s: str | None) -> int | None:
    if not s:
        return None
    return round(float(s[:-1]) * 1000) if s.endswith("k") else int(float(s))


def parse(source: Source, *, final: bool = True) -> list[ImportedSession]:
    text = source.read_text()
    if not looks_like(text):
        raise ImportFormatError(f"{source.name}: not an aider chat history (no '{HEADER.strip()}' line)")
    lines = text.splitlines()
    if not final and text and not text.endswith("\n"):
        lines = lines[:-1]  # a line still being written
    project = source.path.resolve().parent.name if source.path is not None else None
    sessions: list[ImportedSession] = []
    starts: list[tuple[int, str]] = [(i, ln[len(HEADER):].strip()) for i, ln in enumerate(lines) if ln.startswith(HEADER)]
    seen: dict[str, int] = {}
    for n, (i, started) in enumerate(starts):
        end = starts[n + 1][0] if n + 1 < len(starts) else len(lines)
        stamp = started.replace(" ", "T")
        base = f"{project}@{stamp}" if project else stamp
        seen[base] = seen.get(base, 0) + 1
        sid = base if seen[base] == 1 else f"{base}~{seen[base]}"
        last = n + 1 == len(starts)
        sessions.append(_session(source, lines, i + 1, end, sid, started, final=final or not last))
    return sessions


class _Reader:
    def __init__(self, b: SessionBuilder) -> None:
        self.b = b
        self.model: str | None = None
        self.kind: str | None = None  # "user" | "assistant" while a block is open
        self.block: list[str] = []
        self.start = 0

    def flush(self) -> None:
        kind, block, self.kind, self.block = self.kind, self.block, None, []
        if kind is None:
            return
        body = "\n".join(block).strip("\n")
        if not body.strip():
            return
        key = f"L{self.start + 1}"
        if kind == "assistant":
            self.b.add(ImportedMessage(role="assistant", parts=(TextPart(body.strip()),), source_key=key, model=self.model))
            return
        if body.strip() == "<blank>":
            self.b.skipped["blank_input"] += 1
            return
        stripped = body.strip()
        command = stripped.startswith("/") and not (stripped.split(None, 1)[0] in REQUEST_COMMANDS and " " in stripped)
        self.b.add(ImportedMessage(role="user", parts=(TextPart(stripped),), source_key=key,
                                   meta=command, meta_kind="command" if command else None))

    def open(self, kind: str, index: int) -> None:
        if self.kind != kind:
            self.flush()
            self.kind, self.start = kind, index

    def console(self, line: str, index: int) -> None:
        self.flush()
        b = self.b
        b.skipped["console"] += 1
        m = _MODEL.match(line)
        if m and self.model is None:
            self.model = m.group(1)
            return
        last = len(b.messages) - 1
        owner = last if last >= 0 and b.messages[last].role == "assistant" else None
        m = _TOKENS.search(line)
        if m and owner is not None:
            sent, write, hit, received = (_count(g) for g in m.groups())
            b.usage(UsageRecord(position=owner, prompt_tokens=sent or 0, completion_tokens=received,
                                cache_read_tokens=hit, cache_creation_tokens=write, model=self.model))
            self._detail(owner, "tokens_rounded", True)
            return
        m = _EDIT.match(line)
        if m and owner is not None:
            self._detail(owner, "applied_edits", m.group(1).strip(), append=True)
            return
        m = _COMMIT.match(line)
        if m and owner is not None:
            self._detail(owner, "commits", f"{m.group(1)} {m.group(2).strip()}", append=True)
            return
        if line.startswith("Finished summarizing chat history."):
            b.compaction(replaced_start=len(b.messages), replaced_end=len(b.messages), trigger="auto",
                         source_id=f"L{index + 1}",
                         details={"note": "aider's history summarization; the log does not say what it replaced"})
        elif line.startswith("Chat history summarization failed"):
            b.warn(f"aider's history summarization failed here: {line}", index + 1)

    def _detail(self, i: int, key: str, value: object, append: bool = False) -> None:
        m = self.b.messages[i]
        details = dict(m.details)
        details[key] = (*details.get(key, ()), value) if append else value
        self.b.replace_at(i, replace(m, details=details))


def _session(source: Source, lines: list[str], start: int, end: int, sid: str, started: str, *,
             final: bool) -> ImportedSession:
    b = SessionBuilder(FORMAT, source)
    r = _Reader(b)
    for idx in range(start, end):
        line = lines[idx]
        if line.startswith("#### "):
            r.open("user", idx)
            r.block.append(line[5:].rstrip())
        elif line.startswith("> ") or line == ">":
            r.console(line[2:].rstrip(), idx)
        elif line.startswith("# "):
            r.flush()
            b.skipped["heading"] += 1
        else:
            if r.kind != "assistant" and not line.strip():
                r.flush()  # a blank line ends a prompt; blank lines before a reply are not part of it
                continue
            r.open("assistant", idx)
            r.block.append(line)
    r.flush()
    return b.build(final=final, source_session_id=sid, model=r.model, extra={"started_at": started})
