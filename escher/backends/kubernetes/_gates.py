"""Does this API server hold pods back with scheduling gates? Asked through its OpenAPI.

Pods may carry ``spec.schedulingGates`` since Kubernetes 1.26 (alpha, off by default), beta
and on by default in 1.27, GA in 1.30: the scheduler leaves a gated pod alone until every
gate is removed. The server says whether its `PodSpec` has the field in its OpenAPI v3
document of ``api/v1`` (served since 1.24, GA in 1.27; every server that has gates has it).
A server without ``/openapi/v3`` is older than 1.24, so it has no gates either.

A server of 1.26 with the feature gate off lists the field but drops it from new pods: the
caller checks the created pod (`pod_kept_gates`) and treats such a server as gate-less.

Reading ``/openapi/v3`` needs no RBAC grant: the default ``system:discovery`` role lets
every authenticated user read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: The OpenAPI schema name of a pod's spec.
POD_SPEC = "io.k8s.api.core.v1.PodSpec"
#: The gate escher puts on the members of a gang until all of them exist.
GATE_NAME = "escher.io/gang"
#: Environment variable of a member's pod: the annotation that releases it (value `RELEASED`).
GANG_RELEASE_ENV = "ESCHER_GANG_RELEASE"
#: Environment variable of a member's pod: seconds it waits for its release.
GANG_WAIT_ENV = "ESCHER_GANG_WAIT"
RELEASED = "go"


@dataclass(frozen=True)
class GateSupport:
    """What the server said about scheduling gates.

    Attributes:
        supported: Pods can be created gated and released later.
        reason: How that was found out, for `describe()` and the docs.
    """

    supported: bool
    reason: str


def pod_spec_has_gates(document: Mapping[str, Any]) -> bool:
    """Whether an OpenAPI document (v3 ``components.schemas`` or v2 ``definitions``)
    gives `PodSpec` a ``schedulingGates`` property."""
    schemas = (document.get("components") or {}).get("schemas") or document.get("definitions")
    spec = (schemas or {}).get(POD_SPEC) or {}
    return "schedulingGates" in (spec.get("properties") or {})


def detect_gates(get: Callable[[str], tuple[int, Any]]) -> GateSupport:
    """Ask the server (through ``get(path) -> (status, parsed JSON body)``).

    Args:
        get: Reads a path of the API server; returns the HTTP status and the JSON body
            (anything for a non-200 answer).
    """
    status, index = get("/openapi/v3")
    if status == 404:
        return GateSupport(False, "no /openapi/v3 (server older than 1.24; gates came in 1.26)")
    if status != 200 or not isinstance(index, Mapping):
        return GateSupport(False, f"/openapi/v3 answered {status}; assuming no gates")
    entry = (index.get("paths") or {}).get("api/v1") or {}
    url = entry.get("serverRelativeURL") if isinstance(entry, Mapping) else None
    if not url:
        return GateSupport(False, "/openapi/v3 lists no api/v1 document; assuming no gates")
    status, document = get(str(url))
    if status != 200 or not isinstance(document, Mapping):
        return GateSupport(False, f"{url} answered {status}; assuming no gates")
    if pod_spec_has_gates(document):
        return GateSupport(True, "the server's OpenAPI (api/v1) has PodSpec.schedulingGates")
    return GateSupport(False, "the server's OpenAPI (api/v1) has no PodSpec.schedulingGates")


def pod_kept_gates(pod: Mapping[str, Any]) -> bool:
    """Whether a pod the server created still carries escher's gate (1.26 drops it when the
    feature gate is off)."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, Mapping) and g.get("name") == GATE_NAME for g in gates)
