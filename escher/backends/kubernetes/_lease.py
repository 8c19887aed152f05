"""The session lease: proof that a backend session is alive, for `escher gc`.

A session creates a `coordination.k8s.io/v1` Lease named ``escher-session-<id>`` in its
namespace before it writes anything, renews it in the background (every `renew_seconds`),
and deletes it on `close`. Everything the session creates names it: pods by a label, node
resources by the value ``<namespace>/<id>`` of their annotation. A session whose lease is
gone or was not renewed for `lease_seconds` is dead, and what it left is garbage.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from escher.backends.kubernetes._errors import as_escher
from escher.backends.kubernetes._kube import ApiException, KubeApi
from escher.backends.kubernetes._names import MANAGED_BY_KEY, MANAGED_BY_VALUE, Names
from escher.backends.kubernetes._retry import patiently

log = logging.getLogger("escher.kubernetes")

LEASE_PREFIX = "escher-session-"


def lease_name(session: str) -> str:
    """The Lease object of a session."""
    return LEASE_PREFIX + session


def owner_mark(namespace: str, session: str) -> str:
    """The annotation value that names a session (and where its lease lives)."""
    return f"{namespace}/{session}"


def parse_owner(mark: str, default_namespace: str) -> tuple[str, str]:
    """(namespace, session) of an annotation value (a bare id: `default_namespace`)."""
    namespace, _, session = mark.rpartition("/")
    return namespace or default_namespace, session


def _micro_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: str) -> datetime | None:
    for pattern in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(text, pattern).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def lease_alive(lease: Mapping[str, Any], now: datetime | None = None) -> bool:
    """True while a lease's last renewal is younger than its duration."""
    spec = lease.get("spec") or {}
    renewed = _parse_time(str(spec.get("renewTime") or spec.get("acquireTime") or ""))
    duration = spec.get("leaseDurationSeconds")
    if renewed is None or not isinstance(duration, int):
        return False
    age = ((now or datetime.now(UTC)) - renewed).total_seconds()
    return age <= duration


class SessionLease:
    """The lease of one session: created on first need, renewed in the background.

    Args:
        api: The JSON API wrapper.
        names: Label spelling (the session label).
        namespace: Where the lease lives (the backend's namespace).
        session: The session id.
        lease_seconds: How long a renewal keeps the session alive.
        renew_seconds: How often it is renewed.
    """

    def __init__(
        self,
        api: KubeApi,
        names: Names,
        namespace: str,
        session: str,
        *,
        lease_seconds: int = 60,
        renew_seconds: float = 10.0,
    ) -> None:
        self._api = api
        self._names = names
        self.namespace = namespace
        self.session = session
        self.name = lease_name(session)
        self._lease_seconds = lease_seconds
        self._renew_seconds = renew_seconds
        #: Seconds the first creation retries while the API server gives no answer.
        self.patience = 60.0
        self._lock = threading.Lock()
        self._held = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def ensure(self) -> None:
        """Create the lease (once) and start renewing it; call before writing anything.

        Raises:
            BackendError: the API refused the lease (e.g. no RBAC for leases).
        """
        if self._held:
            return
        with self._lock:
            if self._held or self._stop.is_set():
                return
            now = _micro_time(datetime.now(UTC))
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self.name,
                    "labels": {
                        MANAGED_BY_KEY: MANAGED_BY_VALUE,
                        self._names.session_label: self.session,
                    },
                },
                "spec": {
                    "holderIdentity": self.session,
                    "leaseDurationSeconds": self._lease_seconds,
                    "acquireTime": now,
                    "renewTime": now,
                },
            }
            try:
                patiently(
                    lambda: self._api.create_lease(self.namespace, body),
                    self.patience,
                    f"creating lease {self.name}",
                )
            except ApiException as exc:
                if exc.status != 409:  # 409: created by an earlier try that timed out
                    raise as_escher(exc, f"creating the session lease {self.name}") from None
            except Exception as exc:
                raise as_escher(exc, f"creating the session lease {self.name}") from None
            self._held = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._renew_loop, name="escher-k8s-lease", daemon=True
                )
                self._thread.start()

    def renew(self) -> None:
        """Renew now (the background thread calls it); a lease found gone is created again."""
        body = {"spec": {"renewTime": _micro_time(datetime.now(UTC))}}
        try:
            self._api.patch_lease(self.namespace, self.name, body)
        except ApiException as exc:
            if exc.status != 404:
                raise
            log.warning(
                "session lease %s was gone (expired and collected?); creating it again",
                self.name,
            )
            with self._lock:
                self._held = False
            self.ensure()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self._renew_seconds):
            try:
                self.renew()
            except Exception as exc:  # the API server may be restarting: try again soon
                log.warning("renewing session lease %s failed: %s", self.name, exc)

    def release(self) -> None:
        """Stop renewing and delete the lease: what the session left becomes garbage."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        if not self._held:
            return
        try:
            self._api.delete_lease(self.namespace, self.name)
        except Exception as exc:
            log.warning("could not delete session lease %s: %s", self.name, exc)
