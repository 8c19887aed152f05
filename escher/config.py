"""Configuration: which backend, with which options (`resolve`, `Config`).

Precedence, highest first: arguments to `escher.init()`; the environment (`ESCHER_BACKEND`,
`ESCHER_<BACKEND>_<OPTION>`, `ESCHER_CONFIG`); the first `escher.toml`, or `pyproject.toml`
with a `[tool.escher]` table, found from the working directory upwards; the in-memory default.
Options from all levels are merged for the chosen backend, and `Config.origins` records where
each one came from, so that a value of the wrong type is reported with its file and key (or
environment variable, or argument) when the backend is built (see
`escher.backends.check_options`: options are typed by the backend's constructor).
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from escher.backends import ALIASES, canonical_name, get_entry, known_backends
from escher.core.errors import ConfigError, UnknownBackendError, did_you_mean

DEFAULT_BACKEND = "memory"
_OTHER_TABLES = frozenset({"verify"})


@dataclass(frozen=True)
class Config:
    """A resolved configuration.

    Attributes:
        backend: The backend's registry name.
        options: Keyword options for that backend.
        sources: Where each piece came from, for `escher backends` and error messages.
        tables: Every table of the config file (e.g. "verify" settings).
        origins: Option name -> where its value came from: ``"<file>: [memory] nodes"``,
            ``"environment variable ESCHER_MEMORY_NODES"`` or ``"argument nodes"``.
    """

    backend: str
    options: dict[str, Any] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    tables: Mapping[str, Any] = field(default_factory=dict)
    origins: Mapping[str, str] = field(default_factory=dict)


def find_config_file(start: Path | None = None) -> tuple[Path, dict[str, Any]] | None:
    """The nearest escher.toml / pyproject.toml [tool.escher] and its escher table."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / "escher.toml"
        if candidate.is_file():
            return candidate, _read_toml(candidate)
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file():
            table = _read_toml(pyproject).get("tool", {}).get("escher")
            if isinstance(table, dict):
                return pyproject, table
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}.") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}.") from None


def _env_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _file_table(env: Mapping[str, str], cwd: Path | None) -> tuple[Path | None, dict[str, Any]]:
    """The config file in force and its escher table (empty when there is none)."""
    if env.get("ESCHER_CONFIG"):
        path = Path(env["ESCHER_CONFIG"])
        if not path.is_file():
            raise ConfigError(f"ESCHER_CONFIG points to {path}, which is not a file.")
        data = _read_toml(path)
        table = data.get("tool", {}).get("escher", data) if path.name == "pyproject.toml" else data
        return path, table
    found = find_config_file(cwd)
    return (found[0], found[1]) if found is not None else (None, {})


def resolve(
    backend: str | None = None,
    options: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Config:
    """Work out the backend and its options from arguments, environment and files.

    Raises:
        ConfigError: a malformed file or value, or an unknown table in the file.
    """
    env = os.environ if environ is None else environ
    path, table = _file_table(env, cwd)
    sources = [str(path)] if path is not None else []
    where = sources[0] if sources else "<config>"
    _check_file_table(table, where)

    name = backend or env.get("ESCHER_BACKEND") or table.get("backend") or DEFAULT_BACKEND
    if not isinstance(name, str):
        raise ConfigError(f"{where}: 'backend' must be a string, got {name!r}.")
    if backend:
        origin = "argument backend"
        sources.append("argument")
    elif env.get("ESCHER_BACKEND"):
        origin = "environment variable ESCHER_BACKEND"
        sources.append("environment")
    else:
        origin = f"{where}: backend"
    try:  # an unknown name is reported with where it came from
        get_entry(name)
    except UnknownBackendError as exc:
        raise UnknownBackendError(f"{origin}: {exc}") from None
    name = canonical_name(name)

    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    section = next((k for k in (name, *_aliases_of(name)) if k in table), name)
    file_options = table.get(section, {})
    if not isinstance(file_options, dict):
        raise ConfigError(f"{where}: [{section}] must be a table of options.")
    prefix_table = "tool.escher." if path is not None and path.name == "pyproject.toml" else ""
    for key, value in file_options.items():
        merged[key] = value
        origins[key] = f"{where}: [{prefix_table}{section}] {key}"
    prefix = f"ESCHER_{name.upper().replace('-', '_')}_"
    for key, raw in env.items():
        if key.startswith(prefix):
            option = key[len(prefix) :].lower()
            merged[option] = _env_value(raw)
            origins[option] = f"environment variable {key}"
    for key, value in (options or {}).items():
        merged[key] = value
        origins[key] = f"argument {key}"
    tables = {k: v for k, v in table.items() if isinstance(v, dict)}
    return Config(name, merged, tuple(sources), tables, origins)


def _aliases_of(name: str) -> list[str]:
    return [alias for alias, target in ALIASES.items() if target == name]


def _check_file_table(table: Mapping[str, Any], where: str) -> None:
    allowed = set(known_backends()) | set(ALIASES) | _OTHER_TABLES | {"backend"}
    for key in table:
        if key not in allowed:
            raise ConfigError(
                f"{where}: unknown key {key!r} in the escher configuration; expected 'backend' "
                f"or a table named after a backend.{did_you_mean(key, allowed)}"
            )


__all__ = ["DEFAULT_BACKEND", "Config", "find_config_file", "resolve"]
