"""Preferences: weights steer tasks to the best node with room now, and never block them."""

from __future__ import annotations

from collections import Counter

import pytest

import escher
from escher import ValidationError
from escher.backends.memory import MemoryBackend
from escher.core.cluster import Node
from escher.esl import (
    AntiAffinity,
    PreferApart,
    Preferences,
    PreferNodes,
    PreferSpread,
    PreferTogether,
)
from escher.esl._prefer import Term


def stamp() -> tuple[str, float]:
    return escher.node_id(), escher.current_backend().clock.now()


def cluster(cpus: int = 2) -> MemoryBackend:
    nodes = {
        f"n{i}": {"resources": {"CPU": cpus}, "labels": {"zone": "ab"[i // 2], "disk": d}}
        for i, d in enumerate(("hdd", "ssd", "hdd", "hdd"))
    }
    return MemoryBackend(nodes=nodes, virtual_clock=True)  # type: ignore[arg-type]


def test_preferred_nodes_win_while_they_have_room() -> None:
    backend = cluster()
    with Preferences(PreferNodes({"disk": "ssd"}, weight=5), backend=backend) as prefs:
        refs = [prefs.launch(stamp, resources={"CPU": 1}, duration=10.0) for _ in range(4)]
        nodes = [escher.get(r, timeout=100) for r in refs]
    assert [n for n, _ in nodes[:2]] == ["n1", "n1"]  # the ssd node, while it has room
    assert all(start == 0.0 for _, start in nodes)  # the others never waited for it
    assert (prefs.steered, prefs.unsteered) == (2, 2)
    backend.close()


def test_spread_and_apart_over_zones() -> None:
    backend = cluster()
    with Preferences(PreferSpread("zone"), backend=backend) as prefs:
        refs = [prefs.launch(stamp, resources={"CPU": 1}, duration=10.0) for _ in range(6)]
        zones = Counter("ab"[int(escher.get(r, timeout=100)[0][1]) // 2] for r in refs)
    assert zones == {"a": 3, "b": 3}
    with Preferences(PreferApart(), backend=backend) as prefs:
        refs = [prefs.launch(stamp, resources={"CPU": 1}, duration=10.0) for _ in range(6)]
        nodes = [escher.get(r, timeout=100) for r in refs]
    assert len({n for n, _ in nodes[:4]}) == 4  # one per node while possible
    assert all(t >= 10.0 for _, t in nodes[:4])  # (after the spread's tasks ended)
    backend.close()


def test_together_gathers_on_the_first_tasks_node() -> None:
    backend = cluster(cpus=3)
    with Preferences(PreferTogether(), backend=backend) as prefs:
        refs = [prefs.launch(stamp, resources={"CPU": 1}, duration=5.0) for _ in range(5)]
        nodes = [escher.get(r, timeout=100)[0] for r in refs]
    assert nodes[:3] == [nodes[0]] * 3 and nodes[3] != nodes[0]  # full: the next goes on
    backend.close()


class Crowd(Term):
    """Prefers n0 and, when first scored, fills n0 with another task (a race lost)."""

    weight = 1.0

    def __init__(self) -> None:
        self.filled = False

    def score(self, node: Node, where: object) -> float:
        if not self.filled:
            self.filled = True
            escher.current_backend().set_resource("pin", 1, "n0")
            escher.launch(stamp, resources={"CPU": 2, "pin": 1}, duration=5.0)
        return 1.0 if node.id == "n0" else 0.0


def test_a_steered_task_that_lost_its_node_is_unsteered_after_patience() -> None:
    backend = cluster()
    escher.init(backend)
    try:
        with Preferences(Crowd(), patience=1.0) as prefs:
            node, start = escher.get(prefs.launch(stamp, resources={"CPU": 1}), timeout=100)
        assert (node, start) == ("n1", 1.0)
    finally:
        escher.shutdown()


def test_preferences_steer_last_in_an_and() -> None:
    backend = cluster()
    with (
        AntiAffinity(backend) as aa,
        Preferences(PreferNodes({"disk": "ssd"}), backend=backend) as p,
    ):
        both = p & aa
        refs = [both.launch(stamp, resources={"CPU": 1}, duration=3.0) for _ in range(4)]
        nodes = [escher.get(r, timeout=100) for r in refs]
    assert nodes[0] == ("n1", 0.0)  # ssd first; anti-affinity then keeps it to one task
    assert sorted(n for n, _ in nodes) == ["n0", "n1", "n2", "n3"]
    assert all(t == 0.0 for _, t in nodes)
    backend.close()


def test_declared_preferences_are_soft() -> None:
    backend = cluster()
    prefs = Preferences(
        PreferNodes({"disk": "ssd"}, weight=3), PreferSpread("zone", weight=2), backend=backend
    )
    plan = prefs.declare(None, "w", count=4, resources={"CPU": 1})
    weights = {type(i).__name__: i.weight for i in plan.intents}
    assert weights == {"PinnedTo": 3.0, "SpreadEvenly": 2.0}
    assert all(i.preferred for i in plan.intents)
    prefs.close()
    with pytest.raises(ValidationError, match="weight"):
        PreferApart(weight=0)
    backend.close()
