"""Pydantic AI: ``EngineCompaction``, a capability (and a history processor) backed by the engine.

::

    compaction = EngineCompaction(db=URL, thread="support-42")
    agent = Agent(OpenAIChatModel("gpt-4.1", provider=provider), tools=[...], capabilities=[compaction])
    result = await agent.run("Where is my order?", message_history=history)

The hooks it uses are Pydantic AI's own capability hooks: ``prepare_model_request`` (before each
attempt, once the serving model is known — the documented place for compaction) persists the run's
messages the store does not have yet, runs pressure compaction and replaces the request's messages
by the compacted surface (the agent's own message history is not changed: Pydantic AI does not
persist changes made there); ``after_model_request`` records the provider-reported usage;
``on_model_request_error`` is the framework's model-error hook: a context overflow (Pydantic AI's
``ModelContextWindowExceededError`` or an HTTP error, classified by :mod:`engine.llm.errors`) is
recovered at most ``max_overflow_retries`` times per run and only when the surface changed, by
raising ``RetryModelRequest`` (the same request step, attempted again from the compacted store);
anything else re-raises the original error. ``after_run`` / ``on_run_error`` end the engine run.

``EngineCompaction.history_processor`` is the same intake and prune + summary as a plain history
processor (``Agent(capabilities=[ProcessHistory(compaction.history_processor)])``, the form history
processors take in Pydantic AI 2); it records no model requests and recovers no overflow (a history
processor sees no errors; a call it prepared is recorded as succeeded when the next history shows
its response, and :meth:`EngineCompaction.end` settles the last one), and Pydantic AI then makes its
output the run's history (the store keeps everything; messages it built are marked with
:data:`MARK` and not stored again).

Requires ``compaction-inspector[pydantic-ai]`` (``pydantic-ai-slim[openai]>=2.68``).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
from dataclasses import fields as dataclass_fields, replace
from types import SimpleNamespace
from typing import Any, Sequence

try:
    from pydantic_ai import RunContext
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.exceptions import RetryModelRequest
    from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, ModelResponse, SystemPromptPart, UserPromptPart
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("engine.adapters.pydantic_ai needs Pydantic AI: pip install 'compaction-inspector[pydantic-ai]'") from exc

from engine.core.messages import Attachment, Message, Reasoning, ToolCall

from .core import META_RAW, META_SOURCE, SYNTHETIC_USER_TEXT, Call, EngineThread, attachment, source_key, surface_items

SOURCE = "pydantic_ai"
#: ``ModelMessage.metadata`` key marking a message this adapter built from the store: when a history
#: processor's output becomes the run's history (Pydantic AI's ``ProcessHistory`` writes it back),
#: later intake knows these are stored already. The same key marks, in ``SystemPromptPart.metadata``,
#: a system part the engine made (the summary): Pydantic AI merges consecutive requests and drops
#: ``ModelRequest.metadata`` when a history is passed back in (``message_history=``), but a part and
#: its metadata survive the merge
MARK = "compaction_inspector_surface"
#: metadata key: the source id of the Pydantic AI request message a part came from (parts of one
#: request are stored as separate engine messages and regrouped on the way back)
META_GROUP = "group"

__all__ = ["EngineCompaction", "from_engine", "to_engine"]


# -- mapping ---------------------------------------------------------------------------------------
def _dump(msg: ModelMessage) -> dict[str, Any]:
    return ModelMessagesTypeAdapter.dump_python([msg], mode="json")[0]


def _load(data: dict[str, Any]) -> ModelMessage:
    return ModelMessagesTypeAdapter.validate_python([data])[0]


def _sid(raw: dict[str, Any]) -> str:
    """A response's source key: its serialized form (timestamps included) hashed — Pydantic AI
    messages carry no ids, and a run hands the whole history to every request."""
    return source_key("pai", _hash(raw))


def _hash(raw: object) -> str:
    return hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _part_key(part: dict[str, Any]) -> str:
    """A request part's source key. A part is what survives when Pydantic AI merges consecutive
    requests (a history passed back in): a tool result is keyed by the call it answers (answered
    once per thread, whatever its content — the surface may have shown a preview), any other part
    by its own serialized form (its timestamp included)."""
    kind = str(part.get("part_kind"))
    if part.get("tool_call_id") and (kind.endswith("-return") or kind == "retry-prompt"):
        return source_key("pai-call", str(part["tool_call_id"]))
    return source_key("pai-part", _hash(part))


def _part_text(part: dict[str, Any]) -> str:
    content = part.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for c in content:
            if isinstance(c, str):
                out.append(c)
            elif isinstance(c, dict) and isinstance(c.get("text"), str):
                out.append(c["text"])
        return "".join(out) if out or not content else json.dumps(content, ensure_ascii=False, default=str)
    return "" if content is None else json.dumps(content, ensure_ascii=False, default=str)


def _attachments(part: dict[str, Any]) -> tuple[Attachment, ...]:
    """Images and documents of a part's content (URLs, or inline bytes that are never kept)."""
    content = part.get("content")
    out = []
    if isinstance(content, list):
        for c in content:
            if not isinstance(c, dict):
                continue
            kind = c.get("kind")
            if kind == "binary":
                out.append(attachment("document", url="data:;base64,", media_type=c.get("media_type"), title=c.get("identifier")))
            elif kind in ("image-url", "document-url", "file-url"):
                out.append(attachment("image" if kind == "image-url" else "document", url=c.get("url"), media_type=c.get("media_type")))
    return tuple(out)


def to_engine(messages: Sequence[ModelMessage]) -> list[Message]:
    """Pydantic AI messages as engine messages: a request becomes one message per part (system
    prompt parts excluded: they are the thread's system prompt or, marked, the engine's summary;
    the engine's synthetic request excluded: it is the surface's, never the agent's), a response
    one assistant message. Each carries its serialized source, so :func:`from_engine` rebuilds it
    exactly."""
    out: list[Message] = []
    for msg in messages:
        raw = _dump(msg)
        sid = _sid(raw)
        if isinstance(msg, ModelResponse):
            texts: list[str] = []
            calls: list[ToolCall] = []
            reasoning: list[Reasoning] = []
            for part in raw.get("parts", []):
                kind = str(part.get("part_kind"))
                if kind == "text":
                    texts.append(part.get("content") or "")
                elif kind == "thinking":
                    sig = part.get("signature")
                    reasoning.append(Reasoning(text=part.get("content") or "", signature=sig if isinstance(sig, str) else None))
                elif kind.endswith("-call") and not kind.startswith("builtin-") and part.get("tool_call_id") and part.get("tool_name"):
                    args = part.get("args")
                    calls.append(ToolCall(str(part["tool_call_id"]), str(part["tool_name"]), args if isinstance(args, str) else json.dumps(args or {}, ensure_ascii=False)))
            meta: dict[str, Any] = {META_SOURCE: SOURCE, META_RAW: raw}
            out.append(Message("assistant", "".join(texts), tool_calls=tuple(calls), metadata=meta, reasoning=tuple(reasoning), source_key=sid))
            continue
        for part in raw.get("parts", []):
            kind = str(part.get("part_kind"))
            if kind == "system-prompt" or kind == "user-prompt" and part.get("content") == SYNTHETIC_USER_TEXT:
                continue
            one = {**raw, "parts": [part]}
            meta = {META_SOURCE: SOURCE, META_GROUP: sid, META_RAW: one}
            common: dict[str, Any] = {"metadata": meta, "attachments": _attachments(part), "source_key": _part_key(part)}
            if part.get("tool_call_id") and (kind.endswith("-return") or kind == "retry-prompt" and part.get("tool_name")):
                failed = part.get("outcome") in ("retried", "error", "failed") or kind == "retry-prompt"
                out.append(Message("tool", _part_text(part), tool_call_id=str(part["tool_call_id"]), name=part.get("tool_name"), is_error=failed, **common))
            else:
                out.append(Message("user", _part_text(part), is_error=kind in ("retry-feedback", "retry-prompt"), **common))
    return out


def system_parts(messages: Sequence[ModelMessage]) -> list[Any]:
    """The agent's system prompt parts of the history (Pydantic AI puts them in the first request);
    not the engine's (the summary, marked with :data:`MARK`)."""
    return [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, SystemPromptPart) and not (p.metadata or {}).get(MARK)]


#: built messages of :func:`from_engine`, by the stored messages they were built from (held, so an
#: id is never reused while its entry lives) and whether each shows its preview
BuiltCache = dict[tuple[tuple[int, bool], ...], tuple[tuple[Message, ...], ModelMessage]]


def from_engine(stored: Sequence[tuple[Message, bool]], *, cache: BuiltCache | None = None) -> list[ModelMessage]:
    """Engine messages (each with "show its content as a preview") back as Pydantic AI messages:
    consecutive parts of one request are one request again; engine-made messages (summary,
    synthetic request, notes) become requests with a system prompt or user prompt part. With
    ``cache``, a message built from the same stored message objects before is that one again (a
    surface repeats its history on every call: it is not copied and validated again)."""
    out: list[ModelMessage] = []
    group: str | None = None
    members: list[tuple[Message, bool]] = []

    def flush() -> None:
        nonlocal group
        if members:
            out.append(_built(members, cache))
        members.clear()
        group = None

    for message, preview in stored:
        raw = message.metadata.get(META_RAW)
        if not isinstance(raw, dict):
            flush()
            part = UserPromptPart(message.content) if message.role == "user" else SystemPromptPart(message.content, metadata={MARK: True})
            out.append(ModelRequest(parts=[part]))
            continue
        g = message.metadata.get(META_GROUP)
        if raw.get("kind") == "request" and g is not None and g == group and members:
            members.append((message, preview))
            continue
        flush()
        members.append((message, preview))
        if raw.get("kind") == "request" and g is not None:
            group = g
        else:
            flush()
    flush()
    return out


def _built(members: Sequence[tuple[Message, bool]], cache: BuiltCache | None) -> ModelMessage:
    """One Pydantic AI message from the stored messages of one group (a response, or the parts of
    one request), each with its preview in place of the content when pruned."""
    key = tuple((id(m), p) for m, p in members)
    if cache is not None:
        hit = cache.get(key)
        if hit is not None and all(a is b for a, (b, _) in zip(hit[0], members)):
            return hit[1]
    merged: dict[str, Any] | None = None
    for message, preview in members:
        raw = copy.deepcopy(message.metadata[META_RAW])
        if preview and raw.get("parts"):
            raw["parts"][0]["content"] = message.content
        if merged is None:
            merged = raw
        else:
            merged["parts"].extend(raw["parts"])
    assert merged is not None
    built = _load(merged)
    if cache is not None:
        cache[key] = (tuple(m for m, _ in members), built)
    return built


def _marked(message: ModelMessage) -> ModelMessage:
    """A shallow copy of ``message`` whose metadata carries :data:`MARK` (``dataclasses.replace``
    without running the class's ``__init__`` and checks again: the message is a valid one already;
    every field of these dataclasses is an init field, so the copies are the same)."""
    metadata = {**(message.metadata or {}), MARK: True}
    cls = type(message)
    if cls in _PLAIN:
        copy_ = object.__new__(cls)
        copy_.__dict__.update(message.__dict__)
        copy_.metadata = metadata
        return copy_
    return replace(message, metadata=metadata)


#: the message classes :func:`_marked` copies by their ``__dict__`` (no slots, no init=False fields)
_PLAIN = frozenset(c for c in (ModelRequest, ModelResponse)
                   if "__slots__" not in c.__dict__ and all(f.init for f in dataclass_fields(c)))


def _with_system(messages: list[ModelMessage], parts: list[Any]) -> list[ModelMessage]:
    """Put the history's system prompt parts back in front of the first request."""
    if not parts:
        return messages
    if messages and isinstance(messages[0], ModelRequest):
        return [replace(messages[0], parts=[*parts, *messages[0].parts]), *messages[1:]]
    return [ModelRequest(parts=list(parts)), *messages]


def _route(model: object) -> tuple[str | None, str | None]:
    name = getattr(model, "model_name", None)
    provider = getattr(model, "system", None)
    return (provider if isinstance(provider, str) else None), (name if isinstance(name, str) else None)


def _tools(params: object) -> list[dict[str, Any]]:
    out = []
    for t in [*(getattr(params, "function_tools", None) or ()), *(getattr(params, "output_tools", None) or ())]:
        fn: dict[str, Any] = {"name": t.name, "parameters": t.parameters_json_schema}
        if t.description:
            fn["description"] = t.description
        out.append({"type": "function", "function": fn})
    return out


def _tool_defs(ctx: object) -> list[dict[str, Any]]:
    """A history processor's tool schemas: the run's tool manager's definitions (what Pydantic AI
    builds the request parameters from: function tools, then output tools)."""
    defs = list(getattr(getattr(ctx, "tool_manager", None), "tool_defs", None) or ())
    ordered = [d for d in defs if getattr(d, "kind", None) != "output"] + [d for d in defs if getattr(d, "kind", None) == "output"]
    return _tools(SimpleNamespace(function_tools=ordered, output_tools=()))


def _system_prompt(messages: Sequence[ModelMessage], params: object) -> str:
    """The agent's system prompt parts and instructions: from the request parameters when known,
    else (a history processor) the newest request's ``instructions``, which Pydantic AI resolves
    before the processors run."""
    texts = [p.content for p in system_parts(messages)]
    if params is not None:
        texts.extend(p.content for p in getattr(params, "instruction_parts", None) or () if getattr(p, "content", None))
    else:
        last = next((m for m in reversed(messages) if isinstance(m, ModelRequest)), None)
        if last is not None and last.instructions:
            texts.append(last.instructions)
    return "\n\n".join(texts)


# -- the capability --------------------------------------------------------------------------------
class EngineCompaction(AbstractCapability[Any]):
    """The engine's compaction for a Pydantic AI agent (see the module docstring)."""

    def __init__(
        self,
        db: str | None = None,
        thread: str | None = None,
        *,
        service: Any = None,
        title: str = "",
        provider: str | None = None,
        model: str | None = None,
        summarizer: Any = None,
        policies: Any = None,
        workdir: Any = None,
        max_overflow_retries: int | None = None,
    ) -> None:
        if not thread:
            raise ValueError("EngineCompaction needs thread=KEY (the thread the inspector shows)")
        self.engine = EngineThread.open(
            thread,
            source=SOURCE,
            db=db,
            service=service,
            summarizer=summarizer,
            policies=policies,
            workdir=workdir,
            title=title,
            provider=provider,
            model=model,
            max_overflow_retries=max_overflow_retries,
            behind=True,  # the surface sent is the call's (_surface(call))
        )
        self._call: Call | None = None
        #: the history's messages taken in by this run (by identity: a run hands the same objects to
        #: every request, so only the new ones are serialized and keyed), and the surface's built
        #: messages (:func:`from_engine`); both dropped when the run ends
        self._taken: dict[int, ModelMessage] = {}
        self._built: BuiltCache = {}

    @property
    def service(self) -> Any:
        return self.engine.service

    def close(self) -> None:
        self.engine.close()

    # -- blocking steps ---------------------------------------------------------------------------
    def _new(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        """The agent's messages of ``messages`` this run has not taken in (the surface's own, marked, never)."""
        taken = self._taken
        return [m for m in messages if taken.get(id(m)) is not m and not (m.metadata or {}).get(MARK)]

    def _took(self, messages: Sequence[ModelMessage]) -> None:
        """``messages`` are stored (their transaction committed)."""
        self._taken.update((id(m), m) for m in messages)

    def _ended(self) -> None:
        self._taken.clear()
        self._built.clear()

    def _intake(self, model: object, messages: Sequence[ModelMessage], params: object, ctx: object = None) -> list[ModelMessage]:
        t = self.engine
        t.route(*_route(model))
        t.configure(_system_prompt(messages, params), _tools(params) if params is not None else _tool_defs(ctx))
        new = self._new(messages)
        t.stage(to_engine(new))
        return new

    def _surface(self, call: Call, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        items = [(i.message, i.pruned) for i in surface_items(call)]
        built = [_marked(m) for m in from_engine(items, cache=self._built)]
        return _with_system(built, system_parts(messages))

    def _prepare(self, model: object, messages: list[ModelMessage], params: object) -> tuple[Call, list[ModelMessage]]:
        new = self._intake(model, messages, params)
        call = self.engine.begin_call()
        self._took(new)
        return call, self._surface(call, messages)

    def _prepare_now(self, model: object, messages: list[ModelMessage], params: object) -> tuple[Call, list[ModelMessage]] | None:
        """:meth:`_prepare` when it needs no I/O (the configuration as it was, a write-behind step:
        :meth:`EngineThread.begin_call_now`); None: nothing done."""
        t = self.engine
        t.route(*_route(model))
        if not t.configure_now(_system_prompt(messages, params), _tools(params)):
            return None
        new = self._new(messages)
        call = t.begin_call_now(to_engine(new))
        if call is None:
            return None
        self._took(new)
        return call, self._surface(call, messages)

    def _compacted(self, ctx: Any, messages: list[ModelMessage]) -> list[ModelMessage]:
        """The history processor's work: settle the previous call from the response that arrived
        since, intake, pressure compaction, and the recorded request this history is for."""
        self._settle(messages)
        new = self._intake(ctx.model, messages, None, ctx)
        self._call = self.engine.begin_call()
        self._took(new)
        return self._surface(self._call, messages)

    def _settle(self, messages: Sequence[ModelMessage]) -> None:
        """A history processor sees no responses: the call it prepared succeeded when a response
        follows in the next history (its usage is the provider's report)."""
        call, self._call = self._call, None
        if call is None:
            return
        last = next((m for m in reversed(messages) if isinstance(m, ModelResponse)), None)
        usage = getattr(last, "usage", None)
        self.engine.succeeded(call, prompt_tokens=getattr(usage, "input_tokens", None) or None, completion_tokens=getattr(usage, "output_tokens", None) or None)

    def end(self, result: Any = None) -> None:
        """For the history-processor form (the capability does this in ``after_run``): store the
        run's final response, settle its call and end the engine run. Blocking."""
        try:
            if result is not None:
                messages = result.all_messages()
                self._settle(messages)
                self.engine.persist(to_engine(self._new(messages)))
        finally:
            self._ended()
        self.engine.end_run()

    def _fail(self, call: Call, error: BaseException) -> bool:
        return self.engine.failed(call, error)

    # -- hooks -----------------------------------------------------------------------------------
    async def prepare_model_request(self, ctx: Any, request_context: Any) -> Any:
        args = (request_context.model, list(request_context.messages), request_context.model_request_parameters)
        prepared = self._prepare_now(*args)  # no worker thread for a write-behind step
        call, messages = prepared if prepared is not None else await asyncio.to_thread(self._prepare, *args)
        self._call = call
        return replace(request_context, messages=messages)

    async def after_model_request(self, ctx: object, *, request_context: object, response: object) -> Any:
        call, self._call = self._call, None
        if call is not None:
            usage = getattr(response, "usage", None)
            prompt, completion = getattr(usage, "input_tokens", None) or None, getattr(usage, "output_tokens", None) or None
            if not self.engine.succeeded_now(call, prompt_tokens=prompt, completion_tokens=completion):  # held at once: no worker thread
                await asyncio.to_thread(self.engine.succeeded, call, prompt_tokens=prompt, completion_tokens=completion)
        return response

    async def on_model_request_error(self, ctx: object, *, request_context: object, error: Exception) -> Any:
        call, self._call = self._call, None
        if call is not None and await asyncio.to_thread(self._fail, call, error):
            raise RetryModelRequest()
        raise error

    async def after_run(self, ctx: object, *, result: object) -> Any:
        await asyncio.to_thread(self._finish, result)
        return result

    def _finish(self, result: Any) -> None:
        try:  # the final response is not in any later request: store it before the run ends
            self.engine.persist(to_engine(self._new(result.all_messages())))
        finally:
            self._ended()
            self.engine.end_run()

    async def on_run_error(self, ctx: object, *, error: BaseException) -> Any:
        self._ended()
        await asyncio.to_thread(self.engine.fail_run, error)
        raise error

    async def history_processor(self, ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        """Intake + prune + summary as a plain Pydantic AI history processor."""
        return await asyncio.to_thread(self._compacted, ctx, messages)
