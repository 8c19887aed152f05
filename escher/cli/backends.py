"""``escher backends``: which backends exist, which can be used here, which one is configured."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from escher.backends import ALIASES, accepted_options, availability, known_backends
from escher.backends.base import Backend, Capability
from escher.cli.conventions import command, emit
from escher.config import Config, resolve


def _capabilities(cls: type[Backend]) -> list[str]:
    return [c.name for c in Capability if c and c.name and c in cls.capabilities]


def _row(name: str, config: Config) -> dict[str, Any]:
    entry = known_backends()[name]
    cls, reason = availability(name)
    return {
        "name": name,
        "aliases": sorted(a for a, target in ALIASES.items() if target == name),
        "configured": name == config.backend,
        "available": cls is not None,
        "reason": reason or None,
        "install": entry.install_hint,
        "capabilities": _capabilities(cls) if cls is not None else [],
        "options": accepted_options(cls) if cls is not None else [],
        "target": entry.target,
    }


def _facts(config: Config) -> dict[str, Any]:
    """The configured backend's own facts (``Backend.describe()``): it is built to ask."""
    from escher.backends import create_backend
    from escher.cli.state import backend_facts

    backend = create_backend(config.backend, config.options, config.origins)
    try:
        return backend_facts(backend)
    finally:
        backend.close()


def _render(data: dict[str, Any]) -> Any:
    def text(console: Console) -> None:
        table = Table(title="escher backends")
        for column in ("name", "status", "capabilities", "import path"):
            table.add_column(column, overflow="fold")  # narrow output wraps, never cuts
        for row in data["backends"]:
            if row["available"]:
                status = "[green]available[/green]"
            else:
                status = "[yellow]not available[/yellow] (see below)"
            marker = " (configured)" if row["configured"] else ""
            table.add_row(
                escape(row["name"] + marker),
                status,
                ", ".join(row["capabilities"]),
                escape(row["target"]),
            )
        console.print(table)
        for row in data["backends"]:
            if not row["available"]:  # one line each, so the command copies whole
                line = f"{row['name']}: {row['reason'] or ''}"
                console.print(escape(line), soft_wrap=True)
        configured = data["configured"]
        where = ", ".join(configured["sources"]) or "default"
        console.print(
            f"configured backend: [bold]{escape(configured['backend'])}[/bold] "
            f"(from {escape(where)})"
        )
        for key, value in (configured.get("facts") or {}).items():
            console.print(escape(f"  {key}: {value}"))

    return text


@command(
    "backends",
    examples=[
        "escher backends",
        "escher backends --connect           # also build the configured one: its facts",
        "escher backends --format json | jq '.backends[] | select(.available) | .name'",
    ],
)
@click.option(
    "--connect",
    is_flag=True,
    help="Also build the configured backend (starting or joining its cluster) to show its "
    "facts, such as Ray's mode.",
)
def backends(connect: bool, fmt: str) -> None:
    """List the backends escher knows and whether each can be used here.

    A backend is available when its module and everything it needs import here; otherwise
    the row says what to install.
    """
    config = resolve()
    data: dict[str, Any] = {
        "configured": {"backend": config.backend, "sources": list(config.sources)},
        "backends": [_row(name, config) for name in sorted(known_backends())],
    }
    if connect:
        data["configured"]["facts"] = _facts(config)
    emit(data, fmt, _render(data))
