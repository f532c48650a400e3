"""The provider simulator on the wire: a real loopback server, read with a plain HTTP client."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from engine.apps.harness.simulator import STYLES, ProviderSimulator, Reply, SimRequest, overflow_body
from engine.core.messages import Envelope, Surface, ToolCall, assistant, tool_result, user
from engine.core.meter import default_meter

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ({"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},)


def _envelope(text: str = "hello there") -> Envelope:
    call = ToolCall("call_a", "search", '{"q": "x"}')
    surface = Surface((user("find x"), assistant("", call), tool_result("call_a", "x is 42", name="search"), user(text)))
    return Envelope("You are a careful agent.", surface, TOOLS)


def _post(sim: ProviderSimulator, body: dict, **kw: object) -> httpx.Response:
    return httpx.post(f"{sim.base_url}/chat/completions", json=body, timeout=10, **kw)


def _request(envelope: Envelope, model: str = "gpt-4o", **extra: object) -> dict:
    return {**envelope.to_openai(), "model": model, **extra}


def _sse_data(text: str) -> list[str]:
    return [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]


def test_listens_on_loopback_with_an_ephemeral_port() -> None:
    with ProviderSimulator() as sim:
        assert sim.base_url == f"http://127.0.0.1:{sim.port}/v1" and sim.port > 0
        with socket.create_connection(("127.0.0.1", sim.port), timeout=2):
            pass
        port = sim.port
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    with pytest.raises(RuntimeError, match="not running"):
        _ = sim.base_url


def test_close_ends_kept_alive_connections_and_is_final() -> None:
    sim = ProviderSimulator(fallback=Reply("hi")).start()
    with httpx.Client(timeout=5) as client:  # pools one keep-alive connection
        assert client.post(f"{sim.base_url}/chat/completions", json=_request(_envelope())).status_code == 200
        url = f"{sim.base_url}/chat/completions"
        sim.close()
        with pytest.raises(httpx.TransportError):
            client.post(url, json=_request(_envelope()))
    with pytest.raises(RuntimeError, match="cannot be restarted"):
        sim.start()


def test_text_completion_reports_the_engine_meter_count_as_prompt_tokens() -> None:
    env = _envelope()
    with ProviderSimulator() as sim:
        sim.script([Reply("Hi!")])
        r = _post(sim, _request(env))
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    data = r.json()
    expected = default_meter("gpt-4o").measure(env).total  # the same envelope measured by the engine
    assert data["usage"]["prompt_tokens"] == expected
    assert data["choices"][0] == {"index": 0, "message": {"role": "assistant", "content": "Hi!"}, "logprobs": None, "finish_reason": "stop"}
    assert data["id"] == "chatcmpl-sim-0" and data["model"] == "gpt-4o"
    (rec,) = sim.requests
    assert (rec.index, rec.prompt_tokens, rec.outcome, rec.status, rec.stream) == (0, expected, "ok", 200, False)


def test_tool_call_reply_has_parallel_calls_with_deterministic_ids() -> None:
    with ProviderSimulator() as sim:
        sim.script([Reply(tool_calls=(("search", {"q": "a"}), ("read", {"path": "/tmp/x"})))])
        data = _post(sim, _request(_envelope())).json()
    choice = data["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [
        {"id": "call_0000_0", "type": "function", "function": {"name": "search", "arguments": '{"q": "a"}'}},
        {"id": "call_0000_1", "type": "function", "function": {"name": "read", "arguments": '{"path": "/tmp/x"}'}},
    ]


def test_stream_sends_content_and_tool_call_deltas_then_usage_and_done() -> None:
    with ProviderSimulator() as sim:
        sim.script([Reply("Looking it up now.", (("search", {"q": "a long query"}),))])
        r = _post(sim, _request(_envelope(), stream=True, stream_options={"include_usage": True}))
    assert r.headers["content-type"].startswith("text/event-stream")
    events = _sse_data(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "Looking it up now."
    deltas = [d for c in chunks if c["choices"] for d in c["choices"][0]["delta"].get("tool_calls", [])]
    assert deltas[0]["id"] == "call_0000_0" and deltas[0]["function"]["name"] == "search"
    assert len(deltas) > 2  # the arguments arrive in several pieces
    assert "".join(d["function"]["arguments"] for d in deltas) == '{"q": "a long query"}'
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == sim.requests[0].prompt_tokens


def test_stream_without_include_usage_has_no_usage_chunk() -> None:
    with ProviderSimulator() as sim:
        sim.script([Reply("ok")])
        events = _sse_data(_post(sim, _request(_envelope(), stream=True)).text)
    assert all("usage" not in json.loads(e) for e in events[:-1])


@pytest.mark.parametrize("style", STYLES)
def test_over_window_requests_get_the_provider_error_and_keep_the_script(style: str) -> None:
    env = _envelope("word " * 300)
    with ProviderSimulator(context_window=200, error_style=style) as sim:
        sim.script([Reply("never sent")])
        r = _post(sim, _request(env, max_tokens=1000))
        assert sim.pending == 1  # an overflow does not consume a reply
    tokens = sim.requests[0].prompt_tokens
    assert tokens is not None and tokens > 200
    status, body = overflow_body(style, tokens=tokens, window=200, max_tokens=1000)
    assert r.status_code == status
    if style == "413":
        assert r.headers["content-type"].startswith("text/html") and "413 Request Entity Too Large" in r.text
    else:
        assert r.json() == body
        assert str(tokens - 200 if style == "ollama" else tokens) in r.text  # the real count, not a canned one
    assert (sim.requests[0].outcome, sim.requests[0].status) == ("overflow", status)


@pytest.mark.parametrize("style", STYLES)
def test_inband_overflow_in_a_200_body_and_inside_the_stream(style: str) -> None:
    env = _envelope("word " * 300)
    with ProviderSimulator(context_window=200, error_style=style, inband=True) as sim:
        plain = _post(sim, _request(env))
        streamed = _post(sim, _request(env, stream=True))
    assert plain.status_code == 200 and streamed.status_code == 200
    assert "error" in plain.json() or plain.json().get("object") == "error"
    events = _sse_data(streamed.text)
    assert json.loads(events[0])["choices"][0]["delta"]["role"] == "assistant"  # the stream opened normally
    assert json.loads(events[-1]) == plain.json()  # then carried the error and ended
    assert ("event: error" in streamed.text) == (style == "anthropic")
    assert [r.outcome for r in sim.requests] == ["overflow", "overflow"]


def test_context_window_can_change_while_running() -> None:
    env = _envelope("word " * 100)
    with ProviderSimulator(context_window=50) as sim:
        sim.script([Reply("fits now")])
        assert _post(sim, _request(env)).status_code == 400
        sim.context_window = 10_000
        assert _post(sim, _request(env)).json()["choices"][0]["message"]["content"] == "fits now"
    assert [r.outcome for r in sim.requests] == ["overflow", "ok"]
    assert sim.requests[0].prompt_tokens == sim.requests[1].prompt_tokens


def test_scripted_errors_are_sent_verbatim_with_headers() -> None:
    limit = {"error": {"message": "Rate limit reached for sim on tokens per min (TPM): Limit 10, Requested 50.", "code": "rate_limit_exceeded"}}
    with ProviderSimulator() as sim:
        sim.script([Reply.error(429, limit, headers={"Retry-After": "3"}), Reply.error(502, "<html>Bad Gateway</html>")])
        r1, r2 = _post(sim, _request(_envelope())), _post(sim, _request(_envelope()))
    assert (r1.status_code, r1.json(), r1.headers["retry-after"]) == (429, limit, "3")
    assert r2.status_code == 502 and r2.headers["content-type"].startswith("text/html")
    assert [(r.outcome, r.status) for r in sim.requests] == [("scripted", 429), ("scripted", 502)]


def test_raw_and_error_replies_can_wait_and_carry_headers() -> None:
    usage = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 321}}
    with ProviderSimulator() as sim:
        sim.script([Reply.raw(usage, delay=0.3, headers={"X-Request-Id": "r1"}), Reply.error(503, {"error": {"message": "busy"}}, delay=0.3)])
        started = time.monotonic()
        r1, r2 = _post(sim, _request(_envelope())), _post(sim, _request(_envelope()))
    assert time.monotonic() - started >= 0.6
    assert (r1.json(), r1.headers["x-request-id"], r2.status_code) == (usage, "r1", 503)


def test_requests_are_recorded_with_path_and_headers_on_both_paths() -> None:
    with ProviderSimulator(fallback=Reply("ok")) as sim:
        bare = sim.base_url.removesuffix("/v1")
        with_v1 = _post(sim, _request(_envelope()), headers={"Authorization": "Bearer sk-sim"})
        without = httpx.post(f"{bare}/chat/completions", json=_request(_envelope()), timeout=10)
        unknown = httpx.post(f"{bare}/v2/chat/completions", json=_request(_envelope()), timeout=10)
    assert [r.status_code for r in (with_v1, without, unknown)] == [200, 200, 404]
    assert [(r.path, r.outcome) for r in sim.requests] == [
        ("/v1/chat/completions", "ok"),
        ("/chat/completions", "ok"),
        ("/v2/chat/completions", "invalid"),
    ]
    assert sim.requests[0].headers["authorization"] == "Bearer sk-sim" and "authorization" not in sim.requests[1].headers


def test_callable_replies_see_the_request() -> None:
    seen: list[SimRequest] = []

    def adaptive(request: SimRequest) -> Reply:
        seen.append(request)
        return Reply(f"{len(request.envelope.messages())} messages, {request.prompt_tokens} tokens")

    env = _envelope()
    with ProviderSimulator() as sim:
        sim.script([adaptive])
        content = _post(sim, _request(env)).json()["choices"][0]["message"]["content"]
    assert seen[0].envelope.messages() == env.messages() and seen[0].envelope.tools == env.tools
    assert content == f"5 messages, {seen[0].prompt_tokens} tokens"


def test_empty_script_fails_loudly_unless_there_is_a_fallback() -> None:
    with ProviderSimulator() as sim:
        r = _post(sim, _request(_envelope()))
        assert r.status_code == 500 and "no scripted reply" in r.json()["error"]["message"]
        sim.fallback = Reply("default")
        assert _post(sim, _request(_envelope())).json()["choices"][0]["message"]["content"] == "default"
    assert [r.outcome for r in sim.requests] == ["no_reply", "ok"]


def test_bad_requests_and_unknown_paths() -> None:
    with ProviderSimulator() as sim:
        bad_json = httpx.post(f"{sim.base_url}/chat/completions", content=b"{nope", timeout=10)
        bad_role = _post(sim, {"model": "m", "messages": [{"role": "robot", "content": "x"}]})
        no_messages = _post(sim, {"model": "m", "messages": []})
        unknown = httpx.post(f"{sim.base_url}/completions", json={}, timeout=10)
    assert [r.status_code for r in (bad_json, bad_role, no_messages, unknown)] == [400, 400, 400, 404]
    assert "unknown role" in bad_role.json()["error"]["message"]
    assert [r.outcome for r in sim.requests] == ["invalid"] * 4


def test_settings_are_validated() -> None:
    sim = ProviderSimulator()
    with pytest.raises(ValueError, match="unknown error style"):
        sim.error_style = "cohere"
    with pytest.raises(ValueError, match="positive int"):
        sim.context_window = 0
    with pytest.raises(TypeError, match="Reply or a callable"):
        sim.script(["just text"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="needs a body"):
        Reply(status=500)


def test_same_script_gives_the_same_bytes() -> None:
    def run() -> list[bytes]:
        with ProviderSimulator() as sim:
            sim.script([Reply("a b c", (("f", {"x": 1}),)), Reply("d e")])
            one = _post(sim, _request(_envelope())).content
            two = _post(sim, _request(_envelope(), stream=True, stream_options={"include_usage": True})).content
            return [one, two]

    assert run() == run()


def test_concurrent_requests_each_take_one_reply() -> None:
    n = 24
    with ProviderSimulator() as sim:
        sim.script([Reply(f"reply {i}") for i in range(n)])
        contents: list[str] = []
        lock = threading.Lock()

        def worker() -> None:
            with httpx.Client(timeout=10) as client:
                for _ in range(n // 6):
                    r = client.post(f"{sim.base_url}/chat/completions", json=_request(_envelope()))
                    with lock:
                        contents.append(r.json()["choices"][0]["message"]["content"])

        threads = [threading.Thread(target=worker) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(contents) == sorted(f"reply {i}" for i in range(n))
    assert [r.index for r in sim.requests] == list(range(n)) and sim.pending == 0


def test_command_line_entry_point_serves_until_interrupted() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.apps.harness.simulator", "--port", "0", "--window", "300", "--style", "vllm"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert "listening on http://127.0.0.1:" in line and "window 300" in line
        base = line.split("listening on ")[1].split(" ")[0]
        ok = httpx.post(f"{base}/chat/completions", json=_request(_envelope()), timeout=10)
        assert ok.json()["choices"][0]["message"]["content"].startswith("Simulated reply #0")
        too_long = httpx.post(f"{base}/chat/completions", json=_request(_envelope("word " * 400)), timeout=10)
        assert too_long.status_code == 400 and too_long.json()["object"] == "error"
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
