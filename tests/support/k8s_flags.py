"""Which flags and config API the local control plane uses, by Kubernetes version.

Pure functions of a `KubeVersion` (parsed from a binary's ``--version`` output), so the
choice is unit-tested for every generation without running the binaries:

* kube-apiserver ``--insecure-port=0``: up to 1.23 (removed in 1.24).
* kube-scheduler ``--port=0``: up to 1.22 (a no-op in 1.23, removed in 1.24).
* Scheduler config API: v1beta1 up to 1.21, v1beta2 in 1.22, v1beta3 in 1.23-1.24, v1 from
  1.25 (v1beta1 is gone since 1.23, v1beta3 since 1.29).
* ``healthzBindAddress``/``metricsBindAddress``: set (to a port of its own) up to 1.21; not
  set later (v1 rejects them).
* ``--feature-gates=BoundServiceAccountTokenVolume=true``: 1.20 only (beta and on by default
  in 1.21, GA in 1.22, gone since).

Health and metrics are always read on the scheduler's secure port.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "KubeVersion",
    "apiserver_flags",
    "parse_version",
    "scheduler_config",
    "scheduler_flags",
]

_VERSION = re.compile(r"\bv?(\d+)\.(\d+)\.(\d+)(\S*)")


@dataclass(frozen=True, order=True)
class KubeVersion:
    """A Kubernetes component's version, e.g. ``Kubernetes v1.20.2`` -> (1, 20, 2)."""

    major: int
    minor: int
    patch: int = 0
    text: str = ""

    def at_least(self, major: int, minor: int) -> bool:
        return (self.major, self.minor) >= (major, minor)

    def __str__(self) -> str:
        return self.text or f"v{self.major}.{self.minor}.{self.patch}"


def parse_version(output: str) -> KubeVersion:
    """The version in a ``--version`` output (``Kubernetes v1.34.1``, ``etcd Version: 3.5.16``).

    Raises:
        ValueError: no ``X.Y.Z`` in the output.
    """
    match = _VERSION.search(output)
    if match is None:
        raise ValueError(f"no version in {output.strip()[:200]!r}")
    major, minor, patch, suffix = match.groups()
    return KubeVersion(int(major), int(minor), int(patch), f"v{major}.{minor}.{patch}{suffix}")


def scheduler_api_version(version: KubeVersion) -> str:
    """The newest KubeSchedulerConfiguration API this scheduler reads."""
    if version.at_least(1, 25):
        return "kubescheduler.config.k8s.io/v1"
    if version.at_least(1, 23):
        return "kubescheduler.config.k8s.io/v1beta3"
    if version.at_least(1, 22):
        return "kubescheduler.config.k8s.io/v1beta2"
    return "kubescheduler.config.k8s.io/v1beta1"


def apiserver_flags(
    version: KubeVersion,
    *,
    etcd: str,
    port: int,
    pki: Path,
    authorization: str,
    audit: tuple[Path, Path] | None = None,
) -> list[str]:
    """kube-apiserver's command-line flags (without the binary).

    Args:
        version: The apiserver's version.
        etcd: etcd's client URL.
        port: The secure port.
        pki: Directory with ``apiserver.crt/key``, ``client-ca.crt``, ``tokens.csv``,
            ``sa.key/pub``.
        authorization: ``"AlwaysAllow"`` or ``"RBAC"`` (which runs ``Node,RBAC``).
        audit: ``(policy file, log file)`` to write an audit log.
    """
    flags = [
        f"--etcd-servers={etcd}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={pki}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'client-ca.crt'}",
        f"--token-auth-file={pki / 'tokens.csv'}",
        "--authorization-mode=" + ("Node,RBAC" if authorization == "RBAC" else "AlwaysAllow"),
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--service-cluster-ip-range=10.0.0.0/24",
        # The default reconciler tries to publish 127.0.0.1 as the endpoint of
        # service/kubernetes, which validation rejects (loopback) -> log spam.
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        "--max-requests-inflight=1000",
        "--max-mutating-requests-inflight=500",
        "--profiling=false",
    ]
    if not version.at_least(1, 24):
        flags.append("--insecure-port=0")
    if not version.at_least(1, 21):
        # Pod tokens as projected volumes (TokenRequest), so the ServiceAccount admission
        # plugin needs no token Secret (no controller-manager creates them here).
        flags.append("--feature-gates=BoundServiceAccountTokenVolume=true")
    if audit is not None:
        flags += [f"--audit-policy-file={audit[0]}", f"--audit-log-path={audit[1]}"]
    return flags


def scheduler_config(
    version: KubeVersion, *, kubeconfig: Path, health_port: int, qps: int = 1000
) -> dict[str, Any]:
    """The KubeSchedulerConfiguration (as a dict; JSON is valid YAML)."""
    cfg: dict[str, Any] = {
        "apiVersion": scheduler_api_version(version),
        "kind": "KubeSchedulerConfiguration",
        # In 1.20 --kube-api-qps/--kube-api-burst are ignored when --config is used.
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": qps, "burst": qps},
        "leaderElection": {"leaderElect": False},
        # Retry unschedulable pods quickly once something changes.
        "podInitialBackoffSeconds": 1,
        "podMaxBackoffSeconds": 2,
    }
    if not version.at_least(1, 22):
        # With --config, 1.20 ignores --port=0 and binds 0.0.0.0:10251 for healthz and
        # metrics, so a second control plane on the machine fails; give each its own.
        cfg["healthzBindAddress"] = f"127.0.0.1:{health_port}"
        cfg["metricsBindAddress"] = f"127.0.0.1:{health_port}"
    return cfg


def scheduler_flags(version: KubeVersion, *, config: Path, port: int, cert_dir: Path) -> list[str]:
    """kube-scheduler's command-line flags (without the binary)."""
    flags = [
        f"--config={config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
    ]
    if not version.at_least(1, 23):
        flags.append("--port=0")  # no insecure serving (1.20's default would be :10251)
    return flags
