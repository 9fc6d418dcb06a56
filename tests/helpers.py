"""Small builders for hand-computed test instances."""

from __future__ import annotations

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
