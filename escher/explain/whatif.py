"""What-if replays: `what_if`, `replay`, `Recorder`, the `Report` types.

Imported on its own (it builds on the in-memory backend and the queueing orderings), so
`escher.why` stays light.
"""

from escher.explain._record import Recorded, Recorder
from escher.explain._replay import (
    BACKEND_POLICY,
    POLICIES,
    NeverPlaced,
    Report,
    TaskOutcome,
    replay,
    replay_backend,
    what_if,
)

__all__ = [
    "BACKEND_POLICY",
    "POLICIES",
    "NeverPlaced",
    "Recorded",
    "Recorder",
    "Report",
    "TaskOutcome",
    "replay",
    "replay_backend",
    "what_if",
]
