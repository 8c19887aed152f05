"""The list-then-watch loop both of the backend's watchers run (pods and nodes).

List, then watch from the list's resourceVersion; a watch that ends or breaks (the API
server restarted, the connection dropped) resumes from the last resourceVersion it saw;
only a 410 Gone (that version is older than the server keeps) lists again. The watcher
supplies what to do with a list and with each event, and how to wait after a failure.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from escher.backends.kubernetes._kube import ApiException

#: Lists, hands every item over; returns the list's resourceVersion.
Lister = Callable[[], str]
#: Opens a watch from a resourceVersion: its events (dicts with 'type' and 'object').
Watcher = Callable[[str], Iterable[dict[str, Any]]]
#: Handles one ADDED, MODIFIED or DELETED event: (type, object).
Handler = Callable[[str, dict[str, Any]], None]
#: After a failure (the HTTP status or the exception, the failures before it, whether the
#: watch will resume rather than list): logs and pauses; returns the new failure count, or
#: None to end the loop (e.g. a 403: the identity may not watch).
OnFailure = Callable[[object, int, bool], int | None]


def follow(events: Iterable[dict[str, Any]], version: str, stop: threading.Event,
           handle: Handler) -> str:  # fmt: skip
    """Hand each event of a watch to `handle` until the server ends it (or `stop` is set);
    the last resourceVersion seen. An ERROR event raises it as an `ApiException`."""
    for event in events:
        kind = str(event.get("type"))
        obj = event.get("object") or {}
        if kind == "ERROR":
            raise ApiException(status=int(obj.get("code") or 500), reason=obj.get("message"))
        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
        if kind != "BOOKMARK":  # a bookmark only moves the version on
            handle(kind, obj)
        if stop.is_set():
            break
    return version


def list_and_watch(
    stop: threading.Event,
    relist: Lister,
    watch: Watcher,
    handle: Handler,
    on_failure: OnFailure,
    *,
    out_of_step: Callable[[], None] = lambda: None,
) -> None:
    """Run the loop until `stop` is set or `on_failure` ends it; `out_of_step` is called
    whenever the watch broke (before the list or resume that follows)."""
    version: str | None = None
    failures: int | None = 0
    while failures is not None and not stop.is_set():
        try:
            if version is None:
                version = relist()
            version = follow(watch(version), version, stop, handle)
            failures = 0
        except ApiException as exc:
            out_of_step()
            if exc.status == 410:
                version = None  # too old for the server: list again
                continue
            failures = on_failure(exc.status, failures, version is not None)
        except Exception as exc:
            out_of_step()
            failures = on_failure(exc, failures, version is not None)
