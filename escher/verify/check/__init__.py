"""The independent checker: a placement in the user's terms, checked against the plan.

Nothing here uses a solver: a witness any engine finds counts only once it passes here.
"""

from escher.verify.check._check import check_placement, intent_violation
from escher.verify.check._witness import Placement, to_witness, witness_problems

__all__ = ["Placement", "check_placement", "intent_violation", "to_witness", "witness_problems"]
