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
