"""Configuration precedence, the backend registry and the CLI."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import escher
from escher._config import resolve
from escher.backends import create_backend, get_backend_class, known_backends, register_backend
from escher.backends.memory import MemoryBackend
from escher.cli import main
from escher.core.errors import (
    BackendUnavailableError,
    ConfigError,
    NotInitializedError,
    NotInTaskError,
    UnknownBackendError,
)


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


def test_unknown_backend_suggests_a_name() -> None:
    with pytest.raises(UnknownBackendError, match="Did you mean 'memory'"):
        get_backend_class("memroy")


def test_unknown_option_suggests_a_name() -> None:
    with pytest.raises(ConfigError, match="Did you mean 'nodes'"):
        create_backend("memory", {"node": {}})


def test_missing_module_gives_install_hint() -> None:
    register_backend("phantom", "escher_phantom_backend:Phantom", "pip install escher-phantom")
    with pytest.raises(BackendUnavailableError, match="pip install escher-phantom"):
        get_backend_class("phantom")
    with pytest.raises(ConfigError):
        register_backend("bad", "no-colon-here")


def test_entry_point_discovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import escher.backends._registry as registry

    (tmp_path / "thirdparty_backend.py").write_text(
        "from escher.backends.memory import MemoryBackend\n"
        "class ThirdParty(MemoryBackend):\n    name = 'thirdparty'\n"
    )
    dist = tmp_path / "thirdparty_backend-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: thirdparty-backend\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(
        "[escher.backends]\nthirdparty = thirdparty_backend:ThirdParty\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_discovered", False)
    assert "thirdparty" in known_backends()
    backend = create_backend("thirdparty", {"nodes": {"x": {"CPU": 1}}})
    assert isinstance(backend, MemoryBackend) and list(backend.get_cluster_state().nodes) == ["x"]


def test_module_api_lifecycle() -> None:
    escher.shutdown()
    with pytest.raises(NotInitializedError):
        escher.set_resource("x", 1, "a")
    with pytest.raises(NotInTaskError):
        escher.node_id()
    first = escher.init(nodes={"a": {"CPU": 1}}).backend
    second = escher.init(nodes={"b": {"CPU": 1}}).backend  # replaces and closes the first
    assert escher.current_backend() is second
    with pytest.raises(escher.BackendError):
        first.set_resource("x", 1, "a")
    with escher.init(MemoryBackend(nodes={"c": {"CPU": 1}})) as backend:
        assert escher.current_backend() is backend
    assert not escher.is_initialized()


def test_task_decorator_rejects_unknown_options() -> None:
    with pytest.raises(TypeError):
        escher.task(resource={"CPU": 1})
    fn = escher.task(lambda x: x + 1)
    assert fn(1) == 2
    with pytest.raises(TypeError):
        fn.options(cpus=1)


def test_cli_backends_state_and_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ESCHER_BACKEND", raising=False)
    nodes = "[memory]\nnodes = { a = { CPU = 2 }, b = { GPU = 1 } }\n"
    (tmp_path / "escher.toml").write_text(nodes)
    runner = CliRunner()
    result = runner.invoke(main, ["backends"])
    assert result.exit_code == 0, result.output
    assert "memory (configured)" in result.output and "kubernetes" in result.output
    result = runner.invoke(main, ["state", "--json"])
    assert result.exit_code == 0, result.output
    assert sorted(n["id"] for n in json.loads(result.output)["nodes"]) == ["a", "b"]
    result = runner.invoke(main, ["state"])
    assert result.exit_code == 0 and "GPU=1" in result.output
    result = runner.invoke(main, ["state", "--backend", "memroy"])
    assert result.exit_code == 3 and "Did you mean 'memory'" in result.output
    assert "Traceback" not in result.output


def test_cli_module_entry_point() -> None:
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "escher.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "demo" in out.stdout and "verify" in out.stdout
