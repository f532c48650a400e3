"""Error normalization over real provider error bodies: thrown, in a 200 body, in a stream chunk."""

from __future__ import annotations

import json

import pytest

from engine.llm.errors import (
    AUTH_FAILED,
    BAD_REQUEST,
    CONTEXT_WINDOW_EXCEEDED,
    RATE_LIMITED,
    RULES,
    SERVER_ERROR,
    TIMEOUT,
    ProviderError,
    classify_http_error,
    classify_inband,
    is_context_overflow,
)

# -- real bodies ---------------------------------------------------------------------------------

OPENAI_OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. "
        "Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
OPENAI_RESPONSES_OVERFLOW = {
    "error": {
        "message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
        "type": "invalid_request_error",
        "param": "input",
        "code": None,
    }
}
AZURE_OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens. "
        "Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
        "status": 400,
    }
}
OPENROUTER_OVERFLOW = {
    "error": {
        "message": "This endpoint's maximum context length is 131072 tokens. However, you requested about 150000 tokens "
        "(142000 of text input, 8000 in the output). Please reduce the length of either one, or use the "
        '"middle-out" transform to compress your prompt automatically.',
        "code": 400,
    }
}
DEEPSEEK_OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 65536 tokens. However, you requested 70000 tokens "
        "(62000 in the messages, 8000 in the completion). Please reduce the length of the messages or completion.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_request_error",
    }
}
VLLM_OVERFLOW = {
    "object": "error",
    "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens in the messages, "
    "Please reduce the length of the messages.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
VLLM_NEW_OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens. "
        "Please reduce the length of the input messages. None",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
}
VLLM_MAX_MODEL_LEN = {
    "object": "error",
    "message": "The decoder prompt (length 5000) is longer than the maximum model length of 4096. Make sure that "
    "`max_model_len` is no smaller than the number of text tokens.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
VLLM_V1_PROMPT_LENGTH = {
    "error": {
        "message": "Prompt length of 5016 is longer than the maximum model length of 4096.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
}
ANTHROPIC_OVERFLOW = {
    "type": "error",
    "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"},
}
ANTHROPIC_COMBINED = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000, "
        "decrease input length or `max_tokens` and try again",
    },
}
OLLAMA_INPUT_LENGTH = {"error": "the input length exceeds the context length"}
OLLAMA_PROMPT_TOO_LONG = {"error": "prompt too long; exceeded max context length by 1200 tokens"}
OLLAMA_OPENAI_COMPAT = {
    "error": {"message": "prompt too long; exceeded max context length by 100 tokens", "type": "api_error", "param": None, "code": None}
}
LLAMACPP_OVERFLOW = {
    "error": {
        "code": 500,
        "message": "the request exceeds the available context size. try increasing the context size or enable context shift",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 1407,
        "n_ctx": 256,
    }
}
LLAMACPP_OLD_OVERFLOW = {
    "error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "invalid_request_error"}
}
MISTRAL_OVERFLOW = {
    "object": "error",
    "message": "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length",
    "type": "invalid_request_message_error",
    "param": None,
    "code": "3051",
}
GEMINI_OVERFLOW = [
    {
        "error": {
            "code": 400,
            "message": "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
            "status": "INVALID_ARGUMENT",
        }
    }
]
BEDROCK_OVERFLOW = {"message": "Input is too long for requested model."}
GATEWAY_ENTITY_TOO_LARGE = {"error": {"message": "Request Entity Too Large", "type": "upstream_error"}}
PROXY_STRINGIFIED = {"detail": "upstream returned context_length_exceeded"}
NGINX_413 = (
    "<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n"
    "<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)
ANTHROPIC_413 = {"type": "error", "error": {"type": "request_too_large", "message": "Request exceeds the maximum allowed number of bytes."}}

OPENAI_TPM = {
    "error": {
        "message": "Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 12000, "
        "Requested 50000. Please try again in 1m4s. Visit https://platform.openai.com/account/rate-limits to learn more.",
        "type": "tokens",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}
OPENAI_REQUEST_TOO_LARGE = {
    "error": {
        "message": "Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, "
        "Requested 50000. The input or output tokens must be reduced in order to run successfully. "
        "Visit https://platform.openai.com/account/rate-limits to learn more.",
        "type": "tokens",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}
AZURE_429 = {
    "error": {
        "code": "429",
        "message": "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have "
        "exceeded token rate limit of your current AIServices S0 pricing tier. Please retry after 6 seconds.",
    }
}
ANTHROPIC_429 = {
    "type": "error",
    "error": {
        "type": "rate_limit_error",
        "message": "This request would exceed the rate limit for your organization of 40,000 input tokens per minute. "
        "Please reduce the prompt length or the maximum tokens requested, or try again later.",
    },
}
OPENAI_QUOTA = {
    "error": {
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "type": "insufficient_quota",
        "param": None,
        "code": "insufficient_quota",
    }
}
OPENAI_MAX_TOKENS = {
    "error": {
        "message": "max_tokens is too large: 100000. This model supports at most 16384 completion tokens, "
        "whereas you provided 100000.",
        "type": "invalid_request_error",
        "param": "max_tokens",
        "code": "invalid_value",
    }
}
VLLM_MAX_TOKENS = {
    "error": {
        "message": "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context length is "
        "4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778). None",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
}
OPENAI_STRING_TOO_LONG = {
    "error": {
        "message": "Invalid 'messages[1].content': string too long. Expected a string with maximum length 10485760, "
        "but got a string with length 12000000 instead.",
        "type": "invalid_request_error",
        "param": "messages[1].content",
        "code": "string_above_max_length",
    }
}
OPENAI_BAD_TOOL_ORDER = {
    "error": {
        "message": "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
        "type": "invalid_request_error",
        "param": "messages.[2].role",
        "code": None,
    }
}
OPENAI_401 = {
    "error": {"message": "Incorrect API key provided: sk-abc. You can find your API key at https://platform.openai.com/account/api-keys.",
              "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}
}
ANTHROPIC_OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
OPENAI_500 = {"error": {"message": "The server had an error while processing your request. Sorry about that!", "type": "server_error", "param": None, "code": None}}
CLOUDFLARE_502 = "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center></body></html>"


def _message_of(body: object) -> str:
    """The provider's own text inside a body (what ProviderError.message must carry)."""
    node = body[0] if isinstance(body, list) else body
    if isinstance(node, str):
        return node.strip()
    inner = node.get("error") if isinstance(node, dict) else None
    if isinstance(inner, str):
        return inner
    if isinstance(inner, dict):
        return inner["message"]
    return node.get("message") or node["detail"]


# (case id, HTTP status, body, expected code, expected rule)
THROWN = [
    ("openai", 400, OPENAI_OVERFLOW, CONTEXT_WINDOW_EXCEEDED, "code:context-overflow"),
    ("openai-responses", 400, OPENAI_RESPONSES_OVERFLOW, CONTEXT_WINDOW_EXCEEDED, "openai:exceeds-context-window"),
    ("azure", 400, AZURE_OVERFLOW, CONTEXT_WINDOW_EXCEEDED, "code:context-overflow"),
    ("openrouter", 400, OPENROUTER_OVERFLOW, CONTEXT_WINDOW_EXCEEDED, "openai:maximum-context-length"),
    ("deepseek", 400, DEEPSEEK_OVERFLOW, CONTEXT_WINDOW_EXCEEDED, "openai:maximum-context-length"),
    ("vllm", 400, VLLM_OVERFLOW, CONTEXT_WINDOW_EXCEEDED, "openai:maximum-context-length"),
    ("vllm-new", 400, VLLM_NEW_OVERFLOW, CONTEXT_WINDOW_EXCEEDED, "openai:maximum-context-length"),
    ("vllm-max-model-len", 400, VLLM_MAX_MODEL_LEN, CONTEXT_WINDOW_EXCEEDED, "vllm:longer-than-max-model-len"),
    ("vllm-v1-prompt-length", 400, VLLM_V1_PROMPT_LENGTH, CONTEXT_WINDOW_EXCEEDED, "vllm:longer-than-max-model-len"),
    ("anthropic", 400, ANTHROPIC_OVERFLOW, CONTEXT_WINDOW_EXCEEDED, "anthropic:prompt-too-long"),
    ("anthropic-combined", 400, ANTHROPIC_COMBINED, CONTEXT_WINDOW_EXCEEDED, "anthropic:input-and-max-tokens"),
    ("ollama-input-length", 400, OLLAMA_INPUT_LENGTH, CONTEXT_WINDOW_EXCEEDED, "ollama:exceeds-context-length"),
    ("ollama-500", 500, OLLAMA_INPUT_LENGTH, CONTEXT_WINDOW_EXCEEDED, "ollama:exceeds-context-length"),
    ("ollama-prompt-too-long", 400, OLLAMA_PROMPT_TOO_LONG, CONTEXT_WINDOW_EXCEEDED, "ollama:prompt-too-long"),
    ("ollama-openai-compat", 400, OLLAMA_OPENAI_COMPAT, CONTEXT_WINDOW_EXCEEDED, "ollama:prompt-too-long"),
    ("llamacpp-500", 500, LLAMACPP_OVERFLOW, CONTEXT_WINDOW_EXCEEDED, "code:context-overflow"),
    ("llamacpp-old", 400, LLAMACPP_OLD_OVERFLOW, CONTEXT_WINDOW_EXCEEDED, "llamacpp:exceeds-context-size"),
    ("mistral", 400, MISTRAL_OVERFLOW, CONTEXT_WINDOW_EXCEEDED, "openai:maximum-context-length"),
    ("gemini", 400, GEMINI_OVERFLOW, CONTEXT_WINDOW_EXCEEDED, "gemini:input-token-count"),
    ("bedrock", 400, BEDROCK_OVERFLOW, CONTEXT_WINDOW_EXCEEDED, "bedrock:input-too-long"),
    ("gateway-400", 400, GATEWAY_ENTITY_TOO_LARGE, CONTEXT_WINDOW_EXCEEDED, "gateway:entity-too-large"),
    ("proxy-stringified", 400, PROXY_STRINGIFIED, CONTEXT_WINDOW_EXCEEDED, "text:context-length-exceeded"),
    ("413-html", 413, NGINX_413, CONTEXT_WINDOW_EXCEEDED, "http:413"),
    ("413-anthropic", 413, ANTHROPIC_413, CONTEXT_WINDOW_EXCEEDED, "http:413"),
    ("429-tpm", 429, OPENAI_TPM, RATE_LIMITED, "http:429"),
    ("429-request-too-large", 429, OPENAI_REQUEST_TOO_LARGE, RATE_LIMITED, "http:429"),
    ("429-azure-token-rate", 429, AZURE_429, RATE_LIMITED, "http:429"),
    ("429-anthropic-input-tokens", 429, ANTHROPIC_429, RATE_LIMITED, "http:429"),
    ("429-quota", 429, OPENAI_QUOTA, RATE_LIMITED, "http:429"),
    ("max-tokens-openai", 400, OPENAI_MAX_TOKENS, BAD_REQUEST, "text:output-budget"),
    ("max-tokens-vllm", 400, VLLM_MAX_TOKENS, BAD_REQUEST, "text:output-budget"),
    ("string-too-long", 400, OPENAI_STRING_TOO_LONG, BAD_REQUEST, "code:string-too-long"),
    ("bad-tool-order", 400, OPENAI_BAD_TOOL_ORDER, BAD_REQUEST, "http:4xx"),
    ("404-model", 404, {"error": {"message": "The model `gpt-9` does not exist", "type": "invalid_request_error", "code": "model_not_found"}}, BAD_REQUEST, "http:4xx"),
    ("401", 401, OPENAI_401, AUTH_FAILED, "http:auth"),
    ("403", 403, {"error": {"message": "Country, region, or territory not supported", "type": "request_forbidden"}}, AUTH_FAILED, "http:auth"),
    ("408", 408, "Request Timeout", TIMEOUT, "http:408"),
    ("500", 500, OPENAI_500, SERVER_ERROR, "http:5xx"),
    ("502-html", 502, CLOUDFLARE_502, SERVER_ERROR, "http:5xx"),
    ("503-empty", 503, b"", SERVER_ERROR, "http:5xx"),
    ("529-overloaded", 529, ANTHROPIC_OVERLOADED, SERVER_ERROR, "http:5xx"),
]


@pytest.mark.parametrize("case,status,body,code,rule", THROWN, ids=[c[0] for c in THROWN])
def test_thrown_error_bodies_are_classified(case: str, status: int, body: object, code: str, rule: str) -> None:
    raw = body if isinstance(body, (str, bytes)) else json.dumps(body).encode()  # as read off the wire
    err = classify_http_error("prov", status, raw)
    assert (err.code, err.rule) == (code, rule)
    assert err.status == status and err.provider == "prov" and not err.inband
    assert is_context_overflow(err) == (code == CONTEXT_WINDOW_EXCEEDED)
    if isinstance(body, (dict, list)):
        assert err.original == body  # the parsed original body is kept
        assert err.message == _message_of(body)  # the provider's text, unchanged
    elif body:
        assert err.original == body and err.message == body.strip()
    else:
        assert err.message == "HTTP 503 Service Unavailable"


# error objects that can arrive in-band; a bare {"message"}/{"detail"} in a 200 body is not an error
# shape (it is a malformed completion), so those two wordings are only tested thrown
OVERFLOW_BODIES = [
    c for c in THROWN if c[3] == CONTEXT_WINDOW_EXCEEDED and c[1] != 413 and c[0] not in {"bedrock", "proxy-stringified"}
]


@pytest.mark.parametrize("case,status,body,code,rule", OVERFLOW_BODIES, ids=[c[0] for c in OVERFLOW_BODIES])
def test_overflow_bodies_returned_in_band_in_a_200_body(case: str, status: int, body: object, code: str, rule: str) -> None:
    payload = body[0] if isinstance(body, list) else body
    err = classify_inband("prov", payload)
    assert err is not None and err.code == CONTEXT_WINDOW_EXCEEDED and err.inband
    assert err.original == payload and err.message == _message_of(body)


@pytest.mark.parametrize("case,status,body,code,rule", OVERFLOW_BODIES, ids=[c[0] for c in OVERFLOW_BODIES])
def test_overflow_error_inside_a_stream_chunk(case: str, status: int, body: object, code: str, rule: str) -> None:
    """OpenRouter-style mid-stream error: a chunk with an error object and finish_reason "error"."""
    inner = body[0] if isinstance(body, list) else body
    error = inner.get("error") if isinstance(inner.get("error"), (dict, str)) else {"message": _message_of(body)}
    chunk = {
        "id": "gen-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "error": error,
        "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
    }
    err = classify_inband("prov", chunk)
    assert err is not None and err.code == CONTEXT_WINDOW_EXCEEDED, case
    assert err.original is chunk or err.original == chunk


def test_anthropic_stream_error_event_is_an_overflow() -> None:
    event = {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"}}
    err = classify_inband("anthropic", event)
    assert err is not None and err.code == CONTEXT_WINDOW_EXCEEDED and err.status is None


def test_inband_status_comes_from_the_error_object() -> None:
    relayed = classify_inband("gw", {"error": {"message": "Request Entity Too Large", "code": 413}})
    assert relayed is not None and relayed.status == 413 and relayed.code == CONTEXT_WINDOW_EXCEEDED
    azure = classify_inband("azure", AZURE_429)
    assert azure is not None and azure.status == 429 and azure.code == RATE_LIMITED


INBAND_NOT_OVERFLOW = [
    ("rate-limit-in-stream", ANTHROPIC_429, RATE_LIMITED, "code:rate-limit"),
    ("tpm-in-stream", OPENAI_TPM, RATE_LIMITED, "code:rate-limit"),
    ("rate-limit-text-only", {"error": {"message": "Rate limit exceeded: free-models-per-min (50000 tokens)"}}, RATE_LIMITED, "text:rate-limit"),
    ("overloaded", ANTHROPIC_OVERLOADED, SERVER_ERROR, "default"),
    ("llamacpp-500-generic", {"error": {"code": 500, "message": "slot unavailable", "type": "server_error"}}, SERVER_ERROR, "http:5xx"),
    ("auth", {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}, AUTH_FAILED, "code:auth"),
    ("bad-request", {"error": {"message": "Unknown parameter: 'foo'.", "type": "invalid_request_error"}}, BAD_REQUEST, "code:bad-request"),
    ("max-tokens-param", {"error": {"message": "Invalid value", "type": "invalid_request_error", "param": "max_tokens"}}, BAD_REQUEST, "param:output-budget"),
    ("unexplained", {"error": {"message": "something odd happened"}}, SERVER_ERROR, "default"),
]


@pytest.mark.parametrize("case,payload,code,rule", INBAND_NOT_OVERFLOW, ids=[c[0] for c in INBAND_NOT_OVERFLOW])
def test_inband_errors_that_are_not_overflow(case: str, payload: dict, code: str, rule: str) -> None:
    err = classify_inband("prov", payload)
    assert err is not None and (err.code, err.rule) == (code, rule)
    assert not is_context_overflow(err)


def _completion(finish_reason: str | None, **extra: object) -> dict:
    return {
        "id": "c1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "partial"}, "finish_reason": finish_reason}],
        **extra,
    }


@pytest.mark.parametrize("reason", ["stop", "length", "tool_calls", "content_filter", None])
def test_normal_finish_reasons_are_not_errors(reason: str | None) -> None:
    """finish_reason "length" means the output hit max_tokens: a normal completion, not an overflow."""
    assert classify_inband("openai", _completion(reason)) is None
    assert classify_inband("openai", {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}) is None


@pytest.mark.parametrize("reason", ["model_context_window_exceeded", "model_length", "context_length_exceeded"])
def test_stop_reasons_naming_the_window_are_overflow(reason: str) -> None:
    payload = _completion(reason)
    err = classify_inband("zai", payload)
    assert err is not None and err.code == CONTEXT_WINDOW_EXCEEDED and err.inband
    assert err.original == payload and err.message == f"finish_reason={reason}"


def test_anthropic_stop_reason_passed_through_a_proxy_is_overflow() -> None:
    err = classify_inband("proxy", {"type": "message", "stop_reason": "model_context_window_exceeded", "content": []})
    assert err is not None and err.code == CONTEXT_WINDOW_EXCEEDED


def test_finish_reason_error_without_an_error_object_is_a_server_error() -> None:
    err = classify_inband("openrouter", _completion("error"))
    assert err is not None and err.code == SERVER_ERROR and err.retryable


def test_retryability_and_retry_after() -> None:
    limited = classify_http_error("openai", 429, OPENAI_TPM, {"Retry-After": "7"})
    assert limited.retryable and limited.retry_after == 7.0
    ms = classify_http_error("openai", 429, OPENAI_TPM, {"retry-after-ms": "1500", "Retry-After": "2"})
    assert ms.retry_after == 1.5
    assert classify_http_error("openai", 429, OPENAI_TPM, {"Retry-After": "soon"}).retry_after is None
    quota = classify_http_error("openai", 429, OPENAI_QUOTA)
    assert quota.code == RATE_LIMITED and not quota.retryable  # a spent quota does not come back by waiting
    assert not classify_http_error("openai", 400, OPENAI_OVERFLOW).retryable  # needs a smaller request first
    assert classify_http_error("openai", 503, b"").retryable
    assert not classify_http_error("openai", 401, OPENAI_401).retryable


def test_every_rule_is_exercised_by_a_case() -> None:
    """The table has no row without a real body behind it."""
    seen = {c[4] for c in THROWN} | {c[3] for c in INBAND_NOT_OVERFLOW}
    seen |= {classify_inband("p", c[2][0] if isinstance(c[2], list) else c[2]).rule for c in OVERFLOW_BODIES}  # type: ignore[union-attr]
    assert {r.name for r in RULES} <= seen


def test_provider_error_contract() -> None:
    err = classify_http_error("deepseek", 400, json.dumps(DEEPSEEK_OVERFLOW))
    assert isinstance(err, Exception)
    assert err.to_json()["error"]["code"] == CONTEXT_WINDOW_EXCEEDED
    assert "CONTEXT_WINDOW_EXCEEDED from deepseek (HTTP 400)" in str(err)
    assert not is_context_overflow(ValueError("maximum context length"))
    assert not is_context_overflow(None)
    with pytest.raises(ValueError, match="unknown provider error code"):
        ProviderError("NOPE", "x", provider="p")
