"""`check_manifests`: will these workloads fit on this cluster, and if not, why not."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from escher.core.plan import PinnedTo, Separated, SpreadAtMost
from escher.core.resources import EPSILON
from escher.manifests._cluster import KubeCluster
from escher.manifests._context import Approximation
from escher.manifests._exact import Violation, check_placement
from escher.manifests._filters import FILTER_ORDER, Exclusion, NodeFilter
from escher.manifests._translate import Translation, translate
from escher.manifests._workloads import Workloads
from escher.verify import DEFAULT_TIMEOUT, Verdict, VerificationResult, verify


@dataclass(frozen=True)
class ManifestCheck(VerificationResult):
    """A `VerificationResult` for manifests: the witness is keyed ``Kind/namespace/name``.

    Attributes:
        breakdown: For INFEASIBLE: kube-scheduler's per-node reasons for one pod of the
            workload that cannot be placed (``0/40 nodes are available: ...``).
        exclusions: Statement id -> the machine-readable cause of each node filter in the
            explanation (``cordon``, ``taint``, ``nodeSelector``, ..., with the nodes it
            excludes), for repairs.
        skipped: Objects of kinds escher does not check.
        exact: True if the verdict is proven under kube-scheduler's exact rules: a FEASIBLE
            whose witness passed `check_placement` with no field left unchecked, or an
            INFEASIBLE whose conflict uses no stricter-than-kube statement in play. False
            for UNKNOWN and for a FEASIBLE with a field neither model checks (hostPort, ...).
        approximations: The rules of this instance escher states other than kube-scheduler
            does, in the user's terms, each prefixed ``looser:``, ``stricter:`` or
            ``unchecked:``.
    """

    breakdown: tuple[str, ...] = ()
    exclusions: Mapping[str, Exclusion] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()
    exact: bool = True
    approximations: tuple[str, ...] = ()

    def render(self) -> str:
        """A readable multi-line report."""
        lines = [super().render()]
        lines.extend(self.breakdown)
        if not self.exact and self.status is not Verdict.UNKNOWN:
            lines.append("note: not proven under kube-scheduler's exact rules (approximations)")
        lines.extend(f"approximation: {a}" for a in self.approximations)
        lines.extend(f"warning: not checked (kind not supported): {s}" for s in self.skipped)
        return "\n".join(lines)

    __str__ = render

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (``escher verify -f ... --format json``)."""
        data = super().to_dict()
        data["breakdown"] = list(self.breakdown)
        data["exclusions"] = {k: v.to_dict() for k, v in self.exclusions.items()}
        data["skipped"] = list(self.skipped)
        data["exact"] = self.exact
        data["approximations"] = list(self.approximations)
        return data


def _fails(t: Translation, cluster: KubeCluster, task: str, node: str, free: Any) -> list[str]:
    """kube-scheduler's reasons why one pod of `task` does not fit `node` now (empty: fits)."""
    by_cause: dict[str, list[str]] = {}
    for f in t.filters.get(task, []):
        if f.exclusion is not None and node in f.exclusion.excluded:
            by_cause.setdefault(f.exclusion.cause, []).append(f.exclusion.reason())
    short = [
        f"Insufficient {k}" if k != "pods" else "Too many pods"
        for k, v in t.requests.get(task, {}).items()
        if v > free.get(k, 0.0) + EPSILON
    ]
    full = "pods" in cluster.nodes[node].allocatable and free.get("pods", 0.0) < 1 - EPSILON
    if full and "Too many pods" not in short:
        short.insert(0, "Too many pods")
    if short:
        by_cause["resources"] = short
    for cause in FILTER_ORDER:
        if cause in by_cause:
            return by_cause[cause]
    return []


def breakdown(t: Translation, cluster: KubeCluster, task: str) -> tuple[int, str]:
    """(nodes that take one pod of `task` alone, kubectl's line for the others)."""
    used = cluster.used()
    counts: dict[str, int] = {}
    fit = 0
    for node in sorted(cluster.nodes):
        alloc = cluster.nodes[node].allocatable
        free = {k: v - used[node].get(k, 0.0) for k, v in alloc.items()}
        reasons = _fails(t, cluster, task, node, free)
        if not reasons:
            fit += 1
        for r in reasons:
            counts[r] = counts.get(r, 0) + 1
    parts = ", ".join(f"{n} {r}" for r, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])))
    total = len(cluster.nodes)
    w = t.workloads[task]
    line = f"{w.title}: {fit}/{total} nodes are available for one of its pods"
    line += f": {parts}." if parts else "."
    return fit, line


def _stuck(t: Translation, result: VerificationResult) -> list[str]:
    """The workloads of the conflict, the least placeable first."""
    if result.explanation is None:
        return []
    names = [s.id[5:] for s in result.explanation.statements if s.id.startswith("task:")]
    for s in result.explanation.statements:
        if s.id.startswith("intent:"):
            intent = t.plan.intents[int(s.id[7:])]
            names.extend(intent.tasks)
    return [n for n in dict.fromkeys(names) if n in t.workloads]


def _allowed(t: Translation, cluster: KubeCluster, task: str) -> set[str]:
    """The nodes the task's hard node filters allow."""
    allowed = set(cluster.nodes)
    for f in t.filters.get(task, []):
        allowed &= set(f.nodes)
    return allowed


def _domains_left(t: Translation, cluster: KubeCluster, task: str, key: str | None) -> int:
    """How many domains of `key` (None: nodes) hold a node the task's hard filters allow."""
    allowed = _allowed(t, cluster, task)
    if key is None:
        return len(allowed)
    topo = t.plan.topologies.get(key)
    if topo is not None:
        return len({topo[n] for n in allowed if n in topo})
    return len({v for n in allowed if (v := cluster.nodes[n].labels.get(key)) is not None})


def _cause(t: Translation, cluster: KubeCluster, result: VerificationResult) -> str:
    """The cause in the user's terms: for one workload against its own per-domain limit,
    the pods, the limit and the usable domains; else the verifier's cause with the fields of
    the conflict."""
    if result.explanation is None:
        return result.cause
    intents = [
        t.plan.intents[int(s.id[7:])]
        for s in result.explanation.statements
        if s.id.startswith("intent:")
    ]
    limits = [i for i in intents if isinstance(i, Separated | SpreadAtMost) and len(i.tasks) == 1]
    if len(limits) == 1 and len(intents) - 1 == sum(isinstance(i, NodeFilter) for i in intents):
        lim = limits[0]
        task = lim.tasks[0]
        w = t.workloads[task]
        per = 1 if isinstance(lim, Separated) else lim.per_node
        key = lim.topology_key
        where = "node" if key is None else f"{key.split(' (')[0]} domain"
        left = _domains_left(t, cluster, task, key)
        return (
            f"{w.title}: {w.replicas} pods, at most {per} per {where} ({lim.source}), "
            f"and only {left} {where}(s) can take its pods"
        )
    fields = list(dict.fromkeys(i.source for i in intents if i.source))
    if not fields:
        return result.cause
    shown = "; ".join(fields[:3]) + (f" (+{len(fields) - 3} more)" if len(fields) > 3 else "")
    return f"{result.cause}: {shown}"


def check_manifests(
    workloads: Workloads, cluster: KubeCluster, *, timeout: float = DEFAULT_TIMEOUT
) -> ManifestCheck:
    """Prove that kube-scheduler's filters admit every pod of `workloads` on `cluster` at
    once, or name the smallest set of fields that conflict.

    Args:
        workloads: From `load_manifests` or `workloads_from_objects`.
        cluster: From `load_cluster`, `cluster_from_objects` or a live read.
        timeout: Seconds for the whole check.

    Returns:
        A `ManifestCheck`: FEASIBLE with a witness (``Kind/namespace/name`` -> one node per
        pod), INFEASIBLE with the cause, the conflicting fields and kube-scheduler's per-node
        reasons for the workload that cannot be placed, or UNKNOWN.

    Raises:
        ManifestError: a field escher cannot read, naming the object and the field path.
        ValidationError: a bad timeout.
    """
    started = time.monotonic()
    t = translate(workloads, cluster)
    result = verify(t.plan, cluster.to_state(), timeout=timeout, check_intents=False)
    lines: list[str] = []
    exclusions: dict[str, Exclusion] = {}
    if result.explanation is not None:
        for s in result.explanation.statements:
            if s.id.startswith("intent:"):
                intent = t.plan.intents[int(s.id[7:])]
                if isinstance(intent, NodeFilter) and intent.exclusion is not None:
                    exclusions[s.id] = intent.exclusion
        scored = [breakdown(t, cluster, task) for task in _stuck(t, result)]
        if scored:
            lines.append(min(scored)[1])
    base = {f.name: getattr(result, f.name) for f in dataclasses.fields(VerificationResult)}
    if result.witness is not None:  # without the tasks standing for running pods
        base["witness"] = {k: v for k, v in result.witness.items() if k in t.workloads}
    base["warnings"] = (*t.warnings, *result.warnings)
    if result.explanation is not None:
        base["cause"] = _cause(t, cluster, result)
    approx = tuple(f"{a.kind}: {a.rule}" for a in t.approximations)
    exact = _exact_verdict(t, workloads, cluster, result, base, started + timeout)
    return ManifestCheck(
        **base,
        breakdown=tuple(lines),
        exclusions=exclusions,
        skipped=workloads.skipped,
        exact=exact,
        approximations=approx,
    )


def _exact_verdict(
    t: Translation,
    workloads: Workloads,
    cluster: KubeCluster,
    result: VerificationResult,
    base: dict[str, Any],
    deadline: float,
) -> bool:
    """Hold the verdict in `base` to kube-scheduler's exact rules (UNKNOWN where it is not
    proven under them); True if it is proven under them."""
    exact = not any(a.kind == "unchecked" for a in t.approximations)
    if result.status is Verdict.FEASIBLE and base["witness"] is not None:
        broken = check_placement(workloads, cluster, base["witness"])
        if broken is not None:
            again = _resolve(t, workloads, cluster, broken, deadline - time.monotonic())
            if again is None:
                base.update(_unproven(result, broken, t.approximations))
                return False
            base.update(again)
        return exact
    if result.status is Verdict.INFEASIBLE:
        stricter = _stricter_in_play(t, cluster, result)
        if stricter:
            base.update(_too_strict(base["cause"], stricter))
            return False
        return True  # fields left unchecked only hold kube-scheduler back further
    return False


#: Re-solves, each excluding the node of a pod the exact rules rejected, before UNKNOWN.
RESOLVES = 3


def _resolve(
    t: Translation, workloads: Workloads, cluster: KubeCluster, broken: Violation, left: float
) -> dict[str, Any] | None:
    """A witness that passes `check_placement`, found by solving again with the pod the
    exact rules rejected kept off its node (each exclusion only narrows the plan, so a
    witness found is a placement); None if none is found in a few tries."""
    deadline = time.monotonic() + left
    away: dict[str, set[str]] = {}
    state = cluster.to_state()
    for _ in range(RESOLVES):
        budget = deadline - time.monotonic()
        if budget <= 0.1 or broken.node not in cluster.nodes:
            return None
        away.setdefault(broken.workload, set()).add(broken.node)
        keep = tuple(n for n in sorted(cluster.nodes) if n not in away[broken.workload])
        why = f"re-solve: {broken.workload} off {', '.join(sorted(away[broken.workload]))}"
        t.plan.add_intent(PinnedTo((broken.workload,), why, 0.0, keep))
        result = verify(t.plan, state, timeout=budget, check_intents=False)
        if result.witness is None:
            return None
        witness = {k: v for k, v in result.witness.items() if k in t.workloads}
        again = check_placement(workloads, cluster, witness)
        if again is None:
            return {"witness": witness, "preferences": result.preferences}
        broken = again
    return None


def _unproven(
    result: VerificationResult, broken: Violation, approximations: list[Approximation]
) -> dict[str, Any]:
    """UNKNOWN for a witness that breaks an exact rule the plan left out or loosened."""
    looser = [a.rule for a in approximations if a.kind == "looser"]
    rule = looser[0] if len(looser) == 1 else f"{broken.rule} ({broken.workload})"
    said = (
        f"a placement exists under a looser rule: {rule}; kube-scheduler's exact rule was "
        "not proven"
    )
    return {
        "status": Verdict.UNKNOWN,
        "witness": None,
        "cause": said,
        "preferences": (),
        "proven": (*result.proven, said, f"the placement found breaks it: {broken}"),
        "decide_by": f"state {broken.rule} exactly (not modelled by escher's plan)",
    }


def _stricter_in_play(
    t: Translation, cluster: KubeCluster, result: VerificationResult
) -> list[Approximation]:
    """The stricter-than-kube statements an INFEASIBLE may rest on: those whose tasks may
    use a node where the statement is stricter, and that are in the conflict shown (a
    conflict without them holds under kube's rules)."""
    used: set[int] | None = None
    if result.explanation is not None:
        used = {int(s.id[7:]) for s in result.explanation.statements if s.id.startswith("intent:")}
    out = []
    for a in t.approximations:
        if a.kind != "stricter":
            continue
        if used is not None and not any(
            i in used
            for i, intent in enumerate(t.plan.intents)
            if any(intent is x for x in a.intents)
        ):
            continue
        tasks = {task for intent in a.intents for task in intent.tasks}
        if any(set(a.nodes) & _allowed(t, cluster, task) for task in tasks):
            out.append(a)
    return out


def _too_strict(cause: str, stricter: list[Approximation]) -> dict[str, Any]:
    """UNKNOWN for an INFEASIBLE reached under a rule stricter than kube-scheduler's."""
    said = f"infeasible under the stricter rule {stricter[0].rule}: {cause}"
    return {
        "status": Verdict.UNKNOWN,
        "cause": said,
        "proven": (said,),
        "decide_by": "kube-scheduler's exact rule on the nodes named (not modelled by escher)",
    }
