"""``openhands``: OpenHands event streams, V0 (one JSON list) and V1 (an event directory).

**V0** shape: ``[{id, timestamp, source: user | agent | environment, message, action | observation,
args, content, extras, cause, tool_call_metadata {function_name, tool_call_id, model_response {id,
choices[0].message {content, tool_calls, reasoning_content}, usage}}}]``. Mapping:

- ``action: system`` → ``system_prompt`` (``args.content``) and ``tools`` (``args.tools``);
- ``action: message`` → a ``user`` message (source user, ``args.image_urls`` as images) or an
  ``assistant`` message (source agent, not part of a tool-calling response);
- every action with ``tool_call_metadata`` (``run``, ``read``, ``edit``, ``think``, ``finish``, …) is a
  call; the calls sharing one ``model_response.id`` become **one** assistant message with parallel
  calls (text and reasoning from the response message, arguments from its ``tool_calls`` entry for
  that id, else ``args``), with ``model_response.usage`` as its usage record;
- an observation with ``tool_call_metadata`` (or whose ``cause`` is such an action) is that call's
  result, ``is_error`` for ``observation: error``; ``finish`` never gets one, so the repair adds a
  ``missing_result``;
- old resolver dumps without ``tool_call_metadata``: an agent action is a call with a synthetic id
  ``oh-<event id>`` named after the action, answered by the observation whose ``cause`` is that event;
- ``action: condensation`` (``forgotten_event_ids`` or ``forgotten_events_start_id`` / ``_end_id``,
  ``summary``, ``summary_offset``) → a recorded compaction over the forgotten events' messages;
- state events (``change_agent_state``, ``agent_state_changed``, ``recall``, ``null`` …) →
  ``skipped``.

**V1** shape: a directory with ``base_state.json`` (``id``, ``agent.llm.model``, ``stats.usage_to_metrics
.*.token_usages [{response_id, prompt_tokens, cache_read_tokens, cache_write_tokens,
completion_tokens, reasoning_tokens, context_window, model}]``) and ``events/event-<n>-<id>.json``,
(or the older ``event-<n>.json``), read in the order of ``<n>``, each with ``kind``:
``SystemPromptEvent`` (system prompt, tools); ``MessageEvent`` (``llm_message {role, content [text |
image {image_urls}], reasoning_content}``; ``extended_content`` becomes a meta ``skill`` user
message); ``ActionEvent`` (``thought``, ``reasoning_content``, ``thinking_blocks``,
``tool_call {id, name, arguments}``, ``llm_response_id`` groups parallel calls); ``ObservationEvent``
(``observation {content, is_error}``), ``UserRejectObservation`` and ``AgentErrorEvent`` (error
results); ``Condensation`` (``forgotten_event_ids``, ``summary``, ``summary_offset``) → a recorded
compaction; ``CondensationRequest``, ``ConversationStateUpdateEvent``, ``PauseEvent`` → skipped.
Token usages are matched to the assistant message of their ``response_id`` (``prompt_tokens`` as
reported; the condenser's own calls have no message and give no record).

Source keys are the event ids (``<id>`` for an action group: its first event's id).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from ._common import (
    NameSet,
    SessionBuilder,
    Source,
    as_int,
    as_json_text,
    as_list,
    as_map,
    image_from_url,
    map_or_none,
    str_or_none,
    text_parts,
)
from .model import (
    ImportedMessage,
    ImportedRole,
    ImportedSession,
    ImportedToolCall,
    ImportFormatError,
    ParseWarning,
    Part,
    ReasoningPart,
    TextPart,
    UsageRecord,
)
from .openai_chat import chat_parts, usage_record as chat_usage

FORMAT = "openhands"
#: where the OpenHands CLI keeps V1 conversations (one folder each), relative to the home directory (engine.discovery)
DEFAULT_LOCATIONS = (".openhands/conversations/*",)
STATE_ACTIONS = NameSet({"change_agent_state", "recall", "null", "pause", "resume", "reject", "mcp_init"})
V1_SKIPPED = NameSet({"CondensationRequest", "ConversationStateUpdateEvent", "PauseEvent", "CondensationSummaryEvent"})


def looks_like_v0(data: object) -> bool:
    if not isinstance(data, list) or not data:
        return False
    head = data[:20]
    events = sum(isinstance(e, Mapping) and ("action" in e or "observation" in e) and "source" in e for e in head)
    return events * 2 > len(head)  # mostly events (odd ones are counted as unknown)


def looks_like_v1(path: Path) -> bool:
    events = path / "events" if (path / "events").is_dir() else path
    if not events.is_dir():
        return False
    first = next(iter(sorted(events.glob("event-*.json"))), None)
    if first is None:
        return False
    try:
        return "kind" in json.loads(first.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


def parse(source: Source, *, final: bool = True) -> list[ImportedSession]:
    if source.path is not None and source.path.is_dir():
        return [_parse_v1(source, final=final)]
    if source.path is not None and source.path.name == "base_state.json":
        return [_parse_v1(Source(str(source.path.parent), path=source.path.parent), final=final)]
    data = source.load_json(FORMAT)
    if not looks_like_v0(data):
        raise ImportFormatError(f"{source.name}: not an OpenHands event list (events need source and action/observation)")
    return [_parse_v0(source, data, final=final)]


# -- V0 ------------------------------------------------------------------------------------------
def _parse_v0(source: Source, events: list, *, final: bool) -> ImportedSession:
    b = SessionBuilder(FORMAT, source)
    group_of: dict[str, int] = {}  # model_response id → message index
    call_of_event: dict[str, tuple[str, str]] = {}  # action event id → (call id, name)
    msg_of_event: dict[str, int] = {}
    system_prompt: str | None = None
    tools: tuple = ()
    model: str | None = None
    for n, e in enumerate(events):
        if not isinstance(e, Mapping):
            b.warn(f"event [{n}] is not an object; skipped")
            continue
        raw_id = e.get("id")
        eid = str(raw_id) if isinstance(raw_id, (int, str)) and not isinstance(raw_id, bool) and str(raw_id) else f"#{n}"
        ts = e.get("timestamp") if isinstance(e.get("timestamp"), str) else None
        args = as_map(e.get("args"))
        tcm = map_or_none(e.get("tool_call_metadata"))
        if "action" in e:
            action = e.get("action")
            if action == "system":
                system_prompt = args.get("content") or system_prompt
                tools = tuple(t for t in as_list(args.get("tools")) if isinstance(t, Mapping)) or tools
                b.skipped["action:system"] += 1
            elif action == "condensation":
                _condensation_v0(b, args, msg_of_event, eid, ts)
            elif action == "message" and tcm is None:
                parts: tuple[Part, ...] = text_parts(args.get("content"))
                parts += tuple(image_from_url(u) for u in as_list(args.get("image_urls")))
                role: ImportedRole = "user" if e.get("source") == "user" else "assistant"
                msg_of_event[eid] = b.add(ImportedMessage(role=role, parts=parts, source_key=eid, source_ids=(eid,),
                                                          timestamp=ts))
            elif action in STATE_ACTIONS:
                b.skipped[f"action:{action}"] += 1
            elif tcm is not None:
                model = _v0_call(b, e, eid, ts, args, tcm, group_of, call_of_event, msg_of_event) or model
            elif e.get("source") == "agent":
                cid = f"oh-{eid}"
                call_of_event[eid] = (cid, str(action))
                call = ImportedToolCall(id=cid, name=str(action), arguments=as_json_text(dict(args)), synthetic_id=True)
                thought = args.get("thought")
                msg_of_event[eid] = b.add(ImportedMessage(role="assistant", parts=text_parts(thought),
                                                          tool_calls=(call,), source_key=eid, source_ids=(eid,), timestamp=ts))
            else:
                b.skipped[f"action:{action}"] += 1
        elif "observation" in e:
            obs = e.get("observation")
            cause = str(e.get("cause")) if e.get("cause") is not None else None
            call_id = name = None
            if tcm is not None and tcm.get("tool_call_id"):
                call_id, name = str(tcm["tool_call_id"]), str_or_none(tcm.get("function_name"))
            elif cause is not None and cause in call_of_event:
                call_id, name = call_of_event[cause]
            if call_id is None:
                b.skipped[f"observation:{obs}"] += 1
                continue
            text = e.get("content") if isinstance(e.get("content"), str) else e.get("message", "")
            extras = as_map(e.get("extras"))
            meta = as_map(extras.get("metadata"))
            code = as_int(meta.get("exit_code"))
            code = as_int(extras.get("exit_code")) if code is None else code
            details = {"observation": str_or_none(obs), **({"exit_code": code} if code is not None else {})}
            msg_of_event[eid] = b.add(ImportedMessage(role="tool", parts=text_parts(text),
                                                      tool_call_id=call_id, tool_name=name, is_error=obs == "error",
                                                      source_key=eid, source_ids=(eid,), timestamp=ts,
                                                      details=details))
        else:
            b.unknown["event"] += 1
    return b.build(final=final, system_prompt=str_or_none(system_prompt), tools=tools, model=model)


def _v0_call(b: SessionBuilder, e: Mapping, eid: str, ts: str | None, args: Mapping, tcm: Mapping,
             group_of: dict, call_of_event: dict, msg_of_event: dict) -> str | None:
    resp = as_map(tcm.get("model_response"))
    rid = str(resp.get("id") or f"event-{eid}")
    call_id = str(tcm.get("tool_call_id") or f"oh-{eid}")
    name = str(tcm.get("function_name") or e.get("action"))
    choices = resp.get("choices") if isinstance(resp.get("choices"), list) else []
    rmsg = choices[0].get("message") if choices and isinstance(choices[0], Mapping) else {}
    rmsg = rmsg if isinstance(rmsg, Mapping) else {}
    arguments = None
    for c in as_list(rmsg.get("tool_calls")):
        fn = c.get("function") if isinstance(c, Mapping) else None
        if isinstance(fn, Mapping) and c.get("id") == call_id:
            arguments = as_json_text(fn.get("arguments", "{}"))
            break
    call = ImportedToolCall(id=call_id, name=name, arguments=arguments or as_json_text(dict(args)),
                            synthetic_id=not tcm.get("tool_call_id"))
    call_of_event[eid] = (call_id, name)
    model = resp.get("model") if isinstance(resp.get("model"), str) else None
    if rid in group_of:
        i = group_of[rid]
        old = b.messages[i]
        b.replace_at(i, replace(old, tool_calls=old.tool_calls + (call,), source_ids=old.source_ids + (eid,)))
    else:
        parts = chat_parts(rmsg.get("content"), b)
        if isinstance(rmsg.get("reasoning_content"), str) and rmsg["reasoning_content"]:
            parts = (ReasoningPart(rmsg["reasoning_content"]),) + parts
        i = b.add(ImportedMessage(role="assistant", parts=parts, tool_calls=(call,), source_key=eid, source_ids=(eid,),
                                  response_id=rid if resp.get("id") else None, timestamp=ts, model=model))
        group_of[rid] = i
        if isinstance(resp.get("usage"), Mapping):
            rec = chat_usage(resp["usage"], i, model=model, response_id=rid, timestamp=ts)
            if rec:
                b.usage(rec)
    msg_of_event[eid] = i
    return model


def _condensation_v0(b: SessionBuilder, args: Mapping, msg_of_event: dict, eid: str, ts: str | None) -> None:
    ids = [str(x) for x in as_list(args.get("forgotten_event_ids"))]
    start, end = as_int(args.get("forgotten_events_start_id")), as_int(args.get("forgotten_events_end_id"))
    if not ids and start is not None and end is not None:
        ids = [str(x) for x in range(start, end + 1)]
    _record_condensation(b, ids, args.get("summary"), as_int(args.get("summary_offset")), msg_of_event, eid, ts)


def _record_condensation(b: SessionBuilder, ids: list[str], summary: object, offset: int | None, msg_of_event: dict,
                         eid: str, ts: str | None) -> None:
    hit = sorted({msg_of_event[i] for i in ids if i in msg_of_event})
    start = hit[0] if hit else len(b.messages)
    end = hit[-1] + 1 if hit else len(b.messages)
    b.compaction(replaced_start=start, replaced_end=end, summary=summary if isinstance(summary, str) else None,
                 source_id=eid, timestamp=ts, forgotten_ids=tuple(ids),
                 details={"summary_offset": offset, "forgotten_messages": len(hit)})


# -- V1 ------------------------------------------------------------------------------------------
def _parse_v1(source: Source, *, final: bool) -> ImportedSession:
    assert source.path is not None
    root = source.path.parent if source.path.name == "events" else source.path
    events_dir = root / "events"
    if not events_dir.is_dir():
        raise ImportFormatError(f"{source.name}: not an OpenHands conversation directory (no events/)")
    b = SessionBuilder(FORMAT, source)
    state: Mapping[str, Any] = {}
    if (root / "base_state.json").is_file():
        try:
            state = json.loads((root / "base_state.json").read_text(encoding="utf-8", errors="replace"))
        except json.JSONDecodeError as exc:
            b.warnings.append(ParseWarning(str(root / "base_state.json"), exc.lineno,
                                           "malformed JSON; conversation metadata and usage missing"))
        state = state if isinstance(state, Mapping) else {}
    files = sorted(events_dir.glob("event-*.json"), key=_event_index)
    if not files:
        raise ImportFormatError(f"{source.name}: no OpenHands event files (events/event-*.json)")
    reader = V1Reader(b)
    for path in files:
        try:
            ev = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except json.JSONDecodeError as exc:
            b.warnings.append(ParseWarning(str(path), exc.lineno, f"malformed JSON: {exc.msg} (column {exc.colno})"))
            continue
        if not isinstance(ev, Mapping) or "kind" not in ev:
            b.warnings.append(ParseWarning(str(path), None, "not an event (no kind)"))
            continue
        reader.event(ev, path.stem)
    for rec in v1_usage_records(_token_usages(state), reader.groups):
        b.usage(rec)
    agent = as_map(state.get("agent"))
    llm = as_map(agent.get("llm"))
    return b.build(final=final, source_session_id=str_or_none(state.get("id")) or root.name,
                   system_prompt=str_or_none(reader.system_prompt), tools=reader.tools, model=str_or_none(llm.get("model")))


class V1Reader:
    """Reads V1 events (``kind``) one at a time into a builder: the conversation directory's event files
    and the ``history`` of a V1 evaluation output share it."""

    def __init__(self, b: SessionBuilder) -> None:
        self.b = b
        self.groups: dict[str, int] = {}  # llm_response_id → assistant message index
        self.msg_of_event: dict[str, int] = {}
        self.system_prompt: Any = None
        self.tools: tuple = ()

    def event(self, ev: Mapping[str, Any], fallback_id: str) -> None:
        b, msg_of_event = self.b, self.msg_of_event
        kind = ev["kind"]
        eid = str(ev.get("id") or fallback_id)
        ts = ev.get("timestamp") if isinstance(ev.get("timestamp"), str) else None
        if kind == "SystemPromptEvent":
            sp = ev.get("system_prompt")
            self.system_prompt = sp.get("text") if isinstance(sp, Mapping) else sp
            self.tools = tuple(t for t in as_list(ev.get("tools")) if isinstance(t, Mapping))
            b.skipped[kind] += 1
        elif kind == "MessageEvent":
            _message_v1(b, ev, eid, ts, msg_of_event)
        elif kind == "ActionEvent":
            _action_v1(b, ev, eid, ts, self.groups, msg_of_event)
        elif kind in ("ObservationEvent", "UserRejectObservation", "AgentErrorEvent"):
            obs = as_map(ev.get("observation"))
            details: dict[str, Any] = {"observation": str_or_none(obs.get("kind")) or kind}
            if kind == "ObservationEvent":
                parts = _v1_content(obs.get("content"), b)
                is_error = bool(obs.get("is_error"))
                if as_int(obs.get("exit_code")) is not None:
                    details["exit_code"] = as_int(obs.get("exit_code"))
            else:
                text = ev.get("rejection_reason") or ev.get("error") or ""
                parts, is_error = (TextPart(str(text)),) if text else (), True
            msg_of_event[eid] = b.add(ImportedMessage(
                role="tool", parts=parts, tool_call_id=str(ev.get("tool_call_id") or ""),
                tool_name=str_or_none(ev.get("tool_name")), is_error=is_error, source_key=eid, source_ids=(eid,),
                timestamp=ts, details=details))
        elif kind == "Condensation":
            _record_condensation(b, [str(x) for x in as_list(ev.get("forgotten_event_ids"))], ev.get("summary"),
                                 as_int(ev.get("summary_offset")), msg_of_event, eid, ts)
        elif kind in V1_SKIPPED:
            b.skipped[kind] += 1
        else:
            b.unknown[str(kind)] += 1


def _event_index(path: Path) -> tuple[int, str]:
    """``event-<idx>[-<id>].json`` sorts by its number (past 99999 the names stop sorting as text)."""
    digits = path.stem.split("-")[1] if path.stem.count("-") >= 1 else ""
    return (int(digits) if digits.isdigit() else -1, path.name)


def _v1_content(content: object, b: SessionBuilder) -> tuple[Part, ...]:
    parts: list[Part] = []
    for c in content if isinstance(content, list) else ([{"type": "text", "text": content}] if content else []):
        if isinstance(c, Mapping) and c.get("type") == "image":
            parts.extend(image_from_url(u) for u in as_list(c.get("image_urls")))
        else:
            parts.extend(chat_parts([c], b))
    return tuple(parts)


def _message_v1(b: SessionBuilder, ev: Mapping, eid: str, ts: str | None, msg_of_event: dict) -> None:
    msg = as_map(ev.get("llm_message"))
    role: ImportedRole = msg["role"] if msg.get("role") in ("user", "assistant", "system") else (
        "user" if ev.get("source") == "user" else "assistant")
    parts = _v1_content(msg.get("content"), b)
    if isinstance(msg.get("reasoning_content"), str) and msg["reasoning_content"]:
        parts = (ReasoningPart(msg["reasoning_content"]),) + parts
    msg_of_event[eid] = b.add(ImportedMessage(role=role, parts=parts, source_key=eid, source_ids=(eid,), timestamp=ts))
    extended = _v1_content(ev.get("extended_content"), b)
    if extended:
        b.add(ImportedMessage(role="user", parts=extended, source_key=f"{eid}:extended", meta=True, meta_kind="skill",
                              source_ids=(eid,), timestamp=ts))


def _action_v1(b: SessionBuilder, ev: Mapping, eid: str, ts: str | None, groups: dict, msg_of_event: dict) -> None:
    tc = as_map(ev.get("tool_call"))
    call_id = tc.get("id") or ev.get("tool_call_id")
    call = ImportedToolCall(id=str(call_id or f"oh-{eid}"), name=str(tc.get("name") or ev.get("tool_name") or "?"),
                            arguments=as_json_text(tc.get("arguments", "{}")), synthetic_id=not call_id)
    rid = str(ev.get("llm_response_id") or f"event-{eid}")
    if rid in groups:
        i = groups[rid]
        old = b.messages[i]
        b.replace_at(i, replace(old, tool_calls=old.tool_calls + (call,), source_ids=old.source_ids + (eid,)))
    else:
        parts: tuple[Part, ...] = ()
        for block in as_list(ev.get("thinking_blocks")):
            if isinstance(block, Mapping):
                parts += (ReasoningPart(str(block.get("thinking") or ""), redacted=block.get("type") == "redacted_thinking",
                                        signed=bool(block.get("signature"))),)
        if isinstance(ev.get("reasoning_content"), str) and ev["reasoning_content"]:
            parts += (ReasoningPart(ev["reasoning_content"]),)
        parts += _v1_content(ev.get("thought"), b)
        i = b.add(ImportedMessage(role="assistant", parts=parts, tool_calls=(call,), source_key=eid, source_ids=(eid,),
                                  response_id=str_or_none(ev.get("llm_response_id")), timestamp=ts))
        groups[rid] = i
    msg_of_event[eid] = i


def _token_usages(state: Mapping[str, Any]) -> list[Any]:
    stats = as_map(state.get("stats"))
    metrics = as_map(stats.get("usage_to_metrics"))
    return [u for m in metrics.values() for u in (as_list(m.get("token_usages")) if isinstance(m, Mapping) else ())]


def v1_usage_records(token_usages: list[Any], groups: Mapping[str, int]) -> list[UsageRecord]:
    """``token_usages`` entries matched to the assistant message of their ``response_id`` (the
    condenser's own calls have no message and give no record)."""
    out: list[UsageRecord] = []
    for u in token_usages:
        rid = u.get("response_id") if isinstance(u, Mapping) else None
        if not isinstance(rid, str) or rid not in groups:
            continue
        prompt = as_int(u.get("prompt_tokens"))
        if prompt is None:
            continue
        out.append(UsageRecord(position=groups[rid], prompt_tokens=prompt,
                               completion_tokens=as_int(u.get("completion_tokens")),
                               cache_read_tokens=as_int(u.get("cache_read_tokens")),
                               cache_creation_tokens=as_int(u.get("cache_write_tokens")),
                               reasoning_tokens=as_int(u.get("reasoning_tokens")), model=str_or_none(u.get("model")),
                               response_id=rid, context_window=as_int(u.get("context_window"))))
    return sorted(out, key=lambda r: r.position)
