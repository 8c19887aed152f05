"""`check_manifests` against an exhaustive search on small random instances.

Each instance (a few nodes in zones, with labels, taints and cordons; one or two workloads
with requests, nodeSelector, node affinity, tolerations, self anti-affinity, self affinity
and zone or hostname spreads, some with pods already running) is decided twice: by escher,
and by trying every placement, and every order in which its pods could arrive, against the
Kubernetes rules written out here from their documentation (each pod is admitted by what
is already there), not from the translation. The verdicts must agree (UNKNOWN only where
escher names an approximation), and a witness must satisfy the rules and escher's own exact
check of a placement (`check_placement`), which is also checked against these rules on
random placements.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from typing import Any

import pytest

from escher.core.quantity import parse_quantity
from escher.manifests import (
    check_manifests,
    check_placement,
    cluster_from_objects,
    workloads_from_objects,
)
from escher.verify import Verdict
from tests.manifests.kube_objects import HOST, ZONE, deployment, node, pod

Placement = dict[str, list[str]]


def _instance(rng: random.Random) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    zones = rng.randint(2, 3)
    nodes = []
    for i in range(rng.randint(3, 4)):
        labels = {"disk": "ssd"} if rng.random() < 0.5 else {}
        taints = [{"key": "t", "value": "x", "effect": "NoSchedule"}] if rng.random() < 0.25 else []
        nodes.append(
            node(
                f"n{i}",
                "abc"[i % zones],
                cpu=str(rng.randint(2, 4)),
                labels=labels,
                taints=taints,
                unschedulable=rng.random() < 0.15,
            )
        )
    workloads = []
    for k in range(rng.randint(1, 2)):
        app = f"w{k}"
        spec: dict[str, Any] = {}
        if rng.random() < 0.3:
            spec["nodeSelector"] = {"disk": "ssd"}
        if rng.random() < 0.3:
            spec["tolerations"] = [{"key": "t", "operator": "Exists"}]
        if rng.random() < 0.3:
            zone = rng.choice(["a", "b"])
            op = rng.choice(["In", "NotIn"])
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": ZONE, "operator": op, "values": [zone]}]}
                        ]
                    }
                }
            }
        pick = rng.random()
        term = {
            "labelSelector": {"matchLabels": {"app": app}},
            "topologyKey": rng.choice([ZONE, HOST]),
        }
        required = "requiredDuringSchedulingIgnoredDuringExecution"
        if pick < 0.25:
            spec.setdefault("affinity", {})["podAntiAffinity"] = {required: [term]}
        elif pick < 0.4:
            term["topologyKey"] = ZONE
            spec.setdefault("affinity", {})["podAffinity"] = {required: [term]}
        elif pick < 0.7:
            c: dict[str, Any] = {
                "maxSkew": rng.randint(1, 2),
                "topologyKey": rng.choice([ZONE, HOST]),
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": app}},
            }
            if rng.random() < 0.3:
                c["minDomains"] = rng.randint(2, 4)
            spec["topologySpreadConstraints"] = [c]
        cpu = rng.choice(["500m", "1", "1500m", "2"])
        workloads.append(deployment(app, rng.randint(1, 3), cpu=cpu, **spec))
        for j in range(rng.choice([0, 0, 1, 2])):  # pods of it already running
            host = rng.choice([n for n in nodes if n["kind"] == "Node"])["metadata"]["name"]
            nodes.append(pod(f"{app}-old-{j}", node_name=host, cpu="0", labels={"app": app}))
    return nodes, workloads


def _tolerated(pod_spec: dict[str, Any], taint: dict[str, Any]) -> bool:
    for tol in pod_spec.get("tolerations", []):
        if tol.get("key") in (None, "", taint["key"]) and tol.get("operator") == "Exists":
            return True
    return False


def _node_ok(pod_spec: dict[str, Any], n: dict[str, Any]) -> bool:
    """The node filters: cordon, taints, nodeSelector, required node affinity."""
    labels = n["metadata"]["labels"]
    if n["spec"].get("unschedulable"):
        return False
    if not all(_tolerated(pod_spec, t) for t in n["spec"].get("taints", [])):
        return False
    return _affinity_ok(pod_spec, labels)


def _affinity_ok(pod_spec: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in pod_spec.get("nodeSelector", {}).items()):
        return False
    node_aff = pod_spec.get("affinity", {}).get("nodeAffinity")
    if node_aff:
        terms = node_aff["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        expr = terms[0]["matchExpressions"][0]
        inside = labels.get(expr["key"]) in expr["values"]
        if inside != (expr["operator"] == "In"):
            return False
    return True


def _arrivals_ok(
    spec: dict[str, Any], order: list[str], by_name: dict[str, Any], running: list[str]
) -> bool:
    """kube-scheduler's inter-pod rules for the workload's pods arriving in `order`, with
    its pods already running on the nodes `running`."""
    labels = {n: by_name[n]["metadata"]["labels"] for n in by_name}
    aff = spec.get("affinity", {})
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    placed = list(running)
    for n in order:
        for term in aff.get("podAntiAffinity", {}).get(required, []):
            key = term["topologyKey"]
            if any(labels[m][key] == labels[n][key] for m in placed):
                return False
        for term in aff.get("podAffinity", {}).get(required, []):
            key = term["topologyKey"]
            if placed and not any(labels[m][key] == labels[n][key] for m in placed):
                return False  # the first pod of all may go anywhere (it matches itself)
        for c in spec.get("topologySpreadConstraints", []):
            key = c["topologyKey"]
            eligible = [m for m in by_name if _affinity_ok(spec, labels[m])]
            counts = Counter({labels[m][key]: 0 for m in eligible})
            counts.update(labels[m][key] for m in placed if m in eligible)
            low = 0 if len(counts) < c.get("minDomains", 1) else min(counts.values())
            if counts[labels[n][key]] + 1 - low > c["maxSkew"]:
                return False
        placed.append(n)
    return True


def _valid(placement: Placement, objects: list[dict[str, Any]], ws: list[dict[str, Any]]) -> bool:
    nodes = [o for o in objects if o["kind"] == "Node"]
    pods = [o for o in objects if o["kind"] == "Pod"]
    by_name = {n["metadata"]["name"]: n for n in nodes}
    used: Counter[str] = Counter()
    for w in ws:
        spec = w["spec"]["template"]["spec"]
        app = w["metadata"]["name"]
        cpu = parse_quantity(spec["containers"][0]["resources"]["requests"]["cpu"])
        where = placement[f"Deployment/default/{app}"]
        for n in where:
            if not _node_ok(spec, by_name[n]):
                return False
            used[n] += cpu  # type: ignore[assignment]
        running = [p["spec"]["nodeName"] for p in pods if p["metadata"]["labels"]["app"] == app]
        if not any(
            _arrivals_ok(spec, list(order), by_name, running)
            for order in set(itertools.permutations(where))
        ):
            return False
    return all(used[n] <= parse_quantity(by_name[n]["status"]["allocatable"]["cpu"]) for n in used)


def _exists(nodes: list[dict[str, Any]], ws: list[dict[str, Any]]) -> bool:
    names = [n["metadata"]["name"] for n in nodes if n["kind"] == "Node"]
    keys = [f"Deployment/default/{w['metadata']['name']}" for w in ws]
    sizes = [w["spec"]["replicas"] for w in ws]
    choices = [list(itertools.combinations_with_replacement(names, k)) for k in sizes]
    for combo in itertools.product(*choices):
        if _valid({k: list(c) for k, c in zip(keys, combo, strict=True)}, nodes, ws):
            return True
    return False


@pytest.mark.parametrize("seed", range(60))
def test_verdict_matches_exhaustive_search(seed: int) -> None:
    rng = random.Random(1000 + seed)
    nodes, ws = _instance(rng)
    result = check_manifests(workloads_from_objects(ws), cluster_from_objects(nodes), timeout=30)
    expected = _exists(nodes, ws)
    if result.status is Verdict.UNKNOWN:  # only where escher names what it approximates
        assert result.approximations and not result.exact, result.render()
        return
    assert result.exact, result.render()
    assert result.status is (Verdict.FEASIBLE if expected else Verdict.INFEASIBLE), result.render()
    if result.witness is not None:
        assert _valid(dict(result.witness), nodes, ws)
        assert check_placement(workloads_from_objects(ws), cluster_from_objects(nodes),
                               result.witness) is None  # fmt: skip


@pytest.mark.parametrize("seed", range(40))
def test_check_placement_matches_the_rules_written_here(seed: int) -> None:
    """`check_placement` (escher's exact-rule check of a witness) against the rules written
    out above, on random placements of random instances, feasible and not."""
    rng = random.Random(7000 + seed)
    nodes, ws = _instance(rng)
    workloads, cluster = workloads_from_objects(ws), cluster_from_objects(nodes)
    names = [n["metadata"]["name"] for n in nodes if n["kind"] == "Node"]
    for _ in range(8):
        placement = {
            f"Deployment/default/{w['metadata']['name']}": [
                rng.choice(names) for _ in range(w["spec"]["replicas"])
            ]
            for w in ws
        }
        expected = _valid(placement, nodes, ws)
        assert (check_placement(workloads, cluster, placement) is None) is expected, placement
