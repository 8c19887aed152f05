"""Plan, verify, then run the docs pages' apps whose promises are about time: signals and
barriers, queues, queueing policies, deadlines, a dynamic `LoadBalance`. What a plan can
prove is proven; what it cannot (an order, a rate, a deadline, a cap that changes) is said
in the planning run's warnings, and the same code then runs to completion."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import escher
from escher import esl
from escher.backends.memory import MemoryBackend
from escher.core.cluster import ClusterState
from escher.esl import DeadlineJob, DeadlineOption, PlanAhead, QueueingPolicy, check_deadlines
from escher.verify import Verdict, verify

NODES = {
    "gpu": {"resources": {"CPU": 4, "GPU": 1}, "labels": {"type": "gpu"}},
    "cpu": {"resources": {"CPU": 8}, "labels": {"type": "cpu"}},
}
STATE = ClusterState.from_dict(
    {"nodes": [{"id": n, "total": v["resources"], "labels": v["labels"]} for n, v in NODES.items()]}
)
OPTIONS = (
    DeadlineOption({"GPU": 1}, 10, {"type": "gpu"}),
    DeadlineOption({"CPU": 4}, 30, {"type": "cpu"}),
)


#: The ESLs of the apps: an ESL that is dropped cleans up its labels, so the running app's
#: ESLs are kept until the test reads its tasks.
KEEP: list[Any] = []


def signals() -> list[escher.TaskRef]:
    sig = esl.Signals(name="sig")
    KEEP.append(sig)
    loaded = sig.event("loaded")
    train = loaded.waiter.launch(lambda: "trained", resources={"CPU": 1})
    load = loaded.setter.launch(lambda: "loaded", resources={"CPU": 1})
    return [train, load]


def barrier() -> list[escher.TaskRef]:
    gate = esl.Barrier(2, name="gate")
    KEEP.append(gate)
    parties = [gate.launch(lambda: "party", resources={"CPU": 1}) for _ in range(2)]
    return [*parties, gate.after.launch(lambda: "after", resources={"CPU": 1})]


def task_queue() -> list[escher.TaskRef]:
    queue = esl.TaskQueue(name="q")  # paused
    KEEP.append(queue)
    refs = [queue.launch(lambda: 1, resources={"CPU": 1}) for _ in range(5)]
    queue.set_rate(1)
    return refs


def drf() -> list[escher.TaskRef]:
    policy = QueueingPolicy("drf", name="drf")
    KEEP.append(policy)
    return [policy.submit(lambda: 1, user=u, resources={"CPU": 1}) for u in ("ann", "bob") * 3]


def dynamic_balance() -> list[escher.TaskRef]:
    lb = esl.LoadBalance(dynamic=True, interval=0.05, name="lb")
    KEEP.append(lb)
    return [lb.launch(lambda: 1, resources={"CPU": 1}) for _ in range(2)]


APPS: list[tuple[Callable[[], list[escher.TaskRef]], str]] = [
    (signals, "start after the tasks that set"),
    (barrier, "start after the tasks that set"),
    (task_queue, "its rate bounds how many"),
    (drf, "admission is decided by its cycles"),
    (dynamic_balance, "its monitor adjusts the cap"),
]


@pytest.mark.parametrize(("app", "said"), APPS, ids=[a.__name__ for a, _ in APPS])
def test_what_a_plan_cannot_prove_is_said_and_the_code_runs(
    app: Callable[[], list[escher.TaskRef]], said: str
) -> None:
    run = esl.plan_app(app, STATE)
    assert any(said in w for w in run.warnings), run.warnings
    result = verify(run.plan, STATE, timeout=30)
    assert result.status is Verdict.FEASIBLE, result.render()
    assert all(r.status.value == "proven" for r in result.intents), result.render()
    with escher.init(MemoryBackend(nodes=NODES)):
        with esl.follow(run.plan, result):
            refs = app()
        assert len(escher.get(refs, timeout=20)) == len(refs)
        placed = {ref.node_id for ref in refs}
        assert placed <= set(NODES)
    KEEP.clear()


def test_a_deadline_job_is_planned_with_its_options_as_alternatives() -> None:
    def jobs() -> list[Any]:
        policy = PlanAhead(name="deadlines")
        KEEP.append(policy)
        return [policy.submit(DeadlineJob(f"j{i}", 40, OPTIONS), len, []) for i in range(3)]

    run = esl.plan_app(jobs, STATE)
    assert [(t.name, dict(t.resources), t.fallbacks, t.concurrent) for t in run.plan.tasks] == [
        (f"j{i}", {"GPU": 1.0}, ({"CPU": 4.0},), False) for i in range(3)
    ]
    assert any("check_deadlines" in w for w in run.warnings)
    assert verify(run.plan, STATE, timeout=30).feasible
    # what the plan leaves to check_deadlines: the same jobs meet their deadlines
    assert (
        check_deadlines([DeadlineJob(f"j{i}", 40, OPTIONS) for i in range(3)], STATE).verdict
        is Verdict.FEASIBLE
    )
    backend = MemoryBackend(nodes=NODES, virtual_clock=True)
    with escher.init(backend):
        handles = jobs()
        backend.run()
        assert all(h.ref is not None and h.ref.done() for h in handles)
