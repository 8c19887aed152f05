"""Topology domains: co-location, anti-affinity and max-skew spreading across zones.

Property tests generate topologies (nodes with or without a zone, of different sizes) and
workloads in virtual time, and check the placements the backend really made; concurrent
tests launch from several threads on the real-time backend.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import escher
from escher import ValidationError
from escher.backends.memory import MemoryBackend
from escher.esl import DomainAntiAffinity, DomainColocation, DomainSpread, Topology

from .conftest import WAIT, wait_until

SETTINGS = settings(max_examples=30, deadline=None)


def stamp() -> tuple[str, float]:
    return escher.node_id(), escher.current_backend().clock.now()


def zoned(
    zones: list[str | None], cpus: list[int] | None = None, **options: object
) -> MemoryBackend:
    """Node i in zone zones[i] (None: no zone label), with cpus[i] CPUs (default 2)."""
    nodes = {}
    for i, zone in enumerate(zones):
        labels = {"zone": zone} if zone is not None else {}
        nodes[f"n{i}"] = {"resources": {"CPU": (cpus or [2] * len(zones))[i]}, "labels": labels}
    return MemoryBackend(nodes=nodes, **options)  # type: ignore[arg-type]


def zone_of(backend: MemoryBackend) -> dict[str, str | None]:
    return {n: node.labels.get("zone") for n, node in backend.get_cluster_state().nodes.items()}


topologies = st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=7).filter(
    lambda zs: any(z is not None for z in zs)
)


# --- the topology -----------------------------------------------------------------------------
def test_topology_from_labels_and_from_a_grouping() -> None:
    backend = zoned(["a", "b", None, "a"])
    state = backend.get_cluster_state()
    assert Topology("zone").domains(state) == {"a": ["n0", "n3"], "b": ["n1"]}
    racks = Topology("rack", {"n0": "r1", "n2": "r1", "n1": "r2"})
    assert racks.domains(state) == {"r1": ["n0", "n2"], "r2": ["n1"]}
    assert racks.plan_topologies() == {"rack": {"n0": "r1", "n2": "r1", "n1": "r2"}}
    with pytest.raises(ValidationError, match="domain names"):
        Topology("rack", {"n0": ""})
    with pytest.raises(ValidationError, match="no alive node has a 'rack' domain"):
        DomainSpread("rack", backend)
    backend.close()


def test_domain_labels_are_written_lazily_and_cleaned_up() -> None:
    backend = zoned(["a", "b", "a"], virtual_clock=True)
    with DomainAntiAffinity("zone", backend) as aa:
        assert aa.ledger() == {}  # setup writes nothing
        ref = aa.launch(stamp, duration=1.0)
        assert escher.get(ref, timeout=10)[0] in {"n0", "n2", "n1"}
        assert len(aa.ledger()) == 1
    assert not any(n.ephemeral for n in backend.get_cluster_state().nodes.values())
    backend.close()


# --- anti-affinity -------------------------------------------------------------------------------
def peak_per_domain(spans: list[tuple[str | None, float, float]]) -> dict[str | None, int]:
    events: dict[str | None, list[tuple[float, int]]] = defaultdict(list)
    for domain, start, end in spans:
        events[domain] += [(start, 1), (end, -1)]
    peaks = {}
    for domain, evs in events.items():
        now = peak = 0
        for _, delta in sorted(evs):  # an end sorts before a start at the same instant
            now += delta
            peak = max(peak, now)
        peaks[domain] = peak
    return peaks


@SETTINGS
@given(
    zones=topologies,
    per_domain=st.integers(1, 3),
    durations=st.lists(st.integers(1, 5), min_size=1, max_size=20),
    gaps=st.lists(st.integers(0, 3), min_size=20, max_size=20),
)
def test_zone_anti_affinity_is_never_exceeded(
    zones: list[str | None], per_domain: int, durations: list[int], gaps: list[int]
) -> None:
    backend = zoned(zones, virtual_clock=True)
    where = zone_of(backend)
    spans = []
    with DomainAntiAffinity("zone", backend, per_domain=per_domain) as aa:
        refs = []
        for d, gap in zip(durations, gaps, strict=False):
            refs.append(aa.launch(stamp, duration=float(d)))
            backend.run(until=backend.clock.now() + gap)
        for ref, d in zip(refs, durations, strict=True):
            node, start = escher.get(ref, timeout=10_000)
            spans.append((where[node], start, start + d))
        assert all(c == 0 for c in aa.counts.values())
    assert None not in {domain for domain, _, _ in spans}  # never outside a domain
    assert max(peak_per_domain(spans).values()) <= per_domain
    backend.close()


def test_a_waiting_task_takes_the_first_domain_that_frees() -> None:
    backend = zoned(["a", "b"], virtual_clock=True)
    with DomainAntiAffinity("zone", backend) as aa:
        refs = [aa.launch(stamp, duration=float(d)) for d in (5, 2, 1)]
        assert [r.started() for r in refs] == [True, True, False]
        node, start = escher.get(refs[2], timeout=100)
        assert (node, start) == ("n1", 2.0)  # zone b freed first
    backend.close()


def test_a_cancelled_waiting_task_gives_back_nothing_it_did_not_hold() -> None:
    backend = zoned(["a"], virtual_clock=True)
    with DomainAntiAffinity("zone", backend) as aa:
        first, second = (aa.launch(stamp, duration=3.0) for _ in range(2))
        assert second.cancel()
        assert aa.counts == {"a": 1}
        third = aa.launch(stamp, duration=1.0)
        escher.get([first, third], timeout=100)
        assert third.result()[1] == 3.0
        assert aa.counts == {"a": 0}
    backend.close()


def test_zone_anti_affinity_under_concurrent_launches() -> None:
    backend = zoned(["a", "a", "b", "b", "c"], cpus=[4] * 5)
    escher.init(backend)
    gate = threading.Event()
    lock = threading.Lock()
    running: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    where = zone_of(backend)

    def body() -> str:
        zone = where[escher.node_id()]
        assert zone is not None
        with lock:
            running[zone] += 1
            peak[zone] = max(peak[zone], running[zone])
        gate.wait(WAIT)
        with lock:
            running[zone] -= 1
        return zone

    try:
        with DomainAntiAffinity("zone", per_domain=2) as aa:
            refs: list[escher.TaskRef] = []
            refs_lock = threading.Lock()

            def launch_some() -> None:
                for _ in range(4):
                    ref = aa.launch(body)
                    with refs_lock:
                        refs.append(ref)

            threads = [threading.Thread(target=launch_some) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(WAIT)
            assert wait_until(lambda: sum(running.values()) == 6)  # 2 per zone, 3 zones
            gate.set()
            zones = escher.get(refs, timeout=WAIT)
        assert len(zones) == 16 and max(peak.values()) <= 2
    finally:
        escher.shutdown()


# --- spreading -----------------------------------------------------------------------------------
@SETTINGS
@example(zones=["a", "b"], cpus=[1, 4, 1, 1, 1, 1, 1], max_skew=1, waves=[(6, 6, 0)])
@given(
    zones=topologies,
    cpus=st.lists(st.integers(1, 4), min_size=7, max_size=7),
    max_skew=st.integers(1, 3),
    waves=st.lists(
        st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(0, 4)), min_size=1, max_size=4
    ),
)
def test_max_skew_spread_holds_at_every_launch(
    zones: list[str | None],
    cpus: list[int],
    max_skew: int,
    waves: list[tuple[int, int, int]],
) -> None:
    """Each task goes to a domain d with live(d) + 1 - min(live) <= max_skew, where live
    counts the policy's tasks launched before it and not finished (checked from the
    placements the backend made, not from the ESL's books)."""
    backend = zoned(zones, cpus[: len(zones)], virtual_clock=True)
    where = zone_of(backend)
    domains = sorted({z for z in zones if z is not None})
    launches: list[tuple[float, escher.TaskRef, float]] = []
    with DomainSpread("zone", backend, max_skew=max_skew) as spread:
        for count, duration, gap in waves:
            for _ in range(count):
                ref = spread.launch(stamp, resources={"CPU": 1}, duration=duration)
                launches.append((backend.clock.now(), ref, duration))
            backend.run(until=backend.clock.now() + gap)
        placed = [
            (t, where[escher.get(r, timeout=10_000)[0]], r.result()[1] + d) for t, r, d in launches
        ]
    assert None not in {zone for _, zone, _ in placed}
    for i, (t, zone, _) in enumerate(placed):
        live = Counter(z for s, z, end in placed[:i] if end > t)
        low = min(live.get(d, 0) for d in domains)
        assert live.get(zone, 0) + 1 - low <= max_skew, (i, zone, dict(live))
    backend.close()


def test_spread_waits_in_a_full_zone_rather_than_crowd_a_roomy_one() -> None:
    backend = zoned(["a", "b"], cpus=[1, 8], virtual_clock=True)
    with DomainSpread("zone", backend, max_skew=1) as spread:
        refs = [spread.launch(stamp, resources={"CPU": 1}, duration=10.0) for _ in range(6)]
        assert spread.counts == {"a": 3, "b": 3}
        assert sum(r.started() for r in refs) == 4  # a runs one at a time, b all three
        nodes = Counter(escher.get(r, timeout=100)[0] for r in refs)
    assert nodes == {"n0": 3, "n1": 3}
    backend.close()


def test_spread_under_concurrent_launches_keeps_the_skew() -> None:
    backend = zoned(["a", "b", "b", "c", "c", "c"], cpus=[8] * 6)
    escher.init(backend)
    gate = threading.Event()
    where = zone_of(backend)
    try:
        with DomainSpread("zone", max_skew=1) as spread:
            refs: list[escher.TaskRef] = []
            refs_lock = threading.Lock()

            def launch_some() -> None:
                for _ in range(5):
                    ref = spread.launch(gate.wait, WAIT)
                    with refs_lock:
                        refs.append(ref)

            threads = [threading.Thread(target=launch_some) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(WAIT)
            assert wait_until(lambda: all(r.started() for r in refs))
            per_zone = Counter(where[r.node_id] for r in refs if r.node_id)
            gate.set()
            escher.get(refs, timeout=WAIT)
        assert sum(per_zone.values()) == 20
        assert max(per_zone.values()) - min(per_zone.values()) <= 1, per_zone
    finally:
        escher.shutdown()


def test_min_domains_holds_tasks_back_when_too_few_domains_exist() -> None:
    backend = zoned(["a", "b"], virtual_clock=True)
    with DomainSpread("zone", backend, max_skew=1, min_domains=3) as spread:
        refs = [spread.launch(stamp, duration=2.0) for _ in range(3)]
        assert [r.started() for r in refs] == [True, True, False]
        assert escher.get(refs[2], timeout=100)[1] == 2.0
    backend.close()


# --- co-location -------------------------------------------------------------------------------
@SETTINGS
@given(
    zones=topologies,
    cpus=st.lists(st.integers(1, 4), min_size=7, max_size=7),
    groups=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 3)), min_size=1, max_size=6),
)
def test_zone_colocation_puts_each_group_in_one_zone(
    zones: list[str | None], cpus: list[int], groups: list[tuple[int, int]]
) -> None:
    backend = zoned(zones, cpus[: len(zones)], virtual_clock=True)
    where = zone_of(backend)
    with DomainColocation("zone", backend) as colo:
        launched = []
        for i, (size, duration) in enumerate(groups):
            group = colo.group(f"g{i}", size, {"CPU": 1})
            launched.append([group.launch(stamp, duration=float(duration)) for _ in range(size)])
        for refs in launched:
            placed = {where[escher.get(r, timeout=10_000)[0]] for r in refs}
            assert len(placed) == 1 and None not in placed
    assert not any(n.ephemeral for n in backend.get_cluster_state().nodes.values())
    backend.close()


def test_zone_colocation_under_concurrent_launches() -> None:
    backend = zoned(["a", "a", "b", "b", "c"], cpus=[4] * 5)
    escher.init(backend)
    where = zone_of(backend)
    try:
        with DomainColocation("zone") as colo:
            groups = [colo.group(f"g{i}", 6, {"CPU": 1}) for i in range(3)]
            refs: dict[str, list[escher.TaskRef]] = {g.name: [] for g in groups}
            lock = threading.Lock()

            def launch_member(group: object) -> None:
                ref = group.launch(escher.node_id)  # type: ignore[attr-defined]
                with lock:
                    refs[group.name].append(ref)  # type: ignore[attr-defined]

            threads = [threading.Thread(target=launch_member, args=(g,)) for g in groups * 6]
            for t in threads:
                t.start()
            for t in threads:
                t.join(WAIT)
            for group in groups:
                nodes = escher.get(refs[group.name], timeout=WAIT)
                assert {where[n] for n in nodes} == {group.domain}
    finally:
        escher.shutdown()


def test_an_escher_defined_grouping_works_like_labels() -> None:
    backend = zoned([None] * 4, virtual_clock=True)
    racks = Topology("rack", {"n0": "r1", "n1": "r1", "n2": "r2", "n3": "r2"})
    with DomainColocation(racks, backend) as colo:
        group = colo.group("g", 4, {"CPU": 1})
        nodes = {escher.get(group.launch(stamp, duration=1.0), timeout=10)[0] for _ in range(4)}
        assert nodes <= {"n0", "n1"} or nodes <= {"n2", "n3"}
    backend.close()


def test_recover_puts_a_zone_label_on_nodes_that_join_the_zone() -> None:
    backend = zoned(["a", "b"], virtual_clock=True)
    with DomainColocation("zone", backend) as colo:
        group = colo.group("g", 2, {"CPU": 1})
        first = group.launch(stamp, duration=5.0)
        zone = group.domain
        backend.add_node("n9", {"CPU": 2}, labels={"zone": zone or ""})
        colo.recover()
        assert group.label in backend.get_cluster_state().nodes["n9"].total
        escher.get(first, timeout=100)
    backend.close()


def test_why_says_a_task_waits_for_a_free_zone() -> None:
    backend = zoned(["a", "b"], virtual_clock=True)
    with DomainAntiAffinity("zone", backend) as aa:
        refs = [aa.launch(stamp, duration=5.0) for _ in range(3)]
        waiting = aa.contribution(refs[2])
        placed = aa.contribution(refs[0])
        assert waiting is not None and "no 'zone' domain allows" in waiting.waiting
        assert placed is not None and not placed.waiting
        assert "every node of zone=" in next(iter(placed.labels.values())).meaning
        escher.get(refs, timeout=100)
    backend.close()


# --- the verifier ------------------------------------------------------------------------------
def verified(plan: object, backend: MemoryBackend) -> object:
    from escher.verify import verify

    return verify(plan, backend.get_cluster_state(), timeout=60)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "declare",
    [
        lambda b: DomainAntiAffinity("zone", b).declare(None, "w", count=3, resources={"CPU": 1}),
        lambda b: DomainAntiAffinity("zone", b, per_domain=2).declare(
            None, "w", count=5, resources={"CPU": 1}
        ),
        lambda b: DomainSpread("zone", b, max_skew=1).declare(
            None, "w", count=7, resources={"CPU": 1}
        ),
        lambda b: (
            DomainColocation("zone", b)
            .group("g", 4)
            .declare(None, "g", count=4, resources={"CPU": 1})
        ),
        lambda b: DomainSpread(Topology("rack", {"n0": "r1", "n2": "r1", "n4": "r2"}), b).declare(
            None, "r", count=4, resources={"CPU": 1}
        ),
    ],
    ids=["anti-affinity", "per-domain", "spread", "colocation", "escher-grouping"],
)
def test_declared_domain_intents_are_proven(declare: object) -> None:
    from escher.verify import IntentStatus, Verdict

    backend = zoned(["a", "a", "b", "b", "c"])
    result = verified(declare(backend), backend)  # type: ignore[operator]
    assert result.status is Verdict.FEASIBLE, result  # type: ignore[attr-defined]
    for intent in result.intents:  # type: ignore[attr-defined]
        assert intent.status is IntentStatus.PROVEN, (intent.intent.describe(), intent.detail)
        assert intent.intent.topology_key in ("zone", "rack")
    backend.close()


def test_more_than_one_per_zone_at_once_is_infeasible() -> None:
    from escher.verify import Verdict

    backend = zoned(["a", "a", "b"])
    plan = DomainAntiAffinity("zone", backend).declare(None, "w", count=3, resources={"CPU": 1})
    assert [t.name for t in plan.tasks] == ["w@a", "w@b", "w@waiting"]
    result = verified(plan, backend)
    assert result.status is Verdict.INFEASIBLE  # type: ignore[attr-defined]
    assert "w@waiting" in str(result.explanation.render())  # type: ignore[attr-defined]
    backend.close()


def test_declared_preferences_are_reported_not_required() -> None:
    from escher.esl import Preferences, PreferNodes, PreferSpread
    from escher.verify import Verdict

    backend = zoned(["a", "a", "b", "b", "c"])
    prefs = Preferences(PreferNodes({"zone": "a"}, weight=3), PreferSpread("zone"), backend=backend)
    result = verified(prefs.declare(None, "p", count=4, resources={"CPU": 1}), backend)
    assert result.status is Verdict.FEASIBLE  # type: ignore[attr-defined]
    assert len(result.preferences) == 2  # type: ignore[attr-defined]
    backend.close()


def test_a_zone_that_lost_every_node_gets_its_label_back_on_a_new_one() -> None:
    backend = zoned(["a", "b"], virtual_clock=True)
    with DomainColocation("zone", backend) as colo:
        group = colo.group("g", 2, {"CPU": 1})
        first = group.launch(stamp, duration=5.0)
        assert escher.get(first, timeout=100)[0] == "n0" and group.domain == "a"
        backend.remove_node("n0")
        backend.add_node("n5", {"CPU": 2}, labels={"zone": "a"})
        assert colo.recover().complete
        assert escher.get(group.launch(stamp, duration=1.0), timeout=100)[0] == "n5"
    backend.close()
