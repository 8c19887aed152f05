"""Which task is running on this thread: set by backends around a task body.

Inside a task, `escher.node_id()`, `escher.set_resource(..., node_spec=None)` and the other
module functions use the backend that runs the task, whichever backend is active globally.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TaskContext:
    """The backend running the current task and the node it runs on."""

    backend: Any
    node_id: str


_local = threading.local()


def current_task() -> TaskContext | None:
    """The running task's context on this thread, or None outside tasks."""
    return getattr(_local, "context", None)


@contextmanager
def running_task(backend: Any, node_id: str) -> Iterator[TaskContext]:
    """Mark this thread as running a task of `backend` on `node_id`."""
    previous = current_task()
    _local.context = context = TaskContext(backend, node_id)
    try:
        yield context
    finally:
        _local.context = previous
