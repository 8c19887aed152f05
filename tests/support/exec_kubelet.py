"""A fake kubelet that really runs pods' commands, as local processes.

`FakeKubelet` (tests/support/k8s_control_plane.py) moves bound pods to Running; this subclass then
starts the pod's container command as a subprocess of the test process, ignoring the image,
with the pod's environment resolved the way the kubelet does (including the downward API:
``NODE_NAME`` from ``spec.nodeName``), plus ``KUBECONFIG`` so code in the "pod" can reach the
apiserver and ``ESCHER_TERMINATION_LOG`` pointing at a temp file that stands in for the
container's termination-message path. Like the kubelet, it hands the pod its ServiceAccount's
token (a TokenRequest bound to the pod, valid while the pod exists): ``KUBECONFIG`` names a
kubeconfig that authenticates as ``system:serviceaccount:<namespace>:<account>``, so the pod
has exactly its account's permissions; a TokenRequest that fails (the apiserver restarting)
is tried again, as the kubelet does, before the pod fails with exit code 126. A pod with
``automountServiceAccountToken: false`` gets the kubeconfig given to the kubelet instead
(``kubeconfig=``).
When the process exits, the pod becomes Succeeded (exit 0) or Failed, with the file's first
4096 bytes as the termination message, as the kubelet does. Deleting a pod kills its process.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.support.k8s_control_plane import FakeKubelet, _now, terminated_status

TERMINATION_LIMIT = 4096
RUN_TRIES = 100  # failed starts retried (0.5 s apart) before the pod fails with 126
_FIELD_REFS = {
    "spec.nodeName": lambda pod: pod.spec.node_name,
    "metadata.name": lambda pod: pod.metadata.name,
    "metadata.namespace": lambda pod: pod.metadata.namespace,
    "metadata.uid": lambda pod: pod.metadata.uid,
    "status.podIP": lambda pod: "127.0.0.1",
    "status.hostIP": lambda pod: "127.0.0.1",
}


class ExecKubelet(FakeKubelet):
    """A `FakeKubelet` that executes each bound pod's command locally.

    Args:
        api: A `CoreV1Api`.
        kubeconfig: Passed to the processes as ``KUBECONFIG`` when they get no token (see
            ``service_account_tokens``).
        cwd: Working directory (and ``PYTHONPATH`` head) of the processes.
        max_seconds: A process running longer is killed and its pod fails.
        service_account_tokens: Give each pod a token of its ServiceAccount (as the kubelet
            does) instead of ``kubeconfig``.
        **kwargs: `FakeKubelet` options (node_names, start_delay, poll_seconds).
    """

    def __init__(
        self,
        api: Any,
        *,
        kubeconfig: str,
        cwd: str,
        max_seconds: float = 120.0,
        service_account_tokens: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(api, run_seconds=None, **kwargs)
        self.kubeconfig = kubeconfig
        self.cwd = cwd
        self.max_seconds = max_seconds
        self.service_account_tokens = service_account_tokens
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._proc_lock = threading.Lock()
        self._tmp = Path(tempfile.mkdtemp(prefix="escher-exec-kubelet-"))
        self.executed: list[str] = []  # pod names whose command ran
        self._started: set[str] = set()  # pod uids started: never twice (restartPolicy Never)

    def stop(self, timeout: float | None = None) -> None:
        super().stop(timeout)
        with self._proc_lock:
            procs = list(self._procs.values())
        for proc in procs:
            with contextlib.suppress(Exception):
                proc.kill()
                proc.wait(10)

    # -- FakeKubelet hook ----------------------------------------------------------------
    def _apply(self, action: str, ns: str, name: str, uid: str) -> None:
        if action == "delete":
            self._kill(uid)
        super()._apply(action, ns, name, uid)
        if action != "run":
            return
        pod = self.api.read_namespaced_pod(name, ns)
        if pod.metadata.uid != uid or pod.status.phase != "Running":
            return
        if pod.metadata.deletion_timestamp is not None:
            return
        with self._proc_lock:
            if uid in self._started:  # e.g. a "run" repeated after an apiserver restart
                return
            self._started.add(uid)
        self._spawn(pod)

    # -- processes -------------------------------------------------------------------------
    def _env(self, pod: Any, container: Any, message_path: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("NODE_NAME", "POD_NAME")}
        for var in container.env or []:
            if var.value is not None:
                env[var.name] = var.value
            elif var.value_from is not None and var.value_from.field_ref is not None:
                getter = _FIELD_REFS.get(var.value_from.field_ref.field_path)
                env[var.name] = str(getter(pod)) if getter else ""
        env["KUBECONFIG"] = self._pod_kubeconfig(pod)
        env["ESCHER_TERMINATION_LOG"] = str(message_path)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (self.cwd, os.environ.get("PYTHONPATH", "")) if p
        )
        return env

    def _pod_kubeconfig(self, pod: Any) -> str:
        """A kubeconfig with the pod's ServiceAccount token (or the kubelet's own)."""
        if not self.service_account_tokens or pod.spec.automount_service_account_token is False:
            return self.kubeconfig
        from kubernetes import client

        ns, name, uid = pod.metadata.namespace, pod.metadata.name, pod.metadata.uid
        account = pod.spec.service_account_name or "default"
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[],
                expiration_seconds=3600,
                bound_object_ref=client.V1BoundObjectReference(
                    api_version="v1", kind="Pod", name=name, uid=uid
                ),
            )
        )
        token = self.api.create_namespaced_service_account_token(account, ns, request)
        conf = self.api.api_client.configuration
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "c",
                    "cluster": {"server": conf.host, "certificate-authority": conf.ssl_ca_cert},
                }
            ],
            "users": [{"name": "u", "user": {"token": token.status.token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
        path = self._tmp / f"{uid}.kubeconfig"
        path.write_text(json.dumps(kubeconfig))
        os.chmod(path, 0o600)
        return str(path)

    def _spawn(self, pod: Any) -> None:
        container = pod.spec.containers[0]
        argv = list(container.command or []) + list(container.args or [])
        if argv and argv[0] in ("python", "python3"):
            argv[0] = sys.executable
        uid = pod.metadata.uid
        message_path = self._tmp / f"{uid}.termination-log"
        message_path.write_bytes(b"")
        try:
            env = self._env(pod, container, message_path)
        except Exception as exc:  # e.g. the TokenRequest failed: the apiserver is restarting
            if self._retries.get((uid, "run"), 0) < RUN_TRIES:
                with self._proc_lock:  # as the kubelet does: try the container again later
                    self._started.discard(uid)
                raise
            self._terminate(pod, 126, f"cannot prepare the pod's environment: {exc}")
            return
        try:
            proc = subprocess.Popen(
                argv,
                cwd=self.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=open(self._tmp / f"{uid}.stderr", "wb"),  # noqa: SIM115
            )
        except OSError as exc:
            self._terminate(pod, 127, f"cannot start {argv[:1]}: {exc}")
            return
        with self._proc_lock:
            self._procs[uid] = proc
        self.executed.append(pod.metadata.name)
        threading.Thread(
            target=self._supervise, args=(pod, proc, message_path), daemon=True
        ).start()

    def _supervise(self, pod: Any, proc: subprocess.Popen[bytes], message_path: Path) -> None:
        try:
            code = proc.wait(self.max_seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        with self._proc_lock:
            self._procs.pop(pod.metadata.uid, None)
        if self._stop.is_set():
            return
        message = message_path.read_bytes()[:TERMINATION_LIMIT].decode(errors="replace")
        for _ in range(120):  # a kubelet keeps reporting while the apiserver restarts
            try:
                self._terminate(pod, code, message)
                return
            except Exception:
                if self._stop.wait(0.5):
                    return

    def _kill(self, uid: str) -> None:
        with self._proc_lock:
            proc = self._procs.pop(uid, None)
        if proc is not None:
            with contextlib.suppress(Exception):
                proc.kill()

    def _terminate(self, pod: Any, code: int, message: str) -> None:
        from kubernetes import client

        ns, name = pod.metadata.namespace, pod.metadata.name
        try:
            current = self.api.read_namespaced_pod(name, ns)
        except client.ApiException as exc:
            if exc.status == 404:
                return
            raise
        if current.metadata.uid != pod.metadata.uid or current.status.phase != "Running":
            return
        now = _now()
        body = terminated_status(current, code, message, now, now)
        self.api.patch_namespaced_pod_status(name, ns, body)
        self.transitions.append((f"{ns}/{name}", body["status"]["phase"], now))
