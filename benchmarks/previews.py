"""Benchmark of tool-result previews (issue 25): what a pruned list-shaped result keeps, whatever the
tool is called, and what a preview costs, before and after previews read the content.

Run: ``.venv/bin/python benchmarks/previews.py [--quick]`` (prints the markdown section).
"Before" is the code of commit 97be371 (``engine/core/previews.py`` of that commit, loaded from git into
a module of its own); "after" is ``engine.core.previews`` as it is now. Both build the replacement the
compactor writes (``build_replacement``, the saved file named in the Workdir as the compactor names
it, ``<tool>-<sha256>.txt``) at the default preview budget (``CompactionPolicy().preview_tokens``).

Rows:

(a) ids, URLs and titles kept, of JSON lists of 5, 10, 20, 40 search results (``id``, ``url``,
    ``title``, ``score``, ~300 words of content each, seeded), under five tool names
    (``query_kb``, ``search_docs``, ``mcp__kb__search``, ``WebSearch``, ``my_tool``).
(b) preview tokens per pruned result, before vs after, at the same identifiers kept: for each list
    and tool, the old replacement at the default budget, and the smallest new one (budget searched
    to the token) that keeps at least as many ids and URLs; and the replacements at the default
    budget themselves (content fills at most 70 % of it once every id, URL and title is in).
(c) the 160-token knowledge-base case: one result with ``doc_id``, ``chunk_id``, ``file_id``,
    ``kb_id`` and the source document name (``source``): which of them the preview keeps (its body
    at 160 tokens, and the whole replacement, frame included, at 160).
(d) a 180-token budget and a 12-result web search: how many URLs the replacement keeps.

``rows(quick)`` returns the measured rows; ``section(quick)`` the markdown section
``benchmarks/run_all.py`` can register in its ``EXTRA``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import random
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.core import previews as new_previews  # noqa: E402
from engine.core.meter import default_meter  # noqa: E402
from engine.core.policy import CompactionPolicy  # noqa: E402

BEFORE_COMMIT = "97be371"
#: where the engine's modules of that commit live now
MOVED_TO = {name: pkg for pkg, names in {
    "core": ("checks", "config", "errors", "events", "figures", "messages", "meter", "model_windows", "policy", "previews",
             "specifics", "surface", "units", "views", "workdir"),
    "compaction": ("compactor", "plan", "pruning", "replay", "summarizers"),
    "apps": ("cli", "demo", "harness"),
}.items() for name in names}
TOOLS = ("query_kb", "search_docs", "mcp__kb__search", "WebSearch", "my_tool")
SIZES = (5, 10, 20, 40)
count = default_meter().count_text


def old_previews() -> ModuleType:
    """``engine/core/previews.py`` of :data:`BEFORE_COMMIT` as a module of its own."""
    source = subprocess.run(["git", "show", f"{BEFORE_COMMIT}:engine/previews.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    # the engine's modules have moved since (engine/core, engine/compaction, engine/apps): its imports follow them
    source = re.sub(r"\bengine\.(\w+)", lambda m: f"engine.{MOVED_TO.get(m.group(1), '')}{'.' if m.group(1) in MOVED_TO else ''}{m.group(1)}", source)
    path = Path(tempfile.mkdtemp(prefix="previews-before-")) / "previews_before.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("previews_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def search_results(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    words = ("replica lag alert standby promote failover primary connection string service discovery writes "
             "timeline archive recovery checkpoint vacuum index bloat").split()
    out = []
    for _ in range(n):
        doc = f"doc-{rng.randint(1000, 9999)}"
        out.append({
            "id": doc,
            "url": f"https://kb.example.com/spaces/SRE/pages/{rng.randint(10**6, 10**7)}/{doc}",
            "title": " ".join(rng.choice(words) for _ in range(rng.randint(3, 6))).title(),
            "score": round(rng.uniform(0.3, 0.99), 3),
            "content": " ".join(rng.choice(words) for _ in range(300)),
        })
    return out


def _present(value: str, text: str) -> bool:
    """``value`` shown as itself (not as the start of a longer id or URL)."""
    return re.search(rf"(?<![\w/.-]){re.escape(value)}(?![\w/-])", text) is not None


def kept(results: list[dict[str, Any]], text: str) -> tuple[int, int, int]:
    return (sum(_present(r["id"], text) for r in results), sum(_present(r["url"], text) for r in results),
            sum(r["title"] in text for r in results))


def saved_name(module: ModuleType, tool: str, sha: str) -> str:
    """The saved file as the compactor's frame names it: ``<tool>-<sha256>.txt`` before, the tool and
    the hash's first ``SHORT_HASH`` hex digits since the frame shows it in short."""
    short = getattr(module, "SHORT_HASH", None)
    return f"{tool}-{sha[:short]}…" if short else f"{tool}-{sha}.txt"


def replacement(module: ModuleType, tool: str, content: str, budget: int) -> str:
    sha = hashlib.sha256(content.encode()).hexdigest()
    fn: Callable[..., str] = module.build_replacement
    return fn(tool, content, sha256=sha, path=saved_name(module, tool, sha), original_tokens=count(content),
              budget_tokens=budget, count_tokens=count)


@dataclass(frozen=True)
class Row:
    part: str
    case: str
    before: str
    after: str
    detail: str = ""


def rows(quick: bool = False) -> list[Row]:
    old = old_previews()
    budget = CompactionPolicy().preview_tokens
    sizes = SIZES if not quick else (5, 20, 40)
    out: list[Row] = []
    # (a) and (b)
    savings: list[float] = []
    saving_tools: list[str] = []
    for n in sizes:
        results = search_results(n, seed=n)
        content = json.dumps({"query": "how do I fail over the primary", "results": results})
        per_tool_before, per_tool_after = [], []
        for tool in TOOLS:
            before_text = replacement(old, tool, content, budget)
            after_text = replacement(new_previews, tool, content, budget)
            kb, ka = kept(results, before_text), kept(results, after_text)
            per_tool_before.append(kb)
            per_tool_after.append(ka)
            # (b): the smallest new replacement keeping as many ids and URLs as the old one did
            same = None

            def keeps_as_many(b: int) -> str | None:
                try:
                    text = replacement(new_previews, tool, content, b)
                except new_previews.PreviewBudgetError:
                    return None
                k = kept(results, text)
                return text if k[0] >= kb[0] and k[1] >= kb[1] else None

            for b in range(60, budget + 1, 10):  # coarse, then token by token below the first that keeps as many
                if keeps_as_many(b) is not None:
                    for fine in range(max(60, b - 9), b + 1):
                        same = keeps_as_many(fine)
                        if same is not None:
                            break
                    break
            if same is not None:
                saved = 1 - count(same) / count(before_text)
                savings.append(saved)
                saving_tools.append(tool)
                out.append(Row("b", f"{n} results, {tool}", f"{count(before_text)} tokens ({kb[0]} ids, {kb[1]} URLs)",
                               f"{count(same)} tokens", f"{saved:.0%} fewer"))
        def fmt(ks: list[tuple[int, int, int]]) -> str:
            ids = sorted({k[0] for k in ks})
            urls = sorted({k[1] for k in ks})
            titles = sorted({k[2] for k in ks})
            span = lambda v: str(v[0]) if len(v) == 1 else f"{v[0]}-{v[-1]}"  # noqa: E731
            return f"ids {span(ids)}/{n}, URLs {span(urls)}/{n}, titles {span(titles)}/{n}"
        sizes_before = [count(replacement(old, tool, content, budget)) for tool in TOOLS]
        sizes_after = [count(replacement(new_previews, tool, content, budget)) for tool in TOOLS]
        out.append(Row("b", f"{n} results, the replacement at the default budget (mean of 5 names)", f"{sum(sizes_before) / len(TOOLS):.0f} tokens",
                       f"{sum(sizes_after) / len(TOOLS):.0f} tokens", "with the ids, URLs and titles of (a)"))
        bodies = {new_previews.render_preview(tool, content, budget_tokens=budget - 60, count_tokens=count) for tool in TOOLS}
        out.append(Row("a", f"{n} results, 5 tool names, {budget}-token budget", fmt(per_tool_before), fmt(per_tool_after),
                       "the same preview under every name (at the same budget)" if len(bodies) == 1 else "previews differ by name"))
    if savings:
        configured = [x for t, x in zip(saving_tools, savings) if t == "query_kb"]  # structured before as after: like for like
        out.append(Row("b", "mean over lists and tools", "", "", f"{sum(savings) / len(savings):.0%} fewer preview tokens at the same ids and URLs kept"))
        out.append(Row("b", "mean over lists, query_kb only (structured before too)", "", "",
                       f"{sum(configured) / len(configured):.0%} fewer preview tokens at the same ids and URLs kept"))
    # (c)
    kb_result = {"results": [{
        "doc_id": "doc-7731", "chunk_id": "doc-7731#c12", "title": "Signing key rotation runbook",
        "url": "https://kb.example.com/security/doc-7731", "score": 0.91, "content": " ".join(["rotate the key"] * 200),
        "metadata": {"file_id": "file-5520", "kb_id": "kb-security", "source": "security-handbook.pdf"},
    }]}
    content = json.dumps(kb_result)
    fields = ("doc_id", "chunk_id", "file_id", "kb_id", "source")
    values = ("doc-7731", "doc-7731#c12", "file-5520", "kb-security", "security-handbook.pdf")
    for label, fn in (("preview body at 160 tokens", lambda m: m.render_preview("query_kb", content, budget_tokens=160, count_tokens=count)),
                      ("whole replacement at 160 tokens", lambda m: replacement(m, "query_kb", content, 160))):
        b, a = fn(old), fn(new_previews)
        show = lambda t: ", ".join(f for f, v in zip(fields, values) if v in t) or "none"  # noqa: E731
        out.append(Row("c", f"1 knowledge-base result, {label}", show(b), show(a)))
    # (d)
    results = [{"title": r["title"], "url": r["url"], "snippet": r["content"]} for r in search_results(12, seed=12)]
    content = json.dumps({"query": "postgres failover", "results": results})
    b_text, a_text = replacement(old, "web_search", content, 180), replacement(new_previews, "web_search", content, 180)
    out.append(Row("d", "12 web results, 180-token replacement", f"{sum(_present(r['url'], b_text) for r in results)}/12 URLs",
                   f"{sum(_present(r['url'], a_text) for r in results)}/12 URLs"))
    # the frame alone
    sha = hashlib.sha256(b"one pruned result").hexdigest()  # a real hash: 64 zeros tokenize far shorter
    old_frame = count(old._header("query_kb", 5000, sha, f"query_kb-{sha}.txt") + "\n" + old._footer(5000))
    new_frame = count(new_previews._header("query_kb", saved_name(new_previews, "query_kb", sha)) + "\n" + new_previews._footer(5000))
    out.append(Row("frame", "header + footer of one pruned result", f"{old_frame} tokens", f"{new_frame} tokens",
                   f"{old_frame - new_frame} tokens fewer on every later request"))
    return out


def section(quick: bool = False) -> str:
    """The markdown section for docs/benchmarks.md (``run_all.EXTRA``)."""
    lines = ["| part | case | before (97be371) | after | note |", "|---|---|---|---|---|"]
    lines += [f"| {r.part} | {r.case} | {r.before} | {r.after} | {r.detail} |" for r in rows(quick)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="lists of 5, 20 and 40 results only")
    args = ap.parse_args(argv)
    print(section(args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
