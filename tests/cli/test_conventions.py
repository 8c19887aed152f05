"""`escher.cli.conventions`: one output flag, one error path, documented exit codes."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from escher.cli.conventions import ExitCode, command, emit, exit_code_for, fail
from escher.core.errors import (
    BackendUnavailableError,
    ConfigError,
    TaskFailedError,
    UnknownNodeError,
)


@command("hello", examples=["escher hello --name n1"], exit_codes={1: "nobody to greet"})
@click.option("--name", default="world")
@click.option("--raise", "to_raise", default="")
def hello(name: str, to_raise: str, fmt: str) -> None:
    """Greet someone."""
    errors = {
        "config": ConfigError("bad config"),
        "unavailable": BackendUnavailableError("no cluster"),
        "task": TaskFailedError("boom"),
        "interrupt": KeyboardInterrupt(),
    }
    if to_raise:
        raise errors[to_raise]
    if not name:
        fail("nobody to greet.", 1)
    emit({"greeting": f"hello {name}"}, fmt, text=f"hello [bold]{name}[/bold]")


def test_text_and_json_output() -> None:
    text = CliRunner().invoke(hello, ["--name", "n1"])
    assert text.exit_code == 0 and text.stdout == "hello n1\n"
    data = CliRunner().invoke(hello, ["--name", "n1", "--format", "json"])
    assert json.loads(data.stdout) == {"greeting": "hello n1"}


@pytest.mark.parametrize(
    ("to_raise", "code"),
    [("config", 3), ("unavailable", 69), ("task", 70), ("interrupt", 130)],
)
def test_errors_go_to_stderr_with_their_code(to_raise: str, code: int) -> None:
    result = CliRunner().invoke(hello, ["--raise", to_raise])
    assert result.exit_code == code and result.stdout == ""
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    result = CliRunner().invoke(hello, ["--raise", to_raise, "--format", "json"])
    error = json.loads(result.stderr)["error"]
    assert error["code"] == code and result.stdout == ""


def test_own_codes_and_help_sections() -> None:
    result = CliRunner().invoke(hello, ["--name", ""])
    assert result.exit_code == 1 and result.stderr == "error: nobody to greet.\n"
    helptext = CliRunner().invoke(hello, ["--help"]).stdout
    assert "Examples:\n  escher hello --name n1" in helptext
    assert "1    nobody to greet" in helptext and "69   backend unavailable" in helptext
    assert helptext.index("--name") < helptext.index("--format")


def test_exit_code_mapping() -> None:
    assert exit_code_for(UnknownNodeError("x")) is ExitCode.BAD_INPUT
    assert exit_code_for(BackendUnavailableError("x")) is ExitCode.UNAVAILABLE
    assert exit_code_for(TaskFailedError("x")) is ExitCode.FAILED
