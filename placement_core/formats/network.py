"""The ``placement-network/1`` JSON format (docs/formats.md), read and written."""

from __future__ import annotations

from typing import Any

from ..base.errors import InputError, check_fields, require_list, require_mapping, require_name, require_number
from ..model.graph import Graph, Op

FORMAT = "placement-network/1"

_OP_FIELDS = {"name", "kind", "inputs", "fwd_flops", "bwd_flops", "bwd_weight_flops", "groups", "output_bytes",
              "param_bytes", "mem_bytes", "shape", "times", "module", "exprimo"}
_NUMBER_FIELDS = ("fwd_flops", "bwd_flops", "output_bytes", "param_bytes", "mem_bytes")
# Far beyond any real network, small enough that sizes derived from them stay exact floats.
MAX_BATCH = 2**31 - 1
MAX_DIM = 2**40


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def network_from_dict(data: Any, source: str | None = None) -> Graph:
    data = require_mapping(data, source=source, field=None, what="a network")
    fmt = data.get("format")
    if fmt != FORMAT:
        raise InputError(f"unknown format {fmt!r}", source=source, field="format",
                         fix=f'Set "format": "{FORMAT}" (or load an Exprimo network file, which has "layers")')
    name = require_name(data.get("name", "network"), source=source, field="name")
    batch = data.get("batch_size", 1)
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise InputError(f"batch_size must be an integer from 1 to {MAX_BATCH}, got {_short(batch)}",
                         source=source, field="batch_size", fix="Write the batch size the sizes were computed for")
    raw_ops = require_list(data.get("ops"), source=source, field="ops", what="a list of ops")
    ops = [_op_from_dict(raw, i, source) for i, raw in enumerate(raw_ops)]
    return Graph(name, ops, batch, source=source, precision=data.get("precision", "fp32"))


def _op_from_dict(raw: Any, i: int, source: str | None) -> Op:
    at = f"ops[{i}]"
    raw = require_mapping(raw, source=source, field=at, what="an op")
    name = require_name(raw.get("name"), source=source, field=f"{at}.name")
    check_fields(raw, _OP_FIELDS, source=source, at=at)
    kind = raw.get("kind", "other")
    if not isinstance(kind, str) or not kind:
        raise InputError(f"kind must be a string, got {kind!r}", source=source, field=f"{at}.kind",
                         fix='Use e.g. "conv", "linear", "pool", "elementwise"')
    inputs: list[str] = []
    input_bytes: dict[str, float] = {}
    for j, inp in enumerate(require_list(raw.get("inputs", []), source=source, field=f"{at}.inputs",
                                         what="a list of input op names")):
        f = f"{at}.inputs[{j}]"
        if isinstance(inp, dict):
            parent = require_name(inp.get("op"), source=source, field=f"{f}.op")
            input_bytes[parent] = require_number(inp.get("bytes"), source=source, field=f"{f}.bytes")
        else:
            parent = require_name(inp, source=source, field=f)
        inputs.append(parent)
    values = {k: require_number(raw.get(k, 0), source=source, field=f"{at}.{k}") for k in _NUMBER_FIELDS}
    shape = raw.get("shape", [])
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_DIM
                                              for s in shape):
        raise InputError(f"shape must be a list of integers from 0 to {MAX_DIM}, got {_short(shape)}",
                         source=source, field=f"{at}.shape", fix="Write e.g. [128, 64, 56, 56]")
    times = _times_from_dict(raw.get("times", {}), f"{at}.times", source)
    module = raw.get("module")
    if module is not None and not isinstance(module, str):
        raise InputError("module must be a string", source=source, field=f"{at}.module")
    exprimo = raw.get("exprimo")
    if exprimo is not None:
        exprimo = _exprimo_terms(exprimo, f"{at}.exprimo", source)
    weight = raw.get("bwd_weight_flops")
    if weight is not None:
        weight = require_number(weight, source=source, field=f"{at}.bwd_weight_flops")
        if weight > values["bwd_flops"]:
            raise InputError(f"bwd_weight_flops ({weight:g}) exceeds bwd_flops ({values['bwd_flops']:g})",
                             source=source, field=f"{at}.bwd_weight_flops",
                             fix="Give the weight-gradient part of the backward, at most bwd_flops (or leave it out)")
    groups = raw.get("groups", 1)
    if isinstance(groups, bool) or not isinstance(groups, int) or not 1 <= groups <= MAX_DIM:
        raise InputError(f"groups must be a positive integer, got {_short(groups)}", source=source,
                         field=f"{at}.groups", fix="Give a convolution's groups (1, the default, for an ordinary one)")
    return Op(name=name, kind=kind, inputs=tuple(inputs), shape=tuple(shape), times=times,
              input_bytes=input_bytes, module=module, exprimo=exprimo, bwd_weight_flops=weight, groups=groups,
              **values)


def _times_from_dict(raw: Any, at: str, source: str | None) -> dict[str, dict[str, float]]:
    raw = require_mapping(raw, source=source, field=at, what="measured times per device")
    out: dict[str, dict[str, float]] = {}
    for dev, phases in raw.items():
        phases = require_mapping(phases, source=source, field=f"{at}.{dev}", what='{"fwd": s, "bwd": s}')
        entry = {}
        for ph, t in phases.items():
            if ph not in ("fwd", "bwd", "update"):
                raise InputError(f"unknown phase {ph!r}", source=source, field=f"{at}.{dev}",
                                 fix='Use "fwd", "bwd" or "update"')
            entry[ph] = require_number(t, source=source, field=f"{at}.{dev}.{ph}", maximum=1e7)
        out[dev] = entry
    return out


def _exprimo_terms(raw: Any, at: str, source: str | None) -> dict[str, tuple]:
    raw = require_mapping(raw, source=source, field=at, what="Exprimo cost terms")
    out = {}
    for ph in ("fwd", "bwd"):
        item = raw.get(ph)
        if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], list)):
            raise InputError("expected [flops, [bytes, ...]]", source=source, field=f"{at}.{ph}")
        flops = require_number(item[0], source=source, field=f"{at}.{ph}[0]")
        mem = [require_number(b, source=source, field=f"{at}.{ph}[1]") for b in item[1]]
        out[ph] = (flops, mem)
    return out


def network_to_dict(graph: Graph) -> dict:
    ops = []
    for op in graph.ops:
        d: dict[str, Any] = {"name": op.name, "kind": op.kind}
        d["inputs"] = [{"op": p, "bytes": _num(op.input_bytes[p])} if p in op.input_bytes else p
                       for p in op.inputs]
        for k in _NUMBER_FIELDS:
            d[k] = _num(getattr(op, k))
        if op.bwd_weight_flops is not None:
            d["bwd_weight_flops"] = _num(op.bwd_weight_flops)
        if op.groups != 1:
            d["groups"] = op.groups
        d["shape"] = list(op.shape)
        if op.times:
            d["times"] = {dev: {ph: t for ph, t in v.items()} for dev, v in op.times.items()}
        if op.module:
            d["module"] = op.module
        if op.exprimo:
            d["exprimo"] = {ph: [_num(fl), [_num(b) for b in mem]] for ph, (fl, mem) in op.exprimo.items()}
        ops.append(d)
    out = {"format": FORMAT, "name": graph.name, "batch_size": graph.batch_size, "ops": ops}
    if graph.precision != "fp32":  # omitted for fp32: files without the field read and write back unchanged
        out["precision"] = graph.precision
    return out


def _num(x: float) -> int | float:
    """Integers stay integers in JSON so files diff cleanly."""
    return int(x) if float(x).is_integer() and abs(x) < 2**63 else float(x)


def network_hash(graph: Graph) -> str:
    """The network's identity in the run store and the benchmark tables: equal content, equal hash
    (the batch size is part of the content)."""
    from ..base.jsonio import content_hash
    return content_hash(network_to_dict(graph))
