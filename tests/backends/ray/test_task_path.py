"""The task path's pieces on a real Ray: the completion callback that settles attempts and
the worker's reuse of a node's shrink-marker read (the lease that keeps it safe)."""

from __future__ import annotations

import json
import queue
import uuid
from typing import Any

import pytest

pytest.importorskip("ray")

from escher.backends.ray import _shrink
from escher.backends.ray._completion import on_completed

pytestmark = pytest.mark.ray

WAIT = 60.0


def _value(x: int) -> int:
    return x + 1


def _raises() -> None:
    raise KeyError("boom")


class _FutureOnly:
    """An ObjectRef seen through `future()` alone (a Ray without `_on_completed`)."""

    def __init__(self, ref: Any) -> None:
        self._ref = ref

    def future(self) -> Any:
        return self._ref.future()


@pytest.mark.parametrize("through_future", [False, True])
def test_completion_callback_gets_the_value_or_rays_error(
    ray_cluster: Any, through_future: bool
) -> None:
    import ray
    import ray.exceptions as rex

    got: queue.SimpleQueue[Any] = queue.SimpleQueue()
    ok = ray.remote(_value).options(max_retries=0).remote(1)
    bad = ray.remote(_raises).options(max_retries=0).remote()
    for ref in (ok, bad):
        on_completed(_FutureOnly(ref) if through_future else ref, got.put)
    outcomes = [got.get(timeout=WAIT), got.get(timeout=WAIT)]
    assert 2 in outcomes
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(errors) == 1
    assert isinstance(errors[0], rex.RayTaskError)
    assert isinstance(errors[0].cause, KeyError)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_marker_read_is_reused_for_its_ttl_only(ray_cluster: Any) -> None:
    """Within `MARKER_TTL` of sending it, a read answers for the node; after, the marker is
    read again (a shrink published meanwhile is seen)."""
    prefix, node = f"escher-mc-{uuid.uuid4().hex[:6]}_", "n1"
    kv, key = _shrink._kv(), f"{prefix}{node}".encode()
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
        _shrink._kv().internal_kv_del(key, False, _shrink.NAMESPACE)


def test_a_write_seen_before_the_markers_load_ends_the_shrink_it_replaced(
    ray_cluster: Any,
) -> None:
    """A restarted actor that records a newer write of the label (another capacity) before
    it loads the markers does not bring the replaced shrink back, and drops its marker."""
    prefix, node = f"escher-rw-{uuid.uuid4().hex[:6]}_", _node_id()
    name, key = f"{prefix}slot", f"{prefix}{node}".encode()
    kv = _shrink._kv()
    try:
        _shrink.ShrinkGate(None).set_pending(prefix, node, {name: 0.0}, 10.0)
        restarted = _shrink.ShrinkGate(None)
        restarted.replaced(node, name, 2.0, 11.0)  # grown again after the shrink
        restarted.replaced(node, f"{prefix}x", 0.0, 12.0)  # another label: no effect
        assert restarted.admit(prefix, node, {name: 1.0})
        assert kv.internal_kv_get(key, _shrink.NAMESPACE) is None
    finally:
        kv.internal_kv_del(key, False, _shrink.NAMESPACE)
