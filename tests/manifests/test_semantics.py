"""kube-scheduler's filters as `check_manifests` states them, on small clusters.

Each case is decided by the real verifier (Z3 and friends); feasible witnesses are checked
here against the Kubernetes rule the case is about, from outside the translation.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from escher.manifests import ManifestCheck, check_manifests, cluster_from_objects
from escher.manifests import workloads_from_objects as wl
from escher.verify import Verdict
from tests.manifests.kube_objects import (
    HOST,
    ZONE,
    affinity_in,
    anti,
    deployment,
    node,
    pod,
    spread,
    zones,
)


def check(objects: list[dict[str, Any]], cluster: list[dict[str, Any]]) -> ManifestCheck:
    return check_manifests(wl(objects), cluster_from_objects(cluster), timeout=30)


def nodes_of(result: ManifestCheck, key: str) -> list[str]:
    assert result.status is Verdict.FEASIBLE, result.render()
    assert result.witness is not None
    return list(result.witness[key])


def texts(result: ManifestCheck) -> str:
    assert result.explanation is not None, result.render()
    return "\n".join(s.text for s in result.explanation.statements)


# -- resources ---------------------------------------------------------------------------


def test_cpu_shortage_is_infeasible_with_breakdown() -> None:
    r = check([deployment("web", 3, cpu="3")], zones(2))
    assert r.status is Verdict.INFEASIBLE
    assert "CPU" in r.cause
    assert r.breakdown and "0/2 nodes" not in r.breakdown[0]  # one pod alone fits
    assert r.exit_code == 1


def test_breakdown_reads_like_kubectl() -> None:
    cluster = [
        node("a", cpu="1"),
        node("b", taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}]),
        node("c", unschedulable=True),
    ]
    r = check([deployment("web", 1, cpu="2")], cluster)
    assert r.status is Verdict.INFEASIBLE
    line = r.breakdown[0]
    assert line.startswith("Deployment default/web: 0/3 nodes are available")
    assert "1 Insufficient cpu" in line
    assert "1 node(s) had taint {gpu: true}, that the pod didn't tolerate" in line
    assert "1 node(s) were unschedulable" in line


def test_pod_count_is_a_resource() -> None:
    r = check([deployment("web", 3, cpu="100m")], [node("a", pods="2")])
    assert r.status is Verdict.INFEASIBLE
    assert "pods" in r.cause


def test_running_pods_take_capacity() -> None:
    cluster = [node("a", cpu="4"), pod("busy", node_name="a", cpu="3")]
    assert check([deployment("web", 1, cpu="2")], cluster).status is Verdict.INFEASIBLE
    done = [node("a", cpu="4"), pod("busy", node_name="a", cpu="3", phase="Succeeded")]
    assert check([deployment("web", 1, cpu="2")], done).status is Verdict.FEASIBLE


def test_extended_resources() -> None:
    cluster = [node("g", extra={"nvidia.com/gpu": "2"}), node("c")]
    d = deployment("train", 2)
    d["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = 1
    assert nodes_of(check([d], cluster), "Deployment/default/train") == ["g", "g"]
    d["spec"]["replicas"] = 3
    r = check([d], cluster)
    assert r.status is Verdict.INFEASIBLE and "GPU" in r.cause


# -- node filters ------------------------------------------------------------------------


def test_node_selector_and_name() -> None:
    cluster = [node("a", labels={"disk": "ssd"}), node("b")]
    got = nodes_of(
        check([deployment("db", 2, nodeSelector={"disk": "ssd"})], cluster), "Deployment/default/db"
    )
    assert set(got) == {"a"}
    r = check([deployment("db", 1, nodeName="b", nodeSelector={"disk": "ssd"})], cluster)
    assert r.status is Verdict.INFEASIBLE
    assert "spec.template.spec.nodeName" in texts(r)
    assert "spec.template.spec.nodeSelector" in texts(r)


@pytest.mark.parametrize(
    ("op", "values", "allowed"),
    [
        ("In", ["2", "3"], {"n2", "n3"}),
        ("NotIn", ["2", "3"], {"n1", "n4", "none"}),
        ("Exists", [], {"n1", "n2", "n3", "n4"}),
        ("DoesNotExist", [], {"none"}),
        ("Gt", ["2"], {"n3", "n4"}),
        ("Lt", ["2"], {"n1"}),
    ],
)
def test_node_affinity_operators(op: str, values: list[str], allowed: set[str]) -> None:
    cluster = [node(f"n{i}", labels={"rank": str(i)}) for i in range(1, 5)] + [node("none")]
    d = deployment("w", len(allowed), cpu="4", affinity=affinity_in("rank", *values, op=op))
    assert set(nodes_of(check([d], cluster), "Deployment/default/w")) == allowed
    d["spec"]["replicas"] = len(allowed) + 1
    assert check([d], cluster).status is Verdict.INFEASIBLE


def test_node_affinity_terms_or_expressions_and() -> None:
    cluster = [
        node("a", labels={"x": "1", "y": "1"}),
        node("b", labels={"x": "1"}),
        node("c", labels={"z": "1"}),
    ]
    terms = [
        {
            "matchExpressions": [
                {"key": "x", "operator": "Exists"},
                {"key": "y", "operator": "Exists"},
            ]
        },
        {"matchExpressions": [{"key": "z", "operator": "Exists"}]},
    ]
    aff = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }
    got = nodes_of(
        check([deployment("w", 2, cpu="4", affinity=aff)], cluster), "Deployment/default/w"
    )
    assert set(got) == {"a", "c"}


@pytest.mark.parametrize(
    ("tolerations", "fits"),
    [
        ([], False),
        ([{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}], True),
        ([{"key": "gpu", "value": "false"}], False),
        ([{"key": "gpu", "operator": "Exists"}], True),
        ([{"operator": "Exists"}], True),  # empty key + Exists tolerates everything
        ([{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}], False),
    ],
)
def test_taints_and_tolerations(tolerations: list[dict[str, str]], fits: bool) -> None:
    cluster = [node("g", taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}])]
    r = check([deployment("w", 1, tolerations=tolerations)], cluster)
    assert r.feasible is fits
    if not fits:
        (exclusion,) = r.exclusions.values()
        assert exclusion.cause == "taint" and exclusion.taint == "gpu=true:NoSchedule"
        assert exclusion.excluded == ("g",)


def test_prefer_no_schedule_is_soft() -> None:
    cluster = [node("g", taints=[{"key": "spot", "value": "1", "effect": "PreferNoSchedule"}])]
    r = check([deployment("w", 1)], cluster)
    assert r.feasible
    assert any("not met" in p for p in r.preferences)


def test_cordoned_node_is_a_cause_with_a_reason() -> None:
    r = check([deployment("w", 2, cpu="3")], [node("a"), node("b", unschedulable=True)])
    assert r.status is Verdict.INFEASIBLE
    causes = {e.cause: e for e in r.exclusions.values()}
    assert causes["cordon"].excluded == ("b",)
    tolerate = [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert check(
        [deployment("w", 2, cpu="3", tolerations=tolerate)],
        [node("a"), node("b", unschedulable=True)],
    ).feasible


# -- inter-pod affinity ------------------------------------------------------------------


def test_zone_anti_affinity_three_zones_four_replicas() -> None:
    r = check([deployment("web", 4, affinity=anti("web"))], zones(3))
    assert r.status is Verdict.INFEASIBLE
    assert (
        "Deployment default/web: spec.template.spec.affinity.podAntiAffinity."
        "requiredDuringSchedulingIgnoredDuringExecution[0]" in texts(r)
    )
    ok = check([deployment("web", 3, affinity=anti("web"))], zones(3, per_zone=2))
    zones_used = [n[0] for n in nodes_of(ok, "Deployment/default/web")]
    assert sorted(zones_used) == ["a", "b", "c"]


def test_hostname_anti_affinity() -> None:
    r = check([deployment("web", 3, cpu="100m", affinity=anti("web", HOST))], zones(1, per_zone=2))
    assert r.status is Verdict.INFEASIBLE
    ok = check([deployment("web", 2, cpu="100m", affinity=anti("web", HOST))], zones(1, per_zone=2))
    assert len(set(nodes_of(ok, "Deployment/default/web"))) == 2


def test_anti_affinity_and_a_node_without_the_key() -> None:
    """kube-scheduler lets a node without the topology key take pods under anti-affinity on
    that key; escher lets it take one (with a warning that an INFEASIBLE may be too strict)."""
    cluster = [node("a0", "a"), node("b0", "b"), node("bare", None)]
    r = check([deployment("web", 3, affinity=anti("web"))], cluster)
    assert sorted(nodes_of(r, "Deployment/default/web")) == ["a0", "b0", "bare"]
    assert any("may be too strict" in w for w in r.warnings)


def test_anti_affinity_between_two_workloads_that_avoid_themselves() -> None:
    a = deployment("a", 1, labels={"tier": "x"}, affinity=anti_tier())
    b = deployment("b", 1, labels={"tier": "x"}, affinity=anti_tier())
    assert check([a, b], zones(1, per_zone=2)).status is Verdict.INFEASIBLE
    ok = check([a, b], zones(2))
    assert {nodes_of(ok, "Deployment/default/a")[0], nodes_of(ok, "Deployment/default/b")[0]} == {
        "a0",
        "b0",
    }


def anti_tier() -> dict[str, Any]:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"tier": "x"}}, "topologyKey": ZONE}
            ]
        }
    }


def test_anti_affinity_with_running_pods_both_ways() -> None:
    cluster = [*zones(2), pod("old", node_name="a0", labels={"app": "web"})]
    got = nodes_of(
        check([deployment("web", 1, affinity=anti("web"))], cluster), "Deployment/default/web"
    )
    assert got == ["b0"]
    # a running pod's own anti-affinity keeps matching new pods out of its zone
    guard = pod("guard", node_name="b0", labels={"app": "guard"}, affinity=anti("web"))
    r = check([deployment("web", 1, affinity=anti("web"))], [*cluster, guard])
    assert r.status is Verdict.INFEASIBLE
    assert {e.cause for e in r.exclusions.values()} == {"podAntiAffinity", "existingAntiAffinity"}


def test_anti_affinity_namespaces() -> None:
    cluster = [*zones(2), pod("old", node_name="a0", labels={"app": "web"}, namespace="other")]
    d = deployment("web", 2, affinity=anti("web"))
    assert check([d], cluster).feasible  # the running pod is in another namespace
    term = d["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    term["requiredDuringSchedulingIgnoredDuringExecution"][0]["namespaces"] = ["other", "default"]
    assert check([d], cluster).status is Verdict.INFEASIBLE
    term["requiredDuringSchedulingIgnoredDuringExecution"][0].pop("namespaces")
    term["requiredDuringSchedulingIgnoredDuringExecution"][0]["namespaceSelector"] = {}
    assert check([d], cluster).status is Verdict.INFEASIBLE


def test_pod_affinity_to_own_pods_keeps_them_in_one_zone() -> None:
    aff = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": ZONE}
            ]
        }
    }
    ok = check([deployment("cache", 4, cpu="2", affinity=aff)], zones(2, per_zone=2))
    assert len({n[0] for n in nodes_of(ok, "Deployment/default/cache")}) == 1
    r = check([deployment("cache", 5, cpu="2", affinity=aff)], zones(3, per_zone=2))
    assert r.status is Verdict.INFEASIBLE  # 4 fit per zone, 5 must share one zone
    # a running matching pod: new pods go to its zone
    cluster = [*zones(2, per_zone=2), pod("c0", node_name="b1", cpu="0", labels={"app": "cache"})]
    got = nodes_of(
        check([deployment("cache", 2, cpu="2", affinity=aff)], cluster), "Deployment/default/cache"
    )
    assert {n[0] for n in got} == {"b"}


def test_pod_affinity_to_a_workload_in_one_zone() -> None:
    """web needs a cache pod in its zone; the single cache pod lands in one zone, so every
    web pod goes to that zone (exact); with several cache pods spread out it is checked
    only as 'on a labelled node' (warning)."""
    to_cache = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": ZONE}
            ]
        }
    }
    cluster = zones(3, cpu="2")
    web = deployment("web", 2, cpu="1", affinity=to_cache)
    r = check([web, deployment("cache", 1, cpu="1")], cluster)
    assert r.status is Verdict.INFEASIBLE  # 3 pods, 2 cpu per zone
    assert not r.warnings
    web["spec"]["replicas"] = 1
    ok = check([web, deployment("cache", 1, cpu="1")], cluster)
    assert nodes_of(ok, "Deployment/default/web") == nodes_of(ok, "Deployment/default/cache")
    spread_out = check([web, deployment("cache", 3, cpu="1")], cluster)
    assert spread_out.feasible and any("is checked only as" in w for w in spread_out.warnings)


def test_pod_affinity_matching_nothing_never_schedules() -> None:
    aff = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "nobody"}}, "topologyKey": ZONE}
            ]
        }
    }
    r = check([deployment("w", 1, affinity=aff)], zones(2))
    assert r.status is Verdict.INFEASIBLE
    assert "podAffinity" in texts(r)


# -- topology spread ---------------------------------------------------------------------


def zone_counts(result: ManifestCheck, key: str) -> list[int]:
    c = Counter(n[0] for n in nodes_of(result, key))
    return sorted(c.values())


def test_zone_spread_max_skew() -> None:
    # zone a has room for 1 pod: with maxSkew 1 the others take at most 2 each
    cluster = [node("a0", "a", cpu="1"), *zones(3, per_zone=2)[2:]]
    ok = check([deployment("web", 5, cpu="1", topologySpreadConstraints=spread("web"))], cluster)
    assert zone_counts(ok, "Deployment/default/web") == [1, 2, 2]
    r = check([deployment("web", 6, cpu="1", topologySpreadConstraints=spread("web"))], cluster)
    assert r.status is Verdict.INFEASIBLE
    assert "topologySpreadConstraints[0]" in texts(r)
    wide = spread("web", skew=3)
    ok = check([deployment("web", 6, cpu="1", topologySpreadConstraints=wide)], cluster)
    counts = zone_counts(ok, "Deployment/default/web")
    assert sum(counts) == 6 and counts[-1] - counts[0] <= 3


def test_spread_counts_only_domains_the_pod_may_use_node_affinity_honor() -> None:
    """nodeAffinityPolicy Honor (default): zones the pod's node affinity excludes are not
    domains; Ignore: they are, with 0 pods, so maxSkew caps every other zone."""
    cluster = zones(3, per_zone=2)
    aff = affinity_in(ZONE, "a", "b")
    d = deployment("web", 4, cpu="1", affinity=aff, topologySpreadConstraints=spread("web"))
    assert zone_counts(check([d], cluster), "Deployment/default/web") == [2, 2]
    ignore = spread("web", nodeAffinityPolicy="Ignore")
    d2 = deployment("web", 4, cpu="1", affinity=aff, topologySpreadConstraints=ignore)
    assert check([d2], cluster).status is Verdict.INFEASIBLE  # zone c stays at 0: at most 1 each
    d2["spec"]["replicas"] = 2
    assert check([d2], cluster).feasible


def test_spread_node_taints_policy() -> None:
    """nodeTaintsPolicy Ignore (default): a zone of tainted nodes is a domain with 0 pods;
    Honor: it is not a domain."""
    taint = [{"key": "t", "value": "1", "effect": "NoSchedule"}]
    cluster = [*zones(2, per_zone=2), node("c0", "c", taints=taint)]
    d = deployment("web", 4, cpu="1", topologySpreadConstraints=spread("web"))
    assert check([d], cluster).status is Verdict.INFEASIBLE
    honor = deployment(
        "web", 4, cpu="1", topologySpreadConstraints=spread("web", nodeTaintsPolicy="Honor")
    )
    assert zone_counts(check([honor], cluster), "Deployment/default/web") == [2, 2]


def test_spread_min_domains() -> None:
    """Fewer eligible domains than minDomains: the global minimum is 0, so each domain
    holds at most maxSkew pods."""
    cluster = zones(2, per_zone=2)
    d = deployment("web", 4, cpu="1", topologySpreadConstraints=spread("web", minDomains=3))
    assert check([d], cluster).status is Verdict.INFEASIBLE
    d["spec"]["replicas"] = 2
    assert zone_counts(check([d], cluster), "Deployment/default/web") == [1, 1]
    enough = deployment("web", 4, cpu="1", topologySpreadConstraints=spread("web", minDomains=2))
    assert zone_counts(check([enough], cluster), "Deployment/default/web") == [2, 2]


def test_spread_match_label_keys_narrows_the_count() -> None:
    """matchLabelKeys: the pod's values of those keys join the selector, so a running pod
    of another revision is not counted."""
    old = pod("old", node_name="a0", cpu="0", labels={"app": "web", "rev": "1"})
    cluster = [node("a0", "a", cpu="8"), node("b0", "b", cpu="1"), old]
    plain = deployment(
        "web", 3, cpu="1", labels={"rev": "2"}, topologySpreadConstraints=spread("web")
    )
    assert check([plain], cluster).status is Verdict.INFEASIBLE  # a: 1 + 2 against b: 1
    keyed = spread("web", matchLabelKeys=["rev"])
    d = deployment("web", 3, cpu="1", labels={"rev": "2"}, topologySpreadConstraints=keyed)
    assert zone_counts(check([d], cluster), "Deployment/default/web") == [1, 2]


def test_spread_counts_running_pods() -> None:
    """Running pods count: new pods fill the emptier zones first."""
    running = [pod(f"r{i}", node_name="a0", cpu="0", labels={"app": "web"}) for i in range(2)]
    cluster = [*zones(3, per_zone=1, cpu="8"), *running]
    d = deployment("web", 4, cpu="1", topologySpreadConstraints=spread("web"))
    r = check([d], cluster)
    assert r.witness is not None and set(r.witness) == {"Deployment/default/web"}
    new = Counter(n[0] for n in r.witness["Deployment/default/web"])
    assert (new["a"] + 2, new["b"], new["c"]) in {(2, 2, 2)}
    d["spec"]["replicas"] = 1  # more empty zones than pods: the minimum stays 0
    r = check([d], cluster)
    assert r.feasible and r.witness is not None
    assert r.witness["Deployment/default/web"][0][0] in "bc"
    # already uneven beyond maxSkew: not checked, with a warning
    uneven = [
        *zones(2, cpu="8"),
        *(pod(f"r{i}", node_name="a0", cpu="0", labels={"app": "web"}) for i in range(3)),
    ]
    r = check([deployment("web", 4, cpu="1", topologySpreadConstraints=spread("web"))], uneven)
    assert any("not checked" in w for w in r.warnings)


def test_spread_missing_label_excludes_node() -> None:
    cluster = [node("a0", "a"), node("nolabel", None)]
    d = deployment("web", 2, cpu="3", topologySpreadConstraints=spread("web", skew=2))
    r = check([d], cluster)
    assert r.status is Verdict.INFEASIBLE
    assert "topologySpreadConstraints[0]" in texts(r)  # the spread or its label filter


def test_schedule_anyway_and_preferred_terms_are_soft() -> None:
    soft = [dict(spread("web")[0], whenUnsatisfiable="ScheduleAnyway")]
    pref = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {"app": "web"}},
                        "topologyKey": HOST,
                    },
                }
            ]
        }
    }
    r = check(
        [deployment("web", 4, cpu="1", topologySpreadConstraints=soft, affinity=pref)],
        zones(1, per_zone=2),
    )
    assert r.feasible
    assert len(r.preferences) == 2


# -- gangs -------------------------------------------------------------------------------


def test_pod_group_min_member() -> None:
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g"},
        "spec": {"minMember": 3},
    }
    member = deployment("w", 2, labels={"scheduling.x-k8s.io/pod-group": "g"})
    r = check([group, member], zones(2))
    assert r.status is Verdict.INFEASIBLE
    assert "PodGroup default/g: spec.minMember" in texts(r)
    member["spec"]["replicas"] = 3
    assert check([group, member], zones(2)).feasible


def test_witness_keys_are_kind_namespace_name() -> None:
    d = deployment("web", 2, namespace="shop", kind="StatefulSet")
    r = check([d, pod("solo")], zones(2))
    assert r.witness is not None
    assert set(r.witness) == {"StatefulSet/shop/web", "Pod/default/solo"}


def test_fields_not_checked_are_named_in_warnings() -> None:
    d = deployment("db", 1, schedulerName="other", priorityClassName="high")
    d["spec"]["template"]["spec"]["containers"][0]["ports"] = [
        {"containerPort": 80, "hostPort": 80}
    ]
    d["spec"]["template"]["spec"]["volumes"] = [
        {"name": "v", "persistentVolumeClaim": {"claimName": "c"}}
    ]
    r = check([d], zones(1))
    assert r.feasible
    (warning,) = r.warnings
    for words in ("hostPort", "persistent volume claims", "schedulerName other", "priority"):
        assert words in warning
