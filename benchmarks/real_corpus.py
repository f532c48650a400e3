"""Manual compaction ("compact now") of real-shaped sessions and of the benchmark traces, one row each.

Real-shaped sessions are the importer fixtures under ``tests/fixtures/sessions/`` (Claude Code with a
sub-agent, Codex, OpenAI chat / responses, Anthropic, OpenHands v0 / v1, SWE-agent), a generated 2 MB
Claude Code session (``import_session.generate``) and generated SWE-agent trajectories of 20, 60 and 150
rounds (:func:`swe_agent_trajectory`: the classic ``.traj`` shape with a long instance template as the
request, and ``find_file`` / ``search_dir`` / ``open`` / pytest observations naming a few hundred to
a few thousand distinct absolute paths, as real SWE-agent runs do), imported through
the service (``Service.imports.import_file``: the parsers, the repairs and the one write door). Each imported
thread is made idle, its dangling calls closed (``Service.runs.close_dangling_calls``), and compacted under a
window small enough that it must compact: the envelope is twice the threshold (window = tokens / 1.6,
set as an override for the thread's exact provider and model). The traces are compacted whole and idle
under their benchmark window.

Per row: the result (status, reason, ``still_over_threshold`` and its note), tokens before → after
against the target, identifiers from tool outputs still visible (surface or summary), the current
request verbatim afterwards, results whose call is not before them on the surface (orphans) and calls
without a result (dangling), and summarizer calls.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import import_session
from engine.compaction.summarizers.protocol import contains_verbatim
from engine.core.errors import CannotCompact
from engine.core.messages import Envelope
from engine.core.specifics import expand_grouped, extract_identifiers
from engine.core.surface import build_surface, envelope_of
from engine.core.units import current_request
from engine.core.views import ManualResult
from engine.importers import detect_format
from engine.service import Service, open_service
from ours import MODEL, PROVIDER, CountingExtractive, summary_budget
from traces import IDENTIFIER, Trace, envelope_texts

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "sessions"


@dataclass
class CorpusRow:
    name: str
    kind: str  # the import format, or "trace"
    window: int
    status: str
    before: int
    after: int
    target: int
    threshold: int
    identifiers: int
    identifiers_kept: int
    request_kept: bool | None  # None: the session has no real request
    orphans: int
    dangling: int
    calls: int
    closed: int = 0
    note: str | None = None

    @property
    def kept_share(self) -> float:
        return self.identifiers_kept / self.identifiers if self.identifiers else math.nan


_SWE_WORDS = ("parse header column quoted reader writer dialect sniff encoding delimiter row field strict value "
              "buffer escape newline stream table schema").split()
_SWE_DIRS = ("utilities", "convert", "cleanup", "grep", "cli", "table")
SWE_ROUNDS = (20, 60, 150)


def swe_agent_trajectory(path: Path, rounds: int, *, seed: int = 3) -> None:
    """Write a SWE-agent classic trajectory of ``rounds`` rounds to ``path`` (seeded): the system
    prompt, the issue with the instance template's instructions as the first user message (about
    1,000 tokens, the request a compaction keeps verbatim), then rounds cycling ``find_file`` (12
    absolute paths), ``search_dir`` (15 paths with match counts), ``open`` (a 60-line window of a
    file) and a pytest run (20 test ids and one failure), each observation ending with SWE-agent's
    prompt lines. Most paths are seen once, as in real runs that explore a repository."""
    rng = random.Random(seed)

    def words(n: int) -> str:
        return " ".join(rng.choice(_SWE_WORDS) for _ in range(n))

    def module() -> str:
        return f"csvkit/{rng.choice(_SWE_DIRS)}/{rng.choice(_SWE_WORDS)}_{rng.randrange(500):03d}.py"

    prompt = "\n(Open file: n/a)\n(Current directory: /csvkit__csvkit)\nbash-$"
    history = [{"role": "system", "content": "SETTING: You are an autonomous programmer. " + words(300), "agent": "primary"},
               {"role": "user", "content": f"We're currently solving the following issue within our repository. Here's the issue text:\nISSUE:\n{words(150)}"
                                           f"\n\nINSTRUCTIONS:\n{words(850)}{prompt}", "agent": "primary"}]
    steps = []
    for r in range(rounds):
        kind = r % 4
        if kind == 0:
            action = f'find_file "{rng.choice(_SWE_WORDS)}"'
            observation = "Found 12 matches:\n" + "\n".join(f"/csvkit__csvkit/{module()}" for _ in range(12))
        elif kind == 1:
            action = f'search_dir "{rng.choice(_SWE_WORDS)}"'
            observation = "\n".join(f"/csvkit__csvkit/{module()} ({rng.randint(1, 9)} matches)" for _ in range(15))
        elif kind == 2:
            file = module()
            action = f"open {file}"
            observation = f"[File: /csvkit__csvkit/{file} (240 lines total)]\n" + "\n".join(f"{i + 1}:    {words(8)}" for i in range(60))
        else:
            action = "python -m pytest tests -x -q"
            observation = "\n".join(f"tests/test_{rng.choice(_SWE_WORDS)}_{rng.randrange(300):03d}.py::test_{rng.choice(_SWE_WORDS)} PASSED" for _ in range(20))
            observation += "\nFAILED tests/test_header.py::test_quoted - AssertionError: 3 != 4"
        thought = "Let me " + words(25)
        response = f"{thought}\n```\n{action}\n```"
        steps.append({"action": action, "observation": observation, "response": response, "thought": thought, "state": "{}"})
        history.append({"role": "assistant", "content": response, "thought": thought, "action": action, "agent": "primary"})
        history.append({"role": "user", "content": observation + prompt, "agent": "primary"})
    info = {"exit_status": "submitted", "submission": "", "model_stats": {"api_calls": rounds}}
    path.write_text(json.dumps({"environment": "swe_main", "trajectory": steps, "history": history, "info": info}), encoding="utf-8")


def sources() -> list[Path]:
    """One path per fixture session source: files a parser recognises (a sub-agent file belongs
    to its parent session and is read with it), and the OpenHands v1 conversation directories."""
    out: list[Path] = []
    for path in sorted(FIXTURES.rglob("*")):
        if path.is_dir():
            if (path / "base_state.json").exists():
                out.append(path)
            continue
        if "subagents" in path.parts or path.name.endswith(".meta.json") or any((p / "base_state.json").exists() for p in path.parents):
            continue
        try:
            if detect_format(path) is not None:
                out.append(path)
        except Exception:  # noqa: BLE001 - not a session file
            continue
    return out


def _wire(envelope: Envelope) -> tuple[int, int]:
    """(tool results not answering a call still open before them, calls left without a result)."""
    orphans = dangling = 0
    pending: set[str] = set()
    for m in envelope.messages():
        if m.role == "tool":
            if m.tool_call_id in pending:
                pending.discard(m.tool_call_id)
            else:
                orphans += 1
        elif m.role == "assistant":
            dangling += len(pending)
            pending = {c.id for c in m.tool_calls}
        elif pending and m.role == "user":
            dangling += len(pending)
            pending = set()
    return orphans, dangling + len(pending)


def _tool_identifiers(texts: Iterable[str], pattern: object = None) -> set[str]:
    found: set[str] = set()
    for t in texts:
        found.update(IDENTIFIER.findall(t) if pattern is not None else extract_identifiers(t))
    return found


def _visible(ids: set[str], text: str) -> set[str]:
    """The identifiers whose exact text ``text`` shows. A JSON id the extractor names
    ``doc_id=doc-9`` (its key and value) is shown by its JSON pair or, where the value names
    itself (``doc-9``), by the value found as an identifier (a summary lists it so); the
    ``key=value`` form alone never occurs in a JSON result, so a substring test missed them.
    A summary's grouped form (``dir/{a,b}.py``, a shell's brace expansion) is read as its
    members first (:func:`engine.core.specifics.expand_grouped`, the rule the engine reads it by)."""
    text = expand_grouped(text)
    found = set(extract_identifiers(text))
    out = set()
    for i in ids:
        key, sep, value = i.partition("=")
        if i in found or i in text or (sep and key.isidentifier() and value in found):
            out.add(i)
    return out


def _compact(svc: Service, key: str, *, name: str, kind: str, trace: Trace | None, closed: int) -> CorpusRow:
    messages = [s.message for s in svc.reads.messages_page(key, limit=1_000_000)]
    tool_texts = [m.content for m in messages if m.role == "tool"]
    ids = _tool_identifiers(tool_texts, IDENTIFIER if trace is not None else None)
    request = current_request(messages)
    m0 = svc.compactor.measure(svc.store.snapshot(key))
    try:
        r = svc.compaction.compact(key)
    except CannotCompact as exc:  # e.g. summary_rejected (not_smaller): nothing changed, say why
        r = ManualResult("rejected", exc.reason or exc.code, m0.tokens, m0.tokens, 0, None, 0, 1, still_over_threshold=m0.tokens >= m0.policy.threshold, note=exc.message)
    snap = svc.store.snapshot(key)
    env = envelope_of(snap, build_surface(snap))
    text = "\n".join(envelope_texts(env))
    visible = ids.intersection(IDENTIFIER.findall(expand_grouped(text))) if trace is not None else _visible(ids, text)
    orphans, dangling = _wire(env)
    calls = svc.compactor.summarizer.calls  # type: ignore[attr-defined]
    return CorpusRow(
        name, kind, m0.policy.context_window, f"{r.status}" + (f" ({r.reason})" if r.reason else "") + (" · still over" if r.still_over_threshold else ""),
        r.before_tokens, r.after_tokens, m0.policy.target_tokens, m0.policy.threshold, len(ids), len(visible),
        None if request is None else contains_verbatim(text, request.content), orphans, dangling, calls, closed, r.note,
    )


def session_rows(work: Path) -> list[CorpusRow]:
    """Every fixture session, a 2 MB Claude Code-shaped session (``import_session.generate``, the
    one the import benchmark times: hundreds of tool rounds naming paths) and the SWE-agent
    trajectories of :data:`SWE_ROUNDS` rounds (:func:`swe_agent_trajectory`), each imported and
    compacted by hand."""
    rows: list[CorpusRow] = []
    generated = work / "generated" / "claude-code-session-2mb.jsonl"
    generated.parent.mkdir(parents=True, exist_ok=True)
    import_session.generate(generated, 2.0)
    swe = [work / "generated" / f"swe-agent-{n}-rounds.traj" for n in SWE_ROUNDS]
    for n, p in zip(SWE_ROUNDS, swe):
        swe_agent_trajectory(p, n)
    imported: set[str] = set()  # a session several of its files lead to (a Cline task's three files, OpenCode's parts) is one row
    for i, src in enumerate([*sources(), generated, *swe]):
        counter = CountingExtractive()
        svc = open_service(f"sqlite:///{work / f'corpus-{i}.db'}", workdir=work / f"wd-corpus-{i}", summarizer=counter, policies={"context_window": 128_000}, create=True)
        try:
            try:
                reports = svc.imports.import_file(src)
            except Exception as exc:  # noqa: BLE001 - a fixture the importer refuses is a row too
                rows.append(CorpusRow(src.name, "?", 0, f"import failed: {exc}", 0, 0, 0, 0, 0, 0, None, 0, 0, 0))
                continue
            for rep in reports:
                if rep.thread in imported:
                    continue
                imported.add(rep.thread)
                info = svc.reads.thread(rep.thread)
                counter.calls = 0
                closed = svc.runs.close_dangling_calls(rep.thread)
                tokens = svc.compactor.measure(svc.store.snapshot(rep.thread)).tokens
                window = max(1024, math.ceil(tokens / 1.6))
                budget = {"summary_max_tokens": summary_budget(window)}
                if info.provider and info.model:  # an override beats the catalogue for that exact route
                    svc.steering.set_policy({"context_window": 128_000, "models": [{"provider": info.provider, "model": info.model, "context_window": window, **budget}]})
                else:  # an unrouted thread is measured against the configured (assumed) window
                    svc.steering.set_policy({"context_window": window, "default": budget})
                label = f"{src.relative_to(FIXTURES)}" if src.is_relative_to(FIXTURES) else (
                    f"generated {src.name} (benchmarks/real_corpus.py)" if src in swe else f"generated {src.name} (benchmarks/import_session.py)")
                name = label + (f" · {rep.thread.rsplit('/', 1)[-1]}" if rep.parent_thread else "")
                rows.append(_compact(svc, rep.thread, name=name, kind=rep.format, trace=None, closed=closed))
        finally:
            svc.close()
    return rows


def trace_rows(trace_list: Iterable[Trace], windows: dict[int, int], work: Path) -> list[CorpusRow]:
    rows: list[CorpusRow] = []
    for t in trace_list:
        window = windows[t.size]
        counter = CountingExtractive()
        svc = open_service(f"sqlite:///{work / f'corpus-{t.name}.db'}", workdir=work / f"wd-corpus-{t.name}", summarizer=counter,
                           policies={"context_window": window, "default": {"summary_max_tokens": summary_budget(window)}}, create=True)
        try:
            key = "trace"
            svc.runs.create_thread(key, title=t.name, system_prompt=t.system_prompt, tools=t.tools, provider=PROVIDER, model=MODEL)
            with svc.store.locked(key) as tx:
                tx.bulk_append(t.messages)
            closed = svc.runs.close_dangling_calls(key)
            rows.append(_compact(svc, key, name=t.name, kind="trace", trace=t, closed=closed))
        finally:
            svc.close()
    return rows


def render(rows: list[CorpusRow]) -> list[list[str]]:
    out = []
    for r in rows:
        share = "–" if not r.identifiers else f"{r.identifiers_kept}/{r.identifiers} ({100 * r.kept_share:.0f} %)"
        request = "–" if r.request_kept is None else ("yes" if r.request_kept else "no")
        reach = "≤ target" if r.after <= r.target else ("< threshold" if r.after < r.threshold else "over threshold")
        out.append([
            r.name, r.kind, f"{r.window:,}", r.status, f"{r.before:,} → {r.after:,} (target {r.target:,}; {reach})",
            share, request, f"{r.orphans} / {r.dangling}" + (f" ({r.closed} closed)" if r.closed else ""), str(r.calls),
        ])
    return out


HEADER = ["Session", "Source", "Window", "Result", "Tokens before → after", "Identifiers kept", "Request kept", "Orphans / dangling", "Calls"]


def table_text(found: list[CorpusRow], rows: list[list[str]]) -> str:
    """The markdown table, then the note of every row that has one (why it stayed over)."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    notes = [f"- **{r.name}**: {r.note}" for r in found if r.note]
    return "\n".join(lines) + ("\n\nWhy a row stayed over its threshold (the result's `note`):\n\n" + "\n".join(notes) if notes else "")


def preview_ids(trace_list: Iterable[Trace], *, preview_tokens: int = 600) -> tuple[int, int, int]:
    """(results, identifiers, identifiers visible) over every ``query_kb`` / ``web_search`` result of
    the traces, offloaded at the default preview budget exactly as pressure pruning does."""
    from engine.compaction.pruning import Pruned, prune_tool_result
    from engine.core.meter import default_meter
    from engine.core.workdir import Workdir

    count = default_meter().count_text
    results = total = shown = 0
    with tempfile.TemporaryDirectory(prefix="bench-previews-") as tmp:
        wd = Workdir(Path(tmp))
        for t in trace_list:
            for m in t.messages:
                if m.role != "tool" or m.name not in ("query_kb", "web_search") or count(m.content) <= preview_tokens:
                    continue  # a result no bigger than its preview is never pruned
                out = prune_tool_result(m, workdir=wd, count_tokens=count, limit_tokens=preview_tokens,
                                        preview_tokens=preview_tokens, saved_as="name")
                if not isinstance(out, Pruned):
                    continue
                ids = set(IDENTIFIER.findall(m.content))
                results += 1
                total += len(ids)
                shown += sum(1 for i in ids if i in out.preview)
    return results, total, shown


def targets_text(rows: list, r: dict, corpus: list[CorpusRow]) -> str:
    """The issue's targets against this run: one line each, met or not, with the figure."""
    def value(prefix: str, who: str = "ours") -> float | None:
        row = next((x for x in rows if x.metric.startswith(prefix)), None)
        return None if row is None else row.values.get(who)

    calls, lc_calls = value("Summarizer (model) calls"), value("Summarizer (model) calls", "langchain")
    over = value("Model steps sent over the context window")
    kept = value("Identifiers seen so far still visible right after each compaction")
    res, ids, shown = preview_ids(r["traces"])
    idle = [c for c in corpus if c.status.startswith(("completed", "no_op", "rejected"))]
    reached = [c for c in idle if c.after < c.threshold]
    said = [c for c in idle if c.after >= c.threshold and c.note]
    silent = [c for c in idle if c.after >= c.threshold and not c.note]
    fmt = lambda x: "n/a" if x is None or math.isnan(x) else f"{x:,.0f}"  # noqa: E731

    def line(target: str, figure: str, met: bool | None) -> str:
        return f"| {target} | {figure} | {'n/a' if met is None else ('met' if met else '**not met**')} |"

    out = ["| Target | This run | |", "|---|---|---|"]
    out.append(line("Summarizer calls ≤ LangChain's on the traces", f"{fmt(calls)} vs {fmt(lc_calls)}",
                    None if calls is None or lc_calls is None else calls <= lc_calls))
    out.append(line("0 model steps over the window", fmt(over), None if over is None else over == 0))
    per_trace = {name: reps["ours"].kept_after_compaction for name, reps in r.get("replays", {}).items() if reps["ours"].kept_after_compaction}
    lowest = min(per_trace, key=lambda n: statistics.mean(per_trace[n]), default=None)
    detail = "" if lowest is None else (
        f" over {sum(map(len, per_trace.values()))} compactions; lowest trace {lowest} {100 * statistics.mean(per_trace[lowest]):.1f} %"
    )
    out.append(line("≥ 90 % of the identifiers seen still visible right after each compaction (mean)",
                    "n/a" if kept is None else f"{kept:.1f} %{detail}", None if kept is None or math.isnan(kept) else kept >= 90))
    out.append(line("100 % of the ids of pruned query_kb / web_search results in their previews (default budget)",
                    f"{shown:,} of {ids:,} in {res:,} previews", ids > 0 and shown == ids if res else None))
    out.append(line("Compact now on an idle session reaches below the threshold, or says why",
                    f"{len(reached)} below, {len(said)} over with a note, {len(silent)} over silently (of {len(idle)})", not silent))
    requests = [c for c in corpus if c.request_kept is not None]
    out.append(line("Current request verbatim after compact now", f"{sum(1 for c in requests if c.request_kept)} of {len(requests)}",
                    all(c.request_kept for c in requests)))
    out.append(line("No orphan result or dangling call on any surface after compact now",
                    f"{sum(c.orphans for c in corpus)} orphans, {sum(c.dangling for c in corpus)} dangling", not any(c.orphans or c.dangling for c in corpus)))
    return "\n".join(out)


def run(trace_list: Iterable[Trace], windows: dict[int, int]) -> tuple[list[CorpusRow], list[list[str]]]:
    with tempfile.TemporaryDirectory(prefix="bench-corpus-") as tmp:
        work = Path(tmp)
        rows = session_rows(work) + trace_rows(trace_list, windows, work)
    return rows, render(rows)


if __name__ == "__main__":
    import sys

    sys.path[:0] = [str(Path(__file__).resolve().parent)]
    import traces
    from own_figures import WINDOWS

    sizes = [int(a) for a in sys.argv[1:]] or [10_000]
    found, table_rows = run([traces.generate(f, s) for s in sizes for f in traces.FAMILIES], WINDOWS)
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "|".join("---" for _ in HEADER) + "|")
    for row, r in zip(table_rows, found):
        print("| " + " | ".join(row) + " |")
        if r.note:
            print(f"|   note: {r.note} |")
