"""Pure-Python parts of the Ray backend, without a cluster: the control actor's logic (run
as a plain object) and the gang fit check."""

from __future__ import annotations

import asyncio
from typing import Any

from escher.backends.ray._control import ControlActor
from escher.backends.ray._gangfit import gang_unfit_reason
from escher.core.resources import Resources


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_gang_grant_is_all_or_nothing() -> None:
    actor = ControlActor()
    run(actor.set_many({"a": {"g": 1}, "b": {"g": 1}}))
    three = [("k1", {"g": 1}, ["a", "b"]), ("k2", {"g": 1}, ["a", "b"]), ("k3", {"g": 1}, ["a"])]
    assert run(actor.acquire_all(three)) is None
    _, _, used = run(actor.table())
    assert used == {}  # nothing held after a refused gang
    two = [("k1", {"g": 1}, ["a", "b"]), ("k2", {"g": 1}, ["a", "b"]), ("k3", {}, ["a"])]
    assert run(actor.acquire_all(two)) == ["a", "b", ""]
    assert run(actor.acquire([("k4", {"g": 1}, ["a", "b"])])) == {}
    run(actor.release("a", {"g": 1}))
    assert run(actor.acquire([("k4", {"g": 1}, ["a", "b"])])) == {"k4": "a"}


def _both_units_held() -> ControlActor:
    """An actor whose node "a" has 2 units of "g", both granted (to k1 and k2)."""
    actor = ControlActor()
    run(actor.set_many({"a": {"g": 2}}))
    assert run(actor.acquire([("k1", {"g": 1}, ["a"]), ("k2", {"g": 1}, ["a"])])) == {
        "k1": "a",
        "k2": "a",
    }
    return actor


def test_shrink_below_use_keeps_holders_and_blocks_new_grants() -> None:
    actor = _both_units_held()
    run(actor.set_many({"a": {"g": 1}}))
    assert run(actor.acquire([("k3", {"g": 1}, ["a"])])) == {}
    run(actor.release("a", {"g": 1}))
    assert run(actor.acquire([("k3", {"g": 1}, ["a"])])) == {}  # 1 still in use of 1
    run(actor.release("a", {"g": 1}))
    assert run(actor.acquire([("k3", {"g": 1}, ["a"])])) == {"k3": "a"}


def test_releases_sent_with_a_grant_call_are_given_back_first() -> None:
    actor = _both_units_held()
    # The batch of releases frees both units before the grants of the same call are made.
    both = [("k3", {"g": 1}, ["a"]), ("k4", {"g": 1}, ["a"])]
    assert run(actor.acquire(both, [("a", {"g": 1}), ("a", {"g": 1})])) == {
        "k3": "a",
        "k4": "a",
    }
    assert run(actor.acquire_all([("k5", {"g": 1}, ["a"])], [("a", {"g": 1})])) == ["a"]
    run(actor.acquire([], [("a", {"g": 1}), ("a", {"g": 1})]))
    _, _, used = run(actor.table())
    assert used == {}  # a release-only call gives everything back


def test_owner_marks_and_leases() -> None:
    actor = ControlActor()
    run(actor.renew("s1", 60))
    run(actor.renew("s2", 60))
    run(actor.set_many({"a": {"x": 1, "y": 2}}, "s1"))
    run(actor.notes([("b", "escher_z", 3.0, 1.0)], "s2"))
    run(actor.end("s1"))
    info = run(actor.ownership())
    assert sorted(info["owners"]) == [("a", "x", "s1"), ("a", "y", "s1"), ("b", "escher_z", "s2")]
    assert info["leases"]["s1"] <= info["now"] < info["leases"]["s2"]
    run(actor.notes([("b", "escher_z", 0.0, 2.0)], "s2"))  # deleted: no longer owned
    run(actor.forget([("a", "x")], ["s1"]))
    info = run(actor.ownership())
    assert sorted(info["owners"]) == [("a", "y", "s1")]
    assert "s1" not in info["leases"] and info["totals"] == {"a": {"y": 2}}


def test_gang_fit_by_totals() -> None:
    nodes = {"a": Resources({"CPU": 2}), "b": Resources({"CPU": 2})}
    cpu = Resources({"CPU": 1})
    assert gang_unfit_reason([cpu] * 4, nodes, "PACK") is None
    assert gang_unfit_reason([cpu] * 5, nodes, "PACK") is not None
    assert gang_unfit_reason([cpu] * 3, nodes, "STRICT_SPREAD") is not None
    assert gang_unfit_reason([cpu] * 2, nodes, "STRICT_SPREAD") is None
    assert gang_unfit_reason([cpu] * 3, nodes, "STRICT_PACK") is not None
    assert gang_unfit_reason([Resources({"CPU": 1.5})] * 2, nodes, "SPREAD") is None
    assert gang_unfit_reason([Resources({"tpu": 1})], nodes, "PACK") is not None
    assert gang_unfit_reason([], nodes, "STRICT_PACK") is None
