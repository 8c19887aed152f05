"""Overhead of each ESL: placements per second on the in-memory backend vs no policy.

Every row runs the same workload (N tasks of 1 CPU, 1 simulated second each, on 16 nodes of
8 CPUs, virtual clock) through one ESL; the baseline launches the same tasks with no policy
in the same run. The gang rows use the real-time backend (ghost reservations block), with
their own real-time baseline. Usage: python bench/esl_overhead.py [--quick]

Every row's work per task is flat from 800 to 4000 tasks. cProfile call counts per task at
800 tasks (steadier than the wall-clock rates of a busy machine): none ~300, colocation ~720,
unknown_group ~770, lb_and_colocation ~1280, bin_packing ~680, gang_native ~430,
domain_anti_affinity ~1300, domain_spread ~930, domain_colocation ~800, preferences ~3100.
colocation and lb_and_colocation ran at 0.01-0.03x (12,100 and 25,000 calls per task): each
member launched while its group waits for room requests the group's label, which no node has
yet, and the memory backend worded that wait's status at once, with did-you-mean suggestions
(an edit distance to every resource name, growing with the labels): 85% of the run. The
reason is now worded when read (`escher.why`, `ref.status`), with the names known at launch:
colocation 0.02x -> 0.28x and lb_and_colocation 0.01x -> 0.18x (medians of 7 alternating
--quick runs against the tree before, loaded machine; CPU time 36x -> 2.6x and 74x -> 4.3x
that of no policy).
What remains below 1.0x is per-group or per-launch work the policy needs: a known group takes
a cluster snapshot to choose its node, creates its label and deletes it when its members are
done, and is a request shape of its own in the queue; an unknown group's first member sets the
label from inside its body; BinPacking and the domain ESLs read the cluster before each
launch (to grow the pack set, to pick a domain with room); Preferences also writes and deletes
a steering label per steered task.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable

import escher
from escher import esl
from escher.backends.memory import MemoryBackend

NODES = {f"n{i:02d}": {"resources": {"CPU": 8}, "labels": {"zone": f"z{i % 4}"}} for i in range(16)}
CPU1 = {"CPU": 1}


def noop() -> None:
    return None


KEEP: list[object] = []  # an ESL deletes its resources when dropped: hold them during a run


def keep(policy: esl.ESL) -> esl.ESL:
    KEEP.append(policy)
    return policy


Workload = Callable[[MemoryBackend, int], list[escher.TaskRef]]


def none(b: MemoryBackend, n: int) -> list[escher.TaskRef]:
    return [
        b.launch(escher.core.TaskSpec(noop, resources=escher.Resources(CPU1), duration=1.0))
        for _ in range(n)
    ]


def with_policy(policy: esl.Policy, n: int) -> list[escher.TaskRef]:
    return [policy.launch(noop, resources=CPU1, duration=1.0) for _ in range(n)]


def load_balance(b: MemoryBackend, n: int) -> list[escher.TaskRef]:
    return with_policy(keep(esl.LoadBalance(b, tasks=n)), n)


def anti_affinity(b: MemoryBackend, n: int) -> list[escher.TaskRef]:
    return with_policy(keep(esl.AntiAffinity(b, per_node=8)), n)


def colocation(b: MemoryBackend, n: int) -> list[escher.TaskRef]:
    colo = keep(esl.CoLocation(b))
    refs = []
    for g in range(n // 4):
        group = colo.group(f"g{g}", 4, CPU1)
        refs += [group.launch(noop, duration=1.0) for _ in range(4)]
    return refs


def unknown_group(b: MemoryBackend, n: int) -> list[escher.TaskRef]:
    colo = keep(esl.CoLocation(b))
    refs = []
    for g in range(n // 4):
        group = colo.unknown_group(f"g{g}", 4, resources=CPU1)
        refs += [group.launch(noop, duration=1.0) for _ in range(4)]
    return refs


def lb_and_colocation(b: MemoryBackend, n: int) -> list[escher.TaskRef]:
    lb, colo = keep(esl.LoadBalance(b, per_node=8)), keep(esl.CoLocation(b))
    refs = []
    for g in range(n // 2):
        pair = colo.group(f"p{g}", 2, CPU1, policy=lb)
        refs += [pair.launch(noop, duration=1.0) for _ in range(2)]
    return refs


def bin_packing(b: MemoryBackend, n: int) -> list[escher.TaskRef]:
    pack = keep(esl.BinPacking(b))
    return [pack.launch(noop, resources=CPU1, duration=1.0) for _ in range(n)]


def priority(b: MemoryBackend, n: int) -> list[escher.TaskRef]:
    return with_policy(keep(esl.Priority(b, levels=100)).high, n)


def fair_queue(b: MemoryBackend, n: int) -> list[escher.TaskRef]:
    wfq = keep(esl.WeightedFairQueue({"a": 3, "b": 1}, slots_per_node=8, backend=b))
    qa, qb = wfq.queue("a"), wfq.queue("b")
    return [(qa if i % 4 else qb).launch(noop, resources=CPU1, duration=1.0) for i in range(n)]


def fair_share(b: MemoryBackend, n: int) -> list[escher.TaskRef]:
    fair = keep(esl.FairShare(b, slots_per_node=8))
    users = [fair.create_user(u, w) for u, w in (("a", 1), ("b", 1))]
    return [users[i % 2].launch(noop, resources=CPU1, duration=1.0) for i in range(n)]


def data_locality(b: MemoryBackend, n: int) -> list[escher.TaskRef]:
    loc = keep(esl.DataLocality(b))
    loc.add("d", list(NODES))
    return with_policy(loc.near("d"), n)


def soft_constraints(b: MemoryBackend, n: int) -> list[escher.TaskRef]:
    b.set_resource("fast", 8, "n00")
    soft = esl.FirstOf({"fast": 1}, {}, timeout=0.5, backend=b)
    return with_policy(soft, n)


def domain_anti_affinity(b: MemoryBackend, n: int) -> list[escher.TaskRef]:
    return with_policy(keep(esl.DomainAntiAffinity("zone", b, per_domain=32)), n)


def domain_spread(b: MemoryBackend, n: int) -> list[escher.TaskRef]:
    return with_policy(keep(esl.DomainSpread("zone", b, max_skew=1)), n)


def domain_colocation(b: MemoryBackend, n: int) -> list[escher.TaskRef]:
    colo = keep(esl.DomainColocation("zone", b))
    refs = []
    for g in range(n // 4):
        group = colo.group(f"g{g}", 4, CPU1)
        refs += [group.launch(noop, duration=1.0) for _ in range(4)]
    return refs


def preferences(b: MemoryBackend, n: int) -> list[escher.TaskRef]:
    return with_policy(keep(esl.Preferences(esl.PreferSpread("zone"), backend=b)), n)


def gang_native(b: MemoryBackend, n: int) -> list[escher.TaskRef]:
    gang = keep(esl.Gang(b, mode="native"))
    runs = [gang.run([esl.Member(noop, resources=CPU1)] * 4) for _ in range(n // 4)]
    return [ref for run in runs for ref in run.refs]


ROWS: dict[str, Workload] = {
    f.__name__: f
    for f in (
        load_balance,
        anti_affinity,
        colocation,
        unknown_group,
        lb_and_colocation,
        bin_packing,
        priority,
        fair_queue,
        fair_share,
        data_locality,
        soft_constraints,
        domain_anti_affinity,
        domain_spread,
        domain_colocation,
        preferences,
        gang_native,
    )
}


def measure(workload: Workload, n: int) -> float:
    """Placements per second (wall clock) for `n` tasks through `workload`, virtual time."""
    backend = MemoryBackend(nodes=NODES, virtual_clock=True)
    escher.init(backend)
    try:
        start = time.perf_counter()
        refs = workload(backend, n)
        backend.run()
        elapsed = time.perf_counter() - start
        assert len(refs) == n and all(r.done() and r.exception(0) is None for r in refs), workload
        return n / elapsed
    finally:
        KEEP.clear()
        escher.shutdown()


def measure_gang_realtime(ephemeral: bool, gangs: int) -> float:
    """Placements per second of `gangs` gangs of 4 no-op members, real time.

    Ghosts block a worker thread while they hold; with fewer threads than CPU slots, held
    ghosts would starve their own members of threads, so the pool is larger than the slots.
    """
    backend = MemoryBackend(nodes=NODES, max_workers=512)
    escher.init(backend)
    try:
        start = time.perf_counter()
        if ephemeral:
            with esl.Gang(backend, mode="ephemeral", timeout=1.0, poll=0.002) as gang:
                runs = [gang.run([esl.Member(noop, resources=CPU1)] * 4) for _ in range(gangs)]
                for run in runs:
                    run.results(120)
        else:
            refs = [escher.launch(noop, resources=CPU1) for _ in range(4 * gangs)]
            escher.get(refs, timeout=120)
        return 4 * gangs / (time.perf_counter() - start)
    finally:
        escher.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer tasks and repeats")
    args = parser.parse_args()
    n, repeats, gangs = (800, 1, 50) if args.quick else (4000, 3, 200)
    print(f"{n} tasks x 1 CPU, 16 nodes x 8 CPU, virtual clock; best of {repeats}")
    base = max(measure(none, n) for _ in range(repeats))
    print(f"{'policy':<22}{'placements/s':>14}{'vs none':>10}")
    print(f"{'none (baseline)':<22}{base:>14.0f}{1.0:>10.2f}")
    for name, workload in ROWS.items():
        rate = max(measure(workload, n) for _ in range(repeats))
        print(f"{name:<22}{rate:>14.0f}{rate / base:>10.2f}")
    print(f"\n{gangs} gangs of 4 no-op members, real time; median of {repeats}")
    rt_base = statistics.median(measure_gang_realtime(False, gangs) for _ in range(repeats))
    rt_gang = statistics.median(measure_gang_realtime(True, gangs) for _ in range(repeats))
    print(f"{'none (baseline)':<22}{rt_base:>14.0f}{1.0:>10.2f}")
    print(f"{'gang_ephemeral':<22}{rt_gang:>14.0f}{rt_gang / rt_base:>10.2f}")
    assert threading.active_count() < 200


if __name__ == "__main__":
    main()
