"""The dashboard's one background-job board: jobs kept per session, finished jobs of gone sessions dropped,
running ones never, at most N finished per session; every kind of job (runs, benchmarks, calibrations) uses it."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count

from dashboard.jobs import JobBoard

_ids = count(1)


@dataclass
class FakeJob:
    running: bool = False
    stopped: bool = False
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def active(self) -> bool:
        return self.running and not self.stopped

    def stop(self) -> None:
        self.stopped = True


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_a_gone_sessions_finished_jobs_are_dropped_and_running_ones_kept():
    clock = Clock()
    board = JobBoard("test", idle_s=60, clock=clock)
    done, live = board.add("a", FakeJob()), board.add("a", FakeJob(running=True))
    clock.t = 61  # "a" has not looked at its jobs for a minute: gone
    board.add("b", FakeJob())
    assert board.sessions() == ["a", "b"]  # "a" still has a running job: its thread is not orphaned
    assert [j.id for j in board.jobs("a")] == [live.id] and done not in board.jobs("a")
    live.running = False
    clock.t = 200
    board.add("b", FakeJob())
    assert board.sessions() == ["b"]


def test_a_session_seen_recently_keeps_everything():
    clock = Clock()
    board = JobBoard("test", idle_s=60, clock=clock)
    job = board.add("a", FakeJob())
    clock.t = 59
    board.add("b", FakeJob())
    assert board.jobs("a") == [job]


def test_at_most_n_finished_jobs_per_session_newest_kept():
    board = JobBoard("test", max_finished=3)
    jobs = [board.add("a", FakeJob()) for _ in range(5)]
    running = board.add("a", FakeJob(running=True))
    assert board.jobs("a") == jobs[2:] + [running]


def test_too_many_sessions_drop_the_least_recently_seen_idle_one():
    board = JobBoard("test", max_sessions=2)
    board.add("a", FakeJob())
    board.add("b", FakeJob(running=True))
    board.jobs("a")  # "a" seen again: "b" is now the least recent, but it is running, so "a" goes
    board.add("c", FakeJob())
    assert board.sessions() == ["b", "c"]


def test_remove_stops_a_running_job_and_stop_all_stops_the_rest():
    board = JobBoard("test")
    a, b = board.add("s", FakeJob(running=True)), board.add("s", FakeJob(running=True))
    board.remove("s", a.id)
    assert a.stopped and board.jobs("s") == [b]
    board.stop_all("s")
    assert b.stopped and board.latest("s") is b
    assert board.get("s", 12345) is None and board.latest("nobody") is None


def test_every_kind_of_dashboard_job_uses_the_board():
    from dashboard import background_runs, benchjob, calibview
    assert isinstance(background_runs.REGISTRY.board, JobBoard)
    assert isinstance(benchjob.BOARD, JobBoard) and isinstance(calibview.BOARD, JobBoard)
