"""Plan/cluster file formats and the `escher verify` command (exit codes 0/1/2/3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from escher.cli.verify import verify as verify_cmd
from escher.core.cluster import ClusterState
from escher.core.errors import PlanFormatError
from escher.core.formats import schema
from escher.core.nodespec import NodeSpec
from escher.core.plan import Colocated, PinnedTo, Plan, Separated, SpreadAtMost
from escher.verify import Verdict, verify

CLUSTER = {
    "nodes": [
        {"id": "n1", "total": {"CPU": 4, "GPU": 1}, "labels": {"type": "gpu"}},
        {"id": "n2", "total": {"CPU": 4}, "available": {"CPU": 2}},
    ]
}


def sample_plan() -> Plan:
    plan = Plan()
    plan.add_resource("grp", 2, {"CPU": 2}, source="CoLocation('ps').__init__")
    plan.add_resource("data", 1, "n1", source="DataLocality('shard')")
    plan.add_resource("lb", 1, NodeSpec.with_labels({"type": "gpu"}), source="LB")
    plan.add_task("ps", {"CPU": 1, "grp": 1}, count=2, source="CoLocation('ps').request")
    plan.add_task("leader", {"CPU": 0.5}, creates={"sig": 1}, concurrent=False)
    plan.add_task("w", {"CPU": 1}, count=2)
    plan.add_intent(Colocated(("ps",), source="CoLocation('ps')"))
    plan.add_intent(Separated(("w",), source="AntiAffinity('w')"))
    plan.add_intent(SpreadAtMost(("w", "ps"), source="LB", per_node=3))
    plan.add_intent(PinnedTo(("leader",), source="DataLocality", nodes=("n1",)))
    return plan


def write(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_plan_round_trips_and_matches_schema(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    plan = sample_plan()
    data = plan.to_dict()
    jsonschema.validate(data, schema("plan"))
    jsonschema.validate(CLUSTER, schema("cluster"))
    jsonschema.validate(ClusterState.from_dict(CLUSTER).to_dict(), schema("cluster"))
    again = Plan.from_dict(json.loads(json.dumps(data)))
    assert again.to_dict() == data
    assert Plan.load(write(tmp_path, "p.json", data)).to_dict() == data


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ('{\n  "tasks": [\n    {"name": "a",}\n  ]\n}', "line 3 column"),
        ({"tasks": [{"name": "a", "count": 0}]}, "tasks[0]"),
        ({"tasks": [{"name": "a", "resources": {"CPU": -1}}]}, "tasks[0]"),
        ({"tasks": [{"name": "a", "colour": "red"}]}, "tasks[0]: unknown field(s) ['colour']"),
        (
            {"tasks": [{"name": "a"}], "intents": [{"kind": "near", "tasks": ["a"]}]},
            'intents[0].kind: unknown "near"',
        ),
        (
            {"tasks": [{"name": "a"}], "intents": [{"kind": "colocated", "tasks": ["b"]}]},
            "intents[0]",
        ),
        (
            {
                "tasks": [{"name": "a"}],
                "resources": [
                    {"label": "x", "capacity": 1, "node_spec": {"node": "n1", "labels": {}}}
                ],
            },
            "resources[0].node_spec: give exactly one",
        ),
        (
            {
                "tasks": [{"name": "a"}],
                "resources": [{"label": "CPU", "capacity": 1, "node_spec": {"node": "n1"}}],
            },
            "resources[0]",
        ),
        ({"tasks": "a"}, "tasks: expected a list"),
        ([1, 2], "expected an object"),
        ({"version": 9, "tasks": []}, "version"),
    ],
)
def test_malformed_plan_files_name_file_and_place(
    tmp_path: Path, content: object, fragment: str
) -> None:
    path = write(tmp_path, "bad-plan.json", content)
    with pytest.raises(PlanFormatError) as info:
        Plan.load(path)
    assert path in str(info.value) and fragment in str(info.value)
    cluster = write(tmp_path, "c.json", CLUSTER)
    out = CliRunner().invoke(verify_cmd, [path, "--cluster", cluster])
    assert out.exit_code == 3, out.output
    assert "Traceback" not in out.output and fragment in out.output


def test_cli_exit_codes_and_formats(tmp_path: Path) -> None:
    cluster = write(tmp_path, "cluster.json", CLUSTER)
    ok = write(tmp_path, "ok.json", {"tasks": [{"name": "a", "resources": {"CPU": 2}}]})
    bad = write(
        tmp_path,
        "bad.json",
        {
            "tasks": [
                {"name": "g", "resources": {"GPU": 1}, "count": 2, "source": "Trainer(gpus=2)"}
            ]
        },
    )
    runner = CliRunner()
    out = runner.invoke(verify_cmd, [ok, "--cluster", cluster])
    assert out.exit_code == 0, out.output
    assert "FEASIBLE" in out.output
    out = runner.invoke(verify_cmd, [bad, "--cluster", cluster, "--format", "json"])
    assert out.exit_code == 1, out.output
    data = json.loads(out.output)
    assert data["status"] == "infeasible"
    ids = {s["id"] for s in data["explanation"]["statements"]}
    assert "task:g" in ids and data["explanation"]["minimal"] is True
    out = runner.invoke(verify_cmd, [bad, "--cluster", cluster])
    assert out.exit_code == 1 and "Trainer(gpus=2)" in out.output
    # bad input: missing file, bad cluster, both sources, bad option value
    assert (
        runner.invoke(verify_cmd, [str(tmp_path / "nope.json"), "--cluster", cluster]).exit_code
        == 3
    )
    broken = write(tmp_path, "broken-cluster.json", {"nodes": [{"id": 3}]})
    out = runner.invoke(verify_cmd, [ok, "--cluster", broken])
    assert out.exit_code == 3 and "broken-cluster.json: nodes[0]" in out.output
    assert (
        runner.invoke(verify_cmd, [ok, "--cluster", cluster, "--backend", "memory"]).exit_code == 3
    )
    assert runner.invoke(verify_cmd, [ok, "--format", "yaml"]).exit_code == 3
    # the live backend (in-memory default: four 4-CPU nodes)
    out = runner.invoke(verify_cmd, [ok, "--backend", "memory"])
    assert out.exit_code == 0, out.output


def test_cli_unknown_on_time_limit(tmp_path: Path) -> None:
    nodes = [{"id": f"n{i}", "total": {"CPU": 8, "memory": 32}} for i in range(60)]
    tasks = [
        {"name": f"t{i}", "resources": {"CPU": 1 + i % 3, "memory": 1 + i % 5}, "count": 3}
        for i in range(60)
    ]
    cluster = write(tmp_path, "big.json", {"nodes": nodes})
    plan = write(tmp_path, "plan.json", {"tasks": tasks})
    out = CliRunner().invoke(verify_cmd, [plan, "--cluster", cluster, "--timeout", "0.000001"])
    assert out.exit_code == 2, out.output
    assert "UNKNOWN" in out.output


def test_through_escher_main(tmp_path: Path) -> None:
    from escher.cli import main

    cluster = write(tmp_path, "cluster.json", CLUSTER)
    bad = write(tmp_path, "bad.json", {"tasks": [{"name": "g", "resources": {"GPU": 2}}]})
    out = CliRunner().invoke(main, ["verify", bad, "--cluster", cluster])
    assert out.exit_code == 1, out.output
    out = CliRunner().invoke(main, ["verify", bad, "--cluster"])
    assert out.exit_code == 3, out.output


def test_sample_plan_verifies() -> None:
    state = ClusterState.from_dict(CLUSTER)
    result = verify(sample_plan(), state)
    assert result.status is Verdict.FEASIBLE, result.render()


def test_documented_examples_parse_and_match_schemas() -> None:
    import re

    jsonschema = pytest.importorskip("jsonschema")
    page = Path(__file__).resolve().parents[2] / "docs" / "file-formats.md"
    plan_json, cluster_json = re.findall(r"```json\n(.*?)```", page.read_text(), re.S)[:2]
    plan = Plan.from_dict(json.loads(plan_json), source="docs plan example")
    jsonschema.validate(json.loads(plan_json), schema("plan"))
    state = ClusterState.from_dict(json.loads(cluster_json), source="docs cluster example")
    jsonschema.validate(json.loads(cluster_json), schema("cluster"))
    assert len(plan.intents) == 8 and len(state.nodes) == 3 and plan.topologies


@pytest.mark.parametrize(("name", "code"), [("plan-feasible", 0), ("plan-infeasible", 1)])
def test_sample_plans_print_what_the_docs_show(
    name: str, code: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import re

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    out = CliRunner().invoke(
        verify_cmd,
        # The docs' command; a long --timeout (not printed) so a loaded machine still minimises.
        [
            f"examples/verify/{name}.json",
            *("--cluster", "examples/verify/cluster.json"),
            *("--timeout", "600"),
        ],
    )
    assert out.exit_code == code, out.output
    page = (root / "docs" / "verify.md").read_text()
    section = page.split(f"`examples/verify/{name}.json` is")[1]
    shown = re.findall(r"```text\n(.*?)```", section, re.S)[0]
    # The first line holds the time it took; the rest is the same, line by line.
    assert out.stdout.splitlines()[1:] == shown.splitlines()[1:]
    assert shown.splitlines()[0].split()[0] == out.stdout.splitlines()[0].split()[0]


@pytest.mark.parametrize(
    "argv0", ["/venv/lib/python3.11/site-packages/pytest/__main__.py", "/venv/bin/pytest"]
)
def test_timeout_counts_from_the_call_inside_another_program(
    argv0: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run inside another program (pytest here, started with `python -m pytest` or not),
    --timeout counts from the call, not from that program's start."""
    import sys
    import time

    from escher.cli import verify as verify_command

    monkeypatch.setattr(sys, "argv", [argv0])
    assert not verify_command._runs_as_command()
    before = time.monotonic()
    assert verify_command._started() >= before


def test_timeout_counts_from_the_process_start_as_a_command(tmp_path: Path) -> None:
    """`python -m escher.cli verify` is the command itself: it decides well within its
    --timeout, which counts from its own process start."""
    import subprocess
    import sys

    cluster = write(tmp_path, "cluster.json", CLUSTER)
    plan = write(tmp_path, "plan.json", {"tasks": [{"name": "a", "resources": {"CPU": 1}}]})
    probe = (
        "import sys; sys.argv = ['escher']; "
        "from escher.cli import verify; print(verify._runs_as_command())"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert ran.stdout.strip() == "True"
    out = subprocess.run(
        [sys.executable, "-m", "escher.cli", "verify", plan, "--cluster", cluster,
         "--timeout", "60", "--format", "json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "feasible"
