"""Typed errors the engine raises to its callers (CLI, inspector, agent platforms).

Each carries a stable ``code`` for scripting and a one-line ``message`` for people.
:func:`describe_failure` turns *any* failure into such a ``(code, message)`` pair: the one copy the
command line (``engine.apps.cli``) and the inspector share.
"""

from __future__ import annotations

import json
import re
from typing import Any


class EngineError(Exception):
    """Base class: a user-facing error with a stable code and a one-line message."""

    code = "engine_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def to_json(self) -> dict[str, Any]:
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

    def to_json(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "reason": self.reason}}


class CannotCompact(EngineError):
    """Compaction is not possible right now (typed, never a sentinel). ``reason`` says why."""

    code = "cannot_compact"

    def __init__(self, message: str, *, code: str | None = None, reason: str | None = None, detail: str | None = None) -> None:
        super().__init__(message, code=code)
        self.reason = reason
        #: the cause in words when known (``HTTP 429 from URL after 2 attempts``): for a rejected
        #: summary, what the compactor recorded in its ``summary_rejected`` event
        self.detail = detail

    def explain(self, detail: str) -> None:
        """Attach the cause: ``detail`` is kept and a rejected summary's message says it
        (``summary rejected (summarizer_failed: HTTP 429 …); nothing was changed``)."""
        self.detail = detail
        if self.code == "summary_rejected":
            self.message = f"summary rejected ({self.reason}: {detail}); nothing was changed"
            self.args = (self.message,)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message, "reason": self.reason}
        if self.detail is not None:
            out["detail"] = self.detail
        return {"error": out}


def rejection_detail(exc: CannotCompact, rejected: dict[str, Any] | None) -> str | None:
    """The cause of a rejected summary in words, from the data of the thread's newest
    ``summary_rejected`` event (``None`` when it is about another rejection or says nothing)."""
    if rejected is None or rejected.get("reason") != exc.reason:
        return None
    message, code = rejected.get("error_message"), rejected.get("error_code")
    if isinstance(message, str) and message.strip():
        return message.strip()
    if isinstance(code, str) and code:
        return code
    summary, replaced = rejected.get("summary_tokens"), rejected.get("replaced_tokens")
    if exc.reason == "not_smaller" and isinstance(summary, int) and isinstance(replaced, int):
        return f"the summary has {summary} tokens, what it would replace {replaced}"
    return None


class Cancelled(EngineError):
    """A long operation (a what-if run or sweep) was stopped by its caller's ``should_stop``.

    Nothing it had built is kept (a what-if's scratch copy is removed); the source is untouched."""

    code = "cancelled"

    def __init__(self, message: str = "cancelled; nothing was kept", *, code: str | None = None) -> None:
        super().__init__(message, code=code)


class NotRevertible(EngineError):
    """A revert (or redo) cannot be made; nothing was written. ``code`` says why:
    ``nothing_to_revert`` (the thread has no compaction of ours), ``source_compaction`` (the last
    compaction on the thread is one its source recorded: the source's own history, never ours to
    undo), ``original_missing`` (a pruned result's original is not in the Workdir, or its SHA-256
    no longer matches: it cannot come back verbatim)."""

    code = "not_revertible"


class CompareAndSwapConflict(EngineError):
    """The boundary moved underneath us: another writer compacted first. Nothing was written."""

    code = "cas_conflict"


#: a message longer than this is cut (a row's whole content must not flood a terminal or a banner)
MAX_MESSAGE = 300


def one_line(text: str) -> str:
    """``text`` on one line, cut to :data:`MAX_MESSAGE` characters."""
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def describe_failure(exc: BaseException) -> tuple[str, str]:
    """``(code, message)`` of any failure, the message one line in words (no Python type names).

    An :class:`EngineError` keeps its own code and message. Anything else escaped the engine's
    typed errors: most often a row another program wrote that breaks docs/schema.md (JSON that is
    not JSON or nests too deeply, text that is not UTF-8, a timestamp that is not one, a value of
    the wrong type); its code is ``unreadable_data``. What is not about data is ``unexpected_error``
    (``io_error`` for a file-system failure)."""
    if isinstance(exc, EngineError):
        return exc.code, one_line(exc.message)
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
        return "unreadable_data", one_line(f"a number is too large for the database ({detail})")
    if isinstance(exc, ValueError) and "isoformat" in detail:
        found = re.search(r"'(.*)'", detail)
        return "unreadable_data", one_line(f"the database holds a timestamp that cannot be read: {found.group(0) if found else detail}")
    if isinstance(exc, (TypeError, ValueError, KeyError, AttributeError, IndexError)):
        return "unreadable_data", one_line(f"the database holds a value of an unexpected type or shape ({detail or 'no detail'})")
    if isinstance(exc, MemoryError):
        return "unexpected_error", "out of memory"
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return "io_error", one_line(f"{exc.strerror or detail or 'input/output error'}{where}")
    return "unexpected_error", one_line(f"unexpected failure: {detail}" if detail else "unexpected failure")
