"""`escher view`: the page in a real browser (headless Chromium) and the server's rules.

The browser test is marked ``browser``; it skips, saying why, only when Debian's chromium is
absent (scripts/ci-browser.sh installs it). Chromium starts headless, without sandbox, GPU,
background networking or component updates, with a fresh profile (the network is closed).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import escher
from escher.core.errors import ValidationError
from escher.esl import CoLocation
from escher.explain.view import is_loopback, serve

CHROMIUM = os.environ.get("ESCHER_CHROMIUM", "/usr/bin/chromium")
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "view.png"
WAIT_S = 2.0  # the page must show a change within this


def _post(url: str, body: dict[str, object], token: str | None = None) -> int:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_state_api_and_read_only_by_default() -> None:
    with escher.init(nodes={"n1": {"CPU": 2}}) as backend, serve(backend) as server:
        assert server.url.startswith("http://127.0.0.1:")
        escher.set_resource("fast", 1, "n1")
        with urllib.request.urlopen(server.url + "api/state", timeout=10) as response:
            data = json.loads(response.read())
        (node,) = data["nodes"]
        assert [b["name"] for b in node["ephemeral"]] == ["fast"]
        body = {"label": "x", "capacity": 1, "node": "n1"}
        assert _post(server.url + "api/set_resource", body) == 403
        assert "x" not in escher.get_cluster_state().nodes["n1"].total


def test_actions_need_the_flag_and_a_token_off_loopback() -> None:
    with escher.init(nodes={"n1": {"CPU": 2}}) as backend:
        with pytest.raises(ValidationError, match="without a token"):
            serve(backend, host="0.0.0.0", allow_actions=True)
        with serve(backend, allow_actions=True, token="s3cret") as server:
            body = {"label": "x", "capacity": 1, "node": "n1"}
            assert _post(server.url + "api/set_resource", body) == 403
            assert _post(server.url + "api/set_resource", body, "s3cret") == 200
            assert escher.get_cluster_state().nodes["n1"].total["x"] == 1
    assert is_loopback("localhost") and is_loopback("::1") and not is_loopback("10.0.0.1")


@pytest.mark.browser
def test_page_shows_a_new_label_and_a_pending_task_within_2s() -> None:
    if not shutil.which(CHROMIUM):
        pytest.skip(f"Chromium not found at {CHROMIUM}: run scripts/ci-browser.sh")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    release = threading.Event()
    profile = Path(os.environ.get("TMPDIR", "/tmp")) / f"escher-view-{os.getpid()}"
    with (
        escher.init(nodes={"n1": {"CPU": 4}, "n2": {"CPU": 2}, "n3": {"CPU": 2}}) as backend,
        serve(backend) as server,
        sync_api.sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
            ],
            viewport={"width": 1100, "height": 900},
        )
        try:
            page = browser.new_page()
            page.goto(server.url)
            page.wait_for_selector("#nodes .node", timeout=10_000)
            colo = CoLocation(name="colo")
            ps = colo.group("ps", 2, {"CPU": 1})
            ps.launch(release.wait, 30)

            start = time.monotonic()
            escher.set_resource("fast-disk", 1, "n2")
            page.wait_for_selector('[data-label="fast-disk"]', timeout=WAIT_S * 1000)
            label_s = time.monotonic() - start

            start = time.monotonic()
            stuck = escher.launch(lambda: 1, resources={"CPU": 1, "tpu-slice": 1}, name="stuck")
            row = page.wait_for_selector(f'[data-task="{stuck.id}"]', timeout=WAIT_S * 1000)
            task_s = time.monotonic() - start
            assert row is not None and "blocked" in row.inner_text()
            assert label_s < WAIT_S and task_s < WAIT_S
            print(f"view latency: label {label_s:.3f} s, pending task {task_s:.3f} s")
            page.wait_for_selector("#intents table", timeout=10_000)
            if os.environ.get("ESCHER_VIEW_SCREENSHOT"):
                page.screenshot(path=str(SCREENSHOT), full_page=True)
            stuck.cancel()
        finally:
            release.set()
            browser.close()
            shutil.rmtree(profile, ignore_errors=True)


def _events(url: str, seconds: float, during: Any = None) -> list[str]:
    """The lines of the event stream read for `seconds` (calling `during` after the first)."""
    import http.client
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    connection.request("GET", "/events")
    response = connection.getresponse()
    lines: list[str] = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            line = response.readline().decode().rstrip("\n")
            if line:
                lines.append(line)
                if during is not None and line.startswith("data:"):
                    during()
                    during = None
    finally:
        connection.close()
    return lines


def test_events_send_a_snapshot_only_when_something_changed() -> None:
    with (
        escher.init(nodes={"n1": {"CPU": 2}}) as backend,
        serve(backend, interval=0.02, heartbeat=0.4) as server,
    ):
        idle = _events(server.url, 2.0)
        snapshots = [line for line in idle if line.startswith("data:")]
        assert len(snapshots) == 1, idle  # the first one; the clock alone is no change
        assert idle.count(": heartbeat") >= 2, idle
        changed = _events(server.url, 2.0, during=lambda: escher.set_resource("x", 1, "n1"))
        snapshots = [json.loads(line[5:]) for line in changed if line.startswith("data:")]
        assert len(snapshots) == 2, changed
        assert [b["name"] for b in snapshots[-1]["nodes"][0]["ephemeral"]] == ["x"]


def test_a_port_out_of_range_or_in_use_is_refused_with_the_reason() -> None:
    import socket

    with escher.init(nodes={"n1": {"CPU": 2}}) as backend:
        with pytest.raises(ValidationError, match="0 to 65535"):
            serve(backend, port=99999)
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            with pytest.raises(ValidationError, match="address already in use"):
                serve(backend, port=port)
