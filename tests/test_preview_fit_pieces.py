"""fit with a SpaceSplitCounter (engine.core.previews._text): counting a long text from its chunks'
token ends (or, without them, in chunks between split points) gives the same counts, so the same
prefixes and suffixes, as counting each probe whole; a text joined from parts of known counts
counts as it does whole."""

from __future__ import annotations

import random

import pytest

from engine.compaction.pruning import _split_counter
from engine.core.meter import TokenMeter
from engine.core.previews import build_replacement, generic_preview
from engine.core.previews._text import SpaceSplitCounter, _Ruler, count_joined, fit, known_span

_ALPHABET = list("abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789  ..,,;:!?'\"()[]{}/\\-_=+\n\n\t") + [
    "é", "ü", "中", "文", "😀", "’", "\u00a0", "\u3000", "ß", "\u0301", "'s", "'ll"]


def _texts(seed: int, count: int) -> list[str]:
    rnd = random.Random(seed)
    out = []
    for _ in range(count):
        n = rnd.choice((400, 1200, 3000))
        if rnd.random() < 0.5:
            out.append(" ".join("".join(rnd.choice(_ALPHABET) for _ in range(rnd.randint(1, 9))) for _ in range(n // 5)))
        else:
            out.append("".join(rnd.choice(_ALPHABET) for _ in range(n)))
    return out


def _counters(meter: TokenMeter) -> list[SpaceSplitCounter]:
    """The wrapped meter (token ends known for ASCII chunks), and the counter without them."""
    return [SpaceSplitCounter(meter.count_text, meter.count_piece, ends=meter.token_ends), SpaceSplitCounter(meter.count_text)]


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_ruler_counts_every_prefix_suffix_and_span_exactly(encoding: str) -> None:
    meter = TokenMeter(encoding)
    count = meter.count_piece
    rnd = random.Random(3)
    texts = _texts(1, 120) + [t.encode("ascii", "ignore").decode() for t in _texts(4, 60)]
    for split in _counters(meter):
        for text in texts:
            n = len(text)
            for from_end in (False, True):
                ruler = _Ruler(text, split, from_end)
                for k in sorted(rnd.randint(0, n) for _ in range(10)) + [0, n]:
                    want = count(text[n - k:] if from_end else text[:k])
                    assert ruler(k) == want, (encoding, from_end, k, text[:60])
                    for limit in (want - 1, want, want + 1):
                        assert ruler.within(k, limit) == (want <= limit), (encoding, from_end, k, limit)
                for _ in range(6):
                    a, b = sorted(rnd.randint(0, n) for _ in range(2))
                    span = ruler.span(a, b)
                    if span is not None:
                        first, last, inner = span
                        assert 0 < first <= last < b - a and inner == count(text[a + first : a + last]), (encoding, a, b)


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_joined_parts_count_as_the_whole(encoding: str) -> None:
    meter = TokenMeter(encoding)
    remembered: dict[str, int] = {}
    split = SpaceSplitCounter(meter.count_text, meter.count_piece, ends=meter.token_ends, remember=remembered.__setitem__)
    rnd = random.Random(5)
    texts = _texts(6, 40)
    for _ in range(200):
        parts = [rnd.choice(texts)[: rnd.randint(0, 300)] for _ in range(rnd.randint(1, 5))]
        spans = [known_span(p, meter.count_piece(p), split) if rnd.random() < 0.7 else None for p in parts]
        text, total = count_joined(list(zip(parts, spans)), split)
        assert text == "\n".join(parts) and total == meter.count_piece(text) and remembered.get(text, total) == total


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_fit_answers_as_with_the_plain_counter(encoding: str) -> None:
    count = TokenMeter(encoding).count_text
    split = _split_counter(count)
    assert isinstance(split, SpaceSplitCounter) and split == SpaceSplitCounter(count) and hash(split) == hash(count)
    for text in _texts(2, 60):
        for budget in (5, 40, 200):
            for from_end in (False, True):
                assert fit(text, budget, split, from_end=from_end) == fit(text, budget, count, from_end=from_end)


def test_only_the_meters_own_count_is_wrapped() -> None:
    def plain(text: str) -> int:
        return len(text) // 4

    assert _split_counter(plain) is plain
    assert _split_counter(len) is len


def _logs(seed: int, count: int) -> list[str]:
    """Log-like texts: lines of words, paths, URLs, errors, figures, blank lines and indents."""
    rnd = random.Random(seed)
    kinds = [
        lambda: " ".join(rnd.choice(["order", "latency", "retry", "the", "résumé", "中文", "x=1,", "ok"]) for _ in range(rnd.randint(1, 30))),
        lambda: f"src/app/mod{rnd.randint(0, 99)}.py:{rnd.randint(1, 500)}: {rnd.choice(['def f():', 'return x', 'pass'])}",
        lambda: f"ERROR: request to https://api.example.com/v{rnd.randint(1, 3)}/items failed after {rnd.randint(1, 900)} ms",
        lambda: f'  File "/usr/lib/python3/x{rnd.randint(0, 9)}.py", line {rnd.randint(1, 99)}, in run',
        lambda: "",
        lambda: "    " + "".join(rnd.choice("abc {}[]()=:;,.\t") for _ in range(rnd.randint(0, 60))),
    ]
    return ["\n".join(rnd.choice(kinds)() for _ in range(rnd.randint(5, 120))) + rnd.choice(["", "\n", "\n\n"]) for _ in range(count)]


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_previews_are_those_of_the_plain_counter(encoding: str) -> None:
    """Generic previews and replacements (their slices fitted and the whole counted from the
    rulers' known counts) are the texts the plain count gives, counted as it counts them."""
    meter = TokenMeter(encoding)

    def plain(text: str) -> int:
        return meter.count_piece(text)

    split = _split_counter(meter.count_text)
    for text in _logs(7, 40) + _texts(8, 20):
        for budget in (30, 90, 250):
            want = generic_preview(text, budget_tokens=budget, count_tokens=plain)
            assert generic_preview(text, budget_tokens=budget, count_tokens=split) == want, (encoding, budget, text[:60])
            assert meter.count_text(want) == plain(want)
        kw = {"sha256": "ab" * 32, "path": "tool-abababababab…", "original_tokens": plain(text), "budget_tokens": 200}
        want = build_replacement("bash", text, count_tokens=plain, **kw)
        assert build_replacement("bash", text, count_tokens=split, **kw) == want
