"""What a pod requests, as kube-scheduler's resource filter counts it.

The sum over containers, at least the largest init container (init containers run one at
a time before the others), plus the pod overhead; a container that sets a limit but no
request requests its limit. Quantities use `escher.core.quantity.parse_quantity`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from escher.core.errors import InvalidCapacityError
from escher.core.kube_names import escher_name
from escher.core.quantity import parse_quantity
from escher.manifests._workloads import ManifestError


def _container_requests(container: Any, where: str) -> dict[str, float]:
    if not isinstance(container, Mapping):
        raise ManifestError(f"{where}: a container must be a mapping.")
    res = container.get("resources") or {}
    if not isinstance(res, Mapping):
        raise ManifestError(f"{where}.resources: expected a mapping.")
    out: dict[str, float] = {}
    for part in ("limits", "requests"):  # requests override limits; limits stand in for them
        values = res.get(part) or {}
        if not isinstance(values, Mapping):
            raise ManifestError(f"{where}.resources.{part}: expected a mapping.")
        for name, quantity in values.items():
            try:
                out[str(name)] = parse_quantity(quantity)
            except InvalidCapacityError as exc:
                raise ManifestError(f"{where}.resources.{part}.{name}: {exc}") from None
    return out


def pod_requests(spec: Mapping[str, Any], where: str = "spec") -> dict[str, float]:
    """Kubernetes resource name -> the quantity one pod of `spec` requests (zeros dropped).

    Raises:
        ManifestError: a malformed container or quantity, naming `where` and the field.
    """
    total: dict[str, float] = {}
    containers = spec.get("containers") or []
    inits = spec.get("initContainers") or []
    if not isinstance(containers, list) or not isinstance(inits, list):
        raise ManifestError(f"{where}: containers and initContainers must be lists.")
    for i, c in enumerate(containers):
        for name, q in _container_requests(c, f"{where}.containers[{i}]").items():
            total[name] = total.get(name, 0.0) + q
    for i, c in enumerate(inits):
        for name, q in _container_requests(c, f"{where}.initContainers[{i}]").items():
            total[name] = max(total.get(name, 0.0), q)
    overhead = spec.get("overhead") or {}
    if not isinstance(overhead, Mapping):
        raise ManifestError(f"{where}.overhead: expected a mapping.")
    for name, quantity in overhead.items():
        try:
            total[str(name)] = total.get(str(name), 0.0) + parse_quantity(quantity)
        except InvalidCapacityError as exc:
            raise ManifestError(f"{where}.overhead.{name}: {exc}") from None
    return {k: v for k, v in total.items() if v > 0}


def to_escher(requests: Mapping[str, float]) -> dict[str, float]:
    """Kubernetes resource names -> escher names (cpu -> CPU, nvidia.com/gpu -> GPU, ...)."""
    return {escher_name(k): v for k, v in requests.items()}
