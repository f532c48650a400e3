"""Real data breaks shapes: every parser either imports a mangled source (with warnings) or refuses it
with ImportFormatError; it never crashes with a TypeError / KeyError / AttributeError."""

from __future__ import annotations

import json
import random
import shutil

import pytest

from engine.importers import ImportFormatError, parse

from .helpers import FIXTURES
from .test_detect import CASES

TRIALS = int(__import__("os").environ.get("IMPORT_FUZZ_TRIALS", "60"))
JUNK = [None, 0, 1.5, True, "", "x", [], {}, [None], {"type": None}]


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


def _set(value, path, new):
    if not path:
        return new
    value[path[0]] = _set(value[path[0]], path[1:], new)
    return value


def _mutants(doc, rng, n):
    paths = list(_paths(doc))
    for _ in range(n):
        copy = json.loads(json.dumps(doc))
        yield _set(copy, rng.choice(paths), rng.choice(JUNK))


FILES = [(p, f) for p, f in CASES if p.is_file() and p.name != "base_state.json"]


@pytest.mark.parametrize(("path", "fmt"), FILES, ids=[f"{f}:{p.name}" for p, f in FILES])
def test_mangled_sources_never_crash(path, fmt, tmp_path):
    rng = random.Random(path.name)
    text = path.read_text()
    jsonl = path.suffix == ".jsonl"
    out = tmp_path / path.name
    for _ in range(TRIALS):
        if jsonl:
            lines = text.splitlines()
            i = rng.randrange(len(lines))
            try:
                doc = json.loads(lines[i])
            except ValueError:
                continue
            lines[i] = json.dumps(next(_mutants(doc, rng, 1)))
            out.write_text("\n".join(lines) + "\n")
        else:
            out.write_text(json.dumps(next(_mutants(json.loads(text), rng, 1))))
        try:
            sessions = parse(out, format=fmt)
        except ImportFormatError:
            continue
        for session in sessions:
            _check_types(session)


def _check_types(s):
    """What a writer relies on holds even for mangled input."""
    for name in ("source_session_id", "cwd", "model", "title", "system_prompt", "parent_session_id"):
        assert getattr(s, name) is None or isinstance(getattr(s, name), str), name
    for m in s.messages:
        assert isinstance(m.text, str) and isinstance(m.source_key, str) and m.source_key
        assert m.timestamp is None or isinstance(m.timestamp, str)
        assert m.model is None or isinstance(m.model, str)
        for c in m.tool_calls:
            assert isinstance(c.id, str) and c.id and isinstance(c.name, str) and isinstance(c.arguments, str)
        assert m.role != "tool" or isinstance(m.tool_call_id, str)
        assert m.tool_name is None or isinstance(m.tool_name, str)
    n = len(s.messages)
    for c in s.compactions:
        assert 0 <= c.replaced_start <= c.replaced_end <= n and 0 <= c.position <= n
        assert c.summary is None or isinstance(c.summary, str)
    for u in s.usage:
        assert 0 <= u.position < n and isinstance(u.prompt_tokens, int)


def test_a_mangled_openhands_v1_directory_never_crashes(tmp_path):
    src = FIXTURES / "openhands" / "v1" / "5e2f9a0c4b7d"
    rng = random.Random("v1")
    files = sorted(p.relative_to(src) for p in src.rglob("*.json"))
    for trial in range(TRIALS):
        root = tmp_path / f"t{trial}"
        shutil.copytree(src, root)
        target = root / rng.choice(files)
        try:
            doc = json.loads(target.read_text())
        except ValueError:
            continue
        target.write_text(json.dumps(next(_mutants(doc, rng, 1))))
        try:
            (s,) = parse(root, format="openhands")
        except ImportFormatError:
            continue
        _check_types(s)
        shutil.rmtree(root)
