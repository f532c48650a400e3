"""The one way the GUI talks to ``engine.service``: every call runs on a worker thread.

The GUI thread never touches the database, the Workdir or a summarizer. Coroutines running on the
qasync loop ``await client.call(CompactionAPI.status, key)``: the method is named by the
:class:`~inspector_app.service_api.InspectorService` Protocol (not by a string), so arguments and
result are typed and a renamed method breaks at import or type-check time. The blocking call runs
in a small ``ThreadPoolExecutor`` through ``loop.run_in_executor`` and its exception comes back to
the awaiting coroutine unchanged; cancelling the awaiting task drops a call still queued and
discards the result of one already running. What the user waits for (timeline pages, a selected
message's body) goes through :meth:`ServiceClient.call_interactive` on a lane of its own, so it
never queues behind slow background reads (pressure of a long thread, its full history, the events,
token counts). Those run Python for seconds on a long thread; the client shortens the interpreter's
GIL switch interval so that the GUI thread and the interactive reads get the GIL back within half a
millisecond instead of five (measured: a 200-row page read while ``status`` measures 100k messages,
median ~80 ms → ~30 ms).
"""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Concatenate, ParamSpec, TypeVar, cast

from .service_api import FACETS, InspectorService, ThreadsFacet

T = TypeVar("T")
P = ParamSpec("P")

#: a method of a facet Protocol, e.g. ``CompactionAPI.status`` (its ``self`` is the facet: checked by
#: :func:`facet_method` at run time, since a Callable type cannot say "one of these Protocols")
Method = Callable[Concatenate[Any, P], T]
#: a function run on a worker with the whole service (:meth:`ServiceClient.apply`)
Job = Callable[Concatenate[InspectorService, P], T]

#: the longest a thread running Python keeps a waiting one from the GIL (CPython's default is 5 ms)
GIL_SWITCH_INTERVAL_S = 0.0005


def invoke(service: InspectorService, method: Method[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``service.<facet>.<method>(*args, **kwargs)``, ``method`` one of a facet Protocol's
    (``invoke(service, ReadsAPI.thread, key)``): how a function run by :meth:`ServiceClient.apply`
    (on a worker) calls the service, as typed as :meth:`ServiceClient.call`."""
    facet, name = facet_method(method)
    return getattr(getattr(service, facet), name)(*args, **kwargs)


class NotConnected(RuntimeError):
    """A call was made before a service was opened (or after the client was closed)."""


def facet_method(method: Callable[..., Any]) -> tuple[str, str]:
    """(facet attribute, method name) of ``method`` if it is one of a facet Protocol's
    (``ReadsAPI.thread`` → ``("reads", "thread")``), else ``TypeError``."""
    name = getattr(method, "__name__", "")
    owner = getattr(method, "__qualname__", "").rpartition(".")[0]
    for api, facet in FACETS.items():
        if api.__name__ == owner and not name.startswith("_") and vars(api).get(name) is method:
            return facet, name
    raise TypeError(f"{method!r} is not a method of a facet Protocol of InspectorService")


def method_name(method: Callable[..., Any]) -> str:
    """The name of ``method`` if it is one of a facet Protocol's, else ``TypeError``."""
    return facet_method(method)[1]


class ServiceClient:
    """Runs service calls off the GUI thread.

    ``max_workers`` bounds concurrency: a long manual compaction on one worker leaves the other free
    for the live refresh's reads.
    """

    def __init__(self, service: InspectorService | None = None, *, max_workers: int = 2) -> None:
        self._service = service
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="inspector-service")
        self._interactive = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inspector-service-ui")
        self._closed = False
        sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_INTERVAL_S))

    @property
    def connected(self) -> bool:
        return self._service is not None and not self._closed

    async def run(self, fn: Callable[..., T], *args: Any, interactive: bool = False) -> T:
        """Run any blocking ``fn(*args)`` on the worker pool (``interactive``: on the interactive lane)."""
        if self._closed:
            raise NotConnected("the service client is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._interactive if interactive else self._executor, fn, *args)

    async def call(self, method: Method[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``service.<facet>.<method>(*args, **kwargs)`` on the worker pool, ``method`` one of a facet
        Protocol's (``client.call(ReadsAPI.history, key)``: ``service.reads.history(key)``)."""
        bound = self._bound(method)
        return await self.run(lambda: bound(*args, **kwargs))

    async def call_interactive(self, method: Method[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Like :meth:`call`, on the interactive lane (short reads the user waits for)."""
        bound = self._bound(method)
        return await self.run(lambda: bound(*args, **kwargs), interactive=True)

    async def apply(self, fn: Job[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(service, *args, **kwargs)`` on the worker pool: several service calls and the work on
        their results in one worker trip (e.g. scanning a page for a search text)."""
        service = self._connected()
        return await self.run(lambda: fn(service, *args, **kwargs))

    async def apply_interactive(self, fn: Job[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Like :meth:`apply`, on the interactive lane: the reads the user waits for (a timeline
        page with its offloads, a thread's first reads) in one worker trip instead of one each."""
        service = self._connected()
        return await self.run(lambda: fn(service, *args, **kwargs), interactive=True)

    def facets(self, *apis: type) -> FacetClient:
        """This client limited to the facets of ``apis`` (``client.facets(ReadsAPI, CompactionAPI)``;
        ``ThreadsFacet``: ``service.threads``): what a controller is given (:class:`FacetClient`)."""
        names = {FACETS[api] if api in FACETS else "threads" if api is ThreadsFacet else None for api in apis}
        if None in names or not names:
            raise TypeError(f"not facet Protocols of InspectorService: {apis!r}")
        return FacetClient(self, frozenset(n for n in names if n is not None))

    def _bound(self, method: Callable[..., Any]) -> Callable[..., Any]:
        facet, name = facet_method(method)
        bound: Callable[..., Any] = getattr(getattr(self._connected(), facet), name)
        return bound

    def _connected(self) -> InspectorService:
        service = self._service
        if service is None or self._closed:
            raise NotConnected("no database is open")
        return service

    async def open(self, opener: Callable[[str], InspectorService], url: str) -> None:
        """Open a service with ``opener(url)`` off the GUI thread, closing the previous one."""
        service = await self.run(opener, url)
        old, self._service = self._service, service
        if old is not None:
            await self.run(old.close)

    def close(self) -> None:
        """Drop queued calls, wait for a running one, then close the service (used at shutdown)."""
        if self._closed:
            return
        self._closed = True
        self._interactive.shutdown(wait=True, cancel_futures=True)
        self._executor.shutdown(wait=True, cancel_futures=True)
        service, self._service = self._service, None
        if service is not None:
            service.close()


class ServiceView:
    """The facets of a service a :class:`FacetClient` grants, and only those: what a function run by
    :meth:`FacetClient.apply` is handed in place of the whole service (another facet, or ``close``,
    raises ``AttributeError`` naming the facets granted)."""

    def __init__(self, service: InspectorService, facets: frozenset[str]) -> None:
        self._service = service
        self._facets = facets

    def __getattr__(self, name: str) -> Any:
        if name in self._facets:
            return getattr(self._service, name)
        raise AttributeError(f"{name!r} is not granted here (granted: {', '.join(sorted(self._facets))})")


class FacetClient:
    """A :class:`ServiceClient` limited to some facets of the service (issue 24: a controller is given
    only what it uses): :meth:`call` refuses a method of another facet (``TypeError``) and the
    function run by :meth:`apply` gets a :class:`ServiceView` of the granted facets. Made by
    :meth:`ServiceClient.facets`; it shares the client's workers and its open service."""

    def __init__(self, client: ServiceClient, facets: frozenset[str]) -> None:
        self._client = client
        #: the facet attributes granted (``reads``, ``compaction``, ``threads`` …)
        self.facets = facets

    @property
    def connected(self) -> bool:
        return self._client.connected

    async def run(self, fn: Callable[..., T], *args: Any, interactive: bool = False) -> T:
        """Any blocking ``fn(*args)`` on the worker pool (it is not handed the service)."""
        return await self._client.run(fn, *args, interactive=interactive)

    async def call(self, method: Method[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """:meth:`ServiceClient.call` of a granted facet's method."""
        self._grant(method)
        return await self._client.call(method, *args, **kwargs)

    async def call_interactive(self, method: Method[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """:meth:`ServiceClient.call_interactive` of a granted facet's method."""
        self._grant(method)
        return await self._client.call_interactive(method, *args, **kwargs)

    async def apply(self, fn: Job[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(view, *args, **kwargs)`` on the worker pool, ``view`` the granted facets only."""
        return await self._client.apply(self._viewed(fn), *args, **kwargs)

    async def apply_interactive(self, fn: Job[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Like :meth:`apply`, on the interactive lane."""
        return await self._client.apply_interactive(self._viewed(fn), *args, **kwargs)

    def _grant(self, method: Callable[..., Any]) -> None:
        facet, name = facet_method(method)
        if facet not in self.facets:
            raise TypeError(f"{facet}.{name} is not granted here (granted: {', '.join(sorted(self.facets))})")

    def _viewed(self, fn: Job[P, T]) -> Job[P, T]:
        facets = self.facets

        def job(service: InspectorService, /, *args: P.args, **kwargs: P.kwargs) -> T:
            return fn(cast(InspectorService, ServiceView(service, facets)), *args, **kwargs)

        return job
