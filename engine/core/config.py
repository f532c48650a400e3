"""The user's settings, shared by the inspector and the ``compaction`` command (issue #28).

Where they live, and why there:

* **Non-secret settings** go to ``settings.toml`` in the user's config directory
  (``platformdirs.user_config_dir("compaction")``: ``~/.config/compaction`` on Linux,
  ``~/Library/Application Support/compaction`` on macOS, ``%LOCALAPPDATA%\\compaction`` on Windows;
  ``$COMPACTION_CONFIG_DIR`` overrides it). TOML because people edit it by hand; read with the
  standard ``tomllib``, written with ``tomli-w`` (a maintained writer, so no hand-rolled quoting).
  Writes are atomic (a temporary file beside it, then ``os.replace``).
* **The API key** goes to the OS keyring through the ``keyring`` package (Secret Service on Linux,
  the macOS Keychain, the Windows Credential Locker): never to the settings file. Where no keyring
  backend exists, :func:`store_api_key` says so and keeps the key in this process only
  (:data:`_SESSION_KEYS`), never on disk.
* **Environment variables override** the file and the keyring (``COMPACTION_SUMMARY_BASE_URL``,
  ``_MODEL``, ``_API_KEY``, ``_TIMEOUT``): every :class:`Resolved` value says which source won.

Plain Python (no Qt, no SQL, no HTTP). The summarizer built from these settings and the connection
test are in :mod:`engine.compaction.summarizers.factory`.
"""

from __future__ import annotations

import math
import os
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping

import platformdirs
import tomli_w

from .errors import EngineError

__all__ = [
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_CONFIG_DIR",
    "ENV_MODEL",
    "ENV_TIMEOUT",
    "KEYS",
    "KeyStatus",
    "Resolved",
    "Settings",
    "SettingError",
    "SummarizerSettings",
    "config_dir",
    "delete_api_key",
    "keyring_status",
    "read_api_key",
    "store_api_key",
]

APP_NAME = "compaction"
ENV_CONFIG_DIR = "COMPACTION_CONFIG_DIR"
ENV_BASE_URL = "COMPACTION_SUMMARY_BASE_URL"
ENV_MODEL = "COMPACTION_SUMMARY_MODEL"
ENV_API_KEY = "COMPACTION_SUMMARY_API_KEY"
ENV_TIMEOUT = "COMPACTION_SUMMARY_TIMEOUT"
FILE_NAME = "settings.toml"
#: the keyring entry of the summarizer's API key (service, user name)
KEYRING_SERVICE = "compaction-inspector"
KEYRING_USER = "summarizer-api-key"
API_KEY = "summarizer.api_key"

Source = Literal["default", "file", "env", "keyring", "session"]


class SettingError(EngineError):
    """A setting name that does not exist, or a value it does not take."""

    code = "invalid_setting"

    def __init__(self, message: str) -> None:
        super().__init__(message, code="invalid_setting")


@dataclass(frozen=True, slots=True)
class Key:
    """One setting: its dotted name, its kind, its default, the environment variable that overrides it."""

    name: str
    kind: Literal["choice", "text", "url", "seconds", "ratio", "tokens", "secret"]
    default: Any
    help: str
    env: str | None = None
    choices: tuple[str, ...] = ()
    optional: bool = False  # an empty value means "not set" (the engine's own default)


#: every setting, in the order ``compaction config list`` shows them
KEYS: dict[str, Key] = {k.name: k for k in (
    Key("summarizer.kind", "choice", "extractive", "which summarizer writes summaries: the offline extractive one, or an OpenAI-compatible endpoint",
        choices=("extractive", "openai")),
    Key("summarizer.base_url", "url", "", "the endpoint's base URL (…/v1), e.g. https://api.openai.com/v1 or http://127.0.0.1:11434/v1", env=ENV_BASE_URL),
    Key("summarizer.model", "text", "", "the model the endpoint serves, e.g. gpt-4o-mini or qwen2.5:7b", env=ENV_MODEL),
    Key("summarizer.timeout", "seconds", 60.0, "seconds one request may take", env=ENV_TIMEOUT),
    Key(API_KEY, "secret", None, "the endpoint's API key: kept in the OS keyring, never in the settings file", env=ENV_API_KEY),
    Key("policy.context_window", "tokens", None, "context window of a new database's default policy (empty: the engine's default)", optional=True),
    Key("policy.threshold_ratio", "ratio", None, "compaction threshold (share of the window) of new databases and imports", optional=True),
    Key("policy.retained_tail_ratio", "ratio", None, "share of the window kept verbatim after a summary, for new databases and imports", optional=True),
    Key("policy.summary_max_tokens", "tokens", None, "most tokens a summary may take, for new databases and imports", optional=True),
    Key("inspector.poll_interval", "seconds", 3.0, "how often the inspector looks for new messages (seconds)"),
    Key("operator.name", "text", "", "your display name: a manual compaction records it (the event's operator)"),
)}


@dataclass(frozen=True, slots=True)
class Resolved:
    """One setting's value in force and where it came from (``default``, ``file``, ``env``,
    ``keyring``, ``session``); ``env`` names the variable when one won. For the API key ``value``
    is the key itself (for the summarizer) and :meth:`shown` never prints it."""

    name: str
    value: Any
    source: Source
    env: str | None = None
    overridden_file_value: Any = None

    def shown(self) -> str:
        """The value as a person may see it (the API key as "set"/"not set", never its text)."""
        key = KEYS[self.name]
        if key.kind == "secret":
            return "not set" if not self.value else f"set ({self.where()})"
        if self.value is None or self.value == "":
            return ""
        if isinstance(self.value, float) and self.value.is_integer():
            return f"{self.value:g}"
        return str(self.value)

    def where(self) -> str:
        """The source in words: ``environment (COMPACTION_SUMMARY_MODEL)``, ``settings file``, …"""
        return {
            "default": "default",
            "file": "settings file",
            "env": f"environment ({self.env})",
            "keyring": "OS keyring",
            "session": "this session only",
        }[self.source]

    def as_json(self) -> dict[str, Any]:
        secret = KEYS[self.name].kind == "secret"
        return {"name": self.name, "value": (bool(self.value) if secret else self.value), "source": self.source, "env": self.env}


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """The directory of ``settings.toml``: ``$COMPACTION_CONFIG_DIR``, else the user's config directory."""
    env = os.environ if env is None else env
    override = env.get(ENV_CONFIG_DIR, "").strip()
    return Path(override) if override else Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))


# == values ========================================================================================
def coerce(name: str, value: Any) -> Any:
    """``value`` (a string from the command line or a field, or already typed) as setting ``name``
    takes it; :class:`SettingError` says why not. An empty string clears an optional setting."""
    key = KEYS.get(name)
    if key is None:
        raise SettingError(f"no setting named {name!r}; the settings are: {', '.join(KEYS)}")
    text = value.strip() if isinstance(value, str) else value
    if key.kind == "secret":
        if not isinstance(text, str):
            raise SettingError("the API key must be text")
        return text
    if text == "" or text is None:
        if key.optional:
            return None
        if key.kind in ("text", "url"):
            return ""
        raise SettingError(f"{name} needs a value")
    if key.kind == "choice":
        if text not in key.choices:
            raise SettingError(f"{name} must be one of {', '.join(key.choices)}, not {text!r}")
        return text
    if key.kind == "url":
        if not isinstance(text, str) or not text.lower().startswith(("http://", "https://")):
            raise SettingError(f"{name} must be an http:// or https:// URL, not {text!r}")
        return text.rstrip("/")
    if key.kind == "text":
        return str(text)
    number: float
    try:
        number = float(text) if not isinstance(text, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if key.kind == "seconds":
        if not (math.isfinite(number) and number > 0):
            raise SettingError(f"{name} must be a positive number of seconds, not {value!r}")
        return number
    if key.kind == "ratio":
        if not (math.isfinite(number) and 0 < number <= 1):
            raise SettingError(f"{name} must be a number in (0, 1], not {value!r}")
        return number
    if not (math.isfinite(number) and number.is_integer() and number >= 1):
        raise SettingError(f"{name} must be a whole number of tokens >= 1, not {value!r}")
    return int(number)


# == the keyring ===================================================================================
#: keys kept for this process only, when no keyring backend exists (never written anywhere)
_SESSION_KEYS: dict[str, str] = {}


@dataclass(frozen=True, slots=True)
class KeyStatus:
    """Whether the OS keyring can hold the key: ``available``, the backend's name, and in words."""

    available: bool
    backend: str
    message: str


def keyring_status() -> KeyStatus:
    """Which keyring backend ``keyring`` chose, and whether it can store anything."""
    try:
        import keyring
        from keyring.backends import fail
    except Exception as exc:  # noqa: BLE001 - no keyring package at all is the same answer
        return KeyStatus(False, "none", f"no keyring: {exc}")
    backend = keyring.get_keyring()
    name = f"{type(backend).__module__}.{type(backend).__name__}"
    if isinstance(backend, fail.Keyring):
        return KeyStatus(
            False, name,
            "No OS keyring is available (no Secret Service, Keychain or Credential Locker found): "
            "the API key is kept for this session only and is never written to disk; set "
            f"{ENV_API_KEY} in the environment to use a key in every session.",
        )
    return KeyStatus(True, name, f"The API key is kept in the OS keyring ({type(backend).__name__}).")


def store_api_key(key: str | None) -> tuple[Literal["keyring", "session"], str]:
    """Put the API key in the OS keyring (``None`` or empty: remove it). Without a keyring backend,
    keep it for this process only. Returns where it went and a sentence saying so."""
    if not key:
        delete_api_key()
        return "keyring", "The API key was removed."
    status = keyring_status()
    if status.available:
        import keyring
        from keyring.errors import KeyringError

        try:
            keyring.set_password(KEYRING_SERVICE, KEYRING_USER, key)
        except KeyringError as exc:
            _SESSION_KEYS[KEYRING_USER] = key
            return "session", f"The OS keyring refused the key ({type(exc).__name__}): it is kept for this session only, never on disk."
        _SESSION_KEYS.pop(KEYRING_USER, None)
        return "keyring", status.message
    _SESSION_KEYS[KEYRING_USER] = key
    return "session", status.message


def read_api_key() -> tuple[str | None, Source]:
    """The stored API key and where it is (``keyring`` or ``session``); ``(None, "default")`` when none."""
    if KEYRING_USER in _SESSION_KEYS:
        return _SESSION_KEYS[KEYRING_USER], "session"
    if keyring_status().available:
        import keyring
        from keyring.errors import KeyringError

        try:
            found = keyring.get_password(KEYRING_SERVICE, KEYRING_USER)
        except KeyringError:
            found = None
        if found:
            return found, "keyring"
    return None, "default"


def delete_api_key() -> None:
    _SESSION_KEYS.pop(KEYRING_USER, None)
    if keyring_status().available:
        import keyring
        from keyring.errors import KeyringError, PasswordDeleteError

        try:
            keyring.delete_password(KEYRING_SERVICE, KEYRING_USER)
        except (PasswordDeleteError, KeyringError):
            pass


# == the settings ==================================================================================
@dataclass(frozen=True, slots=True)
class SummarizerSettings:
    """What the summarizer factory needs, resolved (env over file over default)."""

    kind: str
    base_url: str
    model: str
    timeout: float
    api_key: str | None
    sources: Mapping[str, Resolved]


class Settings:
    """The settings file of ``directory`` (default :func:`config_dir`) seen through ``env``."""

    def __init__(self, directory: str | os.PathLike[str] | None = None, *, env: Mapping[str, str] | None = None) -> None:
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.directory = Path(directory) if directory is not None else config_dir(self.env)

    @property
    def path(self) -> Path:
        return self.directory / FILE_NAME

    # -- the file -----------------------------------------------------------------------------
    def file_values(self) -> dict[str, Any]:
        """The settings the file holds, by dotted name (unknown names and a stray ``api_key`` are
        ignored: a key is never read from a file)."""
        try:
            data = tomllib.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise SettingError(f"the settings file {self.path} cannot be read ({exc}); fix or delete it") from None
        out: dict[str, Any] = {}
        for section, table in data.items():
            if not isinstance(table, dict):
                continue
            for field, value in table.items():
                name = f"{section}.{field}"
                if name in KEYS and KEYS[name].kind != "secret":
                    try:
                        out[name] = coerce(name, value)
                    except SettingError:
                        continue  # a hand-edited value the setting does not take: its default
        return out

    def _write(self, values: Mapping[str, Any]) -> None:
        tables: dict[str, dict[str, Any]] = {}
        for name, value in values.items():
            if value is None or KEYS[name].kind == "secret":
                continue
            section, field = name.split(".", 1)
            tables.setdefault(section, {})[field] = value
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".settings-", suffix=".toml", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(b"# compaction settings (the API key is in the OS keyring, never here)\n")
                tomli_w.dump(tables, f)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # -- reading ------------------------------------------------------------------------------
    def get(self, name: str, *, _file: Mapping[str, Any] | None = None) -> Resolved:
        key = KEYS.get(name)
        if key is None:
            raise SettingError(f"no setting named {name!r}; the settings are: {', '.join(KEYS)}")
        file = self.file_values() if _file is None else _file
        if key.kind == "secret":
            env_key = self.env.get(ENV_API_KEY, "")
            if env_key:
                return Resolved(name, env_key, "env", ENV_API_KEY)
            stored, where = read_api_key()
            return Resolved(name, stored, where)
        env_raw = self.env.get(key.env, "").strip() if key.env else ""
        if env_raw:
            try:
                value = coerce(name, env_raw)
            except SettingError as exc:
                raise SettingError(f"{key.env}: {exc.message}") from None
            return Resolved(name, value, "env", key.env, overridden_file_value=file.get(name))
        if name == "summarizer.kind" and any(self.env.get(v, "").strip() for v in (ENV_BASE_URL, ENV_MODEL)):
            which = ENV_BASE_URL if self.env.get(ENV_BASE_URL, "").strip() else ENV_MODEL
            return Resolved(name, "openai", "env", which, overridden_file_value=file.get(name))
        if name in file:
            return Resolved(name, file[name], "file")
        return Resolved(name, key.default, "default")

    def list(self) -> list[Resolved]:
        file = self.file_values()
        return [self.get(name, _file=file) for name in KEYS]

    def value(self, name: str) -> Any:
        return self.get(name).value

    # -- writing ------------------------------------------------------------------------------
    def set(self, name: str, value: object) -> tuple[Resolved, str]:
        """Set ``name`` to ``value`` (coerced) in the file (the API key: in the keyring). Returns
        the value now in force and a sentence about where it went (says when an environment
        variable still overrides it)."""
        coerced = coerce(name, value)
        key = KEYS[name]
        if key.kind == "secret":
            _where, said = store_api_key(coerced or None)
        else:
            values = self.file_values()
            if coerced is None or coerced == "":
                values.pop(name, None)
            else:
                values[name] = coerced
            self._write(values)
            said = f"Saved to {self.path}."
        now = self.get(name)
        if now.source == "env":
            said += f" {now.env} is set in the environment and overrides it."
        return now, said

    def unset(self, name: str) -> Resolved:
        """Remove ``name`` from the file (the API key: from the keyring and this session); the
        value in force afterwards (the default, or the environment's)."""
        if name not in KEYS:
            raise SettingError(f"no setting named {name!r}; the settings are: {', '.join(KEYS)}")
        if KEYS[name].kind == "secret":
            delete_api_key()
        else:
            values = self.file_values()
            if values.pop(name, None) is not None or self.path.exists():
                self._write(values)
        return self.get(name)

    def set_many(self, values: Mapping[str, Any]) -> None:
        """Several non-secret settings in one write (the Preferences dialog's OK)."""
        current = self.file_values()
        for name, value in values.items():
            coerced = coerce(name, value)
            if KEYS[name].kind == "secret":
                raise SettingError("the API key is set with store_api_key, never written with the other settings")
            if coerced is None or coerced == "":
                current.pop(name, None)
            else:
                current[name] = coerced
        self._write(current)

    # -- what the engine needs ----------------------------------------------------------------
    def summarizer(self) -> SummarizerSettings:
        file = self.file_values()
        got = {n: self.get(n, _file=file) for n in ("summarizer.kind", "summarizer.base_url", "summarizer.model", "summarizer.timeout", API_KEY)}
        return SummarizerSettings(
            kind=got["summarizer.kind"].value,
            base_url=got["summarizer.base_url"].value or "",
            model=got["summarizer.model"].value or "",
            timeout=float(got["summarizer.timeout"].value),
            api_key=got[API_KEY].value or None,
            sources=got,
        )

    def default_policy(self) -> dict[str, Any]:
        """The ``policy.*`` settings that are set, as the stored policy mapping of a database
        (``{"context_window": …, "default": {CompactionPolicy fields}}``; empty when none is set)."""
        file = self.file_values()
        out: dict[str, Any] = {}
        default: dict[str, Any] = {}
        for name in KEYS:
            if name.startswith("policy."):
                value = self.get(name, _file=file).value
                field = name.removeprefix("policy.")
                if value is None:
                    continue
                if field == "context_window":
                    out[field] = value
                else:
                    default[field] = value
        if default:
            out["default"] = default
        return out
