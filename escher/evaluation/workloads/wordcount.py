"""WordCount (MapReduce) with data locality at 10, 50 and 100 nodes.

The paper ran WordCount on a 100-node Kubernetes cluster and compared the makespan under the
generic scheduler (no locality), Kubernetes' native node affinity, and ESCHER's data-locality
ESL (2 lines). Here the same three variants run on the simulator with the same seed:

* ``generic``: map tasks ask for 1 CPU; the scheduler places them without knowing where
  their input lives.
* ``native``: each node defines a ``host-<node>`` resource (like the kubernetes.io/hostname
  label); a map task asks for the host of its input (node affinity, no ephemeral resource).
* ``escher``: `escher.esl.DataLocality` records each node's shard (one `set_resource` per
  node, charged at `set_resource_s` each before the maps are launched) and map tasks are
  launched with ``loc.near(shard)``.

Model (every number is a parameter in `Params`): the input is `files` files of `file_mb`
MB, one copy each, file i on node i mod N. A map task takes `pod_start_s` + a seeded
log-normal compute time around `map_s`; if its file lives on another node it first fetches
it through the source's and its own network interface, each a FIFO link of `nic_gbps`
(`escher.evaluation._core.transfer`). The fetch time is added to the task's duration from where
the task actually landed (`MemoryBackend.add_duration` from inside the task body). When every
map is done, one reduce task per node runs for `reduce_s`.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from typing import Any

from escher import esl
from escher.core.context import current_task
from escher.core.resources import Resources
from escher.core.task import TaskRef, TaskSpec
from escher.evaluation._core import Link, Meter, Result, check_variant, pyplot, transfer

NAME = "wordcount"
VARIANTS = ("generic", "native", "escher")
#: Paper makespans in seconds (generic, native, escher) by node count (thesis).
PAPER = {10: (183.32, 54.69, 55.24), 50: (113.71, 44.02, 44.71), 100: (51.90, 35.08, 35.76)}


@dataclass(frozen=True)
class Params:
    """The model's parameters (all stated in the results)."""

    files: int = 2000
    file_mb: float = 128.0
    cpus_per_node: int = 4
    map_s: float = 2.0
    map_sigma: float = 0.2
    pod_start_s: float = 1.0
    nic_gbps: float = 1.0
    fetch_latency_s: float = 0.005
    reduce_s: float = 3.0
    set_resource_s: float = 0.004  # node-status patch median (bench/k8s_backend.py)


def _nodes(n: int, cpus: int) -> dict[str, dict[str, float]]:
    return {f"n{i:03d}": {"CPU": cpus, f"host-n{i:03d}": 1000} for i in range(n)}


class _Model:
    """Where each file lives and the links' state during one simulation."""

    def __init__(self, node_ids: list[str], params: Params) -> None:
        self.params = params
        bandwidth = params.nic_gbps * 1e9 / 8
        self.out = {n: Link(bandwidth) for n in node_ids}
        self.inn = {n: Link(bandwidth) for n in node_ids}
        self.remote = 0
        self.fetch_s = 0.0

    def map_body(self, source: str) -> None:
        """Runs at the task's start: charge a fetch if the file is elsewhere."""
        context = current_task()
        assert context is not None
        here, backend = context.node_id, context.backend
        if here == source:
            return
        p = self.params
        seconds = transfer(
            backend.clock.now(),
            [self.out[source], self.inn[here]],
            p.file_mb * 1e6,
            p.fetch_latency_s,
        )
        self.remote += 1
        self.fetch_s += seconds
        backend.add_duration(seconds)


def _noop() -> None:
    return None


def simulate(variant: str, nodes: int, params: Params, seed: int, meter: Meter) -> dict[str, Any]:
    """One run; returns makespan, remote fetches and the time spent fetching."""
    check_variant(variant, VARIANTS)
    rng = random.Random(seed)
    ids = sorted(_nodes(nodes, params.cpus_per_node))
    mu = math.log(params.map_s) - params.map_sigma**2 / 2
    durations = [
        params.pod_start_s + rng.lognormvariate(mu, params.map_sigma) for _ in range(params.files)
    ]
    model = _Model(ids, params)
    with meter.simulate(_nodes(nodes, params.cpus_per_node)) as backend:
        loc = esl.DataLocality(backend, name="wc") if variant == "escher" else None
        done = {"maps": 0}
        reduces: list[TaskRef] = []

        def map_done(_ref: TaskRef) -> None:
            done["maps"] += 1
            if done["maps"] == params.files:
                for nid in ids:
                    reduces.append(
                        backend.launch(
                            TaskSpec(
                                fn=_noop,
                                resources=Resources({"CPU": 1, f"host-{nid}": 1}),
                                duration=params.reduce_s,
                                name="reduce",
                            )
                        )
                    )

        def launch_maps() -> None:
            for f in range(params.files):
                source = ids[f % nodes]
                request = {"CPU": 1.0}
                if variant == "native":
                    request[f"host-{source}"] = 1
                if loc is not None:
                    ref = loc.near(f"shard-{source}").launch(
                        model.map_body, source, resources=request, duration=durations[f]
                    )
                else:
                    ref = backend.launch(
                        TaskSpec(
                            fn=model.map_body,
                            args=(source,),
                            resources=Resources(request),
                            duration=durations[f],
                            name="map",
                        )
                    )
                ref.add_done_callback(map_done)

        delay = 0.0
        if loc is not None:  # the ESL's 2 lines: one label per node's shard
            for nid in ids:
                loc.add(f"shard-{nid}", [nid])
            delay = nodes * params.set_resource_s
        backend.clock.call_later(delay, launch_maps)
        backend.run()
        makespan = backend.clock.now()
        ok = len(reduces) == nodes and all(r.done() for r in reduces)
        if loc is not None:
            loc.close()
    return {
        "variant": variant,
        "nodes": nodes,
        "makespan": makespan,
        "remote": model.remote,
        "fetch_s": model.fetch_s,
        "complete": ok,
    }


def run(quick: bool = False, seed: int = 0) -> Result:
    """All three variants at 10, 50 and 100 nodes (quick: fewer files, 10 and 50 nodes)."""
    params = Params(files=400) if quick else Params()
    sizes = (10, 50) if quick else (10, 50, 100)
    result = Result(
        NAME, "WordCount makespan: generic vs native locality vs DataLocality ESL", plot=plot
    )
    result.params = {**asdict(params), "seed": seed, "nodes": list(sizes)}
    runs = {(n, v): simulate(v, n, params, seed, result.meter) for n in sizes for v in VARIANTS}
    result.data["runs"] = [dict(r) for r in runs.values()]
    for n in sizes:
        generic, native, ours = (runs[(n, v)]["makespan"] for v in VARIANTS)
        paper = PAPER[n]
        result.add(f"{n} nodes: generic makespan s", round(generic, 2), paper[0])
        result.add(f"{n} nodes: native makespan s", round(native, 2), paper[1])
        result.add(f"{n} nodes: escher makespan s", round(ours, 2), paper[2])
        result.add(
            f"{n} nodes: generic / native",
            round(generic / native, 2),
            round(paper[0] / paper[1], 2),
            "ratio",
        )
        result.add(
            f"{n} nodes: escher vs native, %",
            round(100 * (ours / native - 1), 2),
            round(100 * (paper[2] / paper[1] - 1), 2),
            "paper: within 1.9%",
        )
        g = runs[(n, "generic")]
        share = g["fetch_s"] / (g["fetch_s"] + params.files * (params.map_s + params.pod_start_s))
        result.add(
            f"{n} nodes: generic, task time fetching %",
            round(100 * share, 1),
            "up to 58.3",
            f"{g['remote']} of {params.files} maps fetched remotely",
        )
    return result


def plot(result: Result) -> Any:
    """Grouped bars per node count: ours (left) and the paper's (right), one style per variant."""
    plt = pyplot()
    runs = {(r["nodes"], r["variant"]): r["makespan"] for r in result.data["runs"]}
    sizes = sorted({n for n, _ in runs})
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.8))
    width = 0.25
    hatches = ("", "..", "//")
    for ax, (title, source) in zip(
        axes, (("ours (simulated)", "ours"), ("paper (K8s)", "paper")), strict=True
    ):
        for i, variant in enumerate(VARIANTS):
            values = [runs[(n, variant)] if source == "ours" else PAPER[n][i] for n in sizes]
            xs = [k + (i - 1) * width for k in range(len(sizes))]
            ax.bar(xs, values, width, label=variant, color=f"C{i}", hatch=hatches[i])
        ax.set_xticks(range(len(sizes)), [f"{n} nodes" for n in sizes])
        ax.set_ylabel("makespan (s)")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle("WordCount: generic vs native locality vs DataLocality ESL")
    fig.tight_layout()
    return fig
