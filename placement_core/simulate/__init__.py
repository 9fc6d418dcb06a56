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
                n_ops=c.n_ops, n_dev=c.n_dev, n_ch=c.n_ch, par_ptr=c.par_ptr, par_idx=c.par_idx,
                par_bytes=c.par_bytes, par_grad=c.par_grad, ch_ptr=c.ch_ptr, ch_idx=c.ch_idx, ch_bytes=c.ch_bytes,
                ch_grad=c.ch_grad, fwd=c.fwd, bwd=c.bwd, upd=c.upd, has_update=c.has_update, out_bytes=c.out_bytes,
                static_mem=c.static_mem, route=c.route, ch_latency=c.ch_latency, ch_inv_rate=c.ch_inv_rate,
                min_transfer=c.min_transfer, input_ops=c.input_ops, batches=int(settings.batches),
                in_flight=int(settings.in_flight), forward_only=int(settings.forward_only),
                admission=int(settings.admission), update_per_step=int(settings.update_per_step),
                stage_caps=int(settings.stage_caps), priority=prio, device_cap=cap,
                msg_overhead=np.ascontiguousarray(c.msg_overhead, dtype=float),
                **({} if c.curve_ptr is None else {
                    "curve_ptr": np.ascontiguousarray(c.curve_ptr, dtype=np.int32),
                    "curve_bytes": np.ascontiguousarray(c.curve_bytes, dtype=float),
                    "curve_time": np.ascontiguousarray(c.curve_time, dtype=float)}))
        elif fast:
            warnings.warn("the compiled simulator is not built; using the slow Python reference "
                          "(reinstall with `.venv/bin/pip install -e .` and a C compiler)", RuntimeWarning, stacklevel=2)
        nd, nc = compiled.n_dev, compiled.n_ch
        self._out_len = 2 + 2 * nd + 2 * nc

    @property
    def fast(self) -> bool:
        return self._kernel is not None

    def run(self, placement: np.ndarray, trace: bool = False) -> SimResult:
        if trace or self._kernel is None:
            return reference.simulate(self.compiled, placement, self.settings, trace=trace)
        # A fresh output per call (the kernel allocates its own work space per call too), so threads may
        # share one simulator; the result's arrays are views of it.
        out = np.empty(self._out_len)
        self._kernel.run(placement, out)
        return self._unpack(out)

    def run_many(self, placements: np.ndarray) -> list[SimResult]:
        """Many placements in one call (the kernel releases the GIL for the whole batch)."""
        placements = np.ascontiguousarray(placements, dtype=np.int32)
        if self._kernel is None:
            return [reference.simulate(self.compiled, p, self.settings) for p in placements]
        out = np.empty((len(placements), self._out_len))
        self._kernel.run_many(placements, out)
        return [self._unpack(row) for row in out]

    def _unpack(self, out: np.ndarray) -> SimResult:
        nd, nc = self.compiled.n_dev, self.compiled.n_ch
        return SimResult(makespan=float(out[0]), batches=self.settings.batches // self.settings.micro_batches,
                         busy=out[2:2 + nd], peak_memory=out[2 + nd:2 + 2 * nd],
                         channel_bytes=out[2 + 2 * nd:2 + 2 * nd + nc],
                         channel_busy=out[2 + 2 * nd + nc:], transfers=int(out[1]))
