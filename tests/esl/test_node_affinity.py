"""Required node affinity: In / NotIn / Exists / DoesNotExist on node labels, and node ids."""

from __future__ import annotations

import pytest

import escher
from escher import ValidationError
from escher.backends.memory import MemoryBackend
from escher.esl import NodeAffinity

LABELS = [{"disk": "ssd", "zone": "a"}, {"disk": "hdd", "zone": "a"}, {"zone": "b"}, {}]


@pytest.fixture
def backend() -> MemoryBackend:
    nodes = {f"n{i}": {"resources": {"CPU": 2}, "labels": lab} for i, lab in enumerate(LABELS)}
    with escher.init(MemoryBackend(nodes=nodes, virtual_clock=True)) as active:  # type: ignore[arg-type]
        assert isinstance(active, MemoryBackend)
        yield active


@pytest.mark.parametrize(
    ("kwargs", "allowed"),
    [
        ({"match": {"disk": "ssd"}}, {"n0"}),
        ({"match": {"zone": ["a", "b"]}}, {"n0", "n1", "n2"}),
        ({"match": {"disk": None}}, {"n0", "n1"}),
        ({"exclude": {"disk": "ssd"}}, {"n1", "n2", "n3"}),
        ({"exclude": {"zone": None}}, {"n3"}),
        ({"ids": ["n2", "n3"], "exclude": {"zone": None}}, {"n3"}),
    ],
)
def test_tasks_run_only_on_matching_nodes(
    backend: MemoryBackend, kwargs: dict[str, object], allowed: set[str]
) -> None:
    with NodeAffinity(**kwargs) as only:  # type: ignore[arg-type]
        assert set(only.nodes) == allowed
        refs = [only.launch(escher.node_id, resources={"CPU": 1}, duration=1.0) for _ in range(8)]
        assert set(escher.get(refs, timeout=100)) == allowed
        plan = only.declare(None, "t", count=2)
        assert plan.intents[0].nodes == tuple(sorted(allowed))  # type: ignore[attr-defined]


def test_plain_equality_follows_nodes_that_join(backend: MemoryBackend) -> None:
    with NodeAffinity({"zone": "b"}) as only:
        backend.add_node("n9", {"CPU": 2}, labels={"zone": "b"})
        only.recover()
        refs = [only.launch(escher.node_id, resources={"CPU": 2}, duration=1.0) for _ in range(2)]
        assert sorted(escher.get(refs, timeout=100)) == ["n2", "n9"]


def test_bad_input(backend: MemoryBackend) -> None:
    with pytest.raises(ValidationError, match="needs match"):
        NodeAffinity()
    with pytest.raises(ValidationError, match="string or strings"):
        NodeAffinity({"zone": []})
