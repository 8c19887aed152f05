"""What a worker-side backend needs to know about the driver's backend (pickled into tasks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker-side backend must be built (the driver's resolved options).

    Attributes:
        namespace: Ray namespace of the control actor.
        prefix: Prefix of escher's Ray resource names.
        mode: ``"resize"`` or ``"ledger"`` (resolved, never ``"auto"``).
        control_name: Name of the control actor.
        share_writes: Resize mode: publish writes through the control actor.
        session_id: The driver's session: what tasks create on the cluster belongs to it.
        attach: Builds the worker-side backend from this config (the driver's class method,
            pickled by reference, so the worker code never imports the backend module).
    """

    namespace: str | None
    prefix: str
    mode: str
    control_name: str
    share_writes: bool = True
    session_id: str = ""
    attach: Callable[[WorkerConfig], Any] | None = None
