"""`check_placement`: an independent check of a placement against kube-scheduler's exact
filter rules, written from the Kubernetes documentation, not from the translation.

The pods arrive one at a time in the order `emit_placement` applies them (the most
constrained workloads first, each workload's pods in witness order); a pod kube-scheduler
would reject now is retried once others have landed (as its scheduling queue does), and the
placement passes when every pod lands. Each arrival is checked against what is already
there: requests and allocatable (running pods included), the pods count, cordon, taints,
nodeName, nodeSelector, required node affinity, required pod affinity and anti-affinity in
both directions (a node without the topology key: an anti-affinity term does not apply, an
affinity term fails), and DoNotSchedule topology spread constraints (skew = matching pods
in the node's domain + 1 - the least over the eligible domains, 0 below minDomains).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from escher.core.resources import EPSILON
from escher.manifests._cluster import KubeCluster
from escher.manifests._emit import apply_order
from escher.manifests._match import node_affinity_matches, selector_matches, tolerates
from escher.manifests._requests import pod_requests
from escher.manifests._workloads import Workload, Workloads

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
HARD_EFFECTS = ("NoSchedule", "NoExecute")
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


@dataclass(frozen=True)
class Violation:
    """A pod of a placement that kube-scheduler's exact rules do not admit.

    Attributes:
        workload: The workload's ``Kind/namespace/name``.
        node: The node the placement gives the pod.
        rule: The rule, as kube-scheduler's plugin and field (``pod anti-affinity``, ...).
        detail: Why, in the user's terms.
    """

    workload: str
    node: str
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.workload} on {self.node}: {self.rule}: {self.detail}"


@dataclass(frozen=True)
class _Term:
    """A required pod (anti-)affinity term of one group of pods."""

    owner: int
    key: str
    selector: Any
    namespaces: frozenset[str] | None  # None: every namespace
    source: str


@dataclass
class _Spread:
    """A DoNotSchedule spread constraint of a workload, with its eligible nodes' domains."""

    key: str
    skew: int
    min_domains: int
    selector: Any
    domains: dict[str, str]  # eligible node -> its domain
    source: str
    counts: Counter[str] = field(default_factory=Counter)
    values: frozenset[str] = frozenset()  # the eligible domains
    low: int = 0  # the least count over `values`
    at_low: int = -1  # how many domains hold `low` (-1: not yet counted)

    def add(self, node: str) -> None:
        """One more matching pod on `node` (if it is eligible)."""
        domain = self.domains.get(node)
        if domain is None:
            return
        if self.at_low < 0:
            self.at_low = len(self.values)
        before = self.counts[domain]
        self.counts[domain] = before + 1
        if before == self.low:
            self.at_low -= 1
            if self.at_low == 0:
                self.low += 1
                self.at_low = sum(1 for v in self.values if self.counts[v] == self.low)


@dataclass
class _Group:
    """Pods that share namespace, labels and spec: one workload, or one running pod."""

    namespace: str
    labels: Mapping[str, str]
    name: str
    workload: Workload | None = None
    affinity: list[_Term] = field(default_factory=list)
    anti: list[_Term] = field(default_factory=list)
    spreads: list[_Spread] = field(default_factory=list)
    requests: dict[str, float] = field(default_factory=dict)

    @property
    def spec(self) -> Mapping[str, Any]:
        return self.workload.pod_spec if self.workload is not None else {}


def _term_namespaces(
    term: Mapping[str, Any], own: str, labels: Mapping[str, Mapping[str, str]]
) -> frozenset[str] | None:
    listed = {str(n) for n in term.get("namespaces") or []}
    sel = term.get("namespaceSelector")
    if sel is not None:
        if not sel:
            return None
        where = "namespaceSelector"
        chosen = {ns for ns, lb in labels.items() if selector_matches(sel, lb, where)}
        return frozenset(listed | chosen)
    return frozenset(listed or {own})


class _Checker:
    def __init__(self, workloads: Workloads, cluster: KubeCluster) -> None:
        self.cluster = cluster
        self.ns_labels = {**cluster.namespaces, **workloads.namespaces}
        self.groups: list[_Group] = []
        self.by_workload: dict[str, int] = {}
        self.used = cluster.used()
        self.keys: set[str] = set()
        self.match_memo: dict[tuple[int, int], bool] = {}
        for pod in cluster.pods:
            g = _Group(pod.namespace, pod.labels, f"Pod {pod.namespace}/{pod.name}")
            self.groups.append(g)
            self._terms(len(self.groups) - 1, pod.affinity, g.name, anti_only=True)
        for w in workloads.items:
            g = _Group(w.namespace, w.labels, w.title, w)
            g.requests = pod_requests(w.pod_spec, w.title)
            self.groups.append(g)
            self.by_workload[w.key] = len(self.groups) - 1
            self._terms(len(self.groups) - 1, w.pod_spec.get("affinity") or {}, w.title)
            self._spreads(g)
        # domain counts of each term's matching pods, and of each anti term's owners
        self.terms = [t for g in self.groups for t in (*g.affinity, *g.anti)]
        self.matched: dict[int, Counter[str]] = {id(t): Counter() for t in self.terms}
        self.owners: dict[int, Counter[str]] = {
            id(t): Counter() for g in self.groups for t in g.anti
        }
        self.spreads = [(i, sp) for i, g in enumerate(self.groups) for sp in g.spreads]
        self.spread_memo: dict[tuple[int, int], bool] = {}
        self.counted_by: dict[int, tuple[list[_Term], list[_Spread]]] = {}
        for i, pod in enumerate(cluster.pods):
            self.land(i, pod.node, count_resources=False)

    def _terms(
        self, owner: int, affinity: Mapping[str, Any], name: str, anti_only: bool = False
    ) -> None:
        g = self.groups[owner]
        kinds = ("podAntiAffinity",) if anti_only else ("podAntiAffinity", "podAffinity")
        for kind in kinds:
            for i, raw in enumerate((affinity.get(kind) or {}).get(REQUIRED) or []):
                key = str(raw.get("topologyKey"))
                ns = _term_namespaces(raw, g.namespace, self.ns_labels)
                term = _Term(owner, key, raw.get("labelSelector"), ns, f"{name}: {kind}[{i}]")
                (g.anti if kind == "podAntiAffinity" else g.affinity).append(term)
                self.keys.add(key)

    def _spreads(self, g: _Group) -> None:
        w = g.workload
        assert w is not None
        spec = w.pod_spec
        hard = [
            c
            for c in spec.get("topologySpreadConstraints") or []
            if (c.get("whenUnsatisfiable") or "DoNotSchedule") == "DoNotSchedule"
        ]
        keys = {str(c.get("topologyKey")) for c in hard}
        for i, c in enumerate(hard):
            selector = dict(c.get("labelSelector") or {})
            extra = [
                {"key": k, "operator": "In", "values": [w.labels[k]]}
                for k in c.get("matchLabelKeys") or []
                if k in w.labels
            ]
            if extra:
                selector["matchExpressions"] = [*(selector.get("matchExpressions") or []), *extra]
            sel = selector if c.get("labelSelector") is not None or extra else None
            domains = {}
            for name, n in self.cluster.nodes.items():
                if not all(k in n.labels for k in keys):
                    continue
                if (c.get("nodeAffinityPolicy") or "Honor") == "Honor" and not self._affinity_ok(
                    spec, n.labels, name
                ):
                    continue
                if (c.get("nodeTaintsPolicy") or "Ignore") == "Honor" and not self._taints_ok(
                    spec, n.taints
                ):
                    continue
                domains[name] = n.labels[str(c.get("topologyKey"))]
            md = c.get("minDomains")
            g.spreads.append(
                _Spread(
                    str(c.get("topologyKey")),
                    int(c.get("maxSkew") or 1),
                    md if isinstance(md, int) else 1,
                    sel,
                    domains,
                    f"{w.title}: topologySpreadConstraints (DoNotSchedule) [{i}]",
                    values=frozenset(domains.values()),
                )
            )

    @staticmethod
    def _affinity_ok(spec: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
        selector = spec.get("nodeSelector") or {}
        if any(labels.get(str(k)) != str(v) for k, v in selector.items()):
            return False
        req = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(REQUIRED) or {}
        terms = req.get("nodeSelectorTerms")
        return not req or node_affinity_matches(terms or [], labels, name, "nodeAffinity")

    @staticmethod
    def _taints_ok(spec: Mapping[str, Any], taints: Sequence[Mapping[str, Any]]) -> bool:
        tolerations = spec.get("tolerations") or []
        return all(tolerates(tolerations, t) for t in taints if t.get("effect") in HARD_EFFECTS)

    def _matches(self, term: _Term, group: int) -> bool:
        memo = (id(term), group)
        if memo not in self.match_memo:
            g = self.groups[group]
            ok = (term.namespaces is None or g.namespace in term.namespaces) and selector_matches(
                term.selector, g.labels, term.source
            )
            self.match_memo[memo] = ok
        return self.match_memo[memo]

    def _spread_matches(self, s: _Spread, owner: int, group: int) -> bool:
        memo = (id(s), group)
        if memo not in self.spread_memo:
            g, o = self.groups[group], self.groups[owner]
            self.spread_memo[memo] = g.namespace == o.namespace and selector_matches(
                s.selector, g.labels, s.source
            )
        return self.spread_memo[memo]

    def _counted_by(self, group: int) -> tuple[list[_Term], list[_Spread]]:
        """The terms that select a pod of `group`, and the spreads that count it."""
        if group not in self.counted_by:
            self.counted_by[group] = (
                [t for t in self.terms if self._matches(t, group)],
                [sp for i, sp in self.spreads if self._spread_matches(sp, i, group)],
            )
        return self.counted_by[group]

    def land(self, group: int, node: str, count_resources: bool = True) -> None:
        labels = self.cluster.nodes[node].labels if node in self.cluster.nodes else {}
        terms, spreads = self._counted_by(group)
        for t in terms:
            if t.key in labels:
                self.matched[id(t)][labels[t.key]] += 1
        for t in self.groups[group].anti:
            if t.key in labels:
                self.owners[id(t)][labels[t.key]] += 1
        for sp in spreads:
            sp.add(node)
        if count_resources and node in self.used:
            held = self.used[node]
            for k, v in self.groups[group].requests.items():
                held[k] = held.get(k, 0.0) + v
            held["pods"] = held.get("pods", 0.0) + 1

    def reject(self, group: int, node: str) -> tuple[str, str] | None:
        """(rule, detail) if one pod of `group` may not land on `node` now."""
        n = self.cluster.nodes.get(node)
        if n is None:
            return "node", "no such node"
        return (
            self._node_reject(group, node)
            or self._spread_reject(group, node)
            or self._anti_reject(group, node)
            or self._affinity_reject(group, node)
        )

    def _node_reject(self, group: int, node: str) -> tuple[str, str] | None:
        """Cordon, nodeName, taints, nodeSelector and node affinity, requests."""
        g = self.groups[group]
        spec = g.spec
        n = self.cluster.nodes[node]
        if n.unschedulable and not tolerates(spec.get("tolerations") or [], UNSCHEDULABLE_TAINT):
            return "cordon", "the node is cordoned (spec.unschedulable)"
        if spec.get("nodeName") and spec.get("nodeName") != node:
            return "nodeName", f"nodeName is {spec.get('nodeName')}"
        if not self._taints_ok(spec, n.taints):
            return "taints", "a NoSchedule/NoExecute taint is not tolerated"
        if not self._affinity_ok(spec, n.labels, node):
            return "nodeSelector/node affinity", "the node does not match"
        held = self.used.get(node, {})
        for k, v in g.requests.items():
            if held.get(k, 0.0) + v > n.allocatable.get(k, 0.0) + EPSILON:
                return "resources", f"Insufficient {k}"
        if "pods" in n.allocatable and held.get("pods", 0.0) + 1 > n.allocatable["pods"] + EPSILON:
            return "resources", "Too many pods"
        return None

    def _spread_reject(self, group: int, node: str) -> tuple[str, str] | None:
        labels = self.cluster.nodes[node].labels
        for s in self.groups[group].spreads:
            if s.key not in labels:
                return "topology spread", f"{s.source}: the node has no label {s.key}"
            low = s.low
            if len(s.values) < s.min_domains:
                low = 0
            me = 1 if self._spread_matches(s, group, group) else 0
            if s.counts.get(labels[s.key], 0) + me - low > s.skew:
                return "topology spread", f"{s.source}: maxSkew {s.skew} exceeded"
        return None

    def _anti_reject(self, group: int, node: str) -> tuple[str, str] | None:
        """The pod's anti-affinity, and the anti-affinity of the pods already there."""
        labels = self.cluster.nodes[node].labels
        for t in self.groups[group].anti:
            if t.key in labels and self.matched[id(t)][labels[t.key]]:
                return "pod anti-affinity", f"{t.source}: a matching pod is in the node's domain"
        for t in self._counted_by(group)[0]:
            if t.key in labels and id(t) in self.owners and self.owners[id(t)][labels[t.key]]:
                return (
                    "pod anti-affinity (of existing pods)",
                    f"{t.source}: a pod whose term selects this pod is in the domain",
                )
        return None

    def _affinity_reject(self, group: int, node: str) -> tuple[str, str] | None:
        """The pod's affinity; the first of pods that match their own terms goes anywhere
        with the keys (kube-scheduler's rule, so such a series is not stuck forever)."""
        terms = self.groups[group].affinity
        labels = self.cluster.nodes[node].labels
        for t in terms:
            if t.key not in labels:
                return "pod affinity", f"{t.source}: the node has no label {t.key}"
        if all(self.matched[id(t)][labels[t.key]] for t in terms):
            return None
        first = not any(sum(self.matched[id(t)].values()) for t in terms)
        if first and all(self._matches(t, group) for t in terms):
            return None
        return "pod affinity", f"{terms[0].source}: no matching pod in the node's domain"


def check_placement(
    workloads: Workloads, cluster: KubeCluster, witness: Mapping[str, Sequence[str]]
) -> Violation | None:
    """The first pod kube-scheduler's exact rules would keep Pending if the pods of
    `workloads` arrive pinned to the nodes of `witness` (None: every pod lands).

    Args:
        workloads: The workloads (each must be in `witness`, with one node per pod).
        cluster: The nodes and running pods.
        witness: ``Kind/namespace/name`` -> one node per pod.

    Returns:
        None when an arrival order (the emitted apply order, with retries) lands every pod;
        else the first pod that stays Pending and the rule that keeps it there.
    """
    checker = _Checker(workloads, cluster)
    pending: list[tuple[int, str, str]] = []
    for key in apply_order(witness):
        if key in checker.by_workload:
            pending.extend((checker.by_workload[key], key, n) for n in witness[key])
    for w in workloads.items:
        if len(witness.get(w.key, ())) != w.replicas:
            said = f"the placement does not give its {w.replicas} pods one node each"
            return Violation(w.key, "-", "replicas", said)
    while pending:
        waiting = []
        for item in pending:
            if checker.reject(item[0], item[2]) is None:
                checker.land(item[0], item[2])
            else:
                waiting.append(item)
        if len(waiting) == len(pending):
            group, key, node = waiting[0]
            why = checker.reject(group, node)
            assert why is not None
            return Violation(key, node, *why)
        pending = waiting
    return None
