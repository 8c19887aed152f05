"""The control actor: one named, detached Ray actor per (namespace, prefix).

It serves these jobs, each atomic because the actor runs one asyncio loop (the start gate
is not one of them: it lives in Ray's control store, see `escher.backends.ray._gate`):

* the ledger (ledger mode only): the ephemeral-resource table, node -> label -> (total, used),
  with atomic acquire / release for the tasks pinned to a node, and all-or-nothing grants for
  gangs;
* resize mode: the recent writes of every process, so that reads see them before Ray's own
  view catches up;
* sessions: which session owns each ephemeral resource, and each session's lease, so that
  garbage collection removes exactly what dead sessions left.

It lives on the head node (a worker's death cannot take it) and restarts if it dies
anyway; what it lost then is rebuilt by the processes that use it (their next writes and
lease renewals), and its pending shrinks from their markers in Ray's control store.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from escher.backends.ray._nodegate import copy_markers
from escher.backends.ray._shrink import ShrinkGate
from escher.core.resources import EPSILON as EPS
from escher.core.resources import give_back

#: (node, Ray name or label, total, wall-clock stamp)
Write = tuple[str, str, float, float]
#: (key, units, candidate nodes)
Request = tuple[str, Mapping[str, float], Sequence[str]]
#: (node, units): units acquired on node, given back
Release = tuple[str, Mapping[str, float]]


class ControlActor:
    """State shared by every escher process on one Ray cluster (wrapped by `ray.remote`)."""

    def __init__(self, namespace: str | None = None) -> None:
        self._namespace = namespace  # of the start gate's node agents
        self._copying = asyncio.Lock()
        self._totals: dict[str, dict[str, float]] = {}
        self._used: dict[str, dict[str, float]] = {}
        self._version = 0
        # (node, Ray name) -> (received, total, the writer's wall-clock stamp)
        self._writes: dict[tuple[str, str], tuple[float, float, float]] = {}
        self._owners: dict[tuple[str, str], str] = {}  # (node, name) -> session
        self._leases: dict[str, float] = {}  # session -> wall-clock expiry
        self._started_at = time.time()
        self._shrinks: ShrinkGate | None = None  # resize mode: pending shrinks

    # --- resize mode: pending shrinks (see escher.backends.ray._shrink) --------------------
    def _gate(self) -> ShrinkGate:
        if self._shrinks is None:
            from escher.backends.ray._state import resize_call

            self._shrinks = ShrinkGate(resize_call())
        return self._shrinks

    async def shrink_pending(
        self, prefix: str, node: str, capacities: Mapping[str, float], stamp: float
    ) -> None:
        """Ray kept these Ray names on `node` above the asked capacities (in use): hold
        back the tasks that would take them above, until the shrinks are over. Returns
        once the node's own copy of its marker holds them (if the node is armed)."""
        self._gate().set_pending(prefix, node, capacities, stamp)
        await self._copy_markers()

    async def shrink_over(self, prefix: str, node: str, names: Sequence[str], stamp: float) -> None:
        """The pending shrinks of `names` on `node` (recorded at `stamp` or before) are over."""
        self._gate().clear(prefix, node, names, stamp)
        await self._copy_markers()

    async def shrink_admit(self, prefix: str, node: str, labels: Mapping[str, float]) -> bool:
        """Whether a task holding `labels` (Ray names) on `node` may run now: every pending
        shrink of them there is applied (tried again now, atomically at the node)."""
        admitted = self._gate().admit(prefix, node, labels)
        await self._copy_markers()
        return admitted

    async def _copy_markers(self) -> None:
        """Send each changed marker to its node's start-gate agent, which keeps the copy
        that tasks there read (`escher.backends.ray._nodegate`)."""
        if self._shrinks is None:
            return
        async with self._copying:  # one at a time: a copy in flight may hold this change
            changed = self._shrinks.take_changed()
            if changed:
                await copy_markers(self._shrinks.prefix, changed, self._namespace)

    # --- resize mode: recent writes, so every process reads its own and others' at once ---
    async def notes(self, writes: Sequence[Write], session: str = "") -> None:
        """Record a batch of (node, Ray name, total, stamp) writes (the newest stamp wins)."""
        self._keep_all(writes, session)
        await self._copy_markers()

    async def exchange(
        self, writes: Sequence[Write], window: float, session: str = ""
    ) -> dict[tuple[str, str], tuple[float, float]]:
        """Record `writes` (as `notes`), then return (node, name) -> (total, stamp) of every
        write of the last `window` seconds: one call for a reader that also has writes."""
        self._keep_all(writes, session)
        await self._copy_markers()
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

    def _keep_all(self, writes: Sequence[Write], session: str) -> None:
        now = time.monotonic()
        for node, name, total, stamp in writes:
            old = self._writes.get((node, name))
            if old is None or stamp >= old[2]:
                self._writes[(node, name)] = (now, total, stamp)
                self._own(node, name, total, session)
            self._gate().replaced(node, name, total, stamp)

    def _own(self, node: str, name: str, total: float, session: str) -> None:
        if not session:
            return
        if total > EPS:
            self._owners[(node, name)] = session
        else:
            self._owners.pop((node, name), None)

    def _window(self, window: float) -> dict[tuple[str, str], tuple[float, float]]:
        now = time.monotonic()
        for key in [k for k, (t, _, _) in self._writes.items() if now - t > window]:
            del self._writes[key]
        return {key: (total, stamp) for key, (_, total, stamp) in self._writes.items()}

    # --- ledger ------------------------------------------------------------------------
    async def set_many(self, changes: Mapping[str, Mapping[str, float]], session: str = "") -> None:
        """Set each node's labels' totals (0 deletes) in one step."""
        for node, capacities in changes.items():
            totals = self._totals.setdefault(node, {})
            for label, capacity in capacities.items():
                if capacity <= EPS:
                    totals.pop(label, None)
                else:
                    totals[label] = capacity
                self._own(node, label, capacity, session)
        self._version += 1

    async def table(self) -> tuple[int, dict[str, dict[str, float]], dict[str, dict[str, float]]]:
        """(version, totals, used), copies."""
        return (
            self._version,
            {n: dict(t) for n, t in self._totals.items()},
            {n: dict(u) for n, u in self._used.items() if u},
        )

    async def acquire(
        self, requests: Sequence[Request], releases: Sequence[Release] = ()
    ) -> dict[str, str]:
        """Give back `releases` first; then grant, in order, each (key, units, candidate nodes)
        some node whose free units cover `units`; return key -> node for the granted ones
        (the units are now used)."""
        self._give_back_all(releases)
        granted: dict[str, str] = {}
        for key, units, candidates in requests:
            node = self._grant(units, candidates)
            if node is not None:
                granted[key] = node
        if granted:
            self._version += 1
        return granted

    async def acquire_all(
        self, requests: Sequence[Request], releases: Sequence[Release] = ()
    ) -> list[str] | None:
        """Give back `releases` first; then grant every request or none (a gang): per request
        its node ("" when it asks for no units), or None when they do not all fit now."""
        self._give_back_all(releases)
        nodes: list[str] = []
        taken: list[tuple[str, Mapping[str, float]]] = []
        for _, units, candidates in requests:
            if not units:
                nodes.append("")
                continue
            node = self._grant(units, candidates)
            if node is None:
                for done_node, done_units in taken:
                    self._give_back(done_node, done_units)
                return None
            taken.append((node, units))
            nodes.append(node)
        self._version += 1
        return nodes

    def _grant(self, units: Mapping[str, float], candidates: Sequence[str]) -> str | None:
        for node in candidates:
            if self._fits(node, units):
                used = self._used.setdefault(node, {})
                for label, q in units.items():
                    used[label] = used.get(label, 0.0) + q
                return node
        return None

    async def release(self, node: str, units: Mapping[str, float]) -> None:
        """Give back units acquired on `node`."""
        self._give_back(node, units)
        self._version += 1

    def _give_back(self, node: str, units: Mapping[str, float]) -> None:
        give_back(self._used.get(node, {}), units)

    def _give_back_all(self, releases: Sequence[Release]) -> None:
        for node, units in releases:
            self._give_back(node, units)
        if releases:
            self._version += 1

    async def purge(self, alive: Sequence[str]) -> None:
        """Forget the table and owner marks of nodes that left the cluster."""
        keep = set(alive)
        for table in (self._totals, self._used):
            for node in [n for n in table if n not in keep]:
                del table[node]
        for key in [k for k in self._owners if k[0] not in keep]:
            del self._owners[key]
        self._version += 1

    def _fits(self, node: str, units: Mapping[str, float]) -> bool:
        totals, used = self._totals.get(node, {}), self._used.get(node, {})
        return all(totals.get(k, 0.0) - used.get(k, 0.0) + EPS >= q for k, q in units.items())

    # --- sessions ----------------------------------------------------------------------
    async def renew(self, session: str, ttl: float) -> None:
        """Keep `session`'s lease alive for `ttl` more seconds."""
        self._leases[session] = time.time() + ttl

    async def end(self, session: str) -> None:
        """`session` closed cleanly: its lease ends now."""
        self._leases[session] = 0.0

    async def ownership(self) -> dict[str, Any]:
        """What garbage collection needs: owner marks, leases, and the ledger's totals."""
        return {
            "now": time.time(),
            "owners": [(node, name, session) for (node, name), session in self._owners.items()],
            "leases": dict(self._leases),
            "totals": {n: dict(t) for n, t in self._totals.items()},
            "started_at": self._started_at,
        }

    async def forget(self, keys: Sequence[tuple[str, str]], sessions: Sequence[str]) -> None:
        """Drop owner marks `keys` (removed by garbage collection) and the leases of `sessions`
        (ledger totals of the keys are removed too)."""
        for node, name in keys:
            self._owners.pop((node, name), None)
            self._totals.get(node, {}).pop(name, None)
        for session in sessions:
            self._leases.pop(session, None)
        self._version += 1

    async def ping(self) -> str:
        return "ok"

    async def node(self) -> str:
        """The id of the node this actor runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())


def head_node_id() -> str | None:
    """The id of the cluster's head node (None if it cannot be told)."""
    import ray

    for node in ray.nodes():  # type: ignore[no-untyped-call]
        if node.get("Alive") and HEAD_RESOURCE in (node.get("Resources") or {}):
            return str(node["NodeID"])
    return None


#: The custom resource Ray gives the head node only (a tiny amount of it pins an actor there).
HEAD_RESOURCE = "node:__internal_head__"


def actor_options(name: str, namespace: str | None, on_head: bool) -> dict[str, Any]:
    """`ray.remote(...).options` for the control actor: detached, restarted if it dies
    anyway, and (if `on_head`) pinned to the head node by the head's own resource, so a
    worker's death cannot take it and a restart lands on the head again. (A soft node
    affinity is not enough: right after a resize call on the head Ray may place it on a
    worker.)"""
    options: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "lifetime": "detached",
        "get_if_exists": True,
        "num_cpus": 0,
        "max_concurrency": 1000,
        "max_restarts": -1,
        "max_task_retries": -1,
    }
    if on_head:
        options["resources"] = {HEAD_RESOURCE: 0.001}
    return options
