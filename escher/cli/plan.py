"""``escher plan APP``: run an application's launching code as a planning run; save the plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from escher.cli.conventions import ExitCode, backend_option, command, emit, fail
from escher.core.cluster import ClusterState
from escher.esl import PlanRun, load_app, plan_app

APP_HELP = "path/to/file.py:function or package.module:function, called with no arguments"


def cluster_state(cluster: str | None, backend_name: str | None) -> tuple[ClusterState, str]:
    """The cluster to plan for (a cluster file, or a live backend's snapshot) and a line
    saying where it comes from."""
    if cluster is not None and backend_name is not None:
        fail("give --cluster or --backend, not both.", ExitCode.BAD_INPUT)
    if cluster is not None:
        return ClusterState.load(cluster), f"cluster file {cluster}"
    from escher.api import init

    with init(backend_name) as live:
        state = live.get_cluster_state()
        name = live.name
    if backend_name is None:
        click.echo(
            f"warning: no --cluster or --backend given: planned on the configured backend "
            f"{name!r}. Give --cluster FILE to plan for your cluster.",
            err=True,
        )
    return state, f"backend {name!r}"


def summary(run: PlanRun) -> dict[str, Any]:
    """What a planning run recorded, in numbers and lines (the command's JSON)."""
    plan = run.plan
    return {
        "tasks": len(plan.tasks),
        "replicas": sum(t.count for t in plan.tasks),
        "resources": len(plan.resources),
        "intents": [f"{i.describe()}  [{i.source}]" for i in plan.intents],
        "stopped_at": run.stopped_at,
        "warnings": list(run.warnings),
    }


@command(
    "plan",
    examples=[
        "escher plan app.py:main --cluster cluster.json -o plan.json",
        "escher plan app.py:main --backend ray -o plan.json",
        "escher verify plan.json --cluster cluster.json",
    ],
)
@click.argument("app", metavar="APP")
@click.option(
    "--cluster",
    "cluster",
    type=click.Path(dir_okay=False),
    default=None,
    help="A cluster file (JSON, see docs/file-formats.md) to plan for.",
)
@backend_option
@click.option(
    "-o",
    "--output",
    "output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the plan file here (the same code and cluster give the same bytes).",
)
def plan(
    app: str, cluster: str | None, backend_name: str | None, output: str | None, fmt: str
) -> None:
    """Record what an app would launch as a plan (nothing runs).

    APP is path/to/file.py:function or package.module:function, called with no arguments
    while escher runs on a planning backend over the cluster: every set_resource, launch,
    gang and ESL action is recorded, with the intents its policies promise. The plan stops
    where the app first reads a task's result (see docs/planning.md).
    """
    if output is not None and not Path(output).resolve().parent.is_dir():
        fail(
            f"--output {output!r}: no folder {str(Path(output).parent)!r} to write into; "
            "create it or give another path.",
            ExitCode.BAD_INPUT,
        )
    fn = load_app(app)
    state, origin = cluster_state(cluster, backend_name)
    run = plan_app(fn, state)
    if output is not None:
        run.plan.save(output)
    data = summary(run)
    data["cluster"] = origin
    data["output"] = output

    def text(console: Console) -> None:
        replicas = f"{data['replicas']} replica(s) in {data['tasks']} task(s)"
        console.print(
            escape(f"planned {replicas}, {data['resources']} resource(s) on {origin}"),
            highlight=False,
        )
        for line in data["intents"]:
            console.print(escape(f"intent {line}"), highlight=False)
        for warning in run.warnings:
            console.print(f"[yellow]warning:[/] {escape(warning)}")
        if output is not None:
            console.print(escape(f"wrote {output}"), highlight=False)
        else:
            console.print("(give -o plan.json to save the plan)", highlight=False)

    emit(data, fmt, text)
