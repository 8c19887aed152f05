"""Gangs of pods: the gated protocol (`launch_gang`) and the ghost-pod fallback.

The test plane (1.20) has no scheduling gates, so the backend picks ghost pods by itself.
The gated protocol is then forced (``scheduling_gates=True``): the server drops the gate, so
members are bound as they come, and everything else of the protocol runs for real against
the apiserver, kube-scheduler and runner pods: no member runs before all are bound (the
runner's barrier), an attempt that cannot be bound whole is rolled back and tried again, and
cancelling a member cancels the gang.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from escher.backends.base import Capability
from escher.core.errors import TaskCancelledError, UnschedulableError, UnsupportedError
from escher.core.resources import Resources
from escher.core.task import TaskSpec
from escher.testing.conformance import where_am_i
from tests.backends.kubernetes.conftest import POOLS

WAIT = 90.0
A, B = sorted(POOLS["conformance"])[:2]


def fresh() -> str:
    return "gang-" + uuid.uuid4().hex[:8]


@pytest.fixture
def gated(k8s_cluster: Any) -> Iterator[Any]:
    backend = k8s_cluster.backend(scheduling_gates=True, gang_timeout=3.0)
    try:
        yield backend
    finally:
        backend.close()


def test_the_plane_has_no_gates_so_gangs_use_ghost_pods(k8s_cluster: Any) -> None:
    backend = k8s_cluster.backend()
    try:
        support = backend.gate_support()
        assert not support.supported and "1.24" in support.reason
        assert not backend.supports(Capability.ATOMIC_GANG)
        assert backend.describe()["gangs"].startswith("ghost pods")
        assert "ATOMIC_GANG" not in backend.describe()["capabilities"]
        with pytest.raises(UnsupportedError, match=r"escher\.esl\.Gang"):
            backend.launch_gang([TaskSpec(where_am_i)])
    finally:
        backend.close()


def test_no_member_runs_until_all_are_bound(gated: Any) -> None:
    label = fresh()
    gated.set_resources({label: 1}, A)
    gated.set_resources({label: 1}, B)
    assert gated.describe()["gangs"].startswith("scheduling gates")
    refs = gated.launch_gang([TaskSpec(where_am_i, resources=Resources({label: 1}))] * 3)
    # Two members can be bound, the third cannot: attempts are rolled back, nothing runs.
    time.sleep(8.0)
    assert not any(ref.started() or ref.done() for ref in refs)
    assert "gang" in refs[0].status.reason
    gated.set_resource(label, 2, A)
    nodes = [ref.result(WAIT) for ref in refs]
    assert nodes.count(A) <= 2 and nodes.count(B) <= 1 and len(nodes) == 3
    gated.set_resources({label: 0}, A)
    gated.set_resources({label: 0}, B)


def test_cancelling_a_member_cancels_the_gang(gated: Any) -> None:
    label = fresh()
    refs = gated.launch_gang([TaskSpec(where_am_i, resources=Resources({label: 1}))] * 2)
    assert refs[1].cancel() is True
    for ref in refs:
        with pytest.raises(TaskCancelledError):
            ref.result(WAIT)
    gated.set_resource(label, 2, A)
    time.sleep(2.0)
    assert not any(ref.started() for ref in refs)
    assert gated.tasks() == []
    gated.set_resource(label, 0, A)


def test_a_member_that_can_never_fit_fails_the_gang(gated: Any) -> None:
    specs = [TaskSpec(where_am_i), TaskSpec(where_am_i, resources=Resources({"CPU": 1e5}))]
    refs = gated.launch_gang(specs)
    for ref in refs:
        with pytest.raises(UnschedulableError, match="never fit"):
            ref.result(WAIT)
        assert not ref.started()


def test_container_tasks_cannot_form_a_gang(gated: Any) -> None:
    with pytest.raises(UnsupportedError, match="Python callables"):
        gated.launch_gang([TaskSpec(None, image="busybox:1.36", command=["true"])])
