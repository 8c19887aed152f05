"""Gang scheduling latency: framework-native vs the gang ESL vs gang written in the app.

The paper measured the median latency from requesting a gang to all members running on 32
nodes / 256 CPUs: FrameSpace (Ray placement groups, 1624 LoC) 381 ms, LibSpace (the gang
ESL, 261 LoC) 892 ms, AppSpace (the application, 78 LoC) 937 ms.

Those latencies are control-plane costs, so the simulation replays each protocol's calls on
the virtual clock with per-call costs measured on a local Ray 2.60 on 2 cores (`Params`;
`bench/ray_backend.py` times the resize and gang calls), every cost jittered by a seeded
log-normal factor; placement itself is escher's (the in-memory
backend's matcher, real ephemeral resources). A gang of `members` 1-CPU tasks on an idle
cluster of `nodes` x `cpus_per_node`:

* ``native``: `esl.Gang(mode="native")` (atomic `launch_gang`) after the framework
  reserves a placement group (`pg_base_s` + `pg_per_node_s` per node spanned); then the
  driver submits the members (`submit_s` each) and each starts `dispatch_s` later.
* ``esl``: the gang ESL's ghost protocol (`escher.esl.Gang`, mode "ephemeral"): the driver
  submits one ghost per member; each ghost, once placed and started, creates its member
  label with `set_resource` (served one at a time by the control store, `set_resource_s`);
  the ESL polls the cluster state every `poll_s` (`state_s` per poll) and, when every label
  exists, submits the members, which request only their label. The ESL's own class refuses a
  virtual clock (its ghosts block), so this module replays the same calls.
* ``app``: the same ghost protocol written in the application, which waits on each ghost's
  readiness in turn (`get_s` per round trip) instead of one cluster-state poll. How the
  paper's AppSpace version is written is not described in what we have: this is our
  assumption, stated here.

A second table runs the real `esl.Gang` on the real-time in-memory backend (ghosts that
block, wall-clock latency) at small scale, ephemeral vs native.
"""

from __future__ import annotations

import functools
import math
import random
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from escher import esl
from escher.backends.memory import MemoryBackend
from escher.core.context import current_task
from escher.core.resources import Resources
from escher.core.task import TaskSpec
from escher.evaluation._core import (
    Meter,
    Result,
    bars_beside_paper,
    check_variant,
    from_zero,
    median,
    percentile,
    pyplot,
    style,
)

NAME = "gang"
VARIANTS = ("native", "esl", "app")
PAPER_MS = {"native": 381.0, "esl": 892.0, "app": 937.0}
PAPER_LOC = {"native": 1624, "esl": 261, "app": 78}


@dataclass(frozen=True)
class Params:
    """Cost model (seconds); defaults measured on a local Ray 2.60, or stated."""

    nodes: int = 32
    cpus_per_node: int = 8
    members: int = 256
    submit_s: float = 0.0012  # driver submission throughput: ~800 no-op tasks/s
    dispatch_s: float = 0.0024  # no-op task median latency
    set_resource_s: float = 0.0017  # resize_raylet_resource_instances median
    state_s: float = 0.004  # available_resources_per_node median
    get_s: float = 0.0011  # named-actor call / small get round trip
    poll_s: float = 0.01  # the gang ESL's default poll
    pg_base_s: float = 0.0087  # placement group of 4 bundles, create + ready
    pg_per_node_s: float = 0.0005  # assumption: 2-phase commit per node spanned
    jitter_sigma: float = 0.2
    trials: int = 20


class _Fifo:
    """A server that handles one request at a time (the control store, the driver)."""

    def __init__(self) -> None:
        self.free_at = 0.0

    def serve(self, now: float, seconds: float) -> float:
        """Time at which a request arriving at `now` needing `seconds` completes."""
        self.free_at = max(now, self.free_at) + seconds
        return self.free_at


class _Trial:
    """One gang request on a fresh cluster; `latency` is set when all members run."""

    def __init__(self, variant: str, p: Params, backend: Any, rng: random.Random) -> None:
        self.variant, self.p, self.backend, self.rng = variant, p, backend, rng
        self.clock = backend.clock
        self.store = _Fifo()  # GCS: set_resource, placement groups
        self.driver = _Fifo()  # the submitting process
        self.started = 0
        self.latency: float | None = None
        self.labels = [f"gang-m{i}" for i in range(p.members)]
        self.ready_at: dict[int, float] = {}

    def cost(self, seconds: float) -> float:
        sigma = self.p.jitter_sigma
        return seconds * self.rng.lognormvariate(-(sigma**2) / 2, sigma)

    def at(self, when: float, fn: Callable[[], Any]) -> None:
        self.clock.call_later(max(0.0, when - self.clock.now()), fn)

    # --- members -------------------------------------------------------------------------
    def _member_started(self) -> None:
        self.started += 1
        if self.started == self.p.members:
            self.latency = self.clock.now()

    def submit_members(self, t0: float, requests: list[Resources]) -> None:
        for request in requests:
            when = self.driver.serve(t0, self.cost(self.p.submit_s))
            self.at(when, functools.partial(self._launch_member, request))

    def _launch_member(self, request: Resources) -> None:
        delay = self.cost(self.p.dispatch_s)
        spec = TaskSpec(fn=self._delayed_start, args=(delay,), resources=request, name="member")
        self.backend.launch(spec)

    def _delayed_start(self, delay: float) -> None:
        self.at(self.clock.now() + delay, self._member_started)
        self.backend.add_duration(delay + 1.0)

    # --- protocols -----------------------------------------------------------------------
    def native(self) -> None:
        spanned = math.ceil(self.p.members / self.p.cpus_per_node)
        ready = self.store.serve(0.0, self.cost(self.p.pg_base_s + spanned * self.p.pg_per_node_s))
        gang = esl.Gang(self.backend, mode="native", name="native")

        def launch() -> None:  # the bundles are reserved: members go in as one gang
            delays = [
                self.driver.serve(ready, self.cost(self.p.submit_s)) - ready
                for _ in range(self.p.members)
            ]
            members = [
                esl.Member(
                    self._delayed_start, (d + self.cost(self.p.dispatch_s),), resources={"CPU": 1}
                )
                for d in delays
            ]
            gang.run(members)

        self.at(ready, launch)

    def ghosts(self) -> None:
        for i, label in enumerate(self.labels):
            when = self.driver.serve(0.0, self.cost(self.p.submit_s))
            self.at(when, functools.partial(self._launch_ghost, i, label))
        if self.variant == "esl":
            self.at(self.p.poll_s, self._poll)
        else:
            self.at(0.0, lambda: self._wait_each(0, 0.0))

    def _launch_ghost(self, index: int, label: str) -> None:
        spec = TaskSpec(
            fn=self._ghost,
            args=(index, label),
            resources=Resources({"CPU": 1}),
            name="ghost",
            duration=3600.0,
        )
        self.backend.launch(spec)

    def _ghost(self, index: int, label: str) -> None:
        context = current_task()
        assert context is not None
        node = context.node_id
        start = self.clock.now() + self.cost(self.p.dispatch_s)
        done = self.store.serve(start, self.cost(self.p.set_resource_s))

        def create() -> None:
            self.backend.set_resource(label, 1, node)
            self.ready_at[index] = self.clock.now()

        self.at(done, create)

    def _poll(self) -> None:
        reply = self.clock.now() + self.cost(self.p.state_s)
        state = self.backend.get_cluster_state()
        complete = all(state.holding(label) for label in self.labels)

        def answer() -> None:
            if complete:
                self.submit_members(
                    self.clock.now(), [Resources({label: 1}) for label in self.labels]
                )
            else:
                self.at(self.clock.now() + self.p.poll_s, self._poll)

        self.at(reply, answer)

    def _wait_each(self, index: int, _: float) -> None:
        if index == self.p.members:
            self.submit_members(self.clock.now(), [Resources({lb: 1}) for lb in self.labels])
            return
        ready = self.ready_at.get(index)
        if ready is None:  # not ready yet: the blocking get returns when it is
            self.at(self.clock.now() + self.p.get_s, lambda: self._wait_each(index, 0.0))
            return
        reply = max(self.clock.now(), ready) + self.cost(self.p.get_s)
        self.at(reply, lambda: self._wait_each(index + 1, 0.0))


def simulate(variant: str, p: Params, seed: int, meter: Meter) -> list[float]:
    """`p.trials` gang requests, each on a fresh idle cluster; latencies in seconds."""
    check_variant(variant, VARIANTS)
    rng = random.Random(seed)
    cluster = {f"n{i:02d}": {"CPU": p.cpus_per_node} for i in range(p.nodes)}
    latencies = []
    for _ in range(p.trials):
        with meter.simulate(cluster) as backend:
            trial = _Trial(variant, p, backend, rng)
            if variant == "native":
                trial.native()
            else:
                trial.ghosts()
            backend.run(60.0)
            if trial.latency is None:
                raise RuntimeError(f"{variant}: the gang never started in simulation")
            latencies.append(trial.latency)
    return latencies


def latency_rows(result: Result, latencies: dict[str, list[float]]) -> None:
    """One table row per variant: median latency (ms) beside the paper's, and the P95."""
    for v in VARIANTS:
        result.add(
            f"median latency ms: {v}",
            round(1000 * median(latencies[v]), 1),
            PAPER_MS[v],
            f"P95 {1000 * percentile(latencies[v], 95):.1f} ms",
        )


def latency_bars(
    ax: Any, latencies: dict[str, list[float]], ticks: list[str], label: str, **kwargs: Any
) -> None:
    """Median latency (ms) per variant on `ax`, beside the paper's (see `bars_beside_paper`)."""
    ours = [1000 * median(latencies[v]) for v in VARIANTS]
    bars_beside_paper(ax, ticks, ours, [PAPER_MS[v] for v in VARIANTS], label, **kwargs)


def run(quick: bool = False, seed: int = 0) -> Result:
    """Simulated latencies at 32 nodes / 256 CPUs, a gang-size sweep, a real-time check."""
    p = Params(trials=5) if quick else Params()
    result = Result(NAME, "Gang scheduling latency (32 nodes, 256 CPUs)", plot=plot)
    result.params = {**asdict(p), "seed": seed}
    lat = {v: simulate(v, p, seed, result.meter) for v in VARIANTS}
    latency_rows(result, lat)
    result.add(
        "esl / native",
        round(median(lat["esl"]) / median(lat["native"]), 2),
        round(PAPER_MS["esl"] / PAPER_MS["native"], 2),
        "ratio of medians",
    )
    result.add(
        "app / esl",
        round(median(lat["app"]) / median(lat["esl"]), 3),
        round(PAPER_MS["app"] / PAPER_MS["esl"], 3),
        "ratio of medians",
    )
    sweep = []
    for size in (32, 64, 128, 256):
        q = replace(p, members=size, trials=3)
        sweep.append(
            {
                "members": size,
                **{v: 1000 * median(simulate(v, q, seed, result.meter)) for v in VARIANTS},
            }
        )
    real = {m: _realtime(m, 3 if quick else 10) for m in ("native", "ephemeral")}
    for m, values in real.items():
        result.add(
            f"real-time memory backend, 8 members: {m} ms",
            round(1000 * statistics.median(values), 1),
            "",
            "wall clock, median",
        )
    result.data = {"latencies": lat, "sweep": sweep, "realtime": real}
    return result


def _realtime(mode: str, trials: int) -> list[float]:
    members = 8
    cluster = {f"r{i}": {"CPU": 2} for i in range(members // 2)}
    latencies = []
    backend = MemoryBackend(nodes=cluster, max_workers=4 * members)
    try:
        gang = esl.Gang(backend, mode=mode, poll=0.005, timeout=5.0, seed=0, name=f"rt-{mode}")
        for _ in range(trials):
            started: list[float] = []
            lock = threading.Lock()
            release = threading.Event()

            def body(
                started: list[float] = started,
                lock: threading.Lock = lock,
                release: threading.Event = release,
            ) -> None:
                with lock:
                    started.append(time.perf_counter())
                release.wait(10.0)

            t0 = time.perf_counter()
            run = gang.run([esl.Member(body, resources={"CPU": 1}) for _ in range(members)])
            deadline = t0 + 10.0
            while len(started) < members and time.perf_counter() < deadline:
                time.sleep(0.001)
            release.set()
            run.results(10.0)
            if len(started) < members:
                raise RuntimeError(f"real-time {mode} gang did not start within 10 s")
            latencies.append(max(started) - t0)
            time.sleep(0.05)  # let the ghosts release their CPUs
        gang.close()
    finally:
        backend.close()
    return latencies


def plot(result: Result) -> Any:
    """Median latency per variant beside the paper, and latency vs gang size with the paper's."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    latency_bars(
        left, result.data["latencies"], ["native", "gang ESL", "app-level"], "ours (simulated)"
    )
    left.set_ylabel("median latency (ms)")
    left.set_title("256-member gang, 32 nodes")
    left.legend(fontsize=8)
    sweep = result.data["sweep"]
    members = [s["members"] for s in sweep]
    for i, v in enumerate(VARIANTS):
        right.plot(members, [s[v] for s in sweep], label=f"ours: {_NAMES[v]}", **style(i))
        right.plot(
            [256],
            [PAPER_MS[v]],
            linestyle="none",
            markersize=9,
            markerfacecolor="none",
            markeredgewidth=1.5,
            label=f"paper: {_NAMES[v]}",
            **{k: x for k, x in style(i).items() if k != "linestyle"},
        )
    last = sweep[-1]
    gap = abs(last["esl"] - last["app"]) / max(last["esl"], last["app"])
    if gap < 0.03:  # the two lines lie on each other: say so where they do
        right.annotate(
            f"gang ESL and app-level: within {100 * gap:.1f}%",
            xy=(last["members"], last["esl"]),
            xytext=(0.35, 0.55),
            textcoords="axes fraction",
            fontsize=7,
            arrowprops={"arrowstyle": "->", "color": "0.3"},
        )
    right.set_xlim(0, None)
    from_zero(right)
    right.set_xlabel("gang members (1 CPU each)")
    right.set_ylabel("median latency (ms)")
    right.set_title("latency vs gang size (paper: 256 members)")
    right.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


_NAMES = {"native": "native", "esl": "gang ESL", "app": "app-level"}
