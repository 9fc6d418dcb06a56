"""Import of the thesis' Exprimo files: layer networks, device graphs, placements.

The imported ops are exactly the flattened layers, named by their path
(``Mixed_5b/Branch_3/AvgPool_0a_3x3``), so Exprimo placement files load too.
Shapes are NHWC as in the files. Besides our own FLOP/byte fields (DESIGN §3,
used by the default profile) each op carries the cost terms of Exprimo's
Paleo-based model so the ``exprimo-2020`` profile reproduces its numbers.
"""

from __future__ import annotations

import math
from typing import Any

from .devices import MIN_RATE, Channel, Device, DeviceGraph
from .errors import MAX_QUANTITY, InputError, require_list, require_mapping, require_name, require_number
from .graph import BYTES_PER_FLOAT as F
from .graph import Graph, Op
from .netformat import MAX_BATCH, MAX_DIM

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
            op, out = _layer_op(name, spec, parents[name], in_shapes, parent_types, batch)
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
        if isinstance(spec.get("device"), list):
            raise InputError("a list-valued device (a layer sharded across devices by output channel) "
                             "is not supported yet", source=source, field=f"{path}.device",
                             fix="Assign the layer to a single device index")
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
    from .graph import topological_order
    skeleton = [Op(name=n, inputs=tuple(dict.fromkeys(parents[n]))) for n in names]
    return [op.name for op in topological_order(skeleton, source)]


def _prod(shape) -> int:
    return int(math.prod(shape))


def _same_valid(h: int, w: int, kh: int, kw: int, sh: int, sw: int, padding: Any, where: str):
    """Paleo/TensorFlow output size and the padding it implies."""
    if padding == "VALID":
        return math.ceil((h - kh + 1) / sh), math.ceil((w - kw + 1) / sw), 0, 0
    if padding == "SAME":
        oh, ow = math.ceil(h / sh), math.ceil(w / sw)
        return oh, ow, ((oh - 1) * sh + kh - h) // 2, ((ow - 1) * sw + kw - w) // 2
    if isinstance(padding, list) and len(padding) == 2 and all(isinstance(p, int) for p in padding):
        ph, pw = padding
        return (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1, ph, pw
    raise InputError(f"padding must be SAME, VALID or [ph, pw], got {padding!r}", field=where,
                     fix='Use "SAME" or "VALID"')


def _conv_gemm(inp, filt, out, pad_h, pad_w, holes_in_inputs=0.0):
    """Paleo's GEMM convolution model: FLOPs and the three memory terms (bytes)."""
    flops = 2 * filt[0] * filt[1] * filt[2] * out[1] * out[2] * filt[3] * inp[0]
    if holes_in_inputs > 0:
        flops += 2 * _prod(inp) * (1.0 - holes_in_inputs)
    padded = inp[0] * (inp[1] + 2 * pad_h) * (inp[2] + 2 * pad_w) * inp[3]
    return float(flops), [float(padded * F), float(_prod(filt) * F), float(_prod(out) * F)]


def _conv_backprop_data(inp, filt, out, strides, pad_h, pad_w):
    """Paleo's input-gradient convolution (TensorFlow's Conv2DBackpropInput geometry)."""
    eh = (out[1] - 1) * strides[1] + 1
    ew = (out[2] - 1) * strides[2] + 1
    before_h, before_w = filt[0] - 1 - pad_h, filt[1] - 1 - pad_w
    after_h = inp[1] + filt[0] - 1 - eh - before_h
    after_w = inp[2] + filt[1] - 1 - ew - before_w
    if abs(before_h - after_h) == 1:
        eh += 1
    if abs(before_w - after_w) == 1:
        ew += 1
    ph, pw = min(before_h, after_h), min(before_w, after_w)
    holes = (eh * ew - out[1] * out[2]) / (eh * ew)
    d_in = [out[0], eh, ew, out[3]]
    d_filt = [filt[0], filt[1], filt[3], filt[2]]
    d_out = [out[0], (eh + 2 * ph - filt[0]) + 1, (ew + 2 * pw - filt[1]) + 1, filt[2]]
    return _conv_gemm(d_in, d_filt, d_out, ph, pw, holes_in_inputs=holes)


def _ints(value: Any, n: int | None, where: str, minimum: int | None = 1, allow: tuple = ()) -> list[int]:
    """A list of ``n`` integers (any length >= 1 when n is None), each >= minimum or in ``allow``."""
    ok = (isinstance(value, list) and (len(value) == n if n is not None else 1 <= len(value) <= 8)
          and all(isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**31 for v in value))
    if not ok:
        what = f"a list of {n} integers" if n is not None else "a list of 1 to 8 integers"
        raise InputError(f"expected {what}, got {value!r}", field=where)
    if minimum is not None and any(v < minimum and v not in allow for v in value):
        raise InputError(f"sizes must be at least {minimum}, got {value!r}", field=where)
    return list(value)


def _layer_op(name: str, spec: dict, parents: list[str], ins: list[list[int]], parent_types: list[str],
              batch: int) -> tuple[Op, list[int]]:
    t = spec["type"]
    at = spec["_at"]
    none = (0.0, [])
    ex_fwd = ex_bwd = none
    params = 0
    fwd = 0.0
    # The first layer (fed only by the network's input) needs no input gradient.
    first = bool(parent_types) and all(pt == "source" for pt in parent_types)

    def one_input() -> list[int]:
        if len(ins) != 1:
            raise InputError(f"a {t} layer needs exactly one parent, got {len(ins)}", field=f"{at}.parents",
                             fix="List exactly one parent layer")
        return ins[0]

    def nhwc(shape: list[int]) -> list[int]:
        if len(shape) != 4:
            raise InputError(f"a {t} layer needs a 4-D NHWC input, got shape {shape}", field=f"{at}.parents",
                             fix="Check the parent layer")
        return shape

    if t == "Input":
        tensor = _ints(spec.get("tensor"), None, f"{at}.tensor")
        out = [batch] + tensor[1:]
        kind, traffic, bwd_mult = "input", 0.0, 0.0
    elif t in ("Convolution", "Deconvolution"):
        x = nhwc(one_input())
        filt = _ints(spec.get("filter"), 4, f"{at}.filter", allow=(-1,))
        strides = _ints(spec.get("strides", [1, 1, 1, 1]), 4, f"{at}.strides")
        if t == "Convolution":
            if filt[2] == -1:
                filt[2] = x[3]
            if filt[2] != x[3]:
                raise InputError(f"filter expects {filt[2]} input channels but the input has {x[3]}",
                                 field=f"{at}.filter", fix="Fix the filter, or write -1 to take it from the input")
            oh, ow, ph, pw = _same_valid(x[1], x[2], filt[0], filt[1], strides[1], strides[2],
                                         spec.get("padding"), f"{at}.padding")
            out = [x[0], oh, ow, filt[3]]
            if oh <= 0 or ow <= 0:
                raise InputError(f"the output would be empty ({oh}x{ow})", field=at,
                                 fix="The kernel is larger than the input; check filter and padding")
            ex_fwd = _conv_gemm(x, filt, out, ph, pw)
            if "data" not in parents:
                ex_bwd = _conv_backprop_data(x, filt, out, strides, ph, pw)
            fwd = 2.0 * filt[0] * filt[1] * filt[2] * filt[3] * oh * ow * x[0]
        else:
            out = _ints(spec.get("output_shape"), 4, f"{at}.output_shape")
            if filt[2] == -1 or filt[3] == -1:
                raise InputError("a Deconvolution filter needs explicit channels", field=f"{at}.filter")
            out[0] = x[0]
            # Paleo costs a deconvolution through the convolution it transposes.
            oh, ow, ph, pw = _same_valid(out[1], out[2], filt[0], filt[1], strides[1], strides[2],
                                         spec.get("padding"), f"{at}.padding")
            conv_out = [out[0], oh, ow, filt[3]]
            if conv_out[1:] != x[1:]:
                raise InputError(f"output_shape {out} does not give input {x} back", field=f"{at}.output_shape",
                                 fix="Check output_shape, strides and padding")
            if "data" not in parents:
                ex_fwd = _conv_backprop_data(out, filt, conv_out, strides, ph, pw)
            ex_bwd = _conv_gemm(out, filt, conv_out, ph, pw)
            fwd = 2.0 * filt[0] * filt[1] * filt[2] * filt[3] * x[1] * x[2] * x[0]
        params = (_prod(filt) + filt[3]) * F
        kind = "conv" if t == "Convolution" else "deconv"
        traffic = (_prod(x) + _prod(out)) * F + params
        bwd_mult = 1.0 if first else 2.0
    elif t in ("Pooling", "AvgPool"):
        x = nhwc(one_input())
        k = _ints(spec.get("ksize"), 4, f"{at}.ksize")
        s = _ints(spec.get("strides", [1, 1, 1, 1]), 4, f"{at}.strides")
        oh, ow, _, _ = _same_valid(x[1], x[2], k[1], k[2], s[1], s[2], spec.get("padding"), f"{at}.padding")
        if oh <= 0 or ow <= 0:
            raise InputError(f"the output would be empty ({oh}x{ow})", field=at, fix="Check ksize and padding")
        out = [x[0], oh, ow, x[3]]
        flops = 2 * k[1] * k[2] * x[3] * oh * ow * x[0]
        ex_fwd = ex_bwd = (float(flops), [float(_prod(x) * F), float(_prod(out) * F)])
        fwd = float(k[1] * k[2] * x[3] * oh * ow * x[0])
        kind, traffic, bwd_mult = "pool", (_prod(x) + _prod(out)) * F, 1.0
    elif t == "UpSampling2D":
        x = nhwc(one_input())
        k = _ints(spec.get("ksize"), 4, f"{at}.ksize")
        out = [x[0], x[1] * k[1], x[2] * k[2], x[3]]
        fwd = float(_prod(out))
        kind, traffic, bwd_mult = "upsample", (_prod(x) + _prod(out)) * F, 1.0
    elif t == "Dropout":
        x = one_input()
        out = list(x)
        ex_fwd = ex_bwd = (float(_prod(x)), [float(_prod(x) * F), float(_prod(out) * F)])
        fwd = float(_prod(x))
        kind, traffic, bwd_mult = "dropout", 2 * _prod(x) * F, 1.0
    elif t == "Concatenate":
        if not ins:
            raise InputError("a Concatenate layer needs parents", field=f"{at}.parents")
        dim = spec.get("dim", 3)
        if isinstance(dim, bool) or not isinstance(dim, int) or not all(len(s) == len(ins[0]) for s in ins) or not -len(ins[0]) <= dim < len(ins[0]):
            raise InputError(f"cannot concatenate shapes {ins} along dim {dim!r}", field=f"{at}.dim")
        out = list(ins[0])
        out[dim] = sum(s[dim] for s in ins)
        for s in ins:
            if [v for i, v in enumerate(s) if i != dim % len(s)] != [v for i, v in enumerate(ins[0]) if i != dim % len(s)]:
                raise InputError(f"cannot concatenate shapes {ins} along dim {dim}", field=f"{at}.parents",
                                 fix="All inputs must agree except along dim")
        fwd = float(_prod(out))
        kind, traffic, bwd_mult = "concat", 2 * _prod(out) * F, 1.0
    elif t == "Reshape":
        x = one_input()
        shape = _ints(spec.get("output_shape"), None, f"{at}.output_shape", allow=(-1,))
        shape = [x[0]] + shape[1:] if shape else shape
        if shape.count(-1) == 1:
            rest = _prod([v for v in shape if v != -1])
            shape[shape.index(-1)] = _prod(x) // max(rest, 1)
        if _prod(shape) != _prod(x):
            raise InputError(f"cannot reshape {x} to {spec.get('output_shape')}", field=f"{at}.output_shape",
                             fix="The element count must stay the same")
        out = shape
        kind, traffic, bwd_mult = "reshape", 0.0, 0.0
    elif t == "Elementwise":
        if not ins:
            raise InputError("an Elementwise layer needs parents", field=f"{at}.parents")
        if any(s != ins[0] for s in ins):
            raise InputError(f"Elementwise inputs must have one shape, got {ins}", field=f"{at}.parents")
        out = list(ins[0])
        fwd = float(_prod(out) * max(len(ins) - 1, 1))
        kind, traffic, bwd_mult = "elementwise", (len(ins) + 1) * _prod(out) * F, 1.0
    elif t in ("Softmax", "Sigmoid"):
        x = one_input()
        if t == "Softmax":
            classes = spec.get("num_classes") or x[-1]
            if isinstance(classes, bool) or not isinstance(classes, int) or not 0 < classes < 2**31:
                raise InputError(f"num_classes must be a positive integer, got {classes!r}",
                                 field=f"{at}.num_classes")
            out = [x[0], classes]
        else:
            out = list(x)
        fwd = float(5 * _prod(out))
        kind, traffic, bwd_mult = ("softmax" if t == "Softmax" else "activation"), (_prod(x) + _prod(out)) * F, 1.0
    elif t == "InnerProduct":
        x = one_input()
        n_out = spec.get("num_outputs")
        if isinstance(n_out, bool) or not isinstance(n_out, int) or not 0 < n_out < 2**31:
            shown = repr(n_out) if len(repr(n_out)) <= 40 else repr(n_out)[:37] + "..."
            raise InputError(f"num_outputs must be a positive integer below 2^31, got {shown}",
                             field=f"{at}.num_outputs", fix="Write the layer's number of outputs")
        X = [x[0], _prod(x[1:])] if len(x) != 2 else list(x)
        W = [X[1], n_out]
        out = [X[0], n_out]
        ex_fwd = (2.0 * _prod(X) * n_out, [float(_prod(X) * F), float(_prod(W) * F), float(_prod(out) * F)])
        ex_bwd = (2.0 * _prod(out) * X[1], [float(_prod(out) * F), float(_prod(W) * F), float(_prod(X) * F)])
        params = (_prod(W) + n_out) * F
        fwd = 2.0 * X[1] * n_out * X[0]
        kind, traffic, bwd_mult = "linear", (_prod(X) + _prod(out)) * F + params, (1.0 if first else 2.0)
    else:  # pragma: no cover - SUPPORTED is checked while flattening
        raise InputError(f"unknown layer type {t!r}", field=f"{at}.type")

    _check_limits(at, out, {"output_bytes": _prod(out) * F, "fwd_flops": fwd, "bwd_flops": fwd * bwd_mult,
                            "param_bytes": params, "mem_bytes": traffic, "exprimo fwd FLOPs": ex_fwd[0],
                            "exprimo bwd FLOPs": ex_bwd[0], "exprimo fwd bytes": max(ex_fwd[1], default=0),
                            "exprimo bwd bytes": max(ex_bwd[1], default=0)})
    op = Op(name=name, kind=kind, inputs=tuple(dict.fromkeys(parents)), fwd_flops=float(fwd),
            bwd_flops=float(fwd * bwd_mult), output_bytes=float(_prod(out) * F), param_bytes=float(params),
            mem_bytes=float(traffic), shape=tuple(int(v) for v in out),
            exprimo={"fwd": ex_fwd, "bwd": ex_bwd})
    return op, out


def _check_limits(at: str, out: list[int], quantities: dict[str, float]) -> None:
    """Our format's limits (each dimension at most 2^40, each size and FLOP count at most 1e24), checked
    layer by layer: computed shapes compound (six 1000x up-samplings gave a 1.6e131 s makespan)."""
    big = [v for v in out if v > MAX_DIM]
    if big:
        raise InputError(f"the layer's output shape {out} has a dimension of {big[0]}, more than the limit of "
                         f"{MAX_DIM} (2^40)", field=at, fix="Check the layer's sizes (ksize, strides, output_shape) "
                                                            "and those of the layers before it")
    for what, value in quantities.items():
        if value > MAX_QUANTITY:
            raise InputError(f"the layer's {what} {float(value):g} is more than the limit of {MAX_QUANTITY:g} "
                             f"(output shape {out})", field=at,
                             fix="Check the layer's sizes and those of the layers before it")


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
