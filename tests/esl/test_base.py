"""The ESL base: labels, ledger, cleanup (close, context manager, finaliser), recovery."""

from __future__ import annotations

import gc
import threading

import pytest

import escher
from escher import ValidationError
from escher.backends.memory import MemoryBackend
from escher.core.resources import validate_label
from escher.esl import AntiAffinity, CoLocation, LoadBalance

from .conftest import WAIT, ephemeral_labels, nodes, wait_until


def fail() -> None:
    raise RuntimeError("boom")


def test_labels_are_namespaced_unique_and_valid(backend: MemoryBackend) -> None:
    a, b = CoLocation(name="same"), CoLocation(name="same")
    la, lb = a.label("grp"), b.label("grp")
    assert la != lb and la.startswith(a._prefix) and lb.startswith(b._prefix)
    long = a.label("x" * 200 + "/weird chars!")
    assert len(long) <= 63 and validate_label(long) == long
    assert a.label("x" * 200) != a.label("x" * 199)  # truncation keeps them distinct
    a.close()
    b.close()


def test_default_backend_is_current_and_bad_backend_rejected(backend: MemoryBackend) -> None:
    with CoLocation() as colo:
        assert colo.backend is backend
    with pytest.raises(ValidationError):
        CoLocation(backend="memory")  # type: ignore[arg-type]


def test_close_deletes_everything_and_is_idempotent(backend: MemoryBackend) -> None:
    lb = LoadBalance(per_node=2)
    colo = CoLocation()
    group = colo.group("g", size=3, resources={"CPU": 1})  # one member never comes
    assert escher.get([group.launch(escher.node_id) for _ in range(2)], timeout=WAIT)
    assert ephemeral_labels(backend) == {lb.unit, group.label}
    assert lb.close() == [] and colo.close() == []
    assert ephemeral_labels(backend) == set()
    assert lb.close() == []  # twice is fine
    with pytest.raises(ValidationError, match="closed"):
        lb.set_resource(lb.unit, 1, "n0")


def test_context_manager_cleans_up_when_tasks_fail(backend: MemoryBackend) -> None:
    with CoLocation() as colo:
        group = colo.unknown_group("u", size=4)  # the fourth member never comes
        refs = [group.launch(escher.node_id)] + [group.launch(fail) for _ in range(2)]
        assert escher.get(refs[0], timeout=WAIT)
        for ref in refs[1:]:
            assert isinstance(ref.exception(WAIT), RuntimeError)
        assert group.label in ephemeral_labels(backend)  # the first task created it
    assert ephemeral_labels(backend) == set()


def test_finaliser_cleans_up_when_the_esl_is_dropped(backend: MemoryBackend) -> None:
    AntiAffinity(per_node=1)
    gc.collect()
    assert ephemeral_labels(backend) == set()


def test_cleanup_survives_a_closed_backend() -> None:
    backend = MemoryBackend(nodes=nodes(2))
    lb = LoadBalance(backend, per_node=1)
    backend.close()
    problems = lb.close()
    assert problems and "closed" in problems[0]


def test_ledger_records_what_was_set(backend: MemoryBackend) -> None:
    with LoadBalance(per_node=3) as lb:
        assert lb.ledger() == {lb.unit: {f"n{i}": 3.0 for i in range(4)}}


def test_recover_moves_a_group_off_a_dead_node(backend: MemoryBackend) -> None:
    with CoLocation() as colo:
        group = colo.group("g", size=2, resources={"CPU": 2})
        assert group.node == "n0"
        backend.remove_node("n0")
        report = colo.recover()
        assert report.complete and report.restored == ((group.label, "n0", "n1"),)
        assert group.node == "n1"
        placed = escher.get([group.launch(escher.node_id) for _ in range(2)], timeout=WAIT)
        assert placed == ["n1", "n1"]


def test_recover_reports_what_cannot_be_restored(backend: MemoryBackend) -> None:
    gate = threading.Event()
    with CoLocation() as colo:
        group = colo.group("big", size=4, resources={"CPU": 1})  # needs a whole idle node
        assert group.node == "n0"
        for nid in ("n1", "n2"):
            backend.remove_node(nid)
        backend.set_resource("pin", 1, "n3")
        busy = escher.launch(gate.wait, WAIT, resources={"CPU": 1, "pin": 1})
        assert wait_until(busy.started)
        backend.remove_node("n0")
        report = colo.recover()
        gate.set()
        assert not report.complete and report.restored == ()
        assert report.lost[0][:2] == (group.label, "n0")
        assert "no alive node" in report.lost[0][2]
        assert busy.result(WAIT) is True


def test_recover_extends_spread_labels_to_new_nodes(backend: MemoryBackend) -> None:
    with AntiAffinity() as aa:
        backend.add_node("n9", {"CPU": 4})
        backend.remove_node("n2")
        report = aa.recover()
        assert report.restored == ((aa.unit, "n2", "n9"),)
        assert escher.get_cluster_state().nodes["n9"].total[aa.unit] == 1
