"""Every backend's options pass the one typed check, however the backend is built: through
the registry (with where each option came from) or by calling its class directly."""

from __future__ import annotations

from typing import Any

import pytest

from escher.backends import checked_options, create_backend, get_backend_class
from escher.backends.memory import MemoryBackend
from escher.core.errors import ConfigError

# backend -> (option, a value of the wrong type): each built directly, before any connection
WRONG_TYPES: list[tuple[str, str, Any]] = [
    ("memory", "virtual_clock", "false"),
    ("memory", "max_workers", True),
    ("memory", "nodes", ["n1"]),
    ("kubernetes", "namespace", 3),
    ("kubernetes", "image_pull_secrets", "regcred"),
    ("kubernetes", "node_selector", {"pool": 1}),
    ("kubernetes", "conflict_retries", 2.5),
    ("kubernetes", "creates_in_flight", False),
    ("kubernetes", "scheduling_gates", "yes"),
    ("kubernetes", "renew_seconds", "10"),
    ("kubernetes", "session_id", 7),
    ("ray", "prefix", 3),
    ("ray", "lease_seconds", "60"),
    ("ray", "share_writes", "true"),
]


def _class(name: str) -> Any:
    try:
        return get_backend_class(name)
    except Exception:  # its extra is not installed here
        pytest.skip(f"the {name} backend is not installed")


@pytest.mark.parametrize(("backend", "option", "value"), WRONG_TYPES)
def test_a_backend_built_directly_checks_its_option_types(
    backend: str, option: str, value: Any
) -> None:
    cls = _class(backend)
    with pytest.raises(ConfigError, match=rf"argument {option}: the {backend} backend expects"):
        cls(**{option: value})


@pytest.mark.parametrize(("backend", "option", "value"), WRONG_TYPES)
def test_the_registry_names_where_a_wrong_option_came_from(
    backend: str, option: str, value: Any
) -> None:
    _class(backend)
    with pytest.raises(ConfigError, match=rf"escher.toml: \[{backend}\] {option}: .* expects"):
        create_backend(backend, {option: value}, {option: f"escher.toml: [{backend}] {option}"})


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [("max_workers", 0, "max_workers must be an int >= 1"), ("starvation_threshold", -1, ">= 1")],
)
def test_ranges_stay_with_the_backend(option: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MemoryBackend(**{option: value})


def test_positional_arguments_are_checked_too() -> None:
    with pytest.raises(ConfigError, match="argument nodes"):
        MemoryBackend("n1")  # type: ignore[arg-type]


def test_a_third_party_backend_can_use_the_same_check() -> None:
    class Small(MemoryBackend):
        name = "small"

        @checked_options
        def __init__(self, size: int = 1, **options: Any) -> None:
            super().__init__(**options)
            self.size = size

    small = Small(size=2, virtual_clock=True)
    assert small.size == 2
    small.close()
    with pytest.raises(ConfigError, match="argument size: the small backend expects int"):
        Small(size="2")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="argument virtual_clock: the small backend expects"):
        Small(virtual_clock="yes")  # type: ignore[arg-type]
