"""Evaluation on a Dask cluster: the problem installed once per worker, compact chunks as tasks.

The problem reaches the workers as a worker plugin under a name unique to this evaluator:
every worker compiles it once when the plugin is registered, and a worker that joins or is
restarted later (its nanny brings it back after a crash) gets it too, so a task never depends
on data held by one worker. A task carries only its placements (one byte per op and
placement) and returns the objectives. Tasks are plain functions of their inputs, so when a
worker dies the scheduler runs its tasks again elsewhere and each result arrives exactly once.

Earlier versions scattered the problem with a content hash as its key: two consecutive runs on
one client scattered the same key, and the second could see it released by the first
("lost dependencies"). A fresh plugin name per evaluator rules that out.
"""

from __future__ import annotations

import uuid

import numpy as np

from ..base.errors import InputError, shown
from . import wire
from .heap import restore_malloc_thresholds

DASK_FLOOR_S = 0.05  # least work per Dask task: its scheduler spends about a millisecond on each


try:  # Dask is an extra: without it this module still imports, and connect() says what to install
    from distributed.diagnostics.plugin import WorkerPlugin as _PluginBase
except ImportError:  # pragma: no cover - the test environment has the extra
    _PluginBase = object


class ProblemPlugin(_PluginBase):
    """Holds a compiled problem on a Dask worker; registered once per evaluator, under a fresh name."""

    def __init__(self, name: str, problem):
        self.name = name
        self.problem = problem  # pickled as its inputs; every worker compiles its own kernel

    def setup(self, worker=None) -> None:
        restore_malloc_thresholds()  # the nanny's trim setting made every evaluation 19 % slower

    def teardown(self, worker=None) -> None:
        pass


def evaluate_on_worker(plugin_name: str, packed: np.ndarray) -> np.ndarray:
    """A task: the placements' objectives under the problem this worker holds."""
    from distributed import get_worker
    return wire.evaluate_packed(get_worker().plugins[plugin_name].problem, packed)


def vary_on_worker(plugin_name: str, recipe) -> tuple:
    """A task that makes a batch's children on this worker and evaluates them."""
    from distributed import get_worker
    return wire.make_packed(get_worker().plugins[plugin_name].problem, recipe)


START_IT = "Start one with `dask scheduler` and workers with `dask worker ADDRESS`"


class ClusterLost(InputError):
    """The scheduler went away while work was out (killed, its host gone): what was out is lost, a stored
    run can be resumed from its last checkpoint."""


def check_address(address: str) -> str:
    """A scheduler address Dask can parse (``tcp://HOST:PORT``, ``HOST:PORT``, ``tls://...``), or an InputError."""
    from distributed.comm.addressing import parse_address, parse_host_port
    try:
        protocol, location = parse_address(address)
        if protocol in ("tcp", "tls"):
            host, port = parse_host_port(location)
            if not host or not 0 < int(port) < 65536:
                raise ValueError("a host and a port from 1 to 65535")
            if not all(c.isascii() and (c.isalnum() or c in ".-_:[]%") for c in host):
                raise ValueError("the host is not a host name or an IP address")
    except (ValueError, TypeError) as e:
        raise InputError(f"{shown(address, 200)!r} is not a Dask scheduler address ({e})", field="dask",
                         fix="Give tcp://HOST:PORT, e.g. tcp://127.0.0.1:8786 (`dask scheduler` prints it)") from None
    return address


def connect(address):
    """(client, owned): a ``distributed.Client`` for an address, or the caller's own client as it is.

    Whatever stands at the address, the answer is a client or an InputError: a server that is not a Dask
    scheduler (a web server, say) sends bytes Dask reads as a frame length (3 EiB); that is reported as
    what it is, not as a MemoryError."""
    try:
        from distributed import Client
    except ImportError:
        raise InputError("Dask is not installed", field="dask",
                         fix='Install it with .venv/bin/pip install -e ".[dask]"') from None
    if hasattr(address, "submit") and hasattr(address, "scheduler_info"):
        return address, False
    if not isinstance(address, str) or not address.strip():
        raise InputError(f"expected a Dask scheduler address (tcp://HOST:8786) or a Client, got {address!r}",
                         field="dask")
    check_address(address)
    quiet_dask_logs()
    try:
        return Client(address, timeout="10s"), True
    except (OSError, TimeoutError) as e:
        raise InputError(f"cannot reach the Dask scheduler at {shown(address, 200)!r}: {shown(e, 300)}", field="dask",
                         fix=START_IT) from None
    except Exception as e:  # noqa: BLE001 - garbage from a server that does not speak Dask's protocol
        raise InputError(f"something answers at {shown(address, 200)!r}, but not a Dask scheduler ("
                         f"{type(e).__name__}: {shown(e, 200)})", field="dask",
                         fix="Check the address and port; " + START_IT) from None


def quiet_dask_logs() -> None:
    """Dask logs a lost scheduler as tracebacks on stderr; this process reports it in one line instead."""
    import logging
    for name in ("distributed.client", "distributed.comm", "distributed.core", "distributed.batched"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def _lost_types() -> tuple:
    """What Dask raises once the scheduler is gone: futures cancelled, the comm closed, or (after the client
    gave up reconnecting) the client closed."""
    from concurrent.futures import CancelledError

    import distributed.client as client
    from distributed.comm.core import CommClosedError
    extra = tuple(getattr(client, name) for name in ("FutureCancelledError", "ClosedClientError")
                  if hasattr(client, name))
    return (CommClosedError, CancelledError, *extra)


TRANSPORTS = ("auto", "direct", "actors", "tasks")


class ClusterSession:
    """One problem installed on a cluster: submit chunks, get objectives; ``close`` removes the problem.

    How work reaches the workers (``via``), fastest first: ``direct``, an evaluation loop on every worker
    connected back to this process (:mod:`.direct`; plain TCP schedulers); ``actors``, an actor per worker
    called directly (:mod:`.actors`); ``tasks``, through the scheduler. ``transport="auto"`` takes the first
    that works here (workers that cannot connect back, or that this process cannot reach, fall to the next)."""

    def __init__(self, problem, address, transport: str = "auto"):
        if transport not in TRANSPORTS:
            raise InputError(f"unknown Dask transport {transport!r}", field="transport",
                             fix="Use one of " + ", ".join(TRANSPORTS))
        self.client, self._owned = connect(address)
        self.address = address if isinstance(address, str) else getattr(self.client.scheduler, "address", "?")
        self.n_devices = problem.n_genes  # gene values: devices, then splits (one byte each while <= 256)
        self.plugin_name = f"placement-problem-{uuid.uuid4().hex}"
        self.fast = None  # a DirectPool or an ActorPool (the same submit / submit_recipe / result), or tasks
        self.via = "tasks"
        try:
            self.client.register_plugin(ProblemPlugin(self.plugin_name, problem), name=self.plugin_name)
            self.workers = max(1, len(self.client.scheduler_info().get("workers", {})))
            if transport in ("auto", "direct"):
                self._start_direct(required=transport == "direct")
            if self.fast is None and transport in ("auto", "actors"):
                self._start_actors()
        except (*_lost_types(), OSError):
            self.close()
            raise ClusterLost(f"lost the Dask scheduler at {shown(self.address, 200)!r} while installing the "
                              "problem on its workers", field="dask", fix=START_IT) from None
        except BaseException:
            self.close()
            raise

    def _start_direct(self, required: bool) -> None:
        from .direct import DirectPool, facing_host
        scheduler = getattr(self.client.scheduler, "address", None) or ""
        host = facing_host(scheduler) if scheduler else None
        if host is None:
            if required:
                raise InputError(f"direct connections need a plain TCP scheduler, not {shown(scheduler, 200)!r}",
                                 field="transport", fix="Use transport actors or tasks")
            return
        try:
            pool = DirectPool(self.client, self.plugin_name, self.n_devices, host, self._lost)
        except OSError as e:  # the workers cannot connect back to this process: the next transport
            if self.client.status != "running":
                raise
            if required:
                raise InputError(f"the Dask workers could not connect back to this process ({shown(e, 200)})",
                                 field="transport", fix=f"Let the workers reach {host} on any port (a firewall), or "
                                                        "use transport actors or tasks") from None
            return
        self.fast, self.via, self.workers = pool, "direct", pool.workers

    def _start_actors(self) -> None:
        from .actors import ActorPool
        try:
            pool = ActorPool(self.client, self.plugin_name, self.n_devices, self._lost)
        except (OSError, TimeoutError):  # workers this process cannot reach directly: tasks go via the scheduler
            if self.client.status != "running":
                raise
            return
        if pool.workers:
            self.fast, self.via, self.workers = pool, "actors", pool.workers
        else:
            pool.close()

    @property
    def direct(self):
        return self.fast if self.via == "direct" else None

    @property
    def actors(self):
        return self.fast if self.via == "actors" else None

    def submit(self, placements: np.ndarray):
        if self.fast is not None:
            return self.fast.submit(placements)
        return self._submit(evaluate_on_worker, self.plugin_name, wire.compact(placements, self.n_devices))

    def submit_recipe(self, recipe):
        if self.fast is not None:
            return self.fast.submit_recipe(recipe)
        return self._submit(vary_on_worker, self.plugin_name, wire.compact_recipe(recipe, self.n_devices))

    def _submit(self, *task):
        try:
            return self.client.submit(*task, pure=False)
        except _lost_types():
            raise self._lost("while sending work") from None

    def _lost(self, when: str) -> "ClusterLost":
        return ClusterLost(f"lost the Dask scheduler at {shown(self.address, 200)!r} {when}", field="dask",
                           fix=START_IT)

    def _wait(self, future):
        """The future's result; a lost scheduler (futures cancelled, or a client that gave up reconnecting
        while a future was out) is a :class:`ClusterLost`, never a hang or a traceback."""
        if self.fast is not None:
            return self.fast.result(future)
        lost = _lost_types()
        while True:
            try:
                return future.result(timeout=1.0)
            except TimeoutError:
                if self.client.status in ("closing", "closed", "failed"):
                    break
            except lost:
                break
        raise self._lost("while evaluations were out")

    def result(self, future) -> np.ndarray:
        return np.asarray(self._wait(future), dtype=np.float64)

    def made(self, future) -> tuple:
        kids, out, rates = self._wait(future)
        return wire.expand(kids), np.asarray(out, dtype=np.float64), rates

    def ping(self) -> None:
        self._wait(self.submit(np.zeros((0, 1), dtype=np.int32)))

    def close(self) -> None:
        if getattr(self, "fast", None) is not None:
            self.fast.close()
            self.fast = None
        try:
            if getattr(self, "plugin_name", None) and self.client.status == "running":
                self.client.unregister_worker_plugin(self.plugin_name)
        except Exception:  # a cluster that went away while we ran: nothing left to remove
            pass
        finally:
            if self._owned:
                self.client.close()
