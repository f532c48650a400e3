"""The caches that make repeated what-if runs cheap (issue 24): the meter's text cache
(:meth:`engine.meter.TokenMeter.count_text`) and the prune's preview memo (:mod:`engine.pruning`).
Both must return exactly what the uncached computation returns."""

from __future__ import annotations

from pathlib import Path

from engine.messages import tool_result
from engine.meter import TokenMeter
from engine.pruning import _PREVIEWS, Pruned, prune_surface, prune_tool_result
from engine.workdir import Workdir

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
