"""escher: expressive cluster scheduling with ephemeral resources.

Quick start::

    import escher

    with escher.init(nodes={"n1": {"CPU": 2}, "n2": {"CPU": 2}}):
        escher.set_resource("fast-disk", 1, "n2")
        ref = escher.launch(lambda: escher.node_id(), resources={"fast-disk": 1})
        print(escher.get(ref))  # n2
"""

from typing import TYPE_CHECKING, Any

from escher import api
from escher.api import *  # noqa: F403 - the module API; `escher.api.__all__` is its one list
from escher.backends import DISTRIBUTION
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

if TYPE_CHECKING:  # pragma: no cover
    from escher.backends.base import Backend
    from escher.explain import WhyResult


def __getattr__(name: str) -> Any:
    """`__version__`, read once from the installed package's metadata when first asked
    (importlib.metadata takes 15 ms to import: not on every start)."""
    if name != "__version__":
        raise AttributeError(f"module 'escher' has no attribute {name!r}")
    from importlib import metadata

    try:  # one source: the version in pyproject.toml, as installed
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # pragma: no cover - a tree never installed
        version = "0+unknown"
    globals()["__version__"] = version
    return version


def why(handle: "TaskRef", *, backend: "Backend | None" = None) -> "WhyResult":
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
    "Resources",
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
    "__version__",  # noqa: F405 - given by __getattr__ below, not the star import
    "why",
]
__all__ += api.__all__
