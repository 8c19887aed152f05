"""The in-memory scheduler's work stays linear with many blocked request shapes.

These count matcher look-ups (the unit of scheduling work), not seconds: a pass that
re-examined every blocked shape (or gang) on every event does O(tasks x shapes) look-ups.
The co-location workload of the ESL bench is checked in tests/esl/test_colocation.py.
"""

from __future__ import annotations

from collections import Counter

from escher.backends.memory import MemoryBackend
from escher.core.resources import Resources
from escher.core.task import TaskSpec, TaskState


def spec(**kw: object) -> TaskSpec:
    kw["resources"] = Resources(kw.get("resources"))  # type: ignore[arg-type]
    return TaskSpec(lambda: None, **kw)  # type: ignore[arg-type]


def counted(backend: MemoryBackend, method: str) -> Counter[str]:
    """Count calls of one of the backend's (real) matcher/placement methods."""
    calls: Counter[str] = Counter()
    owner = backend._matcher if hasattr(backend._matcher, method) else backend
    real = getattr(owner, method)

    def counting(*args: object, **kwargs: object) -> object:
        calls[method] += 1
        return real(*args, **kwargs)

    setattr(owner, method, counting)
    return calls


def test_labels_created_later_wake_only_their_waiters() -> None:
    backend = MemoryBackend(nodes={"a": {"CPU": 2}, "b": {"CPU": 2}}, virtual_clock=True)
    waiting = [backend.launch(spec(resources={f"later-{i}": 1})) for i in range(300)]
    finds = counted(backend, "find")
    for i in range(300):
        backend.set_resource(f"later-{i}", 1, "a" if i % 2 else "b")
    backend.run()
    assert all(ref.state is TaskState.FINISHED for ref in waiting)
    assert finds["find"] <= 2 * 300, finds


def test_waiting_gangs_of_one_shape_are_tried_once_per_pass() -> None:
    backend = MemoryBackend(nodes={f"n{i}": {"CPU": 2} for i in range(4)}, virtual_clock=True)
    fits = counted(backend, "_fit_gang")
    gangs = [
        backend.launch_gang([spec(resources={"CPU": 1}, duration=1.0)] * 4) for _ in range(200)
    ]
    backend.run()
    assert all(ref.state is TaskState.FINISHED for gang in gangs for ref in gang)
    # one try per gang placed plus one failed head per pass (launches and completions)
    assert fits["_fit_gang"] <= 200 + 200 + 800 + 10, fits
