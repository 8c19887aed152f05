"""The `escher` group: commands loaded when used, suggestions for mistyped names."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click

from escher.cli.conventions import (
    EscherCommand,
    ExitCode,
    UsageMistakesExit3,
    fail,
    format_option,
    usage_failure,
)
from escher.core.errors import BackendUnavailableError, did_you_mean


@dataclass(frozen=True)
class CommandEntry:
    """Where a subcommand lives.

    Attributes:
        target: ``"package.module:attribute"`` of the click command, imported when used.
        extra: The optional extra its module needs (``"k8s"``), named when it is missing.
        summary: The command's one-line help, shown by ``escher --help`` without importing
            the command (tests/cli/test_group.py keeps it equal to the command's own).
            Empty: ``escher --help`` imports the command to read it.
        needs: The top-level modules the extra provides: while one is missing, ``escher
            --help`` imports the command, which then says what to install.
    """

    target: str
    extra: str | None = None
    summary: str = ""
    needs: tuple[str, ...] = ()

    def listed_as_is(self) -> bool:
        """True if ``escher --help`` can show `summary` without importing the command."""
        return bool(self.summary) and all(importlib.util.find_spec(m) for m in self.needs)


class EscherGroup(UsageMistakesExit3, click.Group):
    """A click group whose subcommands come from a table of `CommandEntry`, imported lazily.

    A subcommand whose module cannot be imported (its extra is missing) is listed with the
    install command and fails with `ExitCode.UNAVAILABLE`; a mistyped one gets a suggestion.
    """

    def __init__(self, *args: Any, lazy: Mapping[str, CommandEntry], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)
        self._loaded: dict[str, click.Command] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every subcommand name, sorted."""
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """Import subcommand `cmd_name` (or a stub that says what to install)."""
        entry = self.lazy.get(cmd_name)
        if entry is None:
            return super().get_command(ctx, cmd_name)
        module_name, _, attr = entry.target.partition(":")
        try:
            loaded = getattr(importlib.import_module(module_name), attr)
        except (ImportError, BackendUnavailableError) as exc:  # its extra is not installed
            return _unavailable(cmd_name, entry, exc)
        return loaded if isinstance(loaded, click.Command) else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The Commands section of ``escher --help``: each command's `CommandEntry.summary`,
        so listing them imports none (a command whose extra is missing is imported: its line
        says what to install)."""
        rows: list[tuple[str, str | None]] = []
        for name in self.list_commands(ctx):
            entry = self.lazy.get(name)
            if entry is not None and entry.listed_as_is():
                rows.append((name, entry.summary))
                continue
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, None))
                self._loaded[name] = cmd
        if not rows:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in rows)
        shown = [
            (
                name,
                click.utils.make_default_short_help(summary, limit)
                if summary is not None
                else self._loaded[name].get_short_help_str(limit),
            )
            for name, summary in rows
        ]
        with formatter.section("Commands"):
            formatter.write_dl(shown)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """Find the subcommand; an unknown name fails with a suggestion and exit code 3."""
        name = click.utils.make_str(args[0])
        if (
            not ctx.resilient_parsing
            and not name.startswith("-")
            and self.get_command(ctx, name) is None
        ):
            choices = self.list_commands(ctx)
            ctx.fail(f"no command {name!r}.{did_you_mean(name, choices)}")
        return super().resolve_command(ctx, args)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command line; Ctrl-C at any point (also while a command's module loads)
        is one ``error: interrupted.`` line and `ExitCode.INTERRUPTED`, never a traceback."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except (click.exceptions.Abort, KeyboardInterrupt):
            fail("interrupted.", ExitCode.INTERRUPTED, kind="interrupted")
        except click.ClickException as exc:  # usage mistakes are reported before this
            exc.show()
            sys.exit(exc.exit_code)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; usage mistakes (also in commands without the conventions) exit 3."""
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            usage_failure(exc)


def _unavailable(name: str, entry: CommandEntry, exc: Exception) -> click.Command:
    from escher.backends import install_command  # only for a missing extra: not on every start

    hint = install_command(entry.extra) if entry.extra else f"the module {entry.target}"
    cause = exc.__cause__ if isinstance(exc.__cause__, ImportError) else exc
    missing = getattr(cause, "name", None) or f"the {entry.extra or name} extra"

    @click.command(
        name,
        cls=UnavailableCommand,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        help=f"Not available here ({missing} is not installed): {hint}.",
        short_help=f"(not installed: {hint})",
        examples=[f"escher {name} --help   # once installed: {hint}"],
    )
    @format_option
    def stub(fmt: str) -> None:  # accepts any arguments: the answer is the same
        fail(
            f"'escher {name}' is not available here: it needs {missing}. Install it with: {hint}",
            ExitCode.UNAVAILABLE,
            kind="BackendUnavailableError",
        )

    assert isinstance(stub, UnavailableCommand)
    stub.missing = missing
    return stub


class UnavailableCommand(EscherCommand):
    """A listed command whose module cannot be imported here; it says what to install.

    It accepts any arguments (the answer is the same) and exits with `ExitCode.UNAVAILABLE`.
    """

    #: The module that is missing.
    missing: str = ""
