"""Gang scheduling latency on a real local Ray cluster, at small scale.

Four members of ``{CPU: 2}`` on four 2-CPU worker nodes (head with no CPUs): the gang fills
the cluster, so no member can start unless all can. Three paths, same run, interleaved:

* **native**: `esl.Gang(mode="native")`, which uses Ray placement groups (`launch_gang`).
* **esl**: `esl.Gang(mode="ephemeral")`, the paper's ghost protocol through ephemeral resources.
* **app**: the same protocol written in the application with the plain API (`launch`,
  `set_resource`, `get_cluster_state`), waiting on each ghost in turn.

Latency: from the request to the last member's start (members report their start time).
Needs the ``ray`` extra; starts its own cluster unless `measure` is given a backend.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from escher import api, esl
from escher.backends.base import Backend
from escher.core.errors import BackendUnavailableError, GetTimeoutError
from escher.evaluation._core import Result, median, pyplot
from escher.evaluation.workloads.gang import VARIANTS, latency_bars, latency_rows

NAME = "gang-ray"
MEMBERS = 4
MEMBER_CPUS = 2
POLL = 0.02
WAIT = 60.0


def member_start() -> float:
    """A member's body: report when it started (wall clock, same machine)."""
    return time.time()


def app_ghost(label: str, poll: float, max_hold: float) -> None:
    """The application's ghost: create `label` here, hold this task's CPUs until it is gone."""
    api.set_resource(label, 1)  # on the node this ghost landed on
    node = api.node_id()
    deadline = time.monotonic() + max_hold
    while time.monotonic() < deadline:
        here = api.get_cluster_state().nodes.get(node)
        if here is None or label not in here.total:
            return
        time.sleep(poll)


def app_gang(tag: str) -> float:
    """A gang written in the application with the plain API; returns the latency (s)."""
    labels = [f"{tag}-m{i}" for i in range(MEMBERS)]
    t0 = time.time()
    ghosts = [
        api.launch(app_ghost, label, POLL, WAIT, resources={"CPU": MEMBER_CPUS}) for label in labels
    ]
    where: dict[str, str] = {}
    deadline = time.monotonic() + WAIT
    for label in labels:  # wait on each ghost in turn
        while label not in where:
            holders = api.get_cluster_state().holding(label)
            if holders:
                where[label] = next(iter(holders))
            elif time.monotonic() > deadline:
                raise GetTimeoutError(f"app-level ghost for {label} did not start in {WAIT} s")
            else:
                time.sleep(POLL)
    members = [api.launch(member_start, resources={label: 1}) for label in labels]
    starts = api.get(members, timeout=WAIT)
    latency = max(starts) - t0
    for label in labels:  # release: the ghosts see their label gone and return
        api.set_resource(label, 0, where[label])
    api.get(ghosts, timeout=WAIT)
    return float(latency)


def esl_gang(gang: esl.Gang) -> float:
    """One gang through the ESL (either mode); returns the latency in seconds."""
    t0 = time.time()
    run = gang.run([esl.Member(member_start, resources={"CPU": MEMBER_CPUS})] * MEMBERS)
    starts = run.results(WAIT)
    return float(max(starts) - t0)


def measure(backend: Backend, trials: int, pause: float = 0.5) -> dict[str, list[float]]:
    """Latencies (s) per variant, the variants interleaved trial by trial.

    `backend` must be the active one (`escher.init(backend)`): the app path uses the plain API.
    """
    latencies: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with (
        esl.Gang(backend, mode="native", name="bench-native") as native,
        esl.Gang(backend, mode="ephemeral", poll=POLL, timeout=10.0, seed=0) as ghosts,
    ):
        paths: dict[str, Callable[[int], float]] = {
            "native": lambda _: esl_gang(native),
            "esl": lambda _: esl_gang(ghosts),
            "app": lambda trial: app_gang(f"bench-app-{trial}"),
        }
        for variant in VARIANTS:  # warm-up: worker processes, first placement group
            paths[variant](-1 - VARIANTS.index(variant))
        for trial in range(trials):
            for variant in VARIANTS:
                time.sleep(pause)  # let the previous gang's CPUs come back
                latencies[variant].append(paths[variant](trial))
    return latencies


def _start_cluster() -> tuple[Any, Backend]:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
        from ray.cluster_utils import Cluster
    except ImportError as exc:
        raise BackendUnavailableError(
            f"the gang-ray workload needs Ray ({exc}): pip install 'escher-sched[ray]'"
        ) from None
    from escher.backends.ray import RayBackend

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "include_dashboard": False,
            "object_store_memory": 80 * 2**20,
            # Idle workers stay: every path needs a second worker per node (ghost + member).
            "_system_config": {"idle_worker_killing_time_threshold_ms": 600_000},
        },
    )
    for _ in range(MEMBERS):
        cluster.add_node(num_cpus=MEMBER_CPUS, object_store_memory=80 * 2**20)
    ray.init(address=cluster.address, namespace="escher-bench", log_to_driver=False)
    cluster.wait_for_nodes(timeout=120)
    return cluster, RayBackend(address=cluster.address, namespace="escher-bench")


def run(quick: bool = False, seed: int = 0) -> Result:
    """Start a local Ray cluster (head + 4 x 2 CPUs), measure, stop it."""
    trials = 3 if quick else 10
    cluster, backend = _start_cluster()
    try:
        api.init(backend)
        latencies = measure(backend, trials)
    finally:
        api.shutdown()
        import ray

        ray.shutdown()
        cluster.shutdown()
    return summarise(latencies, seed)


def summarise(latencies: dict[str, list[float]], seed: int = 0) -> Result:
    """The paper-vs-ours table for measured latencies."""
    result = Result(NAME, "Gang latency on a real local Ray cluster (4 nodes x 2 CPUs)")
    result.plot = plot
    result.params = {
        "members": MEMBERS,
        "member_cpus": MEMBER_CPUS,
        "poll_s": POLL,
        "trials": len(latencies["native"]),
        "seed": seed,
    }
    result.data = {"latencies": latencies}
    latency_rows(result, latencies)
    native = median(latencies["native"])
    result.add("esl / native", round(median(latencies["esl"]) / native, 2), 2.34, "medians")
    result.add("app / esl", round(median(latencies["app"]) / median(latencies["esl"]), 2), 1.05)
    return result


def plot(result: Result) -> Any:
    """Median latency per path beside the paper's (different scale: 4 vs 32 nodes)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    latency_bars(
        ax,
        result.data["latencies"],
        ["native (PG)", "gang ESL", "app-level"],
        "ours (4 nodes)",
        paper_label="paper (32 nodes)",
    )
    ax.set_ylabel("median latency (ms)")
    ax.set_title("4-member gang on real Ray, 4 nodes")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
