"""A launched task this process tracks until it settles, and its request split for Ray.

Shared by the task table, the ephemeral stores and gangs (a leaf module: it imports none
of them).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from escher.core.resources import Resources
from escher.core.task import TaskRef, TaskSpec


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


@dataclass(eq=False, slots=True)
class Entry:
    """One launched task, tracked until it settles.

    Attributes:
        ref: Its handle.
        request: Its request split for Ray.
        options: Ray options of every attempt (without a scheduling strategy); shared by
            the entries of one request: never changed.
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

    ref: TaskRef
    request: SplitRequest
    options: dict[str, Any]
    key: str = ""
    object_ref: Any = None
    task_id: str = ""
    cancel_marked: bool = False
    submitting: threading.Lock = field(default_factory=threading.Lock)
    node: str | None = None
    gang: GangHook | None = None
    strategy: Any = None
    where: str | None = None

    @property
    def spec(self) -> TaskSpec:
        """The task's spec."""
        return self.ref.spec
