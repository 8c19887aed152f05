"""Sessions and garbage on a shared Ray cluster.

Each driver's backend keeps a lease at the control actor (renewed in the background); every
ephemeral resource is marked there with the session that wrote it last. `collect` removes
exactly the resources whose session's lease expired, and keeps every live session's.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from escher.backends.base import GarbageReport
from escher.backends.ray._gate import NodeAgents, forget_session
from escher.backends.ray._state import is_ray_internal, ray_up, read_raw, wait_for
from escher.backends.ray._store import EphemeralStore

#: A lease unknown to the control actor counts as expired once the actor has run this long
#: (it restarted and lost its leases: live sessions renewed theirs within this time).
UNKNOWN_LEASE_GRACE = 60.0


class LeaseKeeper:
    """Renews a session's lease every `ttl / 6` seconds until stopped."""

    def __init__(self, control: Callable[[], Any], session_id: str, ttl: float) -> None:
        self._control = control
        self._session = session_id
        self._ttl = ttl
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Renew once now (so the session is known at once), then in the background."""
        wait_for(self._control().renew.remote(self._session, self._ttl), self._ttl)
        self._thread = threading.Thread(target=self._run, name="escher-ray-lease", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._ttl / 6):
            if not ray_up():  # Ray ends a process whose threads call it after shutdown
                return
            try:
                self._control().renew.remote(self._session, self._ttl)
            except Exception:  # Ray going away or the actor restarting: try next round
                continue

    def stop(self, timeout: float) -> None:
        """End the lease now (a clean close leaves nothing a live session uses)."""
        self._stop.set()
        with contextlib.suppress(Exception):  # else the lease simply expires
            wait_for(self._control().end.remote(self._session), timeout)
        if self._thread is not None:
            self._thread.join(timeout=1.0)


def collect(
    control: Callable[[], Any],
    store: EphemeralStore,
    prefix: str,
    agents: NodeAgents,
    *,
    dry_run: bool,
    timeout: float,
) -> GarbageReport:
    """Remove (or with `dry_run` list) the ephemeral resources of dead sessions, and the
    start-gate keys and files they left."""
    info = wait_for(control().ownership.remote(), timeout)
    now, leases, started = info["now"], info["leases"], info["started_at"]

    def alive(session: str) -> bool:
        expiry = leases.get(session)
        if expiry is None:
            return bool(now - started < UNKNOWN_LEASE_GRACE)
        return bool(expiry > now)

    existing = _existing(store, prefix, info)
    owners = {(node, name): session for node, name, session in info["owners"]}
    removed: list[str] = []
    kept: list[str] = []
    plan: dict[str, dict[str, float]] = {}
    for node, label in sorted(existing):
        session = owners.get((node, _stored_name(store, prefix, label)))
        what = f"label {label} on node {node}"
        if session is None:
            kept.append(f"{what} (no session known)")
        elif alive(session):
            kept.append(f"{what} (session {session}, alive)")
        else:
            removed.append(f"{what} (session {session}, lease expired)")
            plan.setdefault(node, {})[label] = 0.0
    dead = sorted({s for s in leases if not alive(s)})
    if not dry_run:
        for session in dead:  # the start-gate keys those sessions left
            forget_session(prefix, session, timeout)
        if dead:  # and their files on every node
            agents.call_all("forget_sessions", lambda node: (dead,))
    if plan and not dry_run:
        store.write(plan)
        keys = [(n, _stored_name(store, prefix, lbl)) for n, caps in plan.items() for lbl in caps]
        wait_for(control().forget.remote(keys, dead), timeout)
    return GarbageReport(removed=tuple(removed), kept=tuple(kept), dry_run=dry_run)


def _stored_name(store: EphemeralStore, prefix: str, label: str) -> str:
    """The name the control actor marks `label` with (Ray's name in resize mode)."""
    return prefix + label if store.mode == "resize" else label


def _existing(store: EphemeralStore, prefix: str, info: dict[str, Any]) -> set[tuple[str, str]]:
    """(node, label) of every ephemeral resource on an alive node."""
    raw = read_raw()
    if store.mode == "resize":
        cut = len(prefix)
        return {
            (node, name[cut:])
            for node, totals in raw.total.items()
            for name, total in totals.items()
            if name.startswith(prefix) and not is_ray_internal(name) and total > 0
        }
    return {
        (node, label)
        for node, totals in info["totals"].items()
        if node in raw.total
        for label, total in totals.items()
        if total > 0
    }
