"""The task handle as backends drive it: waiters from many threads, callbacks, settling once;
requests checked once."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from escher.core.errors import ValidationError
from escher.core.task import StatusCode, TaskRef, TaskSpec, TaskState, request_of


def _noop() -> None:
    return None


class _Driven(TaskRef):
    """A handle a test drives by hand, as a backend would (a subclass may be waited on)."""


def test_every_waiter_wakes_once_the_handle_settles() -> None:
    ref = _Driven(TaskSpec(_noop))
    seen: list[Any] = []
    lock = threading.Lock()

    def wait(timeout: float | None) -> None:
        value = ref.result(timeout)
        with lock:
            seen.append(value)

    waiters = [threading.Thread(target=wait, args=(t,)) for t in (None, 60.0) * 8]
    for thread in waiters:
        thread.start()
    assert ref.wait(0.01) is False  # nobody settled it yet
    assert ref.set_running("n1")
    assert ref.status.code is StatusCode.SCHEDULED and ref.node_id == "n1"
    assert ref.set_result(42)
    assert not ref.set_exception(RuntimeError("late"))  # settled once
    for thread in waiters:
        thread.join(60.0)
    assert seen == [42] * 16
    assert ref.state is TaskState.FINISHED and ref.wait(0) is True


def test_callbacks_run_once_before_or_after_settling() -> None:
    ref = _Driven(TaskSpec(_noop))
    calls: list[str] = []
    ref.add_done_callback(lambda r: calls.append(f"early {r.state.value}"))
    assert ref.set_cancelled()
    assert not ref.set_result(1)
    ref.add_done_callback(lambda r: calls.append(f"late {r.state.value}"))
    assert calls == ["early cancelled", "late cancelled"]
    assert ref.cancel() is True  # already cancelled: it never runs


def test_equal_plain_requests_share_one_checked_resources() -> None:
    first = request_of({"CPU": 0.5, "grp": 1})
    assert request_of({"CPU": 0.5, "grp": 1}) is first
    assert request_of({"CPU": 1}) is request_of({"CPU": 1.0})
    # a bool equals 1 but is no quantity: refused every time, never served from the table
    for _ in range(2):
        with pytest.raises(ValidationError, match="must be a number"):
            request_of({"CPU": True})
    with pytest.raises(ValidationError, match="resources: quantity of 'CPU' must be >= 0"):
        request_of({"CPU": -1})
    with pytest.raises(ValidationError, match=r"^limits: "):
        request_of({"CPU": float("nan")}, "limits")


def test_the_final_hook_runs_once_before_callbacks_and_is_dropped() -> None:
    ref = TaskRef(TaskSpec(fn=len))
    seen: list[str] = []
    ref._on_final = lambda r: seen.append(f"hook {r.state.value}")
    ref.add_done_callback(lambda r: seen.append("callback"))
    assert ref.set_result(1)
    assert not ref.set_exception(RuntimeError("late"))
    assert seen == ["hook finished", "callback"]
    assert ref._on_final is None  # a settled handle keeps no reference to its backend


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_gets_handle_locks_of_its_own() -> None:
    import escher.core.task as task_module

    held = task_module._HANDLE_LOCKS
    for lock in held:  # as if other threads held every shared lock at the fork
        lock.acquire()
    try:
        pid = os.fork()
        if pid == 0:  # the child: a new handle must not wait on a lock no one will release
            ref = TaskRef(TaskSpec(fn=len))
            os._exit(0 if ref.set_result(1) and ref.result(1.0) == 1 else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        for lock in held:
            lock.release()


def test_task_states_hash_by_identity_and_survive_a_round_trip() -> None:
    import pickle

    from escher.core.task import TaskState

    states = {state: state.value for state in TaskState}
    for state in TaskState:
        again = pickle.loads(pickle.dumps(state))
        assert again is state and states[again] == state.value
        assert TaskState(state.value) is state
        assert state.final == (state in {TaskState.FINISHED, TaskState.FAILED, TaskState.CANCELLED})
