"""The module-level API: one active backend per process, and functions that use it.

`escher` re-exports it (users write ``escher.init``); modules inside escher (commands, the
test kits, the evaluation) import it from here, never from the `escher` package itself, so no
arrow runs back up to the package's face (docs/architecture.md).

The active-backend slot itself lives in `escher.core.context` (so that ESLs and task runners
read it without importing this module); it is re-exported here.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, ParamSpec, TypeVar, overload

from escher.backends import create_backend
from escher.backends.base import Backend
from escher.config import resolve
from escher.core import context
from escher.core.cluster import ClusterState
from escher.core.context import is_initialized as is_initialized
from escher.core.context import node_id as node_id
from escher.core.context import release_active_backend, swap_active_backend
from escher.core.errors import (
    ConfigError,
    GetTimeoutError,
    InvalidOptionError,
    ValidationError,
    did_you_mean,
    short_repr,
)
from escher.core.nodespec import NodeSpecLike
from escher.core.signature import check_keywords
from escher.core.task import TASK_OPTIONS, TaskRef, TaskSpec, check_timeout, request_of

#: The backend running the calling task, else the active backend (raises NotInitializedError
#: before escher.init()); `escher.core.context.current_backend`, typed.
current_backend: Callable[[], Backend] = context.current_backend

P = ParamSpec("P")
R = TypeVar("R")


class Session:
    """What `escher.init()` returns: use it as a context manager to shut down on exit.

    ``with escher.init(...) as backend:`` binds the active `Backend`.
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def __enter__(self) -> Backend:
        return self.backend

    def __exit__(self, *exc: object) -> None:
        release_active_backend(self.backend)
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
    if isinstance(backend, Backend):
        if options:
            raise ConfigError(
                f"escher.init() got options {sorted(options)} with an already built backend; "
                "pass them to the backend's constructor instead."
            )
        instance = backend
    else:
        if backend is not None and (not isinstance(backend, str) or not backend):
            raise ConfigError(
                "backend must be a registry name (e.g. 'memory', 'ray', 'kubernetes'), a "
                f"Backend, or None for the configured one; got {short_repr(backend)}."
            )
        config = resolve(backend, options)
        instance = create_backend(config.backend, config.options, config.origins)
    previous = swap_active_backend(instance)
    if previous is not None and previous is not instance:
        previous.close()
    return Session(instance)


def shutdown() -> None:
    """Close the active backend (queued tasks are cancelled). Safe to call twice."""
    current = swap_active_backend(None)
    if current is not None:
        current.close()


@contextlib.contextmanager
def use_backend(backend: Backend) -> Iterator[Backend]:
    """Make `backend` the active backend inside the block, then restore the one before.

    Neither is closed (unlike `init`, which closes the backend it replaces). A backend the
    block made active itself (an `init` inside) is closed at the end. Used by planning runs
    (`escher.esl.plan_app`) to run an app on a planning backend.

    Raises:
        ValidationError: `backend` is not a `Backend`.
    """
    if not isinstance(backend, Backend):
        raise ValidationError(f"use_backend takes a Backend, got {short_repr(backend)}.")
    previous = swap_active_backend(backend)
    try:
        yield backend
    finally:
        current = swap_active_backend(previous)
        if current is not None and current is not backend and current is not previous:
            current.close()


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


def launch(
    fn: Callable[..., Any],
    /,
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

    Raises:
        ValidationError: a bad argument (named in the message); nothing was launched.
        InvalidOptionError: a keyword that is neither a launch option nor a parameter of
            `fn` (e.g. ``resource=`` for ``resources=``).
    """
    if not callable(fn):
        raise ValidationError(f"fn must be a callable to run, got {short_repr(fn)}.")
    if kwargs:
        check_keywords(fn, kwargs, "launch()", _TASK_OPTIONS)
    spec = TaskSpec(
        fn=fn,
        args=args,
        kwargs=kwargs,
        resources=request_of(resources),
        name=_check_name(name),
        max_retries=max_retries,
        retry_exceptions=retry_exceptions,
        duration=duration,
    )
    return current_backend().launch(spec)


def _check_name(name: object) -> str:
    if name is None:
        return ""
    if not isinstance(name, str):
        raise ValidationError(f"name must be a string or None, got {short_repr(name)}.")
    return name


@overload
def get(refs: TaskRef, timeout: float | None = None) -> Any: ...
@overload
def get(refs: Sequence[TaskRef], timeout: float | None = None) -> list[Any]: ...
def get(refs: TaskRef | Sequence[TaskRef], timeout: float | None = None) -> Any:
    """The value of one task, or the values of a list of tasks, in order.

    Args:
        refs: A `TaskRef` or a sequence of them.
        timeout: Seconds to wait in total (simulated seconds on a virtual clock); None
            waits without limit.

    Raises:
        GetTimeoutError: not all done in time.
        ValidationError: `refs` is not a handle or a list of handles, or `timeout` is not
            None or finite seconds >= 0.
        Exception: the first failed task's own exception (or a `TaskError`).
    """
    timeout = check_timeout(timeout)
    if isinstance(refs, TaskRef):
        return refs.result(timeout)
    if isinstance(refs, str | bytes) or not isinstance(refs, Sequence):
        raise ValidationError(
            f"refs must be a TaskRef or a list of them (what escher.launch returns), got "
            f"{short_repr(refs)}."
        )
    for ref in refs:
        if not isinstance(ref, TaskRef):
            raise ValidationError(
                f"refs must hold TaskRefs (what escher.launch returns); one entry is "
                f"{short_repr(ref)}."
            )
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
    """Cancel a task that has not started; True if it will never run.

    Raises:
        ValidationError: `ref` is not a `TaskRef`.
    """
    if not isinstance(ref, TaskRef):
        raise ValidationError(
            f"cancel takes a TaskRef (what escher.launch returns), got {short_repr(ref)}."
        )
    return ref.cancel()


class RemoteFunction(Generic[P, R]):
    """A callable marked with `@escher.task`: `.launch()` runs it on the cluster."""

    def __init__(self, fn: Callable[P, R], options: dict[str, Any]) -> None:
        self._fn = fn
        self._options = options
        functools.update_wrapper(self, fn)

    def launch(self, *args: Any, **kwargs: Any) -> TaskRef:
        """Launch with the decorator's options (keyword options given here win)."""
        options = {**self._options, **{k: kwargs.pop(k) for k in _TASK_OPTIONS if k in kwargs}}
        return launch(self._fn, *args, **options, **kwargs)

    def options(self, **overrides: Any) -> RemoteFunction[P, R]:
        """A copy with some options replaced (e.g. ``resources=``, ``name=``).

        Raises:
            InvalidOptionError: an option `escher.launch` does not take.
            ValidationError: a bad value (named in the message).
        """
        return RemoteFunction(self._fn, {**self._options, **_check_options(overrides)})

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function here, locally."""
        return self._fn(*args, **kwargs)


_TASK_OPTIONS = frozenset({"resources", "name", *TASK_OPTIONS})


def _check_options(options: dict[str, Any]) -> dict[str, Any]:
    """Task options, checked as `escher.launch` checks them (before anything runs)."""
    for option in options:
        if option not in _TASK_OPTIONS:
            raise InvalidOptionError(
                f"unknown task option {option!r}; the options are "
                f"{', '.join(sorted(_TASK_OPTIONS))}.{did_you_mean(option, _TASK_OPTIONS)}"
            )
    TaskSpec(
        fn=len,
        resources=request_of(options.get("resources")),
        name=_check_name(options.get("name")),
        max_retries=options.get("max_retries", 0),
        retry_exceptions=options.get("retry_exceptions", False),
        duration=options.get("duration"),
    )
    return options


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

    Raises:
        InvalidOptionError: an option `escher.launch` does not take (with a suggestion).
        ValidationError: a bad option value, or `fn` is not callable.
    """
    _check_options(options)
    if fn is not None:
        if not callable(fn):
            raise ValidationError(f"escher.task decorates a callable, got {short_repr(fn)}.")
        return RemoteFunction(fn, options)

    def decorate(f: Callable[P, R]) -> RemoteFunction[P, R]:
        if not callable(f):
            raise ValidationError(f"escher.task decorates a callable, got {short_repr(f)}.")
        return RemoteFunction(f, options)

    return decorate


__all__ = [
    "RemoteFunction",
    "Session",
    "cancel",
    "current_backend",
    "get",
    "get_cluster_state",
    "init",
    "is_initialized",
    "launch",
    "node_id",
    "set_resource",
    "set_resources",
    "shutdown",
    "task",
    "use_backend",
]
