"""Placements of a stored run's problem measured for real: the truth a measured search spends its budget on.

One call benchmarks a batch of placements with one set of workers (:func:`.benchmark.benchmark`, the
benchmark protocol of ``placement benchmark``), each device of the run's device graph played by a local
device (``mapping``). A placement that fails (out of memory, timeout, error) measures ``inf``: a search
never picks it, and its reason is kept with the measurement.
"""

from __future__ import annotations

import numpy as np

from .benchmark import BenchmarkSettings, benchmark


class Measurer:
    """``measurer(placements, labels)`` -> median step seconds; ``results[key]`` the full result of each."""

    def __init__(self, source: str, input_shape, devices, problem, mapping: dict[str, str], *, batch_size: int,
                 settings: BenchmarkSettings, runner: str = "ranks", groups: dict | None = None,
                 progress=None):
        self.source, self.shape, self.devices, self.problem = source, input_shape, devices, problem
        self.mapping, self.batch, self.settings, self.runner = dict(mapping), int(batch_size), settings, runner
        self.groups, self.progress = groups, progress
        self.results: dict[bytes, dict] = {}
        self.calls = 0

    def assignment(self, x) -> dict[str, str]:
        """The placement as op -> local device, over the model's own ops."""
        from ..model.coarsen import expand_assignment

        names = self.problem.devices.names
        a = {op.name: self.mapping[names[int(i)]] for op, i in zip(self.problem.graph.ops, x)}
        return expand_assignment(a, self.groups) if self.groups is not None else a

    def __call__(self, placements, labels) -> np.ndarray:
        xs = np.ascontiguousarray(np.atleast_2d(placements), dtype=np.int32)
        self.calls += 1
        results = benchmark(self.source, self.shape, [self.assignment(x) for x in xs], self.devices,
                            runner=self.runner, batch_size=self.batch, settings=self.settings,
                            name=self.problem.graph.name, progress=self.progress)
        out = []
        for x, r in zip(xs, results):
            self.results[x.tobytes()] = r.to_dict()
            out.append(r.median_step_s if r.ok and r.median_step_s is not None else float("inf"))
        return np.array(out, dtype=float)


def measurer_from_params(params: dict, problem, progress=None) -> Measurer:
    """The measurer a measured run's stored ``params`` describe (model, input, batch, local devices, mapping,
    benchmark settings), checked against this machine's devices."""
    from .devspec import check_available, parse_devices

    devs = parse_devices(params["devices"])
    check_available(devs)
    settings = BenchmarkSettings(steps=int(params["steps"]), warmup=int(params["warmup"]),
                                 rounds=int(params["rounds"]), timeout=float(params["timeout"]),
                                 seed=int(params.get("benchmark_seed", 0)))
    return Measurer(params["model"], params["input_shape"], devs, problem, params["mapping"],
                    batch_size=int(params["batch_size"]), settings=settings, runner=params.get("runner", "ranks"),
                    progress=progress)
