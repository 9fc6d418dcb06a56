"""How big a task should be: measured, not guessed.

A backend pays a fixed cost per task (a pipe round trip: tens of microseconds; a Dask task:
milliseconds) and the simulator a variable one per placement (tens of microseconds for
ResNet-50, milliseconds for a 10,000-op graph). A task is worth shipping when its work is at
least ``OVERHEAD_RATIO`` times what a task costs beyond its work (the backend's round trip and the
driver's own handling of a batch: overhead at most 5 %), and never less
than the backend's floor (50 ms for Dask, whose scheduler also spends time on every task; 5 ms for
the local pool, where the driver's own cost per batch is what is left to amortize).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

OVERHEAD_RATIO = 20.0
# The driver's own cost per batch whatever its size (choosing the parents, sending the recipe, merging the
# children into the population or archive, the run's bookkeeping): a fixed part and a part that grows with the
# genome. Fitted from the driver's CPU at two batch sizes on 2 worker processes (2026-11-29, ga-steady and
# map-elites-async): 0.33 ms a batch on ResNet-50's 176 ops, 0.36-0.62 ms on a 10,000-op graph. (The constant
# before, 1.1e-7 s per op and nothing fixed, came from batches of one, so it counted the per-placement cost as a
# batch's and made ResNet-50's batch cost 20 us: tasks of 119-168 placements, where 300 gave 1.76x, not 1.46x.)
DRIVER_S_PER_BATCH = 3.3e-4
DRIVER_S_PER_OP = 3e-8
GROUP_BELOW_S = 1e-3  # placements faster than this are timed in groups (probe_eval_seconds)
PROBE_GROUP = 16


def driver_batch_cost(n_ops: int) -> float:
    """Seconds of the driver's own work per batch on a genome of ``n_ops`` ops."""
    return DRIVER_S_PER_BATCH + DRIVER_S_PER_OP * n_ops


@dataclass(frozen=True)
class Pacing:
    """Measured costs of one backend on one problem."""

    workers: int
    eval_s: float  # seconds of simulation per placement (median of a probe)
    task_overhead_s: float  # seconds a task costs beyond its work (round trip, framing)
    floor_s: float = 0.0  # least work per task whatever the overhead
    batch_cost_s: float = 0.0  # the driver's cost per batch (driver_batch_cost)

    @property
    def task_s(self) -> float:
        """Seconds of work a task should carry."""
        return max(self.floor_s, OVERHEAD_RATIO * (self.task_overhead_s + self.batch_cost_s))

    def task_size(self) -> int:
        """Placements per task."""
        return max(1, math.ceil(self.task_s / max(self.eval_s, 1e-9)))

    def parts(self, k: int) -> int:
        """Into how many tasks a batch of k placements that the caller waits for is split.

        Here latency counts, not efficiency: p tasks take about work / p + overhead, so the batch
        is split over as many workers as have more than twice the overhead of work each. 0 means
        splitting cannot beat evaluating it where it is (fewer than two parts would be worth it)."""
        if self.workers <= 1:
            return 0
        work = k * self.eval_s
        p = min(self.workers, k, int(work / max(2.0 * self.task_overhead_s, 1e-12)))
        return p if p >= 2 else 0

    def to_dict(self) -> dict:
        return {"workers": self.workers, "eval_s": self.eval_s, "task_overhead_s": self.task_overhead_s,
                "batch_cost_s": self.batch_cost_s, "task_s": self.task_s, "task_size": self.task_size()}


def probe_eval_seconds(problem, budget_s: float = 0.005, most: int = 64, seed: int = 0, least: int = 5,
                       group: int = 1) -> float:
    """Seconds per evaluation: random placements timed until ``budget_s`` is spent (at least ``least``
    samples, at most ``most``); the median, so a scheduling hiccup does not count (with three samples of a
    4 ms evaluation, two slowed by a neighbour's start halved a task's size).

    ``group`` > 1 times calls of that many placements, as a task makes them, when one placement takes under
    a millisecond: a single call's own cost (entering the simulator, checking the placement) made ResNet-50's
    30 us placement look 40 us, and its tasks a quarter too small."""
    rng = np.random.default_rng([seed, 0x9ACE])
    times = []
    start = time.perf_counter()
    size = 1
    while len(times) < most and (len(times) < least or time.perf_counter() - start < budget_s):
        x = rng.integers(0, problem.n_devices, (size, problem.n_ops), dtype=np.int32)
        t = time.perf_counter()
        problem.evaluate_many(x)
        times.append((time.perf_counter() - t) / size)
        if size < group and len(times) == 1 and times[0] < GROUP_BELOW_S:
            size, times = group, []  # the single call was a warm-up
    return float(np.median(times))


def median_round_trip(ping, count: int = 7) -> float:
    """Median seconds of ``ping()`` (an empty task through the backend) after one warm-up call."""
    ping()
    times = []
    for _ in range(count):
        t = time.perf_counter()
        ping()
        times.append(time.perf_counter() - t)
    return float(np.median(times))
