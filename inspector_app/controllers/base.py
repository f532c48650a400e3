"""What the window's components share: the open thread's state and how errors read.

A failure shows as ``code: message`` with the message in words: an engine error keeps its code and
message; anything else (most often a row another program wrote that breaks docs/schema.md: JSON
that is not JSON or nests too deeply, text that is not UTF-8, a timestamp that is not one, a value
of the wrong type) is described without Python type names, as ``compaction`` does on the command
line (``engine.cli.output.describe_failure``: the inspector may not import the CLI, so the rules
are repeated here and ``tests/gui/test_robust_window.py`` checks that the two agree).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from engine.errors import EngineError
from engine.views import PressureStatus, ThreadInfo


@dataclass(eq=False)
class ThreadState:
    """The open thread as last read: its header and its pressure status (None until read)."""

    thread: ThreadInfo | None = None
    status: PressureStatus | None = None

    @property
    def total(self) -> int:
        """Messages in the open thread (0 when none is open, or when its stored count is not a number)."""
        n = self.thread.message_count if self.thread is not None else 0
        return n if isinstance(n, int) else 0


def count_of(info: ThreadInfo | None) -> int | None:
    """A thread's stored message count, or None when there is none or it is not a number (a row
    another program wrote): the timeline then counts what it loads."""
    n = info.message_count if info is not None else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def plural(n: int, one: str, many: str | None = None) -> str:
    """``1 message``, ``2 messages``, ``1,200 messages`` (a count that is not a number, as another
    program may have stored, is shown as it is)."""
    shown = f"{n:,}" if isinstance(n, int) else str(n)
    return f"{shown} {one if n == 1 else (many or one + 's')}"


MAX_MESSAGE = 300  # longer messages are cut (a row's content must not fill the banner)


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def describe(exc: BaseException) -> tuple[str, str]:
    """``(code, message)`` of any failure, the message one line in words."""
    if isinstance(exc, EngineError):
        return exc.code, _one_line(exc.message)
    detail = str(exc)
    if isinstance(exc, json.JSONDecodeError):
        return "unreadable_data", f"the database holds a JSON value that is not valid JSON ({exc.msg} at character {exc.pos})"
    if isinstance(exc, RecursionError):
        return "unreadable_data", "the database holds a JSON value nested too deeply to read"
    if isinstance(exc, UnicodeDecodeError):
        return "unreadable_data", "the database holds text that is not valid UTF-8"
    if isinstance(exc, UnicodeEncodeError):
        return "unreadable_data", "a text holds a character that cannot be encoded (a lone surrogate?)"
    if isinstance(exc, OverflowError):
        return "unreadable_data", _one_line(f"a number is too large for the database ({detail})")
    if isinstance(exc, ValueError) and "isoformat" in detail:
        found = re.search(r"'(.*)'", detail)
        return "unreadable_data", _one_line(f"the database holds a timestamp that cannot be read: {found.group(0) if found else detail}")
    if isinstance(exc, (TypeError, ValueError, KeyError, AttributeError, IndexError)):
        return "unreadable_data", _one_line(f"the database holds a value of an unexpected type or shape ({detail or 'no detail'})")
    if isinstance(exc, MemoryError):
        return "unexpected_error", "out of memory"
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return "io_error", _one_line(f"{exc.strerror or detail or 'input/output error'}{where}")
    return "unexpected_error", _one_line(f"unexpected failure: {detail}" if detail else "unexpected failure")


def error_code(exc: BaseException) -> str:
    return describe(exc)[0]


def error_text(exc: BaseException) -> str:
    return describe(exc)[1]
