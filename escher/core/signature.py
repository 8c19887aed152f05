"""Checking keyword arguments against a callable's signature before it runs remotely."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from escher.core.errors import InvalidOptionError, did_you_mean


def check_keywords(
    fn: Callable[..., Any], kwargs: Mapping[str, Any], call: str, options: Iterable[str]
) -> None:
    """Refuse keywords that `fn` does not take, before the task is launched.

    A keyword that `fn` cannot take would only fail inside the task, on a node, after it was
    scheduled; most often it is a misspelt option of the call (``resource=`` for
    ``resources=``). Callables whose signature cannot be read, and those taking
    ``**kwargs``, accept any keyword.

    Args:
        fn: The task's callable.
        kwargs: The keywords that will be passed to it.
        call: The call's name for the message, e.g. "launch()".
        options: The call's own options, suggested when a keyword is close to one.

    Raises:
        InvalidOptionError: naming the first keyword `fn` does not take, with a suggestion.
    """
    try:
        parameters = inspect.signature(fn, follow_wrapped=False).parameters
    except (TypeError, ValueError):  # builtins and C callables without a signature
        return
    taken = []
    for name, parameter in parameters.items():
        if parameter.kind is parameter.VAR_KEYWORD:
            return
        if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            taken.append(name)
    unknown = [k for k in kwargs if k not in taken]
    if unknown:
        choices = sorted(options)
        what = getattr(fn, "__name__", type(fn).__name__)
        raise InvalidOptionError(
            f"{call} got keyword {unknown[0]!r}, which is neither one of its options "
            f"({', '.join(choices)}) nor a parameter of {what}()."
            f"{did_you_mean(unknown[0], [*choices, *taken])}"
        )
