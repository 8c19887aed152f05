"""scheduler_perf `SchedulingPodAntiAffinity`, end to end: escher against native, same run.

A harness in the style of Kubernetes' `test/integration/scheduler_perf`: a workload is a list
of ops (create nodes, create the init pods, create the measured pods), run on a real
kube-apiserver + kube-scheduler (no kubelet: pods are only bound). Required anti-affinity
between the pods of each of `groups` groups, written three ways in alternating rounds:

* ``native``: `podAntiAffinity` on each pod (the scheduler_perf template, one colour per
  group), created from one client thread;
* ``escher-per-group``: one `AntiAffinity(per_node=1)` per group, as a user who read the ESL
  page writes it;
* ``escher-groups``: one `AntiAffinity(groups=[...])` for all groups.

End to end = from the first policy constructor until every pod (init and measured) is bound.
The launches follow the constructors at once, as a user's would (their pods' creates wait
for the label writes, not the launches); setup = until the labels are on the nodes (timed by
a thread beside the launches), bind = the rest. Each round prints setup, bind and end-to-end
times and the ratio to that round's native, the CPU seconds of the client and the control
plane (etcd, kube-apiserver, kube-scheduler) with its ratio, and the node writes escher
sent; the summary gives medians.
Every placement is checked (no two pods of a group on a node).

Targets: end to end <= 1.0x native both ways; per-group within 10% of groups (setup and
end to end).

Usage:
    python bench/k8s_scheduler_perf.py                       # 100 nodes, 200 + 800 pods
    python bench/k8s_scheduler_perf.py --workload 1000Nodes  # opt-in: 1,000 nodes, 10,000 pods
    python bench/k8s_scheduler_perf.py --rounds 5 --groups 10
Needs scripts/provision-k8s.sh (binaries) and pip install 'escher-sched[k8s]'.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _setup  # this checkout first on sys.path; the pod builder

from escher.backends.kubernetes import KubernetesBackend
from escher.core.resources import Resources
from escher.core.task import TaskSpec
from escher.esl import AntiAffinity
from tests.support.k8s_control_plane import (
    ControlPlane,
    add_fake_node,
    binaries_available,
)

#: scheduler_perf's workloads of this test case (performance-config.yaml style).
WORKLOADS: dict[str, dict[str, int]] = {
    "100Nodes": {"initNodes": 100, "initPods": 200, "measurePods": 800},
    "1000Nodes": {"initNodes": 1000, "initPods": 2000, "measurePods": 8000},  # opt-in
}
#: config/node-default.yaml
NODE_CAPACITY = {"pods": "110", "cpu": "4", "memory": "32Gi"}
#: config/pod-with-pod-anti-affinity.yaml (the colour becomes the group).
POD_TEMPLATE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"generateName": "anti-affinity-pod-", "labels": {"color": "green"}},
    "spec": {
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"color": "green"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        },
        "containers": [
            {
                "image": "k8s.gcr.io/pause:3.2",
                "name": "pause",
                "ports": [{"containerPort": 80}],
                "resources": {
                    "limits": {"cpu": "100m", "memory": "500Mi"},
                    "requests": {"cpu": "100m", "memory": "500Mi"},
                },
            }
        ],
    },
}
REQUEST = Resources({"CPU": 0.1, "memory": 500 * 2**20})
VARIANTS = ("native", "escher-per-group", "escher-groups")
#: Client threads creating nodes and native pods (scheduler_perf creates them in parallel;
#: escher's backend keeps `creates_in_flight=8` pod creates going).
CLIENTS = 8
#: Seconds between progress lines while pods are bound; seconds a variant may take.
PROGRESS_SECONDS = 60.0
VARIANT_TIMEOUT = 900.0


@dataclass
class Binds:
    """One watch on a namespace's pods: pod -> node as kube-scheduler binds them."""

    api: Any
    namespace: str
    expected: int
    bound: dict[str, str] = field(default_factory=dict)
    #: pod -> its task's name ("aa-<i>": pod i of the run, in group i % groups).
    task: dict[str, str] = field(default_factory=dict)
    last: float = 0.0
    #: perf_counter time of each bind, in order (gaps show scheduler back-off).
    times: list[float] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Binds:
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait(30)
        return self

    def _run(self, ready: threading.Event) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        version = self.api.list_namespaced_pod(self.namespace).metadata.resource_version
        ready.set()
        while not self.done.is_set():
            try:  # raw JSON events: a generated-model pod per event costs ~1 ms of client CPU
                response = self.api.list_namespaced_pod(
                    self.namespace, watch=True, resource_version=version,
                    timeout_seconds=60, _preload_content=False,
                )  # fmt: skip
                for line in iter_resp_lines(response):
                    event = json.loads(line)
                    pod = event["object"]
                    if event["type"] == "ERROR":
                        break  # 410 Gone and the like: list again from the newest
                    meta = pod["metadata"]
                    version = meta["resourceVersion"]
                    name, node = meta["name"], pod["spec"].get("nodeName")
                    if node and name not in self.bound:
                        self.bound[name] = node
                        self.task[name] = task_name(meta)
                        self.last = time.perf_counter()
                        self.times.append(self.last)
                        if len(self.bound) >= self.expected:
                            self.done.set()
                            return
                else:
                    continue
                version = self.api.list_namespaced_pod(
                    self.namespace, limit=1
                ).metadata.resource_version  # pods bound meanwhile: they are counted below
                self._count_listed()
            except Exception:  # the server ended the watch early: go on from there
                time.sleep(0.05)

    def _count_listed(self) -> None:
        """After a broken watch: count the bound pods a full list shows (raw JSON)."""
        response = self.api.list_namespaced_pod(self.namespace, _preload_content=False)
        for pod in json.loads(response.data)["items"]:
            meta, node = pod["metadata"], pod["spec"].get("nodeName")
            if node and meta["name"] not in self.bound:
                self.bound[meta["name"]] = node
                self.task[meta["name"]] = task_name(meta)
                self.last = time.perf_counter()
        if len(self.bound) >= self.expected:
            self.done.set()

    def wait(self, timeout: float, label: str, failed: Any = lambda: 0) -> bool:
        """Wait for every pod to be bound, printing progress every `PROGRESS_SECONDS`;
        False after `timeout`, or once the pods not bound are all launches that failed
        (`failed()` counts them)."""
        start = last = time.perf_counter()
        while not self.done.wait(1.0):
            now = time.perf_counter()
            if now - last >= PROGRESS_SECONDS:
                last = now
                print(f"    ({label}: {len(self.bound)}/{self.expected} bound, "
                      f"{now - start:.0f} s waited)", flush=True)  # fmt: skip
            if now - start >= timeout or len(self.bound) + failed() >= self.expected:
                self.done.set()  # the watch thread ends at its next event
                return False
        return True


def task_name(meta: dict[str, Any]) -> str:
    """The task of a pod: native pods are named after it; escher's pods carry it in their
    name (``escher-<task>-<10 hex>``) or, when the name cannot show it, an annotation."""
    name = str(meta["name"])
    notes = meta.get("annotations") or {}
    if "escher.io/task-name" in notes:
        return str(notes["escher.io/task-name"])
    if name.startswith("escher-"):
        return name[len("escher-") :].rsplit("-", 1)[0]
    return name


def violations(binds: Binds, groups: int) -> int:
    """Pods sharing a node with another pod of their group (pod i is in group i % groups)."""
    seen: dict[tuple[str, int], int] = {}
    for pod, node in list(binds.bound.items()):  # the watch may still add (after a timeout)
        key = (node, int(binds.task.get(pod, pod).rsplit("-", 1)[1]) % groups)
        seen[key] = seen.get(key, 0) + 1
    return sum(n - 1 for n in seen.values() if n > 1)


def create(api: Any, namespace: str, pod: dict[str, Any]) -> None:
    """Create a pod, again after a busy server's timeout (409: the first one landed)."""
    from kubernetes.client.exceptions import ApiException

    for attempt in range(10):
        try:
            response = api.create_namespaced_pod(namespace, pod, _preload_content=False)
            response.read()  # the whole body, so the connection can be reused
            response.release_conn()
            return
        except ApiException as exc:
            if exc.status == 409 and attempt:
                return
            if exc.status not in (429, 500, 503, 504):
                raise
        time.sleep(0.5)
    raise RuntimeError(f"could not create pod {pod['metadata']['name']}")


def drain(cp: ControlPlane, namespace: str) -> None:
    """Delete the run's pods and wait until they are gone (an overloaded server may time
    out a collection delete that still goes on: ask again)."""
    api = cp.core_v1()
    deadline = time.monotonic() + VARIANT_TIMEOUT
    while time.monotonic() < deadline:
        try:
            api.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
            if not api.list_namespaced_pod(namespace, limit=1).items:
                return
        except Exception as exc:  # 504 from a busy server: the deletion goes on
            print(f"  (drain {namespace}: {str(exc).splitlines()[0]}; again)", flush=True)
        time.sleep(0.5)


#: The process classes whose CPU time is reported.
CLASSES = ("client", "etcd", "kube-apiserver", "kube-scheduler")


def cpu_seconds(cp: ControlPlane) -> dict[str, float]:
    """CPU time used so far by this client and each control-plane process (etcd,
    kube-apiserver, kube-scheduler): a cost the other processes on a shared machine do not
    blur."""
    tick = os.sysconf("SC_CLK_TCK")
    used = {"client": time.process_time()}
    for name, proc in cp._procs.items():  # the plane's child processes
        try:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        used[name] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return used


def cpu_since(cp: ControlPlane, before: dict[str, float]) -> dict[str, float]:
    """CPU seconds per process class since `before` (a `cpu_seconds` reading)."""
    now = cpu_seconds(cp)
    return {name: now.get(name, 0.0) - before.get(name, 0.0) for name in CLASSES}


# --- ops ------------------------------------------------------------------------------------
def create_nodes(cp: ControlPlane, count: int) -> None:
    """createNodes with uniqueNodeLabelStrategy kubernetes.io/hostname, from `CLIENTS`
    parallel clients as scheduler_perf does."""
    apis = [cp.core_v1() for _ in range(CLIENTS)]

    def one(i: int) -> None:
        name = f"sp-node-{i:05d}"
        add_fake_node(apis[i % CLIENTS], name, NODE_CAPACITY, labels={"bench": "sched-perf"})

    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(one, range(count)))


def native_pod(i: int, groups: int, namespace: str) -> dict[str, Any]:
    """Pod i of the run: the template's anti-affinity with colour g<i % groups>."""
    pod = _setup.anti_affinity_pod(POD_TEMPLATE, i, groups, namespace)
    pod["spec"]["nodeSelector"] = {"bench": "sched-perf"}
    return pod


def native(cp: ControlPlane, work: dict[str, int], groups: int) -> dict[str, Any]:
    namespace = f"sp-native-{uuid.uuid4().hex[:6]}"
    cp.create_namespace(namespace)
    total = work["initPods"] + work["measurePods"]
    binds = Binds(cp.core_v1(), namespace, total).start()
    apis = [cp.core_v1() for _ in range(CLIENTS)]

    def creator(k: int) -> None:  # client k creates pods k, k + CLIENTS, ... in order
        for i in range(k, total, CLIENTS):
            create(apis[k], namespace, native_pod(i, groups, namespace))

    cpu0 = cpu_seconds(cp)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(creator, range(CLIENTS)))
    submitted = time.perf_counter() - t0
    ok = binds.wait(VARIANT_TIMEOUT, "native")
    result = _result(0.0, submitted, binds, t0, ok, violations(binds, groups))
    result["cpus"] = cpu_since(cp, cpu0)
    drain(cp, namespace)
    return result


def escher(cp: ControlPlane, work: dict[str, int], groups: int, way: str) -> dict[str, Any]:
    namespace = f"sp-{way}-{uuid.uuid4().hex[:6]}"
    cp.create_namespace(namespace)
    api = cp.core_v1()
    total = work["initPods"] + work["measurePods"]
    binds = Binds(api, namespace, total).start()
    backend = KubernetesBackend(
        kubeconfig=str(cp.kubeconfig_path),
        namespace=namespace,
        node_selector={"bench": "sched-perf"},
    )
    policies: list[AntiAffinity] = []
    try:
        cpu0 = cpu_seconds(cp)
        t0 = time.perf_counter()
        names = [f"g{j}" for j in range(groups)]
        if way == "escher-per-group":
            policies = [AntiAffinity(backend, per_node=1, name=g) for g in names]
            launchers: list[Any] = policies
        else:
            one = AntiAffinity(backend, per_node=1, groups=names, name="all")
            policies = [one]
            launchers = [one.group(g) for g in names]
        requests = [launcher.constraint().resources for launcher in launchers]
        setup_end = [t0]

        def flush() -> None:  # setup ends once the labels are on the nodes
            backend.flush_writes()
            setup_end[0] = time.perf_counter()

        landed = threading.Thread(target=flush)
        landed.start()  # (timed beside the launches, which a user makes at once)
        refs: list[Any] = []
        for i in range(total):
            j = i % groups
            spec = TaskSpec(
                None, image="k8s.gcr.io/pause:3.2", command=["/pause"], name=f"aa-{i}",
                resources=REQUEST + requests[j],
            )  # fmt: skip
            refs.append(launchers[j].launch_spec(spec))
        submitted = time.perf_counter() - t0
        landed.join(timeout=VARIANT_TIMEOUT)
        setup = setup_end[0] - t0

        def failed() -> int:  # launches that ended without a pod (their create failed)
            return sum(1 for ref in refs if ref.done())

        ok = binds.wait(VARIANT_TIMEOUT, way, failed)
        result = _result(setup, submitted, binds, t0, ok, violations(binds, groups))
        result["cpus"] = cpu_since(cp, cpu0)
        result["node_writes"] = backend.node_writes
        result["failed"] = failed()
        drain(cp, namespace)
        for policy in policies:
            policy.close()
    finally:
        backend.close()
    return result


def _result(
    setup: float, submitted: float, binds: Binds, t0: float, ok: bool, bad: int
) -> dict[str, Any]:
    """Times from t0: setup, every launch returned (`submit`), every pod bound (`e2e`), and
    the longest pause between two binds (`gap`: scheduler back-off shows there)."""
    e2e = (binds.last if ok else time.perf_counter()) - t0
    times = [t0 + setup, *binds.times]
    gap = max((b - a for a, b in itertools.pairwise(times)), default=0.0)
    return {
        "bound": len(binds.bound),
        "setup": setup,
        "submit": submitted,
        "bind": e2e - setup,
        "e2e": e2e,
        "gap": gap,
        "ok": ok,
        "violations": bad,
    }


# --- rounds -----------------------------------------------------------------------------------
def show(label: str, res: dict[str, Any], base: dict[str, Any] | None) -> None:
    """One line per finished variant (printed at once: a long run shows its progress)."""
    ratio = f"{res['e2e'] / base['e2e']:10.2f}x" if base else f"{'':>11}"
    cpu_ratio = f"{res['cpu'] / base['cpu']:10.2f}x" if base else f"{'':>11}"
    cpus = " ".join(f"{res['cpus'][name]:7.1f}" for name in CLASSES)
    print(
        f"{label:24}{res['setup']:9.2f}{res['bind']:9.2f}{res['e2e']:9.2f}{ratio}"
        f"{res['cpu']:8.1f}{cpu_ratio} {cpus}{res.get('node_writes', 0):>8}"
        f"{res['violations']:>6}{res['submit']:9.2f}{res['gap']:7.2f}"
        + (
            ""
            if res["ok"]
            else f"  NOT ALL BOUND ({res['bound']} bound, {res.get('failed', 0)} launches failed)"
        ),
        flush=True,
    )


def run(
    cp: ControlPlane,
    workload: str,
    groups: int,
    rounds: int,
    pause: float,
    variants: tuple[str, ...] = VARIANTS,
) -> int:
    work = WORKLOADS[workload]
    t0 = time.perf_counter()
    create_nodes(cp, work["initNodes"])
    print(
        f"SchedulingPodAntiAffinity/{workload}: {work['initNodes']} nodes (created in "
        f"{time.perf_counter() - t0:.1f} s by {CLIENTS} clients), {groups} groups, "
        f"{work['initPods']} init + {work['measurePods']} measured pods; {rounds} rounds, "
        f"variants alternate (order rotates each round); load average {os.getloadavg()[0]:.1f}"
    )
    cpu_head = " ".join(f"{name[-9:]:>7}" for name in CLASSES)
    print(f"{'round variant':24}{'setup s':>9}{'bind s':>9}{'e2e s':>9}{'vs native':>11}"
          f"{'cpu s':>8}{'vs native':>11} {cpu_head}{'writes':>8}{'bad':>6}"
          f"{'submit s':>9}{'gap s':>7}")  # fmt: skip
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    failed = False
    for r in range(rounds):
        order = [v for v in VARIANTS[r % 3 :] + VARIANTS[: r % 3] if v in variants]
        this: dict[str, dict[str, Any]] = {}
        for variant in order:
            time.sleep(pause)
            res = (
                native(cp, work, groups)
                if variant == "native"
                else escher(cp, work, groups, variant)
            )
            res["cpu"] = sum(res["cpus"].values())
            res["load"] = os.getloadavg()[0]
            this[variant] = res
            show(f"{r + 1:>5} {variant}", res, this.get("native"))
            failed |= not res["ok"] or res["violations"] > 0
        if "native" not in this:  # no baseline in this run: times and CPU only
            continue
        base = this["native"]
        for variant in VARIANTS:
            res = this[variant]
            res["ratio"] = res["e2e"] / base["e2e"]
            res["cpu_ratio"] = res["cpu"] / base["cpu"]
            results[variant].append(res)
        print(f"  round {r + 1} vs native: " + ", ".join(
            f"{v} {this[v]['ratio']:.2f}x (CPU {this[v]['cpu_ratio']:.2f}x)" for v in VARIANTS[1:]
        ) + f"; load average {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    if set(variants) != set(VARIANTS):
        return 1 if failed else 0
    keys = ("setup", "bind", "e2e", "ratio", "cpu", "cpu_ratio")
    med = {v: {k: statistics.median(x[k] for x in results[v]) for k in keys} for v in VARIANTS}
    print(f"\nmedian of {rounds} rounds")
    for variant in VARIANTS:
        m = med[variant]
        cpus = {n: statistics.median(x["cpus"][n] for x in results[variant]) for n in CLASSES}
        print(f"      {variant:18}{m['setup']:9.2f}{m['bind']:9.2f}{m['e2e']:9.2f}"
              f"{m['ratio']:10.2f}x{m['cpu']:8.1f}{m['cpu_ratio']:10.2f}x "
              + " ".join(f"{cpus[n]:7.1f}" for n in CLASSES))  # fmt: skip
    per, one = med["escher-per-group"], med["escher-groups"]
    print(
        f"\nend to end vs native (median ratio): per-group {per['ratio']:.2f}x, groups "
        f"{one['ratio']:.2f}x (target <= 1.00x); CPU (client + control plane) per-group "
        f"{per['cpu_ratio']:.2f}x, groups {one['cpu_ratio']:.2f}x\nper-group / groups: setup "
        f"{per['setup'] / max(one['setup'], 1e-9):.2f}x, "
        f"end to end {per['e2e'] / one['e2e']:.2f}x, "
        f"CPU {per['cpu'] / one['cpu']:.2f}x (target <= 1.10x)"
    )
    return 1 if failed else 0


def main() -> int:
    global VARIANT_TIMEOUT
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="100Nodes")
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between runs")
    parser.add_argument(
        "--timeout", type=float, default=VARIANT_TIMEOUT, help="seconds a variant may take"
    )
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help="comma-separated subset of the variants (ratios need native)",
    )
    args = parser.parse_args()
    variants = tuple(v for v in args.variants.split(",") if v)
    if not variants or set(variants) - set(VARIANTS):
        parser.error(f"--variants takes a comma-separated subset of {', '.join(VARIANTS)}")
    VARIANT_TIMEOUT = args.timeout
    if not binaries_available():
        print("Kubernetes binaries missing: run scripts/provision-k8s.sh first.")
        return 2
    with ControlPlane() as cp:
        return run(cp, args.workload, args.groups, args.rounds, args.pause, variants)


if __name__ == "__main__":
    sys.exit(main())
