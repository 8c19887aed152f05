"""`escher verify PLAN_FILE`: the command line front of `escher.verify.verify`.

Exit codes: 0 feasible, 1 infeasible, 2 unknown, 3 bad input (the message names the file,
the place and the problem; never a traceback).
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.table import Table

from escher.core.cluster import ClusterState
from escher.core.errors import EscherError
from escher.verify._files import load_json, load_plan
from escher.verify._result import IntentStatus, Verdict, VerificationResult
from escher.verify._verify import DEFAULT_TIMEOUT
from escher.verify._verify import verify as _verify

EXIT_BAD_INPUT = 3

_COLOR = {Verdict.FEASIBLE: "green", Verdict.INFEASIBLE: "red", Verdict.UNKNOWN: "yellow"}
_ICOLOR = {
    IntentStatus.PROVEN: "green",
    IntentStatus.VIOLATED: "red",
    IntentStatus.VACUOUS: "yellow",
    IntentStatus.UNKNOWN: "yellow",
}


class _Command(click.Command):
    """Usage errors exit with 3 (bad input), not click's 2 (which means 'unknown' here)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            ctx.exit(EXIT_BAD_INPUT)


def _bad(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def _state(cluster: str | None, backend: str | None) -> ClusterState:
    if cluster is not None:
        return ClusterState.from_dict(load_json(cluster, "cluster"), source=cluster)
    import escher

    session = escher.init(backend)
    try:
        return session.backend.get_cluster_state()
    finally:
        escher.shutdown()


def _render(result: VerificationResult, console: Console) -> None:
    color = _COLOR[result.status]
    console.print(
        f"[bold {color}]{result.status.value.upper()}[/]  "
        f"({result.stats.get('method', '')}, "
        f"{result.stats.get('seconds', {}).get('total', 0):.2f} s, "
        f"{result.stats.get('nodes', 0)} nodes in {result.stats.get('node_types', 0)} "
        f"types, {result.stats.get('replicas', 0)} replicas)"
    )
    if result.witness is not None:
        table = Table(title="witness placement (checked independently)", show_lines=False)
        table.add_column("task")
        table.add_column("replicas", justify="right")
        table.add_column("nodes")
        for task, nodes in list(result.witness.items())[:30]:
            shown = sorted(set(nodes))
            text = ", ".join(shown[:6]) + (f" (+{len(shown) - 6})" if len(shown) > 6 else "")
            table.add_row(task, str(len(nodes)), text)
        if len(result.witness) > 30:
            table.add_row("...", "", f"{len(result.witness) - 30} more tasks")
        console.print(table)
    if result.explanation is not None:
        console.print(result.explanation.render(), markup=False, highlight=False)
    for item in result.proven:
        console.print(f"proven: {item}", markup=False)
    if result.intents:
        table = Table(title="intents")
        table.add_column("intent")
        table.add_column("result")
        table.add_column("detail")
        for r in result.intents:
            table.add_row(
                r.intent.describe(), f"[{_ICOLOR[r.status]}]{r.status.value}[/]", r.detail
            )
        console.print(table)
    for w in result.warnings:
        console.print(f"[yellow]warning:[/] {w}")


@click.command("verify", cls=_Command)
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option(
    "--cluster",
    "cluster",
    type=click.Path(dir_okay=False),
    default=None,
    help="A cluster file (JSON, see docs/file-formats.md).",
)
@click.option(
    "--backend",
    "backend",
    default=None,
    help="Take the cluster state from this backend (default: the configured one).",
)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option(
    "--timeout",
    type=float,
    default=DEFAULT_TIMEOUT,
    show_default=True,
    help="Seconds for the whole verification; on the limit the verdict is unknown.",
)
@click.option("--no-intents", is_flag=True, help="Skip the intent proofs.")
def verify(
    plan_file: str,
    cluster: str | None,
    backend: str | None,
    fmt: str,
    timeout: float,
    no_intents: bool,
) -> None:
    """Prove PLAN_FILE feasible on a cluster, or explain why not, before launch.

    Exit codes: 0 feasible, 1 infeasible, 2 unknown, 3 bad input.
    """
    if cluster is not None and backend is not None:
        _bad("give --cluster or --backend, not both.")
    try:
        plan = load_plan(plan_file)
        state = _state(cluster, backend)
        result = _verify(plan, state, timeout=timeout, check_intents=not no_intents)
    except EscherError as exc:
        _bad(str(exc))
    except RecursionError:  # pragma: no cover - absurdly nested JSON
        _bad(f"{plan_file}: too deeply nested.")
    if fmt == "json":
        data: dict[str, Any] = result.to_dict()
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        _render(result, Console(width=None if sys.stdout.isatty() else 120))
    sys.exit(result.exit_code)
