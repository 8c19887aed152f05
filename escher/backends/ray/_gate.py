"""The start gate: a task claims its start just before its body runs, and a cancel wins only
before that claim. So a cancelled task never runs, and a started one is never interrupted.

The gate lives in Ray's control store (the GCS key-value store, namespace `NAMESPACE`): a
claim and a cancel are each one atomic add-if-absent of the attempt's key (a claim writes
the node id, a cancel writes `CANCELLED_MARK`), so whichever comes first wins. A task pays
one round trip to the GCS before its body runs (C++, no Python actor in the path), nothing
more. The driver learns which attempts started by listing its session's keys, and removes
them by prefix, a block of `BLOCK` tasks at a time, once every attempt of the block settled.

Keys: ``<prefix><session>:<block>:<task>.<retry>``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

#: The GCS key-value namespace of the start gate.
NAMESPACE = b"escher-gate"
#: Tasks per key block (keys are removed a block at a time).
BLOCK = 256
#: What a cancel writes (node ids are hex, so a claim never writes it).
CANCELLED_MARK = b"-"


def _client() -> Any:
    """This process's GCS client (set once Ray is connected, in drivers and workers)."""
    from ray.experimental import internal_kv

    client = getattr(internal_kv, "global_gcs_client", None)
    if client is None:
        raise RuntimeError("Ray is not connected (no GCS client)")
    return client


def attempt_key(session: str, task: int, retry: int = 0) -> str:
    """The gate key (without prefix) of attempt `retry` of task number `task` of `session`."""
    return f"{session}:{task // BLOCK}:{task}.{retry}"


def retry_key(key: str, retry: int) -> str:
    """The key of attempt `retry` of the task whose attempt key is `key`."""
    return f"{key.rpartition('.')[0]}.{retry}"


def block_of(key: str) -> int:
    """The key block an attempt key belongs to."""
    return int(key.split(":")[-2])


def claim(prefix: str, key: str, node: str, timeout: float) -> bool:
    """Worker side: claim the start of attempt `key` on `node`; False if it was cancelled."""
    added = _client().internal_kv_put(
        (prefix + key).encode(), node.encode(), False, NAMESPACE, timeout=timeout
    )
    return bool(added)


class Gate:
    """Driver side of the start gate for one session.

    Args:
        prefix: The backend's resource-name prefix (keeps backends of one cluster apart).
        session: The session id (the first part of every key).
        timeout: Seconds a call to the GCS may take.
    """

    def __init__(self, prefix: str, session: str, timeout: float) -> None:
        self._prefix = prefix
        self._session = session
        self._timeout = timeout

    def _full(self, key: str) -> bytes:
        return (self._prefix + key).encode()

    def cancel(self, key: str) -> bool:
        """Mark attempt `key` cancelled unless it was claimed; True if it will never run."""
        client, full = _client(), self._full(key)
        if client.internal_kv_put(full, CANCELLED_MARK, False, NAMESPACE, timeout=self._timeout):
            return True
        # Already there: claimed, or cancelled before.
        value = client.internal_kv_get(full, NAMESPACE, timeout=self._timeout)
        return bool(value == CANCELLED_MARK)

    def started(self, waiting: Collection[str]) -> dict[str, str]:
        """Of the attempt keys `waiting`, those claimed -> the node each runs on."""
        if not waiting:
            return {}
        client = _client()
        cut = len(self._prefix)
        listed = client.internal_kv_keys(
            self._full(f"{self._session}:"), NAMESPACE, timeout=self._timeout
        )
        found = [raw for raw in listed if raw.decode()[cut:] in waiting]
        if not found:
            return {}
        values = client.internal_kv_multi_get(found, NAMESPACE, timeout=self._timeout)
        started: dict[str, str] = {}
        for raw in found:
            value = values.get(raw)
            if value and value != CANCELLED_MARK:
                started[raw.decode()[cut:]] = value.decode()
        return started

    def forget_block(self, block: int) -> None:
        """Remove the keys of a block whose attempts all settled."""
        self.forget(f"{self._session}:{block}:")

    def forget(self, key_prefix: str) -> None:
        """Remove every key that starts with `key_prefix` (after the backend's prefix)."""
        _client().internal_kv_del(self._full(key_prefix), True, NAMESPACE, timeout=self._timeout)


def forget_session(prefix: str, session: str, timeout: float) -> None:
    """Remove every start-gate key of `session` (garbage of a session that is gone)."""
    Gate(prefix, session, timeout).forget(f"{session}:")
