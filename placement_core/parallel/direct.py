"""Evaluation on a Dask cluster over direct connections: Dask places and restarts the workers, and each worker's
evaluation loop talks to this process over a socket of its own, in the local pool's frames.

Why: a Dask task costs the scheduler a round of messages and each worker one more (10.7 ms a task measured on 2
shared cores, docs/scaling.md), and even an actor call, which skips the scheduler, cost about 1.5 ms of CPU
between client and worker: more than a quality-capped batch of ResNet-50 placements is worth. A frame on a
socket costs what a pipe does (tenths of a millisecond).

How: this process listens on the interface through which it reaches the scheduler, on a port of its own, with
a key made for the session; a long-running Dask task on every worker (:func:`serve_on_worker`) connects back,
proves it holds the key (HMAC challenge, ``multiprocessing.connection``), says which worker it is, and answers
frames until told to stop. The task ledger (:class:`.pool.TaskLedger`) sends what a lost connection had not
answered to the others. A worker that died is restarted by its nanny; every ``REFRESH_S`` (and at once when a
connection is lost) a loop is started on every worker that has none, so restarted and newly joined workers
take part. A client that loses its scheduler stops the run, as with tasks.
"""

from __future__ import annotations

import os
import queue
import socket
import threading
import time
import uuid
import struct
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

from .pool import TaskLedger, WorkerError, _Worker, serve

REFRESH_S = 5.0  # how often to look for workers without an evaluation loop
HANDSHAKE_S = 5.0  # a connection that has not proved the key and said its name by then is dropped
CONNECT_S = 30.0  # how long the first worker gets to connect back (its thread may be busy with another task)
ALL_S = 5.0  # how long the start waits for every worker before it goes on with those connected


def serve_on_worker(plugin_name: str, address, authkey: bytes) -> str:  # pragma: no cover - on a Dask worker
    """A Dask task: connect back to the driver and evaluate what it sends until it says stop."""
    from distributed import get_worker
    worker = get_worker()
    problem = worker.plugins[plugin_name].problem
    sock = socket.create_connection(tuple(address), timeout=CONNECT_S)
    sock.settimeout(None)  # blocking again: the connection reads and writes its file descriptor directly
    conn = Connection(sock.detach())
    answer_challenge(conn, authkey)  # both ways, as multiprocessing's own Client does
    deliver_challenge(conn, authkey)
    # The worker's profiler samples the stack of every running task every 10 ms; this loop's stack is always the
    # same call into the simulator, and the sampling cost the loop 8 % of its core (measured). Out of the
    # running set while it serves, back in before Dask's own bookkeeping ends the task.
    ident = threading.get_ident()
    with worker.active_threads_lock:
        key = worker.active_threads.pop(ident, None)
    try:
        no_delay(conn)
        conn.send_bytes(worker.address.encode())
        serve(problem, conn, conn)
    finally:
        conn.close()
        if key is not None:
            with worker.active_threads_lock:
                worker.active_threads[ident] = key
    return worker.address


def no_delay(conn, receive_timeout_s: float = 0.0) -> None:
    """Frames go out when written: with Nagle's algorithm a reply's last partial segment waited for the
    receiver's delayed acknowledgement (tens of milliseconds on a batch of 9 ms). ``receive_timeout_s`` > 0
    makes a read that waits longer fail (the handshake); 0 waits for ever (the work)."""
    s = socket.socket(fileno=os.dup(conn.fileno()))  # a second handle on the same socket (family detected)
    try:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        whole = int(receive_timeout_s)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                     struct.pack("ll", whole, int((receive_timeout_s - whole) * 1e6)))
    finally:
        s.close()


def facing_host(scheduler_address: str) -> str | None:
    """The local address through which this process reaches the scheduler (the workers reach it too), or None
    for a scheduler that is not plain TCP (TLS is left to Dask's own encrypted connections)."""
    from distributed.comm.addressing import parse_address, parse_host_port
    protocol, location = parse_address(scheduler_address)
    if protocol != "tcp":
        return None
    host, port = parse_host_port(location)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((host, int(port)))  # UDP: picks the route, sends nothing
        return s.getsockname()[0]


class DirectPool(TaskLedger):
    """An evaluation loop on every worker of ``client``'s cluster for the problem in plugin ``plugin_name``."""

    POLL_S = 1.0  # the scheduler and new connections are checked at least this often while waiting

    def __init__(self, client, plugin_name: str, n_devices: int, host: str, lost):
        super().__init__(n_devices)
        self.client, self.plugin_name, self._lost_error = client, plugin_name, lost
        self._key = os.urandom(32)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, 0), family=family)
        self.address = self._listener.getsockname()[:2]
        self._arrived: queue.Queue = queue.Queue()
        self._closed = False
        self._serving: dict = {}  # worker address -> its loop's Dask future
        self._checked = 0.0
        threading.Thread(target=self._accept_loop, daemon=True, name="placement-accept").start()
        try:
            self._spawn()
            self._await_workers(len(self._serving))
            self.ping_every()
        except BaseException:
            self.close()
            raise

    @property
    def workers(self) -> int:
        return self.size

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return  # the listener was closed
            conn = Connection(sock.detach())
            try:  # a stranger that connects and says nothing is dropped after HANDSHAKE_S, not waited for
                no_delay(conn, receive_timeout_s=HANDSHAKE_S)
                deliver_challenge(conn, self._key)
                answer_challenge(conn, self._key)
                name = conn.recv_bytes(1024).decode("utf-8", "replace")
                no_delay(conn)
            except (AuthenticationError, EOFError, OSError):  # not one of ours, silent, or gone
                conn.close()
                continue
            self._arrived.put((name, conn))

    def _await_workers(self, count: int) -> None:
        """Every worker for a few seconds (a late one joins when it connects), one for ``CONNECT_S``."""
        start = time.monotonic()
        while (self.size < count and time.monotonic() < start + ALL_S) or \
                (not self.size and time.monotonic() < start + CONNECT_S):
            self._take_arrivals(timeout=0.1)
        if not self.size:
            raise OSError(f"no Dask worker connected back to {self.address[0]}:{self.address[1]} within "
                          f"{CONNECT_S:.0f} s")

    def _take_arrivals(self, timeout: float = 0.0) -> None:
        try:
            while True:
                name, conn = self._arrived.get(timeout=timeout)
                timeout = 0.0
                for w in self._workers:  # a loop that reconnects replaces that worker's old connection
                    if w.alive and w.name == name:
                        self._lost(w)
                self._add(_Worker(None, conn, conn, name=name))
        except queue.Empty:
            pass

    def _spawn(self) -> None:
        """An evaluation loop on every worker that has none (restarted and newly joined workers included)."""
        self._checked = time.monotonic()
        workers = set(self.client.scheduler_info().get("workers", {}))
        for w, future in list(self._serving.items()):
            if w not in workers or future.done():
                del self._serving[w]
                future.release()
        for w in workers - set(self._serving):
            self._serving[w] = self.client.submit(serve_on_worker, self.plugin_name, self.address, self._key,
                                                  workers=[w], allow_other_workers=False, pure=False,
                                                  key=f"placement-evaluate-loop-{uuid.uuid4().hex}")

    def _check_scheduler(self) -> None:
        if self.client.status != "running":  # the client lost its scheduler: the run stops, as with tasks
            raise self._lost_error("while evaluations were out")

    def _tick(self) -> None:
        self._take_arrivals()
        self._check_scheduler()
        if time.monotonic() - self._checked > REFRESH_S:
            self._spawn()

    def _replace(self) -> None:
        self._check_scheduler()
        self._spawn()

    def _no_workers(self) -> None:
        deadline = time.monotonic() + CONNECT_S
        while not self.size and time.monotonic() < deadline:
            self._tick()
            self._take_arrivals(timeout=0.5)
        if not self.size:
            raise WorkerError(f"no Dask worker has evaluated for this run for {CONNECT_S:.0f} s (every loop lost "
                              "and none came back)")

    def result(self, task_id: int):
        out = super().result(task_id)
        self._check_scheduler()
        return out

    def close(self) -> None:
        self._closed = True
        self._shutdown_all()
        try:  # wake the accept loop (a connection without the key), then close the port
            socket.create_connection(self.address[:2], timeout=1).close()
        except OSError:
            pass
        try:
            self._listener.close()
        except OSError:
            pass
        for w in self._workers:
            if w.sender is not None:
                w.outbox.put(None)  # a lost worker's sender has had its end already; a second is ignored
                w.sender.join(timeout=2)
            try:
                w.replies.close()
            except OSError:
                pass
        self._workers = []
        for future in self._serving.values():
            try:
                future.release()
            except Exception:  # noqa: BLE001 - a client already disconnected
                pass
        self._serving = {}
