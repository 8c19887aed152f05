"""The `escher` command line.

Each subcommand is one module, imported only when it runs (so ``escher --help`` stays quick
and a command whose extra is missing cannot break the others). To add one:

1. write the module with a function decorated by `escher.cli.conventions.command` (it adds
   ``--format text|json``, the error path, exit codes and the Examples section);
2. add its entry to `COMMANDS` below, with its one-line help as the summary (``escher --help``
   lists the commands from these summaries without importing them; a test keeps them equal).

The command-line tests enumerate this group, so the new command is covered by them as is.
"""

from __future__ import annotations

import click

from escher.cli._group import CommandEntry, EscherGroup

#: Every subcommand: name -> where it lives (imported when used), the extra it needs and its
#: one-line help.
COMMANDS: dict[str, CommandEntry] = {
    "backends": CommandEntry(
        "escher.cli.backends:backends",
        summary="List the backends escher knows and whether each can be used here.",
    ),
    "bench": CommandEntry(
        "escher.cli.bench:bench",
        summary="Reproduce the paper's evaluation: NAME is a workload, 'list' or 'all'.",
    ),
    "demo": CommandEntry(
        "escher.cli.demo:demo",
        summary=(
            "Run the paper's load-balancing + co-location example; check and explain where "
            "tasks ran."
        ),
    ),
    "gc": CommandEntry(
        "escher.cli.gc:gc",
        summary="Remove what dead sessions left on a shared cluster (labels, pods, leases).",
    ),
    "plan": CommandEntry(
        "escher.cli.plan:plan",
        summary="Record what an app would launch as a plan (nothing runs).",
    ),
    "state": CommandEntry(
        "escher.cli.state:state",
        summary="Show every node's total and available resources.",
    ),
    "verify": CommandEntry(
        "escher.cli.verify:verify",
        summary="Prove a plan feasible on a cluster before launch, or explain why not.",
    ),
    "view": CommandEntry(
        "escher.cli.view:view",
        extra="view",
        summary=(
            "Serve a live page of the cluster: nodes, intents and verdicts, pending tasks and why."
        ),
        needs=("starlette", "uvicorn"),
    ),
    "what-if": CommandEntry(
        "escher.cli.whatif:what_if_command",
        summary="Replay a workload on a snapshot of the cluster in virtual time; compare policies.",
    ),
    "why": CommandEntry(
        "escher.cli.why:why",
        summary=(
            "Why are tasks pending? A minimal conflict in your policies' terms, per-node reasons."
        ),
    ),
}


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``escher --version``: the distribution and its installed version (the backends'
    registry and the package metadata are read only here, not on every start)."""
    if not value or ctx.resilient_parsing:
        return
    from importlib import metadata

    from escher.backends import DISTRIBUTION

    try:
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # pragma: no cover - a tree never installed
        version = "0+unknown"
    click.echo(f"escher ({DISTRIBUTION}), version {version}")
    ctx.exit()


@click.group(
    cls=EscherGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
def main() -> None:
    """escher: expressive cluster scheduling with ephemeral resources.

    Every command takes -o/--format text|json and --help (with examples and exit codes).
    Shell completion: eval "$(_ESCHER_COMPLETE=bash_source escher)" (zsh_source, fish_source).
    """


__all__ = ["COMMANDS", "CommandEntry", "main"]
