"""What the window's components share: the open thread's state and how errors read."""

from __future__ import annotations

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
        """Messages in the open thread (0 when none is open)."""
        return self.thread.message_count if self.thread is not None else 0


def plural(n: int, one: str, many: str | None = None) -> str:
    """``1 message``, ``2 messages``, ``1,200 messages``."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def error_code(exc: BaseException) -> str:
    return exc.code if isinstance(exc, EngineError) else type(exc).__name__


def error_text(exc: BaseException) -> str:
    return exc.message if isinstance(exc, EngineError) else (str(exc) or type(exc).__name__)
