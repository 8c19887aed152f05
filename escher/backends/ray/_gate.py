"""The start gate: a task claims its start just before its body runs, and a cancel wins only
before that claim. So a cancelled task never runs, and a started one is never interrupted.

Attempts are named by Ray's own task id (the driver reads it from the ObjectRef, the worker
from its runtime context), so a task is sent nothing for the gate. A task claims on its own
node with one exclusive file create (`escher.backends.ray._nodegate`) once the node is
armed; on a node not armed yet it claims in Ray's control store (the GCS key-value store,
namespace `NAMESPACE`) with one atomic add-if-absent of ``<prefix><session>:<task id>``.

A cancel (rare) first adds the same key with `CANCELLED_MARK` (a claim there wins if it came
first), then marks the attempt cancelled at every registered node agent (a claim on that
node wins if it came first). The driver learns which attempts started by asking the agents
and listing its session's keys, and removes both once an attempt settled.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from escher.backends.ray._nodegate import CANCELLED as CANCELLED_MARK
from escher.backends.ray._nodegate import STORE_NAMESPACE as NAMESPACE
from escher.backends.ray._nodegate import (
    NodeGateAgent,
    agent_name,
    agent_options,
    find_agent,
    registered,
    unregister,
)
from escher.backends.ray._state import kv_client

__all__ = ["CANCELLED_MARK", "NAMESPACE", "Gate", "NodeAgents", "claim", "forget_session"]

#: Seconds a node agent has to report its node's starts (a late one is asked again later).
SYNC_TIMEOUT = 2.0


def claim(prefix: str, key: str, node: str, timeout: float) -> bool:
    """Claim the start of attempt `key` (``<session>:<task id>``) in the control store, from
    `node`; False if it was cancelled."""
    added = kv_client().internal_kv_put(
        (prefix + key).encode(), node.encode(), False, NAMESPACE, timeout=timeout
    )
    return bool(added)


class NodeAgents:
    """The driver's handles of the node agents of one prefix (created where missing).

    Args:
        prefix: The backend's resource-name prefix.
        namespace: The Ray namespace of the agents.
        timeout: Seconds a call to an agent may take.
    """

    def __init__(self, prefix: str, namespace: str | None, timeout: float) -> None:
        self._prefix, self._namespace, self._timeout = prefix, namespace, timeout
        self._handles: dict[str, Any] = {}
        self._lock = threading.Lock()

    def ensure(self, nodes: Iterable[str]) -> None:
        """Start the agents of `nodes` that have none (they arm their node in the background)."""
        import ray

        for node in nodes:
            if node in self._handles:
                continue
            name = agent_name(self._prefix, node)
            options = agent_options(name, self._namespace, node)
            handle = ray.remote(NodeGateAgent).options(**options).remote(self._prefix, node)
            with self._lock:
                self._handles.setdefault(node, handle)

    def handle(self, node: str) -> Any:
        """The agent of `node` (looked up by name if this process did not start it)."""
        known = self._handles.get(node)
        if known is None:
            known = find_agent(self._prefix, node, self._namespace)
            with self._lock:
                self._handles.setdefault(node, known)
        return known

    def call_all(
        self,
        method: str,
        args: Callable[[str], tuple[Any, ...]],
        *,
        skip: Collection[str] = (),
        timeout: float | None = None,
    ) -> tuple[dict[str, Any], list[str]]:
        """Call `method(*args(node))` at every registered agent but those of `skip`, all at
        once; returns (node -> answer, nodes that did not answer within `timeout`)."""
        import ray

        calls: dict[Any, str] = {}
        failed: list[str] = []
        for node in registered(self._prefix):
            if node in skip:
                continue
            try:
                calls[getattr(self.handle(node), method).remote(*args(node))] = node
            except Exception:
                failed.append(node)
        answers: dict[str, Any] = {}
        if calls:
            ready, late = ray.wait(
                list(calls), num_returns=len(calls), timeout=timeout or self._timeout
            )
            failed += [calls[call] for call in late]
            for call in ready:
                try:
                    answers[calls[call]] = ray.get(call)
                except Exception:
                    failed.append(calls[call])
        return answers, failed

    def forget_node(self, node: str) -> None:
        """A dead node: drop its handle and registration."""
        with self._lock:
            self._handles.pop(node, None)
        with contextlib.suppress(Exception):
            unregister(self._prefix, node)


class Gate:
    """Driver side of the start gate for one session.

    Args:
        prefix: The backend's resource-name prefix (keeps backends of one cluster apart).
        session: The session id (the first part of every key).
        agents: The node agents of this prefix.
        timeout: Seconds a call to the GCS may take.
    """

    def __init__(self, prefix: str, session: str, agents: NodeAgents, timeout: float) -> None:
        self._prefix = prefix
        self._session = session
        self._agents = agents
        self._timeout = timeout

    def _full(self, task_id: str) -> bytes:
        return f"{self._prefix}{self._session}:{task_id}".encode()

    def cancel(
        self, task_ids: Collection[str], alive: Callable[[str], bool] | None = None
    ) -> set[str]:
        """Mark attempts cancelled unless claimed; returns those that will never run.

        Every registered agent is asked. `alive(node)` tells whether a node whose agent did
        not answer is still alive (then an attempt may have started there: none is counted
        as cancelled); a dead one's registration is dropped.
        """
        client = kv_client()
        won: list[str] = []
        for task_id in task_ids:
            full = self._full(task_id)
            if client.internal_kv_put(
                full, CANCELLED_MARK, False, NAMESPACE, timeout=self._timeout
            ):
                won.append(task_id)
            elif client.internal_kv_get(full, NAMESPACE, timeout=self._timeout) == CANCELLED_MARK:
                won.append(task_id)  # cancelled before
        if not won:
            return set()
        answers, failed = self._agents.call_all("cancel", lambda node: (self._session, won))
        claimed = {task_id for found in answers.values() for task_id in found}
        for node in failed:
            if alive is None or alive(node):
                return set()  # it may have claimed there: promise nothing
            self._agents.forget_node(node)
        return set(won) - claimed

    def started(
        self, forget: Mapping[str, Collection[str]], skip: Collection[str] = ()
    ) -> dict[str, str]:
        """Attempts of this session that claimed their start -> the node; first removes
        the files of settled attempts: `forget[node]` on `node`, `forget[""]` everywhere.
        Nodes of `skip` (known dead) are not asked."""
        everywhere = list(forget.get("", ()))

        def args(node: str) -> tuple[Any, ...]:
            return self._session, [*forget.get(node, ()), *everywhere]

        answers, _ = self._agents.call_all("sync", args, skip=skip, timeout=SYNC_TIMEOUT)
        started = {task_id: node for node, found in answers.items() for task_id in found}
        client = kv_client()
        cut = len(self._full(""))
        listed = client.internal_kv_keys(self._full(""), NAMESPACE, timeout=self._timeout)
        if listed:
            values = client.internal_kv_multi_get(listed, NAMESPACE, timeout=self._timeout)
            for raw, value in values.items():
                if value and value != CANCELLED_MARK:
                    started[raw.decode()[cut:]] = value.decode()
        return started

    def forget(self, task_ids: Iterable[str]) -> None:
        """Remove the control-store keys of settled attempts."""
        client = kv_client()
        for task_id in task_ids:
            client.internal_kv_del(self._full(task_id), False, NAMESPACE, timeout=self._timeout)

    def forget_session(self) -> None:
        """Remove everything of this session: its keys and, at every agent, its files."""
        forget_session(self._prefix, self._session, self._timeout)
        self._agents.call_all("forget_sessions", lambda node: ([self._session],))


def forget_session(prefix: str, session: str, timeout: float) -> None:
    """Remove every start-gate key of `session` (garbage of a session that is gone)."""
    kv_client().internal_kv_del(f"{prefix}{session}:".encode(), True, NAMESPACE, timeout=timeout)
