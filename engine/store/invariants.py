"""The conversation invariants every message write must keep, checked as the messages stream by.

Pure (no I/O). The write door (:class:`engine.store.Locked`) loads one :class:`CallLedger` per
transaction from the newest assistant message, then checks each message it is about to write
against it and advances it, so a long import costs a few dictionary operations per row and no
query. The rules:

- the role is one of ``system``, ``user``, ``assistant``, ``tool``;
- a ``tool`` message names the call it answers (``tool_call_id``); only assistant messages carry
  tool calls, and one assistant message never repeats a call id;
- a tool result answers a *pending* call: a call of the newest assistant message that has no
  result yet. Anything else is an orphan (no such call) or a call answered twice; every
  OpenAI-compatible provider rejects both on every later request, so they are never written.

A user or system message between an assistant message and its results leaves its calls pending
(the harness answers a call that asked the user after the user's reply); a newer assistant message
replaces the pending set with its own calls.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from ..core.messages import ROLES, InvalidMessage, Message, ToolCall

__all__ = ["CallLedger"]


class CallLedger:
    """The calls of a thread's newest assistant message: which are pending, which are answered."""

    __slots__ = ("thread", "_pending", "_answered")

    def __init__(self, thread: str, calls: Sequence[ToolCall] = (), answered: Iterable[str] = ()) -> None:
        self.thread = thread
        done = set(answered)
        #: unanswered calls in call order (dicts keep insertion order)
        self._pending: dict[str, ToolCall] = {c.id: c for c in calls if c.id not in done}
        self._answered: set[str] = {c.id for c in calls if c.id in done}

    def copy(self) -> "CallLedger":
        out = CallLedger.__new__(CallLedger)
        out.thread = self.thread
        out._pending = dict(self._pending)
        out._answered = set(self._answered)
        return out

    @property
    def pending(self) -> list[ToolCall]:
        """The calls still waiting for a result, in the order the model made them."""
        return list(self._pending.values())

    def admit(self, m: Message) -> None:
        """Check that ``m`` may follow what the ledger has seen, then advance past it.

        Raises :class:`InvalidMessage` (``invalid_message``) naming the thread and the offending
        id; the ledger is unchanged then."""
        role = m.role
        if role not in ROLES:
            raise InvalidMessage(f"thread {self.thread!r}: unknown role {role!r} (expected one of {', '.join(sorted(ROLES))})")
        if role == "tool":
            call_id = m.tool_call_id
            if not call_id:
                raise InvalidMessage(f"thread {self.thread!r}: a tool message without tool_call_id")
            if call_id in self._pending:
                del self._pending[call_id]
                self._answered.add(call_id)
            elif call_id in self._answered:
                raise InvalidMessage(f"thread {self.thread!r}: tool call {call_id!r} is answered twice")
            else:
                raise InvalidMessage(
                    f"thread {self.thread!r}: orphan tool result {call_id!r}: no pending call of the newest assistant message has that id"
                )
            return
        if role == "assistant":
            calls = m.tool_calls
            pending: dict[str, ToolCall] = {}
            for c in calls:
                if c.id in pending:
                    raise InvalidMessage(f"thread {self.thread!r}: one assistant message repeats tool call id {c.id!r}")
                pending[c.id] = c
            self._pending = pending
            self._answered = set()
            return
        if m.tool_calls:
            raise InvalidMessage(f"thread {self.thread!r}: a {role} message carries tool calls (only assistant messages do)")

    def admit_all(self, messages: Iterable[Message]) -> None:
        """:meth:`admit` each message in order (the ledger advances past those admitted)."""
        for m in messages:
            self.admit(m)
