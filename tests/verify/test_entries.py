"""Plans written one entry per task: read once per shape, answered in the user's names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from escher.core.errors import PlanFormatError
from escher.core.plan import Plan, PlannedTask, Separated
from escher.verify._cli import json_text
from escher.verify._cli import verify as verify_cmd

CLUSTER = {"nodes": [{"id": f"n{i}", "total": {"CPU": 4, "memory": 16}} for i in range(3)]}


def _entries(n: int) -> list[dict[str, object]]:
    return [
        {"name": f"t{i}", "resources": {"CPU": 1, "memory": 4}, "count": 1, "source": f"l{i}"}
        for i in range(n)
    ]


def test_tasks_read_from_entries_equal_tasks_added_by_hand() -> None:
    data = {
        "tasks": [
            *_entries(3),
            {"name": "c", "resources": {"CPU": 1}, "count": 2, "concurrent": False},
            {"name": "m", "creates": {"flag": 1}},
        ]
    }
    plan = Plan.from_dict(data)
    by_hand = Plan()
    for i in range(3):
        by_hand.add_task(f"t{i}", {"CPU": 1, "memory": 4}, source=f"l{i}")
    by_hand.add_task("c", {"CPU": 1}, count=2, concurrent=False)
    by_hand.add_task("m", creates={"flag": 1})
    assert plan.tasks == by_hand.tasks
    assert [hash(t) for t in plan.tasks] == [hash(t) for t in by_hand.tasks]
    assert all(type(t) is PlannedTask for t in plan.tasks)
    plan.check()
    assert plan.to_dict() == by_hand.to_dict()


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ({"count": True}, "tasks[3].count"),  # true is not 1
        ({"count": 1.5}, "tasks[3].count"),
        ({"resources": {"CPU": "1", "memory": 4}}, "tasks[3].resources.CPU"),
        ({"resources": {"CPU": True, "memory": 4}}, "tasks[3].resources.CPU"),
        ({"name": ""}, "tasks[3].name"),
        ({"source": 7}, "tasks[3].source"),
        ({"name": "t0"}, "tasks[3]: the plan already has a task named 't0'"),
    ],
)
def test_an_entry_unlike_its_neighbours_is_still_checked(
    bad: dict[str, object], fragment: str
) -> None:
    entries = _entries(4)
    entries[3] = {**entries[3], **bad}
    with pytest.raises(PlanFormatError) as info:
        Plan.from_dict({"tasks": entries}, source="p.json")
    assert fragment in str(info.value)


def test_values_json_cannot_hold_are_still_read() -> None:
    class Quantity(float):
        """A float subclass (as NumPy's float64 is)."""

    plan = Plan.from_dict({"tasks": [{"name": "a", "resources": {"CPU": Quantity(2)}}]})
    assert plan.tasks[0].resources["CPU"] == 2


def test_json_output_is_the_same_document_with_a_line_per_task(tmp_path: Path) -> None:
    data = {
        "status": "feasible",
        "witness": {"b": ["n1", "n2"], 'a\u00e9"': ["n0"]},
        "stats": {"seconds": {"total": 0.5}},
        "intents": [],
    }
    text = json_text(data)
    assert json.loads(text) == data
    assert '    "b": ["n1", "n2"]' in text.splitlines()
    assert json_text({**data, "witness": None}) == json.dumps(
        {**data, "witness": None}, indent=2, sort_keys=True
    )


def test_ungrouped_plan_names_the_users_entries(tmp_path: Path) -> None:
    """An infeasible plan of single entries: the explanation and the JSON speak of them."""
    plan = Plan()
    for i in range(4):
        plan.add_task(f"svc-{i}", {"CPU": 1}, source=f"service {i}")
    plan.add_intent(Separated(tuple(f"svc-{i}" for i in range(4)), source="AntiAffinity"))
    pf, cf = tmp_path / "plan.json", tmp_path / "cluster.json"
    pf.write_text(json.dumps(plan.to_dict()))
    cf.write_text(json.dumps(CLUSTER))
    out = CliRunner().invoke(verify_cmd, [str(pf), "--cluster", str(cf), "--format", "json"])
    assert out.exit_code == 1, out.output
    result = json.loads(out.stdout)
    named = {s["id"] for s in result["explanation"]["statements"]}
    assert named & {f"task:svc-{i}" for i in range(4)}
    feasible = Plan()
    for i in range(3):
        feasible.add_task(f"svc-{i}", {"CPU": 1}, source=f"service {i}")
    pf.write_text(json.dumps(feasible.to_dict()))
    out = CliRunner().invoke(verify_cmd, [str(pf), "--cluster", str(cf), "--format", "json"])
    assert out.exit_code == 0, out.output
    witness = json.loads(out.stdout)["witness"]
    assert sorted(witness) == ["svc-0", "svc-1", "svc-2"]
    assert all(len(v) == 1 and v[0] in {"n0", "n1", "n2"} for v in witness.values())
