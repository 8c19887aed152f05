"""Which backend is active, and which task is running on this thread.

Two slots, read by every layer above core (the module API, ESLs, task runners, explain):

- the process's active backend, set by `escher.init()` / `escher.shutdown()` and, in a worker
  process, by the task runner (`install_worker_backend`);
- the running task's context on this thread, set by backends around a task body. Inside a
  task, `escher.node_id()`, `escher.set_resource(..., node_spec=None)` and the other module
  functions use the backend that runs the task, whichever backend is active globally.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from escher.core.errors import NotInitializedError, NotInTaskError

__all__ = [
    "TaskContext",
    "active_backend",
    "current_backend",
    "current_task",
    "install_worker_backend",
    "is_initialized",
    "node_id",
    "release_active_backend",
    "running_task",
    "swap_active_backend",
]


@dataclass(frozen=True)
class TaskContext:
    """The backend running the current task and the node it runs on."""

    backend: Any
    node_id: str


class _TaskLocal(threading.local):
    """Per-thread task context; None by default (a class attribute: reading it never raises
    and catches AttributeError, which `getattr(local, name, None)` does on every thread that
    runs no task - about 2 us on each launch)."""

    context: TaskContext | None = None


_local = _TaskLocal()

_lock = threading.RLock()
# The active backend (an `escher.backends.Backend`; typed Any because core sits below the
# backends layer: `escher.current_backend` re-exports it typed).
_active: Any = None


def current_task() -> TaskContext | None:
    """The running task's context on this thread, or None outside tasks."""
    return _local.context


@contextmanager
def running_task(backend: Any, node_id: str) -> Iterator[TaskContext]:
    """Mark this thread as running a task of `backend` on `node_id`."""
    previous = current_task()
    _local.context = context = TaskContext(backend, node_id)
    try:
        yield context
    finally:
        _local.context = previous


def active_backend() -> Any:
    """The process's active backend, or None (ignores the running task)."""
    return _active


def is_initialized() -> bool:
    """True if a backend is active."""
    return _active is not None


def current_backend() -> Any:
    """The backend running the calling task, else the active backend.

    Raises:
        NotInitializedError: escher.init() was not called.
    """
    context = current_task()
    if context is not None:
        return context.backend
    current = _active
    if current is None:
        raise NotInitializedError("escher is not initialised: call escher.init() first.")
    return current


def node_id() -> str:
    """The id of the node the calling task runs on.

    Raises:
        NotInTaskError: called outside a task.
    """
    context = current_task()
    found = context.node_id if context is not None else None
    active = _active
    if found is None and active is not None:
        found = active.current_node_id()
    if found is None:
        raise NotInTaskError("escher.node_id() is only meaningful inside a task.")
    return found


def release_active_backend(backend: Any) -> bool:
    """Make no backend active if `backend` is the active one (a session ending).

    Returns:
        True if `backend` was the active one.
    """
    global _active
    with _lock:
        if _active is not backend:
            return False
        _active = None
        return True


def swap_active_backend(backend: Any) -> Any:
    """Make `backend` (None: no backend) active and return the one it replaced."""
    global _active
    with _lock:
        previous, _active = _active, backend
    return previous


def install_worker_backend(backend: Any, *, replace: bool = False) -> None:
    """Make `backend` active in a worker process if nothing is (used by task runners).

    With `replace`, make it active even if another backend is (a worker process that runs
    tasks of several backends switches to the one of the task it is running).
    """
    global _active
    with _lock:
        if _active is None or replace:
            _active = backend
