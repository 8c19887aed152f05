"""A real, kubelet-less Kubernetes control plane on loopback for tests.

Runs etcd + kube-apiserver + kube-scheduler as child processes, each on free 127.0.0.1
ports, with a throw-away working directory holding certificates, a static token file, a
kubeconfig and the logs. The binaries come from ``$ESCHER_K8S_BIN`` if set (any release from
1.20 on: the flags and the scheduler's config API are chosen from their ``--version``, see
``tests/support/k8s_flags.py``), else from ``${ESCHER_K8S_CACHE:-~/.cache/escher-k8s}/bin``
where ``scripts/provision-k8s.sh`` builds v1.20.2.

Authorization is ``AlwaysAllow`` by default, or ``Node,RBAC`` with ``authorization="RBAC"``
(the admin is in ``system:masters`` either way). The ServiceAccount admission plugin is on;
since no controller-manager runs, the plane creates each namespace's ``default``
ServiceAccount itself (`ControlPlane.create_namespace`), and service-account tokens come from
the TokenRequest API (`ControlPlane.service_account_kubeconfig`).

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

try:
    from tests.support.k8s_flags import (
        KubeVersion,
        apiserver_flags,
        parse_version,
        scheduler_config,
        scheduler_flags,
    )
except ImportError:  # imported as a top-level module (tests/support on sys.path)
    from k8s_flags import (  # type: ignore[no-redef]
        KubeVersion,
        apiserver_flags,
        parse_version,
        scheduler_config,
        scheduler_flags,
    )

__all__ = [
    "BIN_ENV",
    "FAKE_EXIT_CODE_ANNOTATION",
    "FAKE_MESSAGE_ANNOTATION",
    "FAKE_NODE_LABEL",
    "FAKE_RUN_SECONDS_ANNOTATION",
    "BinariesMissing",
    "ControlPlane",
    "ControlPlaneError",
    "FakeKubelet",
    "add_fake_node",
    "bin_dir",
    "binaries_available",
    "binary_version",
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
_PROVISION_HINT = (
    "run scripts/provision-k8s.sh (builds kube-apiserver/kube-scheduler, ~4 min), or point "
    "$ESCHER_K8S_BIN at a directory holding kube-apiserver, kube-scheduler (and etcd)"
)
#: Environment variable: a directory with kube-apiserver and kube-scheduler (and optionally
#: etcd) to use instead of the provisioned ones.
BIN_ENV = "ESCHER_K8S_BIN"


class ControlPlaneError(RuntimeError):
    """A control-plane process failed to start or become ready."""


class BinariesMissing(ControlPlaneError):
    """The cached binaries are not there; run scripts/provision-k8s.sh."""


# --------------------------------------------------------------------------- binaries


def cache_dir() -> Path:
    """``$ESCHER_K8S_CACHE`` or ``~/.cache/escher-k8s`` (same rule as the provision script)."""
    env = os.environ.get("ESCHER_K8S_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "escher-k8s"


def bin_dir(cache: Path | str | None = None) -> Path:
    """``$ESCHER_K8S_BIN`` if set, else ``<cache>/bin`` (the provision script's)."""
    env = os.environ.get(BIN_ENV)
    if env and cache is None:
        return Path(env).expanduser()
    return (Path(cache) if cache is not None else cache_dir()) / "bin"


def find_binaries(cache: Path | str | None = None) -> dict[str, Path]:
    """Return ``{"etcd": path, "kube-apiserver": path, "kube-scheduler": path}``.

    Looks in `bin_dir`; etcd may also come from the provision script's cache when
    ``$ESCHER_K8S_BIN`` has none.

    Raises :class:`BinariesMissing` (with a hint to run the provision script)
    if any is absent.
    """
    where = bin_dir(cache)
    fallback = cache_dir() / "bin"
    found: dict[str, Path] = {}
    missing: list[str] = []
    for name in _BINARIES:
        candidates = [where / name] + ([fallback / name] if name == "etcd" else [])
        for p in candidates:
            if p.is_file() and os.access(p, os.X_OK):
                found[name] = p
                break
        else:
            missing.append(str(where / name))
    if missing:
        raise BinariesMissing(
            f"Kubernetes control-plane binaries not found: {', '.join(missing)}; {_PROVISION_HINT}"
        )
    return found


def binary_version(path: Path | str) -> KubeVersion:
    """The version a binary prints for ``--version`` (kube-* and etcd alike)."""
    try:
        out = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
        return parse_version(out.stdout + out.stderr)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        raise ControlPlaneError(f"cannot read the version of {path}: {exc}") from None


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
        kubeconfig_path   the admin's kubeconfig (client certificate, ``system:masters``),
                          usable by ``kubernetes.config.load_kube_config``
        workdir           temp dir holding everything below
        log_dir           ``etcd.log``, ``kube-apiserver.log``, ``kube-scheduler.log``
        etcd_endpoint     ``http://127.0.0.1:<port>``
        startup_seconds   wall time :meth:`start` took
        version           the apiserver's `KubeVersion` (from ``--version``)
        scheduler_version the scheduler's `KubeVersion`
        authorization     ``"AlwaysAllow"`` or ``"RBAC"``
        audit_log_path    the audit log (``audit=True`` only)
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
        authorization: str = "AlwaysAllow",
        audit: bool = False,
    ) -> None:
        """
        Args:
            cache: cache dir of the provision script (default :func:`cache_dir`; when
                given, ``$ESCHER_K8S_BIN`` is not read).
            workdir: where to put certs/kubeconfig/logs/etcd data (default: fresh mkdtemp).
            scheduler: also start kube-scheduler.
            timeout: seconds allowed for each component to become healthy.
            scheduler_config: top-level keys merged into the generated
                KubeSchedulerConfiguration (API version chosen by the scheduler's version).
            apiserver_args / scheduler_args: extra command-line flags (appended last).
            verbosity: ``--v`` for apiserver and scheduler.
            keep_etcd_data: keep etcd's data dir on stop (it is ~130 MB of WAL).
            die_with_parent: children get SIGTERM if the *thread* that started
                them exits (PR_SET_PDEATHSIG); avoids orphans when pytest is killed.
            authorization: ``"AlwaysAllow"`` or ``"RBAC"`` (``--authorization-mode=Node,RBAC``).
            audit: write an audit log of service accounts' requests (`audit_events`).
        """
        if authorization not in ("AlwaysAllow", "RBAC"):
            raise ValueError(f"authorization is 'AlwaysAllow' or 'RBAC', not {authorization!r}")
        self.binaries = find_binaries(cache)
        self.version = binary_version(self.binaries["kube-apiserver"])
        self.scheduler_version = binary_version(self.binaries["kube-scheduler"])
        self.authorization = authorization
        self._audit = audit
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="escher-k8s-"))
        self.log_dir = self.workdir / "logs"
        self.audit_log_path = self.log_dir / "audit.log"
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

    def restart(self, component: str, down_seconds: float = 0.0) -> None:
        """Stop one process (SIGTERM, then SIGKILL) and start it again: same ports, same data.

        ``component`` is ``"etcd"``, ``"kube-apiserver"`` or ``"kube-scheduler"``; it stays
        down for ``down_seconds``. Returns once it is healthy again. For fault tests.
        """
        starts = {
            "etcd": self._start_etcd,
            "kube-apiserver": self._start_apiserver,
            "kube-scheduler": self._start_scheduler,
        }
        if component not in starts or component not in self._procs:
            raise ControlPlaneError(f"no running {component!r} to restart")
        p = self._procs.pop(component)
        p.terminate()
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=15)
        log = self._logs.pop(component, None)
        if log is not None:
            log.close()
        time.sleep(max(0.0, down_seconds))
        starts[component]()

    def restart_apiserver(self, down_seconds: float = 0.0) -> None:
        """Restart kube-apiserver (see `restart`)."""
        self.restart("kube-apiserver", down_seconds)

    def restart_etcd(self, down_seconds: float = 0.0) -> None:
        """Restart etcd under a running kube-apiserver (see `restart`)."""
        self.restart("etcd", down_seconds)

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
        # Client CA and the admin's client certificate (O=system:masters).
        _run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "30",
             "-subj", "/CN=escher-client-ca", "-keyout", "client-ca.key", "-out", "client-ca.crt"],
            pki,
        )  # fmt: skip
        _run(
            ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-sha256",
             "-subj", "/O=system:masters/CN=escher-admin", "-keyout", "admin.key",
             "-out", "admin.csr"],
            pki,
        )  # fmt: skip
        _run(
            ["openssl", "x509", "-req", "-in", "admin.csr", "-CA", "client-ca.crt",
             "-CAkey", "client-ca.key", "-CAcreateserial", "-days", "30", "-sha256",
             "-out", "admin.crt"],
            pki,
        )  # fmt: skip
        # Static token file: token,user,uid,"groups" (for the stdlib `get`).
        self.token = uuid.uuid4().hex
        (pki / "tokens.csv").write_text(
            f'{self.token},escher-admin,escher-admin,"system:masters"\n'
        )
        user = {"client-certificate": str(pki / "admin.crt"), "client-key": str(pki / "admin.key")}
        self._write_kubeconfig(self.kubeconfig_path, "escher-admin", user)
        if self._audit:
            # Metadata of every request by a service account (escher's identity, the pods').
            policy = {
                "apiVersion": "audit.k8s.io/v1",
                "kind": "Policy",
                "omitStages": ["RequestReceived"],
                "rules": [
                    {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
                    {"level": "None"},
                ],
            }
            (self.workdir / "audit-policy.yaml").write_text(json.dumps(policy, indent=2))

    def _write_kubeconfig(self, path: Path, user_name: str, user: Mapping[str, str]) -> None:
        """A kubeconfig for this server (JSON is valid YAML; no PyYAML needed)."""
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "escher",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_path)},
                }
            ],
            "users": [{"name": user_name, "user": dict(user)}],
            "contexts": [{"name": "escher", "context": {"cluster": "escher", "user": user_name}}],
            "current-context": "escher",
        }
        path.write_text(json.dumps(kubeconfig, indent=2))
        os.chmod(path, 0o600)

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
        audit = (self.workdir / "audit-policy.yaml", self.audit_log_path) if self._audit else None
        flags = apiserver_flags(
            self.version,
            etcd=self.etcd_endpoint,
            port=self._api_port,
            pki=pki,
            authorization=self.authorization,
            audit=audit,
        )
        args = [
            str(self.binaries["kube-apiserver"]),
            *flags,
            f"--v={self._verbosity}",
            *self._apiserver_args,
        ]
        self._spawn("kube-apiserver", args)

        def ready() -> bool:
            status, _ = self.get("/readyz", timeout=2)
            return status == 200

        self._wait("kube-apiserver", ready, "kube-apiserver /readyz")

        # No controller-manager: create the ServiceAccount it would (pods need one).
        def default_account() -> bool:
            return self._ensure_service_account("default", "default")

        self._wait("kube-apiserver", default_account, "the default ServiceAccount")

    def _start_scheduler(self) -> None:
        cfg = scheduler_config(
            self.scheduler_version,
            kubeconfig=self.kubeconfig_path,
            health_port=self._sched_insecure_port,
        )
        cfg.update(self._scheduler_config)
        cfg_path = self.workdir / "kube-scheduler.yaml"
        cfg_path.write_text(json.dumps(cfg, indent=2))
        flags = scheduler_flags(
            self.scheduler_version,
            config=cfg_path,
            port=self._sched_port,
            cert_dir=self.workdir / "scheduler-certs",
        )
        args = [
            str(self.binaries["kube-scheduler"]),
            *flags,
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

    # ------------------------------------------------------------------ accounts and RBAC

    def _request(
        self, method: str, path: str, body: Any = None, timeout: float = 10.0
    ) -> tuple[int, Any]:
        """An authenticated JSON request as the admin (stdlib only). Returns (status, body)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.server + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        ctx = ssl.create_default_context(cafile=str(self.ca_path))
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=timeout) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            text = e.read()
            try:
                return e.code, json.loads(text)
            except ValueError:
                return e.code, text.decode(errors="replace")

    def _ensure_service_account(self, namespace: str, name: str) -> bool:
        """Create ServiceAccount `name` in `namespace` unless it exists; True when it does."""
        body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
        status, _ = self._request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", body)
        return status in (201, 409)

    def create_namespace(self, name: str) -> None:
        """Create a namespace and its ``default`` ServiceAccount (a controller's job)."""
        status, body = self._request(
            "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": name}}
        )  # fmt: skip
        if status not in (201, 409):
            raise ControlPlaneError(f"creating namespace {name}: {status} {body}")
        if not self._ensure_service_account(name, "default"):
            raise ControlPlaneError(f"creating ServiceAccount {name}/default failed")

    def service_account_token(
        self, namespace: str, name: str, *, seconds: int = 6 * 3600, pod: Any = None
    ) -> str:
        """A token for ServiceAccount `namespace/name` from the TokenRequest API.

        Args:
            namespace: The account's namespace.
            name: The account's name.
            seconds: How long the token is valid.
            pod: ``(pod name, pod uid)`` to bind the token to (it dies with the pod), as
                the kubelet does for a pod's projected token.
        """
        spec: dict[str, Any] = {"audiences": [], "expirationSeconds": int(seconds)}
        if pod is not None:
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod",
                                      "name": pod[0], "uid": pod[1]}  # fmt: skip
        status, body = self._request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        if status != 201:
            raise ControlPlaneError(f"TokenRequest for {namespace}/{name}: {status} {body}")
        return str(body["status"]["token"])

    def service_account_kubeconfig(
        self, namespace: str, name: str, path: Path | str | None = None, **token_options: Any
    ) -> Path:
        """Write a kubeconfig that authenticates as ServiceAccount `namespace/name`.

        Returns:
            Its path (default: ``<workdir>/kubeconfig-<namespace>-<name>``).
        """
        token = self.service_account_token(namespace, name, **token_options)
        target = Path(path) if path else self.workdir / f"kubeconfig-{namespace}-{name}"
        self._write_kubeconfig(target, f"system:serviceaccount:{namespace}:{name}",
                               {"token": token})  # fmt: skip
        return target

    def apply(self, documents: Iterable[Mapping[str, Any]]) -> list[str]:
        """Create each manifest (Namespace, ServiceAccount, RBAC objects, ...) as the admin.

        An object that already exists is left as it is. Returns ``kind/name`` of each.
        """
        from kubernetes import utils

        api_client = self.api_client()
        made: list[str] = []
        try:
            for doc in documents:
                try:
                    utils.create_from_dict(api_client, dict(doc))
                except utils.FailToCreateError as exc:
                    if any(getattr(e, "status", None) != 409 for e in exc.api_exceptions):
                        raise
                made.append(f"{doc['kind']}/{doc['metadata']['name']}")
                if doc["kind"] == "Namespace":
                    self._ensure_service_account(doc["metadata"]["name"], "default")
        finally:
            api_client.close()
        return made

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log's events so far (``audit=True``): service accounts' requests."""
        if not self._audit:
            raise ControlPlaneError("this control plane runs without audit=True")
        events = []
        with contextlib.suppress(FileNotFoundError):
            for line in self.audit_log_path.read_text().splitlines():
                if line.strip():
                    with contextlib.suppress(ValueError):
                        events.append(json.loads(line))
        return events


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


def terminated_status(pod: Any, code: int, message: str, started: str, now: str) -> dict[str, Any]:
    """The status patch of a pod whose containers exited with `code` (0: Succeeded)."""
    terminated: dict[str, Any] = {
        "exitCode": code,
        "reason": "Completed" if code == 0 else "Error",
        "startedAt": started,
        "finishedAt": now,
    }
    if message:
        terminated["message"] = message
    not_ready = {"status": "False", "reason": "PodCompleted", "lastTransitionTime": now}
    return {
        "status": {
            "phase": "Succeeded" if code == 0 else "Failed",
            "conditions": [{"type": t, **not_ready} for t in ("ContainersReady", "Ready")],
            "containerStatuses": [
                {
                    "name": c.name,
                    "image": c.image or "",
                    "imageID": "",
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "state": {"running": None, "terminated": terminated},
                }
                for c in pod.spec.containers
            ],
        }
    }


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


class _Unsure(Exception):
    """A pod's node could not be read: look at its pods again after a fresh list."""


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
        self._retries: dict[tuple[str, str], int] = {}  # (uid, action) -> failed tries
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
        """Whether this kubelet plays `node`.

        Raises:
            _Unsure: the node could not be read (the API server restarting): the watch
                lists again (as a kubelet resyncs), so the pod is looked at again.
        """
        from kubernetes import client

        if self._fixed_nodes is not None:
            return node in self._fixed_nodes
        if node not in self._node_cache:
            try:
                labels = self.api.read_node(node).metadata.labels or {}
            except client.ApiException as e:
                if e.status == 404:
                    return False  # not a node (any more)
                raise _Unsure(node) from e
            except Exception as e:
                raise _Unsure(node) from e
            self._node_cache[node] = labels.get(FAKE_NODE_LABEL) == "true"
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
                gone = isinstance(e, client.ApiException) and e.status == 410
                if not (gone or isinstance(e, _Unsure)):
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
                    self._retry_later(item)

    def _retry_later(self, item: tuple[float, int, str, str, str, str]) -> None:
        """A kubelet keeps trying: an action that failed (the apiserver restarting) runs again."""
        _, _, action, ns, name, uid = item
        tries = self._retries.get((uid, action), 0) + 1
        if tries > 120:  # about a minute
            return
        self._retries[(uid, action)] = tries
        with self._cv:
            self._seq += 1
            heapq.heappush(self._heap, (time.monotonic() + 0.5, self._seq, action, ns, name, uid))
            self._cv.notify_all()

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
            body = terminated_status(pod, code, message, started, now)
            phase = body["status"]["phase"]
            if message:
                body["status"]["message"] = message
            self.api.patch_namespaced_pod_status(name, ns, body)
            self.transitions.append((f"{ns}/{name}", phase, now))
