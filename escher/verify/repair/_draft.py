"""`Draft`: a copy of a plan and its cluster that changes are made on."""

from __future__ import annotations

from dataclasses import dataclass, field

from escher.core.cluster import ClusterState, Node
from escher.core.plan import Intent, Plan, PlannedTask


@dataclass
class Draft:
    """A plan and a cluster being changed; `build` makes the changed `Plan` and state.

    Attributes:
        tasks: Task name -> task, in plan order.
        intents: Plan intent index -> what stands for it (one intent, two after a split,
            none once dropped).
        nodes: Node id -> node, new nodes last.
    """

    plan: Plan
    state: ClusterState
    tasks: dict[str, PlannedTask] = field(init=False)
    intents: dict[int, tuple[Intent, ...]] = field(init=False)
    nodes: dict[str, Node] = field(init=False)

    def __post_init__(self) -> None:
        self.tasks = {t.name: t for t in self.plan.tasks}
        self.intents = {i: (x,) for i, x in enumerate(self.plan.intents)}
        self.nodes = dict(self.state.nodes)

    def build(self) -> tuple[Plan, ClusterState, list[int]]:
        """The changed plan, the changed cluster, and for each intent of the changed plan
        the index of the plan's intent it stands for."""
        origins = [i for i, xs in self.intents.items() for _ in xs]
        plan = Plan(
            resources=list(self.plan.resources),
            tasks=list(self.tasks.values()),
            intents=[x for xs in self.intents.values() for x in xs],
            topologies={k: dict(v) for k, v in self.plan.topologies.items()},
        )
        return plan, ClusterState(self.nodes, self.state.time), origins
