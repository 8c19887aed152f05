"""Resize mode: shrinking a label below what is in use, without a late task getting a unit.

Ray lowers a resource's total by at most what is free on the node, so a shrink below what
is in use leaves Ray's total at the use. When a holder ends, its unit is free in Ray and is
handed at once to a task queued at that raylet, or the owner reuses the holder's worker
lease for its next task of the same shape; both happen before any later resize can lower
the total. So Ray's total alone cannot enforce the asked capacity.

escher enforces it just before a task's body runs:

* A writer whose shrink Ray clamped records a *pending shrink* (node, label, asked
  capacity) at the control actor before its write returns; the actor keeps a marker per
  node in Ray's control store (namespace `NAMESPACE`), with each label's asked capacity, so
  that the actor starts from the markers again if Ray restarts it. The writer ends it once
  Ray's total reached the asked capacity (its reconciler keeps trying) and before any later
  write of that label on that node.
* A task that holds labels reads its node's marker (one read of the control store; a
  worker process reuses a read for `MARKER_TTL` seconds). If one
  of its labels has a pending shrink there, it asks the control actor, which tries the
  shrink again: the resize call is atomic at the node and lowers the total as far as what
  is in use allows, this task's own unit included. If the total reaches the asked capacity,
  every holder fits, the shrink is over and the task runs. Otherwise the task returns
  `WAIT_FOR_SHRINK` without running its body, its unit goes back to Ray, and its driver
  submits it again a moment later (the same attempt: it never started).

Why a reused read is safe rests on two timing constants: the argument is written once,
beside them (`MARKER_TTL`, `SHRINK_LEASE` below).

Members of a placed gang pass: their units were reserved with the gang before the shrink
(running tasks keep what they hold), and they hold them in the gang's placement group.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from escher.backends.ray._state import ResizeCall, is_node_id, kv_client
from escher.core.resources import EPSILON

#: What a task returns when it was held back for a pending shrink (body not run).
WAIT_FOR_SHRINK = "__escher_wait_for_shrink__"

#: The control-store namespace of the per-node markers of pending shrinks.
NAMESPACE = b"escher-shrink"

# Why a worker may reuse a read of a node's marker (the correctness argument of
# shrink-below-use; `MarkerCache` and `escher.backends.ray._resize.outlast_marker_reads` rely
# on it, nothing else does):
#
# * A worker stamps a read with its monotonic clock *before* it sends the read (time S), and
#   decides on that read only while now - S < MARKER_TTL.
# * A writer whose shrink Ray clamped publishes the marker (time P: the control actor wrote it
#   to the control store before answering), then sleeps SHRINK_LEASE, and only then does its
#   write return (time R >= P + SHRINK_LEASE).
# * A task that starts after the write returned decides at D >= R. If it reuses a read, then
#   S > D - MARKER_TTL >= P + SHRINK_LEASE - MARKER_TTL > P: the read was sent after the
#   marker was published, so it sees the marker. That needs only SHRINK_LEASE > MARKER_TTL;
#   the rest (SHRINK_LEASE - MARKER_TTL = 0.15 s) is the margin for a worker thread paused
#   between reading its clock and deciding, and for clock rates that differ between hosts.
# * A task that starts while the write is still in flight may run on the old capacity, as
#   with any write that has not returned. A marker seen in a read that is no longer current
#   costs one question to the control actor, which answers from what it knows (nothing
#   pending: the task runs).
#
# Changing either constant: keep SHRINK_LEASE > MARKER_TTL plus a margin; a larger
# MARKER_TTL saves control-store reads, a larger SHRINK_LEASE slows every shrinking write.

#: Seconds a worker process reuses its read of a node's marker (from before it sent it).
MARKER_TTL = 0.1
#: Seconds a writer waits after announcing a new pending shrink (> `MARKER_TTL`, see above).
SHRINK_LEASE = 0.25

#: Ray's names of a placement group's bundle resources: "<name>_group_[<index>_]<pg id>".
_BUNDLE_NAME = re.compile(r"_group_(\d+_)?[0-9a-f]{36}$")


def marker_key(prefix: str, node: str) -> bytes:
    """The control-store key of `node`'s marker."""
    return f"{prefix}{node}".encode()


_marker = marker_key


# --- worker side ------------------------------------------------------------------------
def held_labels(prefix: str) -> dict[str, float]:
    """The escher labels (Ray names) the running task holds outside a placement group."""
    import ray

    context = ray.get_runtime_context()
    if context.get_placement_group_id() is not None:
        return {}  # a placed gang's member: its units were reserved with the gang
    assigned = context.get_assigned_resources()  # type: ignore[no-untyped-call]
    return {
        name: float(q)
        for name, q in assigned.items()
        if name.startswith(prefix) and not _BUNDLE_NAME.search(name)
    }


class MarkerCache:
    """A worker process's recent reads of node markers (each reused for `MARKER_TTL` s).

    Args:
        clock: Seconds on a monotonic clock (the process's own by default).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._read: dict[bytes, tuple[float, frozenset[str]]] = {}  # key -> (sent at, names)

    def names(self, prefix: str, node: str, timeout: float) -> frozenset[str]:
        """The Ray names with a pending shrink on `node`, read at most `MARKER_TTL` ago."""
        key = _marker(prefix, node)
        now = self._clock()
        with self._lock:
            known = self._read.get(key)
        if known is not None and now - known[0] < MARKER_TTL:
            return known[1]
        raw = kv_client().internal_kv_get(key, NAMESPACE, timeout=timeout)
        names = frozenset(json.loads(raw)) if raw else frozenset()
        with self._lock:
            self._read[key] = (now, names)
        return names

    def drop(self, prefix: str, node: str) -> None:
        """Forget the read of `node`'s marker (the control actor knew it was stale)."""
        with self._lock:
            self._read.pop(_marker(prefix, node), None)


_markers = MarkerCache()


def shrinking(prefix: str, node: str, labels: Mapping[str, float], timeout: float) -> bool:
    """True if a shrink of one of `labels` may be pending on `node` (the task must ask)."""
    return not _markers.names(prefix, node, timeout).isdisjoint(labels)


def marker_stale(prefix: str, node: str) -> None:
    """The control actor admitted a task the marker held back: read the marker again."""
    _markers.drop(prefix, node)


def waits_for_shrink(out: Any) -> bool:
    """True if a task's return value says it was held back (see `WAIT_FOR_SHRINK`)."""
    return isinstance(out, list) and len(out) == 2 and out[0] == WAIT_FOR_SHRINK


# --- the control actor's part -----------------------------------------------------------
class ShrinkGate:
    """Pending shrinks per (node, Ray name), their markers, and admission.

    Args:
        resize: The resize call (node, {Ray name: total}) -> the node's new totals, or None
            where this Ray has none (then nothing is ever pending).
    """

    def __init__(self, resize: ResizeCall | None) -> None:
        self._resize = resize
        # node -> Ray name -> (asked capacity, stamp)
        self._pending: dict[str, dict[str, tuple[float, float]]] = {}
        self._prefix = ""  # of the markers: the backend's (one control actor per prefix)
        self._dirty: set[str] = set()  # nodes whose marker changed since `take_changed`
        self._loaded = False
        # writes seen before the markers were loaded: (node, Ray name) -> (total, stamp)
        self._early: dict[tuple[str, str], tuple[float, float]] = {}

    def _use(self, prefix: str) -> None:
        """Start from the markers in the control store, once: a restarted control actor
        knows every shrink its predecessor published (each marker keeps its asked
        capacities), so the tasks it holds back stay held back."""
        self._prefix = prefix
        if self._loaded:
            return
        client = kv_client()
        keys = [
            k for k in client.internal_kv_keys(prefix.encode(), NAMESPACE) if _is_marker(prefix, k)
        ]
        values = client.internal_kv_multi_get(keys, NAMESPACE) if keys else {}
        stale: set[str] = set()
        for key, raw in values.items():
            node = key.decode()[len(prefix) :]
            for name, (capacity, stamp) in _parse(raw).items():
                if self._overtaken(node, name, capacity, stamp):
                    stale.add(node)
                    continue
                old = self._pending.get(node, {}).get(name)
                if old is None or stamp > old[1]:
                    self._pending.setdefault(node, {})[name] = (capacity, stamp)
        self._loaded, self._early = True, {}
        for node in stale:
            self._publish(node)

    def set_pending(
        self, prefix: str, node: str, capacities: Mapping[str, float], stamp: float
    ) -> None:
        """Shrinks of these Ray names on `node` are pending (newer stamps win)."""
        self._use(prefix)
        here = self._pending.setdefault(node, {})
        for name, capacity in capacities.items():
            old = here.get(name)
            if old is None or stamp >= old[1]:
                here[name] = (capacity, stamp)
        self._publish(node)

    def clear(self, prefix: str, node: str, names: Iterable[str], stamp: float) -> None:
        """The pending shrinks of `names` on `node` recorded at `stamp` or before are over."""
        self._use(prefix)
        here = self._pending.get(node, {})
        for name in names:
            old = here.get(name)
            if old is not None and old[1] <= stamp:
                del here[name]
        self._publish(node)  # also when nothing was known (a marker left by a restart)

    def replaced(self, node: str, name: str, total: float, stamp: float) -> None:
        """A write of `name` on `node` (from any process) to `total` at `stamp`: a pending
        shrink to another capacity recorded before it is over."""
        if not self._loaded:  # a marker loaded later may hold a shrink this write ended
            early = self._early.get((node, name))
            if early is None or stamp >= early[1]:
                self._early[(node, name)] = (total, stamp)
        old = self._pending.get(node, {}).get(name)
        if old is not None and stamp > old[1] and abs(total - old[0]) > EPSILON:
            del self._pending[node][name]
            self._publish(node)

    def _overtaken(self, node: str, name: str, capacity: float, stamp: float) -> bool:
        """Whether a write seen before loading ended this published pending shrink."""
        early = self._early.get((node, name))
        return early is not None and early[1] > stamp and abs(early[0] - capacity) > EPSILON

    def admit(self, prefix: str, node: str, labels: Mapping[str, float]) -> bool:
        """Whether a task that holds `labels` on `node` may run: every pending shrink of its
        labels there is applied now (Ray's total reached the asked capacity)."""
        self._use(prefix)
        here = self._pending.get(node, {})
        wanted = {name: here[name][0] for name in labels if name in here}
        if not wanted:
            self._publish(node)  # the task saw a marker this actor does not know: drop it
            return True
        if self._resize is None:
            return False
        totals = self._resize(node, dict(wanted))
        done = [n for n, cap in wanted.items() if float(totals.get(n, 0.0)) <= cap + EPSILON]
        for name in done:
            del here[name]
        if done:
            self._publish(node)
        return len(done) == len(wanted)

    @property
    def prefix(self) -> str:
        """The backends' prefix of the markers."""
        return self._prefix

    def take_changed(self) -> dict[str, list[str]]:
        """Nodes whose marker changed since the last call -> the Ray names pending there
        now (for the copies on the nodes themselves)."""
        dirty, self._dirty = self._dirty, set()
        return {node: sorted(self._pending.get(node, {})) for node in dirty}

    def _publish(self, node: str) -> None:
        """Write (or delete) `node`'s marker: the names with a pending shrink there."""
        self._dirty.add(node)
        here = self._pending.get(node, {})
        key = _marker(self._prefix, node)
        if here:
            kept = {name: list(here[name]) for name in sorted(here)}
            kv_client().internal_kv_put(key, json.dumps(kept).encode(), True, NAMESPACE)
        else:
            self._pending.pop(node, None)
            kv_client().internal_kv_del(key, False, NAMESPACE)


def _is_marker(prefix: str, key: bytes) -> bool:
    """Whether control-store key `key` is a marker of `prefix` (the rest is a node id)."""
    return is_node_id(key.decode()[len(prefix) :])


def _parse(raw: bytes) -> dict[str, tuple[float, float]]:
    """A marker's pending shrinks: Ray name -> (asked capacity, stamp)."""
    kept = json.loads(raw)
    if not isinstance(kept, dict):  # names only: nothing to enforce from it
        return {}
    return {str(name): (float(cap), float(stamp)) for name, (cap, stamp) in kept.items()}
