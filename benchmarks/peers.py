"""The peers on the benchmark traces: LangChain's SummarizationMiddleware and a characters/4 meter.

Installed only for the benchmark: ``.venv/bin/pip install -e '.[bench-peers]'`` (langchain>=1.0,
langchain-core>=1.0). :func:`available` says why they cannot run when they are missing.

- ``langchain``: ``SummarizationMiddleware`` with its default token counter
  (``count_tokens_approximately``, characters/4 plus 3 per message, on the state messages) and
  default ``trim_tokens_to_summarize`` (4000), driven through its real ``before_model`` hook before
  every model step, with the same threshold and retained tail (in tokens) as our policy.
- ``chars/4``: the rule-of-thumb meter many agent platforms use (characters of the request / 4); for compaction, the same
  middleware with that counter in place of LangChain's.

The summary model is :class:`ExtractiveChatModel`, a deterministic LangChain chat model: it parses the
messages out of the middleware's summary prompt and answers with our offline extractive summarizer
under the same summary budget as ours, so summary quality is equal and only the middleware's
decisions (when, what, how much) differ.
"""

from __future__ import annotations

import json
import math
import time
import xml.etree.ElementTree as ET
from typing import Any, Callable, Iterable, Sequence

from engine.compaction.compactor import IDENTIFIER_ROOM_SHARE
from engine.compaction.summarizers.extractive import ExtractiveSummarizer
from engine.compaction.summarizers.protocol import SummaryRequest
from engine.core.messages import Envelope, Message, ToolCall
from traces import Reference, Replay, Trace, chars_over_4

STRATEGIES: tuple[str, ...] = ("langchain", "chars/4")


def available() -> str | None:
    """``None`` when the peers can run, else the one-line reason they cannot."""
    try:
        from langchain.agents.middleware import SummarizationMiddleware  # noqa: F401
    except ImportError as exc:
        return f"langchain not installed ({exc}); run .venv/bin/pip install -e '.[bench-peers]'"
    return None


# -- conversions -------------------------------------------------------------------------------


def to_lc(m: Message, msg_id: str | None = None) -> Any:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    if m.role == "user":
        return HumanMessage(m.content, id=msg_id)
    if m.role == "system":
        return SystemMessage(m.content, id=msg_id)
    if m.role == "tool":
        return ToolMessage(m.content, tool_call_id=m.tool_call_id or "", name=m.name, id=msg_id)
    calls = [{"id": c.id, "name": c.name, "args": c.parsed_arguments() or {}, "type": "tool_call"} for c in m.tool_calls]
    return AIMessage(m.content, tool_calls=calls, id=msg_id)


def from_lc(lc: Any) -> Message:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    content = lc.content if isinstance(lc.content, str) else lc.text
    if isinstance(lc, HumanMessage):
        return Message("user", content)
    if isinstance(lc, SystemMessage):
        return Message("system", content)
    if isinstance(lc, ToolMessage):
        return Message("tool", content, tool_call_id=lc.tool_call_id, name=lc.name)
    if isinstance(lc, AIMessage):
        calls = tuple(ToolCall(c["id"], c["name"], json.dumps(c["args"], ensure_ascii=False)) for c in lc.tool_calls)
        return Message("assistant", content, tool_calls=calls)
    raise TypeError(f"unexpected LangChain message {type(lc).__name__}")


def chars4_counter(messages: Iterable[Any]) -> int:
    """The rule-of-thumb meter many agent platforms use, as a LangChain token counter: characters of every text / 4."""
    total = 0
    for lc in messages:
        m = from_lc(lc)
        total += len(m.content) + len(m.tool_call_id or "") + len(m.name or "")
        total += sum(len(c.id) + len(c.name) + len(c.arguments) for c in m.tool_calls)
    return total // 4


# -- the fake summary model --------------------------------------------------------------------

_ROLES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}


def parse_summary_prompt(prompt: str) -> list[Message]:
    """The messages inside the middleware's summary prompt (``get_buffer_string(format="xml")``)."""
    start = prompt.index("<messages>")
    end = prompt.rindex("</messages>")
    body = prompt[start + len("<messages>") : end]
    body = body[body.index("\n<message") :] if "\n<message" in body else ""
    root = ET.fromstring(f"<root>{body}</root>")
    out: list[Message] = []
    pending: list[str] = []  # the XML drops tool_call_id: answer pending calls in order
    for el in root.iter("message"):
        role = _ROLES.get(el.get("type", ""), "user")
        if role == "assistant":
            content_el = el.find("content")
            text = (content_el.text or "") if content_el is not None else (el.text or "").strip()
            calls = tuple(ToolCall(c.get("id") or f"c{len(out)}", c.get("name") or "tool", c.text or "{}") for c in el.findall("tool_call"))
            pending += [c.id for c in calls]
            out.append(Message("assistant", text, tool_calls=calls))
        elif role == "tool":
            out.append(Message("tool", el.text or "", tool_call_id=pending.pop(0) if pending else f"orphan{len(out)}"))
        else:
            out.append(Message(role, el.text or ""))  # type: ignore[arg-type]
    return out


def identifier_room(threshold: int, summary_tokens: int) -> int:
    """The identifier room our engine gives a summary at this threshold
    (``engine.compaction.compactor.identifier_budget``: up to ``IDENTIFIER_ROOM_SHARE`` of the target, half
    the threshold), given to the peer's summaries too so that both have the same budget."""
    return max(0, math.floor(IDENTIFIER_ROOM_SHARE * (threshold // 2)) - summary_tokens)


def make_chat_model(summary_tokens: int, identifier_tokens: int = 0) -> Any:
    """A deterministic LangChain chat model answering the summary prompt with an extractive summary
    (``summary_tokens``, and ``identifier_tokens`` more for its identifier lines, as ours)."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class ExtractiveChatModel(BaseChatModel):
        """Answers with our extractive summary of the messages in the prompt (``max_tokens`` budget)."""

        max_tokens: int = 4096
        identifier_tokens: int = 0
        calls: int = 0

        @property
        def _llm_type(self) -> str:
            return "extractive-fake"

        def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
            self.calls += 1
            history = parse_summary_prompt(messages[-1].text)
            text = ExtractiveSummarizer().summarize(SummaryRequest(messages=tuple(history), max_tokens=self.max_tokens, identifier_tokens=self.identifier_tokens)).text
            return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])

    return ExtractiveChatModel(max_tokens=summary_tokens, identifier_tokens=identifier_tokens)


def make_middleware(strategy: str, *, threshold: int, keep: int, summary_tokens: int, identifier_tokens: int = 0) -> tuple[Any, Any]:
    """(middleware, its chat model) for ``strategy``."""
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.messages.utils import count_tokens_approximately

    model = make_chat_model(summary_tokens, identifier_tokens)
    counter: Callable[..., int] = count_tokens_approximately if strategy == "langchain" else chars4_counter
    mw = SummarizationMiddleware(model, trigger=("tokens", threshold), keep=("tokens", keep), token_counter=counter)
    return mw, model


# -- replay ------------------------------------------------------------------------------------


class _State:
    """The agent state's message list, with our Message for every LangChain message (by id)."""

    def __init__(self) -> None:
        self.lc: list[Any] = []
        self.ours: dict[str, Message] = {}

    def append(self, m: Message) -> None:
        msg_id = f"m{len(self.ours)}"
        self.ours[msg_id] = m
        self.lc.append(to_lc(m, msg_id))

    def messages(self) -> list[Message]:
        return [self.ours[x.id] if x.id in self.ours else from_lc(x) for x in self.lc]


def _apply(state: _State, update: dict[str, Any] | None) -> bool:
    if not update:
        return False
    from langchain_core.messages import RemoveMessage

    state.lc = [m for m in update["messages"] if not isinstance(m, RemoveMessage)]
    return True


def replay(trace: Trace, strategy: str, *, window: int, threshold: int, keep: int, summary_tokens: int, ref: Reference) -> Replay:
    """Drive the middleware's ``before_model`` before every model step of ``trace`` (its summaries
    get the same budget as ours: ``summary_tokens`` and the identifier room at ``threshold``)."""
    room = identifier_room(threshold, summary_tokens)
    mw, model = make_middleware(strategy, threshold=threshold, keep=keep, summary_tokens=summary_tokens, identifier_tokens=room)
    out = Replay(strategy, trace.name, window)
    state = _State()
    started = time.perf_counter()

    def step() -> Envelope:
        calls = model.calls
        compacted = _apply(state, mw.before_model({"messages": state.lc}, None))  # type: ignore[arg-type]
        # with no human message in the last 4000 tokens, the middleware writes a fixed sentence
        # ("Previous conversation was too long to summarize.") without calling the model
        out.unsummarized += compacted and model.calls == calls
        env = trace.envelope(state.messages())
        out.observe(env, ref, compacted=compacted)
        return env

    for m in trace.messages:
        if m.role == "assistant":
            step()
        state.append(m)
        out.saw(m)
    final = step()
    out.seconds = time.perf_counter() - started
    out.summarizer_calls = model.calls
    return out.finish(trace, final, ref)


def manual(trace: Trace, strategy: str, *, keep: int, summary_tokens: int, ref: Reference) -> dict[str, Any]:
    """The peer's "compact now": one ``before_model`` pass with a trigger every history reaches."""
    mw, model = make_middleware(strategy, threshold=1, keep=keep, summary_tokens=summary_tokens)
    state = _State()
    for m in trace.messages:
        state.append(m)
    t0 = time.perf_counter()
    _apply(state, mw.before_model({"messages": state.lc}, None))  # type: ignore[arg-type]
    seconds = time.perf_counter() - t0
    env = trace.envelope(state.messages())
    return {"seconds": seconds, "calls": model.calls, "tokens_after": ref.envelope(env), "request_present": trace.current_request in "\n".join(m.content for m in env.messages())}


def pressure_check_times(trace: Trace, strategy: str, *, threshold: int, keep: int, summary_tokens: int, messages: Sequence[Message], repeats: int = 20) -> float:
    """Median time of the peer's per-step check (``before_model`` below its trigger) on ``messages``."""
    mw, _ = make_middleware(strategy, threshold=10**12, keep=keep, summary_tokens=summary_tokens)
    state = _State()
    for m in messages:
        state.append(m)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        assert mw.before_model({"messages": state.lc}, None) is None  # type: ignore[arg-type]
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def meter(trace: Trace, repeats: int = 3) -> dict[str, dict[str, float]]:
    """The peers' meters on the raw trace envelope: count, cold time, and re-measure after +1 message."""
    from langchain_core.messages import SystemMessage
    from langchain_core.messages.utils import count_tokens_approximately

    env = trace.envelope()
    lc = [SystemMessage(trace.system_prompt)] + [to_lc(m) for m in trace.messages]
    tools = [dict(t) for t in trace.tools]
    follow = to_lc(trace.messages[0].with_content("follow-up: 还有超时吗？"))

    def best(fn: Callable[[], Any]) -> tuple[Any, float]:
        times, value = [], None
        for _ in range(repeats):
            t0 = time.perf_counter()
            value = fn()
            times.append(time.perf_counter() - t0)
        return value, min(times)

    lc_n, lc_t = best(lambda: count_tokens_approximately(lc, tools=tools))
    _, lc_w = best(lambda: count_tokens_approximately(lc + [follow], tools=tools))
    c4_n, c4_t = best(lambda: chars_over_4(env))
    grown = trace.envelope(trace.messages + (trace.messages[0].with_content("follow-up: 还有超时吗？"),))
    _, c4_w = best(lambda: chars_over_4(grown))
    return {"langchain": {"tokens": lc_n, "cold_s": lc_t, "warm_s": lc_w}, "chars/4": {"tokens": c4_n, "cold_s": c4_t, "warm_s": c4_w}}
