"""One watcher thread per backend: pod events -> task handles.

It lists the session's pods, then watches from that resourceVersion (the loop of
`_informer.list_and_watch`: a broken watch resumes from the last resourceVersion it saw;
only a 410 Gone lists again), and after a relist, pods that vanished in the gap are
reported as deleted (`on_gone`). Finished pods are deleted by a second, small cleanup
thread so the watch never waits on a DELETE; a deletion the server could not take is tried
again.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any

from escher.backends.kubernetes._informer import list_and_watch
from escher.backends.kubernetes._kube import KubeApi
from escher.backends.kubernetes._retry import patiently, pause

log = logging.getLogger("escher.kubernetes")

PodCallback = Callable[[str, dict[str, Any]], None]
GoneCallback = Callable[[set[str], set[str]], None]


class PodTracker:
    """Watch the pods matching `label_selector` in `namespace`; call `on_event(type, pod)`."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        label_selector: str,
        on_event: PodCallback,
        watch_seconds: int = 30,
        *,
        known: Callable[[], set[str]] | None = None,
        on_gone: GoneCallback | None = None,
        patience: float = 60.0,
    ) -> None:
        self._api = api
        self._namespace = namespace
        self._selector = label_selector
        self._on_event = on_event
        self._watch_seconds = watch_seconds
        self._known = known
        self._patience = patience
        self._on_gone = on_gone
        #: How often the pods were listed (1 + the relists after 410 Gone), for tests.
        self.lists = 0
        #: How often a broken watch resumed from its resourceVersion, for tests.
        self.resumes = 0
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
        list_and_watch(self._stop, self._list, self._open_watch, self._dispatch, self._failed)

    def _open_watch(self, version: str) -> Iterable[dict[str, Any]]:
        return self._api.watch_pods(
            self._namespace,
            self._selector,
            version,
            self._watch_seconds,
            on_response=self._set_response,
        )

    def _failed(self, what: object, failures: int, resuming: bool) -> int:
        """Log (once per outage), pause before the next try; the count of failures so far."""
        if self._stop.is_set():
            return failures
        if failures == 0:
            then = "resuming from the last resourceVersion" if resuming else "listing again"
            log.warning("pod watch interrupted (%s); %s", what, then)
        if resuming:
            self.resumes += 1
        self._started.set()
        pause(failures, self._stop)
        return failures + 1

    def _list(self) -> str:
        """List the pods, hand each over, report those gone since; the list's version."""
        before = self._known() if self._known is not None else set()
        pods, version = self._api.list_pods(self._namespace, self._selector)
        self.lists += 1
        for pod in pods:
            self._dispatch("ADDED", pod)
        present = {str((pod.get("metadata") or {}).get("name", "")) for pod in pods}
        if self._on_gone is not None and before - present:
            try:
                self._on_gone(before, present)
            except Exception:
                log.exception("handling pods gone during a relist failed")
        self._started.set()
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
            self._delete(*item)

    def _delete(self, name: str, uid: str) -> None:
        try:
            patiently(
                lambda: self._api.delete_pod(self._namespace, name, uid),
                self._patience,
                f"deleting pod {name}",
            )
        except Exception as exc:
            log.warning("could not delete finished pod %s: %s", name, exc)
