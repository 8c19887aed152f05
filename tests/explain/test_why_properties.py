"""Properties of `why` on generated live states of the memory backend.

Each example builds a cluster (nodes with CPUs, ephemeral labels on some of them, running
tasks that hold part of it) and a request, then checks what `why` says by acting on it:

* PLACEABLE: launching the request starts it at once;
* BLOCKED and NEVER: the conflict is a real conflict (a task requesting only its
  requirements does not start) and minimal: dropping any requirement, a task requesting the
  rest starts at once; dropping any node's capacity, that node fits the requirements.
"""

from __future__ import annotations

import threading

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from escher.backends.memory import MemoryBackend
from escher.core.resources import Resources
from escher.core.task import TaskSpec
from escher.explain import Verdict, why_request

LABELS = ("la", "lb", "lc")


@st.composite
def live_states(draw: st.DrawFn) -> dict[str, object]:
    count = draw(st.integers(1, 4))
    nodes = {
        f"n{i}": {"CPU": draw(st.integers(1, 4)), "GPU": draw(st.integers(0, 1))}
        for i in range(count)
    }
    labels = [
        (label, node, draw(st.integers(1, 2)))
        for label in LABELS
        for node in nodes
        if draw(st.booleans())
    ]
    names = ["CPU", "GPU", *LABELS]
    vector = st.dictionaries(st.sampled_from(names), st.integers(1, 3), max_size=3)
    running = draw(st.lists(vector, max_size=5))
    request = draw(vector.filter(bool))
    return {"nodes": nodes, "labels": labels, "running": running, "request": request}


def _starts(backend: MemoryBackend, request: dict[str, float]) -> bool:
    """Launch a task requesting `request`: did it start at once? (It is then let finish.)"""
    ref = backend.launch(TaskSpec(fn=lambda: None, resources=request))
    started = ref.started()
    if started:
        ref.result(10)
    else:
        ref.cancel()
    return started


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(live_states())
def test_why_is_acted_on(case: dict[str, object]) -> None:
    release = threading.Event()
    backend = MemoryBackend(case["nodes"])  # type: ignore[arg-type]
    try:
        for label, node, capacity in case["labels"]:  # type: ignore[attr-defined]
            backend.set_resource(label, capacity, node)
        for request in case["running"]:  # type: ignore[attr-defined]
            ref = backend.launch(TaskSpec(fn=release.wait, args=(30,), resources=request))
            if not ref.started():
                ref.cancel()
        request = case["request"]
        assert isinstance(request, dict)
        result = why_request(request, backend=backend)
        if result.verdict is Verdict.PLACEABLE:
            assert _starts(backend, request)
            return
        assert result.verdict in (Verdict.BLOCKED, Verdict.NEVER)
        assert not _starts(backend, request)
        conflict = result.conflict
        assert conflict is not None and conflict.requirements
        wanted = {r.resource: r.quantity for r in conflict.requirements}
        assert not _starts(backend, wanted), "the conflict's requirements alone must not fit"
        for dropped in wanted:
            rest = {k: v for k, v in wanted.items() if k != dropped}
            if result.verdict is Verdict.BLOCKED:
                assert _starts(backend, rest), f"dropping {dropped} must make it fit"
            else:  # never: the rest fits some node's total
                state = backend.get_cluster_state()
                assert any(Resources(rest).fits_in(n.physical) for n in state.nodes.values())
        # one capacity per node, and it falls short: dropping it frees that node (the
        # node's other shortfalls are not part of the conflict)
        nodes = [c.node for c in conflict.capacities]
        assert sorted(nodes) == sorted(backend.get_cluster_state().nodes)
        for capacity in conflict.capacities:
            assert capacity.resource in wanted
            have = capacity.total if result.verdict is Verdict.NEVER else capacity.available
            assert have + 1e-9 < wanted[capacity.resource]
    finally:
        release.set()
        backend.close()
