"""Node filters of a workload: cordon, nodeName, taints, nodeSelector, node affinity, and
running pods' anti-affinity, one `NodeFilter` statement per cause."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from escher.manifests._context import (
    PREFERRED,
    REQUIRED,
    Context,
)
from escher.manifests._filters import node_filter
from escher.manifests._match import node_affinity_matches, selector_matches, tolerates
from escher.manifests._workloads import Workload, as_list, as_map

UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


class NodeRules(Context):
    """Node filters (kube-scheduler's NodeUnschedulable, NodeName, TaintToleration and
    NodeAffinity plugins, and InterPodAffinity's check of running pods' anti-affinity)."""

    def cordon(self, w: Workload, tolerations: list[Any]) -> None:
        if tolerates(tolerations, UNSCHEDULABLE_TAINT):
            return
        ok = {n for n in self.names if not self.cluster.nodes[n].unschedulable}
        self.restrict(w, "cordon", "tolerations", ok, "cordoned nodes (spec.unschedulable)")

    def node_name(self, w: Workload, spec: Mapping[str, Any]) -> None:
        name = spec.get("nodeName")
        if name:
            self.restrict(w, "nodeName", "nodeName", {str(name)}, f"nodeName {name}")

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
        selector = as_map(spec.get("nodeSelector"), f"{where}.nodeSelector")
        if not selector:
            return
        want = {str(k): str(v) for k, v in selector.items()}
        ok = {n for n in self.names if all(self.labels[n].get(k) == v for k, v in want.items())}
        text = ", ".join(f"{k}={v}" for k, v in want.items())
        self.restrict(w, "nodeSelector", "nodeSelector", ok, f"nodeSelector {text}")

    def node_affinity(self, w: Workload, node_aff: Mapping[str, Any]) -> None:
        path = f"affinity.nodeAffinity.{REQUIRED}"
        req = as_map(node_aff.get(REQUIRED), path)
        if req:
            terms = as_list(req.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")
            where = f"{w.field(path)}.nodeSelectorTerms"
            ok = {n for n in self.names if node_affinity_matches(terms, self.labels[n], n, where)}
            self.restrict(w, "nodeAffinity", path, ok, "required node affinity")
        for i, pref in enumerate(
            as_list(node_aff.get(PREFERRED), f"affinity.nodeAffinity.{PREFERRED}")
        ):
            p = f"affinity.nodeAffinity.{PREFERRED}[{i}]"
            pref = as_map(pref, p)
            term = pref.get("preference")
            where = w.field(f"{p}.preference")
            ok = {n for n in self.names if node_affinity_matches([term], self.labels[n], n, where)}
            weight = float(pref.get("weight") or 1)
            self.restrict(w, "nodeAffinity", p, ok, "preferred node affinity", weight=weight)

    def existing_anti_affinity(self, w: Workload) -> None:
        """Running pods whose required anti-affinity selects this workload's pods."""
        for pod in self.cluster.pods:
            anti = as_map(pod.affinity.get("podAntiAffinity"), "podAntiAffinity")
            for j, raw in enumerate(as_list(anti.get(REQUIRED), REQUIRED)):
                where = f"Pod {pod.namespace}/{pod.name}"
                term = as_map(raw, f"{where}: spec.affinity.podAntiAffinity.{REQUIRED}[{j}]")
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
