"""``swe-agent``: a SWE-agent trajectory (``<instance>.traj``, JSON).

Shape handled: ``{"trajectory": [{response, thought, action, observation, state, execution_time,
query?}], "history": [{role, content: str | [{type: "text", text}], agent, message_type:
system_prompt | demonstration | observation | action | thought | user, is_demo?, thought?,
action?, tool_calls?, tool_call_ids?}], "info": {exit_status, submission, model_stats {tokens_sent,
tokens_received, api_calls, instance_cost}}, "replay_config": str | {agent {model {name}}},
"environment"?}``.

Mapping (from ``history``, what the model saw; from ``trajectory`` when there is no history):

- **function calling**: an assistant entry's ``tool_calls`` (chat shape) are its calls; a ``tool``
  entry answers ``tool_call_ids[0]`` (a second id is a warning);
- **classic** (no tool role): an assistant ``action`` entry with no ``tool_calls`` gets one synthetic
  call ``swe-<index>`` named after the command's first word, arguments ``{"command": action}``, text =
  its ``thought`` (else its content); the next ``user`` ``observation`` entry becomes **that call's
  tool result**, not a user turn. A user entry with no action waiting (the problem statement) stays a
  ``user`` request;
- ``is_demo`` / ``message_type: demonstration`` entries (in-context demonstrations) are ``meta`` user
  messages (``meta_kind="demo"``), whatever their role; system entries stay ``system`` messages;
- the model name from ``replay_config`` → ``model``; ``info`` (exit status, submission, model stats)
  → ``extra``. ``model_stats`` are cumulative totals, not per-request prompt sizes, so they give no
  usage records.

Source keys are ``h<index>`` (``t<index>`` when read from ``trajectory``).
"""

from __future__ import annotations

import json
from typing import Mapping

from ._common import SessionBuilder, Source, as_list, as_map, str_or_none, text_parts
from .model import ImportedMessage, ImportedSession, ImportedToolCall, ImportFormatError, TextPart
from .openai_chat import chat_calls, chat_parts

FORMAT = "swe-agent"
#: SWE-agent writes ``trajectories/<user>/<run>/<instance>/<instance>.traj`` under the folder it runs in:
#: the home directory, or a SWE-agent checkout in it (engine.discovery)
DEFAULT_LOCATIONS = ("trajectories/**/*.traj", "SWE-agent/trajectories/**/*.traj")


def looks_like(data: object) -> bool:
    return isinstance(data, Mapping) and isinstance(data.get("trajectory"), list) and (
        "history" in data or "info" in data or "replay_config" in data)


def _model_name(replay: object) -> str | None:
    if isinstance(replay, str):
        try:
            replay = json.loads(replay)
        except ValueError:
            return None
    agent = replay.get("agent") if isinstance(replay, Mapping) else None
    model = agent.get("model") if isinstance(agent, Mapping) else None
    name = model.get("name") if isinstance(model, Mapping) else None
    return name if isinstance(name, str) else None


def _command_name(action: str) -> str:
    first = action.strip().split(None, 1)
    return first[0] if first else "command"


def parse(source: Source, *, final: bool = True) -> list[ImportedSession]:
    data = source.load_json(FORMAT)
    if not looks_like(data):
        raise ImportFormatError(f"{source.name}: not a SWE-agent trajectory (no 'trajectory' list with history/info)")
    b = SessionBuilder(FORMAT, source)
    model = _model_name(data.get("replay_config"))
    history = data.get("history")
    if isinstance(history, list) and history:
        _history(b, history, model)
    else:
        _trajectory(b, data["trajectory"], model)
    info = as_map(data.get("info"))
    extra = {k: info[k] for k in ("exit_status", "submission", "model_stats") if k in info}
    stem = source.path.stem if source.path is not None else None
    return [b.build(final=final, model=model, source_session_id=stem, extra=extra)]


def _history(b: SessionBuilder, history: list, model: str | None) -> None:
    waiting: ImportedToolCall | None = None  # a classic action whose observation has not come yet
    for i, h in enumerate(history):
        key = f"h{i}"
        if not isinstance(h, Mapping):
            b.warn(f"history[{i}] is not an object; skipped")
            continue
        role = h.get("role")
        mtype = h.get("message_type")
        parts = chat_parts(h.get("content"), b)
        if h.get("is_demo") or mtype == "demonstration":
            b.add(ImportedMessage(role="user", parts=parts, source_key=key, meta=True, meta_kind="demo"))
            continue
        if role == "assistant":
            calls = chat_calls(h.get("tool_calls"), b, key)
            waiting = None
            if not calls and isinstance(h.get("action"), str) and h["action"].strip():
                waiting = ImportedToolCall(id=f"swe-{i}", name=_command_name(h["action"]),
                                           arguments=json.dumps({"command": h["action"]}, ensure_ascii=False),
                                           synthetic_id=True)
                calls = (waiting,)
                thought = h.get("thought")
                if isinstance(thought, str) and thought.strip():
                    parts = text_parts(thought)
            b.add(ImportedMessage(role="assistant", parts=parts, tool_calls=calls, source_key=key, model=model))
        elif role == "tool":
            ids = as_list(h.get("tool_call_ids")) or ([h["tool_call_id"]] if h.get("tool_call_id") else [])
            if len(ids) > 1:
                b.warn(f"history[{i}]: one observation for {len(ids)} calls; kept as the result of the first")
            b.add(ImportedMessage(role="tool", parts=parts, tool_call_id=str(ids[0]) if ids else "", source_key=key))
            waiting = None
        elif role == "user" and waiting is not None and mtype in (None, "observation"):
            b.add(ImportedMessage(role="tool", parts=parts, tool_call_id=waiting.id, source_key=key))
            waiting = None
        elif role in ("user", "system"):
            b.add(ImportedMessage(role=role, parts=parts, source_key=key))
        else:
            b.warn(f"history[{i}]: unknown role {role!r}; skipped")
            b.skipped[f"role:{role}"] += 1


def _trajectory(b: SessionBuilder, steps: list, model: str | None) -> None:
    for i, s in enumerate(steps):
        if not isinstance(s, Mapping):
            b.warn(f"trajectory[{i}] is not an object; skipped")
            continue
        action = str_or_none(s.get("action")) or ""
        thought = s.get("thought") if isinstance(s.get("thought"), str) else s.get("response", "")
        calls = (ImportedToolCall(id=f"swe-t{i}", name=_command_name(action),
                                  arguments=json.dumps({"command": action}, ensure_ascii=False), synthetic_id=True),) \
            if action.strip() else ()
        b.add(ImportedMessage(role="assistant", parts=text_parts(thought), tool_calls=calls, source_key=f"t{i}",
                              model=model))
        if calls and "observation" in s:
            obs = s.get("observation")
            b.add(ImportedMessage(role="tool", parts=(TextPart(str(obs)),) if obs else (), tool_call_id=calls[0].id,
                                  source_key=f"t{i}.obs"))
