"""What every `escher` command shares: one output flag, one error path, documented exit codes.

A command built with `command` gets, without writing any of it:

- ``-o/--format text|json``: the function receives ``fmt``; `emit` prints JSON (and nothing else)
  on stdout for ``json``, or the human form for ``text``;
- errors on stderr: any `EscherError` the command raises becomes one ``error: ...`` line (a
  JSON object ``{"error": {...}}`` under ``--format json``) and its exit code; call `fail`
  for errors of your own; never a traceback;
- usage mistakes (unknown option, missing argument, a value out of range) print one
  ``error: ...`` line too (the same style) and exit with `ExitCode.BAD_INPUT`;
- an unexpected exception (a bug) is one ``error: unexpected ...`` line and
  `ExitCode.FAILED` (``ESCHER_DEBUG=1`` lets the traceback through);
- every number option refuses NaN and infinities (`FiniteFloatRange`);
- text output is plain and `PLAIN_WIDTH` columns wide when stdout is not a terminal;
- an ``Examples`` and an ``Exit codes`` section in ``--help``.

A new command::

    import click

    from escher.cli.conventions import ExitCode, command, emit, fail

    @command(
        "hello",
        examples=["escher hello", "escher hello --name n1 --format json"],
        exit_codes={1: "nobody to greet"},   # only codes of its own; the shared ones are added
    )
    @click.option("--name", default="world", help="Whom to greet.")
    def hello(name: str, fmt: str) -> None:
        '''Greet someone (one line: it is the summary in `escher --help`).'''
        if not name:
            fail("give a non-empty --name.")            # exit 3, message on stderr
        emit({"greeting": f"hello {name}"}, fmt, text=f"hello [bold]{name}[/bold]")

and one line in `escher.cli.COMMANDS`: ``"hello": CommandEntry("package.module:hello")``.
The test of the command line enumerates the group, so the new command is checked (``--help``
has examples, ``--format json`` prints JSON or a JSON error) with no test edits.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias, TypeVar

import click

from escher.core.errors import (
    BackendUnavailableError,
    ConfigError,
    EscherError,
    NotInitializedError,
    ValidationError,
    did_you_mean,
)

if TYPE_CHECKING:  # rich is imported when text is printed: --format json never loads it
    from rich.console import Console, RenderableType

F = TypeVar("F", bound=Callable[..., Any])


class ExitCode(enum.IntEnum):
    """Exit codes every command shares. A command's own outcomes use 1, 2 and 4-9."""

    #: Done.
    OK = 0
    #: Bad input: usage, configuration, an input file, an unknown name. Nothing was done.
    BAD_INPUT = 3
    #: The backend cannot be used: its extra is not installed or its cluster cannot be reached.
    UNAVAILABLE = 69
    #: The command started and failed (a backend call or a task failed).
    FAILED = 70
    #: Interrupted (Ctrl-C).
    INTERRUPTED = 130


#: What each shared code means, as ``--help`` prints it.
SHARED_EXIT_CODES: dict[int, str] = {
    ExitCode.OK: "done",
    ExitCode.BAD_INPUT: "bad input (usage, configuration, file, unknown name); nothing done",
    ExitCode.UNAVAILABLE: "backend unavailable (extra not installed, cluster unreachable)",
    ExitCode.FAILED: "failed while running (a backend call or a task failed)",
    ExitCode.INTERRUPTED: "interrupted",
}

FORMATS = ("text", "json")

#: Something `emit` can show as text: a string (rich markup), a rich renderable, or a function
#: that prints to the console it is given.
TextForm: TypeAlias = "str | RenderableType | Callable[[Console], None]"


#: Columns of text output when it does not go to a terminal (pipes, files, CI logs) and
#: ``COLUMNS`` does not say otherwise.
PLAIN_WIDTH = 100


def output_width(stream: Any) -> int | None:
    """Columns for text output on `stream`: None (the terminal's own width) on a terminal,
    else ``$COLUMNS`` when it is a positive number, else `PLAIN_WIDTH`."""
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else PLAIN_WIDTH


def console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr). On a terminal it takes the terminal's width and
    colours; elsewhere (pipes, files, CI logs) plain text: tables `output_width` columns
    wide, lines of text not wrapped (so a path or a command stays whole for grep)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = output_width(stream)
    return Console(file=stream, width=width, soft_wrap=width is not None)


def exit_code_for(exc: BaseException) -> ExitCode:
    """The shared exit code for an exception a command let through."""
    if isinstance(exc, ValidationError | ConfigError | NotInitializedError):
        return ExitCode.BAD_INPUT
    if isinstance(exc, BackendUnavailableError):
        return ExitCode.UNAVAILABLE
    return ExitCode.FAILED


def current_format() -> str:
    """The ``--format`` of the command being run ("text" outside one, or before parsing)."""
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        fmt = ctx.params.get("fmt")
        if fmt in FORMATS:
            return str(fmt)
        ctx = ctx.parent
    return "text"


def fail(message: str, code: int = ExitCode.BAD_INPUT, *, kind: str = "error") -> NoReturn:
    """Print `message` on stderr and exit with `code`.

    Under ``--format json`` stderr gets one JSON object,
    ``{"error": {"message": ..., "code": ..., "kind": ...}}``; otherwise ``error: message``.

    Args:
        message: What went wrong and what to do, in one or two sentences.
        code: The exit code (an `ExitCode` or a command's own documented code).
        kind: A short machine-readable name (the exception class, or "error").
    """
    if current_format() == "json":
        payload = {"error": {"message": message, "code": int(code), "kind": kind}}
        click.echo(json.dumps(payload), err=True)
    else:
        click.echo(f"error: {message}", err=True)
    sys.exit(int(code))


def _jsonable(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    if isinstance(value, Path):
        return str(value)
    return str(value)


def emit(data: Any, fmt: str, text: TextForm | None = None) -> None:
    """Print a command's result in the chosen format.

    Args:
        data: The result as plain data (dicts, lists, numbers, strings; objects with
            ``to_dict()``, dataclasses, enums and paths are converted). Printed as JSON, alone
            on stdout, when `fmt` is "json".
        fmt: "text" or "json" (the command's ``fmt`` argument).
        text: The human form for "text": rich markup, a renderable (e.g. a `rich.table.Table`),
            or a function that prints to the console it gets. None prints `data` itself.
    """
    if fmt == "json":
        click.echo(json.dumps(data, indent=2, default=_jsonable))
    else:
        out = console()
        if callable(text) and not isinstance(text, str):
            text(out)
        else:
            out.print(data if text is None else text)
    sys.stdout.flush()  # seen at once also through a pipe (escher view keeps running)


def format_option(function: F) -> F:
    """The ``-o/--format text|json`` option; the command receives it as ``fmt``."""
    return click.option(
        "-o",
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default="text",
        show_default=True,
        help="Output: text for people, json for programs (stdout holds only the JSON).",
    )(function)


def _complete_backend(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    from escher.backends import ALIASES, known_backends

    return sorted(n for n in {*known_backends(), *ALIASES} if n.startswith(incomplete))


def _check_backend(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from escher.backends import get_entry

    if value is not None:
        try:
            get_entry(value)
        except EscherError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
    return value


def backend_option(function: F) -> F:
    """The ``--backend NAME`` option (default: the configuration); received as ``backend_name``.

    An unknown name is a usage mistake naming ``--backend`` (with a suggestion)."""
    return click.option(
        "--backend",
        "backend_name",
        default=None,
        metavar="NAME",
        callback=_check_backend,
        shell_complete=_complete_backend,
        help="Backend name or alias (default: the configuration; see escher backends).",
    )(function)


class SuggestingChoice(click.Choice):  # type: ignore[type-arg]
    """A `click.Choice` whose error suggests the closest choice (``Did you mean 'json'?``)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The choice `value` names; a near miss fails with a suggestion."""
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as exc:
            hint = did_you_mean(str(value), [str(choice) for choice in self.choices])
            if not hint:
                raise
            self.fail(f"{exc.message}{hint}", param, ctx)


class FiniteFloatRange(click.FloatRange):
    """A `click.FloatRange` that also refuses NaN and infinities (``--hold nan``)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The number `value` names; NaN, an infinity or a number out of range fails."""
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def json_requested(args: Sequence[str]) -> bool:
    """True when the command line `args` asks for ``--format json`` (in any spelling:
    ``--format json``, ``--format=json``, ``-o json``, ``-ojson``), also before it parses."""
    args = [str(a) for a in args]
    if "--format=json" in args or "-ojson" in args or "-o=json" in args:
        return True
    return any(a in ("--format", "-o") and b == "json" for a, b in itertools.pairwise(args))


def usage_failure(exc: click.UsageError, args: Sequence[str] = ()) -> NoReturn:
    """Report a usage mistake in escher's one error style and exit with `ExitCode.BAD_INPUT`.

    Text: one line, ``error: <click's message> (see 'escher CMD --help')``; under
    ``--format json`` (asked for in `args`, or already parsed) the JSON error object.
    """
    ctx = exc.ctx
    if isinstance(exc, click.exceptions.NoArgsIsHelpError) and ctx is not None:
        click.echo(ctx.get_help())  # a bare group (``escher``) shows its help
        sys.exit(int(ExitCode.OK))
    message = exc.format_message().strip()
    if not message.endswith((".", "?", "!")):
        message += "."
    if ctx is not None and not (ctx.resilient_parsing or message.endswith("--help'.")):
        message += f" See '{ctx.command_path} --help'."
    fmt = "json" if json_requested(args) else current_format()
    if fmt == "json":
        error = {"message": message, "code": int(ExitCode.BAD_INPUT), "kind": "usage"}
        click.echo(json.dumps({"error": error}), err=True)
    else:
        click.echo(f"error: {message}", err=True)
    sys.exit(int(ExitCode.BAD_INPUT))


class UsageMistakesExit3(click.Command):
    """Base of escher's commands and groups: parsing mistakes exit with
    `ExitCode.BAD_INPUT` (click's own code is 2), under ``--format json`` as a JSON error
    object on stderr."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Parse; a usage mistake is reported by `usage_failure`."""
        raw = list(args)
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            exc.ctx = exc.ctx or ctx
            usage_failure(exc, raw)


class EscherCommand(UsageMistakesExit3):
    """A click command with the conventions of this module (see the module docstring)."""

    def __init__(
        self,
        *args: Any,
        examples: Sequence[str] = (),
        exit_codes: Mapping[int, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:  # also options declared by hand: choices suggest, and
            kind = param.type  # numbers are finite
            if type(kind) is click.Choice:
                param.type = SuggestingChoice(kind.choices, kind.case_sensitive)
            elif kind == click.FLOAT:
                param.type = FiniteFloatRange()
            elif type(kind) is click.FloatRange:
                param.type = FiniteFloatRange(
                    kind.min, kind.max, kind.min_open, kind.max_open, kind.clamp
                )
        self.examples = tuple(examples)
        self.exit_codes = {**SHARED_EXIT_CODES, **(exit_codes or {})}

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Examples and exit codes after the options, then any epilog."""
        if self.examples:
            with formatter.section("Examples"):
                for line in self.examples:
                    formatter.write(f"{'':>{formatter.current_indent}}{line}\n")
        with formatter.section("Exit codes"):
            formatter.write_dl(
                [(str(code), text) for code, text in sorted(self.exit_codes.items())]
            )
        super().format_epilog(ctx, formatter)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; escher's errors and Ctrl-C become `fail` with their exit code."""
        try:
            return super().invoke(ctx)
        except EscherError as exc:
            fail(str(exc), exit_code_for(exc), kind=type(exc).__name__)
        except KeyboardInterrupt:
            fail("interrupted.", ExitCode.INTERRUPTED, kind="interrupted")
        except click.UsageError as exc:  # a value checked by the command itself
            exc.ctx = exc.ctx or ctx
            usage_failure(exc)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except Exception as exc:  # a bug: still one line, never a traceback
            if os.environ.get("ESCHER_DEBUG"):
                raise
            fail(
                f"unexpected {type(exc).__name__}: {exc}. This is a bug in escher: please "
                "report it with the command line (ESCHER_DEBUG=1 shows the traceback).",
                ExitCode.FAILED,
                kind="internal",
            )


def command(
    name: str,
    *,
    examples: Sequence[str],
    exit_codes: Mapping[int, str] | None = None,
    **kwargs: Any,
) -> Callable[[Callable[..., Any]], EscherCommand]:
    """Declare an `escher` subcommand that follows the conventions.

    Args:
        name: The subcommand's name.
        examples: Command lines shown under "Examples" in ``--help`` (a trailing
            ``# comment`` may say what each does).
        exit_codes: The command's own exit codes and their meaning; the shared ones
            (`SHARED_EXIT_CODES`) are added.
        **kwargs: Passed to `click.command` (e.g. ``short_help``).

    Returns:
        A decorator: put it above the command's ``@click.option``/``@click.argument`` lines.
        The function takes ``fmt`` besides its own parameters.
    """

    def decorate(function: Callable[..., Any]) -> EscherCommand:
        built = click.command(
            name, cls=EscherCommand, examples=examples, exit_codes=exit_codes, **kwargs
        )(format_option(function))
        assert isinstance(built, EscherCommand)
        fmt = next(param for param in built.params if param.name == "fmt")
        if any("-o" in param.opts for param in built.params if param is not fmt):
            fmt.opts.remove("-o")  # the command's own -o wins (`escher plan -o plan.json`)
        built.params.sort(key=lambda param: param.name == "fmt")  # --format last in --help
        return built

    return decorate


__all__ = [
    "FORMATS",
    "PLAIN_WIDTH",
    "SHARED_EXIT_CODES",
    "EscherCommand",
    "ExitCode",
    "FiniteFloatRange",
    "SuggestingChoice",
    "UsageMistakesExit3",
    "backend_option",
    "command",
    "console",
    "current_format",
    "emit",
    "exit_code_for",
    "fail",
    "format_option",
    "json_requested",
    "output_width",
    "usage_failure",
]
