"""The paper's co-location + load-balancing example, as `escher demo` runs it."""

from __future__ import annotations

from collections import Counter

from escher.backends.memory import MemoryBackend
from escher.cli.demo import run_demo


def ephemeral_labels(backend: MemoryBackend) -> set[str]:
    return {label for n in backend.get_cluster_state().nodes.values() for label in n.ephemeral}


def check(placements: list[tuple[str, str]], per_node: int) -> None:
    pairs: dict[str, set[str]] = {}
    for task, node in placements:
        pairs.setdefault(task.split("/")[0], set()).add(node)
    assert all(len(nodes) == 1 for nodes in pairs.values()), pairs  # co-located
    load = Counter(next(iter(nodes)) for nodes in pairs.values())
    assert max(load.values()) * 2 <= per_node  # balanced


def test_demo_on_its_own_backend() -> None:
    placements = run_demo()
    assert len(placements) == 8
    check(placements, per_node=2)
    assert sorted({n for _, n in placements}) == ["node-1", "node-2", "node-3", "node-4"]


def test_demo_on_a_given_backend_in_virtual_time_leaves_nothing() -> None:
    backend = MemoryBackend(
        nodes={"a": {"CPU": 4}, "b": {"CPU": 4}, "c": {"CPU": 4}}, virtual_clock=True
    )
    placements = run_demo(backend, pairs=5)
    check(placements, per_node=4)
    assert ephemeral_labels(backend) == set()
    backend.close()


def test_the_demo_explains_itself() -> None:
    import json
    import shlex

    from click.testing import CliRunner

    from escher.cli import main

    result = CliRunner().invoke(main, ["demo", "--pairs", "3", "-o", "json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data["policies"]) == {"CoLocation", "LoadBalance"}
    claims = data["claims"]
    assert len(claims) == 4 and all(c["holds"] for c in claims)  # 3 pairs + spread
    assert claims[-1]["claim"].startswith("pairs spread")
    assert [step.split()[1] for step in data["next"]] == ["verify", "why", "state"]
    text = CliRunner().invoke(main, ["demo"]).stdout
    assert "CoLocation" in text and "LoadBalance" in text and "checked:" in text
    assert "next:" in text and "escher verify" in text
    for step in data["next"]:  # the next steps run as printed
        argv = shlex.split(step.split("#")[0])[1:]
        run = CliRunner().invoke(main, argv)
        assert run.exit_code == 0, (step, run.output)


def test_a_claim_that_does_not_hold_is_shown() -> None:
    from escher.cli.demo import check_claims

    claims = check_claims(
        [("pair-0/task-0", "a"), ("pair-0/task-1", "b"), ("pair-1/task-0", "a")], per_node=1
    )
    assert [c.holds for c in claims] == [False, True, False]
    assert claims[0].detail == "a, b" and claims[-1].detail == "a 2, b 1"
