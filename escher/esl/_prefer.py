"""Preferences: weights that steer placement without ever blocking it.

`Preferences` scores, when a task is launched, every node that has room for the task's whole
request right now (from the cluster state): each term adds its weight where the node meets
it. If some node scores higher than the others, the task is steered there with a label of its
own on that node; if no node has room now, or every node scores the same, the task is not
steered at all and goes wherever the scheduler puts it. A steered task that has not started
within `patience` seconds (the node filled up meanwhile) gets its label on every node: it is
no longer steered, and it never waits for a preference.

Terms (each with a `weight` > 0):

* `PreferNodes(labels)`: nodes whose labels match (a value may be a list of allowed values);
* `PreferTogether(topology)`: nodes (or domains) where this ESL's live tasks already are;
* `PreferApart(topology)`: nodes (or domains) without them (subtracts its weight where they
  are);
* `PreferSpread(topology)`: subtracts its weight once per live task already in the domain.

A live task is one launched through this ESL and not final; it is where it runs, or where it
was steered while it waits.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from escher.backends.base import Backend
from escher.core.cluster import ClusterState, Node
from escher.core.errors import ValidationError
from escher.core.plan import Colocated, Intent, PinnedTo, Separated, SpreadEvenly
from escher.core.resources import Resources
from escher.core.task import TaskRef, TaskSpec
from escher.esl._contribution import Contribution, LabelNote
from escher.esl._esl import ESL
from escher.esl._ledger import EVERY_NODE
from escher.esl._plan_parts import PlanParts
from escher.esl._planning import planning_backend
from escher.esl._topology import Topology, TopologyLike


def _weight(weight: object) -> float:
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0:
        raise ValidationError(f"a preference's weight must be a number > 0, got {weight!r}.")
    return float(weight)


@dataclass(frozen=True)
class _Where:
    """Where the live tasks are: per node, and per domain of each topology used."""

    nodes: Counter[str]
    domains: dict[str, Counter[str]] = field(default_factory=dict)

    def count(self, topology: Topology | None, node: Node) -> int:
        if topology is None:
            return self.nodes[node.id]
        domain = topology.domain_of(node)
        return 0 if domain is None else self.domains[topology.key][domain]


class Term:
    """A preference term: a score per node, and the intent it declares (with its weight)."""

    weight: float = 1.0
    topology: Topology | None = None

    def score(self, node: Node, where: _Where) -> float:
        """This term's contribution for `node`."""
        raise NotImplementedError

    def intent(self, names: tuple[str, ...], source: str, state: ClusterState) -> Intent:
        """The soft intent (weight > 0) this term declares about tasks `names`."""
        raise NotImplementedError


class PreferNodes(Term):
    """Prefer nodes whose labels match `labels` (key -> value, or a list of values), or
    whose id is in `ids`.

    Args:
        labels: Wanted node labels.
        ids: Wanted node ids (Ray's soft ``NodeAffinitySchedulingStrategy``).
        weight: Added to a matching node's score.
    """

    def __init__(
        self,
        labels: Mapping[str, str | Sequence[str]] | None = None,
        *,
        ids: Sequence[str] | None = None,
        weight: float = 1.0,
    ) -> None:
        if labels is not None and (not isinstance(labels, Mapping) or not labels):
            raise ValidationError("PreferNodes labels must be a non-empty mapping.")
        if labels is None and not ids:
            raise ValidationError("PreferNodes needs labels= or ids=.")
        self.labels = {
            str(k): (v,) if isinstance(v, str) else tuple(str(x) for x in v)
            for k, v in (labels or {}).items()
        }
        self.ids = None if ids is None else frozenset(ids)
        self.weight = _weight(weight)

    def matches(self, node: Node) -> bool:
        """True if `node` carries one of the allowed values of every key (and is listed)."""
        if self.ids is not None and node.id not in self.ids:
            return False
        return all(node.labels.get(k) in values for k, values in self.labels.items())

    def score(self, node: Node, where: _Where) -> float:
        return self.weight if self.matches(node) else 0.0

    def intent(self, names: tuple[str, ...], source: str, state: ClusterState) -> Intent:
        nodes = tuple(sorted(n for n, node in state.nodes.items() if self.matches(node)))
        return PinnedTo(names, source=source, nodes=nodes, weight=self.weight)


class _AmongTasks(Term):
    """A term about where the ESL's live tasks are, per node or per domain of `topology`."""

    def __init__(self, topology: TopologyLike | None = None, *, weight: float = 1.0) -> None:
        self.topology = None if topology is None else Topology.of(topology)
        self.weight = _weight(weight)

    @property
    def key(self) -> str | None:
        """The topology key of the declared intent (None: per node)."""
        return None if self.topology is None else self.topology.key


class PreferTogether(_AmongTasks):
    """Prefer the nodes (or domains of `topology`) where the ESL's live tasks are.

    Args:
        topology: None for nodes, else a node label key or a `Topology`.
        weight: Added to a node whose node (domain) holds a live task.
    """

    def score(self, node: Node, where: _Where) -> float:
        return self.weight if where.count(self.topology, node) else 0.0

    def intent(self, names: tuple[str, ...], source: str, state: ClusterState) -> Intent:
        return Colocated(names, source=source, topology_key=self.key, weight=self.weight)


class PreferApart(_AmongTasks):
    """Prefer nodes (or domains of `topology`) without the ESL's live tasks.

    Args:
        topology: None for nodes, else a node label key or a `Topology`.
        weight: Subtracted where a live task is.
    """

    def score(self, node: Node, where: _Where) -> float:
        return -self.weight if where.count(self.topology, node) else 0.0

    def intent(self, names: tuple[str, ...], source: str, state: ClusterState) -> Intent:
        return Separated(names, source=source, topology_key=self.key, weight=self.weight)


class PreferSpread(_AmongTasks):
    """Prefer nodes (or domains of `topology`) holding fewer of the ESL's live tasks.

    Args:
        topology: None for nodes, else a node label key or a `Topology`.
        weight: Subtracted once per live task already in the node's node (domain).
    """

    def score(self, node: Node, where: _Where) -> float:
        return -self.weight * where.count(self.topology, node)

    def intent(self, names: tuple[str, ...], source: str, state: ClusterState) -> Intent:
        return SpreadEvenly(
            names, source=source, topology_key=self.key, max_skew=1, weight=self.weight
        )


class Preferences(ESL):
    """Steer tasks by weighted preferences, never blocking them (see module doc).

    Args:
        *terms: `PreferNodes`, `PreferTogether`, `PreferApart`, `PreferSpread`.
        patience: Seconds (backend clock) a steered task may wait for its node before it
            is no longer steered.
        backend: The backend (default: the current one).
        name: Used in labels and explanations.

    In an AND (``policy & prefs``) it steers last, by the request every other policy made.
    """

    kind = "pref"
    launch_last = True

    def __init__(
        self,
        *terms: Term,
        patience: float = 1.0,
        backend: Backend | None = None,
        name: str | None = None,
    ) -> None:
        if not terms or not all(isinstance(t, Term) for t in terms):
            raise ValidationError("Preferences takes one or more Prefer... terms.")
        if isinstance(patience, bool) or not isinstance(patience, int | float) or patience < 0:
            raise ValidationError(f"patience must be a number of seconds >= 0, got {patience!r}.")
        super().__init__(backend, name=name)
        self.terms = tuple(terms)
        self.patience = float(patience)
        self._live: dict[str, TaskRef] = {}  # task id -> handle
        self._steered: dict[str, str] = {}  # steering label -> node, while its task lives
        self._ids = itertools.count(1)
        #: How many launches were steered, and how many were not (no room, no difference).
        self.steered = 0
        self.unsteered = 0

    def _where(self, state: ClusterState) -> _Where:
        nodes: Counter[str] = Counter()
        for ref in self._live.values():
            node = ref.node_id or self._steered.get(self._label_of(ref.spec) or "")
            if node is not None:
                nodes[node] += 1
        where = _Where(nodes)
        for term in self.terms:
            topo = term.topology
            if topo is not None and topo.key not in where.domains:
                per: Counter[str] = Counter()
                for node, count in nodes.items():
                    domain = topo.domain_of(state.nodes[node]) if node in state.nodes else None
                    if domain is not None:
                        per[domain] += count
                where.domains[topo.key] = per
        return where

    def scores(self, request: Resources, state: ClusterState | None = None) -> dict[str, float]:
        """Node -> score, for the alive nodes with `request` available now."""
        state = self.backend.get_cluster_state() if state is None else state
        with self._lock:
            where = self._where(state)
        return {
            nid: sum(term.score(node, where) for term in self.terms)
            for nid, node in sorted(state.nodes.items())
            if node.alive and request.fits_in(node.available)
        }

    def _label_of(self, spec: TaskSpec) -> str | None:
        return next((label for label in spec.resources if label in self._steered), None)

    def before_launch(self, spec: TaskSpec) -> TaskSpec:
        """Steer the task to the best node with room now, if one scores above the rest.

        A planning run does not steer: the plan states the preferences themselves (soft
        intents), which placement weighs but never has to meet."""
        self._check_open()
        if planning_backend(self.backend) is not None:
            return spec
        scores = self.scores(spec.resources)
        if not scores or max(scores.values()) == min(scores.values()):
            with self._lock:
                self.unsteered += 1
            return spec
        best = min(scores, key=lambda n: (-scores[n], n))
        label = self.label(f"s{next(self._ids)}")
        self.set_resource(label, 1, best, need=spec.resources)
        with self._lock:
            self._steered[label] = best
            self.steered += 1
        return dataclasses.replace(spec, resources=spec.resources + {label: 1})

    def after_launch(self, ref: TaskRef) -> None:
        with self._lock:
            if not ref.done():
                self._live[ref.id] = ref
            label = self._label_of(ref.spec)
        if label is not None and not ref.started():
            self.call_later(self.patience, lambda: self._unsteer(ref, label))

    def _unsteer(self, ref: TaskRef, label: str) -> None:
        """A steered task still waits: let it run anywhere."""
        if ref.started() or ref.done():
            return
        self.set_resources({label: 1}, EVERY_NODE)

    def launch_failed(self, spec: TaskSpec) -> None:
        self._drop(spec)

    def task_done(self, ref: TaskRef) -> None:
        with self._lock:
            self._live.pop(ref.id, None)
        self._drop(ref.spec)

    def _drop(self, spec: TaskSpec) -> None:
        with self._lock:
            label = self._label_of(spec)
            if label is not None:
                del self._steered[label]
        if label is not None and not self._closed:
            self.forget_known(label)

    def contribution(self, ref: TaskRef) -> Contribution | None:
        """Where the task is steered, if it is (see `ESL.contribution`)."""
        with self._lock:
            label = self._label_of(ref.spec)
            node = self._steered.get(label or "")
        if label is None:
            return None
        meaning = f"steered to {node} by preference (anywhere after {self.patience:g}s)"
        return Contribution(self.source, {label: LabelNote(self.source, meaning, kind="steer")})

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        """Each term's intent, with its weight (soft: a plan is feasible without them)."""
        source = self.source
        state = self.backend.get_cluster_state()
        terms = self.terms
        intents = [_declared(t, source, state) for t in terms]
        topologies: dict[str, dict[str, str]] = {}
        for term in terms:
            if term.topology is not None:
                topologies.update(term.topology.plan_topologies())
        return PlanParts(intents=intents, topologies=topologies)


def _declared(term: Term, source: str, state: ClusterState) -> Callable[[tuple[str, ...]], Intent]:
    return lambda names: term.intent(names, source, state)
