"""The planning backend and `plan_app`: what is recorded, what is refused, what ends a plan."""

from __future__ import annotations

from pathlib import Path

import pytest

import escher
from escher import esl
from escher.backends.planning import PlanningBackend
from escher.core.cluster import ClusterState, Node
from escher.core.errors import (
    NotInTaskError,
    PlanningReadError,
    ReservedResourceError,
    UnknownNodeError,
    ValidationError,
)
from escher.core.nodespec import NodeSpec
from escher.core.plan import Plan
from escher.core.resources import Resources
from escher.core.task import TaskSpec
from escher.esl import AppError, load_app, plan_app


def state(count: int = 3) -> ClusterState:
    four = Resources({"CPU": 4})
    return ClusterState(
        {f"n{i}": Node(f"n{i}", four, four, {"zone": "ab"[i % 2]}) for i in range(count)}
    )


def test_resources_and_tasks_are_recorded_nothing_runs() -> None:
    backend = PlanningBackend(state())
    backend.set_resource("ssd", 1, "n1")
    zone_a = NodeSpec.with_labels({"zone": "a"})
    backend.set_resources({"shard": 2, "gone": 1}, zone_a)
    backend.set_resource("gone", 0, zone_a)  # cleanup: not planned
    request = Resources({"CPU": 1, "ssd": 1})
    ref = backend.launch(TaskSpec(fn=len, args=([],), resources=request))
    assert not ref.started() and not ref.done()
    plan = backend.plan()
    assert [(r.label, r.capacity) for r in plan.resources] == [
        ("ssd", 1),
        ("gone", 1),
        ("shard", 2),
    ]
    assert [t.name for t in plan.tasks] == ["len"]
    assert backend.get_cluster_state().nodes["n1"].total["ssd"] == 1
    assert "gone" not in backend.get_cluster_state().nodes["n0"].total


def test_a_result_cannot_be_read_while_planning() -> None:
    backend = PlanningBackend(state())
    ref = backend.launch(TaskSpec(fn=len, args=([],), name="count"))
    with pytest.raises(PlanningReadError, match="cannot read the result of task 'count'"):
        ref.result()
    with pytest.raises(PlanningReadError):
        ref.wait(0)


def test_bad_calls_are_refused_as_on_a_real_backend() -> None:
    backend = PlanningBackend(state())
    with pytest.raises(UnknownNodeError, match="Did you mean"):
        backend.set_resource("x", 1, "n9")
    with pytest.raises(NotInTaskError):
        backend.set_resource("x", 1, None)
    with pytest.raises(ReservedResourceError):
        backend.set_resource("CPU", 1, "n0")
    with pytest.raises(ValidationError):
        PlanningBackend(42)  # type: ignore[arg-type]


def test_a_cancelled_task_leaves_the_plan() -> None:
    backend = PlanningBackend(state())
    ref = backend.launch(TaskSpec(fn=len, args=([],)))
    assert ref.cancel()
    assert backend.plan().tasks == []


def test_the_plan_ends_at_the_first_read_with_a_warning() -> None:
    def app() -> None:
        aa = esl.AntiAffinity(name="aa")
        first = aa.launch(len, [], resources={"CPU": 1})
        escher.get(first)
        aa.launch(len, [], resources={"CPU": 1})  # never planned

    run = plan_app(app, state())
    assert [t.name for t in run.plan.tasks] == ["len"]
    assert "test_planning_backend.py" in run.stopped_at and "escher.get(first)" in run.stopped_at
    assert run.warnings and run.stopped_at in run.warnings[0]


def test_the_app_runs_on_the_planning_backend_and_escher_is_restored() -> None:
    with escher.init(backend="memory") as live:
        run = plan_app(lambda: escher.launch(len, [], resources={"CPU": 1}), state())
        assert escher.current_backend() is live
    assert [t.name for t in run.plan.tasks] == ["len"]


def test_an_app_that_initialises_escher_itself_is_refused() -> None:
    def app() -> None:
        escher.init(backend="memory")

    with pytest.raises(ValidationError, match=r"called escher\.init"):
        plan_app(app, state())
    escher.shutdown()


def test_an_exception_in_the_app_names_it_and_the_line() -> None:
    def app() -> None:
        raise KeyError("shard-9")

    with pytest.raises(AppError, match=r"KeyError at .*test_planning_backend.py:\d+"):
        plan_app(app, state())


def test_names_are_stable_across_runs_in_one_process() -> None:
    def app() -> None:
        colo = esl.CoLocation()
        group = colo.unknown_group("u", 2, resources={"CPU": 1})
        group.launch(len, [])
        group.launch(len, [])

    first = plan_app(app, state()).plan.to_dict()
    assert plan_app(app, state()).plan.to_dict() == first
    ((label, capacity),) = first["tasks"][0]["creates"].items()
    assert label.startswith("x1") and label.endswith("-colo-u") and capacity == 1


def test_plan_and_cluster_files_round_trip(tmp_path: Path) -> None:
    cluster = state()
    cluster.save(tmp_path / "cluster.json")
    assert ClusterState.load(tmp_path / "cluster.json") == cluster
    plan = plan_app(lambda: esl.AntiAffinity().launch(len, []), cluster).plan
    plan.save(tmp_path / "plan.json")
    text = (tmp_path / "plan.json").read_text()
    assert text.endswith("}\n") and Plan.load(tmp_path / "plan.json").to_dict() == plan.to_dict()
    with pytest.raises(ValidationError, match="cannot write plan file"):
        plan.save(tmp_path / "no-such-dir" / "plan.json")


def test_load_app_reads_files_and_modules(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text("SIZE = 2\n")
    (tmp_path / "job.py").write_text("from helper import SIZE\n\ndef main():\n    return SIZE\n")
    assert load_app(f"{tmp_path / 'job.py'}:main")() == 2
    assert load_app("escher.esl:plan_app") is plan_app
    (tmp_path / "broken.py").write_text("def main(:\n")
    with pytest.raises(ValidationError, match="SyntaxError"):
        load_app(f"{tmp_path / 'broken.py'}:main")
    (tmp_path / "raising.py").write_text("raise RuntimeError('at import')\n")
    with pytest.raises(AppError, match="RuntimeError"):
        load_app(f"{tmp_path / 'raising.py'}:main")
    with pytest.raises(ValidationError, match="not a function"):
        load_app("escher.esl:__all__")


def test_what_the_plan_leaves_out_is_said() -> None:
    """A FirstOf is planned whole (its fallbacks are in the plan, nothing to warn about); a
    dynamic LoadBalance's monitor is not, and the warning says so."""

    def app() -> None:
        soft = esl.FirstOf(esl.AntiAffinity(name="aa"), {"CPU": 1}, timeout=2)
        soft.launch(len, [], resources={"CPU": 1})
        esl.LoadBalance(dynamic=True, name="lb").launch(len, [])

    run = plan_app(app, state())
    assert len(run.warnings) == 1
    assert "LoadBalance('lb'): planned with per_node=1" in run.warnings[0]
    assert len(run.plan.tasks) == 2
    assert [len(t.fallbacks) for t in run.plan.tasks] == [1, 0]


def test_use_backend_restores_without_closing() -> None:
    planning = PlanningBackend(state())
    with escher.init(backend="memory") as live:
        with escher.use_backend(planning):
            assert escher.current_backend() is planning
            escher.init(backend="memory")  # the block's own backend: closed at the end
        assert escher.current_backend() is live
        live.get_cluster_state()  # still open
    with pytest.raises(ValidationError, match="takes a Backend"), escher.use_backend("memory"):  # type: ignore[arg-type]
        pass
