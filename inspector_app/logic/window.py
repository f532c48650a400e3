"""What a controller may ask of the window (issue 24): one small interface in place of the lambdas
the window used to hand each controller (reload, reread_status, say, current, open_database,
reload_threads, database, busy). :class:`inspector_app.main_window.MainWindow` implements it; a
controller is given it at construction and calls it only once the window is built, so no
controller depends on the order the others are made in."""

from __future__ import annotations

from typing import Protocol


class Window(Protocol):
    """The window's own operations a controller may use."""

    #: the database open now (the URL as given; None before one opened)
    database: str | None

    @property
    def compacting(self) -> bool:
        """A manual compaction is running (the live refresh waits)."""
        ...

    def current_key(self) -> str | None:
        """The key of the thread the panels show (None: none)."""
        ...

    def say(self, text: str) -> None:
        """A status-bar message about the database (not about one thread)."""
        ...

    async def load_thread(self, key: str, *, keep: int | None = None) -> None:
        """Read ``key`` afresh as a new view, re-selecting message ``keep``."""
        ...

    async def reread_status(self, key: str) -> None:
        """Read the open thread's header and status again."""
        ...

    async def reload_threads(self, select: str | None) -> None:
        """List the threads again and open ``select`` (else the open one, else the default)."""
        ...

    async def select_thread(self, key: str) -> None:
        """Select ``key`` in the list and open it."""
        ...

    async def open_database(self, url: str | None, *, select: str | None = None, create: bool = False) -> bool:
        """Open ``url`` (``create``: a SQLite file that does not exist yet is created); False when it could not be."""
        ...
