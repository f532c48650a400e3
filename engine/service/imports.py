"""Import: transcript files, followed files, discovered sessions.

Reached as ``svc.imports`` (:class:`engine.service.Service`); shares one :class:`ServiceCore` with the other facets."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from ..discovery import DiscoveredSession, SessionFollower, discover, store_writer
from ..importing import ImportReport, follow_path, import_path
from .core import ServiceCore


class ImportsFacet:
    """Import: transcript files, followed files, discovered sessions."""

    def __init__(self, core: ServiceCore) -> None:
        self._core = core

    def imported_sources(self) -> list[tuple[str, str, datetime | None]]:
        """(source file as recorded, thread key, last written) of every imported thread (a bulk
        import's resume and discovery compare the files on disk with these)."""
        return self._core.store.imported_sources()

    def import_file(self, path: str | os.PathLike[str], *, format: str | None = None, thread: str | None = None) -> list[ImportReport]:
        """Import one transcript file or directory (format detected from its content, or
        ``format``): one report per session (a Claude Code session comes with its sub-agents),
        each written in one transaction, idempotent by source keys (docs/import.md). Raises
        :class:`engine.importers.ImportFormatError` (one line) when it is not that format."""
        reports = import_path(self._core.store, Path(path), format=format, thread=thread)
        self._core.remeasure([r.thread for r in reports if r.created or r.messages or r.compactions or r.requests])
        self._core.snapshots.invalidate()  # not needed for correctness (keys are read); frees memory
        return reports

    def follow_file(
        self,
        path: str | os.PathLike[str],
        *,
        format: str | None = None,
        thread: str | None = None,
        poll_seconds: float = 0.5,
        stop: Any = None,
        seconds: float | None = None,
        on_reports: Any = None,
    ) -> list[ImportReport]:
        """Tail a growing Claude Code / Codex JSONL file, appending entries as they are written,
        until ``stop`` (a ``threading.Event``) is set, ``seconds`` passed, or SIGINT / SIGTERM.
        ``on_reports(reports)`` is called after each pass that wrote something."""
        return follow_path(self._core.store, Path(path), format=format, thread=thread, poll_seconds=poll_seconds, stop=stop,
                           seconds=seconds, on_reports=on_reports)

    def discover_sessions(self, folders: Sequence[str] = (), *, home: str | None = None) -> list[DiscoveredSession]:
        """The sessions on this machine (each tool's default locations under ``home``, default the
        user's, and ``folders``), newest first, each marked with the threads of this database
        imported from it (:mod:`engine.discovery`)."""
        return discover(folders, home=home, imported=self._core.store.imported_sources())

    def follow_sessions(self, folders: Sequence[str] = (), *, home: str | None = None, on_reports: Any = None,
                        on_error: Any = None, debounce_ms: int = 400) -> SessionFollower:
        """Follow all: import new and growing sessions under the default locations and ``folders``
        into this database as they change, on a watcher thread of its own (started; ``stop()`` it).
        ``on_reports(reports)`` / ``on_error(path, exc)`` are called on that thread."""
        return SessionFollower(store_writer(self._core.store), folders=folders, home=home, on_reports=on_reports,
                               on_error=on_error, debounce_ms=debounce_ms).start()


__all__ = ["ImportsFacet"]
