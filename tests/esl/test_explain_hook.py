"""The explain hook (`ESL.contribution`): what a policy adds to a task, in the user's terms."""

from __future__ import annotations

import threading

from escher.backends.memory import MemoryBackend
from escher.esl import CoLocation, Contribution, LoadBalance, QueueingPolicy, Signals


def _block(event: threading.Event) -> None:
    event.wait(30)


def test_default_reads_the_ledger_and_marks_labels_not_set_yet() -> None:
    backend = MemoryBackend({"n1": {"CPU": 2}})
    with backend, LoadBalance(backend, per_node=1, name="lb") as lb, Signals(backend) as sig:
        ready = sig.event("ready")
        release = threading.Event()
        running = lb.launch(_block, release)
        waiting = ready.waiter.launch(lambda: 1)
        note = lb.contribution(running)
        assert isinstance(note, Contribution) and note.source == "LoadBalance('lb')"
        assert [n.later for n in note.labels.values()] == [False]
        event_note = sig.contribution(waiting)
        assert event_note is not None
        assert [n.later for n in event_note.labels.values()] == [True]  # set later
        assert lb.contribution(waiting) is None  # requests none of its labels
        release.set()
        running.result(10)
        waiting.cancel()


def test_colocation_names_the_group_and_what_it_needs_while_pending() -> None:
    backend = MemoryBackend({"n1": {"CPU": 2}, "n2": {"CPU": 2}})
    with backend, CoLocation(backend, name="colo", retry_interval=60) as colo:
        big = colo.group("ps", 2, {"CPU": 2})  # needs 4 CPUs on one node: none has
        ref = big.launch(lambda: 1)
        note = colo.contribution(ref)
        assert note is not None
        (label_note,) = note.labels.values()
        assert label_note.source == "CoLocation('colo').group('ps')"
        assert label_note.later and label_note.need == {"CPU": 4}
        assert label_note.kind == "group"
        ref.cancel()
        small = colo.group("w", 1, {"CPU": 1})
        done = small.launch(lambda: 2)
        assert done.result(10) == 2
        placed = colo.contribution(done)
        assert placed is not None
        assert not next(iter(placed.labels.values())).later


def test_queueing_policy_reports_the_users_quota() -> None:
    backend = MemoryBackend({"n1": {"CPU": 1}})
    with backend, QueueingPolicy("fifo", backend, name="q") as queue:
        release = threading.Event()
        first = queue.submit(_block, release, user="ann", resources={"CPU": 1})
        second = queue.submit(lambda: 1, user="ann", resources={"CPU": 1})
        note = queue.contribution(second)
        assert note is not None and note.wait_kind == "quota"
        assert all(n.later and n.kind == "quota" for n in note.labels.values())
        assert "user 'ann'" in note.waiting
        release.set()
        assert second.result(10) == 1
        first.result(10)
