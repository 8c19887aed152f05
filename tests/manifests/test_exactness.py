"""Verdicts that never overclaim: a FEASIBLE's witness passes kube-scheduler's exact rules
(`check_placement`), an INFEASIBLE rests on no stricter-than-kube statement, and otherwise
the verdict is UNKNOWN naming the approximation (`ManifestCheck.exact`, `.approximations`)."""

from __future__ import annotations

import json
from typing import Any

from escher.manifests import (
    ManifestCheck,
    check_manifests,
    check_placement,
    cluster_from_objects,
    workloads_from_objects,
)
from escher.verify import Verdict
from tests.manifests.kube_objects import HOST, ZONE, anti, deployment, node, pod

TAINT = {"key": "t", "value": "x", "effect": "NoSchedule"}


def _check(nodes: list[dict[str, Any]], ws: list[dict[str, Any]]) -> ManifestCheck:
    return check_manifests(workloads_from_objects(ws), cluster_from_objects(nodes), timeout=30)


def test_a_witness_that_breaks_anti_affinity_between_workloads_is_not_feasible() -> None:
    # x fills both zones (one 3-cpu pod per 4-cpu node); y keeps away from x's zones:
    # kube-scheduler leaves y Pending; escher does not state this pair exactly
    nodes = [node("a0", "a"), node("b0", "b")]
    ws = [deployment("x", 2, cpu="3"), deployment("y", 1, cpu="500m", affinity=anti("x"))]
    result = _check(nodes, ws)
    assert result.status is Verdict.UNKNOWN, result.render()
    assert not result.exact and result.witness is None
    assert result.cause.startswith("a placement exists under a looser rule: pod anti-affinity")
    assert "kube-scheduler's exact rule was not proven" in result.cause
    assert any(a.startswith("looser: pod anti-affinity") for a in result.approximations)
    assert any("breaks it" in p for p in result.proven)


def test_a_witness_that_meets_the_loosened_rule_stays_feasible_and_exact() -> None:
    # the same pair with room to keep them apart: the witness passes the exact check
    nodes = [node("a0", "a"), node("b0", "b"), node("c0", "c")]
    ws = [deployment("x", 1, cpu="3"), deployment("y", 2, cpu="500m", affinity=anti("x"))]
    result = _check(nodes, ws)
    assert result.status is Verdict.FEASIBLE, result.render()
    assert result.exact and result.approximations
    assert result.witness is not None
    zone = {"a0": "a", "b0": "b", "c0": "c"}
    x_zone = zone[result.witness["Deployment/default/x"][0]]
    assert all(zone[n] != x_zone for n in result.witness["Deployment/default/y"])


def test_infeasible_under_the_stricter_bare_node_rule_is_unknown() -> None:
    # kube-scheduler: a node without the zone label takes any number of x's pods
    nodes = [node("a0", "a"), node("b0", "b"), node("bare", None)]
    ws = [deployment("x", 4, cpu="1", affinity=anti("x"))]
    result = _check(nodes, ws)
    assert result.status is Verdict.UNKNOWN, result.render()
    assert result.cause.startswith("infeasible under the stricter rule nodes without label")
    assert result.explanation is not None  # the conflict is still shown
    assert not result.exact
    assert any(a.startswith("stricter:") for a in result.approximations)


def test_infeasible_stays_exact_where_no_eligible_node_lacks_the_key() -> None:
    # the node without the zone label is tainted: the stricter rule is not in play
    nodes = [node("a0", "a"), node("b0", "b"), node("bare", None, taints=[TAINT])]
    ws = [deployment("x", 3, cpu="1", affinity=anti("x"))]
    result = _check(nodes, ws)
    assert result.status is Verdict.INFEASIBLE, result.render()
    assert result.exact


def test_infeasible_stays_exact_where_the_conflict_does_not_use_the_stricter_rule() -> None:
    # x kept apart on zones with a bare node, but y alone cannot fit anywhere
    nodes = [node("a0", "a"), node("b0", "b"), node("bare", None)]
    ws = [deployment("x", 2, cpu="1", affinity=anti("x")), deployment("y", 1, cpu="9")]
    result = _check(nodes, ws)
    assert result.status is Verdict.INFEASIBLE, result.render()
    assert result.exact


def test_exact_and_approximations_are_in_the_json() -> None:
    nodes = [node("a0", "a"), node("b0", "b"), node("bare", None)]
    data = json.loads(json.dumps(_check(nodes, [deployment("x", 4, affinity=anti("x"))]).to_dict()))
    assert data["status"] == "unknown" and data["exact"] is False
    assert data["approximations"][0].startswith("stricter:")
    exact = _check(nodes, [deployment("x", 1)]).to_dict()
    assert exact["exact"] is True and exact["approximations"] == []


def test_check_placement_names_the_rule_a_placement_breaks() -> None:
    nodes = [node("a0", "a"), node("b0", "b"), node("bare", None), pod("old", node_name="a0")]
    old = {"podAntiAffinity": anti("y", HOST)["podAntiAffinity"]}
    nodes.append(pod("guard", node_name="b0", cpu="0", labels={"app": "g"}, affinity=old))
    workloads = workloads_from_objects([deployment("x", 2, affinity=anti("x")), deployment("y")])
    cluster = cluster_from_objects(nodes)
    # nodes without the key take any number of pods kept apart on it (kube-scheduler)
    ok = {"Deployment/default/x": ["bare", "bare"], "Deployment/default/y": ["a0"]}
    assert check_placement(workloads, cluster, ok) is None
    same_zone = {"Deployment/default/x": ["a0", "a0"], "Deployment/default/y": ["bare"]}
    broken = check_placement(workloads, cluster, same_zone)
    assert broken is not None and broken.rule == "pod anti-affinity", broken
    guarded = {"Deployment/default/x": ["a0", "bare"], "Deployment/default/y": ["b0"]}
    broken = check_placement(workloads, cluster, guarded)
    assert broken is not None and broken.rule == "pod anti-affinity (of existing pods)", broken
    assert broken.workload == "Deployment/default/y" and broken.node == "b0"


def test_check_placement_follows_spread_arrivals() -> None:
    # maxSkew 1 over 2 zones, 2 pods already in zone a: new pods must fill zone b first
    nodes = [node("a0", "a"), node("b0", "b")]
    nodes += [pod(f"old{i}", node_name="a0", cpu="0", labels={"app": "x"}) for i in range(2)]
    c = {
        "maxSkew": 1,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "x"}},
    }
    workloads = workloads_from_objects([deployment("x", 3, topologySpreadConstraints=[c])])
    cluster = cluster_from_objects(nodes)
    # arriving a0 first breaks the skew, but b0, b0 first and then a0 is an order that lands
    assert check_placement(workloads, cluster, {"Deployment/default/x": ["a0", "b0", "b0"]}) is None
    broken = check_placement(workloads, cluster, {"Deployment/default/x": ["a0", "a0", "b0"]})
    assert broken is not None and broken.rule == "topology spread"
