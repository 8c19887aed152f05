"""Workloads on a cluster -> an escher `Plan`: one task per workload, one statement per cause.

The semantics are kube-scheduler's filters (docs/kubernetes-preflight.md has the field
table): requests; node filters (cordon, nodeName, taints, nodeSelector, required node
affinity, running pods' (anti-)affinity) as `NodeFilter` intents; pod anti-affinity as
`Separated`; pod affinity to pods known to be in one domain as `Colocated`; topology spread
as `SpreadEvenly` (or `SpreadAtMost` while the global minimum stays 0) over the domains
kube-scheduler counts, with tasks standing for the running pods it counts; preferred terms
and ``ScheduleAnyway`` as preferences. What cannot be stated exactly is left out with a
warning (never made stricter than kube-scheduler).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from escher.core.plan import (
    Colocated,
    Gang,
    Intent,
    PinnedTo,
    Plan,
    Separated,
    SpreadAtMost,
    SpreadEvenly,
)
from escher.manifests._cluster import KubeCluster, RunningPod
from escher.manifests._filters import NodeFilter, node_filter
from escher.manifests._match import (
    node_affinity_matches,
    selector_matches,
    taint_text,
    tolerates,
)
from escher.manifests._requests import pod_requests, to_escher
from escher.manifests._workloads import ManifestError, Workload, Workloads, pod_group_name

HOSTNAME = "kubernetes.io/hostname"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
HARD_EFFECTS = ("NoSchedule", "NoExecute")
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


class _Found(NamedTuple):
    """What a pod (anti-)affinity term selects."""

    key: str
    plan_key: str | None
    targets: list[Workload]
    values: set[str]


@dataclass(frozen=True)
class _Spread:
    """One topology spread constraint of a workload, as read."""

    w: Workload
    index: int
    path: str
    key: str
    skew: int
    weight: float
    min_domains: Any
    mapping: dict[str, str]

    @property
    def field(self) -> str:
        return self.w.field(self.path)


@dataclass
class Translation:
    """A plan for the workloads, and what the translation knows about each.

    Attributes:
        plan: One task per workload (named ``Kind/namespace/name``) and its statements.
        workloads: Task name -> workload.
        filters: Task name -> its node filters (hard ones), in kube-scheduler's order.
        requests: Task name -> one pod's request, in Kubernetes resource names.
        warnings: What is left out or approximated, in the user's terms.
    """

    plan: Plan
    workloads: dict[str, Workload] = field(default_factory=dict)
    filters: dict[str, list[NodeFilter]] = field(default_factory=dict)
    requests: dict[str, dict[str, float]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ManifestError(f"{where}: expected a list.")
    return value


def _map(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ManifestError(f"{where}: expected a mapping.")
    return value


class _Builder:
    """Builds the `Translation` (one pass per workload, then the cross-workload terms)."""

    def __init__(self, workloads: Workloads, cluster: KubeCluster) -> None:
        self.workloads = workloads
        self.cluster = cluster
        self.names = sorted(cluster.nodes)
        self.labels = {n: cluster.nodes[n].labels for n in self.names}
        self.namespaces = {**cluster.namespaces, **workloads.namespaces}
        self.out = Translation(Plan())
        self.has_pods = any("pods" in n.allocatable for n in cluster.nodes.values())
        # anti-affinity edges per topology key: (a, b) pairs of task names, with sources
        self.anti: dict[str | None, dict[tuple[str, str], list[str]]] = {}
        self.topology_names: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
        self.taint_memo: dict[str, tuple[dict[str, set[str]], dict[str, set[str]]]] = {}
        self.later: list[Intent] = []  # intents across workloads, added once all are read

    # -- helpers -----------------------------------------------------------------------
    def warn(self, text: str) -> None:
        self.out.warnings.append(text)

    def key_for(self, key: str) -> str | None:
        """The plan's topology key for node label `key` (None: per node, for a hostname
        label that every node has with a value of its own)."""
        if key == HOSTNAME:
            values = [self.labels[n].get(HOSTNAME) for n in self.names]
            if None not in values and len(set(values)) == len(values):
                return None
        return key

    def restrict(
        self, w: Workload, cause: str, path: str, allowed: set[str], summary: str, **kw: Any
    ) -> None:
        """Add a node filter if it leaves out some node."""
        excluded = [n for n in self.names if n not in allowed]
        if not excluded:
            return
        keep = [n for n in self.names if n in allowed]
        f = node_filter(w.key, cause, w.field(path), keep, excluded, summary, **kw)
        self.out.plan.add_intent(f)
        if not f.preferred:
            self.out.filters.setdefault(w.key, []).append(f)

    def namespaces_of(self, term: Mapping[str, Any], own: str, where: str) -> set[str] | None:
        """The namespaces a pod affinity term looks in (None: every namespace)."""
        listed = {str(n) for n in _list(term.get("namespaces"), f"{where}.namespaces")}
        selector = term.get("namespaceSelector")
        if selector is not None:
            sel = _map(selector, f"{where}.namespaceSelector")
            if not sel:
                return None
            return listed | {
                ns
                for ns, labels in self.namespaces.items()
                if selector_matches(sel, labels, f"{where}.namespaceSelector")
            }
        return listed or {own}

    def matching_workloads(
        self, selector: Any, namespaces: set[str] | None, where: str
    ) -> list[Workload]:
        return [
            o
            for o in self.workloads.items
            if (namespaces is None or o.namespace in namespaces)
            and selector_matches(selector, o.labels, where)
        ]

    def matching_pods(
        self, selector: Any, namespaces: set[str] | None, where: str
    ) -> list[RunningPod]:
        return [
            p
            for p in self.cluster.pods
            if (namespaces is None or p.namespace in namespaces)
            and selector_matches(selector, p.labels, where)
        ]

    def domain_nodes(self, key: str, values: set[str]) -> set[str]:
        return {n for n in self.names if self.labels[n].get(key) in values}

    # -- one workload ------------------------------------------------------------------
    def add(self, w: Workload) -> None:
        spec = w.pod_spec
        where = f"{w.origin}: {w.title}: {w.spec_path}"
        requests = pod_requests(spec, where)
        self.out.requests[w.key] = dict(requests)
        ask = to_escher(requests)
        if self.has_pods:
            ask["pods"] = 1.0
        self.out.plan.add_task(w.key, ask, count=w.replicas, source=f"{w.title} ({w.origin})")
        self.out.workloads[w.key] = w
        tolerations = _list(spec.get("tolerations"), f"{where}.tolerations")
        self.cordon(w, tolerations)
        self.node_name(w, spec)
        self.taints(w, tolerations)
        self.node_selector(w, spec, where)
        affinity = _map(spec.get("affinity"), f"{where}.affinity")
        self.node_affinity(w, _map(affinity.get("nodeAffinity"), f"{where}.affinity.nodeAffinity"))
        self.existing_anti_affinity(w)
        self.pod_affinity(w, affinity, where)
        self.spread(w, spec, where)
        self.unchecked(w, spec)

    def unchecked(self, w: Workload, spec: Mapping[str, Any]) -> None:
        """Warn about fields kube-scheduler uses that escher does not check (the field
        table of docs/kubernetes-preflight.md says why)."""
        fields = []
        containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
        if any(
            isinstance(port, Mapping) and port.get("hostPort")
            for c in containers
            if isinstance(c, Mapping)
            for port in c.get("ports") or []
        ):
            fields.append("containers[*].ports[*].hostPort")
        if any(
            isinstance(v, Mapping) and ("persistentVolumeClaim" in v or "ephemeral" in v)
            for v in spec.get("volumes") or []
        ):
            fields.append("volumes (persistent volume claims)")
        if w.kind == "StatefulSet" and (w.raw.get("spec") or {}).get("volumeClaimTemplates"):
            fields.append("spec.volumeClaimTemplates")
        if spec.get("schedulerName") not in (None, "", "default-scheduler"):
            fields.append(f"schedulerName {spec.get('schedulerName')}")
        if spec.get("priorityClassName") or spec.get("priority"):
            fields.append("priority (preemption)")
        if fields:
            self.warn(
                f"{w.title}: not checked: {', '.join(fields)} (see the field table of "
                "docs/kubernetes-preflight.md)."
            )

    def cordon(self, w: Workload, tolerations: list[Any]) -> None:
        if tolerates(tolerations, UNSCHEDULABLE_TAINT):
            return
        ok = {n for n in self.names if not self.cluster.nodes[n].unschedulable}
        self.restrict(w, "cordon", "tolerations", ok, "cordoned nodes (spec.unschedulable)")

    def node_name(self, w: Workload, spec: Mapping[str, Any]) -> None:
        name = spec.get("nodeName")
        if name:
            self.restrict(w, "nodeName", "nodeName", {str(name)}, f"nodeName {name}")

    def untolerated(
        self, tolerations: list[Any]
    ) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
        """Taint -> the nodes with it that `tolerations` do not tolerate: (NoSchedule and
        NoExecute, PreferNoSchedule); workloads with the same tolerations share the answer."""
        memo = repr(tolerations)
        if memo in self.taint_memo:
            return self.taint_memo[memo]
        hard: dict[str, set[str]] = {}
        soft: dict[str, set[str]] = {}
        for n in self.names:
            for taint in self.cluster.nodes[n].taints:
                if tolerates(tolerations, taint):
                    continue
                text = taint_text(taint)
                if taint.get("effect") in HARD_EFFECTS:
                    hard.setdefault(text, set()).add(n)
                elif taint.get("effect") == "PreferNoSchedule":
                    soft.setdefault(text, set()).add(n)
        self.taint_memo[memo] = (hard, soft)
        return hard, soft

    def taints(self, w: Workload, tolerations: list[Any]) -> None:
        hard, soft = self.untolerated(tolerations)
        for text, tainted in sorted(hard.items()):
            ok = set(self.names) - tainted
            self.restrict(
                w, "taint", "tolerations", ok, f"no toleration for taint {text}", taint=text
            )
        for text, tainted in sorted(soft.items()):
            ok = set(self.names) - tainted
            self.restrict(
                w,
                "taint",
                "tolerations",
                ok,
                f"no toleration for taint {text}",
                taint=text,
                weight=1.0,
            )

    def node_selector(self, w: Workload, spec: Mapping[str, Any], where: str) -> None:
        selector = _map(spec.get("nodeSelector"), f"{where}.nodeSelector")
        if not selector:
            return
        want = {str(k): str(v) for k, v in selector.items()}
        ok = {n for n in self.names if all(self.labels[n].get(k) == v for k, v in want.items())}
        text = ", ".join(f"{k}={v}" for k, v in want.items())
        self.restrict(w, "nodeSelector", "nodeSelector", ok, f"nodeSelector {text}")

    def node_affinity(self, w: Workload, node_aff: Mapping[str, Any]) -> None:
        path = f"affinity.nodeAffinity.{REQUIRED}"
        req = _map(node_aff.get(REQUIRED), path)
        if req:
            terms = _list(req.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")
            where = f"{w.field(path)}.nodeSelectorTerms"
            ok = {n for n in self.names if node_affinity_matches(terms, self.labels[n], n, where)}
            self.restrict(w, "nodeAffinity", path, ok, "required node affinity")
        for i, pref in enumerate(
            _list(node_aff.get(PREFERRED), f"affinity.nodeAffinity.{PREFERRED}")
        ):
            p = f"affinity.nodeAffinity.{PREFERRED}[{i}]"
            pref = _map(pref, p)
            term = pref.get("preference")
            where = w.field(f"{p}.preference")
            ok = {n for n in self.names if node_affinity_matches([term], self.labels[n], n, where)}
            weight = float(pref.get("weight") or 1)
            self.restrict(w, "nodeAffinity", p, ok, "preferred node affinity", weight=weight)

    def existing_anti_affinity(self, w: Workload) -> None:
        """Running pods whose required anti-affinity selects this workload's pods."""
        for pod in self.cluster.pods:
            anti = _map(pod.affinity.get("podAntiAffinity"), "podAntiAffinity")
            for j, term in enumerate(_list(anti.get(REQUIRED), REQUIRED)):
                where = f"Pod {pod.namespace}/{pod.name}"
                namespaces = self.namespaces_of(term, pod.namespace, where)
                if namespaces is not None and w.namespace not in namespaces:
                    continue
                if not selector_matches(term.get("labelSelector"), w.labels, where):
                    continue
                key = str(term.get("topologyKey"))
                value = self.labels.get(pod.node, {}).get(key)
                if value is None:
                    continue
                bad = self.domain_nodes(key, {value})
                ok = set(self.names) - bad
                path = f"spec.affinity.podAntiAffinity.{REQUIRED}[{j}]"
                f = node_filter(
                    w.key,
                    "existingAntiAffinity",
                    f"Pod {pod.namespace}/{pod.name} (running on {pod.node}): {path}",
                    sorted(ok),
                    sorted(bad),
                    f"anti-affinity of running Pod {pod.namespace}/{pod.name} ({key}={value})",
                )
                self.out.plan.add_intent(f)
                self.out.filters.setdefault(w.key, []).append(f)

    def pod_affinity(self, w: Workload, affinity: Mapping[str, Any], where: str) -> None:
        for kind in ("podAntiAffinity", "podAffinity"):
            section = _map(affinity.get(kind), f"{where}.affinity.{kind}")
            for i, term in enumerate(_list(section.get(REQUIRED), f"{kind}.{REQUIRED}")):
                path = f"affinity.{kind}.{REQUIRED}[{i}]"
                self.pod_term(w, kind, _map(term, w.field(path)), path, 0.0)
            for i, pref in enumerate(_list(section.get(PREFERRED), f"{kind}.{PREFERRED}")):
                path = f"affinity.{kind}.{PREFERRED}[{i}]"
                pref = _map(pref, w.field(path))
                term = _map(pref.get("podAffinityTerm"), w.field(f"{path}.podAffinityTerm"))
                weight = float(pref.get("weight") or 1)
                self.pod_term(w, kind, term, f"{path}.podAffinityTerm", weight)

    def pod_term(
        self, w: Workload, kind: str, term: Mapping[str, Any], path: str, weight: float
    ) -> None:
        field_path = w.field(path)
        key = term.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise ManifestError(f"{w.origin}: {field_path}.topologyKey: give a node label key.")
        namespaces = self.namespaces_of(term, w.namespace, field_path)
        selector = term.get("labelSelector")
        targets = self.matching_workloads(selector, namespaces, field_path)
        running = self.matching_pods(selector, namespaces, field_path)
        values = {v for p in running if (v := self.labels.get(p.node, {}).get(key)) is not None}
        found = _Found(key, self.key_for(key), targets, values)
        if kind == "podAntiAffinity":
            self.anti_term(w, path, found, weight)
        else:
            self.affinity_term(w, path, found, weight)

    def anti_term(self, w: Workload, path: str, found: _Found, weight: float) -> None:
        """A pod anti-affinity term: running pods' domains are left out; the pairs of
        workloads it keeps apart are stated once all workloads are read (`finish`)."""
        key, plan_key, targets, values = found
        field_path = w.field(path)
        if values:
            bad = self.domain_nodes(key, values)
            self.restrict(
                w,
                "podAntiAffinity",
                path,
                set(self.names) - bad,
                f"anti-affinity ({key}) with running pods",
                weight=weight,
            )
        for other in targets:
            if weight:
                if other.key == w.key:
                    self.out.plan.add_intent(Separated((w.key,), field_path, weight, plan_key))
                continue
            pair = (min(w.key, other.key), max(w.key, other.key))
            self.anti.setdefault(plan_key, {}).setdefault(pair, []).append(field_path)

    def affinity_term(self, w: Workload, path: str, found: _Found, weight: float) -> None:
        """A pod affinity term, stated exactly where the pods it needs are known to be in
        one domain (or are running), else as 'on a node with the key' with a warning."""
        key, plan_key, targets, values = found
        field_path = w.field(path)
        others = [t for t in targets if t.key != w.key]
        own = len(others) < len(targets)
        if weight:
            if own and not others and not values:
                self.out.plan.add_intent(Colocated((w.key,), field_path, weight, plan_key))
            return
        labelled = {n for n in self.names if key in self.labels[n]}
        if values and not others:
            self.restrict(
                w,
                "podAffinity",
                path,
                self.domain_nodes(key, values),
                f"affinity ({key}) with running pods",
            )
        elif not values and not targets:
            self.restrict(w, "podAffinity", path, set(), "affinity to pods that match nothing")
        elif not values and not own and len(others) == 1 and self.one_domain(others[0], key):
            # its pods go where the other workload's pods are, all in one domain
            self.restrict(w, "podAffinityLabel", path, labelled, f"nodes labelled {key}")
            pair = (w.key, others[0].key)
            self.later.append(Colocated(pair, field_path, 0.0, plan_key))  # once both exist
        elif not values and own and not others:
            self.restrict(w, "podAffinityLabel", path, labelled, f"nodes labelled {key}")
            self.out.plan.add_intent(Colocated((w.key,), field_path, 0.0, plan_key))
        else:
            self.restrict(w, "podAffinityLabel", path, labelled, f"nodes labelled {key}")
            self.warn(
                f"{field_path}: affinity to the pods of "
                f"{', '.join(t.title for t in others) or 'running pods'} is checked only as "
                f"'on a node with label {key}' (which domains those pods take is not modelled)."
            )

    def one_domain(self, w: Workload, key: str) -> bool:
        """True if every placement puts all of `w`'s pods in one domain of `key`: a single
        pod, or a required affinity on `key` to its own pods only, none of them running."""
        if w.replicas == 1:
            return True
        section = (w.pod_spec.get("affinity") or {}).get("podAffinity") or {}
        for term in section.get(REQUIRED) or []:
            if not isinstance(term, Mapping) or term.get("topologyKey") != key:
                continue
            where = w.field("affinity.podAffinity")
            namespaces = self.namespaces_of(term, w.namespace, where)
            selector = term.get("labelSelector")
            targets = self.matching_workloads(selector, namespaces, where)
            if [t.key for t in targets] == [w.key] and not self.matching_pods(
                selector, namespaces, where
            ):
                return True
        return False

    def spread_domains(
        self, w: Workload, constraint: Mapping[str, Any], spec: Mapping[str, Any], keys: set[str]
    ) -> dict[str, str]:
        """Node -> domain, over the nodes kube-scheduler counts for this constraint."""
        key = str(constraint.get("topologyKey"))
        affinity_policy = constraint.get("nodeAffinityPolicy") or "Honor"
        taints_policy = constraint.get("nodeTaintsPolicy") or "Ignore"
        allowed = set(self.names)
        if affinity_policy == "Honor":
            for f in self.out.filters.get(w.key, []):
                if f.exclusion is not None and f.exclusion.cause in (
                    "nodeSelector",
                    "nodeAffinity",
                ):
                    allowed &= set(f.nodes)
        if taints_policy == "Honor":
            tolerations = spec.get("tolerations") or []
            allowed = {
                n
                for n in allowed
                if all(
                    tolerates(tolerations, t)
                    for t in self.cluster.nodes[n].taints
                    if t.get("effect") in HARD_EFFECTS
                )
            }
        return {
            n: self.labels[n][key]
            for n in sorted(allowed)
            if all(k in self.labels[n] for k in keys)
        }

    def topology_name(self, key: str, mapping: dict[str, str], w: Workload, i: int) -> str:
        """A plan topology for `mapping`: the label key itself when it is that label over
        every node, else a name of its own."""
        plain = {n: self.labels[n][key] for n in self.names if key in self.labels[n]}
        if mapping == plain:
            return key
        sig = (key, tuple(sorted(mapping.items())))
        if sig not in self.topology_names:
            name = f"{key} (domains of {w.key} constraint {i})"
            self.topology_names[sig] = name
            self.out.plan.add_topology(name, mapping)
        return self.topology_names[sig]

    def spread(self, w: Workload, spec: Mapping[str, Any], where: str) -> None:
        constraints = _list(
            spec.get("topologySpreadConstraints"), f"{where}.topologySpreadConstraints"
        )
        keys = {
            str(c.get("topologyKey"))
            for c in constraints
            if isinstance(c, Mapping)
            and c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
        }
        for i, c in enumerate(constraints):
            path = f"topologySpreadConstraints[{i}]"
            field_path = w.field(path)
            c = _map(c, field_path)
            key = c.get("topologyKey")
            skew = c.get("maxSkew")
            if not isinstance(key, str) or not key:
                raise ManifestError(f"{w.origin}: {field_path}.topologyKey: give a node label key.")
            if isinstance(skew, bool) or not isinstance(skew, int) or skew < 1:
                raise ManifestError(f"{w.origin}: {field_path}.maxSkew: give a whole number >= 1.")
            hard = (c.get("whenUnsatisfiable") or "DoNotSchedule") == "DoNotSchedule"
            selector = dict(_map(c.get("labelSelector"), f"{field_path}.labelSelector"))
            extra = [
                {"key": k, "operator": "In", "values": [w.labels[k]]}
                for k in _list(c.get("matchLabelKeys"), f"{field_path}.matchLabelKeys")
                if k in w.labels
            ]
            if extra:
                selector["matchExpressions"] = [*(selector.get("matchExpressions") or []), *extra]
            sel = selector if c.get("labelSelector") is not None or extra else None
            counted = self.matching_workloads(sel, {w.namespace}, field_path)
            mapping = self.spread_domains(w, c, spec, keys if hard else {key})
            running = [
                p for p in self.matching_pods(sel, {w.namespace}, field_path) if p.node in mapping
            ]
            if hard:
                labelled = {n for n in self.names if all(k in self.labels[n] for k in keys)}
                self.restrict(w, "topologyLabel", path, labelled, f"nodes labelled {key}")
            others = [o for o in counted if o.key != w.key]
            if others:
                self.warn(
                    f"{field_path}: not checked: the spread also counts the pods of "
                    f"{', '.join(o.title for o in others)}; escher checks spreads that count "
                    "the workload's own pods and running pods."
                )
                continue
            if not counted:
                continue  # its selector counts none of the new pods: nothing to check
            weight = 0.0 if hard else 1.0
            rule = _Spread(w, i, path, key, skew, weight, c.get("minDomains"), mapping)
            self.spread_rule(rule, Counter(mapping[p.node] for p in running))

    def phantoms(self, rule: _Spread, running: Mapping[str, int], within: int) -> list[str]:
        """Tasks standing for the running pods a spread counts: per domain holding fewer than
        `within` of them, that many replicas pinned to the domain's nodes (they request
        nothing: their requests are already taken from the nodes)."""
        names = []
        for j, (domain, count) in enumerate(sorted(running.items())):
            if count >= within:
                continue
            name = f"running pods/{rule.w.key}/{rule.index}/{j}"
            src = f"{count} running pod(s) in {rule.key}={domain} counted by {rule.field}"
            self.out.plan.add_task(name, {}, count=count, concurrent=True, source=src)
            nodes = tuple(n for n, d in sorted(rule.mapping.items()) if d == domain)
            self.out.plan.add_intent(PinnedTo((name,), src, 0.0, nodes))
            names.append(name)
        return names

    def spread_rule(self, rule: _Spread, running: Mapping[str, int]) -> None:
        """kube-scheduler admits a pod into domain d when count(d) + 1 - min <= maxSkew, min
        over the eligible domains (0 when fewer than minDomains). From running counts r and
        new pods x, the placements it reaches are those where every domain that gets new pods
        ends at most maxSkew above the final minimum (fill the emptiest first)."""
        w, skew = rule.w, rule.skew
        values = set(rule.mapping.values())
        empty = len(values - set(running))
        at_most = isinstance(rule.min_domains, int) and rule.min_domains > len(values)
        per_node = rule.key == HOSTNAME and self.key_for(rule.key) is None
        if at_most or w.replicas < empty:
            # the minimum stays 0: new pods only where fewer than maxSkew pods run, up to it
            full = {d for d, r in running.items() if r >= skew}
            if full and not rule.weight:
                self.restrict(
                    w,
                    "topologySpread",
                    rule.path,
                    {n for n, d in rule.mapping.items() if d not in full}
                    | (set(self.names) - set(rule.mapping)),
                    f"spread over {rule.key}: {len(full)} domain(s) already hold maxSkew "
                    "matching running pods",
                )
            names = (w.key, *self.phantoms(rule, running, skew))
            topo = None if per_node else self.topology_name(rule.key, rule.mapping, w, rule.index)
            self.out.plan.add_intent(SpreadAtMost(names, rule.field, rule.weight, skew, topo))
            return
        counts = [running.get(v, 0) for v in values] or [0]
        if max(counts) - min(counts) > skew:
            self.warn(
                f"{rule.field}: not checked: the running pods it counts are already spread "
                f"unevenly ({min(counts)} to {max(counts)} per domain, maxSkew {skew}); "
                "escher checks a spread from running counts within maxSkew of each other."
            )
            return
        names = (w.key, *self.phantoms(rule, running, 1 << 62))
        name = self.topology_name(rule.key, rule.mapping, w, rule.index)
        self.out.plan.add_intent(SpreadEvenly(names, rule.field, rule.weight, name, skew))

    # -- across workloads --------------------------------------------------------------
    def finish(self) -> None:
        for intent in self.later:
            self.out.plan.add_intent(intent)
        for key, pairs in self.anti.items():
            bare = [n for n in self.names if key is not None and key not in self.labels[n]]
            if bare:
                self.warn(
                    f"{len(bare)} node(s) without label {key} ({', '.join(bare[:3])}) are kept "
                    f"free of pods under anti-affinity on {key}; kube-scheduler would allow "
                    "them (a FEASIBLE verdict holds; an INFEASIBLE one may not)."
                )
            selfish = {a for (a, b) in pairs if a == b}
            for (a, b), sources in sorted(pairs.items()):
                src = "; ".join(dict.fromkeys(sources))
                if a == b:
                    self.out.plan.add_intent(Separated((a,), src, 0.0, key))
                elif a in selfish and b in selfish:
                    self.out.plan.add_intent(Separated((a, b), src, 0.0, key))
                else:
                    self.warn(
                        f"{src}: not checked: anti-affinity between {a} and {b}, whose pods may "
                        "share a domain among themselves, has no exact escher statement."
                    )
        self.gangs()

    def gangs(self) -> None:
        members: dict[str, list[Workload]] = {}
        for w in self.workloads.items:
            group = pod_group_name(w)
            if group is not None:
                members.setdefault(group, []).append(w)
        for group, ws in sorted(members.items()):
            pg = self.workloads.pod_groups.get(group)
            if pg is None:
                self.warn(
                    f"{', '.join(w.title for w in ws)}: name PodGroup {group}, which is not in "
                    "the manifests; checked as a gang of these pods."
                )
            pods = sum(w.replicas for w in ws)
            source = f"PodGroup {group}: spec.minMember" if pg else f"PodGroup {group}"
            if pg is not None and pg.min_member > pods:
                for w in ws:
                    f = node_filter(
                        w.key,
                        "podGroup",
                        source,
                        [],
                        list(self.names),
                        f"minMember {pg.min_member} but only {pods} pod(s) name the group",
                    )
                    self.out.plan.add_intent(f)
                    self.out.filters.setdefault(w.key, []).append(f)
            self.out.plan.add_intent(Gang(tuple(w.key for w in ws), source))


def translate(workloads: Workloads, cluster: KubeCluster) -> Translation:
    """The plan of `workloads` on `cluster` (kube-scheduler's semantics).

    Raises:
        ManifestError: a field escher cannot read, naming the object and the field path.
    """
    if not workloads.items:
        raise ManifestError(
            "the manifests hold no Pod, Deployment, ReplicaSet, StatefulSet or Job with "
            "pods to check."
        )
    builder = _Builder(workloads, cluster)
    for w in workloads.items:
        builder.add(w)
    builder.finish()
    out = builder.out
    out.warnings[:0] = list(workloads.warnings)
    return out
