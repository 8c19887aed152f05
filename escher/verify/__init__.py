"""Pre-flight verification: prove a plan feasible on a cluster, or say why not.

```python
from escher.verify import verify, Verdict
result = verify(plan, state)
if result.status is Verdict.INFEASIBLE:
    print(result.explanation.render())
```

See docs/verify.md.
"""

from escher.verify._check import check_placement, intent_violation
from escher.verify._model import Statement
from escher.verify._result import (
    Explanation,
    IntentResult,
    IntentStatus,
    Verdict,
    VerificationResult,
)
from escher.verify._verify import DEFAULT_TIMEOUT, ensure_feasible, verify

__all__ = [
    "DEFAULT_TIMEOUT",
    "Explanation",
    "IntentResult",
    "IntentStatus",
    "Statement",
    "Verdict",
    "VerificationResult",
    "check_placement",
    "ensure_feasible",
    "intent_violation",
    "verify",
]
