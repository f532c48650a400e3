"""The adapters' shared driver: which framework exceptions count as which provider error."""

from __future__ import annotations

import httpx
import pytest

from engine.adapters.core import provider_error_of, text_of
from engine.apps.harness.simulator import overflow_body
from engine.llm.errors import CONTEXT_WINDOW_EXCEEDED, RATE_LIMITED, ProviderError

openai = pytest.importorskip("openai", reason="openai is not installed: pip install 'compaction-inspector[openai-agents]'")


def status_error(status: int, body: dict, headers: dict | None = None) -> Exception:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(status, json=body, headers=headers, request=request)
    return openai.APIStatusError(str(body), response=response, body=body.get("error"))


def test_an_http_overflow_is_classified_from_the_response_itself() -> None:
    status, body = overflow_body("vllm", tokens=9000, window=4096, max_tokens=None)
    err = provider_error_of(status_error(status, body), "openai")
    assert err is not None and err.code == CONTEXT_WINDOW_EXCEEDED and err.status == status


def test_a_rate_limit_mentioning_tokens_is_not_an_overflow() -> None:
    body = {"error": {"message": "Request too large for gpt-4o on tokens per min (TPM): Limit 30000, Requested 50000.", "type": "tokens", "code": "rate_limit_exceeded"}}
    err = provider_error_of(status_error(429, body, {"retry-after": "2"}), "openai")
    assert err is not None and err.code == RATE_LIMITED and err.retry_after == 2


def test_a_wrapped_error_is_found_along_its_cause() -> None:
    status, body = overflow_body("openai", tokens=9000, window=4096, max_tokens=None)
    try:
        try:
            raise status_error(status, body)
        except Exception as inner:
            raise RuntimeError("the framework wrapped it") from inner
    except RuntimeError as outer:
        err = provider_error_of(outer, "openai")
    assert err is not None and err.code == CONTEXT_WINDOW_EXCEEDED


def test_a_framework_overflow_type_without_a_response_is_an_overflow() -> None:
    class ContextOverflowError(Exception):  # the name LangChain's type carries; matched along the MRO
        pass

    class ProviderSpecific(ContextOverflowError):
        pass

    err = provider_error_of(ProviderSpecific("prompt is too long"), "anthropic")
    assert err is not None and (err.code, err.rule, err.message) == (CONTEXT_WINDOW_EXCEEDED, "framework:ProviderSpecific", "prompt is too long")


def test_other_exceptions_are_not_provider_errors() -> None:
    assert provider_error_of(ValueError("bad tool arguments"), "openai") is None
    own = ProviderError(RATE_LIMITED, "slow down", provider="openai")
    assert provider_error_of(own, "openai") is own


def test_text_of_keeps_only_text_parts() -> None:
    assert text_of([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}, "b", {"type": "output_text", "text": "c"}]) == "abc"
    assert text_of(None) == "" and text_of("plain") == "plain"
