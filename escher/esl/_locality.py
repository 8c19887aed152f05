"""Data locality: run tasks where their data lives; invalidate and refresh locations."""

from __future__ import annotations

from collections.abc import Iterable

from escher.backends.base import Backend
from escher.core.errors import ValidationError
from escher.core.plan import PinnedTo
from escher.core.resources import MAX_CAPACITY
from escher.esl._esl import ESL, Bound


class DataLocality(ESL):
    """A label per data set on the nodes that hold it; tasks request it to run there.

    Args:
        backend: The backend (default: the current one).
        name: Used in labels and explanations.

    Example:
        >>> loc = DataLocality()                                         # doctest: +SKIP
        >>> loc.add("shard-3", ["n2", "n5"])
        >>> loc.near("shard-3").launch(count_words)
    """

    kind = "data"

    def __init__(self, backend: Backend | None = None, *, name: str | None = None) -> None:
        super().__init__(backend, name=name)
        self.labels: dict[str, str] = {}

    def _label(self, dataset: str) -> str:
        if not isinstance(dataset, str) or not dataset:
            raise ValidationError(f"dataset must be a non-empty string, got {dataset!r}.")
        if dataset not in self.labels:
            self.labels[dataset] = self.own(
                self.label(dataset),
                restorable=False,
                why_not="the data lived on that node; refresh() its new locations",
            )
        return self.labels[dataset]

    def add(self, dataset: str, nodes: Iterable[str]) -> None:
        """Record that `dataset` (also) lives on `nodes`."""
        label = self._label(dataset)
        for node in _ids(nodes):
            self.set_resource(label, MAX_CAPACITY, node, restorable=False)

    def invalidate(self, dataset: str, nodes: Iterable[str] | None = None) -> None:
        """The copies on `nodes` (default: all) are stale: capacity 0 there."""
        label = self._label(dataset)
        stale = self.locations(dataset) if nodes is None else _ids(nodes)
        for node in stale:
            if node in self.backend.get_cluster_state().nodes:
                self.set_resource(label, 0, node)

    def refresh(self, dataset: str, nodes: Iterable[str]) -> None:
        """`dataset` now lives exactly on `nodes` (add new copies, then drop stale ones)."""
        fresh = _ids(nodes)
        self.add(dataset, fresh)
        self.invalidate(dataset, [n for n in self.locations(dataset) if n not in fresh])

    def locations(self, dataset: str) -> list[str]:
        """Nodes recorded as holding `dataset`."""
        return sorted(self.ledger().get(self._label(dataset), {}))

    def near(self, dataset: str) -> Bound:
        """The policy for tasks that read `dataset`."""
        label = self._label(dataset)
        nodes = tuple(self.locations(dataset))
        source = f"{self.source}.near({dataset!r})"
        return Bound(
            self,
            {label: 1},
            source,
            [lambda names: PinnedTo(names, source=source, nodes=nodes)] if nodes else [],
        )


def _ids(nodes: Iterable[str]) -> list[str]:
    if isinstance(nodes, str):
        return [nodes]
    return list(nodes)
