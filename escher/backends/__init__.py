"""Backends: one small abstract base, built-in adapters loaded lazily, and a registry.

Third-party backends register through the entry-point group ``escher.backends``
(``name = "package.module:Class"``) or `register_backend`.
"""

from escher.backends._registry import (
    BackendEntry,
    availability,
    create_backend,
    get_backend_class,
    known_backends,
    register_backend,
)
from escher.backends.base import Backend, Capability, GarbageReport, PendingTask

__all__ = [
    "Backend",
    "BackendEntry",
    "Capability",
    "GarbageReport",
    "PendingTask",
    "availability",
    "create_backend",
    "get_backend_class",
    "known_backends",
    "register_backend",
]
