"""What the adapters share: one engine thread seen from a foreign agent loop, on the one step driver.

A :class:`EngineThread` runs a framework's model calls on :class:`engine.step.StepDriver` (the
step our own harness and what-if run on too), through :class:`engine.service.Service` only:

1. **intake** — :meth:`EngineThread.stage` takes the framework's messages the thread does not have
   yet (each carries its framework's raw form in ``Message.metadata["raw"]`` and, where the
   framework identifies messages, a ``source_key``, so nothing is lost and nothing is stored
   twice: the database's unique key decides, keys seen by this process are skipped before asking);
2. **pressure** — :meth:`EngineThread.begin_call` stores them, runs the pressure check, measures
   the request the model will really get (system prompt and tool schemas included:
   :meth:`EngineThread.configure` keeps them current) and records the model request — one
   transaction when nothing needs compacting; else pruning, then a summary only if still at the
   threshold;
3. **outcome** — :meth:`EngineThread.succeeded` records the provider-reported usage with the
   response's messages, held by the step driver for the next call's transaction (at most
   :data:`HOLD_SECONDS`, then written on a background thread; a run's end, :meth:`EngineThread.flush`
   and :meth:`EngineThread.abandon` write it first: no request stays pending after a run); :meth:`EngineThread.failed` classifies the error with
   :mod:`engine.llm.errors` and, for a context overflow, recovers at most ``max_overflow_retries``
   times per run and only when the surface generation grew — otherwise the caller re-raises the
   ORIGINAL error. :meth:`EngineThread.call` / :meth:`EngineThread.acall` do 2 and 3 around a
   model call the adapter supplies.

The adapters map :func:`surface_items` (what the model should see: the summary, the
synthetic user message, history with previews in place of pruned tool results, ephemeral notes)
back into their framework's message types.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Iterable, Literal, Mapping, Sequence, TypeVar

from engine.core.errors import EngineError
from engine.core.messages import META_EPHEMERAL, META_PRUNED, META_SUMMARY, META_SYNTHETIC, Attachment, Message
from engine.llm.errors import CONTEXT_WINDOW_EXCEEDED, ProviderError, classify_http_error, classify_inband
from engine.service import RunState, Service, open_service
from engine.step import SYNTHETIC_USER_TEXT, Call as StepCall, StepDriver, describe

T = TypeVar("T")

log = logging.getLogger(__name__)

#: metadata key: which framework wrote the message (``langchain``, ``openai_agents``, ``pydantic_ai``)
META_SOURCE = "source"
#: metadata key: the framework's serialized message (the lossless form the adapter maps back from)
META_RAW = "raw"
#: how long a call's usage and reply may wait for the next step's transaction (:attr:`engine.step.StepDriver.hold`):
#: a fast tool round writes them with the next request; a slower one on a background thread after this
#: (well under the inspector's 3 s poll)
HOLD_SECONDS = 0.25
#: the store's limit on ``Message.source_key``
_SOURCE_KEY_MAX = 300

SurfaceKind = Literal["summary", "synthetic", "ephemeral", "history"]


class AdapterError(EngineError):
    """An adapter cannot do what the framework asked (e.g. delete history from an append-only store)."""

    code = "adapter_unsupported"


@dataclass(frozen=True)
class SurfaceItem:
    """One message of what the model sees: ``kind`` says what it is; ``message`` carries, for
    history, the stored metadata (raw form, source id) and, when pruned, the preview as content."""

    kind: SurfaceKind
    message: Message

    @property
    def pruned(self) -> bool:
        return bool(self.message.metadata.get(META_PRUNED))

    @property
    def raw(self) -> Any:
        return self.message.metadata.get(META_RAW)


#: one model call in flight (:class:`engine.step.Call`): the measured request, its recorded id, the step
Call = StepCall


def surface_items(sent: Any) -> list[SurfaceItem]:
    """The envelope's messages after the system prompt, each with its kind: of a :class:`Call` (what
    it sends, :attr:`engine.step.Call.envelope`) or of a measurement."""
    out: list[SurfaceItem] = []
    envelope = sent.envelope
    for i, m in enumerate(envelope.messages()):
        if i == 0 and envelope.system_prompt and m.role == "system" and m.content == envelope.system_prompt:
            continue  # the system prompt: the framework sends its own
        md = m.metadata
        kind: SurfaceKind = "summary" if md.get(META_SUMMARY) else "synthetic" if md.get(META_SYNTHETIC) else "ephemeral" if md.get(META_EPHEMERAL) else "history"
        out.append(SurfaceItem(kind, m))
    return out


def provider_error_of(exc: BaseException, provider: str) -> ProviderError | None:
    """The error as our classifier sees it, or ``None`` when it is not a provider error.

    Looked for along the ``__cause__`` / ``__context__`` chain: a :class:`ProviderError` as is; an
    HTTP error carrying its response (openai ``APIStatusError``, LangChain's wrappers of it) or a
    status and body (Pydantic AI ``ModelHTTPError``) through :func:`classify_http_error`; an error
    body without status (a stream's error event) through :func:`classify_inband`; a framework's own
    context-overflow type (LangChain ``ContextOverflowError``, Pydantic AI
    ``ModelContextWindowExceededError``) that carries neither becomes ``CONTEXT_WINDOW_EXCEEDED``
    with ``rule="framework:<type>"``."""
    seen: set[int] = set()
    e: BaseException | None = exc
    framework_overflow: BaseException | None = None
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, ProviderError):
            return e
        response = getattr(e, "response", None)
        status = getattr(response, "status_code", None)
        if response is not None and isinstance(status, int) and status >= 400:
            headers = getattr(response, "headers", None)
            try:
                body: Any = response.content
            except Exception:  # noqa: BLE001 - a streamed response whose body was not read
                body = getattr(e, "body", None)
            return classify_http_error(provider, status, body, dict(headers) if headers is not None else None)
        status = getattr(e, "status_code", None)
        if isinstance(status, int) and status >= 400:
            headers = getattr(e, "headers", None)
            return classify_http_error(provider, status, getattr(e, "body", None), dict(headers) if headers else None)
        body = getattr(e, "body", None)
        if isinstance(body, Mapping) and body:
            err = classify_inband(provider, body if "error" in body else {"error": dict(body)})
            if err is not None:
                return err
        if framework_overflow is None and any(c.__name__ in _FRAMEWORK_OVERFLOW_TYPES for c in type(e).__mro__):
            framework_overflow = e
        e = e.__cause__ or e.__context__
    if framework_overflow is not None:
        return ProviderError(
            CONTEXT_WINDOW_EXCEEDED,
            str(framework_overflow),
            provider=provider,
            original=framework_overflow,
            rule=f"framework:{type(framework_overflow).__name__}",
        )
    return None


#: the frameworks' "input exceeds the context window" exception types (matched by name along the
#: MRO, so the core imports no framework)
_FRAMEWORK_OVERFLOW_TYPES = frozenset({"ContextOverflowError", "ModelContextWindowExceededError"})


@dataclass
class EngineThread:
    """One thread of the store driven by a foreign agent loop (see the module docstring).

    Blocking: every method does store (and maybe summarizer) work; async adapters call them through
    ``asyncio.to_thread``. One instance serves one agent at a time (the framework's loop is
    sequential per thread)."""

    service: Service
    key: str
    source: str
    title: str = ""
    provider: str | None = None
    model: str | None = None
    max_overflow_retries: int | None = None
    run: RunState | None = None
    #: source keys this process knows the thread holds (stored or found stored): skipped without
    #: asking; nothing is read at open (the database's unique key decides the rest)
    _known: set[str] = field(default_factory=set, repr=False)
    _staged: list[Message] = field(default_factory=list, repr=False)
    _ensured: bool = field(default=False, repr=False)
    _configured: tuple[str | None, tuple[Any, ...] | None] | None = field(default=None, repr=False)
    #: (system prompt, the tools object) of the last configure call that matched: the same object
    #: again is not compared (its schemas are not copied each call)
    _configured_from: tuple[str | None, Any] | None = field(default=None, repr=False)
    _step: int = 0
    _driver: StepDriver | None = field(default=None, repr=False)
    #: the framework's message list as this process last took it in whole (an adapter skips what a
    #: later list repeats of it, the same objects, without keying them again); emptied by :meth:`abandon`
    seen: list[Any] = field(default_factory=list, repr=False)
    owns_service: bool = False
    #: the step driver's write-behind (:attr:`engine.step.StepDriver.behind`): an adapter that sends
    #: :attr:`engine.step.Call.surface` (not ``call.measured``'s) turns it on
    behind: bool = False

    @classmethod
    def open(
        cls,
        key: str,
        *,
        source: str,
        db: str | None = None,
        service: Service | None = None,
        workdir: Any = None,
        summarizer: Any = None,
        policies: Any = None,
        **kwargs: Any,
    ) -> "EngineThread":
        """On ``service``, else on a service opened on ``db`` (created when missing; the thread owns
        it and :meth:`close` closes it)."""
        if service is None:
            service = open_service(db, workdir=workdir, summarizer=summarizer, policies=policies, create=True)
            return cls(service, key, source, owns_service=True, **kwargs)
        return cls(service, key, source, **kwargs)

    def close(self) -> None:
        """Write what the step driver still holds, then close the service if this thread opened it."""
        try:
            self.flush()
        except Exception:  # noqa: BLE001 - closing anyway: the request stays pending, as after a crash
            log.exception("could not write the last call's outcome on thread %r", self.key)
        if self.owns_service:
            self.service.close()

    # -- thread and configuration ----------------------------------------------------------------
    def route(self, provider: str | None, model: str | None) -> None:
        """Set the route (provider, model) the framework's model resolves to, unless fixed by the caller."""
        self.provider = self.provider or provider or "unknown"
        self.model = self.model or model or "unknown"

    @property
    def driver(self) -> StepDriver:
        """The step driver for this thread and route (:mod:`engine.step`)."""
        d = self._driver
        if d is None:
            d = self._driver = StepDriver(self.service.steps, self.key, provider=self.provider or "unknown", model=self.model or "unknown",
                                          max_overflow_retries=self.max_overflow_retries, hold=HOLD_SECONDS, behind=self.behind)
        d.provider, d.model = self.provider or "unknown", self.model or "unknown"
        return d

    def ensure(self) -> None:
        """Create the thread if the store does not have it (named, so the inspector lists it)."""
        if self._ensured:
            return
        try:
            self.service.reads.thread(self.key)
        except EngineError as exc:
            if exc.code != "thread_not_found":
                raise
            try:
                self.service.runs.create_thread(self.key, title=self.title or self.key, agent=self.source, provider=self.provider, model=self.model)
            except EngineError as dup:  # created meanwhile by another agent or inspector
                if dup.code != "duplicate_thread":
                    raise
        self._ensured = True

    def configure_now(self, system_prompt: str | None, tools: Sequence[Mapping[str, Any]] | None) -> bool:
        """:meth:`configure` when it needs no I/O (the thread known to exist and configured so
        already): True. False: nothing done; call :meth:`configure`."""
        if self._configured_from is not None and self._configured_from[1] is tools and self._configured_from[0] == system_prompt:
            return True  # the very schema list this thread was configured with (an adapter's cached one)
        if not self._ensured or self._configured != (system_prompt or "", tuple(dict(t) for t in tools or ())):
            return False
        self._configured_from = (system_prompt, tools)
        return True

    def configure(self, system_prompt: str | None, tools: Sequence[Mapping[str, Any]] | None) -> None:
        """Keep the thread's system prompt and tool schemas equal to what the framework sends."""
        if self.configure_now(system_prompt, tools):
            return
        self.ensure()
        want = (system_prompt or "", tuple(dict(t) for t in tools or ()))
        if self._configured != want:
            if self._driver is not None:
                self._driver.forget()  # the request the last step measured is not this one's
            self.service.runs.configure(self.key, system_prompt=want[0], tools=list(want[1]))
            self._configured = want
        self._configured_from = (system_prompt, tools)

    # -- intake ---------------------------------------------------------------------------------
    def _unknown(self, messages: Iterable[Message]) -> list[Message]:
        out: list[Message] = []
        keys: set[str] = set()
        for m in messages:
            if m.source_key is not None:
                if m.source_key in self._known or m.source_key in keys:
                    continue
                keys.add(m.source_key)
            out.append(m)
        return out

    def _stored(self, messages: Sequence[Message]) -> None:
        self._known.update(m.source_key for m in messages if m.source_key is not None)

    def knows(self, source_key: str) -> bool:
        """This process stored (or found stored) a message with ``source_key`` on this thread."""
        return source_key in self._known

    def stage(self, messages: Iterable[Message]) -> None:
        """Take ``messages`` in with the next :meth:`begin_call` (its one transaction); those this
        process knows are stored are dropped now, the database skips the others it holds."""
        self._staged.extend(self._unknown(messages))

    def persist(self, messages: Iterable[Message]) -> list[int]:
        """Append now, in one transaction, the messages the thread does not hold yet (a message
        without a ``source_key`` is always new); starts a run first when none is active. Returns
        the new ids."""
        self.ensure()
        new = self._unknown(messages)
        if not new:
            return []
        run = self.ensure_run()
        ids = self.driver.flush(new, run_id=run.run_id)  # with the last call's held usage and reply, if any
        self._stored(new)
        return ids

    def defer(self, messages: Iterable[Message]) -> None:
        """:meth:`persist`, written with the next step's transaction instead of one of its own (or
        by :meth:`flush`, an end of the run, or the step driver's writer after
        :data:`HOLD_SECONDS`): a framework's session write just before its next model call."""
        self.ensure()
        new = self._unknown(messages)
        if not new:
            return
        run = self.ensure_run()
        self.driver.defer(new, run_id=run.run_id)
        self._stored(new)

    def defer_now(self, messages: Iterable[Message]) -> bool:
        """:meth:`defer` when it needs no I/O (the thread known to exist, a run active, the step
        driver able to hold them at once): True, done — an async adapter then needs no worker
        thread. False: nothing done; call :meth:`defer`."""
        if not self._ensured or self.run is None or self._driver is None:
            return False
        new = self._unknown(messages)
        if new and not self._driver.defer_now(new, run_id=self.run.run_id):
            return False
        self._stored(new)
        return True

    def ensure_run(self) -> RunState:
        """The active run of this agent, started when there is none."""
        self.ensure()
        if self.run is None:
            run_id = self.service.runs.start_run(self.key)
            self.run = RunState(run_id=run_id)
            self._step = 0
            self.driver.recovering = False
            self.driver.forget()
        return self.run

    def end_run(self, *, failed: bool = False, error_code: str | None = None, error_message: str | None = None) -> None:
        """End the active run (if any): completed, or failed with the error that ended it. The last
        call's held usage and reply are written first (no request stays pending after its run);
        when the door refuses them, the run fails as :meth:`abandon` fails it and the error is raised."""
        try:
            self.flush()
        except Exception as exc:
            self.abandon(exc)
            raise
        run, self.run = self.run, None
        if run is None or run.run_id is None:
            return
        if failed:  # answer calls the failure left open, so no orphan call stays behind
            self.service.runs.settle_run(self.key, run.run_id, "failed", error_code=error_code, error_message=error_message)
        else:
            self.service.runs.finish_run(self.key, run.run_id)

    def fail_run(self, exc: BaseException) -> None:
        """End the active run as failed by ``exc``: its classified provider code when it is a
        provider error (as the harness records it), an engine error's code, else its type name."""
        err = provider_error_of(exc, self.provider or "unknown")
        if err is not None:
            self.end_run(failed=True, error_code=err.code, error_message=err.message)
        else:
            code = exc.code if isinstance(exc, EngineError) else type(exc).__name__
            self.end_run(failed=True, error_code=code, error_message=str(exc)[:2000])

    def flush(self) -> None:
        """Write the last call's usage and reply now if the driver still holds them, after its
        write-behind step's transaction if that is not written yet (:meth:`engine.step.StepDriver.flush`;
        the next step's transaction would have)."""
        d = self._driver
        if d is not None:
            d.flush()

    def abandon(self, exc: BaseException) -> None:
        """The call failed for good (a provider error not recovered, the store, a message the write
        door refused): fail the run, if one is still active, so the thread does not stay busy.
        Best effort: the caller re-raises ``exc`` whatever happens here. What this process thought
        stored is forgotten (the transaction that failed may have held it): the database decides."""
        self._staged = []
        self._known.clear()
        self.seen = []
        d = self._driver
        if d is not None:
            d.forget()
            try:  # queued step writes first; a failed one's messages are held again with the last reply
                d.settle()
            except Exception:  # noqa: BLE001 - written (or given up) below
                log.warning("a step's write on thread %r failed before the run was abandoned", self.key, exc_info=True)
        if d is not None and d.held is not None:  # the last call succeeded: its write goes first (best effort)
            held = d.held
            try:
                d.flush()
            except Exception:  # its reply is what the door refused: its request's outcome at least
                log.exception("could not record the last call's reply on thread %r", self.key)
                d.held = replace(held, messages=())
                try:
                    d.flush()
                except Exception:
                    log.exception("could not record the last call's outcome on thread %r", self.key)
                    d.held = None
        if self.run is None:
            return
        try:
            self.fail_run(exc)
        except Exception:
            log.exception("could not record the failure of run %s on thread %r", self.run.run_id if self.run else None, self.key)
            self.run = None

    # -- one model call -------------------------------------------------------------------------
    def _next_step(self) -> int:
        self._step += 1
        return self._step

    def begin_call(self) -> Call:
        """The staged messages, the pressure check (and compaction when needed), the measured
        request for this route and its recorded id (:meth:`engine.step.StepDriver.prepare`)."""
        run = self.ensure_run()
        return self.driver.prepare(run, self._next_step(), messages=self._take_staged())

    def begin_call_now(self, messages: Iterable[Message] = ()) -> Call | None:
        """:meth:`begin_call`, with ``messages`` taken in too, when it needs no I/O (a write-behind
        step: :meth:`engine.step.StepDriver.prepare_behind`): the call. None: nothing done (not
        even ``messages`` staged); stage them and call :meth:`begin_call` — an async adapter needs
        no worker thread otherwise."""
        run, d = self.run, self._driver
        if run is None or d is None:
            return None
        staged = {m.source_key for m in self._staged if m.source_key is not None}
        new = [m for m in self._unknown(messages) if m.source_key is None or m.source_key not in staged]
        call = d.prepare_behind(run, self._step + 1, messages=[*self._staged, *new])
        if call is None:
            return None
        self._step += 1
        self._stored([*self._take_staged(), *new])
        return call

    def succeeded(self, call: Call, *, prompt_tokens: int | None, completion_tokens: int | None, messages: Sequence[Message] = ()) -> None:
        """The call returned: its usage and ``messages`` (the response), one transaction; closes an
        open recovery episode."""
        _, _, new = self._response(prompt_tokens, completion_tokens, messages)
        self.driver.succeeded(call, self.ensure_run(), prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, messages=new)

    def succeeded_now(self, call: Call, *, prompt_tokens: int | None, completion_tokens: int | None, messages: Sequence[Message] = ()) -> bool:
        """:meth:`succeeded` when it needs no I/O (the step driver holds the call's end at once:
        :meth:`engine.step.StepDriver.hold_now`): True, done. False: nothing done; call
        :meth:`succeeded` (in a worker thread)."""
        run = self.run
        if run is None or self._driver is None:
            return False
        new = self._unknown(messages)
        if not self._driver.hold_now(call, run, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, messages=new):
            return False
        self._stored(new)
        return True

    def failed(self, call: Call, exc: BaseException) -> bool:
        """The call raised ``exc``. Records the outcome and, for a context overflow, recovers.

        Returns True when the caller should send a new call (the surface changed); False when it
        must re-raise ``exc`` unchanged (not an overflow, retries exhausted, or no progress)."""
        return self.driver.failed(call, self.ensure_run(), provider_error_of(exc, self.provider or "unknown"), message=describe(exc)).retry

    def call(self, send: Callable[[Call], T], done: Callable[[Call, T], Sequence[Any]]) -> T:
        """One model call with the step around it (:meth:`engine.step.StepDriver.call`): ``send``
        makes it, ``done(call, result)`` gives ``(prompt_tokens, completion_tokens, messages)``.
        A failure that is not recovered fails the run and is re-raised as is."""
        try:
            return self.driver.call(self.ensure_run(), send, step=self._next_step, messages=self._take_staged(),
                                    classify=self._classify, done=lambda c, r: self._response(*done(c, r)))
        except Exception as exc:  # never leave the thread busy with a run nobody drives
            self.abandon(exc)
            raise

    async def acall(self, send: Callable[[Call], Awaitable[T]], done: Callable[[Call, T], Sequence[Any]]) -> T:
        """:meth:`call` for an async model call (the blocking work in a worker thread)."""
        try:
            run = await asyncio.to_thread(self.ensure_run)
            return await self.driver.acall(run, send, step=self._next_step, messages=self._take_staged(), classify=self._classify,
                                           done=lambda c, r: self._response(*done(c, r)), io=asyncio.to_thread)
        except Exception as exc:
            await asyncio.to_thread(self.abandon, exc)
            raise

    def _take_staged(self) -> list[Message]:
        staged, self._staged = self._staged, []
        self._stored(staged)
        return staged

    def _response(self, prompt: int | None, completion: int | None, messages: Sequence[Message]) -> tuple[int | None, int | None, list[Message]]:
        new = self._unknown(messages)
        self._stored(new)
        return prompt, completion, new

    def _classify(self, exc: BaseException) -> ProviderError | None:
        return provider_error_of(exc, self.provider or "unknown")


def source_key(prefix: str, value: str) -> str:
    """``prefix:value`` as a store source key (a hash of it when too long for the column)."""
    key = f"{prefix}:{value}"
    if len(key) <= _SOURCE_KEY_MAX:
        return key
    return f"{prefix}-sha:" + hashlib.sha256(value.encode("utf-8")).hexdigest()


def attachment(kind: str, *, url: object = None, media_type: object = None, file_id: object = None, title: object = None) -> Attachment:
    """An engine attachment (never the bytes) from what a framework's content part says: an http(s)
    URL, a ``data:`` URL or inline bytes (``base64``, its media type read from the URL), or a file id."""
    media = media_type if isinstance(media_type, str) else None
    where: Literal["base64", "url", "file"]
    if isinstance(url, str) and url.startswith("data:"):
        media = media or (url[5:].split(";", 1)[0].split(",", 1)[0] or None)
        where, ref = "base64", None
    elif isinstance(url, str) and url:
        where, ref = "url", url
    elif isinstance(file_id, str) and file_id:
        where, ref = "file", file_id
    else:
        where, ref = "base64", None
    image = kind == "image" or (media or "").startswith("image/")
    return Attachment("image" if image else "document", media_type=media, source=where, url=ref, title=title if isinstance(title, str) else None)


def text_of(content: object) -> str:
    """The text of a content value that is a string or a list of parts (``{"type": "text", ...}``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        out = []
        for p in content:
            if isinstance(p, str):
                out.append(p)
            elif isinstance(p, Mapping) and p.get("type") in ("text", "input_text", "output_text") and isinstance(p.get("text"), str):
                out.append(p["text"])
        return "".join(out)
    return str(content)


__all__ = [
    "AdapterError",
    "Call",
    "EngineThread",
    "META_RAW",
    "META_SOURCE",
    "SurfaceItem",
    "SYNTHETIC_USER_TEXT",
    "attachment",
    "provider_error_of",
    "source_key",
    "surface_items",
    "text_of",
]
