"""The start gate's node-local half: a task claims its start with one exclusive file create
on its own node, so the claim costs no round trip.

On each node, ``<root>/<prefix>/<node id>/`` holds a file ``ARMED`` and a folder per session
with one file per attempt, named by Ray's task id: empty for a claim, ``-`` for a cancel.
The root is per user, but the node's folder is per cluster: Ray draws a node's id at random
when its raylet starts, so two Ray clusters of one user on one machine (or a cluster
restarted there) never share a node folder, and nothing else under the root is shared.
Whichever creates the file first wins. ``shrink-marker.json`` copies the node's marker of
pending shrinks (`escher.backends.ray._shrink`): the control actor sends each change to the
agent before the write that caused it returns, so a task on an armed node reads it here
instead of in the control store.

A node is *armed* once its agent (`NodeGateAgent`, a small actor pinned to the node) has
registered in Ray's control store, copied the cancels recorded there into files, and
written ``ARMED``; a task on a node that is not armed claims in the control store instead
(`escher.backends.ray._gate`). A cancel writes the control store first, then asks every
registered agent. Registration comes before the copy, so every cancel either is copied
or reaches the agent: no task can claim on a node that missed its cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Collection, Iterable
from typing import Any

from escher.backends.ray._shrink import NAMESPACE as SHRINK_NAMESPACE
from escher.backends.ray._shrink import marker_key
from escher.backends.ray._state import is_node_id, kv_client, node_affinity

#: The control-store namespace where agents register (key: prefix + node id).
REGISTRY = b"escher-gate-nodes"
#: Written once a node is armed.
ARMED = "ARMED"
#: What a cancel writes: the content of its file (a claim's is empty), and its value in
#: the control store (a claim there writes the node id, in hex).
CANCELLED = b"-"
#: The control-store namespace of claims on nodes not armed, and of cancels.
STORE_NAMESPACE = b"escher-gate"
#: The node's copy of its marker of pending shrinks (absent: none).
SHRINK_MARKER = "shrink-marker.json"
#: Seconds the control actor waits for an agent to take a marker (a dead node's never does).
COPY_TIMEOUT = 10.0

_armed: set[str] = set()  # node folders this process saw armed (it never goes back)
_made: dict[tuple[str, str], str] = {}  # (node folder, session) -> its folder, made, + "/"
_markers: dict[str, str] = {}  # node folder -> the path of its marker copy
_NONE: frozenset[str] = frozenset()


def root() -> str:
    """Where the gate's files live on this node: memory-backed ``/dev/shm`` if writable."""
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    return os.path.join(base, f"escher-gate-{os.getuid()}")


def node_dir(prefix: str, node: str) -> str:
    """The gate folder of `node` for backends with `prefix`."""
    return os.path.join(root(), prefix, node)


def _create(path: str, content: bytes = b"") -> bool:
    """Create `path` exclusively (with `content`); False if it exists."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False
    try:
        if content:
            os.write(fd, content)
    finally:
        os.close(fd)
    return True


def shrinks_here(folder: str) -> frozenset[str] | None:
    """Worker side: the Ray names with a pending shrink on this node, from the node's copy
    of its marker; None if the node is not armed (read the control store instead)."""
    if not _is_armed(folder):
        return None
    marker = _markers.get(folder)
    if marker is None:
        marker = _markers[folder] = os.path.join(folder, SHRINK_MARKER)
    if not os.access(marker, os.F_OK):  # nearly always: no Python exception to build
        return _NONE
    try:
        with open(marker) as f:
            return frozenset(json.load(f))
    except FileNotFoundError:  # removed meanwhile
        return _NONE


def _is_armed(folder: str) -> bool:
    if folder in _armed:
        return True
    if not os.path.exists(os.path.join(folder, ARMED)):
        return False
    _armed.add(folder)
    return True


def claim_here(folder: str, session: str, task_id: str) -> bool | None:
    """Worker side: claim attempt `task_id` in this node's gate `folder`. True if claimed,
    False if it was cancelled, None if the node is not armed (claim in the control store)."""
    if not _is_armed(folder):
        return None
    here = _made.get((folder, session))
    if here is None:
        here = os.path.join(folder, session)
        os.makedirs(here, exist_ok=True)
        here = _made[(folder, session)] = here + os.sep
    return _create(here + task_id)


class NodeGateAgent:
    """The node's side of cancels, start reports and cleanup (wrapped by `ray.remote`,
    pinned to its node, one per prefix and node).

    Args:
        prefix: The backends' resource-name prefix.
        node: The node it runs on.
    """

    def __init__(self, prefix: str, node: str) -> None:
        self._prefix, self._node = prefix, node
        self._dir = node_dir(prefix, node)
        os.makedirs(self._dir, exist_ok=True)
        client = kv_client()
        client.internal_kv_put((prefix + node).encode(), b"1", True, REGISTRY)
        keys = client.internal_kv_keys(prefix.encode(), STORE_NAMESPACE)
        values = client.internal_kv_multi_get(keys, STORE_NAMESPACE) if keys else {}
        cancelled: dict[str, list[str]] = {}
        for key, value in values.items():
            session, _, task_id = key.decode()[len(prefix) :].rpartition(":")
            if value == CANCELLED and session and task_id:
                cancelled.setdefault(session, []).append(task_id)
        for session, task_ids in cancelled.items():
            self.cancel(session, task_ids)
        self.set_shrink_marker(_marker_names(prefix, node))
        _create(os.path.join(self._dir, ARMED))

    def ping(self) -> str:
        """The node it serves."""
        return self._node

    def set_shrink_marker(self, names: list[str]) -> None:
        """Keep the node's copy of its marker: the Ray names with a pending shrink here."""
        path = os.path.join(self._dir, SHRINK_MARKER)
        if not names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return
        spare = path + ".new"
        with open(spare, "w") as f:
            json.dump(sorted(names), f)
        os.replace(spare, path)  # readers see the old copy or the new one, whole

    def cancel(self, session: str, task_ids: Iterable[str]) -> list[str]:
        """Mark attempts cancelled here; the ones already claimed on this node."""
        here = os.path.join(self._dir, session)
        os.makedirs(here, exist_ok=True)
        claimed = []
        for task_id in task_ids:
            path = os.path.join(here, task_id)
            if not _create(path, CANCELLED):
                with open(path, "rb") as f:
                    if f.read() != CANCELLED:
                        claimed.append(task_id)
        return claimed

    def sync(self, session: str, forget: Collection[str]) -> list[str]:
        """Remove the files of settled attempts `forget`; list the attempts of `session`
        that claimed their start here."""
        here = os.path.join(self._dir, session)
        for task_id in forget:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(here, task_id))
        try:
            with os.scandir(here) as found:
                return [f.name for f in found if f.stat().st_size == 0]  # not a cancel's
        except FileNotFoundError:
            return []

    def forget_sessions(self, sessions: Collection[str]) -> None:
        """Remove everything of `sessions` here."""
        for session in sessions:
            shutil.rmtree(os.path.join(self._dir, session), ignore_errors=True)


def agent_name(prefix: str, node: str) -> str:
    """The Ray actor name of `node`'s agent."""
    return f"escher-gate-{prefix}{node}"


def find_agent(prefix: str, node: str, namespace: str | None) -> Any:
    """The handle of `node`'s agent, looked up by name (ValueError if there is none)."""
    import ray

    return ray.get_actor(agent_name(prefix, node), namespace=namespace)


def registered(prefix: str) -> list[str]:
    """Nodes whose agent registered (some may have died since). Only node ids follow the
    prefix: another prefix that starts with this one is not mistaken for it."""
    cut = len(prefix)
    found = (k.decode()[cut:] for k in kv_client().internal_kv_keys(prefix.encode(), REGISTRY))
    return [node for node in found if is_node_id(node)]


def unregister(prefix: str, node: str) -> None:
    """Drop a dead node's registration."""
    kv_client().internal_kv_del((prefix + node).encode(), False, REGISTRY)


def agent_options(name: str, namespace: str | None, node: str) -> dict[str, Any]:
    """`ray.remote(...).options` for an agent: detached, restarted if it dies, on `node`."""
    return {
        "name": name,
        "namespace": namespace,
        "lifetime": "detached",
        "get_if_exists": True,
        "num_cpus": 0,
        "max_restarts": -1,
        "max_task_retries": -1,
        "scheduling_strategy": node_affinity(node, soft=False),
    }


def _marker_names(prefix: str, node: str) -> list[str]:
    """The Ray names in `node`'s marker of pending shrinks in the control store."""
    raw = kv_client().internal_kv_get(marker_key(prefix, node), SHRINK_NAMESPACE)
    return sorted(json.loads(raw)) if raw else []


_agents: dict[tuple[str, str], Any] = {}  # (prefix, node) -> handle, in the control actor


async def copy_markers(prefix: str, changed: dict[str, list[str]], namespace: str | None) -> None:
    """Control actor: send each changed marker (node -> Ray names) to the node's agent and
    wait until it took it. A node without an agent needs none (its tasks read the control
    store); one whose agent does not answer within `COPY_TIMEOUT` is taken for dead."""

    calls = []
    for node, names in changed.items():
        if not kv_client().internal_kv_get((prefix + node).encode(), REGISTRY):
            continue
        try:
            handle = _agents.get((prefix, node))
            if handle is None:
                handle = find_agent(prefix, node, namespace)
                _agents[(prefix, node)] = handle
            calls.append(handle.set_shrink_marker.remote(names))
        except Exception:
            _agents.pop((prefix, node), None)
    if calls:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), COPY_TIMEOUT)
