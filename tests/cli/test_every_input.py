"""No `escher` command prints a traceback, whatever it is given; every help example runs.

The cases are generated from the click command tree (`escher.cli.main`): every command with
no arguments; every option and argument of every command given an out-of-range value (below
or above an `IntRange`/`FloatRange`, a negative, NaN or infinite number, a word that is no
choice, a path that does not exist or is a directory, an empty or unknown name); and every
example of every command's ``--help``. A command or option added later is covered as is.

Each case runs as a user runs it: ``python -m escher.cli ...`` (through ``bash`` for the help
examples, which may pipe or redirect) in a fresh directory holding the sample files shipped
with escher under the names the examples use (plan.json, cluster.json, workload.json), with
no configuration. A command still running after `RUNS_FOR` seconds (``escher view`` serves
until interrupted) gets Ctrl-C and must stop cleanly with exit code 130. The cases of one
kind run in parallel in subprocesses; each test asserts on one.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
from click.core import ParameterSource

from escher.cli import main
from escher.cli.conventions import SHARED_EXIT_CODES, ExitCode
from escher.samples import SAMPLES, sample_path

CONTEXT = click.Context(main, info_name="escher")
COMMANDS: dict[str, click.Command] = {
    name: command
    for name in main.list_commands(CONTEXT)
    if (command := main.get_command(CONTEXT, name)) is not None
}
#: Seconds a command may run before it gets Ctrl-C (escher view serves until interrupted).
RUNS_FOR = float(os.environ.get("ESCHER_TEST_RUNS_FOR", "12"))
#: Commands that serve until interrupted; every other command is left to end by itself
#: within `ENDS_IN` seconds (a Ctrl-C while Python imports numpy is not escher's to catch).
SERVING = frozenset({"view"})
ENDS_IN = 150.0
#: The same on a real cluster (Ray starting, a Kubernetes session's lease and clean-up).
CLUSTER_RUNS_FOR = 150.0
#: Backends whose examples need a real cluster, and the marker of their tests.
CLUSTER_BACKENDS = {"ray": "ray", "kubernetes": "k8s", "k8s": "k8s"}
KUBERNETES_OPTIONS = ("--kubeconfig", "--context", "--in-cluster")


@dataclass(frozen=True)
class Outcome:
    """How one command line ended."""

    argv: str
    code: int
    stdout: str
    stderr: str
    interrupted: bool

    def __str__(self) -> str:
        return (
            f"$ {self.argv}\nexit {self.code}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"
        )


def _environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ESCHER_", "KUBECONFIG"))}
    env.update(HOME=str(home), TOKEN="s3cret", COLUMNS="100", PYTHONUNBUFFERED="1")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    return env


#: A directory holding an `escher` script that runs this checkout's command line (written
#: once, before any case runs: a script still open for writing in one thread cannot be run
#: by a process another thread forks meanwhile).
SHIM = Path(tempfile.mkdtemp(prefix="escher-shim-"))
(SHIM / "escher").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m escher.cli "$@"\n')
(SHIM / "escher").chmod(0o755)


def workdir(base: Path) -> Path:
    """A fresh directory with the sample files under the names the examples use."""
    base.mkdir(parents=True, exist_ok=True)
    for name in SAMPLES:
        shutil.copy(sample_path(name), base / name)
    (base / "home").mkdir(exist_ok=True)
    return base


def run(argv: list[str] | str, cwd: Path, runs_for: float = RUNS_FOR) -> Outcome:
    """Run an escher command line (a list: ``python -m escher.cli``; a string: bash)."""
    if isinstance(argv, str):
        shown, cmd = argv, ["bash", "-o", "pipefail", "-c", argv]
    else:
        shown = shlex.join(["escher", *argv])
        cmd = [sys.executable, "-m", "escher.cli", *argv]
    env = _environment(cwd / "home")
    env["PATH"] = f"{SHIM}{os.pathsep}{env.get('PATH', '')}"  # `escher`: this checkout's
    process = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    interrupted = False
    try:
        stdout, stderr = process.communicate(timeout=runs_for)
    except subprocess.TimeoutExpired:
        interrupted = True
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C, to the whole pipeline
        try:
            stdout, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            stderr += "\n[did not stop within 30 s of Ctrl-C]"
    return Outcome(shown, process.returncode, stdout, stderr, interrupted)


def run_all(cases: dict[str, Any], cwd: Path) -> dict[str, Outcome]:
    """Run every case (id -> argv) in parallel, each in its own copy of the directory."""

    def one(item: tuple[int, tuple[str, Any]]) -> tuple[str, Outcome]:
        index, (case_id, argv) = item
        words = shlex.split(argv) if isinstance(argv, str) else ["escher", *argv]
        serves = len(words) > 1 and words[1] in SERVING
        return case_id, run(argv, workdir(cwd / f"case-{index}"), RUNS_FOR if serves else ENDS_IN)

    with ThreadPoolExecutor(max_workers=min(6, (os.cpu_count() or 2) * 2)) as pool:
        return dict(pool.map(one, enumerate(cases.items())))


def exit_codes(name: str) -> dict[int, str]:
    return dict(getattr(COMMANDS[name], "exit_codes", SHARED_EXIT_CODES))


def assert_clean(outcome: Outcome, codes: dict[int, str]) -> None:
    """A documented exit code, one error line (no traceback), Ctrl-C honoured."""
    assert "Traceback" not in outcome.stdout + outcome.stderr, outcome
    assert "unexpected" not in outcome.stderr, outcome  # the catch-all for bugs
    if outcome.interrupted:
        assert outcome.code == ExitCode.INTERRUPTED, outcome
        return
    assert outcome.code in codes, outcome
    assert outcome.code != ExitCode.FAILED, outcome  # input problems are not failures
    if outcome.code == ExitCode.BAD_INPUT:
        lines = [line for line in outcome.stderr.splitlines() if line.strip()]
        assert lines and lines[-1].startswith("error: "), outcome


# --- the examples of --help --------------------------------------------------------------------


def help_examples(name: str) -> list[str]:
    """The example command lines of ``escher NAME --help``, as printed (comments dropped)."""
    command = COMMANDS[name]
    text = command.get_help(click.Context(command, info_name=name, parent=CONTEXT))
    section = text.split("Examples:\n", 1)[1].split("\n\n", 1)[0] if "Examples:" in text else ""
    lines = [line.strip() for line in section.splitlines() if line.strip()]
    return [re.sub(r"\s+#.*$", "", line) for line in lines]


def needs_cluster(example: str) -> str | None:
    """The marker of the real cluster an example names (``--backend ray``), or None."""
    words = shlex.split(example)
    for flag, value in zip(words, [*words[1:], ""], strict=True):
        if flag == "--backend" and value in CLUSTER_BACKENDS:
            return CLUSTER_BACKENDS[value]
    return "k8s" if any(w.startswith(KUBERNETES_OPTIONS) for w in words) else None


def _example_params() -> Iterator[Any]:
    for name in COMMANDS:
        for example in help_examples(name):
            marker = needs_cluster(example)
            marks = [getattr(pytest.mark, marker)] if marker else []
            yield pytest.param(name, example, marker, marks=marks, id=example[:70])


EXAMPLES = list(_example_params())


@pytest.fixture(scope="module")
def memory_examples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    cases = {p.values[1]: p.values[1] for p in EXAMPLES if p.values[2] is None}
    return run_all(cases, tmp_path_factory.mktemp("examples"))


def test_every_command_has_examples() -> None:
    for name in COMMANDS:
        assert help_examples(name), f"escher {name} --help shows no example"


@pytest.mark.parametrize(("name", "example", "marker"), EXAMPLES)
def test_help_examples_run_as_written(
    name: str,
    example: str,
    marker: str | None,
    memory_examples: dict[str, Outcome],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    """On the in-memory default: an answer (exit 0, or a verdict such as infeasible), or still
    serving when interrupted. On a real
    cluster (marked ray or k8s): a clean answer, 69 when that cluster cannot be reached."""
    if marker is None:
        outcome = memory_examples[example]
        assert_clean(outcome, exit_codes(name))
        if outcome.code == ExitCode.UNAVAILABLE and "pip install 'escher-sched[" in outcome.stderr:
            pytest.skip(f"needs an extra that is not installed: {outcome.stderr.strip()}")
        answers = set(exit_codes(name)) - {
            ExitCode.BAD_INPUT,
            ExitCode.FAILED,
            ExitCode.UNAVAILABLE,
        }
        assert outcome.code in answers or outcome.interrupted, outcome  # a verdict, no error
        return
    cwd = workdir(tmp_path / "case")
    if marker == "k8s":
        cluster = request.getfixturevalue("k8s_cluster")
        (cwd / "home" / ".kube").mkdir(parents=True)
        shutil.copy(cluster.kubeconfig, cwd / "home" / ".kube" / "config")
    assert_clean(run(example, cwd, CLUSTER_RUNS_FOR), exit_codes(name))


# --- no arguments, and every option out of range -----------------------------------------------


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def bad_values(param: click.Parameter) -> list[tuple[str, bool]]:
    """Values out of range for `param`, from its type, each with whether it must be refused
    (exit 3): values outside a declared range, words that are no number or no choice, NaN,
    infinities, a directory where a file is wanted. Others (a negative count, an unknown name)
    may be taken, but never with a traceback."""
    kind = param.type
    if isinstance(kind, click.IntRange | click.FloatRange):
        step = 1 if isinstance(kind, click.IntRange) else 0.5
        values = [("x", True)]
        if isinstance(kind, click.FloatRange):
            values += [("nan", True), ("inf", True)]
        if kind.min is not None:
            values.append((_number(kind.min if kind.min_open else kind.min - step), True))
        if kind.max is not None:
            values.append((_number(kind.max if kind.max_open else kind.max + step), True))
        return values
    if kind == click.INT:
        return [("x", True), ("-1", False), (str(2**70), False)]
    if kind == click.FLOAT:
        return [("x", True), ("-1", False), ("nan", True), ("inf", True), ("1e400", True)]
    if isinstance(kind, click.Choice):
        return [("no-such-choice", True)]
    if isinstance(kind, click.Path):
        values = [("no/such/file.json", False)]
        if not kind.dir_okay:
            values.append(("/", True))
        if not kind.file_okay:
            values.append(("plan.json", True))  # a file where a directory is wanted
        return values
    if kind == click.BOOL:
        return [("maybe", True)]
    return [("", False), ("no such thing!", False)]


def base_tokens(name: str) -> dict[str, list[str]]:
    """What the first example that runs on the memory backend passes, by parameter."""
    command = COMMANDS[name]
    example = next(
        (e for e in help_examples(name) if needs_cluster(e) is None and not set("|>$") & set(e)),
        f"escher {name}",
    )
    args = shlex.split(example)[2:]
    ctx = command.make_context(name, list(args), parent=CONTEXT, resilient_parsing=True)
    tokens: dict[str, list[str]] = {}
    for param in command.params:
        assert param.name is not None
        if ctx.get_parameter_source(param.name) is not ParameterSource.COMMANDLINE:
            continue
        value = ctx.params[param.name]
        values = list(value) if isinstance(value, tuple | list) else [value]
        if isinstance(param, click.Argument):
            tokens[param.name] = [str(v) for v in values]
        elif isinstance(param, click.Option) and param.is_flag:
            tokens[param.name] = [param.opts[0]] if value else []
        else:
            tokens[param.name] = [t for v in values for t in (param.opts[0], str(v))]
    return tokens


def argv_of(name: str, tokens: dict[str, list[str]]) -> list[str]:
    command = COMMANDS[name]
    arguments = [
        t
        for p in command.params
        if isinstance(p, click.Argument)
        for t in tokens.get(p.name or "", [])
    ]
    options = [
        t
        for p in command.params
        if not isinstance(p, click.Argument)
        for t in tokens.get(p.name or "", [])
    ]
    return [name, *arguments, *options]


def _checked_params(command: click.Command) -> Iterator[click.Parameter]:
    for param in command.params:
        if isinstance(param, click.Option) and (param.is_flag or param.hidden):
            continue
        if param.name in (None, "help"):
            continue
        yield param


@dataclass(frozen=True)
class Case:
    """One command line to try: which command, the argv, the parameter as a user writes it
    (``--port``, ``PLAN_FILE``; "" for no arguments), the value tried and whether it must be
    refused."""

    name: str
    argv: list[str]
    shown: str = ""
    value: str = ""
    must_refuse: bool = False


def _input_cases() -> dict[str, Case]:
    cases: dict[str, Case] = {}
    for name, command in COMMANDS.items():
        cases[f"{name} (no arguments)"] = Case(name, [name])
        if not any(True for _ in _checked_params(command)):
            continue
        base = base_tokens(name)
        for param in _checked_params(command):
            assert param.name is not None
            for value, must_refuse in bad_values(param):
                tokens = dict(base)
                if isinstance(param, click.Argument):
                    tokens[param.name] = [value]
                    shown = param.human_readable_name
                else:
                    tokens[param.name] = [param.opts[-1], value]
                    shown = param.opts[-1]
                case_id = f"{name} {shown}={value!r}"
                cases[case_id] = Case(name, argv_of(name, tokens), shown, value, must_refuse)
    return cases


INPUT_CASES = _input_cases()


@pytest.fixture(scope="module")
def input_outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    cases = {case_id: case.argv for case_id, case in INPUT_CASES.items()}
    return run_all(cases, tmp_path_factory.mktemp("inputs"))


def test_cases_cover_every_command_and_option() -> None:
    assert {case.name for case in INPUT_CASES.values()} == set(COMMANDS)
    for name, command in COMMANDS.items():
        for param in _checked_params(command):
            shown = param.opts[-1] if isinstance(param, click.Option) else param.human_readable_name
            assert any(c.shown == shown for c in INPUT_CASES.values() if c.name == name), shown


@pytest.mark.parametrize("case_id", list(INPUT_CASES))
def test_no_traceback_on_any_input(case_id: str, input_outcomes: dict[str, Outcome]) -> None:
    """A documented exit code and no traceback; bad input exits 3 naming the parameter."""
    case = INPUT_CASES[case_id]
    outcome = input_outcomes[case_id]
    assert_clean(outcome, exit_codes(case.name))
    if case.must_refuse:
        assert outcome.code == ExitCode.BAD_INPUT, outcome
    if outcome.code == ExitCode.BAD_INPUT and case.shown:  # names the parameter or the value
        plain = case.shown.strip("-").lower()
        names = {case.shown.lower(), plain, plain.replace("-", " "), plain.replace("_", " ")}
        stderr = outcome.stderr.lower()
        assert any(n in stderr for n in names) or repr(case.value).lower() in stderr, outcome
