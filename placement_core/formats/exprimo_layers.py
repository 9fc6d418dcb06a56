"""Exprimo's layers as ops: output shapes and the cost terms of its Paleo-based model, layer by layer.

Shapes are NHWC as in the files; FLOPs and bytes follow docs/design.md §4 for our fields and the
thesis' published code for the ``exprimo-2020`` terms.
"""

from __future__ import annotations

import math
from typing import Any

from ..base.errors import MAX_QUANTITY, InputError
from ..model.graph import BYTES_PER_FLOAT as F
from ..model.graph import Op
from .network import MAX_DIM

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


def layer_op(name: str, spec: dict, parents: list[str], ins: list[list[int]], parent_types: list[str],
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
