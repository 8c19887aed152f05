"""Typed backend options: checked against the backend constructor's own annotations.

Every backend, built-in or third-party, declares its options as keyword parameters of its
``__init__`` with type hints. `check_options` validates the options a configuration gives
against those hints with pydantic in strict mode, before the backend is built: a string where a
boolean belongs (``virtual_clock = "false"``) is rejected with the place it came from (file and
key, environment variable, or argument), not silently taken as true. No backend writes its own
type checks; range checks (``max_workers >= 1``) stay in the backend.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Mapping
from typing import Any

from escher.core.errors import ConfigError, did_you_mean


@functools.cache
def _adapters(cls: type) -> dict[str, Any]:
    """Option name -> a strict pydantic TypeAdapter (or None: not checkable) for `cls`."""
    from pydantic import ConfigDict, TypeAdapter

    config = ConfigDict(strict=True, arbitrary_types_allowed=True)
    params = inspect.signature(cls.__init__).parameters  # type: ignore[misc]
    try:
        hints = typing.get_type_hints(cls.__init__)  # type: ignore[misc]
    except Exception:  # a hint that does not resolve is not checked
        hints = {}
    adapters: dict[str, Any] = {}
    for name, param in params.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        hint = hints.get(name)
        try:
            adapters[name] = None if hint is None else TypeAdapter(hint, config=config)
        except Exception:  # a type pydantic cannot build a schema for
            adapters[name] = None
    return adapters


def accepted_options(cls: type) -> list[str]:
    """The option names `cls` takes, in signature order."""
    return list(_adapters(cls))


def _takes_any(cls: type) -> bool:
    params = inspect.signature(cls.__init__).parameters  # type: ignore[misc]
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _tuples(value: Any) -> Any:
    """TOML and JSON have arrays, not tuples: a list may stand for a tuple."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


def _hint(key: str, value: Any, expected: str, where: str) -> str:
    if isinstance(value, str) and expected == "bool" and value.lower() in ("true", "false"):
        fix = value.lower()
        if where.startswith("environment"):
            return f" Use {fix} (JSON) as the value."
        if where.startswith("argument"):
            return f" Pass {fix.capitalize()}, not a string."
        return f" Write it without quotes: {key} = {fix}."
    return ""


def _type_name(hint: Any) -> str:
    text = getattr(hint, "__name__", None) if isinstance(hint, type) else None
    return text or str(hint).replace("typing.", "").replace("collections.abc.", "")


def check_options(
    cls: type, options: Mapping[str, Any], origins: Mapping[str, str] | None = None
) -> None:
    """Check `options` against the annotations of ``cls.__init__``; change nothing.

    Args:
        cls: The backend class.
        options: Option name -> value, as the configuration gives them.
        origins: Option name -> where it came from (``"escher.toml: [memory] nodes"``,
            ``"environment variable ESCHER_MEMORY_NODES"``, ``"argument nodes"``), for the
            message; options without an origin are named as arguments.

    Raises:
        ConfigError: an option the backend does not take (with a suggestion), or a value of
            the wrong type (naming where it came from, what was expected and what was given).
    """
    adapters = _adapters(cls)
    origins = origins or {}
    backend = getattr(cls, "name", cls.__name__)
    for key, value in options.items():
        where = origins.get(key, f"argument {key}")
        if key not in adapters:
            if _takes_any(cls):
                continue
            raise ConfigError(
                f"{where}: the {backend} backend has no option {key!r}; it takes "
                f"{', '.join(adapters) or 'no options'}.{did_you_mean(key, adapters)}"
            )
        adapter = adapters[key]
        if adapter is None or _valid(adapter, value):
            continue
        expected = _type_name(_hint_of(cls, key))
        raise ConfigError(
            f"{where}: the {backend} backend expects {expected}, got {value!r} "
            f"({type(value).__name__}).{_hint(key, value, expected, where)}"
        )


def _valid(adapter: Any, value: Any) -> bool:
    from pydantic import ValidationError

    for candidate in (value, _tuples(value)):
        try:
            adapter.validate_python(candidate)
        except ValidationError:
            continue
        return True
    return False


def _hint_of(cls: type, key: str) -> Any:
    try:
        return typing.get_type_hints(cls.__init__).get(key, Any)  # type: ignore[misc]
    except Exception:
        return Any
