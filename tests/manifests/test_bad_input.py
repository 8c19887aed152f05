"""Malformed manifests and listings give an `EscherError` naming the place, never another
exception (the command line turns those into one line and exit 3, not a traceback)."""

from __future__ import annotations

import contextlib
import copy
import random
from collections.abc import Iterator
from typing import Any

import pytest

from escher.core.errors import EscherError
from escher.manifests import check_manifests, cluster_from_objects, workloads_from_objects
from tests.manifests.kube_objects import affinity_in, anti, deployment, node, pod, spread

WRONG = [None, 3, "x", [], {}, [1], {"a": 1}, True, -1, "500m"]


def _paths(obj: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    items = (
        obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    )
    for k, v in items:
        yield (*at, k)
        yield from _paths(v, (*at, k))


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value


def _objects() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    web = deployment(
        "web",
        2,
        affinity={**anti("web"), **affinity_in("disk", "ssd")},
        topologySpreadConstraints=spread("web", minDomains=2, matchLabelKeys=["app"]),
        tolerations=[{"key": "t", "operator": "Exists"}],
        nodeSelector={"tier": "x"},
    )
    job = {
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {
            "parallelism": 2,
            "completions": 3,
            "template": {
                "spec": {
                    "containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}],
                    "initContainers": [{"name": "i"}],
                    "overhead": {"cpu": "1"},
                }
            },
        },
    }
    group = {"kind": "PodGroup", "metadata": {"name": "g"}, "spec": {"minMember": 2}}
    cluster = [
        node(
            "a", labels={"disk": "ssd", "tier": "x"}, taints=[{"key": "t", "effect": "NoSchedule"}]
        ),
        node("b", "b", unschedulable=True),
        pod("old", node_name="a", labels={"app": "web"}, affinity=anti("web")),
    ]
    return [web, job, group], cluster


@pytest.mark.parametrize("seed", range(4))
def test_a_wrong_type_anywhere_is_an_escher_error(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(100):
        objects, cluster = copy.deepcopy(_objects())
        target = rng.choice([objects, cluster])
        i = rng.randrange(len(target))
        path = rng.choice(list(_paths(target[i])))
        _set(target[i], path, rng.choice(WRONG))
        with contextlib.suppress(EscherError):  # any other exception fails the test
            check_manifests(
                workloads_from_objects(objects), cluster_from_objects(cluster), timeout=10
            )
