# Over 500 lines: where sessions are, what they are, and the follower that imports them as they change share the location rules; split them only together.
"""Discovery: the sessions each supported tool keeps on this machine, and following them all.

**Where to look.** Every importer module may name the places its tool writes sessions by default,
as ``DEFAULT_LOCATIONS``: glob patterns relative to the home directory (``**`` for any depth), e.g.
Claude Code ``.claude/projects/*/*.jsonl``, Codex ``.codex/sessions/**/rollout-*.jsonl``. A pattern
may match files or folders (a session kept as a folder: OpenHands V1's conversation directory). An
optional ``DISCOVERY_SKIP`` (name or path globs) leaves out what is read with another session (a
Claude Code sub-agent's ``agent-*.jsonl``), and an optional ``discovery_parent(path)`` names that
session, so that following imports it when the sub-agent's file grows. The constants are collected with ``getattr`` from every
module of :mod:`engine.importers`, so a format added later is discovered without a change here.
Besides those, any folder the user adds is searched (depth-first, a folder that is a session not
entered) and each file or folder whose content :func:`engine.importers.detect_format` recognizes is
a session.

**What is listed** (:class:`DiscoveredSession`): tool (the format), path, project (the ``cwd`` the
session recorded near its start, else ``None``), size, last activity (the newest modification time),
and whether it is already imported, compared with the imported threads' source files
(``Store.imported_sources``), and changed on disk since.

**Following them all** (:class:`SessionFollower`): a file watcher (``watchfiles``: the Rust
``notify`` backend, inotify / FSEvents / ReadDirectoryChangesW, with a polling fallback) on the
folders where those patterns start and on the added folders. Changes are debounced (grouped until
50 ms pass without one, at most ``debounce_ms``), each changed session is imported as a file still
being written (``final=False``: a half-written last line waits for its newline), idempotently by
source keys, on the watcher's own thread. A file rewritten or truncated is simply read again: the
keys already stored add nothing, an empty or half-written document is reported and retried on the
next change. A folder that does not exist yet (a tool installed later) is watched once it appears,
and the sessions written there since the follower started are imported then.
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import logging
import os
import pkgutil
import re
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from . import importers
from .importers import FORMATS, detect_format
from .importing import ImportReport, import_path

__all__ = ["DiscoveredSession", "Location", "SessionFollower", "default_locations", "discover", "session_for"]

log = logging.getLogger(__name__)

#: folders never entered when searching an added folder (version control, environments, caches)
IGNORED_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", ".mypy_cache",
                          ".pytest_cache", ".tox", ".idea", ".cache"})
#: at most this many entries are looked at in one added folder (a folder of a million files is not a session store)
FOLDER_SCAN_LIMIT = 20_000
#: the first bytes of a session read for its project (the ``cwd`` it recorded)
_HEAD_BYTES = 128 * 1024
_PROJECT_KEYS = ("cwd", "working_dir", "workspace", "directory")
_PROJECT_RE = re.compile(r'"(?:' + "|".join(_PROJECT_KEYS) + r')"\s*:\s*("(?:[^"\\]|\\.)*")')
#: a session modified this long after its thread was last written counts as changed since import
_CHANGED_SLACK = timedelta(seconds=2)


@dataclass(frozen=True, slots=True)
class Location:
    """Where one tool keeps sessions: a glob ``pattern`` relative to ``base`` (the home directory,
    or a folder the user added, then with ``tool`` None: detected from the content)."""

    tool: str | None
    pattern: str
    base: Path
    skip: tuple[str, ...] = ()
    #: the importer's ``discovery_parent(path)``: the session a skipped file is read with (a sub-agent's)
    parent: Callable[[Path], "Path | None"] | None = None

    def parent_of(self, path: Path) -> Path | None:
        """The session ``path`` is read with, when the importer says (and it is one of this location's)."""
        if self.parent is None or not (self.root == path or self.root in path.parents):
            return None
        try:
            found = self.parent(path)
        except Exception:  # noqa: BLE001 - a file that says nothing useful is no session's
            return None
        return found if found is not None and found.exists() and self.matches(found) else None

    @property
    def root(self) -> Path:
        """The folder where the pattern starts (its components before the first wildcard)."""
        parts: list[str] = []
        for part in Path(self.pattern).parts:
            if any(c in part for c in "*?["):
                break
            parts.append(part)
        return self.base.joinpath(*parts)

    @property
    def user(self) -> bool:
        return self.tool is None

    def matches(self, path: Path) -> bool:
        """``path`` (under :attr:`base`) is what the pattern names (and not skipped)."""
        try:
            rel = path.relative_to(self.base).as_posix()
        except ValueError:
            return False
        return _regex(self.pattern).fullmatch(rel) is not None and not _skipped(path, self.skip)


@dataclass(frozen=True, slots=True)
class DiscoveredSession:
    """One session found on the machine."""

    tool: str  # the format (``claude-code``, ``codex``, …): engine.core.views.SOURCE_NAMES names the tool
    path: str  # absolute
    project: str | None  # the working directory the session recorded, when it did
    size: int  # bytes (a folder: all its files)
    modified: datetime  # last activity: the newest modification time (UTC)
    folder: bool = False  # a session kept as a folder
    found_by: str = ""  # the default location's pattern (``~/…``), or the added folder
    threads: tuple[str, ...] = ()  # the threads imported from it (empty: not imported)
    imported_at: datetime | None = None  # when those threads were last written

    @property
    def imported(self) -> bool:
        return bool(self.threads)

    @property
    def changed_since_import(self) -> bool:
        """Imported, and modified on disk after its threads were last written (grown since)."""
        return self.imported_at is not None and self.modified > self.imported_at + _CHANGED_SLACK

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool, "path": self.path, "project": self.project, "size": self.size,
            "modified": self.modified.isoformat(), "folder": self.folder, "found_by": self.found_by,
            "imported": self.imported, "threads": list(self.threads),
            "imported_at": self.imported_at.isoformat() if self.imported_at else None,
            "changed_since_import": self.changed_since_import,
        }


# -- where ---------------------------------------------------------------------------------------


def _importer_modules() -> list[Any]:
    """Every module of :mod:`engine.importers` (the parsers' modules first), imported."""
    mods: dict[str, Any] = {}
    for parser in FORMATS.values():
        mod = importlib.import_module(parser.__module__)
        mods.setdefault(mod.__name__, mod)
    for info in pkgutil.iter_modules(importers.__path__):
        name = f"{importers.__name__}.{info.name}"
        if name in mods or info.name.startswith("_"):
            continue
        try:
            mods[name] = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - one broken module must not hide the others' sessions
            log.warning("discovery: cannot import %s", name, exc_info=True)
    return list(mods.values())


def default_locations(home: str | os.PathLike[str] | None = None) -> list[Location]:
    """The documented default locations of every importer module that names them
    (``DEFAULT_LOCATIONS``), under ``home`` (default: the user's home directory)."""
    base = Path(home).expanduser() if home is not None else Path.home()
    out: list[Location] = []
    for mod in _importer_modules():
        patterns = getattr(mod, "DEFAULT_LOCATIONS", None) or ()
        if isinstance(patterns, str):
            patterns = (patterns,)
        tool = getattr(mod, "FORMAT", None) or mod.__name__.rsplit(".", 1)[-1].replace("_", "-")
        skip = tuple(getattr(mod, "DISCOVERY_SKIP", ()) or ())
        parent = getattr(mod, "discovery_parent", None)
        for pattern in patterns:
            if isinstance(pattern, str) and pattern.strip():
                out.append(Location(str(tool), pattern.strip().lstrip("/").removeprefix("~/"), base, skip,
                                    parent if callable(parent) else None))
    return out


def folder_locations(folders: Iterable[str | os.PathLike[str]]) -> list[Location]:
    """Each folder the user added, as a location searched by content."""
    seen: set[Path] = set()
    out: list[Location] = []
    for f in folders:
        p = Path(f).expanduser().absolute()
        if p not in seen:
            seen.add(p)
            out.append(Location(None, "**", p))
    return out


_REGEX_CACHE: dict[str, re.Pattern[str]] = {}


def _regex(pattern: str) -> re.Pattern[str]:
    """A glob ``pattern`` (``*`` within a name, ``**`` any number of folders) as a regular expression
    over a POSIX relative path."""
    found = _REGEX_CACHE.get(pattern)
    if found is not None:
        return found
    out: list[str] = []
    parts = pattern.strip("/").split("/")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
            continue
        out.append(_part_regex(part))
        if not last:
            out.append("/")
    found = re.compile("".join(out))
    _REGEX_CACHE[pattern] = found
    return found


def _part_regex(part: str) -> str:
    """One path component's glob (``*``, ``?``, ``[…]``) as a regular expression that never crosses ``/``."""
    out: list[str] = []
    i = 0
    while i < len(part):
        c = part[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and "]" in part[i + 1:]:
            end = part.index("]", i + 1)
            body = part[i + 1:end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _skipped(path: Path, skip: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(path.name, s) or fnmatch.fnmatch(path.as_posix(), s) for s in skip)


# -- what ----------------------------------------------------------------------------------------


def _files(path: Path) -> Iterator[os.stat_result]:
    if path.is_dir():
        for dirpath, _dirs, names in os.walk(path):
            for n in names:
                try:
                    yield os.stat(os.path.join(dirpath, n))
                except OSError:
                    continue
    else:
        yield path.stat()


def _project(path: Path) -> str | None:
    """The working directory a session recorded near its start (``cwd`` …), else None."""
    candidates = [path] if path.is_file() else sorted(
        (p for p in path.iterdir() if p.is_file() and p.suffix in (".json", ".jsonl")), key=lambda p: p.stat().st_size)[:3]
    for c in candidates:
        try:
            with c.open("rb") as fh:
                head = fh.read(_HEAD_BYTES).decode("utf-8", errors="replace")
        except OSError:
            continue
        m = _PROJECT_RE.search(head)
        if m:
            try:
                value = json.loads(m.group(1))
            except ValueError:
                continue
            if isinstance(value, str) and value.strip():
                return value.strip()
    return None


def describe(path: Path, tool: str, found_by: str = "") -> DiscoveredSession | None:
    """A session on disk as listed (None when it vanished meanwhile)."""
    try:
        stats = list(_files(path))
        project = _project(path)
    except OSError:
        return None
    if not stats and not path.exists():
        return None
    newest = max((s.st_mtime for s in stats), default=path.stat().st_mtime)
    return DiscoveredSession(
        tool=tool, path=str(path), project=project, size=sum(s.st_size for s in stats),
        modified=datetime.fromtimestamp(newest, tz=UTC), folder=path.is_dir(), found_by=found_by,
    )


def _scan_folder(folder: Path, limit: int = FOLDER_SCAN_LIMIT) -> Iterator[tuple[Path, str]]:
    """(session path, format) of each session in an added folder, recognized by its content."""
    if not folder.is_dir():
        if folder.is_file():
            fmt = detect_format(folder)
            if fmt:
                yield folder, fmt
        return
    seen = 0
    for dirpath, dirs, names in os.walk(folder):
        d = Path(dirpath)
        dirs[:] = sorted(x for x in dirs if x not in IGNORED_DIRS)
        fmt = detect_format(d)
        if fmt:
            dirs[:] = []  # a session kept as a folder: its files are its own
            yield d, fmt
            continue
        for n in sorted(names):
            seen += 1
            if seen > limit:
                log.warning("discovery: stopped after %d entries in %s", limit, folder)
                return
            p = d / n
            if n.startswith(".") and not n.endswith((".md", ".json", ".jsonl")):
                continue
            fmt = detect_format(p)
            if fmt and not _skipped(p, _skip_for(fmt)):
                yield p, fmt


def _skip_for(fmt: str) -> tuple[str, ...]:
    for mod in _importer_modules():
        if getattr(mod, "FORMAT", None) == fmt:
            return tuple(getattr(mod, "DISCOVERY_SKIP", ()) or ())
    return ()


def _norm(path: str) -> str:
    return os.path.normcase(os.path.realpath(os.path.expanduser(path)))


def _mark(found: list[DiscoveredSession],
          imported: Iterable[tuple[str, str, datetime | None]]) -> list[DiscoveredSession]:
    by_path: dict[str, tuple[list[str], datetime | None]] = {}
    for source, key, written in imported:
        keys, newest = by_path.setdefault(_norm(source), ([], None))
        keys.append(key)
        if written is not None and (newest is None or written > newest):
            by_path[_norm(source)] = (keys, written)
    out = []
    for s in found:
        norm = _norm(s.path)
        hit = by_path.get(norm)
        if hit is None and s.folder:  # a folder session may be recorded by one of its files
            hit = next((v for k, v in by_path.items() if os.path.dirname(k) == norm), None)
        if hit is not None:
            from dataclasses import replace

            s = replace(s, threads=tuple(sorted(set(hit[0]))), imported_at=hit[1])
        out.append(s)
    return out


def discover(
    folders: Iterable[str | os.PathLike[str]] = (),
    *,
    home: str | os.PathLike[str] | None = None,
    imported: Iterable[tuple[str, str, datetime | None]] = (),
    locations: Sequence[Location] | None = None,
) -> list[DiscoveredSession]:
    """The sessions in the default locations under ``home`` and in ``folders``, newest first,
    each once; ``imported`` (``Store.imported_sources``) marks those already imported."""
    locs = list(locations) if locations is not None else default_locations(home)
    found: list[DiscoveredSession] = []
    seen: set[str] = set()

    def add(p: Path, tool: str, by: str) -> None:
        norm = _norm(str(p))
        if norm in seen:
            return
        seen.add(norm)
        d = describe(p, tool, by)
        if d is not None:
            found.append(d)

    for loc in locs:
        if loc.user:
            continue
        try:
            matches = sorted(loc.base.glob(loc.pattern))
        except (OSError, ValueError):
            continue
        for p in matches:
            if not _skipped(p, loc.skip):
                add(p.absolute(), loc.tool or "?", f"~/{loc.pattern}")
    for loc in [*(x for x in locs if x.user), *folder_locations(folders)]:
        for p, fmt in _scan_folder(loc.base):
            add(p, fmt, str(loc.base))
    found = _mark(found, imported)
    found.sort(key=lambda s: (s.modified, s.path), reverse=True)
    return found


def session_for(path: Path, locations: Sequence[Location]) -> tuple[Path, str | None] | None:
    """The session a changed ``path`` belongs to, and its format (None: detect it), or None when
    it is part of no session any location names."""
    if path.name.endswith("-wal") and path.with_name(path.name[:-4]).is_file():
        path = path.with_name(path.name[:-4])  # a SQLite database in WAL mode grows in its -wal file
    for loc in locations:
        if loc.user:
            try:
                path.relative_to(loc.base)
            except ValueError:
                continue
            for parent in [a for a in path.parents if a == loc.base or loc.base in a.parents]:
                if any(part in IGNORED_DIRS for part in parent.relative_to(loc.base).parts):
                    return None
                if parent.is_dir() and detect_format(parent) is not None:
                    return parent, None
            if path.is_file():
                fmt = detect_format(path)
                if fmt is not None and not _skipped(path, _skip_for(fmt)):
                    return path, fmt
            continue
        if loc.matches(path):
            return path, loc.tool
        for parent in path.parents:
            if parent == loc.base or loc.base not in parent.parents:
                break
            if loc.matches(parent):
                return parent, loc.tool
        main = loc.parent_of(path)  # a sub-agent's file: its main session
        if main is not None:
            return main, loc.tool
    return None


# -- following them all ---------------------------------------------------------------------------


Writer = Callable[[Path, "str | None"], list[ImportReport]]


class SessionFollower:
    """Imports new and growing sessions under the default locations and the added folders as they
    change, on a thread of its own (:meth:`start` / :meth:`stop`).

    ``write(path, format)`` imports one session (``Service.imports.follow_sessions`` passes the store's
    import as a file still being written). ``on_reports(reports)`` is called (on the watcher's
    thread) after each change that wrote something, ``on_error(path, exc)`` when a session could not
    be read (it is tried again on its next change). ``debounce_ms``: the longest a burst of changes
    is grouped before it is imported. A pattern that starts at the home directory itself is polled
    (checked every second, globbed again every :attr:`POLL_GLOB_S`), never watched recursively."""

    #: seconds between two globs of the polled patterns (new files there are seen this late at most)
    POLL_GLOB_S = 10.0

    def __init__(
        self,
        write: Writer,
        *,
        folders: Iterable[str | os.PathLike[str]] = (),
        home: str | os.PathLike[str] | None = None,
        locations: Sequence[Location] | None = None,
        on_reports: Callable[[list[ImportReport]], None] | None = None,
        on_error: Callable[[str, BaseException], None] | None = None,
        debounce_ms: int = 400,
        force_polling: bool | None = None,
    ) -> None:
        base = list(locations) if locations is not None else default_locations(home)
        self.locations: list[Location] = [*base, *folder_locations(folders)]
        self._write = write
        self._on_reports = on_reports
        self._on_error = on_error
        self.debounce_ms = max(50, int(debounce_ms))
        self.force_polling = force_polling
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_at = time.time()
        #: the folders watched now (where the patterns start, and the added folders, that exist)
        self.watched: tuple[Path, ...] = ()
        #: sessions imported, in order (path, threads written): what the follower has done
        self.imported: list[tuple[str, tuple[str, ...]]] = []
        self.errors: list[tuple[str, str]] = []
        self._ready = threading.Event()
        self._globbed_at = float("-inf")
        self._poll_paths: set[Path] = set()
        self._poll_state: dict[Path, tuple[int, int]] | None = None

    # -- lifecycle
    def start(self) -> "SessionFollower":
        if self._thread is not None:
            return self
        self._started_at = time.time()
        self._thread = threading.Thread(target=self._run, name="compaction-follow-all", daemon=True)
        self._thread.start()
        self._ready.wait(5.0)  # the watches are in place when start returns
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def wait(self, seconds: float | None = None) -> None:
        """Block until stopped (or ``seconds`` passed): the CLI's ``discover --follow``."""
        if self._thread is not None:
            self._thread.join(seconds)

    # -- the watcher
    def _polled(self, loc: Location) -> bool:
        """A pattern that starts at the home directory itself (``*/.aider.chat.history.md``) or names
        one file: never a recursive watch of the whole home; its matches are polled instead."""
        return not loc.user and (loc.root == loc.base or not any(c in loc.pattern for c in "*?["))

    def _roots(self) -> tuple[Path, ...]:
        roots: list[Path] = []
        for loc in self.locations:
            if self._polled(loc):
                continue
            r = loc.root if not loc.user else loc.base
            if r.is_dir() and not any(r == x or x in r.parents for x in roots):
                roots = [x for x in roots if r not in x.parents] + [r]
        return tuple(sorted(roots))

    def _poll(self) -> None:
        """The polled patterns' matches (globbed again every :attr:`POLL_GLOB_S`, checked each second):
        those that changed since the last look are imported."""
        polled = [loc for loc in self.locations if self._polled(loc)]
        if not polled:
            return
        now = time.monotonic()
        if now - self._globbed_at >= self.POLL_GLOB_S:
            self._globbed_at = now
            paths: set[Path] = set()
            for loc in polled:
                try:
                    paths.update(p for p in loc.base.glob(loc.pattern) if not _skipped(p, loc.skip))
                except (OSError, ValueError):
                    continue
            self._poll_paths = paths
        changed: list[Path] = []
        first = self._poll_state is None
        state: dict[Path, tuple[int, int]] = {}
        for p in self._poll_paths:
            try:
                st = p.stat()
            except OSError:
                continue
            state[p] = (st.st_size, st.st_mtime_ns)
            before = None if first else (self._poll_state or {}).get(p)
            if not first and state[p] != before and (before is not None or st.st_mtime >= self._started_at - 1):
                changed.append(p)
        self._poll_state = state
        if changed:
            self.handle(changed)

    def _relevant(self, _change: object, raw: str) -> bool:
        path = Path(raw)
        if any(part in IGNORED_DIRS for part in path.parts):
            return False
        for loc in self.locations:
            if loc.user:
                if loc.base == path or loc.base in path.parents:
                    return True
                continue
            if loc.matches(path) or any(loc.matches(a) for a in path.parents if loc.base in a.parents):
                return True
            if loc.parent is not None and loc.parent_of(path) is not None:
                return True
            if loc.root == path or loc.root in path.parents:  # a new folder on the way (a new project, a new day)
                try:
                    if path.is_dir():
                        return True
                except OSError:
                    pass
        return False

    def _run(self) -> None:
        import watchfiles

        first = True
        try:
            self._poll()  # the polled patterns' state as it is now: changes after it are imported
            while not self._stop.is_set():
                roots = self._roots()
                new_roots = [r for r in roots if r not in self.watched]
                self.watched = roots
                if not first and new_roots:  # appeared while we waited: what was written there since the start
                    self._catch_up(new_roots)
                first = False
                if not roots:
                    self._poll()
                    self._ready.set()
                    self._stop.wait(1.0)
                    continue
                for changes in watchfiles.watch(
                    *roots, watch_filter=self._relevant, debounce=self.debounce_ms, step=50, stop_event=self._stop,
                    rust_timeout=1000, yield_on_timeout=True, raise_interrupt=False, force_polling=self.force_polling,
                    ignore_permission_denied=True,
                ):
                    self._ready.set()
                    if changes:
                        self.handle(Path(p) for _c, p in changes)
                    self._poll()
                    if self._roots() != roots:  # a watched folder appeared or went away: watch again
                        break
        except Exception as exc:  # noqa: BLE001 - the follower reports and ends, never takes the process down
            log.warning("follow all stopped", exc_info=True)
            self.errors.append(("", str(exc)))
            if self._on_error is not None:
                self._on_error("", exc)
        finally:
            self._ready.set()

    def _catch_up(self, roots: Sequence[Path]) -> None:
        paths: list[Path] = []
        for r in roots:
            for dirpath, dirs, names in os.walk(r):
                dirs[:] = [d for d in dirs if d not in IGNORED_DIRS]
                for n in names:
                    p = Path(dirpath) / n
                    try:
                        if p.stat().st_mtime >= self._started_at - 1:
                            paths.append(p)
                    except OSError:
                        continue
        self.handle(paths)

    def handle(self, paths: Iterable[Path]) -> list[ImportReport]:
        """Import the sessions the changed ``paths`` belong to (each once); the reports that wrote something."""
        sessions: dict[Path, str | None] = {}
        for p in paths:
            try:
                if p.is_dir():  # a folder that appeared: what is already in it (written before its watch was set)
                    for q in sorted(p.rglob("*")):
                        hit = session_for(q, self.locations)
                        if hit is not None:
                            sessions.setdefault(*hit)
                    hit = session_for(p, self.locations)
                elif p.exists():
                    hit = session_for(p, self.locations)
                else:
                    continue  # deleted
            except OSError:
                continue
            if hit is not None:
                sessions.setdefault(*hit)
        wrote: list[ImportReport] = []
        for path, fmt in sessions.items():
            if self._stop.is_set():
                break
            try:
                if path.is_file() and path.stat().st_size == 0:
                    continue  # truncated (being rewritten): read on its next change
                reports = self._write(path, fmt)
            except FileNotFoundError:
                continue
            except Exception as exc:  # noqa: BLE001 - reported; tried again on the next change
                message = getattr(exc, "message", None) or str(exc)
                self.errors.append((str(path), message))
                if self._on_error is not None:
                    self._on_error(str(path), exc)
                continue
            done = [r for r in reports if r.messages or r.compactions or r.requests or r.created]
            if done:
                self.imported.append((str(path), tuple(r.thread for r in done)))
                wrote.extend(done)
        if wrote and self._on_reports is not None:
            self._on_reports(wrote)
        return wrote


def store_writer(store: Any) -> Writer:
    """``write(path, format)`` for :class:`SessionFollower`: one session imported into ``store`` as a
    file still being written (idempotent by source keys)."""

    def write(path: Path, fmt: str | None) -> list[ImportReport]:
        return import_path(store, path, format=fmt, final=False)

    return write


def imported_map(sessions: Sequence[DiscoveredSession]) -> Mapping[str, tuple[str, ...]]:
    """Path → threads of the sessions already imported (what the panel and the CLI show)."""
    return {s.path: s.threads for s in sessions if s.threads}
