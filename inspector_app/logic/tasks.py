"""Background tasks of the window: window-wide ones, and ones bound to the open thread.

Every service call runs in an asyncio task on the qasync loop. A task's failure goes to a report
callback (the error banner), never to ``sys.excepthook``; a cancelled task is silent.

What belongs to the open thread (its pages, token counts, the selected message's body, search,
jumps, side panels, the live refresh's reads) runs in :class:`ThreadTasks`. Opening another thread,
or a fresh view of the same one, :meth:`~ThreadTasks.bind`\\ s the group anew and cancels every task
of the previous view: a read still in flight is dropped (its result never reaches the coroutine)
and one still queued for a worker is not run. So no late answer of an older view is ever applied,
without comparing view counters after every ``await``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Coroutine, TypeVar

T = TypeVar("T")

#: ``report(exc, what)``: show a task's failure
Report = Callable[[BaseException, str], None]


class TaskSet:
    """Tasks whose failures are reported and that can be cancelled together."""

    def __init__(self, report: Report) -> None:
        self._report = report
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, T], what: str) -> asyncio.Task[T]:
        """Run ``coro`` on the loop; its failure is reported as ``what``."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._done(t, what))
        return task

    def _done(self, task: asyncio.Task[Any], what: str) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._report(exc, what)

    @property
    def tasks(self) -> list[asyncio.Task[Any]]:
        return list(self._tasks)

    @property
    def idle(self) -> bool:
        return not self._tasks

    def cancel(self) -> list[asyncio.Task[Any]]:
        """Cancel every running task; returns them (to wait for their end)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        return tasks


class ThreadTasks(TaskSet):
    """The tasks of one view of one thread: :meth:`bind` starts a new view and cancels the old one's."""

    def __init__(self, report: Report) -> None:
        super().__init__(report)
        self.key: str | None = None

    def bind(self, key: str | None) -> list[asyncio.Task[Any]]:
        """A new view of ``key`` (another thread, or the same one read afresh): cancel every task
        of the previous view. A task that calls this cancels itself (at its next ``await``)."""
        cancelled = self.cancel()
        self.key = key
        return cancelled


async def finished(task: asyncio.Task[Any]) -> bool:
    """Wait for ``task`` without taking over its cancellation or failure (a task of another group
    reports its own failure): True if it completed. Cancelling the waiter leaves ``task`` running."""
    await asyncio.wait([task])
    return not task.cancelled() and task.exception() is None
