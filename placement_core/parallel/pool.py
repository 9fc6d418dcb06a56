"""Local worker processes that each hold the compiled problem and evaluate placements sent over pipes.

Why not ``concurrent.futures``: with evaluations of tens of microseconds, its per-task cost (a
management thread, pickled call objects, a shared queue) ate the gain of a second core. Here each
worker has two one-way pipes; a task is a header plus the placements' bytes (:mod:`.wire`), a
reply the objectives' bytes. The problem travels once, when the worker starts.

A worker that dies (killed, out of memory, a crash in the kernel) loses nothing: its unanswered
tasks go to the others and a replacement starts. A task that kills workers twice is reported
instead of retried forever.
"""

from __future__ import annotations

import multiprocessing
import pickle
import queue
import threading
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import wait

import numpy as np

from . import wire

MAX_ATTEMPTS = 2  # workers a task may kill before the run gives up on it
# least work per task: the driver's own cost per batch (asking, telling, a recipe) is tens to hundreds of
# microseconds whatever its size, and batches of one 4 ms placement left the workers waiting on it
POOL_FLOOR_S = 0.005
PING = -1  # task id of an empty round trip, answered without touching the problem
SHUTDOWN = -2


def _serve(payload: bytes, tasks, replies) -> None:  # pragma: no cover - runs in the worker process
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's: it stops the run, then closes the pool
    serve(pickle.loads(payload), tasks, replies)


def serve(problem, tasks, replies) -> None:  # pragma: no cover - runs in a worker process
    """Answer task frames until the driver says stop or goes away (a local worker, or a Dask worker's loop)."""
    while True:
        try:
            frame = tasks.recv_bytes()
        except (EOFError, OSError):
            return  # the driver is gone
        task_id, work = wire.read_task(frame)
        if task_id == SHUTDOWN:
            return
        try:
            if isinstance(work, np.ndarray):
                out = problem.evaluate_many(work) if len(work) else np.zeros(0)
                replies.send_bytes(wire.reply_frame(task_id, out))
            else:  # a recipe (optimize.variation.Recipe): make the children here, then evaluate them
                kids, out, rates = work.make_and_evaluate(problem)
                replies.send_bytes(wire.made_frame(task_id, kids, out, rates, problem.n_genes))
        except Exception:
            replies.send_bytes(wire.error_frame(task_id, traceback.format_exc()))


@dataclass(eq=False)
class _Worker:
    process: multiprocessing.process.BaseProcess | None  # None: a remote worker, known by its connection only
    tasks: object  # our end of its task pipe (written by the sender thread only)
    replies: object  # our end of its reply pipe (read by the driver only); a socket's one connection does both
    outbox: queue.Queue = field(default_factory=queue.Queue)
    outstanding: list[int] = field(default_factory=list)  # task ids sent and not answered, in order
    alive: bool = True
    name: str = ""
    sender: threading.Thread | None = None

    @property
    def sentinel(self):
        return None if self.process is None else self.process.sentinel


class WorkerError(RuntimeError):
    """A worker raised, or kept dying, on a task."""


class TaskLedger:
    """Tasks out to workers over connections, each answered once: what a worker that dies had not answered goes
    to the others. Subclasses say where workers come from (``_replace``) and what waiting for none means."""

    POLL_S: float | None = None  # how long a wait for replies lasts before ``_tick`` (None: until one arrives)

    def __init__(self, n_devices: int):
        self.n_devices = n_devices  # gene values: devices, then splits (one byte each while <= 256)
        self._frames: dict[int, bytes] = {}  # unanswered tasks, kept to send again if their worker dies
        self._attempts: dict[int, int] = {}
        self._results: dict[int, np.ndarray] = {}
        self._next = 0
        self.restarts = 0
        self._workers: list[_Worker] = []

    def _add(self, w: _Worker) -> _Worker:
        w.sender = threading.Thread(target=_send_loop, args=(w,), daemon=True, name="placement-evaluator-send")
        w.sender.start()
        self._workers.append(w)
        return w

    def _replace(self) -> None:
        """A worker was lost: start another."""

    def _tick(self) -> None:
        """Called on every pass of the reply loop."""

    def _no_workers(self) -> None:
        raise WorkerError("every evaluation worker has died")

    def _shutdown_all(self) -> None:
        for w in self._workers:
            if w.alive:
                w.outbox.put(wire.task_frame(SHUTDOWN, np.zeros((0, 0), dtype=np.uint8)))
                w.outbox.put(None)

    @property
    def size(self) -> int:
        return sum(w.alive for w in self._workers)

    # -- tasks -----------------------------------------------------------------------------------
    def submit(self, placements: np.ndarray) -> int:
        """Queue a task on the worker with the fewest unanswered tasks; returns its id."""
        return self._queue(lambda task_id: wire.task_frame(task_id, wire.compact(placements, self.n_devices)))

    def submit_recipe(self, recipe) -> int:
        """A task that makes a batch's children on the worker and evaluates them."""
        return self._queue(lambda task_id: wire.recipe_frame(task_id, recipe))

    def _queue(self, make_frame) -> int:
        task_id = self._next
        self._next += 1
        frame = make_frame(task_id)
        self._frames[task_id] = frame
        self._attempts[task_id] = 0
        self._dispatch(task_id)
        return task_id

    def result(self, task_id: int) -> np.ndarray:
        """The objectives of a task, waiting for them (and handling whatever else arrives meanwhile)."""
        while task_id not in self._results:
            self._poll()
        return self._results.pop(task_id)

    def ping(self) -> None:
        """An empty round trip through one worker (what every task costs beyond its work)."""
        self._ping_and_wait([min(self._live(), key=lambda w: len(w.outstanding))])

    def ping_every(self) -> None:
        """An empty round trip through every worker at once: returns when all of them are up (a worker
        still importing and compiling the problem would otherwise share a core with what is timed next)."""
        self._ping_and_wait(self._live())

    def _ping_and_wait(self, workers: list[_Worker]) -> None:
        frame = wire.task_frame(PING, np.zeros((0, 0), dtype=np.uint8))
        for w in workers:
            w.outbox.put(frame)
            w.outstanding.append(PING)
        while any(PING in w.outstanding for w in workers if w.alive):
            self._poll()

    def _live(self) -> list[_Worker]:
        live = [w for w in self._workers if w.alive]
        if not live:
            self._no_workers()  # raises, or returns once a worker is there
            live = [w for w in self._workers if w.alive]
        return live

    def _dispatch(self, task_id: int) -> None:
        w = min(self._live(), key=lambda w: len(w.outstanding))
        w.outstanding.append(task_id)
        w.outbox.put(self._frames[task_id])

    def _poll(self) -> None:
        live = self._live()
        by_conn = {w.replies: w for w in live}
        by_sentinel = {w.sentinel: w for w in live if w.sentinel is not None}
        ready_ones = wait(list(by_conn) + list(by_sentinel), timeout=self.POLL_S)
        self._tick()
        for ready in ready_ones:
            w = by_conn.get(ready) or by_sentinel[ready]
            if not w.alive:
                continue
            if ready is w.sentinel and not w.replies.poll():
                self._lost(w)
                continue
            try:
                frame = w.replies.recv_bytes()
            except (EOFError, OSError):
                self._lost(w)
                continue
            task_id, out, error = wire.read_reply(frame)
            if task_id in w.outstanding:
                w.outstanding.remove(task_id)
            if task_id == PING:
                continue
            if error is not None:
                raise WorkerError(f"an evaluation worker failed:\n{error}")
            self._frames.pop(task_id, None)
            self._attempts.pop(task_id, None)
            self._results[task_id] = out

    def _lost(self, w: _Worker) -> None:
        """A worker died: its unanswered tasks go to the others, and a replacement starts."""
        w.alive = False
        w.outbox.put(None)
        lost = [t for t in w.outstanding if t != PING]
        w.outstanding.clear()
        self.restarts += 1
        self._replace()
        for task_id in lost:
            self._attempts[task_id] += 1
            if self._attempts[task_id] >= MAX_ATTEMPTS:
                raise WorkerError(f"task {task_id} ended {MAX_ATTEMPTS} evaluation workers (a crash in the "
                                  "simulator, or the machine's memory running out); the run stops here")
            self._dispatch(task_id)


class WorkerPool(TaskLedger):
    """``workers`` processes, each with the problem; ``submit`` returns a task id, ``result`` its objectives."""

    def __init__(self, problem, workers: int, start_method: str | None = None):
        super().__init__(problem.n_genes)
        self._payload = pickle.dumps(problem)
        self._ctx = _context(start_method)
        try:
            for _ in range(workers):
                self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> _Worker:
        task_r, task_w = self._ctx.Pipe(duplex=False)
        reply_r, reply_w = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_serve, args=(self._payload, task_r, reply_w), daemon=True,
                                 name="placement-evaluator")
        proc.start()
        task_r.close()  # the child holds these ends now; closing ours lets EOF reach us when it dies
        reply_w.close()
        return self._add(_Worker(proc, task_w, reply_r))

    def _replace(self) -> None:
        self._start()

    def close(self) -> None:
        self._shutdown_all()
        for w in self._workers:
            w.process.join(timeout=2)
            if w.process.is_alive():
                w.process.terminate()
                w.process.join(timeout=2)
            w.replies.close()
        self._workers = []

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers if w.alive]


def _send_loop(w: _Worker) -> None:
    """Writes a worker's tasks in order; a write blocks while the worker is busy, so it is done here
    and the driver goes on generating the next batch."""
    while True:
        frame = w.outbox.get()
        if frame is None:
            break
        try:
            w.tasks.send_bytes(frame)
        except OSError:
            break  # the worker is gone; the driver notices on its reply pipe
    if w.tasks is not w.replies:  # one connection both ways (a socket) is closed by its pool, once
        try:
            w.tasks.close()
        except OSError:
            pass


def _context(start_method: str | None):
    """``forkserver`` by default: safe beside threads (the dashboard runs optimizers in threads), and
    after the first pool a worker starts by forking an already-initialised server (milliseconds)."""
    method = start_method or ("forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn")
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(["placement_core.parallel.pool", "placement_core.problem"])
    return ctx
