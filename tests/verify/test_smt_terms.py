"""The Z3 encoding builds its terms with Z3's C calls directly: the same terms z3's own
operators make (the enumeration tests check the verdicts)."""

from __future__ import annotations

import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from escher.verify.engines import _smt


def _enc(count: int, bins: int) -> _smt._Enc:
    ctx = z3.Context()
    e = _smt._Enc(None, z3.Solver(ctx=ctx), _smt._Lits(ctx), [], [], False)  # type: ignore[arg-type]
    e.x = [[z3.Int(f"x{ci}_{b}", ctx) for b in range(bins)] for ci in range(count)]
    return e


@settings(deadline=None)  # a loaded machine must not fail it: no wall-clock limit
@given(
    terms=st.lists(st.tuples(st.integers(-(10**20), 10**20), st.integers(0, 3)), min_size=1),
    bound=st.integers(-(10**20), 10**20),
)
def test_sums_are_the_terms_of_z3s_operators(terms: list[tuple[int, int]], bound: int) -> None:
    e = _enc(4, 2)
    for b in range(2):
        ours = e.sum_le(terms, b, bound)
        theirs = z3.Sum([q * e.x[ci][b] for q, ci in terms]) <= bound
        assert ours.eq(theirs), (ours, theirs)


def test_guarded_facts_are_asserted_as_implications() -> None:
    e = _enc(1, 1)
    cond, fact = z3.Bool("s0", e.ctx), e.x[0][0] >= 2
    e.guard(cond, fact)
    e.guard(None, fact)
    assert [a.sexpr() for a in e.s.assertions()] == [
        z3.Implies(cond, fact).sexpr(),
        fact.sexpr(),
    ]
