"""The event trace as Chrome trace-event JSON (Perfetto, chrome://tracing).

One track per device and per channel, plus a memory counter per device. A device's send and receive
tasks (its message overhead) are grey slices on its track. Given the graph, every tensor that crosses
devices also gets a flow (Perfetto draws it as an arrow): from the producer's forward slice, through its
transfer, to each consumer's forward slice on the other device, one flow per edge and batch.
"""

from __future__ import annotations

from ..model.graph import Graph
from .model import OVERHEAD_KINDS, SimResult


def chrome_trace(result: SimResult, device_names: list[str], channel_names: list[str],
                 title: str = "placement", graph: Graph | None = None) -> dict:
    if result.trace is None:
        raise ValueError("the result has no trace; simulate with trace=True")
    tid = {name: i for i, name in enumerate(device_names)}
    ctid = {name: i for i, name in enumerate(channel_names)}
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "devices"}},
        {"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "channels"}},
        {"ph": "M", "name": "process_name", "pid": 3, "tid": 0, "args": {"name": "memory"}},
    ]
    for name, i in tid.items():
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": i, "args": {"name": name}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": i, "args": {"sort_index": i}})
    for name, i in ctid.items():
        events.append({"ph": "M", "name": "thread_name", "pid": 2, "tid": i, "args": {"name": name}})
    for e in result.trace:
        part = f" [{e.shard + 1}/{e.shards}]" if e.shard >= 0 else ""  # a shard of a split op
        item = {"name": f"{e.op}{part} ({e.phase})", "cat": f"{e.kind},{e.phase}", "ph": "X",
                "ts": e.start * 1e6, "dur": (e.end - e.start) * 1e6,
                "args": {"op": e.op, "batch": e.batch, "phase": e.phase}}
        if e.shard >= 0:
            item["args"].update(shard=e.shard, shards=e.shards)
        if e.kind == "op":
            item.update(pid=1, tid=tid[e.resource])
        elif e.kind in OVERHEAD_KINDS:  # a device's time on a message it sends or receives
            item["name"] = (f"send {e.op} ({e.phase}) to {e.dst}" if e.kind == "send"
                            else f"receive {e.op} ({e.phase}) from {e.src}")
            item.update(pid=1, tid=tid[e.resource], cname="grey")
            item["args"].update(src=e.src, dst=e.dst, bytes=e.bytes)
        else:
            item.update(pid=2, tid=ctid[e.resource])
            item["args"].update(src=e.src, dst=e.dst, bytes=e.bytes)
        events.append(item)
    if graph is not None:
        events += flow_events(result, graph, tid, ctid)
    for t, d, b in result.memory_timeline or []:
        events.append({"ph": "C", "name": f"memory {device_names[d]}", "pid": 3, "tid": 0, "ts": t * 1e6,
                       "args": {"bytes": b}})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"title": title}}


def tensor_flows(trace, graph: Graph) -> list[tuple[str, str, int, int, int | None, int]]:
    """Every tensor that crosses devices, per batch, as trace positions: (producer, consumer, batch, the
    producer's forward, the transfer that carried it or None, the consumer's forward). The Chrome export
    draws these as flow arrows; the dashboard's Trace page draws those of the op a user follows. An op split
    over devices has a forward per shard: each shard's piece is a flow to each consumer (shard) it reached,
    ending at the gather that collected it when there is one."""
    forward: dict[tuple[str, int], list[int]] = {}
    gathers: dict[tuple[str, int, str], int] = {}  # (gather name, batch, device)
    for i, e in enumerate(trace):
        if e.kind == "op" and e.phase == "fwd":
            forward.setdefault((e.op, e.batch), []).append(i)
            gathers[(e.op, e.batch, e.resource)] = i
    sends = {(e.op, e.batch, e.src, e.dst): i for i, e in enumerate(trace) if e.kind == "transfer" and e.phase == "fwd"}
    by_op: dict[str, list[tuple[int, list[int]]]] = {}
    for (op, batch), srcs in forward.items():
        by_op.setdefault(op, []).append((batch, srcs))
    names = [op.name for op in graph.ops]
    out = []
    for a, b, _ in graph.edges():
        producer, consumer = names[a], names[b]
        for batch, srcs in by_op.get(producer, ()):
            for dst in forward.get((consumer, batch), ()):
                where = trace[dst].resource
                end = gathers.get((f"gather {producer} → {consumer}", batch, where), dst)
                for src in srcs:
                    if trace[src].resource == where:
                        continue
                    hop = sends.get((producer, batch, trace[src].resource, where))
                    if hop is None and len(srcs) > 1:
                        continue  # this shard sent the consumer nothing (its samples are elsewhere)
                    out.append((producer, consumer, batch, src, hop, end))
    return out


def flow_events(result: SimResult, graph: Graph, tid: dict, ctid: dict) -> list[dict]:
    """``s`` / ``t`` / ``f`` flow events, producer forward -> transfer -> consumer forward, per crossing edge
    and batch. Each point sits mid-slice so that Perfetto binds it to that slice."""
    trace = result.trace

    def mid(e) -> float:
        return (e.start + e.end) / 2 * 1e6

    out = []
    for flow_id, (producer, consumer, _, src, hop, dst) in enumerate(tensor_flows(trace, graph), start=1):
        common = {"name": f"{producer} → {consumer}", "cat": "tensor", "id": flow_id}
        out.append({**common, "ph": "s", "ts": mid(trace[src]), "pid": 1, "tid": tid[trace[src].resource]})
        if hop is not None:
            out.append({**common, "ph": "t", "ts": mid(trace[hop]), "pid": 2, "tid": ctid[trace[hop].resource]})
        out.append({**common, "ph": "f", "bp": "e", "ts": mid(trace[dst]), "pid": 1, "tid": tid[trace[dst].resource]})
    return out
