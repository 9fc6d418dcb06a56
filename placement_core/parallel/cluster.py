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

from ..base.errors import InputError
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
    problem = get_worker().plugins[plugin_name].problem
    return problem.evaluate_many(wire.expand(packed)) if len(packed) else np.zeros(0)


def vary_on_worker(plugin_name: str, recipe) -> tuple:
    """A task that makes a batch's children here and evaluates them: (children, objectives, rates)."""
    from distributed import get_worker
    problem = get_worker().plugins[plugin_name].problem
    kids, out, rates = recipe.make_and_evaluate(problem)  # the work travels with the task (optimize.variation)
    return wire.compact(kids, problem.n_genes), out, rates


def connect(address):
    """(client, owned): a ``distributed.Client`` for an address, or the caller's own client as it is."""
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
    try:
        return Client(address, timeout="10s"), True
    except (OSError, TimeoutError) as e:
        raise InputError(f"cannot reach the Dask scheduler at {address!r}: {e}", field="dask",
                         fix="Start one with `dask scheduler` and workers with `dask worker ADDRESS`") from None


class ClusterSession:
    """One problem installed on a cluster: submit chunks, get objectives; ``close`` removes the problem."""

    def __init__(self, problem, address):
        self.client, self._owned = connect(address)
        self.n_devices = problem.n_genes  # gene values: devices, then splits (one byte each while <= 256)
        self.plugin_name = f"placement-problem-{uuid.uuid4().hex}"
        try:
            self.client.register_plugin(ProblemPlugin(self.plugin_name, problem), name=self.plugin_name)
        except Exception:
            self.close()
            raise
        self.workers = max(1, len(self.client.scheduler_info().get("workers", {})))

    def submit(self, placements: np.ndarray):
        packed = wire.compact(placements, self.n_devices)
        return self.client.submit(evaluate_on_worker, self.plugin_name, packed, pure=False)

    def submit_recipe(self, recipe):
        from dataclasses import replace
        small = replace(recipe, a=wire.compact(recipe.a, self.n_devices),
                        b=None if recipe.b is None else wire.compact(recipe.b, self.n_devices))
        return self.client.submit(vary_on_worker, self.plugin_name, small, pure=False)

    def result(self, future) -> np.ndarray:
        return np.asarray(future.result(), dtype=np.float64)

    def made(self, future) -> tuple:
        kids, out, rates = future.result()
        return wire.expand(kids), np.asarray(out, dtype=np.float64), rates

    def ping(self) -> None:
        self.client.submit(evaluate_on_worker, self.plugin_name, np.zeros((0, 1), dtype=np.uint8),
                           pure=False).result()

    def close(self) -> None:
        try:
            if getattr(self, "plugin_name", None) and self.client.status == "running":
                self.client.unregister_worker_plugin(self.plugin_name)
        except Exception:  # a cluster that went away while we ran: nothing left to remove
            pass
        finally:
            if self._owned:
                self.client.close()
