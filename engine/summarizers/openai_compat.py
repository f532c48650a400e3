"""Summaries from an OpenAI-compatible chat-completions endpoint (OpenAI, DeepSeek, vLLM, Ollama, ...)."""

from __future__ import annotations

import json
import time
from functools import cache
from importlib import resources
from string import Template
from typing import Any, Iterable

import httpx

from ..messages import Message
from .base import SummarizerError, SummaryRequest, SummaryResult

#: HTTP statuses worth another attempt; every other 4xx is final
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


@cache
def load_prompt(name: str) -> Template:
    """A prompt template shipped in ``engine/summarizers/prompts/<name>.txt``."""
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
    """The (system, user) prompt pair for ``request``."""
    previous = (
        load_prompt("previous_summary").substitute(previous_summary=request.previous_summary)
        if request.previous_summary
        else ""
    )
    user = load_prompt("summarize").substitute(
        previous_summary_block=previous,
        conversation=render_transcript(request.messages),
        summary_kind="an updated summary" if request.previous_summary else "a summary",
        max_tokens=request.max_tokens,
        running_turn_block=load_prompt("running_turn").template if request.running_turn else "",
        current_request_block=(
            load_prompt("current_request").substitute(current_request=request.current_request)
            if request.current_request
            else ""
        ),
    )
    return load_prompt("system").template.strip(), user.strip()


class OpenAICompatSummarizer:
    """POSTs ``{base_url}/chat/completions`` (temperature 0, ``max_tokens`` = the summary budget).

    Retries at most ``retries`` times, only on timeouts, connection errors, HTTP 429 and 5xx, waiting
    ``backoff × attempt`` seconds between attempts. The API key goes only into the Authorization
    header: never into a message, an error or ``repr``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        retries: int = 1,
        client: httpx.Client | None = None,
        backoff: float = 0.5,
    ) -> None:
        if not base_url or not model:
            raise SummarizerError("an OpenAI-compatible summarizer needs a base URL and a model", "config")
        if retries < 0 or timeout <= 0 or backoff < 0:
            raise SummarizerError("retries and backoff must be >= 0 and timeout > 0", "config")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.name = f"openai-compatible:{model}"
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._api_key = api_key
        self._owns_client = client is None
        self._client = client if client is not None else httpx.Client(timeout=timeout)

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"OpenAICompatSummarizer(url={self.url!r}, model={self.model!r}, api_key={key}, retries={self.retries})"

    def close(self) -> None:
        """Close the HTTP client if this summarizer created it."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> "OpenAICompatSummarizer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        system_prompt, user_prompt = render_prompt(request)
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": system_prompt}, {"role": "user", "content": user_prompt}],
            "max_tokens": request.max_tokens,
            "temperature": 0,
        }
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        retries = self.retries if request.retries is None else request.retries  # the policy wins
        calls = 0
        while True:
            calls += 1
            try:
                response = self._client.post(self.url, json=body, headers=headers, timeout=self.timeout)
            except httpx.TimeoutException:
                error = SummarizerError(f"summary endpoint timed out after {self.timeout:g}s", "timeout")
            except httpx.TransportError as exc:
                error = SummarizerError(f"cannot reach the summary endpoint: {type(exc).__name__}", "connection_error")
            else:
                if response.status_code < 400:
                    return self._parse(response, calls)
                error = SummarizerError(
                    f"summary endpoint returned HTTP {response.status_code}: {_snippet(response.text)}",
                    "http_error",
                    status=response.status_code,
                )
                if response.status_code not in RETRY_STATUSES:
                    raise self._scrubbed(error, calls)
            if calls > retries:
                raise self._scrubbed(error, calls)
            time.sleep(self.backoff * calls)

    def _parse(self, response: httpx.Response, calls: int) -> SummaryResult:
        try:
            data = response.json()
        except ValueError:
            raise self._scrubbed(
                SummarizerError(f"summary endpoint returned a body that is not JSON: {_snippet(response.text)}", "malformed_response"), calls
            ) from None
        content = _content(data)
        if content is None:
            raise self._scrubbed(
                SummarizerError("summary endpoint returned no choices[0].message.content text", "malformed_response"), calls
            )
        if not content.strip():
            raise self._scrubbed(SummarizerError("summary endpoint returned an empty summary", "empty"), calls)
        finish = (data.get("choices") or [{}])[0].get("finish_reason") if isinstance(data.get("choices"), list) else None
        if finish == "length":  # cut off at max_tokens: a partial summary would silently lose history
            raise self._scrubbed(SummarizerError("the summary was cut off at the max_tokens limit", "truncated"), calls)
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        model = data.get("model") if isinstance(data.get("model"), str) and data.get("model") else self.model
        return SummaryResult(
            text=content.strip(),
            model=model,
            prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
            completion_tokens=_int_or_none(usage.get("completion_tokens")),
            calls=calls,
            extractive=False,
        )

    def _scrubbed(self, error: SummarizerError, calls: int) -> SummarizerError:
        """``error`` with the API key masked (an endpoint may echo it) and the attempt count added."""
        message = f"{error.message} (after {calls} attempt{'s' if calls != 1 else ''})"
        if self._api_key:
            message = message.replace(self._api_key, "***")
        return SummarizerError(message, error.code, status=error.status)


def _content(data: Any) -> str | None:
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _snippet(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return json.dumps(flat[:limit] + ("…" if len(flat) > limit else ""), ensure_ascii=False)
