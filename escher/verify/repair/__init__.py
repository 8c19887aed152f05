"""Repairs: the smallest changes that make an infeasible plan feasible.

```python
from escher.verify import find_repairs, verify
result = verify(plan, state)
for repair in find_repairs(plan, state, result, timeout=20).repairs:
    print(repair.render())     # e.g. "replicas: web: 4 -> 3  (cost 1, cheapest of its kind)"
```

See docs/repairs.md.
"""

from escher.verify.repair._draft import Draft
from escher.verify.repair._kinds import (
    DROP_COST,
    KINDS,
    MAX_NEW_NODES,
    Base,
    ChangeKind,
    Conflict,
)
from escher.verify.repair._model import Change, Repair, RepairSet, apply_repair
from escher.verify.repair._search import (
    DEFAULT_KINDS,
    DEFAULT_REPAIR_TIMEOUT,
    find_repairs,
    find_task_repairs,
    with_repairs,
)

__all__ = [
    "DEFAULT_KINDS",
    "DEFAULT_REPAIR_TIMEOUT",
    "DROP_COST",
    "KINDS",
    "MAX_NEW_NODES",
    "Base",
    "Change",
    "ChangeKind",
    "Conflict",
    "Draft",
    "Repair",
    "RepairSet",
    "apply_repair",
    "find_repairs",
    "find_task_repairs",
    "with_repairs",
]
