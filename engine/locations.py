"""Where things are and how a database starts: the data directory, the default databases (the
demo, *My sessions*), a database's Workdir, and the compaction policy a store resolves (its stored
``policy`` setting, or a new database's default from the user's settings). :mod:`engine.service`
re-exports these names; :func:`engine.service.open_service` uses them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import platformdirs

from .core.config import Settings as UserSettings
from .core.errors import EngineError
from .core.policy import PolicySet
from .store import InvalidSetting, Store, normalize_url

__all__ = [
    "APP_NAME", "DEFAULT_CONTEXT_WINDOW", "ENV_DB", "ENV_WORKDIR", "POLICY_SETTING", "apply_default_policy", "data_dir",
    "default_database_url", "default_workdir", "load_policies", "sessions_database_url",
]

APP_NAME = "compaction-inspector"
ENV_WORKDIR = "COMPACTION_WORKDIR"
ENV_DB = "COMPACTION_DB"
#: the configured window when neither an override nor the known-model table knows the model
DEFAULT_CONTEXT_WINDOW = 128_000
POLICY_SETTING = "policy"


def data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def default_database_url() -> str:
    """``$COMPACTION_DB``, else the embedded demo database in the user's data directory."""
    return os.environ.get(ENV_DB) or str(data_dir() / "demo.db")


def sessions_database_url() -> str:
    """Where imported sessions go unless told otherwise (``compaction import`` without ``--db``,
    the inspector's File → Import… on the demo): ``$COMPACTION_DB``, else ``sessions.db`` in the
    user's data directory (created on first import), never the demo database."""
    return os.environ.get(ENV_DB) or str(data_dir() / "sessions.db")


def default_workdir(url: str) -> Path:
    """``$COMPACTION_WORKDIR``, else ``<db>.workdir`` beside a SQLite file, else the data directory."""
    env = os.environ.get(ENV_WORKDIR)
    if env:
        return Path(env)
    u = normalize_url(url)
    if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:":
        p = Path(u.database)
        return p.with_name(p.name + ".workdir")
    return data_dir() / "workdir"


def load_policies(store: Store, explicit: PolicySet | Mapping[str, Any] | None = None) -> PolicySet:
    """Explicit configuration, else the store-wide ``policy`` setting, else the defaults.

    A stored setting that is not a JSON object, or does not make a policy, raises
    :class:`engine.store.InvalidSetting` (``invalid_setting``) naming the key."""
    if isinstance(explicit, PolicySet):
        return explicit
    if explicit is not None:
        data = dict(explicit)
        data.setdefault("context_window", DEFAULT_CONTEXT_WINDOW)
        return PolicySet.from_mapping(data)
    data = dict(store.get_setting(POLICY_SETTING) or {})  # InvalidSetting for non-JSON / not an object
    data.setdefault("context_window", DEFAULT_CONTEXT_WINDOW)
    try:
        return PolicySet.from_mapping(data)
    except EngineError as exc:
        raise InvalidSetting(f"setting {POLICY_SETTING!r} does not make a policy ({exc.message}); set it again") from None


def apply_default_policy(store: Store) -> None:
    """A new database (no policy stored, no thread yet) takes the user's default policy
    (``policy.*`` in the settings file, issue #28). Best effort: an unreadable settings file leaves
    the engine's defaults."""
    try:
        default = UserSettings().default_policy()
    except EngineError:
        return
    if default and store.get_setting(POLICY_SETTING) is None and not store.list_threads(limit=1):
        store.put_setting(POLICY_SETTING, default)
