"""The independent checker: a placement in the user's terms, checked against the plan.

Nothing here uses a solver: a witness any engine finds counts only once it passes here.
"""
