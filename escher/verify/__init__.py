"""Pre-flight verification: prove a plan feasible on a cluster, or say why not.

```python
from escher.verify import verify, Verdict
result = verify(plan, escher.get_cluster_state())   # or ClusterState.load("cluster.json")
if result.status is Verdict.INFEASIBLE:
    print(result.cause)
    print(result.explanation.render())
```

See docs/verify.md.
"""

from typing import TYPE_CHECKING, Any

from escher.core.verdict import EXIT_CODES, Verdict
from escher.verify._app import verify_app
from escher.verify._result import (
    EXIT_BAD_INPUT,
    Explanation,
    IntentResult,
    IntentStatus,
    VerificationResult,
)
from escher.verify._verify import (
    DEFAULT_TIMEOUT,
    EXPLAIN_SHARE,
    Verifier,
    ensure_feasible,
    verify,
)
from escher.verify.check import check_placement, intent_violation
from escher.verify.explain import intent_subplan
from escher.verify.model import Statement
from escher.verify.read import Grouping, as_written, load_grouped

if TYPE_CHECKING:  # imported when first used (PEP 562): `escher verify` without --repairs
    from escher.verify.repair import (  # never loads the repair search
        Change,
        Repair,
        RepairSet,
        apply_repair,
        find_repairs,
        with_repairs,
    )

_REPAIR = frozenset(
    ("Change", "Repair", "RepairSet", "apply_repair", "find_repairs", "with_repairs")
)


def __getattr__(name: str) -> Any:
    """The repair names, imported from `escher.verify.repair` when first used."""
    if name not in _REPAIR:
        raise AttributeError(f"module 'escher.verify' has no attribute {name!r}")
    from escher.verify import repair

    value = getattr(repair, name)
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_TIMEOUT",
    "EXIT_BAD_INPUT",
    "EXIT_CODES",
    "EXPLAIN_SHARE",
    "Change",
    "Explanation",
    "Grouping",
    "IntentResult",
    "IntentStatus",
    "Repair",
    "RepairSet",
    "Statement",
    "Verdict",
    "VerificationResult",
    "Verifier",
    "apply_repair",
    "as_written",
    "check_placement",
    "ensure_feasible",
    "find_repairs",
    "intent_subplan",
    "intent_violation",
    "load_grouped",
    "verify",
    "verify_app",
    "with_repairs",
]
