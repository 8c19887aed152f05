"""The Kubernetes backend: ephemeral resources as node extended resources, tasks as pods.

Needs the official client: ``pip install 'escher-sched[k8s]'``. See docs/kubernetes.md.
"""

from escher.backends.kubernetes._names import DEFAULT_DOMAIN
from escher.backends.kubernetes._payload import TERMINATION_MESSAGE_LIMIT, ResultTooLargeError
from escher.backends.kubernetes.backend import KubernetesBackend

__all__ = [
    "DEFAULT_DOMAIN",
    "TERMINATION_MESSAGE_LIMIT",
    "KubernetesBackend",
    "ResultTooLargeError",
]
