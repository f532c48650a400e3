"""LangChain v1: ``CompactionMiddleware``, a drop-in for ``SummarizationMiddleware``.

::

    agent = create_agent(model, tools, middleware=[CompactionMiddleware(db=URL, thread="support-42")])

It works in ``wrap_model_call`` / ``awrap_model_call``, where the system message and the tools are
visible. Before every model call it persists the graph state's messages the store does not have
(each with its serialized LangChain form, so tool calls, tool results and thinking blocks come back
exactly), runs pressure compaction on the stored thread (prune first, then a summary if still at the
threshold) and sends the model the compacted surface in place of ``request.messages``. The graph
state is never edited: its history stays whole whatever compaction or a failing summarizer does.
Each call is recorded as a model request with the usage the provider reported; a context overflow
(LangChain's ``ContextOverflowError`` or the provider's HTTP error, classified by
:mod:`engine.llm.errors`) is recovered at most ``max_overflow_retries`` times per run, and only when
the recovery changed the surface; otherwise the original error is raised.

Requires ``compaction-inspector[langchain]`` (``langchain>=1.5``, ``langchain-core>=1.8``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from operator import is_
from typing import Any, Callable, Mapping, Sequence, cast
from uuid import uuid4

try:
    from langchain.agents.middleware import AgentMiddleware
    from langchain.agents.middleware.types import ModelRequest, ModelResponse
    from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage, message_to_dict, messages_from_dict
    from langchain_core.utils.function_calling import convert_to_openai_tool
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("engine.adapters.langchain needs LangChain v1: pip install 'compaction-inspector[langchain]'") from exc

from engine.core.messages import META_PRUNED, Attachment, Message, Reasoning, ToolCall, summary_message

from .core import META_RAW, META_SOURCE, AdapterError, Call, EngineThread, attachment, source_key, text_of

SOURCE = "langchain"

__all__ = ["CompactionMiddleware", "from_engine", "to_engine"]


# -- mapping ---------------------------------------------------------------------------------------
def _source_key(msg: BaseMessage, raw: Mapping[str, Any]) -> str:
    if msg.id:
        return source_key("lc", msg.id)
    return source_key("lc-sha", hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest())


def _reasoning(msg: BaseMessage) -> list[Reasoning]:
    """Thinking / reasoning blocks of an AI message: Anthropic ``thinking`` / ``redacted_thinking``,
    LangChain v1 ``reasoning`` blocks, and DeepSeek-style ``reasoning_content``."""
    out: list[Reasoning] = []
    if isinstance(msg.content, list):
        for block in msg.content:
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if kind == "thinking":
                out.append(Reasoning(text=_str(block.get("thinking")) or "", signature=_str(block.get("signature"))))
            elif kind == "redacted_thinking":
                out.append(Reasoning(redacted=True, encrypted=_str(block.get("data"))))
            elif kind == "reasoning":
                summary = block.get("summary")
                text = _str(block.get("reasoning")) or (text_of(summary) if isinstance(summary, list) else "")
                out.append(Reasoning(text=text, summary=_str(summary), encrypted=_str(block.get("encrypted_content"))))
    extra = msg.additional_kwargs.get("reasoning_content")
    if isinstance(extra, str) and extra:
        out.append(Reasoning(text=extra))
    return out


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _attachments(msg: BaseMessage) -> list[Attachment]:
    """Images and files of the content: OpenAI ``image_url`` parts and LangChain v1 ``image`` /
    ``file`` blocks (URL, inline base64 or a provider file id)."""
    out: list[Attachment] = []
    if isinstance(msg.content, list):
        for block in msg.content:
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if kind == "image_url":
                image = block.get("image_url")
                out.append(attachment("image", url=image.get("url") if isinstance(image, Mapping) else image))
            elif kind in ("image", "file"):
                url = block.get("url") or (("data:" + str(block.get("mime_type") or "") + ";base64,") if block.get("base64") else None)
                out.append(attachment("image" if kind == "image" else "document", url=url, media_type=block.get("mime_type"), file_id=block.get("file_id") or block.get("id")))
    return out


#: ``json.dumps(args, ensure_ascii=False)`` with one encoder made once (dumps builds a new one for
#: any non-default option: some µs on every reply's tool calls)
_args_json = json.JSONEncoder(ensure_ascii=False).encode


def to_engine(msg: BaseMessage) -> Message:
    """A LangChain message as an engine message; the serialized original rides in the metadata,
    the message id is the source key (stored once however often the graph state repeats it)."""
    raw = message_to_dict(msg)
    meta: dict[str, Any] = {META_SOURCE: SOURCE, META_RAW: raw}
    common: dict[str, Any] = {"name": msg.name, "metadata": meta, "source_key": _source_key(msg, raw), "attachments": tuple(_attachments(msg))}
    content = text_of(msg.content)
    if isinstance(msg, AIMessage):
        calls = tuple(ToolCall(cid, c["name"], _args_json(c.get("args") or {}))
                      for c in msg.tool_calls if (cid := c.get("id")) and c.get("name"))
        return Message("assistant", content, tool_calls=calls, reasoning=tuple(_reasoning(msg)), **common)
    if isinstance(msg, ToolMessage):
        return Message("tool", content, tool_call_id=msg.tool_call_id, is_error=msg.status == "error", **common)
    if isinstance(msg, SystemMessage):
        return Message("system", content, **common)
    return Message("user", content, **common)  # HumanMessage; ChatMessage / FunctionMessage kept raw


def from_engine(message: Message, *, preview: bool = False) -> BaseMessage:
    """The LangChain message an engine message was made from; with ``preview``, the message's
    content (a pruned result's preview) replaces the original's. Messages the engine made itself
    (summary, synthetic request, notes) become system / human messages."""
    raw = message.metadata.get(META_RAW)
    if isinstance(raw, Mapping):
        (msg,) = messages_from_dict([dict(raw)])
        return msg.model_copy(update={"content": message.content}) if preview else msg
    if message.role == "user":
        return HumanMessage(content=message.content)
    if message.role in ("system", "developer"):
        return SystemMessage(content=message.content)
    raise AdapterError(f"cannot map a stored {message.role} message without its LangChain form back to LangChain")


def _usage(response: ModelResponse) -> tuple[int | None, int | None]:
    for m in response.result:
        if isinstance(m, AIMessage) and m.usage_metadata:
            return m.usage_metadata.get("input_tokens"), m.usage_metadata.get("output_tokens")
    return None, None


def _route(model: Any) -> tuple[str | None, str | None]:
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    provider = None
    try:
        provider = model._get_ls_params().get("ls_provider")  # the provider name LangChain traces with
    except Exception:  # noqa: BLE001 - a model without LangChain's tracing parameters: no provider name
        provider = None
    return provider, name if isinstance(name, str) else None


def _tool_schemas(tools: Sequence[Any]) -> list[dict[str, Any]]:
    out = []
    for t in tools:
        try:
            out.append(convert_to_openai_tool(t))
        except Exception:  # noqa: BLE001 - a provider-native tool dict LangChain passes through unchanged
            out.append(dict(t) if isinstance(t, Mapping) else {"name": str(getattr(t, "name", t))})
    return out


class _Mapped:
    """The last surface of a thread mapped to LangChain messages, with the graph state it was
    mapped against (:meth:`CompactionMiddleware._compacted`). The next call's state repeats that
    state's message objects and adds to it, and its surface repeats the last one's messages (the
    same objects: a step that compacts builds new ones) and adds to them: only the added part is
    mapped. A new state message that could change an earlier mapping (an id seen before, or one an
    earlier message was mapped without) starts over, as does anything else."""

    __slots__ = ("state", "by_id", "hashed", "history", "out", "unmatched")

    def __init__(self, state: Sequence[AnyMessage]) -> None:
        self.state = list(state)
        self.by_id: dict[str, AnyMessage] | None = None  # by id: the source key is "lc:" + id (built if needed)
        self.hashed: dict[str, AnyMessage] | None = None  # by source key, for ids too long to be one (built if needed)
        self.history: list[Message] = []
        self.out: list[AnyMessage] = []
        self.unmatched: set[str] = set()  # source keys mapped from their stored form: not in the state then

    def extends(self, state: Sequence[AnyMessage], history: Sequence[Message]) -> bool:
        """``state`` and ``history`` start with the ones mapped last (by identity) and ``state``'s
        new messages change no earlier mapping; taken in if so."""
        n, k = len(self.state), len(self.history)
        if len(state) < n or len(history) < k or not all(map(is_, state, self.state)) or not all(map(is_, history, self.history)):
            return False
        added = state[n:]
        for x in added:
            if x.id and (x.id in self._ids() or ("lc:" + x.id) in self.unmatched or source_key("lc", x.id) in self.unmatched):
                return False
        by_id, hashed = self.by_id, self.hashed
        for x in added:
            if x.id:
                if by_id is not None:
                    by_id[x.id] = x
                if hashed is not None:
                    hashed[source_key("lc", x.id)] = x
        self.state.extend(added)
        return True

    def _ids(self) -> dict[str, AnyMessage]:
        if self.by_id is None:
            self.by_id = {x.id: x for x in self.state if x.id}
        return self.by_id

    def map(self, history: Sequence[Message]) -> list[AnyMessage]:
        """``history`` as LangChain messages (a new list: the request owns it)."""
        for m in history[len(self.history):]:
            key = m.source_key
            original: AnyMessage | None = None
            if key is not None:
                if key.startswith("lc:"):
                    original = self._ids().get(key[3:])
                elif key.startswith("lc-sha:"):
                    if self.hashed is None:
                        self.hashed = {source_key("lc", x.id): x for x in self.state if x.id}
                    original = self.hashed.get(key)
                if original is None and key.startswith(("lc:", "lc-sha:")):
                    self.unmatched.add(key)
            pruned = bool(m.metadata.get(META_PRUNED))
            if original is None:
                # a concrete message class (messages_from_dict, HumanMessage, SystemMessage): one of AnyMessage
                self.out.append(cast("AnyMessage", from_engine(m, preview=pruned)))
            else:
                self.out.append(original.model_copy(update={"content": m.content}) if pruned else original)
            self.history.append(m)
        return list(self.out)


# -- the middleware --------------------------------------------------------------------------------
class CompactionMiddleware(AgentMiddleware):
    """Compaction by the engine for a ``create_agent`` loop (see the module docstring).

    ``thread`` names the store's thread (default: the LangGraph ``thread_id`` of the run's config);
    ``db`` is the store URL (or pass an open ``service``); ``summarizer`` / ``policies`` /
    ``workdir`` as for :func:`engine.service.open_service`; ``provider`` / ``model`` fix the route
    the policy is resolved for (default: from the chat model); ``max_overflow_retries`` overrides
    the policy's."""

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
        super().__init__()
        if service is None:
            from engine.service import open_service

            service = open_service(db, workdir=workdir, summarizer=summarizer, policies=policies, create=True)
            self._owns = True
        else:
            self._owns = False
        self.service = service
        self._key = thread
        self._title, self._provider, self._model = title, provider, model
        self._max_overflow_retries = max_overflow_retries
        self._threads: dict[str, EngineThread] = {}
        self._tools_seen: tuple[list[Any], list[dict[str, Any]]] | None = None
        self._mapped: dict[str, _Mapped] = {}  # per thread key: the last surface as mapped (_compacted)

    def close(self) -> None:
        """Write what its threads still hold (:meth:`EngineThread.close`), then close the service if
        this middleware opened it."""
        for t in self._threads.values():
            t.close()
        if self._owns:
            self.service.close()

    def thread(self, key: str | None = None) -> EngineThread:
        """The engine thread for ``key`` (default: the configured one, else the run's ``thread_id``)."""
        key = key or self._key or _config_thread_id()
        if not key:
            raise AdapterError("CompactionMiddleware needs thread=KEY, or a LangGraph config with configurable.thread_id")
        t = self._threads.get(key)
        if t is None:
            t = self._threads[key] = EngineThread(self.service, key, SOURCE, title=self._title, provider=self._provider,
                                                      model=self._model, max_overflow_retries=self._max_overflow_retries, behind=True)
        return t

    # -- blocking steps (async paths run them in a worker thread) --------------------------------
    def _intake(self, t: EngineThread, request: ModelRequest) -> None:
        if not (t.provider and t.model):  # once resolved (or fixed by the caller) the route stays
            t.route(*_route(request.model))
        system = request.system_message.text if request.system_message is not None else None
        t.configure(system, self._schemas(request.tools))
        # the state repeats the list taken in last time (the same objects: compared by identity
        # first, in C) and adds to it: only the rest is looked at; a message with an id is keyed by
        # it, and one this process stored is skipped unserialized
        messages, seen = request.messages, t.seen
        rest = messages[len(seen):] if seen and len(messages) >= len(seen) and messages[: len(seen)] == seen else messages
        t.stage(to_engine(m) for m in rest if not (m.id and t.knows(source_key("lc", m.id))))
        t.seen = list(messages)

    def _schemas(self, tools: Sequence[Any]) -> list[dict[str, Any]]:
        """The OpenAI schemas of ``tools``: converted again only when the tool objects change (an
        agent passes the same ones on every call; converting a tool builds its JSON schema)."""
        held = self._tools_seen
        if held is not None and len(held[0]) == len(tools) and all(a is b for a, b in zip(held[0], tools)):
            return held[1]
        schemas = _tool_schemas(tools)
        self._tools_seen = (list(tools), schemas)
        return schemas

    def _compacted(self, request: ModelRequest, call: Call) -> ModelRequest:
        """The surface as LangChain messages: the state's own message objects where the state has
        them (a pruned result copied with its preview), the stored form read back otherwise. (The
        envelope's summary and surface messages as :func:`surface_items` lists them, without its
        system prompt, which the framework sends itself.) Only what the last call's surface did not
        already hold is mapped (:class:`_Mapped`)."""
        surface = call.surface
        history: Sequence[Message] = surface.messages
        if surface.summary:
            history = [summary_message(surface.summary), *history]
        key = call.measured.snapshot.thread
        held = self._mapped.get(key)
        if held is None or not held.extends(request.messages, history):
            held = self._mapped[key] = _Mapped(request.messages)
        return request.override(messages=held.map(history))

    @staticmethod
    def _done(call: Call, response: ModelResponse) -> tuple[int | None, int | None, list[Message]]:
        prompt, completion = _usage(response)
        for m in response.result:
            if m.id is None:  # the graph's reducer would give it a fresh id: give it ours so it is stored once
                m.id = f"lc-run-{uuid4()}"
        return prompt, completion, [to_engine(m) for m in response.result]

    # -- hooks -----------------------------------------------------------------------------------
    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> ModelResponse:
        t = self.thread()
        try:
            self._intake(t, request)
        except Exception as exc:  # never leave the thread busy with a run nobody drives
            t.abandon(exc)
            raise
        return t.call(lambda call: handler(self._compacted(request, call)), self._done)

    async def awrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> ModelResponse:
        t = self.thread()
        try:
            await asyncio.to_thread(self._intake, t, request)
        except Exception as exc:
            await asyncio.to_thread(t.abandon, exc)
            raise

        async def send(call: Call) -> ModelResponse:
            return await handler(await asyncio.to_thread(self._compacted, request, call))

        return await t.acall(send, self._done)

    def after_agent(self, state: object, runtime: object) -> dict[str, Any] | None:
        self.thread().end_run()
        return None

    async def aafter_agent(self, state: object, runtime: object) -> dict[str, Any] | None:
        await asyncio.to_thread(self.thread().end_run)
        return None


def _config_thread_id() -> str | None:
    try:
        from langgraph.config import get_config

        value = (get_config().get("configurable") or {}).get("thread_id")
    except Exception:  # noqa: BLE001 - outside a LangGraph run (or no langgraph installed)
        return None
    return str(value) if value is not None else None
