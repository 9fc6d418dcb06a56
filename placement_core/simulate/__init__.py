"""Event simulation of one training step: a compiled kernel for search, Python for traces."""

from __future__ import annotations

import warnings

import numpy as np

from . import reference
from .model import (ADMIT_EAGER, ADMIT_THESIS, BWD, FWD, SCHED_INTERLEAVED, SCHED_STATIC, SCHED_ZB, UPD, WGT,
                    Compiled, SimResult, SimSettings, TraceEvent, compile_problem)

try:  # built by pip from _kernel.c; the pure-Python reference is the fallback
    from . import _kernel  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - exercised only on installs without a C compiler
    _kernel = None

__all__ = ["ADMIT_EAGER", "ADMIT_THESIS", "BWD", "FWD", "UPD", "WGT", "Compiled", "SimResult", "SimSettings",
           "TraceEvent", "compile_problem", "Simulator", "kernel_available"]


def kernel_available() -> bool:
    return _kernel is not None


def _split_table(shards) -> dict:
    """The kernel's split-table arguments (shards.ShardArrays), none without a table."""
    if shards is None or shards.T == 0:
        return {}
    i32 = lambda a: np.ascontiguousarray(a, dtype=np.int32)  # noqa: E731
    f64 = lambda a: np.ascontiguousarray(a, dtype=float)  # noqa: E731
    return {"n_splits": int(shards.T), "split_dim": i32(shards.opt_dim), "split_ptr": i32(shards.opt_ptr),
            "split_dev": i32(shards.opt_dev), "split_entry": i32(shards.entry), "shard_blo": f64(shards.blo),
            "shard_bhi": f64(shards.bhi), "shard_cf": f64(shards.cf), "shard_fwd": f64(shards.fwd),
            "shard_bwd": f64(shards.bwd), "shard_upd": f64(shards.upd), "shard_static": f64(shards.static),
            "allreduce_bytes": f64(shards.ar_bytes), "gather_rate": f64(shards.gather_rate),
            **({} if shards.ar_alone is None else {"allreduce_alone": f64(shards.ar_alone),
                                                    "allreduce_busy": f64(shards.ar_busy)})}


class Simulator:
    """Runs placements against one compiled problem; ``fast`` picks the C kernel when built."""

    def __init__(self, compiled: Compiled, settings: SimSettings, fast: bool = True, shards=None):
        self.compiled = compiled
        self.settings = settings.validate()
        self.shards = shards  # shards.ShardArrays: genes >= n_dev are splits
        self._kernel = None
        if fast and _kernel is not None:
            c = compiled
            prio = None if settings.priority is None else np.ascontiguousarray(settings.priority, dtype=float).ravel()
            if prio is not None and prio.size != settings.units * settings.phases * c.n_ops:
                raise ValueError("priority must have units * phases * ops entries")
            cap = None if settings.device_cap is None else np.ascontiguousarray(settings.device_cap, dtype=np.int32)
            self._kernel = _kernel.Kernel(
                n_ops=c.n_ops, n_dev=c.n_dev, n_ch=c.n_ch, par_ptr=c.par_ptr, par_idx=c.par_idx,
                par_bytes=c.par_bytes, par_grad=c.par_grad, ch_ptr=c.ch_ptr, ch_idx=c.ch_idx, ch_bytes=c.ch_bytes,
                ch_grad=c.ch_grad, fwd=c.fwd, bwd=c.bwd, upd=c.upd, has_update=c.has_update, out_bytes=c.out_bytes,
                static_mem=c.static_mem, route=c.route, ch_latency=c.ch_latency, ch_inv_rate=c.ch_inv_rate,
                min_transfer=c.min_transfer, input_ops=c.input_ops, units=int(settings.units),
                units_in_flight=int(settings.units_in_flight), forward_only=int(settings.forward_only),
                admission=int(settings.admission), update_per_step=int(settings.update_per_step),
                stage_caps=int(settings.stage_caps), priority=prio, device_cap=cap,
                msg_overhead=np.ascontiguousarray(c.msg_overhead, dtype=float),
                bwd_w=np.ascontiguousarray(c.bwd_w, dtype=float), has_w=np.ascontiguousarray(c.has_w, dtype=np.uint8),
                schedule_kind=int(settings.kind), virtual_stages=int(settings.virtual_stages),
                **_split_table(shards), **c.shared_arrays(),
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

    def sharded(self, placement: np.ndarray) -> bool:
        return self.shards is not None and bool(len(placement)) and int(np.max(placement)) >= self.compiled.n_dev

    def _check_schedule(self, placement: np.ndarray) -> None:
        """Split ops run under the static schedules (thesis, gpipe, 1f1b): interleaved 1F1B's chunks and
        ZB-H1's W gates follow one device per stage, which a split op does not have."""
        if self.settings.kind == SCHED_STATIC:
            return
        from ..base.errors import InputError
        op = self.compiled.op_names[int(np.flatnonzero(np.asarray(placement) >= self.compiled.n_dev)[0])]
        name = {SCHED_INTERLEAVED: "interleaved-1f1b", SCHED_ZB: "zb-h1"}[self.settings.kind]
        raise InputError(f"op {op!r} is split over several devices, which the {name} schedule cannot run "
                         "(its stages are whole devices)", field="--schedule",
                         fix="use --schedule thesis, gpipe or 1f1b with split ops, or keep every op whole")

    def _run_sharded(self, placement: np.ndarray, trace: bool) -> SimResult:
        from .shards import expand, expanded_settings, label_shards
        self._check_schedule(placement)
        if not trace and self._kernel is not None:
            out = np.empty(self._out_len)
            self._kernel.run(placement, out)
            return self._unpack(out)
        ex = expand(self.compiled, self.shards, placement, training=not self.settings.forward_only)
        result = reference.simulate(ex.compiled, np.array(ex.place, dtype=np.int32),
                                    expanded_settings(self.settings, ex), trace=trace, rings=ex.rings)
        if result.trace is not None:
            result.trace = label_shards(result.trace, self.compiled, self.shards, placement)
        return result

    def run(self, placement: np.ndarray, trace: bool = False) -> SimResult:
        if self.sharded(placement):
            return self._run_sharded(placement, trace)
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
        if self.shards is not None and (self._kernel is None or self.settings.kind != SCHED_STATIC):
            return [self.run(p) for p in placements]
        if self._kernel is None:
            return [reference.simulate(self.compiled, p, self.settings) for p in placements]
        out = np.empty((len(placements), self._out_len))
        self._kernel.run_many(placements, out)
        return [self._unpack(row) for row in out]

    def _unpack(self, out: np.ndarray) -> SimResult:
        nd, nc = self.compiled.n_dev, self.compiled.n_ch
        return SimResult(makespan=float(out[0]), batches=self.settings.batches,
                         busy=out[2:2 + nd], peak_memory=out[2 + nd:2 + 2 * nd],
                         channel_bytes=out[2 + 2 * nd:2 + 2 * nd + nc],
                         channel_busy=out[2 + 2 * nd + nc:], transfers=int(out[1]))
