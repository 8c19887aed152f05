"""escher's verdict on generated manifest sets against the real kube-scheduler.

For each set of `agreement_sets` (fake nodes with zones, labels, taints, cordons and
extended resources; pods already running; Deployments, ReplicaSets, StatefulSets, Jobs and
Pods with requests, node selection, tolerations, pod (anti-)affinity and spreading):

1. the nodes and running pods are created on a real control plane (etcd, kube-apiserver and
   kube-scheduler v1.20, no kubelet: binding needs none);
2. escher decides the workloads on the cluster read back live (`read_cluster`);
3. the workloads' pods are created (as their controllers would) and kube-scheduler runs until
   every pod is bound or no pod was bound for `SETTLE` seconds (its retry backoff is set to
   1 s, so a pod that can be bound is tried again well within that);
4. where escher said FEASIBLE and kube-scheduler stranded pods, the set is applied again
   twice: as `emit_placement` writes it (``--emit-placement``: the objects it writes, in
   their apply order), and with the witness as one ``kubernetes.io/hostname`` pin per pod
   in its ``nodeSelector``; kube-scheduler still checks every other filter.

Asserted, for every verdict (escher says whether it is proven under kube-scheduler's exact
rules: `ManifestCheck.exact`, and names what it approximates: `.approximations`):
kube-scheduler binds every pod => escher said FEASIBLE, or UNKNOWN naming an approximation,
never INFEASIBLE; escher says INFEASIBLE => pods stay Pending; escher says FEASIBLE => both
ways of applying the witness bind every pod. Reported: how often
kube-scheduler strands pods where escher proved a placement, and how often each way of
applying the witness then binds every pod. Sets run in `GROUPS` groups at once (each group
has its own namespace and nodes, which its pods select), one control plane for all.
``ESCHER_AGREEMENT_SETS`` and ``ESCHER_AGREEMENT_SEED`` pick other sets.
"""

from __future__ import annotations

import json
import os
import threading
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from escher.core.verdict import PLAN_VERDICTS
from escher.manifests import (
    APPLY_ORDER,
    apply_order,
    check_manifests,
    emit_placement,
    read_cluster,
    workloads_from_objects,
)
from tests.manifests.agreement_sets import HOSTNAME, ManifestSet, generate, pods_of
from tests.support.k8s_control_plane import ControlPlane, add_fake_node, binaries_available
from tests.support.k8s_fixture import SKIP_REASON

SETS = int(os.environ.get("ESCHER_AGREEMENT_SETS", "200"))
SEED = int(os.environ.get("ESCHER_AGREEMENT_SEED", "2029"))
GROUPS = 6
#: No pod of the set bound for this long: kube-scheduler is done with it.
SETTLE = 2.5
#: The same for the witness applied pinned, which is asserted: longer, so that a loaded
#: machine does not fail it (pods may wait for the pods their affinity needs).
PIN_SETTLE = 10.0
#: Bound on one wait for kube-scheduler.
WAIT_LIMIT = 40.0
#: Time for kube-scheduler's informers to see the set's nodes (cordons, taints) and running
#: pods before any new pod arrives (on a loaded machine they lag).
CACHE_LAG = 0.3
#: Seconds escher may take per set.
ESCHER_TIMEOUT = 20.0
POLL = 0.15
# Z3's default context is not thread-safe: one escher check at a time.
_ESCHER = threading.Lock()


@dataclass
class Outcome:
    """What escher said and what kube-scheduler did for one set."""

    case: ManifestSet
    verdict: str = ""
    cause: str = ""
    witness: dict[str, list[str]] = field(default_factory=dict)
    exact: bool = True  # ManifestCheck.exact: proven under kube-scheduler's exact rules
    approximations: tuple[str, ...] = ()  # ManifestCheck.approximations
    pods: int = 0
    bound: int = 0
    pinned_bound: int | None = None  # pods the witness pinned pod by pod bound
    emitted_bound: int | None = None  # pods the emitted placement bound (None: not tried)
    pending: list[str] = field(default_factory=list)  # kube-scheduler's messages
    pinned_pending: list[str] = field(default_factory=list)  # the same, pinned witness
    error: str = ""

    @property
    def all_bound(self) -> bool:
        return self.bound == self.pods

    def line(self) -> str:
        pinned = "" if self.pinned_bound is None else f", pinned {self.pinned_bound}/{self.pods}"
        if self.emitted_bound is not None:
            pinned += f", emitted {self.emitted_bound}/{self.pods}"
        exact = "" if self.exact else " (approximate)"
        return (
            f"{self.case.describe()}: escher {self.verdict}{exact} {self.cause!r}; kube-scheduler "
            f"bound {self.bound}/{self.pods}{pinned} {self.pending[:3]}"
            f"{' pinned: ' + str(self.pinned_pending[:3]) if self.pinned_pending else ''}"
            f"{self.error}"
        )


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    if not binaries_available():
        pytest.skip(SKIP_REASON)
    pytest.importorskip("kubernetes", reason="needs pip install 'escher-sched[k8s]'")
    backoff = {"podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 1}
    with ControlPlane(scheduler_config=backoff) as cp:
        yield cp


# ---------------------------------------------------------------------- API helpers


def _json(response: Any) -> Any:
    try:
        data = response.data
    finally:
        response.release_conn()
    return json.loads(data) if data else None


def _pods(api: Any, namespace: str) -> list[dict[str, Any]]:
    items = _json(api.list_namespaced_pod(namespace, _preload_content=False))["items"]
    return list(items)


def _create_pods(api: Any, pods: list[dict[str, Any]]) -> None:
    for pod in pods:
        ns = pod["metadata"]["namespace"]
        _json(api.create_namespaced_pod(ns, pod, _preload_content=False))


def _delete_pods(api: Any, namespace: str) -> None:
    _json(
        api.delete_collection_namespaced_pod(
            namespace, grace_period_seconds=0, _preload_content=False
        )
    )
    deadline = time.monotonic() + WAIT_LIMIT
    while _pods(api, namespace):
        assert time.monotonic() < deadline, f"pods of {namespace} not deleted"
        time.sleep(POLL)


def _create_nodes(api: Any, case: ManifestSet) -> None:
    for node in case.nodes:
        add_fake_node(api, node.name, node.capacity, labels=node.labels, taints=node.taints)
        if node.unschedulable:
            _json(api.patch_node(node.name, {"spec": {"unschedulable": True}},
                                 _preload_content=False))  # fmt: skip


def _delete_nodes(api: Any, case: ManifestSet) -> None:
    for node in case.nodes:
        _json(api.delete_node(node.name, _preload_content=False))


def _settle(api: Any, namespace: str, names: set[str], quiet: float) -> list[dict[str, Any]]:
    """The set's pods once all are bound, or none was bound for `quiet` seconds."""
    deadline = time.monotonic() + WAIT_LIMIT
    last_change, bound = time.monotonic(), -1
    while True:
        pods = [p for p in _pods(api, namespace) if p["metadata"]["name"] in names]
        now_bound = sum(1 for p in pods if p["spec"].get("nodeName"))
        now = time.monotonic()
        if now_bound != bound:
            bound, last_change = now_bound, now
        if bound == len(names) or now - last_change > quiet or now > deadline:
            return pods
        time.sleep(POLL)


def _messages(pods: list[dict[str, Any]]) -> list[str]:
    out = []
    for pod in pods:
        if pod["spec"].get("nodeName"):
            continue
        for cond in (pod.get("status") or {}).get("conditions") or ():
            if cond.get("type") == "PodScheduled" and cond.get("message"):
                out.append(f"{pod['metadata']['name']}: {cond['message']}")
    return out


# ---------------------------------------------------------------------- one set


def _escher(case: ManifestSet, kubeconfig: str, outcome: Outcome) -> None:
    workloads = workloads_from_objects(case.workloads, source=f"set-{case.index}")
    cluster = read_cluster(kubeconfig)
    with _ESCHER:
        result = check_manifests(workloads, cluster, timeout=ESCHER_TIMEOUT)
    outcome.verdict = result.status.name
    outcome.cause = result.cause
    outcome.witness = {k: list(v) for k, v in (result.witness or {}).items()}
    outcome.exact = result.exact
    outcome.approximations = result.approximations


def _pinned(case: ManifestSet, witness: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The set's pods, each pinned by nodeSelector to its node in the witness, created in
    the order `--emit-placement` applies them (the order escher's witness check follows:
    a pod affinity met by the first-pod rule needs its pods to come first)."""
    pods = []
    by_key = {
        f"{w['kind']}/{w['metadata']['namespace']}/{w['metadata']['name']}": w
        for w in case.workloads
    }
    for key in apply_order(witness):
        workload = by_key[key]
        nodes = witness[key]

        for pod, node in zip(pods_of(workload), nodes, strict=True):
            pod["spec"]["nodeSelector"] = {**pod["spec"]["nodeSelector"], HOSTNAME: node}
            pods.append(pod)
    return pods


def _emitted(case: ManifestSet, witness: dict[str, list[str]], where: Path) -> list[dict[str, Any]]:
    """The set's pods as the manifests `emit_placement` writes create them, in apply order."""
    workloads = workloads_from_objects(case.workloads, source=f"set-{case.index}")
    emit_placement(workloads, witness, where)
    order = (where / APPLY_ORDER).read_text().split()
    return [pod for name in order for pod in pods_of(yaml.safe_load((where / name).read_text()))]


def _reapply(
    api: Any, case: ManifestSet, pods: list[dict[str, Any]], quiet: float
) -> tuple[int, list[str]]:
    """Delete the set's new pods, create `pods` instead; how many kube-scheduler binds, and
    its messages for the others (names may differ: emitted parts are new objects)."""
    running = {p["metadata"]["name"] for p in case.running}
    for pod in _pods(api, case.namespace):
        if pod["metadata"]["name"] not in running:
            _json(api.delete_namespaced_pod(pod["metadata"]["name"], case.namespace,
                                            grace_period_seconds=0,
                                            _preload_content=False))  # fmt: skip
    deadline = time.monotonic() + WAIT_LIMIT
    while {p["metadata"]["name"] for p in _pods(api, case.namespace)} - running:
        assert time.monotonic() < deadline, f"pods of set {case.index} not deleted"
        time.sleep(POLL)
    _create_pods(api, pods)
    settled = _settle(api, case.namespace, {p["metadata"]["name"] for p in pods}, quiet)
    return sum(1 for p in settled if p["spec"].get("nodeName")), _messages(settled)


def _run_set(api: Any, kubeconfig: str, case: ManifestSet, scratch: Path) -> Outcome:
    outcome = Outcome(case)
    _create_nodes(api, case)
    try:
        _create_pods(api, case.running)
        time.sleep(CACHE_LAG)
        _escher(case, kubeconfig, outcome)
        pods = case.pods()
        names = {p["metadata"]["name"] for p in pods}
        outcome.pods = len(pods)
        _create_pods(api, pods)
        settled = _settle(api, case.namespace, names, SETTLE)
        outcome.bound = sum(1 for p in settled if p["spec"].get("nodeName"))
        outcome.pending = _messages(settled)
        if outcome.verdict == "FEASIBLE" and not outcome.all_bound:
            emitted = _emitted(case, outcome.witness, scratch / f"set-{case.index}")
            outcome.emitted_bound, _ = _reapply(api, case, emitted, PIN_SETTLE)
            pinned = _pinned(case, outcome.witness)
            outcome.pinned_bound, outcome.pinned_pending = _reapply(api, case, pinned, PIN_SETTLE)
    except Exception as exc:  # reported with the set, so one bad set names itself
        where = "".join(traceback.format_tb(exc.__traceback__, limit=-2))
        outcome.error = f" ERROR {type(exc).__name__}: {exc}\n{where}"
    finally:
        _delete_pods(api, case.namespace)
        _delete_nodes(api, case)
    return outcome


def _run_group(cp: ControlPlane, cases: list[ManifestSet], scratch: Path) -> list[Outcome]:
    api = cp.core_v1()
    if cases:
        cp.create_namespace(cases[0].namespace)
    return [_run_set(api, str(cp.kubeconfig_path), case, scratch) for case in cases]


def _save(outcomes: list[Outcome], where: Path) -> None:
    """Each disagreeing set's manifests and nodes, to reproduce it by hand."""
    where.mkdir(parents=True, exist_ok=True)
    for o in outcomes:
        case = o.case
        doc = {
            "outcome": o.line(),
            "nodes": [vars(n) for n in case.nodes],
            "running": case.running,
            "workloads": case.workloads,
        }
        (where / f"set-{case.index}.json").write_text(json.dumps(doc, indent=1))


def test_every_generated_set_reads_as_its_controllers_would_create_it() -> None:
    for i in range(60):
        case = generate(i, SEED * 100_003 + i, "g0")
        assert generate(i, SEED * 100_003 + i, "g0") == case
        workloads = workloads_from_objects(case.workloads, source=f"set-{i}")
        assert not workloads.skipped
        assert sum(w.replicas for w in workloads.items) == len(case.pods())
        assert all(p["metadata"]["namespace"] == case.namespace for p in case.pods())


@pytest.mark.k8s
@pytest.mark.timeout(900)
def test_escher_agrees_with_kube_scheduler(
    plane: ControlPlane, tmp_path: Path, record_property: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    groups = [f"g{g}" for g in range(GROUPS)]
    cases = [generate(i, SEED * 100_003 + i, groups[i % GROUPS]) for i in range(SETS)]
    by_group = [[c for c in cases if c.group == g] for g in groups]
    t0 = time.monotonic()
    with ThreadPoolExecutor(GROUPS) as pool:
        runs = pool.map(lambda cs: _run_group(plane, cs, tmp_path / "emitted"), by_group)
        outcomes = [o for group in runs for o in group]
    seconds = time.monotonic() - t0

    errors = [o for o in outcomes if o.error]
    bound = [o for o in outcomes if o.all_bound]
    # kube-scheduler bound every pod: FEASIBLE, or UNKNOWN naming what it approximates
    bound_but_not_feasible = [
        o
        for o in bound
        if o.verdict == "INFEASIBLE" or (o.verdict == "UNKNOWN" and not o.approximations)
    ]
    infeasible_but_bound = [o for o in bound if o.verdict == "INFEASIBLE"]
    unknown = [o for o in outcomes if o.verdict == "UNKNOWN"]
    too_strict = [o for o in unknown if o.cause.startswith("infeasible under the stricter")]
    looser = [o for o in unknown if o.cause.startswith("a placement exists under a looser")]
    feasible = [o for o in outcomes if o.verdict == "FEASIBLE"]
    proven = [o for o in feasible if o.exact]
    stranded = [o for o in feasible if not o.all_bound]
    stranded_proven = [o for o in stranded if o.exact]
    pin_failed = [o for o in stranded if o.pinned_bound != o.pods]
    emit_failed = [o for o in stranded if o.emitted_bound != o.pods]
    verdicts = {v.name: sum(o.verdict == v.name for o in outcomes) for v in PLAN_VERDICTS}
    summary = (
        f"{len(outcomes)} sets ({sum(o.pods for o in outcomes)} pods) in {seconds:.0f} s: "
        f"escher {verdicts} ({len(feasible) - len(proven)} FEASIBLE not exact; "
        f"{sum(o.exact for o in outcomes if o.verdict == 'INFEASIBLE')} INFEASIBLE exact); "
        f"kube-scheduler bound every pod in {len(bound)}; it stranded pods where escher "
        f"proved a placement in {len(stranded_proven)} of {len(proven)} "
        f"({len(stranded_proven) / max(1, len(proven)):.1%}); there, the witness pinned pod by "
        f"pod bound every pod in {len(stranded_proven) - len(pin_failed)}, the emitted "
        f"placement (--emit-placement) in "
        f"{sum(o.emitted_bound == o.pods for o in stranded_proven)}; UNKNOWN with a looser "
        f"rule (a placement under it, the exact rule not proven): {len(looser)}, kube-scheduler "
        f"bound every pod in {sum(o.all_bound for o in looser)}; UNKNOWN infeasible under a "
        f"stricter rule: {len(too_strict)}, kube-scheduler bound every pod in "
        f"{sum(o.all_bound for o in too_strict)}; UNKNOWN without an approximation (a time "
        f"limit): {len(unknown) - len(looser) - len(too_strict)}"
    )
    with capsys.disabled():  # the report shows in every run, not only a failing one
        print("\n" + summary)
    for o in stranded:
        print("  stranded:", o.line())
    for o in unknown:
        print("  UNKNOWN:", o.line())
    record_property("agreement", summary)
    bad = errors + bound_but_not_feasible + infeasible_but_bound + pin_failed + emit_failed
    if bad:
        _save(bad, tmp_path / "disagreements")
    assert not errors, "\n".join(o.line() for o in errors)
    assert not bound_but_not_feasible, "kube-scheduler bound every pod, escher did not say " + (
        "FEASIBLE:\n" + "\n".join(o.line() for o in bound_but_not_feasible)
    )
    assert not infeasible_but_bound
    assert not pin_failed, "the pinned witness left pods Pending:\n" + "\n".join(
        o.line() for o in pin_failed
    )
    assert not emit_failed, "the emitted placement left pods Pending:\n" + "\n".join(
        o.line() for o in emit_failed
    )
    assert verdicts["INFEASIBLE"] >= SETS // 10 and len(proven) >= SETS // 4, summary
