"""The backend contract: capability checks, the one retry rule, the handle's backend API."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from escher.backends.base import Backend, Capability
from escher.core.clock import Clock, RealClock
from escher.core.cluster import ClusterState
from escher.core.errors import InvalidBackendError, TaskCancelledError
from escher.core.nodespec import NodeSpec
from escher.core.task import RetryCause, TaskRef, TaskSpec, TaskState, retry_allowed


class _Minimal(Backend):
    """The least a backend implements: one label table, no tasks."""

    name = "minimal"

    def __init__(self) -> None:
        self.writes: list[tuple[str, float, str]] = []

    @property
    def clock(self) -> Clock:
        return RealClock()

    def _set_resource(self, label: str, capacity: float, spec: NodeSpec) -> Sequence[str]:
        nodes = [spec.node_id] if spec.node_id else ["n1", "n2"]
        self.writes += [(label, capacity, node) for node in nodes]
        return nodes

    def get_cluster_state(self) -> ClusterState:
        return ClusterState({})

    def _launch(self, spec: TaskSpec) -> TaskRef:
        raise NotImplementedError

    def current_node_id(self) -> str | None:
        return None


def test_a_capability_needs_its_methods() -> None:
    with pytest.raises(InvalidBackendError, match=r"ATOMIC_GANG.*_launch_gang"):

        class ClaimsGangs(_Minimal):
            capabilities = Capability.ATOMIC_GANG

    with pytest.raises(InvalidBackendError, match="add_node, remove_node"):

        class ClaimsMembership(_Minimal):
            capabilities = Capability.NODE_MEMBERSHIP | Capability.FRACTIONAL


def test_bulk_default_selects_once_then_writes_by_node() -> None:
    backend = _Minimal()
    assert backend.set_resources({"b": 2, "a": 1}, {"x": 1}) == ("n1", "n2")
    assert backend.writes == [("a", 1, "n1"), ("a", 1, "n2"), ("b", 2, "n1"), ("b", 2, "n2")]


@pytest.mark.parametrize(
    ("max_retries", "retry_exceptions", "cause", "so_far", "allowed"),
    [
        (0, False, RetryCause.NODE_LOST, 0, False),
        (2, False, RetryCause.NODE_LOST, 1, True),
        (2, False, RetryCause.NODE_LOST, 2, False),
        (2, False, RetryCause.RAISED, 0, False),
        (2, True, RetryCause.RAISED, 1, True),
        (2, True, RetryCause.RAISED, 2, False),
    ],
)
def test_the_retry_rule(
    max_retries: int, retry_exceptions: bool, cause: RetryCause, so_far: int, allowed: bool
) -> None:
    spec = TaskSpec(len, max_retries=max_retries, retry_exceptions=retry_exceptions)
    assert retry_allowed(spec, so_far, cause) is allowed


def test_handle_backend_api_settles_once() -> None:
    ref = TaskRef(TaskSpec(len, max_retries=1))
    assert ref.set_running("n1") and ref.state is TaskState.RUNNING and ref.attempts == 1
    assert ref.retry(RetryCause.NODE_LOST, "n1 left")
    assert ref.state is TaskState.PENDING and ref.node_id is None and ref.retries == 1
    assert not ref.retry(RetryCause.NODE_LOST, "again")  # the rule says no: nothing changes
    assert ref.state is TaskState.PENDING and ref.retries == 1
    assert ref.set_running("n2") and ref.attempts == 2
    assert ref.set_result(7) and ref.result(0) == 7
    assert not ref.set_exception(ValueError()) and not ref.set_cancelled()
    assert not ref.set_running("n3") and ref.node_id == "n2"


def test_cancelled_handle_refuses_to_start() -> None:
    ref = TaskRef(TaskSpec(len))
    assert ref.set_cancelled()
    assert not ref.set_running("n1") and not ref.started()
    with pytest.raises(TaskCancelledError):
        ref.result(0)


def test_gang_of_names_the_members_while_they_live() -> None:
    from escher.backends.memory import MemoryBackend
    from escher.core.task import TaskSpec

    with MemoryBackend({"n1": {"CPU": 1}}) as backend:
        assert backend.pending_elsewhere() == []
        specs = [TaskSpec(fn=lambda: 1, resources={"grp": 1}) for _ in range(2)]
        refs = backend.launch_gang(specs)  # no node has "grp" yet: waits
        assert backend.gang_of(refs[0]) == tuple(refs)
        refs[0].cancel()
        assert backend.gang_of(refs[1]) == ()
