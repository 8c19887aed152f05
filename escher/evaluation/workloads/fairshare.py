"""Hierarchical fair sharing: two organisations, users with weights 2:3, a third user later.

The paper shows, for its hierarchical fair-sharing ESL, that the users' shares of the
cluster follow their weights as users arrive. Timeline here (same seed for both variants):

* t=0: organisation A's user u1 (weight 2) arrives with a backlog of tasks;
* t=60: A's user u2 (weight 3) arrives: within A, u1:u2 should be 2:3;
* t=120: organisation B (same weight as A) and its user u3 arrive: A gets half, split 2:3
  between u1 and u2 (20% / 30%), u3 gets 50%.

Variants: ``fifo`` (no policy: tasks run in submission order) and ``escher``
(`esl.FairShare` at the root with one child `FairShare` per organisation). An organisation
is created when its first user arrives, so no share is held idle. Every user submits
`backlog` 1-CPU tasks of seeded uniform(`task_min_s`, `task_max_s`) seconds on arrival.
Shares = CPU-seconds per user in `window_s` windows; the steady share of a phase is the
mean over the phase without its first `settle_s` seconds (no preemption: running tasks of
the previous split finish first).
"""

from __future__ import annotations

import functools
import itertools
import random
from dataclasses import asdict, dataclass, replace
from typing import Any

from escher import esl
from escher.core.resources import Resources
from escher.core.task import TaskSpec
from escher.evaluation._core import Meter, Result, check_variant, pyplot

NAME = "fairshare"
VARIANTS = ("fifo", "escher")
USERS = ("u1", "u2", "u3")
#: (arrival time, organisation, user, weight in its organisation)
ARRIVALS = ((0.0, "org-a", "u1", 2.0), (60.0, "org-a", "u2", 3.0), (120.0, "org-b", "u3", 1.0))
#: Expected steady shares per phase (the weights).
EXPECTED = {
    0: {"u1": 1.0, "u2": 0.0, "u3": 0.0},
    60: {"u1": 0.4, "u2": 0.6, "u3": 0.0},
    120: {"u1": 0.2, "u2": 0.3, "u3": 0.5},
}


@dataclass(frozen=True)
class Params:
    """The model's parameters (all stated in the results)."""

    nodes: int = 10
    cpus_per_node: int = 20
    backlog: int = 12000
    task_min_s: float = 1.0
    task_max_s: float = 3.0
    end_s: float = 180.0
    window_s: float = 5.0
    settle_s: float = 10.0


def simulate(variant: str, p: Params, seed: int, meter: Meter) -> dict[str, Any]:
    """One run; per-window shares and the steady share of each user in each phase."""
    check_variant(variant, VARIANTS)
    rng = random.Random(seed)
    cluster = {f"n{i:02d}": {"CPU": p.cpus_per_node} for i in range(p.nodes)}
    busy: dict[str, list[tuple[float, float]]] = {u: [] for u in USERS}
    with meter.simulate(cluster) as backend:
        root = esl.FairShare(backend, name="root") if variant == "escher" else None
        orgs: dict[str, Any] = {}

        def work(user: str, seconds: float) -> None:
            start = backend.clock.now()
            busy[user].append((start, start + seconds))

        def arrive(org: str, user: str, weight: float) -> None:
            policy = None
            if root is not None:
                if org not in orgs:
                    root.create_user(org, 1.0)
                    orgs[org] = root.child(org)
                policy = orgs[org].create_user(user, weight)
            for _ in range(p.backlog):
                seconds = rng.uniform(p.task_min_s, p.task_max_s)
                if policy is not None:
                    policy.launch(work, user, seconds, resources={"CPU": 1}, duration=seconds)
                else:
                    backend.launch(
                        TaskSpec(
                            fn=work,
                            args=(user, seconds),
                            resources=Resources({"CPU": 1}),
                            duration=seconds,
                        )
                    )

        for when, org, user, weight in ARRIVALS:
            backend.clock.call_later(when, functools.partial(arrive, org, user, weight))
        backend.run(p.end_s)
        if root is not None:
            root.close()
    capacity = p.nodes * p.cpus_per_node
    edges = [i * p.window_s for i in range(int(p.end_s / p.window_s) + 1)]
    windows = []
    for lo, hi in itertools.pairwise(edges):
        used = {u: sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in busy[u]) for u in USERS}
        windows.append({"t": lo, **{u: used[u] / (capacity * (hi - lo)) for u in USERS}})
    phases: dict[int, dict[str, float]] = {}
    starts = sorted(EXPECTED)
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else p.end_s
        inside = [w for w in windows if start + p.settle_s <= w["t"] < end]
        total = {u: sum(w[u] for w in inside) for u in USERS}
        whole = sum(total.values()) or 1.0
        phases[int(start)] = {u: total[u] / whole for u in USERS}
    return {"variant": variant, "windows": windows, "phases": phases}


def run(quick: bool = False, seed: int = 0) -> Result:
    """FIFO vs hierarchical fair sharing; plus the same on 8-CPU nodes (whole-slot rounding)."""
    p = Params(nodes=4, backlog=5000) if quick else Params()
    result = Result(
        NAME, "Hierarchical fair sharing: shares over time follow the weights", plot=plot
    )
    result.params = {**asdict(p), "seed": seed, "arrivals": ARRIVALS}
    runs = {v: simulate(v, p, seed, result.meter) for v in VARIANTS}
    worst = 0.0
    for start, expected in EXPECTED.items():
        for user in USERS:
            if start == 0 and user != "u1":
                continue
            ours = runs["escher"]["phases"][start][user]
            fifo = runs["fifo"]["phases"][start][user]
            worst = max(worst, abs(ours - expected[user]))
            result.add(
                f"t={start}-: {user} share (fifo {fifo:.2f})",
                round(ours, 3),
                expected[user],
                "paper: follows the weights",
            )
    result.add("largest deviation from the weights", round(worst, 3), "", "share of the cluster")
    small = replace(p, cpus_per_node=8)
    rounded = simulate("escher", small, seed, result.meter)["phases"]
    result.add(
        "8-CPU nodes, t=60-: u1 share",
        round(rounded[60]["u1"], 3),
        0.4,
        "cluster-wide split: 80 slots 2:3 -> 32:48",
    )
    result.add(
        "8-CPU nodes, t=120-: u1 share",
        round(rounded[120]["u1"], 3),
        0.2,
        "cluster-wide split: org A's 40 slots 2:3 -> 16:24",
    )
    result.data = {"runs": runs, "rounded": rounded}
    return result


def plot(result: Result) -> Any:
    """Stacked shares over time, FIFO beside the fair-sharing ESL, with the weighted targets."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 3.8), sharey=True)
    for ax, variant in zip(axes, VARIANTS, strict=True):
        windows = result.data["runs"][variant]["windows"]
        ts = [w["t"] for w in windows]
        shares = [[w[u] for w in windows] for u in USERS]
        ax.stackplot(ts, *shares, labels=list(USERS), step="post", alpha=0.85)
        target = "weighted target share"
        for start, expected in EXPECTED.items():
            level = 0.0
            for u in USERS:
                level += expected[u]
                if 0 < level < 1:
                    end = min([s for s in EXPECTED if s > start] or [ts[-1] + 5])
                    ax.hlines(
                        level, start, end, colors="k", linestyles="dotted", lw=1.2, label=target
                    )
                    target = "_"
        ax.set_title("FIFO (no policy)" if variant == "fifo" else "FairShare ESL")
        ax.set_xlabel("simulated time (s)")
        ax.set_xlim(0, None)
        ax.set_ylim(0, 1.02)
    axes[0].set_ylabel("share of the cluster's CPUs")
    axes[1].legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    return fig
