"""One node watcher per backend: which eligible nodes exist and are Ready, kept current.

The node-loss check asks every few seconds about the nodes under its pods. Listing every
node each time costs the API server, etcd and the client O(nodes) per check (at 1,000 nodes
about 3 MB of JSON); a watch costs nothing while the nodes do not change. It lists once
(from the API server's cache), then watches from that resourceVersion
(`_informer.list_and_watch`: a watch that ends or breaks resumes from the last version it
saw, a 410 Gone lists again). While it is not in step
with the server (before the first list, after a failure until the watch is back) `records`
answers None and the caller reads the nodes itself; so it does for good if the identity
may not watch nodes (403).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable
from typing import Any

from escher.backends.kubernetes._informer import list_and_watch
from escher.backends.kubernetes._kube import KubeApi
from escher.backends.kubernetes._retry import pause
from escher.backends.kubernetes._state import NodeRecord

log = logging.getLogger("escher.kubernetes")


class NodeWatch:
    """The eligible nodes (`label_selector`) as one list + watch keeps them."""

    def __init__(self, api: KubeApi, label_selector: str | None, watch_seconds: int = 60) -> None:
        self._api = api
        self._selector = label_selector
        self._watch_seconds = watch_seconds
        self._records: dict[str, NodeRecord] = {}
        self._in_step = False
        #: Set once the first list was tried (in step, failed, or not allowed).
        self._tried = threading.Event()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None
        #: How often the nodes were listed (1 + the relists after 410 Gone), for tests.
        self.lists = 0

    def start(self) -> None:
        """Start watching (once); `records` answers once the first list is in."""
        with self._lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(
                    target=self._run, name="escher-k8s-node-watch", daemon=True
                )
                self._thread.start()

    def records(
        self, nodes: Iterable[str], first_wait: float = 0.0
    ) -> dict[str, NodeRecord | None] | None:
        """Each of `nodes` -> its record (None: no such eligible node); None while the
        watch is not in step with the server. Until the first list was tried, wait up to
        `first_wait` seconds for it (a caller that would list the nodes itself otherwise)."""
        self._tried.wait(first_wait)
        with self._lock:
            if not self._in_step:
                return None
            return {node: self._records.get(node) for node in nodes}

    def stop(self, timeout: float = 5.0) -> None:
        """Stop watching."""
        self._stop.set()
        self._tried.set()
        with self._lock:
            self._in_step = False
            thread = self._thread
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):
                response.shutdown()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # --- the thread ---------------------------------------------------------------------
    def _run(self) -> None:
        list_and_watch(self._stop, self._list, self._open_watch, self._apply, self._failed,
                       out_of_step=self._out_of_step)  # fmt: skip

    def _open_watch(self, version: str) -> Iterable[dict[str, Any]]:
        return self._api.watch_nodes(
            self._selector, version, self._watch_seconds, on_response=self._in_step_again
        )

    def _out_of_step(self) -> None:
        with self._lock:
            self._in_step = False

    def _failed(self, what: object, failures: int, resuming: bool) -> int | None:
        if what == 403:  # no `watch nodes` for this identity: the checks list instead
            log.info("not allowed to watch nodes; the node check lists them instead")
            return None
        if failures == 0 and not self._stop.is_set():
            log.info("node watch interrupted (%s); the node check lists meanwhile", what)
        pause(failures, self._stop)
        return failures + 1

    def _list(self) -> str:
        try:
            items, version = self._api.list_nodes_cached(self._selector)
            self.lists += 1
            records = {rec.name: rec for rec in map(NodeRecord.parse, items)}
            with self._lock:
                self._records = records
                self._in_step = not self._stop.is_set()
            return version
        finally:
            self._tried.set()  # in step, or failed: `records` stops waiting for it

    def _in_step_again(self, response: Any) -> None:
        """The watch answered: from here on it delivers every change since `version`."""
        self._response = response
        with self._lock:
            self._in_step = not self._stop.is_set()

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        if kind in ("ADDED", "MODIFIED"):
            rec = NodeRecord.parse(obj)
            with self._lock:
                self._records[rec.name] = rec
        elif kind == "DELETED":
            name = (obj.get("metadata") or {}).get("name")
            with self._lock:
                self._records.pop(str(name), None)
