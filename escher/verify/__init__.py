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

from escher.verify._app import verify_app
from escher.verify._result import (
    EXIT_CODES,
    Explanation,
    IntentResult,
    IntentStatus,
    Verdict,
    VerificationResult,
)
from escher.verify._verify import DEFAULT_TIMEOUT, Verifier, ensure_feasible, verify
from escher.verify.check import check_placement, intent_violation
from escher.verify.explain import intent_subplan
from escher.verify.model import Statement
from escher.verify.repair import (
    Change,
    Repair,
    RepairSet,
    apply_repair,
    find_repairs,
    with_repairs,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "EXIT_CODES",
    "Change",
    "Explanation",
    "IntentResult",
    "IntentStatus",
    "Repair",
    "RepairSet",
    "Statement",
    "Verdict",
    "VerificationResult",
    "Verifier",
    "apply_repair",
    "check_placement",
    "ensure_feasible",
    "find_repairs",
    "intent_subplan",
    "intent_violation",
    "verify",
    "verify_app",
    "with_repairs",
]
