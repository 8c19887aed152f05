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

from collections.abc import Mapping
from typing import Any

from escher.core.plan import Gang
from escher.manifests._cluster import KubeCluster
from escher.manifests._context import Translation
from escher.manifests._filters import node_filter
from escher.manifests._node_rules import NodeRules
from escher.manifests._pod_terms import PodTerms
from escher.manifests._requests import pod_requests, to_escher
from escher.manifests._spread import Spreads
from escher.manifests._workloads import (
    ManifestError,
    Workload,
    Workloads,
    as_list,
    as_map,
    pod_group_name,
)

__all__ = ["Translation", "translate"]


class _Builder(NodeRules, PodTerms, Spreads):
    """Builds the `Translation`: one pass per workload, then what spans workloads."""

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
        tolerations = as_list(spec.get("tolerations"), f"{where}.tolerations")
        self.cordon(w, tolerations)
        self.node_name(w, spec)
        self.taints(w, tolerations)
        self.node_selector(w, spec, where)
        affinity = as_map(spec.get("affinity"), f"{where}.affinity")
        self.node_affinity(
            w, as_map(affinity.get("nodeAffinity"), f"{where}.affinity.nodeAffinity")
        )
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
            self.approximate(
                f"{w.title}: not checked: {', '.join(fields)} (see the field table of "
                "docs/kubernetes-preflight.md).",
                f"{w.title}: {', '.join(fields)}",
                "unchecked",
            )

    def finish(self) -> None:
        for intent in self.later:
            self.out.plan.add_intent(intent)
        self.anti_pairs()
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
