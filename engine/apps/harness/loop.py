"""A small agent loop over an OpenAI-compatible endpoint, with compaction built in.

Every model step runs on the one step driver (:class:`engine.step.StepDriver`, over
:class:`engine.service.Service`; the harness itself calls only ``Service``): the pressure check and
the recorded model request (routed provider and model, estimated tokens) in one transaction,
pressure compaction at the pre-step boundary when needed (§2), the reported usage with the reply,
and overflow recovery (§3) when the provider says the request is too long.
Store and summarizer work runs in a worker thread (``asyncio.to_thread``); the loop itself only
awaits HTTP.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Sequence, TypeVar

from ...compaction.compactor import RunState
from ...core.events import CancelledEvent, HarnessErrorEvent
from ...core.messages import Message, ToolCall
from ...llm.client import ChatClient
from ...llm.errors import CANCELLED, ProviderError
from ...service import Service
from ...step import StepDriver, describe
from ...store import ABORTED_TEXT

FAILED_TEXT = "aborted: the run failed before this tool call ran"
#: run error code when the harness itself failed (not the provider): the run is failed, the error re-raised
HARNESS_ERROR = "harness_error"

log = logging.getLogger(__name__)


class WaitForUser(Exception):
    """Raised by a tool to interrupt the run until the user answers ``question``."""

    def __init__(self, question: str) -> None:
        super().__init__(question)
        self.question = question


ToolFn = Callable[[dict[str, Any]], "str | Awaitable[str]"]
T = TypeVar("T")


async def _io(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run blocking store work in a worker thread. If the task is cancelled meanwhile, the write still
    finishes before the cancellation propagates, so the cancel path sees every persisted message."""
    work = asyncio.ensure_future(asyncio.to_thread(fn, *args, **kwargs))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        await asyncio.wait({work})
        raise


@dataclass(frozen=True)
class Tool:
    name: str
    fn: ToolFn
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def schema(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}}


class ToolRegistry:
    """Named tools. Unknown tools and malformed arguments become error *results* the model can read."""

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools or ():
            self.register(t)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} registered twice")
        self._tools[tool.name] = tool

    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self._tools.values()]

    async def call(self, call: ToolCall) -> str:
        tool = self._tools.get(call.name)
        if tool is None:
            return f"error: unknown tool {call.name!r}"
        args = call.parsed_arguments()
        if args is None:
            return f"error: the arguments for {call.name} are not a JSON object: {call.arguments[:200]!r}"
        result = tool.fn(args)
        if inspect.isawaitable(result):
            result = await result
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


@dataclass(frozen=True)
class RunResult:
    run_id: int
    status: str  # completed / failed / cancelled / waiting_for_user
    final: Message | None = None
    error: ProviderError | None = None
    error_code: str | None = None
    steps: int = 0
    overflow_retries: int = 0


class AgentHarness:
    """Runs turns of one agent on threads of one service."""

    def __init__(
        self,
        service: Service,
        provider: ChatClient,
        *,
        model: str,
        provider_name: str | None = None,
        tools: ToolRegistry | None = None,
        max_steps: int = 40,
        stream: bool = False,
    ) -> None:
        self.service = service
        self.provider = provider
        self.model = model
        self.provider_name = provider_name or provider.provider
        self.tools = tools or ToolRegistry()
        self.max_steps = max_steps
        self.stream = stream
        #: runs waiting for the user, with their per-run memory and step count (until resumed)
        self._parked: dict[int, tuple[RunState, int]] = {}

    # -- public ---------------------------------------------------------------------------
    async def run(
        self,
        thread: str,
        user_text: str | None,
        *,
        notes: list[str] | None = None,
        cancel: asyncio.Event | None = None,
    ) -> RunResult:
        """Append the user's message (if any), start a run and drive it to an end."""
        state = RunState()
        for note in notes or ():
            state.add_ephemeral(note)
        cancel = cancel or asyncio.Event()

        async def work() -> RunResult:
            await _io(self._begin, thread, user_text, state)
            return await self._drive(thread, state, cancel)

        return await self._supervised(thread, state, work)

    async def resume(self, thread: str, run_id: int, answer: str, *, cancel: asyncio.Event | None = None) -> RunResult:
        """Continue a run that waits for the user: ``answer`` answers the tool call that asked (or is a
        user message), the parallel calls that waited behind that call run, then the loop goes on.
        When this harness parked the run, its notes, overflow count and step numbers carry over."""
        state, step = self._parked.get(run_id) or (RunState(), 0)
        state.run_id = None  # the error paths own the run only once it is running again
        cancel = cancel or asyncio.Event()

        async def work() -> RunResult:
            rest = await _io(self._resume, thread, run_id, answer, state)
            self._parked.pop(run_id, None)
            waiting = await self._run_tools(thread, state, rest, cancel, step)
            return waiting if waiting is not None else await self._drive(thread, state, cancel, step)

        return await self._supervised(thread, state, work)

    async def _supervised(self, thread: str, state: RunState, work: Callable[[], Awaitable[RunResult]]) -> RunResult:
        """Run ``work``; a cancellation cancels the run, any other exception fails it (then re-raised)."""
        try:
            return await work()
        except asyncio.CancelledError:
            if state.run_id is not None:
                await asyncio.shield(asyncio.to_thread(self._cancel, thread, state))
            raise
        except Exception as exc:  # never leave the thread busy with a run nobody drives
            if state.run_id is not None:
                await asyncio.shield(asyncio.to_thread(self._abandon, thread, state, exc))
            raise

    # -- the loop -------------------------------------------------------------------------
    async def _drive(self, thread: str, state: RunState, cancel: asyncio.Event, step: int = 0) -> RunResult:
        """Model steps from the persisted state until an answer without tool calls (steps after
        ``step``), each on the step driver (:mod:`engine.step`: pressure check and request record
        in one transaction, compaction when needed, the overflow protocol)."""
        svc = self.service
        driver = StepDriver(svc.steps, thread, provider=self.provider_name, model=self.model)
        while step < self.max_steps:
            if cancel.is_set():
                return await asyncio.to_thread(self._cancel, thread, state)
            step += 1
            call = await asyncio.to_thread(driver.prepare, state, step)
            body = call.measured.envelope.to_openai()
            try:
                completion = await self.provider.complete(body, model=self.model, stream=self.stream)
            except asyncio.CancelledError:
                await asyncio.shield(asyncio.to_thread(driver.cancelled, call, CANCELLED, "the run was cancelled"))
                raise
            except ProviderError as err:
                failure = await asyncio.to_thread(driver.failed, call, state, err, cancelled=cancel.is_set)
                if failure.reason == "cancelled":
                    return await asyncio.to_thread(self._cancel, thread, state)
                if not failure.retry:
                    return await asyncio.to_thread(self._fail, thread, state, err, step)
                continue  # a new step from the persisted state
            reply = completion.message
            await _io(driver.succeeded, call, state, prompt_tokens=completion.prompt_tokens,
                      completion_tokens=completion.completion_tokens, messages=[_persistable(reply)])
            if not reply.tool_calls:
                await asyncio.to_thread(svc.runs.finish_run, thread, _running(state))
                return RunResult(_running(state), "completed", final=reply, steps=step, overflow_retries=state.overflow_attempts)
            waiting = await self._run_tools(thread, state, reply.tool_calls, cancel, step)
            if waiting is not None:
                return waiting
        err_msg = f"the run did not finish within {self.max_steps} steps"
        await asyncio.to_thread(svc.runs.finish_run, thread, _running(state), failed=True, error_code="max_steps", error_message=err_msg)
        return RunResult(_running(state), "failed", error_code="max_steps", steps=step, overflow_retries=state.overflow_attempts)

    async def _run_tools(self, thread: str, state: RunState, calls: Sequence[ToolCall], cancel: asyncio.Event, step: int) -> RunResult | None:
        """Run ``calls`` in order, persisting each result; cancellation leaves no orphan."""
        for call in calls:
            if cancel.is_set():
                return await asyncio.to_thread(self._cancel, thread, state)
            try:
                text = await self.tools.call(call)
            except WaitForUser as ask:
                await _io(self._wait_for_user, thread, state, call, ask.question)
                self._parked[_running(state)] = (state, step)
                return RunResult(_running(state), "waiting_for_user", steps=step, overflow_retries=state.overflow_attempts)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a failing tool is a result the model can read, not a crash
                text = f"error: {call.name} failed: {type(exc).__name__}: {exc}"
            await _io(self.service.runs.append_message, thread, Message("tool", text, tool_call_id=call.id, name=call.name), run_id=state.run_id)
        return None

    # -- blocking helpers (run in a worker thread) ------------------------------------------
    def _begin(self, thread: str, user_text: str | None, state: RunState) -> None:
        message = Message("user", user_text) if user_text is not None else None
        run_id = self.service.runs.start_run(thread, message=message, tools=self.tools.schemas())
        state.run_id = run_id  # only once committed: the cancel path then knows the run

    def _resume(self, thread: str, run_id: int, answer: str, state: RunState) -> list[ToolCall]:
        """Record the answer; returns the calls still waiting behind the one that asked."""
        rest = self.service.runs.resume_run(thread, run_id, answer)
        state.run_id = run_id
        return rest

    def _wait_for_user(self, thread: str, state: RunState, call: ToolCall, question: str) -> None:
        self.service.runs.wait_for_user(thread, _running(state), call=call, question=question)

    def _fail(self, thread: str, state: RunState, err: ProviderError, step: int) -> RunResult:
        """Report the ORIGINAL provider error and code (the driver recorded why recovery did not help)."""
        self.service.runs.finish_run(thread, _running(state), failed=True, error_code=err.code, error_message=err.message)
        return RunResult(_running(state), "failed", error=err, error_code=err.code, steps=step, overflow_retries=state.overflow_attempts)

    def _cancel(self, thread: str, state: RunState) -> RunResult:
        """Cancel the run; every call of the last assistant message that never ran gets an aborted
        result, so no orphan tool call is left behind (§3.5). Idempotent."""
        self._close_run(thread, state, "cancelled", CancelledEvent(attempt=state.overflow_attempts), ABORTED_TEXT)
        return RunResult(_running(state), "cancelled", overflow_retries=state.overflow_attempts)

    def _abandon(self, thread: str, state: RunState, exc: Exception) -> None:
        """The harness itself failed: fail the run with :data:`HARNESS_ERROR` so the thread does not
        stay busy forever. Best effort: the caller re-raises ``exc`` whatever happens here."""
        try:
            self._close_run(
                thread,
                state,
                "failed",
                HarnessErrorEvent(attempt=state.overflow_attempts, error_code=HARNESS_ERROR, error_message=describe(exc)),
                FAILED_TEXT,
                error_code=HARNESS_ERROR,
                error_message=describe(exc),
            )
        except Exception:
            log.exception("could not record the failure of run %s on thread %r", state.run_id, thread)

    def _close_run(
        self,
        thread: str,
        state: RunState,
        status: str,
        event: CancelledEvent | HarnessErrorEvent,
        aborted_text: str,
        *,
        error_code: str | None = None,
        error_message: str | None = None,
    ) -> None:
        """Settle the run as ``status`` and answer its calls that never ran; nothing if already settled."""
        assert state.run_id is not None
        self.service.runs.settle_run(
            thread,
            state.run_id,
            status,
            aborted_text=aborted_text,
            error_code=error_code,
            error_message=error_message,
            event=event,
            trigger="overflow" if state.overflow_attempts else None,
        )


def _persistable(m: Message) -> Message:
    return Message(m.role, m.content, tool_calls=m.tool_calls, name=m.name)


def _running(state: RunState) -> int:
    """The id of the run ``state`` drives: set by ``_begin`` / ``_resume`` before any step or tool."""
    if state.run_id is None:
        raise RuntimeError("the harness reached a step of a run that was never started")
    return state.run_id
