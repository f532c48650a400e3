"""opencode: the storage folder (session, message and part files) with a session and its sub-agent:
steps as model requests, tool parts as calls and results (completed, error, still running), a
synthetic user turn, opencode's compaction (a compaction part answered by a summary message) and a
prune pass (tool outputs marked compacted) as recorded compactions, a half-written part file;
the older layout; idempotent re-import through the service (SQLite and PostgreSQL), re-import after
the session grew, the files left untouched."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from engine.importers import MISSING_RESULT, detect_format, parse

from .helpers import FIXTURES
from .service_helpers import service, stored

ROOT = FIXTURES / "opencode" / "storage"
PROJ = "7d1e5c0a9b2f4e6d8c3a1b0f2e4d6c8a9b1c3d5e"
SA, SB = "ses_9a3f1c2b0001Kq7RmT2vXb9LpW", "ses_9a3f1c2b0f00Hs4NcY8dQe1ZaU"
INFO = ROOT / "session" / PROJ / f"{SA}.json"
KEY, SUBKEY = f"opencode:{SA}", f"opencode:{SA}/{SB}"


@pytest.mark.parametrize("path", [ROOT, ROOT.parent, INFO, ROOT / "message" / SA,
                                  next((ROOT / "message" / SA).glob("msg_*.json"))])
def test_detected_from_the_storage_or_its_files(path: Path):
    assert detect_format(path) == "opencode"


def test_a_session_file_is_that_session_the_storage_is_every_session():
    assert [s.source_session_id for s in parse(INFO)] == [SA]
    assert [(s.source_session_id, s.parent_session_id) for s in parse(ROOT)] == [(SA, None), (SB, SA)]
    msg = next((ROOT / "message" / SB).glob("msg_*.json"))
    assert [s.source_session_id for s in parse(msg)] == [SB]


def test_steps_calls_results_and_repairs():
    (s,) = parse(INFO)
    assert [(m.role, len(m.tool_calls), m.tool_name, m.is_error, m.meta_kind, m.repair) for m in s.messages] == [
        ("user", 0, None, False, None, None),
        ("assistant", 1, None, False, None, None),  # step 1: reasoning + read
        ("tool", 0, "read", False, None, None),
        ("assistant", 1, None, False, None, None),  # step 2: text + edit
        ("tool", 0, "edit", False, None, None),
        ("assistant", 1, None, False, None, None),  # step 3: bash, failed
        ("tool", 0, "bash", True, None, None),
        ("assistant", 0, None, False, None, None),  # step 4: the answer
        ("user", 0, None, False, None, None),
        ("assistant", 1, None, False, None, None),
        ("tool", 0, "write", False, None, None),
        ("assistant", 1, None, False, None, None),
        ("tool", 0, "bash", False, None, None),
        ("assistant", 0, None, False, None, None),
        ("user", 0, None, False, "synthetic", None),  # "Continue if you have next steps", written by opencode
        ("assistant", 1, None, False, None, None),  # aborted while its bash call was running
        ("tool", 0, "bash", False, None, MISSING_RESULT),
    ]
    assert s.tool_call_count == 6
    assert s.messages[1].reasoning[0].text == "Read src/client.ts to see fetchJson()."
    assert json.loads(s.messages[5].tool_calls[0].arguments)["command"] == "npx tsc --noEmit"
    assert s.messages[6].text.startswith("Error: src/client.ts(2,27)")
    assert s.messages[15].details["error"] == "MessageAbortedError"
    assert [m.source_key for m in s.messages[1:4]] == [
        "msg_09a3f1c2b003Kq7RmT2vXb9LpW", "msg_09a3f1c2b003Kq7RmT2vXb9LpW:toolu_01Read", "msg_09a3f1c2b003Kq7RmT2vXb9LpW#1"]
    assert (s.title, s.cwd, s.model) == ("Retry with backoff in fetchJson", "/home/dev/webclient", "claude-sonnet-4-5")
    # one usage record per finished step: prompt = input + cache read + cache write
    assert [(u.position, u.prompt_tokens, u.completion_tokens, u.cache_read_tokens) for u in s.usage] == [
        (1, 9012, 140, None), (3, 9410, 420, 9100), (5, 9780, 90, 9500), (7, 10050, 610, 9700),
        (9, 10720, 380, 10300), (11, 11000, 60, 10700), (13, 11260, 90, 11000)]


def test_compaction_and_prune_are_recorded_compactions():
    (s,) = parse(INFO)
    prune, comp = s.compactions  # in time order: the prune pass ran before the compaction
    assert not any("## Summary" in m.text for m in s.messages)  # the summary is not a message
    assert (comp.kind, comp.trigger, comp.position, comp.replaced_start, comp.replaced_end) == ("summary", "auto", 14, 0, 14)
    assert comp.summary.startswith("## Summary\n- Task: retry with exponential backoff")
    assert comp.tokens_before == 11260 + 90  # the last response's context before it
    assert comp.details["summary_output_tokens"] == 310
    assert (prune.kind, prune.trigger, prune.replaced_start, prune.replaced_end) == ("prune", "auto", 2, 11)
    assert prune.forgotten_ids == ("toolu_01Read", "toolu_04Write") and prune.position == comp.position
    assert prune.summary == 'opencode cleared the output of 2 tool calls: from then on each was sent as "[Old tool result content cleared]"'
    assert dict(prune.details) == {"cleared_results": 2, "replaced_by": "[Old tool result content cleared]"}
    assert s.messages[2].text.startswith("<file>")  # the file keeps the output the prune cleared from the requests


def test_a_half_written_part_is_named_and_skipped():
    (_, sub) = parse(ROOT)
    assert len(sub.messages) == 4 and len(sub.usage) == 2
    (w,) = sub.warnings
    assert w.reason.endswith("not a part (unreadable JSON or no type); skipped")


def test_the_older_layout(tmp_path: Path):
    old = tmp_path / "storage"
    (old / "session" / "info").mkdir(parents=True)
    shutil.copy(INFO, old / "session" / "info" / INFO.name)
    shutil.copytree(ROOT / "message" / SA, old / "session" / "message" / SA)
    for mp in (ROOT / "message" / SA).glob("msg_*.json"):
        shutil.copytree(ROOT / "part" / mp.stem, old / "session" / "part" / SA / mp.stem)
    assert detect_format(old) == "opencode"
    (s,) = parse(old)
    (new,) = parse(INFO)
    assert [m.source_key for m in s.messages] == [m.source_key for m in new.messages] and len(s.compactions) == 2


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p).encode() + p.read_bytes() + str(p.stat().st_mtime_ns).encode())
    return h.hexdigest()


def test_import_and_reimport_leave_the_storage_untouched(url: str, tmp_path: Path):
    before = _digest(ROOT)
    with service(url, tmp_path) as svc:
        reports = svc.imports.import_file(ROOT)
        assert [(r.thread, r.messages, r.tool_calls, r.compactions, r.requests) for r in reports] == [
            (KEY, 17, 6, 2, 7), (SUBKEY, 4, 1, 0, 2)]
        again = svc.imports.import_file(INFO)
        assert [(r.thread, r.messages, r.compactions, r.requests, r.already_stored) for r in again] == [(KEY, 0, 0, 0, 17)]
        kinds = sorted((c.kind, c.trigger, c.tokens_before) for c in svc.reads.source_compactions(KEY))
        assert kinds == [("prune", "auto", None), ("summary", "auto", 11350)]
        assert [m.role for m in stored(svc, SUBKEY)] == ["user", "assistant", "tool", "assistant"]
    assert _digest(ROOT) == before


def test_reimport_after_the_session_grew(tmp_path: Path):
    """The equivalent of --follow for opencode's storage (a file per message and part): the re-import
    adds the new messages, requests and the compaction, nothing twice."""
    root = tmp_path / "storage"
    shutil.copytree(ROOT, root)
    later = sorted((root / "message" / SA).glob("msg_*.json"))[4:]  # from the compaction request on
    held = tmp_path / "held"
    held.mkdir()
    for mp in later:
        mp.rename(held / mp.name)
    info = root / "session" / PROJ / f"{SA}.json"
    with service(f"sqlite:///{tmp_path / 'g.db'}", tmp_path) as svc:
        (r1,) = svc.imports.import_file(info)
        assert (r1.messages, r1.compactions, r1.requests) == (14, 1, 7)  # the prune is already marked
        for mp in later:
            (held / mp.name).rename(root / "message" / SA / mp.name)
        (r2,) = svc.imports.import_file(info)
        assert (r2.messages, r2.compactions, r2.requests, r2.already_stored) == (3, 1, 0, 14)
        assert len(stored(svc, KEY)) == 17 and len(svc.reads.source_compactions(KEY)) == 2


def test_default_location_lists_sessions_and_follow_maps_message_and_part_files(tmp_path: Path):
    from engine import discovery

    storage = tmp_path / ".local/share/opencode/storage"
    shutil.copytree(ROOT, storage)
    (storage / "session" / "share").mkdir()
    (storage / "session" / "share" / f"{SA}.json").write_text('{"id": "' + SA + '", "url": "https://opncd.ai/s/x"}')
    (storage / "session_diff").mkdir()
    (storage / "session_diff" / f"{SA}.json").write_text("[]")
    found = sorted((d.tool, Path(d.path).name, d.project) for d in discovery.discover(home=tmp_path))
    assert found == [("opencode", f"{SA}.json", "/home/dev/webclient"), ("opencode", f"{SB}.json", "/home/dev/webclient")]
    info = storage / "session" / PROJ / f"{SB}.json"
    locs = discovery.default_locations(tmp_path)
    msg = next((storage / "message" / SB).glob("msg_*.json"))
    part = next((storage / "part" / msg.stem).glob("prt_*.json"))
    assert discovery.session_for(msg, locs) == (info, "opencode")
    assert discovery.session_for(part, locs) == (info, "opencode")


def test_compaction_import_takes_the_storage_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from engine.apps import cli

    assert cli.main(["import", "--db", str(tmp_path / "o.db"), "--json", str(ROOT)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["thread"], r["messages"], r["compactions"], r["parent_thread"]) for r in out["imported"]] == [
        (KEY, 17, 2, None), (SUBKEY, 4, 0, KEY)]


def _database(path: Path) -> Path:
    """An ``opencode.db`` laid out as opencode's Drizzle schema (session / message / part, each row's
    JSON in ``data`` without its ids), holding the storage fixture's sessions."""
    import sqlite3

    ddl = [
        "CREATE TABLE `project` (`id` text PRIMARY KEY, `worktree` text NOT NULL, `vcs` text, `name` text, "
        "`time_created` integer NOT NULL, `time_updated` integer NOT NULL)",
        "CREATE TABLE `session` (`id` text PRIMARY KEY, `project_id` text NOT NULL, `parent_id` text, `slug` text NOT NULL, "
        "`directory` text NOT NULL, `title` text NOT NULL, `version` text NOT NULL, `share_url` text, `summary_additions` integer, "
        "`summary_deletions` integer, `summary_files` integer, `summary_diffs` text, `revert` text, `permission` text, "
        "`time_created` integer NOT NULL, `time_updated` integer NOT NULL, `time_compacting` integer, `time_archived` integer)",
        "CREATE TABLE `message` (`id` text PRIMARY KEY, `session_id` text NOT NULL, `time_created` integer NOT NULL, "
        "`time_updated` integer NOT NULL, `data` text NOT NULL)",
        "CREATE TABLE `part` (`id` text PRIMARY KEY, `message_id` text NOT NULL, `session_id` text NOT NULL, "
        "`time_created` integer NOT NULL, `time_updated` integer NOT NULL, `data` text NOT NULL)",
    ]
    con = sqlite3.connect(path)
    for d in ddl:
        con.execute(d)
    for sp in sorted((ROOT / "session").glob("*/ses_*.json")):
        s = json.loads(sp.read_text())
        con.execute("INSERT INTO session VALUES (?,?,?,?,?,?,?,NULL,NULL,NULL,NULL,NULL,NULL,NULL,?,?,NULL,NULL)",
                    (s["id"], s["projectID"], s.get("parentID"), s["id"][-8:], s["directory"], s["title"], s["version"],
                     s["time"]["created"], s["time"]["updated"]))
        for mp in sorted((ROOT / "message" / s["id"]).glob("msg_*.json")):
            m = json.loads(mp.read_text())
            data = {k: v for k, v in m.items() if k not in ("id", "sessionID")}
            con.execute("INSERT INTO message VALUES (?,?,?,?,?)", (m["id"], s["id"], m["time"]["created"], m["time"]["created"], json.dumps(data)))
            for pp in sorted((ROOT / "part" / m["id"]).glob("prt_*.json")):
                try:
                    p = json.loads(pp.read_text())
                except ValueError:
                    con.execute("INSERT INTO part VALUES (?,?,?,?,?,?)", (pp.stem, m["id"], s["id"], 0, 0, "{\"type\": \"te"))
                    continue
                data = {k: v for k, v in p.items() if k not in ("id", "sessionID", "messageID")}
                con.execute("INSERT INTO part VALUES (?,?,?,?,?,?)", (p["id"], m["id"], s["id"], 0, 0, json.dumps(data)))
    con.commit()
    con.close()
    return path


def test_the_newer_sqlite_database_reads_as_the_files_do_and_is_left_untouched(tmp_path: Path):
    db = _database(tmp_path / "opencode.db")
    assert detect_format(db) == "opencode"
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    with service(f"sqlite:///{tmp_path / 'in.db'}", tmp_path) as svc:
        reports = svc.imports.import_file(db)
        assert [(r.thread, r.messages, r.tool_calls, r.compactions, r.requests) for r in reports] == [
            (KEY, 17, 6, 2, 7), (SUBKEY, 4, 1, 0, 2)]
        assert any("part prt_09a3f1c2b033Kq7RmT2vXb9LpW: its data is not a JSON object; skipped" in w for w in reports[1].warnings)
        assert [(r.messages, r.already_stored) for r in svc.imports.import_file(db)] == [(0, 17), (0, 4)]
        files = [m.content for m in stored(svc, KEY)]
    with service(f"sqlite:///{tmp_path / 'files.db'}", tmp_path) as svc:
        svc.imports.import_file(ROOT)
        assert [m.content for m in stored(svc, KEY)] == files  # the same thread from the files and from the database
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before and not list(tmp_path.glob("opencode.db-*"))


def test_the_database_is_found_in_its_default_location(tmp_path: Path):
    from engine import discovery

    (tmp_path / ".local/share/opencode").mkdir(parents=True)
    db = _database(tmp_path / ".local/share/opencode/opencode.db")
    assert [(d.tool, Path(d.path)) for d in discovery.discover(home=tmp_path)] == [("opencode", db)]


def test_an_older_summary_message_without_a_compaction_part(tmp_path: Path):
    root = tmp_path / "storage"
    shutil.copytree(ROOT, root)
    for mp in (root / "message" / SA).glob("msg_*.json"):
        parts = [json.loads(p.read_text()) for p in (root / "part" / mp.stem).glob("prt_*.json")]
        if any(p.get("type") == "compaction" for p in parts):
            shutil.rmtree(root / "part" / mp.stem)
            mp.unlink()  # the compaction request: older versions did not write one
    (s,) = parse(root / "session" / PROJ / f"{SA}.json")
    comp = next(c for c in s.compactions if c.kind == "summary")
    assert (comp.trigger, comp.replaced_start, comp.replaced_end) == (None, 0, 14)
    assert comp.summary.startswith("## Summary") and not any("## Summary" in m.text for m in s.messages)
