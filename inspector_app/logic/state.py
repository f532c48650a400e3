"""What the window's components share: the open thread's state and how errors read.

A failure shows as ``code: message`` with the message in words: an engine error keeps its code and
message; anything else (most often a row another program wrote that breaks docs/schema.md: JSON
that is not JSON or nests too deeply, text that is not UTF-8, a timestamp that is not one, a value
of the wrong type) is described without Python type names, as ``compaction`` does on the command
line: both use the one :func:`engine.core.errors.describe_failure`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.core.errors import describe_failure
from engine.core.views import PressureStatus, ThreadInfo


@dataclass(eq=False)
class ThreadState:
    """The open thread as last read: its header and its pressure status (None until read); the
    marks of the list and of the open view as read before them (``ReadsAPI.versions``:
    the live refresh re-reads only when the database's marks differ), and the compaction the
    open view's timeline was built for ((boundary, generation, compactions, source
    compactions): another one means the timeline is read again)."""

    thread: ThreadInfo | None = None
    status: PressureStatus | None = None
    listing: Any = None
    mark: Any = None
    compaction: Any = None
    #: the open database, as it was opened (per-database state, e.g. each thread's search text)
    database: str | None = None
    #: the forms of the open database's password: masked in every message the window shows
    secrets: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        """Messages in the open thread (0 when none is open, or when its stored count is not a number)."""
        n = self.thread.message_count if self.thread is not None else 0
        return n if isinstance(n, int) else 0


@dataclass
class ViewState:
    """What the user made of a thread's view, kept across a re-read of the whole view (an outside
    compaction): the selected row (a message id, or the kind and first id of a group row), the
    scroll position, the turns opened or closed against their default, the side tab, the replay
    pane's page, episode, step and request, and the selected event."""

    message: int | None = None
    row: tuple[str, int | None] | None = None
    scroll: int | None = None
    expansion: dict[tuple[str, int | None], bool] = field(default_factory=dict)
    tab: int | None = None
    replay: Any = None
    event: int | None = None


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


def describe(exc: BaseException) -> tuple[str, str]:
    """``(code, message)`` of any failure, the message one line in words (the CLI's rules:
    :func:`engine.core.errors.describe_failure`)."""
    return describe_failure(exc)


def error_code(exc: BaseException) -> str:
    return describe(exc)[0]


def error_text(exc: BaseException) -> str:
    return describe(exc)[1]
