"""The typed service client: the InspectorService Protocol's facets (ReadsAPI, CompactionAPI, ...),
engine.service.Service's facets and the GUI tests' fake agree method by method, and the inspector
calls the service only through the facet Protocols."""

from __future__ import annotations

import asyncio
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from engine.core.messages import ToolCall, assistant, tool_result, user
from engine.core.views import Offload, StoredMessage, VisibleTokens
from engine.service import CompactionFacet, ImportsFacet, ReadsFacet, Service, SteeringFacet
from inspector_app.service_api import (
    FACET_METHODS,
    FACETS,
    THREADS_METHODS,
    CompactionAPI,
    InspectorService,
    ReadsAPI,
    ThreadsFacet,
)
from inspector_app.service_client import ServiceClient, facet_method, invoke, method_name
from tests.gui.fake_service import FakeService, fake_tokens

ROOT = Path(__file__).resolve().parents[2]
GUI = ROOT / "inspector_app"


def shape(fn: Any) -> list[tuple[str, Any, Any]]:
    """(name, kind, default) of every parameter, ``self`` included."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


#: each facet Protocol's engine class (``Service().<facet>`` is one)
ENGINE = {"reads": ReadsFacet, "compaction": CompactionFacet, "steering": SteeringFacet, "imports": ImportsFacet}
PAIRS = [(facet, name) for facet, names in FACET_METHODS.items() for name in names]
API = {facet: api for api, facet in FACETS.items()}


def test_the_protocol_lists_the_methods_the_inspector_uses() -> None:
    assert [n for n, v in vars(InspectorService).items() if not n.startswith("_")] == ["threads", "reads", "compaction", "steering", "imports", "close"]
    assert {"close", *(name for _facet, name in PAIRS)} == {
        "thread", "messages_page", "compaction_state", "history", "events", "offloads",
        "read_original", "status", "pressure_history", "compact", "replay", "visible_tokens", "source_compactions",
        "import_file", "close",
        # issue 16: a cold measurement's progress
        "status_with_progress",
        # issue 14: what compaction kept and dropped
        "request_envelopes", "compaction_diff", "compaction_history", "export_history", "whatif", "whatif_sweep",
        # issue 22: the live refresh's cheap marks
        "versions",
        # issue 27: the sessions on this machine
        "discover_sessions", "follow_sessions",
        # issue 28: Preferences change the summarizer
        "reload_summarizer",
        # issue 24: who wrote a rejected summary (the cause comes with the error: no events paged)
        "summarizer_info",
        # issue 23: revert / redo, the audit log, read-only stores
        "revert", "revert_target", "audit", "audit_operators", "access",
        # issue 23: pins and the thread's own policy
        "pins", "pin", "thread_policy", "set_thread_policy",
    }  # fmt: skip


def test_each_protocol_facet_is_the_services_facet_of_that_name(tmp_path: Path) -> None:
    from engine.service import open_service

    svc = open_service(f"sqlite:///{tmp_path / 'f.db'}", workdir=tmp_path / "wd", create=True)
    try:
        for facet, engine in ENGINE.items():
            assert type(getattr(svc, facet)) is engine
    finally:
        svc.close()
    fake = FakeService(tmp_path / "workdir")
    assert all(getattr(fake, facet) is fake for facet in ENGINE)  # the fake is every facet itself
    assert shape(Service.close) == shape(InspectorService.close) == shape(FakeService.close)


@pytest.mark.parametrize(("facet", "name"), PAIRS)
def test_service_and_fake_have_the_protocol_signature(facet: str, name: str) -> None:
    expected = shape(getattr(API[facet], name))
    assert shape(getattr(ENGINE[facet], name)) == expected, f"engine.service {ENGINE[facet].__name__}.{name} drifted from {API[facet].__name__}"
    assert shape(getattr(FakeService, name)) == expected, f"FakeService.{name} drifted from {API[facet].__name__}"


@pytest.mark.parametrize("name", THREADS_METHODS)
def test_the_threads_facet_and_the_fakes_have_the_protocol_signature(name: str) -> None:
    """Issue 26: ``service.threads`` (engine.fleet's facet) and the fake's agree with ThreadsFacet."""
    from engine.fleet import ThreadsFacet as EngineFacet
    from tests.gui.fake_fleet import FakeThreads

    expected = shape(getattr(ThreadsFacet, name))
    engine = {p_name: kind for p_name, kind, _default in shape(getattr(EngineFacet, name))}
    # the engine may give defaults or take more keyword arguments; it takes every parameter the GUI passes, as passed
    assert all(engine.get(p_name) == kind for p_name, kind, _default in expected), f"engine.fleet.ThreadsFacet.{name} drifted from service_api.ThreadsFacet"
    assert shape(getattr(FakeThreads, name)) == expected, f"FakeThreads.{name} drifted from service_api.ThreadsFacet"


def test_the_gui_calls_the_service_only_through_protocol_methods() -> None:
    """No method-name strings: every ``client.call*`` and ``invoke`` names a facet Protocol's method
    (``ReadsAPI.thread``), and every facet Protocol method is called somewhere."""
    sources = {path: path.read_text(encoding="utf-8") for path in GUI.rglob("*.py")}
    calls = [(path, m.group(1)) for path, text in sources.items() for m in re.finditer(r"client\.call(?:_interactive)?\(\s*([^,)]+)", text)]
    # a function run on a worker (client.apply*) calls the service through invoke(service, ReadsAPI.x, ...)
    calls += [(path, m.group(1)) for path, text in sources.items() for m in re.finditer(r"\binvoke\(\s*service,\s*([^,)]+)", text)]
    assert calls
    apis = "|".join(api.__name__ for api in FACETS)
    # the one exception: FacetClient (service_client.py) forwards the method it was given to its ServiceClient
    forwarded = [(path, arg) for path, arg in calls if path.name == "service_client.py" and arg.strip() == "method"]
    assert len(forwarded) == 2  # FacetClient.call and .call_interactive, each checked by facet_method (_grant)
    bad = [(path.relative_to(ROOT), arg) for path, arg in calls if (path, arg) not in forwarded and not re.fullmatch(rf"(?:{apis})\.\w+", arg.strip())]
    assert not bad, f"service calls by something else than a facet Protocol method: {bad}"
    used = {(FACETS[next(a for a in FACETS if a.__name__ == api)], name)
            for text in sources.values() for api, name in re.findall(rf"\b({apis})\.(\w+)", text)}
    assert used - set(PAIRS) == set()
    assert set(PAIRS) - used == set()


def test_method_name_accepts_only_protocol_methods() -> None:
    assert method_name(CompactionAPI.status) == "status"
    assert facet_method(CompactionAPI.status) == ("compaction", "status") and facet_method(ReadsAPI.thread) == ("reads", "thread")
    with pytest.raises(TypeError):
        method_name(InspectorService.close)  # the service's own, not a facet's
    with pytest.raises(TypeError):
        method_name(ReadsFacet.thread)  # the engine's class, not the Protocol
    with pytest.raises(TypeError):
        method_name(FakeService.status)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        method_name(lambda service: None)


def test_the_client_calls_the_named_method_on_a_worker(tmp_path: Path) -> None:
    fake = FakeService(tmp_path / "workdir")
    fake.add_thread("t", [user("hello there"), assistant("hi")])
    client = ServiceClient(fake)
    try:
        async def go() -> Any:
            info = await client.call(ReadsAPI.thread, "t")
            page = await client.call_interactive(ReadsAPI.messages_page, "t", after_id=None, limit=1)
            return info, page

        info, page = asyncio.run(go())
    finally:
        client.close()
    assert info.key == "t" and len(page) == 1 and page[0].message.content == "hello there"
    assert invoke(fake, ReadsAPI.thread, "t") == info  # on a worker: service.reads.thread("t")
    assert ("messages_page", ("t", None, 1, None)) in fake.calls and fake.closed


def test_the_fake_counts_what_the_model_sees(tmp_path: Path) -> None:
    fake = FakeService(tmp_path / "workdir")
    t = fake.add_thread("t", [user("q"), assistant("", ToolCall("c1", "query_kb", "{}")), tool_result("c1", "x" * 400, name="query_kb")], prune=(2,))
    stored: list[StoredMessage] = t.messages
    offloads: dict[int, Offload] = t.offloads
    counts = fake.visible_tokens("t", stored, offloads)
    assert isinstance(counts, VisibleTokens)
    pruned = stored[2]
    assert set(counts.seen) == {s.id for s in stored} and set(counts.original) == {pruned.id}
    assert counts.seen[pruned.id] == fake_tokens(offloads[pruned.id].preview, pruned.message) < counts.original[pruned.id] == 104
