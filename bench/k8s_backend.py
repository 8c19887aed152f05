"""Kubernetes backend benchmark, on a real kube-apiserver + kube-scheduler (no kubelet).

1. set_resource latency vs a raw PATCH of the node status through the official client,
   interleaved in the same run (target: escher's overhead under 20%).
2. A MapReduce-style map phase with data locality on 20 fake nodes: every map task must run
   where its input shard lives. escher places the tasks through `escher.esl.DataLocality`
   (an ephemeral resource on the shard's node, requested by the task); the baseline pins
   the same number of pods with native required node affinity. Metric: time from the first
   pod submitted until kube-scheduler has bound all of them (target: within 5%).
3. The Kubernetes project's own scheduler benchmark (scheduler_perf: performance-config.yaml,
   node-default.yaml and the pod templates, read from the unpacked Kubernetes source when
   present), required pod anti-affinity: `--groups` groups of pods that repel each other,
   `--pods` pods on `--nodes` nodes. Native podAntiAffinity against escher's AntiAffinity
   (groups written with one bulk call per node), the bulk call used directly, and one
   set_resource per group; end to end = setup + submission + bind of every pod; each
   placement is checked (target: escher <= 1.0x native).
4. One client submits `--pods` plain pods (the SchedulingBasic template) one by one: native
   creates from one thread against escher's launch (creates pipelined), and escher with one
   create in flight; bind time of all pods and the client's CPU time per pod (target:
   escher within 1.05x native).

Usage: python bench/k8s_backend.py [--quick] [--only perf|latency|mapreduce]
Needs scripts/provision-k8s.sh (binaries) and pip install 'escher-sched[k8s]'.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import threading
import time
import uuid
from typing import Any

import _setup  # this checkout first on sys.path; the pod builder

from escher.backends.kubernetes import KubernetesBackend
from escher.backends.kubernetes._kube import KubeApi
from escher.backends.kubernetes._names import Names
from escher.backends.kubernetes._payload import TASK_ENV, encode_task
from escher.backends.kubernetes._pods import RUNNER_COMMAND, build_pod
from escher.core.quantity import parse_quantity
from escher.core.resources import Resources
from escher.core.task import TaskSpec
from escher.esl import DataLocality
from tests.support.k8s_control_plane import (
    ControlPlane,
    add_fake_node,
    binaries_available,
    cache_dir,
)

IMAGE = "escher-bench:none"  # never pulled: there is no kubelet


def map_shard(shard: int) -> int:
    """The map task (never runs here: the benchmark measures placement)."""
    return shard


# --- 1. set_resource latency ----------------------------------------------------------
def bench_set_resource(cp: ControlPlane, iterations: int) -> dict[str, float]:
    api = cp.core_v1()
    add_fake_node(api, "lat-node", {"cpu": "4"}, labels={"bench": "latency"})
    # The raw PATCHes go to a node of their own: interleaved on one node, each would make
    # escher's cached resourceVersion stale and turn every call into a conflict + retry.
    add_fake_node(api, "raw-node", {"cpu": "4"}, labels={"bench": "raw"})
    backend = KubernetesBackend(
        kubeconfig=str(cp.kubeconfig_path), node_selector={"bench": "latency"}
    )
    resource = "escher.io/raw-lat"
    escher_times: list[float] = []
    raw_times: list[float] = []
    try:
        backend.set_resource("esc-lat", 1, "lat-node")
        api.patch_node_status("raw-node", {"status": {"capacity": {resource: "1"}}})
        for i in range(iterations):
            value = i % 7 + 1
            t0 = time.perf_counter()
            backend.set_resource("esc-lat", value, "lat-node")
            t1 = time.perf_counter()
            body = {
                "status": {
                    "capacity": {resource: str(value)},
                    "allocatable": {resource: str(value)},
                }
            }
            api.patch_node_status("raw-node", body)
            t2 = time.perf_counter()
            escher_times.append(t1 - t0)
            raw_times.append(t2 - t1)
        stale: list[float] = []
        for i in range(max(10, iterations // 10)):  # someone else wrote in between
            api.patch_node_status("lat-node", {"metadata": {"labels": {"touch": str(i)}}})
            t0 = time.perf_counter()
            backend.set_resource("esc-lat", i % 7 + 1, "lat-node")
            stale.append(time.perf_counter() - t0)
        backend.set_resource("esc-lat", 0, "lat-node")
    finally:
        backend.close()
    return {
        "escher_median_ms": statistics.median(escher_times) * 1e3,
        "raw_median_ms": statistics.median(raw_times) * 1e3,
        "escher_p90_ms": sorted(escher_times)[int(0.9 * len(escher_times))] * 1e3,
        "raw_p90_ms": sorted(raw_times)[int(0.9 * len(raw_times))] * 1e3,
        "conflicts": float(backend.conflicts),
        "stale_median_ms": statistics.median(stale) * 1e3,
    }


# --- 2. MapReduce with data locality ----------------------------------------------------
class BindWatcher:
    """Counts pods of a namespace as kube-scheduler binds them (one watch)."""

    def __init__(self, api: KubeApi, namespace: str, expected: int) -> None:
        self.api, self.namespace, self.expected = api, namespace, expected
        self.bound: dict[str, str] = {}
        self.labels: dict[str, dict[str, str]] = {}
        self.done = threading.Event()
        self.last_bind = 0.0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(30)

    def _run(self) -> None:
        _, version = self.api.list_pods(self.namespace)
        self._ready.set()
        while not self.done.is_set():
            try:
                version = self._watch(version)
            except Exception:  # a watch the server ended early: go on from the last version
                time.sleep(0.05)

    def _watch(self, version: str) -> str:
        for event in self.api.watch_pods(self.namespace, "", version, 60):
            obj = event.get("object") or {}
            version = obj.get("metadata", {}).get("resourceVersion", version)
            node = (obj.get("spec") or {}).get("nodeName")
            name = obj.get("metadata", {}).get("name")
            if node and name not in self.bound:
                self.bound[name] = node
                self.labels[name] = dict(obj.get("metadata", {}).get("labels") or {})
                self.last_bind = time.perf_counter()
                if len(self.bound) >= self.expected:
                    self.done.set()
                    return version
        return version


def _drain(kube: KubeApi, namespace: str) -> None:
    kube.core.delete_collection_namespaced_pod(
        namespace, grace_period_seconds=0, _preload_content=False
    ).release_conn()
    deadline = time.monotonic() + 60
    while kube.list_pods(namespace)[0] and time.monotonic() < deadline:
        time.sleep(0.2)


def native_pod(namespace: str, name: str, node: str, shard: int) -> dict[str, Any]:
    """The pod escher would build for the map task, pinned by node affinity instead."""
    spec = TaskSpec(map_shard, (shard,), resources=Resources({"CPU": 0.1}))
    pod = build_pod(
        name=name, namespace=namespace, spec=spec, names=Names(), session="native",
        task_id=name, image=IMAGE, command=list(RUNNER_COMMAND),
        env={TASK_ENV: encode_task(map_shard, (shard,), {}), "ESCHER_TASK_NAME": "map_shard"},
        node_selector={"bench": "mapreduce"}, service_account=None,
    )  # fmt: skip
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
        ]}]
    }}}  # fmt: skip
    return pod


def run_native(cp: ControlPlane, kube: KubeApi, nodes: list[str], tasks: int) -> dict[str, Any]:
    namespace = f"native-{uuid.uuid4().hex[:6]}"
    cp.create_namespace(namespace)  # and its default ServiceAccount
    watcher = BindWatcher(kube, namespace, tasks)
    t0 = time.perf_counter()
    for i in range(tasks):
        node = nodes[i % len(nodes)]  # shard i % 20 lives on node i % 20
        kube.create_pod(namespace, native_pod(namespace, f"map-{i}", node, i))
    submitted = time.perf_counter() - t0
    ok = watcher.done.wait(300)
    total = watcher.last_bind - t0
    right = sum(watcher.bound[f"map-{i}"] == nodes[i % len(nodes)] for i in range(tasks))
    _drain(kube, namespace)
    return {"submit_s": submitted, "bind_all_s": total, "ok": ok, "local": right}


def run_escher(cp: ControlPlane, kube: KubeApi, nodes: list[str], tasks: int) -> dict[str, Any]:
    namespace = f"escher-{uuid.uuid4().hex[:6]}"
    cp.create_namespace(namespace)  # and its default ServiceAccount
    backend = KubernetesBackend(
        kubeconfig=str(cp.kubeconfig_path),
        namespace=namespace,
        image=IMAGE,
        node_selector={"bench": "mapreduce"},
    )
    try:
        with DataLocality(backend, name="mr") as loc:
            t_setup = time.perf_counter()
            for s, node in enumerate(nodes):
                loc.add(f"shard-{s}", [node])
            setup = time.perf_counter() - t_setup
            near = [loc.near(f"shard-{s}") for s in range(len(nodes))]
            watcher = BindWatcher(kube, namespace, tasks)
            t0 = time.perf_counter()
            refs = [
                near[i % len(nodes)].launch(map_shard, i, resources={"CPU": 0.1})
                for i in range(tasks)
            ]
            submitted = time.perf_counter() - t0
            ok = watcher.done.wait(300)
            total = watcher.last_bind - t0
            pods, _ = kube.list_pods(namespace)
            where = {
                p["metadata"]["labels"]["escher.io/task"]: p["spec"].get("nodeName") for p in pods
            }
            right = sum(where.get(r.id) == nodes[i % len(nodes)] for i, r in enumerate(refs))
            for ref in refs:
                ref.cancel()
            _drain(kube, namespace)
    finally:
        backend.close()
    return {
        "submit_s": submitted, "bind_all_s": total, "ok": ok, "local": right, "setup_s": setup,
    }  # fmt: skip


# --- 3./4. the Kubernetes project's scheduler benchmark workloads (scheduler_perf) ----------
PERF_DIR = cache_dir() / "gopath/src/k8s.io/kubernetes/test/integration/scheduler_perf/config"
#: The templates as the Kubernetes source ships them, used when it is not unpacked here.
FALLBACK_TEMPLATES: dict[str, dict[str, Any]] = {
    "node-default.yaml": {
        "apiVersion": "v1", "kind": "Node", "metadata": {"generateName": "scheduler-perf-"},
        "spec": {}, "status": {"capacity": {"pods": "110", "cpu": "4", "memory": "32Gi"},
                               "conditions": [{"status": "True", "type": "Ready"}],
                               "phase": "Running"},
    },
    "pod-default.yaml": {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "pod-"},
        "spec": {"containers": [{
            "image": "k8s.gcr.io/pause:3.2", "name": "pause", "ports": [{"containerPort": 80}],
            "resources": {"limits": {"cpu": "100m", "memory": "500Mi"},
                          "requests": {"cpu": "100m", "memory": "500Mi"}}}]},
    },
    "pod-with-pod-anti-affinity.yaml": {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "anti-affinity-pod-", "labels": {"color": "green"}},
        "spec": {
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"color": "green"}},
                 "topologyKey": "kubernetes.io/hostname",
                 "namespaces": ["sched-test", "sched-setup"]}]}},
            "containers": [{
                "image": "k8s.gcr.io/pause:3.2", "name": "pause", "ports": [{"containerPort": 80}],
                "resources": {"limits": {"cpu": "100m", "memory": "500Mi"},
                              "requests": {"cpu": "100m", "memory": "500Mi"}}}],
        },
    },
}  # fmt: skip


def template(name: str) -> tuple[dict[str, Any], str]:
    """A scheduler_perf template (read from the unpacked Kubernetes source when present)."""
    path = PERF_DIR / name
    if path.is_file():
        import yaml

        return dict(yaml.safe_load(path.read_text())), str(path)
    return copy.deepcopy(FALLBACK_TEMPLATES[name]), "built-in copy of " + name


def perf_nodes(cp: ControlPlane, count: int) -> list[str]:
    """`count` nodes from node-default.yaml, each with its own hostname label."""
    node, _ = template("node-default.yaml")
    capacity = dict(node["status"]["capacity"])
    api = cp.core_v1()
    names = [f"perf-{i:04d}" for i in range(count)]
    for name in names:
        add_fake_node(api, name, capacity, labels={"bench": "perf"})
    return names


def container_requests(pod: dict[str, Any]) -> dict[str, float]:
    """The template container's requests, in escher's names."""
    requests = pod["spec"]["containers"][0]["resources"]["requests"]
    return {Names().from_k8s(k): parse_quantity(v) for k, v in requests.items()}


class Run:
    """One timed submission: pods created, bound; wall and client CPU time."""

    def __init__(self, kube: KubeApi, namespace: str, expected: int) -> None:
        self.kube, self.namespace = kube, namespace
        self.watcher = BindWatcher(kube, namespace, expected)
        self.t0 = time.perf_counter()
        self.cpu0 = time.process_time()
        self.submitted = 0.0

    def submitted_now(self) -> None:
        self.submitted = time.perf_counter() - self.t0

    def finish(self) -> dict[str, Any]:
        ok = self.watcher.done.wait(600)
        cpu = time.process_time() - self.cpu0
        pods = self.watcher.expected
        return {
            "ok": ok,
            "bind_all_s": self.watcher.last_bind - self.t0,
            "submit_s": self.submitted,
            "client_cpu_ms_per_pod": cpu / pods * 1e3,
            "bound": dict(self.watcher.bound),
            "labels": dict(self.watcher.labels),
        }


def native_anti_affinity(cp: ControlPlane, kube: KubeApi, pods: int, groups: int) -> dict[str, Any]:
    namespace = f"native-aa-{uuid.uuid4().hex[:6]}"
    cp.create_namespace(namespace)  # and its default ServiceAccount
    base, _ = template("pod-with-pod-anti-affinity.yaml")
    run = Run(kube, namespace, pods)
    for i in range(pods):
        kube.create_pod(namespace, _setup.anti_affinity_pod(base, i, groups, namespace))
    run.submitted_now()
    result = run.finish()
    result["setup_s"] = 0.0
    result["violations"] = _violations(
        {name: result["labels"][name].get("color", "") for name in result["bound"]},
        result["bound"],
    )
    _drain(kube, namespace)
    return result


def _violations(group_of: dict[str, str], bound: dict[str, str]) -> int:
    """Pods that share a node with another pod of their group."""
    seen: dict[tuple[str, str], int] = {}
    for name, node in bound.items():
        key = (node, group_of.get(name, ""))
        seen[key] = seen.get(key, 0) + 1
    return sum(n - 1 for n in seen.values() if n > 1)


def escher_anti_affinity(
    cp: ControlPlane, kube: KubeApi, pods: int, groups: int, mode: str
) -> dict[str, Any]:
    """Setup (10 group labels on every node) + launch + bind, through escher.

    mode "esl": `escher.esl.AntiAffinity(groups=...)` (one bulk write per node);
    "bulk": `set_resources` called directly; "per-label": one `set_resource` per group.
    """
    namespace = f"escher-aa-{uuid.uuid4().hex[:6]}"
    cp.create_namespace(namespace)  # and its default ServiceAccount
    backend = KubernetesBackend(
        kubeconfig=str(cp.kubeconfig_path), namespace=namespace, node_selector={"bench": "perf"}
    )
    pod, _ = template("pod-with-pod-anti-affinity.yaml")
    image = pod["spec"]["containers"][0]["image"]
    base = container_requests(pod)
    names = [f"g{j}" for j in range(groups)]
    try:
        run = Run(kube, namespace, pods)
        requests, policy = _aa_setup(backend, names, mode)
        setup = time.perf_counter() - run.t0
        task_group: dict[str, str] = {}
        for i in range(pods):
            group = names[i % groups]
            spec = TaskSpec(None, image=image, command=["/pause"], name=f"aa-{i}",
                            resources=Resources(base) + requests[group])  # fmt: skip
            ref = policy[group].launch_spec(spec) if policy else backend.launch(spec)
            task_group[ref.id] = group
        run.submitted_now()
        result = run.finish()
        result["setup_s"] = setup
        result["violations"] = _violations(
            {name: task_group.get(labels.get("escher.io/task", ""), "")
             for name, labels in result["labels"].items()},
            result["bound"],
        )  # fmt: skip
        _drain(kube, namespace)
        if policy:
            next(iter(policy.values())).owner.close()
        else:
            backend.set_resources(dict.fromkeys(requests, 0), {"CPU": 0.1})
    finally:
        backend.close()
    return result


def _aa_setup(
    backend: KubernetesBackend, groups: list[str], mode: str
) -> tuple[dict[str, Resources], dict[str, Any]]:
    """Put one unit per group on every node; the request and (ESL mode) policy per group."""
    if mode == "esl":
        from escher.esl import AntiAffinity

        aa = AntiAffinity(backend, groups=groups, name="bench")
        bound = {g: aa.group(g) for g in groups}
        return {g: Resources(b.constraint().resources) for g, b in bound.items()}, bound
    labels = {g: f"bench-aa-{g}" for g in groups}
    if mode == "bulk":
        backend.set_resources(dict.fromkeys(labels.values(), 1), {"CPU": 0.1})
    else:
        for label in labels.values():
            backend.set_resource(label, 1, {"CPU": 0.1})
    return {g: Resources({label: 1}) for g, label in labels.items()}, {}


def native_plain(cp: ControlPlane, kube: KubeApi, pods: int) -> dict[str, Any]:
    namespace = f"native-one-{uuid.uuid4().hex[:6]}"
    cp.create_namespace(namespace)  # and its default ServiceAccount
    base, _ = template("pod-default.yaml")
    run = Run(kube, namespace, pods)
    for i in range(pods):
        pod = copy.deepcopy(base)
        pod["metadata"] = {"name": f"pod-{i}"}
        kube.create_pod(namespace, pod)
    run.submitted_now()
    result = run.finish()
    _drain(kube, namespace)
    return result


def escher_plain(cp: ControlPlane, kube: KubeApi, pods: int, **options: Any) -> dict[str, Any]:
    namespace = f"escher-one-{uuid.uuid4().hex[:6]}"
    cp.create_namespace(namespace)  # and its default ServiceAccount
    pod, _ = template("pod-default.yaml")
    image = pod["spec"]["containers"][0]["image"]
    request = Resources(container_requests(pod))
    backend = KubernetesBackend(
        kubeconfig=str(cp.kubeconfig_path), namespace=namespace,
        node_selector={"bench": "perf"}, **options,
    )  # fmt: skip
    try:
        backend.get_cluster_state()  # connect and fill the node cache, as a session would
        run = Run(kube, namespace, pods)
        for i in range(pods):
            backend.launch(TaskSpec(None, image=image, command=["/pause"], name=f"pod-{i}",
                                    resources=request))  # fmt: skip
        run.submitted_now()
        result = run.finish()
        _drain(kube, namespace)
    finally:
        backend.close()
    return result


def _supported(kind: str) -> bool:
    """Whether this version of escher has what a variant needs (to compare with older ones)."""
    import inspect

    from escher.esl import AntiAffinity

    if kind == "esl":
        return "groups" in inspect.signature(AntiAffinity.__init__).parameters
    if kind == "escher-1":
        return "creates_in_flight" in inspect.signature(KubernetesBackend.__init__).parameters
    return True


def _progress(what: str, run: dict[str, Any]) -> None:
    print(
        f"  {what}: setup {run.get('setup_s', 0.0):.2f} s, submit {run['submit_s']:.2f} s, "
        f"all bound {run['bind_all_s']:.2f} s, client CPU "
        f"{run['client_cpu_ms_per_pod']:.2f} ms/pod" + ("" if run["ok"] else " (TIMED OUT)"),
        flush=True,
    )


def _med(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def bench_scheduler_perf(cp: ControlPlane, nodes: int, pods: int, groups: int, rounds: int) -> None:
    _, node_src = template("node-default.yaml")
    _, aa_src = template("pod-with-pod-anti-affinity.yaml")
    _, plain_src = template("pod-default.yaml")
    perf_nodes(cp, nodes)
    kube = KubeApi(cp.api_client())
    print(f"\nscheduler_perf templates: {node_src}; {aa_src}; {plain_src}")

    kinds = tuple(k for k in ("native", "esl", "bulk", "per-label") if _supported(k))
    aa: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for _ in range(rounds):
        aa["native"].append(native_anti_affinity(cp, kube, pods, groups))
        _progress("anti-affinity native", aa["native"][-1])
        for mode in kinds[1:]:
            time.sleep(1.0)
            aa[mode].append(escher_anti_affinity(cp, kube, pods, groups, mode))
            _progress(f"anti-affinity {mode}", aa[mode][-1])
        time.sleep(1.0)
    print(f"\n3. Required anti-affinity, {groups} groups, {pods} pods on {nodes} nodes "
          f"(SchedulingPodAntiAffinity), median of {rounds} rounds")  # fmt: skip
    print(f"{'':36}{'setup s':>9}{'submit s':>10}{'end-to-end s':>14}{'ratio':>8}"
          f"{'violations':>12}")  # fmt: skip
    native_e2e = _med(aa["native"], "bind_all_s")
    labels = {
        "native": "native podAntiAffinity",
        "esl": "escher AntiAffinity(groups=)",
        "bulk": "escher set_resources (bulk)",
        "per-label": "escher set_resource per group",
    }
    for kind in kinds:
        runs = aa[kind]
        e2e = _med(runs, "bind_all_s")
        bad = max(r["violations"] for r in runs)
        ok = all(r["ok"] for r in runs)
        print(
            f"{labels[kind]:36}{_med(runs, 'setup_s'):9.2f}{_med(runs, 'submit_s'):10.2f}"
            f"{e2e:14.2f}{e2e / native_e2e:7.2f}x{bad:>12}" + ("" if ok else "  TIMED OUT")
        )
    print("end to end = setup + submit + bind of every pod; target escher <= 1.0x native")

    one: dict[str, list[dict[str, Any]]] = {"native": [], "escher": []}
    if _supported("escher-1"):
        one["escher-1"] = []
    for _ in range(rounds):
        one["native"].append(native_plain(cp, kube, pods))
        _progress("one client native", one["native"][-1])
        time.sleep(1.0)
        one["escher"].append(escher_plain(cp, kube, pods))
        _progress("one client escher", one["escher"][-1])
        time.sleep(1.0)
        if "escher-1" in one:
            one["escher-1"].append(escher_plain(cp, kube, pods, creates_in_flight=1))
            _progress("one client escher, 1 in flight", one["escher-1"][-1])
            time.sleep(1.0)
    print(f"\n4. One client submits {pods} pods (SchedulingBasic template) on {nodes} nodes, "
          f"median of {rounds} rounds")  # fmt: skip
    print(f"{'':36}{'submit s':>10}{'bind all s':>12}{'ratio':>8}{'client CPU ms/pod':>20}")
    base = _med(one["native"], "bind_all_s")
    labels = {
        "native": "native creates, one thread",
        "escher": "escher launch (pipelined)",
        "escher-1": "escher launch, 1 create in flight",
    }
    for kind, runs in one.items():
        bind = _med(runs, "bind_all_s")
        print(
            f"{labels[kind]:36}{_med(runs, 'submit_s'):10.2f}{bind:12.2f}{bind / base:7.2f}x"
            f"{_med(runs, 'client_cpu_ms_per_pod'):20.2f}"
        )
    print("target: escher's bind-all time within 1.05x native")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations and pods")
    parser.add_argument(
        "--only", choices=["latency", "mapreduce", "perf"], action="append",
        help="run only these parts (repeatable; default: all)",
    )  # fmt: skip
    parser.add_argument("--nodes", type=int, default=100, help="nodes for the perf part")
    parser.add_argument("--pods", type=int, default=1000, help="pods for the perf part")
    parser.add_argument("--groups", type=int, default=10, help="anti-affinity groups")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3, quick 2)")
    args = parser.parse_args()
    parts = set(args.only or ["latency", "mapreduce", "perf"])
    if not binaries_available():
        print("Kubernetes binaries missing: run scripts/provision-k8s.sh first.")
        return 2
    iterations = 100 if args.quick else 400
    tasks = 100 if args.quick else 300
    rounds = args.rounds or (2 if args.quick else 3)

    with ControlPlane() as cp:
        if "perf" in parts:
            bench_scheduler_perf(cp, args.nodes, args.pods, args.groups, rounds)
        if "latency" in parts:
            bench_latency(cp, iterations)
        if "mapreduce" in parts:
            bench_mapreduce(cp, tasks, rounds)
    return 0


def bench_latency(cp: ControlPlane, iterations: int) -> None:
    lat = bench_set_resource(cp, iterations)
    overhead = lat["escher_median_ms"] / lat["raw_median_ms"] - 1
    print(f"\nset_resource latency ({iterations} interleaved calls, each on its own node)")
    print(f"{'':28}{'median ms':>12}{'p90 ms':>10}")
    print(f"{'raw PATCH (client)':28}{lat['raw_median_ms']:12.2f}{lat['raw_p90_ms']:10.2f}")
    print(f"{'escher set_resource':28}{lat['escher_median_ms']:12.2f}{lat['escher_p90_ms']:10.2f}")
    print(f"{'escher, after a foreign write':28}{lat['stale_median_ms']:12.2f}"
          "   (stale resourceVersion: 422, GET, retry)")  # fmt: skip
    print(f"overhead vs raw: {overhead:+.1%} (target < +20%); "
          f"conflicts retried: {lat['conflicts']:.0f}")  # fmt: skip


def bench_mapreduce(cp: ControlPlane, tasks: int, rounds: int) -> None:
    api = cp.core_v1()
    nodes = [f"mr-{i:02d}" for i in range(20)]
    for node in nodes:
        add_fake_node(api, node, {"cpu": "16", "memory": "64Gi"},
                      labels={"bench": "mapreduce"})  # fmt: skip
    kube = KubeApi(cp.api_client())
    results: dict[str, list[dict[str, Any]]] = {"native": [], "escher": []}
    for _ in range(rounds):
        results["native"].append(run_native(cp, kube, nodes, tasks))
        time.sleep(1.0)
        results["escher"].append(run_escher(cp, kube, nodes, tasks))
        time.sleep(1.0)
    print(f"\nMapReduce map phase: {tasks} pods, 20 nodes, data locality, {rounds} rounds")
    print(f"{'':34}{'bind all (s)':>14}{'submit (s)':>12}{'local':>8}")
    med: dict[str, float] = {}
    for kind, label in (("native", "native node affinity"), ("escher", "escher DataLocality")):
        runs = results[kind]
        med[kind] = statistics.median(r["bind_all_s"] for r in runs)
        submit = statistics.median(r["submit_s"] for r in runs)
        local = min(r["local"] for r in runs)
        all_ok = all(r["ok"] for r in runs)
        print(
            f"{label:34}{med[kind]:14.3f}{submit:12.3f}{local:>5}/{tasks}"
            + ("" if all_ok else "  (TIMED OUT)")
        )
    setup = statistics.median(r["setup_s"] for r in results["escher"])
    print(f"escher / native bind-all time: {med['escher'] / med['native']:.3f}x "
          f"(target <= 1.05x); DataLocality.add on 20 nodes: {setup * 1e3:.0f} ms")  # fmt: skip
    print("per round (native, escher):", [
        (round(n["bind_all_s"], 3), round(e["bind_all_s"], 3))
        for n, e in zip(results["native"], results["escher"], strict=True)
    ])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
