"""Ray's completion callback of an ObjectRef (private Ray API, isolated here).

`ObjectRef._on_completed(callback)` calls `callback(result)` on Ray's own I/O thread once
the object is ready, where `result` is the value or the `RayError` that stands for it. It
is what `ObjectRef.future()` is built on; calling it directly saves a
`concurrent.futures.Future` and its lock per task. Where a Ray lacks it, the future is
used, with the same outcome passed to the callback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def on_completed(object_ref: Any, callback: Callable[[Any], None]) -> None:
    """Call `callback(result)` once `object_ref` is ready (on Ray's I/O thread: `callback`
    must not block). `result` is the value, or the `RayError` (a `RayTaskError` when the
    task raised) that Ray stored instead of one."""
    hook = getattr(object_ref, "_on_completed", None)
    if callable(hook):
        hook(callback)
        return
    object_ref.future().add_done_callback(lambda future: callback(outcome(future)))


def outcome(future: Any) -> Any:
    """The value of a done future, or the exception it holds."""
    error = future.exception()
    return future.result() if error is None else error
