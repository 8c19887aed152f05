"""The control actor: one named, detached Ray actor per (namespace, prefix).

It serves two jobs, both atomic because the actor runs one asyncio loop:

* the start gate: a task claims its key just before its body runs; a cancel marks a key
  that has not been claimed, so a cancelled task never runs and a started one is never
  interrupted;
* the ledger (ledger mode only): the ephemeral-resource table, node -> label -> (total, used),
  with atomic acquire / release for the tasks pinned to a node.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

EPS = 1e-9


class ControlActor:
    """State shared by every escher process on one Ray cluster (wrapped by `ray.remote`)."""

    def __init__(self) -> None:
        self._cancelled: set[str] = set()
        self._started: set[str] = set()  # claimed keys whose task is not known done yet
        self._fresh: dict[str, dict[str, str]] = {}  # driver -> key -> node, not yet synced
        self._totals: dict[str, dict[str, float]] = {}
        self._used: dict[str, dict[str, float]] = {}
        self._version = 0
        # (node, Ray name) -> (received, total, the writer's wall-clock stamp)
        self._writes: dict[tuple[str, str], tuple[float, float, float]] = {}

    # --- start gate --------------------------------------------------------------------
    async def claim(self, key: str, node: str) -> bool:
        """Called by a task before its body runs. False: it was cancelled, do not run."""
        if key in self._cancelled:
            self._cancelled.discard(key)
            return False
        self._started.add(key)
        self._fresh.setdefault(key.partition(":")[0], {})[key] = node
        return True

    async def cancel(self, key: str, already_started: bool = False) -> bool:
        """Mark `key` cancelled unless it was claimed. True if it will never run."""
        if already_started or key in self._started:
            return False
        self._cancelled.add(key)
        return True

    async def sync(self, driver: str, done: Sequence[str]) -> dict[str, str]:
        """Keys of `driver` claimed since the last sync (-> node); forget the `done` ones."""
        fresh = self._fresh.pop(driver, {})
        for key in done:
            self._cancelled.discard(key)
            self._started.discard(key)
        return fresh

    # --- resize mode: recent writes, so every process reads its own and others' at once ---
    async def notes(self, writes: Sequence[tuple[str, str, float, float]]) -> None:
        """Record a batch of (node, Ray name, total, stamp) writes (the newest stamp wins)."""
        self._keep_all(writes)

    async def exchange(
        self, writes: Sequence[tuple[str, str, float, float]], window: float
    ) -> dict[tuple[str, str], tuple[float, float]]:
        """Record `writes` (as `notes`), then return (node, name) -> (total, stamp) of every
        write of the last `window` seconds: one call for a reader that also has writes."""
        self._keep_all(writes)
        return self._window(window)

    async def written(
        self, names: Sequence[str], window: float, timeout: float
    ) -> dict[str, list[str]] | None:
        """Wait (at most `timeout` s) until every Ray name of `names` was written with a
        positive total on some node in the last `window` seconds: name -> those nodes, or
        None on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            where: dict[str, list[str]] = {name: [] for name in names}
            for (node, name), (total, _) in self._window(window).items():
                if total > 0 and name in where:
                    where[name].append(node)
            if all(where.values()):
                return where
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(0.002)

    def _keep_all(self, writes: Sequence[tuple[str, str, float, float]]) -> None:
        now = time.monotonic()
        for node, name, total, stamp in writes:
            old = self._writes.get((node, name))
            if old is None or stamp >= old[2]:
                self._writes[(node, name)] = (now, total, stamp)

    def _window(self, window: float) -> dict[tuple[str, str], tuple[float, float]]:
        now = time.monotonic()
        for key in [k for k, (t, _, _) in self._writes.items() if now - t > window]:
            del self._writes[key]
        return {key: (total, stamp) for key, (_, total, stamp) in self._writes.items()}

    # --- ledger ------------------------------------------------------------------------
    async def set(self, node: str, label: str, capacity: float) -> float:
        """Set `label`'s total on `node` (0 deletes); return the new total."""
        totals = self._totals.setdefault(node, {})
        if capacity <= EPS:
            totals.pop(label, None)
        else:
            totals[label] = capacity
        self._version += 1
        return totals.get(label, 0.0)

    async def table(self) -> tuple[int, dict[str, dict[str, float]], dict[str, dict[str, float]]]:
        """(version, totals, used), copies."""
        return (
            self._version,
            {n: dict(t) for n, t in self._totals.items()},
            {n: dict(u) for n, u in self._used.items() if u},
        )

    async def acquire(
        self, requests: Sequence[tuple[str, Mapping[str, float], Sequence[str]]]
    ) -> dict[str, str]:
        """Grant, in order, each (key, units, candidate nodes) some node whose free units cover
        `units`; return key -> node for the granted ones (the units are now used)."""
        granted: dict[str, str] = {}
        for key, units, candidates in requests:
            for node in candidates:
                if self._fits(node, units):
                    used = self._used.setdefault(node, {})
                    for label, q in units.items():
                        used[label] = used.get(label, 0.0) + q
                    granted[key] = node
                    break
        if granted:
            self._version += 1
        return granted

    async def release(self, node: str, units: Mapping[str, float]) -> None:
        """Give back units acquired on `node`."""
        used = self._used.get(node, {})
        for label, q in units.items():
            left = used.get(label, 0.0) - q
            if left > EPS:
                used[label] = left
            else:
                used.pop(label, None)
        self._version += 1

    async def purge(self, alive: Sequence[str]) -> None:
        """Forget the table of nodes that left the cluster."""
        keep = set(alive)
        for table in (self._totals, self._used):
            for node in [n for n in table if n not in keep]:
                del table[node]
        self._version += 1

    async def ping(self) -> str:
        return "ok"

    def _fits(self, node: str, units: Mapping[str, float]) -> bool:
        totals, used = self._totals.get(node, {}), self._used.get(node, {})
        return all(totals.get(k, 0.0) - used.get(k, 0.0) + EPS >= q for k, q in units.items())


def actor_options(name: str, namespace: str | None, node_id: str | None) -> dict[str, Any]:
    """`ray.remote(...).options` for the control actor, pinned (softly) to `node_id`."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    options: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "lifetime": "detached",
        "get_if_exists": True,
        "num_cpus": 0,
        "max_concurrency": 1000,
    }
    if node_id is not None:
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=True)
    return options
