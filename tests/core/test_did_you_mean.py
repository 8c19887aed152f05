"""`did_you_mean`: suggestions for short ids as for long names; none when nothing is close."""

from __future__ import annotations

import pytest

import escher
from escher.core.errors import closest, did_you_mean


@pytest.mark.parametrize(
    ("word", "choices", "expected"),
    [
        ("n3", ["n2", "n1"], "n1"),  # one edit; ties go to the first in order
        ("n9", ["n1", "n2"], "n1"),
        ("nodee", ["node-1", "nodes"], "nodes"),
        ("memroy", ["memory", "ray", "kubernetes"], "memory"),  # a swap is one edit
        ("verfy", ["verify", "state", "gc"], "verify"),
        ("gpu", ["GPU", "CPU"], "GPU"),
        ("kubernetse", ["kubernetes", "memory"], "kubernetes"),
        ("alphazer0", ["alphazero", "gang"], "alphazero"),
    ],
)
def test_suggests_the_closest(word: str, choices: list[str], expected: str) -> None:
    assert closest(word, choices) == expected
    assert did_you_mean(word, choices) == f" Did you mean {expected!r}?"


@pytest.mark.parametrize(
    ("word", "choices"),
    [
        ("x", ["a", "b"]),  # one edit on a one-letter name is a different name
        ("gpu-7", ["n1", "n2"]),
        ("memory", ["memory"]),  # exact: nothing to suggest
        ("anything", []),
    ],
)
def test_no_suggestion_when_nothing_is_close(word: str, choices: list[str]) -> None:
    assert did_you_mean(word, choices) == ""


def test_unknown_node_in_memory_backend_suggests() -> None:
    with escher.init(nodes={"n1": {"CPU": 1}, "n2": {"CPU": 1}}):
        with pytest.raises(escher.UnknownNodeError, match="Did you mean 'n1'"):
            escher.set_resource("ok", 1, "n3")
        with pytest.raises(escher.UnknownNodeError, match="Did you mean 'n1'"):
            escher.get_cluster_state().node("n9")


def test_many_choices() -> None:
    choices = [f"live-{k}" for k in range(20_000)]
    assert closest("live-1234x", choices) == "live-1234"
    assert closest("zzzzzzzzzzzzzzzzzzzzzzzz", choices) is None


def test_why_suggests_the_label_a_mistyped_request_meant() -> None:
    with escher.init(nodes={"n1": {"CPU": 1}}):
        escher.set_resource("fast-disk", 1, "n1")
        ref = escher.launch(escher.node_id, resources={"fast-disc": 1})
        assert "Did you mean 'fast-disk'?" in escher.why(ref).render()
        other = escher.launch(escher.node_id, resources={"zzz": 1})
        assert "Did you mean" not in escher.why(other).render()
        ref.cancel()
        other.cancel()


@pytest.mark.parametrize(
    ("name", "known", "expected"),
    [
        ("cpu", ["CPU", "memory"], "CPU"),  # Kubernetes' spelling on Ray's nodes
        ("CPU", ["cpu", "memory", "pods"], "cpu"),  # and the other way round
        ("gpu", ["CPU", "GPU"], "GPU"),
        ("nvidia.com/gpu", ["CPU", "GPU", "memory"], "GPU"),
        ("GPU", ["cpu", "memory", "nvidia.com/gpu"], "nvidia.com/gpu"),
        ("gpus", ["CPU", "GPU"], "GPU"),
        ("mem", ["CPU", "memory"], "memory"),
        ("Memory", ["CPU", "memory"], "memory"),
        ("RAM", ["cpu", "memory"], "memory"),
        ("Fast-Disk", ["CPU", "fast-disk"], "fast-disk"),  # case, for any name
        ("fast-disc", ["CPU", "fast-disk"], "fast-disk"),  # edit distance
    ],
)
def test_a_resource_no_node_has_gets_the_close_name(
    name: str, known: list[str], expected: str
) -> None:
    from escher.core.resources import suggest_resource, unknown_resource_hint

    assert suggest_resource(name, known) == expected
    assert unknown_resource_hint({name: 1}, known) == (
        f" No node has {name!r}. Did you mean {expected!r}?"
    )


@pytest.mark.parametrize(
    ("name", "known"),
    [("CPU", ["CPU"]), ("gpu", ["CPU", "memory"]), ("tpu-v5", ["CPU", "GPU"])],
)
def test_no_resource_suggestion_when_known_or_nothing_close(name: str, known: list[str]) -> None:
    from escher.core.resources import suggest_resource

    assert suggest_resource(name, known) is None


def test_launch_and_why_suggest_the_name_the_nodes_use() -> None:
    with escher.init(nodes={"n1": {"CPU": 2, "GPU": 1}}):
        ref = escher.launch(escher.node_id, resources={"cpu": 1})
        with pytest.raises(escher.UnschedulableError, match="did you mean 'CPU'"):
            ref.result(timeout=10)
        from escher.explain import why_request

        assert "Did you mean 'GPU'?" in why_request({"nvidia.com/gpu": 1}).render()
        assert "Did you mean 'CPU'?" in why_request({"cpu": 1}).render()


def test_the_command_line_suggests_too() -> None:
    from click.testing import CliRunner

    from escher.cli import main

    result = CliRunner().invoke(main, ["why", "--request", "cpu=1"])
    assert result.exit_code == 4 and "Did you mean 'CPU'?" in result.stdout
    fits = CliRunner().invoke(main, ["why", "--request", "CPU=4,memory=2Gi", "-o", "json"])
    assert fits.exit_code == 0, fits.output
    bad = CliRunner().invoke(main, ["why", "--request", "memory=2Gx"])
    assert bad.exit_code == 3 and "--request: memory: '2Gx' is not a quantity" in bad.stderr
