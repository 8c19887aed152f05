"""`escher bench`: run the paper's evaluation workloads and print paper-vs-ours tables."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from escher.bench import WORKLOADS, Result, run
from escher.core.errors import BackendUnavailableError, EscherError


def _console() -> Console:
    return Console(width=None if sys.stdout.isatty() else 160)


def _fmt(value: float | str) -> str:
    if isinstance(value, str):
        return value
    if math.isnan(value):
        return "-"
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.3g}"
    if abs(value) >= 1000 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:,.1f}"


def show(result: Result, console: Console) -> None:
    """Print a result's table, parameters and simulator speed."""
    table = Table(title=f"{result.name}: {result.title}", title_justify="left")
    for column in ("metric", "paper", "ours", "note"):
        table.add_column(column, justify="right" if column in ("paper", "ours") else "left")
    for row in result.rows:
        table.add_row(row.metric, _fmt(row.paper), _fmt(row.ours), row.note)
    console.print(table)
    params = ", ".join(f"{k}={v}" for k, v in result.params.items())
    console.print(f"[dim]model parameters: {params}[/dim]")
    meter = result.meter
    if meter.events:
        console.print(
            f"[dim]simulator: {meter.events:,} events in {meter.wall:.2f} s wall "
            f"= {meter.events_per_second:,.0f} events/s "
            f"({meter.sim_time:,.1f} simulated s)[/dim]"
        )


@click.command("bench")
@click.argument("name", default="list")
@click.option("--quick", is_flag=True, help="A smaller instance (seconds, not minutes).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of every draw.")
@click.option(
    "--out",
    default="docs/img/evaluation",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to write <name>.png and <name>.json.",
)
@click.option("--no-plot", is_flag=True, help="Write the JSON only (no matplotlib needed).")
def bench(name: str, quick: bool, seed: int, out: Path, no_plot: bool) -> None:
    """Reproduce the paper's evaluation: NAME is a workload, 'list' or 'all'."""
    console = _console()
    if name == "list":
        table = Table(title="escher bench workloads", title_justify="left")
        table.add_column("name")
        table.add_column("what")
        for key, (_, what) in WORKLOADS.items():
            table.add_row(key, what)
        console.print(table)
        return
    names = list(WORKLOADS) if name == "all" else [name]
    for key in names:
        try:
            result = run(key, quick=quick, seed=seed)
            if no_plot:
                result.plot = None
            show(result, console)
            written = result.write(out)
        except BackendUnavailableError as exc:
            if name != "all":
                raise click.ClickException(str(exc)) from None
            console.print(f"[yellow]skipped {key}: {exc}[/yellow]\n")
            continue
        except EscherError as exc:
            raise click.ClickException(str(exc)) from None
        console.print("[dim]wrote " + ", ".join(str(p) for p in written) + "[/dim]\n")
