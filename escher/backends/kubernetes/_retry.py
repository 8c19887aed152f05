"""Riding out an API server that restarts: retry calls that failed without an answer.

A call that got no HTTP answer (connection refused or reset, a timeout), an answer that
says "not now" (429, 500, 502, 503, 504: e.g. etcd is restarting under the API server), or a
refusal whose reason is that the API server could not reach its own backends (a shutting-down
server answers a create with 403 "Get .../limitranges: dial tcp ...: connection refused"; with
etcd restarting, 403 "rpc error: code = Unavailable desc = transport is closing") is
tried again with a growing pause, for at most `patience` seconds in all. Only calls that are
safe to repeat go through here: reads, writes guarded by a resourceVersion, creates of a
named object (a repeat gets 409, which the caller resolves), deletes.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from escher.backends.kubernetes._errors import message
from escher.backends.kubernetes._kube import ApiException

log = logging.getLogger("escher.kubernetes")

T = TypeVar("T")

#: HTTP answers that mean "the server cannot serve this now", not "this is wrong".
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})

#: Answers that are final whatever their message: the object is gone, or already exists.
FINAL_STATUS = frozenset({404, 409, 410})

#: In a refusal's message: the API server failed to reach its own backends (etcd, its
#: loopback client for admission lookups), not a verdict on the request.
BACKEND_TROUBLE = (
    "connection refused",
    "connection reset",
    "dial tcp",
    "i/o timeout",
    "context deadline exceeded",
    "client connection lost",
    "etcdserver:",
    "is shutting down",
    # etcd restarting under the API server, as gRPC says it (a create's admission lookups)
    "code = unavailable",
    "transport is closing",
)


def transient(exc: BaseException) -> bool:
    """True for a failure a repeat of the same call may not meet."""
    if isinstance(exc, ApiException):
        if not exc.status or exc.status in TRANSIENT_STATUS:
            return True
        if exc.status in FINAL_STATUS:
            return False
        text = message(exc).lower()
        return any(marker in text for marker in BACKEND_TROUBLE)
    return isinstance(exc, Exception)


def pause(attempt: int, stop: threading.Event | None = None) -> None:
    """Sleep 0.1 s, 0.2 s, ... up to 2 s (with jitter) before attempt `attempt` + 1."""
    seconds = min(2.0, 0.1 * 2**attempt) * (0.5 + random.random())
    if stop is not None:
        stop.wait(seconds)
    else:
        time.sleep(seconds)


def patiently(call: Callable[[], T], patience: float, what: str) -> T:
    """`call()`, repeated after transient failures for up to `patience` seconds.

    Raises:
        Exception: the last failure, once patience ran out, or any non-transient one.
    """
    deadline = time.monotonic() + patience
    attempt = 0
    while True:
        try:
            return call()
        except Exception as exc:
            if not transient(exc) or time.monotonic() >= deadline:
                raise
            if attempt == 0:
                log.warning("%s: the API server could not serve it (%s); retrying", what, exc)
            pause(attempt)
            attempt += 1
