"""The extractive summary's identifier index: its own room up to 35 % of the target (the
identifier appendix of docs/compaction.md), part ids (chunk ids) after the ids they belong to,
identifiers that share a directory, URL prefix or id head written grouped (``dir/{a,b}.py``) and
read back by one rule, and every identifier left out recorded."""

from __future__ import annotations

import json

from engine.compaction.compactor import identifier_budget, summary_budget, summary_ceiling
from engine.compaction.summarizers.extractive import GROUPED_LEGEND, HEADER, ExtractiveSummarizer
from engine.compaction.summarizers.protocol import SummaryRequest
from engine.core.messages import Message, ToolCall, assistant, tool_result, user
from engine.core.meter import default_meter
from engine.core.policy import PolicySet
from engine.core.specifics import expand_grouped, extract_identifiers, group_identifiers

count = default_meter().count_text
IDS = "## Identifiers, paths and URLs seen"


def kb_history(rounds: int, per: int = 6) -> tuple[Message, ...]:
    """``rounds`` query_kb rounds, each ``per`` results with a document id, a chunk id and a URL."""
    msgs: list[Message] = [user("Collect what the knowledge base says about refunds", id=1)]
    for r in range(rounds):
        call = ToolCall(f"c{r}", "query_kb", json.dumps({"query": f"refund rule {r}"}))
        body = json.dumps({"results": [
            {"document_id": f"doc-{r:03d}{k:03d}", "chunk_id": f"chunk-{r:03d}{k:03d}", "url": f"https://kb.example.com/articles/{r:03d}{k:03d}.html"}
            for k in range(per)
        ]})  # fmt: skip
        msgs += [assistant(f"Looking up rule {r}.", call, id=2 + 2 * r), tool_result(call.id, body, name="query_kb", id=3 + 2 * r)]
    return tuple(msgs)


def id_lines(text: str) -> list[str]:
    if IDS not in text:
        return []
    return [line for line in text[text.index(IDS) :].split("\n\n")[0].splitlines()[1:] if line.startswith("- ")]


def listed(text: str, *, parts: bool | None = None) -> list[str]:
    """The identifiers the section lists, grouped forms read back (``expand_grouped``); ``parts``:
    only the chunk ids (True) or only the others (False)."""
    out = []
    for line in id_lines(text):
        out += [x for x in expand_grouped(line[2:]).split() if parts is None or x.startswith("chunk-") == parts]
    return out


def without_ids(text: str) -> str:
    """The summary without its identifier section (what ``max_tokens`` alone bounds)."""
    if IDS not in text:
        return text
    head, rest = text.split("\n" + IDS, 1)
    after = rest.split("\n## ", 1)
    return head + ("\n## " + after[1] if len(after) > 1 else "")


def everything(msgs: tuple[Message, ...]) -> set[str]:
    found = set()
    for m in msgs:
        for raw in extract_identifiers(m.content + " " + " ".join(c.arguments for c in m.tool_calls)):
            key, sep, value = raw.partition("=")
            found.add(value if sep else raw)
    return found


def test_identifier_room_holds_more_ids_and_only_ids() -> None:
    msgs = kb_history(60)
    plain = ExtractiveSummarizer().summarize(SummaryRequest(msgs, current_request="go on", max_tokens=1500))
    roomy = ExtractiveSummarizer().summarize(SummaryRequest(msgs, current_request="go on", max_tokens=1500, identifier_tokens=1500))
    assert count(plain.text) <= 1500 and count(roomy.text) <= 3000  # inside the budget, exactly
    assert count(without_ids(roomy.text)) <= 1500  # the room is the identifiers' alone
    assert len(listed(roomy.text)) > len(listed(plain.text)) + 100
    assert len(roomy.dropped_identifiers) < len(plain.dropped_identifiers)
    # tool-call lines (ranked below the identifiers) get no more than the plain budget gave them
    calls = lambda t: [line for line in t.splitlines() if "query_kb(" in line]  # noqa: E731
    assert len(calls(roomy.text)) <= len(calls(plain.text)) + len(calls(plain.text)) // 2 + 1
    # each identifier once; listed, visible (the request) or recorded as dropped, nothing else
    for r in (plain, roomy):
        shown = listed(r.text)
        assert len(shown) == len(set(shown)) and not set(shown) & set(r.dropped_identifiers)
        assert set(shown) | set(r.dropped_identifiers) == everything(msgs)


def test_no_room_gives_the_same_summary_as_before() -> None:
    msgs = kb_history(30)
    a = ExtractiveSummarizer().summarize(SummaryRequest(msgs, current_request="go on", max_tokens=900))
    b = ExtractiveSummarizer().summarize(SummaryRequest(msgs, current_request="go on", max_tokens=900, identifier_tokens=0))
    assert a == b and count(a.text) <= 900


def test_part_ids_come_after_the_ids_they_belong_to() -> None:
    msgs = kb_history(20)
    tight = ExtractiveSummarizer().summarize(SummaryRequest(msgs, current_request="go on", max_tokens=1000))
    main, parts = listed(tight.text, parts=False), listed(tight.text, parts=True)
    assert len(main) == 20 * 6 * 2 and 0 < len(parts) < 120  # every document id and URL, some chunk ids
    oldest = min(int(x[6:9]) for x in parts)  # the newest results' chunk ids, the oldest of them partly
    assert parts[-6 * (19 - oldest) :] == [f"chunk-{r:03d}{k:03d}" for r in range(oldest + 1, 20) for k in range(6)]
    assert all(x.startswith("chunk-") for x in tight.dropped_identifiers) and len(tight.dropped_identifiers) == 120 - len(parts)
    roomy = ExtractiveSummarizer().summarize(SummaryRequest(msgs, current_request="go on", max_tokens=6000))
    assert roomy.dropped_identifiers == () and len(listed(roomy.text, parts=True)) == 120
    lines = id_lines(roomy.text)
    # one line per head, in order of first appearance, members in order: document ids, URLs, chunk ids
    assert lines[0].startswith("- doc-{000000,000001,000002,") and lines[0].endswith(",019005}")
    assert lines[1].startswith("- https://kb.example.com/articles/{000000,000001,") and lines[1].endswith(",019005}.html")
    assert lines[2].startswith("- chunk-{000000,000001,") and len(lines) == 3
    assert GROUPED_LEGEND in roomy.text.splitlines()


def test_a_rolling_summary_carries_part_ids_as_part_ids() -> None:
    first = ExtractiveSummarizer().summarize(SummaryRequest(kb_history(5), current_request="go on", max_tokens=4000))
    assert len(listed(first.text, parts=True)) == 30
    newer = tuple(m for m in kb_history(25) if m.id is not None and m.id > 11)
    again = ExtractiveSummarizer().summarize(
        SummaryRequest(newer, previous_summary=first.text, current_request="go on", max_tokens=1200)
    )
    assert again.text.startswith(HEADER) and count(again.text) <= 1200
    # the new range's documents and URLs, and the carried ones, before any chunk id
    main, parts = listed(again.text, parts=False), listed(again.text, parts=True)
    assert {f"doc-000{k:03d}" for k in range(6)} <= set(main) and {"doc-024005", "https://kb.example.com/articles/024005.html"} <= set(main)
    assert len(parts) < 30 + 120 and set(again.dropped_identifiers) <= {x for x in everything(newer) | set(listed(first.text)) if x.startswith("chunk-")}


def test_the_compactor_gives_identifiers_room_by_the_budget_rule() -> None:
    # issue 25: the room follows the window and the identifiers carried (engine.core.policy.summary_total_tokens),
    # up to 3/5 of the target; it was a fixed 7/20 of the target
    big = PolicySet(default_window=131_072).resolve("local", "unknown-model")
    assert big.target_tokens == 52_428 and summary_budget(big) == 8192
    assert identifier_budget(big) == 31_456 - 8192 and summary_ceiling(big) == 31_456  # the ceiling: ⌊3/5 × 52,428⌋
    assert identifier_budget(big, identifiers=0) == 0  # ⌊131,072 / 16⌋ = 8,192: all of it prose
    assert identifier_budget(big, identifiers=1_000) == 12 * 1_000  # 8,192 + 12 per identifier
    assert identifier_budget(big, 12_000, identifiers=1_000) == 20_192 - 12_000  # a long current request's budget leaves less
    assert identifier_budget(big, 32_000) == 0
    small = PolicySet(default_window=32_768).resolve("local", "unknown-model")
    # the prose budget is a quarter of the target there; the room up to 3/5 of it
    assert summary_budget(small) == 13_107 // 4 and identifier_budget(small) == 7_864 - 3_276
    tiny = PolicySet(default_window=2_048).resolve("local", "unknown-model")  # target 819
    assert summary_budget(tiny) == 256 and identifier_budget(tiny) == 491 - 256  # the 256 floor, then ⌊3/5 × 819⌋
    assert identifier_budget(tiny, 500) == 0  # never negative


def test_grouped_identifiers_read_back_whole_and_cost_less() -> None:
    ids = [f"/repo/src/app/{w}_{k:03d}.py" for k in range(40) for w in ("parse", "render")] + [f"doc-{k:06d}" for k in range(40)]
    ids += [f"https://kb.example.com/articles/{k:06d}.html" for k in range(40)] + ["9f86d081884c7d659a2feaeb0f6d9e6e1a0c3b1f2f8e7c6d5b4a39281706f5e4"]
    ids += ["123e4567-e89b-12d3-a456-426614174000", "doc_id=9", "README", "/repo/docs/", "https://x.example.com/a,b"]
    written = group_identifiers(ids)
    assert written[:3] == ["/repo/src/app/{" + ",".join(f"{w}_{k:03d}" for k in range(40) for w in ("parse", "render")) + "}.py",
                           "doc-{" + ",".join(f"{k:06d}" for k in range(40)) + "}",
                           "https://kb.example.com/articles/{" + ",".join(f"{k:06d}" for k in range(40)) + "}.html"]
    assert written[3:] == ids[-6:]  # no shared head, a comma in it, or nothing after the last "/": written whole
    assert sorted(expand_grouped(" ".join(written)).split()) == sorted(ids)  # the reading rule gives every one back
    assert extract_identifiers(expand_grouped("\n".join(written))) == extract_identifiers("\n".join(ids))
    assert count("\n".join(f"- {x}" for x in written)) * 2 < count("\n".join(f"- {x}" for x in ids))
    assert expand_grouped("no braces here") == "no braces here" and expand_grouped("a {single} b") == "a {single} b"


def test_a_dense_history_keeps_more_identifiers_grouped_within_the_same_budget() -> None:
    msgs = kb_history(60)
    result = ExtractiveSummarizer().summarize(SummaryRequest(msgs, current_request="go on", max_tokens=1500, identifier_tokens=1500))
    # 360 document ids and 360 URLs (each ~8 tokens written whole: more than the 3,000 tokens), and
    # the newest chunk ids after them
    assert count(result.text) <= 3000 and set(listed(result.text, parts=False)) == {x for x in everything(msgs) if not x.startswith("chunk-")}
    assert 0 < len(listed(result.text, parts=True)) < 360 and all(x.startswith("chunk-") for x in result.dropped_identifiers)
