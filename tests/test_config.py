"""Configuration: precedence, files found upwards, malformed files, typed option values."""

from __future__ import annotations

from pathlib import Path

import pytest

import escher
from escher.backends.memory._virtual import VirtualClock
from escher.config import resolve
from escher.core.errors import ConfigError


def test_default_is_memory(tmp_path: Path) -> None:
    config = resolve(environ={}, cwd=tmp_path)
    assert config.backend == "memory" and config.options == {} and config.sources == ()


def test_precedence_argument_env_file(tmp_path: Path) -> None:
    (tmp_path / "escher.toml").write_text(
        'backend = "ray"\n[memory]\nmax_workers = 3\nstarvation_threshold = 9\n'
    )
    assert resolve(environ={}, cwd=tmp_path).backend == "ray"
    env = {"ESCHER_BACKEND": "memory", "ESCHER_MEMORY_MAX_WORKERS": "5"}
    config = resolve(environ=env, cwd=tmp_path)
    assert config.backend == "memory"
    assert config.options == {"max_workers": 5, "starvation_threshold": 9}
    config = resolve("memory", {"max_workers": 7}, environ=env, cwd=tmp_path)
    assert config.options["max_workers"] == 7


def test_pyproject_tool_table_found_upwards(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[tool.escher]\nbackend = "memory"\n'
        "[tool.escher.memory]\nnodes = { a = { CPU = 1 } }\n"
    )
    nested = tmp_path / "src" / "pkg"
    nested.mkdir(parents=True)
    config = resolve(environ={}, cwd=nested)
    assert config.options == {"nodes": {"a": {"CPU": 1}}}
    assert config.sources == (str(tmp_path / "pyproject.toml"),)


def test_k8s_alias_and_explicit_config_file(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text('backend = "k8s"\n[kubernetes]\nnamespace = "jobs"\n')
    config = resolve(environ={"ESCHER_CONFIG": str(path)}, cwd=tmp_path)
    assert config.backend == "kubernetes" and config.options == {"namespace": "jobs"}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("backend = \n", "not valid TOML"),
        ('backnd = "memory"\n', "Did you mean 'backend'"),
        ("backend = 3\n", "must be a string"),
        ("[memory]\nnodes = 1\n[memroy]\nx = 1\n", "Did you mean 'memory'"),
    ],
)
def test_malformed_config_files(tmp_path: Path, text: str, fragment: str) -> None:
    (tmp_path / "escher.toml").write_text(text)
    with pytest.raises(ConfigError, match=fragment) as caught:
        resolve(environ={}, cwd=tmp_path)
    assert "escher.toml" in str(caught.value)


def test_missing_config_file_named_by_env(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a file"):
        resolve(environ={"ESCHER_CONFIG": str(tmp_path / "nope.toml")}, cwd=tmp_path)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            '[memory]\nvirtual_clock = "false"\n',
            "[memory] virtual_clock: the memory backend expects bool, got 'false' (str). "
            "Write it without quotes: virtual_clock = false.",
        ),
        ("[memory]\nmax_workers = 2.5\n", "[memory] max_workers: the memory backend expects int"),
        ("[memory]\nnodes = [1, 2]\n", "[memory] nodes: the memory backend expects Mapping"),
        ("[memory]\nnode = {}\n", "[memory] node: the memory backend has no option 'node'"),
    ],
)
def test_option_of_the_wrong_type_names_file_and_key(
    tmp_path: Path, text: str, fragment: str
) -> None:
    (tmp_path / "escher.toml").write_text(text)
    config = resolve(environ={}, cwd=tmp_path)
    with pytest.raises(ConfigError) as caught:
        _build(config)
    assert str(caught.value).startswith(str(tmp_path / "escher.toml"))
    assert fragment in str(caught.value)


def _build(config: object) -> None:
    from escher.backends import create_backend

    create_backend(config.backend, config.options, config.origins)  # type: ignore[attr-defined]


def test_typed_options_through_init(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ESCHER_BACKEND", raising=False)
    (tmp_path / "pyproject.toml").write_text('[tool.escher.memory]\nvirtual_clock = "true"\n')
    with pytest.raises(ConfigError, match=r"\[tool\.escher\.memory\] virtual_clock"):
        escher.init()
    (tmp_path / "pyproject.toml").write_text("[tool.escher.memory]\nvirtual_clock = true\n")
    monkeypatch.setenv("ESCHER_MEMORY_MAX_WORKERS", "lots")
    with pytest.raises(ConfigError, match="environment variable ESCHER_MEMORY_MAX_WORKERS"):
        escher.init()
    monkeypatch.setenv("ESCHER_MEMORY_MAX_WORKERS", "3")  # JSON: the int 3
    with escher.init() as backend:
        assert isinstance(backend.clock, VirtualClock)  # virtual_clock = true held
    with pytest.raises(ConfigError, match=r"argument virtual_clock: .* Pass False"):
        escher.init(virtual_clock="false")
    assert not escher.is_initialized()


def test_origins_follow_precedence(tmp_path: Path) -> None:
    (tmp_path / "escher.toml").write_text("[memory]\nmax_workers = 3\nvirtual_clock = false\n")
    env = {"ESCHER_MEMORY_MAX_WORKERS": "5"}
    config = resolve("memory", {"virtual_clock": True}, environ=env, cwd=tmp_path)
    assert config.options == {"max_workers": 5, "virtual_clock": True}
    assert config.origins == {
        "max_workers": "environment variable ESCHER_MEMORY_MAX_WORKERS",
        "virtual_clock": "argument virtual_clock",
    }


@pytest.mark.parametrize(
    ("backend", "environ", "file", "origin"),
    [
        ("memroy", {}, None, "argument backend: no backend named 'memroy'"),
        (None, {"ESCHER_BACKEND": "memroy"}, None, "environment variable ESCHER_BACKEND: no"),
        (None, {}, 'backend = "rya"\n', "escher.toml: backend: no backend named 'rya'"),
    ],
)
def test_an_unknown_backend_names_where_it_came_from(
    tmp_path: Path, backend: str | None, environ: dict[str, str], file: str | None, origin: str
) -> None:
    if file is not None:
        (tmp_path / "escher.toml").write_text(file)
    with pytest.raises(ConfigError, match=origin) as caught:
        resolve(backend, environ=environ, cwd=tmp_path)
    assert "Did you mean" in str(caught.value)


def test_the_command_line_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from escher.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ESCHER_BACKEND", "memroy")
    result = CliRunner().invoke(main, ["state"])
    assert result.exit_code == 3 and "Traceback" not in result.output
    assert result.stderr.startswith("error: environment variable ESCHER_BACKEND: no backend")
    monkeypatch.delenv("ESCHER_BACKEND")
    result = CliRunner().invoke(main, ["state", "--backend", "memroy"])
    assert result.exit_code == 3 and "Invalid value for '--backend'" in result.stderr
