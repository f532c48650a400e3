"""``compaction import DIR``: every session under a folder, with progress, a report per file, and
resumable (docs/import.md#bulk-import, docs/cli.md).

**What is imported.** The folder is searched as ``compaction discover --folder`` searches one
(:func:`engine.discovery.discover`: depth-first, version-control and environment folders left out,
a folder that is itself a session — an OpenHands V1 conversation, a Cline task — taken whole, a
Claude Code sub-agent file read with its main session), and every other file is reported too, as
skipped with its reason. Entries are taken in path order, so ``--limit`` / ``--after`` page
through a folder the same way every time.

**Resuming.** A session the database already holds (a thread whose recorded source file is this
path) and that was not modified since its thread was last written (the rule ``discover`` shows as
``yes`` / ``changed``) is skipped without being read: a run interrupted by Ctrl-C or a kill, run
again, reads only what it had not finished (a session is written in one transaction, so the one
being written when it stopped left nothing and is imported again). A session that grew since is
imported again, idempotently (only what is new is written). Source files are only read.

**Measuring.** Every thread an import wrote is measured (``Service.imports.import_file``: its status, the
figures the thread list shows). A bulk import of many files hands those measurements to a process
of its own (:class:`Measurer`), which writes the figures a batch at a time while the files are read
and written here; when the run ends, however it ends, it waits until every thread is measured (and
measures here whatever that process could not).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from .output import EXIT_FAILED, EXIT_OK, describe_failure

__all__ = ["Entry", "Measurer", "Progress", "bulk_entries", "import_entries", "is_bulk_folder", "report_line", "summary"]

log = logging.getLogger(__name__)

OK, SKIPPED, ERROR = "ok", "skipped", "error"
#: files to import from which the measurements go to a process of their own (:class:`Measurer`)
MEASURER_MIN_FILES = 20
#: the reasons a file is skipped (``reason`` of its report)
UNCHANGED = "already imported, unchanged since"
NOT_A_SESSION = "not a recognized session format"
PART_OF_SESSION = "read with its main session"


@dataclass(slots=True)
class Entry:
    """One file (or session folder) of a bulk import and what became of it."""

    path: str
    format: str | None = None
    explicit: bool = False  # named on the command line (never skipped as unchanged; the classic report lines)
    status: str | None = None  # ok | skipped | error (None: not done yet)
    reason: str | None = None  # why skipped, or the error in words
    code: str | None = None  # the error's code
    reports: list[Any] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "format": self.format, "status": self.status, "reason": self.reason, "code": self.code,
            "threads": sorted({r.thread for r in self.reports}), "messages": sum(r.messages for r in self.reports),
            "reports": [r.to_json() for r in self.reports], "seconds": round(self.seconds, 3),
        }


def is_bulk_folder(path: str) -> bool:
    """A folder that is not itself one session: imported by recursing into it."""
    from ...importers import detect_format

    p = Path(path).expanduser()
    return p.is_dir() and detect_format(p) is None


def _norm(path: str) -> str:
    return os.path.normcase(os.path.realpath(path))


def bulk_entries(folder: str, imported: Iterable[tuple[str, str, Any]]) -> list[Entry]:
    """Every entry under ``folder`` in path order: its sessions (each marked skipped when imported
    and unchanged since) and its other files (skipped, with the reason)."""
    from ...discovery import FOLDER_SCAN_LIMIT, IGNORED_DIRS, discover, folder_locations
    from ...importers import detect_format

    root = Path(folder).expanduser().absolute()
    imported = list(imported)
    sessions = discover(locations=folder_locations([root]), imported=imported)
    entries = {}
    inside: set[str] = set()  # session folders (with a trailing separator): their files are theirs
    for s in sessions:
        if s.folder and not s.imported:  # recorded by a file deeper in it (opencode's storage folder)
            s = _marked_by_files(s, imported)
        e = Entry(s.path, s.tool)
        if s.imported and not s.changed_since_import:
            e.status, e.reason = SKIPPED, UNCHANGED
        entries[_norm(s.path)] = e
        if s.folder:
            inside.add(_norm(s.path) + os.sep)
    leftover: list[tuple[str, str]] = []
    walked = 0
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in IGNORED_DIRS and _norm(os.path.join(dirpath, d)) + os.sep not in inside]
        walked += len(names)
        for n in names:
            p = os.path.join(dirpath, n)
            norm = _norm(p)
            if norm not in entries and not any(norm.startswith(x) for x in inside):
                leftover.append((p, norm))
    for p, norm in leftover:
        try:
            fmt = detect_format(Path(p)) if os.path.isfile(p) else None
        except OSError as exc:
            entries[norm] = Entry(p, None, status=SKIPPED, reason=f"cannot be read: {exc.strerror or exc}")
            continue
        reason = NOT_A_SESSION if not fmt else (
            f"not searched: the folder holds more than {FOLDER_SCAN_LIMIT:,} entries (import its subfolders one by one)"
            if walked > FOLDER_SCAN_LIMIT else PART_OF_SESSION)
        entries[norm] = Entry(p, fmt, status=SKIPPED, reason=reason)
    return sorted(entries.values(), key=lambda e: e.path)


def _marked_by_files(s: Any, imported: Sequence[tuple[str, str, Any]]) -> Any:
    from dataclasses import replace

    prefix = _norm(s.path) + os.sep
    hits = [(key, written) for source, key, written in imported if _norm(source).startswith(prefix)]
    if not hits:
        return s
    times = [w for _, w in hits if w is not None]
    return replace(s, threads=tuple(sorted({k for k, _ in hits})), imported_at=max(times) if times else None)


class Progress:
    """One updating line on a terminal (``412/1,000 files · 38 threads · 2 errors``), redrawn at most
    ten times a second; nothing when ``stream`` is not a terminal."""

    def __init__(self, total: int, stream: Any = None, *, enabled: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        try:
            tty = self.stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        self.enabled = tty if enabled is None else enabled
        self.total = total
        self.shown = False
        self._last = 0.0

    def text(self, done: int, threads: int, errors: int, skipped: int) -> str:
        parts = [f"{done:,}/{self.total:,} files", f"{threads:,} thread{'s' if threads != 1 else ''}",
                 f"{errors:,} error{'s' if errors != 1 else ''}"]
        if skipped:
            parts.append(f"{skipped:,} skipped")
        return " · ".join(parts)

    def update(self, done: int, threads: int, errors: int, skipped: int, *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1 and done < self.total:
            return
        self._last = now
        self.stream.write("\r" + self.text(done, threads, errors, skipped) + "\x1b[K")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        """Take the line away (before a line of the report is printed, and at the end)."""
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


def _text_line(e: Entry) -> str:
    if e.status == OK:
        threads = sorted({r.thread for r in e.reports})
        new = sum(r.messages for r in e.reports)
        stored = sum(r.already_stored for r in e.reports)
        more = f", {stored:,} already stored" if stored else ""
        return f"ok       {e.path} [{e.format or '?'}] -> {', '.join(threads)}: {new:,} new message{'s' if new != 1 else ''}{more}"
    return f"{e.status:<8} {e.reason}" if e.status == ERROR else f"{e.status:<8} {e.path}: {e.reason}"


def _print_entry(e: Entry) -> None:
    if not e.explicit:
        print(_text_line(e), flush=True)
    elif e.status == ERROR:
        print(f"error: {e.reason}", file=sys.stderr, flush=True)
    else:
        for r in e.reports:
            print(report_line(r), flush=True)
            for w in r.warnings:
                print(f"  warning: {w}", flush=True)


def report_line(r: Any) -> str:
    """One imported session: ``thread <- source [format]: N messages (…)``."""
    parts = [f"{r.messages} messages ({r.tool_calls} tool calls)", f"{r.compactions} recorded compactions", f"{r.requests} requests"]
    if r.already_stored:
        parts.append(f"{r.already_stored} already stored")
    if r.skipped:
        parts.append("skipped " + ", ".join(f"{k} {v}" for k, v in r.skipped.items()))
    return f"{r.thread} <- {r.source} [{r.format}]: " + "; ".join(parts)


def _measure_main(url: str) -> int:
    """The measuring process (``python -m engine.apps.cli.bulk_import URL``): the status of every thread
    key read from standard input (a JSON list per line), its figures written a batch at a time;
    at the end of the input, the keys it measured on standard output (one JSON list). Ctrl-C goes
    to the whole process group: the importing process decides when this one stops."""
    import json

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from ...core.errors import EngineError
    from ...service import open_service

    svc = open_service(url)
    measured: list[str] = []
    try:
        with svc.threads.deferred():
            for line in sys.stdin:
                for key in json.loads(line):
                    try:
                        svc.compaction.status(key)
                    except EngineError as exc:
                        log.debug("thread %r not measured after its import: %s", key, exc)
                    measured.append(key)
    finally:
        svc.close()
    sys.stdout.write(json.dumps(measured) + "\n")
    return 0


class Measurer:
    """Measures the threads a bulk import wrote in a process of its own, so this one goes on
    reading and writing files meanwhile (``svc.threads.deferred(measure=...)``). :meth:`close`
    waits until every key sent is measured; those that process did not confirm are measured here."""

    def __init__(self, svc: Any, url: str) -> None:
        import subprocess

        import engine

        self.svc = svc
        self.sent: list[str] = []
        env = dict(os.environ)
        root = str(Path(engine.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen([sys.executable, "-m", "engine.apps.cli.bulk_import", url], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, encoding="utf-8", env=env)

    def __call__(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        import json

        self.sent.extend(keys)
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps(list(keys)) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):  # gone: close() measures what it did not
            pass

    def close(self) -> None:
        import json

        measured: set[str] = set()
        try:
            out, _ = self.process.communicate()
            lines = (out or "").strip().splitlines()
            if self.process.returncode == 0 and lines:
                measured.update(json.loads(lines[-1]))
        except (OSError, ValueError) as exc:
            log.debug("the measuring process failed: %s", exc)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            left = [k for k in dict.fromkeys(self.sent) if k not in measured]
            if left:
                log.warning("the measuring process did not measure %d threads: measured here", len(left))
                self.svc.threads.remeasure(left, self.svc.compaction.status)


def _measurer(svc: Any, url: str | None, entries: Sequence[Entry]) -> Measurer | None:
    """A :class:`Measurer` for a bulk import of many files into a database another process can
    open (not an in-memory SQLite); None: the import measures in line."""
    if url is None or sum(1 for e in entries if e.status is None) < MEASURER_MIN_FILES:
        return None
    from ...store import normalize_url

    u = normalize_url(url)
    if u.get_backend_name() == "sqlite" and u.database in (None, "", ":memory:"):
        return None
    try:
        return Measurer(svc, url)
    except OSError as exc:
        log.debug("no measuring process (%s): measured in line", exc)
        return None


@contextmanager
def _stop_between_files() -> Iterator[Callable[[], None]]:
    """Ctrl-C during a bulk import stops it between two files: the file being imported finishes,
    its threads handed to the measuring, so no thread is left imported but never measured (a re-run
    skips an unchanged file and would not measure it either). Yields the check made before each
    file, which raises ``KeyboardInterrupt`` once Ctrl-C was pressed; a second Ctrl-C stops at once.
    Off the main thread (where no handler can be set) Ctrl-C keeps its default."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    pressed: list[int] = []

    def on_sigint(signum: int, _frame: object) -> None:
        if pressed:
            raise KeyboardInterrupt
        pressed.append(signum)

    def check() -> None:
        if pressed:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield check
    finally:
        signal.signal(signal.SIGINT, previous)


def import_entries(svc: Any, entries: Sequence[Entry], out: Any, *, thread: str | None = None, report_skipped: bool = True,
                   url: str | None = None) -> int:
    """Import ``entries`` in order into ``svc``, each reported as it is done (``out``: the command's
    :class:`~engine.apps.cli.output.Listing`), the progress line on standard error. A file that fails
    is an ``error`` entry and the run goes on; a failure of the database stops it (raised). Returns
    the exit code (1 when a file failed). ``url``: the database's, for the measuring process of
    a bulk import (:class:`Measurer`; without it each thread is measured here)."""
    from ...store import StoreError

    progress = Progress(len(entries))
    threads: set[str] = set()
    counts = {OK: 0, SKIPPED: 0, ERROR: 0, "unchanged": 0}
    imported: list[Any] = []
    errors: list[dict[str, Any]] = []
    out.tail.update(imported=imported, errors=errors, counts=counts)
    done = 0
    # each imported thread is measured (Service.imports.import_file): by the measuring process of a bulk
    # import, its figures written a batch at a time (svc.threads.deferred), all of them however the run ends
    measurer = _measurer(svc, url, entries)
    with ExitStack() as stack:
        if measurer is not None:
            stack.callback(measurer.close)
        stack.enter_context(svc.threads.deferred(measure=measurer))
        stop_here = stack.enter_context(_stop_between_files())
        try:
            for e in entries:
                stop_here()
                if e.status is None:
                    started = time.monotonic()
                    try:
                        e.reports = svc.imports.import_file(e.path, format=e.format, thread=thread)
                        e.status = OK
                    except StoreError:
                        raise  # the database, not the file: stop here
                    except Exception as exc:  # noqa: BLE001 - a bad file never stops the run; its reason in words
                        e.status = ERROR
                        e.code, message = describe_failure(exc)
                        e.reason = message if message.startswith(e.path) else f"{e.path}: {message}"
                        errors.append({"file": e.path, "code": e.code, "message": e.reason})
                    e.seconds = time.monotonic() - started
                    imported.extend(e.reports)
                    threads.update(r.thread for r in e.reports)
                counts[e.status] += 1
                counts["unchanged"] += e.reason == UNCHANGED
                done += 1
                out.item(e.to_json())
                if not out.json and (report_skipped or e.status != SKIPPED):
                    progress.clear()
                    _print_entry(e)
                progress.update(done, len(threads), counts[ERROR], counts[SKIPPED])
        finally:
            progress.clear()
            counts["threads"] = len(threads)
    return EXIT_FAILED if counts[ERROR] else EXIT_OK


def summary(counts: dict[str, int], total: int, next_after: str | None) -> str:
    """The closing line of the text report."""
    parts = [f"{counts[OK]:,} imported ({counts.get('threads', 0):,} thread{'s' if counts.get('threads', 0) != 1 else ''})"]
    if counts[SKIPPED]:
        parts.append(f"{counts[SKIPPED]:,} skipped ({counts['unchanged']:,} already imported and unchanged)")
    if counts[ERROR]:
        parts.append(f"{counts[ERROR]:,} error{'s' if counts[ERROR] != 1 else ''}")
    line = f"{total:,} file{'s' if total != 1 else ''}: " + ", ".join(parts)
    return line + (f"; more files: --after {next_after}" if next_after else "")


if __name__ == "__main__":  # the measuring process of a bulk import (Measurer)
    sys.exit(_measure_main(sys.argv[1]))
