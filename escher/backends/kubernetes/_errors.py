"""Kubernetes API failures as escher errors (one wording for every module of the backend)."""

from __future__ import annotations

import json

from escher.backends.kubernetes._kube import ApiException
from escher.core.errors import BackendError, BackendUnavailableError


def message(exc: BaseException) -> str:
    """The API server's own message of a failed call (its Status body), else the error text."""
    body = getattr(exc, "body", None)
    if body:
        try:
            return str(json.loads(body).get("message") or body)
        except (ValueError, AttributeError):
            return str(body)[:500]
    return str(getattr(exc, "reason", "") or exc)


def api_error(exc: BaseException, doing: str) -> BackendError:
    """A `BackendError` for an HTTP error while `doing` something (RBAC hint on 401/403)."""
    status = getattr(exc, "status", None)
    if status in (401, 403):
        return BackendError(
            f"{doing}: the API server refused ({status}): {message(exc)}. Grant escher "
            "the RBAC rules in docs/kubernetes.md."
        )
    return BackendError(f"{doing} failed ({status}): {message(exc)}")


def unreachable(exc: BaseException) -> BackendUnavailableError:
    """A `BackendUnavailableError` for a call that never got an HTTP answer."""
    return BackendUnavailableError(f"the Kubernetes API server is unreachable: {exc}")


def as_escher(exc: BaseException, doing: str) -> BackendError:
    """`api_error` for an HTTP error, `unreachable` for anything else."""
    if isinstance(exc, ApiException):
        return api_error(exc, doing)
    return unreachable(exc)
