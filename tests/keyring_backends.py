"""Real ``keyring`` backends for the settings tests (issue #28): subclasses of
``keyring.backend.KeyringBackend``, installed with ``keyring.set_keyring(...)`` in-process or named
by ``PYTHON_KEYRING_BACKEND=tests.keyring_backends.FileKeyring`` for a ``compaction`` subprocess.

:class:`MemoryKeyring` keeps passwords in a dict of this process. :class:`FileKeyring` keeps them in
the JSON file ``$COMPACTION_TEST_KEYRING_FILE``, which the tests place in a directory of its own,
outside the config directory, the data directory and the database they scan for the key: it
stands for the OS's own keyring store (the Secret Service's database, the Keychain), which is not
the application's file either."""

from __future__ import annotations

import json
import os
from pathlib import Path

from jaraco.classes.properties import classproperty
from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError


class MemoryKeyring(KeyringBackend):
    @classproperty
    def priority(cls) -> float:  # noqa: N805
        # not viable for keyring's own discovery (importing this module must not change the
        # backend other tests get): only installed on purpose, with keyring.set_keyring(...)
        raise RuntimeError("installed only with keyring.set_keyring")

    def __init__(self) -> None:
        super().__init__()
        self.passwords: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.passwords.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.passwords[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        if self.passwords.pop((service, username), None) is None:
            raise PasswordDeleteError("no such password")


class FileKeyring(KeyringBackend):
    @classproperty
    def priority(cls) -> float:  # noqa: N805
        if "COMPACTION_TEST_KEYRING_FILE" not in os.environ:  # discovery in a process that did not ask for it
            raise RuntimeError("COMPACTION_TEST_KEYRING_FILE is not set")
        return 1

    @property
    def path(self) -> Path:
        return Path(os.environ["COMPACTION_TEST_KEYRING_FILE"])

    def _load(self) -> dict[str, str]:
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}

    def get_password(self, service: str, username: str) -> str | None:
        return self._load().get(f"{service}\x00{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        data = self._load()
        data[f"{service}\x00{username}"] = password
        self.path.write_text(json.dumps(data), encoding="utf-8")

    def delete_password(self, service: str, username: str) -> None:
        data = self._load()
        if data.pop(f"{service}\x00{username}", None) is None:
            raise PasswordDeleteError("no such password")
        self.path.write_text(json.dumps(data), encoding="utf-8")
