"""A MILP run (SciPy's HiGHS) that ends by a hard deadline.

HiGHS checks its own time limit only between some of its steps: on a 1,000-node arc-flow
model it was seen to run 297 s past a 9.5 s limit inside one root-node step. So on Linux the
solver runs in a forked child process that is killed if it has not answered by the hard
deadline (the caller's; arc-flow gives the solver its whole remaining time as its own limit
too, so the kill is the backstop). HiGHS never runs in the parent then, so
no child inherits its thread pool half set up. Elsewhere (no `fork`, or inside a daemon
process, which may not have children) it runs in this process and its own limit is all
there is.
"""

from __future__ import annotations

import multiprocessing
import sys
from multiprocessing.connection import Connection
from typing import Any

#: (scipy's status code, the solution or None); status None: killed or failed.
Outcome = tuple[int | None, Any]


def milp(a: Any, lo: Any, hi: Any, upper: Any, seconds: float, hard_seconds: float) -> Outcome:
    """Solve min 0 s.t. lo <= a x <= hi, 0 <= x <= upper, x integer, within `seconds` (the
    solver's limit), and in any case within `hard_seconds` of wall time."""
    if not _can_fork():
        return _solve(a, lo, hi, upper, seconds)
    import scipy.optimize  # noqa: F401  (imported once here, not in every child)

    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(send, a, lo, hi, upper, seconds), daemon=True)
    try:
        child.start()
    except (AssertionError, OSError):  # a daemon process, or no processes left
        receive.close()
        send.close()
        return _solve(a, lo, hi, upper, seconds)
    send.close()
    try:
        if receive.poll(max(0.0, hard_seconds)):
            outcome: Outcome = receive.recv()
            return outcome
        return (None, None)
    except (EOFError, OSError):  # the child died without an answer
        return (None, None)
    finally:
        receive.close()
        if child.is_alive():
            child.kill()
        child.join(timeout=5.0)


def _can_fork() -> bool:
    return sys.platform == "linux" and "fork" in multiprocessing.get_all_start_methods()


def _child(send: Connection, a: Any, lo: Any, hi: Any, upper: Any, seconds: float) -> None:
    try:
        send.send(_solve(a, lo, hi, upper, seconds))
    except Exception:  # the parent reads "no answer"
        pass
    finally:
        send.close()


def _solve(a: Any, lo: Any, hi: Any, upper: Any, seconds: float) -> Outcome:
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint
    from scipy.optimize import milp as scipy_milp

    res = scipy_milp(
        c=np.zeros(a.shape[1]),
        constraints=LinearConstraint(a, lo, hi),
        integrality=np.ones(a.shape[1]),
        bounds=Bounds(0, upper),
        options={"time_limit": max(seconds, 0.01), "presolve": True},
    )
    return (int(res.status), None if res.x is None else np.asarray(res.x))
