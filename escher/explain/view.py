"""`escher view`: a local web page of the live cluster (starlette + uvicorn, the ``view`` extra).

One page: every node with used/total bars of its node-defined and ephemeral resources, the
intents in force with the verifier's verdicts, and the pending tasks with their `why`. The page
listens to server-sent events (`/events`): the server reads the backend every `interval`
seconds (0.25 by default) and sends a snapshot first and then only when something shown
changed (the snapshot's time alone is not a change), so the page is at most about `interval`
behind the backend; while nothing changes it sends a comment line (``: heartbeat``) every
`HEARTBEAT` seconds so proxies keep the stream open. `/api/state` returns one snapshot as JSON.

Read-only by default. With ``allow_actions=True`` the server also takes
``POST /api/cancel/<task id>`` and ``POST /api/set_resource`` (JSON ``{"label", "capacity",
"node"}``); those need ``Authorization: Bearer <token>`` when a token is set, and a server on
a non-loopback address refuses to start with actions but no token.

```python no-run
import escher
from escher.explain.view import serve

with escher.init(nodes={"n1": {"CPU": 2}}) as backend, serve(backend) as server:
    print(server.url)          # open it in a browser
```
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import json
import secrets
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

try:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
    from starlette.routing import Route
except ImportError as exc:  # pragma: no cover - the extra is missing
    from escher.core.errors import BackendUnavailableError

    raise BackendUnavailableError(
        "escher view needs the 'view' extra: pip install 'escher-sched[view]'"
    ) from exc

from escher.backends.base import Backend
from escher.core.errors import EscherError, ValidationError
from escher.explain._page import PAGE
from escher.explain._snapshot import IntentChecker, snapshot

#: Seconds between reads of the backend (the page is at most about this far behind).
DEFAULT_INTERVAL = 0.25

#: Seconds between heartbeat comments on the event stream while nothing changes.
HEARTBEAT = 15.0

#: The largest TCP port.
MAX_PORT = 65535


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _App:
    """The routes of the page, bound to one backend."""

    def __init__(
        self,
        backend: Backend,
        allow_actions: bool,
        token: str | None,
        interval: float,
        checker: IntentChecker | None,
        heartbeat: float = HEARTBEAT,
    ) -> None:
        self.backend = backend
        self.allow_actions = allow_actions
        self.token = token
        self.interval = interval
        self.checker = checker
        self.heartbeat = heartbeat

    def current(self) -> str:
        return json.dumps(snapshot(self.backend, self.checker), sort_keys=True, default=str)

    def current_with_key(self) -> tuple[str, str]:
        """The snapshot as JSON, and what decides whether it changed (all but its time)."""
        data = snapshot(self.backend, self.checker)
        text = json.dumps(data, sort_keys=True, default=str)
        data.pop("time", None)
        return text, json.dumps(data, sort_keys=True, default=str)

    async def page(self, request: Request) -> Response:
        return HTMLResponse(PAGE)

    async def state(self, request: Request) -> Response:
        return Response(await asyncio.to_thread(self.current), media_type="application/json")

    async def events(self, request: Request) -> Response:
        async def stream() -> AsyncIterator[str]:
            last: str | None = None
            beat = time.monotonic()
            while not await request.is_disconnected():
                data, key = await asyncio.to_thread(self.current_with_key)
                if key != last:
                    last, beat = key, time.monotonic()
                    yield f"data: {data}\n\n"
                elif time.monotonic() - beat >= self.heartbeat:
                    beat = time.monotonic()
                    yield ": heartbeat\n\n"
                await asyncio.sleep(self.interval)

        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    def authorised(self, request: Request) -> bool:
        if not self.allow_actions:
            return False
        return self.token is None or secrets.compare_digest(
            request.headers.get("authorization", ""), f"Bearer {self.token}"
        )

    async def cancel(self, request: Request) -> Response:
        if not self.authorised(request):
            return JSONResponse({"error": "actions are off or the token is wrong"}, 403)
        task_id = request.path_params["task_id"]
        for ref in self.backend.tasks():
            if ref.id == task_id:
                return JSONResponse({"cancelled": ref.cancel()})
        return JSONResponse({"error": f"no live task {task_id!r}"}, 404)

    async def set_resource(self, request: Request) -> Response:
        if not self.authorised(request):
            return JSONResponse({"error": "actions are off or the token is wrong"}, 403)
        try:
            body = await request.json()
            nodes = self.backend.set_resource(body["label"], body["capacity"], body["node"])
        except (EscherError, KeyError, TypeError, ValueError) as exc:
            return JSONResponse({"error": str(exc)}, 400)
        return JSONResponse({"nodes": list(nodes)})


def create_app(
    backend: Backend,
    *,
    allow_actions: bool = False,
    token: str | None = None,
    interval: float = DEFAULT_INTERVAL,
    checker: IntentChecker | None = None,
    heartbeat: float = HEARTBEAT,
) -> Starlette:
    """The web application for `backend` (see the module doc)."""
    app = _App(backend, allow_actions, token, interval, checker, heartbeat)
    routes = [
        Route("/", app.page),
        Route("/api/state", app.state),
        Route("/events", app.events),
        Route("/api/cancel/{task_id}", app.cancel, methods=["POST"]),
        Route("/api/set_resource", app.set_resource, methods=["POST"]),
    ]
    return Starlette(routes=routes)


class ViewServer:
    """A running `escher view` server (in a background thread). Use `serve` to start one.

    Attributes:
        url: Where the page is.
    """

    def __init__(
        self, server: uvicorn.Server, thread: threading.Thread, url: str, checker: IntentChecker
    ) -> None:
        self._server = server
        self._thread = thread
        self._checker = checker
        self.url = url

    def stop(self) -> None:
        """Stop serving (waits up to 10 s)."""
        self._server.should_exit = True
        self._thread.join(10)
        self._checker.stop()

    def __enter__(self) -> ViewServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port` (0: a free port), ready for the server.

    Raises:
        ValidationError: `port` is out of range, or the address cannot be bound (in use, not
            an address of this machine), with the system's reason.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= MAX_PORT:
        raise ValidationError(
            f"port must be an int from 0 to {MAX_PORT} (0: a free one), got {port!r}."
        )
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
    except (OSError, UnicodeError) as exc:
        raise ValidationError(
            f"cannot listen on {host!r}: not an address of this machine "
            f"({getattr(exc, 'strerror', None) or exc}). Give another host, e.g. 127.0.0.1."
        ) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        hint = (
            "another program listens there: give another port, or 0 for a free one"
            if exc.errno == errno.EADDRINUSE
            else "give another host or port"
        )
        raise ValidationError(
            f"cannot listen on {host}:{port}: {reason.lower()}; {hint}."
        ) from None
    return sock


def serve(
    backend: Backend,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    allow_actions: bool = False,
    token: str | None = None,
    interval: float = DEFAULT_INTERVAL,
    verify_interval: float = 2.0,
    heartbeat: float = HEARTBEAT,
) -> ViewServer:
    """Serve the page for `backend` from a background thread; returns once it listens.

    Args:
        backend: The backend to show.
        host: Address to listen on (loopback by default).
        port: Port (0: a free one).
        allow_actions: Also take the actions that change the cluster (see the module doc).
        token: Required as ``Authorization: Bearer <token>`` for actions.
        interval: Seconds between reads of the backend.
        verify_interval: Seconds between verifications of the intents in force.
        heartbeat: Seconds between heartbeat comments on the event stream while nothing
            changes.

    Raises:
        ValidationError: actions on a non-loopback address without a token; a port out of
            range or an address that cannot be bound (in use), with the reason.
    """
    if allow_actions and token is None and not is_loopback(host):
        raise ValidationError(
            f"actions that change the cluster are never served on {host} without a token: "
            "give a token, or listen on 127.0.0.1."
        )
    sock = listen(host, port)
    port = int(sock.getsockname()[1])
    checker = IntentChecker(backend, interval=verify_interval)
    app = create_app(
        backend,
        allow_actions=allow_actions,
        token=token,
        interval=interval,
        checker=checker,
        heartbeat=heartbeat,
    )
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="escher-view", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not server.started:
        server.should_exit = True
        raise EscherError(f"escher view could not listen on {host}:{port}.")
    checker.start()
    shown = f"[{host}]" if ":" in host else host
    return ViewServer(server, thread, f"http://{shown}:{port}/", checker)
