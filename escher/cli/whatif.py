"""``escher what-if``: replay a workload from a live snapshot, policies side by side."""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from escher.api import init
from escher.cli.conventions import backend_option, command, emit
from escher.core.cluster import ClusterState
from escher.explain import Workload
from escher.explain.whatif import BACKEND_POLICY, POLICIES, Report, what_if


def _table(reports: list[Report]) -> Table:
    table = Table(title="what-if (virtual time, seconds)")
    table.add_column("")
    for report in reports:
        table.add_column(report.policy, justify="right")
    summaries = [r.summary() for r in reports]
    for key in ("tasks", "started", "never_placed", "makespan", "mean_jct", "p95_jct"):
        table.add_row(key.replace("_", " "), *(f"{s[key]:g}" for s in summaries))
    resources = sorted({k for s in summaries for k in s["mean_utilisation"]})
    for resource in resources:
        table.add_row(
            f"mean {resource} utilisation",
            *(f"{s['mean_utilisation'].get(resource, 0.0):.1%}" for s in summaries),
        )
    return table


def _print(console: Console, reports: list[Report], per_task: bool) -> None:
    console.print(_table(reports))
    for report in reports:
        for never in report.never:
            console.print(
                escape(
                    f"{report.policy}: {never.count} x {never.task!r} never placed: "
                    f"{never.why.summary} {never.why.breakdown.summary()}"
                ),
                highlight=False,
            )
        if per_task:
            table = Table(title=f"tasks under {report.policy}")
            for column in ("task", "replica", "arrival", "start", "finish", "node"):
                table.add_column(column)
            for t in report.tasks:
                table.add_row(
                    escape(t.task),
                    str(t.replica),
                    f"{t.arrival:g}",
                    "-" if t.start is None else f"{t.start:g}",
                    "-" if t.finish is None else f"{t.finish:g}",
                    escape(t.node or "-"),
                )
            console.print(table)


@command(
    "what-if",
    examples=[
        "escher what-if workload.json                      # from the configured backend",
        "escher what-if workload.json --policy fifo --policy drf",
        "escher what-if workload.json --cluster cluster.json --per-task --format json",
    ],
    exit_codes={1: "some tasks would never be placed (see why)"},
)
@click.argument("workload", type=click.Path(dir_okay=False))
@click.option(
    "--policy",
    "policies",
    multiple=True,
    type=click.Choice(POLICIES),
    help=f"Replay under this policy (repeat to compare; default {BACKEND_POLICY}).",
)
@click.option(
    "--cluster",
    type=click.Path(dir_okay=False),
    default=None,
    help="Start from this cluster file (escher state --format json) instead of a live backend.",
)
@click.option(
    "--hold",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Running tasks of the snapshot release after this long (default: never).",
)
@click.option("--per-task", is_flag=True, help="Also list every task's start, finish and node.")
@backend_option
def what_if_command(
    workload: str,
    policies: tuple[str, ...],
    cluster: str | None,
    hold: float | None,
    per_task: bool,
    backend_name: str | None,
    fmt: str,
) -> None:
    """Replay a workload on a snapshot of the cluster in virtual time; compare policies."""
    loaded = Workload.load(workload)
    if cluster is not None:
        state = ClusterState.load(cluster)
    else:
        with init(backend_name) as backend:
            state = backend.get_cluster_state()
    reports = what_if(loaded, state, policies or (BACKEND_POLICY,), hold=hold)
    code = 1 if any(r.never for r in reports) else 0
    emit(
        {"reports": [r.to_dict(per_task=per_task) for r in reports], "exit_code": code},
        fmt,
        lambda console: _print(console, reports, per_task),
    )
    sys.exit(code)
