"""The start gate on a real Ray: a cancel wins only before the claim, on a node's own files
and in the control store alike; a node armed late copies the cancels made before; what
settled attempts leave is removed; gc removes what ended sessions left, and only that."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from typing import Any

import pytest

ray = pytest.importorskip("ray")

import escher  # noqa: E402
from escher.backends.ray._gate import NAMESPACE, Gate, NodeAgents, claim  # noqa: E402
from escher.backends.ray._nodegate import (  # noqa: E402
    ARMED,
    claim_here,
    node_dir,
    registered,
    shrinks_here,
)
from escher.backends.ray._shrink import NAMESPACE as SHRINK_NAMESPACE  # noqa: E402
from escher.backends.ray._shrink import marker_key  # noqa: E402
from escher.backends.ray._state import kv_client  # noqa: E402
from escher.core.resources import Resources  # noqa: E402
from escher.core.task import TaskSpec, TaskState  # noqa: E402
from escher.testing.conformance import wait_until  # noqa: E402

pytestmark = pytest.mark.ray
WAIT = 60.0


def _alive_nodes() -> list[str]:
    return sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))


def _fresh_prefix() -> str:
    return f"gate{uuid.uuid4().hex[:8]}_"


def _armed(prefix: str, nodes: list[str]) -> bool:
    return all(os.path.exists(os.path.join(node_dir(prefix, n), ARMED)) for n in nodes)


def _task_ids(n: int) -> list[str]:
    return [uuid.uuid4().hex for _ in range(n)]


@pytest.fixture
def agents(ray_cluster: Any) -> Any:
    """Node agents of a prefix of their own, every node armed."""
    prefix = _fresh_prefix()
    nodes = _alive_nodes()
    agents = NodeAgents(prefix, "escher-tests", WAIT)
    agents.ensure(nodes)
    assert wait_until(lambda: _armed(prefix, nodes), timeout=WAIT)
    yield prefix, nodes, agents
    shutil.rmtree(os.path.dirname(node_dir(prefix, nodes[0])), ignore_errors=True)


def test_a_cancel_wins_only_before_the_claim_on_the_nodes_files(agents: Any) -> None:
    prefix, nodes, handles = agents
    session = f"s-{uuid.uuid4().hex[:8]}"
    gate = Gate(prefix, session, handles, WAIT)
    cancelled_first, claimed_first = _task_ids(2)
    folder = node_dir(prefix, nodes[0])
    try:
        assert gate.cancel([cancelled_first]) == {cancelled_first}
        assert claim_here(folder, session, cancelled_first) is False  # never runs
        assert claim_here(folder, session, claimed_first) is True
        assert claim_here(folder, session, claimed_first) is False  # claimed once only
        assert gate.cancel([claimed_first]) == set()  # started: too late
        assert gate.cancel([cancelled_first]) == {cancelled_first}  # again: no change
        started = gate.started({})
        assert started[claimed_first] == nodes[0]
    finally:
        gate.forget_session()
    assert gate.started({}) == {}


def test_a_cancel_wins_only_before_the_claim_in_the_control_store(agents: Any) -> None:
    prefix, _, handles = agents
    session = f"s-{uuid.uuid4().hex[:8]}"
    gate = Gate(prefix, session, handles, WAIT)
    cancelled_first, claimed_first = _task_ids(2)
    try:
        assert gate.cancel([cancelled_first]) == {cancelled_first}
        assert claim(prefix, f"{session}:{cancelled_first}", "n1", WAIT) is False
        assert claim(prefix, f"{session}:{claimed_first}", "n2", WAIT) is True
        assert claim(prefix, f"{session}:{claimed_first}", "n3", WAIT) is False
        assert gate.cancel([claimed_first]) == set()
        assert gate.started({})[claimed_first] == "n2"
    finally:
        gate.forget_session()


def test_racing_claims_and_cancels_have_one_winner_each(agents: Any) -> None:
    prefix, nodes, handles = agents
    session = f"s-{uuid.uuid4().hex[:8]}"
    gate = Gate(prefix, session, handles, WAIT)
    task_ids = _task_ids(200)
    claimed: set[str] = set()

    def claims() -> None:
        for i, task_id in enumerate(task_ids):
            folder = node_dir(prefix, nodes[i % len(nodes)])
            if claim_here(folder, session, task_id):
                claimed.add(task_id)

    claimer = threading.Thread(target=claims)
    claimer.start()
    never: set[str] = set()
    for i in range(0, len(task_ids), 20):
        never |= gate.cancel(task_ids[i : i + 20])
    claimer.join()
    try:
        assert not never & claimed  # a cancelled attempt never claimed its start
        assert never | claimed == set(task_ids)  # each one either ran or was cancelled
    finally:
        gate.forget_session()


def test_a_node_armed_late_holds_the_cancels_made_before(ray_cluster: Any) -> None:
    prefix = _fresh_prefix()
    node = _alive_nodes()[0]
    session = f"s-{uuid.uuid4().hex[:8]}"
    agents = NodeAgents(prefix, "escher-tests", WAIT)
    gate = Gate(prefix, session, agents, WAIT)
    before, after = _task_ids(2)
    try:
        assert not registered(prefix)
        assert gate.cancel([before]) == {before}  # no node armed: the control store holds it
        folder = node_dir(prefix, node)
        assert claim_here(folder, session, before) is None  # not armed: claim in the store
        agents.ensure([node])
        assert wait_until(lambda: _armed(prefix, [node]), timeout=WAIT)
        assert claim_here(folder, session, before) is False  # the cancel was copied
        assert claim_here(folder, session, after) is True
    finally:
        gate.forget_session()
        shutil.rmtree(os.path.dirname(node_dir(prefix, node)), ignore_errors=True)


def test_a_node_armed_late_copies_its_pending_shrinks(ray_cluster: Any) -> None:
    prefix = _fresh_prefix()
    node = _alive_nodes()[0]
    folder = node_dir(prefix, node)
    key = marker_key(prefix, node)
    marker = {f"{prefix}grp": [0.0, time.time()]}  # recorded before the node was armed
    kv_client().internal_kv_put(key, json.dumps(marker).encode(), True, SHRINK_NAMESPACE)
    try:
        assert shrinks_here(folder) is None  # not armed: tasks read the control store
        NodeAgents(prefix, "escher-tests", WAIT).ensure([node])
        assert wait_until(lambda: _armed(prefix, [node]), timeout=WAIT)
        assert shrinks_here(folder) == {f"{prefix}grp"}
    finally:
        kv_client().internal_kv_del(key, False, SHRINK_NAMESPACE)
        shutil.rmtree(os.path.dirname(folder), ignore_errors=True)


def _block_until(path: str) -> str:
    deadline = time.monotonic() + WAIT
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return escher.node_id()


def _quick() -> str:
    return escher.node_id()


def _session_files(backend: Any) -> list[str]:
    found = []
    for node in _alive_nodes():
        here = os.path.join(node_dir(backend.prefix, node), backend.session_id)
        if os.path.isdir(here):
            found += os.listdir(here)
    return found


def _session_keys(backend: Any) -> list[bytes]:
    full = f"{backend.prefix}{backend.session_id}:".encode()
    return list(kv_client().internal_kv_keys(full, NAMESPACE))


def test_what_settled_attempts_leave_is_removed(ray_backend: Any, tmp_path: Any) -> None:
    backend, release = ray_backend, tmp_path / "release"
    nodes = [n for n in _alive_nodes() if n in backend.get_cluster_state().nodes]
    assert wait_until(lambda: _armed(backend.prefix, nodes), timeout=WAIT)
    done = [backend.launch(TaskSpec(_quick, resources=Resources({"CPU": 0.1}))) for _ in range(20)]
    escher.get(done, timeout=WAIT)
    cpus = ray.cluster_resources().get("CPU", 0)  # Ray's own count: every CPU is taken
    blockers = [
        backend.launch(
            TaskSpec(_block_until, args=(str(release),), resources=Resources({"CPU": 1}))
        )
        for _ in range(int(cpus))
    ]
    assert wait_until(lambda: all(b.started() for b in blockers), timeout=WAIT)
    # Launched once every CPU is taken (Ray does not start tasks of different functions
    # in launch order): they wait in Ray's queue, submitted, and never start.
    waiting = [backend.launch(TaskSpec(_quick, resources=Resources({"CPU": 1}))) for _ in range(4)]
    said = [w.cancel() for w in waiting]
    assert all(said), [(ok, w.state, w.status) for ok, w in zip(said, waiting, strict=True)]
    release.touch()
    escher.get(blockers, timeout=WAIT)
    assert all(w.state is TaskState.CANCELLED for w in waiting)
    # Claims, the cancels' marks on every node and in the control store: all removed.
    assert wait_until(lambda: not _session_files(backend), timeout=WAIT)
    assert wait_until(lambda: not _session_keys(backend), timeout=WAIT)


def test_gc_removes_the_start_gate_keys_and_files_of_ended_sessions_only(
    ray_backend: Any,
) -> None:
    backend = ray_backend
    prefix, live = backend.prefix, backend.session_id
    ended = f"ended-{uuid.uuid4().hex[:8]}"
    ray.get(backend.control().end.remote(ended), timeout=WAIT)  # its lease is over
    agents = NodeAgents(prefix, backend._config.namespace, WAIT)
    node = next(iter(backend.get_cluster_state().nodes))
    folder = node_dir(prefix, node)
    assert wait_until(lambda: _armed(prefix, [node]), timeout=WAIT)
    ended_id, live_id = _task_ids(2)
    assert claim(prefix, f"{ended}:{ended_id}", "n", WAIT)
    assert claim(prefix, f"{live}:{live_id}", "n", WAIT)
    assert claim_here(folder, ended, ended_id) and claim_here(folder, live, live_id)
    ended_gate, live_gate = Gate(prefix, ended, agents, WAIT), Gate(prefix, live, agents, WAIT)
    try:
        backend.collect_garbage(dry_run=True)
        assert ended_id in ended_gate.started({})
        backend.collect_garbage()
        assert ended_gate.started({}) == {}
        assert not os.path.exists(os.path.join(folder, ended))
        assert live_id in live_gate.started({})
        assert os.path.exists(os.path.join(folder, live, live_id))
    finally:
        live_gate.forget([live_id])
        live_gate.started({node: [live_id]})
