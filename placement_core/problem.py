"""A Problem = network + devices + cost profile + simulator settings + memory penalty.

Everything that evaluates a placement goes through :meth:`Problem.evaluate`
(or ``evaluate_many``), so optimizers, parallel backends and the run store
all see the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cost import get_profile
from .devices import DeviceGraph
from .errors import InputError
from .graph import Graph
from .placement import check_placement
from .simulate import SimResult, SimSettings, Simulator, compile_problem

PENALTIES = ("thesis", "placeto", "infeasible")
# Thesis §3.2.2: the overflow in MB is added to the time in ms, i.e. 1 ms per MB.
THESIS_S_PER_BYTE = 1e-3 / 1e6
# Placeto App. A.7: r + c (m - M), m and M in GB, c = 2.
PLACETO_S_PER_BYTE = 2.0 / 1e9
# "infeasible": any overflowing placement loses to every fitting one.
INFEASIBLE_OFFSET_S = 1e6


@dataclass(frozen=True)
class Evaluation:
    """A simulated result plus the objective an optimizer minimises."""

    objective: float
    result: SimResult
    overflow: np.ndarray  # [devices] bytes over capacity

    @property
    def feasible(self) -> bool:
        return not bool(self.overflow.any())


class Problem:
    def __init__(self, graph: Graph, devices: DeviceGraph, *, profile: str | object = "default",
                 settings: SimSettings | None = None, penalty: str = "thesis",
                 comp_efficiency: float | None = None, comm_efficiency: float | None = None,
                 timings=None, timings_batch: int | None = None, fast: bool = True):
        if penalty not in PENALTIES:
            raise InputError(f"unknown memory penalty {penalty!r}", field="penalty",
                             fix="Use one of: " + ", ".join(PENALTIES))
        self.graph = graph
        self.devices = devices
        if isinstance(profile, str):
            profile = get_profile(profile, comp_efficiency=comp_efficiency, comm_efficiency=comm_efficiency,
                                  timings=timings, timings_batch=timings_batch)
        self.profile = profile
        self.settings = (settings or SimSettings()).validate()
        self.penalty = penalty
        self.costs = profile.arrays(graph, devices)
        self.compiled = compile_problem(graph, devices, self.costs)
        self.simulator = Simulator(self.compiled, self.settings, fast=fast)
        self.capacity = np.array([d.memory_bytes for d in devices.devices], dtype=float)

    # Pickled as its inputs and rebuilt on arrival: worker processes and Dask workers get the
    # network once and compile their own kernel (the C object itself cannot be pickled).
    def __getstate__(self) -> dict:
        return {"graph": self.graph, "devices": self.devices, "profile": self.profile, "settings": self.settings,
                "penalty": self.penalty}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["graph"], state["devices"], profile=state["profile"], settings=state["settings"],
                      penalty=state["penalty"])

    def __repr__(self) -> str:
        return (f"Problem({self.graph.name!r} on {self.devices.name!r}, profile={self.profile.name!r}, "
                f"batches={self.settings.batches}, penalty={self.penalty!r})")

    @property
    def n_ops(self) -> int:
        return len(self.graph)

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    def with_settings(self, settings: SimSettings) -> "Problem":
        return Problem(self.graph, self.devices, profile=self.profile, settings=settings, penalty=self.penalty)

    def objective(self, result: SimResult) -> float:
        overflow = np.maximum(result.peak_memory - self.capacity, 0.0)
        t = result.batch_time
        if not overflow.any():
            return t
        if self.penalty == "thesis":
            return t + float(overflow.sum()) * THESIS_S_PER_BYTE
        if self.penalty == "placeto":
            return t + float(overflow.max()) * PLACETO_S_PER_BYTE
        return INFEASIBLE_OFFSET_S + t + float(overflow.sum()) / 1e9

    def evaluate(self, placement) -> float:
        """Objective of one placement (seconds per batch plus memory penalty)."""
        return self.objective(self.simulator.run(check_placement(placement, self.graph, self.devices)))

    def evaluate_many(self, placements) -> np.ndarray:
        arr = np.ascontiguousarray(placements, dtype=np.int32)
        if arr.ndim != 2 or arr.shape[1] != self.n_ops:
            raise InputError(f"expected placements of shape (k, {self.n_ops}), got {arr.shape}", field="placement")
        if arr.size and (arr.min() < 0 or arr.max() >= self.n_devices):
            raise InputError("a placement uses a device index out of range", field="placement",
                             fix=f"Use indices 0..{self.n_devices - 1}")
        return np.array([self.objective(r) for r in self.simulator.run_many(arr)])

    def simulate(self, placement, trace: bool = False) -> Evaluation:
        placement = check_placement(placement, self.graph, self.devices)
        result = self.simulator.run(placement, trace=trace)
        overflow = np.maximum(result.peak_memory - self.capacity, 0.0)
        return Evaluation(self.objective(result), result, overflow)
