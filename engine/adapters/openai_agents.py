"""OpenAI Agents SDK: ``EngineSession`` (a ``Session``) and ``CompactionModel`` (a ``Model`` wrapper).

::

    session = EngineSession("support-42", db=URL)
    model = CompactionModel(OpenAIChatCompletionsModel("gpt-4.1", client), session)
    agent = Agent(name="support", instructions="...", tools=[...], model=model)
    await Runner.run(agent, "Where is my order?", session=session)

The session stores every raw item the runner adds (``add_items``) in the engine's store, grouped
into engine messages: a model turn's ``reasoning`` / ``message`` / ``function_call`` items become one
assistant message (its calls intact), each ``function_call_output`` a tool result. ``get_items``
returns the compacted surface: the rolling summary first, a preview in place of each pruned
``function_call_output``, every call with its output and reasoning items where they were.

The Agents SDK reads a session once per run (``get_items`` at the start) and adds each turn's items
before the next model call; compaction *inside* a run, the recorded model requests and the overflow
recovery therefore live in the model wrapper — the SDK has no error hook for model calls (its
``RunErrorHandlers`` cover only max-turns, refusals and invalid output), and ``RunHooks.on_llm_start``
cannot change the input. ``CompactionModel`` replaces the runner's input by the session's surface
after pressure compaction, records the request with the usage the provider reported, and on a
context overflow (classified by :mod:`engine.llm.errors`) recovers at most ``max_overflow_retries``
times per run, only when the surface changed, else re-raises the original error.

``pop_item`` raises :class:`engine.adapters.core.AdapterError`: the engine's history is append-only
(the runner only pops to roll back OpenAI server-conversation retries, and logs a failed pop).
``clear_session`` starts a fresh thread (``<key>~2``, ``<key>~3`` …); the old one stays in the store
for the inspector.

Requires ``compaction-inspector[openai-agents]`` (``openai-agents>=0.24``).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from typing import Any, AsyncIterator, Iterable, Mapping, Protocol, Sequence

try:
    from agents.items import ModelResponse
    from agents.models.chatcmpl_converter import Converter
    from agents.models.interface import Model
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("engine.adapters.openai_agents needs the OpenAI Agents SDK: pip install 'compaction-inspector[openai-agents]'") from exc

from engine.core.messages import Attachment, Message, Reasoning, ToolCall
from engine.service import RunState

from .core import META_RAW, META_SOURCE, AdapterError, Call, EngineThread, attachment, surface_items, text_of

SOURCE = "openai_agents"
log = logging.getLogger(__name__)

__all__ = ["CompactionModel", "EngineSession", "from_engine", "to_engine"]

#: output item types answered by a ``*_output`` item (the call side travels with the assistant turn)
_OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output", "computer_call_output", "local_shell_call_output", "shell_call_output", "apply_patch_call_output", "mcp_approval_response"})
_CALL_TYPES = {"function_call": "name", "custom_tool_call": "name"}


# -- mapping ---------------------------------------------------------------------------------------
def _assistant(group: Sequence[Mapping[str, Any]]) -> Message:
    texts: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[Reasoning] = []
    for item in group:
        kind = item.get("type")
        if item.get("role") == "assistant":
            texts.append(text_of(item.get("content")))
        elif kind in _CALL_TYPES and item.get("call_id") and item.get("name"):
            args = item.get("arguments", item.get("input", "{}"))
            calls.append(ToolCall(str(item["call_id"]), str(item["name"]), args if isinstance(args, str) else json.dumps(args)))
        elif kind == "reasoning":
            summary = item.get("summary") or []
            content = item.get("content") or []
            encrypted = item.get("encrypted_content")
            reasoning.append(
                Reasoning(
                    text=text_of([{"type": "text", "text": c.get("text")} for c in content if isinstance(c, Mapping)]),
                    summary="\n".join(str(s.get("text", "")) for s in summary if isinstance(s, Mapping)) or None,
                    encrypted=encrypted if isinstance(encrypted, str) else None,
                )
            )
    meta: dict[str, Any] = {META_SOURCE: SOURCE, META_RAW: group}
    return Message("assistant", "".join(texts), tool_calls=tuple(calls), metadata=meta, reasoning=tuple(reasoning))


def _attachments(content: object) -> tuple[Attachment, ...]:
    if not isinstance(content, list):
        return ()
    out = []
    for p in content:
        if isinstance(p, Mapping) and p.get("type") in ("input_image", "input_file"):
            url = p.get("image_url") or p.get("file_url") or p.get("file_data")
            if isinstance(url, str) and p.get("file_data") and not url.startswith("data:"):
                url = "data:;base64,"  # inline bytes, never kept
            out.append(attachment("image" if p.get("type") == "input_image" else "document", url=url, file_id=p.get("file_id"), title=p.get("filename")))
    return tuple(out)


def to_engine(items: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Raw items (as the runner adds them) as engine messages; each message keeps its items."""
    out: list[Message] = []
    group: list[Mapping[str, Any]] = []

    def flush() -> None:
        if group:
            out.append(_assistant(list(group)))
            group.clear()

    for item in items:
        item = copy.deepcopy(dict(item))
        kind, role = item.get("type"), item.get("role")
        if kind in _OUTPUT_TYPES:
            flush()
            output = item.get("output")
            meta: dict[str, Any] = {META_SOURCE: SOURCE, META_RAW: [item]}
            failed = item.get("status") == "incomplete" or (isinstance(output, Mapping) and bool(output.get("error")))
            text = output if isinstance(output, str) else text_of(output) if isinstance(output, list) else json.dumps(output, ensure_ascii=False)
            call_id = str(item.get("call_id") or item.get("approval_request_id") or "")
            out.append(Message("tool", text, tool_call_id=call_id, metadata=meta, attachments=_attachments(output), is_error=failed))
        elif role in ("user", "system", "developer") and kind in (None, "message"):
            flush()
            meta = {META_SOURCE: SOURCE, META_RAW: [item]}
            out.append(Message(role, text_of(item.get("content")), metadata=meta, attachments=_attachments(item.get("content"))))
        else:  # assistant messages, calls, reasoning and any other output item travel together
            group.append(item)
    flush()
    return out


def from_engine(message: Message, *, preview: bool = False) -> list[dict[str, Any]]:
    """The raw items an engine message was made from; with ``preview``, a pruned output's preview
    replaces its ``output``. Messages the engine made itself become easy input messages."""
    raw = message.metadata.get(META_RAW)
    if isinstance(raw, (list, tuple)):
        items = [_copied(dict(i)) for i in raw]
        if preview and message.role == "tool" and items:
            items[0]["output"] = message.content
        return items
    return [{"role": message.role if message.role in ("user", "developer") else "system", "content": message.content}]


_ATOMS = (str, int, float, bool, type(None))


def _copied(value: Any) -> Any:
    """``copy.deepcopy`` of an item: JSON-shaped values (dicts, lists, strings, numbers) copied
    directly (the surface's items are copied on every call, a deep copy's generic machinery was
    most of it), anything else by ``copy.deepcopy``."""
    kind = type(value)
    if kind is dict:
        return {k: _copied(v) for k, v in value.items()}
    if kind is list:
        return [_copied(v) for v in value]
    if kind in _ATOMS:
        return value
    return copy.deepcopy(value)


def _fingerprint(item: object) -> str:
    return json.dumps(item, sort_keys=True, default=str)


# -- the session -----------------------------------------------------------------------------------
class EngineSession:
    """An Agents SDK session kept in the engine's store (see the module docstring).

    ``session_id`` is the thread key the inspector lists; ``db`` the store URL (or pass an open
    ``service``); ``compact_on_get`` runs pressure compaction when the runner reads the history at
    the start of a run (``CompactionModel`` also does it before every model call)."""

    session_settings = None

    def __init__(
        self,
        session_id: str,
        *,
        db: str | None = None,
        service: Any = None,
        title: str = "",
        provider: str | None = None,
        model: str | None = None,
        summarizer: Any = None,
        policies: Any = None,
        workdir: Any = None,
        max_overflow_retries: int | None = None,
        compact_on_get: bool = True,
    ) -> None:
        self.thread = EngineThread.open(
            session_id,
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
            behind=True,  # CompactionModel sends what the call sends (items_of(call))
        )
        self.compact_on_get = compact_on_get
        self._base_key = session_id
        self._generation = 1
        self._last: str | None = None  # fingerprint of the newest item this process stored
        self.final_pending = False  # the model answered without calls: end the run once that answer is stored

    @property
    def session_id(self) -> str:
        return self.thread.key

    @property
    def service(self) -> Any:
        return self.thread.service

    def close(self) -> None:
        self.thread.close()

    # -- blocking ------------------------------------------------------------------------------
    def _add(self, items: list[Mapping[str, Any]]) -> None:
        if not items:
            return
        self.thread.defer(to_engine(items))  # with the next model call's transaction (or the run's end)
        self._last = _fingerprint(dict(items[-1]))
        if self.final_pending:
            self.final_pending = False
            self.thread.end_run()

    def surface(self, *, compact: bool) -> list[dict[str, Any]]:
        """The compacted surface as raw items (after pressure compaction when ``compact``)."""
        t = self.thread
        t.ensure()
        t.flush()  # the items added since the last model call, before the surface is read
        svc = t.service
        run = t.run
        if compact:
            try:
                svc.steps.compact_for_pressure(t.key, run or RunState(), running_turn=run is not None)
            except Exception:  # §2.9: the read goes on with the persisted surface
                log.warning("pressure compaction failed on thread %r while reading the session", t.key, exc_info=True)
        m = svc.steps.measure(t.key, ephemeral=run.ephemeral if run else (), provider=t.provider, model=t.model)
        return self.items_of(m)

    @staticmethod
    def items_of(measured: object) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for item in surface_items(measured):
            out.extend(from_engine(item.message, preview=item.pruned))
        return out

    def in_sync(self, items: object) -> bool:
        """True when ``items`` (the runner's model input) ends with the newest item stored here,
        so the stored surface holds everything the runner would send."""
        return isinstance(items, list) and bool(items) and self._last is not None and _fingerprint(dict(items[-1])) == self._last

    # -- the Session protocol --------------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[dict[str, Any]]:
        items = await asyncio.to_thread(self.surface, compact=self.compact_on_get and limit is None)
        return items[-limit:] if limit else items

    async def add_items(self, items: list[Any]) -> None:
        items = list(items)
        if items and not self.final_pending and self.thread.defer_now(to_engine(items)):  # held at once: no worker thread
            self._last = _fingerprint(dict(items[-1]))
            return
        await asyncio.to_thread(self._add, items)

    async def pop_item(self) -> Any:
        raise AdapterError("EngineSession keeps an append-only history: an item cannot be popped (the thread stays as stored)")

    async def clear_session(self) -> None:
        """Start a fresh thread; the previous one stays in the store."""
        await asyncio.to_thread(self.thread.end_run)
        self._generation += 1
        old = self.thread
        self.thread = EngineThread(old.service, f"{self._base_key}~{self._generation}", SOURCE, title=old.title, provider=old.provider, model=old.model, max_overflow_retries=old.max_overflow_retries, owns_service=old.owns_service)
        self._last = None


# -- the model wrapper -----------------------------------------------------------------------------
class CompactionModel(Model):
    """Wraps an Agents SDK ``Model``: pressure compaction before every call, the session's surface as
    the input, recorded model requests, bounded overflow recovery (see the module docstring)."""

    def __init__(self, model: Model, session: EngineSession, *, provider: str = "openai", model_name: str | None = None) -> None:
        self.inner = model
        self.session = session
        self.provider = provider
        wrapped_name = getattr(model, "model", None)  # OpenAIResponsesModel / OpenAIChatCompletionsModel name theirs
        self.model_name = model_name or (wrapped_name if isinstance(wrapped_name, str) else None)
        self._tools_seen: tuple[list[Any], list[dict[str, Any]]] | None = None

    def _prepare(self, system_instructions: str | None, input: object, tools: Sequence[Any], handoffs: Sequence[Any]) -> bool:
        t = self.session.thread
        t.route(self.provider, self.model_name)
        t.configure(system_instructions, self._schemas(tools, handoffs))
        synced = self.session.in_sync(input)
        if not synced:
            log.warning("the model input does not end with the session's newest item: sent as given, not compacted (is the session passed to Runner.run?)")
        return synced

    def _schemas(self, tools: Sequence[Any], handoffs: Sequence[Any]) -> list[dict[str, Any]]:
        """The chat schemas of ``tools`` and ``handoffs``: converted again only when the objects
        change (the runner passes the same ones on every call)."""
        given = [*tools, *handoffs]
        held = self._tools_seen
        if held is not None and len(held[0]) == len(given) and all(a is b for a, b in zip(held[0], given)):
            return held[1]
        schemas: list[dict[str, Any]] = []
        for tool in tools:
            try:
                schemas.append(dict(Converter.tool_to_openai(tool)))
            except Exception:  # noqa: BLE001 - a hosted tool the chat converter does not express
                schemas.append({"type": getattr(tool, "name", type(tool).__name__)})
        schemas.extend(dict(Converter.convert_handoff_tool(h)) for h in handoffs)
        self._tools_seen = (given, schemas)
        return schemas

    def _input(self, call: Call, input: object, synced: bool) -> Any:
        return EngineSession.items_of(call) if synced else input

    def _start(self, synced: bool | None, system_instructions: str | None, input: object, tools: Sequence[Any], handoffs: Sequence[Any]) -> tuple[bool, Call, Any]:
        """One attempt's blocking work in one worker-thread trip: on the first (``synced`` None)
        the route and configuration, then the step's start (:meth:`EngineThread.begin_call`) and
        the model input built from its surface."""
        if synced is None:
            synced = self._prepare(system_instructions, input, tools, handoffs)
        call = self.session.thread.begin_call()
        return synced, call, self._input(call, input, synced)

    def _start_now(self, synced: bool | None, system_instructions: str | None, input: object, tools: Sequence[Any], handoffs: Sequence[Any]) -> tuple[bool, Call, Any] | None:
        """:meth:`_start` when it needs no I/O (the configuration as it was, the input in sync with
        the session, a write-behind step: :meth:`EngineThread.begin_call_now`); None: nothing done."""
        t = self.session.thread
        if synced is None:
            t.route(self.provider, self.model_name)
            if not t.configure_now(system_instructions, self._schemas(tools, handoffs)) or not self.session.in_sync(input):
                return None
            synced = True
        call = t.begin_call_now()
        return None if call is None else (synced, call, self._input(call, input, synced))

    async def _begin(self, synced: bool | None, system_instructions: str | None, input: object, tools: Sequence[Any], handoffs: Sequence[Any]) -> tuple[bool, Call, Any]:
        """One attempt's start: without a worker thread when it needs no I/O."""
        started = self._start_now(synced, system_instructions, input, tools, handoffs)
        return started if started is not None else await asyncio.to_thread(self._start, synced, system_instructions, input, tools, handoffs)

    def _done(self, call: Call, response: _Output | None, usage: object) -> None:
        t = self.session.thread
        t.succeeded(call, prompt_tokens=getattr(usage, "input_tokens", None) or None, completion_tokens=getattr(usage, "output_tokens", None) or None)
        self._final(response)

    def _done_now(self, call: Call, response: _Output | None, usage: object) -> bool:
        """:meth:`_done` when it needs no I/O (:meth:`EngineThread.succeeded_now`): True, done."""
        t = self.session.thread
        if not t.succeeded_now(call, prompt_tokens=getattr(usage, "input_tokens", None) or None,
                               completion_tokens=getattr(usage, "output_tokens", None) or None):
            return False
        self._final(response)
        return True

    def _final(self, response: _Output | None) -> None:
        output = response.output if response is not None else []
        if not any(getattr(o, "type", None) in _CALL_TYPES or (isinstance(o, Mapping) and o.get("type") in _CALL_TYPES) for o in output):
            self.session.final_pending = True

    def _fail(self, call: Call, exc: BaseException, synced: bool) -> bool:
        t = self.session.thread
        if t.failed(call, exc) and synced:
            return True
        t.fail_run(exc)
        return False

    async def get_response(self, system_instructions: str | None, input: Any, model_settings: Any, tools: list[Any], output_schema: Any, handoffs: list[Any], tracing: Any, **kwargs: Any) -> ModelResponse:
        t = self.session.thread
        try:
            known: bool | None = None  # whether the input ends with the session's newest item (found on the first attempt)
            while True:
                synced, call, model_input = await self._begin(known, system_instructions, input, tools, handoffs)
                known = synced
                try:
                    response = await self.inner.get_response(system_instructions, model_input, model_settings, tools, output_schema, handoffs, tracing, **kwargs)
                except Exception as exc:
                    if await asyncio.to_thread(self._fail, call, exc, synced):
                        continue
                    raise
                if not self._done_now(call, response, response.usage):  # held at once: no worker thread
                    await asyncio.to_thread(self._done, call, response, response.usage)
                return response
        except Exception as exc:  # never leave the thread busy with a run nobody drives
            await asyncio.to_thread(t.abandon, exc)
            raise

    async def stream_response(self, system_instructions: str | None, input: Any, model_settings: Any, tools: list[Any], output_schema: Any, handoffs: list[Any], tracing: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """Streamed calls: an error before the first event may be recovered (nothing reached the
        runner yet); one after it is recorded and raised."""
        t = self.session.thread
        try:
            known: bool | None = None  # whether the input ends with the session's newest item (found on the first attempt)
            while True:
                synced, call, model_input = await self._begin(known, system_instructions, input, tools, handoffs)
                known = synced
                started = False
                final: Any = None
                try:
                    async for event in self.inner.stream_response(system_instructions, model_input, model_settings, tools, output_schema, handoffs, tracing, **kwargs):
                        started = True
                        if getattr(event, "type", None) == "response.completed":
                            final = getattr(event, "response", None)
                        yield event
                except Exception as exc:
                    if await asyncio.to_thread(self._fail, call, exc, synced and not started):
                        continue
                    raise
                usage = getattr(final, "usage", None)
                output = list(getattr(final, "output", None) or [])
                if not self._done_now(call, _Streamed(output), usage):
                    await asyncio.to_thread(self._done, call, _Streamed(output), usage)
                return
        except Exception as exc:
            await asyncio.to_thread(t.abandon, exc)
            raise

    async def close(self) -> None:
        closer = getattr(self.inner, "close", None)
        if closer is not None:
            result = closer()
            if asyncio.iscoroutine(result):
                await result


class _Output(Protocol):
    """What ``_done`` reads of a response: a ``ModelResponse``, or the output of a streamed one."""

    @property
    def output(self) -> Sequence[Any]: ...


class _Streamed:
    """The output of a streamed response, as ``_done`` reads it."""

    def __init__(self, output: list[Any]) -> None:
        self.output = output

