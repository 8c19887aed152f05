"""The ephemeral store: where escher keeps ephemeral resources on Ray, behind one interface.

Two implementations, chosen once when a backend starts:

* `escher.backends.ray._resize.ResizeStore`: real Ray custom resources, resized in place
  on a live node; Ray's own scheduler matches tasks to them.
* `escher.backends.ray._ledger.LedgerStore`: a table in the control actor; tasks that
  request ephemeral units are granted a node by it and pinned there.

The backend and the task table only talk to this interface; neither knows which one runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from escher.backends.ray._entry import Entry
from escher.backends.ray._state import RawView

#: Submits an attempt of a task to Ray, with a scheduling strategy (or None).
Submit = Callable[[Entry, Any], None]
#: node -> (ephemeral totals, ephemeral available), escher's label names.
EphemeralView = dict[str, tuple[dict[str, float], dict[str, float]]]
#: node -> label -> new capacity (0 deletes).
WritePlan = Mapping[str, Mapping[str, float]]


class StoreRead(Protocol):
    """A read of the ephemeral table started before Ray's own view is read."""

    def finish(self, raw: RawView) -> EphemeralView:
        """The ephemeral part of every alive node of `raw`."""

    def abandon(self) -> None:
        """The read is not needed (reading Ray failed): undo what starting it took."""


class EphemeralStore(ABC):
    """Ephemeral resources on a Ray cluster: writes, reads, and routing tasks to them."""

    #: The mode name users choose it by.
    mode: ClassVar[str]

    # --- writes and reads -----------------------------------------------------------------
    @abstractmethod
    def write(self, plan: WritePlan) -> None:
        """Apply `plan`: each node's labels in one update, different nodes concurrently.

        Raises:
            UnknownNodeError: a node of `plan` is not alive (its labels are unchanged).
        """

    @abstractmethod
    def begin_read(self) -> StoreRead:
        """Start reading the ephemeral table (finish it after reading Ray's view)."""

    # --- tasks -------------------------------------------------------------------------
    @abstractmethod
    def ray_resources(self, labels: Mapping[str, float]) -> dict[str, float]:
        """The Ray custom resources a task requesting `labels` must ask Ray for."""

    @abstractmethod
    def dispatch(self, entry: Entry, submit: Submit) -> None:
        """Send an attempt of a task that requests ephemeral labels on its way (now, or once
        units are granted); `submit` hands it to Ray."""

    def withdraw(self, entry: Entry) -> bool:
        """Drop a task still waiting here for units; True if it was (it will never run)."""
        return False

    def release(self, entry: Entry) -> None:  # noqa: B027 - optional hook
        """An attempt of `entry` ended: give back what it held here."""

    @abstractmethod
    def reserve_gang(self, entries: Sequence[Entry]) -> list[str] | None:
        """Reserve every member's ephemeral units at once, each on a node whose totals fit the
        member's node-defined request.

        Returns:
            Per member the node its units are on ("" for a member without labels), or None
            if they do not all fit now (nothing reserved). An empty list: this store reserves
            nothing itself (the members' Ray resources carry the labels).
        """

    def unreserve_gang(self, entries: Sequence[Entry]) -> None:  # noqa: B027 - optional hook
        """Give back a reservation made by `reserve_gang` that will not be used."""

    def flush(self) -> None:  # noqa: B027 - optional hook
        """Make this process's writes visible to every process now (best effort)."""

    # --- readiness -------------------------------------------------------------------------
    @property
    def waits_for_labels(self) -> bool:
        """True if `wait_for_labels` really waits."""
        return False

    def wait_for_labels(self, labels: Sequence[str], timeout: float) -> bool:
        """Block until every label was just created on some node; False if not supported."""
        return False

    def pending_shrinks(self) -> dict[tuple[str, str], float]:
        """(node, label) -> capacity asked for but not applied yet (still in use)."""
        return {}

    def describe_task(self, entry: Entry) -> dict[str, Any]:
        """What this store knows about one task (for `Backend.describe_task`)."""
        return {}

    def describe(self) -> dict[str, Any]:
        """Facts for `Backend.describe`."""
        return {"mode": self.mode}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Stop background work (send what is unsent first)."""
