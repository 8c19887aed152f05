"""Co-location (known and unknown groups) and its composition with load balancing."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

import escher
from escher import StatusCode, ValidationError
from escher.backends.memory import MemoryBackend
from escher.esl import CoLocation, LoadBalance

from .conftest import WAIT, Tracker, wait_until


def test_known_groups_each_land_on_one_node_under_concurrency(backend: MemoryBackend) -> None:
    tracker = Tracker()
    with CoLocation() as colo:
        groups = [colo.group(f"g{i}", size=3, resources={"CPU": 1}) for i in range(5)]

        def launch_group(i: int) -> list[escher.TaskRef]:
            return [groups[i].launch(tracker.body, f"g{i}") for _ in range(3)]

        with ThreadPoolExecutor(5) as pool:
            refs = [r for rs in pool.map(launch_group, range(5)) for r in rs]
        tracker.gate.set()
        escher.get(refs, timeout=WAIT)
        for i, group in enumerate(groups):
            placed = {ref.node_id for ref in refs[3 * i : 3 * i + 3]}
            assert placed == {group.node}, f"group g{i} split over {placed}"


def test_known_group_is_sized_to_the_sum_of_requests(backend: MemoryBackend) -> None:
    with CoLocation() as colo:
        a = colo.group("a", size=3, resources={"CPU": 1})  # 3 CPUs: n0
        b = colo.group("b", size=2, resources={"CPU": 1})  # n0 has 1 CPU left after pledges
        assert (a.node, b.node) == ("n0", "n1")
        state = escher.get_cluster_state()
        assert state.nodes["n0"].total[a.label] == 3


def test_group_waits_when_no_node_fits_then_places(backend: MemoryBackend) -> None:
    tracker = Tracker()
    fillers = [escher.launch(tracker.body, "fill", resources={"CPU": 3}) for _ in range(4)]
    assert wait_until(lambda: tracker.running() == 4)
    with CoLocation(retry_interval=0.05) as colo:
        group = colo.group("late", size=2, resources={"CPU": 2})
        assert group.node is None
        refs = [group.launch(escher.node_id) for _ in range(2)]
        assert refs[0].status.code is StatusCode.UNSCHEDULABLE
        tracker.gate.set()
        escher.get(fillers, timeout=WAIT)
        placed = escher.get(refs, timeout=WAIT)
        assert placed[0] == placed[1] == group.node


def test_unknown_group_follows_its_first_member(backend: MemoryBackend) -> None:
    with CoLocation() as colo:
        groups = [colo.unknown_group(f"u{i}", size=3, resources={"CPU": 1}) for i in range(3)]
        with ThreadPoolExecutor(3) as pool:
            refs = list(pool.map(lambda g: [g.launch(escher.node_id) for _ in range(3)], groups))
        # followers wait until their leader's node has room (it has no reservation)
        for members in refs:
            escher.get(members, timeout=WAIT)
            assert len({r.node_id for r in members}) == 1


def test_group_rejects_extra_members_and_bad_input(backend: MemoryBackend) -> None:
    with CoLocation() as colo:
        group = colo.group("one", size=1)
        escher.get(group.launch(escher.node_id), timeout=WAIT)
        with pytest.raises(ValidationError, match="1 members"):
            group.launch(escher.node_id)
        with pytest.raises(ValidationError):
            colo.group("one", size=1)
        with pytest.raises(ValidationError):
            colo.group("zero", size=0)


def test_pairs_with_load_balancing_spread_over_nodes(backend: MemoryBackend) -> None:
    tracker = Tracker()
    with LoadBalance(tasks=8) as lb, CoLocation() as colo:
        pairs = [colo.group(f"p{i}", 2, {"CPU": 1}, policy=lb) for i in range(4)]
        refs = [pair.launch(tracker.body, pair.name) for pair in pairs for _ in range(2)]
        assert wait_until(lambda: tracker.running() == 8)
        tracker.gate.set()
        escher.get(refs, timeout=WAIT)
        nodes_used = [refs[2 * i].node_id for i in range(4)]
        assert all(refs[2 * i].node_id == refs[2 * i + 1].node_id for i in range(4))
        assert sorted(nodes_used) == ["n0", "n1", "n2", "n3"]
