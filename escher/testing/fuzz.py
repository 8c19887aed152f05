"""Property-test helpers for escher's public API boundary (needs `hypothesis`).

The property every public entry point has: for any arguments, a call either succeeds or
raises an error from escher's tree (`EscherError`), never a raw Python error, never hangs,
and when it raises it changes nothing. `call_bounded` runs one call under that contract;
the strategies draw the arguments people get wrong (wrong types, huge and non-finite
numbers, names with a trailing newline, selectors that mix node ids and counts, handles that
are not handles).

Used by the unit fuzz tests (``tests/core/test_boundary_fuzz.py``) and by the fuzz group of
the backend conformance suite (`escher.testing.conformance`), so every backend is held to the
same boundary.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from escher.backends.base import Backend
from escher.core.errors import EscherError
from escher.core.task import TaskRef, TaskSpec

#: Seconds a single fuzzed call may take before it counts as a hang.
CALL_BOUND = 20.0


class Opaque:
    """An object of a type no escher API takes."""

    def __repr__(self) -> str:
        return "<Opaque>"


def never_launched() -> TaskRef:
    """A plain handle that no backend ever took: waiting on it must not hang."""
    return TaskRef(TaskSpec(len, ("x",)))


def junk() -> st.SearchStrategy[Any]:
    """Values of every kind a caller might pass by mistake."""
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.sampled_from([10**50, 10**400, -(10**400), 2**53 + 1]),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=8),
        st.binary(max_size=4),
        st.lists(st.integers(0, 3), max_size=3),
        st.tuples(st.text(max_size=3), st.integers(0, 3)),
        st.dictionaries(st.text(max_size=4), st.integers(-2, 3), max_size=2),
        st.builds(Opaque),
        st.builds(never_launched),
    )


def hashable_junk() -> st.SearchStrategy[Any]:
    """Junk that can be a mapping key."""
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=8),
        st.binary(max_size=4),
        st.tuples(st.text(max_size=3), st.integers(0, 3)),
        st.builds(Opaque),
    )


def labels(hashable: bool = False) -> st.SearchStrategy[Any]:
    """Label candidates: valid ones, near misses (a trailing newline, reserved names), junk."""
    near = st.sampled_from(
        [
            "grp\n",
            "grp ",
            " grp",
            "grp\x00",
            "CPU",
            "memory",
            "node:10.0.0.1",
            "",
            "-grp",
            "grp-",
            "a" * 64,
            "a" * 63,
            "grp/x",
            "grp:x",
            "grüp",
            "ok.label_1-x",
        ]
    )
    valid = st.from_regex(r"\A[a-z][a-z0-9-]{0,10}[a-z0-9]\Z", fullmatch=True)
    return st.one_of(near, valid, hashable_junk() if hashable else junk())


def capacities() -> st.SearchStrategy[Any]:
    """Capacity candidates: valid ones (0 included), huge, negative, non-finite, junk."""
    return st.one_of(
        st.integers(0, 5),
        st.sampled_from([0.5, 2**53, 2**53 + 1, 10**50, 10**400, -1, math.nan, math.inf, "3"]),
        junk(),
    )


def node_specs(nodes: list[str]) -> st.SearchStrategy[Any]:
    """Node-spec candidates: real ids, unknown ids, vectors, label selectors, junk."""
    ids = st.sampled_from([*nodes, "no-such-node", nodes[0] + "\n"])
    vectors = st.dictionaries(
        st.sampled_from(["CPU", "GPU", "grp", "bad name", ""]), capacities(), max_size=2
    )
    return st.one_of(ids, vectors, junk())


def requests() -> st.SearchStrategy[Any]:
    """Request candidates for `launch(resources=...)`."""
    mapping = st.dictionaries(
        st.one_of(st.sampled_from(["CPU", "GPU", "grp", "grp\n", "", "a b"]), hashable_junk()),
        capacities(),
        max_size=3,
    )
    return st.one_of(st.none(), mapping, junk())


def timeouts() -> st.SearchStrategy[Any]:
    """`get` timeout candidates: None, short valid ones, negative, non-finite, junk."""
    return st.one_of(
        st.none(),
        st.floats(0, 0.05),
        st.sampled_from([-1, -0.0, math.nan, math.inf, -math.inf, 10**400, "1", True]),
        junk(),
    )


@dataclass
class Outcome:
    """What one bounded call did: its value or its escher error."""

    value: Any = None
    error: EscherError | None = None


def call_bounded(call: Callable[[], Any], bound: float = CALL_BOUND) -> Outcome:
    """Run `call()` on a thread; fail the test on a raw error or if it takes over `bound` s.

    Raises:
        AssertionError: the call raised something outside escher's tree, or hung.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # judged below
            box["error"] = exc

    thread = threading.Thread(target=target, name="fuzz-call", daemon=True)
    thread.start()
    thread.join(bound)
    if thread.is_alive():
        raise AssertionError(f"the call did not return within {bound}s (a hang)")
    error = box.get("error")
    if error is None:
        return Outcome(value=box.get("value"))
    if not isinstance(error, EscherError):
        raise AssertionError(
            f"a raw {type(error).__name__} escaped: {error!r}; expected an escher error"
        ) from error
    if not str(error):
        raise AssertionError(f"{type(error).__name__} without a message")
    return Outcome(error=error)


def snapshot(backend: Backend) -> tuple[dict[str, dict[str, float]], set[str]]:
    """What a refused call must leave as it was: every node's totals, and the live tasks."""
    state = backend.get_cluster_state()
    totals = {nid: dict(node.total) for nid, node in state.nodes.items()}
    return totals, {ref.id for ref in backend.tasks()}


def check_refused_or_done(backend: Backend, call: Callable[[], Any]) -> Outcome:
    """`call_bounded`; on an escher error, assert that it changed nothing.

    Nothing changed means: every node's totals are as before, and no task was added (tasks
    that were running may have finished meanwhile).
    """
    totals, live = snapshot(backend)
    outcome = call_bounded(call)
    if outcome.error is not None:
        after, now = snapshot(backend)
        assert after == totals, f"{outcome.error!r} but totals changed: {totals} -> {after}"
        assert now <= live, f"{outcome.error!r} but tasks were added: {sorted(now - live)}"
    return outcome
