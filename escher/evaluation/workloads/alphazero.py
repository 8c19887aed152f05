"""AlphaZero-like self-play: co-locate board generation with its GPU evaluation.

The paper's AlphaZero on Ray (32 nodes, 128 GPUs) runs one pipeline per GPU: a CPU task
generates board states, a GPU task evaluates them, and the states move between the two
tasks' nodes unless they share one. Three variants, same seed:

* ``unaware``: generation asks for 1 CPU, evaluation for 1 GPU, each pinned to a seeded
  random node among those with the resource free at launch: a spreading scheduler that
  does not know the two tasks exchange data (the paper's locality-unaware baseline).
* ``firstfit``: the same requests placed by the in-memory backend's own matcher (first
  node that fits): locality-unaware *and* packing, so transfers pile onto a few nodes'
  network interfaces (a worse baseline, shown for contrast).
* ``escher``: the paper's composition, five lines of user code::

      lb = esl.LoadBalance(backend, tasks=pipelines)            # spread pipelines
      colo = esl.CoLocation(backend)
      pipe = [colo.unknown_group(f"pipe-{p}", policy=lb) for p in range(pipelines)]
      pipe[p].launch(generate, resources={"CPU": 1}, ...)      # lands anywhere, once
      pipe[p].launch(evaluate, resources={"GPU": 1}, ...)      # follows it

  The first generation task of a pipeline creates the pipeline's resource where it lands
  (charged `set_resource_s`, the paper's measured ~1 ms); later tasks follow it there.
* ``hardcoded``: pipeline p is pinned to node p // gpus_per_node by a node-defined
  ``host-<node>`` resource: what a hand-written placement does, with no ephemeral resource.

Model: each iteration = generation (seeded log-normal around `gen_s`) then evaluation
(around `eval_s`). If the evaluation lands on another node than its generation, the
`state_mb` batch crosses both nodes' network interfaces, FIFO links of `nic_gbps` plus
`latency_s` (`escher.evaluation._core.transfer`); the fetch is added to the evaluation's
duration from where it actually landed. Latency of an iteration = generation submitted to
evaluation done. Exploration throughput = iterations per simulated second.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, replace
from typing import Any

from escher import esl
from escher.core.context import current_task
from escher.core.resources import Resources
from escher.core.task import TaskRef, TaskSpec
from escher.evaluation._core import (
    PAPER_STYLE,
    Link,
    Meter,
    Result,
    check_variant,
    from_zero,
    median,
    percentile,
    pyplot,
    quantiles,
    style,
    transfer,
)

NAME = "alphazero"
VARIANTS = ("unaware", "firstfit", "escher", "hardcoded")


@dataclass(frozen=True)
class Params:
    """The model's parameters (all stated in the results)."""

    nodes: int = 32
    gpus_per_node: int = 4
    cpus_per_node: int = 16
    iterations: int = 40
    gen_s: float = 0.5
    gen_sigma: float = 0.3
    eval_s: float = 0.1
    eval_sigma: float = 0.2
    state_mb: float = 64.0
    nic_gbps: float = 10.0
    latency_s: float = 0.005
    set_resource_s: float = 0.001  # paper: ~1 ms per set_resource on Ray

    @property
    def pipelines(self) -> int:
        return self.nodes * self.gpus_per_node


def _cluster(p: Params) -> dict[str, dict[str, float]]:
    return {
        f"n{i:02d}": {"CPU": p.cpus_per_node, "GPU": p.gpus_per_node, f"host-n{i:02d}": 1000}
        for i in range(p.nodes)
    }


def _lognormal(rng: random.Random, mean: float, sigma: float) -> float:
    return rng.lognormvariate(math.log(mean) - sigma**2 / 2, sigma)


class _Pipelines:
    """The state of one simulation: links, per-pipeline progress, latencies."""

    def __init__(self, variant: str, p: Params, backend: Any, rng: random.Random) -> None:
        self.variant, self.p, self.backend, self.rng = variant, p, backend, rng
        ids = sorted(_cluster(p))
        self.ids = ids
        bandwidth = p.nic_gbps * 1e9 / 8
        self.out = {n: Link(bandwidth) for n in ids}
        self.inn = {n: Link(bandwidth) for n in ids}
        self.latencies: list[float] = []
        self.transfers = 0
        self.groups: list[Any] = []
        self.policies: list[Any] = []
        if variant == "escher":  # the five lines of the paper (see the module docstring)
            lb = esl.LoadBalance(backend, tasks=p.pipelines, name="az-lb")
            colo = esl.CoLocation(backend, name="az-colo")
            self.groups = [colo.unknown_group(f"pipe-{k}", policy=lb) for k in range(p.pipelines)]
            self.policies = [lb, colo]

    # --- task bodies (run at the task's start, on its node) ------------------------------
    def generate(self, pipe: int, first: bool) -> None:
        if first and self.variant == "escher":  # the leader's set_resource call
            self.backend.add_duration(self.p.set_resource_s)

    def evaluate(self, source: str) -> None:
        context = current_task()
        assert context is not None
        if context.node_id != source:
            self.transfers += 1
            self.backend.add_duration(
                transfer(
                    self.backend.clock.now(),
                    [self.out[source], self.inn[context.node_id]],
                    self.p.state_mb * 1e6,
                    self.p.latency_s,
                )
            )

    # --- driving -------------------------------------------------------------------------
    def _launch(
        self, pipe: int, fn: Any, args: tuple[Any, ...], request: dict[str, float], duration: float
    ) -> TaskRef:
        if self.variant == "escher":
            ref: TaskRef = self.groups[pipe].launch(fn, *args, resources=request, duration=duration)
            return ref
        if self.variant == "hardcoded":
            request = {**request, f"host-{self.ids[pipe // self.p.gpus_per_node]}": 1}
        elif self.variant == "unaware":
            (name,) = request
            state = self.backend.get_cluster_state()
            free = [n for n in self.ids if state.nodes[n].available.get(name, 0.0) >= 1]
            request = {**request, f"host-{self.rng.choice(free or self.ids)}": 1}
        launched: TaskRef = self.backend.launch(
            TaskSpec(fn=fn, args=args, resources=Resources(request), duration=duration)
        )
        return launched

    def start(self, pipe: int, iteration: int) -> None:
        if iteration >= self.p.iterations:
            return
        submitted = self.backend.clock.now()
        gen = self._launch(
            pipe,
            self.generate,
            (pipe, iteration == 0),
            {"CPU": 1},
            _lognormal(self.rng, self.p.gen_s, self.p.gen_sigma),
        )
        eval_s = _lognormal(self.rng, self.p.eval_s, self.p.eval_sigma)

        def generated(ref: TaskRef) -> None:
            assert ref.node_id is not None
            ev = self._launch(pipe, self.evaluate, (ref.node_id,), {"GPU": 1}, eval_s)

            def evaluated(_: TaskRef) -> None:
                self.latencies.append(self.backend.clock.now() - submitted)
                self.start(pipe, iteration + 1)

            ev.add_done_callback(evaluated)

        gen.add_done_callback(generated)


def simulate(variant: str, p: Params, seed: int, meter: Meter) -> dict[str, Any]:
    """One run of every pipeline for `p.iterations` iterations."""
    check_variant(variant, VARIANTS)
    with meter.simulate(_cluster(p)) as backend:
        sim = _Pipelines(variant, p, backend, random.Random(seed))
        for pipe in range(p.pipelines):
            sim.start(pipe, 0)
        backend.run()
        makespan = backend.clock.now()
        for policy in sim.policies:
            policy.close()
    lat = sim.latencies
    return {
        "variant": variant,
        "median": median(lat),
        "p95": percentile(lat, 95),
        "throughput": len(lat) / makespan,
        "makespan": makespan,
        "iterations": len(lat),
        "transfers": sim.transfers,
        "latencies": lat,
    }


def run(quick: bool = False, seed: int = 0) -> Result:
    """The three variants at 32 nodes / 128 GPUs, plus a sweep over the state size."""
    p = Params(iterations=10) if quick else Params()
    result = Result(NAME, "AlphaZero self-play: co-location + load balancing", plot=plot)
    result.params = {**asdict(p), "seed": seed}
    runs = {v: simulate(v, p, seed, result.meter) for v in VARIANTS}
    un, ours, hard = runs["unaware"], runs["escher"], runs["hardcoded"]
    result.add("median latency s: unaware (spread)", round(un["median"], 4))
    result.add("median latency s: unaware (first-fit)", round(runs["firstfit"]["median"], 4))
    result.add("median latency s: escher", round(ours["median"], 4))
    result.add("median latency s: hard-coded", round(hard["median"], 4))
    result.add(
        "median latency better than unaware, %",
        round(100 * (1 - ours["median"] / un["median"]), 1),
        PAPER_MEDIAN_GAIN,
    )
    result.add(
        "P95 latency better than unaware, %", round(100 * (1 - ours["p95"] / un["p95"]), 1), 20.0
    )
    result.add(
        "exploration throughput escher / unaware",
        round(ours["throughput"] / un["throughput"], 2),
        "1.5-2x",
        "slides",
    )
    result.add(
        "overhead vs hard-coded (makespan), %",
        round(100 * (ours["makespan"] / hard["makespan"] - 1), 3),
        "< 1",
    )
    ff = runs["firstfit"]
    result.add(
        "first-fit baseline: escher median better, %",
        round(100 * (1 - ours["median"] / ff["median"]), 1),
        "",
        f"throughput x{ours['throughput'] / ff['throughput']:.2f}",
    )
    result.add(
        "evaluations fetching remote states: unaware",
        f"{un['transfers']} / {un['iterations']}",
        "",
        f"first-fit {ff['transfers']}, escher {ours['transfers']}, hard-coded {hard['transfers']}",
    )
    sizes = [16.0, 64.0, 256.0] if quick else [8.0, 16.0, 32.0, 64.0, 128.0, 256.0]
    sweep = []
    for size in sizes:
        q = replace(p, state_mb=size, iterations=min(p.iterations, 10))
        a = simulate("unaware", q, seed, result.meter)
        b = simulate("escher", q, seed, result.meter)
        sweep.append(
            {
                "state_mb": size,
                "median_gain": 100 * (1 - b["median"] / a["median"]),
                "p95_gain": 100 * (1 - b["p95"] / a["p95"]),
                "speedup": b["throughput"] / a["throughput"],
            }
        )
    result.data = {
        "runs": {v: {k: x for k, x in r.items() if k != "latencies"} for v, r in runs.items()},
        "latency_quantiles": {v: quantiles(r["latencies"]) for v, r in runs.items()},
        "sweep": sweep,
    }
    return result


PAPER_MEDIAN_GAIN, PAPER_P95_GAIN = 15.4, 20.0
_LABELS = {
    "unaware": "unaware (spread)",
    "firstfit": "unaware (first-fit)",
    "escher": "escher (ESL)",
    "hardcoded": "hard-coded placement",
}


def plot(result: Result) -> Any:
    """Latency CDFs (all, then zoomed on the close ones with the paper's median gain), and the
    gain vs the state size beside the paper's."""
    plt = pyplot()
    fig, (full, zoom, right) = plt.subplots(1, 3, figsize=(14, 4))
    cdfs = result.data["latency_quantiles"]
    close = [v for v in VARIANTS if v != "firstfit"]
    for ax, shown in ((full, VARIANTS), (zoom, close)):
        for variant in shown:
            xs = cdfs[variant]
            ys = [k / (len(xs) - 1) for k in range(len(xs))]
            wide = {"linewidth": 4, "alpha": 0.45} if variant == "escher" else {"linewidth": 1.5}
            kwargs = {**style(VARIANTS.index(variant)), **wide}
            ax.plot(xs, ys, label=_LABELS[variant], markevery=25, markersize=5, **kwargs)
        ax.set_xlim(0, None)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("iteration latency (simulated s)")
    zoom.set_xlim(0, max(cdfs[v][-1] for v in close) * 1.05)
    unaware = median(cdfs["unaware"])
    zoom.axvline(
        unaware * (1 - PAPER_MEDIAN_GAIN / 100),
        label=f"paper: escher's median,\n{PAPER_MEDIAN_GAIN}% below unaware's",
        **PAPER_STYLE,
    )
    full.set_ylabel("fraction of iterations (CDF)")
    full.set_title(f"latency CDF, state {result.params['state_mb']:g} MB")
    full.legend(fontsize=7, loc="center right")
    zoom.set_title("zoom: without first-fit")
    zoom.legend(fontsize=7, loc="lower right")
    sweep = result.data["sweep"]
    xs = [s["state_mb"] for s in sweep]
    right.plot(xs, [s["median_gain"] for s in sweep], label="ours: median", **style(0))
    right.plot(xs, [s["p95_gain"] for s in sweep], label="ours: P95", **style(1))
    right.axhline(PAPER_MEDIAN_GAIN, label=f"paper: median {PAPER_MEDIAN_GAIN}%", **PAPER_STYLE)
    right.axhline(
        PAPER_P95_GAIN, label=f"paper: P95 {PAPER_P95_GAIN:g}%", **{**PAPER_STYLE, "color": "0.7"}
    )
    right.set_xscale("log", base=2)
    from_zero(right)
    right.set_xlabel("state batch per iteration (MB, log scale)")
    right.set_ylabel("latency better than unaware (%)")
    right.set_title("co-location gain vs transfer size")
    right.legend(fontsize=7)
    fig.tight_layout()
    return fig
