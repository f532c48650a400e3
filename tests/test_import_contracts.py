"""The import contracts in pyproject.toml hold on the tree and catch a planted violation of each.

Each case copies ``engine/``, ``inspector_app/`` and ``pyproject.toml`` to a temporary directory,
plants one bad import and runs ``lint-imports`` there (it analyses the packages found in its working
directory first), expecting exactly the named contract to break.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")

QT = "The engine never imports Qt or the GUI"
SQL = "SQL lives only in engine.store"
LAYERS = "Engine layers: each module imports only from the layers below it"
PUBLIC = "The inspector uses only the engine's public surface"
CYCLES = "No import cycles between sibling modules"
LOGIC = "The inspector's logic is plain Python"
ADAPTERS = "The adapters use only the engine's public surface"
COMPACTION = "Compaction layers: the compactor over plan, pruning, summaries, replay"
APPS = "Application layers: the CLI over the demo over the harness"
ALL = (QT, SQL, LAYERS, PUBLIC, CYCLES, LOGIC, ADAPTERS, COMPACTION, APPS)


def _lint(cwd: Path) -> tuple[int, str]:
    p = subprocess.run([str(LINT), "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def _broken(output: str) -> set[str]:
    return {name for name in ALL if f"{name} BROKEN" in output}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for pkg in ("engine", "inspector_app"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _append(path: Path, line: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(f"\n{line}\n")


def test_the_tree_keeps_every_contract() -> None:
    code, out = _lint(ROOT)
    assert code == 0, out
    for name in ALL:
        assert f"{name} KEPT" in out, out


PLANTED = [
    pytest.param({"engine/compaction/pruning.py": "import sqlalchemy"}, {SQL}, id="engine-module-imports-sqlalchemy"),
    pytest.param({"engine/compaction/summarizers/extractive.py": "import psycopg"}, {SQL}, id="nested-engine-module-imports-psycopg"),
    pytest.param({"inspector_app/models/threads.py": "import sqlite3"}, {SQL}, id="inspector-imports-sqlite3"),
    pytest.param({"inspector_app/models/threads.py": "import engine.store"}, {PUBLIC}, id="inspector-imports-engine-store"),
    pytest.param({"inspector_app/panels/detail/widget.py": "from engine.core import meter"}, {PUBLIC}, id="inspector-imports-engine-meter"),
    # an upward import is also a cycle (the compactor imports units; the service imports the store)
    # the plan and the pruning import the core: the compactor would reach them from below (contract 9 too)
    pytest.param({"engine/core/units.py": "from engine.compaction import compactor"}, {LAYERS, COMPACTION, CYCLES}, id="pure-core-imports-compactor"),
    pytest.param({"engine/store/__init__.py": "from engine import service"}, {LAYERS, CYCLES}, id="store-imports-service"),
    pytest.param({"engine/core/workdir.py": "from engine.apps import harness"}, {LAYERS, CYCLES}, id="pure-core-imports-harness"),
    pytest.param({"engine/brand_new.py": "X = 1"}, {LAYERS}, id="engine-module-outside-every-layer"),
    # the inspector's logic (the timeline core) imports engine.core.messages: Qt there would reach it indirectly too
    pytest.param({"engine/core/messages.py": "import PySide6"}, {QT, LOGIC}, id="engine-imports-qt"),
    pytest.param({"inspector_app/logic/timeline/pages.py": "import PySide6"}, {LOGIC}, id="timeline-core-imports-qt"),
    pytest.param({"inspector_app/logic/pressure_text.py": "from PySide6.QtCore import Qt"}, {LOGIC}, id="logic-imports-qt"),
    # the theme imports the logic (the theme names): the plant is a cycle as well
    pytest.param({"inspector_app/logic/whatif.py": "from inspector_app import theme"}, {LOGIC, CYCLES}, id="logic-imports-the-theme"),
    # the logic's Window interface is implemented by the window, never importing a panel (panels import the logic)
    pytest.param({"inspector_app/logic/window.py": "from inspector_app.panels import registry"}, {LOGIC, CYCLES}, id="logic-imports-a-panel"),
    pytest.param({"engine/adapters/core.py": "from engine.compaction import compactor"}, {ADAPTERS}, id="adapter-reaches-into-the-compactor"),
    # the plan decides without the compactor (the compactor imports the plan: a cycle as well)
    pytest.param({"engine/compaction/plan.py": "from engine.compaction import compactor"}, {COMPACTION, CYCLES}, id="plan-imports-the-compactor"),
    pytest.param({"engine/compaction/pruning.py": "from engine.compaction import plan"}, {COMPACTION}, id="pruning-imports-the-plan"),
    pytest.param({"engine/apps/harness/loop.py": "from engine.apps import cli"}, {APPS, CYCLES}, id="harness-imports-the-cli"),
    pytest.param(
        {"engine/apps/cli/output.py": "from engine.apps.cli import preview", "engine/apps/cli/preview.py": "from engine.apps.cli import output"},
        {CYCLES},
        id="sibling-import-cycle",
    ),
]


NEW_ON_PURPOSE = {"engine/brand_new.py"}  # the one plant that is a new file (a module outside every layer)


def test_every_plant_lands_in_a_file_that_exists() -> None:
    """A plant appended to a moved or deleted file would create a fresh module and test something else."""
    for case in PLANTED:
        plants = case.values[0]
        assert isinstance(plants, dict)
        for rel in plants:
            assert rel in NEW_ON_PURPOSE or (ROOT / rel).is_file(), f"{case.id}: {rel} does not exist"


@pytest.mark.parametrize("plants, expected", PLANTED)
def test_a_planted_violation_breaks_its_contract(tree: Path, plants: dict[str, str], expected: set[str]) -> None:
    for rel, line in plants.items():
        _append(tree / rel, line)
    code, out = _lint(tree)
    assert code != 0, out
    assert _broken(out) == expected, out
