"""Requests in Ray's terms: which names are node-defined, which are ephemeral labels, and
whether any node could ever hold a request."""

from __future__ import annotations

from typing import Any

from escher.backends.ray._entry import SplitRequest
from escher.backends.ray._state import NodeCache, is_node_defined
from escher.core.resources import Resources, unknown_resource_hint, validate_label

_BUILTIN = ("CPU", "GPU", "memory")


def is_label(name: str) -> bool:
    """True if `name` is a valid ephemeral label name."""
    try:
        validate_label(name)
    except Exception:
        return False
    return True


class RequestSplitter:
    """Splits requests into Ray options and ephemeral labels, with the node cache's help."""

    def __init__(self, cache: NodeCache) -> None:
        self._cache = cache
        self._fits: dict[Resources, bool] = {}  # physical request -> some node's total fits
        self._generation = -1
        # request -> its split, while the application-defined names stay the same: tasks
        # with equal requests share one (read-only) split
        self._splits: dict[Resources, SplitRequest] = {}
        self._splits_app: frozenset[str] = frozenset()

    def _node_defined(self, name: str, app: frozenset[str]) -> bool:
        return name in _BUILTIN or name in app or is_node_defined(name) or not is_label(name)

    def split(self, request: Resources) -> SplitRequest:
        """Ray task options for the node-defined part; the ephemeral labels apart (one
        object for equal requests: never change it)."""
        app = self._cache.app_names()
        if app is not self._splits_app:
            self._splits, self._splits_app = {}, app
        known = self._splits.get(request)
        if known is None:
            # a request not split yet: with the names a synchronous TTL refresh would see
            # (an equal request later is served from its split, the view refreshed behind)
            app = self._cache.app_names(stale_ok=False)
            if app is not self._splits_app:
                self._splits, self._splits_app = {}, app
            known = self._split(request, app)
            if len(self._splits) < 4096:
                self._splits[request] = known
        return known

    def _split(self, request: Resources, app: frozenset[str]) -> SplitRequest:
        options: dict[str, Any] = {"num_cpus": request.get("CPU", 0.0)}
        if request.get("GPU"):
            options["num_gpus"] = request["GPU"]
        if request.get("memory"):
            options["memory"] = int(request["memory"])
        custom: dict[str, float] = {}
        labels: dict[str, float] = {}
        physical: dict[str, float] = {}
        for name, quantity in request.items():
            if not self._node_defined(name, app):
                labels[name] = quantity
                continue
            physical[name] = quantity
            if name not in _BUILTIN:
                custom[name] = quantity
        if custom:
            options["resources"] = custom
        return SplitRequest(options=options, labels=labels, physical=Resources._trusted(physical))

    def candidates(self, physical: Resources) -> list[str]:
        """Alive nodes whose node-defined totals could fit `physical`, in id order."""
        return sorted(n for n, res in self._cache.physical().items() if physical.fits_in(res))

    def _fits_somewhere(self, physical: Resources) -> bool:
        nodes = self._cache.physical()
        if self._generation != self._cache.generation:
            self._fits, self._generation = {}, self._cache.generation
        known = self._fits.get(physical)
        if known is None:
            known = any(physical.fits_in(res) for res in nodes.values())
            if len(self._fits) < 4096:
                self._fits[physical] = known
        return known

    def infeasible_reason(self, request: SplitRequest) -> str | None:
        """Why no node of the cluster could ever hold `request` (None if some node could)."""
        physical = request.physical
        if not physical or self._fits_somewhere(physical):
            return None
        self._cache.refresh()
        if self._fits_somewhere(physical):
            return None
        known = {name for res in self._cache.physical().values() for name in res}
        return (
            f"no node of the Ray cluster has {physical.to_dict()} in total, so the request "
            "can never be placed; ask for less or add a bigger node."
            + unknown_resource_hint(physical, known)
        )
