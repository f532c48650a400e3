"""What every ``compaction`` command shares: exit codes and the JSON writer (no command imports
the package that registers it, so there is no import cycle)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, is_dataclass
from datetime import datetime
from typing import Any

__all__ = ["EXIT_BUSY", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "emit_json", "jsonable"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BUSY = 0, 1, 2, 3


def jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {k: jsonable(v) for k, v in asdict(value).items()}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): jsonable(v) for k, v in dict(value).items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def emit_json(data: Any) -> None:
    json.dump(jsonable(data), sys.stdout, ensure_ascii=False, indent=2)
    sys.stdout.write("\n")
