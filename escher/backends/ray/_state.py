"""Reading the cluster from Ray: node totals, availability, labels, and a cache of them."""

from __future__ import annotations

import functools
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from escher.core.resources import Resources

#: Resources Ray defines on every node; escher never creates, resizes or deletes these.
RAY_PREDEFINED = frozenset({"CPU", "GPU", "memory", "object_store_memory"})
_PREDEFINED_PREFIXES = ("node:", "accelerator_type:")


@functools.lru_cache(maxsize=4096)
def node_affinity(node: str, soft: bool) -> Any:
    """Ray's `NodeAffinitySchedulingStrategy` for `node`: one object per (node, soft), so the
    task table can cache the Ray options made with it."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node, soft=soft)


def ray_up() -> bool:
    """True while this process is connected to Ray (background threads stop otherwise)."""
    import ray

    return bool(ray.is_initialized())


def keep_running(
    thread: threading.Thread | None, target: Callable[[], None], name: str
) -> threading.Thread:
    """`thread` if it is alive, else a new daemon thread running `target`, started."""
    if thread is not None and thread.is_alive():
        return thread
    fresh = threading.Thread(target=target, name=name, daemon=True)
    fresh.start()
    return fresh


def wakeups(wake: threading.Event, period: float, running: Callable[[], bool]) -> Iterator[None]:
    """One step after each `wake` (or every `period` seconds), while `running()` holds."""
    while running():
        wake.wait(period)
        wake.clear()
        if not running():
            return
        yield


def wait_for(object_ref: Any, timeout: float) -> Any:
    """The value of `object_ref`, waiting at most `timeout` seconds.

    Waits on a future rather than with `ray.get`: inside a task, `ray.get` tells the raylet
    the worker is blocked, so Ray lends the task's CPUs to other tasks meanwhile (a ghost
    task that holds resources would stop holding them) and starts extra worker processes.

    Raises:
        TimeoutError: not ready in time.
        Exception: what the remote call raised.
    """
    return object_ref.future().result(timeout=timeout)


#: Ray's in-place resize: (node id, {resource: new total}) -> the node's totals after it.
ResizeCall = Callable[[str, dict[str, float]], dict[str, float]]


def resize_call() -> ResizeCall | None:
    """The resize method of this process's GCS client, or None if this Ray lacks it."""
    import ray

    gcs = getattr(ray._private.worker.global_worker, "gcs_client", None)
    method = getattr(gcs, "resize_raylet_resource_instances", None)
    return method if callable(method) else None


#: Start of the name of the resource escher's resize probe creates and deletes at once
#: (`escher.backends.ray._resize.probe_resize`); Ray's view may still list it for a moment.
PROBE_PREFIX = "__escher_probe_"


def is_ray_internal(name: str) -> bool:
    """True for per-node marker resources (node:<ip>, node:__internal_head__) and escher's
    resize probe: never part of a node's resources."""
    return name.startswith(("node:", PROBE_PREFIX))


def is_node_defined(name: str) -> bool:
    """True for resources Ray or the node's start options define."""
    return name in RAY_PREDEFINED or name.startswith(_PREDEFINED_PREFIXES)


@dataclass
class RawView:
    """One read of Ray's per-node totals and availability (alive nodes only)."""

    total: dict[str, dict[str, float]]
    available: dict[str, dict[str, float]]
    taken_at: float = field(default_factory=time.monotonic)


def read_raw() -> RawView:
    """Ask the GCS for every alive node's totals and available resources."""
    import ray._private.state as ray_state

    total = ray_state.total_resources_per_node()  # type: ignore[no-untyped-call]
    available = ray_state.available_resources_per_node()  # type: ignore[no-untyped-call]
    return RawView(total=total, available={n: available.get(n, {}) for n in total})


#: Ray's node label holding the node id (Ray 2.55 and later set it on every node).
NODE_ID_LABEL = "ray.io/node-id"


class DeadNodes:
    """Nodes escher saw die before Ray's control store declared them dead (which takes
    seconds): their raylet refused a connection. They are left out of every view, so no new
    work goes there; an entry is forgotten once Ray no longer lists the node, or after
    `ttl` seconds."""

    def __init__(self, ttl: float = 600.0) -> None:
        self._ttl = ttl
        self._lock = threading.Lock()
        self._dead: dict[str, float] = {}

    def mark(self, node: str) -> None:
        """Record that `node` died."""
        with self._lock:
            self._dead[node] = time.monotonic()

    def snapshot(self, listed: set[str] | None = None) -> frozenset[str]:
        """The nodes known dead (forgetting those Ray no longer lists, if `listed` is given)."""
        if not self._dead:  # the common case, on every submit: no lock needed
            return frozenset()
        now = time.monotonic()
        with self._lock:
            for node in [
                n
                for n, at in self._dead.items()
                if now - at > self._ttl or (listed is not None and n not in listed)
            ]:
                del self._dead[node]
            return frozenset(self._dead)


#: The dead nodes this process knows of (shared by every backend in it).
DEAD_NODES = DeadNodes()


def raylet_reachable(endpoint: tuple[str, int] | None, timeout: float = 0.5) -> bool:
    """False only if the node's raylet refuses connections (its process is gone); True when
    it answers, or when it cannot be told (no endpoint known, a timeout)."""
    if endpoint is None:
        return True
    try:
        with socket.create_connection(endpoint, timeout=timeout):
            return True
    except ConnectionRefusedError:
        return False
    except OSError:
        return True


class NodeCache:
    """What rarely changes: each node's labels, node-defined resources and raylet endpoint
    (TTL-refreshed); nodes known dead are left out.

    Once read, a stale view is refreshed by a background thread while callers keep the
    current one: a refresh costs a few GCS round trips (tens of ms under load), which the
    launching thread must not pay. The first read, ``fresh=True`` and `refresh` read now.
    """

    def __init__(self, prefix: str, ttl: float = 2.0, dead: DeadNodes | None = None) -> None:
        self._prefix = prefix
        self._ttl = ttl
        self.dead = dead or DEAD_NODES
        self._endpoints: dict[str, tuple[str, int]] = {}
        self._lock = threading.Lock()
        self._labels: dict[str, dict[str, str]] = {}
        self._physical: dict[str, Resources] = {}
        self._app: frozenset[str] = frozenset()
        self._at = -1e9
        self._behind: threading.Thread | None = None  # the background refresh, while on
        self._tried = -1e9  # when the last background refresh started
        self.generation = 0  # bumped by every refresh: derived caches compare it

    def physical(self, *, fresh: bool = False) -> dict[str, Resources]:
        """Alive node -> its node-defined resources (no ephemeral ones, no node: markers)."""
        if fresh or self.generation == 0:
            self.refresh()
        elif time.monotonic() - self._at > self._ttl:
            self._refresh_behind()
        dead = self.dead.snapshot()
        if dead:
            return {n: r for n, r in self._physical.items() if n not in dead}
        return self._physical

    def endpoint(self, node: str) -> tuple[str, int] | None:
        """Where `node`'s raylet listens (address, port), if known."""
        if node not in self._endpoints:
            self.refresh()
        return self._endpoints.get(node)

    def labels(self, node_ids: set[str] | None = None) -> dict[str, dict[str, str]]:
        """Node -> labels; refreshes when a node of `node_ids` is not known yet."""
        if node_ids is not None and not node_ids <= set(self._labels):
            self.refresh()
        return self._labels

    def app_names(self, *, stale_ok: bool = True) -> frozenset[str]:
        """Names of application-defined custom resources on any node (read now if the view
        is stale and not `stale_ok`)."""
        self.physical(fresh=not stale_ok and time.monotonic() - self._at > self._ttl)
        return self._app

    def _refresh_behind(self) -> None:
        """Start one background refresh, unless one is on (the caller keeps the old view)."""
        with self._lock:
            if self._behind is not None or time.monotonic() - self._tried < self._ttl:
                return
            self._tried = time.monotonic()  # a failed refresh is retried one TTL later
            thread = self._behind = threading.Thread(
                target=self._refresh_quietly, name="escher-ray-nodes", daemon=True
            )
        thread.start()

    def _refresh_quietly(self) -> None:
        try:
            self.refresh()
        except Exception:  # Ray went away meanwhile: the next stale read tries again
            pass
        finally:
            with self._lock:
                self._behind = None

    def refresh(self, raw: RawView | None = None) -> None:
        """Re-read labels (ray.nodes) and totals."""
        import ray

        raw = raw or read_raw()
        self.dead.snapshot(set(raw.total))  # forget dead nodes Ray no longer lists
        alive = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
        labels = {
            n["NodeID"]: {
                k: v for k, v in (n.get("Labels") or {}).items() if not k.startswith("ray.io/")
            }
            for n in alive
        }
        endpoints = {
            n["NodeID"]: (str(n["NodeManagerAddress"]), int(n["NodeManagerPort"]))
            for n in alive
            if n.get("NodeManagerAddress") and n.get("NodeManagerPort")
        }
        physical = {node: self.physical_part(totals) for node, totals in raw.total.items()}
        app = frozenset(
            name for res in physical.values() for name in res if name not in RAY_PREDEFINED
        )
        with self._lock:
            self._labels, self._physical, self._app = labels, physical, app
            self._endpoints = endpoints
            self._at = time.monotonic()
            self.generation += 1

    def physical_part(self, totals: Mapping[str, float]) -> Resources:
        """The node-defined part of a raw totals mapping."""
        return Resources._trusted(
            {
                k: float(v)
                for k, v in totals.items()
                if not k.startswith(self._prefix) and not is_ray_internal(k) and v > 0
            }
        )


_STATE_API_DOWN_UNTIL = [0.0]


def ray_task_state(object_ref: Any, timeout: float = 2.0) -> dict[str, Any]:
    """What Ray's state API says about the task of `object_ref` (its state, node and error),
    best effort: empty when the API (the dashboard) is not reachable, and then not asked
    again for a minute."""
    if time.monotonic() < _STATE_API_DOWN_UNTIL[0]:
        return {}
    try:
        from ray.util.state import get_task

        found = get_task(object_ref.task_id().hex(), timeout=max(1, int(timeout)))
    except Exception:
        _STATE_API_DOWN_UNTIL[0] = time.monotonic() + 60.0
        return {}
    task = found[-1] if isinstance(found, list) and found else found
    if task is None:
        return {}
    facts = {
        "ray_state": getattr(task, "state", None),
        "ray_node": getattr(task, "node_id", None),
        "ray_error": getattr(task, "error_message", None),
    }
    return {k: v for k, v in facts.items() if v}


def kv_client() -> Any:
    """This process's client of Ray's key-value store in the GCS (drivers, workers and
    actors alike, once Ray is connected)."""
    from ray.experimental import internal_kv

    client = getattr(internal_kv, "global_gcs_client", None)
    if client is None:
        raise RuntimeError("Ray is not connected (no GCS client)")
    return client


#: Ray's node ids: 28 bytes in hex.
_NODE_ID = re.compile(r"[0-9a-f]{56}")


def is_node_id(text: str) -> bool:
    """Whether `text` is a Ray node id (what follows a prefix in escher's per-node keys)."""
    return _NODE_ID.fullmatch(text) is not None
