"""The framework-agnostic driver the adapters share: one engine thread seen from a foreign agent loop.

A :class:`EngineThread` does, through :class:`engine.service.Service` only, what our own harness
(:mod:`engine.harness.loop`) does around each model step:

1. **intake** — :meth:`EngineThread.persist` appends the framework's messages that the store does
   not have yet (each carries its framework's raw form in ``Message.metadata["raw"]`` and, where
   the framework identifies messages, a ``source_key``, so nothing is lost and nothing is stored
   twice), starting a run when none is active;
2. **pressure** — :meth:`EngineThread.begin_call` runs pressure compaction (prune first, then a
   summary only if still at the threshold), measures the request the model will really get (system
   prompt and tool schemas included: :meth:`EngineThread.configure` keeps them current) and records
   the model request;
3. **outcome** — :meth:`EngineThread.succeeded` completes the request with the provider-reported
   usage; :meth:`EngineThread.failed` classifies the error with :mod:`engine.llm.errors` and, for a
   context overflow, recovers at most ``max_overflow_retries`` times per run and only when the
   surface generation grew — otherwise the caller re-raises the ORIGINAL error.

The adapters map :meth:`EngineThread.surface` (what the model should see: the summary, the
synthetic user message, history with previews in place of pruned tool results, ephemeral notes)
back into their framework's message types.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Literal, Mapping, Sequence

from engine.errors import EngineError
from engine.events import GaveUpEvent, PressureFailedEvent, ProviderErrorEvent, RecoveredEvent, RetryEvent
from engine.llm.errors import (
    CONTEXT_WINDOW_EXCEEDED,
    ProviderError,
    classify_http_error,
    classify_inband,
    is_context_overflow,
)
from engine.messages import META_EPHEMERAL, META_PRUNED, META_SUMMARY, META_SYNTHETIC, Attachment, Message
from engine.service import RunState, Service, open_service
from engine.step import SYNTHETIC_USER_TEXT

log = logging.getLogger(__name__)

#: metadata key: which framework wrote the message (``langchain``, ``openai_agents``, ``pydantic_ai``)
META_SOURCE = "source"
#: metadata key: the framework's serialized message (the lossless form the adapter maps back from)
META_RAW = "raw"
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


@dataclass
class Call:
    """One model call in flight: the measured request, its recorded id, the step number."""

    measured: Any  # engine.compactor.Measured, reached through Service
    request_id: int
    step: int

    @property
    def tokens(self) -> int:
        return self.measured.tokens

    def surface(self) -> list[SurfaceItem]:
        return surface_items(self.measured)


def surface_items(measured: Any) -> list[SurfaceItem]:
    """The envelope's messages after the system prompt, each with its kind."""
    out: list[SurfaceItem] = []
    for i, m in enumerate(measured.envelope.messages()):
        if i == 0 and measured.envelope.system_prompt and m.role == "system" and m.content == measured.envelope.system_prompt:
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
        if isinstance(status, int) and status >= 400:
            headers = getattr(response, "headers", None)
            try:
                body: Any = response.content  # type: ignore[union-attr]
            except Exception:  # a streamed response whose body was not read
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
    _known: set[str] | None = field(default=None, repr=False)
    _configured: tuple[str | None, tuple[Any, ...] | None] | None = field(default=None, repr=False)
    _step: int = 0
    _recovering: bool = False
    owns_service: bool = False

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
        if self.owns_service:
            self.service.close()

    # -- thread and configuration ----------------------------------------------------------------
    def route(self, provider: str | None, model: str | None) -> None:
        """Set the route (provider, model) the framework's model resolves to, unless fixed by the caller."""
        self.provider = self.provider or provider or "unknown"
        self.model = self.model or model or "unknown"

    def ensure(self) -> None:
        """Create the thread if the store does not have it (named, so the inspector lists it)."""
        if self._known is not None:
            return
        try:
            self.service.thread(self.key)
        except EngineError as exc:
            if exc.code != "thread_not_found":
                raise
            try:
                self.service.create_thread(self.key, title=self.title or self.key, agent=self.source, provider=self.provider, model=self.model)
            except EngineError as dup:  # created meanwhile by another agent or inspector
                if dup.code != "duplicate_thread":
                    raise
        self._known = self._load_known()

    def _load_known(self) -> set[str]:
        known: set[str] = set()
        after: int | None = None
        while True:
            page = self.service.messages_page(self.key, after_id=after, limit=500)
            for s in page:
                if s.message.source_key is not None:
                    known.add(s.message.source_key)
            if len(page) < 500:
                return known
            after = page[-1].id

    def configure(self, system_prompt: str | None, tools: Sequence[Mapping[str, Any]] | None) -> None:
        """Keep the thread's system prompt and tool schemas equal to what the framework sends."""
        self.ensure()
        want = (system_prompt or "", tuple(dict(t) for t in tools or ()))
        if self._configured == want:
            return
        self.service.configure(self.key, system_prompt=want[0], tools=list(want[1]))
        self._configured = want

    def known(self, source_id: str) -> bool:
        self.ensure()
        assert self._known is not None
        return source_id in self._known

    # -- intake ---------------------------------------------------------------------------------
    def persist(self, messages: Iterable[Message]) -> list[int]:
        """Append, in one transaction, the messages whose ``source_key`` the store does not have yet
        (a message without one is always new); starts a run first when none is active. Returns
        the new ids."""
        self.ensure()
        assert self._known is not None
        new: list[Message] = []
        keys: set[str] = set()
        for m in messages:
            if m.source_key is not None and (m.source_key in self._known or m.source_key in keys):
                continue
            if m.source_key is not None:
                keys.add(m.source_key)
            new.append(m)
        if not new:
            return []
        self.ensure_run()
        ids = self.service.append_messages(self.key, new, run_id=self.run.run_id if self.run else None)
        self._known.update(keys)
        return ids

    def ensure_run(self) -> RunState:
        """The active run of this agent, started when there is none."""
        self.ensure()
        if self.run is None:
            run_id = self.service.start_run(self.key)
            self.run = RunState(run_id=run_id)
            self._step, self._recovering = 0, False
        return self.run

    def end_run(self, *, failed: bool = False, error_code: str | None = None, error_message: str | None = None) -> None:
        """End the active run (if any): completed, or failed with the error that ended it."""
        run, self.run = self.run, None
        if run is None or run.run_id is None:
            return
        if failed:  # answer calls the failure left open, so no orphan call stays behind
            self.service.settle_run(self.key, run.run_id, "failed", error_code=error_code, error_message=error_message)
        else:
            self.service.finish_run(self.key, run.run_id)

    def fail_run(self, exc: BaseException) -> None:
        """End the active run as failed by ``exc``: its classified provider code when it is a
        provider error (as the harness records it), an engine error's code, else its type name."""
        err = provider_error_of(exc, self.provider or "unknown")
        if err is not None:
            self.end_run(failed=True, error_code=err.code, error_message=err.message)
        else:
            code = exc.code if isinstance(exc, EngineError) else type(exc).__name__
            self.end_run(failed=True, error_code=code, error_message=str(exc)[:2000])

    def abandon(self, exc: BaseException) -> None:
        """The adapter's own work failed (the store, a message the write door refused): fail the
        run, if one is still active, so the thread does not stay busy. Best effort: the caller
        re-raises ``exc`` whatever happens here."""
        if self.run is None:
            return
        try:
            self.fail_run(exc)
        except Exception:
            log.exception("could not record the failure of run %s on thread %r", self.run.run_id if self.run else None, self.key)
            self.run = None

    # -- one model call -------------------------------------------------------------------------
    def begin_call(self) -> Call:
        """Pressure compaction, then the measured request (for this route) and its recorded id.

        A compaction that fails operationally (database, Workdir) is recorded as
        ``pressure_failed`` and the call goes on with the persisted surface (§2.9)."""
        run = self.ensure_run()
        self._step += 1
        svc = self.service
        try:
            outcome = svc.compact_for_pressure(self.key, run)
        except Exception as exc:
            log.warning("pressure compaction failed on thread %r; continuing", self.key, exc_info=True)
            svc.add_event(self.key, PressureFailedEvent(step=self._step, error_message=_describe(exc)), trigger="pressure", run_id=run.run_id)
            outcome = None
        m = outcome.measured if outcome is not None else None
        if m is None or (m.policy.provider, m.policy.model) != (self.provider, self.model):
            m = svc.measure(self.key, ephemeral=run.ephemeral, provider=self.provider, model=self.model)
        request_id = svc.record_model_request(
            self.key,
            provider=self.provider or "unknown",
            model=self.model or "unknown",
            run_id=run.run_id,
            step=self._step,
            estimated_tokens=m.tokens,
            threshold=m.policy.threshold,
        )
        return Call(m, request_id, self._step)

    def succeeded(self, call: Call, *, prompt_tokens: int | None, completion_tokens: int | None) -> None:
        """The call returned: record the provider-reported usage; close an open recovery episode."""
        svc = self.service
        svc.complete_model_request(
            self.key, call.request_id, outcome="ok", reported_prompt_tokens=prompt_tokens, reported_completion_tokens=completion_tokens
        )
        if self._recovering and self.run is not None:
            svc.add_event(self.key, RecoveredEvent(attempt=self.run.overflow_attempts, step=call.step, tokens=call.tokens), trigger="overflow", run_id=self.run.run_id)
            self._recovering = False

    def failed(self, call: Call, exc: BaseException) -> bool:
        """The call raised ``exc``. Records the outcome and, for a context overflow, recovers.

        Returns True when the caller should send a new call (the surface changed); False when it
        must re-raise ``exc`` unchanged (not an overflow, retries exhausted, or no progress)."""
        svc = self.service
        run = self.ensure_run()
        err = provider_error_of(exc, self.provider or "unknown")
        code = err.code if err is not None else None
        message = err.message if err is not None else _describe(exc)
        svc.complete_model_request(self.key, call.request_id, outcome="error", error_code=code, error_message=message)
        if err is None:
            return False
        self._provider_error(call, err, run)
        if not is_context_overflow(err):
            if self._recovering:
                self._gave_up(call, err, run, "not_overflow")
            return False
        limit = self.max_overflow_retries
        if limit is None:
            limit = svc.policy_for(self.provider, self.model).policy.max_overflow_retries
        if run.overflow_attempts >= limit:
            self._gave_up(call, err, run, "retries_exhausted")
            return False
        run.overflow_attempts += 1
        crash: Exception | None = None
        gen_before, tokens_before = call.measured.snapshot.state.generation, call.tokens
        outcome: Any = None
        try:
            outcome = svc.recover_overflow(self.key, run, provider=self.provider, model=self.model)
            gen_before, tokens_before = outcome.generation_before, outcome.tokens_before
            gen_after, tokens_after, calls = outcome.generation_after, outcome.tokens_after, outcome.summarizer_calls
        except Exception as exc2:  # what already landed still counts: generation growth decides (§3.3)
            log.warning("overflow recovery failed on thread %r: %s", self.key, exc2, exc_info=exc2)
            crash = exc2
            now = svc.measure(self.key, ephemeral=run.ephemeral, provider=self.provider, model=self.model)
            gen_after, tokens_after, calls = now.snapshot.state.generation, now.tokens, None
        if gen_after <= gen_before:
            self._gave_up(call, err, run, "recovery_failed" if crash is not None else "no_progress", outcome=outcome, crash=crash)
            return False
        retry = RetryEvent(
            attempt=run.overflow_attempts,
            failed_step=call.step,
            next_step=call.step + 1,
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            generation_before=gen_before,
            generation_after=gen_after,
            summarizer_calls=calls,
            recovery_error=_describe(crash) if crash is not None else None,
        )
        svc.add_event(self.key, retry, trigger="overflow", run_id=run.run_id)
        self._recovering = True
        return True

    def _provider_error(self, call: Call, err: ProviderError, run: RunState) -> None:
        snap = call.measured.snapshot
        event = ProviderErrorEvent(
            error_code=err.code,
            error_message=err.message,
            status=err.status,
            inband=err.inband,
            provider=self.provider,
            model=self.model,
            attempt=run.overflow_attempts + 1,
            step=call.step,
            tokens=call.tokens,
            tokens_before=call.tokens,
            threshold=call.measured.policy.threshold,
            generation=snap.state.generation,
            last_message_id=max((m.id for m in snap.messages if m.id is not None), default=snap.state.boundary),
            ephemeral=tuple(m.content for m in run.ephemeral),
        )
        self.service.add_event(self.key, event, trigger="overflow" if err.code == CONTEXT_WINDOW_EXCEEDED else "provider", run_id=run.run_id)

    def _gave_up(self, call: Call, err: ProviderError, run: RunState, reason: str, *, outcome: Any = None, crash: Exception | None = None) -> None:
        event = GaveUpEvent(
            reason=reason,
            error_code=err.code,
            error_message=err.message,
            attempt=run.overflow_attempts,
            step=call.step,
            recovery_error=_describe(crash) if crash is not None else None,
        )
        if outcome is not None:
            event = replace(
                event,
                tokens_before=outcome.tokens_before,
                tokens_after=outcome.tokens_after,
                generation_before=outcome.generation_before,
                generation_after=outcome.generation_after,
                summarizer_calls=outcome.summarizer_calls,
            )
        self.service.add_event(self.key, event, trigger="overflow", run_id=run.run_id)
        self._recovering = False


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def source_key(prefix: str, value: str) -> str:
    """``prefix:value`` as a store source key (a hash of it when too long for the column)."""
    key = f"{prefix}:{value}"
    if len(key) <= _SOURCE_KEY_MAX:
        return key
    return f"{prefix}-sha:" + hashlib.sha256(value.encode("utf-8")).hexdigest()


def attachment(kind: str, *, url: Any = None, media_type: Any = None, file_id: Any = None, title: Any = None) -> Attachment:
    """An engine attachment (never the bytes) from what a framework's content part says: an http(s)
    URL, a ``data:`` URL or inline bytes (``base64``, its media type read from the URL), or a file id."""
    media = media_type if isinstance(media_type, str) else None
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
    return Attachment("image" if image else "document", media_type=media, source=where, url=ref, title=title if isinstance(title, str) else None)  # type: ignore[arg-type]


def text_of(content: Any) -> str:
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
