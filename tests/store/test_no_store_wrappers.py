"""The Store has no use-case write wrappers (issue 24): a caller opens the write door itself
(``with store.locked(key) as tx: tx.append_message(m)``; tests: ``tests.door_ops``)."""

from __future__ import annotations

import ast
import inspect
import textwrap

from engine.store import Locked, Store

#: the wrappers issue 24 removed: each opened ``self.locked(...)`` for one ``Locked`` call
REMOVED = (
    "set_route", "append_message", "append_messages", "bulk_append", "queue_request", "start_run", "finish_run",
    "interrupt_run", "resume_run", "cancel_run", "record_model_request", "complete_model_request", "add_event",
)


def test_the_store_has_none_of_the_removed_wrappers() -> None:
    assert [name for name in REMOVED if hasattr(Store, name)] == []


def _is_door_wrapper(fn: ast.FunctionDef) -> bool:
    """A method whose body (its docstring aside) is one ``with self.locked(...)`` around one statement."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str))]
    if len(body) != 1 or not isinstance(body[0], ast.With) or len(body[0].body) != 1:
        return False
    call = body[0].items[0].context_expr
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "locked"
            and isinstance(call.func.value, ast.Name) and call.func.value.id == "self")


def test_no_store_method_is_a_one_call_trip_through_the_door() -> None:
    """Not the names alone: no method of the Store (public or not) just opens the door for one call."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(Store)))
    (cls,) = tree.body
    assert isinstance(cls, ast.ClassDef)
    wrappers = [f.name for f in cls.body if isinstance(f, ast.FunctionDef) and _is_door_wrapper(f)]
    assert wrappers == []


def test_the_door_has_every_method_the_wrappers_called() -> None:
    """What a caller calls instead (``finish_run`` / ``interrupt_run`` / ``resume_run`` are
    ``set_run_status``; ``cancel_run`` is ``settle_run``)."""
    instead = {"finish_run": "set_run_status", "interrupt_run": "set_run_status", "resume_run": "set_run_status", "cancel_run": "settle_run"}
    assert [n for n in REMOVED if not callable(getattr(Locked, instead.get(n, n), None))] == []
