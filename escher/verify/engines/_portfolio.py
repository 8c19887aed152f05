"""Engines side by side: each in its own process, the first definite answer wins.

Every lane runs in a forked child (the problem is already built in the parent, so a child
starts in milliseconds and pickles nothing on the way in) and sends back one small answer.
The parent takes answers as they come; the first one `accept` takes wins and every other
child is killed at once with its whole process group (the arc-flow lane runs HiGHS in a
child of its own). At the deadline every child still running is killed, so a run never
overstays its deadline by more than the time to reap them.

Where `fork` is missing (not Linux) or this process may not have children (a daemon
process), `available()` is False and the caller runs its engines in turn instead.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, cast

#: Seconds a killed child is waited for before it is left to the system.
REAP_SECONDS = 1.0


@dataclass
class Race:
    """What a race ended with.

    Attributes:
        winner: The lane whose answer was accepted (None: no lane's was).
        answer: That answer.
        others: Every other answer received, by lane (the accepted one excepted).
        silent: Lanes that sent nothing (killed at the deadline, or died).
        seconds: Wall seconds per lane until its answer, or until it was stopped.
    """

    winner: str | None = None
    answer: Any = None
    others: dict[str, Any] = field(default_factory=dict)
    silent: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def available() -> bool:
    """Lanes can run in forked processes here."""
    return (
        sys.platform == "linux"
        and "fork" in multiprocessing.get_all_start_methods()
        and not multiprocessing.current_process().daemon
    )


def race(
    lanes: Mapping[str, Callable[[], Any]],
    deadline: float,
    accept: Callable[[str, Any], bool],
) -> Race:
    """Run every lane in its own process until one answer is accepted or `deadline` passes.

    Args:
        lanes: Lane name -> a function computing its answer (must be picklable to send).
        deadline: A `time.monotonic()` value; children still running then are killed.
        accept: Called in this process on each answer as it arrives; True ends the race.
    """
    ctx = multiprocessing.get_context("fork")
    for stream in (sys.stdout, sys.stderr):  # a child flushes what it inherits on exit
        with contextlib.suppress(Exception):
            stream.flush()
    t0 = time.monotonic()
    running: dict[Connection, tuple[str, Any]] = {}
    out = Race()
    for name, fn in lanes.items():
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_lane, args=(send, fn), daemon=False, name=f"escher-{name}")
        child.start()
        send.close()
        with contextlib.suppress(OSError):  # as the child does: no kill can miss its group
            os.setpgid(child.pid, child.pid)  # type: ignore[arg-type]
        running[receive] = (name, child)
    try:
        while running and out.winner is None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for ready in wait(list(running), timeout=left):
                conn = cast(Connection, ready)
                name, child = running.pop(conn)
                out.seconds[name] = time.monotonic() - t0
                try:
                    answer = conn.recv()
                except (EOFError, OSError):  # died without an answer
                    out.silent.append(name)
                    continue
                finally:
                    conn.close()
                    _stop(child)
                if out.winner is None and accept(name, answer):
                    out.winner, out.answer = name, answer
                else:
                    out.others[name] = answer
    finally:
        for conn, (name, child) in running.items():  # kill them all first, then reap
            out.silent.append(name)
            out.seconds[name] = time.monotonic() - t0
            _kill(child)
            conn.close()
        reap_until = time.monotonic() + REAP_SECONDS
        for _, child in running.values():
            child.join(timeout=max(0.0, reap_until - time.monotonic()))
    return out


def _lane(send: Connection, fn: Callable[[], Any]) -> None:
    """The child: its own process group (so the parent can stop its children with it),
    then the lane's answer down the pipe."""
    os.setpgid(0, 0)
    try:
        send.send(fn())
    except BaseException:  # the parent reads "no answer"
        pass
    finally:
        send.close()


def _kill(child: Any) -> None:
    """Kill `child` and every process of its group (not waiting for them)."""
    if child.pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        if child.is_alive():
            child.kill()


def _stop(child: Any) -> None:
    """Kill `child` and every process of its group, and reap it."""
    _kill(child)
    child.join(timeout=REAP_SECONDS)
