"""The Kubernetes backend's tests; the `k8s_cluster` fixture is in tests/support/k8s_fixture.py.

Every test here that uses it is marked ``k8s`` and is skipped, with the reason, when the
binaries of scripts/provision-k8s.sh or the Kubernetes client are missing.

The manifests of the deploy section of docs/kubernetes.md (Namespace, ServiceAccount, RBAC)
are applied as written. With ``ESCHER_K8S_AUTH=rbac`` the plane runs ``Node,RBAC``
authorization and escher (the backends the tests build, and their task pods) runs as that
ServiceAccount, in its namespace; by default it runs ``AlwaysAllow`` as the admin in
namespace ``default``. ``ESCHER_K8S_BIN`` picks other Kubernetes binaries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.k8s_control_plane import binaries_available
from tests.support.k8s_fixture import (
    AUTH_ENV,
    IMAGE,
    POOL_LABEL,
    POOLS,
    REPO,
    SKIP_REASON,
    K8sCluster,
    rbac_mode,
)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    here = Path(__file__).parent
    have = binaries_available()
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        have_client = False
    else:
        have_client = True
    for item in items:
        if Path(str(item.fspath)).parent != here:
            continue
        if "k8s_cluster" not in getattr(item, "fixturenames", ()):
            continue  # pure unit tests of the backend's pieces run everywhere
        item.add_marker(pytest.mark.k8s)
        if not have:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))
        elif not have_client:
            item.add_marker(pytest.mark.skip(reason="needs pip install 'escher-sched[k8s]'"))


__all__ = [
    "AUTH_ENV",
    "IMAGE",
    "POOLS",
    "POOL_LABEL",
    "REPO",
    "SKIP_REASON",
    "K8sCluster",
    "rbac_mode",
]
