"""The demo database, built by running scripted sessions through the real harness.

Every thread is produced by :class:`engine.apps.harness.loop.AgentHarness` talking to the provider
simulator over a real loopback socket, with the offline extractive summarizer: the compaction
history, offloads and recovery events in the demo are what the engine really did. Content comes
from a seeded generator, so the same seed gives the same database (timestamps aside).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..compaction.summarizers.extractive import ExtractiveSummarizer
from ..core.errors import EngineError
from ..core.messages import Message
from ..core.meter import default_meter
from ..llm import ChatClient
from ..service import Service, data_dir, default_workdir, open_service
from ..store import migrate, normalize_url
from .harness.loop import AgentHarness, Tool, ToolRegistry, WaitForUser
from .harness.simulator import ProviderSimulator, Reply, SimRequest

PROVIDER = "sim"
MODEL = "sim-12k"
WINDOW = 12_000
DEMO_POLICY: dict[str, Any] = {
    "context_window": WINDOW,
    "models": [{"provider": PROVIDER, "model": MODEL, "context_window": WINDOW}],
}
SYSTEM_PROMPT = (
    "You are a careful research and engineering agent. Use the tools to gather facts, cite document "
    "ids and URLs, and answer concisely."
)

_WORDS = (
    "context window tokens summary boundary prune preview workdir generation latency throughput cache "
    "index shard replica query ranking retrieval embedding chunk document source evidence citation "
    "benchmark regression deployment rollback migration schema lock transaction commit isolation"
).split()
_ZH = (
    "上下文 压缩 摘要 边界 工具 结果 预览 检索 文档 来源 标题 链接 分数 线程 锁 事务 提交 回滚 迁移 "
    "模型 窗口 令牌 阈值 提示线 手动 自动 恢复 溢出 重试 生成 代数 会话 用户 请求 助手"
).split()


@dataclass(frozen=True)
class DemoReport:
    url: str
    threads: list[str]
    seconds: float


class _Gen:
    """Seeded content generator for tool outputs."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def words(self, n: int, zh: bool = False) -> str:
        vocab = _ZH if zh else _WORDS
        sep = "" if zh else " "
        return sep.join(self.rng.choice(vocab) for _ in range(n))

    def kb(self, query: str, n: int = 10, zh: bool = False) -> str:
        n = 16 if "rebalanc" in query else n
        results = []
        for i in range(n):
            doc = f"doc-{self.rng.randrange(1000, 9999)}"
            results.append(
                {
                    "doc_id": doc,
                    "chunk_id": f"{doc}#c{self.rng.randrange(1, 40)}",
                    "kb_id": "kb-engineering",
                    "title": self.words(6, zh).strip().capitalize(),
                    "source": "confluence" if i % 2 else "gdrive",
                    "score": round(0.95 - i * 0.03 - self.rng.random() * 0.01, 4),
                    "content": self.words(110, zh),
                    "_internal_path": f"/srv/kb/host{self.rng.randrange(1, 9):02d}/{doc}.bin",
                    "embedding": [round(self.rng.random(), 3) for _ in range(12)],
                }
            )
        return json.dumps({"query": query, "total": n * 7, "results": results}, ensure_ascii=False)

    def web(self, query: str, n: int = 8, zh: bool = False) -> str:
        results = []
        for i in range(n):
            site = self.rng.choice(["arxiv.org", "github.com", "docs.python.org", "sqlite.org", "postgresql.org"])
            results.append(
                {
                    "title": self.words(7, zh).strip().capitalize(),
                    "url": f"https://{site}/{self.words(2).replace(' ', '-')}/{self.rng.randrange(100, 999)}",
                    "site_name": site,
                    "published_at": f"2026-{self.rng.randrange(1, 12):02d}-{self.rng.randrange(1, 28):02d}",
                    "relevance_score": round(0.9 - i * 0.04, 3),
                    "snippet": self.words(120, zh),
                    "crawler_meta": {"fetch_node": f"crawler-{self.rng.randrange(1, 50)}", "raw_html_bytes": self.rng.randrange(10_000, 90_000)},
                }
            )
        return json.dumps({"query": query, "results": results}, ensure_ascii=False)

    def log(self, command: str, lines: int = 260) -> str:
        out = [f"$ {command}"]
        for i in range(lines):
            lvl = self.rng.choice(["INFO", "INFO", "INFO", "DEBUG", "WARN"])
            out.append(f"2026-11-30T10:{i // 60:02d}:{i % 60:02d}Z {lvl} worker-{self.rng.randrange(1, 8)} {self.words(9)}")
        out.append("FAILED tests/test_store.py::test_lock_waits - AssertionError: intake did not wait" if "pytest" in command else "exit code 0")
        return "\n".join(out)

    def source(self, path: str, lines: int = 60) -> str:
        body = [f"# {path}", "from __future__ import annotations", ""]
        for i in range(lines):
            body.append(f"def {self.rng.choice(_WORDS)}_{i}(value: int) -> int:\n    return value * {self.rng.randrange(2, 9)}  # {self.words(5)}")
        return "\n".join(body)


def _tools(gen: _Gen, *, zh: bool = False) -> ToolRegistry:
    def ask_user(args: dict[str, Any]) -> str:
        raise WaitForUser(str(args.get("question", "Please confirm.")))

    return ToolRegistry(
        [
            Tool("query_kb", lambda a: gen.kb(str(a.get("query", "")), zh=zh), "Search the internal knowledge base.",
                 {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
            Tool("web_search", lambda a: gen.web(str(a.get("query", "")), zh=zh), "Search the web.",
                 {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
            Tool("shell", lambda a: gen.log(str(a.get("command", ""))), "Run a shell command.",
                 {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
            Tool("read_file", lambda a: gen.source(str(a.get("path", ""))), "Read a file.",
                 {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
            Tool("ask_user", ask_user, "Ask the user a question and wait for the answer.",
                 {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}),
        ]
    )


def _calls(*calls: tuple[str, dict[str, Any]]) -> Reply:
    return Reply(tool_calls=tuple(calls))


def _sized_reply(total_tokens: int, filler: Callable[[int], str]) -> Callable[[SimRequest], Reply]:
    """A reply whose length puts the next envelope at ``total_tokens`` (meter-exact)."""

    def reply(req: SimRequest) -> Reply:
        meter = default_meter(MODEL)
        need = max(1, total_tokens - req.prompt_tokens)
        n = need
        text = filler(n)
        # shrink/grow the word count until the assistant message itself costs `need` tokens
        for _ in range(60):
            cost = meter.count_text(text) + 4
            if cost == need:
                break
            n = max(1, n + (need - cost))
            text = filler(n)
        return Reply(content=text)

    return reply


class _Builder:
    def __init__(self, svc: Service, sim: ProviderSimulator, provider: ChatClient, seed: int) -> None:
        self.svc = svc
        self.sim = sim
        self.provider = provider
        self.seed = seed

    def harness(self, gen: _Gen, zh: bool = False) -> AgentHarness:
        return AgentHarness(self.svc, self.provider, model=MODEL, provider_name=PROVIDER, tools=_tools(gen, zh=zh))

    def thread(self, key: str, title: str, agent: str) -> None:
        self.svc.runs.create_thread(key, title=title, agent=agent, provider=PROVIDER, model=MODEL, system_prompt=SYSTEM_PROMPT)

    async def turn(self, h: AgentHarness, key: str, text: str, replies: list[Any], *, window: int = WINDOW, notes: list[str] | None = None):
        if self.sim.pending:
            raise RuntimeError(f"demo script out of step: {self.sim.pending} replies left before {key!r}")
        self.sim.context_window = window
        self.sim.script(replies)
        result = await h.run(key, text, notes=notes)
        if self.sim.pending:
            raise RuntimeError(f"demo script out of step: {self.sim.pending} replies left after {key!r}")
        return result

    # -- scenarios ------------------------------------------------------------------------
    async def research(self) -> None:
        key = "research-retrieval-latency"
        self.thread(key, "Research: why did retrieval latency regress?", "researcher")
        gen = _Gen(self.seed + 1)
        h = self.harness(gen)
        topics = [
            ("What changed in the retrieval stack last week that could explain the p95 latency regression?",
             ["retrieval p95 latency regression", "index shard rebalance", "reranker deployment"]),
            ("Compare the reranker rollout timeline with the latency graphs and list the affected doc ids.",
             ["reranker rollout timeline", "latency dashboard shards", "cache hit ratio drop"]),
            ("Find external reports of similar regressions with cross-encoder rerankers.",
             ["cross-encoder reranker latency", "rerank batch size tail latency", "ann index recall latency tradeoff"]),
            ("Summarise the root cause with citations and propose a rollback plan.",
             ["rollback plan reranker", "canary analysis retrieval"]),
        ]
        for i, (question, queries) in enumerate(topics + topics):
            replies: list[Any] = []
            for j, q in enumerate(queries):
                tool = "web_search" if (i + j) % 3 == 2 else "query_kb"
                replies.append(_calls((tool, {"query": q})))
            replies.append(Reply(content=f"Findings for step {i + 1}: the evidence points at the reranker batch change; see doc ids above. ({gen.words(40)})"))
            await self.turn(h, key, question, replies)

    async def coding(self) -> None:
        key = "coding-lock-test-failure"
        self.thread(key, "Coding: fix the flaky lock test", "coder")
        gen = _Gen(self.seed + 2)
        h = self.harness(gen)
        await self.turn(h, key, "The CI job fails on test_lock_waits. Find out why and fix it.", [
            _calls(("shell", {"command": "pytest -x tests/test_store.py"})),
            _calls(("read_file", {"path": "engine/store/store.py"}), ("read_file", {"path": "tests/test_store.py"}), ("read_file", {"path": "engine/store/db.py"})),
            _calls(("shell", {"command": "git log -p -3 -- engine/store/db.py"})),
            Reply(content="The SQLite connection begins DEFERRED transactions, so a second writer does not wait. Fix: BEGIN IMMEDIATE for lock transactions."),
        ])
        await self.turn(h, key, "Apply the fix and run the whole suite.", [
            _calls(("shell", {"command": "sed -i 's/DEFERRED/IMMEDIATE/' engine/store/db.py"})),
            _calls(("shell", {"command": "pytest -q"}), ("shell", {"command": "pytest -q -m postgres"})),
            Reply(content="All tests pass on SQLite and PostgreSQL. The fix is in engine/store/db.py."),
        ])
        # a short last turn: the thread stays below the hint line, and its first turn lies outside
        # the retained tail, so "Compact now" has history to summarize
        await self.turn(h, key, "Add a changelog entry for the fix.", [
            Reply(content="Changelog: " + "SQLite lock transactions now begin IMMEDIATE, so a second writer waits for the first "
                  "instead of failing; intake and manual compaction on one thread are serialised on every backend. "
                  "Covered by test_lock_waits on SQLite and PostgreSQL; no schema change, no migration needed. "
                  "Operators upgrading from the previous release need to do nothing: existing databases keep working, "
                  "and the WAL journal mode is set once by `compaction migrate`. Reviewed with the store owners."),
        ])

    async def overflow_recovers(self) -> None:
        key = "overflow-recovers"
        self.thread(key, "Overflow: provider says too long, recovery prunes and retries", "researcher")
        gen = _Gen(self.seed + 3)
        h = self.harness(gen)
        # the provider's real window (6k) is smaller than the one configured for the model (12k):
        # the engine's pressure check does not fire, the provider rejects, recovery prunes and retries
        await self.turn(h, key, "Collect everything the knowledge base has on shard rebalancing.", [
            _calls(("query_kb", {"query": "shard rebalancing"}), ("query_kb", {"query": "rebalance throttling"})),
            _calls(("query_kb", {"query": "rebalance incidents"})),
            Reply(content="Shard rebalancing notes collected; see doc ids in the previews."),
        ], window=6_000)

    async def overflow_gives_up(self) -> None:
        key = "overflow-gives-up"
        self.sim.error_style = "deepseek"
        self.thread(key, "Overflow: nothing left to compact, the original error is reported", "researcher")
        gen = _Gen(self.seed + 4)
        h = self.harness(gen)
        huge = "Please review this incident timeline:\n" + gen.words(5200)
        await self.turn(h, key, huge, [], window=4_000)
        self.sim.error_style = "openai"

    async def busy_threads(self) -> None:
        gen = _Gen(self.seed + 5)
        # running: a run started and still going
        key = "busy-running"
        self.thread(key, "Busy: a run is in progress", "researcher")
        h = self.harness(gen)
        await self.turn(h, key, "Index the new design docs.", [_calls(("query_kb", {"query": "design docs"})), Reply(content="Indexed 12 design docs.")])
        self.svc.runs.append_message(key, Message("user", "Now re-index the runbooks too."))
        self.svc.runs.start_run(key)
        # waiting for the user: a tool asked a question
        key = "busy-waiting-for-user"
        self.thread(key, "Busy: waiting for the user's answer", "coder")
        await self.turn(h, key, "Delete the stale feature branches.", [
            _calls(("shell", {"command": "git branch --merged main"})),
            _calls(("ask_user", {"question": "Delete these 14 merged branches?"})),
        ])
        # queued: idle run history, one request waiting in the queue
        key = "busy-queued"
        self.thread(key, "Busy: a request is queued", "researcher")
        await self.turn(h, key, "Summarise yesterday's incidents.", [_calls(("query_kb", {"query": "incidents yesterday"})), Reply(content="Two incidents, both resolved.")])
        self.svc.runs.queue_request(key, "And the ones from the day before?")

    async def near_hint(self) -> None:
        key = "near-hint-line"
        self.thread(key, "Pressure just above the 85% hint line", "researcher")
        gen = _Gen(self.seed + 6)
        h = self.harness(gen)
        pol = self.svc.steps.policy_for(PROVIDER, MODEL)
        await self.turn(h, key, "Draft the quarterly retrieval report.", [
            _calls(("query_kb", {"query": "quarterly retrieval metrics"})),
            Reply(content="Draft outline ready: latency, recall, cost."),
        ])
        # the final answer is sized so the next turn's envelope sits at 86% of the threshold
        target = (pol.threshold * 86) // 100
        await self.turn(h, key, "Write the full report text.", [_sized_reply(target, lambda n: gen.words(n))])

    async def chinese(self) -> None:
        key = "zh-检索延迟分析"
        self.thread(key, "中文会话：检索延迟回退分析", "researcher")
        gen = _Gen(self.seed + 7)
        h = self.harness(gen, zh=True)
        for question, queries in [
            ("请分析上周检索服务 p95 延迟上升的原因，并给出相关文档编号。", ["检索 延迟 上升", "重排 模型 上线", "索引 分片 迁移"]),
            ("对比重排模型上线时间和延迟曲线，列出受影响的文档。", ["重排 上线 时间线", "延迟 曲线 分片"]),
            ("补充外部资料：其他团队遇到过类似的重排延迟问题吗？", ["重排 延迟 外部 案例", "交叉编码器 批大小 尾延迟", "向量 索引 召回 延迟 权衡"]),
            ("总结根因并给出回滚方案，附上引用。", ["回滚 方案 重排", "灰度 分析 检索"]),
        ]:
            replies: list[Any] = [_calls(("web_search" if k % 2 else "query_kb", {"query": q})) for k, q in enumerate(queries)]
            replies.append(Reply(content="结论：延迟上升与重排模型的批大小调整有关，详见上面的文档编号。" + gen.words(30, zh=True)))
            await self.turn(h, key, question, replies)


async def _build(svc: Service, seed: int) -> list[str]:
    with ProviderSimulator(context_window=WINDOW, model=MODEL) as sim:
        provider = ChatClient(sim.base_url, provider=PROVIDER, timeout=30.0)
        try:
            b = _Builder(svc, sim, provider, seed)
            for scenario in (b.research, b.coding, b.overflow_recovers, b.overflow_gives_up, b.busy_threads, b.near_hint, b.chinese):
                await scenario()
        finally:
            await provider.aclose()
    return [t.key for t in svc.reads.list_threads()]


def build_demo(url: str, *, seed: int = 7, force: bool = False, workdir: str | os.PathLike[str] | None = None) -> DemoReport:
    """Create the demo database at ``url`` (refusing to overwrite an existing one unless ``force``)."""
    started = time.perf_counter()
    u = normalize_url(url)
    wd = Path(workdir) if workdir else default_workdir(url)
    if u.get_backend_name() == "sqlite" and u.database:
        path = Path(u.database)
        if path.exists():
            if not force:
                raise EngineError(f"{path} already exists; use --force to rebuild it", code="exists")
            for suffix in ("", "-wal", "-shm"):
                Path(str(path) + suffix).unlink(missing_ok=True)
        shutil.rmtree(wd, ignore_errors=True)
    svc = open_service(url, workdir=wd, summarizer=ExtractiveSummarizer(), policies=DEMO_POLICY, create=True)
    try:
        if svc.reads.list_threads(limit=1):
            if not force:
                raise EngineError(f"{svc.url} already has threads; use --force to rebuild it", code="exists")
            raise_if_shared(svc)
        svc.steering.set_policy(DEMO_POLICY)
        threads = asyncio.run(_build(svc, seed))
        for key in threads:  # each thread measured and its figures stored, as an import leaves it: no "–" in the list
            svc.compaction.status(key)
    finally:
        svc.close()
    return DemoReport(url=url, threads=threads, seconds=time.perf_counter() - started)


def raise_if_shared(svc: Service) -> None:
    raise EngineError(
        f"{svc.url} already has threads; the demo only rebuilds SQLite files (use an empty database)", code="exists"
    )


def ensure_demo(url: str) -> bool:
    """Build the demo database if ``url`` is a SQLite file that does not exist yet. Returns True if built.

    The embedded demo database (the default one, in the user's data directory) is ours: one made by
    an older version is upgraded in place (Alembic, nothing lost), so an upgrade of the package
    never leaves the first window on a "schema outdated" banner. Any other database is only ever
    migrated on request (``compaction migrate``)."""
    u = normalize_url(url)
    if u.get_backend_name() != "sqlite" or not u.database:
        return False
    path = Path(u.database)
    if not path.exists():
        build_demo(url)
        return True
    if path.resolve() == (data_dir() / "demo.db").resolve():
        migrate(url)
    return False
