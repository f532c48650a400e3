"""The call ledger (pure): the conversation invariants the write door checks, message by message."""

from __future__ import annotations

import pytest

from engine.core.messages import InvalidMessage, ToolCall, assistant, system, tool_result, user
from engine.store import CallLedger


def _c(i: str) -> ToolCall:
    return ToolCall(i, "f", "{}")


def test_pending_follows_the_newest_assistant_message() -> None:
    ledger = CallLedger("t")
    ledger.admit_all([system("s"), user("q"), assistant("", _c("a"), _c("b"), _c("c"))])
    assert [c.id for c in ledger.pending] == ["a", "b", "c"]
    ledger.admit(tool_result("b", "rb"))
    ledger.admit(user("a reply between a call and its result keeps the call pending"))
    assert [c.id for c in ledger.pending] == ["a", "c"]
    ledger.admit(assistant("a newer assistant message replaces the pending set", _c("d")))
    assert [c.id for c in ledger.pending] == ["d"]
    with pytest.raises(InvalidMessage, match="orphan tool result 'a'"):
        ledger.admit(tool_result("a", "too late"))
    ledger.admit(assistant("plain answer"))
    assert ledger.pending == []


def test_a_refused_message_leaves_the_ledger_unchanged_and_copies_are_independent() -> None:
    ledger = CallLedger("t", [_c("a"), _c("b")], answered=["a"])
    assert [c.id for c in ledger.pending] == ["b"]
    with pytest.raises(InvalidMessage, match="thread 't': tool call 'a' is answered twice"):
        ledger.admit(tool_result("a", "again"))
    with pytest.raises(InvalidMessage, match="repeats tool call id 'x'"):
        ledger.admit(assistant("", _c("x"), _c("y"), _c("x")))
    assert [c.id for c in ledger.pending] == ["b"]
    trial = ledger.copy()
    trial.admit(tool_result("b", "rb"))
    assert trial.pending == [] and [c.id for c in ledger.pending] == ["b"]


def test_messages_that_skipped_their_constructor_checks_are_refused() -> None:
    ledger = CallLedger("t", [_c("a")])
    odd = user("x")
    object.__setattr__(odd, "role", "critic")
    with pytest.raises(InvalidMessage, match="unknown role 'critic'"):
        ledger.admit(odd)
    no_id = tool_result("a", "r")
    object.__setattr__(no_id, "tool_call_id", "")
    with pytest.raises(InvalidMessage, match="without tool_call_id"):
        ledger.admit(no_id)
    calling_user = user("x")
    object.__setattr__(calling_user, "tool_calls", (_c("u"),))
    with pytest.raises(InvalidMessage, match="a user message carries tool calls"):
        ledger.admit(calling_user)
    assert [c.id for c in ledger.pending] == ["a"]
