"""One watcher thread per backend: pod events -> task handles.

It lists the session's pods, then watches from that resourceVersion (re-listing after a
410 Gone or a dropped connection), and hands every pod object to a callback. Finished pods
are deleted by a second, small cleanup thread so the watch never waits on a DELETE.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from escher.backends.kubernetes._kube import ApiException, KubeApi

log = logging.getLogger("escher.kubernetes")

PodCallback = Callable[[str, dict[str, Any]], None]


class PodTracker:
    """Watch the pods matching `label_selector` in `namespace`; call `on_event(type, pod)`."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        label_selector: str,
        on_event: PodCallback,
        watch_seconds: int = 30,
    ) -> None:
        self._api = api
        self._namespace = namespace
        self._selector = label_selector
        self._on_event = on_event
        self._watch_seconds = watch_seconds
        self._stop = threading.Event()
        self._started = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._cleaner: threading.Thread | None = None
        self._response: Any = None
        self._deletions: queue.Queue[tuple[str, str] | None] = queue.Queue()

    def start(self, timeout: float = 30.0) -> None:
        """Start both threads (once) and wait until the first list was processed."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="escher-k8s-watch", daemon=True
                )
                self._cleaner = threading.Thread(
                    target=self._clean, name="escher-k8s-cleanup", daemon=True
                )
                self._thread.start()
                self._cleaner.start()
        self._started.wait(timeout)

    def delete_later(self, name: str, uid: str) -> None:
        """Queue the deletion of a finished pod."""
        self._deletions.put((name, uid))

    def stop(self, timeout: float = 5.0) -> None:
        """Stop watching; pending deletions are still sent (bounded by `timeout`)."""
        self._stop.set()
        self._deletions.put(None)
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):
                response.shutdown()
        for thread in (self._thread, self._cleaner):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout)

    # --- threads ------------------------------------------------------------------------
    def _set_response(self, response: Any) -> None:
        self._response = response

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                pods, version = self._api.list_pods(self._namespace, self._selector)
                for pod in pods:
                    self._dispatch("ADDED", pod)
                self._started.set()
                while not self._stop.is_set():
                    version = self._watch(version)
            except ApiException as exc:
                if exc.status != 410 and not self._stop.is_set():
                    log.warning("pod watch failed (%s); listing again", exc.status)
            except Exception as exc:
                if not self._stop.is_set():
                    log.warning("pod watch interrupted (%s); listing again", exc)
            self._started.set()
            self._stop.wait(0.2)

    def _watch(self, version: str) -> str:
        for event in self._api.watch_pods(
            self._namespace,
            self._selector,
            version,
            self._watch_seconds,
            on_response=self._set_response,
        ):
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                raise ApiException(status=int(obj.get("code") or 500), reason=obj.get("message"))
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind != "BOOKMARK":
                self._dispatch(str(kind), obj)
            if self._stop.is_set():
                break
        return version

    def _dispatch(self, kind: str, pod: dict[str, Any]) -> None:
        try:
            self._on_event(kind, pod)
        except Exception:
            log.exception("handling a pod event failed")

    def _clean(self) -> None:
        while True:
            item = self._deletions.get()
            if item is None:
                return
            name, uid = item
            try:
                self._api.delete_pod(self._namespace, name, uid)
            except Exception as exc:
                log.warning("could not delete finished pod %s: %s", name, exc)
