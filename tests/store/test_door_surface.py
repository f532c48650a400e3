"""The write door hands callers outside the store frozen records, never its ORM row, session or
connection (issue 24): a scan of the engine's code for ``with store.locked(...) as tx`` blocks that
reach into ``tx.conv`` / ``tx.session`` / ``tx.connection()``, and the record ``Locked.thread()``
gives is a copy that later writes in the same transaction do not change."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from engine.core.views import LockedThread
from engine.store import Store

ENGINE = Path(__file__).resolve().parents[2] / "engine"
DOOR_CONTEXTS = {"locked", "locked_or_created"}
PRIVATE = {"conv", "conv_head", "session", "connection", "_conv", "_session", "_conn", "_head"}


def _door_targets(node: ast.With | ast.AsyncWith) -> set[str]:
    names: set[str] = set()
    for item in node.items:
        call = item.context_expr
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in DOOR_CONTEXTS):
            continue
        target = item.optional_vars
        if isinstance(target, ast.Tuple) and target.elts:
            target = target.elts[0]
        if isinstance(target, ast.Name):
            names.add(target.id)
    return names


def reaches_into_door(source: str, filename: str) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, (ast.With, ast.AsyncWith)):
            continue
        names = _door_targets(node)
        if not names:
            continue
        for stmt in node.body:
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.Attribute) and sub.attr in PRIVATE and isinstance(sub.value, ast.Name) and sub.value.id in names:
                    found.append(f"{filename}:{sub.lineno}: {sub.value.id}.{sub.attr}")
    return found


def test_no_caller_outside_the_store_reads_the_doors_orm_row_or_session() -> None:
    hits: list[str] = []
    files = [p for p in ENGINE.rglob("*.py") if "store" not in p.relative_to(ENGINE).parts[:1]]
    assert len(files) > 50
    for path in files:
        hits += reaches_into_door(path.read_text(encoding="utf-8"), str(path.relative_to(ENGINE.parent)))
    assert hits == []


def test_the_scan_sees_a_planted_reach() -> None:
    planted = "def f(store):\n    with store.locked('k') as tx:\n        return tx.conv.model\n"
    assert reaches_into_door(planted, "planted.py") == ["planted.py:3: tx.conv"]
    planted2 = "def f(store):\n    with store.locked_or_created('k') as (tx, new):\n        tx.session.flush()\n"
    assert reaches_into_door(planted2, "planted.py") == ["planted.py:3: tx.session"]


def test_thread_record_is_a_frozen_copy(store: Store, conv: str) -> None:
    with store.locked(conv) as tx:
        tx.set_route(provider="openai", model="gpt-4o")
        before = tx.thread()
        tx.configure(system_prompt="be brief")
        tx.set_route(provider="anthropic", model="claude-sonnet-4")
        after = tx.thread()
    assert isinstance(before, LockedThread)
    assert (before.key, before.model, before.system_prompt) == (conv, "gpt-4o", "")
    assert (after.provider, after.model, after.system_prompt) == ("anthropic", "claude-sonnet-4", "be brief")
    with pytest.raises(dataclasses.FrozenInstanceError):
        before.model = "x"  # type: ignore[misc]
