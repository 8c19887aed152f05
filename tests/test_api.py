"""The module-level API: init / shutdown lifecycle and the task decorator."""

from __future__ import annotations

import pytest

import escher
from escher.backends.memory import MemoryBackend
from escher.core.errors import NotInitializedError, NotInTaskError


def test_module_api_lifecycle() -> None:
    escher.shutdown()
    with pytest.raises(NotInitializedError):
        escher.set_resource("x", 1, "a")
    with pytest.raises(NotInTaskError):
        escher.node_id()
    first = escher.init(nodes={"a": {"CPU": 1}}).backend
    second = escher.init(nodes={"b": {"CPU": 1}}).backend  # replaces and closes the first
    assert escher.current_backend() is second
    with pytest.raises(escher.BackendError):
        first.set_resource("x", 1, "a")
    with escher.init(MemoryBackend(nodes={"c": {"CPU": 1}})) as backend:
        assert escher.current_backend() is backend
    assert not escher.is_initialized()


def test_task_decorator_rejects_unknown_options() -> None:
    with pytest.raises(TypeError):
        escher.task(resource={"CPU": 1})
    fn = escher.task(lambda x: x + 1)
    assert fn(1) == 2
    with pytest.raises(TypeError):
        fn.options(cpus=1)
