"""Plans written one entry per task: read once per shape, answered in the user's names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from escher.cli.verify import json_text
from escher.cli.verify import verify as verify_cmd
from escher.core.errors import PlanFormatError
from escher.core.plan import Plan, PlannedTask, Separated

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
        ({"resources": {"CPU": "one", "memory": 4}}, "tasks[3].resources.CPU"),  # "1" is 1
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


def test_the_first_problem_in_document_order_is_reported() -> None:
    """A name used twice before a bad entry is reported first, and the other way round."""
    entries = _entries(5)
    entries[1] = {**entries[1], "name": "t0"}
    entries[3] = {**entries[3], "creates": {"-bad-": 1}}
    with pytest.raises(PlanFormatError) as info:
        Plan.from_dict({"tasks": entries}, source="p.json")
    assert "tasks[1]: the plan already has a task named 't0'" in str(info.value)
    entries = _entries(5)
    entries[1] = {**entries[1], "creates": {"-bad-": 1}}
    entries[3] = {**entries[3], "name": "t0"}
    with pytest.raises(PlanFormatError) as info:
        Plan.from_dict({"tasks": entries}, source="p.json")
    assert "tasks[1]" in str(info.value)
    entries = [{**e, "count": 1_000_000} for e in _entries(12)]
    entries[11] = {**entries[11], "name": "t0"}
    with pytest.raises(PlanFormatError) as info:
        Plan.from_dict({"tasks": entries}, source="p.json")
    assert "tasks[10].count: more than 10,000,000 replicas in all" in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        '{"tasks": [{"name": "t1234567890123456789012", "resources": {"CPU": 1}}]}',
        '{"tasks": [{"name": "t", "resources": {"CPU": 1.5, "memory": 2}, "count": 3}]}',
        '{"tasks": [{"name": "t\\u00e9\\ud83d\\ude00", "source": "x"}]}',
        '{"tasks": [{"name": "t"}],\r\n "intents": [{"kind": "gang", "tasks": ["t"]}]}',
    ],
)
def test_files_read_alike_with_and_without_the_fast_parser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    from escher.core import formats

    path = tmp_path / "p.json"
    path.write_bytes(text.encode())
    fast = formats.load_json(path, "plan")
    monkeypatch.setattr(formats, "_orjson", None)
    plain = formats.load_json(path, "plan")
    assert fast == plain
    assert json.dumps(fast) == json.dumps(plain)  # also the types: 1 stays 1, 1.5 stays 1.5
    assert Plan.load(path).to_dict() == Plan.from_dict(json.loads(text)).to_dict()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"tasks": [\r\n{"name": "t",\r\n "count": }]}', "line 3 column 11"),
        (
            '{"tasks": [{"name": "t", "resources": {"CPU": 12345678901234567890123}}]}',
            "got 12345678901234567890123",  # read as an int, as written
        ),
        ('{"tasks": [\r{"name": "t", "count": 1e400}]}', "too large"),
        ('{"tasks": [{"name": "\\ud800"}], "x": NaN}', "NaN"),
        ("[" * 5000 + "]" * 5000, "nested too deeply"),
    ],
)
def test_bad_files_get_the_same_message_with_and_without_the_fast_parser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, fragment: str
) -> None:
    from escher.core import formats

    path = tmp_path / "p.json"
    path.write_bytes(text.encode())
    with pytest.raises(PlanFormatError) as fast:
        Plan.load(path)
    monkeypatch.setattr(formats, "_orjson", None)
    with pytest.raises(PlanFormatError) as plain:
        Plan.load(path)
    assert str(fast.value) == str(plain.value)
    assert fragment in str(fast.value)


def test_json_output_of_awkward_task_names_is_the_same_document() -> None:
    names = ['a], "b', "nul\x00", "]\x00[", 'q"', "\u2603", "", "x]"]
    witness = {name: ['n], "0', "n\x001"][: 1 + i % 2] for i, name in enumerate(names)}
    data = {"status": "feasible", "witness": witness, "stats": {}}
    text = json_text(data)
    assert json.loads(text) == data
    lines = text.splitlines()
    assert len(lines) == len(names) + 6  # {, stats, status, "witness": {, tasks..., }, }


_NAME = st.text(alphabet='ab0-_.:/ ,"[]\\\x00é', min_size=1, max_size=6)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.dictionaries(_NAME, st.lists(_NAME, min_size=1, max_size=3), min_size=1, max_size=6))
def test_json_output_has_one_line_per_task_whatever_the_names(
    witness: dict[str, list[str]],
) -> None:
    data = {"status": "feasible", "witness": witness, "stats": {}}
    text = json_text(data)
    assert json.loads(text) == data
    lines = text.splitlines()
    assert len(lines) == len(witness) + 6
    tasks = lines[lines.index('  "witness": {') + 1 : -2]
    assert [json.loads("{" + line.rstrip(",") + "}") for line in tasks] == [
        {name: witness[name]} for name in sorted(witness)
    ]


def test_json_output_has_one_line_per_statement_of_an_explanation() -> None:
    statements = [
        {"id": f"task:t{i}", "kind": "task", "text": f"task 't{i}' \u00e9\"", "source": ""}
        for i in range(5)
    ]
    explanation = {"statements": statements, "minimal": True, "note": "found by: x"}
    data = {"status": "infeasible", "witness": None, "explanation": explanation, "stats": {}}
    text = json_text(data)
    assert json.loads(text) == data
    lines = text.splitlines()
    assert [json.loads(line.strip().rstrip(",")) for line in lines if '"id"' in line] == [
        dict(sorted(s.items())) for s in statements
    ]
    no_statements = {**data, "explanation": {**explanation, "statements": []}}
    assert json_text(no_statements) == json.dumps(no_statements, indent=2, sort_keys=True)
