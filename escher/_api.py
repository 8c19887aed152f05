"""The module-level API: one active backend per process, and functions that use it."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, ParamSpec, TypeVar, overload

from escher._config import resolve
from escher.backends._registry import create_backend
from escher.backends.base import Backend
from escher.core.cluster import ClusterState
from escher.core.context import current_task
from escher.core.errors import GetTimeoutError, NotInitializedError, NotInTaskError
from escher.core.nodespec import NodeSpecLike
from escher.core.resources import Resources
from escher.core.task import TASK_OPTIONS, TaskRef, TaskSpec

P = ParamSpec("P")
R = TypeVar("R")

_lock = threading.RLock()
_backend: Backend | None = None


class Session:
    """What `escher.init()` returns: use it as a context manager to shut down on exit.

    ``with escher.init(...) as backend:`` binds the active `Backend`.
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def __enter__(self) -> Backend:
        return self.backend

    def __exit__(self, *exc: object) -> None:
        with _lock:
            if _backend is self.backend:
                shutdown()
            else:
                self.backend.close()

    def __repr__(self) -> str:
        return f"<escher.Session backend={self.backend.name!r}>"


def init(backend: str | Backend | None = None, **options: Any) -> Session:
    """Start escher on a backend chosen by argument, environment, config file or default.

    Calling it again replaces (and closes) the active backend.

    Args:
        backend: A registry name ("memory", "ray", "kubernetes", or a third-party one), an
            already built `Backend`, or None to use the configuration.
        **options: Backend options, overriding those from the environment and config file.

    Returns:
        A `Session`; ``with escher.init() as backend:`` shuts down on exit.

    Raises:
        ConfigError: bad configuration or an option the backend does not take.
        UnknownBackendError: no backend of that name (with a suggestion).
        BackendUnavailableError: the backend's extra is missing or its cluster unreachable.
    """
    global _backend
    if isinstance(backend, Backend):
        instance = backend
    else:
        config = resolve(backend, options)
        instance = create_backend(config.backend, config.options, config.origins)
    with _lock:
        previous, _backend = _backend, instance
    if previous is not None and previous is not instance:
        previous.close()
    return Session(instance)


def shutdown() -> None:
    """Close the active backend (queued tasks are cancelled). Safe to call twice."""
    global _backend
    with _lock:
        current, _backend = _backend, None
    if current is not None:
        current.close()


def is_initialized() -> bool:
    """True if a backend is active."""
    return _backend is not None


def current_backend() -> Backend:
    """The backend running the calling task, else the active backend.

    Raises:
        NotInitializedError: escher.init() was not called.
    """
    context = current_task()
    if context is not None:
        return context.backend  # type: ignore[no-any-return]
    current = _backend
    if current is None:
        raise NotInitializedError("escher is not initialised: call escher.init() first.")
    return current


def _install_worker_backend(backend: Backend, *, replace: bool = False) -> None:
    """Make `backend` active in a worker process if nothing is (used by task runners).

    With `replace`, make it active even if another backend is (a worker process that runs
    tasks of several backends switches to the one of the task it is running).
    """
    global _backend
    with _lock:
        if _backend is None or replace:
            _backend = backend


def set_resource(
    label: str,
    capacity: float,
    node_spec: NodeSpecLike = None,
    *,
    num_nodes: int | None = None,
) -> tuple[str, ...]:
    """Create, resize or (capacity 0) delete an ephemeral resource. See `Backend.set_resource`."""
    return current_backend().set_resource(label, capacity, node_spec, num_nodes=num_nodes)


def set_resources(
    capacities: Mapping[str, float],
    node_spec: NodeSpecLike = None,
    *,
    num_nodes: int | None = None,
) -> tuple[str, ...]:
    """Set several ephemeral resources on the same nodes at once. See `Backend.set_resources`.

    Example:
        ``escher.set_resources({"grp-a": 1, "grp-b": 1}, {"CPU": 1})`` writes each node
        with a free CPU once, for both labels.
    """
    return current_backend().set_resources(capacities, node_spec, num_nodes=num_nodes)


def get_cluster_state() -> ClusterState:
    """A consistent snapshot of every node: total, available, labels, alive."""
    return current_backend().get_cluster_state()


def node_id() -> str:
    """The id of the node the calling task runs on.

    Raises:
        NotInTaskError: called outside a task.
    """
    context = current_task()
    found = context.node_id if context is not None else None
    if found is None and _backend is not None:
        found = _backend.current_node_id()
    if found is None:
        raise NotInTaskError("escher.node_id() is only meaningful inside a task.")
    return found


def launch(
    fn: Callable[..., Any],
    *args: Any,
    resources: Mapping[str, float] | None = None,
    name: str | None = None,
    max_retries: int = 0,
    retry_exceptions: bool = False,
    duration: float | None = None,
    **kwargs: Any,
) -> TaskRef:
    """Run `fn(*args, **kwargs)` on a node whose available resources cover `resources`.

    Args:
        fn: The callable.
        *args: Its positional arguments.
        resources: The request, e.g. ``{"CPU": 1, "grp": 1}``.
        name: A name for status messages (default: the callable's name).
        max_retries: Reruns allowed when the node dies (and, with `retry_exceptions`,
            when the task raises).
        retry_exceptions: Also rerun when the task raises.
        duration: Simulated seconds (virtual-clock backends only).
        **kwargs: Its keyword arguments.

    Returns:
        A `TaskRef`; `escher.get(ref)` waits for the value.
    """
    spec = TaskSpec(
        fn=fn,
        args=args,
        kwargs=kwargs,
        resources=Resources.of(resources),
        name=name or "",
        max_retries=max_retries,
        retry_exceptions=retry_exceptions,
        duration=duration,
    )
    return current_backend().launch(spec)


@overload
def get(refs: TaskRef, timeout: float | None = None) -> Any: ...
@overload
def get(refs: Sequence[TaskRef], timeout: float | None = None) -> list[Any]: ...
def get(refs: TaskRef | Sequence[TaskRef], timeout: float | None = None) -> Any:
    """The value of one task, or the values of a list of tasks, in order.

    Args:
        refs: A `TaskRef` or a sequence of them.
        timeout: Seconds to wait in total (simulated seconds on a virtual clock).

    Raises:
        GetTimeoutError: not all done in time.
        Exception: the first failed task's own exception (or a `TaskError`).
    """
    if isinstance(refs, TaskRef):
        return refs.result(timeout)
    if timeout is None:
        return [ref.result() for ref in refs]
    deadline = time.monotonic() + timeout
    values = []
    for ref in refs:
        left = deadline - time.monotonic()
        if left <= 0 and not ref.done():
            raise GetTimeoutError(f"not all {len(refs)} tasks finished within {timeout}s.")
        values.append(ref.result(max(left, 0.0)))
    return values


def cancel(ref: TaskRef) -> bool:
    """Cancel a task that has not started; True if it will never run."""
    return ref.cancel()


class RemoteFunction(Generic[P, R]):
    """A callable marked with `@escher.task`: `.launch()` runs it on the cluster."""

    def __init__(self, fn: Callable[P, R], options: dict[str, Any]) -> None:
        self._fn = fn
        self._options = options
        functools.update_wrapper(self, fn)

    def launch(self, *args: Any, **kwargs: Any) -> TaskRef:
        """Launch with the decorator's options."""
        return launch(self._fn, *args, **self._options, **kwargs)

    def options(self, **overrides: Any) -> RemoteFunction[P, R]:
        """A copy with some options replaced (e.g. ``resources=``, ``name=``)."""
        unknown = set(overrides) - _TASK_OPTIONS
        if unknown:
            raise TypeError(
                f"unknown task option(s) {sorted(unknown)}; use {sorted(_TASK_OPTIONS)}"
            )
        return RemoteFunction(self._fn, {**self._options, **overrides})

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function here, locally."""
        return self._fn(*args, **kwargs)


_TASK_OPTIONS = frozenset({"resources", "name", *TASK_OPTIONS})


@overload
def task(fn: Callable[P, R], /) -> RemoteFunction[P, R]: ...
@overload
def task(
    fn: None = None, /, **options: Any
) -> Callable[[Callable[P, R]], RemoteFunction[P, R]]: ...
def task(fn: Callable[P, R] | None = None, /, **options: Any) -> Any:
    """Decorator: ``@escher.task(resources={"CPU": 1})`` then ``f.launch(x)``.

    Takes the keyword options of `escher.launch` (resources, name, max_retries,
    retry_exceptions, duration).
    """
    unknown = set(options) - _TASK_OPTIONS
    if unknown:
        raise TypeError(f"unknown task option(s) {sorted(unknown)}; use {sorted(_TASK_OPTIONS)}")
    if fn is not None:
        return RemoteFunction(fn, options)
    return lambda f: RemoteFunction(f, options)
