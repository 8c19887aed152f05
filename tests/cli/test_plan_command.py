"""`escher plan APP` and `escher verify --app APP`: the plan comes from the app's own code."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from escher.cli import main

APP = textwrap.dedent(
    """
    import escher
    from escher import esl


    def work(i):
        return i


    def main():
        aa = esl.AntiAffinity(per_node=3, name="aa")
        colo = esl.CoLocation(name="colo")
        shards = [colo.group(f"shard-{s}", 3, {"CPU": 2}, policy=aa) for s in range(2)]
        refs = [shard.launch(work, i) for shard in shards for i in range(3)]
        gang = esl.Gang(name="trainers")
        gang.run([esl.Member(work, (i,), resources={"CPU": 1}, name="trainer") for i in range(2)])
        return escher.get(refs)


    def crowded():
        aa = esl.AntiAffinity(name="aa")
        for i in range(9):
            aa.launch(work, i, resources={"CPU": 1})


    def broken():
        raise RuntimeError("boom")
    """
)


@pytest.fixture(autouse=True)
def _files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("ESCHER_BACKEND", "ESCHER_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "app.py").write_text(APP)
    nodes = [{"id": f"node-{i}", "total": {"CPU": 8}} for i in range(8)]
    (tmp_path / "cluster.json").write_text(json.dumps({"nodes": nodes}))


def run(*args: str) -> object:
    return CliRunner().invoke(main, list(args))


def test_plan_writes_the_same_file_twice_and_prints_the_intents() -> None:
    first = run("plan", "app.py:main", "--cluster", "cluster.json", "-o", "a.json")
    second = run("plan", "app.py:main", "--cluster", "cluster.json", "-o", "b.json")
    assert first.exit_code == 0 and second.exit_code == 0, first.output
    assert Path("a.json").read_bytes() == Path("b.json").read_bytes()
    out = first.stdout
    assert "planned 8 replica(s) in 5 task(s)" in out  # alike launches: one task each
    assert "AntiAffinity('aa'): groups never share a node" in out
    assert "gang(trainer)" in out  # two alike launches: one task with 2 replicas
    assert "warning: the plan stops at" in out and "escher.get(refs)" in out
    plan = json.loads(Path("a.json").read_text())
    assert not any("node" in r["node_spec"] for r in plan["resources"])  # portable


def test_verify_app_proves_the_intents() -> None:
    result = run("verify", "--app", "app.py:main", "--cluster", "cluster.json")
    assert result.exit_code == 0, result.output
    assert "FEASIBLE" in result.stdout
    assert result.stdout.count(": proven") == 5
    assert "no two of (work, work-4) in one node: proven" in result.stdout


def test_verify_app_json_and_an_infeasible_app() -> None:
    result = run(
        "verify", "--app", "app.py:crowded", "--cluster", "cluster.json", "--format", "json"
    )
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["status"] == "infeasible"
    assert "AntiAffinity('aa')" in json.dumps(data["explanation"])


def test_plan_json_names_where_the_plan_stops() -> None:
    result = run("plan", "app.py:main", "--cluster", "cluster.json", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["replicas"] == 8 and data["stopped_at"].startswith(str(Path("app.py").resolve()))


def test_a_module_path_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path.cwd()))
    result = run("plan", "app:crowded", "--cluster", "cluster.json", "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["replicas"] == 9


@pytest.mark.parametrize(
    ("app", "words"),
    [
        ("nope.py:main", "no file 'nope.py'"),
        ("app.py:mian", "Did you mean 'main'?"),
        ("app.py", "APP must look like"),
        ("no_such_module_x:main", "cannot import module 'no_such_module_x'"),
    ],
)
@pytest.mark.parametrize("command", ["plan", "verify"])
def test_a_bad_app_is_a_clean_exit_3(command: str, app: str, words: str) -> None:
    args = [command, app] if command == "plan" else [command, "--app", app]
    result = run(*args, "--cluster", "cluster.json")
    assert result.exit_code == 3, result.output
    assert words in result.stderr and "Traceback" not in result.output


def test_an_exception_in_the_app_is_reported_cleanly() -> None:
    result = run("verify", "--app", "app.py:broken", "--cluster", "cluster.json")
    assert result.exit_code == 70, result.output
    assert "the app raised RuntimeError" in result.stderr and "boom" in result.stderr
    assert "app.py" in result.stderr and "Traceback" not in result.output


def test_verify_takes_a_plan_file_or_an_app_not_both() -> None:
    both = run("verify", "x.json", "--app", "app.py:main", "--cluster", "cluster.json")
    neither = run("verify", "--cluster", "cluster.json")
    assert both.exit_code == neither.exit_code == 3
    assert "give a PLAN_FILE, --app APP, or Kubernetes manifests" in neither.stderr
    assert "give a PLAN_FILE or --app APP, not both" in both.stderr


def test_plan_for_a_live_backend_snapshot() -> None:
    result = run("plan", "app.py:crowded", "--backend", "memory", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["replicas"] == 9 and data["cluster"] == "backend 'memory'"
