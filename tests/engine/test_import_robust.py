"""Mangled transcripts never break an import: every mutant of every fixture either imports (the door
accepts everything the writer hands it, nothing dangles) or is refused with one ImportFormatError;
a second import of the same mutant writes nothing."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from engine.core.units import dangling_calls
from engine.importers import ImportFormatError
from engine.service import open_service

from .test_import import SOURCES

TRIALS = int(os.environ.get("IMPORT_FUZZ_TRIALS", "15"))
JUNK = [None, 0, -3, 1.5, True, "", "x", "==", [], {}, [None], {"type": None}, {"type": "image"}]
FILES = [(p, f) for p, f, _ in SOURCES if p.is_file()]


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


def _mutant(doc, rng):
    copy = json.loads(json.dumps(doc))
    return _set(copy, rng.choice(list(_paths(doc))), rng.choice(JUNK))


@pytest.mark.parametrize(("path", "fmt"), FILES, ids=[f"{f}:{p.name}" for p, f in FILES])
def test_mangled_sources_import_or_are_refused_in_one_line(path: Path, fmt: str, tmp_path: Path) -> None:
    rng = random.Random(f"import:{path.name}")
    text = path.read_text()
    svc = open_service(f"sqlite:///{tmp_path / 'fuzz.db'}", workdir=tmp_path / "wd", create=True)
    try:
        for trial in range(TRIALS):
            out = tmp_path / f"t{trial}" / path.name
            out.parent.mkdir()
            if path.suffix == ".jsonl":
                lines = text.splitlines()
                for _ in range(3):
                    i = rng.randrange(len(lines))
                    try:
                        lines[i] = json.dumps(_mutant(json.loads(lines[i]), rng))
                    except ValueError:
                        continue
                out.write_text("\n".join(lines) + "\n")
            else:
                out.write_text(json.dumps(_mutant(json.loads(text), rng)))
            thread = f"fuzz-{trial}"
            try:
                reports = svc.imports.import_file(out, format=fmt, thread=thread)
            except ImportFormatError as exc:
                assert "\n" not in exc.message
                continue
            for r in reports:
                stored = [s.message for s in svc.reads.messages_page(r.thread, limit=10_000)]
                assert len(stored) == r.messages and dangling_calls(stored) == []
                svc.compaction.status(r.thread)
            assert all(r.messages == 0 for r in svc.imports.import_file(out, format=fmt, thread=thread))
    finally:
        svc.close()
