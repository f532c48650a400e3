"""fit with a SpaceSplitCounter (engine.core.previews._text): counting a long text in pieces between
split points gives the same counts, so the same prefixes and suffixes, as counting each probe whole."""

from __future__ import annotations

import random

import pytest

from engine.compaction.pruning import _split_counter
from engine.core.meter import TokenMeter
from engine.core.previews._text import SpaceSplitCounter, _Pieces, fit

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


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_pieces_count_every_prefix_and_suffix_exactly(encoding: str) -> None:
    count = TokenMeter(encoding).count_text
    rnd = random.Random(3)
    for text in _texts(1, 120):
        for from_end in (False, True):
            pieces = _Pieces(text, count, from_end)
            for k in sorted(rnd.randint(0, len(text)) for _ in range(10)) + [0, len(text)]:
                want = count(text[len(text) - k:] if from_end else text[:k])
                assert pieces(k) == want, (encoding, from_end, k, text[:60])


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
