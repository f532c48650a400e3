"""The user's settings (issue #28): the TOML file round-trip, environment variables winning (and
saying so), the API key in the OS keyring and nowhere on disk, no keyring backend, Test connection
against the loopback simulator, and who wrote each summary (event, history, export).

Keyring backends are real ``keyring.backend.KeyringBackend`` subclasses (tests/keyring_backends.py):
``MemoryKeyring`` in-process, ``FileKeyring`` for a ``compaction`` subprocess (its store is a JSON
file in a directory of its own, which is not scanned: it stands for the OS keyring's own store)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any, Iterator

import keyring
import pytest
from keyring.backends import fail

from engine.apps.cli import main as cli
from engine.apps.harness.simulator import ProviderSimulator, Reply
from engine.compaction.summarizers import ExtractiveSummarizer, OpenAICompatSummarizer, check_connection, make_summarizer
from engine.compaction.summarizers.protocol import SummarizerError
from engine.core import config
from engine.core.config import API_KEY, ENV_API_KEY, ENV_BASE_URL, ENV_MODEL, SettingError, Settings
from engine.core.events import written_by
from engine.service import open_service
from tests.engine.conftest import POLICY, finished_turns, new_thread
from tests.keyring_backends import MemoryKeyring

KEY = "sk-test-PREFS-9f8e7d6c5b4a"


def summarizing(lead: str = "The support agent answered every question about the deployment.") -> Any:
    """A simulator fallback that writes a summary keeping the current request verbatim (as a model must)."""
    def reply(request: Any) -> Reply:
        prompt = request.body["messages"][-1]["content"]
        found = re.search(r"<current_request>\n(.*?)\n</current_request>", prompt, re.S)
        return Reply(f"{lead} {'Facts kept. ' * 5}\n\nCurrent user request:\n{found.group(1) if found else ''}")
    return reply
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_keyring() -> Iterator[None]:
    before = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    try:
        yield
    finally:
        keyring.set_keyring(before)


def files_holding(text: str, *dirs: Path) -> list[Path]:
    """Every file under ``dirs`` whose bytes hold ``text`` (UTF-8)."""
    needle = text.encode()
    return [p for d in dirs if d.exists() for p in d.rglob("*") if p.is_file() and needle in p.read_bytes()]


# -- the file ---------------------------------------------------------------------------------------
def test_settings_round_trip_through_the_toml_file(cfg: Path) -> None:
    s = Settings()
    s.set_many({"summarizer.kind": "openai", "summarizer.base_url": "http://127.0.0.1:11434/v1/", "summarizer.model": "qwen2.5:7b",
                "summarizer.timeout": "45", "policy.threshold_ratio": "0.7", "policy.context_window": "32000",
                "inspector.poll_interval": 1.5, "operator.name": "Dana"})
    data = tomllib.loads((cfg / "settings.toml").read_text(encoding="utf-8"))
    assert data == {"summarizer": {"kind": "openai", "base_url": "http://127.0.0.1:11434/v1", "model": "qwen2.5:7b", "timeout": 45.0},
                    "policy": {"threshold_ratio": 0.7, "context_window": 32000}, "inspector": {"poll_interval": 1.5},
                    "operator": {"name": "Dana"}}
    again = Settings()  # a new reader (another process would see the same)
    got = {r.name: (r.value, r.source) for r in again.list()}
    assert got["summarizer.model"] == ("qwen2.5:7b", "file") and got["summarizer.timeout"] == (45.0, "file")
    assert got["policy.context_window"] == (32000, "file") and got["operator.name"] == ("Dana", "file")
    assert got["summarizer.api_key"] == (None, "default") and got["policy.summary_max_tokens"] == (None, "default")
    assert again.default_policy() == {"context_window": 32000, "default": {"threshold_ratio": 0.7}}
    assert again.unset("summarizer.model").source == "default" and "model" not in (cfg / "settings.toml").read_text()
    with pytest.raises(SettingError, match="positive number of seconds"):
        again.set("summarizer.timeout", "-1")
    with pytest.raises(SettingError, match="no setting named"):
        again.set("summarizer.colour", "red")


def test_cli_config_set_get_list_round_trip(cfg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["config", "set", "summarizer.model", "gpt-4o-mini"]) == 0
    assert cli(["config", "set", "policy.summary_max_tokens", "2048"]) == 0
    capsys.readouterr()
    assert cli(["config", "get", "summarizer.model", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["value"], got["source"], got["env"]) == ("gpt-4o-mini", "file", None)
    assert cli(["config", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["file"] == str(cfg / "settings.toml")
    rows = {r["name"]: r for r in listed["settings"]}
    assert rows["policy.summary_max_tokens"]["value"] == 2048 and rows["summarizer.kind"]["source"] == "default"
    assert cli(["config", "set", "summarizer.kind", "gpt"]) == 2  # not a choice: one line, exit 2
    assert "must be one of extractive, openai" in capsys.readouterr().err


def test_an_environment_variable_wins_and_is_shown_as_winning(cfg: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    Settings().set_many({"summarizer.kind": "openai", "summarizer.base_url": "http://file.example/v1", "summarizer.model": "file-model"})
    monkeypatch.setenv(ENV_MODEL, "env-model")
    r = Settings().get("summarizer.model")
    assert (r.value, r.source, r.env, r.overridden_file_value) == ("env-model", "env", ENV_MODEL, "file-model")
    assert r.where() == "environment (COMPACTION_SUMMARY_MODEL)"
    summ = make_summarizer()
    assert isinstance(summ, OpenAICompatSummarizer) and summ.model == "env-model"  # the environment's value is the one used
    assert cli(["config", "list"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("summarizer.model"))
    assert "env-model" in line and "(environment (COMPACTION_SUMMARY_MODEL))" in line
    # setting the file's value says the environment still overrides it
    assert cli(["config", "set", "summarizer.model", "other"]) == 0
    assert "COMPACTION_SUMMARY_MODEL is set in the environment and overrides it" in capsys.readouterr().out
    # the base URL in the environment alone chooses the endpoint over a file that says extractive
    Settings().set("summarizer.kind", "extractive")
    monkeypatch.setenv(ENV_BASE_URL, "http://env.example/v1")
    kind = Settings().get("summarizer.kind")
    assert (kind.value, kind.source, kind.env) == ("openai", "env", ENV_BASE_URL)


def test_the_extractive_summarizer_by_default_and_a_half_configured_endpoint_says_what_is_missing(cfg: Path) -> None:
    assert isinstance(make_summarizer(), ExtractiveSummarizer)
    Settings().set_many({"summarizer.kind": "openai", "summarizer.base_url": "http://127.0.0.1:9/v1"})
    with pytest.raises(SummarizerError, match=r"summarizer.model \(or COMPACTION_SUMMARY_MODEL\) is not set, summarizer.base_url \(settings file\) is"):
        make_summarizer()


# -- the key: in the keyring, nowhere on disk -------------------------------------------------------
def _compact_with_the_configured_endpoint(tmp_path: Path, sim: ProviderSimulator) -> tuple[Path, Path, str]:
    """A thread compacted by hand through a service whose summarizer comes from the settings."""
    db = tmp_path / "data" / "prefs.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    svc = open_service(f"sqlite:///{db}", workdir=tmp_path / "data" / "wd", create=True)
    try:
        svc.steering.set_policy(POLICY)
        key = new_thread(svc, "t")
        finished_turns(svc, key, 12)
        svc.compaction.compact(key)
        export = svc.reads.export_history(key, "json") + svc.reads.export_history(key, "md")
    finally:
        svc.close()
    return db, tmp_path / "data", export


def test_a_key_set_through_the_cli_is_in_the_keyring_and_nowhere_on_disk(
    cfg: Path, tmp_path: Path, memory_keyring: MemoryKeyring, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO(KEY + "\n"))
    assert cli(["config", "set", API_KEY]) == 0
    out = capsys.readouterr().out
    assert "set (OS keyring)" in out and KEY not in out
    assert memory_keyring.passwords == {(config.KEYRING_SERVICE, config.KEYRING_USER): KEY}
    assert cli(["config", "set", API_KEY, KEY]) == 2  # never from the command line
    assert KEY not in capsys.readouterr().err
    with ProviderSimulator(context_window=1_000_000, fallback=summarizing()) as sim:
        for k, v in (("summarizer.kind", "openai"), ("summarizer.base_url", sim.base_url), ("summarizer.model", "summ-model")):
            assert cli(["config", "set", k, v]) == 0
        db, data, export = _compact_with_the_configured_endpoint(tmp_path, sim)
        assert sim.requests[0].headers.get("authorization") == f"Bearer {KEY}"  # the keyring's key was used
    assert KEY not in export
    assert files_holding(KEY, cfg, data) == []  # config dir, data dir (database, WAL, Workdir)
    assert KEY.encode() not in db.read_bytes()
    capsys.readouterr()
    assert cli(["config", "get", API_KEY, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"name": API_KEY, "value": True, "source": "keyring", "env": None,
                                                   "shown": "set (OS keyring)", "where": "OS keyring"}


def test_a_key_set_by_a_compaction_subprocess_is_in_its_keyring_backend_and_nowhere_on_disk(cfg: Path, tmp_path: Path) -> None:
    """The real command in its own process, its keyring named by PYTHON_KEYRING_BACKEND; the
    backend's store is a file in a directory of its own (the OS keyring's store), never scanned."""
    store = tmp_path / "os-keyring" / "store.json"
    store.parent.mkdir()
    env = dict(os.environ, PYTHON_KEYRING_BACKEND="tests.keyring_backends.FileKeyring", COMPACTION_TEST_KEYRING_FILE=str(store),
               COMPACTION_CONFIG_DIR=str(cfg), PYTHONPATH=str(ROOT))
    env.pop(ENV_API_KEY, None)
    done = subprocess.run([sys.executable, "-m", "engine.apps.cli", "config", "set", API_KEY], input=KEY + "\n", env=env,
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert KEY not in done.stdout + done.stderr
    assert json.loads(store.read_text()) == {f"{config.KEYRING_SERVICE}\x00{config.KEYRING_USER}": KEY}
    shown = subprocess.run([sys.executable, "-m", "engine.apps.cli", "config", "list", "--json"], env=env, capture_output=True, text=True,
                           cwd=tmp_path, timeout=60)
    row = next(r for r in json.loads(shown.stdout)["settings"] if r["name"] == API_KEY)
    assert row["source"] == "keyring" and row["value"] is True and KEY not in shown.stdout
    assert files_holding(KEY, cfg, tmp_path / "data") == []
    assert [p for p in tmp_path.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()] == [store]


def test_no_keyring_backend_gives_a_clear_message_and_no_file(cfg: Path, tmp_path: Path, no_keyring: None,
                                                              monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO(KEY + "\n"))
    assert cli(["config", "set", API_KEY]) == 1  # a key for one command's session would be gone at once
    err = capsys.readouterr().err
    assert "No OS keyring is available" in err and "Nothing was stored" in err and KEY not in err
    assert not cfg.exists() or files_holding(KEY, cfg) == []
    # in a long-running process (the inspector) the key is kept for the session only
    where, said = config.store_api_key(KEY)
    assert where == "session" and "this session only" in said and "never written to disk" in said
    assert config.read_api_key() == (KEY, "session")
    assert Settings().get(API_KEY).shown() == "set (this session only)"
    with ProviderSimulator(context_window=1_000_000, fallback=summarizing()) as sim:
        Settings().set_many({"summarizer.kind": "openai", "summarizer.base_url": sim.base_url, "summarizer.model": "summ-model"})
        db, data, export = _compact_with_the_configured_endpoint(tmp_path, sim)
        assert sim.requests[0].headers.get("authorization") == f"Bearer {KEY}"
    assert KEY not in export and KEY.encode() not in db.read_bytes()
    assert files_holding(KEY, cfg, data, tmp_path) == []  # the whole tmp tree: the key is in memory only


# -- Test connection --------------------------------------------------------------------------------
def test_test_connection_against_the_loopback_simulator() -> None:
    with ProviderSimulator(context_window=1_000_000, model="served-model") as sim:
        port = sim.port
        sim.script([Reply("ok")])
        ok = check_connection(sim.base_url, "served-model", api_key=KEY, timeout=5)
        assert ok.ok and ok.model == "served-model" and ok.latency_ms is not None and ok.latency_ms > 0
        assert ok.message.startswith(f"Connected to 127.0.0.1:{sim.port}: model served-model answered in ")
        body = sim.requests[0].body
        assert body["max_tokens"] == 1 and len(body["messages"]) == 1  # one tiny request
        # 401: the key refused, in words, the key itself masked even when the endpoint echoes it
        sim.script([Reply.error(401, {"error": {"message": f"Incorrect API key provided: {KEY}", "type": "invalid_request_error", "code": "invalid_api_key"}})])
        bad = check_connection(sim.base_url, "served-model", api_key=KEY, timeout=5)
        assert not bad.ok and bad.error_code == "AUTH_FAILED" and bad.status == 401
        assert "refused the API key" in bad.message and KEY not in bad.message and "***" in bad.message
        # timeout: no answer within the timeout
        sim.script([Reply("late", delay=2.0)])
        slow = check_connection(sim.base_url, "served-model", timeout=0.5)
        assert not slow.ok and slow.error_code == "TIMEOUT" and "no answer within the timeout" in slow.message
        # wrong model: the endpoint does not serve it
        sim.script([Reply.error(404, {"error": {"message": "The model `gpt-9` does not exist or you do not have access to it.",
                                                "type": "invalid_request_error", "code": "model_not_found"}})])
        wrong = check_connection(sim.base_url, "gpt-9", timeout=5)
        assert not wrong.ok and wrong.status == 404 and "does not serve model 'gpt-9'" in wrong.message
    # nothing listening
    gone = check_connection(f"http://127.0.0.1:{port}/v1", "m", timeout=2)
    assert not gone.ok and gone.error_code == "CONNECTION_ERROR" and "cannot reach the endpoint" in gone.message


def test_cli_config_test_reports_in_words(cfg: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ProviderSimulator(context_window=1_000_000) as sim:
        Settings().set_many({"summarizer.kind": "openai", "summarizer.base_url": sim.base_url, "summarizer.model": "m1"})
        sim.script([Reply("ok")])
        assert cli(["config", "test", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["ok"] is True
        sim.script([Reply.error(401, {"error": {"message": "bad key", "code": "invalid_api_key"}})])
        assert cli(["config", "test"]) == 1
        assert "refused the API key" in capsys.readouterr().err


# -- who wrote each summary -------------------------------------------------------------------------
def test_every_summary_records_who_wrote_it_never_the_key(cfg: Path, tmp_path: Path, memory_keyring: MemoryKeyring) -> None:
    config.store_api_key(KEY)
    with ProviderSimulator(context_window=1_000_000, model="qwen2.5-7b-instruct", fallback=summarizing("The agent answered every question about the rollout.")) as sim:
        Settings().set_many({"summarizer.kind": "openai", "summarizer.base_url": sim.base_url, "summarizer.model": "qwen2.5-7b-instruct",
                             "operator.name": "Dana"})
        db = tmp_path / "w.db"
        svc = open_service(f"sqlite:///{db}", workdir=tmp_path / "wd", create=True)
        try:
            svc.steering.set_policy(POLICY)
            key = new_thread(svc, "t")
            finished_turns(svc, key, 12)
            sim.script([Reply("I'm sorry, I cannot help with that.")])  # a model summary that fails: rejected, nothing written
            with pytest.raises(Exception) as info:
                svc.compaction.compact(key)
            assert getattr(info.value, "code", None) == "summary_rejected"
            rejected = [e for e in svc.reads.events(key) if e.kind == "summary_rejected"][-1].data
            assert rejected["summarizer"] == "openai-compatible:qwen2.5-7b-instruct" and rejected["summarizer_host"] == f"127.0.0.1:{sim.port}"
            assert svc.reads.compaction_state(key).generation == 0
            # the extractive summarizer for this one compaction
            done = svc.compaction.compact(key, summarizer="extractive")
            assert done.status == "completed"
            first = [e for e in svc.reads.events(key) if e.kind == "summary"][-1].data
            assert first["summarizer"] == "extractive" and "summarizer_host" not in first and first["operator"] == "Dana"
            assert written_by(first) == "extractive summarizer (offline)"
            assert isinstance(svc.summarizer, OpenAICompatSummarizer)  # the configured one stays for later compactions
            finished_turns(svc, key, 12)
            svc.compaction.compact(key)
            second = [e for e in svc.reads.events(key) if e.kind == "summary"][-1].data
            assert second["summarizer_host"] == f"127.0.0.1:{sim.port}" and second["usage"]["model"] == "qwen2.5-7b-instruct"
            assert written_by(second) == f"model qwen2.5-7b-instruct at 127.0.0.1:{sim.port}"
            diff = svc.reads.compaction_diff(key)
            assert diff.written_by == written_by(second)
            entries = svc.reads.compaction_history(key)
            assert [e.written_by for e in entries if e.kind != "prune"][-2:] == ["extractive summarizer (offline)", written_by(second)]
            md, js = svc.reads.export_history(key, "md"), svc.reads.export_history(key, "json")
            assert f"- Written by: model qwen2.5-7b-instruct at 127.0.0.1:{sim.port}" in md
            assert [c["written_by"] for c in json.loads(js)["compactions"]][-2:] == ["extractive summarizer (offline)", written_by(second)]
            assert all(KEY not in json.dumps(e.data) for e in svc.reads.events(key))
            assert KEY not in md + js
        finally:
            svc.close()
    assert KEY.encode() not in db.read_bytes()


def test_new_databases_take_the_default_policy_and_whatif_the_configured_summarizer(cfg: Path, tmp_path: Path) -> None:
    from engine.whatif.settings import default_summarizer_spec

    assert default_summarizer_spec() == "extractive"
    Settings().set_many({"policy.threshold_ratio": 0.6, "policy.context_window": 50_000})
    svc = open_service(f"sqlite:///{tmp_path / 'new.db'}", workdir=tmp_path / "wd", create=True)
    try:
        resolved = svc.steps.policy_for(None, None)
        assert resolved.policy.threshold_ratio == 0.6 and resolved.context_window == 50_000
    finally:
        svc.close()
    Settings().set_many({"summarizer.kind": "openai", "summarizer.base_url": "http://127.0.0.1:9/v1", "summarizer.model": "m"})
    assert default_summarizer_spec() == "openai:http://127.0.0.1:9/v1#m"
    assert re.fullmatch(r"openai:.*#m", default_summarizer_spec())
