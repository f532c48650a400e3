"""The caches that make repeated what-if runs cheap (issue 24): the meter's text cache
(:meth:`engine.core.meter.TokenMeter.count_text`) and the prune's preview memo (:mod:`engine.compaction.pruning`).
Both must return exactly what the uncached computation returns."""

from __future__ import annotations

from pathlib import Path

from engine.compaction.pruning import _PREVIEWS, Pruned, prune_surface, prune_tool_result
from engine.core.messages import Message, tool_result
from engine.core.meter import TokenMeter
from engine.core.workdir import Workdir

LOG = "\n".join(f"src/app/module_{i}.py:{i * 7}: error E{i:03d} in handler_{i} (see https://example.org/e/{i})" for i in range(400))


def test_count_text_cache_returns_the_uncached_count() -> None:
    meter = TokenMeter("cl100k_base")
    texts = ["", "a", "hello world", LOG, LOG[:1000], "naïve café " * 50, "<|endoftext|> as text"]
    first = [meter.count_text(t) for t in texts]
    again = [meter.count_text(t) for t in texts]
    assert first == again == [len(meter._enc.encode_ordinary(t)) if t else 0 for t in texts]
    assert meter._texts.hits >= len(texts) - 1  # the second pass was read from the cache ("" is never kept)
    meter.clear_cache()
    assert len(meter._texts.data) == 0 and [meter.count_text(t) for t in texts] == first


def test_count_text_cache_is_bounded_by_characters() -> None:
    meter = TokenMeter("cl100k_base")
    meter._texts.max_chars = 10_000
    for i in range(50):
        meter.count_text(f"{i} " + "x" * 999)
    assert meter._texts.chars <= 10_000 and len(meter._texts.data) <= 10


def test_prune_memo_gives_the_same_prune_in_another_workdir(tmp_path: Path) -> None:
    calls: list[str] = []
    meter = TokenMeter("cl100k_base")

    def count(text: str) -> int:  # the same counter object in both runs: the memo's key
        calls.append(text)
        return meter.count_text(text)

    msg = tool_result("c1", LOG, name="shell", id=7)
    _PREVIEWS.clear()
    a = prune_tool_result(msg, workdir=Workdir(tmp_path / "a"), count_tokens=count, limit_tokens=300, preview_tokens=200, saved_as="short")
    built = len(calls)
    b = prune_tool_result(msg, workdir=Workdir(tmp_path / "b"), count_tokens=count, limit_tokens=300, preview_tokens=200, saved_as="short")
    assert isinstance(a, Pruned) and isinstance(b, Pruned)
    assert len(calls) == built + 1  # the second prune counted the original only: its preview came from the memo
    assert a.preview == b.preview and a.preview_tokens == b.preview_tokens and a.left_out == b.left_out
    assert a.replacement.content == b.replacement.content
    assert Path(b.path).is_file() and Path(b.path).parent == tmp_path / "b"  # the full text is saved in every workdir
    # a cold build gives the same prune
    _PREVIEWS.clear()
    c = prune_tool_result(msg, workdir=Workdir(tmp_path / "c"), count_tokens=count, limit_tokens=300, preview_tokens=200, saved_as="short")
    assert isinstance(c, Pruned) and (c.preview, c.preview_tokens, c.left_out) == (a.preview, a.preview_tokens, a.left_out)


def test_prune_memo_keys_on_the_budget_and_the_shown_path(tmp_path: Path) -> None:
    count = TokenMeter("cl100k_base").count_text
    msg = tool_result("c1", LOG, name="shell", id=7)
    small = prune_tool_result(msg, workdir=Workdir(tmp_path), count_tokens=count, limit_tokens=300, preview_tokens=120)
    large = prune_tool_result(msg, workdir=Workdir(tmp_path), count_tokens=count, limit_tokens=300, preview_tokens=250)
    other = prune_tool_result(msg, workdir=Workdir(tmp_path / "x"), count_tokens=count, limit_tokens=300, preview_tokens=120)  # saved_as="path"
    assert isinstance(small, Pruned) and isinstance(large, Pruned) and isinstance(other, Pruned)
    assert small.preview_tokens <= 120 < large.preview_tokens <= 250
    assert str(tmp_path / "x") in other.preview and str(tmp_path / "x") not in small.preview


def test_prune_memo_accepts_an_unhashable_counter(tmp_path: Path) -> None:
    meter = TokenMeter("cl100k_base")

    class Counter:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self, text: str) -> int:
            return meter.count_text(text)

    report = prune_surface([tool_result("c1", LOG, name="shell", id=3)], workdir=Workdir(tmp_path), count_tokens=Counter(),
                           limit_tokens=300, preview_tokens=200)
    assert len(report.pruned) == 1 and report.pruned[0].preview_tokens <= 200


def test_fact_lines_cache_returns_the_uncached_lines() -> None:
    from engine.compaction.summarizers import facts
    from engine.core.messages import ToolCall, assistant, user

    edit = ToolCall("c1", "edit_file", '{"path": "services/pay.py", "new_string": "def apply_discount(x):\\n    return x"}')
    other = ToolCall("c1", "read_file", '{"path": "services/pay.py"}')
    msgs = [
        tool_result("c1", "ok\np95 latency: 412 ms at 1,200 rps\nAssertionError: expected 3 got 4\nFAILED tests/test_pay.py::test_total"),
        assistant("Decision: we will use Postgres because the queue needs it.", edit),
        assistant("Decision: we will use Postgres because the queue needs it.", other),  # same text, other call
        user("Fix the bug. Do not touch the API. Only change services/pay.py."),
        Message("system", "Never do X."),
    ]
    facts._CACHE.clear()
    uncached = [facts._fact_lines(m, m.content) if m.role != "system" else [] for m in msgs]
    first = [facts.fact_lines(m) for m in msgs]
    again = [facts.fact_lines(m) for m in msgs]
    assert first == again == uncached
    assert uncached[1] != uncached[2]  # the tool calls are part of the key
    assert len(facts._CACHE) == 4  # the second pass was read from it (the system message is never kept)
    first[0].append("mutated")  # a caller's list is its own
    assert facts.fact_lines(msgs[0]) == uncached[0]
    assert facts.fact_lines(msgs[0], "shown: took 3 s total") == facts._fact_lines(msgs[0], "shown: took 3 s total")


def test_shown_message_reuses_the_built_preview_message() -> None:
    from engine.core.surface import shown_message
    from engine.core.views import Offload

    result = tool_result("c1", LOG, id=7)
    offload = Offload(7, "grep", "offload/7.txt", "ab" * 32, "[preview]", 900, 3)
    fresh = result.with_content("[preview]", pruned="ab" * 32)
    first = shown_message(result, offload)
    assert first == fresh and shown_message(result, offload) is first
    other = Offload(7, "grep", "offload/7.txt", "cd" * 32, "[other preview]", 900, 4)
    assert shown_message(result, other) == result.with_content("[other preview]", pruned="cd" * 32)
    equal_copy = tool_result("c1", LOG, id=7)  # another object: built again, equal
    assert shown_message(equal_copy, offload) == fresh
    assert shown_message(result, None) is result


def test_extract_identifiers_cache_gives_a_fresh_list() -> None:
    from engine.core.specifics import _identifiers, extract_identifiers

    first = extract_identifiers(LOG)
    assert first == list(_identifiers(LOG)[1]) and first[:2] == ["src/app/module_0.py", "https://example.org/e/0"]
    first.clear()
    assert extract_identifiers(LOG) == list(_identifiers(LOG)[1])


def test_assistant_fact_lines_skip_extraction_only_where_it_cannot_decide() -> None:
    """A line without a decides / changes word is extracted only when it may hold a decision, an
    error or a metric: each kind of line still gives the line it gave before."""
    from engine.compaction.summarizers import facts
    from engine.core.messages import assistant

    text = "\n".join([
        "We will use Redis for the cache.",  # decides
        "Plain prose with a number 42 and nothing else.",  # nothing
        "ValueError: bad input in parse()",  # an error, no decides word
        "The p95 latency was 412 ms on the run.",  # a figure next to a metric word
        "I edited services/pay.py today.",  # changes a named file
    ])
    lines = facts.fact_lines(assistant(text))
    assert lines == ["We will use Redis for the cache.", "ValueError: bad input in parse()", "The p95 latency was 412 ms on the run."]
    assert facts._may_specify("ValueError: bad input") and not facts._may_specify("Plain prose with a number 42")


def test_without_prune_specifics_skips_them_and_leaks_no_preview(tmp_path: Path) -> None:
    """A what-if's prunes compute no dropped specifics (its scratch copy is removed, no figure reads
    them); a preview built there is not handed to a real prune without its left-out counts."""
    from engine.compaction.pruning import PruneReport, prune_dropped, without_prune_specifics

    meter = TokenMeter("cl100k_base")
    msg = tool_result("c1", LOG, name="shell", id=7)
    _PREVIEWS.clear()
    with without_prune_specifics():
        quick = prune_tool_result(msg, workdir=Workdir(tmp_path / "a"), count_tokens=meter.count_text, limit_tokens=300, preview_tokens=200,
                                  saved_as="short")
        assert isinstance(quick, Pruned) and quick.left_out is None
        assert prune_dropped(PruneReport((quick.replacement,), (quick,), ()), [msg]) == {}
    real = prune_tool_result(msg, workdir=Workdir(tmp_path / "b"), count_tokens=meter.count_text, limit_tokens=300, preview_tokens=200,
                                  saved_as="short")
    assert isinstance(real, Pruned) and real.left_out is not None and real.left_out.seen > 0
    assert real.preview == quick.preview and real.preview_tokens == quick.preview_tokens  # the same replacement
    fields = prune_dropped(PruneReport((real.replacement,), (real,), ()), [msg])
    assert fields["specifics_seen"] > 0 and "dropped" in fields


def test_specifics_reuse_the_identifier_hits_only_where_they_are_their_own() -> None:
    """extract_specifics of a text extract_identifiers saw reuses its hits (the same result as a
    fresh extraction); a text with a ``key_id=`` pair is extracted afresh (its pairs are specifics
    only)."""
    from engine.core.specifics import _IDENTIFIERS, _identifier_hits, extract_identifiers, extract_specifics

    plain = LOG + "\nsee docs/guide.md and doc-123456"
    paired = plain + "\nchunk_id=chunk-77 and kb_id=kb-9"
    for text in (plain, paired):
        _IDENTIFIERS.clear()
        fresh = extract_specifics(text)
        extract_identifiers(text)
        assert _IDENTIFIERS.peek(text) is not None
        assert extract_specifics(text) == fresh
    assert _identifier_hits(paired, more=True) != _identifier_hits(paired, more=False)
    assert any(s.value == "chunk_id=chunk-77" for s in extract_specifics(paired))
