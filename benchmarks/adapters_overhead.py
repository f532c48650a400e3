"""The engine's overhead per model call in each framework adapter (issue 24): LangChain
``CompactionMiddleware``, OpenAI Agents SDK ``EngineSession`` + ``CompactionModel``, Pydantic AI
``EngineCompaction``, each in its framework's own real agent loop.

Run: ``.venv/bin/python benchmarks/adapters_overhead.py [--rounds 40] [--repeats 3]`` (``run_all.py
--only adapter_overhead`` runs it in a fresh process and renders :func:`render`). Prints one JSON
line per run and a last ``{"bench": "adapters_overhead", "summary": ...}``.

The same session for every framework: one user turn, ``rounds`` model calls that each call a tool
whose result is ~600 tokens, then a final answer; the framework's OpenAI-compatible model class
talks over a real socket to the loopback ``ProviderSimulator`` (scripted replies), run in a child
process as a real provider is (``--sim in-process`` runs it on a thread of this process instead: it
then shares the interpreter lock with the agent, and its work after each response — some of it
Python — runs whenever the agent next lets go of the lock, usually the adapter's first SQLite
statement, so the adapter's figure includes it). The policy's window is large, so no step
compacts: every call is the steady step (intake of the last tool result, pressure check, the
request record, its completion with the reply).

- **engine on**: the adapter on a SQLite file (WAL). Its time per model call is measured inside
  the loop, as ``benchmarks/adapters_langchain.py`` does: the adapter's hooks minus the model call
  they wrap (LangChain: ``wrap_model_call`` minus its handler; Agents SDK: ``CompactionModel``
  minus the inner model, plus the session's ``add_items`` / ``get_items`` since the previous call;
  Pydantic AI: ``prepare_model_request`` + ``after_model_request``). Also the SQL statements per
  call, the hook's own and every thread's (a write-behind step's one transaction runs on the step
  driver's writer while the model answers: :mod:`engine.step`), the time of those transactions, and
  a check that everything is in the store for the inspector (every
  message, every request recorded for the route the policy names and completed ``ok``, none pending).
- **engine off**: the same loop without the adapter; its model round trip per call (median) is the
  scale the overhead is read against, and the loop's wall time per call on vs. off is the
  cross-check (the difference includes the thread hops of the async adapters).

Medians over all calls of ``repeats`` runs (the first call of a run, which creates the thread and
starts the run, included).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

TAG = "adapters_overhead"
MODEL = "sim-model"
PROVIDER = "openai"
SYSTEM = "You are a support agent. Use the knowledge base when it helps."
FRAMEWORKS = ("langchain", "openai_agents", "pydantic_ai")
NAMES = {"langchain": "LangChain `create_agent` + `CompactionMiddleware`", "openai_agents": "OpenAI Agents SDK `Runner.run` + `EngineSession` / `CompactionModel`",
         "pydantic_ai": "Pydantic AI `Agent.run` + `EngineCompaction`"}
TARGET_MS = 1.5


def result_of(q: str) -> str:
    """A tool result of ~600 tokens."""
    return f"{q}: " + " ".join(f"row{i} value{i * 7} lorem ipsum dolor" for i in range(100))


def script(rounds: int) -> list[Any]:
    from engine.apps.harness.simulator import Reply

    return [Reply(content=f"Step {i}: looking it up.", tool_calls=(("lookup", {"q": f"topic {i}"}),)) for i in range(rounds)] + [Reply(content="All topics are covered.")]


def available(framework: str) -> str | None:
    mods = {"langchain": ("langchain.agents", "langchain_openai", "langgraph.checkpoint.memory"), "openai_agents": ("agents",), "pydantic_ai": ("pydantic_ai",)}[framework]
    extra = {"langchain": "langchain", "openai_agents": "openai-agents", "pydantic_ai": "pydantic-ai"}[framework]
    for m in mods:
        try:
            __import__(m)
        except ImportError as exc:
            return f"{exc.name or m} is not installed: .venv/bin/pip install -e '.[{extra}]'"
    return None


class Probe:
    """Per model call: the adapter's time and the SQL statements it ran; the model calls' own time."""

    def __init__(self) -> None:
        self.adapter: list[float] = []
        self.cpu: list[float] = []  # the process's CPU time in the same windows (robust to a loaded machine)
        self.model: list[float] = []
        self.statements: list[int] = []
        self.pending = 0.0  # adapter time outside a call (a session's add/get) counted with the next call
        self.pending_cpu = 0.0
        self.pending_statements = 0
        self.counting = False
        self.count_now = 0
        self.all_statements = 0  # on any thread (the step driver's writer runs a write-behind step's transaction)
        self.behind: list[float] = []  # each write-behind transaction's time on the writer thread

    def listen(self, engine: Any) -> None:
        from sqlalchemy import event

        from engine.step import WRITER_THREAD

        def count(*_: Any) -> None:
            self.all_statements += 1
            if self.counting and threading.current_thread().name != WRITER_THREAD:  # the hook's (and its worker threads')
                self.count_now += 1

        event.listen(engine, "before_cursor_execute", count)

    def time_writes(self) -> Callable[[], None]:
        """Time each write-behind transaction (:meth:`engine.step.StepDriver._run_job`, on the
        writer thread while the model answers) until the returned function undoes it."""
        from engine.step import StepDriver

        inner = StepDriver._run_job

        def timed(driver: Any, job: Any) -> None:
            t = time.perf_counter()
            try:
                inner(driver, job)
            finally:
                self.behind.append(time.perf_counter() - t)

        StepDriver._run_job = timed  # type: ignore[method-assign]

        def undo() -> None:
            StepDriver._run_job = inner  # type: ignore[method-assign]

        return undo

    def outside(self, seconds: float, statements: int, cpu: float) -> None:
        self.pending += seconds
        self.pending_cpu += cpu
        self.pending_statements += statements

    def call(self, seconds: float, statements: int, cpu: float) -> None:
        self.adapter.append(seconds + self.pending)
        self.cpu.append(cpu + self.pending_cpu)
        self.statements.append(statements + self.pending_statements)
        self.pending, self.pending_cpu, self.pending_statements = 0.0, 0.0, 0


class Timer:
    """Adapter time: ``with timer.adapter():`` around a hook; ``with timer.model():`` around the
    model call inside it (subtracted, not counted as the adapter's statements)."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.inside = self.inside_cpu = self.cpu0 = self.model_cpu = 0.0
        self.last_model = 0.0  # when a model call began (hooks that do not wrap it)

    def start(self) -> tuple[float, int]:
        self.probe.counting, self.probe.count_now, self.inside, self.inside_cpu = True, 0, 0.0, 0.0
        self.cpu0 = time.process_time()
        return time.perf_counter(), 0

    def stop(self, t0: float) -> tuple[float, int, float]:
        self.probe.counting = False
        return time.perf_counter() - t0 - self.inside, self.probe.count_now, time.process_time() - self.cpu0 - self.inside_cpu

    def model_started(self) -> float:
        self.probe.counting = False
        self.model_cpu = time.process_time()
        return time.perf_counter()

    def model_ended(self, t: float) -> None:
        dt = time.perf_counter() - t
        self.inside += dt
        self.inside_cpu += time.process_time() - self.model_cpu
        self.probe.model.append(dt)
        self.probe.counting = True


# -- the three loops -----------------------------------------------------------------------------------
def run_langchain(sim: Any, svc: Any, key: str, probe: Probe) -> None:
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver

    @tool
    def lookup(q: str) -> str:
        """Look something up in the knowledge base."""
        return result_of(q)

    middleware: list[Any] = []
    if svc is not None:
        from engine.adapters.langchain import CompactionMiddleware

        timer = Timer(probe)

        class Timed(CompactionMiddleware):
            def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
                def timed(req: Any) -> Any:
                    t = timer.model_started()
                    try:
                        return handler(req)
                    finally:
                        timer.model_ended(t)

                t0, _ = timer.start()
                try:
                    return super().wrap_model_call(request, timed)
                finally:
                    probe.call(*timer.stop(t0))

        middleware = [Timed(service=svc, thread=key, title="benchmark: LangChain adapter overhead")]
    else:
        from langchain.agents.middleware import AgentMiddleware

        class Off(AgentMiddleware):
            def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
                t = time.perf_counter()
                try:
                    return handler(request)
                finally:
                    probe.model.append(time.perf_counter() - t)

        middleware = [Off()]
    model = ChatOpenAI(model=MODEL, base_url=sim.base_url, api_key="sim-key", max_retries=0, timeout=60)
    agent = create_agent(model, [lookup], system_prompt=SYSTEM, middleware=middleware, checkpointer=InMemorySaver())
    agent.invoke({"messages": [HumanMessage("Cover every topic in the knowledge base.")]}, {"configurable": {"thread_id": key}, "recursion_limit": 10_000})


def run_openai_agents(sim: Any, svc: Any, key: str, probe: Probe) -> None:
    import openai
    from agents import Agent, Model, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)

    @function_tool
    def lookup(q: str) -> str:
        """Look something up in the knowledge base."""
        return result_of(q)

    timer = Timer(probe)
    client = openai.AsyncOpenAI(base_url=sim.base_url, api_key="sim-key", max_retries=0, timeout=60)
    inner = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)

    class TimedInner(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            t = timer.model_started()
            try:
                return await inner.get_response(*args, **kwargs)
            finally:
                timer.model_ended(t)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            return inner.stream_response(*args, **kwargs)

    async def go() -> None:
        if svc is None:
            await Runner.run(Agent(name="support", instructions=SYSTEM, tools=[lookup], model=TimedInner()), "Cover every topic in the knowledge base.", max_turns=10_000)
            return
        from engine.adapters.openai_agents import CompactionModel, EngineSession

        class TimedSession(EngineSession):
            async def add_items(self, items: list[Any]) -> None:
                t0, _ = timer.start()
                try:
                    await super().add_items(items)
                finally:
                    probe.outside(*timer.stop(t0))

            async def get_items(self, limit: int | None = None) -> list[Any]:
                t0, _ = timer.start()
                try:
                    return await super().get_items(limit)
                finally:
                    probe.outside(*timer.stop(t0))

        class TimedModel(CompactionModel):
            async def get_response(self, *args: Any, **kwargs: Any) -> Any:
                t0, _ = timer.start()
                try:
                    return await super().get_response(*args, **kwargs)
                finally:
                    probe.call(*timer.stop(t0))

        session = TimedSession(key, service=svc, title="benchmark: Agents SDK adapter overhead")
        # (the timing wrapper hides the inner model's name: given, so the route is (openai, sim-model) as a user's is)
        agent = Agent(name="support", instructions=SYSTEM, tools=[lookup], model=TimedModel(TimedInner(), session, model_name=MODEL))
        await Runner.run(agent, "Cover every topic in the knowledge base.", session=session, max_turns=10_000)

    asyncio.run(go())


def run_pydantic_ai(sim: Any, svc: Any, key: str, probe: Probe) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    timer = Timer(probe)
    capabilities: list[Any] = []
    if svc is not None:
        from engine.adapters.pydantic_ai import EngineCompaction

        class TimedCompaction(EngineCompaction):
            async def prepare_model_request(self, ctx: Any, request_context: Any) -> Any:
                t0, _ = timer.start()
                try:
                    return await super().prepare_model_request(ctx, request_context)
                finally:
                    probe.outside(*timer.stop(t0))
                    timer.last_model = time.perf_counter()

            async def after_model_request(self, ctx: Any, *, request_context: Any, response: Any) -> Any:
                probe.model.append(time.perf_counter() - timer.last_model)
                t0, _ = timer.start()
                try:
                    return await super().after_model_request(ctx, request_context=request_context, response=response)
                finally:
                    probe.call(*timer.stop(t0))

        capabilities = [TimedCompaction(service=svc, thread=key, title="benchmark: Pydantic AI adapter overhead")]
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=sim.base_url, api_key="sim-key"))
    agent = Agent(model, instructions=SYSTEM, capabilities=capabilities, retries=0)
    if svc is None:
        from pydantic_ai.capabilities import AbstractCapability

        class Off(AbstractCapability[Any]):
            async def prepare_model_request(self, ctx: Any, request_context: Any) -> Any:
                timer.last_model = time.perf_counter()
                return request_context

            async def after_model_request(self, ctx: Any, *, request_context: Any, response: Any) -> Any:
                probe.model.append(time.perf_counter() - timer.last_model)
                return response

        agent = Agent(model, instructions=SYSTEM, capabilities=[Off()], retries=0)

    @agent.tool_plain
    def lookup(q: str) -> str:
        """Look something up in the knowledge base."""
        return result_of(q)

    asyncio.run(agent.run("Cover every topic in the knowledge base."))


LOOPS = {"langchain": run_langchain, "openai_agents": run_openai_agents, "pydantic_ai": run_pydantic_ai}


# -- the simulator ------------------------------------------------------------------------------------
class ChildSimulator:
    """The loopback simulator scripted for ``rounds`` in a child process (this script with
    ``--serve ROUNDS``): ``base_url``, and ``ok_calls()``, the requests it answered ``ok``."""

    def __init__(self, rounds: int) -> None:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve", str(rounds)], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().strip()
        if not self.base_url:
            self.close()
            raise RuntimeError("the simulator process did not start")

    def ok_calls(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("count\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> "ChildSimulator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(rounds: int) -> int:
    """``--serve ROUNDS``: the simulator scripted for ``rounds``; prints its URL, then answers each
    ``count`` line on stdin with the number of requests answered ``ok``, until stdin closes."""
    from engine.apps.harness.simulator import ProviderSimulator

    with ProviderSimulator(context_window=10**9, model=MODEL) as sim:
        sim.script(script(rounds))
        print(sim.base_url, flush=True)
        for line in sys.stdin:
            if line.strip() == "count":
                print(len([r for r in sim.requests if r.outcome == "ok"]), flush=True)
    return 0


class ThreadSimulator:
    """The simulator on a thread of this process (``--sim in-process``), as :class:`ChildSimulator`."""

    def __init__(self, rounds: int) -> None:
        from engine.apps.harness.simulator import ProviderSimulator

        self.sim = ProviderSimulator(context_window=10**9, model=MODEL)
        self.sim.start()
        self.sim.script(script(rounds))
        self.base_url = self.sim.base_url

    def ok_calls(self) -> int:
        return len([r for r in self.sim.requests if r.outcome == "ok"])

    def __enter__(self) -> "ThreadSimulator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.sim.close()


# -- one run -------------------------------------------------------------------------------------------
def stored(svc: Any, key: str) -> dict[str, int]:
    """What the inspector reads of the thread, counted straight from the tables."""
    from sqlalchemy import text

    with svc.store.engine.connect() as conn:
        cid = conn.execute(text("SELECT id FROM conversations WHERE thread_key = :k"), {"k": key}).scalar_one()

        def one(sql: str) -> int:
            return int(conn.execute(text(sql), {"c": cid}).scalar_one())

        return {
            "messages": one("SELECT count(*) FROM messages WHERE conversation_id = :c"),
            "requests": one("SELECT count(*) FROM model_requests WHERE conversation_id = :c"),
            "requests_ok": one("SELECT count(*) FROM model_requests WHERE conversation_id = :c AND outcome = 'ok' AND reported_prompt_tokens IS NOT NULL"),
            "requests_routed": int(conn.execute(text("SELECT count(*) FROM model_requests WHERE conversation_id = :c AND provider = :p AND model = :m"),
                                                {"c": cid, "p": PROVIDER, "m": MODEL}).scalar_one()),  # under the benchmark's policy
            "requests_pending": one("SELECT count(*) FROM model_requests WHERE conversation_id = :c AND outcome = 'pending'"),
            "runs_active": one("SELECT count(*) FROM runs WHERE conversation_id = :c AND status IN ('running', 'waiting_for_user')"),
        }


def run(framework: str, engine_on: bool, rounds: int, root: Path, index: int, *, sim_in_process: bool = False) -> dict[str, Any]:
    from engine.service import open_service

    probe = Probe()
    key = f"{framework}-{'on' if engine_on else 'off'}-{index}"
    svc = None
    if engine_on:
        svc = open_service(f"sqlite:///{root / (key + '.db')}", workdir=root / f"wd-{key}", create=True,
                           policies={"models": [{"provider": PROVIDER, "model": MODEL, "context_window": 1_000_000}]})
        probe.listen(svc.store.engine)
    undo = probe.time_writes() if engine_on else (lambda: None)
    try:
        with ThreadSimulator(rounds) if sim_in_process else ChildSimulator(rounds) as sim:
            t0 = time.perf_counter()
            LOOPS[framework](sim, svc, key, probe)
            seconds = time.perf_counter() - t0
            calls = sim.ok_calls()
        held = stored(svc, key) if svc is not None else None
    finally:
        undo()
        if svc is not None:
            svc.close()
    if engine_on and len(probe.adapter) != calls:
        raise RuntimeError(f"{framework}: {len(probe.adapter)} timed calls for {calls} model requests")
    return {
        "bench": TAG, "framework": framework, "engine": "on" if engine_on else "off", "rounds": rounds, "model_calls": calls,
        "simulator": "thread" if sim_in_process else "process",
        "adapter_ms": [x * 1e3 for x in probe.adapter], "cpu_ms": [x * 1e3 for x in probe.cpu], "model_ms": [x * 1e3 for x in probe.model],
        "statements": probe.statements, "statements_per_call": probe.all_statements / max(calls, 1),
        "behind_ms": [x * 1e3 for x in probe.behind], "wall_per_call_ms": seconds * 1e3 / max(calls, 1), "stored": held,
        "complete": held is None or (held["requests"] == calls == held["requests_ok"] == held["requests_routed"] and held["requests_pending"] == 0
                                     and held["messages"] == 2 * rounds + 2 and held["runs_active"] == 0),
    }


def summarize(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fw in FRAMEWORKS:
        on = [r for r in results if r["framework"] == fw and r["engine"] == "on"]
        off = [r for r in results if r["framework"] == fw and r["engine"] == "off"]
        if not on:
            continue
        adapter = [x for r in on for x in r["adapter_ms"]]
        out[fw] = {
            "runs": len(on), "calls": sum(r["model_calls"] for r in on),
            "overhead_median_ms": statistics.median(adapter), "cpu_median_ms": statistics.median(x for r in on for x in r["cpu_ms"]), "overhead_p90_ms": statistics.quantiles(adapter, n=10)[-1] if len(adapter) > 1 else adapter[0],
            "statements_median": statistics.median(x for r in on for x in r["statements"]),
            "statements_per_call": statistics.median(r["statements_per_call"] for r in on),
            "behind_steps": sum(len(r["behind_ms"]) for r in on),
            "behind_median_ms": statistics.median(x for r in on for x in r["behind_ms"]) if any(r["behind_ms"] for r in on) else None,
            "model_median_ms_off": statistics.median(x for r in off for x in r["model_ms"]) if off else None,
            "wall_per_call_ms_on": statistics.median(r["wall_per_call_ms"] for r in on),
            "wall_per_call_ms_off": statistics.median(r["wall_per_call_ms"] for r in off) if off else None,
            "complete": all(r["complete"] for r in on),
        }
    return out


def render(summary: dict[str, Any], rounds: int, load: str = "", *, simulator: str = "process") -> str:
    head = ["Adapter (real agent loop, loopback simulator over a socket)", "Overhead per model call, median (p90)", "Its CPU time, median", "Target",
            "SQL statements per call: in the hook (median) / in all", "Write-behind steps: how many, their transaction (median)",
            "Model round trip, engine off (median)", "Loop wall per call, engine on / off", "Everything persisted"]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for fw, s in summary.items():
        met = "met" if s["overhead_median_ms"] < TARGET_MS else "**not met**"
        off = "–" if s["model_median_ms_off"] is None else f"{s['model_median_ms_off']:.2f} ms"
        wall_off = "–" if s["wall_per_call_ms_off"] is None else f"{s['wall_per_call_ms_off']:.2f}"
        behind = f"{s['behind_steps']} of {s['calls']}, {s['behind_median_ms']:.2f} ms" if s.get("behind_median_ms") is not None else f"0 of {s['calls']}"
        out.append(f"| {NAMES[fw]} | {s['overhead_median_ms']:.2f} ms ({s['overhead_p90_ms']:.2f}) | {s['cpu_median_ms']:.2f} ms | < {TARGET_MS} ms: {met} | "
                   f"{s['statements_median']:g} / {s['statements_per_call']:.1f} | {behind} | {off} | "
                   f"{s['wall_per_call_ms_on']:.2f} / {wall_off} ms | {'yes' if s['complete'] else '**no**'} ({s['calls']} calls) |")
    where = ("in a child process, as a provider is" if simulator == "process" else
             "on a thread of the agent's process (its work after each response shares the interpreter lock and lands in the adapter's time)")
    note = (f"\n\nSQLite file in WAL mode, `synchronous=NORMAL`; one session of {rounds} tool rounds per run, no step compacts (the steady step); "
            f"the simulator {where}. "
            "The overhead is the adapter's own time inside the loop (its hooks minus the model call they wrap; the Agents SDK's session reads and writes "
            "included); its CPU time is the process's in the same windows (what a loaded machine does not inflate). A write-behind step (`engine.step`) "
            "is decided in the hook without the store (the thread's last exact count plus an upper bound of the new messages stays below the threshold) and "
            "its one transaction (intake, pressure check, request record, the previous reply) runs on the step driver's writer thread while the model "
            "answers: its time is shown apart (wall time on that thread, which shares the interpreter lock with the framework's threads), and is in the loop's wall "
            "time, not in the hook's; a step whose previous transaction is still being written waits for it (what the p90 shows); statements \"in all\" counts every thread's, per model call. "
            "\"Everything persisted\": every message, every request recorded for the route `(openai, sim-model)` (so under the benchmark's policy) and completed `ok` with the provider's usage, no run left active.")
    return "\n".join(out) + note + (f" Machine load while measuring: {load}." if load else "")


def bench(rounds: int, repeats: int, frameworks: Sequence[str], emit: Callable[[dict[str, Any]], None], *,
          sim_in_process: bool = False) -> list[dict[str, Any]]:
    out = []
    with tempfile.TemporaryDirectory(prefix="bench-adapters-") as tmp:
        for i in range(repeats):
            for fw in frameworks:
                for on in (False, True):
                    r = run(fw, on, rounds, Path(tmp), i, sim_in_process=sim_in_process)
                    emit({k: v for k, v in r.items() if k not in ("adapter_ms", "cpu_ms", "model_ms", "statements", "behind_ms")}
                         | {"adapter_median_ms": statistics.median(r["adapter_ms"]) if r["adapter_ms"] else None,
                            "cpu_median_ms": statistics.median(r["cpu_ms"]) if r["cpu_ms"] else None,
                            "statements_median": statistics.median(r["statements"]) if r["statements"] else None,
                            "behind_median_ms": statistics.median(r["behind_ms"]) if r["behind_ms"] else None})
                    out.append(r)
    return out


def section(rounds: int = 40, repeats: int = 3, *, timeout: float = 1200) -> str:
    """For ``run_all.py``: this script in a fresh process, its table (or why it did not run)."""
    args = [sys.executable, str(Path(__file__).resolve()), "--rounds", str(rounds), "--repeats", str(repeats)]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    summary = next((x for x in lines if "summary" in x), None)
    if proc.returncode != 0 or summary is None:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:]) or f"exit {proc.returncode}"
        return f"Not measured: {tail}"
    text = render(summary["summary"], rounds, summary.get("load", ""), simulator=summary.get("simulator", "process"))
    if summary.get("skipped"):
        text += "\n\nNot run: " + "; ".join(summary["skipped"])
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    ap.add_argument("--sim", choices=("process", "in-process"), default="process",
                    help="the simulator in a child process (as a provider is), or on a thread of this one (shares the interpreter lock)")
    ap.add_argument("--serve", type=int, metavar="ROUNDS", help=argparse.SUPPRESS)  # the child process of --sim process
    args = ap.parse_args(argv)
    if args.serve is not None:
        return serve(args.serve)
    wanted = [f for f in args.frameworks.split(",") if f]
    skipped = [f"{f}: {why}" for f in wanted if (why := available(f))]
    ready = [f for f in wanted if not available(f)]
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1/5/15-min load average, 2 cores, before the runs)"
    in_process = args.sim == "in-process"
    results = bench(args.rounds, args.repeats, ready, lambda r: print(json.dumps(r), flush=True), sim_in_process=in_process)
    summary = summarize(results)
    print(json.dumps({"bench": TAG, "summary": summary, "skipped": skipped, "load": load, "simulator": args.sim}))
    print(render(summary, args.rounds, load, simulator=args.sim), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
