"""What devices share beyond their links: measured collectives over groups of devices and physical resources
(cores, a switch) that slow the devices using them at once (docs/formats.md "collectives", "shared"); and the
piecewise-linear curve both transfer curves and collective curves are read through."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..base.errors import InputError, check_fields, require_list, require_mapping, require_name, require_number

MAX_CURVE_POINTS = 64  # a transfer curve's knots (a measurement has one per message size: 10-20)
_COLLECTIVE_FIELDS = {"devices", "op", "sizes", "seconds", "busy_seconds"}
_SHARED_FIELDS = {"name", "devices", "capacity", "demand", "collective_demand"}


def curve_time(points, nbytes: float) -> float:
    """Seconds to send ``nbytes`` on a link with this transfer curve: flat at the first point's time below
    it (latency dominates), linear between points, the last segment's slope (the link's asymptotic
    bandwidth) beyond the last. The compiled kernel computes exactly this, in this order of operations."""
    b0, t0 = points[0]
    if nbytes <= b0:
        return float(t0)
    k = 1
    while k < len(points) - 1 and nbytes > points[k][0]:
        k += 1
    (b_lo, t_lo), (b_hi, t_hi) = points[k - 1], points[k]
    return t_lo + (nbytes - b_lo) * (t_hi - t_lo) / (b_hi - b_lo)


COLLECTIVE_OPS = ("allreduce", "allgather", "reducescatter")
MAX_SHARED_DEVICES = 64  # a split has at most 64 devices too


@dataclass(frozen=True)
class Collective:
    """A measured (or hand-given) collective over a group of devices: seconds against message bytes, alone
    and (``busy_seconds``, optional) while every rank computes. The simulator uses an ``allreduce`` curve
    wherever a data-parallel all-reduce runs over exactly this set of devices (docs/formats.md)."""

    devices: tuple[str, ...]
    op: str
    sizes: tuple[float, ...]
    seconds: tuple[float, ...]
    busy_seconds: tuple[float, ...] = ()

    def time(self, nbytes: float, busy: bool = False) -> float:
        """Seconds for ``nbytes``: linear between points, flat below the first, the last segment's slope
        beyond the last (as a channel's transfer curve, :func:`curve_time`)."""
        ts = self.busy_seconds if busy and self.busy_seconds else self.seconds
        return curve_time(list(zip(self.sizes, ts)), nbytes)


@dataclass(frozen=True)
class SharedResource:
    """A physical resource some devices share (the cores of one CPU, a PCIe switch): when tasks run on
    several of them at once and their demands add up to more than ``capacity``, each runs slower by
    demand / capacity (docs/formats.md, docs/e5.md)."""

    name: str
    devices: tuple[str, ...]
    capacity: float = 1.0
    demand: tuple[float, ...] = ()  # per device, in ``devices`` order; empty: 1 each
    # what a measured all-reduce running over a device adds to that device's demand: gloo sums on the ranks'
    # own cores, so on CPU ranks a collective and the backward beside it share them (0: collectives take none)
    collective_demand: float = 0.0

    def demands(self) -> tuple[float, ...]:
        return self.demand or tuple(1.0 for _ in self.devices)


def check_sharing(g, names: dict) -> None:
    """The device graph's collectives and shared resources against its devices (``names``: name -> index)."""
    src = g.source
    seen_groups: dict[tuple[str, frozenset], int] = {}
    for c, col in enumerate(g.collectives):
        at = f"collectives[{c}]"
        _check_group(col.devices, names, src, f"{at}.devices", "a collective")
        if col.op not in COLLECTIVE_OPS:
            raise InputError(f"unknown collective {str(col.op)[:30]!r}", source=src, field=f"{at}.op",
                             fix="Use " + ", ".join(repr(o) for o in COLLECTIVE_OPS))
        key = (col.op, frozenset(col.devices))
        if key in seen_groups:
            raise InputError(f"{col.op} over {', '.join(col.devices)} is declared twice "
                             f"(collectives[{seen_groups[key]}] and {at})", source=src, field=at,
                             fix="Keep one curve per operation and group of devices")
        seen_groups[key] = c
        check_collective_curve(col.sizes, col.seconds, source=src, at=at, times_field="seconds")
        if col.busy_seconds:
            check_collective_curve(col.sizes, col.busy_seconds, source=src, at=at, times_field="busy_seconds")
    seen_shared: set[str] = set()
    for r, res in enumerate(g.shared):
        at = f"shared[{r}]"
        if res.name in seen_shared:
            raise InputError(f"duplicate shared resource name {res.name!r}", source=src, field=f"{at}.name",
                             fix="Give every shared resource a unique name")
        seen_shared.add(res.name)
        _check_group(res.devices, names, src, f"{at}.devices", "a shared resource")
        require_number(res.capacity, source=src, field=f"{at}.capacity", positive=True, minimum=1e-6,
                       maximum=1e6)
        if res.demand:
            if len(res.demand) != len(res.devices):
                raise InputError(f"demand has {len(res.demand)} entries for {len(res.devices)} devices",
                                 source=src, field=f"{at}.demand",
                                 fix="Give one demand per device, in the order of devices (or leave it out: 1 each)")
            for j, x in enumerate(res.demand):
                require_number(x, source=src, field=f"{at}.demand[{j}]", positive=True, minimum=1e-6, maximum=1e6)


def _check_group(devs, names: dict, src: str | None, field: str, what: str) -> None:
    if not 2 <= len(devs) <= MAX_SHARED_DEVICES:
        raise InputError(f"{what} needs 2 to {MAX_SHARED_DEVICES} devices, got {len(devs)}", source=src,
                         field=field, fix='List the devices by name, e.g. ["cpu0", "cpu1"]')
    for j, d in enumerate(devs):
        if d not in names:
            raise InputError(f"unknown device {str(d)[:40]!r}", source=src, field=f"{field}[{j}]",
                             fix="Use one of: " + ", ".join(names))
        if d in devs[:j]:
            raise InputError(f"device {d!r} is listed twice", source=src, field=f"{field}[{j}]",
                             fix="List each device once")


def check_collective_curve(sizes, times, *, source: str | None, at: str, times_field: str) -> None:
    """A collective's curve: 2 to 64 sizes in bytes, strictly increasing, at least a byte apart; as many
    times in seconds, never decreasing (a larger message never finishes sooner)."""
    fix = 'Write e.g. "sizes": [4096, 1048576], "seconds": [0.0002, 0.004]'
    if not 2 <= len(sizes) <= MAX_CURVE_POINTS:
        raise InputError(f"a collective curve needs 2 to {MAX_CURVE_POINTS} sizes, got {len(sizes)}",
                         source=source, field=f"{at}.sizes", fix=fix)
    if len(times) != len(sizes):
        raise InputError(f"{times_field} has {len(times)} entries for {len(sizes)} sizes", source=source,
                         field=f"{at}.{times_field}", fix="Give one time per size, in the same order")
    for k, (b, t) in enumerate(zip(sizes, times)):
        require_number(b, source=source, field=f"{at}.sizes[{k}]")
        require_number(t, source=source, field=f"{at}.{times_field}[{k}]", maximum=1e3)
        if k and b - sizes[k - 1] < 1.0:
            raise InputError(f"sizes must increase by at least a byte, but {b:g} B follows {sizes[k - 1]:g} B",
                             source=source, field=f"{at}.sizes[{k}]", fix="List the sizes from the smallest up")
        if k and t < times[k - 1]:
            raise InputError(f"{b:g} B takes {t:g} s, less than the smaller {sizes[k - 1]:g} B ({times[k - 1]:g} s)",
                             source=source, field=f"{at}.{times_field}[{k}]",
                             fix="A larger message never finishes sooner: make the times non-decreasing")


def _numbers(raw: Any, source: str | None, field: str, what: str) -> tuple[float, ...]:
    items = require_list(raw, source=source, field=field, what=what)
    return tuple(require_number(x, source=source, field=f"{field}[{j}]", maximum=1e24) for j, x in enumerate(items))


def _names(raw: Any, source: str | None, field: str) -> tuple[str, ...]:
    items = require_list(raw, source=source, field=field, what='a list of device names, e.g. ["cpu0", "cpu1"]')
    for j, x in enumerate(items):
        if not isinstance(x, str):
            raise InputError(f"expected a device name, got {x!r}"[:200], source=source, field=f"{field}[{j}]",
                             fix='Write device names as strings, e.g. ["cpu0", "cpu1"]')
    return tuple(items)


def collectives_from_list(raw: Any, source: str | None) -> list[Collective]:
    out = []
    for c, item in enumerate(require_list(raw, source=source, field="collectives", what="a list of curves")):
        at = f"collectives[{c}]"
        item = require_mapping(item, source=source, field=at, what="a collective curve")
        check_fields(item, _COLLECTIVE_FIELDS, source=source, at=at)
        for key in ("devices", "op", "sizes", "seconds"):
            if key not in item:
                raise InputError(f"missing field {key!r}", source=source, field=f"{at}.{key}",
                                 fix='Give "devices", "op", "sizes" and "seconds" (docs/formats.md)')
        out.append(Collective(
            devices=_names(item["devices"], source, f"{at}.devices"), op=item["op"],
            sizes=_numbers(item["sizes"], source, f"{at}.sizes", "a list of message sizes in bytes"),
            seconds=_numbers(item["seconds"], source, f"{at}.seconds", "a list of times in seconds"),
            busy_seconds=_numbers(item.get("busy_seconds", []), source, f"{at}.busy_seconds",
                                  "a list of times in seconds")))
    return out


def shared_from_list(raw: Any, source: str | None) -> list[SharedResource]:
    out = []
    for r, item in enumerate(require_list(raw, source=source, field="shared", what="a list of shared resources")):
        at = f"shared[{r}]"
        item = require_mapping(item, source=source, field=at, what="a shared resource")
        check_fields(item, _SHARED_FIELDS, source=source, at=at)
        out.append(SharedResource(
            name=require_name(item.get("name"), source=source, field=f"{at}.name"),
            devices=_names(item.get("devices"), source, f"{at}.devices"),
            capacity=require_number(item.get("capacity", 1.0), source=source, field=f"{at}.capacity",
                                    positive=True, minimum=1e-6, maximum=1e6),
            demand=_numbers(item.get("demand", []), source, f"{at}.demand", "a list of demands, one per device"),
            collective_demand=require_number(item.get("collective_demand", 0.0), source=source,
                                             field=f"{at}.collective_demand", maximum=1e6)))
    return out


def sharing_to_dict(g) -> dict:
    """The graph's collectives and shared resources as device-file fields ({} when it has none)."""
    out = {}
    if g.collectives:
        out["collectives"] = [{"devices": list(c.devices), "op": c.op, "sizes": list(c.sizes),
                               "seconds": list(c.seconds), **({"busy_seconds": list(c.busy_seconds)}
                                                              if c.busy_seconds else {})} for c in g.collectives]
    if g.shared:
        out["shared"] = [{"name": r.name, "devices": list(r.devices), "capacity": r.capacity,
                          **({"demand": list(r.demand)} if r.demand else {}),
                          **({"collective_demand": r.collective_demand} if r.collective_demand else {})}
                         for r in g.shared]
    return out
