"""The cheap checks the summary path asks before its regexes (engine/core/specifics.py,
engine/compaction/summarizers/facts.py, extractive.py): each is a necessary condition, so a text
that holds a specific, a fact or an identifier still gives it; these are the edge cases of each
check (non-ASCII text, case, a JSON pair split over two texts)."""

from __future__ import annotations

import random

from engine.compaction.summarizers import facts
from engine.compaction.summarizers.extractive import _listed_forms, _shown_form
from engine.core.messages import tool_result
from engine.core.specifics import expand_grouped, extract_identifiers, extract_specifics

SHA = "ab" * 32


def test_hashes_uuids_and_prefixed_ids_are_found_in_any_surrounding() -> None:
    assert extract_identifiers(f"é {SHA} ü") == [SHA]  # non-ASCII around: still 64 hex digits in a row
    assert extract_identifiers("abcdef" * 11) == []  # 66: not a SHA-256
    assert extract_identifiers("x 123E4567-E89B-12D3-A456-426614174000 y") == ["123E4567-E89B-12D3-A456-426614174000"]
    assert extract_identifiers("ORDER-7a Ticket_9 ref-x1 kb_3 ITEM_3 doc-abc") == ["ORDER-7a", "Ticket_9", "ref-x1", "kb_3", "ITEM_3"]
    assert extract_identifiers("中文 doc-12 文本") == ["doc-12"]
    # no ASCII digit: no git hash, version or quantity
    assert extract_specifics("deadbeef latency is high ² ms") == []
    assert [s.value for s in extract_specifics("deadbee1 at 3 ms, v1.2.3")] == ["deadbee1", "3 ms", "v1.2.3"]


def test_ascii_lines_are_searched_lower_cased_and_other_lines_as_before() -> None:
    rnd = random.Random(5)
    words = ["Latency", "P95", "TOTAL", "Decided", "We Will Use", "FIXED", "Keep", "ONLY", "rather THAN", "x.py", "3", "ms", "the", ":", "-"]
    for _ in range(500):
        line = " ".join(rnd.choice(words) for _ in range(rnd.randint(1, 8)))
        for pattern, lower in ((facts._METRIC, facts._METRIC_LOWER), (facts._DECIDES, facts._DECIDES_LOWER), (facts._CHANGES, facts._CHANGES_LOWER),
                               (facts._CONSTRAINT, facts._CONSTRAINT_LOWER)):
            want = pattern.search(line)
            got = facts._search(pattern, lower, line)
            assert (want and want.span()) == (got and got.span()), (pattern.pattern, line)
    # IGNORECASE matches the Kelvin sign to k and the long s to s: a non-ASCII text is searched as it is
    assert facts.constraint_lines("\u212aeep the API as is.") == ["\u212aeep the API as is."]
    assert facts.constraint_lines("you mu\u017ft not push.") == ["you mu\u017ft not push."]
    assert facts.constraint_lines("KEEP it. DO NOT push.") == ["KEEP it.", "DO NOT push."]


def test_a_tool_output_gives_its_error_and_figure_lines_whatever_the_text_around() -> None:
    out = tool_result("c1", "setup\nstep 1 ok\np95 latency: 412 ms\nFAILED tests/test_a.py::test_b - assert", name="shell")
    assert facts.fact_lines(out) == ["p95 latency: 412 ms", "FAILED tests/test_a.py::test_b - assert"]
    assert facts.fact_lines(tool_result("c2", "中文 total ３ ms", name="shell")) == []  # a full-width digit is no quantity
    assert facts.fact_lines(tool_result("c3", "no digits, no errors: latency is fine", name="shell")) == []
    assert facts.fact_lines(tool_result("c4", '{"stdout": "p99 latency 3 ms total"}', name="shell")) == ["p99 latency 3 ms total"]


def test_listed_forms_text_by_text_are_those_of_the_joined_texts() -> None:
    def joined(texts: list[str]) -> set[str]:
        found = extract_identifiers(expand_grouped("\n".join(texts)))
        return set(found) | {_shown_form(x) for x in found}

    cases = [
        ['{"doc_id"', ': "doc-9"}'],  # a pair over two texts: read joined
        ["src/app/{a,b}.py", "doc-{1,2} x", "see ~/cfg/a.toml"],
        ['"doc_id": "doc-77"', "chunk_id=abc1 https://e.com/p/{a,b}"],
        ["", "a/b/c.txt", "12345678-1234-1234-1234-123456789abc"],
    ]
    rnd = random.Random(3)
    parts = ['"doc_id"', ': "doc-9"', "src/{a,b}.py", "doc-5", "\n", "{a_id,b}\"", SHA, "a/b/c.txt", "~/x/y", " ", ":"]
    cases += [["".join(rnd.choice(parts) for _ in range(rnd.randint(0, 4))) for _ in range(rnd.randint(1, 4))] for _ in range(300)]
    for texts in cases:
        assert _listed_forms(texts) == joined(texts), texts
