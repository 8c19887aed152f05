"""Kubernetes resource names <-> escher resource names (no Kubernetes client needed).

Shared by the Kubernetes backend and the manifest reader (`escher.manifests`), so a request
for ``nvidia.com/gpu`` is escher's ``GPU`` everywhere.
"""

from __future__ import annotations

#: The default prefix of escher's extended resources (``escher.io/<label>``).
DEFAULT_DOMAIN = "escher.io"

#: escher's physical names -> Kubernetes resource names.
TO_K8S = {"CPU": "cpu", "GPU": "nvidia.com/gpu", "memory": "memory"}

#: Kubernetes resource names -> escher's physical names.
FROM_K8S = {v: k for k, v in TO_K8S.items()}

#: Resources a Kubernetes node defines itself.
NODE_DEFINED = frozenset({"cpu", "memory", "pods", "ephemeral-storage", "nvidia.com/gpu"})


def escher_name(k8s_name: str, domain: str = DEFAULT_DOMAIN) -> str:
    """The escher resource name of Kubernetes resource `k8s_name`: cpu -> CPU,
    nvidia.com/gpu -> GPU, ``<domain>/x`` -> x; any other name as it is."""
    if k8s_name in FROM_K8S:
        return FROM_K8S[k8s_name]
    if k8s_name.startswith(domain + "/"):
        return k8s_name[len(domain) + 1 :]
    return k8s_name


__all__ = ["DEFAULT_DOMAIN", "FROM_K8S", "NODE_DEFINED", "TO_K8S", "escher_name"]
