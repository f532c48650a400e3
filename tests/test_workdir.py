"""The content-addressed Workdir: atomic idempotent saves, confinement of tool names, verified reads."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest

from engine.core.workdir import (
    Workdir,
    WorkdirError,
    WorkdirIntegrityError,
    WorkdirMissing,
    sanitize_tool_name,
)

TEXT = "工具结果 / tool output\n" * 100


def test_save_writes_full_text_named_by_tool_and_sha256(tmp_path: Path) -> None:
    wd = Workdir(tmp_path / "wd")
    saved = wd.save("query_kb", TEXT)
    expected = hashlib.sha256(TEXT.encode("utf-8")).hexdigest()
    assert saved.sha256 == expected and not saved.existed
    assert saved.bytes == len(TEXT.encode("utf-8"))
    assert Path(saved.path) == tmp_path / "wd" / f"query_kb-{expected}.txt"
    assert Path(saved.path).read_bytes() == TEXT.encode("utf-8")
    assert os.listdir(tmp_path / "wd") == [Path(saved.path).name]  # no temp file left behind


def test_identical_save_is_idempotent_and_does_not_rewrite(tmp_path: Path) -> None:
    wd = Workdir(tmp_path)
    first = wd.save("shell", TEXT)
    inode = os.stat(first.path).st_ino
    second = wd.save("shell", TEXT)
    assert second.existed and second.path == first.path and second.sha256 == first.sha256
    assert os.stat(second.path).st_ino == inode  # not replaced by a new file


def test_corrupt_file_under_the_name_is_rewritten(tmp_path: Path) -> None:
    """Decision: a file whose bytes do not hash to its name is corrupt, so save() heals it."""
    wd = Workdir(tmp_path)
    saved = wd.save("shell", TEXT)
    Path(saved.path).write_text("tampered", encoding="utf-8")
    again = wd.save("shell", TEXT)
    assert not again.existed
    assert wd.read(saved.sha256, "shell") == TEXT


def test_read_verifies_the_hash(tmp_path: Path) -> None:
    wd = Workdir(tmp_path)
    saved = wd.save("web_search", TEXT)
    assert wd.read(saved.sha256) == TEXT
    assert wd.read(saved.sha256, tool_name="web_search") == TEXT
    assert wd.read(saved.sha256, path=saved.path) == TEXT
    Path(saved.path).write_bytes(TEXT.replace("工具", "工作").encode("utf-8"))
    with pytest.raises(WorkdirIntegrityError, match="was modified"):
        wd.read(saved.sha256)


def test_read_missing_result(tmp_path: Path) -> None:
    wd = Workdir(tmp_path)
    sha = hashlib.sha256(b"never saved").hexdigest()
    with pytest.raises(WorkdirMissing):
        wd.read(sha)
    with pytest.raises(WorkdirMissing):
        wd.read(sha, tool_name="shell")
    assert issubclass(WorkdirMissing, WorkdirError)


def test_read_refuses_a_path_outside_the_root(tmp_path: Path) -> None:
    wd = Workdir(tmp_path / "wd")
    saved = wd.save("shell", TEXT)
    outside = tmp_path / Path(saved.path).name
    outside.write_text(TEXT, encoding="utf-8")
    with pytest.raises(WorkdirError, match="is not the file of"):
        wd.read(saved.sha256, path=outside)


def test_bad_sha256_is_rejected(tmp_path: Path) -> None:
    wd = Workdir(tmp_path)
    for bad in ("", "abc", "../" + "a" * 61, "A" * 64):
        with pytest.raises(ValueError):
            wd.path_for("shell", bad)
        with pytest.raises(ValueError):
            wd.read(bad)


@pytest.mark.parametrize(
    "name",
    ["../../etc/passwd", "/etc/passwd", "..", ".", "", "a\x00b", "a/b\\c", "x" * 500, "检索", "-rf", ".hidden", "~root"],
)
def test_tool_names_never_escape_the_root(tmp_path: Path, name: str) -> None:
    root = tmp_path / "wd"
    wd = Workdir(root)
    saved = wd.save(name, "payload for " + repr(name))
    path = Path(saved.path)
    assert path.parent == root and path.resolve().parent == root.resolve()
    assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}-[0-9a-f]{64}\.txt", path.name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wd"]  # nothing written beside the root
    assert wd.read(saved.sha256, tool_name=name) == "payload for " + repr(name)


def test_sanitize_tool_name() -> None:
    assert sanitize_tool_name("query_kb") == "query_kb"
    assert sanitize_tool_name("mcp.kb-v2") == "mcp.kb-v2"
    assert sanitize_tool_name("../../etc") == "_.._etc"
    assert sanitize_tool_name("") == "tool" and sanitize_tool_name("..") == "tool"
    assert len(sanitize_tool_name("y" * 1000)) == 64


def test_unwritable_root_fails_with_a_clear_workdir_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-regular-file"
    blocker.write_text("not a directory", encoding="utf-8")
    wd = Workdir(blocker / "sub")  # fails for root too: a file cannot hold a directory
    with pytest.raises(WorkdirError, match=r"cannot create workdir .*a-regular-file/sub"):
        wd.save("shell", TEXT)
    with pytest.raises(WorkdirError):
        Workdir(blocker).save("shell", TEXT)


def test_failed_replace_leaves_no_temp_file(tmp_path: Path) -> None:
    wd = Workdir(tmp_path)
    sha = hashlib.sha256(TEXT.encode("utf-8")).hexdigest()
    wd.path_for("shell", sha).mkdir()  # a directory squats the final name: os.replace fails
    with pytest.raises(WorkdirError, match="cannot write"):
        wd.save("shell", TEXT)
    assert [p.name for p in tmp_path.iterdir()] == [f"shell-{sha}.txt"]


def test_text_that_is_not_utf8_encodable_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WorkdirError, match="UTF-8"):
        Workdir(tmp_path).save("shell", "lone surrogate \ud800 here")
    assert list(tmp_path.iterdir()) == []


def test_a_scratch_workdir_writes_the_same_file_without_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A what-if's scratch Workdir (removed when the run ends) skips the fsyncs a kept one makes
    for every new file (the file and its directory); the file, its name and the atomic rename are
    the same."""
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    kept = Workdir(tmp_path / "kept").save("query_kb", TEXT)
    assert len(synced) == 2
    synced.clear()
    scratch = Workdir(tmp_path / "scratch", durable=False).save("query_kb", TEXT)
    assert synced == []
    assert Path(scratch.path).read_bytes() == Path(kept.path).read_bytes() == TEXT.encode("utf-8")
    assert (scratch.sha256, scratch.bytes, Path(scratch.path).name) == (kept.sha256, kept.bytes, Path(kept.path).name)
    assert os.listdir(tmp_path / "scratch") == [Path(scratch.path).name]
