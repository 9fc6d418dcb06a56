"""Evaluation on a Dask cluster through actors: one object per worker holds the problem and is called directly.

The second choice of :class:`.cluster.ClusterSession`: direct connections (:mod:`.direct`) cost less still
(an actor call costs client and worker about 1.5 ms of CPU between them), but need the workers to reach this
process; an actor needs only that this process reach the workers, as Dask's client usually does.

A Dask task costs the scheduler a round of messages (submitted, assigned, done, released) besides the worker's
own: on 2 cores shared by scheduler, client and workers that came to 10.7 ms a task (docs/scaling.md), more than
a quality-capped batch of ResNet-50 placements (300 placements, 9 ms) is worth. A call to an actor goes from
this process to the worker holding it and back, and the scheduler never hears of it.

What the scheduler did for tasks, this module does for calls: a call whose worker died (the call fails, or
the actor's creation task is lost) is sent again to another actor, and actors are made on workers that have
none (a restarted worker gets the problem from its plugin, so its actor compiles nothing that travels). A
call that loses ``MAX_TRIES`` actors in a row stops the run, as a task that kills workers does on the local
pool. Calls are pure functions of their payload, so a call sent again gives the result it would have given.
A client that can reach the scheduler but not the workers (actors need direct connections) is found when
the actors are first called, and the session falls back to tasks.
"""

from __future__ import annotations

import time

from ..base.errors import InputError
from . import wire

MAX_TRIES = 3  # actors a call may lose before the run gives up on it
REFRESH_S = 5.0  # how often the pool looks for workers that joined (or came back) without an actor
FIRST_CALL_S = 20.0  # the first call to each actor: time to compile the problem there


class ProblemActor:
    """Lives on one worker: the problem its plugin holds, evaluated on request."""

    def __init__(self, plugin_name: str):
        from distributed import get_worker
        self.problem = get_worker().plugins[plugin_name].problem

    # plain methods run on the worker's actor thread: a coroutine would run on its event loop, and a large batch
    # (seconds of simulation) would hold up its heartbeats
    def evaluate(self, packed):
        return wire.evaluate_packed(self.problem, packed)

    def made(self, recipe):
        return wire.make_packed(self.problem, recipe)


class WorkerGone(InputError):
    """A call lost the actors it was sent to, one after another."""


class Call:
    """One call out: what it asks (so it can be asked again elsewhere) and where it went."""

    __slots__ = ("method", "payload", "worker", "future", "tries")

    def __init__(self, method: str, payload):
        self.method, self.payload, self.worker, self.future, self.tries = method, payload, None, None, 0


def _gone_types() -> tuple:
    from distributed.comm.core import CommClosedError
    return (OSError, CommClosedError, RuntimeError)  # RuntimeError: "Worker holding Actor was lost"


class ActorPool:
    """An actor on every worker of ``client``'s cluster, for the problem in plugin ``plugin_name``."""

    def __init__(self, client, plugin_name: str, n_devices: int, lost):
        self.client, self.plugin_name, self.n_devices, self._lost = client, plugin_name, n_devices, lost
        self._futures: dict = {}  # worker address -> the creation task's future (holding it keeps the actor)
        self._actors: dict = {}
        self._load: dict = {}  # calls out per worker
        self.replaced = 0  # actors lost and made again (tests read it)
        self._checked = 0.0
        try:
            self.spawn()
            for worker in list(self._actors):  # every actor answers before the pool counts as working
                call = Call("evaluate", None)
                self._send(call, worker)
                self.result(call, first=True)
        except BaseException:
            self.close()
            raise

    @property
    def workers(self) -> int:
        return len(self._actors)

    def spawn(self) -> None:
        """An actor on every worker that has none; wait for them to exist."""
        self._checked = time.monotonic()
        workers = set(self.client.scheduler_info().get("workers", {}))
        for worker in [w for w in self._actors if w not in workers]:
            self._drop(worker)
        new = {w: self.client.submit(ProblemActor, self.plugin_name, actor=True, workers=[w],
                                     allow_other_workers=False, pure=False) for w in workers - set(self._actors)}
        for worker, future in new.items():
            try:
                actor = future.result(timeout=FIRST_CALL_S)
            except _gone_types() + (TimeoutError,):
                continue  # that worker went away meanwhile
            self._futures[worker], self._actors[worker], self._load[worker] = future, actor, 0

    def submit(self, placements) -> Call:
        return self.call("evaluate", wire.compact(placements, self.n_devices))

    def submit_recipe(self, recipe) -> Call:
        return self.call("made", wire.compact_recipe(recipe, self.n_devices))

    def call(self, method: str, payload) -> Call:
        if time.monotonic() - self._checked > REFRESH_S:
            self.spawn()
        call = Call(method, payload)
        self._send(call)
        return call

    def _send(self, call: Call, worker=None) -> None:
        while True:
            if not self._actors:
                self.spawn()
                if not self._actors:
                    raise self._lost("with no worker left to evaluate on")
            worker = worker or min(self._load, key=self._load.get)  # the least busy actor
            try:
                call.future = getattr(self._actors[worker], call.method)(call.payload)
            except _gone_types():
                self._drop(worker)
                worker = None
                continue
            call.worker = worker
            self._load[worker] += 1
            return

    def result(self, call: Call, first: bool = False):
        """The call's answer; a lost actor sends it again elsewhere, a lost scheduler is the caller's ``lost``."""
        while True:
            try:
                out = call.future.result(timeout=FIRST_CALL_S if first else 1.0)
            except TimeoutError:
                if first:
                    raise OSError(f"the actor on {call.worker} did not answer in {FIRST_CALL_S:.0f} s") from None
                self._check_scheduler()
                continue
            except _gone_types():
                if first:
                    raise
                self._retry(call)
                continue
            self._load[call.worker] = self._load.get(call.worker, 1) - 1
            self._check_scheduler()
            return out

    def _retry(self, call: Call) -> None:
        self._check_scheduler()
        self._drop(call.worker)
        call.tries += 1
        if call.tries >= MAX_TRIES:
            raise WorkerGone(f"a batch of evaluations lost the Dask worker it ran on {call.tries} times in a row",
                             field="dask", fix="Check the workers' logs (memory, crashes); the run can be resumed "
                                               "from its last checkpoint")
        self.spawn()
        self.replaced += 1
        self._send(call)

    def _check_scheduler(self) -> None:
        if self.client.status != "running":  # the client lost its scheduler: as on the task path, the run stops
            raise self._lost("while evaluations were out")

    def _drop(self, worker) -> None:
        self._actors.pop(worker, None)
        self._load.pop(worker, None)
        future = self._futures.pop(worker, None)
        if future is not None:
            try:
                future.release()
            except Exception:  # noqa: BLE001 - a client already disconnected: nothing left to release
                pass

    def close(self) -> None:
        for worker in list(self._futures):
            self._drop(worker)
