"""Node filters: which nodes one workload's pods may use, one statement per cause.

Each cause (cordon, nodeName, a taint, nodeSelector, required node affinity, a running pod's
anti-affinity, ...) is one `NodeFilter`: a `PinnedTo` intent on the workload's task that
names the object and field path, and carries a machine-readable `Exclusion` (what kind of
cause, which nodes it excludes, which taint), so an explanation reads in the user's terms
and a repair can say "uncordon node X" or "tolerate taint K".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from escher.core.plan import PinnedTo

#: kube-scheduler's per-node reason for each kind of cause (as ``kubectl describe pod``).
KUBE_REASONS: Mapping[str, str] = {
    "cordon": "node(s) were unschedulable",
    "nodeName": "node(s) didn't match the requested node name",
    "taint": "node(s) had taint {taint}, that the pod didn't tolerate",
    "nodeSelector": "node(s) didn't match Pod's node affinity/selector",
    "nodeAffinity": "node(s) didn't match Pod's node affinity/selector",
    "topologyLabel": (
        "node(s) didn't match pod topology spread constraints (missing required label)"
    ),
    "podAffinityLabel": "node(s) didn't match pod affinity rules",
    "podAntiAffinity": "node(s) didn't match pod anti-affinity rules",
    "existingAntiAffinity": "node(s) didn't satisfy existing pods anti-affinity rules",
    "podAffinity": "node(s) didn't match pod affinity rules",
    "podGroup": "pod group has fewer pods than its minMember",
    "topologySpread": "node(s) didn't match pod topology spread constraints",
}

#: The order kube-scheduler's filter plugins run in (the first failing one is reported).
FILTER_ORDER = (
    "cordon",
    "nodeName",
    "taint",
    "nodeSelector",
    "nodeAffinity",
    "resources",
    "topologyLabel",
    "topologySpread",
    "podAffinityLabel",
    "existingAntiAffinity",
    "podAntiAffinity",
    "podAffinity",
    "podGroup",
)


@dataclass(frozen=True)
class Exclusion:
    """Why a node filter leaves nodes out, machine-readable (for repairs).

    Attributes:
        cause: One of `KUBE_REASONS`' keys (``cordon``, ``taint``, ``nodeSelector``, ...).
        workload: The workload's ``Kind/namespace/name``.
        field: The object and field path that makes the filter.
        excluded: The nodes it leaves out.
        taint: For ``taint``: the taint as ``key=value:Effect``.
    """

    cause: str
    workload: str
    field: str
    excluded: tuple[str, ...]
    taint: str = ""

    def reason(self) -> str:
        """kube-scheduler's per-node reason for it."""
        if not self.taint:
            return KUBE_REASONS[self.cause]
        key, _, rest = self.taint.partition(":")[0].partition("=")
        return KUBE_REASONS[self.cause].format(taint=f"{{{key}: {rest}}}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        out: dict[str, Any] = {
            "cause": self.cause,
            "workload": self.workload,
            "field": self.field,
            "excluded": list(self.excluded),
        }
        if self.taint:
            out["taint"] = self.taint
        return out


@dataclass(frozen=True)
class NodeFilter(PinnedTo):
    """A `PinnedTo` made by one cause of a manifest, described in Kubernetes terms."""

    exclusion: Exclusion | None = None
    summary: str = ""

    def describe(self) -> str:
        text = f"{self.tasks[0]}: {self.summary}" if self.summary else super().describe()
        return f"preferred (weight {self.weight:g}): {text}" if self.preferred else text

    def admits_like(self, node: str) -> bool:
        """A new node with `node`'s labels, taints and capacity passes the filters decided
        by labels and taints (not nodeName, and not those decided by other pods)."""
        cause = self.exclusion.cause if self.exclusion is not None else ""
        return cause in _BY_LABELS and node in self.nodes


#: Causes decided by a node's labels and taints alone.
_BY_LABELS = frozenset(
    {"cordon", "taint", "nodeSelector", "nodeAffinity", "topologyLabel", "podAffinityLabel"}
)


def node_filter(
    workload: str,
    cause: str,
    field: str,
    allowed: list[str],
    excluded: list[str],
    summary: str,
    *,
    taint: str = "",
    weight: float = 0.0,
) -> NodeFilter:
    """The statement "`workload` runs only on `allowed`" for one cause."""
    shown = ", ".join(excluded[:3]) + (f" (+{len(excluded) - 3})" if len(excluded) > 3 else "")
    words = f"{summary}: excludes {len(excluded)} node(s) ({shown})"
    if not allowed:
        words += ", so no node is left"
    return NodeFilter(
        tasks=(workload,),
        source=field,
        weight=weight,
        nodes=tuple(allowed),
        exclusion=Exclusion(cause, workload, field, tuple(excluded), taint),
        summary=words,
    )
