"""Real-shaped coding-agent sessions for the compaction coverage tests (issue 25), reusable.

:func:`coding_session` builds the issue's 36-round coding session: one request with a user
constraint, then 36 tool rounds of a coding agent (file reads, greps, test runs, edits, a load test;
~33k tokens with the engine's meter) with six facts planted at known rounds:

- ``constraint``: a user constraint in the request (a folder not to touch, and why);
- ``decision``: an assistant decision with a version number and its reason;
- ``failing_test``: a failing test with its error, in a test log (a tool output);
- ``fix``: a fix naming the file it changed (assistant text and the edit);
- ``edit``: an edit naming a file and a function (assistant text and the edit call);
- ``load_test``: a load-test figure with its units, in the load-test log (a tool output).

Each fact has key strings (:data:`FACTS`) whose exact presence on the model's surface says the fact
is still visible (:func:`facts_kept`). ``finished=True`` ends the turn with the agent's answer and,
by default, follows it with :data:`NEXT_REQUEST` ("now write the release note"): the everyday shape
of a coding-agent session whose history is one long finished turn.

Deterministic: the same arguments give the same messages. :func:`load` writes them into a thread
of a :class:`engine.service.Service`; :func:`half_window_policy` is the policy that puts the
threshold at half the session's size (``threshold_tokens``), as "compacted by hand to half its
window" means in the issue.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from engine.core.messages import Message, ToolCall, assistant, tool_result, user

SYSTEM_PROMPT = ("You are a coding agent working in the shop monorepo. Read files before editing them, run the tests after "
                 "each change, respect the user's constraints, and report the files you changed.")
REQUEST = (
    "Orders get lost when many customers check out at once. Find the cause in services/checkout and fix it so that "
    "1,000 concurrent checkouts all commit. Constraint: do not modify anything under services/ledger/migrations/ "
    "because that schema is frozen until the Q3 audit."
)
NEXT_REQUEST = "now write the release note"
ROUNDS = 36


@dataclass(frozen=True)
class Fact:
    """A planted fact: its kind, the round it was planted in and the keys that must all be visible."""

    kind: str
    round: int
    keys: tuple[str, ...]


#: the six planted facts (round -1: the request)
FACTS: tuple[Fact, ...] = (
    Fact("constraint", -1, ("services/ledger/migrations/", "frozen until the Q3 audit")),
    Fact("decision", 7, ("redis-py 5.0.4", "blocking_timeout")),
    Fact("failing_test", 12, ("test_thousand_checkouts", "AssertionError: 987 orders committed, expected 1000")),
    Fact("fix", 19, ("services/checkout/order_lock.py", "released the lock before the commit")),
    Fact("edit", 25, ("services/checkout/pricing.py", "apply_bulk_discount")),
    Fact("load_test", 31, ("412 ms", "1,200 rps")),
)
FACT_KINDS: tuple[str, ...] = tuple(f.kind for f in FACTS)

_MODULES = ("cart", "payment", "inventory", "shipping", "tax", "receipts", "session", "events", "retry", "audit_log")


def _code(module: str, lines: int, seed: int) -> str:
    """A plausible Python module of ``lines`` numbered lines (a file read's output)."""
    out = [f"   1  \"\"\"services/checkout/{module}.py: the {module} step of a checkout.\"\"\"", "   2  from __future__ import annotations", "   3  import logging"]
    n = 4
    k = seed
    while n <= lines:
        k += 1
        out.append(f"{n:4d}  def {module}_step_{k}(order, session, *, retries=3):")
        out.append(f"{n + 1:4d}      \"\"\"Step {k} of {module}: validate the order, write its row, emit an event.\"\"\"")
        out.append(f"{n + 2:4d}      row = session.get(Order, order.id)  # order ids look like ord-{seed:03d}{k:04d}")
        out.append(f"{n + 3:4d}      if row is None or row.state not in ('pending', 'reserved'):")
        out.append(f"{n + 4:4d}          log.warning('skip %s in state %s', order.id, getattr(row, 'state', None))")
        out.append(f"{n + 5:4d}          return None")
        out.append(f"{n + 6:4d}      row.{module}_checked_at = clock.now()")
        out.append(f"{n + 7:4d}      return row")
        n += 8
    return "\n".join(out)


def _grep(pattern: str, seed: int, hits: int = 18) -> str:
    return "\n".join(
        f"services/checkout/{_MODULES[(seed + i) % len(_MODULES)]}.py:{17 + 9 * i}:    {pattern}(order, session)  # step {seed}-{i}"
        for i in range(hits)
    )


def _test_log(seed: int, failing: str | None = None, passed: int = 48) -> str:
    lines = ["============================= test session starts ==============================",
             "platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0",
             f"collected {passed + (1 if failing else 0)} items", ""]
    for i in range(passed):
        mod = _MODULES[(seed + i) % len(_MODULES)]
        lines.append(f"tests/checkout/test_{mod}.py::test_{mod}_case_{seed}_{i} PASSED [{100 * (i + 1) // (passed + 1):3d}%]")
    if failing:
        lines += ["", "=================================== FAILURES ===================================", failing,
                  "=========================== short test summary info ============================"]
        lines.append(f"FAILED {failing.splitlines()[0].strip('_ ')}")
        lines.append(f"=================== 1 failed, {passed} passed in {3 + seed % 5}.{seed % 10}1s ===================")
    else:
        lines.append(f"============================== {passed} passed in {3 + seed % 5}.{seed % 10}4s ==============================")
    return "\n".join(lines)


_FAILING = (
    "______________ tests/checkout/test_concurrency.py::test_thousand_checkouts ______________\n"
    "    def test_thousand_checkouts(shop):\n"
    "        results = run_concurrently(shop.checkout, orders(1000), workers=64)\n"
    ">       assert committed(results) == 1000\n"
    "E       AssertionError: 987 orders committed, expected 1000\n"
    "tests/checkout/test_concurrency.py:41: AssertionError"
)
_LOAD_TEST = (
    "locust --headless -u 1000 -r 100 --run-time 5m -f loadtests/checkout.py\n"
    "Type     Name                # reqs   # fails |  Avg    Min    Max  Med |  req/s\n"
    + "\n".join(f"POST     /checkout/step{i}      {21000 + 37 * i:7d}   0(0.00%) |  {180 + i}    {40 + i}   {900 + 11 * i}  {170 + i} | {70 + i}.{i}" for i in range(12))
    + "\nAggregated summary: 0 failures, p95 latency: 412 ms at 1,200 rps sustained over 5 minutes\n"
    + "\n".join(f"worker-{i:02d} cpu {31 + i}% rss {212 + 3 * i} MiB" for i in range(16))
)


def _round(i: int) -> tuple[str, str, dict[str, Any], str]:
    """(assistant text, tool, arguments, output) of round ``i`` (0-based), facts at their rounds."""
    mod = _MODULES[i % len(_MODULES)]
    if i == 7:
        return ("Decision: we will use redis-py 5.0.4 for the per-order lock, because its Lock supports blocking_timeout "
                "and the cluster already runs Redis 7.2. Adding it to the checkout requirements.",
                "edit_file", {"path": "services/checkout/requirements.txt", "old_string": "sqlalchemy==2.0.30",
                              "new_string": "sqlalchemy==2.0.30\nredis==5.0.4"}, "Edited services/checkout/requirements.txt (1 line added).")
    if i == 12:
        return ("Running the concurrency test to see how many orders are lost.", "run_shell",
                {"command": "pytest tests/checkout -q -x"}, _test_log(i, _FAILING))
    if i == 19:
        return ("Fix: services/checkout/order_lock.py released the lock before the commit, so two workers could both "
                "reserve the same stock row; the release now happens after session.commit().",
                "edit_file", {"path": "services/checkout/order_lock.py", "old_string": "lock.release()\n        session.commit()",
                              "new_string": "session.commit()\n        lock.release()"}, "Edited services/checkout/order_lock.py (2 lines changed).")
    if i == 25:
        return ("Editing services/checkout/pricing.py: apply_bulk_discount now rounds each line before summing, so a "
                "retried checkout computes the same total.",
                "edit_file", {"path": "services/checkout/pricing.py", "old_string": "def apply_bulk_discount(lines, rate):\n    total = sum(l.price for l in lines)",
                              "new_string": "def apply_bulk_discount(lines, rate):\n    total = sum(round(l.price, 2) for l in lines)"},
                "Edited services/checkout/pricing.py (2 lines changed).")
    if i == 31:
        return ("Running the load test against the staging checkout.", "run_shell", {"command": "make loadtest-checkout"}, _LOAD_TEST)
    kind = i % 4
    if kind == 0:
        return (f"Reading the {mod} step.", "read_file", {"path": f"services/checkout/{mod}.py"}, _code(mod, 88, i))
    if kind == 1:
        pattern = f"{mod}_step_{i}"
        return (f"Looking for the callers of {pattern}.", "grep", {"pattern": pattern, "path": "services/checkout"}, _grep(pattern, i))
    if kind == 2:
        return ("Running the checkout tests.", "run_shell", {"command": f"pytest tests/checkout/test_{mod}.py -q"}, _test_log(i, passed=30))
    return (f"Reading the {mod} tests.", "read_file", {"path": f"tests/checkout/test_{mod}.py"}, _code(f"test_{mod}", 72, i))


ANSWER = ("Done. The lost orders came from the per-order lock being released before the commit; with the fix all 1,000 "
          "concurrent checkouts commit, and the load test holds its latency. Nothing under the ledger migrations was touched.")


def coding_session(*, finished: bool = False, next_request: str | None = NEXT_REQUEST, rounds: int = ROUNDS) -> list[Message]:
    """The 36-round coding session (see the module docstring), without ids.

    ``finished``: the turn ends with the agent's answer, then ``next_request`` (None: nothing) as
    the new current request. Otherwise the last turn is still going (its last round is done)."""
    if rounds <= max(f.round for f in FACTS):
        raise ValueError(f"the facts need at least {max(f.round for f in FACTS) + 1} rounds, got {rounds}")
    out: list[Message] = [user(REQUEST)]
    for i in range(rounds):
        text, tool, args, output = _round(i)
        call = ToolCall(f"toolu_{i:03d}", tool, json.dumps(args))
        out += [assistant(text, call), tool_result(call.id, output, name=tool)]
    if finished:
        out.append(assistant(ANSWER))
        if next_request:
            out.append(user(next_request))
    return out


def load(svc: Any, key: str, messages: Sequence[Message], *, provider: str | None = None, model: str | None = None) -> str:
    """Create thread ``key`` on ``svc`` (the session's system prompt) and write ``messages`` through its door."""
    svc.runs.create_thread(key, title=f"coding session {key}", system_prompt=SYSTEM_PROMPT, provider=provider, model=model)
    with svc.store.locked(key) as tx:
        tx.bulk_append(list(messages))
    return key


def half_window_policy(envelope_tokens: int, *, window: int = 128_000, **default: Any) -> dict[str, Any]:
    """A policy whose threshold is half ``envelope_tokens`` (the session's size): the issue's
    "compacted by hand with its threshold at half its size" (target ≈ a quarter)."""
    return {"context_window": window, "default": {"threshold_tokens": envelope_tokens // 2, **default}}


def facts_kept(text: str) -> dict[str, bool]:
    """Per fact kind: every key of that fact is in ``text`` (the whole surface the model gets)."""
    return {f.kind: all(k in text for k in f.keys) for f in FACTS}


def surface_text(svc: Any, key: str) -> str:
    """Everything the model would see next on ``key``: summary, messages (previews as shown) and
    the tool calls' names and arguments."""
    from engine.core.surface import build_surface, envelope_of

    snap = svc.store.snapshot(key)
    env = envelope_of(snap, build_surface(snap))
    parts: list[str] = []
    for m in env.messages():
        parts.append(m.content)
        parts.extend(f"{c.name} {c.arguments}" for c in m.tool_calls)
    return "\n".join(parts)
