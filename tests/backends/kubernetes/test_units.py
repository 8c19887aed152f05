"""Pieces of the Kubernetes backend that need no cluster (names, quantities, wire formats)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("kubernetes", reason="needs pip install 'escher-sched[k8s]'")

from escher.backends.kubernetes._names import (
    Names,
    format_quantity,
    validate_domain,
)
from escher.backends.kubernetes._nodes import patch_ops
from escher.backends.kubernetes._payload import (
    TERMINATION_MESSAGE_LIMIT,
    ResultTooLargeError,
    decode_outcome,
    decode_task,
    encode_error,
    encode_task,
    encode_value,
)
from escher.backends.kubernetes._pods import resource_block
from escher.backends.kubernetes._retry import transient
from escher.backends.kubernetes._state import NodeRecord, Usage, build_state
from escher.core.errors import (
    ConfigError,
    InvalidCapacityError,
    InvalidResourceNameError,
    ReservedResourceError,
    ValidationError,
)
from escher.core.quantity import parse_quantity
from escher.core.resources import Resources
from escher.core.task import TaskSpec

jsonpatch = pytest.importorskip("jsonpatch", reason="needs pip install 'escher[test]'")


@pytest.mark.parametrize(
    ("text", "value"),
    [("4", 4.0), ("500m", 0.5), ("16Gi", 16 * 2**30), ("1k", 1000.0), ("1e3", 1000.0),
     ("9007199254740992", 2.0**53), ("250u", 0.00025)],
)  # fmt: skip
def test_parse_quantity(text: str, value: float) -> None:
    assert parse_quantity(text) == pytest.approx(value)


def test_bad_quantity_and_format() -> None:
    with pytest.raises(InvalidCapacityError):
        parse_quantity("four")
    assert format_quantity("cpu", 0.25) == "250m"
    assert format_quantity("escher.io/x", 3.0) == "3"
    with pytest.raises(InvalidCapacityError):
        format_quantity("escher.io/x", 0.5)


def test_names_round_trip() -> None:
    names = Names("escher.io")
    assert names.to_k8s("CPU") == "cpu" and names.from_k8s("cpu") == "CPU"
    assert names.to_k8s("GPU") == "nvidia.com/gpu" and names.from_k8s("nvidia.com/gpu") == "GPU"
    assert names.to_k8s("grp") == "escher.io/grp" and names.from_k8s("escher.io/grp") == "grp"
    assert names.to_k8s("example.com/dongle") == "example.com/dongle"
    assert names.annotation("grp") == "ephemeral.escher.io/grp"
    assert names.label_of_annotation("ephemeral.escher.io/grp") == "grp"
    assert names.label_of_annotation("other.io/grp") is None
    with pytest.raises(InvalidResourceNameError):
        names.to_k8s("kubernetes.io/x")


@pytest.mark.parametrize("domain", ["kubernetes.io", "a.k8s.io", "UPPER.io", "-x.io", ""])
def test_domain_rules(domain: str) -> None:
    with pytest.raises(ConfigError):
        validate_domain(domain)


def test_extended_requests_equal_limits() -> None:
    spec = TaskSpec(len, resources=Resources({"CPU": 1.5, "grp": 2, "memory": 2**20}))
    block = resource_block(spec, Names())
    assert block["requests"] == {"cpu": "1500m", "escher.io/grp": "2", "memory": "1048576"}
    assert block["limits"] == {"escher.io/grp": "2"}


def test_state_subtracts_pod_requests() -> None:
    node = {
        "metadata": {"name": "n1", "resourceVersion": "7", "labels": {"a": "b"}},
        "status": {"allocatable": {"cpu": "4", "escher.io/grp": "3", "pods": "110"}},
    }
    pod = {"spec": {"nodeName": "n1", "containers": [
        {"resources": {"requests": {"cpu": "500m", "escher.io/grp": "1"}}}]}}  # fmt: skip
    names = Names()
    state = build_state([NodeRecord.parse(node)], Usage.of([pod]), names, 0.0)
    n1 = state.node("n1")
    assert n1.total["grp"] == 3 and n1.available["grp"] == 2
    assert n1.available["CPU"] == 3.5 and n1.ephemeral == frozenset({"grp"})


def test_task_and_outcome_round_trip() -> None:
    fn, args, kwargs = decode_task(encode_task(divmod, (7, 2), {}))
    assert fn(*args, **kwargs) == (3, 1)
    assert decode_outcome(encode_value({"a": 1}, "t"), "t") == (True, {"a": 1})
    ok, error = decode_outcome(encode_error(KeyError("k"), "Traceback ..."), "t")
    assert not ok and isinstance(error, KeyError)
    with pytest.raises(ValueError):
        decode_outcome("plain text", "t")


def test_oversize_value_becomes_a_clear_error() -> None:
    import os

    message = encode_value(os.urandom(TERMINATION_MESSAGE_LIMIT), "big")
    assert len(message) <= TERMINATION_MESSAGE_LIMIT
    ok, error = decode_outcome(message, "big")
    assert not ok and isinstance(error, ResultTooLargeError)
    assert "4096 bytes" in str(error)


def test_unpicklable_call_is_a_validation_error() -> None:
    import threading

    lock = threading.Lock()
    with pytest.raises(ValidationError, match="pickl"):
        encode_task(print, (lock,), {})


# --- the node store's patches -----------------------------------------------------------
LABELS = ["a", "b", "c", "d"]


@st.composite
def nodes_and_writes(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, float]]:
    """A node object with some of escher's labels (and a foreign resource), and a write."""
    names, owners = Names(), ["s1", "s2"]
    present = draw(st.dictionaries(st.sampled_from(LABELS), st.integers(1, 5), max_size=4))
    annotations = {names.annotation(k): draw(st.sampled_from(owners)) for k in present}
    capacity = {names.resource(k): str(v) for k, v in present.items()}
    if draw(st.booleans()):
        capacity["example.com/dongle"] = "1"
    meta: dict[str, Any] = {"name": "n1", "resourceVersion": "9"}
    if annotations or draw(st.booleans()):
        meta["annotations"] = {**annotations, "other": "x"} if draw(st.booleans()) else annotations
    status: dict[str, Any] = {}
    if capacity or draw(st.booleans()):
        status = {"capacity": dict(capacity), "allocatable": dict(capacity)}
    writes = draw(st.dictionaries(st.sampled_from(LABELS), st.integers(0, 5), min_size=1))
    return {"metadata": meta, "status": status}, {k: float(v) for k, v in writes.items()}


@given(nodes_and_writes())
@settings(max_examples=300, deadline=None)
def test_patch_ops_take_the_node_exactly_to_the_write(case: Any) -> None:
    node, writes = case
    names = Names()
    ops = patch_ops(NodeRecord.parse(node), writes, names, "s1")
    after = jsonpatch.apply_patch(node, ops)
    rec = NodeRecord.parse(after)
    for label, value in writes.items():
        resource, annotation = names.resource(label), names.annotation(label)
        if value > 0:
            assert rec.capacity[resource] == rec.allocatable[resource] == str(int(value))
            assert rec.annotations[annotation] == "s1"
        else:
            assert resource not in rec.capacity and resource not in rec.allocatable
            assert annotation not in rec.annotations
    untouched = [k for k in LABELS if k not in writes]
    for label in untouched:  # other labels, foreign resources and annotations stay
        before = NodeRecord.parse(node)
        assert rec.capacity.get(names.resource(label)) == before.capacity.get(names.resource(label))
        assert rec.annotations.get(names.annotation(label)) == before.annotations.get(
            names.annotation(label)
        )
    assert rec.capacity.get("example.com/dongle") == NodeRecord.parse(node).capacity.get(
        "example.com/dongle"
    )
    assert rec.annotations.get("other") == NodeRecord.parse(node).annotations.get("other")
    assert (ops == []) == (after == node)  # a write that changes nothing sends nothing
    assert patch_ops(rec, writes, names, "s1") == []


def test_patch_ops_refuse_a_foreign_resource_under_the_domain() -> None:
    node = {
        "metadata": {"name": "n1", "resourceVersion": "3"},
        "status": {"capacity": {"escher.io/x": "7"}, "allocatable": {"escher.io/x": "7"}},
    }
    for value in (0.0, 2.0):
        with pytest.raises(ReservedResourceError, match="did not create"):
            patch_ops(NodeRecord.parse(node), {"y": 1.0, "x": value}, Names(), "s1")


# --- the create pipeline ------------------------------------------------------------------
def test_pipeline_keeps_lane_order_and_bounds_what_is_queued() -> None:
    import random
    import threading
    import time

    from escher.backends.kubernetes._pipeline import Pipeline

    done: dict[str, list[int]] = {"a": [], "b": [], "free": []}
    running = {"now": 0, "peak": 0}
    lock = threading.Lock()
    rng = random.Random(3)

    def job(lane: str, index: int) -> Any:
        def run() -> None:
            with lock:
                running["now"] += 1
                running["peak"] = max(running["peak"], running["now"])
            time.sleep(rng.random() / 500)
            with lock:
                running["now"] -= 1
                done[lane].append(index)

        return run

    pipeline = Pipeline(workers=4, depth=6)
    for i in range(60):
        lane = ("a", "b", "free")[i % 3]
        pipeline.put(None if lane == "free" else lane, job(lane, i))
    assert pipeline.drain(30)
    pipeline.close()
    assert done["a"] == sorted(done["a"]) and len(done["a"]) == 20  # in put order
    assert done["b"] == sorted(done["b"]) and len(done["b"]) == 20
    assert sorted(done["free"]) == list(range(2, 60, 3))
    assert 1 < running["peak"] <= 4
    with pytest.raises(RuntimeError):
        pipeline.put(None, job("free", 99))


def test_a_failing_job_does_not_stop_its_lane() -> None:
    from escher.backends.kubernetes._pipeline import Pipeline

    ran: list[int] = []

    def fail() -> None:
        raise ValueError("boom")

    pipeline = Pipeline(workers=2, depth=4)
    pipeline.put("x", fail)
    pipeline.put("x", lambda: ran.append(1))
    assert pipeline.drain(10) and ran == [1]
    pipeline.close()


# --- sessions -----------------------------------------------------------------------------
def test_lease_liveness_and_owner_marks() -> None:
    from datetime import UTC, datetime, timedelta

    from escher.backends.kubernetes._lease import lease_alive, owner_mark, parse_owner

    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    renewed = (now - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease = {"spec": {"renewTime": renewed, "leaseDurationSeconds": 60}}
    assert lease_alive(lease, now)
    assert not lease_alive(lease, now + timedelta(seconds=31))
    assert not lease_alive({"spec": {"leaseDurationSeconds": 60}}, now)  # never renewed
    assert parse_owner(owner_mark("batch", "abc123"), "default") == ("batch", "abc123")
    assert parse_owner("abc123", "default") == ("default", "abc123")  # a bare id


@pytest.mark.parametrize(
    "options",
    [
        {"session_id": "Not-A-Session!"},
        {"lease_seconds": 0},
        {"lease_seconds": 10, "renew_seconds": 10},
        {"api_patience": -1},
        {"node_check_seconds": "5"},
        {"creates_in_flight": 0},
    ],
)
def test_bad_options_are_refused_before_connecting(options: dict[str, Any]) -> None:
    from escher.backends.kubernetes import KubernetesBackend

    with pytest.raises(ConfigError):
        KubernetesBackend(kubeconfig="/no/such/kubeconfig", **options)


def _refusal(status: int, text: str) -> Exception:
    from kubernetes.client.exceptions import ApiException

    exc = ApiException(status=status, reason="Forbidden" if status == 403 else "Error")
    exc.body = json.dumps({"kind": "Status", "code": status, "message": text})
    return exc


@pytest.mark.parametrize(
    ("status", "text", "again"),
    [
        # What a shutting-down API server answered a create (recorded on the test plane).
        (403, 'pods "p" is forbidden: Get "https://127.0.0.1:58287/api/v1/namespaces/'
              'default/limitranges": dial tcp 127.0.0.1:58287: connect: connection refused',
         True),
        # A create while etcd restarted under the API server (recorded on the test plane).
        (403, 'pods "p" is forbidden: rpc error: code = Unavailable desc = transport is '
              "closing", True),
        (500, "etcdserver: request timed out", True),
        (503, "the server is currently unable to handle the request", True),
        (429, "too many requests", True),
        # Verdicts on the request itself.
        (403, 'pods is forbidden: User "system:serviceaccount:batch:escher" cannot create '
              'resource "pods" in API group "" in the namespace "other"', False),
        (403, 'admission webhook "deny.example.com" denied the request: no', False),
        (422, 'Pod "p" is invalid: spec.containers[0].image: Required value', False),
        (404, "dial tcp: connection refused", False),  # gone is gone, whatever it says
        (409, 'pods "p" already exists', False),
    ],
)  # fmt: skip
def test_a_refusal_is_retried_only_when_the_server_could_not_reach_its_backends(
    status: int, text: str, again: bool
) -> None:
    assert transient(_refusal(status, text)) is again


def test_no_answer_is_always_retried() -> None:
    assert transient(ConnectionRefusedError("refused"))
    assert not transient(KeyboardInterrupt())


# --- the list-then-watch loop -------------------------------------------------------------
def test_follow_hands_over_events_and_returns_the_last_version() -> None:
    import threading

    from escher.backends.kubernetes._informer import follow
    from escher.backends.kubernetes._kube import ApiException

    seen: list[tuple[str, str]] = []
    events = [
        {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}},
        {"type": "DELETED", "object": {"metadata": {"name": "a", "resourceVersion": "9"}}},
    ]
    stop = threading.Event()
    handle = lambda kind, obj: seen.append((kind, obj["metadata"]["name"]))  # noqa: E731
    assert follow(events, "1", stop, handle) == "9"
    assert seen == [("ADDED", "a"), ("DELETED", "a")]  # a bookmark only moves the version
    gone = [{"type": "ERROR", "object": {"code": 410, "message": "too old"}}]
    with pytest.raises(ApiException) as info:
        follow(gone, "9", stop, handle)
    assert info.value.status == 410


def test_list_and_watch_resumes_relists_after_gone_and_ends_when_told() -> None:
    import threading

    from escher.backends.kubernetes._informer import list_and_watch
    from escher.backends.kubernetes._kube import ApiException

    stop = threading.Event()
    calls: list[str] = []

    def relist() -> str:
        calls.append("list")
        return "10"

    def watch(version: str) -> list[dict[str, Any]]:
        calls.append(f"watch@{version}")
        if len(calls) == 2:  # the first watch: one event, then the server ends it
            return [{"type": "MODIFIED", "object": {"metadata": {"resourceVersion": "11"}}}]
        if len(calls) == 3:
            raise ConnectionError("dropped")  # resumes from 11
        if len(calls) == 4:
            raise ApiException(status=410)  # too old: lists again
        raise ApiException(status=403)  # on_failure ends the loop

    failures: list[object] = []

    def on_failure(what: object, count: int, resuming: bool) -> int | None:
        failures.append(what)
        return None if what == 403 else count + 1

    steps: list[str] = []
    list_and_watch(stop, relist, watch, lambda kind, obj: None, on_failure,
                   out_of_step=lambda: steps.append("out"))  # fmt: skip
    assert calls == ["list", "watch@10", "watch@11", "watch@11", "list", "watch@10"]
    assert len(failures) == 2 and failures[1] == 403 and steps == ["out"] * 3
