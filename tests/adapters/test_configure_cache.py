"""The per-call configuration of an adapter's thread (issue 24, adapter overhead): the tool schemas
are converted again only when the framework's tool objects change, and the thread's system prompt
and tools stay what the framework sends."""

from __future__ import annotations

from typing import Any

from engine.adapters.core import EngineThread


def test_the_same_schema_list_configures_once_and_a_change_is_written(make_service: Any, key: str) -> None:
    svc = make_service(context_window=100_000)
    t = EngineThread(svc, key, "test")
    calls: list[tuple[str, Any]] = []
    configure = svc.runs.configure

    def counted(k: str, **kw: Any) -> None:
        calls.append((k, kw))
        configure(k, **kw)

    svc.runs.configure = counted  # type: ignore[method-assign]
    schemas = [{"type": "function", "function": {"name": "lookup"}}]
    t.configure("sys", schemas)
    t.configure("sys", schemas)
    t.configure("sys", [dict(s) for s in schemas])  # equal, another object: compared, not written
    assert len(calls) == 1
    t.configure("other", schemas)
    t.configure("other", [*schemas, {"type": "function", "function": {"name": "more"}}])
    assert [kw["system_prompt"] for _, kw in calls] == ["sys", "other", "other"]
    snap = svc.steps.measure(key).snapshot
    assert snap.system_prompt == "other" and len(snap.tools) == 2


def test_langchain_converts_tools_again_only_when_they_change(make_service: Any, key: str) -> None:
    import pytest

    pytest.importorskip("langchain.agents", reason="langchain is not installed: pip install 'compaction-inspector[langchain]'")
    from langchain_core.tools import tool

    from engine.adapters import langchain as lc

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        return q

    @tool
    def other(q: str) -> str:
        """Something else."""
        return q

    mw = lc.CompactionMiddleware(service=make_service(context_window=100_000), thread=key)
    first = mw._schemas([lookup])
    assert mw._schemas([lookup]) is first and first == lc._tool_schemas([lookup])
    second = mw._schemas([lookup, other])
    assert second is not first and second == lc._tool_schemas([lookup, other])
