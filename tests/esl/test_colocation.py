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


def _colocation_lookups(groups: int) -> int:
    """Matcher look-ups to run `groups` groups of 4 x 1 CPU through CoLocation (virtual time)."""
    backend = MemoryBackend(nodes={f"n{i}": {"CPU": 8} for i in range(4)}, virtual_clock=True)
    finds = 0
    real = backend._matcher.find

    def counting(*args: object, **kwargs: object) -> str | None:
        nonlocal finds
        finds += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    backend._matcher.find = counting  # type: ignore[method-assign]
    with escher.init(backend), CoLocation(backend) as colo:
        refs = []
        for g in range(groups):
            group = colo.group(f"g{g}", 4, {"CPU": 1})
            refs += [group.launch(escher.node_id, duration=1.0) for _ in range(4)]
        backend.run()
        assert all(len({r.node_id for r in refs[i : i + 4]}) == 1 for i in range(0, len(refs), 4))
        assert escher.get_cluster_state().nodes["n0"].ephemeral == frozenset()  # all retired
    return finds


def test_scheduling_work_per_task_does_not_grow_with_the_number_of_groups() -> None:
    small, large = _colocation_lookups(50), _colocation_lookups(400)
    # linear: 8x the groups, about 8x the look-ups (quadratic would be ~64x)
    assert large <= 8 * small * 1.5, (small, large)


def test_finished_group_deletes_its_resource(vbackend: MemoryBackend) -> None:
    with CoLocation() as colo:
        done = colo.group("done", size=2, resources={"CPU": 1})
        partial = colo.group("partial", size=3, resources={"CPU": 1})
        unknown = colo.unknown_group("u", size=2, resources={"CPU": 1})
        refs = [g.launch(escher.node_id, duration=1.0) for g in (done, done, partial, unknown)]
        refs.append(unknown.launch(escher.node_id, duration=1.0))
        escher.get(refs)
        labels = {label for n in vbackend.get_cluster_state().nodes.values() for label in n.total}
        assert done.label not in labels and unknown.label not in labels
        assert partial.label in labels  # a member may still come
        assert done.label not in colo.ledger() and partial.label in colo.ledger()


def test_cancelled_waiting_group_stops_the_retries(vbackend: MemoryBackend) -> None:
    with CoLocation(retry_interval=0.5) as colo:
        group = colo.group("huge", size=2, resources={"CPU": 3})  # 6 CPUs: no node has them
        refs = [group.launch(escher.node_id, duration=1.0) for _ in range(2)]
        vbackend.run(until=2.0)
        assert group.node is None and vbackend.clock.pending()  # retrying
        for ref in refs:
            ref.cancel()
        vbackend.run(until=10.0)
        assert not vbackend.clock.pending()  # nothing left to place: no timer re-armed
        assert group.label not in colo.ledger()
