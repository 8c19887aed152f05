"""``escher state``: every node's resources, as a table or in the cluster file format."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from escher.api import init
from escher.backends.base import Backend
from escher.cli.conventions import backend_option, command, emit
from escher.core.cluster import ClusterState


def backend_facts(backend: Backend) -> dict[str, Any]:
    """A backend's own facts (``Backend.describe()``: capabilities, Ray's mode, ...)."""
    return dict(backend.describe())


def _fmt(mapping: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={_num(v)}" for k, v in sorted(mapping.items())) or "-"


def _num(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 2**20:
        return f"{value / 2**30:.1f}Gi"
    return str(value)


def _facts(facts: Mapping[str, Any]) -> str:
    return "; ".join(
        f"{k} {', '.join(map(str, v)) if isinstance(v, list | tuple) else v}"
        for k, v in facts.items()
    )


def _table(snapshot: ClusterState, backend: Backend) -> Table:
    table = Table(title=f"cluster state ({backend.name})")
    for column in ("node", "alive", "labels", "total", "available", "ephemeral"):
        table.add_column(column)
    for node in snapshot.nodes.values():
        table.add_row(
            escape(node.id),
            "yes" if node.alive else "no",
            escape(_fmt(node.labels)),
            escape(_fmt(node.physical.to_dict())),
            escape(_fmt(node.available.to_dict())),
            escape(_fmt({k: v for k, v in node.total.to_dict().items() if k in node.ephemeral})),
        )
    return table


@command(
    "state",
    examples=[
        "escher state",
        "escher state --backend ray",
        "escher state --format json > cluster.json   # a cluster file for escher verify",
    ],
)
@backend_option
@click.option("--json", "as_json", is_flag=True, hidden=True, help="Deprecated: --format json.")
def state(backend_name: str | None, as_json: bool, fmt: str) -> None:
    """Show every node's total and available resources."""
    if as_json:
        click.echo("warning: --json is deprecated; use --format json.", err=True)
        fmt = "json"
    with init(backend_name) as backend:
        snapshot = backend.get_cluster_state()
        facts = backend_facts(backend)

    def text(console: Console) -> None:
        console.print(_table(snapshot, backend))
        shown = {k: v for k, v in facts.items() if k != "name"}
        if shown:
            console.print(escape(f"{backend.name} backend: " + _facts(shown)))

    emit(snapshot.to_dict(), fmt, text)
