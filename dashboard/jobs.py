"""Background jobs of the dashboard (optimization runs, benchmarks, calibrations), kept per browser session.

A job runs in a thread that never calls Streamlit; pages poll it from a fragment, so it survives page
switches and reruns. One board per kind of job, shared by every script run of the process, holds each
session's jobs. Streamlit does not say when a session is gone, so a session counts as gone once it has not
looked at its jobs for ``idle_s`` seconds, or when more than ``max_sessions`` sessions are known; a gone
session's finished jobs are dropped (a job still running is never dropped: its thread would be orphaned).
Each session keeps at most ``max_finished`` finished jobs, the newest.
"""

from __future__ import annotations

import threading
import time
from typing import Generic, Protocol, TypeVar


class Job(Protocol):
    """What the board needs from a job: an id, whether it is still working, and how to stop it."""

    id: int

    @property
    def active(self) -> bool: ...

    def stop(self) -> None: ...


J = TypeVar("J", bound=Job)


class JobBoard(Generic[J]):
    def __init__(self, kind: str, *, max_finished: int = 20, max_sessions: int = 64, idle_s: float = 3600.0,
                 clock=time.monotonic):
        self.kind = kind
        self.max_finished = max_finished
        self.max_sessions = max_sessions
        self.idle_s = idle_s
        self._clock = clock
        self._jobs: dict[str, dict[int, J]] = {}  # session -> {job id: job}, least recently seen first
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def add(self, session: str, job: J) -> J:
        """Register a job (started by the caller); evicts what is no longer needed."""
        with self._lock:
            self._touch(session)
            self._jobs[session][job.id] = job
            self._evict(session)
        return job

    def jobs(self, session: str) -> list[J]:
        with self._lock:
            self._touch(session)
            return list(self._jobs[session].values())

    def get(self, session: str, job_id: int) -> J | None:
        with self._lock:
            self._touch(session)
            return self._jobs[session].get(job_id)

    def latest(self, session: str) -> J | None:
        jobs = self.jobs(session)
        return jobs[-1] if jobs else None

    def remove(self, session: str, job_id: int) -> None:
        """Forget a job, stopping it if it still runs."""
        with self._lock:
            job = self._jobs.get(session, {}).pop(job_id, None)
        if job is not None:
            job.stop()

    def stop_all(self, session: str) -> None:
        for job in self.jobs(session):
            job.stop()

    def sessions(self) -> list[str]:
        with self._lock:
            return list(self._jobs)

    def everywhere(self) -> list[J]:
        """Every session's jobs (each once), without counting as a look by any session."""
        with self._lock:
            seen: dict[int, J] = {}
            for jobs in self._jobs.values():
                for job in jobs.values():
                    seen.setdefault(id(job), job)
            return list(seen.values())

    # -- under the lock -----------------------------------------------------------------------------
    def _touch(self, session: str) -> None:
        jobs = self._jobs.pop(session, {})
        self._jobs[session] = jobs  # most recently seen last
        self._seen[session] = self._clock()

    def _evict(self, current: str) -> None:
        finished = [j for j in self._jobs[current].values() if not j.active]
        for old in finished[:max(0, len(finished) - self.max_finished)]:
            del self._jobs[current][old.id]
        now = self._clock()
        others = [k for k in self._jobs if k != current]
        over = max(0, len(self._jobs) - self.max_sessions)
        for k in others:
            gone = over > 0 or now - self._seen.get(k, now) > self.idle_s
            if not gone:
                continue
            running = {i: j for i, j in self._jobs[k].items() if j.active}
            if running:
                self._jobs[k] = running
            else:
                del self._jobs[k]
                self._seen.pop(k, None)
                over -= 1

