"""`escher verify PLAN_FILE`: the command line front of `escher.verify.verify`.

The verdict is printed as soon as it is known; the explanation and the intent proofs follow,
all within `--timeout`. Exit codes are `EXIT_CODES` (documented in the command's help).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.table import Table

from escher.core.cluster import ClusterState
from escher.core.errors import EscherError
from escher.core.plan import Plan
from escher.verify._result import (
    EXIT_BAD_INPUT,
    EXIT_CODES,
    IntentResult,
    IntentStatus,
    Verdict,
    VerificationResult,
)
from escher.verify._verify import DEFAULT_TIMEOUT, Verifier

_COLOR = {Verdict.FEASIBLE: "green", Verdict.INFEASIBLE: "red", Verdict.UNKNOWN: "yellow"}
_ICOLOR = {
    IntentStatus.PROVEN: "green",
    IntentStatus.VIOLATED: "red",
    IntentStatus.VACUOUS: "yellow",
    IntentStatus.UNKNOWN: "yellow",
}

_CODES_HELP = "\n".join(f"  {code}  {meaning}" for code, meaning in EXIT_CODES.items())

_HELP = f"""Prove PLAN_FILE feasible on a cluster before launch, or explain why not.

The verdict comes first (with a checked placement, or the cause in one line and the
smallest set of your own statements that conflict); then each declared intent is
reported proven, violated (with a counterexample) or timed out. --timeout bounds the
whole run.

\b
Examples:
  escher verify plan.json --cluster cluster.json
  escher verify plan.json --cluster cluster.json --format json
  escher verify plan.json --backend ray --timeout 10 --no-intents

\b
Exit codes:
{_CODES_HELP}
"""


class _Command(click.Command):
    """Usage errors exit with the bad-input code, not click's 2 (which means 'unknown' here)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            ctx.exit(EXIT_BAD_INPUT)


def _bad(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def _state(cluster: str | None, backend: str | None) -> tuple[ClusterState, str]:
    """The cluster state and a line saying where it comes from."""
    if cluster is not None:
        state = ClusterState.load(cluster)
        return state, f"cluster file {cluster}"
    import escher

    with escher.init(backend) as live:
        state = live.get_cluster_state()
        name = live.name
    if backend is None:
        default = " (its default in-memory nodes)" if name == "memory" else ""
        click.echo(
            f"warning: no --cluster or --backend given: checked against the configured "
            f"backend {name!r}{default}. Give --cluster FILE to check against your cluster.",
            err=True,
        )
    return state, f"backend {name!r}"


def _where(state: ClusterState, origin: str) -> str:
    alive = sum(1 for n in state.nodes.values() if n.alive)
    return f"checked against {origin}: {len(state.nodes)} nodes ({alive} alive)"


class _Printer:
    """Text output, one part at a time, as the parts become known."""

    def __init__(self) -> None:
        self.console = Console(width=None if sys.stdout.isatty() else 120)

    def verdict(self, result: VerificationResult, where: str) -> None:
        color = _COLOR[result.status]
        stats = result.stats
        self.console.print(
            f"[bold {color}]{result.status.value.upper()}[/]  "
            f"({stats.get('method', '')}, {stats.get('seconds', {}).get('verdict', 0):.2f} s, "
            f"{stats.get('nodes', 0)} nodes in {stats.get('node_types', 0)} types, "
            f"{stats.get('replicas', 0)} replicas)"
        )
        self.console.print(where, markup=False, highlight=False)
        if result.cause:
            self.console.print(f"cause: {result.cause}", markup=False, highlight=False)
        if result.witness is not None:
            self.witness(result.witness)

    def witness(self, witness: Any) -> None:
        table = Table(title="witness placement (checked independently)", show_lines=False)
        table.add_column("task")
        table.add_column("replicas", justify="right")
        table.add_column("nodes")
        for task, nodes in list(witness.items())[:30]:
            shown = sorted(set(nodes))
            text = ", ".join(shown[:6]) + (f" (+{len(shown) - 6})" if len(shown) > 6 else "")
            table.add_row(task, str(len(nodes)), text)
        if len(witness) > 30:
            table.add_row("...", "", f"{len(witness) - 30} more tasks")
        self.console.print(table)

    def rest(self, result: VerificationResult) -> None:
        if result.explanation is not None:
            self.console.print(result.explanation.render(), markup=False, highlight=False)
        for item in result.proven:
            self.console.print(f"proven: {item}", markup=False, highlight=False)
        for pref in result.preferences:
            self.console.print(f"preference: {pref}", markup=False, highlight=False)
        for w in result.warnings:
            self.console.print(f"[yellow]warning:[/] {w}")

    def intent(self, r: IntentResult) -> None:
        line = f"intent {r.intent.describe()}: [{_ICOLOR[r.status]}]{r.status.value}[/]"
        self.console.print(line + (f" - {r.detail}" if r.detail else ""), highlight=False)


@click.command("verify", cls=_Command, help=_HELP)
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
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON document on stdout (the result's to_dict).",
)
@click.option(
    "--timeout",
    type=float,
    default=DEFAULT_TIMEOUT,
    show_default=True,
    help="Seconds for the whole run (verdict, explanation, intent proofs).",
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
    start = time.monotonic()
    if cluster is not None and backend is not None:
        _bad("give --cluster or --backend, not both.")
    if not timeout > 0:
        _bad(f"--timeout must be a positive number of seconds, got {timeout}.")
    try:
        plan = Plan.load(plan_file)
        state, origin = _state(cluster, backend)
        run = Verifier(plan, state, deadline=start + timeout)
        verdict = run.verdict()
    except EscherError as exc:
        _bad(str(exc))
    printer = None if fmt == "json" else _Printer()
    where = _where(state, origin)
    if printer is not None:
        printer.verdict(verdict, where)
    result = run.explain()
    if printer is not None:
        printer.rest(result)
    if not no_intents:
        for r in run.intents():
            if printer is not None:
                printer.intent(r)
    result = run.result()
    if printer is None:
        data: dict[str, Any] = result.to_dict()
        data["cluster"] = where
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    sys.exit(result.exit_code)
