"""The control plane's flags and scheduler config, per Kubernetes generation.

Runs without the binaries: the versions come from recorded ``--version`` outputs
(``data/k8s/*.version``): 1.20.2 as the provisioned binaries print it, and a current release
(1.34.1) as its binaries print it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.k8s_flags import (
    KubeVersion,
    apiserver_flags,
    parse_version,
    scheduler_api_version,
    scheduler_config,
    scheduler_flags,
)

DATA = Path(__file__).parent / "data" / "k8s"
PKI = Path("/tmp/pki")


def recorded(name: str) -> KubeVersion:
    return parse_version((DATA / name).read_text())


OLD = recorded("kube-apiserver-v1.20.2.version")
NEW = recorded("kube-apiserver-v1.34.1.version")


def flags(version: KubeVersion, authorization: str = "AlwaysAllow") -> list[str]:
    return apiserver_flags(
        version, etcd="http://127.0.0.1:1", port=2, pki=PKI, authorization=authorization
    )


def names(flag_list: list[str]) -> set[str]:
    return {f.split("=", 1)[0] for f in flag_list}


def test_recorded_versions_parse() -> None:
    assert (OLD.major, OLD.minor, OLD.patch, str(OLD)) == (1, 20, 2, "v1.20.2")
    assert (NEW.major, NEW.minor, NEW.patch, str(NEW)) == (1, 34, 1, "v1.34.1")
    assert recorded("kube-scheduler-v1.20.2.version") == OLD
    assert recorded("kube-scheduler-v1.34.1.version") == NEW
    etcd = recorded("etcd-3.4.23.version")
    assert (etcd.major, etcd.minor) == (3, 4)
    assert parse_version("etcd Version: 3.5.16\nGit SHA: x\n").minor == 5
    assert parse_version("Kubernetes v1.31.0-rc.1").text == "v1.31.0-rc.1"


def test_parse_version_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="no version"):
        parse_version("unknown flag: --version")


def test_apiserver_1_20_keeps_insecure_port_off_and_turns_on_bound_tokens() -> None:
    old = flags(OLD)
    assert "--insecure-port=0" in old
    assert "--feature-gates=BoundServiceAccountTokenVolume=true" in old
    assert "--authorization-mode=AlwaysAllow" in old


def test_apiserver_current_has_no_removed_flags() -> None:
    new = flags(NEW)
    assert "--insecure-port" not in names(new)
    assert "--feature-gates" not in names(new)  # the gate is gone since 1.23: unknown there
    assert "--disable-admission-plugins" not in names(new)  # ServiceAccount admission stays on
    for needed in ("--secure-port", "--service-account-issuer", "--client-ca-file"):
        assert needed in names(new)


def test_apiserver_flags_change_at_the_removal_releases() -> None:
    assert "--insecure-port=0" in flags(KubeVersion(1, 23))
    assert "--insecure-port=0" not in flags(KubeVersion(1, 24))
    assert "--feature-gates=BoundServiceAccountTokenVolume=true" not in flags(KubeVersion(1, 21))


def test_rbac_mode_runs_node_and_rbac_authorizers() -> None:
    assert "--authorization-mode=Node,RBAC" in flags(OLD, "RBAC")
    assert "--authorization-mode=Node,RBAC" in flags(NEW, "RBAC")


def test_audit_flags() -> None:
    with_audit = apiserver_flags(
        NEW, etcd="e", port=1, pki=PKI, authorization="RBAC", audit=(Path("p"), Path("l"))
    )
    assert {"--audit-policy-file=p", "--audit-log-path=l"} <= set(with_audit)


def test_scheduler_config_1_20_is_v1beta1_with_its_own_health_port() -> None:
    cfg = scheduler_config(OLD, kubeconfig=Path("kc"), health_port=1234)
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1beta1"
    assert cfg["healthzBindAddress"] == "127.0.0.1:1234"
    assert cfg["metricsBindAddress"] == "127.0.0.1:1234"
    assert cfg["clientConnection"] == {"kubeconfig": "kc", "qps": 1000, "burst": 1000}


def test_scheduler_config_current_is_v1_without_bind_addresses() -> None:
    cfg = scheduler_config(NEW, kubeconfig=Path("kc"), health_port=1234)
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert "healthzBindAddress" not in cfg and "metricsBindAddress" not in cfg
    assert cfg["leaderElection"] == {"leaderElect": False}


@pytest.mark.parametrize(
    ("minor", "api"),
    [(20, "v1beta1"), (21, "v1beta1"), (22, "v1beta2"), (23, "v1beta3"), (24, "v1beta3"),
     (25, "v1"), (30, "v1")],
)  # fmt: skip
def test_scheduler_api_by_minor(minor: int, api: str) -> None:
    assert scheduler_api_version(KubeVersion(1, minor)) == f"kubescheduler.config.k8s.io/{api}"


def test_scheduler_flags_drop_port_after_1_22() -> None:
    old = scheduler_flags(OLD, config=Path("c"), port=1, cert_dir=Path("d"))
    new = scheduler_flags(NEW, config=Path("c"), port=1, cert_dir=Path("d"))
    assert "--port=0" in old
    assert "--port" not in names(new)
    assert {"--config=c", "--secure-port=1", "--bind-address=127.0.0.1"} <= set(new)


def _fake_binary(path: Path, output: str) -> None:
    path.write_text(f"#!/bin/sh\nprintf '{output}'\n")
    path.chmod(0o755)


def test_binaries_from_escher_k8s_bin_with_etcd_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.k8s_control_plane import BIN_ENV, binary_version, find_binaries

    mine, cache = tmp_path / "mine", tmp_path / "cache"
    mine.mkdir()
    (cache / "bin").mkdir(parents=True)
    recorded_output = (DATA / "kube-apiserver-v1.34.1.version").read_text()
    for name in ("kube-apiserver", "kube-scheduler"):
        _fake_binary(mine / name, recorded_output.replace("\n", "\\n"))
    _fake_binary(cache / "bin" / "etcd", "etcd Version: 3.5.16\\n")
    monkeypatch.setenv("ESCHER_K8S_CACHE", str(cache))
    monkeypatch.setenv(BIN_ENV, str(mine))
    found = find_binaries()
    assert found["kube-apiserver"] == mine / "kube-apiserver"
    assert found["etcd"] == cache / "bin" / "etcd"  # $ESCHER_K8S_BIN has none
    assert binary_version(found["kube-scheduler"]) == NEW
    assert binary_version(found["etcd"]).minor == 5


def test_missing_binaries_say_how_to_get_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.k8s_control_plane import BIN_ENV, BinariesMissing, find_binaries

    monkeypatch.setenv("ESCHER_K8S_CACHE", str(tmp_path))
    monkeypatch.setenv(BIN_ENV, str(tmp_path / "nothing"))
    with pytest.raises(BinariesMissing, match="ESCHER_K8S_BIN") as info:
        find_binaries()
    assert "provision-k8s.sh" in str(info.value)
