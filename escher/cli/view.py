"""``escher view``: serve the live page of the configured backend until interrupted."""

from __future__ import annotations

import threading

import click

from escher.api import init
from escher.cli.conventions import backend_option, command, emit, fail
from escher.explain.view import DEFAULT_INTERVAL, MAX_PORT, serve


@command(
    "view",
    examples=[
        "escher view                               # http://127.0.0.1:<port>/, read-only",
        "escher view --backend kubernetes --port 8080",
        'escher view --host 0.0.0.0 --allow-actions --token "$TOKEN"',
    ],
    exit_codes={
        3: "bad input (usage, configuration, unknown name); or the port cannot be listened "
        "on (in use: the reason is printed); nothing done",
    },
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, MAX_PORT),
    default=0,
    help="Port (default 0: a free one).",
)
@click.option(
    "--allow-actions",
    is_flag=True,
    help="Also take actions that change the cluster (cancel a task, set a label).",
)
@click.option(
    "--token",
    default=None,
    envvar="ESCHER_VIEW_TOKEN",
    help="Bearer token the actions require (needed off loopback); or $ESCHER_VIEW_TOKEN.",
)
@click.option(
    "--interval",
    type=click.FloatRange(0.01, 3600),
    default=DEFAULT_INTERVAL,
    show_default=True,
    help="Seconds between reads of the backend.",
)
@click.option(
    "--for",
    "duration",
    type=click.FloatRange(0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="Stop after this long (default: until interrupted).",
)
@backend_option
def view(
    host: str,
    port: int,
    allow_actions: bool,
    token: str | None,
    interval: float,
    duration: float | None,
    backend_name: str | None,
    fmt: str,
) -> None:
    """Serve a live page of the cluster: nodes, intents and verdicts, pending tasks and why."""
    if token is not None and not token.strip():
        fail("--token (or $ESCHER_VIEW_TOKEN) is empty: give a token, or leave it out.")
    with init(backend_name) as backend:
        server = serve(
            backend,
            host=host,
            port=port,
            allow_actions=allow_actions,
            token=token,
            interval=interval,
        )
        emit({"url": server.url}, fmt, f"escher view: {server.url}  (Ctrl-C stops)")
        try:
            threading.Event().wait(duration)
        finally:
            server.stop()
