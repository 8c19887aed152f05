"""Property tests of the public API boundary: an escher error or success, never a raw error,
never a hang, and nothing changed on error (see `escher.testing.fuzz`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import escher
from escher import esl
from escher.backends.memory import MemoryBackend
from escher.core.nodespec import NodeSpec
from escher.core.plan import Plan
from escher.core.resources import Resources
from escher.core.task import TaskSpec
from escher.testing.fuzz import (
    call_bounded,
    capacities,
    check_refused_or_done,
    junk,
    labels,
    node_specs,
    requests,
    timeouts,
)

NODES = ["a", "b", "c"]
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def noop(*args: Any, **kwargs: Any) -> int:
    return 1


def two(x: int, y: int = 0) -> int:
    return x + y


@pytest.fixture(scope="module")
def backend() -> Iterator[MemoryBackend]:
    with escher.init(MemoryBackend(nodes={n: {"CPU": 2} for n in NODES})) as active:
        assert isinstance(active, MemoryBackend)
        yield active


@FUZZ
@given(label=labels(), capacity=capacities(), spec=node_specs(NODES), num=junk())
def test_set_resource(
    backend: MemoryBackend, label: Any, capacity: Any, spec: Any, num: Any
) -> None:
    escher.init(backend)
    outcome = check_refused_or_done(
        backend, lambda: escher.set_resource(label, capacity, spec, num_nodes=num)
    )
    if outcome.error is None:
        assert isinstance(outcome.value, tuple)
        assert all(isinstance(n, str) and n in NODES for n in outcome.value)


@FUZZ
@given(
    caps=st.one_of(st.dictionaries(labels(hashable=True), capacities(), max_size=3), junk()),
    spec=node_specs(NODES),
    num=st.one_of(st.none(), st.integers(-1, 3), junk()),
)
def test_set_resources(backend: MemoryBackend, caps: Any, spec: Any, num: Any) -> None:
    escher.init(backend)
    check_refused_or_done(backend, lambda: escher.set_resources(caps, spec, num_nodes=num))


@FUZZ
@given(
    fn=st.one_of(st.just(noop), st.just(two), junk()),
    args=st.lists(st.integers(0, 3), max_size=3),
    resources=requests(),
    name=st.one_of(st.none(), st.text(max_size=5), junk()),
    retries=st.one_of(st.integers(0, 2), junk()),
    again=st.one_of(st.booleans(), junk()),
    duration=st.one_of(st.none(), st.floats(0, 1), junk()),
    extra=st.dictionaries(
        st.sampled_from(["resource", "resouces", "names", "x", "y", "max_retry", "timeout"]),
        st.integers(0, 2),
        max_size=2,
    ),
)
def test_launch(
    backend: MemoryBackend,
    fn: Any,
    args: list[int],
    resources: Any,
    name: Any,
    retries: Any,
    again: Any,
    duration: Any,
    extra: dict[str, int],
) -> None:
    escher.init(backend)

    def call() -> Any:
        return escher.launch(
            fn,
            *args,
            resources=resources,
            name=name,
            max_retries=retries,
            retry_exceptions=again,
            duration=duration,
            **extra,
        )

    outcome = check_refused_or_done(backend, call)
    if outcome.error is None:
        assert isinstance(outcome.value, escher.TaskRef)
        outcome.value.cancel()


@FUZZ
@given(refs=st.one_of(junk(), st.lists(junk(), max_size=3)), timeout=timeouts())
def test_get_and_cancel(backend: MemoryBackend, refs: Any, timeout: Any) -> None:
    escher.init(backend)
    done = escher.launch(noop)
    done.wait(10)
    for value in (refs, [done, refs], done):
        call_bounded(lambda v=value: escher.get(v, timeout=timeout))
    call_bounded(lambda: escher.cancel(refs))


@FUZZ
@given(options=st.dictionaries(st.text(max_size=12), junk(), max_size=3), fn=junk())
def test_task_decorator_and_options(options: dict[str, Any], fn: Any) -> None:
    call_bounded(lambda: escher.task(**options))
    call_bounded(lambda: escher.task(fn))
    remote = escher.task(noop)
    call_bounded(lambda: remote.options(**options))


@FUZZ
@given(node_id=junk(), having=junk(), selector=junk(), num=junk(), spec=node_specs(NODES))
def test_node_spec_constructors(
    node_id: Any, having: Any, selector: Any, num: Any, spec: Any
) -> None:
    call_bounded(lambda: NodeSpec(node_id=node_id))
    call_bounded(lambda: NodeSpec(node_id=node_id, having=having, labels=selector, num_nodes=num))
    call_bounded(lambda: NodeSpec.node(node_id))
    call_bounded(lambda: NodeSpec.with_available(having, num))
    call_bounded(lambda: NodeSpec.with_labels(selector, num))
    call_bounded(lambda: NodeSpec.parse(spec, num))


@FUZZ
@given(values=st.one_of(requests(), junk()), quantity=capacities())
def test_resources(values: Any, quantity: Any) -> None:
    call_bounded(lambda: Resources(values))
    call_bounded(lambda: Resources.of(values))
    call_bounded(lambda: Resources(CPU=quantity))


@FUZZ
@given(
    fn=st.one_of(st.just(noop), junk()),
    args=junk(),
    kwargs=junk(),
    resources=requests(),
    name=junk(),
    retries=junk(),
    again=junk(),
    duration=junk(),
    image=junk(),
    command=st.one_of(junk(), st.lists(junk(), max_size=2)),
)
def test_task_spec(
    fn: Any,
    args: Any,
    kwargs: Any,
    resources: Any,
    name: Any,
    retries: Any,
    again: Any,
    duration: Any,
    image: Any,
    command: Any,
) -> None:
    call_bounded(
        lambda: TaskSpec(
            fn,
            args,
            kwargs,
            resources,
            name,
            max_retries=retries,
            retry_exceptions=again,
            duration=duration,
            image=image,
            command=command,
        )
    )


@FUZZ
@given(
    label=labels(),
    capacity=capacities(),
    spec=node_specs(NODES),
    name=junk(),
    resources=requests(),
    count=junk(),
    creates=st.one_of(st.dictionaries(labels(hashable=True), capacities(), max_size=2), junk()),
    key=junk(),
    domains=junk(),
)
def test_plan_builders(
    label: Any,
    capacity: Any,
    spec: Any,
    name: Any,
    resources: Any,
    count: Any,
    creates: Any,
    key: Any,
    domains: Any,
) -> None:
    plan = Plan()
    call_bounded(lambda: plan.add_resource(label, capacity, spec))
    call_bounded(lambda: plan.add_task(name, resources, count=count, creates=creates))
    call_bounded(lambda: plan.add_topology(key, domains))


ESL_CLASSES = [esl.CoLocation, esl.AntiAffinity, esl.LoadBalance, esl.BinPacking, esl.Gang]


@FUZZ
@given(cls=st.sampled_from(ESL_CLASSES), backend_arg=junk(), name=junk())
def test_esl_common_arguments(
    backend: MemoryBackend, cls: type[esl.ESL], backend_arg: Any, name: Any
) -> None:
    escher.init(backend)
    for kwargs in ({"name": name}, {"backend": backend_arg}):
        outcome = call_bounded(lambda k=kwargs: cls(**k))
        if outcome.error is None:
            outcome.value.close()


@FUZZ
@given(
    name=st.one_of(st.sampled_from(["memory", "Memory", "mem", "", "nope"]), junk()),
    options=st.dictionaries(
        st.sampled_from(["nodes", "max_workers", "virtual_clock", "starvation_threshold", "x"]),
        st.one_of(junk(), st.dictionaries(st.text(max_size=3), junk(), max_size=2)),
        max_size=2,
    ),
)
def test_init(backend: MemoryBackend, name: Any, options: dict[str, Any]) -> None:
    escher.init(backend)
    outcome = call_bounded(lambda: escher.init(name, **options))
    if outcome.error is not None:
        assert escher.current_backend() is backend  # a refused init keeps the active backend
    else:
        outcome.value.backend.close()
        escher.init(backend)
