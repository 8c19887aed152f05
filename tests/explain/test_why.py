"""`escher.why` on the memory backend: each verdict, in the user's terms."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest

import escher
from escher.backends.base import PendingTask
from escher.backends.memory import MemoryBackend
from escher.core.errors import ValidationError
from escher.core.resources import Resources
from escher.esl import CoLocation, QueueingPolicy
from escher.explain import Verdict, why, why_all, why_request
from escher.explain._analysis import minimal_hitting_set


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def _hold(event: threading.Event) -> None:
    event.wait(30)


def test_never_names_the_request_and_every_nodes_total() -> None:
    with escher.init(nodes={"n1": {"CPU": 4}, "n2": {"CPU": 2}}):
        ref = escher.launch(lambda: 1, resources={"CPU": 8})
        result = escher.why(ref)
    assert result.verdict is Verdict.NEVER and result.exit_code == 4
    assert result.conflict is not None
    assert [r.resource for r in result.conflict.requirements] == ["CPU"]
    assert "no node has CPU 8 in total" in result.summary
    assert result.breakdown.summary() == "0/2 nodes are available: 2 Insufficient CPU."


def test_blocked_by_a_group_label_and_cpu_in_use(release: threading.Event) -> None:
    with escher.init(nodes={"n1": {"CPU": 2}, "n2": {"CPU": 2}, "n3": {"CPU": 2}}):
        colo = CoLocation(name="colo", retry_interval=60)
        ps = colo.group("ps", 2, {"CPU": 1})
        first = ps.launch(_hold, release)
        other = escher.launch(_hold, release, resources={"CPU": 1})
        assert first.node_id == other.node_id == "n1"
        second = ps.launch(lambda: 1, resources={"CPU": 2})
        result = escher.why(second)
    assert result.verdict is Verdict.BLOCKED and result.exit_code == 2
    conflict = result.conflict
    assert conflict is not None
    assert {r.source for r in conflict.requirements} == {
        "your request",
        "CoLocation('colo').group('ps')",
    }
    assert not conflict.frees_up  # n2 and n3 never get the label: the group is on n1
    summary = result.breakdown.summary()
    assert summary.startswith("0/3 nodes are available: 2 lacks label ")
    assert "(CoLocation('colo').group('ps')), 1 Insufficient CPU." in summary
    assert "drop any one" in result.render()


def test_waiting_for_a_group_that_waits_for_room(release: threading.Event) -> None:
    with escher.init(nodes={"n1": {"CPU": 2}, "n2": {"CPU": 2}}):
        busy = escher.launch(_hold, release, resources={"CPU": 1})
        assert busy.started()
        colo = CoLocation(name="colo", retry_interval=60)
        group = colo.group("pair", 2, {"CPU": 1})  # n1 has 1 free: goes to n2
        waiting = colo.group("trio", 2, {"CPU": 1})  # needs 2 free: none left
        group.launch(_hold, release)
        ref = waiting.launch(lambda: 1)
        result = escher.why(ref)
    assert result.verdict is Verdict.WAITING and result.exit_code == 1
    (wait,) = result.waiting
    assert wait.kind == "group" and wait.source == "CoLocation('colo').group('trio')"
    assert "{'CPU': 2}" in wait.text and "nodes are available" in wait.text


def test_waiting_for_a_users_quota(release: threading.Event) -> None:
    with escher.init(nodes={"n1": {"CPU": 1}}):
        queue = QueueingPolicy("fifo", name="q")
        first = queue.submit(_hold, release, user="ann", resources={"CPU": 1})
        deadline = time.monotonic() + 10
        while not first.started() and time.monotonic() < deadline:  # the policy's first cycle
            time.sleep(0.01)
        assert first.started()
        second = queue.submit(lambda: 1, user="ann", resources={"CPU": 1})
        result = escher.why(second)
    assert result.verdict is Verdict.BLOCKED  # the one CPU is busy: it waits for room
    assert result.conflict is not None and result.conflict.frees_up
    (quota,) = result.waiting  # and the policy says where it stands in ann's queue
    assert quota.kind == "quota" and "user 'ann': 1 of 1 queued" in quota.text
    assert any(p["source"] == "QueueingPolicy('q')" for p in result.policies)


def test_placeable_request_and_running_task() -> None:
    with escher.init(nodes={"n1": {"CPU": 2}}) as backend:
        result = why_request({"CPU": 1})
        assert result.verdict is Verdict.PLACEABLE and result.exit_code == 0
        assert result.breakdown.summary() == "1/1 nodes are available."
        ref = escher.launch(lambda: 1, resources={"CPU": 1})
        ref.result(10)
        done = why(ref, backend=backend)
    assert done.verdict is Verdict.NOT_PENDING
    assert json.loads(json.dumps(done.to_dict()))["verdict"] == "not_pending"


def test_gang_member_waits_for_the_rest_of_its_gang(release: threading.Event) -> None:
    from escher.core.task import TaskSpec

    with escher.init(nodes={"n1": {"CPU": 2}, "n2": {"CPU": 1}}) as backend:
        busy = escher.launch(_hold, release, resources={"CPU": 1})
        assert busy.node_id == "n1"
        members = backend.launch_gang([TaskSpec(fn=lambda: 1, resources={"CPU": 1})] * 3)
        result = why(members[0])
    assert result.verdict is Verdict.PLACEABLE
    gang = [w for w in result.waiting if w.kind == "gang"]
    assert gang and "2 of 3 members fit at once" in gang[0].text


def test_an_unowned_label_is_named_with_what_to_do() -> None:
    with escher.init(nodes={"n1": {"CPU": 2}}):
        ref = escher.launch(lambda: 1, resources={"CPU": 1, "fast-disk": 1})
        result = escher.why(ref)
        ref.cancel()
    assert result.verdict is Verdict.BLOCKED
    assert "escher.set_resource" in result.summary
    assert result.breakdown.summary() == "0/1 nodes are available: 1 lacks label fast-disk."


def test_why_all_and_other_sessions_tasks() -> None:
    class Shared(MemoryBackend):
        def pending_elsewhere(self) -> list[PendingTask]:
            facts = {"pod": "escher-x-1", "namespace": "ns", "scheduler_message": "0/1 nodes"}
            return [PendingTask("p-1", "x", Resources({"CPU": 9}), "other", facts)]

    with escher.init(Shared({"n1": {"CPU": 1}})) as backend:
        ref = escher.launch(lambda: 1, resources={"CPU": 1, "later": 1})
        results = why_all()
        ref.cancel()
        assert not why_all(backend, elsewhere=False)
    assert [r.task["id"] for r in results] == [ref.id, "p-1"]
    foreign = results[1]
    assert foreign.verdict is Verdict.NEVER
    assert foreign.facts["pod"] == "escher-x-1"
    assert "scheduler message: 0/1 nodes" in foreign.render()


def test_bad_handle_is_a_clear_error() -> None:
    with escher.init(nodes={"n1": {"CPU": 1}}), pytest.raises(ValidationError, match="TaskRef"):
        why("t1")  # type: ignore[arg-type]


def test_minimal_hitting_set_is_smallest_and_minimal() -> None:
    sets = [frozenset("a"), frozenset("bc"), frozenset("cd")]
    assert minimal_hitting_set(sets) == ["c", "a"]
    big = [frozenset({f"x{i}", f"y{i}"}) for i in range(30)]  # forces the greedy path
    chosen = minimal_hitting_set(big)
    assert len(chosen) == 30
    for name in chosen:
        rest = set(chosen) - {name}
        assert not all(group & rest for group in big)
