"""Backend registry: names -> lazy import paths, install hints, and entry-point discovery."""

from __future__ import annotations

import importlib
import inspect
import threading
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from escher.backends.base import Backend
from escher.core.errors import (
    BackendUnavailableError,
    ConfigError,
    UnknownBackendError,
    did_you_mean,
)

ENTRY_POINT_GROUP = "escher.backends"


@dataclass(frozen=True)
class BackendEntry:
    """Where a backend lives and how to install it."""

    name: str
    target: str  # "package.module:ClassName"
    install_hint: str | None = None


_BUILTIN = (
    BackendEntry("memory", "escher.backends.memory:MemoryBackend"),
    BackendEntry("ray", "escher.backends.ray:RayBackend", "pip install 'escher[ray]'"),
    BackendEntry(
        "kubernetes", "escher.backends.kubernetes:KubernetesBackend", "pip install 'escher[k8s]'"
    ),
)
_ALIASES = {"k8s": "kubernetes", "inmemory": "memory", "in-memory": "memory"}

_lock = threading.Lock()
_entries: dict[str, BackendEntry] = {e.name: e for e in _BUILTIN}
_discovered = False


def register_backend(name: str, target: str, install_hint: str | None = None) -> None:
    """Register a backend class under `name`, by import path "module:Class" (loaded lazily)."""
    if ":" not in target:
        raise ConfigError(f"backend target must look like 'package.module:Class', got {target!r}.")
    with _lock:
        _entries[name] = BackendEntry(name, target, install_hint)


def _discover() -> None:
    global _discovered
    with _lock:
        if _discovered:
            return
        _discovered = True
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            _entries.setdefault(ep.name, BackendEntry(ep.name, ep.value))


def known_backends() -> dict[str, BackendEntry]:
    """Every registered backend, built-in and discovered, by name."""
    _discover()
    return dict(_entries)


def get_backend_class(name: str) -> type[Backend]:
    """Import and return the backend class registered as `name`.

    Raises:
        UnknownBackendError: nothing is registered under `name` (with a suggestion).
        BackendUnavailableError: its module cannot be imported (with the install hint).
    """
    entries = known_backends()
    entry = entries.get(_ALIASES.get(name, name))
    if entry is None:
        raise UnknownBackendError(
            f"no backend named {name!r}; known: {', '.join(sorted(entries))}."
            + did_you_mean(name, list(entries) + list(_ALIASES))
        )
    module_name, _, attr = entry.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f" Install it with: {entry.install_hint}" if entry.install_hint else ""
        raise BackendUnavailableError(
            f"backend {entry.name!r} cannot be imported ({exc}).{hint}"
        ) from exc
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise BackendUnavailableError(f"{entry.target} is not an escher Backend subclass.")
    return cls


def create_backend(name: str, options: dict[str, Any] | None = None) -> Backend:
    """Instantiate backend `name` with `options`, naming any option it does not take.

    Raises:
        UnknownBackendError, BackendUnavailableError: see `get_backend_class`.
        ConfigError: an option the backend does not accept.
    """
    cls = get_backend_class(name)
    options = dict(options or {})
    params = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    accepted = [n for n, p in params.items() if n != "self" and p.kind is not p.VAR_POSITIONAL]
    if not takes_any:
        for option in options:
            if option not in accepted:
                raise ConfigError(
                    f"the {cls.name} backend has no option {option!r}; it takes "
                    f"{', '.join(accepted) or 'no options'}.{did_you_mean(option, accepted)}"
                )
    return cls(**options)
