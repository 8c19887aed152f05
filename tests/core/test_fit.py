"""gang_fit: could a gang ever be held at once? Exact answers checked against brute force."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from escher.core.fit import gang_fit, node_defined
from escher.core.resources import Resources


def brute(requests: list[Resources], nodes: dict[str, dict[str, float]]) -> bool:
    ids = sorted(nodes)
    for assignment in itertools.product(ids, repeat=len(requests)):
        used: dict[str, dict[str, float]] = {n: {} for n in ids}
        for request, node in zip(requests, assignment, strict=True):
            for name, q in request.items():
                used[node][name] = used[node].get(name, 0.0) + q
        if all(
            used[n].get(name, 0.0) <= nodes[n].get(name, 0.0) + 1e-9
            for n in ids
            for name in used[n]
        ):
            return True
    return False


def test_reasons_name_the_member_or_the_total() -> None:
    nodes = {"a": {"CPU": 2}, "b": {"CPU": 2}}
    too_big = gang_fit([Resources({"CPU": 3})], nodes)
    assert too_big.possible is False and "member 0 needs {CPU: 3}" in too_big.reason
    too_many = gang_fit([Resources({"CPU": 2})] * 3, nodes)
    assert too_many.possible is False and "6 CPU in all; the live nodes have 4" in too_many.reason
    packing = gang_fit([Resources({"CPU": 1.5})] * 2 + [Resources({"CPU": 1})], nodes)
    assert packing.possible is False and "no way to place all 3 members" in packing.reason
    assert gang_fit([Resources({"CPU": 1})] * 4, nodes).possible is True
    assert gang_fit([Resources({"GPU": 1})], nodes).possible is False
    assert gang_fit([Resources()], {"a": {}}).possible is True  # nothing node-defined asked
    assert gang_fit([Resources()], {}).possible is False  # but no node to run on


def test_only_node_defined_resources_count() -> None:
    request = Resources({"CPU": 1, "grp": 5, "GPU": 1})
    assert node_defined(request, {"CPU"}) == Resources({"CPU": 1, "GPU": 1})


def test_budget_exhaustion_answers_unknown() -> None:
    nodes = {f"n{i}": {"CPU": 10 + i, "mem": 20 - i} for i in range(12)}
    members = [Resources({"CPU": 1 + (i % 7) * 0.9, "mem": 1 + (i % 5) * 1.1}) for i in range(30)]
    assert gang_fit(members, nodes, budget=5).possible in (None, True)


@settings(max_examples=300, deadline=None)
@given(
    members=st.lists(
        st.fixed_dictionaries({"CPU": st.integers(0, 4), "GPU": st.integers(0, 1)}),
        min_size=1,
        max_size=5,
    ),
    nodes=st.lists(
        st.fixed_dictionaries({"CPU": st.integers(0, 6), "GPU": st.integers(0, 2)}),
        min_size=1,
        max_size=4,
    ),
)
def test_agrees_with_brute_force(
    members: list[dict[str, int]], nodes: list[dict[str, int]]
) -> None:
    requests = [Resources(m) for m in members]
    capacities = {f"n{i}": {k: float(v) for k, v in n.items()} for i, n in enumerate(nodes)}
    fit = gang_fit(requests, capacities)
    assert fit.possible is brute(requests, capacities)
    assert fit.possible or fit.reason
