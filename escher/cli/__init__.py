"""The `escher` command line.

Each subcommand is one module, imported only when it runs (so ``escher --help`` stays quick
and a command whose extra is missing cannot break the others). To add one:

1. write the module with a function decorated by `escher.cli.conventions.command` (it adds
   ``--format text|json``, the error path, exit codes and the Examples section);
2. add one line to `COMMANDS` below.

The command-line tests enumerate this group, so the new command is covered by them as is.
"""

from __future__ import annotations

import click

from escher.backends import DISTRIBUTION
from escher.cli._group import CommandEntry, EscherGroup

#: Every subcommand: name -> where it lives (imported when used) and the extra it needs.
COMMANDS: dict[str, CommandEntry] = {
    "backends": CommandEntry("escher.cli.backends:backends"),
    "bench": CommandEntry("escher.cli.bench:bench"),
    "demo": CommandEntry("escher.cli.demo:demo"),
    "gc": CommandEntry("escher.cli.gc:gc"),
    "plan": CommandEntry("escher.cli.plan:plan"),
    "state": CommandEntry("escher.cli.state:state"),
    "verify": CommandEntry("escher.cli.verify:verify"),
    "view": CommandEntry("escher.cli.view:view", extra="view"),
    "what-if": CommandEntry("escher.cli.whatif:what_if_command"),
    "why": CommandEntry("escher.cli.why:why"),
}


@click.group(
    cls=EscherGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(package_name=DISTRIBUTION, prog_name=f"escher ({DISTRIBUTION})")
def main() -> None:
    """escher: expressive cluster scheduling with ephemeral resources.

    Every command takes -o/--format text|json and --help (with examples and exit codes).
    Shell completion: eval "$(_ESCHER_COMPLETE=bash_source escher)" (zsh_source, fish_source).
    """


__all__ = ["COMMANDS", "CommandEntry", "main"]
