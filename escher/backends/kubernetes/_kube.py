"""A thin JSON layer over the official client: connect, and the few calls escher makes.

Every call goes through the generated `CoreV1Api` methods with ``_preload_content=False``
and parses the body itself: plain dicts are several times cheaper than the client's models,
and reading the whole body returns the connection to the pool. The calls made once per pod
(create, delete) skip the generated layer too: they send JSON they encode themselves through
the client's own connection pool, authentication and error type (its argument validation
and body sanitising cost about a third of a create's client CPU).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlencode

from escher.core.errors import BackendUnavailableError, ConfigError

try:
    import urllib3
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client.exceptions import ApiException
except ImportError as exc:  # pragma: no cover - exercised through the registry
    raise ImportError(
        "the Kubernetes backend needs the official client: pip install 'escher-sched[k8s]'",
        name=exc.name,
    ) from exc

__all__ = ["ApiException", "KubeApi", "connect"]

JSON = "application/json"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"


def _watch(
    list_call: Any,
    args: tuple[Any, ...],
    label_selector: str | None,
    resource_version: str,
    timeout_seconds: int,
    on_response: Any,
) -> Iterator[dict[str, Any]]:
    """Open a watch through a list call; hand the raw response to `on_response` (to close it)."""
    response = list_call(
        *args,
        label_selector=label_selector,
        resource_version=resource_version,
        timeout_seconds=timeout_seconds,
        allow_watch_bookmarks=True,
        watch=True,
        _preload_content=False,
        _request_timeout=(10, timeout_seconds + 10),
    )
    if on_response is not None:
        on_response(response)
    return _events(response)


def _events(response: Any) -> Iterator[dict[str, Any]]:
    """The JSON lines of a watch response, one event each, until the server ends it."""
    try:
        rest = b""  # the start of a line the next chunk ends
        for chunk in response.stream(64 * 1024, decode_content=False):
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                if line.strip():
                    yield json.loads(line)
    finally:
        response.release_conn()


def connect(
    kubeconfig: str | None,
    context: str | None,
    in_cluster: bool,
    pool_size: int = 32,
) -> Any:
    """A `kubernetes.client.ApiClient` from in-cluster config or a kubeconfig (and context).

    Raises:
        ConfigError: both in_cluster and a kubeconfig/context were given.
        BackendUnavailableError: the configuration cannot be loaded.
    """
    configuration = k8s_client.Configuration()
    loader: Any = k8s_config
    if in_cluster and (kubeconfig or context):
        raise ConfigError("use either in_cluster=True or a kubeconfig/context, not both.")
    try:
        if in_cluster:
            loader.load_incluster_config(client_configuration=configuration)
        else:
            # $KUBECONFIG is read here: the client reads it once, when it is imported.
            loader.load_kube_config(
                config_file=kubeconfig or os.environ.get("KUBECONFIG") or None,
                context=context,
                client_configuration=configuration,
            )
    except k8s_config.ConfigException as exc:
        where = (
            "in-cluster service account"
            if in_cluster
            else (kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config")
        )
        raise BackendUnavailableError(
            f"cannot load the Kubernetes configuration from {where}: {exc}. Pass kubeconfig=, "
            "context= or in_cluster=True."
        ) from None
    except (OSError, TypeError, ValueError) as exc:
        raise BackendUnavailableError(
            f"cannot read the kubeconfig {kubeconfig or '~/.kube/config'}: {exc}."
        ) from None
    configuration.connection_pool_maxsize = pool_size
    return k8s_client.ApiClient(configuration)


def _node_path(name: str) -> str:
    return f"/api/v1/nodes/{quote(name, safe='')}"


def _pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods"


def _query(**params: str | None) -> dict[str, str]:
    """Query parameters, without those not given."""
    return {key: value for key, value in params.items() if value is not None}


def _body(response: Any) -> Any:
    try:
        data = response.data
    finally:
        response.release_conn()
    return json.loads(data) if data else None


class KubeApi:
    """The calls escher makes, with JSON dicts in and out.

    Raises `ApiException` (status set) on HTTP errors; callers map them to escher errors.
    """

    def __init__(self, api_client: Any, request_timeout: float = 30.0) -> None:
        self.api_client = api_client
        self.core: Any = k8s_client.CoreV1Api(api_client)
        self.coordination: Any = k8s_client.CoordinationV1Api(api_client)
        self.timeout = request_timeout
        self._timeout = urllib3.Timeout(total=request_timeout)

    def _send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, Any] | None = None,
        content_type: str = JSON,
    ) -> Any:
        """One request without the generated layer: `body` encoded here, the parsed JSON
        answer; a non-2xx answer raises the client's own `ApiException` (status and
        body set), a TLS failure one with status 0, as the generated calls do."""
        client = self.api_client
        headers = {**client.default_headers, "Accept": JSON, "Content-Type": content_type}
        auth = client.configuration.auth_settings().get("BearerToken")  # refreshes a token
        if auth and auth.get("value"):
            headers[auth["key"]] = auth["value"]
        url = client.configuration.host + path
        if query:
            url += "?" + urlencode(query)
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        try:
            raw = client.rest_client.pool_manager.request(
                method, url, body=data, headers=headers, timeout=self._timeout,
                preload_content=False,
            )  # fmt: skip
        except urllib3.exceptions.SSLError as exc:
            raise ApiException(status=0, reason=f"{type(exc).__name__}\n{exc}") from None
        try:
            payload = raw.data
        finally:
            raw.release_conn()
        if not 200 <= raw.status <= 299:
            raise ApiException(http_resp=raw)  # status, reason, body and headers from it
        return json.loads(payload) if payload else None

    def _call(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        """One generated-client call with escher's options; the parsed JSON body."""
        return _body(method(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs))

    def _items(self, method: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        """A list call's items (see `_call`)."""
        return list(self._call(method, *args, **kwargs).get("items") or [])

    def _delete(self, gone: tuple[int, ...], method: Any, *args: Any, **kwargs: Any) -> bool:
        """A delete call (see `_call`); False when the server answers one of `gone`."""
        try:
            self._call(method, *args, **kwargs)
        except ApiException as exc:
            if exc.status in gone:
                return False
            raise
        return True

    # --- nodes -----------------------------------------------------------------------
    def get_node(self, name: str) -> dict[str, Any]:
        return self._send("GET", _node_path(name))  # type: ignore[no-any-return]

    def list_nodes(
        self, label_selector: str | None = None, *, cached: bool = False
    ) -> list[dict[str, Any]]:
        """The nodes; ``cached``: from the API server's watch cache (``resourceVersion=0``,
        no etcd read; at most a moment old), for periodic checks."""
        if cached:
            return self.list_nodes_cached(label_selector)[0]
        found = self._send("GET", "/api/v1/nodes", query=_query(labelSelector=label_selector))
        return list(found.get("items") or [])

    def list_nodes_cached(self, label_selector: str | None) -> tuple[list[dict[str, Any]], str]:
        """The nodes from the watch cache (``resourceVersion=0``) and the list's version."""
        query = _query(labelSelector=label_selector, resourceVersion="0")
        found = self._send("GET", "/api/v1/nodes", query=query)
        return list(found.get("items") or []), str(found["metadata"].get("resourceVersion", ""))

    def watch_nodes(
        self,
        label_selector: str | None,
        resource_version: str,
        timeout_seconds: int,
        on_response: Any = None,
    ) -> Iterator[dict[str, Any]]:
        """Stream node watch events (dicts with 'type' and 'object') until the server ends it."""
        return _watch(self.core.list_node, (), label_selector, resource_version,
                      timeout_seconds, on_response)  # fmt: skip

    def json_patch_node_status(self, name: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        path = _node_path(name) + "/status"
        return self._send("PATCH", path, ops, content_type=JSON_PATCH)  # type: ignore[no-any-return]

    def merge_patch_node_status(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        path = _node_path(name) + "/status"
        return self._send("PATCH", path, body, content_type=MERGE_PATCH)  # type: ignore[no-any-return]

    def merge_patch_node(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call(  # type: ignore[no-any-return]
            self.core.patch_node, name, body, _content_type=MERGE_PATCH
        )

    # --- pods ------------------------------------------------------------------------
    def list_bound_pods(self) -> list[dict[str, Any]]:
        """Every non-terminated pod bound to a node, in all namespaces."""
        query = {"fieldSelector": "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"}
        return list(self._send("GET", "/api/v1/pods", query=query).get("items") or [])

    def list_pods(
        self, namespace: str, label_selector: str | None = None, field_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        query = _query(labelSelector=label_selector, fieldSelector=field_selector)
        found = self._send("GET", _pods_path(namespace), query=query)
        return list(found.get("items") or []), str(found["metadata"].get("resourceVersion", ""))

    def create_pod(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._send("POST", _pods_path(namespace), body)  # type: ignore[no-any-return]

    def json_patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        self._call(self.core.patch_namespaced_pod, name, namespace, ops, _content_type=JSON_PATCH)

    def merge_patch_pod(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        self._call(self.core.patch_namespaced_pod, name, namespace, body, _content_type=MERGE_PATCH)

    def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """Delete at once (grace period 0). False if it was already gone."""
        if not name:  # an empty name would address the collection: every pod of the namespace
            raise ValueError("delete_pod needs a pod name")
        options: dict[str, Any] = {"gracePeriodSeconds": 0}
        if uid:
            options["preconditions"] = {"uid": uid}
        path = f"{_pods_path(namespace)}/{quote(name, safe='')}"
        try:
            self._send("DELETE", path, options, query={"gracePeriodSeconds": 0})
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise
        return True

    def watch_pods(
        self,
        namespace: str,
        label_selector: str,
        resource_version: str,
        timeout_seconds: int,
        on_response: Any = None,
    ) -> Iterator[dict[str, Any]]:
        """Stream watch events (dicts with 'type' and 'object') until the server ends it."""
        return _watch(self.core.list_namespaced_pod, (namespace,), label_selector,
                      resource_version, timeout_seconds, on_response)  # fmt: skip

    def list_events(self, namespace: str, field_selector: str) -> list[dict[str, Any]]:
        return self._items(
            self.core.list_namespaced_event, namespace, field_selector=field_selector
        )

    # --- leases (coordination.k8s.io) ----------------------------------------------------
    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call(  # type: ignore[no-any-return]
            self.coordination.create_namespaced_lease, namespace, body
        )

    def get_lease(self, namespace: str, name: str) -> dict[str, Any]:
        return self._call(  # type: ignore[no-any-return]
            self.coordination.read_namespaced_lease, name, namespace
        )

    def list_leases(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        return self._items(
            self.coordination.list_namespaced_lease, namespace, label_selector=label_selector
        )

    def patch_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call(  # type: ignore[no-any-return]
            self.coordination.patch_namespaced_lease,
            name,
            namespace,
            body,
            _content_type=MERGE_PATCH,
        )

    def delete_lease(self, namespace: str, name: str) -> bool:
        """Delete a lease; False if it was already gone."""
        return self._delete((404,), self.coordination.delete_namespaced_lease, name, namespace)

    # --- raw reads ------------------------------------------------------------------------
    def get_path(self, path: str) -> tuple[int, Any]:
        """GET a path of the server (e.g. ``/openapi/v3``): (HTTP status, parsed JSON or None)."""
        client = self.api_client
        try:
            if hasattr(client, "param_serialize"):  # clients generated since v31
                method, url, headers, body, post = client.param_serialize(
                    "GET", path, header_params={"Accept": "application/json"},
                    auth_settings=["BearerToken"],
                )  # fmt: skip
                response = client.call_api(
                    method, url, headers, body, post, _request_timeout=self.timeout
                )
                status, data = int(response.status), response.read()
            else:  # pragma: no cover - clients before v31
                response = client.call_api(
                    path, "GET", header_params={"Accept": "application/json"},
                    auth_settings=["BearerToken"], _preload_content=False,
                    _return_http_data_only=True, _request_timeout=self.timeout,
                )  # fmt: skip
                status, data = int(response.status), response.data
                response.release_conn()
        except ApiException as exc:
            return int(exc.status or 0), None
        if status != 200 or not data:
            return status, None
        try:
            return status, json.loads(data)
        except ValueError:  # not JSON
            return status, None

    def close(self) -> None:
        self.api_client.close()
