"""Explain and preview on a live cluster: why a task is pending, what-if replays, a live view.

```python
import escher

with escher.init(nodes={"n1": {"CPU": 2}}):
    ref = escher.launch(lambda: 1, resources={"CPU": 4})
    print(escher.why(ref).render())   # never: no node has CPU 4 in total
```

`what_if` and `Recorder` (escher.explain.whatif) replay workloads in virtual time; `escher
view` serves a live page. See docs/tutorials/why-pending.md and docs/explain.md.
"""

from escher.core.verdict import EXIT_CODES, Verdict
from escher.explain._analysis import analyse, minimal_hitting_set
from escher.explain._result import (
    Breakdown,
    Capacity,
    Conflict,
    NodeCheck,
    Requirement,
    WaitReason,
    WhyResult,
)
from escher.explain._why import Explainer, why, why_all, why_request
from escher.explain._workload import TaskTiming, Workload

__all__ = [
    "EXIT_CODES",
    "Breakdown",
    "Capacity",
    "Conflict",
    "Explainer",
    "NodeCheck",
    "Requirement",
    "TaskTiming",
    "Verdict",
    "WaitReason",
    "WhyResult",
    "Workload",
    "analyse",
    "minimal_hitting_set",
    "why",
    "why_all",
    "why_request",
]
