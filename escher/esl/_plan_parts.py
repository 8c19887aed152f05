"""`PlanParts`: what a policy contributes to a verifier `Plan` for one kind of task."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from escher.core.errors import ValidationError
from escher.core.nodespec import NodeSpecLike
from escher.core.plan import Intent
from escher.core.resources import Resources


@dataclass
class PlanParts:
    """What a policy contributes to a plan for one kind of task.

    Attributes:
        resources: (label, capacity, node_spec, source) to create before the tasks start.
        request: Added to each task's request.
        creates: Resources each task creates on its own node.
        intents: Builders of the intents, given the names of the declared tasks.
        leader: For groups whose first task differs (an unknown co-location group): the
            first task's extra request and the resources it creates; the others use
            `request`.
        topologies: Escher-defined topologies the intents use: key -> node -> domain
            (`Plan.add_topology`); node-label topologies need none.
        split: For policies that send tasks to different places (a domain each): the
            tasks are declared in parts, each (name suffix, count, extra request); the
            counts sum to the declared count. The intents name every part.
    """

    resources: list[tuple[str, float, NodeSpecLike, str]] = field(default_factory=list)
    request: Resources = field(default_factory=Resources)
    creates: dict[str, float] = field(default_factory=dict)
    intents: list[Callable[[tuple[str, ...]], Intent]] = field(default_factory=list)
    leader: tuple[Resources, dict[str, float]] | None = None
    topologies: dict[str, dict[str, str]] = field(default_factory=dict)
    split: list[tuple[str, int, Resources]] = field(default_factory=list)

    def __and__(self, other: PlanParts) -> PlanParts:
        creates = dict(self.creates)
        for label, capacity in other.creates.items():
            creates[label] = max(capacity, creates.get(label, 0.0))
        leader = None
        if self.leader is not None or other.leader is not None:
            mine = self.leader or (self.request, dict(self.creates))
            theirs = other.leader or (other.request, dict(other.creates))
            leader = (mine[0] + theirs[0], {**mine[1], **theirs[1]})
        if self.split and other.split:
            raise ValidationError(
                "two policies that each split tasks over domains cannot be declared together; "
                "declare the tasks under each policy separately."
            )
        return PlanParts(
            [*self.resources, *other.resources],
            self.request + other.request,
            creates,
            [*self.intents, *other.intents],
            leader,
            {**self.topologies, **other.topologies},
            self.split or other.split,
        )
