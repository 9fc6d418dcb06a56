"""Device graphs as two editable tables (devices; channels with their routes) and back.

The dashboard edits these rows with a table editor in everyday units (TFLOP/s,
GB, GB/s, µs); :func:`devices_from_tables` converts back to SI units and
validates through the same code as the JSON loader, rewording any error to
point at the table, row and column to fix.
"""

from __future__ import annotations

import math
import numbers
import re

from ..model.devices import DeviceGraph, devices_from_dict
from ..base.errors import InputError

# column -> (field, factor from the column's unit to SI)
DEVICE_COLUMNS = {
    "name": ("name", None),
    "kind": ("kind", None),
    "model": ("model", None),
    "peak TFLOP/s": ("peak_flops", 1e12),
    "memory GB": ("memory_bytes", 1e9),
    "memory bandwidth GB/s": ("mem_bandwidth", 1e9),
    "clock MHz": ("clock_hz", 1e6),
    "µs per message": ("message_overhead", 1e-6),
    "SMs": ("sms", None),
    # a GPU's tensor-core peaks and measured matmul rates by precision (fields peak_flops_by_precision and
    # achieved_flops_by_precision): a DGX preset's bf16 rates survive an edit of another cell
    **{f"{p} peak TFLOP/s": (f"peak_flops_by_precision.{p}", 1e12) for p in ("bf16", "fp16")},
    **{f"{p} measured TFLOP/s": (f"achieved_flops_by_precision.{p}", 1e12) for p in ("fp32", "bf16", "fp16")},
}
CHANNEL_COLUMNS = {
    "name": ("name", None),
    "bandwidth GB/s": ("bandwidth", 1e9),
    "latency µs": ("latency", 1e-6),
    "routes": ("routes", None),
    "transfer curve": ("transfer_curve", None),
    "measured GB/s": ("achieved_bandwidth", 1e9),  # beside the other measurement, the curve
}
_FIELD_TO_COLUMN = {
    "devices": {f: c for c, (f, _) in DEVICE_COLUMNS.items()},
    "channels": {f: c for c, (f, _) in CHANNEL_COLUMNS.items()},
}
_BY_PRECISION = {"peak_flops_by_precision": "peaks", "achieved_flops_by_precision": "achieved"}


def format_routes(routes) -> str:
    """``[("cpu0", "gpu0"), ("gpu0", "cpu0")]`` -> ``"cpu0→gpu0, gpu0→cpu0"``."""
    return ", ".join(f"{a}→{b}" for a, b in routes)


def parse_routes(text, where: str = "routes") -> list[list[str]]:
    """Routes written as ``a→b, c->d; e>f`` (one per comma, semicolon or line)."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return []
    out = []
    for part in re.split(r"[,;\n]+", str(text)):
        part = part.strip()
        if not part:
            continue
        pieces = [p.strip() for p in re.split(r"→|->|>", part)]
        if len(pieces) != 2 or not all(pieces):
            raise InputError(f"cannot read route {part!r}", field=where,
                             fix="Write routes as SRC→DST (or SRC->DST), separated by commas")
        out.append(pieces)
    return out


def format_curve(points) -> str:
    """``((4, 3.1e-05), (1e6, 0.0002))`` -> ``"4: 3.1e-05, 1000000: 0.0002"`` (bytes: seconds, exact)."""
    return ", ".join(f"{b:.17g}: {t!r}" for b, t in points)


def parse_curve(text, where: str = "transfer_curve") -> list[list[float]]:
    """A transfer curve written as ``BYTES: SECONDS`` pairs separated by commas; empty: none."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return []
    out = []
    for part in re.split(r"[,;\n]+", str(text)):
        if not part.strip():
            continue
        pieces = part.split(":")
        try:
            out.append([float(pieces[0]), float(pieces[1])] if len(pieces) == 2 else None)
        except ValueError:
            out.append(None)
        if out[-1] is None:
            raise InputError(f"cannot read the point {part.strip()!r}", field=where,
                             fix="Write BYTES: SECONDS pairs separated by commas, e.g. 4: 3e-05, 1e6: 0.0002")
    return out


def _value(v):
    """Table cells to plain JSON values: numpy numbers to float, empty cells to None."""
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, numbers.Number):
        v = float(v)
        return None if math.isnan(v) else v
    return v


def _to_si(v: float, k: float) -> float:
    # 10 µs -> 1e-05 exactly; 267.9 TFLOP/s -> 2.679e14, not 267899999999999.97 (15 digits drop the last bit)
    return float(f"{v * k:.15g}") if k >= 1 else v / round(1 / k)


def _tidy(x: float) -> float:
    """Undo unit-conversion noise (10.000000000000002 -> 10.0)."""
    return float(f"{x:.12g}")


def _device_field(d, f: str):
    """A device's value for a column's field; a rate by precision (``peak_flops_by_precision.bf16``) or an
    absent count of SMs is None (an empty cell)."""
    head, _, precision = f.partition(".")
    if precision:
        return dict(getattr(d, _BY_PRECISION[head])).get(precision)
    v = getattr(d, f)
    return None if f == "sms" and not v else v


def devices_to_tables(g: DeviceGraph) -> tuple[list[dict], list[dict]]:
    devices = []
    for d in g.devices:
        row = {}
        for col, (f, k) in DEVICE_COLUMNS.items():
            v = _device_field(d, f)
            row[col] = (_tidy(v / k) if v is not None else None) if k else v
        devices.append(row)
    channels = [{"name": c.name, "bandwidth GB/s": _tidy(c.bandwidth / 1e9), "latency µs": _tidy(c.latency / 1e-6),
                 "routes": format_routes(c.routes), "transfer curve": format_curve(c.transfer_curve),
                 "measured GB/s": _tidy(c.achieved_bandwidth / 1e9) if c.achieved_bandwidth else None}
                for c in g.channels]
    return devices, channels


def devices_from_tables(name: str, device_rows: list[dict], channel_rows: list[dict]) -> DeviceGraph:
    """Validate edited tables into a device graph; errors name the table, row and column."""
    devs = []
    for row in device_rows:
        item = {}
        for col, (f, k) in DEVICE_COLUMNS.items():
            v = _value(row.get(col))
            if f == "model":
                v = "" if v is None else str(v)
            elif f == "clock_hz" and v is None:
                continue
            elif f == "message_overhead" and v is None:  # an empty cell: none
                v = 0.0
            elif f == "sms":
                if v is None:
                    continue
                v = int(v) if isinstance(v, float) and v.is_integer() else v  # the editor's numbers are floats
            elif k and isinstance(v, float):
                v = _to_si(v, k)
            head, _, precision = f.partition(".")
            if precision:
                if v is not None:
                    item.setdefault(head, {})[precision] = v
                continue
            item[f] = v
        devs.append(item)
    chans = []
    for i, row in enumerate(channel_rows):
        item = {}
        for col, (f, k) in CHANNEL_COLUMNS.items():
            v = _value(row.get(col))
            if f == "routes":
                try:
                    v = parse_routes(v, where=f"channels[{i}].routes")
                except InputError as e:
                    raise _in_table(e, device_rows, channel_rows) from None
            elif f == "transfer_curve":
                try:
                    v = parse_curve(v, where=f"channels[{i}].transfer_curve")
                except InputError as e:
                    raise _in_table(e, device_rows, channel_rows) from None
            elif f in ("latency", "achieved_bandwidth") and v is None:  # empty: 0 (none measured)
                v = 0.0
            elif k and isinstance(v, float):
                v = _to_si(v, k)
            item[f] = v
        chans.append(item)
    data = {"format": "placement-devices/1", "name": name or "devices", "devices": devs, "channels": chans}
    try:
        return devices_from_dict(data, source=None)
    except InputError as e:
        raise _in_table(e, device_rows, channel_rows) from None


def _in_table(e: InputError, device_rows, channel_rows) -> InputError:
    m = re.match(r"(devices|channels)(?:\[(\d+)\])?(?:\.(\w+))?(?:\.(\w+))?", e.field or "")
    if not m:
        return e
    table, row, field = m.group(1), m.group(2), ".".join(filter(None, (m.group(3), m.group(4)))) or None
    rows = device_rows if table == "devices" else channel_rows
    where = f"{table.capitalize()} table"
    if row is not None:
        i = int(row)
        label = rows[i].get("name") if i < len(rows) else None
        where += f", row {i + 1}" + (f" ({label})" if isinstance(label, str) and label else "")
    column = _FIELD_TO_COLUMN[table].get(field or "", field) if field else (
        "routes" if table == "channels" else None)
    problem, fix = e.problem, e.fix
    # values were converted to SI units; state the rule without the converted number
    if problem.startswith("must be positive") or problem.startswith("must not be negative"):
        problem, fix = ("must be greater than zero" if "positive" in problem else "must not be negative"), None
    return InputError(problem, source=where, field=f"column '{column}'" if column else None, fix=fix)


def add_device(g: DeviceGraph, row: dict, channel: str | None = None, new_channel: dict | None = None) -> DeviceGraph:
    """``g`` with one more device (a device-table row, in the table's units) connected to every existing device
    in both directions: over the existing ``channel``, or over ``new_channel`` (a channel-table row without
    routes), which it then shares with nobody else. Saves typing 2·n ``SRC→DST`` pairs; errors name the field.
    The graph's measured collectives and shared resources stay (:func:`.sharing_tables.carry_sharing`)."""
    device_rows, channel_rows = devices_to_tables(g)
    name = _value(row.get("name"))
    if not isinstance(name, str) or not name.strip():
        raise InputError("the new device has no name", field="name", fix="Give it a name, e.g. gpu4")
    name = name.strip()
    if name in g.names:
        raise InputError(f"a device named {name!r} exists already", field="name", fix="Choose another name")
    if (channel is None) == (new_channel is None):
        raise InputError("choose one channel to connect the new device to", field="channel",
                         fix="Pick an existing channel or describe a new one")
    routes = [f"{name}→{other}" for other in g.names] + [f"{other}→{name}" for other in g.names]
    if channel is not None:
        rows = [r for r in channel_rows if r["name"] == channel]
        if not rows:
            raise InputError(f"there is no channel {channel!r}", field="channel",
                             fix="Use one of: " + ", ".join(c.name for c in g.channels))
        if routes:
            rows[0]["routes"] = ", ".join(filter(None, [rows[0]["routes"], ", ".join(routes)]))
    else:
        chan_name = _value(new_channel.get("name"))
        if not isinstance(chan_name, str) or not chan_name.strip():
            raise InputError("the new channel has no name", field="channel name", fix="Give it a name, e.g. pcie1")
        if chan_name.strip() in {c.name for c in g.channels}:
            raise InputError(f"a channel named {chan_name.strip()!r} exists already", field="channel name",
                             fix="Choose another name, or connect to the existing channel")
        channel_rows.append({**new_channel, "name": chan_name.strip(), "routes": ", ".join(routes)})
    from .sharing_tables import carry_sharing
    return carry_sharing(g, devices_from_tables(g.name, device_rows + [{**row, "name": name}], channel_rows))[0]
