"""`escher view`: a local web page of the live cluster (starlette + uvicorn, the ``view`` extra).

One page: every node with used/total bars of its node-defined and ephemeral resources, the
intents in force with the verifier's verdicts, and the pending tasks with their `why`. The page
listens to server-sent events (`/events`): the server reads the backend every `interval`
seconds (0.25 by default) and sends a new snapshot when anything changed, so the page is at
most about `interval` behind the backend. `/api/state` returns one snapshot as JSON.

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
    ) -> None:
        self.backend = backend
        self.allow_actions = allow_actions
        self.token = token
        self.interval = interval
        self.checker = checker

    def current(self) -> str:
        return json.dumps(snapshot(self.backend, self.checker), sort_keys=True, default=str)

    async def page(self, request: Request) -> Response:
        return HTMLResponse(PAGE)

    async def state(self, request: Request) -> Response:
        return Response(await asyncio.to_thread(self.current), media_type="application/json")

    async def events(self, request: Request) -> Response:
        async def stream() -> AsyncIterator[str]:
            last, beat = "", time.monotonic()
            while not await request.is_disconnected():
                data = await asyncio.to_thread(self.current)
                if data != last or time.monotonic() - beat > 15:
                    last, beat = data, time.monotonic()
                    yield f"data: {data}\n\n"
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
) -> Starlette:
    """The web application for `backend` (see the module doc)."""
    app = _App(backend, allow_actions, token, interval, checker)
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


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def serve(
    backend: Backend,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    allow_actions: bool = False,
    token: str | None = None,
    interval: float = DEFAULT_INTERVAL,
    verify_interval: float = 2.0,
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

    Raises:
        ValidationError: actions on a non-loopback address without a token.
    """
    if allow_actions and token is None and not is_loopback(host):
        raise ValidationError(
            f"actions that change the cluster are never served on {host} without a token: "
            "give a token, or listen on 127.0.0.1."
        )
    port = port or _free_port(host)
    checker = IntentChecker(backend, interval=verify_interval)
    app = create_app(
        backend, allow_actions=allow_actions, token=token, interval=interval, checker=checker
    )
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="escher-view", daemon=True)
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
