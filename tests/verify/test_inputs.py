"""Bad input never gets a raw Python error, and the reported wrong answers stay fixed."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from escher.cli.verify import verify as verify_cmd
from escher.core.cluster import ClusterState
from escher.core.errors import PlanFormatError, ValidationError
from escher.core.plan import Plan, Separated
from escher.core.resources import Resources
from escher.verify import Verdict, check_placement, verify

GOOD_PLAN: dict[str, Any] = {
    "version": 1,
    "resources": [{"label": "aa", "capacity": 1, "node_spec": {"available": {"CPU": 1}}}],
    "tasks": [
        {"name": "w", "resources": {"CPU": 1, "aa": 1}, "count": 2},
        {"name": "x", "resources": {"CPU": 1}, "creates": {"grp": 2}, "concurrent": False},
    ],
    "intents": [
        {"kind": "separated", "tasks": ["w"], "topology_key": "zone"},
        {"kind": "spread_evenly", "tasks": ["w"], "max_skew": 1, "weight": 2},
        {"kind": "pinned", "tasks": ["x"], "nodes": ["n1"]},
    ],
    "topologies": {"rack": {"n1": "r1"}},
}
GOOD_CLUSTER: dict[str, Any] = {
    "time": 0,
    "nodes": [
        {"id": "n1", "total": {"CPU": 4}, "labels": {"zone": "a"}, "alive": True},
        {"id": "n2", "total": {"CPU": 4}, "available": {"CPU": 2}, "ephemeral": []},
    ],
}

_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**400), 10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def _mutated(draw: st.DrawFn, good: dict[str, Any]) -> Any:
    """`good` with one place replaced by junk, a key removed, or a key added."""
    doc = json.loads(json.dumps(good))
    path = draw(st.sampled_from(_paths(doc)))
    action = draw(st.sampled_from(["replace", "drop", "add"]))
    if not path:
        return draw(_JUNK) if action == "replace" else doc
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if action == "replace":
        parent[last] = draw(_JUNK)
    elif action == "drop" and isinstance(parent, dict):
        del parent[last]
    elif isinstance(parent, dict):
        parent[draw(st.text(min_size=1, max_size=4))] = draw(_JUNK)
    return doc


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(_mutated(GOOD_PLAN), _mutated(GOOD_CLUSTER))
def test_malformed_documents_give_escher_errors(plan_doc: Any, cluster_doc: Any) -> None:
    """Any mutation of a valid plan or cluster document: parsed, or a PlanFormatError naming
    the source; what parses also verifies (or gives a ValidationError), never a raw error."""
    try:
        plan = Plan.from_dict(plan_doc, source="p.json")
    except PlanFormatError as exc:
        assert str(exc).startswith("p.json")
        plan = None
    try:
        state = ClusterState.from_dict(cluster_doc, source="c.json")
    except PlanFormatError as exc:
        assert str(exc).startswith("c.json")
        state = None
    if plan is not None and state is not None:
        with contextlib.suppress(ValidationError):
            verify(plan, state, timeout=2)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"nodes": [{"id": "n1", "alive": "false"}]}, "nodes[0].alive: expected true or false"),
        ({"nodes": [], "colour": 1}, "unknown field(s) ['colour']"),
        (
            {"nodes": [{"id": "n1", "total": {"CPU": 1}, "available": {"CPU": 2}}]},
            "nodes[0].available",
        ),
        ({"nodes": [], "time": "now"}, "time: expected a number"),
        ({"nodes": [{"id": "n1", "total": {"CPU": 10**9 * 10**9}}]}, "must be at most"),
        ({"nodes": [{"id": "n1", "total": {"CPU": 10**400}}]}, "must be at most"),
        ({"nodes": [{"id": "n1", "ephemeral": 5}]}, "nodes[0].ephemeral: expected a list"),
        ({"nodes": [{"id": "n1"}, {"id": "n1"}]}, "duplicate node id"),
    ],
)
def test_cluster_file_rules(tmp_path: Path, change: Any, fragment: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(change))
    with pytest.raises(PlanFormatError, match=None) as info:
        ClusterState.load(path)
    assert str(path) in str(info.value) and fragment in str(info.value)
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps({"tasks": [{"name": "t"}]}))
    out = CliRunner().invoke(verify_cmd, [str(plan), "--cluster", str(path)])
    assert out.exit_code == 3, out.output
    assert "Traceback" not in out.output and fragment in out.stderr


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"tasks": [{"name": "t", "count": 1000000000}]}', "tasks[0].count: must be at most"),
        ('{"tasks": [{"name": "t", "count": 1e400}]}', "too large"),
        ('{"tasks": [{"name": "t", "resources": {"CPU": NaN}}]}', "NaN"),
        ("[" * 100000 + "]" * 100000, "nested too deeply"),
        ('{"tasks": [], "intents": [{"kind": "gang", "tasks": ["a"], "max_skew": 2}]}', "kind"),
    ],
)
def test_plan_file_edges(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(PlanFormatError) as info:
        Plan.load(path)
    assert fragment in str(info.value)


def test_a_missing_resource_is_never_rounded_away() -> None:
    """{"GPU": 5e-7} does not fit a node without GPUs: the verifier agrees with fits_in."""
    state = ClusterState.from_dict({"nodes": [{"id": "n1", "total": {"CPU": 4}}]})
    plan = Plan()
    plan.add_task("t", {"CPU": 1, "GPU": 5e-7})
    assert not Resources({"CPU": 1, "GPU": 5e-7}).fits_in(state.nodes["n1"].available)
    result = verify(plan, state, timeout=10)
    assert result.status is Verdict.INFEASIBLE
    assert check_placement(plan, state, {"t": ["n1"]})
    # Within the shared tolerance it fits, as the matcher says.
    ok = Plan()
    ok.add_task("t", {"CPU": 4 + 5e-10})
    assert verify(ok, state, timeout=10).feasible


def test_many_distinct_shapes_and_entries_load_and_verify() -> None:
    """400 nodes, 1,200 tasks of distinct shapes, one entry each: no depth limit is hit."""
    state = ClusterState.from_dict(
        {"nodes": [{"id": f"n{i:03d}", "total": {"CPU": 64, "memory": 256}} for i in range(400)]}
    )
    doc = {
        "tasks": [
            {"name": f"t{i}", "resources": {"CPU": 1 + i % 7 / 10 + i / 10000, "memory": 1 + i % 5}}
            for i in range(1200)
        ]
    }
    plan = Plan.from_dict(doc)
    result = verify(plan, state, timeout=60)
    assert result.status is Verdict.FEASIBLE


def test_intent_violated_exit_code_and_cluster_line(tmp_path: Path) -> None:
    cluster = tmp_path / "c.json"
    cluster.write_text(json.dumps(GOOD_CLUSTER))
    plan = Plan()
    plan.add_resource("aa", 2, {"CPU": 1}, source="MyAntiAffinity")  # the bug: 2 per node
    plan.add_task("w", {"CPU": 1, "aa": 1}, count=2)
    plan.add_intent(Separated(("w",), source="MyAntiAffinity"))
    path = tmp_path / "p.json"
    path.write_text(json.dumps(plan.to_dict()))
    out = CliRunner().invoke(verify_cmd, [str(path), "--cluster", str(cluster)])
    assert out.exit_code == 4, out.output
    assert f"checked against cluster file {cluster}: 2 nodes" in out.stdout
    assert "violated" in out.stdout
    data = json.loads(
        CliRunner()
        .invoke(verify_cmd, [str(path), "--cluster", str(cluster), "--format", "json"])
        .stdout
    )
    assert data["exit_code"] == 4 and data["intents"][0]["status"] == "violated"
    assert data["cluster"].startswith("checked against cluster file")


def test_default_backend_warns_on_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("ESCHER_BACKEND", "ESCHER_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"tasks": [{"name": "t", "resources": {"CPU": 1}}]}))
    out = CliRunner().invoke(verify_cmd, [str(path)])
    assert out.exit_code == 0, out.output
    assert "warning: no --cluster or --backend given" in out.stderr
    assert "default in-memory nodes" in out.stderr
    assert "warning" not in out.stdout
    assert "checked against backend 'memory'" in out.stdout


def test_verify_takes_the_state_it_is_given() -> None:
    with pytest.raises(TypeError):
        verify(Plan())  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="ClusterState"):
        verify(Plan(), None)  # type: ignore[arg-type]


def test_hand_built_plans_are_checked() -> None:
    state = ClusterState.from_dict({"nodes": [{"id": "n1", "total": {"CPU": 4}}]})
    plan = Plan()
    plan.add_task("t", {"CPU": 1})
    plan.tasks.append("oops")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"tasks\[1\]"):
        verify(plan, state)
    plan = Plan()
    plan.add_task("t", {"CPU": 1})
    plan.intents.append(Separated(("nope",)))
    with pytest.raises(ValidationError, match=r"intents\[0\]"):
        verify(plan, state)
    with pytest.raises(ValidationError, match="weight"):
        plan.add_intent(Separated(("t",), weight=-1))
