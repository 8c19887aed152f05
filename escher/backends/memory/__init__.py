"""The in-memory backend (the embedded default)."""

from escher.backends.memory.backend import DEFAULT_NODES, MemoryBackend

__all__ = ["DEFAULT_NODES", "MemoryBackend"]
