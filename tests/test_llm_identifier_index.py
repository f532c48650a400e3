"""The identifier index of a language model's summary: the OpenAI-compatible summarizer (against the
provider simulator, a real loopback server) appends the extractive summary's identifier lines for
the identifiers the model's text does not show, within the request's identifier room; the previous
summary's index rolls forward without being shown to the model (docs/compaction.md, "Identifier
room")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from engine.apps.harness.simulator import ProviderSimulator, Reply
from engine.compaction.summarizers.extractive import IDENTIFIER_HEADING, ExtractiveSummarizer, identifier_index, split_identifier_section
from engine.compaction.summarizers.openai_compat import OpenAICompatSummarizer
from engine.compaction.summarizers.protocol import SummaryRequest
from engine.core.messages import Message, ToolCall, assistant, tool_result, user
from engine.core.meter import default_meter
from engine.core.specifics import expand_grouped, extract_identifiers
from engine.service import open_service

count = default_meter().count_text
CURRENT = "Write the refund table for doc-123 with its sources."


def kb_round(r: int, first_id: int, per: int = 3) -> tuple[Message, ...]:
    """One query_kb round (ids ``first_id``, ``first_id + 1``): ``per`` results, each with a
    document id, a chunk id (a part id) and a URL."""
    call = ToolCall(f"c{r}", "query_kb", json.dumps({"query": f"refund rule {r}"}))
    body = json.dumps({"results": [
        {"document_id": f"doc-{r:02d}{k}", "chunk_id": f"chunk-{r:02d}{k}", "url": f"https://kb.example.com/a/{r:02d}{k}.html"}
        for k in range(per)
    ]})  # fmt: skip
    return (assistant(f"Looking up rule {r}.", call, id=first_id), tool_result(call.id, body, name="query_kb", id=first_id + 1))


def history() -> tuple[Message, ...]:
    """A request, two kb rounds and a file read: ids #1 to #7."""
    call = ToolCall("c9", "read_file", json.dumps({"path": "/srv/kb/policies/refund.md"}))
    return (
        user("Collect the refund rules from the knowledge base.", id=1),
        *kb_round(0, 2),
        *kb_round(1, 4),
        assistant("Reading the policy file.", call, id=6),
        tool_result("c9", "Refunds within 14 days; see https://policies.example.com/refund#window for the text.", name="read_file", id=7),
    )


def request(messages: tuple[Message, ...] | None = None, **kw: object) -> SummaryRequest:
    base: dict[str, object] = dict(messages=history() if messages is None else messages, current_request=CURRENT, max_tokens=300, identifier_tokens=400)
    base.update(kw)
    return SummaryRequest(**base)  # type: ignore[arg-type]


def id_lines(text: str) -> list[str]:
    """The lines of the identifier section(s) of ``text``."""
    return [line for line in split_identifier_section(text)[1].splitlines() if line.startswith("- ")]


def listed(text: str) -> list[str]:
    """The identifiers the index lists, grouped forms (``dir/{a,b}.py``) read back."""
    return [x for line in id_lines(text) for x in expand_grouped(line[2:]).split()]


def listed_form(ident: str) -> str:
    """``doc_id=doc-9`` is listed as ``doc-9``, ``rev=7`` as it is."""
    key, sep, value = ident.partition("=")
    return value if sep and key.isidentifier() and extract_identifiers(value) == [value] else ident


def seen(msgs: tuple[Message, ...]) -> set[str]:
    """Every identifier the messages show, in its listed form."""
    return {listed_form(x) for m in msgs for x in extract_identifiers("\n".join([m.content, *(c.arguments for c in m.tool_calls)]))}


@pytest.fixture
def sim() -> Iterator[ProviderSimulator]:
    """The simulator with a window no summary prompt reaches: every request takes a scripted reply."""
    with ProviderSimulator(context_window=1_000_000) as sim:
        yield sim


def summarizer(server: ProviderSimulator) -> OpenAICompatSummarizer:
    return OpenAICompatSummarizer(server.base_url, "summ-model", timeout=5.0, retries=0)


def prompt_of(server: ProviderSimulator, k: int = -1) -> str:
    return server.requests[k].body["messages"][1]["content"]


# -- the index ------------------------------------------------------------------------------------


def test_the_index_is_the_extractive_summarys_identifier_section() -> None:
    """The index lists exactly the identifier lines the extractive summary writes (same lines,
    order, grouping) when the room holds them all; what the text beside it shows is left out."""
    req = request(max_tokens=2000, identifier_tokens=2000)
    extractive = ExtractiveSummarizer().summarize(req).text
    index, dropped = identifier_index(req, "")  # no request or conclusion of this history shows an id
    assert index.startswith(IDENTIFIER_HEADING + "\n") and id_lines(index) == id_lines(extractive) and dropped == ()
    assert index == IDENTIFIER_HEADING + "\n" + split_identifier_section(extractive)[1]
    prose = split_identifier_section(extractive)[0]  # its tool-call lines show the policy file's path
    assert id_lines(identifier_index(req, prose)[0]) == [line for line in id_lines(extractive) if "/srv/kb/policies/refund.md" not in line]
    assert "- chunk-{000,001,002,010,011,012}" in id_lines(index)  # the part ids, after the ids they belong to
    assert identifier_index(req, "") == (index, dropped)  # deterministic
    assert identifier_index(request(identifier_tokens=0), "") == ("", ())
    assert identifier_index(req, extractive) == ("", ())  # the text shows every one already


def test_ids_the_reply_does_not_mention_are_appended_in_the_extractive_format(sim: ProviderSimulator) -> None:
    reply = "Refunds are granted within 14 days (read from /srv/kb/policies/refund.md); doc-000 and doc-101 state the rule."
    sim.script([Reply(content=reply)])
    with summarizer(sim) as s:
        result = s.summarize(request())
    assert result.text.startswith(reply + "\n\n" + IDENTIFIER_HEADING + "\n") and not result.extractive
    lines = id_lines(result.text)
    assert lines[:2] == ["- https://kb.example.com/a/{000,001,002,010,011,012}.html", "- doc-{001,002,010,011,012}"]  # doc-000 is in the reply
    assert "- chunk-{000,001,002,010,011,012}" in lines
    assert "- https://policies.example.com/refund#window" in lines
    for shown in ("doc-000", "doc-101", "/srv/kb/policies/refund.md"):  # in the reply: not repeated
        assert result.text.count(shown) == 1 and shown not in listed(result.text)
    assert "doc-123" not in result.text  # in the current request (always verbatim beside the summary)
    assert set(listed(result.text)) == seen(history()) - set(extract_identifiers(reply)) - {"doc-123"}
    assert result.dropped_identifiers == ()
    assert IDENTIFIER_HEADING not in prompt_of(sim)


def test_the_index_fits_its_room_and_reports_what_it_left_out(sim: ProviderSimulator) -> None:
    msgs = (user("Collect the refund rules from the knowledge base.", id=1),) + tuple(m for r in range(8) for m in kb_round(r, 2 + 2 * r, per=4))
    reply = "The knowledge base was searched for eight refund rules."
    sim.script([Reply(content=reply)])
    with summarizer(sim) as s:
        # max_tokens = the reply: no prose budget left over for the index (what the model leaves of
        # its max_tokens goes to the index too, issue 25)
        result = s.summarize(request(msgs, identifier_tokens=120, max_tokens=count(reply) + 2))
    index = result.text.removeprefix(reply + "\n\n")
    assert index.startswith(IDENTIFIER_HEADING) and count(index) <= 120
    kept, dropped = set(listed(index)), set(result.dropped_identifiers)
    assert kept and dropped and not kept & dropped
    assert kept | dropped == seen(msgs)
    assert "doc-070" in kept and "doc-000" in dropped  # the newest first, as in the extractive summary
    assert not any(x.startswith("chunk-") for x in kept)  # part ids go after every other identifier
    # the same request with more room keeps more
    sim.script([Reply(content=reply)])
    with summarizer(sim) as s:
        wider = s.summarize(request(msgs, identifier_tokens=400, max_tokens=count(reply) + 2))
    assert set(listed(wider.text)) > kept and count(wider.text.removeprefix(reply + "\n\n")) <= 400


def test_without_an_identifier_room_the_text_is_the_models_reply(sim: ProviderSimulator) -> None:
    reply = "Refunds are granted within 14 days."
    sim.script([Reply(content=reply)])
    previous = "Earlier: the user asked about refunds.\n\n" + IDENTIFIER_HEADING + "\n- (#1) query_kb: doc-900"
    with summarizer(sim) as s:
        result = s.summarize(request(identifier_tokens=0, previous_summary=previous))
    assert result.text == reply and result.dropped_identifiers == ()
    assert previous in prompt_of(sim)  # nothing carries the previous index: the model is shown it


def test_the_index_rolls_from_summary_to_summary(sim: ProviderSimulator) -> None:
    first_reply = "The user collects refund rules; two knowledge-base rounds and the policy file were read."
    sim.script([Reply(content=first_reply)])
    with summarizer(sim) as s:
        first = s.summarize(request())
    first_ids = set(listed(first.text))
    assert {"doc-000", "https://policies.example.com/refund#window", "/srv/kb/policies/refund.md"} <= first_ids

    later = kb_round(2, 8)
    tail = (user("Also check doc-100 again.", id=10),)
    second_reply = "Rule 2 was looked up as well; doc-001 still applies."
    sim.script([Reply(content=second_reply)])
    with summarizer(sim) as s:
        second = s.summarize(request(later, previous_summary=first.text, retained=tail))
    carried = set(listed(second.text))
    # the first index's ids are carried, except those the new reply or the retained tail shows
    assert first_ids - {"doc-001", "doc-100"} <= carried and not {"doc-001", "doc-100"} & carried
    assert seen(later) <= carried  # and the new range's ids are listed
    assert second.text.count(IDENTIFIER_HEADING) == 1 and second.dropped_identifiers == ()
    assert id_lines(second.text)[0] == "- doc-{000,002,010,011,012,020,021,022}"  # carried ones first, in their order, then the new
    # the model is shown the previous prose, not the previous index
    prompt = prompt_of(sim)
    assert first_reply in prompt and IDENTIFIER_HEADING not in prompt
    assert not any(line in prompt for line in id_lines(first.text))


# -- end to end through the engine -----------------------------------------------------------------

WINDOW = 8000  # target 5439: summary budget 400, identifier room 1503
POLICY = {"context_window": WINDOW, "default": {"summary_max_tokens": 400}}
REQUEST = "Current request: list the section files you read and where each came from."
FILLER = "The section describes refunds, invoices and the approval chain in some detail. " * 12


def test_a_compaction_with_the_model_summarizer_keeps_the_paths_and_urls(db_url: str, tmp_path: Path, sim: ProviderSimulator) -> None:
    key = f"llm-index-{tmp_path.name}"
    reply = f"{REQUEST}\nThe user had the agent read ten section files and summarize them."
    sim.fallback = Reply(content=reply)
    svc = open_service(db_url, workdir=tmp_path / "wd", summarizer=summarizer(sim), policies=POLICY, create=True)
    try:
        svc.runs.create_thread(key, system_prompt="You are a careful assistant.")
        for i in range(10):
            call = ToolCall(f"read-{i}", "read_file", json.dumps({"path": f"/srv/docs/section-{i}.md"}))
            svc.runs.append_message(key, user(f"Question {i}: what does section {i} say?"))
            svc.runs.append_message(key, assistant(f"Reading section {i}.", call))
            svc.runs.append_message(key, tool_result(call.id, f"Mirrored from https://docs.example.com/s/{i}?rev=7\n{FILLER}", name="read_file"))
            svc.runs.append_message(key, assistant(f"Section {i} covers refunds. {FILLER}"))
        svc.runs.append_message(key, user(REQUEST))
        svc.runs.append_message(key, assistant("Final answer. " + FILLER * 4))
        done = svc.compaction.compact(key)
        assert done.status == "completed" and done.summarizer_calls == 1
        state = svc.reads.compaction_state(key)
        summary = state.summary
        assert summary is not None and summary.startswith(reply + "\n\n" + IDENTIFIER_HEADING + "\n")
        compacted = tuple(m for m in (s.message for s in svc.reads.messages_page(key, limit=1000)) if m.id is not None and m.id <= done.boundary)
        ids = seen(compacted)
        assert len(ids) >= 10 and ids <= set(listed(summary))  # every path and URL of the summarized range
        assert {f"/srv/docs/section-{i}.md" for i in range(3)} | {f"https://docs.example.com/s/{i}?rev=7" for i in range(3)} <= ids
        assert count(split_identifier_section(summary)[1]) < 1503
        event = next(e for e in svc.reads.events(key) if e.kind == "summary")
        assert event.data["dropped_identifiers"] == 0
        assert IDENTIFIER_HEADING not in prompt_of(sim)
    finally:
        svc.close()
