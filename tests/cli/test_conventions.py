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


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], False),
        (["--format"], False),
        (["--format", "json"], True),
        (["--format=json"], True),
        (["-o", "json"], True),
        (["-ojson"], True),
        (["x", "-o", "text"], False),
        (["json"], False),
    ],
)
def test_json_is_seen_in_every_spelling(args: list[str], expected: bool) -> None:
    from escher.cli.conventions import json_requested

    assert json_requested(args) is expected


def test_o_is_short_for_format_and_usage_errors_have_one_style() -> None:
    assert json.loads(CliRunner().invoke(hello, ["-o", "json"]).stdout) == {
        "greeting": "hello world"
    }
    result = CliRunner().invoke(hello, ["--nope"])
    assert result.exit_code == 3 and result.stdout == ""
    assert result.stderr == (
        "error: No such option '--nope'. Did you mean '--name'? See 'hello --help'.\n"
    )
    result = CliRunner().invoke(hello, ["--nope", "-o", "json"])
    assert json.loads(result.stderr)["error"]["kind"] == "usage"


def test_a_bug_is_one_line_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    @command("buggy", examples=["escher buggy"])
    def buggy(fmt: str) -> None:
        """Fail as a bug would."""
        raise RuntimeError("boom")

    monkeypatch.delenv("ESCHER_DEBUG", raising=False)
    result = CliRunner().invoke(buggy, [])
    assert result.exit_code == 70 and "Traceback" not in result.output
    assert result.stderr.startswith("error: unexpected RuntimeError: boom.")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_number_options_refuse_nan_and_infinity(value: str) -> None:
    @command("wait", examples=["escher wait --seconds 1"])
    @click.option("--seconds", type=float, default=1.0)
    def wait(seconds: float, fmt: str) -> None:
        """Wait."""

    result = CliRunner().invoke(wait, ["--seconds", value])
    assert result.exit_code == 3 and "is not a finite number" in result.stderr


def test_plain_width_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from escher.cli.conventions import PLAIN_WIDTH, output_width

    monkeypatch.delenv("COLUMNS", raising=False)
    assert output_width(io.StringIO()) == PLAIN_WIDTH == 100
    monkeypatch.setenv("COLUMNS", "120")
    assert output_width(io.StringIO()) == 120
