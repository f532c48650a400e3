"""The prune step: exact offload boundary, save-before-replace, fail-closed, never twice."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from engine.compaction.pruning import Pruned, PruneFailed, prune_surface, prune_tool_result, stale_results, tool_name_of
from engine.core.messages import META_PRUNED, ToolCall, assistant, tool_result, user
from engine.core.meter import default_meter
from engine.core.previews import PreviewBudgetError, parse_records, replacement_preview
from engine.core.surface import shown_message
from engine.core.views import Offload
from engine.core.workdir import Workdir

count = default_meter().count_text
LIMIT = 300
PREVIEW = 200


def text_of_tokens(n: int) -> str:
    """A text that counts exactly ``n`` tokens (" word" is one token in both packaged encodings)."""
    text = "start" + " word" * (n - 1)
    assert count(text) == n
    return text


def prune(message, workdir: Workdir, limit: int = LIMIT, preview: int = PREVIEW):
    return prune_tool_result(message, workdir=workdir, count_tokens=count, limit_tokens=limit, preview_tokens=preview)


def test_exact_offload_boundary(tmp_path: Path) -> None:
    wd = Workdir(tmp_path)
    at_limit = tool_result("c1", text_of_tokens(LIMIT), name="shell", id=5)
    assert prune(at_limit, wd) is None
    assert not any(tmp_path.iterdir())  # nothing saved for a result that stays
    one_over = tool_result("c1", text_of_tokens(LIMIT + 1), name="shell", id=5)
    assert isinstance(prune(one_over, wd), Pruned)


def test_pruned_result_is_saved_first_and_replaced_by_the_preview(tmp_path: Path) -> None:
    wd = Workdir(tmp_path)
    content = text_of_tokens(5000)
    msg = tool_result("call-7", content, name="shell", id=42)
    out = prune(msg, wd)
    assert isinstance(out, Pruned)
    sha = hashlib.sha256(content.encode()).hexdigest()
    assert out.sha256 == sha and out.message_id == 42 and out.tool_name == "shell"
    assert Path(out.path).read_text(encoding="utf-8") == content
    assert wd.read(sha) == content
    assert out.original_tokens == 5000
    assert out.preview_tokens == count(out.preview) <= PREVIEW
    # one header line names the saved file (the hash is in its name: said once, not twice as before)
    assert out.preview.startswith(f"[tool result offloaded: shell; full text: {out.path}]\n")
    assert out.preview.count(sha) == 1
    r = out.replacement
    assert r.content == out.preview and r.metadata[META_PRUNED] == sha
    assert (r.id, r.role, r.tool_call_id, r.name) == (42, "tool", "call-7", "shell")


def test_a_pruned_result_carries_one_offload_record_and_the_surface_replacement(tmp_path: Path) -> None:
    """The offload is the store's record type, not yet recorded (no generation); the replacement is
    exactly what the surface shows for that record."""
    msg = tool_result("call-7", text_of_tokens(900), name="shell", id=42)
    out = prune(msg, Workdir(tmp_path))
    assert isinstance(out, Pruned) and type(out.offload) is Offload
    o = out.offload
    assert (o.message_id, o.tool_name, o.generation, o.created_at) == (42, "shell", None, None)
    assert (o.sha256, o.path, o.preview, o.original_tokens, o.preview_tokens) == (out.sha256, out.path, out.preview, 900, out.preview_tokens)
    assert out.replacement == shown_message(msg, o)
    unsaved = prune(tool_result("c", text_of_tokens(900), name="shell"), Workdir(tmp_path))
    assert isinstance(unsaved, Pruned) and unsaved.offload.message_id is None and unsaved.replacement.id is None


def test_structured_result_is_pruned_with_structured_preview(tmp_path: Path) -> None:
    payload = {"results": [{"doc_id": f"d{i}", "title": f"T{i}", "content": "body " * 300,
                            "metadata": {"_internal_path": "/srv/kb/host01/x"}} for i in range(20)]}
    out = prune(tool_result("c", json.dumps(payload), name="query_kb"), Workdir(tmp_path), limit=1000, preview=600)
    assert isinstance(out, Pruned) and out.preview_tokens <= 600
    _, rows = parse_records(replacement_preview(out.preview))
    assert "\n20 results; fields: " in out.preview and [r["doc_id"] for r in rows] == [f"d{i}" for i in range(20)]  # every id kept
    assert "/srv/kb" not in out.preview


def test_already_pruned_result_is_never_pruned_again(tmp_path: Path) -> None:
    wd = Workdir(tmp_path)
    out = prune(tool_result("c", text_of_tokens(2000), name="shell"), wd)
    assert isinstance(out, Pruned)
    tiny_limit = prune(out.replacement, wd, limit=10, preview=5)
    assert tiny_limit is None


def test_same_content_twice_reuses_the_saved_file(tmp_path: Path) -> None:
    wd = Workdir(tmp_path)
    content = text_of_tokens(1000)
    a = prune(tool_result("c1", content, name="shell", id=1), wd)
    b = prune(tool_result("c2", content, name="shell", id=2), wd)
    assert isinstance(a, Pruned) and isinstance(b, Pruned)
    assert a.path == b.path and a.preview == b.preview
    assert len(list(tmp_path.iterdir())) == 1


def test_unwritable_workdir_fails_closed(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    msg = tool_result("c", text_of_tokens(1000), name="shell", id=9)
    out = prune(msg, Workdir(blocker / "wd"))
    assert out == PruneFailed(message_id=9, reason=out.reason) and "cannot create workdir" in out.reason


def test_replacement_is_capped_at_the_limit(tmp_path: Path) -> None:
    out = prune(tool_result("c", text_of_tokens(3000), name="shell"), Workdir(tmp_path), limit=250, preview=600)
    assert isinstance(out, Pruned) and out.preview_tokens <= 250


def test_preview_budget_too_small_is_a_typed_error_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(PreviewBudgetError):
        prune(tool_result("c", text_of_tokens(3000), name="shell"), Workdir(tmp_path / "wd"), preview=20)
    assert not (tmp_path / "wd").exists()


def test_text_the_workdir_cannot_encode_fails_closed(tmp_path: Path) -> None:
    out = prune(tool_result("c", text_of_tokens(1000) + "\ud800", name="shell", id=3), Workdir(tmp_path))
    assert isinstance(out, PruneFailed) and out.message_id == 3 and "UTF-8" in out.reason


def test_bad_arguments_fail_loudly(tmp_path: Path) -> None:
    wd = Workdir(tmp_path)
    with pytest.raises(ValueError, match="only tool results"):
        prune(user("hello " * 1000), wd)
    with pytest.raises(ValueError):
        prune(tool_result("c", "x"), wd, limit=-1)
    with pytest.raises(ValueError):
        prune(tool_result("c", "x"), wd, preview=0)


def test_tool_name_resolution() -> None:
    call = ToolCall("call-1", "web_search", "{}")
    surface = [assistant("", call, id=1)]
    assert tool_name_of(tool_result("call-1", "r", name="named", id=2), surface) == "named"
    assert tool_name_of(tool_result("call-1", "r", id=2), surface) == "web_search"
    assert tool_name_of(tool_result("call-x", "r", id=2), surface) == "tool"


def test_prune_surface_keeps_order_and_only_replaces_big_tool_results(tmp_path: Path) -> None:
    big = text_of_tokens(800)
    messages = (
        user("find it", id=1),
        assistant("", ToolCall("a", "web_search"), ToolCall("b", "read_file"), ToolCall("c", "shell"), id=2),
        tool_result("a", big, id=3),
        tool_result("b", "small result", id=4),
        tool_result("c", big + " more", name="custom", id=5),
        tool_result("orphan", big + " orphan", id=6),
        assistant("done", id=7),
    )
    report = prune_surface(messages, workdir=Workdir(tmp_path), count_tokens=count, limit_tokens=LIMIT,
                           preview_tokens=PREVIEW)
    assert [m.id for m in report.messages] == [1, 2, 3, 4, 5, 6, 7]
    assert [p.message_id for p in report.pruned] == [3, 5, 6] and report.failed == ()
    assert [p.tool_name for p in report.pruned] == ["web_search", "custom", "tool"]
    assert report.messages[0] is messages[0] and report.messages[3] is messages[3] and report.messages[6] is messages[6]
    for p in report.pruned:
        assert report.messages[p.message_id - 1] is p.replacement
        assert Path(p.path).name.startswith(p.tool_name + "-")
    again = prune_surface(report.messages, workdir=Workdir(tmp_path), count_tokens=count, limit_tokens=LIMIT,
                          preview_tokens=PREVIEW)
    assert again.pruned == () and again.messages == report.messages


def test_prune_surface_keeps_originals_when_the_workdir_fails(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    messages = (assistant("", ToolCall("a", "shell"), id=1), tool_result("a", text_of_tokens(900), id=2))
    report = prune_surface(messages, workdir=Workdir(blocker / "wd"), count_tokens=count, limit_tokens=LIMIT,
                           preview_tokens=PREVIEW)
    assert report.messages == messages and report.pruned == ()
    assert [f.message_id for f in report.failed] == [2]


def test_the_compactors_previews_name_the_saved_file_in_the_workdir_not_its_whole_path(tmp_path: Path) -> None:
    """A surface prune names the file by its tool and the hash's first 12 hex digits; the record keeps the path."""
    deep = Workdir(tmp_path / "home" / "user" / ".local" / "share" / "compaction-inspector" / "workdir")
    msg = tool_result("call-1", text_of_tokens(3000), name="shell", id=9)
    report = prune_surface([assistant("", ToolCall("call-1", "shell", "{}"), id=8), msg], workdir=deep, count_tokens=count, limit_tokens=2000, preview_tokens=600)
    (p,) = report.pruned
    assert f"; full text: shell-{p.sha256[:12]}…]\n" in p.preview and p.sha256[12:20] not in p.preview
    assert str(deep.root) not in p.preview and Path(p.path) == deep.path_for("shell", p.sha256)
    full = prune_tool_result(msg, workdir=deep, count_tokens=count, limit_tokens=2000, preview_tokens=600)
    assert isinstance(full, Pruned) and f"; full text: {full.path}]\n" in full.preview  # the CLI's default: the path
    with pytest.raises(ValueError):
        prune_tool_result(msg, workdir=deep, count_tokens=count, limit_tokens=2000, preview_tokens=600, saved_as="url")  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(4))
def test_every_url_of_20_url_only_web_results_is_visible_in_the_surface_preview(tmp_path: Path, seed: int) -> None:
    """Web results without an id are named by their URL: all 20 survive the default budget (600)."""
    import random

    rng = random.Random(seed)
    words = "postgres standby promote replication lag failover timeline wal archive recovery".split()
    sites = ["stackoverflow.com", "www.postgresql.org", "github.com", "docs.aws.amazon.com", "learn.microsoft.com"]
    results = []
    for _ in range(20):
        site, slug = rng.choice(sites), "-".join(rng.choice(words) for _ in range(rng.randint(2, 4)))
        results.append({"title": slug.replace("-", " ").title(), "url": f"https://{site}/{rng.choice(['docs', 'blog', 'q'])}/{slug}",
                        "snippet": " ".join(rng.choice(words) for _ in range(150)), "published_date": "2025-03-11", "score": 0.4})
    content = json.dumps({"query": "postgres promote standby", "results": results})
    wd = Workdir(tmp_path / "home" / "user" / ".local" / "share" / "compaction-inspector" / "workdir")
    call = ToolCall("w1", "web_search", "{}")
    report = prune_surface([assistant("", call, id=1), tool_result("w1", content, name="web_search", id=2)],
                           workdir=wd, count_tokens=count, limit_tokens=2000, preview_tokens=600)
    (p,) = report.pruned
    assert count(p.preview) <= 600 and "omitted_results" not in p.preview
    _, rows = parse_records(replacement_preview(p.preview))
    assert [r["url"] for r in results if r["url"] not in [x.get("url") for x in rows]] == []


def _rounds(n: int, tokens: int) -> list:
    msgs: list = [user("go", id=1)]
    for i in range(n):
        msgs.append(assistant("", ToolCall(f"c{i}", "shell", "{}"), id=2 + 2 * i))
        msgs.append(tool_result(f"c{i}", text_of_tokens(tokens), name="shell", id=3 + 2 * i))
    return msgs


def test_stale_results_are_the_tool_results_before_the_token_tail_and_the_recent_rounds() -> None:
    msgs = _rounds(6, 500)  # ids 3, 5, ..., 13 are results
    cost = lambda m: count(m.content) + 3  # noqa: E731
    assert stale_results(msgs, message_tokens=cost, tail_tokens=1000, recent_rounds=1) == {3, 5, 7, 9}
    assert stale_results(msgs, message_tokens=cost, tail_tokens=0, recent_rounds=3) == {3, 5, 7}
    assert stale_results(msgs, message_tokens=cost, tail_tokens=10**6, recent_rounds=0) == frozenset()
    assert stale_results(msgs, message_tokens=cost, tail_tokens=0, recent_rounds=0) == {3, 5, 7, 9, 11, 13}


def test_stale_results_are_pruned_when_their_preview_is_smaller_and_fresh_ones_only_over_the_limit(tmp_path: Path) -> None:
    msgs = _rounds(4, 450)
    report = prune_surface(msgs, workdir=Workdir(tmp_path), count_tokens=count, limit_tokens=LIMIT * 10, preview_tokens=PREVIEW, stale={3, 5})
    assert [p.message_id for p in report.pruned] == [3, 5]  # 450 > 200 (the preview) for the stale two only
    assert all(p.preview_tokens <= PREVIEW < p.original_tokens for p in report.pruned)
    # a stale result no bigger than its half budget would not shrink: kept (with the one-line frame a
    # result of the full preview budget is now pruned to its half budget, which the old frame could not hold)
    small = _rounds(2, PREVIEW // 2)
    assert prune_surface(small, workdir=Workdir(tmp_path), count_tokens=count, limit_tokens=LIMIT, preview_tokens=PREVIEW, stale={3, 5}).pruned == ()


def test_a_stale_results_replacement_gets_half_the_preview_budget_when_its_frame_fits(tmp_path: Path) -> None:
    msgs = _rounds(3, 1500)  # under the 2,000 limit: only the stale ones are pruned
    report = prune_surface(msgs, workdir=Workdir(tmp_path), count_tokens=count, limit_tokens=2000, preview_tokens=600, stale={3})
    (p,) = report.pruned
    assert p.message_id == 3 and p.preview_tokens <= 300 < p.original_tokens


def _grep_log(paths: int) -> str:
    """A grep output naming ``paths`` distinct files, one hit line each (a real-shaped log)."""
    return "\n".join(f"src/pkg_{i % 7}/module_{i:03d}.py:{10 + i}: retry_limit = {'the value it was set to before ' * 3}" for i in range(paths))


def test_a_stale_log_whose_half_budget_would_hide_paths_takes_the_full_budget_and_keeps_them(tmp_path: Path) -> None:
    from engine.core.specifics import extract_identifiers

    msgs = [user("go", id=1), assistant("", ToolCall("c0", "grep", "{}"), id=2), tool_result("c0", _grep_log(34), name="grep", id=3)]
    paths = extract_identifiers(msgs[2].content)
    assert len(paths) == 34 and count(msgs[2].content) > 1200
    report = prune_surface(msgs, workdir=Workdir(tmp_path), count_tokens=count, limit_tokens=4000, preview_tokens=600, stale={3})
    (p,) = report.pruned
    assert 300 < p.preview_tokens <= 600  # the half budget could not list 34 paths (about 8 tokens each)
    assert [x for x in paths if x not in p.replacement.content] == []
    # the half budget alone would have hidden some: the wider budget was taken for them only
    half = prune_tool_result(msgs[2], workdir=Workdir(tmp_path), count_tokens=count, limit_tokens=300, preview_tokens=300)
    assert isinstance(half, Pruned) and any(x not in half.replacement.content for x in paths)


def test_a_stale_result_whose_ids_fit_half_the_budget_keeps_the_half_budget(tmp_path: Path) -> None:
    msgs = [user("go", id=1), assistant("", ToolCall("c0", "grep", "{}"), id=2), tool_result("c0", _grep_log(4) + "\n" + text_of_tokens(1500), name="grep", id=3)]
    report = prune_surface(msgs, workdir=Workdir(tmp_path), count_tokens=count, limit_tokens=4000, preview_tokens=600, stale={3})
    (p,) = report.pruned
    assert p.preview_tokens <= 300
    assert all(f"module_{i:03d}.py" in p.replacement.content for i in range(4))
