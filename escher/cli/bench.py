"""``escher bench``: run the paper's evaluation workloads and print paper-vs-ours tables."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from escher.backends import install_command
from escher.cli.conventions import ExitCode, command, console, emit, fail
from escher.core.errors import BackendUnavailableError
from escher.evaluation import WORKLOADS, Result, check_name, run


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


def show(result: Result, out: Console) -> None:
    """Print a result's table, parameters and simulator speed."""
    table = Table(title=f"{result.name}: {result.title}", title_justify="left")
    for column in ("metric", "paper", "ours", "note"):
        table.add_column(column, justify="right" if column in ("paper", "ours") else "left")
    for row in result.rows:
        table.add_row(escape(row.metric), _fmt(row.paper), _fmt(row.ours), escape(row.note))
    out.print(table)
    params = ", ".join(f"{k}={v}" for k, v in result.params.items())
    out.print(f"[dim]model parameters: {escape(params)}[/dim]")
    meter = result.meter
    if meter.events:
        out.print(
            f"[dim]simulator: {meter.events:,} events in {meter.wall:.2f} s wall "
            f"= {meter.events_per_second:,.0f} events/s "
            f"({meter.sim_time:,.1f} simulated s)[/dim]"
        )


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        fail(
            f"plots need matplotlib: {install_command('plot')}, or run with --no-plot "
            "(writes the JSON only).",
            ExitCode.UNAVAILABLE,
            kind="BackendUnavailableError",
        )


@contextmanager
def _progress(out: Console, total: int) -> Iterator[Progress]:
    columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
    if total > 1:
        columns += [BarColumn(), TextColumn("{task.completed}/{task.total}")]
    live = out.is_terminal  # no live display in pipes and logs
    with Progress(
        *columns, TimeElapsedColumn(), console=out, transient=True, disable=not live
    ) as progress:
        yield progress


def _list(fmt: str) -> None:
    table = Table(title="escher bench workloads", title_justify="left")
    table.add_column("name")
    table.add_column("what")
    for key, (_, what) in WORKLOADS.items():
        table.add_row(key, escape(what))
    emit({"workloads": [{"name": k, "what": w} for k, (_, w) in WORKLOADS.items()]}, fmt, table)


@command(
    "bench",
    examples=[
        "escher bench list",
        "escher bench wordcount                     # writes ./wordcount.png and .json",
        "escher bench alphazero --quick --seed 3 --out eval",
        "escher bench all --out docs/img/evaluation  # regenerate the documentation's plots",
        "escher bench gandiva --quick --no-plot --format json",
    ],
)
@click.argument("name", default="list", metavar="NAME")
@click.option("--quick", is_flag=True, help="A smaller instance (seconds, not minutes).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of every draw.")
@click.option(
    "--out",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to write <name>.png and <name>.json.",
)
@click.option("--no-plot", is_flag=True, help="Write the JSON only (no matplotlib needed).")
def bench(name: str, quick: bool, seed: int, out: Path, no_plot: bool, fmt: str) -> None:
    """Reproduce the paper's evaluation: NAME is a workload, 'list' or 'all'."""
    if name == "list":
        _list(fmt)
        return
    names = list(WORKLOADS) if name == "all" else [name]
    if name != "all":
        check_name(name)  # an unknown name fails before anything runs
    if not no_plot:
        _need_matplotlib()
    stdout = console()
    shown = stdout if fmt == "text" else console(stderr=True)
    results: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    with _progress(shown, len(names)) as progress:
        overall = progress.add_task("", total=len(names))
        for key in names:
            progress.update(overall, description=f"running {key}" + (" (quick)" if quick else ""))
            try:
                result = run(key, quick=quick, seed=seed)
            except BackendUnavailableError as exc:
                if name != "all":
                    raise
                progress.console.print(f"[yellow]skipped {key}: {escape(str(exc))}[/yellow]\n")
                skipped.append({"name": key, "reason": str(exc)})
                progress.advance(overall)
                continue
            if no_plot:
                result.plot = None
            written = result.write(out)
            results.append({**result.to_dict(), "written": [str(p) for p in written]})
            if fmt == "text":
                show(result, progress.console)
                files = ", ".join(str(p) for p in written)
                progress.console.print(f"[dim]wrote {escape(files)}[/dim]\n")
            progress.advance(overall)
    if fmt == "json":
        emit({"results": results, "skipped": skipped}, fmt)
