"""Intake and runs: threads, messages, queued requests and a run's life (each call one trip through the write door).

Reached as ``svc.runs`` (:class:`engine.service.Service`); shares one :class:`ServiceCore` with the other facets."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

from ..core.events import CancelledEvent, HarnessErrorEvent, WaitingForUserEvent, write_event
from ..core.messages import Message, ToolCall
from ..core.views import (  # issue 23
    ModelRequest,
)
from ..store import (
    ABORTED_TEXT,
    InvalidTransition,
)
from .core import ServiceCore


class RunsFacet:
    """Intake and runs: threads, messages, queued requests and a run's life (each call one trip through the write door)."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core

    def create_thread(self, key: str, **kwargs: Any) -> int:
        return self._core.store.create_conversation(key, **kwargs)

    def configure(self, key: str, *, system_prompt: str | None = None, tools: Sequence[Mapping[str, Any]] | None = None) -> None:
        """Set the thread's system prompt and / or tool schemas (part of every envelope)."""
        with self._core.store.locked(key) as tx:
            tx.configure(system_prompt=system_prompt, tools=tools)

    def append_message(self, key: str, message: Message, *, run_id: int | None = None) -> int:
        """Append under the conversation lock. The write door checks the conversation invariants:
        a tool result must answer a pending call of the newest assistant message (an orphan, or a
        second answer, would be rejected by every OpenAI-compatible provider on every later
        request), one assistant message never repeats a call id. A violation raises
        :class:`engine.core.messages.InvalidMessage` (``invalid_message``) and nothing is written."""
        with self._core.store.locked(key) as tx:
            return tx.append_message(message, run_id=run_id)

    def append_messages(self, key: str, messages: Sequence[Message], *, run_id: int | None = None) -> list[int]:
        """Append several messages in one transaction, all or none (same checks as
        :meth:`append_message`). Returns their ids in order."""
        with self._core.store.locked(key) as tx:
            return tx.append_messages(messages, run_id=run_id)

    def queue_request(self, key: str, content: str) -> int:
        with self._core.store.locked(key) as tx:
            return tx.queue_request(content)

    def start_run(
        self,
        key: str,
        *,
        request_id: int | None = None,
        message: Message | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> int:
        """Start a run (``thread_busy`` if one is active), in one transaction with, when given, the
        thread's tool schemas and the message that opens the run (the user's request). Returns
        the run id, known to the caller only once it is committed."""
        with self._core.store.locked(key) as tx:
            if tools is not None:
                tx.configure(tools=tools)
            if message is not None:
                tx.append_message(message)
            return tx.start_run(request_id=request_id)

    def resume_run(self, key: str, run_id: int, answer: str) -> list[ToolCall]:
        """Continue a run that waits for the user, in one transaction: the run is running again and
        ``answer`` becomes the result of the first pending call (the one that asked), or a user
        message when no call is pending. Returns the calls still pending after it, in order."""
        with self._core.store.locked(key) as tx:
            tx.set_run_status(run_id, "running")
            pending = tx.unanswered_calls()
            if pending:
                call = pending[0]  # calls run in order: the first unanswered one asked
                tx.append_message(Message("tool", answer, tool_call_id=call.id, name=call.name), run_id=run_id)
            else:
                tx.append_message(Message("user", answer), run_id=run_id)
            return tx.unanswered_calls()

    def wait_for_user(self, key: str, run_id: int, *, call: ToolCall, question: str) -> None:
        """The run waits for the user's answer to ``question``, asked by ``call`` (one transaction
        with its ``waiting_for_user`` event)."""
        with self._core.store.locked(key) as tx:
            tx.set_run_status(run_id, "waiting_for_user")
            write_event(tx, WaitingForUserEvent(tool=call.name, call_id=call.id, question=question), run_id=run_id)

    def finish_run(self, key: str, run_id: int, *, failed: bool = False, error_code: str | None = None, error_message: str | None = None) -> None:
        """End a running run as completed, or as failed with the error that ended it."""
        with self._core.store.locked(key) as tx:
            tx.set_run_status(run_id, "failed" if failed else "completed", error_code=error_code, error_message=error_message)

    def interrupt_run(self, key: str, run_id: int) -> None:
        with self._core.store.locked(key) as tx:
            tx.set_run_status(run_id, "waiting_for_user")

    def cancel_run(self, key: str, run_id: int) -> int:
        """Cancel a run; its calls that never ran get aborted results. Returns how many."""
        with self._core.store.locked(key) as tx:
            return tx.settle_run(run_id, "cancelled")

    def settle_run(
        self,
        key: str,
        run_id: int,
        status: str,
        *,
        aborted_text: str = ABORTED_TEXT,
        error_code: str | None = None,
        error_message: str | None = None,
        event: CancelledEvent | HarnessErrorEvent | None = None,
        trigger: str | None = None,
    ) -> int | None:
        """End a run as ``status`` (``cancelled`` / ``failed``) and answer every call it left
        unanswered with ``aborted_text`` (no orphan call is left), with, when ``event`` is given,
        that event (its ``aborted_calls`` set to that number) in the same transaction. Returns how
        many calls were answered, or None when the run could not take that status (already
        ended): then nothing is written."""
        with self._core.store.locked(key) as tx:
            try:
                aborted = tx.settle_run(run_id, status, aborted_text=aborted_text, error_code=error_code, error_message=error_message)
            except InvalidTransition:
                return None
            if event is not None:
                write_event(tx, replace(event, aborted_calls=aborted), trigger=trigger, run_id=run_id)
            return aborted

    def last_completed_request(self, key: str) -> ModelRequest | None:
        """The newest request that completed (``ok``): its route is what pressure measures for."""
        return self._core.store.last_completed_request(key)

    def close_dangling_calls(self, key: str, reason: str = "closed by the inspector") -> int:
        """On an idle thread (``thread_busy`` otherwise), close every call after the boundary that
        has no result with a ``missing_result`` marker. Returns how many were closed."""
        with self._core.store.locked(key) as tx:
            return tx.close_dangling_calls(reason)


__all__ = ["RunsFacet"]
