"""The `escher` group: suggestions, commands whose extra is missing, completion, version."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from escher import __version__
from escher.cli import COMMANDS, CommandEntry, main


@pytest.mark.parametrize(
    ("typed", "meant"), [("verfy", "verify"), ("stat", "state"), ("dmeo", "demo")]
)
def test_unknown_subcommand_suggests(typed: str, meant: str) -> None:
    result = CliRunner().invoke(main, [typed])
    assert result.exit_code == 3
    assert f"Did you mean {meant!r}?" in result.stderr and result.stdout == ""


def _typos(name: str) -> list[str]:
    """A letter doubled, the first dropped (or a letter inserted), the last two swapped."""
    dropped = name[1:] if len(name) > 3 else name[0] + "x" + name[1:]
    return [name + name[-1], dropped, name[:-2] + name[-1] + name[-2]]


@pytest.mark.parametrize(
    ("typed", "meant"), [(typo, name) for name in sorted(COMMANDS) for typo in _typos(name)]
)
def test_every_subcommand_is_suggested_when_mistyped(typed: str, meant: str) -> None:
    result = CliRunner().invoke(main, [typed, "--help"])
    assert result.exit_code == 3, result.output
    assert f"Did you mean {meant!r}?" in result.stderr and result.stdout == ""


def test_command_whose_extra_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(main.lazy, "phantom", CommandEntry("escher_no_such_module:cmd", "k8s"))
    listing = CliRunner().invoke(main, ["--help"])
    line = next(x for x in listing.stdout.splitlines() if x.strip().startswith("phantom"))
    assert "pip install 'escher-sched[k8s]'" in line
    assert all(x.strip() for x in listing.stdout.split("Commands:")[1].splitlines()[1:])
    result = CliRunner().invoke(main, ["phantom", "--anything", "x"])
    assert result.exit_code == 69 and "pip install 'escher-sched[k8s]'" in result.stderr
    result = CliRunner().invoke(main, ["phantom", "--format", "json"])
    assert json.loads(result.stderr)["error"]["code"] == 69
    helptext = CliRunner().invoke(main, ["phantom", "--help"]).stdout
    assert "Examples:" in helptext and "escher-sched[k8s]" in helptext


def test_every_registered_command_is_importable_here() -> None:
    assert "phantom" not in COMMANDS
    for name in COMMANDS:
        command = main.get_command(click.Context(main), name)
        assert command is not None and command.name == name


def test_version_names_the_distribution() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and __version__ in result.stdout
    assert "escher-sched" in result.stdout


def test_shell_completion_of_commands_and_backends() -> None:
    env = {
        **os.environ,
        "_ESCHER_COMPLETE": "bash_complete",
        "COMP_WORDS": "escher ver",
        "COMP_CWORD": "1",
    }
    run = [sys.executable, "-m", "escher.cli"]
    out = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60)
    assert "plain,verify" in out.stdout.splitlines(), out
    env |= {"COMP_WORDS": "escher state --backend me", "COMP_CWORD": "3"}
    out = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60)
    assert "plain,memory" in out.stdout.splitlines(), out
    env = {**os.environ, "_ESCHER_COMPLETE": "bash_source"}
    out = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60)
    assert "complete" in out.stdout and "_escher_completion" in out.stdout


def test_module_entry_point() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "escher.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "demo" in out.stdout and "verify" in out.stdout


def test_command_whose_module_raises_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command module may refuse to load with BackendUnavailableError (its extra missing)."""
    import sys
    import types

    module = types.ModuleType("escher_fake_view_cli")

    def _getattr(name: str) -> object:
        from escher.core.errors import BackendUnavailableError

        raise BackendUnavailableError("needs the view extra")

    module.__getattr__ = _getattr  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "escher_fake_view_cli", module)
    monkeypatch.setitem(main.lazy, "fakeview", CommandEntry("escher_fake_view_cli:view", "view"))
    listing = CliRunner().invoke(main, ["--help"])
    assert listing.exit_code == 0 and "escher-sched[view]" in listing.stdout
    assert CliRunner().invoke(main, ["fakeview"]).exit_code == 69
