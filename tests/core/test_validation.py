"""Bad input at the public API: an escher error naming the argument and the fix, nothing changed.

One test per case that used to escape as a raw Python error, be accepted silently, or hang.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import escher
from escher.backends.memory import MemoryBackend
from escher.core.errors import (
    ConfigError,
    InvalidCapacityError,
    InvalidNodeSpecError,
    InvalidOptionError,
    InvalidResourceNameError,
    ValidationError,
)
from escher.core.nodespec import NodeSpec
from escher.core.plan import Plan
from escher.core.resources import Resources, validate_label, validate_name
from escher.core.task import TaskRef, TaskSpec
from escher.testing.fuzz import snapshot


def add(a: int, b: int = 0) -> int:
    return a + b


@pytest.fixture
def backend() -> Iterator[MemoryBackend]:
    with escher.init(MemoryBackend(nodes={"n1": {"CPU": 2}, "n2": {"CPU": 2}})) as active:
        assert isinstance(active, MemoryBackend)
        yield active


def refused(backend: MemoryBackend, error: type[Exception], match: str, call: Any) -> None:
    """`call()` raises `error` matching `match`, and leaves totals and tasks as they were."""
    before = snapshot(backend)
    with pytest.raises(error, match=match):
        call()
    assert snapshot(backend) == before


@pytest.mark.parametrize("label", ["grp\n", "grp\n\n", "grp\x00", "\ngrp", "grp\r"])
def test_names_are_matched_in_full(backend: MemoryBackend, label: str) -> None:
    """`re.match` with `$` accepts a trailing newline; a full match does not."""
    with pytest.raises(InvalidResourceNameError):
        validate_label(label)
    with pytest.raises(InvalidResourceNameError):
        validate_name(label)
    refused(backend, InvalidResourceNameError, "label", lambda: escher.set_resource(label, 1, "n1"))
    with pytest.raises(InvalidResourceNameError):
        Resources({"CPU\n": 1})


@pytest.mark.parametrize("value", [[("CPU", 1)], "CPU", 3, ("CPU", 1), {1, 2}])
def test_launch_resources_must_be_a_mapping(backend: MemoryBackend, value: Any) -> None:
    refused(
        backend,
        ValidationError,
        r"resources must be a mapping .*\{'CPU': 1\}",
        lambda: escher.launch(add, 1, resources=value),
    )
    with pytest.raises(ValidationError, match="resources must be a mapping"):
        Resources(value)


@pytest.mark.parametrize("capacity", [10**50, 10**400, -(10**400), 2**53 + 2, math.inf, math.nan])
def test_huge_and_non_finite_capacities(backend: MemoryBackend, capacity: Any) -> None:
    refused(
        backend,
        InvalidCapacityError,
        "capacity of 'grp'",
        lambda: escher.set_resource("grp", capacity, "n1"),
    )
    with pytest.raises(InvalidCapacityError):
        Resources({"CPU": capacity})


def test_get_and_cancel_take_handles_only(backend: MemoryBackend) -> None:
    ref = escher.launch(add, 1)
    for bad in (None, "t1", 1, object(), [ref, "t1"], "abc", {ref: 1}):
        with pytest.raises(ValidationError, match="TaskRef"):
            escher.get(bad, timeout=1)  # type: ignore[call-overload]
    for bad in (None, "t1", [ref]):
        with pytest.raises(ValidationError, match="TaskRef"):
            escher.cancel(bad)  # type: ignore[arg-type]
    assert escher.get(ref, timeout=10) == 1


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -math.inf, -1, -0.5, 10**400, "1", True])
def test_get_timeouts_are_checked_not_waited(backend: MemoryBackend, timeout: Any) -> None:
    gate = threading.Event()
    ref = escher.launch(gate.wait, 30)  # not done: a bad timeout must not wait
    try:
        for call in (
            lambda: escher.get(ref, timeout=timeout),
            lambda: escher.get([ref], timeout=timeout),
            lambda: ref.result(timeout),
            lambda: ref.wait(timeout),
        ):
            with pytest.raises(ValidationError, match="timeout must be None"):
                call()
    finally:
        gate.set()
    assert escher.get(ref, timeout=10) is True


def test_a_handle_that_was_never_launched_is_refused_not_waited_on() -> None:
    bogus = TaskRef(TaskSpec(add, (1,)))
    with pytest.raises(ValidationError, match="never launched"):
        escher.get(bogus)
    with pytest.raises(ValidationError, match="never launched"):
        bogus.result()
    assert bogus.set_result(3) and bogus.result() == 3  # a settled one can be read


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"node_id": 123}, "node_id must be a non-empty string"),
        ({"node_id": ""}, "node_id must be a non-empty string"),
        ({"labels": {"rack": 3}}, "values are strings"),
        ({"labels": {3: "a"}}, "values are strings"),
        ({"labels": []}, "non-empty mapping"),
        ({"having": [("CPU", 1)]}, "having: resources must be a mapping"),
        ({"node_id": "n1", "having": {"CPU": 1}}, "one of node_id, having or labels"),
        ({"node_id": "n1", "num_nodes": 2}, "num_nodes limits"),
        ({"num_nodes": 2}, "num_nodes limits"),
        ({"having": {"CPU": 1}, "num_nodes": 0}, "positive integer"),
    ],
)
def test_node_spec_constructor_checks_its_fields(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidNodeSpecError, match=match):
        NodeSpec(**kwargs)


def test_num_nodes_with_a_node_id_is_refused(backend: MemoryBackend) -> None:
    refused(
        backend,
        InvalidNodeSpecError,
        "num_nodes limits",
        lambda: escher.set_resource("grp", 1, "n1", num_nodes=1),
    )
    refused(
        backend,
        InvalidNodeSpecError,
        "num_nodes limits",
        lambda: escher.set_resources({"grp": 1}, "n1", num_nodes=2),
    )
    with pytest.raises(InvalidNodeSpecError, match="num_nodes limits"):
        NodeSpec.parse(None, 2)
    assert escher.set_resource("grp", 1, {"CPU": 1}, num_nodes=1) == ("n1",)


def test_with_labels_needs_string_values() -> None:
    with pytest.raises(InvalidNodeSpecError, match=r"\{'rack': '3'\}"):
        NodeSpec.with_labels({"rack": 3})  # type: ignore[dict-item]
    assert NodeSpec.with_labels({"rack": "3"}).labels == {"rack": "3"}


def test_unknown_launch_keyword_names_it_and_suggests(backend: MemoryBackend) -> None:
    refused(
        backend,
        InvalidOptionError,
        "'resouces'.*Did you mean 'resources'",
        lambda: escher.launch(add, 1, resouces={"CPU": 1}),
    )
    refused(
        backend,
        InvalidOptionError,
        "'max_retry'.*Did you mean 'max_retries'",
        lambda: escher.launch(add, 1, max_retry=2),
    )
    assert escher.get(escher.launch(add, 1, b=2), timeout=10) == 3  # fn's own keyword
    assert escher.get(escher.launch(lambda **kw: kw, fn=1), timeout=10) == {"fn": 1}


def test_task_decorator_options_are_checked() -> None:
    with pytest.raises(InvalidOptionError, match="Did you mean 'resources'"):
        escher.task(resource={"CPU": 1})
    with pytest.raises(TypeError):  # still a TypeError for callers that caught that
        escher.task(resource={"CPU": 1})
    remote = escher.task(add)
    with pytest.raises(InvalidOptionError, match="'cpus'"):
        remote.options(cpus=1)
    with pytest.raises(ValidationError, match="resources must be a mapping"):
        remote.options(resources=["CPU"])
    with pytest.raises(ValidationError, match="max_retries"):
        escher.task(max_retries=-1)
    with pytest.raises(ValidationError, match="callable"):
        escher.task(5)  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"args": 5}, "args must be a tuple"),
        ({"kwargs": [1]}, "kwargs must be a mapping"),
        ({"kwargs": {1: 2}}, "kwargs must be a mapping"),
        ({"name": 5}, "name must be a string"),
        ({"retry_exceptions": "yes"}, "retry_exceptions must be True or False"),
        ({"max_retries": 1.5}, "max_retries must be an int"),
        ({"duration": math.nan}, "duration must be finite"),
        ({"command": "echo hi"}, "command must be a list of strings"),
        ({"image": ""}, "image must be a non-empty string"),
        ({"resources": "CPU"}, "resources must be a mapping"),
    ],
)
def test_task_spec_checks_its_fields(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        TaskSpec(add, **fields)


def test_init_checks_its_arguments(backend: MemoryBackend) -> None:
    for bad in (5, "", b"memory", ["memory"]):
        with pytest.raises(ConfigError, match="registry name"):
            escher.init(bad)  # type: ignore[arg-type]
        assert escher.current_backend() is backend
    with pytest.raises(ConfigError, match="already built backend"):
        escher.init(backend, nodes={"x": {"CPU": 1}})
    assert escher.current_backend() is backend


def test_plan_add_task_checks_creates() -> None:
    with pytest.raises(ValidationError, match="creates of task 't' must map"):
        Plan().add_task("t", {"CPU": 1}, creates=["grp"])  # type: ignore[arg-type]
