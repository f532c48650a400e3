"""Screenshots of issue #28 for docs/screenshots, made by the app itself (``compaction-inspector
--screenshot``) against the loopback provider simulator:

* ``preferences-test-ok-1100x760.png``: Edit → Preferences… after a successful Test connection;
* ``summary-card-model-1100x760.png``: the summary card of a manual compaction (``--compact
  --summary-card``) written by the configured model, naming it and its endpoint's host;
* ``preferences-test-failed-1100x760.png``: the model and a (wrong) key set in the environment,
  shown read-only, and a Test connection the endpoint refuses (HTTP 401, the echoed key masked).

``python -m tests.gui.shoot_issue28 OUT_DIR``: builds the demo database in a temporary directory;
the settings of each picture go to a settings directory of their own (``COMPACTION_CONFIG_DIR``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from engine.apps.harness.simulator import ProviderSimulator, Reply

APP = [sys.executable, "-m", "inspector_app.app"]
THREAD = "coding-lock-test-failure"


def summarize(request: Any) -> Reply:
    """A model that writes a summary keeping the current request verbatim (``ok`` to Test connection)."""
    if request.body.get("max_tokens") == 1:
        return Reply("ok")
    found = re.search(r"<current_request>\n(.*?)\n</current_request>", request.body["messages"][-1]["content"], re.S)
    return Reply("The user and the agent fixed the flaky lock test: SQLite write transactions now begin IMMEDIATE, "
                 "the test waits on the lock instead of failing, and both backends pass.\n\nCurrent user request:\n"
                 + (found.group(1) if found else ""))


def refuse(_request: Any) -> Reply:
    return Reply.error(401, {"error": {"message": "Incorrect API key provided: sk-wrong-key-for-the-screenshot. You can find your API key "
                                       "at https://platform.example/account/api-keys.", "type": "invalid_request_error", "code": "invalid_api_key"}})


def configure(cfg: Path, url: str, model: str) -> None:
    env = dict(os.environ, COMPACTION_CONFIG_DIR=str(cfg))
    for k, v in (("summarizer.kind", "openai"), ("summarizer.base_url", url), ("summarizer.model", model), ("operator.name", "Dana (support)")):
        subprocess.run([sys.executable, "-m", "engine.apps.cli", "config", "set", k, v], env=env, check=True, stdout=subprocess.DEVNULL)


def shoot(db: Path, cfg: Path, out: Path, extra: list[str], env_extra: dict[str, str] | None = None) -> None:
    env = dict(os.environ, COMPACTION_CONFIG_DIR=str(cfg), QT_QPA_PLATFORM="offscreen", **(env_extra or {}))
    subprocess.run(APP + ["--db", str(db), "--thread", THREAD, "--size", "1100x760", *extra, "--screenshot", str(out)],
                   env=env, check=True, stderr=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    out = Path((argv if argv is not None else sys.argv[1:])[0])
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "demo.db"
        subprocess.run([sys.executable, "-m", "engine.apps.cli", "demo", "--db", str(db)], check=True, stdout=subprocess.DEVNULL)
        with ProviderSimulator(context_window=1_000_000, fallback=summarize, model="qwen2.5-7b-instruct") as good:
            configure(Path(tmp) / "good", good.base_url, "qwen2.5-7b-instruct")
            shoot(db, Path(tmp) / "good", out / "preferences-test-ok-1100x760.png", ["--preferences", "test"])
            shoot(db, Path(tmp) / "good", out / "summary-card-model-1100x760.png", ["--compact", "--summary-card"])
        with ProviderSimulator(context_window=1_000_000, fallback=refuse) as bad:
            configure(Path(tmp) / "bad", bad.base_url, "gpt-4o-mini")
            shoot(db, Path(tmp) / "bad", out / "preferences-test-failed-1100x760.png", ["--preferences", "test"],
                  {"COMPACTION_SUMMARY_MODEL": "gpt-4o-mini", "COMPACTION_SUMMARY_API_KEY": "sk-wrong-key-for-the-screenshot"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
