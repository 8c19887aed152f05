"""Repairs of an infeasible manifest check: escher's kinds of change, plus a node returned.

A node returned is the Kubernetes kind of change escher's repairs name as ``node``: a
cordoned node uncordoned (all workloads may use it again), or a taint tolerated by one
workload (a toleration in its pod template). Each is one more `ChangeKind` given to
`escher.verify.find_repairs`, which proves every repair with a checked placement.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable
from dataclasses import replace

from escher.core.plan import Intent
from escher.manifests._cluster import KubeCluster
from escher.manifests._filters import NodeFilter
from escher.manifests._translate import translate
from escher.manifests._workloads import Workloads
from escher.verify import VerificationResult
from escher.verify.repair import (
    DEFAULT_KINDS,
    Base,
    Change,
    ChangeKind,
    Conflict,
    Draft,
    RepairSet,
    find_repairs,
)


def _filter(intent: Intent, cause: str) -> NodeFilter | None:
    if isinstance(intent, NodeFilter) and not intent.preferred and intent.exclusion is not None:
        return intent if intent.exclusion.cause == cause else None
    return None


class NodeReturned(ChangeKind):
    """A node returned: key ``("uncordon", node)`` uncordons a node for every workload, key
    ``("tolerate", i)`` drops the plan's taint filter i (its workload tolerates the taint);
    cost 1 each."""

    name = "returned"

    def keys(self, base: Base, conflict: Conflict) -> list[Hashable]:
        out: list[Hashable] = []
        for i in conflict.intents:
            intent = base.plan.intents[i]
            cordon = _filter(intent, "cordon")
            if cordon is not None and cordon.exclusion is not None:
                out.extend(("uncordon", n) for n in cordon.exclusion.excluded)
            if _filter(intent, "taint") is not None:
                out.append(("tolerate", i))
        return list(dict.fromkeys(out))

    def top(self, base: Base, key: Hashable) -> int:
        return 1

    def cost(self, base: Base, key: Hashable, level: int) -> float:
        return float(level)

    def change(self, base: Base, key: Hashable, level: int) -> Change:
        assert isinstance(key, tuple) and len(key) == 2
        how, what = key
        if how == "uncordon":
            return _uncordon(str(what))
        return _tolerate(base, int(what))


def _uncordon(node: str) -> Change:
    def edit(draft: Draft) -> None:
        for index, intents in draft.intents.items():
            draft.intents[index] = tuple(_returned(x, node) for x in intents)

    return Change("node", node, "cordoned (spec.unschedulable)", "uncordoned", 1.0, edit)


def _returned(intent: Intent, node: str) -> Intent:
    cordon = _filter(intent, "cordon")
    if cordon is None or cordon.exclusion is None or node not in cordon.exclusion.excluded:
        return intent
    excluded = tuple(n for n in cordon.exclusion.excluded if n != node)
    return replace(
        cordon,
        nodes=(*cordon.nodes, node),
        exclusion=replace(cordon.exclusion, excluded=excluded),
    )


def _tolerate(base: Base, index: int) -> Change:
    taint = base.plan.intents[index]
    assert isinstance(taint, NodeFilter) and taint.exclusion is not None
    exclusion = taint.exclusion

    def edit(draft: Draft) -> None:
        draft.intents[index] = ()

    shown = ", ".join(exclusion.excluded[:3]) + ("..." if len(exclusion.excluded) > 3 else "")
    return Change(
        "node",
        f"taint {exclusion.taint} on {shown}",
        f"not tolerated by {exclusion.workload}",
        f"tolerated by {exclusion.workload} (a toleration in {exclusion.field})",
        1.0,
        edit,
    )


def manifest_repairs(
    workloads: Workloads,
    cluster: KubeCluster,
    result: VerificationResult,
    *,
    timeout: float,
    adjustable: bool | Collection[str] = (),
) -> RepairSet:
    """The cheapest changes of each kind that make the manifests fit on the cluster.

    Args:
        workloads: The manifests' workloads (`load_manifests`).
        cluster: The cluster (`load_cluster`, `read_cluster`).
        result: `check_manifests`' infeasible result for them.
        timeout: Seconds for the search.
        adjustable: Workloads (``Kind/namespace/name``) whose requests may shrink (True: all).

    Returns:
        The repairs, cheapest first: fewer replicas of a workload, a relaxed or dropped field,
        more nodes like an existing one, one node grown, a node returned (uncordoned, a taint
        tolerated), a smaller request; each proven by a checked placement.
    """
    t = translate(workloads, cluster)
    return find_repairs(
        t.plan,
        cluster.to_state(),
        result,
        timeout=timeout,
        kinds=(*DEFAULT_KINDS, NodeReturned.name),
        adjustable_requests=adjustable,
        extra_kinds=(NodeReturned(),),
    )
