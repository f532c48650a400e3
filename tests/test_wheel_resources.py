"""Every resource the code names is in the built wheel: the icons named in ``theme.icon(...)`` calls
anywhere in ``inspector_app``, the icons of every message role, meta kind, row marker and row kind
(``theme.icon_names()``), and the style sheet. The wheel is built from a copy of the source tree
(``pip wheel --no-deps``) into a temporary folder and read as a zip: an icon that exists only in the
checkout (a package-data pattern that misses it) or nowhere (a name with no file) fails here."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from xml.etree import ElementTree

import pytest

from engine.core.messages import ROLES

ROOT = Path(__file__).resolve().parents[1]


def values(node: ast.AST) -> set[str]:
    """The string literals an expression can evaluate to (both branches of ``a if test else b``,
    the operands of ``a or b``; never the literals of a condition)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return values(node.body) | values(node.orelse)
    if isinstance(node, ast.BoolOp):
        return set().union(*(values(v) for v in node.values))
    return set()


def icon_calls() -> set[str]:
    """Every name an ``icon(...)`` / ``theme.icon(...)`` call can be given as a literal
    (``theme.icon("summary" if … else "tool")`` names both)."""
    names: set[str] = set()
    for path in (ROOT / "inspector_app").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr == "icon" and isinstance(func.value, ast.Name) and func.value.id == "theme") or (
                isinstance(func, ast.Name) and func.id == "icon" and path.name == "theme.py"
            ):
                names |= values(node.args[0])
    return names


def named_icons() -> set[str]:
    from inspector_app import theme  # Qt is imported, no QApplication is needed

    mapped = set(theme.icon_names())  # a rename fails here rather than checking nothing
    roles = {theme.role_icon(r) for r in ROLES}  # every role has an icon
    assert mapped, "theme.icon_names() names no icon"
    return icon_calls() | mapped | roles


def test_the_code_names_icons_it_can_be_checked_against() -> None:
    names = icon_calls()
    assert {"warning", "database", "refresh", "compact", "summary", "back", "forward"} <= names, names  # the scan finds real calls


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The project's wheel, built from a copy of the tree (the checkout gets no build/ folder)."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("engine", "inspector_app", "resources"):
        shutil.copytree(ROOT / package, src / package, ignore=ignore)
    out = base / "dist"
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(src)], capture_output=True, text=True, timeout=600)
    if done.returncode != 0 and "No matching distribution found" in done.stderr:
        pytest.skip(f"no build backend can be installed here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = out.glob("*.whl")
    return zipfile.ZipFile(path)


def test_every_named_icon_and_the_style_sheet_are_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    files = set(wheel.namelist())
    assert "resources/inspector.qss" in files
    missing = sorted(n for n in named_icons() if f"resources/icons/{n}.svg" not in files)
    assert not missing, f"icons the code names but the wheel lacks: {missing}"
    for name in sorted(named_icons()):  # each one an SVG drawn in currentColor (the theme recolours it)
        svg = wheel.read(f"resources/icons/{name}.svg").decode("utf-8")
        root = ElementTree.fromstring(svg)
        assert root.tag.endswith("svg") and "currentColor" in svg, name


def test_every_icon_of_the_checkout_ships(wheel: zipfile.ZipFile) -> None:
    files = set(wheel.namelist())
    shipped = {p.name for p in (ROOT / "resources/icons").glob("*.svg") if f"resources/icons/{p.name}" in files}
    assert shipped == {p.name for p in (ROOT / "resources/icons").glob("*.svg")}
