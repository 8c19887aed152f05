"""The `escher` command line: backends, state, demo, verify, gc, bench."""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from escher.core.errors import EscherError


def _console() -> Console:
    """A console on the current stdout; wide when it is not a terminal (pipes, CI logs)."""
    return Console(width=None if sys.stdout.isatty() else 160)


# Subcommands that live next to the feature they drive, imported only when used.
_LAZY_COMMANDS = {
    "verify": ("escher.verify._cli", "verify"),
    "gc": ("escher.backends.kubernetes._cli", "gc"),
    "bench": ("escher.bench._cli", "bench"),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *_LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _LAZY_COMMANDS:
            module_name, attr = _LAZY_COMMANDS[cmd_name]
            try:
                command = getattr(importlib.import_module(module_name), attr)
            except ImportError as exc:
                return _unavailable(cmd_name, str(exc))
            return command if isinstance(command, click.Command) else None
        return super().get_command(ctx, cmd_name)


def _unavailable(name: str, reason: str) -> click.Command:
    @click.command(name, context_settings={"ignore_unknown_options": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def stub(args: tuple[str, ...]) -> None:
        raise click.ClickException(f"'escher {name}' is not available here: {reason}")

    return stub


@click.group(cls=_LazyGroup)
@click.version_option(package_name="escher")
def main() -> None:
    """escher: expressive cluster scheduling with ephemeral resources."""


def _fail(exc: EscherError) -> None:
    _console().print(f"[red]error:[/red] {exc}")
    sys.exit(3)


@main.command()
def backends() -> None:
    """List the backends escher knows and whether each can be used here."""
    from escher._config import resolve
    from escher.backends._registry import get_backend_class, known_backends

    try:
        config = resolve()
    except EscherError as exc:
        _fail(exc)
    table = Table(title="escher backends")
    for column in ("name", "status", "capabilities", "import path"):
        table.add_column(column)
    for name, entry in sorted(known_backends().items()):
        try:
            cls = get_backend_class(name)
            caps = ", ".join(
                c.name or ""
                for c in type(cls.capabilities)
                if c in cls.capabilities and c.name != "NONE"
            )
            status = "[green]available[/green]"
        except EscherError:
            caps, status = "", f"[yellow]not installed[/yellow]: {entry.install_hint or ''}"
        marker = " (configured)" if name == config.backend else ""
        table.add_row(name + marker, status, caps, entry.target)
    console = _console()
    console.print(table)
    where = ", ".join(config.sources) or "default"
    console.print(f"configured backend: [bold]{config.backend}[/bold] (from {where})")


@main.command()
@click.option("--backend", "backend_name", default=None, help="Backend name (else config).")
@click.option("--json", "as_json", is_flag=True, help="Print the cluster file format.")
def state(backend_name: str | None, as_json: bool) -> None:
    """Show every node's total and available resources."""
    import escher

    try:
        with escher.init(backend_name) as backend:
            snapshot = backend.get_cluster_state()
    except EscherError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps(snapshot.to_dict(), indent=2))
        return
    table = Table(title=f"cluster state ({backend.name})")
    for column in ("node", "alive", "labels", "total", "available", "ephemeral"):
        table.add_column(column)
    for node in snapshot.nodes.values():
        table.add_row(
            node.id,
            "yes" if node.alive else "no",
            _fmt(node.labels),
            _fmt(node.physical.to_dict()),
            _fmt(node.available.to_dict()),
            _fmt({k: v for k, v in node.total.to_dict().items() if k in node.ephemeral}),
        )
    _console().print(table)


def _fmt(mapping: Any) -> str:
    return ", ".join(f"{k}={_num(v)}" for k, v in sorted(mapping.items())) or "-"


def _num(value: Any) -> str:
    if isinstance(value, float) and value >= 2**20:
        return f"{value / 2**30:.1f}Gi"
    if isinstance(value, int) and value >= 2**20:
        return f"{value / 2**30:.1f}Gi"
    return str(value)


@main.command()
@click.option("--backend", "backend_name", default=None, help="Backend name (else config).")
def demo(backend_name: str | None) -> None:
    """Run the paper's load-balancing + co-location example and show where tasks ran."""
    import escher
    from escher.esl.demo import run_demo

    try:
        with escher.init(backend_name) as backend:
            placements = run_demo(backend)
    except EscherError as exc:
        _fail(exc)
    table = Table(title=f"load balancing + co-location on {backend.name}")
    table.add_column("task")
    table.add_column("node")
    for task_name, node_id in placements:
        table.add_row(task_name, node_id)
    _console().print(table)


if __name__ == "__main__":  # pragma: no cover
    main()
