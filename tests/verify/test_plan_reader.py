"""The one plan-file reader (`escher.core.planfile`): read by msgspec without building each
entry, a file gives the plan and the grouping the usual reading gives, and every file msgspec
does not take is left to the usual reading (the same plan, or the same error); `Plan.load`
and `load_grouped` read through it alike."""

from __future__ import annotations

import json
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from escher.core import planfile
from escher.core.errors import PlanFormatError
from escher.core.formats import load_json
from escher.core.plan import Plan
from escher.core.planfile import plan_document
from escher.verify.model._statement import task_statement
from escher.verify.read._grouped import Grouping, _grouping, load_grouped


@pytest.fixture(autouse=True)
def _unbuilt_whatever_the_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The files here are small: read them with the reader under test all the same."""
    monkeypatch.setattr(planfile, "UNBUILT_FROM", 0)


SHAPES: list[dict[str, Any]] = [
    {"resources": {"CPU": 1}},
    {"resources": {"CPU": 1.5, "memory": 4}, "count": 2},
    {"resources": {"GPU": 1}, "concurrent": False},
    {"resources": {"CPU": 1}, "creates": {}},
    {"resources": {"CPU": 1}, "creates": {"lbl": 1}},
    {},
]


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    """Plan documents with entries of a few shapes, some with a source, some named by an
    intent."""
    tasks = []
    for i in range(draw(st.integers(1, 14))):
        entry = {"name": f"t{i}", **draw(st.sampled_from(SHAPES))}
        source = draw(st.sampled_from([None, "", f"job {i % 3}", "x\u00e9\"'"]))
        if source is not None:
            entry["source"] = source
        tasks.append(entry)
    doc: dict[str, Any] = {"version": 1, "tasks": tasks}
    named = draw(st.lists(st.sampled_from([t["name"] for t in tasks]), max_size=2, unique=True))
    if named:
        doc["intents"] = [{"kind": "separated", "tasks": named, "source": "AntiAffinity"}]
    return doc


def _usual_plan(path: Path) -> Plan:
    """The plan of the file at `path` read the usual way (parsed whole, then checked)."""
    return Plan.from_dict(load_json(path, "plan"), source=str(path))


def _usual(path: Path) -> Grouping:
    return _grouping(plan_document(load_json(path, "plan"), source=str(path)))


def _faithful(grouping: Grouping, written: Plan) -> None:
    """`grouping` stands for `written`: each of its tasks for entries alike in all but name
    and source, each entry worded as written."""
    as_written = {t.name: t for t in written.tasks}
    covered = []
    for task in grouping.plan.tasks:
        names, each = grouping.members.get(task.name, ([task.name], task.count))
        assert task.count == each * len(names)
        for name in names:
            entry = as_written[name]
            assert (entry.resources, entry.creates, entry.concurrent, entry.count) == (
                task.resources,
                task.creates,
                task.concurrent,
                each,
            )
            if task.name in grouping.members:
                assert grouping.statement(f"task:{name}") == task_statement(entry)
        covered += names
    assert sorted(covered) == sorted(as_written)
    assert grouping.plan.intents == written.intents


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=documents(), indent=st.sampled_from([None, 1]))
def test_groups_as_the_usual_reading(
    tmp_path_factory: Any, doc: dict[str, Any], indent: Any
) -> None:
    path = tmp_path_factory.mktemp("p") / "plan.json"
    path.write_text(json.dumps(doc, indent=indent))
    unbuilt = planfile._unbuilt(path.read_bytes(), str(path))
    assert (unbuilt is None) == (find_spec("msgspec") is None)
    grouped, usual, written = load_grouped(path), _usual(path), Plan.load(path)
    assert written == _usual_plan(path)
    _faithful(grouped, written)
    _faithful(usual, written)
    assert len(grouped.plan.tasks) <= len(usual.plan.tasks)  # it groups as much, or more
    assert grouped.written.tasks == written.tasks


def _alike(**fields: Any) -> dict[str, Any]:
    """Two entries alike but for their names, with `fields`."""
    return {"tasks": [{"name": "a", **fields}, {"name": "b", **fields}]}


BAD: list[Any] = [
    _alike(resorces={"CPU": 1}),
    _alike(count="2"),
    _alike(count=1.0),
    _alike(count=True),
    _alike(count=0),
    _alike(count=10**7),
    _alike(concurrent="yes"),
    _alike(source=5),
    _alike(source=None),
    _alike(resources={"CPU": -1}),
    _alike(resources={"CPU": "one"}),  # "1" is a quantity (1)
    _alike(resources={"CPU": 10**30}),
    _alike(creates={"": 1}),
    {**_alike(), "intents": [{"kind": "separated", "tasks": ["zz"]}]},
    {**_alike(), "intents": 5},
    {**_alike(), "intents": [5]},
    {**_alike(), "intents": [{"kind": "separated", "tasks": 5}]},
    {**_alike(), "tasks": [{"name": "a"}, {"name": "a"}]},
    {**_alike(), "tasks": [{"name": ""}, {"name": "b"}]},
    {**_alike(), "tasks": [{"name": 5}, {"name": "b"}]},
    {**_alike(), "tasks": [{"resources": {}}, {"name": "b"}]},
    {**_alike(), "extra": 1},
    {**_alike(), "version": 99},
    {"tasks": {}},
    {"intents": []},
    [],
]
TEXTS = [
    '{"tasks": [{"name": "a", "resources": {"CPU": 1e400}},'
    ' {"name": "b", "resources": {"CPU": 1e400}}]}',
    '{"tasks": [{"name": "a", "resources": {"CPU": NaN}}, {"name": "b"}]}',
    '{"tasks": [{"name": "a"}, {"name": "b"}]',
    '{"tasks": [{"name": "a\\ud800"}, {"name": "b"}]}',
]


DEEP = "[" * 5000 + "]" * 5000
RAW = [
    b'{"tasks": [{"name": "\xe9"}, {"name": "b"}]}',  # not UTF-8
    b'\xef\xbb\xbf{"tasks": [{"name": "a"}, {"name": "b"}]}',  # a byte order mark
    b'{"tasks": [{"name": "a"}, {"name": "b"}], "topologies": ' + DEEP.encode() + b"}",
    b'{"tasks": [{"name": "a", "resources": ' + DEEP.encode() + b'}, {"name": "b"}]}',
    b'{"tasks": [{"name": "a"}, {"name": "b"}]} x',
]


FILES = [json.dumps(d).encode() for d in BAD] + [t.encode() for t in TEXTS] + RAW


@pytest.mark.parametrize("text", FILES)
def test_a_file_it_does_not_take_reads_as_usual(tmp_path: Path, text: bytes) -> None:
    path = tmp_path / "plan.json"
    path.write_bytes(text)
    try:
        expected = _usual_plan(path)
    except PlanFormatError as exc:
        for read in (load_grouped, Plan.load):
            with pytest.raises(PlanFormatError) as got:
                read(path)
            assert str(got.value) == str(exc)
    else:
        assert load_grouped(path).written.tasks == expected.tasks
        assert Plan.load(path) == expected


def test_too_many_replicas_for_one_task_stay_as_written(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_alike(count=600_000)))
    grouped = load_grouped(path)
    assert [(t.name, t.count) for t in grouped.plan.tasks] == [("a", 600_000), ("b", 600_000)]
    assert grouped.members == {}


def test_without_msgspec_a_file_groups_the_usual_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"tasks": [{"name": f"t{i}", "count": 2} for i in range(5)]}))
    monkeypatch.setattr(planfile, "_decoders", lambda: None)
    grouped = load_grouped(path)
    assert [(t.name, t.count) for t in grouped.plan.tasks] == [("t0", 10)]
    _faithful(grouped, Plan.load(path))
