"""Read a live cluster's nodes and pods for the manifest check (read only).

Lists the nodes and the unfinished pods of every namespace with the official client (the
``k8s`` extra), page by page as kubectl does, and hands them to `cluster_from_objects` as
``kubectl get nodes,pods -A -o json`` would. Each page is fetched with
``_preload_content=False`` and its body read whole (plain dicts are several times cheaper than
the client's models, and an unread body never gives its connection back to the pool).
The only calls are ``list nodes``, ``list pods`` in all namespaces, and ``list namespaces``
(their labels answer ``namespaceSelector``; skipped when the user may not list them).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from escher.core.errors import BackendUnavailableError
from escher.core.formats import parse_bytes

if TYPE_CHECKING:
    from escher.manifests import KubeCluster

__all__ = ["INSTALL_HINT", "list_cluster_objects", "read_cluster"]

#: What a missing client error says.
INSTALL_HINT = "reading a live cluster needs the Kubernetes client: pip install 'escher-sched[k8s]'"
#: Objects per list call (kubectl's default chunk size).
PAGE_SIZE = 500
#: Seconds one list call may take.
REQUEST_TIMEOUT = 60.0
#: Pods that finished hold nothing on their node: the server leaves them out.
UNFINISHED_PODS = "status.phase!=Succeeded,status.phase!=Failed"
#: A continue token that expired mid-listing (410 Gone) restarts the listing this often.
RESTARTS = 2


def read_cluster(
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    *,
    page_size: int = PAGE_SIZE,
    request_timeout: float = REQUEST_TIMEOUT,
) -> KubeCluster:
    """Read a live cluster's nodes and pods into a `KubeCluster`, as `load_cluster` reads a file.

    Args:
        kubeconfig: Path of a kubeconfig (default: ``$KUBECONFIG``, then ``~/.kube/config``).
        context: Context of the kubeconfig to use (default: its current context).
        page_size: Objects per list call (kubectl's default).
        request_timeout: Seconds each list call may take.

    Returns:
        The cluster: nodes with their allocatable, labels, taints and cordons, and the pods that
        are bound and not finished.

    Raises:
        BackendUnavailableError: the client is not installed, the kubeconfig or context cannot
            be used, the API server cannot be reached, or it refuses to list nodes or pods.
    """
    from escher.manifests import cluster_from_objects

    objects = list_cluster_objects(
        kubeconfig, context, page_size=page_size, request_timeout=request_timeout
    )
    return cluster_from_objects(objects)


def list_cluster_objects(
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    *,
    page_size: int = PAGE_SIZE,
    request_timeout: float = REQUEST_TIMEOUT,
) -> list[dict[str, Any]]:
    """The nodes, the namespaces (when the user may list them) and the unfinished pods of
    every namespace, each with its ``kind`` set, as ``kubectl get -o json`` lists them.

    Args:
        kubeconfig: Path of a kubeconfig (default: ``$KUBECONFIG``, then ``~/.kube/config``).
        context: Context of the kubeconfig to use (default: its current context).
        page_size: Objects per list call.
        request_timeout: Seconds each list call may take.

    Raises:
        BackendUnavailableError: as `read_cluster`.
    """
    client, api_client = _connect(kubeconfig, context)
    core = client.CoreV1Api(api_client)
    where = api_client.configuration.host
    try:
        nodes = _list_all(core.list_node, "Node", where, page_size, request_timeout)
        namespaces = _namespaces(core, where, page_size, request_timeout)
        pods = _list_all(
            core.list_pod_for_all_namespaces,
            "Pod",
            where,
            page_size,
            request_timeout,
            field_selector=UNFINISHED_PODS,
        )
    finally:
        api_client.close()
    return nodes + namespaces + pods


def _namespaces(
    core: Any, where: str, page_size: int, request_timeout: float
) -> list[dict[str, Any]]:
    """The namespaces (their labels answer ``namespaceSelector``); none when the user may not
    list them (only nodes and pods are needed)."""
    try:
        return _list_all(core.list_namespace, "Namespace", where, page_size, request_timeout)
    except _Refused:
        return []


def _connect(kubeconfig: str | os.PathLike[str] | None, context: str | None) -> tuple[Any, Any]:
    """The client module and an `ApiClient` for the kubeconfig's context."""
    try:
        from kubernetes import client, config
    except ImportError:
        raise BackendUnavailableError(INSTALL_HINT + ".") from None
    path = os.fspath(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG") or None
    where = path or "~/.kube/config"
    configuration = client.Configuration()
    loader: Any = config  # the client's functions are untyped
    try:
        loader.load_kube_config(
            config_file=path, context=context, client_configuration=configuration
        )
    except config.ConfigException as exc:
        raise BackendUnavailableError(
            f"cannot use the kubeconfig {where}{_context_words(context)}: {str(exc).rstrip('.')}."
            f"{_context_hint(path, context)} Pass --kubeconfig PATH and --context NAME."
        ) from None
    except (OSError, TypeError, ValueError) as exc:
        raise BackendUnavailableError(f"cannot read the kubeconfig {where}: {exc}.") from None
    return client, client.ApiClient(configuration)


def _context_words(context: str | None) -> str:
    return f" (context {context!r})" if context else ""


def _context_hint(path: str | None, context: str | None) -> str:
    """The contexts the kubeconfig has, when the one asked for is not among them."""
    if not context:
        return ""
    from kubernetes import config

    loader: Any = config
    try:
        contexts, _ = loader.list_kube_config_contexts(config_file=path)
    except Exception:  # the file itself is the problem: the main message says so
        return ""
    names = sorted(str(c.get("name")) for c in contexts or [])
    if context in names:
        return ""
    return f" Its contexts: {', '.join(names) or 'none'}."


def _list_all(
    method: Callable[..., Any],
    kind: str,
    where: str,
    page_size: int,
    request_timeout: float,
    **selectors: Any,
) -> list[dict[str, Any]]:
    """Every object a list call returns, page after page; a listing whose continue token
    expires (410 Gone: the cluster changed for longer than the token lives) starts again
    (kubectl fails instead)."""
    for _ in range(RESTARTS + 1):
        items: list[dict[str, Any]] = []
        token: str | None = None
        try:
            while True:
                page = _page(method, kind, where, page_size, request_timeout, token, selectors)
                for item in page.get("items") or ():
                    item["kind"] = kind  # a list's items carry no kind; kubectl adds it
                    item["apiVersion"] = "v1"
                    items.append(item)
                token = (page.get("metadata") or {}).get("continue") or None
                if token is None:
                    return items
        except _Expired:
            continue
    raise BackendUnavailableError(
        f"the API server at {where} kept expiring the listing of {kind.lower()}s "
        "(the cluster changes faster than it can be read); try again."
    )


class _Expired(Exception):
    """A continue token expired: the listing starts again."""


class _Refused(BackendUnavailableError):
    """The API server refused the listing (401 or 403)."""


def _page(
    method: Callable[..., Any],
    kind: str,
    where: str,
    page_size: int,
    request_timeout: float,
    token: str | None,
    selectors: dict[str, Any],
) -> dict[str, Any]:
    """One page of a list call, its body read whole (which frees the connection)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    what = f"list {kind.lower()}s"
    try:
        response = method(
            limit=page_size,
            _continue=token,
            _preload_content=False,
            _request_timeout=request_timeout,
            **selectors,
        )
        try:
            raw = response.data
        finally:
            response.release_conn()
    except ApiException as exc:
        if exc.status == 410 and token:
            raise _Expired from None
        refused = _Refused if exc.status in (401, 403) else BackendUnavailableError
        raise refused(_refusal(where, what, exc)) from None
    except HTTPError as exc:
        raise BackendUnavailableError(
            f"cannot reach the API server at {where} to {what}: {_reason(exc)}. "
            "Check --kubeconfig/--context and that the cluster is up."
        ) from None
    page = parse_bytes(raw, f"{where} ({what})")
    if not isinstance(page, dict):
        raise BackendUnavailableError(f"the API server at {where} answered {what} with no list.")
    return page


def _refusal(where: str, what: str, exc: Any) -> str:
    status = f"{exc.status} {exc.reason}".strip()
    if exc.status in (401, 403):
        return (
            f"the API server at {where} refused to {what} ({status}): the kubeconfig's user "
            "needs permission to list nodes and pods in all namespaces."
        )
    return f"the API server at {where} failed to {what} ({status})."


def _reason(exc: BaseException) -> str:
    """The innermost reason of a urllib3 error (a refused connection, a timeout)."""
    reason = getattr(exc, "reason", None)
    return str(reason or exc)
