"""The task handle as backends drive it: waiters from many threads, callbacks, settling once."""

from __future__ import annotations

import threading
from typing import Any

from escher.core.task import StatusCode, TaskRef, TaskSpec, TaskState


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
