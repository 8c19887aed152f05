"""Submission: how one attempt of a task is handed to Ray (its remote function and options).

From its second launch on, a function gets a remote function of its own with the function
bound (`bound_runner`: Ray ships it once, not with every task); other functions go through
the generic runner `run_task`. The Ray options of a request are computed once per request
object, and ``remote.options(...)`` once per (remote function, strategy, options, name); a
launch with Ray's default placement finds that object in one look-up by function.
Every attempt has Ray's own retries off: escher alone decides retries.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from escher.backends.ray._config import WorkerConfig
from escher.backends.ray._entry import Entry, SplitRequest
from escher.backends.ray._runner import bound_runner, run_task
from escher.backends.ray._store import EphemeralStore

#: Functions with a remote function of their own, at most (others take the generic runner).
MAX_BOUND = 256
#: Ray options objects kept for the default placement, at most (emptied when full).
MAX_READY = 1024
#: Ray options every attempt gets: escher alone decides retries.
NO_RAY_RETRIES: dict[str, Any] = {"max_retries": 0, "retry_exceptions": False}


class Submitter:
    """Hands attempts to Ray.

    Args:
        config: Passed to every task (how the worker builds its backend).
        store: The ephemeral store (the Ray resources of a request's labels).
    """

    def __init__(self, config: WorkerConfig, store: EphemeralStore) -> None:
        import ray

        self._config = config
        self._store = store
        self._remote = ray.remote(run_task)
        self._option_cache: dict[tuple[Any, ...], tuple[Any, Any, Any, Any]] = {}
        self._request_options: dict[int, tuple[SplitRequest, dict[str, Any]]] = {}
        self._seen: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        # fn -> its bound remote functions [without arguments, with arguments], made as needed
        self._bound: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()
        self._bind_lock = threading.Lock()
        # (fn, with arguments, id(options), name) -> (options, Ray options object): the
        # bound functions' launches with Ray's default placement
        self._ready: dict[tuple[Any, ...], tuple[dict[str, Any], Any]] = {}

    def options_of(self, request: SplitRequest) -> dict[str, Any]:
        """The Ray options of every attempt of a task with `request` (one dict per request
        object: the splitter hands out one request object per distinct request)."""
        cached = self._request_options.get(id(request))
        if cached is not None and cached[0] is request:
            return cached[1]
        options = dict(request.options)
        extra = self._store.ray_resources(request.labels)
        if extra:
            options["resources"] = {**options.get("resources", {}), **extra}
        options.update(NO_RAY_RETRIES)
        if len(self._request_options) > 4096:
            self._request_options.clear()
        self._request_options[id(request)] = (request, options)  # keeps the id valid
        return options

    def call(self, entry: Entry, strategy: Any) -> Any:
        """Submit the current attempt of `entry` to Ray; its ObjectRef."""
        spec = entry.spec
        with_args = bool(spec.args or spec.kwargs)
        if strategy is None:
            # Ray's default placement of a bound function: one look-up of the Ray options
            # object made for (function, arguments or not, request's options, name).
            try:
                ready = self._ready.get((spec.fn, with_args, id(entry.options), spec.name))
            except TypeError:  # an unhashable callable: never bound
                ready = None
            if ready is not None:
                if with_args:
                    return ready[1].remote(spec.args, dict(spec.kwargs))
                return ready[1].remote()
        remote, bound = self._remote_for(spec.fn, with_args)
        options = self._options(remote, entry, strategy)
        if bound and strategy is None:
            if len(self._ready) >= MAX_READY:
                self._ready.clear()
            key = (spec.fn, with_args, id(entry.options), spec.name)
            self._ready[key] = (entry.options, options)  # keeps the options: the id stays valid
        if not bound:
            return options.remote(self._config, spec.fn, spec.args, dict(spec.kwargs))
        if with_args:
            return options.remote(spec.args, dict(spec.kwargs))
        return options.remote()

    def _remote_for(self, fn: Any, with_args: bool) -> tuple[Any, bool]:
        """The Ray remote function for `fn`: from its second launch on, one with `fn` bound
        (Ray ships it once; one without parameters for a call without arguments), else the
        generic runner that takes `fn` as an argument.
        Returns (remote function, whether `fn` is bound)."""
        import ray

        try:
            with self._bind_lock:
                bound = self._bound.get(fn)
                if bound is None:
                    seen = self._seen.get(fn, 0) + 1
                    if seen < 2 or len(self._bound) >= MAX_BOUND:
                        self._seen[fn] = seen
                        return self._remote, False
                    self._seen.pop(fn, None)
                    bound = self._bound[fn] = [None, None]
                remote = bound[with_args]
                if remote is None:
                    remote = ray.remote(bound_runner(self._config, fn, with_args=with_args))
                    bound[with_args] = remote
                return remote, True
        except TypeError:  # not weakly referenceable: always the generic runner
            return self._remote, False

    def _options(self, remote: Any, entry: Entry, strategy: Any) -> Any:
        """`remote.options(...)` for an attempt, cached unless `strategy` is a placement
        group's (node affinities are one object per node: `_state.node_affinity`)."""
        if strategy is not None and type(strategy).__name__ != "NodeAffinitySchedulingStrategy":
            return remote.options(
                name=entry.spec.name, scheduling_strategy=strategy, **entry.options
            )
        options = entry.options
        cache_key = (id(remote), id(strategy), id(options), entry.spec.name)
        cached = self._option_cache.get(cache_key)
        if cached is not None:
            return cached[-1]
        if len(self._option_cache) > 1024:
            self._option_cache.clear()
        placed = {} if strategy is None else {"scheduling_strategy": strategy}
        with_options = remote.options(name=entry.spec.name, **placed, **options)
        self._option_cache[cache_key] = (remote, strategy, options, with_options)  # ids valid
        return with_options
