"""The device graph: devices, channels and the directed routes that use them.

A transfer from device A to device B queues on the channel that carries the
route (A, B). One channel may carry several routes, which then contend (the
thesis' Malvik server shares one PCIe link between CPU->GPU and GPU->GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..base.errors import InputError, check_fields, require_list, require_mapping, require_name, require_number
from .device_sharing import (MAX_CURVE_POINTS, Collective, SharedResource, check_sharing,  # noqa: F401 (curve_time)
                             collectives_from_list, curve_time, shared_from_list, sharing_to_dict)

FORMAT = "placement-devices/1"
KINDS = ("cpu", "gpu")
MAX_MESSAGE_OVERHEAD = 1e3  # seconds, the bound a channel's latency has
# Rates and sizes that divide (FLOP/s, bytes/s, bytes, Hz) are at least 1: with a quantity of at most 1e24
# and an efficiency of at least 0.001 every time stays below 1e27 s, while a subnormal 5e-324 gave inf.
MIN_RATE = 1.0


@dataclass(frozen=True)
class Device:
    name: str
    kind: str
    peak_flops: float
    memory_bytes: float
    mem_bandwidth: float
    model: str = ""
    # Only the exprimo-2020 profile uses the clock (every cost term lasts at
    # least one cycle in the thesis' implementation).
    clock_hz: float | None = None
    # Device time spent on every message the device sends and on every message it receives
    # (LogP's "o": serialisation, the transport thread, waking up). The simulator runs it as a
    # send or receive task on the device, under any cost profile; 0 (the default) means none.
    message_overhead: float = 0.0
    # Peaks by the datatype a network trains in, ((precision, FLOP/s), ...): a datasheet's dense tensor-core
    # rates (an A100's 312 TFLOP/s in bf16 against 19.5 in fp32). A precision not listed runs at peak_flops.
    peaks: tuple[tuple[str, float], ...] = ()
    # Streaming multiprocessors: when given, a matmul's time counts the tiles and waves it rounds up to
    # (cost.gemm); 0: no quantization.
    sms: int = 0
    # Measured best matmul rates by precision, ((precision, FLOP/s), ...): a microbenchmark's (the largest
    # rate a well-shaped GEMM reaches, docs/clusters.md). Where given for the network's precision it replaces
    # the peak times the profile's compute efficiency, as measured op times replace the formula.
    achieved: tuple[tuple[str, float], ...] = ()

    def peak_for(self, precision: str) -> float:
        return dict(self.peaks).get(precision, self.peak_flops)

    def rate_for(self, precision: str, efficiency: float) -> float:
        """FLOP/s an op reaches before tiles and waves: the measured rate, else the peak times ``efficiency``."""
        return dict(self.achieved).get(precision) or self.peak_for(precision) * efficiency


@dataclass(frozen=True)
class Channel:
    name: str
    bandwidth: float  # bytes/s, theoretical
    latency: float  # s
    routes: tuple[tuple[str, str], ...]
    # Measured transfer time against message size, ((bytes, seconds), ...) with the bytes increasing: when
    # given it replaces latency + bytes / (bandwidth * efficiency) (thesis E1: the practical bandwidth depends
    # on the message size). Empty: the formula.
    transfer_curve: tuple[tuple[float, float], ...] = ()
    # Measured bandwidth of large messages, bytes/s (NCCL's bus bandwidth for the link class, say): when given
    # it replaces bandwidth * the profile's communication efficiency; 0: the formula.
    achieved_bandwidth: float = 0.0

    def rate(self, efficiency: float) -> float:
        """Bytes/s a large transfer reaches: the measured bandwidth, else the theoretical one times ``efficiency``."""
        return self.achieved_bandwidth or self.bandwidth * efficiency



class DeviceGraph:
    def __init__(self, name: str, devices: list[Device], channels: list[Channel], *,
                 source: str | None = None, collectives=(), shared=()):
        self.name = name
        self.devices = tuple(devices)
        self.channels = tuple(channels)
        self.collectives: tuple[Collective, ...] = tuple(collectives)
        self.shared: tuple[SharedResource, ...] = tuple(shared)
        self.source = source
        _validate(self)
        self.index = {d.name: i for i, d in enumerate(self.devices)}
        self.route: dict[tuple[int, int], int] = {}
        for c, ch in enumerate(self.channels):
            for src, dst in ch.routes:
                self.route[(self.index[src], self.index[dst])] = c

    def __len__(self) -> int:
        return len(self.devices)

    def __repr__(self) -> str:
        return f"DeviceGraph({self.name!r}, {len(self.devices)} devices, {len(self.channels)} channels)"

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.devices]

    def channel_for(self, src: int, dst: int) -> Channel:
        return self.channels[self.route[(src, dst)]]

    def with_memory(self, memory_bytes: dict[str, float]) -> "DeviceGraph":
        """A copy with some devices' memory replaced (E3's limited variants)."""
        from dataclasses import replace
        devs = [replace(d, memory_bytes=memory_bytes.get(d.name, d.memory_bytes)) for d in self.devices]
        return DeviceGraph(self.name, devs, list(self.channels), source=self.source, collectives=self.collectives,
                           shared=self.shared)

    def without_measured_rates(self, *, compute: bool = False, links: bool = False) -> "DeviceGraph":
        """A copy whose devices (``compute``) or links (``links``) drop their measured rates, so that an
        efficiency the user sets by hand applies to them (``--comp-efficiency``, ``--comm-efficiency``); the same
        graph when there is nothing to drop."""
        from dataclasses import replace
        drop_c = compute and any(d.achieved for d in self.devices)
        drop_l = links and any(c.achieved_bandwidth for c in self.channels)
        if not (drop_c or drop_l):
            return self
        devs = [replace(d, achieved=()) if drop_c else d for d in self.devices]
        chans = [replace(c, achieved_bandwidth=0.0) if drop_l else c for c in self.channels]
        return DeviceGraph(self.name, devs, chans, source=self.source, collectives=self.collectives,
                           shared=self.shared)

    def collective(self, op: str, device_indices) -> Collective | None:
        """The curve of ``op`` declared for exactly this set of devices (by index), or None."""
        want = {self.devices[int(i)].name for i in device_indices}
        for c in self.collectives:
            if c.op == op and set(c.devices) == want:
                return c
        return None


def _validate(g: DeviceGraph) -> None:
    src = g.source
    if not g.devices:
        raise InputError("the device graph has no devices", source=src, field="devices",
                         fix="Add at least one device")
    names: dict[str, int] = {}
    for i, d in enumerate(g.devices):
        if d.name in names:
            raise InputError(f"duplicate device name {d.name!r} (devices[{names[d.name]}] and devices[{i}])",
                             source=src, field=f"devices[{i}].name", fix="Give every device a unique name")
        names[d.name] = i
        if d.kind not in KINDS:
            raise InputError(f"kind must be 'cpu' or 'gpu', got {d.kind!r}", source=src,
                             field=f"devices[{i}].kind", fix='Use "cpu" or "gpu"')
        for attr in ("peak_flops", "memory_bytes", "mem_bandwidth"):
            require_number(getattr(d, attr), source=src, field=f"devices[{i}].{attr}", positive=True)
        if d.clock_hz is not None:
            require_number(d.clock_hz, source=src, field=f"devices[{i}].clock_hz", positive=True)
        require_number(d.message_overhead, source=src, field=f"devices[{i}].message_overhead",
                       maximum=MAX_MESSAGE_OVERHEAD)
    ch_names: dict[str, int] = {}
    owner: dict[tuple[str, str], str] = {}
    for c, ch in enumerate(g.channels):
        at = f"channels[{c}]"
        if ch.name in ch_names:
            raise InputError(f"duplicate channel name {ch.name!r}", source=src, field=f"{at}.name",
                             fix="Give every channel a unique name")
        if ch.name in names:
            raise InputError(f"channel name {ch.name!r} is also a device name", source=src,
                             field=f"{at}.name", fix="Channels and devices need distinct names")
        ch_names[ch.name] = c
        require_number(ch.bandwidth, source=src, field=f"{at}.bandwidth", positive=True)
        require_number(ch.latency, source=src, field=f"{at}.latency")
        require_number(ch.achieved_bandwidth, source=src, field=f"{at}.achieved_bandwidth")
        check_curve(ch.transfer_curve, source=src, field=f"{at}.transfer_curve")
        for r, (a, b) in enumerate(ch.routes):
            for end in (a, b):
                if end not in names:
                    raise InputError(f"route names device {end!r}, which is not in this graph", source=src,
                                     field=f"{at}.routes[{r}]", fix="Use one of: " + ", ".join(names))
            if a == b:
                raise InputError(f"route from {a!r} to itself", source=src, field=f"{at}.routes[{r}]",
                                 fix="A device needs no route to itself; remove it")
            if (a, b) in owner:
                raise InputError(f"route {a} -> {b} is on two channels ({owner[(a, b)]!r} and {ch.name!r})",
                                 source=src, field=f"{at}.routes[{r}]",
                                 fix="Each ordered device pair needs exactly one route")
            owner[(a, b)] = ch.name
    missing = [(a.name, b.name) for a in g.devices for b in g.devices
               if a.name != b.name and (a.name, b.name) not in owner]
    if missing:
        shown = ", ".join(f"{a} -> {b}" for a, b in missing[:6])
        more = f" and {len(missing) - 6} more" if len(missing) > 6 else ""
        raise InputError(f"no route for {shown}{more}; any two devices may have to exchange a tensor",
                         source=src, field="channels",
                         fix="Add each missing [SRC, DST] pair to the routes of the channel that carries it")
    check_sharing(g, names)


_DEVICE_FIELDS = {"name", "kind", "peak_flops", "memory_bytes", "mem_bandwidth", "model", "clock_hz",
                  "message_overhead", "peak_flops_by_precision", "sms", "achieved_flops_by_precision"}
MAX_SMS = 100_000
_CHANNEL_FIELDS = {"name", "bandwidth", "latency", "routes", "transfer_curve", "achieved_bandwidth"}
_CURVE_FIX = 'Write [[BYTES, SECONDS], ...], e.g. [[4, 3e-5], [1e6, 2.5e-4], [1e8, 0.02]]'


def check_curve(points, *, source: str | None, field: str) -> tuple[tuple[float, float], ...]:
    """A transfer curve as the simulator needs it: 2 to 64 points of (bytes, seconds), sizes strictly
    increasing, times never decreasing (a larger message never arrives sooner) and rising on the last
    segment (its slope is the bandwidth beyond the last point). Returns it as a tuple of float pairs."""
    if len(points) == 0:
        return ()
    if not 2 <= len(points) <= MAX_CURVE_POINTS:
        raise InputError(f"a transfer curve needs 2 to {MAX_CURVE_POINTS} points, got {len(points)}",
                         source=source, field=field, fix=_CURVE_FIX)
    out = []
    for k, pt in enumerate(points):
        if not isinstance(pt, (list, tuple)) or len(pt) != 2:
            raise InputError(f"expected a [BYTES, SECONDS] pair, got {pt!r}"[:200], source=source,
                             field=f"{field}[{k}]", fix=_CURVE_FIX)
        b = require_number(pt[0], source=source, field=f"{field}[{k}][0]")
        t = require_number(pt[1], source=source, field=f"{field}[{k}][1]", maximum=1e3)
        if out and b <= out[-1][0]:
            raise InputError(f"message sizes must increase, but {b:g} B follows {out[-1][0]:g} B", source=source,
                             field=f"{field}[{k}][0]", fix="List the points from the smallest message up")
        if out and b - out[-1][0] < 1.0:  # closer points would make a slope of up to 1e3 s per byte overflow
            raise InputError(f"{b:g} B is less than a byte above {out[-1][0]:g} B", source=source,
                             field=f"{field}[{k}][0]", fix="Give message sizes at least one byte apart")
        if out and t < out[-1][1]:
            raise InputError(f"{b:g} B takes {t:g} s, less than the smaller {out[-1][0]:g} B ({out[-1][1]:g} s)",
                             source=source, field=f"{field}[{k}][1]",
                             fix="A larger message never arrives sooner: make the times non-decreasing")
        out.append((b, t))
    if out[-1][1] <= out[-2][1]:
        raise InputError("the last two points have the same time, so messages beyond the last point would "
                         "take no time per byte", source=source, field=f"{field}[{len(out) - 1}][1]",
                         fix="End the curve on a segment that rises (its slope is the link's bandwidth)")
    return tuple(out)


def _peaks(raw: Any, source: str | None, at: str) -> tuple[tuple[str, float], ...]:
    from .graph import PRECISION_BYTES
    raw = require_mapping(raw, source=source, field=at, what='{"bf16": FLOP/s, ...}')
    out = []
    for key in sorted(raw):
        if key not in PRECISION_BYTES:
            raise InputError(f"unknown precision {str(key)[:20]!r}", source=source, field=f"{at}.{str(key)[:20]}",
                             fix=f"Use {', '.join(PRECISION_BYTES)}")
        out.append((key, require_number(raw[key], source=source, field=f"{at}.{key}", positive=True,
                                        minimum=MIN_RATE)))
    return tuple(out)


def _sms(raw: Any, source: str | None, at: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= MAX_SMS:
        raise InputError(f"sms must be a whole number from 0 to {MAX_SMS:,}, got {str(raw)[:20]}", source=source,
                         field=at, fix="Give the GPU's streaming multiprocessors (an A100 has 108), or leave it out")
    return raw


def _achieved_bandwidth(raw: Any, source: str | None, at: str) -> float:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool) and raw == 0:
        return 0.0  # the field's default: no measurement
    return require_number(raw, source=source, field=at, positive=True, minimum=MIN_RATE)


def devices_from_dict(data: Any, source: str | None = None) -> DeviceGraph:
    data = require_mapping(data, source=source, field=None, what="a device graph")
    if data.get("format") != FORMAT:
        raise InputError(f"unknown format {data.get('format')!r}", source=source, field="format",
                         fix=f'Set "format": "{FORMAT}" (or load an Exprimo device file, which has "comm_channels")')
    name = require_name(data.get("name", "devices"), source=source, field="name")
    devices = []
    for i, raw in enumerate(require_list(data.get("devices"), source=source, field="devices",
                                         what="a list of devices")):
        at = f"devices[{i}]"
        raw = require_mapping(raw, source=source, field=at, what="a device")
        check_fields(raw, _DEVICE_FIELDS, source=source, at=at)
        kind = raw.get("kind")
        if kind not in KINDS:
            raise InputError(f"kind must be 'cpu' or 'gpu', got {kind!r}", source=source, field=f"{at}.kind",
                             fix='Use "cpu" or "gpu"')
        model = raw.get("model", "")
        if not isinstance(model, str):
            raise InputError("model must be a string", source=source, field=f"{at}.model")
        clock = raw.get("clock_hz")
        devices.append(Device(
            name=require_name(raw.get("name"), source=source, field=f"{at}.name"),
            kind=kind,
            peak_flops=require_number(raw.get("peak_flops"), source=source, field=f"{at}.peak_flops",
                                      positive=True, minimum=MIN_RATE),
            memory_bytes=require_number(raw.get("memory_bytes"), source=source, field=f"{at}.memory_bytes",
                                        positive=True, minimum=MIN_RATE),
            mem_bandwidth=require_number(raw.get("mem_bandwidth"), source=source,
                                         field=f"{at}.mem_bandwidth", positive=True, minimum=MIN_RATE),
            model=model,
            clock_hz=None if clock is None else require_number(clock, source=source, field=f"{at}.clock_hz",
                                                               positive=True,
                                                               minimum=MIN_RATE),
            message_overhead=require_number(raw.get("message_overhead", 0.0), source=source,
                                            field=f"{at}.message_overhead", maximum=MAX_MESSAGE_OVERHEAD),
            peaks=_peaks(raw.get("peak_flops_by_precision", {}), source, f"{at}.peak_flops_by_precision"),
            sms=_sms(raw.get("sms", 0), source, f"{at}.sms"),
            achieved=_peaks(raw.get("achieved_flops_by_precision", {}), source,
                            f"{at}.achieved_flops_by_precision"),
        ))
    channels = []
    for c, raw in enumerate(require_list(data.get("channels", []), source=source, field="channels",
                                         what="a list of channels")):
        at = f"channels[{c}]"
        raw = require_mapping(raw, source=source, field=at, what="a channel")
        check_fields(raw, _CHANNEL_FIELDS, source=source, at=at)
        routes = []
        for r, route in enumerate(require_list(raw.get("routes"), source=source, field=f"{at}.routes",
                                               what="a list of [SRC, DST] pairs")):
            if (not isinstance(route, list) or len(route) != 2
                    or not all(isinstance(x, str) for x in route)):
                raise InputError(f"expected [SRC, DST] device names, got {route!r}", source=source,
                                 field=f"{at}.routes[{r}]", fix='Write e.g. ["cpu0", "gpu0"]')
            routes.append((route[0], route[1]))
        channels.append(Channel(
            name=require_name(raw.get("name"), source=source, field=f"{at}.name"),
            bandwidth=require_number(raw.get("bandwidth"), source=source, field=f"{at}.bandwidth",
                                     positive=True, minimum=MIN_RATE),
            latency=require_number(raw.get("latency", 0.0), source=source, field=f"{at}.latency",
                                   maximum=1e3),
            routes=tuple(routes),
            transfer_curve=check_curve(require_list(raw.get("transfer_curve", []), source=source,
                                                    field=f"{at}.transfer_curve", what="[[BYTES, SECONDS], ...]"),
                                       source=source, field=f"{at}.transfer_curve"),
            achieved_bandwidth=_achieved_bandwidth(raw.get("achieved_bandwidth", 0.0), source,
                                                   f"{at}.achieved_bandwidth"),
        ))
    return DeviceGraph(name, devices, channels, source=source,
                       collectives=collectives_from_list(data.get("collectives", []), source),
                       shared=shared_from_list(data.get("shared", []), source))


def devices_to_dict(g: DeviceGraph) -> dict:
    devs = []
    for d in g.devices:
        item = {"name": d.name, "kind": d.kind, "peak_flops": d.peak_flops, "memory_bytes": d.memory_bytes,
                "mem_bandwidth": d.mem_bandwidth, "model": d.model}
        if d.clock_hz is not None:
            item["clock_hz"] = d.clock_hz
        if d.message_overhead:  # omitted when 0, so files without the field read and write back unchanged
            item["message_overhead"] = d.message_overhead
        if d.peaks:  # likewise
            item["peak_flops_by_precision"] = dict(d.peaks)
        if d.sms:
            item["sms"] = d.sms
        if d.achieved:
            item["achieved_flops_by_precision"] = dict(d.achieved)
        devs.append(item)
    chans = []
    for c in g.channels:
        item = {"name": c.name, "bandwidth": c.bandwidth, "latency": c.latency, "routes": [list(r) for r in c.routes]}
        if c.transfer_curve:  # omitted when absent: files without it read and write back unchanged
            item["transfer_curve"] = [list(p) for p in c.transfer_curve]
        if c.achieved_bandwidth:
            item["achieved_bandwidth"] = c.achieved_bandwidth
        chans.append(item)
    # collectives and shared resources are omitted when absent: files without them read and write back unchanged
    return {"format": FORMAT, "name": g.name, "devices": devs, "channels": chans, **sharing_to_dict(g)}


def devices_hash(g: DeviceGraph) -> str:
    """The device graph's identity in the run store: equal content, equal hash."""
    from ..base.jsonio import content_hash
    return content_hash(devices_to_dict(g))
