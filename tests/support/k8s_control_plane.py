"""A real, kubelet-less Kubernetes control plane on loopback for tests.

Runs etcd + kube-apiserver + kube-scheduler (v1.20.2, built by
``scripts/provision-k8s.sh`` into ``${ESCHER_K8S_CACHE:-~/.cache/escher-k8s}/bin``)
as child processes, each on free 127.0.0.1 ports, with a throw-away working
directory holding certificates, a static token file, a kubeconfig and the logs.

There is no kubelet and no kube-controller-manager.  ``add_fake_node`` creates
Node objects that the real scheduler will bind pods to, and ``FakeKubelet``
plays the kubelet for pods bound to those nodes (Pending -> Running ->
Succeeded/Failed, and finalising graceful deletions).

Only the standard library is needed to start/stop the control plane; the
helpers use the official ``kubernetes`` Python client (``pip install kubernetes``).

Example::

    with ControlPlane() as cp:
        api = cp.core_v1()
        add_fake_node(api, "n1", {"cpu": "8", "escher.io/foo": "1"})
        with FakeKubelet(api, run_seconds=0.5):
            ...
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import heapq
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
import weakref
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "FAKE_EXIT_CODE_ANNOTATION",
    "FAKE_MESSAGE_ANNOTATION",
    "FAKE_NODE_LABEL",
    "FAKE_RUN_SECONDS_ANNOTATION",
    "BinariesMissing",
    "ControlPlane",
    "ControlPlaneError",
    "FakeKubelet",
    "add_fake_node",
    "binaries_available",
    "cache_dir",
    "find_binaries",
    "set_node_resources",
    "wait_for",
]

FAKE_NODE_LABEL = "escher.io/fake-node"
FAKE_EXIT_CODE_ANNOTATION = "escher.io/fake-exit-code"
FAKE_MESSAGE_ANNOTATION = "escher.io/fake-message"
FAKE_RUN_SECONDS_ANNOTATION = "escher.io/fake-run-seconds"

_BINARIES = ("etcd", "kube-apiserver", "kube-scheduler")
_PROVISION_HINT = "run scripts/provision-k8s.sh (builds kube-apiserver/kube-scheduler, ~7 min)"


class ControlPlaneError(RuntimeError):
    """A control-plane process failed to start or become ready."""


class BinariesMissing(ControlPlaneError):
    """The cached binaries are not there; run scripts/provision-k8s.sh."""


# --------------------------------------------------------------------------- binaries


def cache_dir() -> Path:
    """``$ESCHER_K8S_CACHE`` or ``~/.cache/escher-k8s`` (same rule as the provision script)."""
    env = os.environ.get("ESCHER_K8S_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "escher-k8s"


def find_binaries(cache: Path | str | None = None) -> dict[str, Path]:
    """Return ``{"etcd": path, "kube-apiserver": path, "kube-scheduler": path}``.

    Raises :class:`BinariesMissing` (with a hint to run the provision script)
    if any is absent.
    """
    bindir = (Path(cache) if cache is not None else cache_dir()) / "bin"
    found: dict[str, Path] = {}
    missing: list[str] = []
    for name in _BINARIES:
        p = bindir / name
        if p.is_file() and os.access(p, os.X_OK):
            found[name] = p
        else:
            missing.append(str(p))
    if missing:
        raise BinariesMissing(
            f"Kubernetes control-plane binaries not found: {', '.join(missing)}; {_PROVISION_HINT}"
        )
    return found


def binaries_available(cache: Path | str | None = None) -> bool:
    try:
        find_binaries(cache)
    except BinariesMissing:
        return False
    return True


# --------------------------------------------------------------------------- helpers


def _free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (sockets held open until all are picked)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _run(cmd: list[str], cwd: Path) -> None:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    if r.returncode != 0:
        raise ControlPlaneError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")


def _pdeathsig() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _tail(path: Path, n: int = 40) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "<no log>"
    return "\n".join(lines[-n:])


_LIVE: weakref.WeakSet[ControlPlane] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for cp in list(_LIVE):
        with contextlib.suppress(Exception):
            cp.stop()


# --------------------------------------------------------------------------- control plane


class ControlPlane:
    """etcd + kube-apiserver + kube-scheduler on 127.0.0.1.

    Attributes (valid after :meth:`start`):
        server            ``https://127.0.0.1:<port>``
        token             bearer token of the ``escher-admin`` user (group ``system:masters``)
        ca_path           PEM file to verify the apiserver's certificate
        kubeconfig_path   kubeconfig usable by ``kubernetes.config.load_kube_config``
        workdir           temp dir holding everything below
        log_dir           ``etcd.log``, ``kube-apiserver.log``, ``kube-scheduler.log``
        etcd_endpoint     ``http://127.0.0.1:<port>``
        startup_seconds   wall time :meth:`start` took
    """

    def __init__(
        self,
        *,
        cache: Path | str | None = None,
        workdir: Path | str | None = None,
        scheduler: bool = True,
        timeout: float = 90.0,
        scheduler_config: Mapping[str, Any] | None = None,
        apiserver_args: Iterable[str] = (),
        scheduler_args: Iterable[str] = (),
        verbosity: int = 1,
        keep_etcd_data: bool = False,
        die_with_parent: bool = True,
    ) -> None:
        """
        Args:
            cache: cache dir of the provision script (default :func:`cache_dir`).
            workdir: where to put certs/kubeconfig/logs/etcd data (default: fresh mkdtemp).
            scheduler: also start kube-scheduler.
            timeout: seconds allowed for each component to become healthy.
            scheduler_config: top-level keys merged into the generated
                KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1beta1).
            apiserver_args / scheduler_args: extra command-line flags (appended last).
            verbosity: ``--v`` for apiserver and scheduler.
            keep_etcd_data: keep etcd's data dir on stop (it is ~130 MB of WAL).
            die_with_parent: children get SIGTERM if the *thread* that started
                them exits (PR_SET_PDEATHSIG); avoids orphans when pytest is killed.
        """
        self.binaries = find_binaries(cache)
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="escher-k8s-"))
        self.log_dir = self.workdir / "logs"
        self.timeout = timeout
        self._want_scheduler = scheduler
        self._scheduler_config = dict(scheduler_config or {})
        self._apiserver_args = list(apiserver_args)
        self._scheduler_args = list(scheduler_args)
        self._verbosity = verbosity
        self._keep_etcd_data = keep_etcd_data
        self._die_with_parent = die_with_parent
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: dict[str, Any] = {}
        self.server = ""
        self.token = ""
        self.ca_path = self.workdir / "pki" / "apiserver.crt"
        self.kubeconfig_path = self.workdir / "kubeconfig"
        self.etcd_endpoint = ""
        self.startup_seconds: float | None = None

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return bool(self._procs) and all(p.poll() is None for p in self._procs.values())

    def start(self) -> ControlPlane:
        if self._procs:
            raise ControlPlaneError("already started")
        t0 = time.monotonic()
        _LIVE.add(self)
        try:
            self._prepare_files()
            self._start_etcd()
            self._start_apiserver()
            if self._want_scheduler:
                self._start_scheduler()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """Terminate scheduler, apiserver, etcd (SIGTERM, then SIGKILL). Logs stay in log_dir."""
        for name in ("kube-scheduler", "kube-apiserver", "etcd"):
            p = self._procs.pop(name, None)
            if p is None:
                continue
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=timeout)
        for f in self._logs.values():
            with contextlib.suppress(Exception):
                f.close()
        self._logs.clear()
        if not self._keep_etcd_data:
            shutil.rmtree(self.workdir / "etcd-data", ignore_errors=True)
        _LIVE.discard(self)

    def cleanup(self) -> None:
        """stop() and delete the whole workdir (including logs) if we created it."""
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------ clients

    def api_client(self) -> Any:
        """A fresh ``kubernetes.client.ApiClient`` for this cluster (global config untouched)."""
        from kubernetes import config  # type: ignore[import-untyped]

        return config.new_client_from_config(config_file=str(self.kubeconfig_path))

    def core_v1(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_client())

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        """Raw authenticated GET against the apiserver (stdlib only). Returns (status, body)."""
        req = urllib.request.Request(
            self.server + path, headers={"Authorization": f"Bearer {self.token}"}
        )
        ctx = ssl.create_default_context(cafile=str(self.ca_path))
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=timeout) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def log_tail(self, component: str, n: int = 40) -> str:
        return _tail(self.log_dir / f"{component}.log", n)

    # ------------------------------------------------------------------ internals

    def _prepare_files(self) -> None:
        pki = self.workdir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (
            self._etcd_port,
            self._etcd_peer_port,
            self._api_port,
            self._sched_port,
            self._sched_insecure_port,
        ) = _free_ports(5)
        self.server = f"https://127.0.0.1:{self._api_port}"
        self.etcd_endpoint = f"http://127.0.0.1:{self._etcd_port}"

        # Self-signed serving cert for the apiserver (also the CA clients trust).
        _run(
            [
                "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256",
                "-days", "30", "-subj", "/CN=127.0.0.1",
                "-keyout", "apiserver.key", "-out", "apiserver.crt",
                "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes",
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
                "-addext", "extendedKeyUsage=serverAuth",
            ],
            pki,
        )  # fmt: skip
        # Service-account token signing key pair.
        _run(["openssl", "genrsa", "-out", "sa.key", "2048"], pki)
        _run(["openssl", "rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"], pki)
        # Static token file: token,user,uid,"groups"
        self.token = uuid.uuid4().hex
        (pki / "tokens.csv").write_text(
            f'{self.token},escher-admin,escher-admin,"system:masters"\n'
        )
        # kubeconfig (JSON is valid YAML; no PyYAML needed).
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "escher",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_path)},
                }
            ],
            "users": [{"name": "escher-admin", "user": {"token": self.token}}],
            "contexts": [
                {"name": "escher", "context": {"cluster": "escher", "user": "escher-admin"}}
            ],
            "current-context": "escher",
        }
        self.kubeconfig_path.write_text(json.dumps(kubeconfig, indent=2))
        os.chmod(self.kubeconfig_path, 0o600)

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        log.write(("+ " + " ".join(args) + "\n").encode())
        log.flush()
        self._logs[name] = log
        p = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            preexec_fn=_pdeathsig if self._die_with_parent else None,
        )
        self._procs[name] = p
        return p

    def _wait(self, name: str, check: Any, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        last: object = None
        while True:
            p = self._procs[name]
            if p.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with {p.returncode} before {what}; "
                    f"log {self.log_dir / (name + '.log')}:\n{self.log_tail(name)}"
                )
            try:
                if check():
                    return
            except Exception as e:  # connection refused etc.
                last = e
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"timed out after {self.timeout:.0f}s waiting for {what} (last: {last!r}); "
                    f"log {self.log_dir / (name + '.log')}:\n{self.log_tail(name)}"
                )
            time.sleep(0.2)

    def _start_etcd(self) -> None:
        data = self.workdir / "etcd-data"
        peer = f"http://127.0.0.1:{self._etcd_peer_port}"
        self._spawn(
            "etcd",
            [
                str(self.binaries["etcd"]),
                "--name=escher",
                f"--data-dir={data}",
                f"--listen-client-urls={self.etcd_endpoint}",
                f"--advertise-client-urls={self.etcd_endpoint}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=escher={peer}",
                "--initial-cluster-state=new",
                "--quota-backend-bytes=2147483648",
            ],
        )

        def healthy() -> bool:
            with urllib.request.urlopen(self.etcd_endpoint + "/health", timeout=2) as r:
                return json.loads(r.read()).get("health") == "true"

        self._wait("etcd", healthy, "etcd /health")

    def _start_apiserver(self) -> None:
        pki = self.workdir / "pki"
        args = [
            str(self.binaries["kube-apiserver"]),
            f"--etcd-servers={self.etcd_endpoint}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self._api_port}",
            "--insecure-port=0",
            f"--cert-dir={pki}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=AlwaysAllow",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--disable-admission-plugins=ServiceAccount",
            "--service-cluster-ip-range=10.0.0.0/24",
            # The default reconciler tries to publish 127.0.0.1 as the endpoint of
            # service/kubernetes, which validation rejects (loopback) -> log spam.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            "--max-requests-inflight=1000",
            "--max-mutating-requests-inflight=500",
            "--profiling=false",
            f"--v={self._verbosity}",
            *self._apiserver_args,
        ]
        self._spawn("kube-apiserver", args)

        def ready() -> bool:
            status, _ = self.get("/readyz", timeout=2)
            return status == 200

        self._wait("kube-apiserver", ready, "kube-apiserver /readyz")

    def _start_scheduler(self) -> None:
        cfg: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1beta1",
            "kind": "KubeSchedulerConfiguration",
            # In 1.20 --kube-api-qps/--kube-api-burst are ignored when --config is used.
            "clientConnection": {
                "kubeconfig": str(self.kubeconfig_path),
                "qps": 1000,
                "burst": 1000,
            },
            "leaderElection": {"leaderElect": False},
            # Retry unschedulable pods quickly once something changes.
            "podInitialBackoffSeconds": 1,
            "podMaxBackoffSeconds": 2,
            # With --config, 1.20 ignores --port=0 and binds 0.0.0.0:10251 for healthz and
            # metrics, so a second control plane on the machine fails; give each its own.
            "healthzBindAddress": f"127.0.0.1:{self._sched_insecure_port}",
            "metricsBindAddress": f"127.0.0.1:{self._sched_insecure_port}",
        }
        cfg.update(self._scheduler_config)
        cfg_path = self.workdir / "kube-scheduler.yaml"
        cfg_path.write_text(json.dumps(cfg, indent=2))
        args = [
            str(self.binaries["kube-scheduler"]),
            f"--config={cfg_path}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self._sched_port}",
            "--port=0",  # no insecure serving (1.20 default would be :10251)
            f"--cert-dir={self.workdir / 'scheduler-certs'}",
            f"--v={self._verbosity}",
            *self._scheduler_args,
        ]
        self._spawn("kube-scheduler", args)
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # scheduler's self-generated serving cert

        def healthy() -> bool:
            url = f"https://127.0.0.1:{self._sched_port}/healthz"
            with urllib.request.urlopen(url, context=ctx, timeout=2) as r:
                return r.status == 200

        self._wait("kube-scheduler", healthy, "kube-scheduler /healthz")


def wait_for(predicate: Any, timeout: float = 30.0, interval: float = 0.1, what: str = "") -> Any:
    """Poll ``predicate()`` until it returns something truthy; return that value.

    Raises ``TimeoutError`` (mentioning ``what`` and the last exception, if any).
    """
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:
            last = e
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"timed out after {timeout}s waiting for {what or predicate!r}"
                + (f" (last error: {last!r})" if last else "")
            )
        time.sleep(interval)


# --------------------------------------------------------------------------- fake nodes


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_node_resources(
    api: Any,
    name: str,
    capacity: Mapping[str, str],
    allocatable: Mapping[str, str] | None = None,
) -> Any:
    """Patch a node's status capacity/allocatable (strategic merge: other keys kept)."""
    body = {
        "status": {
            "capacity": dict(capacity),
            "allocatable": dict(allocatable if allocatable is not None else capacity),
        }
    }
    return api.patch_node_status(name, body)


def add_fake_node(
    api: Any,
    name: str,
    capacity: Mapping[str, str],
    labels: Mapping[str, str] | None = None,
    *,
    allocatable: Mapping[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> Any:
    """Create a schedulable Node with the given resources; return the final V1Node.

    ``api`` is a ``kubernetes.client.CoreV1Api`` (e.g. ``cp.core_v1()``).
    ``capacity`` values are Kubernetes quantities as strings, e.g.
    ``{"cpu": "8", "memory": "32Gi", "escher.io/foo": "1"}``; ``pods: "110"`` is
    added if absent (without it the scheduler rejects every pod with "Too many
    pods").  Allocatable defaults to capacity.  The node gets label
    ``escher.io/fake-node=true`` (FakeKubelet's selector) plus ``labels``.

    The TaintNodesByCondition admission plugin adds ``node.kubernetes.io/not-ready``
    (NoSchedule) to every new node and no node-lifecycle controller is running to
    lift it, so it is removed here; the Ready=True condition is set so the node
    also looks healthy to anything that checks.
    """
    from kubernetes import client

    cap = {"pods": "110", **dict(capacity)}
    alloc = {"pods": cap["pods"], **dict(allocatable)} if allocatable is not None else cap
    all_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        FAKE_NODE_LABEL: "true",
        **dict(labels or {}),
    }
    api.create_node(
        client.V1Node(
            metadata=client.V1ObjectMeta(name=name, labels=all_labels),
            spec=client.V1NodeSpec(taints=[client.V1Taint(**t) for t in taints or []] or None),
        )
    )
    # Drop admission-added not-ready/unreachable taints (retry on write conflicts).
    for _ in range(10):
        node = api.read_node(name)
        keep = [
            t
            for t in node.spec.taints or []
            if t.key not in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
        ]
        if len(keep) == len(node.spec.taints or []):
            break
        node.spec.taints = keep or None
        try:
            # replace (not patch): a strategic-merge patch cannot shrink the list to empty.
            api.replace_node(name, node)
            break
        except client.ApiException as e:
            if e.status != 409:
                raise
    now = _now()
    status = {
        "status": {
            "capacity": cap,
            "allocatable": alloc,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "escher fake node",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                },
                *(
                    {
                        "type": t,
                        "status": "False",
                        "reason": "KubeletHas" + r,
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                    for t, r in (
                        ("MemoryPressure", "SufficientMemory"),
                        ("DiskPressure", "NoDiskPressure"),
                        ("PIDPressure", "SufficientPID"),
                    )
                ),
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "v1.20.2",
                "kubeProxyVersion": "v1.20.2",
                "containerRuntimeVersion": "fake://0",
                "osImage": "escher fake node",
                "kernelVersion": "0",
                "machineID": name,
                "systemUUID": name,
                "bootID": name,
            },
        }
    }
    return api.patch_node_status(name, status)


# --------------------------------------------------------------------------- fake kubelet


class FakeKubelet:
    """Plays the kubelet for pods bound to fake nodes.

    Two daemon threads: a watcher (list + watch of pods with ``spec.nodeName`` set,
    re-listed on errors, wakes up at least every ``poll_seconds`` to notice stop)
    and an actor that applies due transitions:

    * bound + Pending  --``start_delay``-->  Running (Ready condition, container running)
    * Running  --``run_seconds`` (or annotation ``escher.io/fake-run-seconds``)-->
      Succeeded, or Failed if annotation ``escher.io/fake-exit-code`` is non-zero;
      every container gets ``state.terminated`` with that exit code and
      ``message`` = annotation ``escher.io/fake-message``.
      ``run_seconds=None`` leaves pods Running forever (unless annotated).
    * pods with a deletionTimestamp are force-deleted (grace 0), as the kubelet
      would after stopping containers; without this they stay Terminating.

    Only pods on nodes labelled ``escher.io/fake-node=true`` are touched, or, if
    ``node_names`` is given, only pods on those nodes.
    """

    def __init__(
        self,
        api: Any,
        *,
        start_delay: float = 0.0,
        run_seconds: float | None = 0.0,
        node_names: Iterable[str] | None = None,
        poll_seconds: float = 2.0,
    ) -> None:
        self.api = api
        self.start_delay = start_delay
        self.run_seconds = run_seconds
        self.poll_seconds = poll_seconds
        self._fixed_nodes = set(node_names) if node_names is not None else None
        self._node_cache: dict[str, bool] = {}
        self._stop = threading.Event()
        self._cv = threading.Condition()
        # (due, seq, action, namespace, name, uid)
        self._heap: list[tuple[float, int, str, str, str, str]] = []
        self._seq = 0
        self._planned: set[tuple[str, str]] = set()  # (uid, action)
        self._threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []
        self.transitions: list[tuple[str, str, str]] = []  # (namespace/name, phase, iso time)

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self) -> FakeKubelet:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> FakeKubelet:
        for target, name in ((self._watch_loop, "watch"), (self._act_loop, "act")):
            t = threading.Thread(target=target, name=f"fake-kubelet-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        with self._cv:
            self._cv.notify_all()
        limit = timeout if timeout is not None else self.poll_seconds + 10
        for t in self._threads:
            t.join(limit)
        self._threads = [t for t in self._threads if t.is_alive()]

    # ---------------------------------------------------------------- internals

    def _is_fake_node(self, node: str) -> bool:
        if self._fixed_nodes is not None:
            return node in self._fixed_nodes
        if node not in self._node_cache:
            try:
                labels = self.api.read_node(node).metadata.labels or {}
                self._node_cache[node] = labels.get(FAKE_NODE_LABEL) == "true"
            except Exception:
                return False  # unknown node (yet); look again next time
        return self._node_cache[node]

    def _plan(self, delay: float, action: str, pod: Any) -> None:
        key = (pod.metadata.uid, action)
        if key in self._planned:
            return
        self._planned.add(key)
        with self._cv:
            self._seq += 1
            heapq.heappush(
                self._heap,
                (
                    time.monotonic() + max(0.0, delay),
                    self._seq,
                    action,
                    pod.metadata.namespace,
                    pod.metadata.name,
                    pod.metadata.uid,
                ),
            )
            self._cv.notify_all()

    def _run_seconds_for(self, pod: Any) -> float | None:
        ann = pod.metadata.annotations or {}
        if FAKE_RUN_SECONDS_ANNOTATION in ann:
            return float(ann[FAKE_RUN_SECONDS_ANNOTATION])
        return self.run_seconds

    def _observe(self, pod: Any) -> None:
        node = pod.spec.node_name
        if not node or not self._is_fake_node(node):
            return
        if pod.metadata.deletion_timestamp is not None:
            self._plan(0.0, "delete", pod)
            return
        phase = pod.status.phase if pod.status else None
        if phase == "Pending":
            self._plan(self.start_delay, "run", pod)
        elif phase == "Running":
            secs = self._run_seconds_for(pod)
            if secs is not None:
                self._plan(secs, "finish", pod)

    def _watch_loop(self) -> None:
        from kubernetes import client, watch

        while not self._stop.is_set():
            try:
                pods = self.api.list_pod_for_all_namespaces(field_selector="spec.nodeName!=")
                for pod in pods.items:
                    self._observe(pod)
                rv = pods.metadata.resource_version
                while not self._stop.is_set():
                    w = watch.Watch()
                    for ev in w.stream(
                        self.api.list_pod_for_all_namespaces,
                        field_selector="spec.nodeName!=",
                        resource_version=rv,
                        timeout_seconds=max(1, int(self.poll_seconds)),
                        _request_timeout=self.poll_seconds + 10,
                    ):
                        if ev["type"] == "ERROR":
                            raise client.ApiException(status=ev["raw_object"].get("code", 500))
                        pod = ev["object"]
                        rv = pod.metadata.resource_version
                        if ev["type"] != "DELETED":
                            self._observe(pod)
                        if self._stop.is_set():
                            w.stop()
                            break
            except Exception as e:  # 410 Gone, connection reset, apiserver stopped...
                if self._stop.is_set():
                    return
                if not (isinstance(e, client.ApiException) and e.status == 410):
                    self.errors.append(e)
                self._stop.wait(0.5)

    def _act_loop(self) -> None:
        while not self._stop.is_set():
            with self._cv:
                while not self._stop.is_set():
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        item = heapq.heappop(self._heap)
                        break
                    wait = self._heap[0][0] - now if self._heap else None
                    self._cv.wait(wait if wait is None else min(wait, 1.0))
                else:
                    return
            _, _, action, ns, name, uid = item
            try:
                self._apply(action, ns, name, uid)
            except Exception as e:
                if not self._stop.is_set():
                    self.errors.append(e)

    def _apply(self, action: str, ns: str, name: str, uid: str) -> None:
        from kubernetes import client

        try:
            pod = self.api.read_namespaced_pod(name, ns)
        except client.ApiException as e:
            if e.status == 404:
                return
            raise
        if pod.metadata.uid != uid:
            return
        if action == "delete":
            try:
                self.api.delete_namespaced_pod(
                    name, ns, grace_period_seconds=0,
                    body=client.V1DeleteOptions(grace_period_seconds=0, preconditions={"uid": uid}),
                )  # fmt: skip
            except client.ApiException as e:
                if e.status not in (404, 409):
                    raise
            return
        if pod.metadata.deletion_timestamp is not None:
            return
        now = _now()
        containers = [c.name for c in pod.spec.containers]
        images = {c.name: c.image or "" for c in pod.spec.containers}
        if action == "run" and pod.status.phase == "Pending":
            body = {
                "status": {
                    "phase": "Running",
                    "hostIP": "127.0.0.1",
                    "podIP": "127.0.0.1",
                    "startTime": now,
                    "conditions": [
                        {"type": t, "status": "True", "lastTransitionTime": now}
                        for t in ("Initialized", "ContainersReady", "Ready", "PodScheduled")
                    ],
                    "containerStatuses": [
                        {
                            "name": c,
                            "image": images[c],
                            "imageID": "",
                            "ready": True,
                            "started": True,
                            "restartCount": 0,
                            "state": {"running": {"startedAt": now}},
                        }
                        for c in containers
                    ],
                }
            }
            self.api.patch_namespaced_pod_status(name, ns, body)
            self.transitions.append((f"{ns}/{name}", "Running", now))
        elif action == "finish" and pod.status.phase == "Running":
            ann = pod.metadata.annotations or {}
            code = int(ann.get(FAKE_EXIT_CODE_ANNOTATION, "0"))
            message = ann.get(FAKE_MESSAGE_ANNOTATION, "")
            started = now
            for cs in pod.status.container_statuses or []:
                if cs.state and cs.state.running and cs.state.running.started_at:
                    started = cs.state.running.started_at.strftime("%Y-%m-%dT%H:%M:%SZ")
            phase = "Succeeded" if code == 0 else "Failed"
            terminated: dict[str, Any] = {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": started,
                "finishedAt": now,
            }
            if message:
                terminated["message"] = message
            body = {
                "status": {
                    "phase": phase,
                    "conditions": [
                        {
                            "type": t,
                            "status": "False",
                            "reason": "PodCompleted",
                            "lastTransitionTime": now,
                        }
                        for t in ("ContainersReady", "Ready")
                    ],
                    "containerStatuses": [
                        {
                            "name": c,
                            "image": images[c],
                            "imageID": "",
                            "ready": False,
                            "started": False,
                            "restartCount": 0,
                            "state": {"running": None, "terminated": terminated},
                        }
                        for c in containers
                    ],
                }
            }
            if message:
                body["status"]["message"] = message
            self.api.patch_namespaced_pod_status(name, ns, body)
            self.transitions.append((f"{ns}/{name}", phase, now))
