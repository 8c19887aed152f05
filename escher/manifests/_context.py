"""The state one translation of workloads into a plan shares, and its helpers: the nodes and
their labels, the plan being built, node filters, selectors, namespaces, topologies."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from escher.core.plan import Intent, Plan
from escher.manifests._cluster import KubeCluster, RunningPod
from escher.manifests._filters import NodeFilter, node_filter
from escher.manifests._match import selector_matches, taint_text, tolerates
from escher.manifests._workloads import Workload, Workloads, as_list, as_map

HOSTNAME = "kubernetes.io/hostname"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
HARD_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class Approximation:
    """A rule the plan states other than kube-scheduler does.

    Attributes:
        rule: The rule and where it comes from, in the user's terms.
        kind: ``looser``: left out or stated more loosely (a FEASIBLE needs the witness
            checked against the exact rule, `check_placement`); ``stricter``: stated more
            strictly (an INFEASIBLE may not hold); ``unchecked``: a field neither the plan
            nor the witness check models (hostPort, volumes, priority).
        intents: The plan's statements that carry the stricter rule.
        nodes: For a stricter rule: the nodes where it is stricter (the approximation is in
            play only if some task of `intents` may use one of them).
    """

    rule: str
    kind: str = "looser"
    intents: tuple[Intent, ...] = ()
    nodes: tuple[str, ...] = ()


@dataclass
class Translation:
    """A plan for the workloads, and what the translation knows about each.

    Attributes:
        plan: One task per workload (named ``Kind/namespace/name``) and its statements.
        workloads: Task name -> workload.
        filters: Task name -> its node filters (hard ones), in kube-scheduler's order.
        requests: Task name -> one pod's request, in Kubernetes resource names.
        warnings: What is left out or approximated, in the user's terms.
        approximations: The rules stated other than kube-scheduler does (also warned).
    """

    plan: Plan
    workloads: dict[str, Workload] = field(default_factory=dict)
    filters: dict[str, list[NodeFilter]] = field(default_factory=dict)
    requests: dict[str, dict[str, float]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    approximations: list[Approximation] = field(default_factory=list)


class Context:
    """What the readers of one translation share (`translate` builds one per call)."""

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

    def warn(self, text: str) -> None:
        self.out.warnings.append(text)

    def approximate(self, text: str, rule: str, kind: str = "looser") -> None:
        """Warn with `text` about a rule left out or stated more loosely than kube does."""
        self.warn(text)
        self.out.approximations.append(Approximation(rule, kind))

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
        term = as_map(term, where)
        listed = {str(n) for n in as_list(term.get("namespaces"), f"{where}.namespaces")}
        selector = term.get("namespaceSelector")
        if selector is not None:
            sel = as_map(selector, f"{where}.namespaceSelector")
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
        return _matching(self.workloads.items, selector, namespaces, where)

    def matching_pods(
        self, selector: Any, namespaces: set[str] | None, where: str
    ) -> list[RunningPod]:
        return _matching(self.cluster.pods, selector, namespaces, where)

    def domain_nodes(self, key: str, values: set[str]) -> set[str]:
        return {n for n in self.names if self.labels[n].get(key) in values}

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


class _Labelled(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...


_L = TypeVar("_L", bound=_Labelled)


def _matching(
    items: Iterable[_L], selector: Any, namespaces: set[str] | None, where: str
) -> list[_L]:
    """The workloads or pods in `namespaces` (None: any) whose labels `selector` matches."""
    return [
        o
        for o in items
        if (namespaces is None or o.namespace in namespaces)
        and selector_matches(selector, o.labels, where)
    ]
