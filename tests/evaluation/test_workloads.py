"""Qualitative results of the evaluation workloads at small scale (simulated time only)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import escher
from escher import evaluation
from escher.backends.memory import MemoryBackend
from escher.cli.bench import bench as bench_command
from escher.evaluation._core import Link, Meter, percentile, transfer
from escher.evaluation.workloads import alphazero, fairshare, gandiva, gang, wordcount


def test_add_duration_extends_a_virtual_task_from_its_body() -> None:
    backend = MemoryBackend(nodes={"a": {"CPU": 1}}, virtual_clock=True)

    def body() -> str:
        backend.add_duration(2.5)
        return escher.node_id()

    ref = backend.launch(
        escher.core.task.TaskSpec(fn=body, duration=1.0, resources=escher.Resources({"CPU": 1}))
    )
    backend.run()
    assert ref.result(0) == "a"
    assert backend.clock.now() == pytest.approx(3.5)
    with pytest.raises(escher.NotInTaskError):
        backend.add_duration(1.0)
    bad = backend.launch(escher.core.task.TaskSpec(fn=lambda: backend.add_duration(-1)))
    backend.run()
    assert isinstance(bad.exception(0), escher.ValidationError)


def test_fifo_links_serialise_transfers() -> None:
    a, b = Link(100.0), Link(100.0)
    assert transfer(0.0, [a, b], 100.0, 0.0) == pytest.approx(1.0)
    assert transfer(0.0, [b], 100.0, 0.5) == pytest.approx(2.5)  # waits for b
    assert percentile([1.0, 2.0, 3.0], 50) == 2.0


def test_locality_esl_beats_generic_and_stays_close_to_native() -> None:
    p = wordcount.Params(files=200)
    runs = {v: wordcount.simulate(v, 10, p, 1, Meter()) for v in wordcount.VARIANTS}
    assert all(r["complete"] for r in runs.values())
    assert runs["escher"]["makespan"] < 0.8 * runs["generic"]["makespan"]
    assert runs["escher"]["remote"] == runs["native"]["remote"] == 0
    assert runs["generic"]["remote"] > 100
    # the only difference from native is the ESL's set_resource calls (10 x 4 ms)
    assert runs["escher"]["makespan"] - runs["native"]["makespan"] == pytest.approx(
        10 * p.set_resource_s, abs=1e-6
    )


def test_colocation_beats_no_colocation_and_matches_hard_coded() -> None:
    p = alphazero.Params(nodes=4, iterations=5)
    runs = {v: alphazero.simulate(v, p, 2, Meter()) for v in alphazero.VARIANTS}
    for run in runs.values():
        assert run["iterations"] == p.pipelines * p.iterations
    assert runs["escher"]["transfers"] == 0
    assert runs["escher"]["median"] < runs["unaware"]["median"]
    assert runs["escher"]["median"] < runs["firstfit"]["median"]
    assert runs["escher"]["throughput"] > runs["unaware"]["throughput"]
    assert runs["escher"]["makespan"] <= runs["hardcoded"]["makespan"] * 1.01


def test_gandiva_packing_keeps_the_long_trial_on_one_node() -> None:
    p = gandiva.Params(horizon_s=3600.0)
    runs = {v: gandiva.simulate(v, p, 3, Meter()) for v in gandiva.VARIANTS}
    ours = runs["escher"]
    assert ours["long_total"] > 0 and ours["long_one_node"] == ours["long_total"]
    assert ours["throughput"] > runs["spread"]["throughput"] * 1.1
    assert ours["throughput"] > runs["firstfit"]["throughput"]


def test_fair_shares_follow_the_weights_within_5_percent() -> None:
    p = fairshare.Params(nodes=2, backlog=4000)
    ours = fairshare.simulate("escher", p, 4, Meter())["phases"]
    fifo = fairshare.simulate("fifo", p, 4, Meter())["phases"]
    for start, expected in fairshare.EXPECTED.items():
        for user, share in expected.items():
            assert ours[start][user] == pytest.approx(share, abs=0.05)
    assert fifo[60]["u2"] < 0.3  # without the policy the first user keeps the cluster


def test_gang_native_is_fastest_and_ghost_protocols_are_close() -> None:
    p = gang.Params(nodes=4, members=32, trials=3)
    lat = {v: gang.median(gang.simulate(v, p, 5, Meter())) for v in gang.VARIANTS}
    assert lat["native"] < lat["esl"]
    assert lat["native"] < lat["app"]
    assert lat["app"] == pytest.approx(lat["esl"], rel=0.1)


def test_run_rejects_unknown_names() -> None:
    with pytest.raises(escher.ValidationError, match="wordcount"):
        evaluation.run("wordcont")


def test_cli_lists_runs_and_writes(tmp_path: object) -> None:
    runner = CliRunner()
    listed = runner.invoke(bench_command, ["list"])
    assert listed.exit_code == 0 and "alphazero" in listed.output
    out = tmp_path / "out"  # type: ignore[operator]
    result = runner.invoke(bench_command, ["gandiva", "--quick", "--no-plot", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "36.3" in result.output and (out / "gandiva.json").exists()
    bad = runner.invoke(bench_command, ["nope"])
    assert bad.exit_code != 0 and "no workload" in bad.output


def test_plots_are_written(tmp_path: object) -> None:
    pytest.importorskip("matplotlib")
    result = evaluation.run("gandiva", quick=True, seed=0)
    written = result.write(tmp_path)  # type: ignore[arg-type]
    png = [p for p in written if p.suffix == ".png"]
    assert png and png[0].read_bytes()[:4] == b"\x89PNG"
    assert result.meter.events > 0
