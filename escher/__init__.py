"""escher: expressive cluster scheduling with ephemeral resources.

Quick start::

    import escher

    with escher.init(nodes={"n1": {"CPU": 2}, "n2": {"CPU": 2}}):
        escher.set_resource("fast-disk", 1, "n2")
        ref = escher.launch(lambda: escher.node_id(), resources={"fast-disk": 1})
        print(escher.get(ref))  # n2

Every public name is imported when first used (PEP 562), so ``import escher`` and the
``escher`` command (``escher verify`` needs neither the backends nor the launch API) start
quickly; type checkers see the same names through the imports under `TYPE_CHECKING`.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - what type checkers see; at run time __getattr__ below
    from escher.api import (
        RemoteFunction,
        Session,
        cancel,
        current_backend,
        get,
        get_cluster_state,
        init,
        is_initialized,
        launch,
        node_id,
        set_resource,
        set_resources,
        shutdown,
        task,
        use_backend,
    )
    from escher.backends.base import Backend
    from escher.core.cluster import ClusterState, Node
    from escher.core.errors import (
        BackendError,
        BackendUnavailableError,
        ConfigError,
        EscherError,
        GetTimeoutError,
        NotInitializedError,
        NotInTaskError,
        TaskCancelledError,
        TaskError,
        UnknownBackendError,
        UnknownNodeError,
        UnschedulableError,
        ValidationError,
    )
    from escher.core.nodespec import NodeSpec
    from escher.core.plan import Plan
    from escher.core.resources import MAX_CAPACITY, Resources
    from escher.core.task import Status, StatusCode, TaskRef, TaskState
    from escher.explain import WhyResult

    __version__: str

#: The modules that define the public names, searched in this order when a name is first used
#: (`escher.api` last: it loads the backends).
_HOMES = (
    "escher.core.errors",
    "escher.core.resources",
    "escher.core.nodespec",
    "escher.core.cluster",
    "escher.core.task",
    "escher.core.plan",
    "escher.api",
)


def _find(name: str) -> Any:
    for home in _HOMES:
        module = importlib.import_module(home)
        if hasattr(module, name):
            return getattr(module, name)
    raise AssertionError(f"escher.__all__ names {name!r}, which no module in _HOMES defines")


def __getattr__(name: str) -> Any:
    """A public name, imported from its module when first used; `__version__`, read once
    from the installed package's metadata; a subpackage (``escher.api``), imported."""
    if name in __all__ and name not in ("__version__", "why"):
        value = _find(name)
    elif name == "__version__":
        value = _version()
    elif not name.startswith("__") and importlib.util.find_spec(f"escher.{name}") is not None:
        value = importlib.import_module(f"escher.{name}")
    else:
        raise AttributeError(f"module 'escher' has no attribute {name!r}")
    globals()[name] = value  # found once: later uses are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _version() -> str:
    from importlib import metadata

    from escher.backends import DISTRIBUTION

    try:  # one source: the version in pyproject.toml, as installed
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # pragma: no cover - a tree never installed
        return "0+unknown"


def why(handle: TaskRef, *, backend: Backend | None = None) -> WhyResult:
    """Why is this task pending? See `escher.explain.why` (imported when first used).

    Returns:
        An `escher.explain.WhyResult`: placeable now, waiting for a policy, blocked by a
        minimal conflict of policies and capacities, or never; with the per-node breakdown.
    """
    from escher.explain import why as explain_why

    return explain_why(handle, backend=backend)


__all__ = [
    "MAX_CAPACITY",
    "BackendError",
    "BackendUnavailableError",
    "ClusterState",
    "ConfigError",
    "EscherError",
    "GetTimeoutError",
    "Node",
    "NodeSpec",
    "NotInTaskError",
    "NotInitializedError",
    "Plan",
    "RemoteFunction",
    "Resources",
    "Session",
    "Status",
    "StatusCode",
    "TaskCancelledError",
    "TaskError",
    "TaskRef",
    "TaskState",
    "UnknownBackendError",
    "UnknownNodeError",
    "UnschedulableError",
    "ValidationError",
    "__version__",
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
    "why",
]
