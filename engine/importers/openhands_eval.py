"""``openhands-eval``: an OpenHands evaluation output (``output.jsonl`` of a benchmark run).

Shape handled: one JSON object per line, one benchmark instance each (``EvalOutput``): ``instance_id``,
``attempt`` (newer runs), ``instruction``, ``history``, ``metadata``, ``metrics``, ``test_result``,
``error``, ``instance``. A single instance saved as one (pretty-printed) JSON object, or a JSON list of
instances, is read too. **Every instance is a session of its own.**

- ``history`` in the **event-list schema** (OpenHands V0 / the ``legacy`` harness): ``action`` /
  ``observation`` events read exactly as :mod:`.openhands` reads a V0 event list (parallel calls grouped
  by ``model_response.id``, ``condensation`` actions → recorded compactions, state events skipped); the
  oldest runs' ``[action, observation]`` pairs are flattened first;
- ``history`` in the **newer schema** (the ``OpenHands/benchmarks`` harness on the agent SDK): events
  with ``kind`` (``MessageEvent``, ``ActionEvent``, ``ObservationEvent``, ``Condensation`` …) read by
  :class:`.openhands.V1Reader`, parallel calls grouped by ``llm_response_id``;
- ``instruction`` → the first user message (key ``instruction``) unless the history already starts
  with a user message holding it; a history can be empty: the session is then the instruction alone;
- ``metrics.token_usages [{model, prompt_tokens, completion_tokens, cache_read_tokens,
  cache_write_tokens, reasoning_tokens, context_window, response_id}]`` → usage records on the assistant
  message of their ``response_id`` (V0 responses that carry ``model_response.usage`` keep that one);
- ``metadata`` (``llm_config.model`` / ``llm.model`` / ``model_name``, ``agent_class``,
  ``eval_output_dir``, ``start_time``, ``dataset``), ``metrics.accumulated_cost`` /
  ``accumulated_token_usage``, ``error`` and the keys of ``test_result`` → the session's ``extra``.

Session id: ``<instance_id>@<run>`` (``<instance_id>#<attempt>@<run>`` for a later attempt), where
``<run>`` is a short hash of the run (``eval_output_dir`` and ``start_time`` from ``metadata``, else
the model, else the folder the file is in): the same instance in two runs is two threads, and the same
file imported again (or grown) maps to the same threads. Source keys are the events' ids.

A malformed line, or a line that is not an instance, is a warning naming ``file:line``; the other
instances are imported. The file is append-only while a run is going on, so ``--follow`` can tail it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any, Mapping

from ._common import SessionBuilder, Source, as_int, as_list, as_map, str_or_none
from .jsonl import iter_lines
from .model import ImportedMessage, ImportedSession, ImportFormatError, ParseWarning, TextPart
from .openhands import V1Reader, _parse_v0, v1_usage_records

FORMAT = "openhands-eval"

#: where such files live: wherever the run was started (``evaluation/evaluation_outputs/outputs/…``
#: in an OpenHands checkout, ``eval_outputs/…`` with the benchmarks harness); no fixed home folder
DEFAULT_LOCATIONS: list[str] = [
    "~/OpenHands/evaluation/evaluation_outputs/outputs/**/output.jsonl",
    "~/benchmarks/eval_outputs/**/output.jsonl",
]


def looks_like(obj: object) -> bool:
    """One evaluation instance: ``instance_id`` with ``history`` or ``test_result``."""
    return (isinstance(obj, Mapping) and isinstance(obj.get("instance_id"), (str, int))
            and ("history" in obj or "test_result" in obj))


def looks_like_document(data: object) -> bool:
    if looks_like(data):
        return True
    return isinstance(data, list) and bool(data) and all(looks_like(x) for x in data[:5])


def parse(source: Source, *, final: bool = True) -> list[ImportedSession]:
    data = source.read_bytes()
    instances: list[tuple[int | None, Any]] = []
    problems: list[ParseWarning] = []
    entries = list(iter_lines(data, final=final))
    if any(e.error is None and looks_like(e.value) for e in entries):
        for e in entries:
            if e.error is not None:
                problems.append(ParseWarning(source.name, e.line, f"{e.error}; this instance is skipped"))
            elif not looks_like(e.value):
                problems.append(ParseWarning(source.name, e.line, "not an evaluation instance (no instance_id with history)"))
            else:
                instances.append((e.line, e.value))
    else:
        try:
            doc = json.loads(data.decode("utf-8", errors="replace"))
        except ValueError:
            doc = None
        if not looks_like_document(doc):
            raise ImportFormatError(f"{source.name}: not an OpenHands evaluation output (lines with instance_id and history)")
        for n, obj in enumerate(doc if isinstance(doc, list) else [doc]):
            if looks_like(obj):
                instances.append((None, obj))
            else:
                problems.append(ParseWarning(source.name, None, f"item [{n}] is not an evaluation instance; skipped"))
    if not instances:
        raise ImportFormatError(f"{source.name}: no readable evaluation instance in it")
    sessions = [_instance(source, line, obj) for line, obj in instances]
    first = sessions[0]
    return [replace(first, warnings=tuple(problems) + first.warnings)] + sessions[1:]


def _run_id(source: Source, meta: Mapping[str, Any], model: str | None) -> str:
    basis = [str(meta.get(k)) for k in ("eval_output_dir", "start_time") if meta.get(k)]
    if not basis and model:
        basis = [model]
    if not basis:
        basis = [source.path.parent.name if source.path is not None else source.name]
    return hashlib.sha1("\x00".join(basis).encode()).hexdigest()[:8]


def _model(meta: Mapping[str, Any]) -> str | None:
    for key in ("llm_config", "llm"):
        cfg = meta.get(key)
        if isinstance(cfg, Mapping) and isinstance(cfg.get("model"), str):
            return cfg["model"]
    return str_or_none(meta.get("model_name"))


def _flatten(history: list) -> list:
    """The oldest format keeps ``[action, observation]`` pairs: one event list."""
    out: list = []
    for item in history:
        if isinstance(item, list):
            out.extend(x for x in item if isinstance(x, Mapping) and x)
        else:
            out.append(item)
    return out


def _user_text(ev: object) -> str | None:
    """The text of a user message event (V0 ``action: message`` or V1 ``MessageEvent``), else None."""
    if not isinstance(ev, Mapping) or ev.get("source") != "user":
        return None
    if ev.get("action") == "message":
        args = as_map(ev.get("args"))
        return args.get("content") if isinstance(args.get("content"), str) else ev.get("message")
    if ev.get("kind") == "MessageEvent":
        msg = as_map(ev.get("llm_message"))
        content = msg.get("content")
        if isinstance(content, str):
            return content
        return "\n".join(str(c.get("text")) for c in as_list(content) if isinstance(c, Mapping) and c.get("text"))
    return None


def _instance(source: Source, line: int | None, obj: Mapping[str, Any]) -> ImportedSession:
    iid = str(obj["instance_id"])
    meta = as_map(obj.get("metadata"))
    metrics = as_map(obj.get("metrics"))
    model = _model(meta)
    attempt = as_int(obj.get("attempt"))
    sid = f"{iid}#{attempt}" if attempt and attempt > 1 else iid
    sid = f"{sid}@{_run_id(source, meta, model)}"
    history = _flatten(as_list(obj.get("history")))
    instruction = obj.get("instruction") if isinstance(obj.get("instruction"), str) and obj["instruction"].strip() else None
    first_user = next((t for t in (_user_text(e) for e in history) if t is not None), None)
    prepend = instruction is not None and (first_user is None or first_user.strip() != instruction.strip())
    newer = any(isinstance(e, Mapping) and "kind" in e for e in history[:50])
    usages = as_list(metrics.get("token_usages"))
    if newer:
        b = SessionBuilder(FORMAT, source)
        if prepend and instruction is not None:
            b.add(ImportedMessage(role="user", parts=(TextPart(instruction),), source_key="instruction",
                                  details={"from": "instruction"}))
        reader = V1Reader(b)
        for n, ev in enumerate(history):
            if not isinstance(ev, Mapping) or "kind" not in ev:
                b.warn(f"{iid}: history[{n}] is not an event (no kind); skipped", line)
                continue
            reader.event(ev, f"#{n}")
        for rec in v1_usage_records(usages, reader.groups):
            b.usage(rec)
        session = b.build(final=True, system_prompt=str_or_none(reader.system_prompt), tools=reader.tools)
    elif history or instruction:
        events = ([{"id": "instruction", "source": "user", "action": "message", "args": {"content": instruction}}]
                  if prepend else []) + history
        if events:
            session = _parse_v0(source, events, final=True)
        else:
            session = SessionBuilder(FORMAT, source).build(final=True)
        session = _with_metric_usage(session, usages)
        session = replace(session, warnings=tuple(replace(w, line=line, reason=f"{iid}: {w.reason}")
                                                  for w in session.warnings))
    else:
        session = SessionBuilder(FORMAT, source).build(final=True)
    extra: dict[str, Any] = {"instance_id": iid, "line": line}
    for key in ("agent_class", "eval_output_dir", "start_time", "dataset", "data_split", "dataset_split",
                "max_iterations", "git_commit"):
        if meta.get(key) is not None and not isinstance(meta.get(key), (Mapping, list)):
            extra[key] = meta[key]
    if attempt is not None:
        extra["attempt"] = attempt
    for key in ("accumulated_cost", "accumulated_token_usage"):
        if metrics.get(key) is not None:
            extra[key] = metrics[key]
    if obj.get("error"):
        extra["error"] = str(obj["error"])[:2000]
    if isinstance(obj.get("test_result"), Mapping):
        extra["test_result_keys"] = sorted(str(k) for k in obj["test_result"])
    return replace(session, format=FORMAT, source_session_id=sid, title=iid, model=model or session.model,
                   extra={**session.extra, **extra})


def _with_metric_usage(session: ImportedSession, usages: list) -> ImportedSession:
    """``metrics.token_usages`` for the responses whose events carried no usage of their own."""
    have = {u.response_id for u in session.usage if u.response_id}
    at: dict[str, int] = {}
    for i, m in enumerate(session.messages):
        if m.role == "assistant" and m.response_id and m.response_id not in at:
            at[m.response_id] = i
    more = [r for r in v1_usage_records([u for u in usages if isinstance(u, Mapping) and u.get("response_id") not in have],
                                        at)]
    if not more:
        return session
    return replace(session, usage=tuple(sorted(session.usage + tuple(more), key=lambda r: r.position)))


__all__ = ["FORMAT", "DEFAULT_LOCATIONS", "looks_like", "looks_like_document", "parse"]
