"""Names and quantities: escher labels <-> Kubernetes extended resources and annotations."""

from __future__ import annotations

import re
from dataclasses import dataclass

from escher.core.errors import ConfigError, InvalidCapacityError, InvalidResourceNameError
from escher.core.kube_names import DEFAULT_DOMAIN as DEFAULT_DOMAIN
from escher.core.kube_names import FROM_K8S as _FROM_K8S
from escher.core.kube_names import NODE_DEFINED as _NODE_DEFINED
from escher.core.kube_names import TO_K8S as _TO_K8S

#: Label every escher pod carries (the standard "managed-by" label).
MANAGED_BY_KEY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "escher"


_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_RESERVED_DOMAINS = ("kubernetes.io", "k8s.io")


def validate_domain(domain: object) -> str:
    """Return `domain` if escher may create extended resources under it.

    Raises:
        ConfigError: not a lower-case DNS subdomain of at most 243 characters, or under
            kubernetes.io / k8s.io (reserved for Kubernetes itself).
    """
    if not isinstance(domain, str) or len(domain) > 243 or not _SUBDOMAIN_RE.match(domain):
        raise ConfigError(
            f"domain {domain!r} is not a lower-case DNS subdomain (e.g. 'escher.io' or "
            "'sched.example.com'); escher names resources '<domain>/<label>'."
        )
    for reserved in _RESERVED_DOMAINS:
        if domain == reserved or domain.endswith("." + reserved):
            raise ConfigError(
                f"domain {domain!r} is under {reserved}, which Kubernetes reserves; "
                "use your own domain (default 'escher.io')."
            )
    return domain


@dataclass(frozen=True)
class Names:
    """How one backend spells its ephemeral resources in Kubernetes.

    Attributes:
        domain: The prefix of escher's extended resources (``<domain>/<label>``).
    """

    domain: str = DEFAULT_DOMAIN

    @property
    def annotation_prefix(self) -> str:
        """Prefix of the node annotations that mark resources escher created."""
        return f"ephemeral.{self.domain}/"

    @property
    def session_label(self) -> str:
        """Pod label naming the backend session that created the pod."""
        return f"{self.domain}/session"

    def resource(self, label: str) -> str:
        """The extended-resource name of ephemeral `label`."""
        return f"{self.domain}/{label}"

    def annotation(self, label: str) -> str:
        """The node annotation that marks `label` as created by escher."""
        return self.annotation_prefix + label

    def label_of_annotation(self, key: str) -> str | None:
        """The label an escher annotation key marks, else None."""
        prefix = self.annotation_prefix
        return key[len(prefix) :] if key.startswith(prefix) else None

    def is_ephemeral(self, k8s_name: str) -> bool:
        """True for a Kubernetes resource name under escher's domain."""
        return k8s_name.startswith(self.domain + "/")

    def to_k8s(self, name: str) -> str:
        """The Kubernetes resource name for an escher resource name in a request.

        CPU, GPU and memory map to cpu, nvidia.com/gpu and memory; names with a '/' are
        passed through (other vendors' extended resources); any other name is an ephemeral
        label under the domain.

        Raises:
            InvalidResourceNameError: a name under kubernetes.io or k8s.io.
        """
        if name in _TO_K8S:
            return _TO_K8S[name]
        if name in _NODE_DEFINED:
            return name
        if "/" in name:
            prefix = name.split("/", 1)[0]
            if any(prefix == r or prefix.endswith("." + r) for r in _RESERVED_DOMAINS):
                raise InvalidResourceNameError(
                    f"{name!r} is under a domain Kubernetes reserves; escher does not request "
                    "or create resources there."
                )
            return name
        return self.resource(name)

    def from_k8s(self, k8s_name: str) -> str:
        """The escher name of a Kubernetes resource name (the inverse of `to_k8s`)."""
        if k8s_name in _FROM_K8S:
            return _FROM_K8S[k8s_name]
        if self.is_ephemeral(k8s_name):
            return k8s_name[len(self.domain) + 1 :]
        return k8s_name

    def is_physical_request(self, name: str) -> bool:
        """True if request name `name` is node-defined (not one of escher's labels)."""
        return not self.is_ephemeral(self.to_k8s(name))


def format_quantity(k8s_name: str, value: float) -> str:
    """A quantity string for `value` of resource `k8s_name` (cpu in milli-units if needed)."""
    if value.is_integer():
        return str(int(value))
    if k8s_name == "cpu":
        return f"{round(value * 1000)}m"
    raise InvalidCapacityError(f"{k8s_name} takes whole quantities in Kubernetes; got {value}.")
