"""The Workdir: a content-addressed store for the full text of offloaded tool results.

A result is saved as ``<root>/<sanitized tool name>-<sha256>.txt`` (UTF-8). Writes are atomic (a
temporary file in the same directory, fsync, ``os.replace``, fsync of the directory) and
idempotent: an existing file whose bytes hash to its name counts as success. An existing file whose
bytes do NOT match its name is corrupt by definition (its name is the hash of what it must hold),
so :meth:`Workdir.save` rewrites it with the correct bytes. Every failure is a
:class:`WorkdirError`, so a caller can keep the original result (fail-closed). Reading verifies the
hash.

Tool names are reduced to ``[A-Za-z0-9_.-]``, capped at 64 characters, never start with ``.`` or
``-`` and fall back to ``tool`` when nothing is left: a name can never leave the root.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from engine.core.errors import EngineError

__all__ = [
    "SavedResult",
    "Workdir",
    "WorkdirError",
    "WorkdirIntegrityError",
    "WorkdirMissing",
    "sanitize_tool_name",
    "sha256_text",
]

MAX_TOOL_NAME_CHARS = 64
FALLBACK_TOOL_NAME = "tool"
SUFFIX = ".txt"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class WorkdirError(EngineError):
    """The Workdir cannot store or return a result (unwritable directory, disk error, bad content)."""

    code = "workdir_error"


class WorkdirMissing(WorkdirError):
    """No saved result with that hash."""

    code = "workdir_missing"


class WorkdirIntegrityError(WorkdirError):
    """A saved file's bytes do not hash to the SHA-256 it is stored under."""

    code = "workdir_integrity"


@dataclass(frozen=True, slots=True)
class SavedResult:
    """Where a result was saved. ``existed`` is True when an identical file was already there."""

    path: str
    sha256: str
    bytes: int
    existed: bool


def sanitize_tool_name(tool_name: str) -> str:
    """A file-name-safe form of ``tool_name`` that cannot contain a path separator or be ``.``/``..``."""
    safe = _UNSAFE.sub("_", tool_name)[:MAX_TOOL_NAME_CHARS].lstrip(".-")
    return safe or FALLBACK_TOOL_NAME


def _encode(content: str) -> bytes:
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise WorkdirError(f"result cannot be saved as UTF-8 ({exc.reason} at position {exc.start})") from exc


def sha256_text(content: str) -> str:
    """The SHA-256 (hex) of ``content`` as UTF-8: the name a result is saved under."""
    return hashlib.sha256(_encode(content)).hexdigest()


def _check_sha(sha256: str) -> str:
    if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
        raise ValueError(f"not a SHA-256 hex digest: {sha256!r}")
    return sha256


def _file_sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


class Workdir:
    """Content-addressed files under ``root`` (created on first save). ``durable=False`` is for a
    scratch Workdir removed when its run ends (a what-if copy): writes stay atomic but skip the two
    fsyncs, which cost a what-if of 100,000 messages about 2 s for files nobody keeps."""

    def __init__(self, root: str | os.PathLike[str], *, durable: bool = True) -> None:
        self.root = Path(os.path.abspath(os.fspath(root)))
        self.durable = durable

    def __repr__(self) -> str:
        return f"Workdir({str(self.root)!r})"

    def path_for(self, tool_name: str, sha256: str) -> Path:
        """The file a result of ``tool_name`` with ``sha256`` is saved as (always directly in root)."""
        return self.root / f"{sanitize_tool_name(tool_name)}-{_check_sha(sha256)}{SUFFIX}"

    def save(self, tool_name: str, content: str) -> SavedResult:
        """Write ``content`` in full (atomically) unless an identical file exists; any failure is a
        :class:`WorkdirError` and leaves no partial file under the final name."""
        data = _encode(content)
        sha = hashlib.sha256(data).hexdigest()
        path = self.path_for(tool_name, sha)
        try:
            if path.is_file() and path.stat().st_size == len(data) and _file_sha256(path) == sha:
                return SavedResult(path=str(path), sha256=sha, bytes=len(data), existed=True)
        except OSError as exc:
            raise WorkdirError(f"cannot check {path}: {_reason(exc)}") from exc
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkdirError(f"cannot create workdir {self.root}: {_reason(exc)}") from exc
        self._write_atomic(path, data)
        return SavedResult(path=str(path), sha256=sha, bytes=len(data), existed=False)

    def _write_atomic(self, path: Path, data: bytes) -> None:
        tmp: str | None = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=self.root)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                if self.durable:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
            tmp = None
            if self.durable:
                dir_fd = os.open(self.root, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
        except OSError as exc:
            raise WorkdirError(f"cannot write {path}: {_reason(exc)}") from exc
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass  # nothing was left behind, or the directory is gone

    def _locate(self, sha256: str, tool_name: str | None, path: str | os.PathLike[str] | None) -> Path:
        if path is not None:
            candidate = Path(os.path.abspath(os.fspath(path)))
            if candidate.parent != self.root or not candidate.name.endswith(f"-{sha256}{SUFFIX}"):
                raise WorkdirError(f"{candidate} is not the file of {sha256} in workdir {self.root}")
            return candidate
        if tool_name is not None:
            return self.path_for(tool_name, sha256)
        try:
            matches = sorted(self.root.glob(f"*-{sha256}{SUFFIX}"))
        except OSError as exc:
            raise WorkdirError(f"cannot list workdir {self.root}: {_reason(exc)}") from exc
        if not matches:
            raise WorkdirMissing(f"no saved result {sha256} in workdir {self.root}")
        return matches[0]

    def read(self, sha256: str, tool_name: str | None = None, path: str | os.PathLike[str] | None = None) -> str:
        """The saved text with ``sha256``, verified against its hash.

        Looked up by ``path`` (must be that hash's file directly in root), else by ``tool_name``,
        else by any tool name. :class:`WorkdirMissing` if absent, :class:`WorkdirIntegrityError` if
        the bytes do not match.
        """
        _check_sha(sha256)
        file = self._locate(sha256, tool_name, path)
        try:
            data = file.read_bytes()
        except FileNotFoundError as exc:
            raise WorkdirMissing(f"no saved result {sha256} at {file}") from exc
        except OSError as exc:
            raise WorkdirError(f"cannot read {file}: {_reason(exc)}") from exc
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise WorkdirIntegrityError(f"{file} was modified: its SHA-256 is {actual}, expected {sha256}")
        return data.decode("utf-8")
