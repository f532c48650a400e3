"""``compaction preview``: what the model would see of a tool output, with the original saved."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.apps.cli.preview import add_parser, run
from engine.core.meter import default_meter

count = default_meter().count_text
REPO = Path(__file__).resolve().parents[1]
BIG = "\n".join(f"{i:05d} build log: compiling module_{i}.py ok" for i in range(3000))


def invoke(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="compaction")
    sub = p.add_subparsers(dest="cmd")
    add_parser(sub)
    return run(p.parse_args(argv))


def test_over_limit_prints_replacement_and_saves_original(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "out.txt"
    src.write_text(BIG, encoding="utf-8")
    wd = tmp_path / "wd"
    rc = invoke(["preview", "--tool", "shell", "--workdir", str(wd), str(src)])
    out, err = capsys.readouterr()
    sha = hashlib.sha256(BIG.encode()).hexdigest()
    saved = wd / f"shell-{sha}.txt"
    assert rc == 0
    assert saved.read_text(encoding="utf-8") == BIG
    # one header line naming the saved file, whose name is the hash (said once since issue 25)
    assert out.startswith(f"[tool result offloaded: shell; full text: {saved}]\n") and out.count(sha) == 1
    assert count(out.rstrip("\n")) <= 600
    assert err.startswith(f"saved {saved}")


def test_limit_and_preview_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "out.txt"
    src.write_text(BIG, encoding="utf-8")
    rc = invoke(["preview", "--tool", "shell", "--limit", "5000", "--preview-tokens", "150",
                 "--workdir", str(tmp_path / "wd"), str(src)])
    out, _ = capsys.readouterr()
    assert rc == 0 and count(out.rstrip("\n")) <= 150 and "; full text: " in out


def test_at_or_under_limit_prints_unchanged_and_saves_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "small.txt"
    src.write_text(BIG, encoding="utf-8")
    wd = tmp_path / "wd"
    rc = invoke(["preview", "--tool", "shell", "--limit", str(count(BIG)), "--workdir", str(wd), str(src)])
    out, err = capsys.readouterr()
    assert rc == 0 and out == BIG
    assert "at or under the limit" in err and not wd.exists()


def test_unwritable_workdir_exits_1_without_preview(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "out.txt"
    src.write_text(BIG, encoding="utf-8")
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    rc = invoke(["preview", "--tool", "shell", "--workdir", str(blocker / "wd"), str(src)])
    out, err = capsys.readouterr()
    assert rc == 1 and out == ""
    assert err.startswith("error: workdir not writable") and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv_tail, message",
    [
        (["missing.txt"], "error: cannot read missing.txt"),
        (["--limit", "-1", "in.txt"], "error: --limit must be"),
        (["--preview-tokens", "0", "in.txt"], "error: --preview-tokens must be"),
        (["--preview-tokens", "20", "in.txt"], "error: preview budget of 20 tokens cannot hold"),
        (["latin1.txt"], "error: latin1.txt is not UTF-8 text"),
        (["--limit", "20", "in.txt"], "error: preview budget of 20 tokens cannot hold the replacement header (needs "
                                      "at least "),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str], argv_tail: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    Path("in.txt").write_text(BIG, encoding="utf-8")
    Path("latin1.txt").write_bytes("café".encode("latin-1"))
    rc = invoke(["preview", "--tool", "shell", "--workdir", "wd", *argv_tail])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.startswith(message) and err.count("\n") == 1
    assert not Path("wd").exists()  # bad input never touches the Workdir


def run_subprocess(args: list[str], stdin: bytes, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    code = (
        "import argparse, sys\n"
        "from engine.apps.cli.preview import add_parser, run\n"
        "p = argparse.ArgumentParser(prog='compaction'); sub = p.add_subparsers(dest='cmd'); add_parser(sub)\n"
        "sys.exit(run(p.parse_args(sys.argv[1:])))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "LANG": "C", "LC_ALL": "C"}
    return subprocess.run([sys.executable, "-c", code, *args], input=stdin, cwd=cwd, env=env,
                          capture_output=True, timeout=60)


def test_stdin_chinese_query_kb_through_a_subprocess(tmp_path: Path) -> None:
    payload = {
        "query": "如何轮换签名密钥",
        "results": [
            {"doc_id": f"文档-{i}", "title": f"密钥轮换指南 第{i}部分", "url": f"https://kb.example.cn/{i}",
             "score": 0.9, "content": "先生成新密钥，再逐步切换流量。" * 50,
             "metadata": {"_internal_path": "/srv/kb/host01/keys.md"}}
            for i in range(40)
        ],
    }
    data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    proc = run_subprocess(["preview", "--tool", "query_kb", "--workdir", "wd", "-"], data, tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode("utf-8")
    # compact record lines: every one of the 40 ids fits now (the JSON lines of before dropped some)
    assert "\n40 results; fields: " in out and "omitted_results: " not in out
    assert all(f"\n文档-{i} | " in out or f"\n文档-{i}\n" in out for i in range(40))
    assert "/srv/kb" not in out and count(out.rstrip("\n")) <= 600
    sha = hashlib.sha256(data).hexdigest()
    assert (tmp_path / "wd" / f"query_kb-{sha}.txt").read_bytes() == data


def test_unwritable_workdir_through_a_subprocess_has_no_traceback(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x", encoding="utf-8")
    proc = run_subprocess(["preview", "--tool", "shell", "--workdir", "file/wd"], BIG.encode(), tmp_path)
    err = proc.stderr.decode()
    assert proc.returncode == 1 and proc.stdout == b""
    assert err.startswith("error: ") and "Traceback" not in err and err.count("\n") == 1
