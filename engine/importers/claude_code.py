"""``claude-code``: a Claude Code session JSONL file (``~/.claude/projects/<slug>/<sessionId>.jsonl``).

Shape handled: one JSON object per line with ``type`` ``user`` / ``assistant`` / ``system`` (and
``summary``, ``custom-title`` and bookkeeping types), ``uuid``, ``parentUuid``, ``sessionId``,
``timestamp``, ``cwd``, ``gitBranch``, ``version``, ``isSidechain``, ``agentId``, ``isMeta``,
``isCompactSummary``; ``message`` is an Anthropic message (see :mod:`engine.importers.anthropic` for
the blocks).

Mapping:

- **Live branch**: the conversation is the ``parentUuid`` chain back from the last user / assistant
  entry (across a ``compact_boundary`` through its ``logicalParentUuid``); entries of abandoned
  branches are counted as ``skipped["off_branch"]``. A chain that breaks (a parent not in the file)
  is a warning and every entry is imported in file order.
- **Assistant** entries are merged into one message per ``message.id`` (one entry per content block;
  parallel ``tool_use`` blocks are separate entries sharing the id), wherever they sit in the file.
  ``message.usage`` (input + cache read + cache creation) of the last entry of each id becomes a
  usage record on that message; ``<synthetic>`` (locally made) messages report no usage.
- **User** entries: each ``tool_result`` block becomes a ``tool`` message (``is_error`` kept, tool
  name resolved from its call, key ``<uuid>:<tool_use_id>``); the other blocks become a ``user``
  message. ``meta`` is set for ``isMeta`` entries and for texts that are not requests: ``command``
  (``<command-name>``…), ``command_output`` (``<local-command-stdout>``, ``<bash-stdout>``…),
  ``shell_command`` (``<bash-input>``), ``task_notification``, ``system_reminder``, ``caveat``,
  ``skill`` (injected skill text), ``interrupted``, ``hook``, ``continuation`` (a summary written as
  a plain message), ``meta`` / ``transcript_only`` (other ``isMeta`` / ``isVisibleInTranscriptOnly``).
- **Compaction**: ``system`` ``compact_boundary`` (``compactMetadata.trigger`` / ``preTokens``)
  followed by the ``isCompactSummary`` user entry → one recorded compaction at that point, its summary
  the entry's text (not a message). ``microcompact_boundary`` (``microcompactMetadata.trigger``,
  ``preTokens``, ``tokensSaved``, ``compactedToolIds``) → a recorded compaction of kind ``prune`` over
  those tool results. Other ``system`` entries count as ``skipped["system:<subtype>"]``.
- ``custom-title`` (the user's) or else ``summary`` (preferring one whose ``leafUuid`` is on the live
  branch) gives the session title; ``file-history-snapshot``,
  ``queue-operation``, ``attachment``, ``progress`` are skipped; other types are ``unknown``.
- **Sub-agents**: a file named ``agent-*.jsonl``, under ``subagents/``, or made only of
  ``isSidechain`` entries is a sub-agent session: id ``agentId``, parent ``sessionId``. Parsing a main
  session also returns its sub-agents (``<sessionId>/subagents/*.jsonl`` and sibling
  ``agent-*.jsonl`` files of that session, and ``isSidechain`` entries inside the file), each linked
  to the parent and, when the parent's ``Task`` result names the agent (or the entries carry
  ``parentToolUseId``), to that call (``extra["parent_tool_call_id"]``). An ``agent-<id>.meta.json``
  beside the file gives the title (``description``) and ``extra["agentType"]``.

Images (also inside tool results) keep media type, byte size and pixel size, never the bytes.
Source keys: the entry ``uuid`` (the first entry's, for a merged assistant message; every merged
uuid is in ``source_ids`` and ``message.id`` is the ``response_id``), ``<uuid>:<tool_use_id>`` for a
tool result, ``<uuid>:t<block>`` for text that follows results in the same entry.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from ._common import NameSet, SessionBuilder, Source, as_int, as_list, as_map, str_or_none
from .anthropic import ToolResultBlock, convert_blocks, usage_record
from .jsonl import iter_lines
from .model import ImportedMessage, ImportedSession, ImportedToolCall, ImportFormatError, Part, TextPart

FORMAT = "claude-code"
#: where Claude Code keeps sessions, relative to the home directory (engine.discovery)
DEFAULT_LOCATIONS = (".claude/projects/*/*.jsonl",)
#: read with their main session (its sub-agents), not listed on their own
DISCOVERY_SKIP = ("agent-*.jsonl", "*/subagents/*")


def discovery_parent(path: Path) -> Path | None:
    """The main session file a sub-agent file is read with (engine.discovery's follow all imports
    that one when the sub-agent's file changes): ``<session>/subagents/*.jsonl`` → ``<session>.jsonl``;
    a sibling ``agent-*.jsonl`` → the ``sessionId`` its first entry names."""
    if path.parent.name == "subagents":
        return path.parent.parent.with_name(path.parent.parent.name + ".jsonl")
    if path.name.startswith("agent-") and path.suffix == ".jsonl":
        try:
            with path.open("rb") as fh:
                first = json.loads(fh.readline() or b"null")
        except (OSError, ValueError):
            return None
        sid = first.get("sessionId") if isinstance(first, dict) else None
        return path.with_name(f"{sid}.jsonl") if isinstance(sid, str) and sid and "/" not in sid else None
    return None
ENTRY_TYPES = NameSet({"user", "assistant", "system"})
BOOKKEEPING = NameSet({"file-history-snapshot", "queue-operation", "attachment", "progress", "summary",
                         "custom-title"})
SYNTHETIC_MODEL = "<synthetic>"


def looks_like(obj: object) -> bool:
    """One line of a Claude Code session."""
    if not isinstance(obj, Mapping):
        return False
    t = obj.get("type")
    if t in ENTRY_TYPES:
        return ("uuid" in obj or "sessionId" in obj) and "payload" not in obj
    if t == "summary":
        return "leafUuid" in obj
    if t in ("file-history-snapshot", "queue-operation"):
        return "messageId" in obj or "sessionId" in obj or "snapshot" in obj
    return False


# -- meta user messages --------------------------------------------------------------------------
#: how a user entry's text opens -> the kind of meta message it is (checked in this order)
_META_PREFIXES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("<command-name>", "<command-message>", "<command-args>"), "command"),
    (("<local-command-stdout>", "<local-command-stderr>", "<bash-stdout>", "<bash-stderr>"), "command_output"),
    (("<bash-input>",), "shell_command"),
    (("<task-notification>",), "task_notification"),
    (("<local-command-caveat>",), "caveat"),
    (("This session is being continued from a previous conversation",), "continuation"),
    (("Base directory for this skill:",), "skill"),
)
#: checked after a whole-text system reminder
_META_PREFIXES_LATE: tuple[tuple[tuple[str, ...], str], ...] = (
    (("Caveat:",), "caveat"),
    (("[Request interrupted by user",), "interrupted"),
    (("<user-prompt-submit-hook>",), "hook"),
)


def meta_kind(entry: Mapping[str, Any], text: str) -> str | None:
    t = text.lstrip()
    for prefixes, kind in _META_PREFIXES:
        if t.startswith(prefixes):
            return kind
    if t.startswith("<system-reminder>") and t.rstrip().endswith("</system-reminder>"):
        return "system_reminder"
    for prefixes, kind in _META_PREFIXES_LATE:
        if t.startswith(prefixes):
            return kind
    if entry.get("isMeta"):
        return "meta"
    if entry.get("isVisibleInTranscriptOnly"):
        return "transcript_only"
    return None


# -- reading -------------------------------------------------------------------------------------
def _read_entries(source: Source, b: SessionBuilder | None, *, final: bool) -> list[tuple[int, dict]]:
    data = source.read_bytes()
    out: list[tuple[int, dict]] = []
    for e in iter_lines(data, final=final):
        if e.error is not None:
            if b is not None:
                b.warn(e.error, e.line)
            continue
        if not isinstance(e.value, dict):
            if b is not None:
                b.warn("not a JSON object", e.line)
            continue
        out.append((e.line, e.value))
    return out


def _live_uuids(entries: list[tuple[int, dict]], b: SessionBuilder) -> set[str] | None:
    by_uuid = {obj["uuid"]: obj for _, obj in entries if isinstance(obj.get("uuid"), str)}
    leaf = next((obj["uuid"] for _, obj in reversed(entries)
                 if obj.get("type") in ("user", "assistant") and isinstance(obj.get("uuid"), str)), None)
    if leaf is None:
        return None
    live: set[str] = set()
    cur: str | None = leaf
    while cur and cur not in live:
        obj = by_uuid.get(cur)
        if obj is None:
            b.warn(f"parentUuid chain broken at {cur!r}; importing every entry in file order")
            return None
        live.add(cur)
        nxt = obj.get("parentUuid") or obj.get("logicalParentUuid")
        cur = nxt if isinstance(nxt, str) else None
    return live


def _is_subagent_file(source: Source, entries: list[tuple[int, dict]]) -> bool:
    if source.path is not None and (source.path.name.startswith("agent-") or source.path.parent.name == "subagents"):
        return True
    convo = [obj for _, obj in entries if obj.get("type") in ENTRY_TYPES]
    return bool(convo) and all(obj.get("isSidechain") for obj in convo)


def parse(source: Source, *, final: bool = True, discover: bool = True) -> list[ImportedSession]:
    probe = SessionBuilder(FORMAT, source)
    entries = _read_entries(source, probe, final=final)
    if not any(looks_like(obj) for _, obj in entries):
        raise ImportFormatError(f"{source.name}: not a Claude Code session (no user/assistant/system entries)")
    if _is_subagent_file(source, entries):
        agent = next((o["agentId"] for _, o in entries if isinstance(o.get("agentId"), str)), None)
        if agent is None and source.path is not None:
            agent = source.path.stem.removeprefix("agent-")
        parent = next((o["sessionId"] for _, o in entries if isinstance(o.get("sessionId"), str)), None)
        call = next((o["parentToolUseId"] for _, o in entries if isinstance(o.get("parentToolUseId"), str)), None)
        sub = _convert(source, entries, probe, final=final, session_id=agent, parent=parent, parent_call=call)
        return [_with_agent_meta(sub, source)]
    main_entries = [(n, o) for n, o in entries if not o.get("isSidechain")]
    side: dict[str, list[tuple[int, dict]]] = {}
    for n, o in entries:
        if o.get("isSidechain"):
            side.setdefault(str(o.get("agentId") or "sidechain"), []).append((n, o))
    session_id = next((o["sessionId"] for _, o in main_entries if isinstance(o.get("sessionId"), str)), None)
    main = _convert(source, main_entries, probe, final=final, session_id=session_id, parent=None)
    links = _agent_links(main_entries)
    subs = [_convert(source, es, SessionBuilder(FORMAT, source), final=final, session_id=agent, parent=session_id,
                     parent_call=links.get(agent))
            for agent, es in side.items()]
    if discover and source.path is not None and session_id:
        for path in _subagent_files(source.path, session_id):
            for sub in parse(Source(str(path), path=path), final=final, discover=False):
                call = links.get(sub.source_session_id or "")
                subs.append(replace(sub, extra={**sub.extra, "parent_tool_call_id": call}) if call else sub)
    return [main, *subs]


def _with_agent_meta(sub: ImportedSession, source: Source) -> ImportedSession:
    """``agent-<id>.meta.json`` next to a sub-agent file: its description is the title."""
    if source.path is None:
        return sub
    meta_path = source.path.with_name(source.path.stem + ".meta.json")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return sub
    if not isinstance(meta, Mapping):
        return sub
    extra = {**sub.extra, **{k: meta[k] for k in ("agentType", "spawnDepth") if k in meta}}
    title = meta.get("description") if isinstance(meta.get("description"), str) else sub.title
    return replace(sub, title=title, extra=extra)


def _subagent_files(path: Path, session_id: str) -> list[Path]:
    found = sorted((path.parent / session_id / "subagents").glob("*.jsonl"))
    for sibling in sorted(path.parent.glob("agent-*.jsonl")):
        if sibling == path:
            continue
        try:
            with sibling.open("rb") as fh:
                first = json.loads(fh.readline() or b"{}")
        except (OSError, ValueError):
            continue
        if isinstance(first, dict) and first.get("sessionId") == session_id:
            found.append(sibling)
    return found


def _agent_links(entries: list[tuple[int, dict]]) -> dict[str, str]:
    """agentId → the parent's tool_use id whose result names that agent (``toolUseResult.agentId``)."""
    links: dict[str, str] = {}
    for _, o in entries:
        tur = o.get("toolUseResult")
        content = (o.get("message") or {}).get("content") if isinstance(o.get("message"), Mapping) else None
        if isinstance(tur, Mapping) and tur.get("agentId") and isinstance(content, list):
            for block in content:
                if isinstance(block, Mapping) and block.get("type") == "tool_result":
                    links[str(tur["agentId"])] = str(block.get("tool_use_id"))
    return links


def _convert(source: Source, entries: list[tuple[int, dict]], b: SessionBuilder, *, final: bool,
             session_id: str | None, parent: str | None, parent_call: str | None = None) -> ImportedSession:
    live = _live_uuids(entries, b)
    by_mid: dict[str, int] = {}
    usage: dict[str, tuple[int, Mapping[str, Any], str | None, str | None]] = {}
    title: str | None = None
    title_on_branch = custom_title = False
    cwd = model = None
    extra: dict[str, Any] = {}
    for line, o in entries:
        etype = o.get("type")
        uuid = o.get("uuid") if isinstance(o.get("uuid"), str) else None
        if live is not None and uuid is not None and uuid not in live and etype in ENTRY_TYPES:
            b.skipped["off_branch"] += 1
            continue
        cwd = cwd or str_or_none(o.get("cwd"))
        for k_src, k_dst in (("version", "version"), ("gitBranch", "git_branch")):
            if o.get(k_src) and k_dst not in extra:
                extra[k_dst] = o[k_src]
        ts = o.get("timestamp") if isinstance(o.get("timestamp"), str) else None
        if etype == "assistant":
            msg = o.get("message")
            if not isinstance(msg, Mapping):
                b.warn("assistant entry without a message object", line)
                continue
            m_model = msg.get("model") if isinstance(msg.get("model"), str) else None
            if m_model and m_model != SYNTHETIC_MODEL:
                model = m_model
            conv = convert_blocks(msg.get("content"))
            for u in conv.unknown:
                b.unknown[u] += 1
            parts = tuple(p for p in conv.items if not isinstance(p, (ImportedToolCall, ToolResultBlock)))
            calls = tuple(p for p in conv.items if isinstance(p, ImportedToolCall))
            mid = msg.get("id") if isinstance(msg.get("id"), str) else None
            details = {k: v for k, v in (("stop_reason", str_or_none(msg.get("stop_reason"))),
                                         ("api_error", True if o.get("isApiErrorMessage") else None)) if v}
            if mid is not None and mid in by_mid:
                i = by_mid[mid]
                old = b.messages[i]
                b.replace_at(i, replace(old, parts=old.parts + parts, tool_calls=old.tool_calls + calls,
                                        source_ids=old.source_ids + ((uuid,) if uuid else ()),
                                        details={**old.details, **details}))
            else:
                i = b.add(ImportedMessage(role="assistant", parts=parts, tool_calls=calls,
                                          source_key=uuid or mid or f"L{line}", source_ids=(uuid,) if uuid else (),
                                          response_id=mid, timestamp=ts, model=m_model, details=details))
                if mid is not None:
                    by_mid[mid] = i
            if isinstance(msg.get("usage"), Mapping) and m_model != SYNTHETIC_MODEL:
                usage[mid or f"L{line}"] = (i, msg["usage"], m_model, ts)
        elif etype == "user":
            msg = o.get("message")
            if not isinstance(msg, Mapping):
                b.warn("user entry without a message object", line)
                continue
            if o.get("isCompactSummary"):
                _attach_summary(b, msg.get("content"), uuid, ts)
                continue
            _add_user(b, o, msg.get("content"), uuid or f"L{line}", ts)
        elif etype == "system":
            subtype = o.get("subtype")
            if subtype == "compact_boundary":
                meta = as_map(o.get("compactMetadata"))
                b.compaction(trigger=meta.get("trigger"), tokens_before=as_int(meta.get("preTokens")), source_id=uuid,
                             timestamp=ts, details={"logical_parent_uuid": o.get("logicalParentUuid")})
            elif subtype == "microcompact_boundary":
                _microcompact(b, o, uuid, ts)
            else:
                b.skipped[f"system:{subtype or '?'}"] += 1
        elif etype == "summary":
            # a file can list summaries of several leaves: prefer one of the live branch
            leaf = str_or_none(o.get("leafUuid"))
            on_branch = live is not None and leaf in live
            if isinstance(o.get("summary"), str) and not custom_title and (on_branch or not title_on_branch):
                title, title_on_branch = o["summary"], on_branch
            b.skipped["summary"] += 1
        elif etype == "custom-title":
            if isinstance(o.get("customTitle"), str):
                title, custom_title = o["customTitle"], True
            b.skipped["custom-title"] += 1
        elif etype in BOOKKEEPING:
            b.skipped[str(etype)] += 1
        else:
            b.unknown[str(etype)] += 1
    for mid, (i, raw_usage, m_model, ts) in usage.items():
        rec = usage_record(raw_usage, i, model=m_model, response_id=mid if not mid.startswith("L") else None, timestamp=ts)
        if rec is not None:
            b.usage(rec)
    if parent_call:
        extra["parent_tool_call_id"] = parent_call
    return b.build(final=final, source_session_id=session_id, parent_session_id=parent, cwd=cwd, model=model,
                   title=title, extra=extra)


def _microcompact(b: SessionBuilder, o: Mapping[str, Any], uuid: str | None, ts: str | None) -> None:
    """``microcompact_boundary``: Claude Code cleared some tool results (a prune, not a summary)."""
    meta = as_map(o.get("microcompactMetadata"))
    ids = tuple(str(x) for x in as_list(meta.get("compactedToolIds")))
    wanted = set(ids)
    hit = [i for i, m in enumerate(b.messages) if m.role == "tool" and m.tool_call_id in wanted]
    pos = len(b.messages)
    b.compaction(kind="prune", trigger=meta.get("trigger"), tokens_before=as_int(meta.get("preTokens")),
                 replaced_start=hit[0] if hit else pos, replaced_end=hit[-1] + 1 if hit else pos,
                 forgotten_ids=ids, source_id=uuid, timestamp=ts,
                 details={"tokens_saved": as_int(meta.get("tokensSaved")), "forgotten_messages": len(hit)})


def _attach_summary(b: SessionBuilder, content: object, uuid: str | None, ts: str | None) -> None:
    conv = convert_blocks(content)
    text = "\n\n".join(p.text for p in conv.items if isinstance(p, TextPart))
    open_drafts = [d for d in b.compaction_drafts
                   if d.get("summary") is None and d.get("kind", "summary") == "summary"]
    if open_drafts:
        open_drafts[-1]["summary"] = text
        open_drafts[-1]["details"] = {**open_drafts[-1].get("details", {}), "summary_uuid": uuid}
    else:  # a summary without its boundary: still the source's compaction
        b.compaction(summary=text, source_id=uuid, timestamp=ts, details={"summary_uuid": uuid})


def _add_user(b: SessionBuilder, o: Mapping[str, Any], content: object, key: str, ts: str | None) -> None:
    conv = convert_blocks(content)
    for u in conv.unknown:
        b.unknown[u] += 1
    ids = (key,) if not key.startswith("L") else ()
    has_results = any(isinstance(p, ToolResultBlock) for p in conv.items)
    pending: list[Part] = []

    def flush(j: int) -> None:
        if not pending:
            return
        text = "\n\n".join(p.text for p in pending if isinstance(p, TextPart))
        kind = meta_kind(o, text)
        b.add(ImportedMessage(role="user", parts=tuple(pending), source_key=f"{key}:t{j}" if has_results else key,
                              meta=kind is not None, meta_kind=kind, source_ids=ids, timestamp=ts))
        pending.clear()

    for j, item in enumerate(conv.items):
        if isinstance(item, ToolResultBlock):
            flush(j)
            b.add(ImportedMessage(role="tool", parts=tuple(item.parts), tool_call_id=item.tool_use_id,
                                  is_error=item.is_error, source_key=f"{key}:{item.tool_use_id}", source_ids=ids,
                                  timestamp=ts))
        elif isinstance(item, ImportedToolCall):
            b.unknown["block:tool_use_in_user_message"] += 1
        else:
            pending.append(item)
    flush(len(conv.items))
