"""Backends: one small abstract base, built-in adapters loaded lazily, and a registry.

Third-party backends register through the entry-point group ``escher.backends``
(``name = "package.module:Class"``) or `register_backend`.
"""

from escher.backends._coalesce import BatchWriter, WriteCoalescer
from escher.backends._options import accepted_options, check_options, checked_options
from escher.backends._registry import (
    ALIASES,
    DISTRIBUTION,
    BackendEntry,
    availability,
    canonical_name,
    create_backend,
    get_backend_class,
    get_entry,
    install_command,
    known_backends,
    register_backend,
)
from escher.backends.base import Backend, Capability, GarbageReport, PendingTask, Steering

__all__ = [
    "ALIASES",
    "DISTRIBUTION",
    "Backend",
    "BackendEntry",
    "BatchWriter",
    "Capability",
    "GarbageReport",
    "PendingTask",
    "Steering",
    "WriteCoalescer",
    "accepted_options",
    "availability",
    "canonical_name",
    "check_options",
    "checked_options",
    "create_backend",
    "get_backend_class",
    "get_entry",
    "install_command",
    "known_backends",
    "register_backend",
]
