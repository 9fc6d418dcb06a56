"""The event trace as Chrome trace-event JSON (Perfetto, chrome://tracing).

One track per device and per channel, plus a memory counter per device. A device's send and receive
tasks (its message overhead) are grey slices on its track.
"""

from __future__ import annotations

from .model import OVERHEAD_KINDS, SimResult


def chrome_trace(result: SimResult, device_names: list[str], channel_names: list[str],
                 title: str = "placement") -> dict:
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
        item = {"name": f"{e.op} ({e.phase})", "cat": f"{e.kind},{e.phase}", "ph": "X",
                "ts": e.start * 1e6, "dur": (e.end - e.start) * 1e6,
                "args": {"op": e.op, "batch": e.batch, "phase": e.phase}}
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
    for t, d, b in result.memory_timeline or []:
        events.append({"ph": "C", "name": f"memory {device_names[d]}", "pid": 3, "tid": 0, "ts": t * 1e6,
                       "args": {"bytes": b}})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"title": title}}
