"""Benchmark of the TokenMeter on a ~200k-token envelope of mixed messages.

Run: ``.venv/bin/python benchmarks/meter.py``. Targets: a cold measure within 0.8x of raw tiktoken
(raw/cold >= 0.8) and a warm re-measure after appending one message under 1 ms and >= 100x cheaper
than cold. Exits 1 when a target fails.
"""

from __future__ import annotations

import inspect
import json
import random
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import email.message  # noqa: E402  (stdlib modules used as realistic English and code)
import json.decoder  # noqa: E402
import textwrap  # noqa: E402

from engine.core.messages import Envelope, Message, Surface, ToolCall, assistant, tool_result, user  # noqa: E402
from engine.core.meter import TokenMeter  # noqa: E402
from traces import envelope_texts  # noqa: E402  (benchmarks/traces.py: every text a request carries)

TARGET_TOKENS = 200_000
REPEATS = 7

CHINESE = (
    "请帮我检查一下这个服务的日志，最近两天出现了很多超时错误。"
    "我们的数据库连接池好像已经满了，用户反馈页面加载非常慢。"
    "根据知识库中的文档，建议先扩大连接池，然后观察错误率的变化。"
    "这个问题在上个版本中也出现过，当时的解决方法是重启缓存服务。"
)
TOOLS = tuple(
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name.replace('_', ' ')}: returns JSON results for the agent.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
                "required": ["query"],
            },
        },
    }
    for name in ("query_kb", "web_search", "read_file", "run_shell", "list_tickets", "update_ticket")
)


def _english_pool() -> list[str]:
    docs = [inspect.getdoc(obj) or "" for mod in (textwrap, json.decoder, email.message) for _, obj in inspect.getmembers(mod)]
    return [d for d in docs if len(d) > 200]


def _code_pool() -> list[str]:
    lines = "".join(inspect.getsource(mod) for mod in (textwrap, json.decoder, email.message)).splitlines(keepends=True)
    return ["".join(lines[i : i + 40]) for i in range(0, len(lines) - 40, 40)]


def _search_result(rng: random.Random, english: list[str]) -> str:
    results = [
        {
            "document_id": f"doc-{rng.randrange(10**6)}",
            "chunk_id": rng.randrange(10**4),
            "title": rng.choice(english)[:60],
            "url": f"https://kb.example.com/articles/{rng.randrange(10**5)}",
            "score": round(rng.random(), 4),
            "content": rng.choice(english)[:600] + (CHINESE if rng.random() < 0.2 else ""),
            "metadata": {"tenant": "acme", "indexed_at": "2026-11-30T03:21:00Z", "lang": "en"},
        }
        for _ in range(rng.randrange(3, 9))
    ]
    return json.dumps({"count": len(results), "results": results}, ensure_ascii=False, indent=1)


def build_envelope(seed: int = 7) -> tuple[Envelope, TokenMeter]:
    """A conversation of user turns, tool rounds with JSON results, code answers and Chinese turns."""
    rng = random.Random(seed)
    english, code = _english_pool(), _code_pool()
    meter = TokenMeter("cl100k_base")
    messages: list[Message] = []
    total, n = 0, 0
    while total < TARGET_TOKENS:
        turn = [user(rng.choice(english)[:400] if rng.random() < 0.8 else CHINESE, id=n)]
        for _ in range(rng.randrange(1, 4)):
            call = ToolCall(f"call_{n}_{len(turn)}", rng.choice(TOOLS)["function"]["name"], json.dumps({"query": rng.choice(english)[:80], "limit": 5}))
            turn += [assistant("", call, id=n), tool_result(call.id, _search_result(rng, english), name=call.name, id=n)]
        turn.append(assistant(rng.choice(english)[:500] + "\n\n```python\n" + rng.choice(code) + "```\n", id=n))
        messages += turn
        n += 1
        total = sum(meter.count_messages(messages))
    env = Envelope("You are a careful support agent. " + english[0], Surface(tuple(messages), summary=english[1]), TOOLS)
    return env, meter


def _reread(env: Envelope) -> Envelope:
    """The same envelope rebuilt from its wire form, as a store round trip would."""
    messages = tuple(Message.from_openai(json.loads(json.dumps(m.to_openai()))) for m in env.surface.messages)
    return Envelope(env.system_prompt, Surface(messages, env.surface.summary), env.tools)


def best(fn: Callable[[], object], setup: Callable[[], object] = lambda: None, repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        setup()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    env, meter = build_envelope()
    enc = meter._enc  # the very encoding the meter uses: the baseline is raw tiktoken on it
    texts = envelope_texts(env)
    meter.clear_cache()
    measurement = meter.measure(env)
    n_msgs = len(env.messages())

    raw = best(lambda: [len(enc.encode_ordinary(t)) for t in texts])
    cold = best(lambda: meter.measure(env), setup=meter.clear_cache)

    meter.measure(env)
    grown = iter(
        [  # a different new message each repetition, so each re-measure encodes exactly one message
            Envelope(env.system_prompt, Surface(env.surface.messages + (user(f"Follow-up {i}: did the retry fix it? 还有超时吗？"),), env.surface.summary), env.tools)
            for i in range(REPEATS)
        ]
    )
    warm = best(lambda: meter.measure(next(grown)))
    # the harness re-reads the surface from the store: equal content in new objects (strings re-hashed)
    reread = iter([_reread(env) for _ in range(REPEATS)])
    warm_reread = best(lambda: meter.measure(next(reread)))
    stats = meter.cache_stats()

    print(f"envelope: {measurement.total:,} tokens, {n_msgs} messages, {sum(map(len, texts)):,} chars")
    print("breakdown: " + ", ".join(f"{k} {v:,}" for k, v in measurement.breakdown.items()))
    print(f"cache after warm runs: {stats}")
    print()
    print(f"{'measurement':<38}{'time':>12}")
    print(f"{'raw tiktoken encode_ordinary (loop)':<38}{raw * 1e3:>10.2f} ms")
    print(f"{'cold measure (empty cache)':<38}{cold * 1e3:>10.2f} ms")
    print(f"{'warm re-measure (+1 message)':<38}{warm * 1e3:>10.3f} ms")
    print(f"{'warm, surface re-read (info only)':<38}{warm_reread * 1e3:>10.3f} ms")
    print()
    checks = [
        (f"raw/cold = {raw / cold:.2f} (target >= 0.8)", raw / cold >= 0.8),
        (f"warm = {warm * 1e3:.3f} ms (target < 1 ms)", warm < 1e-3),
        (f"cold/warm = {cold / warm:,.0f}x (target >= 100x)", cold / warm >= 100),
    ]
    for label, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {label}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
