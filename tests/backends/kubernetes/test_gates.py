"""Scheduling-gate detection against recorded API discovery documents.

* 1.20.2: recorded from the provisioned control plane: ``/openapi/v3`` answers 404, and the
  ``PodSpec`` definition of ``/openapi/v2`` (kept to show it has no ``schedulingGates``).
* 1.34.1: no such server runs here; the ``/openapi/v3`` index and the ``api/v1`` document are
  written in the shape a 1.34 server serves them, trimmed to the entries escher reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from escher.backends.kubernetes._gates import (
    GATE_NAME,
    detect_gates,
    pod_kept_gates,
    pod_spec_has_gates,
)

DATA = Path(__file__).resolve().parents[2] / "support" / "data" / "k8s" / "openapi"


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def server(answers: dict[str, tuple[int, Any]]) -> tuple[Any, list[str]]:
    asked: list[str] = []

    def get(path: str) -> tuple[int, Any]:
        asked.append(path)
        return answers.get(path, (404, "404 page not found"))

    return get, asked


def test_1_20_has_no_gates() -> None:
    recorded = load("v1.20.2-openapi-v3.json")
    assert recorded["status"] == 404
    get, asked = server({"/openapi/v3": (recorded["status"], recorded["body"])})
    found = detect_gates(get)
    assert not found.supported and "older than 1.24" in found.reason
    assert asked == ["/openapi/v3"]  # no big v2 document is read
    assert not pod_spec_has_gates({"definitions": {POD: load("v1.20.2-openapi-v2-podspec.json")}})


POD = "io.k8s.api.core.v1.PodSpec"


def test_1_34_has_gates() -> None:
    index = load("v1.34.1-openapi-v3.json")
    url = index["paths"]["api/v1"]["serverRelativeURL"]
    get, asked = server(
        {"/openapi/v3": (200, index), url: (200, load("v1.34.1-openapi-v3-api-v1.json"))}
    )
    found = detect_gates(get)
    assert found.supported and "schedulingGates" in found.reason
    assert asked == ["/openapi/v3", url]


def test_v3_without_the_field_or_errors_means_no_gates() -> None:
    index = load("v1.34.1-openapi-v3.json")
    url = index["paths"]["api/v1"]["serverRelativeURL"]
    doc = load("v1.34.1-openapi-v3-api-v1.json")
    del doc["components"]["schemas"][POD]["properties"]["schedulingGates"]  # e.g. 1.25
    assert not detect_gates(server({"/openapi/v3": (200, index), url: (200, doc)})[0]).supported
    assert not detect_gates(server({"/openapi/v3": (403, "forbidden")})[0]).supported
    assert not detect_gates(server({"/openapi/v3": (200, {"paths": {}})})[0]).supported
    assert not detect_gates(server({"/openapi/v3": (200, index), url: (500, "x")})[0]).supported


def test_created_pod_shows_whether_the_gate_was_kept() -> None:
    assert pod_kept_gates({"spec": {"schedulingGates": [{"name": GATE_NAME}]}})
    assert not pod_kept_gates({"spec": {}})  # a 1.26 server with the feature off drops it
    assert not pod_kept_gates({"spec": {"schedulingGates": [{"name": "other"}]}})


class _Pods:
    """Answers `list_pods` like the API: the pod gets the release annotation on read `at`."""

    def __init__(self, at: int | None) -> None:
        self.at, self.reads = at, 0

    def list_pods(self, namespace: str, field_selector: str = "") -> tuple[list[Any], str]:
        assert field_selector == "metadata.name=p-1" and namespace == "batch"
        self.reads += 1
        released = self.at is not None and self.reads >= self.at
        annotations = {"escher.io/gang-release": "go"} if released else {"other": "x"}
        return [{"metadata": {"name": "p-1", "annotations": annotations}}], "1"


def test_gang_member_waits_for_its_release() -> None:
    from escher.backends.kubernetes.runner import wait_for_release

    now = [0.0]
    pauses: list[float] = []

    def sleep(s: float) -> None:
        pauses.append(s)
        now[0] += s

    api = _Pods(at=4)
    assert wait_for_release(
        api, "batch", "p-1", "escher.io/gang-release", 10, sleep=sleep, clock=lambda: now[0]
    )
    assert api.reads == 4 and pauses == sorted(pauses) and pauses[0] == 0.05
    never = _Pods(at=None)
    now[0] = 0.0
    assert not wait_for_release(
        never, "batch", "p-1", "escher.io/gang-release", 3, sleep=sleep, clock=lambda: now[0]
    )
    assert now[0] == 3  # waited exactly the limit, never longer


# --- the gated gang protocol (the API work is faked: the gated path cannot run on 1.20) ------
class _Later:
    """A manual `Schedule`: the test fires what is due."""

    def __init__(self) -> None:
        self.jobs: list[tuple[float, Any, list[bool]]] = []

    def __call__(self, delay: float, fn: Any) -> Any:
        cancelled = [False]
        self.jobs.append((delay, fn, cancelled))

        class Handle:
            def cancel(self) -> None:
                cancelled[0] = True

        return Handle()

    def fire(self) -> float:
        delay, fn, cancelled = self.jobs.pop(0)
        if not cancelled[0]:
            fn()
        return delay


def _gang(size: int = 3) -> tuple[Any, list[tuple[str, str]], _Later]:
    from escher.backends.kubernetes._gang import GatedGang

    log: list[tuple[str, str]] = []
    later = _Later()

    def create(n: int) -> list[str]:
        names = [f"a{n}-m{i}" for i in range(size)]
        log.extend(("create", name) for name in names)
        return names

    gang = GatedGang(
        "g1",
        size,
        create=create,
        release=lambda p: log.append(("release", p)),
        commit=lambda p: log.append(("commit", p)),
        discard=lambda p: log.append(("discard", p)),
        on_status=lambda s: log.append(("status", s)),
        timeout=5.0,
        backoff=1.0,
        seed=1,
        schedule=later,
    )
    return gang, log, later


def test_gang_is_released_only_after_all_members_exist_and_committed_once_all_bound() -> None:
    gang, log, later = _gang()
    gang.start()
    steps = [step for step, _ in log if step != "status"]
    assert steps == ["create"] * 3 + ["release"] * 3  # every pod exists before any release
    gang.on_bound("a1-m0", "n1")
    gang.on_bound("a1-m1", "n2")
    assert not [p for step, p in log if step == "commit"]  # 2 of 3: nothing may run yet
    assert "2 of 3 members bound" in log[-1][1]
    gang.on_bound("a1-m1", "n9")  # a repeated event changes nothing
    gang.on_bound("a1-m2", "n1")
    assert [p for step, p in log if step == "commit"] == ["a1-m0", "a1-m1", "a1-m2"]
    assert gang.committed and "all 3 members bound" in log[-1][1]
    assert later.fire() == 5.0  # the deadline was cancelled by the commit
    assert not [p for step, p in log if step == "discard"]


def test_partial_placement_is_rolled_back_and_retried_with_backoff() -> None:
    gang, log, later = _gang()
    gang.start()
    gang.on_bound("a1-m0", "n1")  # only one fits
    assert later.fire() == 5.0  # the deadline: roll back
    assert [p for step, p in log if step == "discard"] == ["a1-m0", "a1-m1", "a1-m2"]
    assert "1 of 3 members bound after 5 s (attempt 1); rolled back" in log[-1][1]
    gang.on_bound("a1-m1", "n2")  # a late event of the discarded attempt
    assert not [p for step, p in log if step == "commit"]
    delay = later.fire()  # the backoff, then attempt 2
    assert 0.5 <= delay <= 1.5 and gang.attempts == 2
    for i in range(3):
        gang.on_bound(f"a2-m{i}", f"n{i}")
    assert [p for step, p in log if step == "commit"] == ["a2-m0", "a2-m1", "a2-m2"]


def test_closed_gang_neither_commits_nor_retries() -> None:
    gang, log, later = _gang(2)
    gang.start()
    gang.close()
    later.fire()  # the deadline after close: nothing happens
    assert gang.attempts == 1 and not [s for s, _ in log if s in ("discard", "commit")]
