"""Chrome-trace flow events (Perfetto's arrows): one flow per cross-device edge and batch, from the
producer's forward slice through its transfer to the consumer's forward slice."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
from helpers import devices, op, problem

from placement_core.simulate.chrome import chrome_trace

# a -> b, a -> c, b -> d, c -> d; a and c on d0, b and d on d1: a -> b and c -> d cross, the others do not
OPS = [op("a", out=100), op("b", ["a"], out=100), op("c", ["a"], out=100), op("d", ["b", "c"], out=100)]
PLACEMENT = np.array([0, 1, 0, 1], dtype=np.int32)


def export(batches=2):
    p = problem(OPS, devices(2, bandwidth=100.0), units=batches, units_in_flight=1)
    result = p.simulate(PLACEMENT, trace=True).result
    doc = json.loads(json.dumps(chrome_trace(result, p.devices.names, ["bus"], graph=p.graph)))
    return doc["traceEvents"]


def inside(point, slices):
    return any(s["ts"] <= point["ts"] <= s["ts"] + s["dur"] and s["pid"] == point["pid"] and s["tid"] == point["tid"]
               for s in slices)


def test_every_crossing_edge_has_one_flow_per_batch():
    events = export(batches=2)
    flows = defaultdict(dict)
    for e in events:
        if e["ph"] in "stf" and e.get("cat") == "tensor":
            flows[e["id"]][e["ph"]] = e
    edges = sorted(f["s"]["name"] for f in flows.values())
    assert edges == ["a → b", "a → b", "c → d", "c → d"]  # 2 crossing edges x 2 batches; a → c, b → d stay local
    slices = [e for e in events if e["ph"] == "X"]
    fwd = {(e["args"]["op"], e["args"]["batch"]): e for e in slices if e["cat"] == "op,fwd"}
    for f in flows.values():
        assert set(f) == {"s", "t", "f"} and f["f"]["bp"] == "e"
        producer, consumer = f["s"]["name"].split(" → ")
        batch = next(b for (o, b), e in fwd.items() if o == producer and inside(f["s"], [e]))
        assert inside(f["f"], [fwd[(consumer, batch)]])  # lands on the consumer's forward of the same batch
        transfers = [e for e in slices if e["cat"] == "transfer,fwd" and e["args"]["op"] == producer
                     and e["args"]["batch"] == batch]
        assert inside(f["t"], transfers)


def test_without_the_graph_there_are_no_flows():
    p = problem(OPS, devices(2, bandwidth=100.0))
    result = p.simulate(PLACEMENT, trace=True).result
    assert not [e for e in chrome_trace(result, p.devices.names, ["bus"])["traceEvents"] if e["ph"] in "stf"]
