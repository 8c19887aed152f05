"""Plain resource vectors (resource -> quantity dicts) that the planner and simulator update
in place; whether a request fits is `escher.core.resources.fits`."""

from __future__ import annotations

from collections.abc import Mapping

#: A mutable resource vector.
Vector = dict[str, float]


def add(vector: Vector, request: Mapping[str, float]) -> None:
    """Add `request` to `vector` in place."""
    for r, q in request.items():
        vector[r] = vector.get(r, 0.0) + q


def take(vector: Vector, request: Mapping[str, float]) -> None:
    """Subtract `request` from `vector` in place (entries may go negative)."""
    for r, q in request.items():
        vector[r] = vector.get(r, 0.0) - q


def pooled(capacity: Mapping[str, Mapping[str, float]]) -> Vector:
    """The sum over nodes of node -> resource -> capacity."""
    totals: Vector = {}
    for caps in capacity.values():
        add(totals, caps)
    return totals
