"""The benchmark traces do not depend on what the process imported before generating them.

``benchmarks/traces.py`` draws its English text from standard-library docstrings. A package's
submodules become its attributes once anything imports them (``import logging.handlers`` makes
``logging.handlers`` a member of ``logging``), so before the fix a process that had imported
``logging.handlers`` (the adapter and importer tests, ``mcp``) drew from a pool of 94 docstrings instead
of 93 and generated another research/coding trace: research-100k's pressure replay then kept 61 % of
the identifiers after one compaction instead of 100 %. The engine gave the same result on the same trace
either way. Each generation runs in a fresh interpreter, since this process may have imported anything.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"

SCRIPT = (
    "import hashlib, importlib, sys\n"
    "for m in sys.argv[2:]: importlib.import_module(m)\n"
    "sys.path[:0] = [sys.argv[1]]\n"
    "import traces\n"
    "for family in ('research', 'coding'):\n"
    "    t = traces.generate(family, 10_000)\n"
    "    h = hashlib.sha256(repr([(m.role, m.content, m.tool_calls, m.tool_call_id) for m in t.messages]).encode()).hexdigest()\n"
    "    print(family, len(t.messages), h)\n"
)


def _generate(*imports: str) -> str:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(BENCH), *imports], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize("imports", [("logging.handlers",), ("logging.config", "email.mime.text", "json.tool")])
def test_a_trace_is_the_same_whatever_the_process_imported_first(imports):
    clean = _generate()
    assert clean.count("\n") == 2
    assert _generate(*imports) == clean
