"""A launched task this process tracks until it settles, and its request split for Ray.

Shared by the task table, the ephemeral stores and gangs (a leaf module: it imports none
of them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from escher.core.resources import Resources
from escher.core.task import Status, TaskRef, TaskSpec


@dataclass(frozen=True)
class SplitRequest:
    """A task's request in Ray's terms.

    Attributes:
        options: Ray task options for the node-defined part (``num_cpus``, ``num_gpus``,
            ``memory``, ``resources`` for the application's custom resources).
        labels: The ephemeral labels requested (escher's names) -> quantity.
        physical: The node-defined part as escher resources (for feasibility checks).
    """

    options: dict[str, Any]
    labels: dict[str, float]
    physical: Resources


class GangHook(Protocol):
    """What a task table needs from the gang a member belongs to."""

    def member_done(self) -> None:
        """A member settled (the last one frees the gang's reservation)."""

    def cancel_unplaced(self) -> bool:
        """Cancel every member if the gang was not placed yet; True if it was not."""


class Entry(TaskRef):
    """One launched task, tracked until it settles: its handle and the table's record in
    one object (a separate record per handle was one more object per waiting task for
    Python's cyclic collector, and one more registry to keep in step).

    Args:
        spec: What it runs.
        request: Its request split for Ray.
        options: Ray options of every attempt (without a scheduling strategy); shared by
            the entries of one request: never changed.
        key: The first attempt's key in this process's task table.
        canceller: `TaskRef.cancel` of this handle (the table's).
        status: Its first status (None: the status every handle starts with).

    Attributes:
        request: Its request split for Ray.
        options: Ray options of every attempt (shared; never changed).
        key: The current attempt's key in this process's task table (``<n>.<retry>``).
        object_ref: Ray's ObjectRef of the current attempt, once submitted.
        task_id: Ray's task id (hex) of the current attempt while it is with Ray: its name
            at the start gate.
        cancel_marked: A cancel marked the current attempt at the start gate.
        submitting: Held while the attempt is handed to Ray (a cancel waits for its id).
        node: Ledger mode: the node whose ephemeral units the attempt holds.
        gang: The gang it belongs to, if any.
        strategy: The scheduling strategy of the gang bundle it runs in, if any.
        where: The node Ray last reported it on (for errors and `describe_task`).
    """

    __slots__ = (
        "cancel_marked",
        "gang",
        "key",
        "node",
        "object_ref",
        "options",
        "request",
        "strategy",
        "submitting",
        "task_id",
        "where",
    )

    def __init__(
        self,
        spec: TaskSpec,
        request: SplitRequest,
        options: dict[str, Any],
        key: str,
        canceller: Callable[[TaskRef], bool] | None = None,
        status: Status | None = None,
    ) -> None:
        super().__init__(spec, canceller=canceller)
        if status is not None:
            self._status = status  # not shared yet: no lock needed
        self.request = request
        self.options = options
        self.key = key
        self.object_ref: Any = None
        self.task_id = ""
        self.cancel_marked = False
        self.submitting = threading.Lock()
        self.node: str | None = None
        self.gang: GangHook | None = None
        self.strategy: Any = None
        self.where: str | None = None

    @property
    def ref(self) -> Entry:
        """Its handle: the entry itself (what users hold and wait on)."""
        return self
