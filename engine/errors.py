"""Typed errors the engine raises to its callers (CLI, inspector, agent platforms).

Each carries a stable ``code`` for scripting and a one-line ``message`` for people.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base class: a user-facing error with a stable code and a one-line message."""

    code = "engine_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def to_json(self) -> dict:
        return {"error": {"code": self.code, "message": self.message}}


class ThreadNotFound(EngineError):
    code = "thread_not_found"


class ThreadBusy(EngineError):
    """Manual compaction refused: the thread is running, waiting for the user, or has a queued request.

    HTTP 409 semantics: nothing was queued and nothing was written."""

    code = "thread_busy"

    def __init__(self, thread: str, reason: str) -> None:
        super().__init__(f"thread {thread!r} is busy ({reason}); try again when it is idle")
        self.thread = thread
        self.reason = reason

    def to_json(self) -> dict:
        return {"error": {"code": self.code, "message": self.message, "reason": self.reason}}


class CannotCompact(EngineError):
    """Compaction is not possible right now (typed, never a sentinel). ``reason`` says why."""

    code = "cannot_compact"

    def __init__(self, message: str, *, code: str | None = None, reason: str | None = None) -> None:
        super().__init__(message, code=code)
        self.reason = reason

    def to_json(self) -> dict:
        return {"error": {"code": self.code, "message": self.message, "reason": self.reason}}


class CompareAndSwapConflict(EngineError):
    """The boundary moved underneath us: another writer compacted first. Nothing was written."""

    code = "cas_conflict"
