"""The backend registry: names, aliases, install hints, availability, typed options."""

from __future__ import annotations

from pathlib import Path

import pytest

from escher.backends import create_backend, get_backend_class, known_backends, register_backend
from escher.backends.memory import MemoryBackend
from escher.core.errors import BackendUnavailableError, ConfigError, UnknownBackendError


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


def test_install_hints_name_the_distribution() -> None:
    entries = known_backends()
    assert entries["ray"].install_hint == "pip install 'escher-sched[ray]'"
    assert entries["kubernetes"].install_hint == "pip install 'escher-sched[k8s]'"


def test_available_only_when_imports_succeed() -> None:
    from escher.backends import availability

    register_backend(
        "needs-missing",
        "escher.backends.memory:MemoryBackend",
        "pip install needs-missing",
        requires=("escher_no_such_module",),
    )
    try:
        cls, reason = availability("needs-missing")
        assert cls is None and "escher_no_such_module" in reason
        assert "pip install needs-missing" in reason
        assert availability("memory") == (MemoryBackend, "")
        with pytest.raises(UnknownBackendError):
            availability("nope")
    finally:
        import escher.backends._registry as registry

        registry._entries.pop("needs-missing", None)


def test_third_party_backend_options_are_typed_by_its_signature() -> None:
    from escher.backends import check_options

    class Custom(MemoryBackend):
        name = "custom"

        def __init__(self, *, size: int = 1, label: str | None = None) -> None:
            super().__init__(nodes={"a": {"CPU": size}})

    check_options(Custom, {"size": 2, "label": None})
    with pytest.raises(ConfigError, match="argument size: the custom backend expects int"):
        check_options(Custom, {"size": "2"})
    with pytest.raises(ConfigError, match=r"here: the custom backend has no option 'sise'.*'size'"):
        check_options(Custom, {"sise": 2}, {"sise": "here"})
