"""Required node affinity: tasks run only on nodes whose labels (or ids) match.

`NodeAffinity` puts one label on every matching alive node; its tasks request it. A match is
node label key -> allowed value(s) (Kubernetes' ``In``; None: the key exists, ``Exists``),
an exclusion is key -> forbidden value(s) (``NotIn``; None: ``DoesNotExist``), and `ids`
pins to node ids (Ray's hard ``NodeAffinitySchedulingStrategy``). When the match is plain
equality, the label is written with a label selector in one bulk call and `recover()` also
puts it on matching nodes that joined since; otherwise on the nodes matching now.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TypeAlias

from escher.backends.base import Backend
from escher.core.cluster import ClusterState, Node
from escher.core.errors import ValidationError
from escher.core.nodespec import NodeSpec
from escher.core.plan import PinnedTo
from escher.core.resources import MAX_CAPACITY, Resources
from escher.esl._constraint import Constraint
from escher.esl._esl import ESL
from escher.esl._plan_parts import PlanParts

#: Node label key -> a value, several values, or None (any value / no value).
LabelMatch: TypeAlias = "Mapping[str, str | Sequence[str] | None]"


def _parse(match: LabelMatch | None, what: str) -> dict[str, tuple[str, ...] | None]:
    if match is None:
        return {}
    if not isinstance(match, Mapping):
        raise ValidationError(f"{what} must map node label keys to values, got {match!r}.")
    parsed: dict[str, tuple[str, ...] | None] = {}
    for key, value in match.items():
        if not isinstance(key, str) or not key:
            raise ValidationError(f"{what}: a label key must be a non-empty string, got {key!r}.")
        if value is None:
            parsed[key] = None
        elif isinstance(value, str):
            parsed[key] = (value,)
        else:
            values = tuple(value)
            if not values or not all(isinstance(v, str) for v in values):
                raise ValidationError(f"{what}[{key!r}] must be a string or strings.")
            parsed[key] = values
    return parsed


class NodeAffinity(ESL):
    """Tasks run only on nodes that match (see module doc).

    Args:
        match: Label key -> allowed value(s), or None for "has the key".
        exclude: Label key -> forbidden value(s), or None for "lacks the key".
        ids: Only these node ids.
        backend: The backend (default: the current one).
        name: Used in labels and explanations.

    Raises:
        ValidationError: nothing to match on, or a malformed match.
    """

    kind = "naff"

    def __init__(
        self,
        match: LabelMatch | None = None,
        *,
        exclude: LabelMatch | None = None,
        ids: Iterable[str] | None = None,
        backend: Backend | None = None,
        name: str | None = None,
    ) -> None:
        self.match = _parse(match, "match")
        self.exclude = _parse(exclude, "exclude")
        self.ids = None if ids is None else frozenset(ids)
        if not self.match and not self.exclude and self.ids is None:
            raise ValidationError("NodeAffinity needs match=, exclude= or ids=.")
        super().__init__(backend, name=name)
        self.unit = self.label("ok")
        self.own(self.unit, restorable=False, why_not="only matching nodes may hold it")
        self.nodes = self._write()

    def matches(self, node: Node) -> bool:
        """True if `node` is alive and matches."""
        if not node.alive or (self.ids is not None and node.id not in self.ids):
            return False
        for key, values in self.match.items():
            if key not in node.labels or (values is not None and node.labels[key] not in values):
                return False
        for key, values in self.exclude.items():
            if key in node.labels and (values is None or node.labels[key] in values):
                return False
        return True

    def _plain(self) -> dict[str, str] | None:
        """The match as a label selector, if it is plain equality on every key."""
        if self.exclude or self.ids is not None:
            return None
        if not all(v is not None and len(v) == 1 for v in self.match.values()):
            return None
        return {k: v[0] for k, v in self.match.items() if v is not None}

    def _write(self) -> tuple[str, ...]:
        selector = self._plain()
        capacities = {self.unit: MAX_CAPACITY}
        if selector is not None:
            return self.set_resources(capacities, NodeSpec.with_labels(selector), selector=selector)
        state = self.backend.get_cluster_state()
        nodes = [n for n in sorted(state.nodes) if self.matches(state.nodes[n])]
        return self.set_resources(capacities, nodes) if nodes else ()

    def constraint(self) -> Constraint:
        return Constraint(Resources({self.unit: 1}), source=self.source)

    def _eligible_nodes(self, state: ClusterState) -> list[str]:
        return []  # a lost copy never moves to a node that does not match

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        source = self.source
        nodes = tuple(sorted(self.ledger().get(self.unit, {})))
        parts = PlanParts(
            [(self.unit, MAX_CAPACITY, n, source) for n in nodes], Resources({self.unit: 1})
        )
        parts.intents.append(lambda names: PinnedTo(names, source=source, nodes=nodes))
        return parts
