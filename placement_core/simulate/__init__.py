"""Event simulation of one training step: a compiled kernel for search, Python for traces."""

from __future__ import annotations

import warnings

import numpy as np

from . import reference
from .model import (ADMIT_EAGER, ADMIT_THESIS, BWD, FWD, UPD, Compiled, SimResult, SimSettings, TraceEvent,
                    compile_problem)

try:  # built by pip from _kernel.c; the pure-Python reference is the fallback
    from . import _kernel  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - exercised only on installs without a C compiler
    _kernel = None

__all__ = ["ADMIT_EAGER", "ADMIT_THESIS", "BWD", "FWD", "UPD", "Compiled", "SimResult", "SimSettings",
           "TraceEvent", "compile_problem", "Simulator", "kernel_available"]


def kernel_available() -> bool:
    return _kernel is not None


class Simulator:
    """Runs placements against one compiled problem; ``fast`` picks the C kernel when built."""

    def __init__(self, compiled: Compiled, settings: SimSettings, fast: bool = True):
        self.compiled = compiled
        self.settings = settings.validate()
        self._kernel = None
        if fast and _kernel is not None:
            c = compiled
            prio = None if settings.priority is None else np.ascontiguousarray(settings.priority, dtype=float).ravel()
            if prio is not None and prio.size != settings.batches * 3 * c.n_ops:
                raise ValueError("priority must have batches * 3 * ops entries")
            cap = None if settings.device_cap is None else np.ascontiguousarray(settings.device_cap, dtype=np.int32)
            self._kernel = _kernel.Kernel(
                c.n_ops, c.n_dev, c.n_ch, c.par_ptr, c.par_idx, c.par_bytes, c.par_grad, c.ch_ptr, c.ch_idx,
                c.ch_bytes, c.ch_grad, c.fwd, c.bwd, c.upd, c.has_update, c.out_bytes, c.static_mem, c.route,
                c.ch_latency, c.ch_inv_rate, c.min_transfer, c.input_ops,
                int(settings.batches), int(settings.in_flight), int(settings.forward_only),
                int(settings.admission), int(settings.update_per_step), int(settings.stage_caps), prio, cap,
                np.ascontiguousarray(c.msg_overhead, dtype=float))
        elif fast:
            warnings.warn("the compiled simulator is not built; using the slow Python reference "
                          "(reinstall with `.venv/bin/pip install -e .` and a C compiler)", RuntimeWarning, stacklevel=2)
        nd, nc = compiled.n_dev, compiled.n_ch
        self._out_len = 2 + 2 * nd + 2 * nc
        self._out = np.zeros(self._out_len)

    @property
    def fast(self) -> bool:
        return self._kernel is not None

    def run(self, placement: np.ndarray, trace: bool = False) -> SimResult:
        if trace or self._kernel is None:
            return reference.simulate(self.compiled, placement, self.settings, trace=trace)
        out = self._out
        self._kernel.run(placement, out)
        return self._unpack(out)

    def run_many(self, placements: np.ndarray) -> list[SimResult]:
        """Many placements in one call (the kernel releases the GIL for the whole batch)."""
        placements = np.ascontiguousarray(placements, dtype=np.int32)
        if self._kernel is None:
            return [reference.simulate(self.compiled, p, self.settings) for p in placements]
        out = np.zeros((len(placements), self._out_len))
        self._kernel.run_many(placements, out)
        return [self._unpack(row) for row in out]

    def _unpack(self, out: np.ndarray) -> SimResult:
        nd, nc = self.compiled.n_dev, self.compiled.n_ch
        return SimResult(makespan=float(out[0]), batches=self.settings.batches // self.settings.micro_batches,
                         busy=out[2:2 + nd].copy(), peak_memory=out[2 + nd:2 + 2 * nd].copy(),
                         channel_bytes=out[2 + 2 * nd:2 + 2 * nd + nc].copy(),
                         channel_busy=out[2 + 2 * nd + nc:].copy(), transfers=int(out[1]))
