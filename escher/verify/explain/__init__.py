"""Stage 3 of the pipeline: minimal conflicts and intent proofs, in the user's statements."""

from escher.verify.explain._intents import IntentProver, intent_subplan, preference_met
from escher.verify.explain._minimise import minimise

__all__ = ["IntentProver", "intent_subplan", "minimise", "preference_met"]
