"""Every `escher` subcommand, enumerated from the group: help with examples, and JSON output.

A command added to `escher.cli.COMMANDS` is covered here as is. Commands that need input to
do something useful get arguments from `ARGS`; any other runs with ``--format json`` alone and
must then print JSON on stdout (exit 0) or one JSON error object on stderr with a documented
exit code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from escher.cli import main
from escher.cli._group import UnavailableCommand
from escher.cli.conventions import SHARED_EXIT_CODES, EscherCommand

click_context = click.Context(main, info_name="escher")
COMMAND_NAMES = main.list_commands(click_context)
CLUSTER = {"nodes": [{"id": "n1", "total": {"CPU": 4}}, {"id": "n2", "total": {"CPU": 4}}]}
PLAN = {"tasks": [{"name": "t", "resources": {"CPU": 1}, "count": 2}]}
APP = "import escher\n\ndef main():\n    escher.launch(len, [], resources={'CPU': 1})\n"


def _verify_args(tmp: Path) -> list[str]:
    (tmp / "cluster.json").write_text(json.dumps(CLUSTER))
    (tmp / "plan.json").write_text(json.dumps(PLAN))
    return [str(tmp / "plan.json"), "--cluster", str(tmp / "cluster.json")]


def _what_if_args(tmp: Path) -> list[str]:
    (tmp / "cluster.json").write_text(json.dumps(CLUSTER))
    workload = {"plan": PLAN, "tasks": {"t": {"duration": 1}}}
    (tmp / "workload.json").write_text(json.dumps(workload))
    return [str(tmp / "workload.json"), "--cluster", str(tmp / "cluster.json")]


def _plan_args(tmp: Path) -> list[str]:
    (tmp / "cluster.json").write_text(json.dumps(CLUSTER))
    (tmp / "app.py").write_text(APP)
    return [f"{tmp / 'app.py'}:main", "--cluster", str(tmp / "cluster.json")]


#: Arguments that make a command do real work (quickly, in memory or in files).
ARGS: dict[str, Callable[[Path], list[str]]] = {
    "bench": lambda tmp: ["gandiva", "--quick", "--no-plot", "--out", str(tmp)],
    "gc": lambda tmp: ["--dry-run", "--kubeconfig", str(tmp / "no-such-kubeconfig")],
    "plan": _plan_args,
    "verify": _verify_args,
    "view": lambda tmp: ["--for", "0.2"],
    "what-if": _what_if_args,
}


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no config file is found; outputs land here
    for var in ("ESCHER_BACKEND", "ESCHER_CONFIG", "KUBECONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config either


def test_the_group_lists_the_commands() -> None:
    assert {"backends", "bench", "demo", "gc", "state", "verify"} <= set(COMMAND_NAMES)


@pytest.mark.parametrize("name", COMMAND_NAMES)
def test_help_has_examples_and_the_json_flag(name: str) -> None:
    result = CliRunner().invoke(main, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "--format [text|json]" in result.output
    command = main.get_command(click_context, name)
    assert isinstance(command, EscherCommand), f"escher {name}: use escher.cli.conventions"
    assert "Examples:" in result.output and "Exit codes:" in result.output
    assert command.examples and all(e.startswith("escher ") for e in command.examples)
    assert (command.help or "").strip(), f"escher {name} has no description"


@pytest.mark.parametrize("name", COMMAND_NAMES)
def test_json_output_parses(name: str, tmp_path: Path) -> None:
    args = [name, *ARGS.get(name, lambda _: [])(tmp_path), "--format", "json"]
    result = CliRunner().invoke(main, args)
    command = main.get_command(click_context, name)
    codes = getattr(command, "exit_codes", SHARED_EXIT_CODES)
    assert result.exit_code in codes, (result.exit_code, result.stderr)
    if result.stdout:  # a result (also with a command's own non-zero outcome)
        data = json.loads(result.stdout)
        assert isinstance(data, dict) and data, data
        assert result.stderr == "" or "warning" in result.stderr
    else:  # an error: one JSON object on stderr
        error = json.loads(result.stderr)["error"]
        assert error["code"] == result.exit_code and error["message"]


def _runnable(name: str) -> bool:
    command = main.get_command(click_context, name)
    if isinstance(command, UnavailableCommand):  # its extra is not installed here
        return False
    needs_input = any(p.required for p in getattr(command, "params", []))
    return name != "gc" and (name in ARGS or not needs_input)  # gc needs a real cluster


@pytest.mark.parametrize("name", [n for n in COMMAND_NAMES if _runnable(n)])
def test_commands_that_run_here_succeed(name: str, tmp_path: Path) -> None:
    """Text output, exit 0, on the in-memory default (or the files in `ARGS`)."""
    result = CliRunner().invoke(main, [name, *ARGS.get(name, lambda _: [])(tmp_path)])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert result.stdout.strip() and "Traceback" not in result.output


@pytest.mark.parametrize("name", COMMAND_NAMES)
def test_usage_mistakes_exit_3_on_stderr(name: str) -> None:
    result = CliRunner().invoke(main, [name, "--no-such-option"])
    if isinstance(main.get_command(click_context, name), UnavailableCommand):
        assert result.exit_code == 69 and "pip install" in result.stderr  # extra missing here
        return
    assert result.exit_code == 3, result.output
    assert "No such option" in result.stderr and result.stdout == ""
    result = CliRunner().invoke(main, [name, "--no-such-option", "--format", "json"])
    assert result.exit_code == 3 and json.loads(result.stderr)["error"]["code"] == 3


def _choice_options(name: str) -> list[tuple[str, str]]:
    command = main.get_command(click_context, name)
    if isinstance(command, UnavailableCommand):
        return []
    return [
        (param.opts[0], str(param.type.choices[0]))
        for param in getattr(command, "params", [])
        if isinstance(param, click.Option) and isinstance(param.type, click.Choice)
    ]


@pytest.mark.parametrize(
    ("name", "option", "choice"),
    [(n, o, c) for n in COMMAND_NAMES for o, c in _choice_options(n)],
)
def test_a_mistyped_choice_gets_a_suggestion(name: str, option: str, choice: str) -> None:
    typo = choice[:-1] + ("x" if len(choice) < 4 else "")
    result = CliRunner().invoke(main, [name, option, typo])
    assert result.exit_code == 3, result.output
    assert f"Did you mean {choice!r}?" in result.stderr, result.stderr
