"""Backend registry: names -> lazy import paths, install hints, and entry-point discovery.

The distribution is published as ``escher-sched`` (the name ``escher`` on the package index
belongs to an unrelated project); the import name is ``escher``. `install_command` builds the
install hint for an extra, so every message names the right distribution.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from escher.backends._options import check_options
from escher.backends.base import Backend
from escher.core.errors import (
    BackendUnavailableError,
    ConfigError,
    UnknownBackendError,
    did_you_mean,
)

ENTRY_POINT_GROUP = "escher.backends"

#: The distribution name on the package index (the import name is ``escher``).
DISTRIBUTION = "escher-sched"


def install_command(extra: str | None = None) -> str:
    """The pip command that installs escher, with `extra` (e.g. ``"ray"``) if given."""
    return f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install {DISTRIBUTION}"


@dataclass(frozen=True)
class BackendEntry:
    """Where a backend lives and how to install it."""

    name: str
    target: str  # "package.module:ClassName"
    install_hint: str | None = None
    #: Modules the backend needs at run time beyond its own (imported to check availability).
    requires: tuple[str, ...] = ()


_BUILTIN = (
    BackendEntry("memory", "escher.backends.memory:MemoryBackend"),
    BackendEntry("ray", "escher.backends.ray:RayBackend", install_command("ray"), ("ray",)),
    BackendEntry(
        "kubernetes",
        "escher.backends.kubernetes:KubernetesBackend",
        install_command("k8s"),
        ("kubernetes", "cloudpickle"),
    ),
)
#: Other names the registry accepts for a backend.
ALIASES = {"k8s": "kubernetes", "inmemory": "memory", "in-memory": "memory"}

_lock = threading.Lock()
_entries: dict[str, BackendEntry] = {e.name: e for e in _BUILTIN}
_discovered = False


def register_backend(
    name: str, target: str, install_hint: str | None = None, requires: tuple[str, ...] = ()
) -> None:
    """Register a backend class under `name`, by import path "module:Class" (loaded lazily).

    Args:
        name: The registry name (what ``escher.init(name)`` and ``backend = ...`` use).
        target: ``"package.module:Class"``.
        install_hint: The command that installs what it needs, shown when it is missing.
        requires: Modules it imports at run time, tried by `availability`.
    """
    if ":" not in target:
        raise ConfigError(f"backend target must look like 'package.module:Class', got {target!r}.")
    with _lock:
        _entries[name] = BackendEntry(name, target, install_hint, tuple(requires))


def _discover() -> None:
    global _discovered
    with _lock:
        if _discovered:
            return
        _discovered = True
        from importlib.metadata import entry_points  # 15 ms: only when a name is looked up

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            _entries.setdefault(ep.name, BackendEntry(ep.name, ep.value))


def known_backends() -> dict[str, BackendEntry]:
    """Every registered backend, built-in and discovered, by name."""
    _discover()
    return dict(_entries)


def canonical_name(name: str) -> str:
    """The registry name for `name` or one of its aliases (``k8s`` -> ``kubernetes``)."""
    return ALIASES.get(name, name)


def get_entry(name: str) -> BackendEntry:
    """The registry entry for `name` (or an alias).

    Raises:
        UnknownBackendError: nothing is registered under `name` (with a suggestion).
    """
    entries = known_backends()
    entry = entries.get(canonical_name(name))
    if entry is None:
        raise UnknownBackendError(
            f"no backend named {name!r}; known: {', '.join(sorted(entries))}."
            + did_you_mean(name, list(entries) + list(ALIASES))
        )
    return entry


def availability(name: str) -> tuple[type[Backend] | None, str]:
    """Whether backend `name` can be used here: its class and every module it needs import.

    Returns:
        (the class, "") when it imports; (None, why not, with the install command) otherwise.

    Raises:
        UnknownBackendError: nothing is registered under `name`.
    """
    entry = get_entry(name)
    try:
        cls = get_backend_class(entry.name)
        for module in entry.requires:
            importlib.import_module(module)
    except BackendUnavailableError as exc:
        return None, str(exc)
    except ImportError as exc:
        hint = f" Install it with: {entry.install_hint}" if entry.install_hint else ""
        missing = exc.name or str(exc)
        return None, f"backend {entry.name!r} needs {missing}, which is not installed.{hint}"
    return cls, ""


def get_backend_class(name: str) -> type[Backend]:
    """Import and return the backend class registered as `name`.

    Raises:
        UnknownBackendError: nothing is registered under `name` (with a suggestion).
        BackendUnavailableError: its module cannot be imported (with the install hint).
    """
    entry = get_entry(name)
    module_name, _, attr = entry.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f" Install it with: {entry.install_hint}" if entry.install_hint else ""
        missing = exc.name if exc.name and exc.name.split(".")[0] != "escher" else None
        why = f"needs {missing}, which is not installed" if missing else f"cannot import ({exc})"
        raise BackendUnavailableError(f"backend {entry.name!r} {why}.{hint}") from exc
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise BackendUnavailableError(f"{entry.target} is not an escher Backend subclass.")
    return cls


def create_backend(
    name: str,
    options: Mapping[str, Any] | None = None,
    origins: Mapping[str, str] | None = None,
) -> Backend:
    """Instantiate backend `name` with `options`, checked against its constructor's hints.

    Args:
        name: A registry name or alias.
        options: Keyword options for the backend's constructor.
        origins: Where each option came from (see `escher.config.Config.origins`), named
            in error messages.

    Raises:
        UnknownBackendError, BackendUnavailableError: see `get_backend_class`.
        ConfigError: an option the backend does not accept, or a value of the wrong type.
    """
    cls = get_backend_class(name)
    options = dict(options or {})
    check_options(cls, options, origins)
    return cls(**options)
