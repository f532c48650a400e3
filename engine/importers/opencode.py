"""``opencode``: opencode's storage folder (``~/.local/share/opencode/storage``), one JSON file per
session, message and part.

Layouts read:

- current: ``session/<project id>/<ses_…>.json`` (the session: ``{id, projectID, directory,
  parentID?, title, version, time {created, updated, compacting?}}``), ``message/<ses_…>/<msg_…>.json``
  and ``part/<msg_…>/<prt_…>.json``;
- older: ``session/info/<ses_…>.json``, ``session/message/<ses_…>/<msg_…>.json``,
  ``session/part/<ses_…>/<msg_…>/<prt_…>.json``.

Newer versions keep one SQLite database instead (``~/.local/share/opencode/opencode.db``): tables
``session`` (columns ``id``, ``project_id``, ``parent_id``, ``directory``, ``title``, ``version``,
``time_created``, ``time_updated``, ``time_compacting``, …), ``message`` and ``part`` (``id``,
``session_id`` / ``message_id``, ``time_created``, ``data``: the JSON below without its ids). It is a
database format (:data:`DATABASE`): read read-only by :mod:`engine.store.foreign`, its rows handed to
:func:`parse` as ``tables``; the same keys, so the same threads as from the files.

Ids sort in creation order (``ses_`` / ``msg_`` / ``prt_`` + time); times are epoch milliseconds.
A message is ``{id, sessionID, role: user | assistant, time {created, completed?}}``; an assistant's
also ``modelID``, ``providerID``, ``parentID`` (the user message it answers), ``cost``, ``tokens
{input, output, reasoning, cache {read, write}}``, ``error?``, ``summary?`` (true: a compaction's
summary), ``path {cwd, root}``. Parts: ``text`` (``synthetic`` when opencode wrote it), ``reasoning``,
``tool {callID, tool, state {status: pending | running | completed | error, input, output, error,
title, time {start, end, compacted?}}}``, ``file {mime, filename, url}``, ``step-start``,
``step-finish {tokens, cost}``, ``compaction {auto}``, ``snapshot`` / ``patch`` / ``agent`` /
``subtask`` / ``retry``.

Mapping: a session is a thread ``opencode:<ses id>`` (a sub-agent session, ``parentID`` set, is keyed
under its parent), titled with its ``title``, ``cwd`` = ``directory``. A user message → a user message
(text and file parts; ``synthetic`` text stays: the model saw it). An assistant message is split at
its ``step-start`` parts: each step (one model request) → an assistant message with its text,
reasoning and tool calls, then each call's result (``completed``: ``output``; ``error``: the error,
``is_error``; ``pending`` / ``running``: none, so the repair marks it), and the step's
``step-finish`` ``tokens`` → a usage record (prompt = input + cache read + cache write); without step
parts the message's own ``tokens``. ``snapshot`` / ``patch`` / ``step-*`` parts carry no conversation
(``skipped``).

opencode's own compactions (recorded compactions, never messages):

- **compaction**: a user message holding a ``compaction`` part (``auto``: trigger ``auto``, else
  ``manual``) answered by an assistant message with ``summary: true`` (older versions wrote the
  summary message alone: trigger not recorded): that assistant's text is the
  summary, it replaced the messages since the previous compaction (a ``tail_start_id`` keeps the
  recent tail), ``tokens_before`` = the context the last response before it reported (input + cache +
  output). Its own tokens and cost go to the compaction's details.
- **prune**: tool parts whose ``state.time.compacted`` is set had their output replaced by "[Old tool
  result content cleared]" in later requests (the file keeps the output): each prune pass (compacted
  times within a few seconds) is a recorded compaction of kind ``prune`` naming those calls.

Source keys: the message id (a step ``<msg id>#<n>``, a result ``<msg id>:<call id>``); the source
of a session is its session file (what discovery lists). The files are only read.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping

from ._common import SessionBuilder, Source, as_int, as_json_text, as_map, image_from_url, iso_from_ms, str_or_none
from .agents_sdk import SQLITE_MAGIC, DatabaseFormat
from .model import (
    DocumentPart,
    ImportedMessage,
    ImportedSession,
    ImportedToolCall,
    ImportFormatError,
    Part,
    ReasoningPart,
    TextPart,
    UsageRecord,
)

FORMAT = "opencode"

#: opencode keeps its data under the XDG data folder on every OS (``xdg-basedir``): the session files
#: (``session/<project>/ses_*.json``; older ``session/info/ses_*.json``), written as ``*/*/`` so that a
#: watcher starts at the storage folder and sees the message and part files change too
DEFAULT_LOCATIONS: list[str] = [
    ".local/share/opencode/storage/*/*/ses_*.json",
    ".local/share/opencode/opencode*.db",  # newer versions: one SQLite database (per channel)
]
#: older storages kept share links as ``session/share/ses_*.json``: not sessions
DISCOVERY_SKIP: tuple[str, ...] = ("*/session/share/*",)

PRUNED_TEXT = "[Old tool result content cleared]"
#: what a prune's card says (the model was sent PRUNED_TEXT in place of each cleared output)
PRUNE_NOTE = "opencode cleared the output of {n} tool call{s}: from then on each was sent as \"" + PRUNED_TEXT + "\""
_PRUNE_PASS_MS = 5000
_QUIET_PARTS = {"step-start", "step-finish", "snapshot", "patch", "compaction"}


# -- the storage layout --------------------------------------------------------------------------
class Storage:
    """Where a storage folder keeps sessions, messages and parts (current or older layout)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.old = (root / "session" / "info").is_dir() and not (root / "message").is_dir()

    def session_files(self) -> list[Path]:
        base = self.root / "session"
        if self.old:
            return sorted((base / "info").glob("ses_*.json"))
        return sorted(p for p in base.glob("*/ses_*.json"))

    def message_files(self, sid: str) -> list[Path]:
        base = self.root / "session" / "message" / sid if self.old else self.root / "message" / sid
        return sorted(base.glob("msg_*.json"), key=lambda p: p.stem)

    def part_files(self, sid: str, mid: str) -> list[Path]:
        base = self.root / "session" / "part" / sid / mid if self.old else self.root / "part" / mid
        return sorted(base.glob("prt_*.json"), key=lambda p: p.stem)

    def session_file(self, sid: str) -> Path | None:
        return next((p for p in self.session_files() if p.stem == sid), None)


def _is_root(p: Path) -> bool:
    return (p / "session").is_dir() and ((p / "message").is_dir() or (p / "session" / "info").is_dir())


def storage_root(path: Path) -> Path | None:
    """The storage folder ``path`` is in (or is, or holds as ``storage/``)."""
    if path.is_dir() and (path / "storage").is_dir() and _is_root(path / "storage"):
        return path / "storage"
    for p in [path, *path.parents][:6]:
        if p.is_dir() and _is_root(p):
            return p
    return None


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None


def looks_like_path(path: Path) -> bool:
    """A storage folder, or a session / message / part file inside one."""
    root = storage_root(path)
    if root is None:
        return False
    if path.is_dir():
        return True
    data = _read(path) if path.suffix == ".json" else None
    return isinstance(data, Mapping) and isinstance(data.get("id"), str) and data["id"].startswith(("ses_", "msg_", "prt_"))


def _session_ids(path: Path, root: Path) -> list[str]:
    """Which sessions ``path`` names: the whole storage, one session file, or a message / part's."""
    st = Storage(root)
    if path.is_dir():
        if path.name.startswith("ses_"):
            return [path.name]  # a session's message folder
        return [p.stem for p in st.session_files()]
    data = _read(path)
    if not isinstance(data, Mapping):
        raise ImportFormatError(f"{path}: not an opencode session, message or part file (not JSON)")
    ident = str(data.get("id") or "")
    if ident.startswith("ses_"):
        return [ident]
    sid = str_or_none(data.get("sessionID"))
    if sid:
        return [sid]
    raise ImportFormatError(f"{path}: an opencode file without a session id")


def discovery_parent(path: Path) -> Path | None:
    """The session file a message or part file belongs to (for discovery's follow all)."""
    root = storage_root(path)
    if root is None or path.suffix != ".json":
        return None
    sid = path.parent.name if path.parent.name.startswith("ses_") else None
    if sid is None:
        data = _read(path)
        sid = str_or_none(data.get("sessionID")) if isinstance(data, Mapping) else None
    return Storage(root).session_file(sid) if sid else None


# -- parsing -------------------------------------------------------------------------------------
def parse(source: Source, *, final: bool = True, tables: Any = None) -> list[ImportedSession]:
    if tables is not None:  # the database (``opencode.db``), read read-only by the caller
        return _parse_database(source, tables, final=final)
    if source.path is None:
        raise ImportFormatError(f"{source.name}: opencode sessions are read from their storage folder, not from text")
    root = storage_root(source.path)
    if root is None:
        raise ImportFormatError(f"{source.name}: not in an opencode storage folder (session/, message/, part/)")
    st = Storage(root)
    out = [_session(st, sid, final=final) for sid in _session_ids(source.path, root)]
    if not out:
        raise ImportFormatError(f"{source.name}: no opencode session in it")
    return out


def _time(obj: Mapping[str, Any], key: str = "created") -> Any:
    t = obj.get("time")
    return t.get(key) if isinstance(t, Mapping) else None


def _session(st: Storage, sid: str, *, final: bool) -> ImportedSession:
    info_path = st.session_file(sid)
    src = Source(str(info_path) if info_path is not None else str(st.root / sid), path=info_path)
    b = SessionBuilder(FORMAT, src)
    info: Mapping[str, Any] = {}
    if info_path is not None:
        data = _read(info_path)
        if isinstance(data, Mapping):
            info = data
        else:
            b.warn(f"{info_path.name}: not JSON (being written?); the session's facts are not read")
    else:
        b.warn(f"no session file for {sid}; its messages are read without it")
    messages: list[tuple[Mapping[str, Any], list[Mapping[str, Any]]]] = []
    for mp in st.message_files(sid):
        m = _read(mp)
        if not isinstance(m, Mapping) or m.get("role") not in ("user", "assistant"):
            b.warn(f"{mp.name}: not a message (unreadable JSON or no role); skipped")
            continue
        parts: list[Mapping[str, Any]] = []
        for pp in st.part_files(sid, str(m.get("id") or mp.stem)):
            p = _read(pp)
            if isinstance(p, Mapping) and isinstance(p.get("type"), str):
                parts.append(p)
            else:
                b.warn(f"{pp.name}: not a part (unreadable JSON or no type); skipped")
        messages.append((m, parts))
    return _build(b, sid, info, messages, final=final)


def _build(b: SessionBuilder, sid: str, info: Mapping[str, Any],
           messages: list[tuple[Mapping[str, Any], list[Mapping[str, Any]]]], *, final: bool) -> ImportedSession:
    _Reader(b).read(messages)
    model = next((str_or_none(m.get("modelID")) for m, _ in reversed(messages) if m.get("role") == "assistant"
                  and m.get("modelID")), None)
    extra = {k: info.get(k) for k in ("projectID", "version") if info.get(k)}
    return b.build(final=final, source_session_id=sid, parent_session_id=str_or_none(info.get("parentID")),
                   title=str_or_none(info.get("title")), cwd=str_or_none(info.get("directory")), model=model, extra=extra)


# -- the database (newer versions) ---------------------------------------------------------------
def looks_like_database(head: bytes) -> bool:
    """A SQLite file whose schema has opencode's ``session`` / ``message`` / ``part`` tables (a
    ``part`` row names its ``message_id``; the ``session`` table has ``time_compacting``)."""
    return head.startswith(SQLITE_MAGIC) and b"time_compacting" in head and b"message_id" in head and b"session_id" in head


def pick(schema: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[tuple[str, ...], str | None]]:
    out: dict[str, tuple[tuple[str, ...], str | None]] = {}
    if "session" in schema:
        out["session"] = (("id", "project_id", "parent_id", "directory", "title", "version", "time_created",
                           "time_updated", "time_compacting"), "time_created")
    if "message" in schema:
        out["message"] = (("id", "session_id", "time_created", "data"), "id")
    if "part" in schema:
        out["part"] = (("id", "message_id", "session_id", "time_created", "data"), "id")
    return out


def _row_json(b: SessionBuilder, row: Mapping[str, Any], what: str) -> dict[str, Any] | None:
    data = row.get("data")
    try:
        value = json.loads(data) if isinstance(data, (str, bytes)) else data
    except ValueError:
        value = None
    if not isinstance(value, Mapping):
        b.warn(f"{what} {row.get('id')}: its data is not a JSON object; skipped")
        return None
    return dict(value)


def _parse_database(source: Source, tables: Mapping[str, list[Mapping[str, Any]]], *, final: bool) -> list[ImportedSession]:
    if not any(tables.get(t) for t in ("session", "message")):
        raise ImportFormatError(f"{source.name}: an opencode database with no sessions")
    parts_of: dict[str, list[Mapping[str, Any]]] = {}
    for r in tables.get("part") or []:
        parts_of.setdefault(str(r.get("message_id")), []).append(r)
    msgs_of: dict[str, list[Mapping[str, Any]]] = {}
    for r in tables.get("message") or []:
        msgs_of.setdefault(str(r.get("session_id")), []).append(r)
    sessions = {str(r.get("id")): r for r in tables.get("session") or []}
    out: list[ImportedSession] = []
    for sid in [*sessions, *(k for k in msgs_of if k not in sessions)]:
        b = SessionBuilder(FORMAT, source)
        row = sessions.get(sid, {})
        info = {"id": sid, "projectID": row.get("project_id"), "parentID": row.get("parent_id"),
                "directory": row.get("directory"), "title": row.get("title"), "version": row.get("version")}
        messages: list[tuple[Mapping[str, Any], list[Mapping[str, Any]]]] = []
        for mr in msgs_of.get(sid, []):
            m = _row_json(b, mr, "message")
            if m is None:
                continue
            m = {**m, "id": str(mr.get("id")), "sessionID": sid}
            if not isinstance(m.get("time"), Mapping) and mr.get("time_created") is not None:
                m["time"] = {"created": mr.get("time_created")}
            if m.get("role") not in ("user", "assistant"):
                b.warn(f"message {m['id']}: no role; skipped")
                continue
            parts: list[Mapping[str, Any]] = []
            for pr in parts_of.get(m["id"], []):
                p = _row_json(b, pr, "part")
                if p is not None and isinstance(p.get("type"), str):
                    parts.append({**p, "id": str(pr.get("id")), "messageID": m["id"], "sessionID": sid})
            messages.append((m, parts))
        out.append(_build(b, sid, info, messages, final=final))
    return out


#: how the database format is recognized and read (``engine.importers.DATABASE_FORMATS``)
DATABASE = DatabaseFormat(sniff=looks_like_database, pick=pick)


class _Reader:
    def __init__(self, b: SessionBuilder) -> None:
        self.b = b
        self.first_of: dict[str, int] = {}  # message id → builder index of its first message
        self.last_context: int | None = None
        self.last_boundary = 0  # builder index after the last compaction
        self.pending_compaction: dict[str, dict[str, Any]] = {}  # user msg id → its compaction part
        self.pruned: list[tuple[int, str, int]] = []  # (compacted ms, call id, builder index of the result)

    def read(self, messages: list[tuple[Mapping[str, Any], list[Mapping[str, Any]]]]) -> None:
        for m, parts in messages:
            mid = str(m.get("id"))
            if m.get("role") == "user":
                self._user(mid, m, parts)
            elif m.get("summary") is True:  # a compaction's summary (older versions: without a compaction part)
                self._compaction(mid, m, parts)
            else:
                self._assistant(mid, m, parts)
        if self.pending_compaction:  # asked for, never answered (or still running)
            self.b.skipped["unanswered_compaction"] += len(self.pending_compaction)
        self._prunes()

    def _content(self, part: Mapping[str, Any]) -> Part | None:
        t = part.get("type")
        if t == "text" and isinstance(part.get("text"), str) and part["text"]:
            return TextPart(part["text"])
        if t == "reasoning" and isinstance(part.get("text"), str):
            return ReasoningPart(part["text"])
        if t == "file":
            mime = str_or_none(part.get("mime"))
            url = str_or_none(part.get("url"))
            if mime and mime.startswith("image/"):
                return image_from_url(url, mime)
            return DocumentPart(media_type=mime, byte_size=None, source="url" if url else "file",
                                title=str_or_none(part.get("filename")),
                                url=url if url and not url.startswith("data:") else None)
        return None

    def _user(self, mid: str, m: Mapping[str, Any], parts: list[Mapping[str, Any]]) -> None:
        comp = next((p for p in parts if p.get("type") == "compaction"), None)
        if comp is not None:
            self.pending_compaction[mid] = dict(comp)
        content = [c for c in (self._content(p) for p in parts) if c is not None]
        for p in parts:
            t = p.get("type")
            if t in ("agent", "subtask"):
                content.append(TextPart(f"[{t}: {p.get('name') or p.get('agent') or ''}] {p.get('prompt') or ''}".strip()))
            elif t not in ("text", "file", "compaction"):
                self.b.unknown[f"part:{t}"] += 1
        if not content:
            return  # a compaction request alone carries no message
        synthetic = all(p.get("synthetic") for p in parts if p.get("type") == "text")
        idx = self.b.add(ImportedMessage(role="user", parts=tuple(content), source_key=mid, timestamp=iso_from_ms(_time(m)),
                                         source_ids=(mid,), meta=synthetic and any(p.get("type") == "text" for p in parts),
                                         meta_kind="synthetic" if synthetic and any(p.get("type") == "text" for p in parts) else None))
        self.first_of[mid] = idx

    def _steps(self, parts: list[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
        steps: list[list[Mapping[str, Any]]] = [[]]
        for p in parts:
            if p.get("type") == "step-start" and any(q.get("type") not in ("step-start",) for q in steps[-1]):
                steps.append([])
            steps[-1].append(p)
        return [s for s in steps if s]

    def _usage(self, pos: int, tokens: object, model: str | None, ts: object) -> None:
        if not isinstance(tokens, Mapping):
            return
        inp = as_int(tokens.get("input"))
        if inp is None:
            return
        cache = as_map(tokens.get("cache"))
        read, write = as_int(cache.get("read")) or 0, as_int(cache.get("write")) or 0
        out = as_int(tokens.get("output"))
        if inp == 0 and not out and not read and not write:
            return  # an aborted step: nothing was reported
        self.b.usage(UsageRecord(position=pos, prompt_tokens=inp + read + write, completion_tokens=out,
                                 cache_read_tokens=read or None, cache_creation_tokens=write or None,
                                 reasoning_tokens=as_int(tokens.get("reasoning")) or None, model=model, timestamp=iso_from_ms(ts)))
        self.last_context = inp + read + write + (out or 0)

    def _assistant(self, mid: str, m: Mapping[str, Any], parts: list[Mapping[str, Any]]) -> None:
        model = str_or_none(m.get("modelID"))
        ts = _time(m)
        steps = self._steps(parts)
        has_steps = any(p.get("type") == "step-finish" for p in parts)
        err = m.get("error")
        for n, step in enumerate(steps or [[]]):
            key = mid if n == 0 else f"{mid}#{n}"
            content: list[Part] = []
            calls: list[ImportedToolCall] = []
            tools: list[Mapping[str, Any]] = []
            finish: Mapping[str, Any] | None = None
            for p in step:
                t = p.get("type")
                c = self._content(p)
                if c is not None:
                    content.append(c)
                elif t == "tool":
                    state = as_map(p.get("state"))
                    cid = str(p.get("callID") or p.get("id"))
                    calls.append(ImportedToolCall(id=cid, name=str(p.get("tool") or "?"),
                                                  arguments=as_json_text(state.get("input") if state.get("input") is not None else {}),
                                                  synthetic_id=not p.get("callID"), source_id=str_or_none(p.get("id"))))
                    tools.append(p)
                elif t == "step-finish":
                    finish = p
                    self.b.skipped["step-finish"] += 1
                elif t in _QUIET_PARTS:
                    self.b.skipped[str(t)] += 1
                elif t not in ("text", "reasoning"):
                    self.b.unknown[f"part:{t}"] += 1
            if not content and not calls and finish is None and n > 0:
                continue
            details: dict[str, Any] = {}
            if err is not None and n == len(steps) - 1:
                details["error"] = err.get("name") if isinstance(err, Mapping) and err.get("name") else as_json_text(err)
            idx = self.b.add(ImportedMessage(role="assistant", parts=tuple(content), tool_calls=tuple(calls), source_key=key,
                                             source_ids=(mid,), timestamp=iso_from_ms(_time(step[0]) if step and _time(step[0]) else ts),
                                             model=model, details=details))
            self.first_of.setdefault(mid, idx)
            if finish is not None:
                self._usage(idx, finish.get("tokens"), model, _time(m, "completed") or ts)
            elif not has_steps and n == len(steps or [[]]) - 1:
                self._usage(idx, m.get("tokens"), model, _time(m, "completed") or ts)
            for p in tools:
                self._result(mid, p)

    def _result(self, mid: str, p: Mapping[str, Any]) -> None:
        state = as_map(p.get("state"))
        status = state.get("status")
        cid = str(p.get("callID") or p.get("id"))
        if status == "completed":
            text, err = str(state.get("output") if state.get("output") is not None else ""), False
        elif status == "error":
            text, err = str(state.get("error") or ""), True
        else:
            return  # pending / running: no result (yet); the repair marks it
        t = as_map(state.get("time"))
        details = {"status": status, **({"title": state["title"]} if isinstance(state.get("title"), str) and state["title"] else {})}
        idx = self.b.add(ImportedMessage(role="tool", parts=(TextPart(text),) if text else (), tool_call_id=cid,
                                         tool_name=str(p.get("tool") or "?"), is_error=err, source_key=f"{mid}:{cid}",
                                         source_ids=(str(p.get("id")),), timestamp=iso_from_ms(t.get("end") or t.get("start")),
                                         details=details))
        compacted = as_int(t.get("compacted"))
        if compacted:
            self.pruned.append((compacted, cid, idx))

    def _compaction(self, mid: str, m: Mapping[str, Any], parts: list[Mapping[str, Any]]) -> None:
        parent = str(m.get("parentID"))
        comp = self.pending_compaction.pop(parent, None)
        trigger = None if comp is None else "auto" if comp.get("auto") else "manual"
        comp = comp or {}
        summary = "\n\n".join(str(p["text"]).strip() for p in parts if p.get("type") == "text" and isinstance(p.get("text"), str)).strip()
        pos = len(self.b.messages)
        start = self.last_boundary
        tail = str_or_none(comp.get("tail_start_id"))
        end = self.first_of.get(tail, pos) if tail else pos
        tokens = as_map(m.get("tokens"))
        details: dict[str, Any] = {"replaced_messages": end - start, "summary_message": mid}
        if as_int(tokens.get("output")) is not None:
            details["summary_output_tokens"] = as_int(tokens.get("output"))
        if m.get("cost") is not None:
            details["cost"] = m.get("cost")
        if comp.get("overflow"):
            details["overflow"] = True
        if m.get("error") is not None or not summary:
            details["failed"] = True
        keys = tuple(self.b.messages[k].source_key for k in range(start, end))
        self.b.compaction(position=pos, replaced_start=start, replaced_end=end,
                          trigger=trigger, tokens_before=self.last_context,
                          summary=summary or None, source_id=f"compaction:{parent}", timestamp=iso_from_ms(_time(m)),
                          forgotten_ids=keys, details=details)
        if summary:
            self.last_boundary = pos

    def _prunes(self) -> None:
        groups: list[list[tuple[int, str, int]]] = []
        for item in sorted(self.pruned):
            if groups and item[0] - groups[-1][-1][0] <= _PRUNE_PASS_MS:
                groups[-1].append(item)
            else:
                groups.append([item])
        for g in groups:
            idx = sorted(i for _, _, i in g)
            after = max(i for _, _, i in g) + 1
            # the pass ran when the next request was being prepared: after the newest message older than it
            when = g[-1][0]
            pos = next((k for k, msg in enumerate(self.b.messages) if k > after and (ms := _ms(msg.timestamp)) is not None
                        and ms >= when), len(self.b.messages))
            self.b.compaction(position=pos, replaced_start=idx[0], replaced_end=idx[-1] + 1, kind="prune", trigger="auto",
                              summary=PRUNE_NOTE.format(n=len(g), s="" if len(g) == 1 else "s"),
                              source_id=f"prune:{g[0][0]}", timestamp=iso_from_ms(g[0][0]),
                              forgotten_ids=tuple(cid for _, cid, _ in g),
                              details={"cleared_results": len(g), "replaced_by": PRUNED_TEXT})
        # in time order where they share a position (a prune pass runs before the compaction after it)
        self.b.compaction_drafts.sort(key=lambda d: (d["position"], d.get("timestamp") or ""))


def _ms(iso: str | None) -> int | None:
    if not iso:
        return None
    try:
        return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


__all__ = ["FORMAT", "DEFAULT_LOCATIONS", "DISCOVERY_SKIP", "discovery_parent", "Storage", "storage_root", "looks_like_path", "parse"]
