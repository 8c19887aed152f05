"""Typed backend options: checked against the backend constructor's own annotations.

Every backend, built-in or third-party, declares its options as keyword parameters of its
``__init__`` with type hints. `check_options` validates the options a configuration gives
against those hints with pydantic in strict mode, before the backend is built: a string where a
boolean belongs (``virtual_clock = "false"``) is rejected with the place it came from (file and
key, environment variable, or argument), not silently taken as true. A backend built directly
(``KubernetesBackend(namespace=3)``) gets the same check: the built-in backends decorate their
``__init__`` with `checked_options`. No backend writes its own type checks; range checks
(``max_workers >= 1``) stay in the backend.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from escher.core.errors import ConfigError, did_you_mean

__all__ = ["accepted_options", "check_options", "checked_options"]

Init = TypeVar("Init", bound=Callable[..., None])


def _adapters(cls: type) -> dict[str, tuple[Any, Any]]:
    """Option name -> (a strict pydantic TypeAdapter or None: not checkable, its type hint)
    for `cls`."""
    return _init_adapters(inspect.unwrap(cls.__init__))  # type: ignore[misc]


@functools.cache
def _init_adapters(init: Callable[..., Any]) -> dict[str, tuple[Any, Any]]:
    from pydantic import ConfigDict, TypeAdapter

    config = ConfigDict(strict=True, arbitrary_types_allowed=True)
    params = inspect.signature(init).parameters
    try:
        hints = typing.get_type_hints(init)
    except Exception:  # a hint that does not resolve is not checked
        hints = {}
    adapters: dict[str, tuple[Any, Any]] = {}
    for name, param in params.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        hint = hints.get(name)
        try:
            adapter = None if hint is None else TypeAdapter(hint, config=config)
        except Exception:  # a type pydantic cannot build a schema for
            adapter = None
        adapters[name] = (adapter, hint)
    return adapters


def accepted_options(cls: type) -> list[str]:
    """The option names `cls` takes, in signature order."""
    return list(_adapters(cls))


def _takes_any(cls: type) -> bool:
    params = inspect.signature(inspect.unwrap(cls.__init__)).parameters  # type: ignore[misc]
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def checked_options(init: Init) -> Init:
    """Decorate a backend's ``__init__`` so that the options it is given pass `check_options`
    first (by type; the backend checks ranges), however the backend is built.

    Args:
        init: The backend's ``__init__``, its options annotated.

    Returns:
        The same ``__init__``, checking its arguments before it runs.
    """
    signature = inspect.signature(init)

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        given = signature.bind(self, *args, **kwargs).arguments
        given.pop(next(iter(signature.parameters)))  # self
        _check(_init_adapters(init), getattr(type(self), "name", type(self).__name__), given)
        init(self, *args, **kwargs)

    return typing.cast(Init, checked)


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
    _check(_adapters(cls), getattr(cls, "name", cls.__name__), options, origins, cls)


def _check(
    adapters: Mapping[str, tuple[Any, Any]],
    backend: str,
    options: Mapping[str, Any],
    origins: Mapping[str, str] | None = None,
    cls: type | None = None,
) -> None:
    """Check `options` against `adapters` (option name -> its TypeAdapter and type hint);
    an unknown option is an error unless `cls` takes any (``**options``)."""
    origins = origins or {}
    for key, value in options.items():
        where = origins.get(key, f"argument {key}")
        if key not in adapters:
            if cls is None or _takes_any(cls):
                continue
            raise ConfigError(
                f"{where}: the {backend} backend has no option {key!r}; it takes "
                f"{', '.join(adapters) or 'no options'}.{did_you_mean(key, adapters)}"
            )
        adapter, hint = adapters[key]
        if adapter is None or _valid(adapter, value):
            continue
        expected = _type_name(hint)
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
