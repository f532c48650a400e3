"""Summaries from an OpenAI-compatible chat-completions endpoint (OpenAI, DeepSeek, vLLM, Ollama, ...).

The request, the parsing, the error classification and the retries are the engine's one model
client (:class:`engine.llm.ChatClient`), the same the agent harness uses; this module adds the
prompt, the summary-specific checks (text content, not empty, not cut off) and the mapping of a
classified provider error to a :class:`SummarizerError`.

The model writes within ``max_tokens``. When the request has an identifier room
(``identifier_tokens``), the engine appends the identifier index to the model's summary: the
extractive summary's identifier lines (:func:`.extractive.identifier_index`) for the identifiers
the model's text does not show, within the room, deterministic. The previous summary's index is
carried by that index, not shown to the model.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from importlib import resources
from string import Template
from typing import Any, Iterable

from ...core.messages import Message
from ...core.meter import default_meter
from ...llm.client import ChatClient
from ...llm.errors import CONNECTION_ERROR, MALFORMED_RESPONSE, TIMEOUT, ProviderError
from ...llm.retry import RetryPolicy
from .extractive import identifier_index, split_identifier_section
from .protocol import SummarizerError, SummaryRequest, SummaryResult


@cache
def load_prompt(name: str) -> Template:
    """A prompt template shipped in ``engine/compaction/summarizers/prompts/<name>.txt``."""
    text = resources.files(__package__).joinpath("prompts", f"{name}.txt").read_text(encoding="utf-8")
    return Template(text)


def render_transcript(messages: Iterable[Message]) -> str:
    """The messages as plain text for the summary prompt, tool calls and results labelled."""
    parts: list[str] = []
    for m in messages:
        ref = f"#{m.id} " if m.id is not None else ""
        if m.role == "tool":
            label = f"[{ref}tool result for {m.tool_call_id}{f' ({m.name})' if m.name else ''}]"
        else:
            label = f"[{ref}{m.role}]"
        lines = [label]
        if m.content:
            lines.append(m.content)
        lines.extend(f"-> tool call {c.id}: {c.name} {c.arguments}" for c in m.tool_calls)
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def render_prompt(request: SummaryRequest) -> tuple[str, str]:
    """The (system, user) prompt pair for ``request``. With an identifier room the previous
    summary is shown without its identifier section: the appended index carries it."""
    shown = request.previous_summary
    if shown and request.identifier_tokens > 0:
        shown = split_identifier_section(shown)[0]
    previous = load_prompt("previous_summary").substitute(previous_summary=shown) if shown and shown.strip() else ""
    user = load_prompt("summarize").substitute(
        previous_summary_block=previous,
        conversation=render_transcript(request.messages),
        summary_kind="an updated summary" if previous else "a summary",
        max_tokens=request.max_tokens,
        running_turn_block=load_prompt("running_turn").template if request.running_turn else "",
        current_request_block=(
            load_prompt("current_request").substitute(current_request=request.current_request)
            if request.current_request
            else ""
        ),
        instructions_block=(
            load_prompt("instructions").substitute(instructions=request.instructions.strip())
            if request.instructions and request.instructions.strip()
            else ""
        ),
    )
    return load_prompt("system").template.strip(), user.strip()


class OpenAICompatSummarizer:
    """POSTs ``{base_url}/chat/completions`` (temperature 0, ``max_tokens`` = the summary budget).

    With ``identifier_tokens`` > 0 the result is the model's text, then a blank line and the
    identifier index (the identifiers it does not show, within that room; none when every one is
    shown), and ``dropped_identifiers`` the identifiers the index left out. Without, the result is
    the model's text alone.

    Retries at most ``retries`` times (a request's ``retries``, the policy's ``summary_retries``,
    wins), only when the classified error is retryable: timeouts, connection errors, rate limits
    other than a spent quota, server errors. It waits what the provider's ``Retry-After`` asks (up
    to ``max_wait`` seconds; a longer wait ends the call), else ``backoff × attempt`` seconds.
    ``deadline`` (seconds, optional) bounds a whole call, waits included; ``timeout`` bounds each
    network operation. An overflow of the summarizer's own window is not retried either: the same
    prompt would overflow again. The API key goes only into the Authorization header: never into
    a message, an error or ``repr``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        retries: int = 1,
        backoff: float = 0.5,
        *,
        max_wait: float = 30.0,
        deadline: float | None = None,
    ) -> None:
        if not base_url or not model:
            raise SummarizerError("an OpenAI-compatible summarizer needs a base URL and a model", "config")
        if timeout <= 0:
            raise SummarizerError("timeout must be > 0", "config")
        try:
            policy = RetryPolicy(retries=retries, backoff=backoff, max_wait=max_wait, deadline=deadline)
        except ValueError as exc:
            raise SummarizerError(f"invalid retry settings: {exc}", "config") from None
        self.model = model
        self.name = f"openai-compatible:{model}"
        self.timeout = timeout
        self.retry = policy
        self._api_key = api_key
        self._client = ChatClient(base_url, provider="summarizer", api_key=api_key, timeout=timeout, retry=policy)
        self.url = self._client.url

    @property
    def retries(self) -> int:
        return self.retry.retries

    @property
    def backoff(self) -> float:
        return self.retry.backoff

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"OpenAICompatSummarizer(url={self.url!r}, model={self.model!r}, api_key={key}, retries={self.retries})"

    def close(self) -> None:
        """Nothing to release: each call opens and closes its own connection (kept for ``with`` blocks)."""

    def __enter__(self) -> "OpenAICompatSummarizer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        system_prompt, user_prompt = render_prompt(request)
        body = {
            "messages": [{"role": "system", "content": system_prompt}, {"role": "user", "content": user_prompt}],
            "max_tokens": request.max_tokens,
            "temperature": 0,
        }
        policy = self.retry if request.retries is None else self.retry.with_retries(request.retries)  # the policy wins
        try:
            completion = self._client.complete_blocking(body, model=self.model, retry=policy)
        except ProviderError as err:
            raise self._scrubbed(self._error_of(err), err.attempts) from None
        calls = completion.attempts
        content = _content(completion.raw)
        if content is None:
            raise self._scrubbed(
                SummarizerError("summary endpoint returned no choices[0].message.content text", "malformed_response"), calls
            )
        if not content.strip():
            raise self._scrubbed(SummarizerError("summary endpoint returned an empty summary", "empty"), calls)
        if completion.finish_reason == "length":  # cut off at max_tokens: a partial summary would silently lose history
            raise self._scrubbed(SummarizerError("the summary was cut off at the max_tokens limit", "truncated"), calls)
        text = content.strip()
        index, dropped = identifier_index(_with_spare_room(request, text), text) if request.identifier_tokens > 0 else ("", ())
        return SummaryResult(
            text=f"{text}\n\n{index}" if index else text,
            model=completion.model or self.model,
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            calls=calls,
            extractive=False,
            dropped_identifiers=dropped,
        )

    def _error_of(self, err: ProviderError) -> SummarizerError:
        """The summarizer's error for a classified provider error (its code kept as ``provider_code``)."""
        code = err.code
        if code == TIMEOUT:
            if err.rule == "transport:deadline":
                return SummarizerError(f"summary call passed its deadline of {self.retry.deadline:g}s", "timeout", provider_code=code)
            return SummarizerError(f"summary endpoint timed out after {self.timeout:g}s", "timeout", provider_code=code)
        if code == CONNECTION_ERROR:
            why = type(err.original).__name__ if isinstance(err.original, BaseException) else err.message
            return SummarizerError(f"cannot reach the summary endpoint: {why}", "connection_error", provider_code=code)
        if code == MALFORMED_RESPONSE:
            return SummarizerError(f"summary endpoint returned an unusable body: {_snippet(err.message)}", "malformed_response", provider_code=code)
        if err.inband:
            return SummarizerError(
                f"summary endpoint reported {code} inside its response: {_snippet(err.message)}", "provider_error", status=err.status, provider_code=code
            )
        return SummarizerError(
            f"summary endpoint returned HTTP {err.status} ({code}): {_snippet(err.message)}", "http_error", status=err.status, provider_code=code
        )

    def _scrubbed(self, error: SummarizerError, calls: int) -> SummarizerError:
        """``error`` with the API key masked (an endpoint may echo it) and the attempt count added."""
        message = f"{error.message} (after {calls} attempt{'s' if calls != 1 else ''})"
        if self._api_key:
            message = message.replace(self._api_key, "***")
        return SummarizerError(message, error.code, status=error.status, provider_code=error.provider_code)


def _with_spare_room(request: SummaryRequest, written: str) -> SummaryRequest:
    """``request`` whose identifier room also holds what the model left of its ``max_tokens``
    (the summary as a whole stays within ``max_tokens + identifier_tokens``)."""
    spare = max(0, request.max_tokens - default_meter().count_text(written) - 2)  # the blank line between them
    return replace(request, identifier_tokens=request.identifier_tokens + spare) if spare else request


def _content(data: Any) -> str | None:
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


def _snippet(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return json.dumps(flat[:limit] + ("…" if len(flat) > limit else ""), ensure_ascii=False)
