"""Import of the thesis' Exprimo files: layer networks, device graphs, placements.

The imported ops are exactly the flattened layers, named by their path
(``Mixed_5b/Branch_3/AvgPool_0a_3x3``), so Exprimo placement files load too.
Shapes are NHWC as in the files. Besides our own FLOP/byte fields (docs/design.md §4,
used by the default profile) each op carries the cost terms of Exprimo's
Paleo-based model so the ``exprimo-2020`` profile reproduces its numbers.
"""

from __future__ import annotations

from typing import Any

from ..model.devices import MIN_RATE, Channel, Device, DeviceGraph
from ..base.errors import InputError, require_list, require_mapping, require_name, require_number
from ..model.graph import Graph, Op
from .exprimo_layers import layer_op
from .network import MAX_BATCH

DEFAULT_BATCH_SIZE = 128  # Exprimo's simulator overrides the file's batch with 128.

SUPPORTED = ("Input", "Convolution", "Deconvolution", "Pooling", "AvgPool", "UpSampling2D", "Dropout",
             "Concatenate", "Reshape", "Elementwise", "Softmax", "Sigmoid", "InnerProduct", "Block")


def is_exprimo_network(data: Any) -> bool:
    return isinstance(data, dict) and "layers" in data and "format" not in data


def is_exprimo_devices(data: Any) -> bool:
    return isinstance(data, dict) and "comm_channels" in data and "format" not in data


# ---------------------------------------------------------------------------
# Network


def network_from_exprimo(data: Any, source: str | None = None, batch_size: int | None = None) -> Graph:
    """Flatten the layer tree, infer NHWC shapes, and cost every layer.

    ``batch_size`` replaces the batch dimension of every Input layer; by
    default the thesis' 128 is used, as its simulator did.
    """
    data = require_mapping(data, source=source, field=None, what="an Exprimo network")
    layers = require_mapping(data.get("layers"), source=source, field="layers", what="the layers")
    if not layers:
        raise InputError("the network has no layers", source=source, field="layers", fix="Add at least one layer")
    batch = DEFAULT_BATCH_SIZE if batch_size is None else batch_size
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise InputError(f"batch size must be an integer from 1 to {MAX_BATCH}, got {batch!r}", source=source,
                         field="batch_size")
    flat: dict[str, dict] = {}
    endpoints: dict[str, str] = {}
    _flatten(layers, "", [], flat, endpoints, source, "layers")
    parents = {name: [_resolve(p, endpoints, flat, name, source) for p in spec["parents"]]
               for name, spec in flat.items()}
    order = _topological(list(flat), parents, source)
    shapes: dict[str, list[int]] = {}
    ops: dict[str, Op] = {}
    for name in order:
        spec = flat[name]
        in_shapes = [shapes[p] for p in parents[name]]
        parent_types = ["source" if flat[p]["type"] == "Input" and not parents[p] else flat[p]["type"]
                        for p in parents[name]]
        try:
            op, out = layer_op(name, spec, parents[name], in_shapes, parent_types, batch)
        except InputError as e:
            e.source = e.source or source
            raise
        shapes[name] = out
        ops[name] = op
    name = data.get("name", "exprimo-network")
    if not isinstance(name, str) or not name:
        name = "exprimo-network"
    require_name(name, source=source, field="name")  # at most 512 characters, as in our format
    # Keep the file's layer order (not our topological order) as the op list order:
    # the Graph sorts topologically with ties broken by this order.
    return Graph(name, [ops[n] for n in flat], batch, source=source)


def _flatten(layers: dict, prefix: str, block_parents: list[str], flat: dict, endpoints: dict,
             source: str | None, at: str) -> None:
    for lname, spec in layers.items():
        path = f"{at}.{lname}"
        require_name(lname, source=source, field=at)
        spec = require_mapping(spec, source=source, field=path, what="a layer")
        ltype = spec.get("type")
        if ltype == "ModelParallel":
            raise InputError("ModelParallel blocks (sharded layers) are not supported", source=source,
                             field=f"{path}.type", fix="Replace the block by its layers on single devices")
        if ltype not in SUPPORTED:
            raise InputError(f"unknown layer type {ltype!r}", source=source, field=f"{path}.type",
                             fix="Supported: " + ", ".join(SUPPORTED))
        if "splits" in spec:
            # Not per-shard sizes: Exprimo hands the integer to Paleo, which floor-divides the layer's output
            # channels by it again (a list fails there), so the next layer's input no longer fits.
            raise InputError("'splits' is not imported: in Exprimo it floor-divides the layer's output channels "
                             "(it does not size shards), which breaks the next layer's shapes", source=source,
                             field=f"{path}.splits", fix="Remove it; a device list in the placement splits a "
                                                         "Convolution evenly, as Exprimo does")
        raw_parents = require_list(spec.get("parents", []), source=source, field=f"{path}.parents",
                                   what="a list of parent layer names")
        for j, p in enumerate(raw_parents):
            require_name(p, source=source, field=f"{path}.parents[{j}]")
        full = prefix + lname
        if prefix:
            # Inside a block: names are relative to the block; no parents = the block's inputs.
            parents = [prefix + p for p in raw_parents] if raw_parents else list(block_parents)
        else:
            parents = list(raw_parents)
        if ltype == "Block":
            sub = require_mapping(spec.get("layers"), source=source, field=f"{path}.layers",
                                  what="the block's layers")
            _flatten(sub, full + "/", parents, flat, endpoints, source, f"{path}.layers")
            if "endpoint" in spec:
                end = spec["endpoint"]
                if not isinstance(end, str) or f"{full}/{end}" not in flat:
                    raise InputError(f"endpoint {end!r} is not a layer of block {full!r}", source=source,
                                     field=f"{path}.endpoint", fix="Name one of the block's own layers")
                endpoints[full] = f"{full}/{end}"
            continue
        if full in flat:
            raise InputError(f"duplicate layer {full!r}", source=source, field=path,
                             fix="Give every layer a unique name")
        flat[full] = {**spec, "parents": parents, "_at": path}


def _resolve(parent: str, endpoints: dict, flat: dict, child: str, source: str | None) -> str:
    seen = set()
    while parent in endpoints and parent not in seen:
        seen.add(parent)
        parent = endpoints[parent]
    if parent not in flat:
        hint = " (a block without an endpoint cannot be a parent)" if any(
            k.startswith(parent + "/") for k in flat) else ""
        raise InputError(f"layer {child!r} names parent {parent!r}, which is not a layer{hint}",
                         source=source, field=f"{flat[child]['_at']}.parents",
                         fix="Fix the name, or give the block an endpoint")
    return parent


def _topological(names: list[str], parents: dict[str, list[str]], source: str | None) -> list[str]:
    # Reuse the Graph's validation for cycles by building a skeleton graph.
    from ..model.graph import topological_order
    skeleton = [Op(name=n, inputs=tuple(dict.fromkeys(parents[n]))) for n in names]
    return [op.name for op in topological_order(skeleton, source)]



# ---------------------------------------------------------------------------
# Devices


def devices_from_exprimo(data: Any, source: str | None = None, name: str | None = None) -> DeviceGraph:
    """Devices named by kind and index (cpu0, gpu0, ...); neighbour (c, j) of i is route i->j on c."""
    data = require_mapping(data, source=source, field=None, what="an Exprimo device graph")
    raw_ch = require_list(data.get("comm_channels"), source=source, field="comm_channels",
                          what="a list of channels")
    raw_dev = require_list(data.get("devices"), source=source, field="devices", what="a list of devices")
    if not raw_dev:
        raise InputError("the device graph has no devices", source=source, field="devices",
                         fix="Add at least one device")
    counts: dict[str, int] = {}
    devices: list[Device] = []
    for i, d in enumerate(raw_dev):
        at = f"devices[{i}]"
        d = require_mapping(d, source=source, field=at, what="a device")
        kind = str(d.get("type", "")).lower()
        if kind not in ("cpu", "gpu"):
            raise InputError(f"type must be 'cpu' or 'gpu', got {d.get('type')!r}", source=source,
                             field=f"{at}.type", fix='Use "cpu" or "gpu"')
        idx = counts.get(kind, 0)
        counts[kind] = idx + 1
        devices.append(Device(
            name=f"{kind}{idx}", kind=kind,
            # the file's units are GFLOP/s, GB, GB/s and MHz: the minimums are ours (MIN_RATE) in them
            peak_flops=require_number(d.get("peak_gflops"), source=source, field=f"{at}.peak_gflops",
                                      positive=True, minimum=MIN_RATE / 1e9) * 1e9,
            memory_bytes=require_number(d.get("memory"), source=source, field=f"{at}.memory",
                                        positive=True, minimum=MIN_RATE / 1e9) * 1e9,
            mem_bandwidth=require_number(d.get("mem_bandwidth"), source=source, field=f"{at}.mem_bandwidth",
                                         positive=True, minimum=MIN_RATE / 1e9) * 1e9,
            model=str(d.get("model", "")),
            clock_hz=require_number(d.get("clock"), source=source, field=f"{at}.clock", positive=True,
                                    minimum=MIN_RATE / 1e6) * 1e6
            if d.get("clock") is not None else None,
        ))
    routes: list[list[tuple[str, str]]] = [[] for _ in raw_ch]
    for i, d in enumerate(raw_dev):
        for k, nb in enumerate(require_list(d.get("neighbours", []), source=source,
                                            field=f"devices[{i}].neighbours", what="a list of neighbours")):
            at = f"devices[{i}].neighbours[{k}]"
            nb = require_mapping(nb, source=source, field=at, what="a neighbour")
            c, j = nb.get("comm_channel"), nb.get("device")
            if not isinstance(c, int) or isinstance(c, bool) or not 0 <= c < len(raw_ch):
                raise InputError(f"comm_channel {c!r} is not a channel index (0..{len(raw_ch) - 1})",
                                 source=source, field=f"{at}.comm_channel")
            if not isinstance(j, int) or isinstance(j, bool) or not 0 <= j < len(raw_dev):
                raise InputError(f"device {j!r} is not a device index (0..{len(raw_dev) - 1})",
                                 source=source, field=f"{at}.device")
            routes[c].append((devices[i].name, devices[j].name))
    channels = []
    for c, ch in enumerate(raw_ch):
        at = f"comm_channels[{c}]"
        ch = require_mapping(ch, source=source, field=at, what="a channel")
        gbps = require_number(ch.get("bandwidth"), source=source, field=f"{at}.bandwidth", positive=True,
                              minimum=MIN_RATE * 8 / 1e9)  # Gbit/s: at least 1 byte/s
        channels.append(Channel(name=f"{ch.get('type', 'link')}-{c}", bandwidth=gbps * 1e9 / 8, latency=0.0,
                                routes=tuple(routes[c])))
    title = name or data.get("name") or (source.rsplit("/", 1)[-1].removesuffix(".json") if source else "exprimo")
    return DeviceGraph(str(title), devices, channels, source=source)
