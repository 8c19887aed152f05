"""Pre-flight verification at scale: `escher verify` vs a straightforward aggregated Z3 encoding.

Every instance is written as a plan file and a cluster file and checked with the command a
user runs, in process (`escher verify PLAN --cluster C`, intent proofs on), and again with
`--no-intents`; the baseline (integer counts per (task shape, node), 0/1 variables per node
only for tasks under intents, one Z3 call, no pre-checks) runs in the same process on the
same instance with a time limit. Columns: seconds to the verdict and in all (default path),
in all with --no-intents, the baseline's, and baseline / default.

Families (expected verdict by construction):

  a  heterogeneous cluster (CPU, large-memory, 8-GPU, FPGA nodes, 20% partly loaded) packed
     to ~95%, with anti-affinity groups (a label per node, Separated) and co-location groups
     (the first task creates the group's label): feasible
  b  as a, plus one GPU task more than the GPUs: infeasible
  c  as a, plus co-locate x-y, y-z and separate x-z: infeasible
  d  fragmentation: 3-GPU tasks, enough GPUs in total, no node with 3 free: infeasible
  t  zero-slack triplets: every node (capacity 1000) filled exactly by three tasks of sizes
     250-500 (60 to 501 tasks): feasible; "t-short" is the same with one node fewer
  q  zero-slack quadruplets: every node (capacity 1000) filled exactly by four tasks of
     sizes 200-300 (80 to 668 tasks): feasible; "q-short" is the same with one node fewer
  m  multi-resource (CPU, memory) packings at 98-100% of capacity on three node types,
     shapes from a catalogue then small fillers: feasible
  u  suffix: the same plan written one entry per task instead of replicas

Engine-table families written twice, by two constructions (`--engines`): g/g-ok and g2/g2-ok
(fragmentation with other GPU shapes), p and p2 (five resources at 98-100%, ~100 shapes),
col* and col2* (colouring: random pairs vs a banded ring of pairs and triangles, each with
and without a clique larger than the nodes), and at 1,000 tasks on 4 nodes col-m* and col3*
(random vs degree-balanced pairs; -k with a 5-clique, -e with capacities that admit only
an equitable colouring); col5* (equitable by construction, 2,500-6,000 uniformly random
pairs: 4,000 lie below the threshold where belief propagation finds the planted colouring).

After the table: per family and size run both ways, the default path's time for the plan
written one entry per task over its time for the same plan with replicas (same run). With
--timeouts S,S,...: `escher verify` run as a command (a fresh process, intent proofs on) on
families a and d at 10,000 nodes with each --timeout, and the wall time of the whole command.
With --seeds N: each selected family and size again with seeds 1..N (the generators' other
instances), default path: how many verdicts agree with the construction, median and slowest.

With --engines: the engine table instead (`engine_instances`: fragmentation with other GPU
shapes, tight 5-resource packings, graph colouring with and without cliques, ...): each
engine alone, then all of them in turn in one process, then side by side (the race: one
process per engine, the first answer wins), in process, each with --engine-timeout; then
side by side again as if the optional packages were not installed. --big adds 10,000 nodes.

    python bench/verify_scaling.py [--quick] [--baseline-timeout S] [--timeout S] [--seed N]
        [--only FAMILIES] [--min-nodes N] [--max-nodes N] [--repeat N] [--timeouts S,S,...]
        [--seeds N] [--engines [--engine-timeout S] [--big]] [--colouring-seeds N,N,...]

With --colouring-seeds: the 1,000- and 2,000-task colourings on those seeds, each with the
command in a fresh process (verdict, wall, CPU of the command and its lanes).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import z3
from click.testing import CliRunner

from escher.cli.verify import verify as verify_cmd
from escher.core.cluster import ClusterState
from escher.core.plan import Colocated, Plan, Separated

NODE_TYPES: dict[str, dict[str, float]] = {
    "cpu": {"CPU": 32, "memory": 128},
    "large": {"CPU": 96, "memory": 768},
    "gpu8": {"CPU": 48, "GPU": 8, "memory": 384},
    "fpga": {"CPU": 16, "FPGA": 2, "memory": 64},
}
MIX = [("cpu", 0.5), ("large", 0.15), ("gpu8", 0.25), ("fpga", 0.10)]
LOADS: dict[str, dict[str, float]] = {
    "cpu": {"CPU": 8, "memory": 32},
    "large": {"CPU": 32, "memory": 256},
    "gpu8": {"CPU": 8, "GPU": 2, "memory": 64},
    "fpga": {"CPU": 4, "FPGA": 1, "memory": 16},
}
SHAPES: dict[str, dict[str, float]] = {
    "small": {"CPU": 2, "memory": 8},
    "medium": {"CPU": 4, "memory": 16},
    "bigmem": {"CPU": 8, "memory": 128},
    "gpu1": {"CPU": 4, "GPU": 1, "memory": 32},
    "gpu3": {"CPU": 4, "GPU": 3, "memory": 32},
    "fpga1": {"CPU": 4, "FPGA": 1, "memory": 16},
}
FILLERS = {
    "cpu": ["small", "medium"],
    "large": ["bigmem", "medium", "small"],
    "gpu8": ["small", "medium"],
    "fpga": ["small"],
}
TINY = {"CPU": 0.1, "memory": 0.1}


def _fits(req: dict[str, float], free: dict[str, float]) -> bool:
    return all(free.get(k, 0) >= v for k, v in req.items())


def _take(req: dict[str, float], free: dict[str, float]) -> None:
    for k, v in req.items():
        free[k] -= v


def _fill_accelerators(kind: str, family: str, free: dict[str, float], tasks: list[str]) -> None:
    if kind == "gpu8":
        shape = "gpu3" if family == "d" else "gpu1"
        while free["GPU"] >= SHAPES[shape]["GPU"]:
            _take(SHAPES[shape], free)
            tasks.append(shape)
        if family == "d" and free["GPU"] >= 2:
            _take(SHAPES["gpu1"], free)
            tasks.append("gpu1")
    if kind == "fpga":
        while free["FPGA"] >= 1:
            _take(SHAPES["fpga1"], free)
            tasks.append("fpga1")


def _cluster_tasks(n_nodes: int, family: str, rng: random.Random) -> tuple[list[Any], list[str]]:
    nodes: list[dict[str, Any]] = []
    tasks: list[str] = []
    for i in range(n_nodes):
        kind = rng.choices([k for k, _ in MIX], [w for _, w in MIX])[0]
        total = dict(NODE_TYPES[kind])
        avail = dict(total)
        if rng.random() < 0.2:
            for k, v in LOADS[kind].items():
                avail[k] -= v
        nodes.append(
            {"id": f"{kind}-{i:05d}", "total": total, "available": avail, "labels": {"type": kind}}
        )
        free = dict(avail)
        _fill_accelerators(kind, family, free, tasks)
        while free["CPU"] > 0.05 * total["CPU"] + 1:  # ~95%, room left for the tiny tasks
            options = [s for s in FILLERS[kind] if _fits(SHAPES[s], free)]
            if not options:
                break
            shape = rng.choice(options)
            _take(SHAPES[shape], free)
            tasks.append(shape)
    return nodes, tasks


def _add_policies(plan: Plan, n_nodes: int, rng: random.Random) -> None:
    """Anti-affinity and co-location groups as the ESLs declare them."""
    for g in range(max(1, n_nodes // 50)):
        label = f"anti-{g}"
        plan.add_resource(label, 1, {"CPU": 1}, source=f"AntiAffinity('{label}')")
        plan.add_task(label, {**TINY, label: 1}, count=3, source=f"AntiAffinity('{label}').launch")
        plan.add_intent(Separated((label,), source=f"AntiAffinity('{label}')"))
        grp = f"grp-{g}"
        plan.add_task(f"{grp}-first", TINY, creates={grp: 2}, source=f"CoLocation('{grp}')")
        plan.add_task(grp, {**TINY, grp: 1}, count=2, source=f"CoLocation('{grp}')")
        plan.add_intent(Colocated((f"{grp}-first", grp), source=f"CoLocation('{grp}')"))
    _ = rng


def family(n_nodes: int, fam: str, seed: int, grouped: bool = True) -> tuple[Plan, Any, bool]:
    """Families a-d. Returns (plan, cluster document, expected feasible)."""
    rng = random.Random(seed)
    nodes, tasks = _cluster_tasks(n_nodes, fam, rng)
    feasible = fam == "a"
    if fam == "b":
        tasks.append("gpu1")
    if fam == "d":
        tasks.append("gpu3")
    plan = _jobs(tasks, rng, grouped, SHAPES)
    _add_policies(plan, n_nodes, rng)
    if fam == "c":
        for name in ("x", "y", "z"):
            plan.add_task(name, TINY, source=f"service {name}")
        plan.add_intent(Colocated(("x", "y"), source="CoLocation(x, y)"))
        plan.add_intent(Colocated(("y", "z"), source="CoLocation(y, z)"))
        plan.add_intent(Separated(("x", "z"), source="AntiAffinity(x, z)"))
    return plan, {"nodes": nodes}, feasible


def _jobs(tasks: list[str], rng: random.Random, grouped: bool, shapes: dict[str, Any]) -> Plan:
    """Group into jobs of 1-12 replicas (as users write them), or one entry per task."""
    rng.shuffle(tasks)
    plan = Plan()
    if not grouped:
        for j, s in enumerate(tasks):
            plan.add_task(f"{s}-{j}", shapes[s], source=f"task {j}")
        return plan
    counts: dict[str, int] = defaultdict(int)
    for s in tasks:
        counts[s] += 1
    job = 0
    for shape, n in sorted(counts.items()):
        while n:
            k = min(n, rng.randint(1, 12))
            plan.add_task(f"{shape}-{job}", shapes[shape], count=k, source=f"job {job}")
            job += 1
            n -= k
    return plan


def triplets(n_nodes: int, seed: int, short: bool, grouped: bool) -> tuple[Plan, Any, bool]:
    """Zero-slack: each node of capacity 1000 filled exactly by three tasks of 250-500."""
    rng = random.Random(seed)
    sizes: list[int] = []
    for _ in range(n_nodes):
        x = rng.randint(250, 500)
        y = rng.randint(max(250, 500 - x), min(500, 750 - x))
        sizes += [x, y, 1000 - x - y]
    shapes = {str(s): {"mem": s} for s in sizes}
    plan = _jobs([str(s) for s in sizes], rng, grouped, shapes)
    m = n_nodes - 1 if short else n_nodes
    nodes = [{"id": f"n{i:04d}", "total": {"mem": 1000}} for i in range(m)]
    return plan, {"nodes": nodes}, not short


def quadruplets(n_nodes: int, seed: int, short: bool) -> tuple[Plan, Any, bool]:
    """Zero-slack: each node of capacity 1000 filled exactly by four tasks of 200-300."""
    rng = random.Random(seed)
    sizes: list[int] = []
    for _ in range(n_nodes):
        while True:
            parts = [rng.randint(200, 300) for _ in range(3)]
            if 200 <= 1000 - sum(parts) <= 300:
                break
        sizes += [*parts, 1000 - sum(parts)]
    shapes = {str(s): {"mem": s} for s in sizes}
    plan = _jobs([str(s) for s in sizes], rng, True, shapes)
    m = n_nodes - 1 if short else n_nodes
    nodes = [{"id": f"n{i:04d}", "total": {"mem": 1000}} for i in range(m)]
    return plan, {"nodes": nodes}, not short


M_TYPES = {"m64": (64, 256), "m32": (32, 128), "m96": (96, 384)}
M_SHAPES = [(1, 2), (2, 8), (4, 16), (8, 32), (16, 64), (6, 12), (12, 48), (3, 24)]
M_FILL = [(1, 4), (1, 2), (1, 1)]


def multi(n_nodes: int, seed: int, grouped: bool) -> tuple[Plan, Any, bool]:
    """Two resources packed to 98-100%: catalogue shapes, then small fillers."""
    rng = random.Random(seed)
    nodes = []
    tasks: list[str] = []
    shapes = {f"c{c}-m{m}": {"CPU": c, "memory": m} for c, m in M_SHAPES + M_FILL}
    for i in range(n_nodes):
        kind = rng.choice(sorted(M_TYPES))
        cpu, mem = M_TYPES[kind]
        nodes.append({"id": f"{kind}-{i:05d}", "total": {"CPU": cpu, "memory": mem}})
        free = [cpu, mem]
        for catalogue in (M_SHAPES, M_FILL):
            while True:
                options = [(c, m) for c, m in catalogue if c <= free[0] and m <= free[1]]
                if not options:
                    break
                c, m = rng.choice(options)
                free[0] -= c
                free[1] -= m
                tasks.append(f"c{c}-m{m}")
    return _jobs(tasks, rng, grouped, shapes), {"nodes": nodes}, True


GPU_KINDS: dict[str, dict[str, float]] = {
    "g4": {"CPU": 32, "GPU": 4, "memory": 256},
    "g8": {"CPU": 64, "GPU": 8, "memory": 512},
    "g2": {"CPU": 16, "GPU": 2, "memory": 128},
}
GPU_FILLS = {  # node kind -> the GPU tasks one node of it holds (one chosen per node)
    "g8": [(3, 3, 1), (6, 1), (3, 3), (6,)],
    "g4": [(3,), (3, 1)],
    "g2": [(1,), (2,), (1, 1)],
}


def gpus(n_nodes: int, seed: int, feasible: bool, grouped: bool = True) -> tuple[Plan, Any, bool]:
    """Fragmentation with other GPU shapes: 2-, 4- and 8-GPU nodes (20% partly used) holding
    tasks of 1, 2, 3 and 6 GPUs, with CPU-only tasks around them (~9 tasks a node). A node
    with G GPUs holds a 3-GPU and 6-GPU tasks with a + 2b <= G // 3, and the packing uses
    every such slot; "g" adds 3-GPU tasks within the GPUs left free (infeasible, though the
    GPUs in total would do); "g-ok" is the packing itself (feasible)."""
    rng = random.Random(seed)
    nodes: list[dict[str, Any]] = []
    tasks: list[dict[str, float]] = []
    spare = 0.0
    for i in range(n_nodes):
        kind = rng.choice(sorted(GPU_KINDS))
        total = dict(GPU_KINDS[kind])
        avail = dict(total)
        if rng.random() < 0.2:
            avail["CPU"] -= 4
            avail["memory"] -= 32
        nodes.append({"id": f"{kind}-{i:05d}", "total": total, "available": avail})
        free = dict(avail)
        for g in rng.choice(GPU_FILLS[kind]):
            tasks.append({"CPU": 2 * g, "GPU": g, "memory": 16 * g})
            free["GPU"] -= g
            free["CPU"] -= 2 * g
            free["memory"] -= 16 * g
        spare += free["GPU"]
        while free["CPU"] >= 8 and free["memory"] >= 48:
            cpu = rng.choice([2, 4, 6])
            tasks.append({"CPU": cpu, "memory": 8 * cpu})
            free["CPU"] -= cpu
            free["memory"] -= 8 * cpu
    if not feasible:
        extra = max(1, min(int(spare) // 3, rng.randint(1, 4)))
        tasks += [{"CPU": 6, "GPU": 3, "memory": 48}] * extra
    names = {json.dumps(t, sort_keys=True): t for t in tasks}
    shape_names = {k: f"s{i}" for i, k in enumerate(sorted(names))}
    shapes = {shape_names[k]: v for k, v in names.items()}
    plan = _jobs([shape_names[json.dumps(t, sort_keys=True)] for t in tasks], rng, grouped, shapes)
    return plan, {"nodes": nodes}, feasible


P5_RES = ["CPU", "memory", "GPU", "disk", "net"]
P5_TYPES = {
    "p-a": (64, 256, 8, 2000, 100),
    "p-b": (32, 128, 4, 1000, 50),
    "p-c": (96, 384, 0, 3000, 100),
}


def _p5_catalogue(rng: random.Random, n: int) -> list[tuple[int, ...]]:
    out: set[tuple[int, ...]] = set()
    while len(out) < n:
        shape = (
            rng.randint(1, 16),
            rng.choice([2, 4, 8, 16, 32, 64]),
            rng.choice([0, 0, 0, 1, 2]),
            rng.choice([50, 100, 200, 400]),
            rng.choice([1, 2, 5, 10, 20]),
        )
        out.add(shape)
    return sorted(out)


def tight(
    n_nodes: int, seed: int, grouped: bool = True, fill: tuple[float, float] = (0.98, 1.0)
) -> tuple[Plan, Any, bool]:
    """Five resources packed to 98-100% (`fill`) with ~100 distinct shapes: each node (of
    three kinds) is filled from a random catalogue while some shape fits; then its capacity
    is what its own tasks use over a factor of 0.98-1.0 per resource (feasible by
    construction; about as many node types as nodes)."""
    rng = random.Random(seed)
    cat = _p5_catalogue(rng, 100)
    nodes: list[dict[str, Any]] = []
    tasks: list[str] = []
    for i in range(n_nodes):
        kind = rng.choice(sorted(P5_TYPES))
        free = list(P5_TYPES[kind])
        used = [0] * 5
        while True:
            fit = [s for s in cat if all(q <= f for q, f in zip(s, free, strict=True))]
            if not fit:
                break
            s = rng.choice(fit)
            tasks.append("x" + "-".join(map(str, s)))
            for r in range(5):
                free[r] -= s[r]
                used[r] += s[r]
        cap = [int(u / rng.uniform(*fill)) for u in used]
        nodes.append(
            {"id": f"{kind}-{i:05d}", "total": {P5_RES[r]: cap[r] for r in range(5) if cap[r]}}
        )
    shapes = {
        s: {P5_RES[r]: int(q) for r, q in enumerate(s[1:].split("-")) if int(q)} for s in set(tasks)
    }
    return _jobs(tasks, rng, grouped, shapes), {"nodes": nodes}, True


#: Node kinds of `filled` (CPU, memory in GiB, GPUs).
FILLED_KINDS = {"f-s": (16, 64, 0), "f-m": (32, 128, 2), "f-l": (48, 192, 4)}


def filled(n_nodes: int, seed: int, grouped: bool = True) -> tuple[Plan, Any, bool]:
    """Nodes of three kinds, each filled with tasks drawn at random from 30 shapes until
    none fits or under 2 CPUs are left: CPU ends 90-100% used on every node, memory and
    GPUs less (feasible by construction). Every first-fit order is stuck on 16 of seeds
    1-100 at 30 nodes and 6 of seeds 1-40 at 100 nodes; the balance order places them all."""
    rng = random.Random(seed * 7919 + 3)
    res = ("CPU", "memory", "GPU")
    cat = sorted(
        {
            (rng.choice([1, 2, 3, 4, 6, 8]), rng.choice([2, 4, 8, 16, 24]), rng.choice([0, 0, 1]))
            for _ in range(30)
        }
    )
    nodes: list[dict[str, Any]] = []
    tasks: list[str] = []
    for i in range(n_nodes):
        kind = rng.choice(sorted(FILLED_KINDS))
        free = list(FILLED_KINDS[kind])
        while free[0] >= 2:
            fit = [c for c in cat if all(q <= f for q, f in zip(c, free, strict=True))]
            if not fit:
                break
            c = rng.choice(fit)
            tasks.append("f" + "-".join(map(str, c)))
            free = [f - q for f, q in zip(free, c, strict=True)]
        total = {r: q for r, q in zip(res, FILLED_KINDS[kind], strict=True) if q}
        nodes.append({"id": f"{kind}-{i:05d}", "total": total})
    shapes = {
        t: {r: int(q) for r, q in zip(res, t[1:].split("-"), strict=True) if int(q)}
        for t in set(tasks)
    }
    return _jobs(tasks, rng, grouped, shapes), {"nodes": nodes}, True


def colouring(
    n_tasks: int, n_nodes: int, pairs: int, clique: int, seed: int
) -> tuple[Plan, Any, bool]:
    """Pairwise anti-affinity as graph colouring: `n_tasks` single tasks, `pairs` random
    `Separated` pairs between tasks of different hidden colours (one per node), nodes with
    room for all; `clique` > 0 adds that many new tasks separated pairwise and each from
    some tasks (infeasible when larger than the nodes)."""
    rng = random.Random(seed)
    colour = [i % n_nodes for i in range(n_tasks)]
    rng.shuffle(colour)
    plan = Plan()
    names = [f"t{i:04d}" for i in range(n_tasks)]
    for name in names:
        plan.add_task(name, {"CPU": 1, "memory": 2}, source=f"service {name}")
    seen: set[tuple[int, int]] = set()
    while len(seen) < pairs:
        a, b = rng.randrange(n_tasks), rng.randrange(n_tasks)
        if colour[a] != colour[b] and (min(a, b), max(a, b)) not in seen:
            seen.add((min(a, b), max(a, b)))
    for a, b in sorted(seen):
        src = f"AntiAffinity({names[a]}, {names[b]})"
        plan.add_intent(Separated((names[a], names[b]), source=src))
    members = [f"k{j}" for j in range(clique)]
    for name in members:
        plan.add_task(name, {"CPU": 1, "memory": 2}, source=f"service {name}")
    for x, y in itertools.combinations(members, 2):
        plan.add_intent(Separated((x, y), source=f"AntiAffinity({x}, {y})"))
    cap = {"CPU": 2 * (n_tasks + clique), "memory": 4 * (n_tasks + clique)}
    nodes = [{"id": f"n{i:03d}", "total": cap} for i in range(n_nodes)]
    return plan, {"nodes": nodes}, clique <= n_nodes


def tight_sets(n_nodes: int, seed: int) -> tuple[Plan, Any, bool]:
    """A second construction of tight packings (p2): a catalogue of 100 shapes of five
    resources; each node gets a random multiset of 6-12 of them and a capacity of what they
    use over 0.98-1.0 per resource (no base node kinds, no fill-until-full). Feasible."""
    rng = random.Random(seed * 7919 + 1)
    cat: list[tuple[int, ...]] = []
    while len(cat) < 100:
        shape = (
            rng.randint(1, 24),
            rng.randint(1, 96),
            rng.choice([0, 0, 1, 4]),
            rng.randint(10, 500),
            rng.randint(1, 25),
        )
        if shape not in cat:
            cat.append(shape)
    nodes: list[dict[str, Any]] = []
    tasks: list[str] = []
    for i in range(n_nodes):
        mine = [rng.choice(cat) for _ in range(rng.randint(6, 12))]
        used = [sum(s[r] for s in mine) for r in range(5)]
        cap = [int(u / rng.uniform(0.98, 1.0)) for u in used]
        nodes.append({"id": f"q-{i:05d}", "total": {P5_RES[r]: cap[r] for r in range(5) if cap[r]}})
        tasks += ["y" + "-".join(map(str, s)) for s in mine]
    shapes = {
        s: {P5_RES[r]: int(q) for r, q in enumerate(s[1:].split("-")) if int(q)} for s in set(tasks)
    }
    return _jobs(tasks, rng, True, shapes), {"nodes": nodes}, True


#: Node kinds of `tight_kinds` (CPU, memory, GPU, disk, net); each instance uses 2-4.
P5_KINDS = [
    (64, 256, 8, 2000, 100),
    (32, 128, 4, 1000, 50),
    (96, 384, 0, 3000, 100),
    (48, 192, 2, 1500, 75),
    (128, 512, 8, 4000, 200),
]


def _split(total: int, k: int, least: int, rng: random.Random) -> list[int]:
    """`total` in `k` random integer parts of at least `least` each."""
    weights = [rng.expovariate(1.0) for _ in range(k)]
    free = max(0, total - least * k)
    parts = [least + int(free * w / sum(weights)) for w in weights]
    for _ in range(total - sum(parts)):
        parts[rng.randrange(k)] += 1
    return parts


def tight_kinds(n_nodes: int, seed: int) -> tuple[Plan, Any, bool]:
    """A third construction of tight packings (p3): 2-4 FIXED node kinds (every node of a
    kind has the same capacity); each kind has 4-8 job mixes, each the kind's capacity
    times 0.98-1.0 per resource split into 5-9 tasks at random (resource by resource, so
    the shapes are unrelated); every node runs one mix of its kind. 50-100 distinct shapes,
    as many node types as kinds. Feasible by construction."""
    rng = random.Random(seed * 6007 + 11)
    kinds = rng.sample(P5_KINDS, rng.randint(2, 4))
    mixes: list[list[list[tuple[int, ...]]]] = []
    for cap in kinds:
        mine = []
        for _ in range(rng.randint(4, 8)):
            k = rng.randint(5, 9)
            target = [int(c * rng.uniform(0.98, 1.0)) for c in cap]
            cols = [_split(t, k, 1 if r in (0, 1) else 0, rng) for r, t in enumerate(target)]
            mine.append([tuple(col[i] for col in cols) for i in range(k)])
        mixes.append(mine)
    nodes: list[dict[str, Any]] = []
    tasks: list[tuple[int, ...]] = []
    for i in range(n_nodes):
        kind = rng.randrange(len(kinds))
        tasks += rng.choice(mixes[kind])
        total = {P5_RES[r]: q for r, q in enumerate(kinds[kind]) if q}
        nodes.append({"id": f"k{kind}-{i:05d}", "total": total})
    names = ["z" + "-".join(map(str, s)) for s in tasks]
    shapes = {
        n: {P5_RES[r]: int(q) for r, q in enumerate(n[1:].split("-")) if int(q)} for n in set(names)
    }
    return _jobs(names, rng, True, shapes), {"nodes": nodes}, True


def tight_splits(n_nodes: int, seed: int) -> tuple[Plan, Any, bool]:
    """A fourth construction of tight packings (p4), written apart from the engines that
    decide them: 3-7 resources (by instance); every node has random capacities of its own,
    and its capacity times 0.98-1.0 per resource is split into 4-8 tasks at random
    (resource by resource, each on the resource's grid). Nearly every task is a shape of
    its own (about 6 per node). Feasible by construction (a node holds the tasks cut from
    it)."""
    rng = random.Random(seed * 7253 + 5)
    nres = rng.randint(3, 7)
    names = [f"r{r}" for r in range(nres)]
    grid = [rng.choice([1, 2, 5, 10]) for _ in range(nres)]
    top = [rng.choice([32, 64, 128, 256]) for _ in range(nres)]
    nodes: list[dict[str, Any]] = []
    tasks: list[tuple[int, ...]] = []
    for i in range(n_nodes):
        cap = [rng.randint(top[r] // 2, top[r]) * grid[r] for r in range(nres)]
        k = rng.randint(4, 8)
        cols = []
        for r in range(nres):
            target = int(cap[r] * rng.uniform(0.98, 1.0)) // grid[r]
            cols.append([q * grid[r] for q in _split(target, k, 1, rng)])
        tasks += [tuple(col[j] for col in cols) for j in range(k)]
        nodes.append({"id": f"s-{i:05d}", "total": {names[r]: cap[r] for r in range(nres)}})
    label = ["w" + "-".join(map(str, t)) for t in tasks]
    shapes = {
        n: {names[r]: int(q) for r, q in enumerate(n[1:].split("-")) if int(q)} for n in set(label)
    }
    return _jobs(label, rng, True, shapes), {"nodes": nodes}, True


def _tight_named(tasks: list[tuple[int, ...]], prefix: str, rng: random.Random) -> Plan:
    """Tasks named by their five-resource shape (one job per shape, `_jobs`)."""
    label = [prefix + "-".join(map(str, t)) for t in tasks]
    shapes = {
        n: {P5_RES[r]: int(q) for r, q in enumerate(n[len(prefix) :].split("-")) if int(q)}
        for n in set(label)
    }
    return _jobs(label, rng, True, shapes)


def tight_hair(n_nodes: int, seed: int) -> tuple[Plan, Any, bool]:
    """A fifth construction of tight packings (p5), written for issue 30 round five apart
    from p-p4: a catalogue of 100 shapes of five resources (CPU log-uniform 1-32, memory a
    multiple of it plus noise, GPUs mostly none, disk on a grid of 25, network 1-50); each
    node runs a random multiset of 4-10 of them and its capacity is a hair above their use
    (times 1.00-1.02 per resource, rounded down, at least the use); every node's capacity
    differs from every other's. Feasible by construction."""
    rng = random.Random(seed * 9341 + 17)
    cat: list[tuple[int, ...]] = []
    while len(cat) < 100:
        cpu = max(1, int(2 ** rng.uniform(0, 5)))
        shape = (
            cpu,
            cpu * rng.choice([1, 2, 4, 8]) + rng.randint(0, 3),
            rng.choice([0, 0, 0, 0, 0, 0, 1, 2, 4]),
            rng.randint(1, 40) * 25,
            rng.randint(1, 50),
        )
        if shape not in cat:
            cat.append(shape)
    nodes: list[dict[str, Any]] = []
    tasks: list[tuple[int, ...]] = []
    seen: set[tuple[int, ...]] = set()
    for i in range(n_nodes):
        mine = [rng.choice(cat) for _ in range(rng.randint(4, 10))]
        used = [sum(s[r] for s in mine) for r in range(5)]
        cap = [max(u, int(u * rng.uniform(1.0, 1.02))) for u in used]
        while tuple(cap) in seen:  # all distinct: a hair more of one resource
            cap[rng.randrange(5)] += 1
        seen.add(tuple(cap))
        nodes.append({"id": f"h-{i:05d}", "total": {P5_RES[r]: cap[r] for r in range(5) if cap[r]}})
        tasks += mine
    return _tight_named(tasks, "h", rng), {"nodes": nodes}, True


#: Node kinds of `tight_fillers` (CPU, memory, GPU, disk, net), other than `P5_TYPES`.
P6_KINDS = [(48, 192, 4, 1600, 80), (24, 96, 2, 800, 40), (80, 320, 0, 2400, 120)]


def tight_fillers(n_nodes: int, seed: int) -> tuple[Plan, Any, bool]:
    """A sixth construction of tight packings (p6), written for issue 30 round five apart
    from p-p5: nodes of three fixed kinds, each filled at random from a 60-shape catalogue
    until no shape fits, then one "filler" task per node taking 90-100% of what is left of
    each resource (so most fillers are shapes of their own). Feasible by construction."""
    rng = random.Random(seed * 5417 + 3)
    cat: list[tuple[int, ...]] = []
    while len(cat) < 60:
        shape = (
            rng.randint(1, 12),
            rng.choice([4, 8, 12, 16, 24, 32, 48]),
            rng.choice([0, 0, 0, 1, 2]),
            rng.choice([40, 80, 120, 200, 320]),
            rng.randint(1, 16),
        )
        if shape not in cat:
            cat.append(shape)
    nodes: list[dict[str, Any]] = []
    tasks: list[tuple[int, ...]] = []
    for i in range(n_nodes):
        kind = rng.randrange(len(P6_KINDS))
        free = list(P6_KINDS[kind])
        while True:
            fit = [s for s in cat if all(q <= f for q, f in zip(s, free, strict=True))]
            if not fit:
                break
            s = rng.choice(fit)
            tasks.append(s)
            free = [f - q for f, q in zip(free, s, strict=True)]
        filler = tuple(f - int(f * rng.uniform(0.0, 0.1)) for f in free)
        if any(filler):
            tasks.append(filler)
        total = {P5_RES[r]: q for r, q in enumerate(P6_KINDS[kind]) if q}
        nodes.append({"id": f"f{kind}-{i:05d}", "total": total})
    return _tight_named(tasks, "f", rng), {"nodes": nodes}, True


def tight_variant(made: tuple[Plan, Any, bool], variant: str, seed: int) -> tuple[Plan, Any, Any]:
    """A feasible tight packing made infeasible, perhaps: "short" drops one node at random,
    "extra" adds one more copy of the largest task. The expected verdict is infeasible
    (False) when some resource's requests, counted on their grid (in units of the greatest
    common divisor of its requests, so a node of capacity C holds C // g of them), exceed
    what the nodes hold; otherwise it is not known (None: the bench accepts any answer)."""
    plan, cluster, _ = made
    rng = random.Random(seed * 4241 + len(cluster["nodes"]))
    nodes = list(cluster["nodes"])
    if variant == "short":
        nodes.pop(rng.randrange(len(nodes)))
    elif variant == "extra":
        top = {r: max(n["total"].get(r, 0) for n in nodes) or 1 for r in P5_RES}
        big = max(plan.tasks, key=lambda t: sum(q / top.get(r, 1) for r, q in t.resources.items()))
        plan = Plan.from_dict(plan.to_dict())
        plan.add_task("extra", dict(big.resources), source="job extra")
    feasible: bool | None = None
    for r in P5_RES:
        asks = [int(t.resources.get(r, 0)) for t in plan.tasks for _ in range(t.count)]
        g = math.gcd(*asks) or 1
        if sum(q // g for q in asks) > sum(int(n["total"].get(r, 0)) // g for n in nodes):
            feasible = False
    return plan, {"nodes": nodes}, feasible


def colouring_windows(
    n_tasks: int, n_nodes: int, pairs: int, clique: int, seed: int
) -> tuple[Plan, Any, bool]:
    """A second construction of colouring (col2): tasks on a ring, colour i mod the nodes,
    `Separated` pairs only between tasks at most 3 x nodes apart on the ring (a banded
    graph, not a random one), written as groups of three (`Separated` over a triangle of
    different colours) where it can; `clique` > 0 adds tasks that are all pairwise
    separated (infeasible when larger than the nodes)."""
    rng = random.Random(seed * 104729 + 3)
    plan = Plan()
    names = [f"r{i:04d}" for i in range(n_tasks)]
    for name in names:
        plan.add_task(name, {"CPU": 1}, source=f"service {name}")
    window = 3 * n_nodes
    seen: set[tuple[int, ...]] = set()
    edges = 0
    while edges < pairs:
        a = rng.randrange(n_tasks)
        group = {a}
        for _ in range(2 if n_nodes >= 3 and rng.random() < 0.5 else 1):
            group.add((a + rng.randint(1, window)) % n_tasks)
        key = tuple(sorted(group))
        if len({k % n_nodes for k in key}) != len(key) or key in seen:
            continue
        seen.add(key)
        edges += len(key) * (len(key) - 1) // 2
        plan.add_intent(Separated(tuple(names[k] for k in key), source=f"Apart{key}"))
    members = [f"c{j}" for j in range(clique)]
    for name in members:
        plan.add_task(name, {"CPU": 1}, source=f"service {name}")
    if len(members) > 1:
        plan.add_intent(Separated(tuple(members), source="Apart(clique)"))
    nodes = [{"id": f"m{i:03d}", "total": {"CPU": n_tasks + clique}} for i in range(n_nodes)]
    return plan, {"nodes": nodes}, clique <= n_nodes


def colouring_balanced(
    n_tasks: int, n_nodes: int, pairs: int, clique: int, seed: int, equitable: bool = False
) -> tuple[Plan, Any, bool]:
    """A third construction of colouring (col3): equal hidden colour classes, and pairs
    drawn so that every task has about the same number of separations (each task takes its
    turn to pick a partner of another colour among the tasks with the fewest so far), not
    uniformly at random; the separations are written in random order with the two tasks in
    random order. With `equitable`, each node holds exactly n_tasks / n_nodes tasks (the
    capacity leaves no slack), so only balanced colourings fit; `clique` > 0 adds that many
    tasks pairwise separated, each also separated from two of the others."""
    rng = random.Random(seed * 7349 + 11)
    colour = [i % n_nodes for i in range(n_tasks)]
    rng.shuffle(colour)
    degree = [0] * n_tasks
    seen: set[tuple[int, int]] = set()
    while len(seen) < pairs:
        a = min(rng.sample(range(n_tasks), 3), key=lambda t: degree[t])
        pool = [b for b in rng.sample(range(n_tasks), 8) if colour[b] != colour[a]]
        if not pool:
            continue
        b = min(pool, key=lambda t: degree[t])
        key = (min(a, b), max(a, b))
        if key not in seen:
            seen.add(key)
            degree[a] += 1
            degree[b] += 1
    plan = Plan()
    names = [f"v{i:04d}" for i in range(n_tasks)]
    members = [f"w{j}" for j in range(clique)]
    total = n_tasks + clique
    for name in names + members:
        plan.add_task(name, {"CPU": 1}, source=f"service {name}")
    edges = [(names[a], names[b]) for a, b in seen]
    edges += list(itertools.combinations(members, 2))
    edges += [(m, names[rng.randrange(n_tasks)]) for m in members for _ in range(2)]
    rng.shuffle(edges)
    for x, y in edges:
        pair = (x, y) if rng.random() < 0.5 else (y, x)
        plan.add_intent(Separated(pair, source=f"Spread({pair[0]}, {pair[1]})"))
    cap = -(-total // n_nodes) if equitable else total
    nodes = [{"id": f"e{i:03d}", "total": {"CPU": cap}} for i in range(n_nodes)]
    return plan, {"nodes": nodes}, clique <= n_nodes


def colouring_uneven(
    n_tasks: int, n_nodes: int, pairs: int, clique: int, seed: int, tight: bool = False
) -> tuple[Plan, Any, bool]:
    """A fourth construction of colouring (col4): hidden colour classes of unequal sizes
    (weights 0.5-1.5, so one node's class may be three times another's), tasks of 1-3 CPU,
    and `pairs` random `Separated` pairs between classes, written as `Separated` over two
    or three tasks of distinct classes. With `tight`, each node's CPU is exactly what its
    class asks (no slack, nodes of different sizes: the colouring must also fit);
    `clique` > 0 adds that many tasks pairwise separated (infeasible when larger than the
    nodes)."""
    rng = random.Random(seed * 9973 + 17)
    weights = [rng.uniform(0.5, 1.5) for _ in range(n_nodes)]
    colour = rng.choices(range(n_nodes), weights=weights, k=n_tasks)
    for c in range(n_nodes):  # every class holds a task
        colour[c] = c
    cpu = [rng.randint(1, 3) for _ in range(n_tasks)]
    names = [f"u{i:04d}" for i in range(n_tasks)]
    members = [f"z{j}" for j in range(clique)]
    plan = Plan()
    for name, q in zip(names, cpu, strict=True):
        plan.add_task(name, {"CPU": q}, source=f"service {name}")
    for name in members:
        plan.add_task(name, {"CPU": 1}, source=f"service {name}")
    seen: set[tuple[int, int]] = set()
    groups: list[tuple[int, ...]] = []
    while len(seen) < pairs:
        group = [rng.randrange(n_tasks)]
        for _ in range(2 if rng.random() < 0.3 else 1):
            group.append(rng.randrange(n_tasks))
        if len({colour[t] for t in group}) != len(group):
            continue
        new = {(min(a, b), max(a, b)) for a, b in itertools.combinations(group, 2)} - seen
        if new:
            seen |= new
            groups.append(tuple(group))
    for group in groups:
        tasks = tuple(names[t] for t in group)
        plan.add_intent(Separated(tasks, source=f"Apart({', '.join(tasks)})"))
    if len(members) > 1:
        plan.add_intent(Separated(tuple(members), source="Apart(clique)"))
    load = [0] * n_nodes
    for t, c in enumerate(colour):
        load[c] += cpu[t]
    total = sum(cpu) + clique
    caps = [load[c] + (clique if clique else 0) for c in range(n_nodes)] if tight else None
    if caps:
        rng.shuffle(caps)
    nodes = [
        {"id": f"h{i:03d}", "total": {"CPU": caps[i] if caps else total}} for i in range(n_nodes)
    ]
    return plan, {"nodes": nodes}, clique <= n_nodes


def gpus_slots(n_nodes: int, seed: int, feasible: bool) -> tuple[Plan, Any, bool]:
    """A second construction of fragmentation (g2): 4-, 6- and 10-GPU nodes hold at most 1,
    1 and 2 tasks of 4 or 5 GPUs, and the packing fills every such slot (leaving 0-2 GPUs
    free a node), CPU-only tasks around them; g2 adds 4-GPU tasks that the free GPUs hold
    in total but no node does (infeasible); g2-ok is the packing itself (feasible)."""
    rng = random.Random(seed * 15485863 + 5)
    kinds = {"h4": (4, 48, 192), "h6": (6, 64, 256), "h10": (10, 96, 512)}
    fills = {"h4": [(4,)], "h6": [(4,), (5,)], "h10": [(4, 4), (5, 4), (5, 5)]}
    nodes: list[dict[str, Any]] = []
    tasks: list[dict[str, float]] = []
    spare = 0
    for i in range(n_nodes):
        kind = rng.choice(sorted(kinds))
        gpu, cpu, mem = kinds[kind]
        nodes.append({"id": f"{kind}-{i:05d}", "total": {"GPU": gpu, "CPU": cpu, "memory": mem}})
        for g in rng.choice(fills[kind]):
            tasks.append({"GPU": g, "CPU": 4 * g, "memory": 16 * g})
            gpu, cpu, mem = gpu - g, cpu - 4 * g, mem - 16 * g
        spare += gpu
        while cpu >= 8 and mem >= 32:
            c = rng.choice([1, 2, 4, 8])
            tasks.append({"CPU": c, "memory": 4 * c})
            cpu, mem = cpu - c, mem - 4 * c
    if not feasible:
        tasks += [{"GPU": 4, "CPU": 16, "memory": 64}] * max(1, min(spare // 4, rng.randint(1, 3)))
    names = {json.dumps(t, sort_keys=True): t for t in tasks}
    shape_names = {k: f"h{i}" for i, k in enumerate(sorted(names))}
    shapes = {shape_names[k]: v for k, v in names.items()}
    plan = _jobs([shape_names[json.dumps(t, sort_keys=True)] for t in tasks], rng, True, shapes)
    return plan, {"nodes": nodes}, feasible


def baseline(plan: Plan, state: ClusterState, timeout: float) -> tuple[str, float]:
    """The straightforward aggregated encoding. Returns (verdict, seconds)."""
    t0 = time.perf_counter()
    deadline = time.monotonic() + timeout
    ctx = z3.Context()
    s = z3.Solver(ctx=ctx)
    nodes = sorted(n for n, node in state.nodes.items() if node.alive)
    constrained = {n for i in plan.intents for n in i.tasks}
    classes: dict[Any, int] = defaultdict(int)
    for t in plan.tasks:
        if t.name not in constrained:
            classes[t.resources] += t.count
    loads: dict[tuple[int, str], list[Any]] = defaultdict(list)
    for ci, (req, count) in enumerate(classes.items()):
        xs = [z3.Int(f"x{ci}_{j}", ctx) for j in range(len(nodes))]
        for j, v in enumerate(xs):
            s.add(v >= 0)
            for r, q in req.items():
                loads[(j, r)].append(q * v)
        s.add(z3.Sum(xs) == count)
        if time.monotonic() > deadline:
            return ("unknown (build timeout)", time.perf_counter() - t0)
    onehot: dict[str, list[Any]] = {}
    for name in sorted(constrained):
        t = plan.task(name)
        bs = [z3.Bool(f"b_{name}_{j}", ctx) for j in range(len(nodes))]
        s.add(z3.PbEq([(b, 1) for b in bs], 1))
        onehot[name] = bs
        for j in range(len(nodes)):
            for r, q in t.resources.items():
                loads[(j, r)].append(z3.If(bs[j], z3.RealVal(q, ctx), z3.RealVal(0, ctx)))
        if time.monotonic() > deadline:
            return ("unknown (build timeout)", time.perf_counter() - t0)
    for intent in plan.intents:
        for j in range(len(nodes)):
            if isinstance(intent, Colocated):
                for x, y in itertools.pairwise(intent.tasks):
                    s.add(onehot[x][j] == onehot[y][j])
            elif isinstance(intent, Separated):
                s.add(z3.PbLe([(onehot[x][j], 1) for x in intent.tasks], 1))
    for j, nid in enumerate(nodes):
        avail = state.nodes[nid].available
        for r in {r for t in plan.tasks for r in t.resources}:
            terms = loads.get((j, r))
            if terms:
                s.add(z3.Sum(terms) <= avail.get(r, 0.0))
    s.set("timeout", max(1, int((deadline - time.monotonic()) * 1000)))
    res = s.check()
    verdict = "feasible" if res == z3.sat else "infeasible" if res == z3.unsat else "unknown"
    return verdict, time.perf_counter() - t0


def run_cli(plan_file: str, cluster_file: str, timeout: float, intents: bool) -> dict[str, Any]:
    """`escher verify PLAN --cluster C --format json` in process: the user's command."""
    args = [plan_file, "--cluster", cluster_file, "--format", "json", "--timeout", str(timeout)]
    if not intents:
        args.append("--no-intents")
    t0 = time.perf_counter()
    out = CliRunner().invoke(verify_cmd, args)
    wall = time.perf_counter() - t0
    data: dict[str, Any] = json.loads(out.stdout) if out.stdout.strip() else {}
    data["wall"] = wall
    data["exit"] = out.exit_code
    return data


def instances(quick: bool, seed: int) -> list[tuple[str, int, Any]]:
    sizes = [100] if quick else [100, 1000, 10000]
    out: list[tuple[str, int, Any]] = []
    for n in sizes:
        for fam in "abcd":
            out.append((fam, n, lambda n=n, f=fam: family(n, f, seed)))
    for n in [100] if quick else [100, 1000]:
        for fam in "abd":
            out.append((f"{fam}-u", n, lambda n=n, f=fam: family(n, f, seed, grouped=False)))
    for n in [20, 50] if quick else [20, 50, 100, 167]:
        out.append(("t", n, lambda n=n: triplets(n, seed, False, True)))
        out.append(("t-short", n, lambda n=n: triplets(n, seed, True, True)))
        out.append(("t-u", n, lambda n=n: triplets(n, seed, False, False)))
        out.append(("q", n, lambda n=n: quadruplets(n, seed, False)))
        out.append(("q-short", n, lambda n=n: quadruplets(n, seed, True)))
    for n in [100] if quick else [100, 1000]:
        out.append(("m", n, lambda n=n: multi(n, seed, True)))
        out.append(("m-u", n, lambda n=n: multi(n, seed, False)))
    return out


ENGINE_FAMILIES = [
    *("g", "g-ok", "g2", "g2-ok", "d", "t", "t-short", "p", "p2", "p3"),
    *("p-short", "p-extra", "p3-short", "p3-extra"),
    *("col", "col-k", "col-s", "col-l", "col2", "col2-k", "col2-l"),
    *("col-m", "col-mk", "col-me", "col3", "col3-k", "col3-e", "col4", "col4-t", "col4-k"),
    *("col5", "col5-s", "col5-d"),
]


def engine_instances(seed: int, big: bool) -> list[tuple[str, int, Any]]:
    """The families of the engine table: fragmentation with other GPU shapes (g, g-ok),
    family d and nodes filled to 90-100% of their CPU (f) at 100/1,000 (and 10,000 with
    `big`) nodes, zero-slack triplets, tight
    5-resource packings (p: a capacity per node; p2: random multisets; p3: 2-4 fixed node
    kinds; p4: 3-7 resources, random splits of random capacities; p-90: p filled to 85-90%;
    -short one node fewer, -extra one task more), and graph colouring (120 tasks on
    4 nodes with 600 separated pairs, feasible; col-k: with a 5-clique; col-s: 30 tasks on
    3 nodes with a 4-clique; col-l: 1,000 tasks on 8 nodes with 5,000 pairs)."""
    sizes = [100, 1000, 10000] if big else [100, 1000]
    out: list[tuple[str, int, Any]] = []
    for n in sizes:
        out.append(("g", n, lambda n=n: gpus(n, seed, False)))
        out.append(("g-ok", n, lambda n=n: gpus(n, seed, True)))
        out.append(("g2", n, lambda n=n: gpus_slots(n, seed, False)))
        out.append(("g2-ok", n, lambda n=n: gpus_slots(n, seed, True)))
        out.append(("d", n, lambda n=n: family(n, "d", seed)))
        out.append(("f", n, lambda n=n: filled(n, seed)))
    for n in [20, 167]:
        out.append(("t", n, lambda n=n: triplets(n, seed, False, True)))
        out.append(("t-short", n, lambda n=n: triplets(n, seed, True, True)))
    for n in [20, 100, 1000]:
        out.append(("p", n, lambda n=n: tight(n, seed)))
        out.append(("p2", n, lambda n=n: tight_sets(n, seed)))
        out.append(("p3", n, lambda n=n: tight_kinds(n, seed)))
        out.append(("p4", n, lambda n=n: tight_splits(n, seed)))
        out.append(("p5", n, lambda n=n: tight_hair(n, seed)))
        out.append(("p6", n, lambda n=n: tight_fillers(n, seed)))
        out.append(("p-90", n, lambda n=n: tight(n, seed, fill=(0.85, 0.9))))
        for fam, make in (("p", tight), ("p3", tight_kinds)):
            for v in ("short", "extra"):
                out.append(
                    (f"{fam}-{v}", n, lambda n=n, m=make, v=v: tight_variant(m(n, seed), v, seed))
                )
    out.append(("col", 4, lambda: colouring(120, 4, 600, 0, seed)))
    out.append(("col-k", 4, lambda: colouring(120, 4, 600, 5, seed)))
    out.append(("col-s", 3, lambda: colouring(30, 3, 60, 4, seed)))
    out.append(("col-l", 8, lambda: colouring(1000, 8, 5000, 0, seed)))
    out.append(("col2", 4, lambda: colouring_windows(120, 4, 600, 0, seed)))
    out.append(("col2-k", 4, lambda: colouring_windows(120, 4, 600, 5, seed)))
    out.append(("col2-l", 4, lambda: colouring_windows(1000, 4, 5000, 0, seed)))
    out += colouring_instances(seed)
    return out


def colouring_equitable(
    n_tasks: int, n_nodes: int, pairs: int, seed: int
) -> tuple[Plan, Any, bool]:
    """A fifth construction of colouring (col5): hidden classes of exactly n_tasks / n_nodes
    tasks, `pairs` uniformly random `Separated` pairs between tasks of different classes,
    nodes of one CPU per task of a class and nothing to spare, so only an equitable
    colouring fits. Fewer pairs than col-me (4,000 on 1,000 tasks: average degree 8) put
    it below the threshold where belief propagation recovers the planted colouring and
    near the one where 4-colourings get rare: the local search alone must find one."""
    rng = random.Random(seed * 4241 + 5)
    share = n_tasks // n_nodes
    colour = [i // share for i in range(share * n_nodes)]
    rng.shuffle(colour)
    names = [f"q{i:04d}" for i in range(len(colour))]
    plan = Plan()
    for name in names:
        plan.add_task(name, {"CPU": 1}, source=f"service {name}")
    seen: set[tuple[int, int]] = set()
    while len(seen) < pairs:
        a, b = rng.sample(range(len(colour)), 2)
        if colour[a] != colour[b]:
            seen.add((min(a, b), max(a, b)))
    for a, b in sorted(seen):
        plan.add_intent(Separated((names[a], names[b]), source=f"Apart({names[a]}, {names[b]})"))
    nodes = [{"id": f"q{i:03d}", "total": {"CPU": share}} for i in range(n_nodes)]
    return plan, {"nodes": nodes}, True


def colouring_instances(seed: int) -> list[tuple[str, int, Any]]:
    """Colouring at 1,000 tasks on 4 nodes, ~5,000 separated pairs, by the three
    constructions: col-m (random pairs) and col-mk (with a 5-clique: infeasible), col-me
    (random pairs, each node holding exactly 250 tasks: an equitable colouring), col3
    (degree-balanced pairs), col3-k (with a 5-clique) and col3-e (equitable); and 2,000
    tasks on 5 nodes, ~10,000 pairs, hidden classes of unequal sizes (col4; col4-t: each
    node's CPU exactly its class's, col4-k: with a 6-clique); and col5: 1,000 tasks on 4
    nodes of exactly 250, 4,000 uniformly random pairs (col5-s: 2,500, col5-d: 6,000)."""

    def equitable(made: tuple[Plan, Any, bool]) -> tuple[Plan, Any, bool]:
        plan, cluster, ok = made
        for node in cluster["nodes"]:
            node["total"] = {"CPU": 250, "memory": 500}
        return plan, cluster, ok

    return [
        ("col-m", 4, lambda: colouring(1000, 4, 5000, 0, seed)),
        ("col-mk", 4, lambda: colouring(1000, 4, 5000, 5, seed)),
        ("col-me", 4, lambda: equitable(colouring(1000, 4, 5000, 0, seed))),
        ("col3", 4, lambda: colouring_balanced(1000, 4, 5000, 0, seed)),
        ("col3-k", 4, lambda: colouring_balanced(1000, 4, 5000, 5, seed)),
        ("col3-e", 4, lambda: colouring_balanced(1000, 4, 5000, 0, seed, equitable=True)),
        ("col4", 5, lambda: colouring_uneven(2000, 5, 10000, 0, seed)),
        ("col4-t", 5, lambda: colouring_uneven(2000, 5, 10000, 0, seed, tight=True)),
        ("col4-k", 5, lambda: colouring_uneven(2000, 5, 10000, 6, seed)),
        ("col5", 4, lambda: colouring_equitable(1000, 4, 4000, seed)),
        ("col5-s", 4, lambda: colouring_equitable(1000, 4, 2500, seed)),
        ("col5-d", 4, lambda: colouring_equitable(1000, 4, 6000, seed)),
    ]


def _without_optional() -> None:
    """This process as if only the required packages were installed: no orjson, msgspec
    (file reading); the engines that need scipy or python-sat report themselves missing."""
    from escher.verify.engines import _arcflow, _graph, _lns

    for name in ("orjson", "msgspec"):
        sys.modules[name] = None  # type: ignore[assignment]
    _arcflow.available = lambda: False  # type: ignore[assignment]
    _lns.available = lambda: False  # type: ignore[assignment]
    _graph._has_pysat = lambda: False  # type: ignore[assignment]


def engines_table(args: argparse.Namespace, only: set[str]) -> bool:
    """Every engine alone, all in turn, and all side by side, in process, on the same
    instances; then side by side with the optional packages left out."""
    from escher.verify.engines._engine import ENGINES, decide

    names = ["bounds", *ENGINES]
    print(
        f"engines alone (--engine-timeout {args.engine_timeout} s each), all in turn in one "
        "process, and side by side (one process each, first answer wins):"
    )
    heads = [*names, "in turn", "side by side"]
    print(f"{'family':>8} {'size':>14} {'expect':>10} " + " ".join(f"{e:>11}" for e in heads))
    ok = True
    rows: list[tuple[str, int, Plan, ClusterState, str]] = []
    for fam, n, make in engine_instances(args.seed, args.big):
        if (only and fam not in only) or not args.min_nodes <= n <= args.max_nodes:
            continue
        plan, cluster, feasible = make()
        expect = {True: "feasible", False: "infeasible", None: "not known"}[feasible]
        state = ClusterState.from_dict(cluster)
        rows.append((fam, n, plan, state, expect))
        cells = []
        for e in heads:
            chosen = None if e in ("in turn", "side by side") else frozenset({e})
            t0 = time.perf_counter()
            d = decide(
                plan,
                state,
                deadline=time.monotonic() + args.engine_timeout,
                engines=chosen,
                side_by_side=e == "side by side",
            )
            took = time.perf_counter() - t0
            mark = {"feasible": "F", "infeasible": "I"}.get(d.status, "?")
            known = expect != "not known"
            if known and d.status in ("feasible", "infeasible") and d.status != expect:
                mark, ok = "WRONG", False
            cells.append(f"{mark} {took:8.2f}")
        replicas = sum(t.count for t in plan.tasks)
        print(f"{fam:>8} {n:>6}x{replicas:<7} {expect:>10} " + " ".join(f"{c:>11}" for c in cells))
        sys.stdout.flush()
    _without_optional()
    print("\nthe portfolio without the optional packages (scipy, python-sat, orjson, msgspec):")
    for fam, n, plan, state, expect in rows:
        t0 = time.perf_counter()
        d = decide(plan, state, deadline=time.monotonic() + args.engine_timeout)
        took = time.perf_counter() - t0
        ok &= d.status in (expect, "unknown") or expect == "not known"
        print(f"{fam:>8} {n:>6} {expect:>10} {d.status:>10} {took:8.2f}  {d.method}")
        sys.stdout.flush()
    return ok


def _row(
    fam: str, n: int, plan: Plan, expect: str, d: dict[str, Any], ni: dict[str, Any], base: Any
) -> str:
    status = d.get("status", f"exit {d['exit']}")
    verdict_s = d.get("stats", {}).get("seconds", {}).get("verdict", float("nan"))
    intents = d.get("intents", [])
    proven = sum(1 for i in intents if i["status"] == "proven")
    bv, bs = base
    ratio = (
        f"{bs / d['wall']:.1f}x" if bv in ("feasible", "infeasible") else f">{bs / d['wall']:.0f}x"
    )
    agree = "yes" if status == expect else "NO"
    replicas = sum(t.count for t in plan.tasks)
    return (
        f"{fam:>8} {n:>6}x{replicas:<7} {len(plan.tasks):>6} {expect:>10} {status:>10} "
        f"{verdict_s:8.2f} {d['wall']:8.2f} {ni['wall']:8.2f} "
        f"{proven:>3}/{len(intents):<3} {bv[:18]:>18} {bs:8.2f} {ratio:>7} {agree}"
    )


def _ratios(walls: dict[tuple[str, int], float]) -> None:
    """Ungrouped over grouped time of the default path, per family and size run both ways."""
    rows = [
        (fam, n, walls[(fam, n)], walls[(f"{fam}-u", n)])
        for fam, n in sorted(walls, key=lambda k: (k[1], k[0]))
        if not fam.endswith("-u") and (f"{fam}-u", n) in walls
    ]
    if rows:
        print("\none entry per task vs replicas (default path, same run):")
        print(f"{'family':>8} {'nodes':>6} {'grouped':>8} {'ungrouped':>9} {'ratio':>6}")
    for fam, n, g, u in rows:
        print(f"{fam:>8} {n:>6} {g:8.2f} {u:9.2f} {u / g:5.2f}x")


def _escher() -> str:
    """The `escher` command of this Python."""
    beside = Path(sys.executable).with_name("escher")
    return str(beside) if beside.exists() else shutil.which("escher") or "escher"


def timeouts(limits: list[float], seed: int, repeat: int) -> None:
    """`escher verify` as a command at 10,000 nodes: --timeout given vs the command's wall."""
    print("\n--timeout at 10,000 nodes (the whole command, a fresh process, intent proofs on):")
    print(f"{'family':>8} {'timeout':>8} {'wall':>8} {'wall/timeout':>12}  verdict")
    with tempfile.TemporaryDirectory() as tmp:
        for fam in "ad":
            plan, cluster, _ = family(10000, fam, seed)
            pf, cf = Path(tmp, "plan.json"), Path(tmp, "cluster.json")
            pf.write_text(json.dumps(plan.to_dict()))
            cf.write_text(json.dumps(cluster))
            for limit in limits:
                walls, first = [], ""
                for _ in range(repeat):
                    cmd = [_escher(), "verify", str(pf), "--cluster", str(cf)]
                    t0 = time.perf_counter()
                    out = subprocess.run(
                        [*cmd, "--timeout", str(limit)], capture_output=True, text=True, check=False
                    )
                    walls.append(time.perf_counter() - t0)
                    first = (out.stdout.splitlines() or [f"exit {out.returncode}"])[0]
                wall = statistics.median(walls)
                print(f"{fam:>8} {limit:8.1f} {wall:8.2f} {wall / limit:11.2f}x  {first[:60]}")
                sys.stdout.flush()


def seeds(args: argparse.Namespace, only: set[str]) -> bool:
    """Each selected family and size with seeds 1..N (default path): verdicts that agree
    with the construction, and the slowest and median wall time."""
    print(f"\nseeds 1-{args.seeds}, default path")
    print(f"{'family':>8} {'nodes':>6} {'agree':>7} {'median s':>9} {'slowest s':>10}  others")
    keys = [(fam, n) for fam, n, _ in instances(args.quick, 1)]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for fam, n in keys:
            if (only and fam not in only) or not args.min_nodes <= n <= args.max_nodes:
                continue
            agree, walls, others = 0, [], []
            for seed in range(1, args.seeds + 1):
                make = next(m for f, k, m in instances(args.quick, seed) if (f, k) == (fam, n))
                plan, cluster, feasible = make()
                pf, cf = Path(tmp, "plan.json"), Path(tmp, "cluster.json")
                pf.write_text(json.dumps(plan.to_dict()))
                cf.write_text(json.dumps(cluster))
                d = run_cli(str(pf), str(cf), args.timeout, True)
                walls.append(d["wall"])
                if d.get("status") == ("feasible" if feasible else "infeasible"):
                    agree += 1
                else:
                    others.append(f"seed {seed}: {d.get('status', d.get('exit'))}")
            ok &= agree == args.seeds
            print(
                f"{fam:>8} {n:>6} {agree:>3}/{args.seeds:<3} {statistics.median(walls):9.2f} "
                f"{max(walls):10.2f}  {', '.join(others)}"
            )
            sys.stdout.flush()
    return ok


COLOURING_SEEDS = (7, 8, 9, 10, 11, 12, 13, 23, 42)


def colouring_seeds(args: argparse.Namespace, only: set[str]) -> bool:
    """The 1,000- and 2,000-task colourings (`colouring_instances`) on each seed of
    --colouring-seeds, with the command a user runs (`escher verify PLAN --cluster C
    --format json --timeout T`, a fresh process): verdict, the wall time, the CPU time
    of the command and its lanes, and the seconds to the verdict the command reports (the
    machine may be shared: CPU is what a calm machine's wall would be near, with the lanes
    on cores of their own at most)."""
    import resource

    wanted = [int(x) for x in args.colouring_seeds.split(",")]
    print(f"\ncolourings by seed (the command, --timeout {args.timeout}):")
    print(
        f"{'family':>8} {'seed':>5} {'expect':>10} {'verdict':>10} {'wall s':>7} "
        f"{'cpu s':>6} {'verdict s':>9}  method"
    )
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for seed in wanted:
            for fam, _, make in colouring_instances(seed):
                if only and fam not in only:
                    continue
                plan, cluster, feasible = make()
                pf, cf = Path(tmp, "plan.json"), Path(tmp, "cluster.json")
                pf.write_text(json.dumps(plan.to_dict()))
                cf.write_text(json.dumps(cluster))
                cmd = [_escher(), "verify", str(pf), "--cluster", str(cf), "--format", "json"]
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                out = subprocess.run(
                    [*cmd, "--timeout", str(args.timeout)],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                wall = time.perf_counter() - t0
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                data = json.loads(out.stdout) if out.stdout.strip() else {}
                status = data.get("status", f"exit {out.returncode}")
                expect = "feasible" if feasible else "infeasible"
                ok &= status in (expect, "unknown")
                stats = data.get("stats", {})
                verdict_s = stats.get("seconds", {}).get("verdict", float("nan"))
                print(
                    f"{fam:>8} {seed:>5} {expect:>10} {status:>10} {wall:7.2f} {cpu:6.2f} "
                    f"{verdict_s:9.2f}  {stats.get('method', '')}"
                )
                sys.stdout.flush()
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes only")
    ap.add_argument("--baseline-timeout", type=float, default=30.0)
    ap.add_argument("--timeout", type=float, default=60.0, help="escher verify --timeout")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=1, help="runs per instance (medians)")
    ap.add_argument("--only", default="", help="comma-separated families to run")
    ap.add_argument("--max-nodes", type=int, default=10**9, help="skip larger instances")
    ap.add_argument("--min-nodes", type=int, default=0, help="skip smaller instances")
    ap.add_argument("--timeouts", default="", help="e.g. 5,10,20: --timeout at 10,000 nodes")
    ap.add_argument(
        "--seeds", type=int, default=0, help="also run seeds 1..N of each family and size"
    )
    ap.add_argument("--engines", action="store_true", help="only the table of each engine alone")
    ap.add_argument("--engine-timeout", type=float, default=10.0, help="seconds per engine")
    ap.add_argument("--big", action="store_true", help="10,000-node rows in the engine table")
    ap.add_argument(
        "--colouring-seeds",
        default="",
        help="e.g. 7,11,42: only the 1,000-task colourings by seed, with the command",
    )
    args = ap.parse_args()
    if args.colouring_seeds:
        return 0 if colouring_seeds(args, set(filter(None, args.only.split(",")))) else 1
    if args.engines:
        return 0 if engines_table(args, set(filter(None, args.only.split(",")))) else 1
    print(
        f"{'family':>8} {'size':>14} {'tasks':>6} {'expect':>10} {'escher':>10} "
        f"{'verdict':>8} {'default':>8} {'no-int':>8} {'intents':>7} {'baseline':>18} "
        f"{'base s':>8} {'ratio':>7} agree"
    )
    only = set(filter(None, args.only.split(",")))
    all_agree = True
    walls: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for fam, n, make in instances(args.quick, args.seed):
            if (only and fam not in only) or not args.min_nodes <= n <= args.max_nodes:
                continue
            plan, cluster, feasible = make()
            expect = "feasible" if feasible else "infeasible"
            pf, cf = Path(tmp, "plan.json"), Path(tmp, "cluster.json")
            pf.write_text(json.dumps(plan.to_dict()))
            cf.write_text(json.dumps(cluster))
            runs = [run_cli(str(pf), str(cf), args.timeout, True) for _ in range(args.repeat)]
            no_int = [run_cli(str(pf), str(cf), args.timeout, False) for _ in range(args.repeat)]
            d = sorted(runs, key=lambda r: r["wall"])[len(runs) // 2]
            d["wall"] = statistics.median(r["wall"] for r in runs)
            ni = {"wall": statistics.median(r["wall"] for r in no_int)}
            state = ClusterState.from_dict(cluster)
            base = baseline(plan, state, args.baseline_timeout) if n <= 1000 else ("not run", 0.0)
            all_agree &= d.get("status") == expect
            walls[(fam, n)] = d["wall"]
            print(_row(fam, n, plan, expect, d, ni, base))
            sys.stdout.flush()
    if args.seeds:
        all_agree &= seeds(args, only)
    print("all verdicts agree with the construction" if all_agree else "DISAGREEMENT")
    _ratios(walls)
    if args.timeouts:
        timeouts([float(x) for x in args.timeouts.split(",")], args.seed, args.repeat)
    return 0 if all_agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
