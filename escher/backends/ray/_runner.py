"""What runs inside a Ray worker: the task wrapper and the worker-side backend.

`run_task` is a module-level function, so Ray pickles it by reference. In the worker it
builds a backend attached to the already connected Ray (once per process, with the
driver's `WorkerConfig.attach`), so that `escher.node_id()` and
`escher.set_resource(label, capacity)` work inside tasks, then claims the task's start at
the start gate under Ray's task id (`escher.backends.ray._gate`; a cancelled task returns
`CANCELLED` without running). A task is sent only its own arguments.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from escher.backends.ray._config import WorkerConfig
from escher.backends.ray._gate import claim
from escher.backends.ray._nodegate import claim_here, node_dir, shrinks_here
from escher.backends.ray._shrink import WAIT_FOR_SHRINK, held_labels, marker_stale, shrinking
from escher.core.context import (
    active_backend,
    current_backend,
    current_task,
    install_worker_backend,
    is_initialized,
)

#: What a task returns when it was cancelled before its body ran.
CANCELLED = "__escher_cancelled__"
#: First item of what a task returns when its start could not be claimed (body not run).
GATE_FAILED = "__escher_gate_failed__"
#: Last item of what a task returns when it claimed its start in the control store (its key
#: there must be removed once it settled).
CLAIMED_IN_STORE = "__escher_claimed_in_store__"

CLAIM_TIMEOUT = 60.0

_lock = threading.Lock()
_backends: dict[WorkerConfig, Any] = {}
_node = ""  # this worker's node id, once known
_folders: dict[str, str] = {}  # prefix -> this node's gate folder
_last: list[Any] = [None, None]  # the config and backend of the last task
_context: Any = None  # Ray's runtime context, once looked up


def worker_backend(config: WorkerConfig) -> Any:
    """The backend of this worker process for `config`, built once and made active."""
    last_config, last_backend = _last
    if config is last_config and active_backend() is last_backend and current_task() is None:
        return last_backend  # the same remote function again (Ray unpickled `config` once)
    backend = _attached(config)
    _last[:] = [config, backend]
    return backend


def _attached(config: WorkerConfig) -> Any:
    backend = _backends.get(config)
    if backend is None:
        if config.attach is None:
            raise RuntimeError("WorkerConfig.attach is not set")
        with _lock:
            backend = _backends.get(config)
            if backend is None:
                backend = config.attach(config)
                _backends[config] = backend
    # A worker runs tasks of any backend of the cluster (other prefixes or modes): the
    # active one is that of the task at hand. A backend the task itself set up is kept.
    current = current_backend() if is_initialized() else None
    if current is not backend:
        replace = current is None or bool(getattr(current, "attached_to_worker", False))
        install_worker_backend(backend, replace=replace)
    return backend


def bound_runner(
    config: WorkerConfig, fn: Callable[..., Any], *, with_args: bool
) -> Callable[..., Any]:
    """`run_task` with `config` and `fn` bound: for a function launched again and again, Ray
    then ships both once (when it exports the remote function), not with every task.
    Without `with_args` it takes no parameters: Ray then neither checks nor flattens the
    arguments of each call (it does for any signature with parameters)."""
    name = getattr(fn, "__name__", "escher_task")
    if with_args:

        def escher_task(args: tuple[Any, ...] = (), kwargs: Mapping[str, Any] | None = None) -> Any:
            return run_task(config, fn, args, kwargs or {})

        escher_task.__name__ = escher_task.__qualname__ = name
        return escher_task

    def escher_task_without_args() -> Any:
        return run_task(config, fn, (), {})

    escher_task_without_args.__name__ = escher_task_without_args.__qualname__ = name
    return escher_task_without_args


def run_task(
    config: WorkerConfig,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> Any:
    """Run `fn(*args, **kwargs)` as an escher task; return [node, value], with
    `CLAIMED_IN_STORE` appended if it claimed its start in the control store. (A list: Ray
    packs one as it packs plain values, a tuple it pickles, about five times the cost.)"""
    backend = worker_backend(config)
    node = _node or _this_node()
    in_store = False
    try:
        folder = _folders.get(config.prefix) or _folder(config.prefix, node)
        if config.mode == "resize" and not _shrink_allows(backend, config.prefix, node, folder):
            return [WAIT_FOR_SHRINK, node]  # body not run; the unit goes back to Ray
        task_id = _task_id()
        claimed = claim_here(folder, config.session_id, task_id)
        if claimed is None:  # this node is not armed yet
            in_store = True
            claimed = claim(config.prefix, f"{config.session_id}:{task_id}", node, CLAIM_TIMEOUT)
    except Exception as exc:
        return [GATE_FAILED, node, f"{type(exc).__name__}: {exc}"]
    if not claimed:
        return CANCELLED
    try:
        value = fn(*args, **kwargs)
    finally:
        # Whoever gets the result (or the error) may read what the body wrote: share it now.
        backend.flush_writes()
    return [node, value, CLAIMED_IN_STORE] if in_store else [node, value]


def _runtime_context() -> Any:
    """Ray's runtime context, looked up once per process (it reads the running task's state
    each time it is asked)."""
    global _context
    import ray

    if _context is None:
        _context = ray.get_runtime_context()
    return _context


def _task_id() -> str:
    """Ray's id of the running task."""
    return str(_runtime_context().get_task_id() or "")


def _folder(prefix: str, node: str) -> str:
    _folders[prefix] = folder = node_dir(prefix, node)
    return folder


def _this_node() -> str:
    """The id of the node this worker process runs on (it never moves)."""
    global _node
    _node = str(_runtime_context().get_node_id())
    return _node


def _shrink_allows(backend: Any, prefix: str, node: str, folder: str) -> bool:
    """False if a pending shrink of a label the task holds leaves no room for it
    (`escher.backends.ray._shrink`). On an armed node the node's own copy of its marker
    says which labels have one (nearly always none: no more to do)."""
    here = shrinks_here(folder)
    if here is not None and not here:
        return True
    labels = held_labels(prefix)
    if not labels:
        return True
    if here is not None:
        if here.isdisjoint(labels):
            return True
    elif not shrinking(prefix, node, labels, CLAIM_TIMEOUT):
        return True
    admitted = backend.control().shrink_admit.remote(prefix, node, labels)
    if not admitted.future().result(timeout=CLAIM_TIMEOUT):
        return False
    marker_stale(prefix, node)  # the shrink is over (or was not known): read it again
    return True
