"""The vocabulary of escher: resources, nodes, node specs, tasks, plans, clocks, errors. No I/O."""

from escher.core.clock import Clock, RealClock, Timer
from escher.core.cluster import ClusterState, Node
from escher.core.nodespec import NodeSpec
from escher.core.plan import (
    Colocated,
    Gang,
    Intent,
    PinnedTo,
    Plan,
    PlannedResource,
    PlannedTask,
    ResourceCreation,
    Separated,
    SpreadAtMost,
    SpreadEvenly,
)
from escher.core.resources import MAX_CAPACITY, Resources
from escher.core.task import Status, StatusCode, TaskRef, TaskSpec, TaskState

__all__ = [
    "MAX_CAPACITY",
    "Clock",
    "ClusterState",
    "Colocated",
    "Gang",
    "Intent",
    "Node",
    "NodeSpec",
    "PinnedTo",
    "Plan",
    "PlannedResource",
    "PlannedTask",
    "RealClock",
    "ResourceCreation",
    "Resources",
    "Separated",
    "SpreadAtMost",
    "SpreadEvenly",
    "Status",
    "StatusCode",
    "TaskRef",
    "TaskSpec",
    "TaskState",
    "Timer",
]
