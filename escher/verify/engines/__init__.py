"""Stage 2 of the pipeline: the engines that decide a `Problem`, and `decide` that runs them.

Exact bounds, greedy and constructive search, the packing search, arc-flow (HiGHS), Z3
and the separation graph (SAT); each either proves its answer or finds a placement that
the checker then confirms.
"""

from escher.verify.engines._engine import Decision, decide

__all__ = ["Decision", "decide"]
