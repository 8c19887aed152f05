"""verify(): ESL intent proofs, a broken policy caught, refusal, defaults, bad arguments."""

from __future__ import annotations

import pytest

import escher
from escher import esl
from escher.core.cluster import ClusterState
from escher.core.errors import ValidationError, VerificationError
from escher.core.plan import Colocated, Gang, PinnedTo, Plan, Separated
from escher.verify import (
    IntentStatus,
    Verdict,
    check_placement,
    ensure_feasible,
    intent_violation,
    verify,
)

NODES = {f"n{i}": {"CPU": 4, "GPU": 2 if i < 2 else 0} for i in range(4)}


def state() -> ClusterState:
    return ClusterState.from_dict({"nodes": [{"id": k, "total": v} for k, v in NODES.items()]})


@pytest.fixture
def memory() -> object:
    with escher.init("memory", nodes=NODES) as backend:
        yield backend


@pytest.mark.parametrize(
    "make",
    [
        lambda: esl.AntiAffinity(),
        lambda: esl.AntiAffinity(per_node=2),
        lambda: esl.LoadBalance(tasks=6),
        lambda: esl.AntiAffinity() & esl.LoadBalance(tasks=4),
    ],
    ids=["anti-affinity", "anti-affinity-2", "load-balance", "anti-and-lb"],
)
def test_esl_intents_are_proven_on_a_sample_cluster(memory: object, make: object) -> None:
    policy = make()  # type: ignore[operator]
    plan = policy.declare(name="w", count=4, resources={"CPU": 1})
    assert plan.intents, "the ESL declares its intent"
    result = verify(plan, escher.get_cluster_state())  # the active backend's nodes
    assert result.status is Verdict.FEASIBLE, result.render()
    for r in result.intents:
        assert r.status is IntentStatus.PROVEN, r


def test_colocation_group_intent_is_proven(memory: object) -> None:
    plan = esl.CoLocation().group("g", 3, {"CPU": 1}).declare(name="w", count=3)
    result = verify(plan, escher.get_cluster_state())
    assert result.status is Verdict.FEASIBLE, result.render()
    assert [r.status for r in result.intents] == [IntentStatus.PROVEN]
    assert len(set(result.witness["w"])) == 1  # type: ignore[index]


def test_broken_anti_affinity_is_caught_with_a_counterexample() -> None:
    plan = Plan()
    # The bug: an anti-affinity unit of capacity 2 per node instead of 1.
    plan.add_resource("anti", 2, {"CPU": 1}, source="MyAntiAffinity.__init__")
    plan.add_task("replica", {"CPU": 1, "anti": 1}, count=3, source="MyAntiAffinity.launch")
    plan.add_intent(Separated(("replica",), source="MyAntiAffinity"))
    result = verify(plan, state())
    assert result.status is Verdict.FEASIBLE
    (r,) = result.intents
    assert r.status is IntentStatus.VIOLATED
    assert r.counterexample is not None
    assert check_placement(plan, state(), r.counterexample, intents=False) == []
    assert intent_violation(r.intent, r.counterexample, state()) is not None
    assert "share node" in r.detail
    # Fixed: capacity 1 per node proves the intent.
    plan.resources[0] = plan.resources[0].__class__(
        "anti", 1, plan.resources[0].node_spec, "MyAntiAffinity.__init__"
    )
    assert verify(plan, state()).intents[0].status is IntentStatus.PROVEN


def test_unknown_group_created_by_its_first_task() -> None:
    plan = Plan()
    plan.add_task("first", {"CPU": 1}, creates={"grp": 2}, source="CoLocation.first")
    plan.add_task("rest", {"CPU": 1, "grp": 1}, count=2, source="CoLocation.rest")
    plan.add_intent(Colocated(("first", "rest"), source="CoLocation"))
    result = verify(plan, state())
    assert result.status is Verdict.FEASIBLE
    assert result.intents[0].status is IntentStatus.PROVEN
    # Too many followers for the group's capacity: explained in plan terms.
    plan2 = Plan()
    plan2.add_task("first", {"CPU": 1}, creates={"grp": 2}, source="CoLocation.first")
    plan2.add_task("rest", {"CPU": 1, "grp": 1}, count=3, source="CoLocation.rest")
    bad = verify(plan2, state())
    assert bad.status is Verdict.INFEASIBLE
    assert bad.explanation is not None
    # Minimal: the followers, and no node holding 'grp' beyond what 'first' creates.
    assert bad.explanation.ids == {"task:rest", "cap:grp@nodes like 'n0' (4 nodes)"}
    assert bad.explanation.minimal


def test_gang_must_fit_together_and_pins() -> None:
    plan = Plan()
    plan.add_task("g", {"GPU": 2}, count=3, concurrent=False, source="Gang('train')")
    plan.add_intent(Gang(("g",), source="Gang('train')"))
    result = verify(plan, state())
    assert result.status is Verdict.INFEASIBLE
    assert result.explanation is not None and "intent:0" in result.explanation.ids
    plan = Plan()
    plan.add_task("reader", {"CPU": 1}, count=2, source="DataLocality('shard')")
    plan.add_intent(PinnedTo(("reader",), source="DataLocality('shard')", nodes=("n3",)))
    result = verify(plan, state())
    assert result.status is Verdict.FEASIBLE
    assert set(result.witness["reader"]) == {"n3"}  # type: ignore[index]
    assert result.intents[0].status is IntentStatus.VIOLATED  # nothing in resources pins it


def test_refuse_raises_verification_error() -> None:
    plan = Plan()
    plan.add_task("big", {"GPU": 3}, source="Trainer(gpus=3)")
    with pytest.raises(VerificationError) as info:
        verify(plan, state(), refuse=True)
    assert info.value.result.status is Verdict.INFEASIBLE  # type: ignore[attr-defined]
    assert "Trainer(gpus=3)" in str(info.value)
    with pytest.raises(VerificationError):
        ensure_feasible(plan, state())
    ok = Plan()
    ok.add_task("small", {"GPU": 1})
    assert ensure_feasible(ok, state()).feasible


def test_time_limit_gives_unknown_not_a_hang() -> None:
    big = ClusterState.from_dict(
        {"nodes": [{"id": f"n{i}", "total": {"CPU": 8, "memory": 32}} for i in range(200)]}
    )
    plan = Plan()
    for i in range(100):
        plan.add_task(f"t{i}", {"CPU": 1 + i % 3, "memory": 1 + i % 5}, count=5)
    result = verify(plan, big, timeout=1e-6)
    assert result.status is Verdict.UNKNOWN
    assert result.proven and result.exit_code == 2


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"timeout": 0}, "timeout"),
        ({"timeout": "1"}, "timeout"),
        ({"memory_limit_mb": -5}, "memory_limit_mb"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        verify(Plan(), state(), **kwargs)  # type: ignore[arg-type]


def test_bad_plan_and_state_types() -> None:
    with pytest.raises(ValidationError):
        verify("plan.json", state())  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        verify(Plan(), {"nodes": []})  # type: ignore[arg-type]
    plan = Plan()
    plan.add_resource("x", 1, None)
    plan.add_task("t", {"x": 1})
    with pytest.raises(ValidationError, match="creates="):
        verify(plan, state())


def test_result_renders_and_serialises() -> None:
    plan = Plan()
    plan.add_task("a", {"CPU": 1})
    plan.add_task("c", {"CPU": 1})
    plan.add_intent(Colocated(("a", "c"), source="CoLocation(a, c)"))
    plan.add_intent(Separated(("a", "c"), source="AntiAffinity(a, c)"))
    result = verify(plan, state())
    assert result.status is Verdict.INFEASIBLE
    text = result.render()
    assert "CoLocation(a, c)" in text and "AntiAffinity(a, c)" in text
    data = result.to_dict()
    assert data["status"] == "infeasible"
    assert {s["id"] for s in data["explanation"]["statements"]} == {
        "intent:0",
        "intent:1",
        "task:a",
        "task:c",
    }


def test_intents_after_the_deadline_are_reported_timed_out_without_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the verdict used the whole budget, each intent is UNKNOWN at once (no sub-plans
    are built after the deadline), so --timeout holds."""
    import time

    from escher.verify import IntentStatus, Verifier

    state = ClusterState.from_dict(
        {"nodes": [{"id": f"n{i}", "total": {"CPU": 4}} for i in range(4)]}
    )
    plan = Plan()
    for k in range(5):
        plan.add_task(f"w{k}", {"CPU": 1}, count=2, source=f"job {k}")
        plan.add_intent(Separated((f"w{k}",), source=f"AntiAffinity({k})"))
    run = Verifier(plan, state, deadline=time.monotonic() + 30)
    assert run.verdict().feasible
    run.deadline = time.monotonic() - 1.0

    def no_work(*_: object) -> None:
        raise AssertionError("a sub-plan was built after the deadline")

    monkeypatch.setattr("escher.verify._verify.IntentProver.shape", no_work)
    proofs = list(run.intents())
    assert [p.status for p in proofs] == [IntentStatus.UNKNOWN] * 5
    assert all("timed out" in p.detail for p in proofs)
    assert run.result().intents == tuple(proofs)
