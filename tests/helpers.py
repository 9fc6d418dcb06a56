"""Small builders for hand-computed test instances."""

from __future__ import annotations

import os

import pytest

from placement_core.model.devices import Channel, Device, DeviceGraph
from placement_core.model.graph import Graph, Op
from placement_core.problem import Problem
from placement_core.simulate import SimSettings


def op(name, inputs=(), fwd=1.0, bwd=2.0, out=100.0, params=0.0, kind="other", **kw) -> Op:
    """An op whose times are measured (the same on every cpu device), so schedules are easy to work out."""
    return Op(name=name, kind=kind, inputs=tuple(inputs), output_bytes=out, param_bytes=params,
              times={"cpu": {"fwd": fwd, "bwd": bwd}}, **kw)


def devices(n=2, bandwidth=100.0, latency=0.0, shared=True, memory=1e12) -> DeviceGraph:
    """n cpu devices d0..; one shared channel 'bus' for every route, or one channel per ordered pair."""
    devs = [Device(f"d{i}", "cpu", 1e9, memory, 1e9) for i in range(n)]
    pairs = [(a.name, b.name) for a in devs for b in devs if a.name != b.name]
    if shared:
        chans = [Channel("bus", bandwidth, latency, tuple(pairs))] if pairs else []
    else:
        chans = [Channel(f"{a}-{b}", bandwidth, latency, ((a, b),)) for a, b in pairs]
    return DeviceGraph("test", devs, chans)


def problem(ops, devs, **settings) -> Problem:
    """Efficiencies 1, so a transfer of b bytes takes latency + b / bandwidth exactly."""
    return Problem(Graph("g", ops), devs, settings=SimSettings(**settings), comm_efficiency=1.0,
                   comp_efficiency=1.0)


# Set to 1 to run the suite without the compiled kernel on purpose (a machine without a C compiler): the tests
# that compare the kernel with the reference are then skipped instead of failing (tests/test_kernel_built.py).
ALLOW_NO_KERNEL = "PLACEMENT_ALLOW_NO_KERNEL"


def require_kernel(p: Problem) -> None:
    """Fail unless ``p`` evaluates through the compiled kernel: without it, ``simulate`` falls back to the Python
    reference and a kernel = reference comparison would compare the reference with itself."""
    if p.simulator.fast:
        return
    if os.environ.get(ALLOW_NO_KERNEL) == "1":
        pytest.skip(f"the compiled kernel is not built ({ALLOW_NO_KERNEL}=1)")
    raise AssertionError("this test compares the compiled kernel with the Python reference, but the kernel is not "
                         "built: rebuild it (`.venv/bin/pip install --no-deps --no-build-isolation -e .`), or set "
                         f"{ALLOW_NO_KERNEL}=1 to skip such tests on purpose")


def kernel_and_reference(p: Problem, placement):
    """The compiled kernel's result for ``placement`` and the Python reference's (traced); fails unless the kernel
    really ran."""
    require_kernel(p)
    return p.simulate(placement).result, p.simulate(placement, trace=True).result


def examples(n: int) -> int:
    """``max_examples`` for a property test: ``n`` under the full run, a tenth of it (at least 10) under the
    fast tier's "dev" Hypothesis profile (tests/conftest.py)."""
    import os
    return max(10, n // 10) if os.environ.get("HYPOTHESIS_PROFILE") == "dev" else n


def calibrated_devices_doc() -> dict:
    """A calibrated two-CPU device file (an all-reduce curve, shared cores), as the Devices page tests upload it."""
    return {"format": "placement-devices/1", "name": "local", "devices": [
        {"name": n, "kind": "cpu", "peak_flops": 5e10, "memory_bytes": 8e9, "mem_bandwidth": 1.8e10} for n in
        ("cpu0", "cpu1")], "channels": [{"name": "cpu0-cpu1", "bandwidth": 3.5e9, "latency": 2.3e-4,
                                         "routes": [["cpu0", "cpu1"], ["cpu1", "cpu0"]]}],
        "collectives": [{"devices": ["cpu0", "cpu1"], "op": "allreduce", "sizes": [4096, 33554432],
                         "seconds": [0.0037, 0.0325], "busy_seconds": [0.004, 0.0678]}],
        "shared": [{"name": "cpu-cores", "devices": ["cpu0", "cpu1"], "capacity": 2.0, "collective_demand": 0.92}]}
