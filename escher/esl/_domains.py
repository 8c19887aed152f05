"""Anti-affinity and spreading across topology domains (zones, racks, any grouping).

Ephemeral resources are per node, so a limit per domain cannot be a capacity. These ESLs
decide a task's domain themselves, under their lock, when it is launched, and steer it there
with a label on every node of that domain (`escher.esl._topology.DomainLabels`): the task can
only run in its domain, also when it is retried or its node is lost. The ESL counts its live
tasks (launched, not final) per domain:

* `DomainAntiAffinity` assigns a domain holding fewer than `per_domain` of them; when every
  domain is full the task waits, requesting a label of its own that exists nowhere, until
  a task of the policy ends and the ESL puts that label on the domain it then assigns
  (oldest waiting task first);
* `DomainSpread` assigns a domain that keeps the counts within `max_skew` of the emptiest
  domain (as Kubernetes' ``topologySpreadConstraints``).

Among the domains allowed, one with room for the task now wins, then the one with fewest
tasks, then the name. A domain's label is written the first time a task goes there (setup
writes nothing).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from escher.backends.base import Backend
from escher.core.cluster import ClusterState
from escher.core.errors import ValidationError
from escher.core.nodespec import NodeSpec
from escher.core.plan import Colocated, Intent, Separated, SpreadAtMost, SpreadEvenly
from escher.core.resources import MAX_CAPACITY, Resources, validate_count
from escher.core.task import TaskRef, TaskSpec
from escher.esl._contribution import Contribution, LabelNote
from escher.esl._esl import ESL, validate_group
from escher.esl._plan_parts import PlanParts
from escher.esl._policy import Policy
from escher.esl._topology import DomainLabels, Topology, TopologyLike, copies, write_domain


@dataclass
class _Gate:
    """A task that waits for a domain: its own label, and the domain once assigned."""

    label: str
    domain: str | None = None


class _CountedDomains(ESL):
    """Shared machinery: per-domain counts of live tasks, domain labels, waiting tasks."""

    kind = "dom"

    def __init__(self, topology: TopologyLike, backend: Backend | None, name: str | None) -> None:
        super().__init__(backend, name=name)
        self.topology = Topology.of(topology)
        if not self.topology.domains(self.backend.get_cluster_state()):
            key = self.topology.key
            raise ValidationError(
                f"{self.source}: no alive node has a {key!r} domain; label the nodes with "
                f"{key!r} or pass Topology({key!r}, {{node: domain}})."
            )
        self.domains = DomainLabels(self, self.topology, "d")
        #: Domain -> live tasks (launched, not final) assigned to it.
        self.counts: dict[str, int] = {}
        self._gates: dict[str, _Gate] = {}  # gate label -> gate, oldest first
        #: Domain -> nodes as of the last launch (a node-label domain is written by selector)
        self._nodes: dict[str, list[str]] = {}
        self._gate_ids = itertools.count(1)

    # --- the rule --------------------------------------------------------------------------
    def allowed(self, counts: Mapping[str, int], domains: list[str]) -> list[str]:
        """The domains a new task may go to, given the live counts."""
        raise NotImplementedError

    def choose(
        self, counts: Mapping[str, int], nodes: Mapping[str, list[str]], roomy: Mapping[str, bool]
    ) -> str | None:
        """The domain for the next task: allowed, with room now, fewest tasks, by name."""
        allowed = self.allowed(counts, list(nodes))
        if not allowed:
            return None
        return min(allowed, key=lambda d: (not roomy.get(d, False), counts.get(d, 0), d))

    def _own_request(self, spec: TaskSpec) -> Resources:
        """The task's request without this ESL's labels (they may not exist yet)."""
        mine = self.domains.domain_of_label.keys() | self._gates.keys()
        return Resources({r: q for r, q in spec.resources.items() if r not in mine})

    # --- hooks -----------------------------------------------------------------------------
    def before_launch(self, spec: TaskSpec) -> TaskSpec:
        """Assign the task a domain (or a gate when none is allowed) and request its label."""
        self._check_open()
        with self._lock:
            state = self.backend.get_cluster_state()
            nodes = self._nodes = self.topology.domains(state)
            request = self._own_request(spec)
            roomy = {
                d: any(request.fits_in(state.nodes[n].available) for n in members)
                for d, members in nodes.items()
            }
            domain = self.choose(self.counts, nodes, roomy)
            if domain is None:
                gate = _Gate(self.label(f"w{next(self._gate_ids)}"))
                self.own(gate.label, restorable=False, why_not="a waiting task's gate")
                self._gates[gate.label] = gate
                label = gate.label
            else:
                label = self.domains.label(domain, nodes[domain])
                self.counts[domain] = self.counts.get(domain, 0) + 1
        return dataclasses.replace(spec, resources=spec.resources + {label: 1})

    def _mine(self, spec: TaskSpec) -> tuple[str | None, _Gate | None]:
        """(domain, gate) of a task launched through this ESL."""
        for label in spec.resources:
            if label in self.domains.domain_of_label:
                return self.domains.domain_of_label[label], None
            gate = self._gates.get(label)
            if gate is not None:
                return gate.domain, gate
        return None, None

    def launch_failed(self, spec: TaskSpec) -> None:
        self._release(spec)

    def task_done(self, ref: TaskRef) -> None:
        """Free the task's place in its domain; a waiting task may take it."""
        self._release(ref.spec)

    def _release(self, spec: TaskSpec) -> None:
        with self._lock:
            domain, gate = self._mine(spec)
            if gate is not None:
                del self._gates[gate.label]
            if domain is not None:
                self.counts[domain] -= 1
        if gate is not None:
            self.forget_known(gate.label)
        if domain is not None and not self._closed:
            self._admit()

    def _admit(self) -> None:
        """Give waiting tasks (oldest first) the domains that now allow them."""
        with self._lock:
            waiting = [g for g in self._gates.values() if g.domain is None]
            if not waiting:
                return
            nodes = self._nodes
            if self.topology.mapping is not None or not nodes:  # node lists must be fresh
                nodes = self._nodes = self.topology.domains(self.backend.get_cluster_state())
            for gate in waiting:
                domain = self.choose(self.counts, nodes, {})
                if domain is None:
                    return
                write_domain(self, {gate.label: 1}, self.topology, domain, nodes[domain])
                gate.domain = domain
                self.counts[domain] = self.counts.get(domain, 0) + 1

    # --- explainers ------------------------------------------------------------------------
    def contribution(self, ref: TaskRef) -> Contribution | None:
        """The task's domain, or why it waits for one (see `ESL.contribution`)."""
        key = self.topology.key
        with self._lock:
            domain, gate = self._mine(ref.spec)
            counts = dict(self.counts)
        if domain is None and gate is None:
            return None
        if gate is not None and domain is None:
            note = LabelNote(
                self.source, f"a {key!r} domain the policy assigns", True, None, "slot"
            )
            shown = ", ".join(f"{d}={c}" for d, c in sorted(counts.items())) or "none"
            waiting = f"no {key!r} domain allows another task now (live tasks: {shown})"
            return Contribution(self.source, {gate.label: note}, waiting, "slot")
        label = gate.label if gate is not None else self.domains.labels[str(domain)]
        note = LabelNote(self.source, f"every node of {key}={domain}", False, None, "domain")
        return Contribution(self.source, {label: note})

    # --- the verifier ----------------------------------------------------------------------
    def assignment(self, count: int, resources: Mapping[str, float] | None = None) -> list[str]:
        """The domains `count` new tasks requesting `resources` would get, in order, on the
        cluster as it is now, counting from no task (a batch on its own); tasks no domain
        allows get none (they would wait)."""
        request = Resources.of(resources)
        state = self.backend.get_cluster_state()
        nodes = self.topology.domains(state)
        free = {n: dict(state.nodes[n].available) for members in nodes.values() for n in members}
        counts: dict[str, int] = {}
        chosen: list[str] = []
        for _ in range(count):
            roomy = {
                d: any(request.fits_in(free[n]) for n in members) for d, members in nodes.items()
            }
            domain = self.choose(counts, nodes, roomy)
            if domain is None:
                break
            counts[domain] = counts.get(domain, 0) + 1
            chosen.append(domain)
            node = next((n for n in nodes[domain] if request.fits_in(free[n])), None)
            if node is not None:
                for r, q in request.items():
                    free[node][r] = free[node].get(r, 0.0) - q
        return chosen

    def intent(self, names: tuple[str, ...]) -> Intent:
        """The intent this policy declares about tasks `names`."""
        raise NotImplementedError

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        """The tasks split by the domain `assignment` gives them; each part requests its
        domain's label, present on every node of the domain."""
        source = self.source
        chosen = self.assignment(count, resources)
        state = self.backend.get_cluster_state()
        nodes = self.topology.domains(state)
        parts = PlanParts(topologies=self.topology.plan_topologies())
        for domain in sorted(set(chosen)):
            label = self.label(f"d-{domain}")
            selector = self.topology.selector(domain)
            wheres: list[Any] = [selector] if selector is not None else list(nodes[domain])
            for where in wheres:
                spec: Any = where if isinstance(where, str) else NodeSpec.with_labels(where)
                parts.resources.append((label, MAX_CAPACITY, spec, source))
            parts.split.append((domain, chosen.count(domain), Resources({label: 1})))
        if len(chosen) < count:  # would wait for a domain: never all at once
            gate = self.label("waiting")
            parts.split.append(("waiting", count - len(chosen), Resources({gate: 1})))
        parts.intents.append(self.intent)
        return parts


class DomainAntiAffinity(_CountedDomains):
    """At most `per_domain` of its tasks in any domain of `topology` at a time.

    Args:
        topology: A node label key (``"zone"``) or a `Topology`.
        per_domain: Live tasks per domain (1: one per zone).
        backend: The backend (default: the current one).
        name: Used in labels and explanations.

    Raises:
        ValidationError: no alive node has a domain of `topology`, or a bad `per_domain`.
    """

    kind = "daa"

    def __init__(
        self,
        topology: TopologyLike,
        backend: Backend | None = None,
        *,
        per_domain: int = 1,
        name: str | None = None,
    ) -> None:
        validate_count(per_domain, what="per_domain")
        self.per_domain = per_domain
        super().__init__(topology, backend, name)

    def allowed(self, counts: Mapping[str, int], domains: list[str]) -> list[str]:
        return [d for d in domains if counts.get(d, 0) < self.per_domain]

    def intent(self, names: tuple[str, ...]) -> Intent:
        key, source = self.topology.key, self.source
        if self.per_domain == 1:
            return Separated(names, source=source, topology_key=key)
        return SpreadAtMost(names, source=source, per_node=self.per_domain, topology_key=key)


class DomainSpread(_CountedDomains):
    """Spread its tasks over the domains of `topology`: the live tasks in the fullest
    domain exceed those in the emptiest by at most `max_skew`.

    Args:
        topology: A node label key (``"zone"``) or a `Topology`.
        max_skew: Largest allowed difference (>= 1).
        min_domains: If fewer domains than this exist, the emptiest count is taken as 0
            (Kubernetes' ``minDomains``), so tasks wait rather than crowd few domains.
        backend: The backend (default: the current one).
        name: Used in labels and explanations.

    Raises:
        ValidationError: no alive node has a domain of `topology`, or bad arguments.
    """

    kind = "dspr"

    def __init__(
        self,
        topology: TopologyLike,
        backend: Backend | None = None,
        *,
        max_skew: int = 1,
        min_domains: int | None = None,
        name: str | None = None,
    ) -> None:
        validate_count(max_skew, what="max_skew")
        validate_count(min_domains or 1, what="min_domains")
        self.max_skew = max_skew
        self.min_domains = min_domains
        super().__init__(topology, backend, name)

    def allowed(self, counts: Mapping[str, int], domains: list[str]) -> list[str]:
        if not domains:
            return []
        low = min(counts.get(d, 0) for d in domains)
        if self.min_domains is not None and len(domains) < self.min_domains:
            low = 0
        return [d for d in domains if counts.get(d, 0) + 1 - low <= self.max_skew]

    def intent(self, names: tuple[str, ...]) -> Intent:
        return SpreadEvenly(
            names, source=self.source, topology_key=self.topology.key, max_skew=self.max_skew
        )


class DomainColocation(ESL):
    """Co-locate each group's tasks in one domain of `topology` (all in one zone).

    A group's domain is chosen when its first member is launched, under the ESL's lock:
    a domain where the whole group fits now, else one where the first member fits now,
    else the one with the most room for members; then the group's label goes on every node
    of that domain, and every member (the first one too) requests it. So a member never runs
    outside the group's domain, also when it is retried.

    Args:
        topology: A node label key (``"zone"``) or a `Topology`.
        backend: The backend (default: the current one).
        name: Used in labels and explanations.

    Raises:
        ValidationError: no alive node has a domain of `topology`.
    """

    kind = "dcolo"

    def __init__(
        self, topology: TopologyLike, backend: Backend | None = None, *, name: str | None = None
    ) -> None:
        super().__init__(backend, name=name)
        self.topology = Topology.of(topology)
        if not self.topology.domains(self.backend.get_cluster_state()):
            key = self.topology.key
            raise ValidationError(f"{self.source}: no alive node has a {key!r} domain.")
        self.groups: dict[str, DomainGroup] = {}
        self.domains = DomainLabels(self, self.topology, "d")

    def group(
        self, name: str, size: int | None = None, resources: Mapping[str, float] | None = None
    ) -> DomainGroup:
        """A group of `size` members (None: open), each requesting `resources` by default."""
        self._check_open()
        validate_group(name, size)
        with self._lock:
            if name in self.groups:
                raise ValidationError(f"{self.source} already has a group {name!r}.")
            group = DomainGroup(self, name, size, Resources.of(resources))
            self.groups[name] = group
        return group

    def choose_domain(self, need: Resources, size: int, state: ClusterState) -> str | None:
        """The domain for a group of `size` members each needing `need` (see class doc)."""
        nodes = self.topology.domains(state)
        if not nodes:
            return None

        def fit(domain: str) -> int:
            members = nodes[domain]
            return sum(copies(need, state.nodes[n].available, size) for n in members)

        def ever(domain: str) -> int:
            members = nodes[domain]
            return sum(copies(need, state.nodes[n].total, size) for n in members)

        return min(nodes, key=lambda d: (fit(d) < size, fit(d) < 1, -ever(d), d))


class DomainGroup(Policy):
    """One group of a `DomainColocation`; launch its members with `launch`.

    Members request their domain's label (shared by every group in that domain: a group
    only needs its members kept inside its domain), written the first time a group goes
    there.

    Attributes:
        name: The group's name.
        size: Number of members (None: open).
        domain: Its domain (None until the first member is launched).
        label: The label its members request: its domain's once chosen (before that, a
            label of its own that exists nowhere, so a member never runs outside it).
    """

    def __init__(self, owner: DomainColocation, name: str, size: int | None, resources: Resources):
        self.owner = owner
        self.backend = owner.backend
        self.name = name
        self.size = size
        self.resources = resources
        self.label = owner.label(f"g-{name}")
        self.domain: str | None = None
        self.refs: list[TaskRef] = []

    @property
    def source(self) -> str:
        return f"{self.owner.source}.group({self.name!r})"

    def default_resources(self) -> Mapping[str, float]:
        return self.resources

    def before_launch(self, spec: TaskSpec) -> TaskSpec:
        """Refuse a member beyond the size; the first member chooses the group's domain."""
        owner = self.owner
        owner._check_open()
        with owner._lock:
            if self.size is not None and len(self.refs) >= self.size:
                raise ValidationError(
                    f"group {self.name!r} has {self.size} members already; make a new group."
                )
            if self.domain is None:
                state = self.backend.get_cluster_state()
                domain = owner.choose_domain(spec.resources, self.size or 1, state)
                if domain is not None:
                    nodes = owner.topology.domains(state)[domain]
                    self.label = owner.domains.label(domain, nodes)
                    self.domain = domain
            label = self.label
        return dataclasses.replace(spec, resources=spec.resources + {label: 1})

    def after_launch(self, ref: TaskRef) -> None:
        with self.owner._lock:
            self.refs.append(ref)

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        """The group's label on its domain (chosen now if no member was launched yet)."""
        owner, source = self.owner, self.source
        state = self.backend.get_cluster_state()
        domain = self.domain
        if domain is None:
            domain = owner.choose_domain(resources, self.size or count, state)
        label = self.label if domain is None else owner.label(f"d-{domain}")
        parts = PlanParts(
            request=Resources({label: 1}), topologies=owner.topology.plan_topologies()
        )
        if domain is not None:
            selector = owner.topology.selector(domain)
            if selector is not None:
                wheres: list[Any] = [NodeSpec.with_labels(selector)]
            else:
                wheres = list(owner.topology.domains(state).get(domain, []))
            parts.resources.extend((label, MAX_CAPACITY, w, source) for w in wheres)
        key = owner.topology.key
        parts.intents.append(lambda names: Colocated(names, source=source, topology_key=key))
        return parts
