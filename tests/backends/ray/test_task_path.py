"""The task path's pieces on a real Ray: the waiter that settles attempts in batches and
the worker's reuse of a node's shrink-marker read (the lease that keeps it safe)."""

from __future__ import annotations

import json
import queue
import threading
import uuid
from typing import Any

import pytest

pytest.importorskip("ray")

from escher.backends.ray import _shrink, _waiter
from escher.backends.ray._starts import MAX_SYNC_PERIOD, SYNC_PERIOD, look_period
from escher.backends.ray._state import NodeCache, kv_client
from escher.backends.ray._waiter import Waiter, window
from escher.core.task import TaskRef

pytestmark = pytest.mark.ray

WAIT = 60.0


def _value(x: int) -> int:
    return x + 1


def _raises() -> None:
    raise KeyError("boom")


def test_the_waiter_reports_each_value_or_rays_error_once(ray_cluster: Any) -> None:

    import ray
    import ray.exceptions as rex

    got: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
    waiter = Waiter(lambda key, outcome: got.put((key, outcome)), WAIT)
    ok, bad = ray.remote(_value).options(max_retries=0), ray.remote(_raises).options(max_retries=0)
    try:
        for i in range(50):
            waiter.add(ok.remote(i), f"ok{i}")
        waiter.add(bad.remote(), "bad")
        late = threading.Thread(target=lambda: waiter.add(ok.remote(100), "late"))
        late.start()  # added while the waiter waits
        late.join()
        outcomes = dict(got.get(timeout=WAIT) for _ in range(52))
    finally:
        waiter.close()
    assert got.empty()  # each once
    assert {outcomes[f"ok{i}"] for i in range(50)} == set(range(1, 51))
    assert outcomes["late"] == 101
    assert isinstance(outcomes["bad"], rex.RayTaskError)
    assert isinstance(outcomes["bad"].cause, KeyError)


def _never() -> None:
    raise AssertionError("it requests a resource no node has: it never runs")


def test_the_waiter_sees_ends_past_its_window(ray_cluster: Any, monkeypatch: Any) -> None:
    """With more attempts outstanding than one wait looks at, and the oldest never ending,
    the later ones are still reported (each wait looks at a slice that moves on)."""
    import ray

    monkeypatch.setattr(_waiter, "WINDOW", 8)
    got: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
    waiter = Waiter(lambda key, outcome: got.put((key, outcome)), WAIT)
    never = ray.remote(_never).options(
        num_cpus=0, max_retries=0, resources={"escher-test-nowhere": 1}
    )
    ok = ray.remote(_value).options(max_retries=0)
    stuck = [never.remote() for _ in range(10)]
    try:
        for ref in stuck:
            waiter.add(ref, "stuck")
        for i in range(30):
            waiter.add(ok.remote(i), f"ok{i}")
        outcomes = dict(got.get(timeout=WAIT) for _ in range(30))
    finally:
        waiter.close()
        for ref in stuck:
            ray.cancel(ref, force=True)
    assert outcomes == {f"ok{i}": i + 1 for i in range(30)}


@pytest.mark.parametrize("outstanding", [257, 300, 1000, 5000])
def test_a_wait_window_holds_the_oldest_and_reaches_every_attempt(outstanding: int) -> None:
    refs = list(range(outstanding))
    half = _waiter.WINDOW // 2
    seen: set[int] = set()
    turn = 0
    for _ in range(-(-(outstanding - half) // half)):  # ceil((n - half) / half) waits
        looked, turn = window(refs, turn)
        assert looked[:half] == refs[:half]
        assert len(looked) <= _waiter.WINDOW
        seen.update(looked)
    assert seen == set(refs)


def test_start_reports_are_asked_for_less_often_with_many_outstanding() -> None:
    periods = [look_period(n) for n in (0, 1, 100, 1000, 10_000)]
    assert periods[0] == SYNC_PERIOD
    assert periods == sorted(periods)
    assert periods[-1] == MAX_SYNC_PERIOD


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_marker_read_is_reused_for_its_ttl_only(ray_cluster: Any) -> None:
    """Within `MARKER_TTL` of sending it, a read answers for the node; after, the marker is
    read again (a shrink published meanwhile is seen)."""
    prefix, node = f"escher-mc-{uuid.uuid4().hex[:6]}_", "n1"
    kv, key = kv_client(), f"{prefix}{node}".encode()
    clock = _Clock()
    cache = _shrink.MarkerCache(clock)
    try:
        assert cache.names(prefix, node, WAIT) == frozenset()
        kv.internal_kv_put(key, json.dumps([f"{prefix}a"]).encode(), True, _shrink.NAMESPACE)
        clock.now += _shrink.MARKER_TTL / 2
        assert cache.names(prefix, node, WAIT) == frozenset()  # the earlier read, reused
        clock.now += _shrink.MARKER_TTL
        assert cache.names(prefix, node, WAIT) == {f"{prefix}a"}  # expired: read again
        kv.internal_kv_del(key, False, _shrink.NAMESPACE)
        assert cache.names(prefix, node, WAIT) == {f"{prefix}a"}
        cache.drop(prefix, node)  # the control actor said the marker was stale
        assert cache.names(prefix, node, WAIT) == frozenset()
    finally:
        kv.internal_kv_del(key, False, _shrink.NAMESPACE)


def test_a_writer_outlasts_every_read_sent_before_its_marker() -> None:
    """A writer waits `SHRINK_LEASE` after publishing a pending shrink: longer than twice a
    read's reuse, so a read sent before the marker expired before the write returned."""
    assert _shrink.SHRINK_LEASE > 2 * _shrink.MARKER_TTL


def _node_id() -> str:
    return uuid.uuid4().hex + uuid.uuid4().hex[:24]  # 56 hex digits, as Ray's


def test_a_restarted_control_actor_still_holds_back_for_a_published_shrink(
    ray_cluster: Any,
) -> None:
    """The marker keeps the asked capacities: a fresh gate (the control actor after a
    restart) starts from it, so a task that holds the label is still held back."""
    prefix, node = f"escher-rs-{uuid.uuid4().hex[:6]}_", _node_id()
    name, key = f"{prefix}slot", f"{prefix}{node}".encode()
    try:
        _shrink.ShrinkGate(None).set_pending(prefix, node, {name: 0.0}, 10.0)
        restarted = _shrink.ShrinkGate(None)  # no resize call: a pending shrink never ends
        assert not restarted.admit(prefix, node, {name: 1.0})
        assert restarted.admit(prefix, node, {f"{prefix}other": 1.0})
        assert _shrink.MarkerCache().names(prefix, node, WAIT) == {name}
    finally:
        kv_client().internal_kv_del(key, False, _shrink.NAMESPACE)


def test_a_write_seen_before_the_markers_load_ends_the_shrink_it_replaced(
    ray_cluster: Any,
) -> None:
    """A restarted actor that records a newer write of the label (another capacity) before
    it loads the markers does not bring the replaced shrink back, and drops its marker."""
    prefix, node = f"escher-rw-{uuid.uuid4().hex[:6]}_", _node_id()
    name, key = f"{prefix}slot", f"{prefix}{node}".encode()
    kv = kv_client()
    try:
        _shrink.ShrinkGate(None).set_pending(prefix, node, {name: 0.0}, 10.0)
        restarted = _shrink.ShrinkGate(None)
        restarted.replaced(node, name, 2.0, 11.0)  # grown again after the shrink
        restarted.replaced(node, f"{prefix}x", 0.0, 12.0)  # another label: no effect
        assert restarted.admit(prefix, node, {name: 1.0})
        assert kv.internal_kv_get(key, _shrink.NAMESPACE) is None
    finally:
        kv.internal_kv_del(key, False, _shrink.NAMESPACE)


def test_a_stale_node_view_is_refreshed_behind_the_caller(ray_cluster: Any) -> None:
    import time

    cache = NodeCache("escher-test-")
    first = cache.physical()  # the first read is synchronous
    assert first and cache.generation == 1
    cache._at -= 10.0  # stale now
    called = threading.get_ident()
    refreshed_by: list[int] = []
    real = cache.refresh

    def refresh(raw: Any = None) -> None:
        refreshed_by.append(threading.get_ident())
        real(raw)

    cache.refresh = refresh  # type: ignore[method-assign]
    assert cache.physical() is first  # the caller keeps the current view
    assert cache.physical() is first  # one background refresh at a time
    deadline = time.monotonic() + WAIT
    while cache.generation < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cache.generation == 2 and refreshed_by and called not in refreshed_by
    assert cache.physical() == first  # same nodes, read again
    assert cache.physical(fresh=True) == first and refreshed_by[-1] == called


# --- the launch path: one object per task, plans and Ray options made once -----------------
def _one() -> int:
    return 1


class _Unhashable:
    """A callable with value equality and no hash (dicts and weak dicts refuse it)."""

    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Unhashable)

    def __call__(self) -> int:
        return 7


@pytest.mark.parametrize("mode", ["resize", "ledger"])
def test_a_launched_handle_is_the_tables_entry_until_it_settles(
    ray_cluster: Any, mode: str
) -> None:
    import escher
    from escher.backends.ray._entry import Entry
    from tests.support.ray_cluster import make_backend

    backend = make_backend(ray_cluster, mode=mode)
    try:
        with escher.init(backend):
            refs = [escher.launch(_one, resources={"CPU": 0.5}) for _ in range(20)]
            for ref in refs:
                assert isinstance(ref, Entry) and ref.ref is ref
                assert backend._table.entry_of(ref) in (ref, None)  # None: settled already
            assert escher.get(refs, timeout=WAIT) == [1] * 20
            assert all(backend._table.entry_of(ref) is None for ref in refs)
            assert backend._table.entry_of(TaskRef(refs[0].spec)) is None
            assert not backend._table.live()
    finally:
        backend.close()


def test_a_request_seen_before_reuses_its_plan_until_the_node_view_changes(
    ray_cluster: Any,
) -> None:
    import escher
    from escher.core.errors import UnschedulableError
    from tests.support.ray_cluster import make_backend

    backend = make_backend(ray_cluster)
    try:
        with escher.init(backend):
            request = {"CPU": 0.5}
            first = escher.launch(_one, resources=request)
            plan = next(iter(backend._plans.values()))
            second = escher.launch(_one, resources=dict(request))  # an equal, new dict
            assert backend._plans[id(second.spec.resources)] is plan
            assert second.request is first.request and second.options is first.options
            assert str(second.status).startswith("pending") and escher.get(second) == 1
            backend._cache.refresh()  # a new node view: the next launch splits again
            third = escher.launch(_one, resources=request)
            assert backend._plans[id(third.spec.resources)] is not plan
            assert escher.get([first, third], timeout=WAIT) == [1, 1]
            for _ in range(2):  # an infeasible request is never kept: refused each time
                ref = escher.launch(_one, resources={"CPU": 0.5, "GPU": 64})
                with pytest.raises(UnschedulableError):
                    escher.get(ref, timeout=WAIT)
                assert ref.status.code.value == "infeasible"
    finally:
        backend.close()


def test_functions_without_a_hash_and_changing_names_launch_alike(ray_cluster: Any) -> None:
    import escher
    from tests.support.ray_cluster import make_backend

    backend = make_backend(ray_cluster)
    try:
        with escher.init(backend):
            fn = _Unhashable()
            refs = [escher.launch(fn, resources={"CPU": 0.5}) for _ in range(3)]
            named = [
                escher.launch(_value, i, resources={"CPU": 0.5}, name=f"n{i % 2}") for i in range(4)
            ]
            assert escher.get(refs, timeout=WAIT) == [7, 7, 7]
            assert escher.get(named, timeout=WAIT) == [1, 2, 3, 4]
            assert [ref.name for ref in named] == ["n0", "n1", "n0", "n1"]
    finally:
        backend.close()
