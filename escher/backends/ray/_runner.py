"""What runs inside a Ray worker: the task wrapper and the worker-side backend.

`run_task` is a module-level function, so Ray pickles it by reference. In the worker it
installs a `RayBackend` attached to the already connected Ray (once per process), so that
`escher.node_id()` and `escher.set_resource(label, capacity)` work inside tasks, then claims
the task's start at the control actor (a cancelled task returns `CANCELLED` without running).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: What a task returns when it was cancelled before its body ran.
CANCELLED = "__escher_cancelled__"

CLAIM_TIMEOUT = 60.0


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker-side backend must be built (the driver's resolved options)."""

    namespace: str | None
    prefix: str
    mode: str
    control_name: str
    share_writes: bool = True


_lock = threading.Lock()
_backends: dict[WorkerConfig, Any] = {}


def worker_backend(config: WorkerConfig) -> Any:
    """The RayBackend of this worker process for `config`, built once and made active."""
    import escher
    from escher._api import _install_worker_backend
    from escher.backends.ray.backend import RayBackend

    with _lock:
        backend = _backends.get(config)
        if backend is None:
            backend = RayBackend._attached(config)
            _backends[config] = backend
    # A worker runs tasks of any RayBackend of the cluster (other prefixes or modes): the
    # active one is that of the task at hand. A backend the task itself set up is kept.
    current = escher.current_backend() if escher.is_initialized() else None
    _install_worker_backend(
        backend, replace=isinstance(current, RayBackend) and current._attached_to_worker
    )
    return backend


def run_task(
    config: WorkerConfig,
    key: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> Any:
    """Run `fn(*args, **kwargs)` as escher task `key`; return (node, value)."""
    import ray

    backend = worker_backend(config)
    node = ray.get_runtime_context().get_node_id()
    # Wait on a future, not ray.get: ray.get in a task tells the raylet the worker is
    # blocked, so Ray frees its CPUs and starts more worker processes (slow, and they pile up).
    claim = backend._control().claim.remote(key, node).future()
    if not claim.result(timeout=CLAIM_TIMEOUT):
        return CANCELLED
    try:
        value = fn(*args, **kwargs)
    finally:
        # Whoever gets the result (or the error) may read what the body wrote: share it now.
        backend._flush_writes()
    return node, value
