"""Apply a placement to a real model: each fx node runs on its op's device, tensors move across.

:func:`place` rewrites the traced graph: every module (and every parameter
read through ``get_attr``) moves to its op's device, and a ``_move`` node is
inserted right after a tensor's producer for each other device that consumes
it, so the copy starts as soon as the tensor exists, as in the simulator.
Autograd then routes gradients back across the same copies, so training the
placed module gives the unplaced model's outputs and gradients.

Also here: which device every fx node runs on (shared with the multi-process
runner), and the placement exported as JSON or as a Python snippet.
"""

from __future__ import annotations

import difflib
from typing import Hashable, Mapping, TypeVar

from ..base.errors import InputError

D = TypeVar("D", bound=Hashable)

# Methods and functions that write into their first argument.
_INPLACE_FUNCS = {"iadd", "isub", "imul", "itruediv", "iand", "ior", "ixor"}


def _unknown(problem: str, name: str, known, hint: str) -> InputError:
    """An unknown op or module name, with the closest known one when there is one."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return InputError(problem, field="placement", fix=(f"Did you mean {close[0]!r}? " if close else "") + hint)


def check_assignment(graph, assignment: Mapping[str, object]) -> None:
    """Every op of ``graph`` has a device, and every key names an op."""
    names = graph.index
    for op in assignment:
        if op not in names:
            raise _unknown(f"op {op!r} is not in the model's graph", op, names,
                           "A placement of a coarsened network needs its .groups.json (--network NET.json)")
    missing = [op.name for op in graph.ops if op.name not in assignment]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise InputError(f"no device for op(s) {shown}", field="placement",
                         fix="Assign every op of the network (placement files from the optimizers do)")


def node_devices(gm, node_op: Mapping[str, str], op_device: Mapping[str, D]) -> dict[str, D]:
    """The device of every fx node: its op's; else its first input's; else its first user's.

    Parameters read through ``get_attr`` live with their first consumer; Python
    values (sizes) are computed where their input is.
    """
    dev: dict[str, D] = {}
    pending = []
    for node in gm.graph.nodes:
        if node.op == "output":
            continue
        if node.name in node_op:
            dev[node.name] = op_device[node_op[node.name]]
            continue
        src = None
        if node.op != "get_attr":
            src = next((dev[a.name] for a in node.all_input_nodes if a.name in dev and a.op != "get_attr"), None)
        if src is None:
            pending.append(node)
        else:
            dev[node.name] = src
    fallback = next(iter(op_device.values()))
    for node in reversed(pending):  # users come later in graph order, so resolve from the back
        user = next((u for u in _users_in_order(node) if u.name in dev), None)
        dev[node.name] = dev[user.name] if user is not None else fallback
    return dev


def _users_in_order(node):
    order = {n: i for i, n in enumerate(node.graph.nodes)}
    return sorted(node.users, key=order.__getitem__)


def mutates_input(node, gm) -> bool:
    """Does this node write into a tensor it reads (``x += y``, ``relu_``, ``ReLU(inplace=True)``)?"""
    if node.op == "call_function":
        name = getattr(node.target, "__name__", "")
        if name in _INPLACE_FUNCS or node.kwargs.get("inplace") is True:
            return True
        schema = getattr(node.target, "_schema", None)  # ATen overloads say so in their schema
        return bool(schema is not None and any(a.alias_info is not None and a.alias_info.is_write
                                               for a in schema.arguments))
    if node.op == "call_method":
        return str(node.target).endswith("_") and not str(node.target).endswith("__")
    if node.op == "call_module":
        return bool(getattr(gm.get_submodule(node.target), "inplace", False))
    return False


def shared_module_conflicts(gm, devices: Mapping[str, object]) -> None:
    """A module with parameters called from two devices would need its weights in two places."""
    first: dict[str, tuple[str, object]] = {}
    for node in gm.graph.nodes:
        if node.op != "call_module":
            continue
        mod = gm.get_submodule(node.target)
        if not any(True for _ in mod.parameters()):
            continue
        if node.target in first and first[node.target][1] != devices[node.name]:
            other, dev = first[node.target]
            raise InputError(f"module {node.target!r} has parameters and is called by two ops placed on "
                             f"different devices ({dev} and {devices[node.name]})", field="placement",
                             fix=f"Place every call of {node.target} (ops {node.target}, {node.target}#2, ...) "
                                 f"on one device")
        first.setdefault(node.target, (node.name, devices[node.name]))


def _move(value, device):
    """Copy every tensor in ``value`` to ``device`` (differentiable)."""
    import torch
    from torch.utils._pytree import tree_map
    return tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, value)


def place(model, assignment: Mapping[str, str], input_shape, *, traced=None,
          modules: Mapping[str, str] | None = None):
    """The model as an ``nn.Module`` whose ops run on ``assignment[op]`` (a torch device string).

    ``modules`` (module path -> device, as :func:`module_devices` gives it) puts
    every op of a module on that device; ``assignment`` then only needs the
    ops no module covers, and overrides the modules where both name an op.
    The model's own modules and parameters are moved (like ``model.to``), so an
    optimizer over ``placed.parameters()`` trains the model. Pass the model on
    the CPU; inputs may be anywhere; outputs stay on the device of their op.
    """
    import torch
    from torch.fx.node import map_arg

    from .model_import import trace_model

    traced = traced if traced is not None else trace_model(model, input_shape)
    if modules:
        assignment = expand_modules(traced.graph, assignment, modules)
    check_assignment(traced.graph, assignment)
    for op, dev in assignment.items():
        try:
            torch.device(dev)
        except (RuntimeError, TypeError):
            raise InputError(f"{dev!r} is not a torch device", field=f"placement.{op}",
                             fix="Use e.g. cpu, cuda:0") from None
    gm = traced.gm
    devs = node_devices(gm, traced.node_op, {op: str(torch.device(d)) for op, d in assignment.items()})
    shared_module_conflicts(gm, devs)
    for node in gm.graph.nodes:
        if node.op == "call_module":
            gm.get_submodule(node.target).to(devs[node.name])
        elif node.op == "get_attr":
            _move_attr(gm, node.target, devs[node.name])
    graph = gm.graph
    tensors = set(traced.node_op) | {n.name for n in graph.nodes if n.op == "get_attr"}
    moves: dict[tuple[str, str], object] = {}

    def moved(a, device: str):
        key = (a.name, device)
        if key not in moves:
            with graph.inserting_after(a):
                moves[key] = graph.call_function(_move, (a, device))
            devs[moves[key].name] = device
        return moves[key]

    originals = list(graph.nodes)
    for node in originals:
        if node.op == "placeholder" and node.name in tensors:
            # the input arrives wherever the caller has it; bring it to the input op's device first
            users = list(node.users)
            entry = moved(node, devs[node.name])
            for u in users:
                u.replace_input_with(node, entry)
            tensors.add(entry.name)
    for node in originals:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        here = devs[node.name]

        def remap(a, here=here):
            if a.name in tensors and devs.get(a.name) != here:
                return moved(a, here)
            return a
        node.args = map_arg(node.args, remap)
        node.kwargs = map_arg(node.kwargs, remap)
    graph.lint()
    gm.recompile()
    gm.placement = dict(assignment)
    return gm


def _move_attr(gm, target: str, device: str) -> None:
    import torch
    owner_path, _, name = target.rpartition(".")
    owner = gm.get_submodule(owner_path) if owner_path else gm
    value = getattr(owner, name)
    if isinstance(value, torch.nn.Parameter):
        value.data = value.data.to(device)  # keeps the Parameter, so optimizers still hold it
    elif name in owner._buffers:
        owner._buffers[name] = value.to(device)
    elif isinstance(value, torch.Tensor):
        setattr(owner, name, value.to(device))


# -- export ---------------------------------------------------------------------------------------

TORCH_FORMAT = "placement-torch/1"


def module_devices(graph, assignment: Mapping[str, str]) -> dict[str, str]:
    """The shortest module -> device map: a module appears when all of its ops share one device."""
    seen: dict[str, set] = {}
    for op in graph.ops:
        if op.kind == "input" or not op.module:
            continue
        for module in op.module.split(","):
            parts = module.split(".")
            for k in range(1, len(parts) + 1):
                seen.setdefault(".".join(parts[:k]), set()).add(assignment[op.name])
    out = {}
    for path in sorted(seen, key=lambda p: (p.count("."), p)):
        if len(seen[path]) != 1:
            continue
        parent = path.rpartition(".")[0]
        if parent and parent in seen and len(seen[parent]) == 1:
            continue  # the parent already says it
        out[path] = next(iter(seen[path]))
    return out


def _module_prefixes(op) -> list[str]:
    """The module paths an op belongs to, deepest first (as :func:`module_devices` counts them)."""
    if op.kind == "input" or not op.module:
        return []
    out = []
    for module in op.module.split(","):
        parts = module.split(".")
        out += [".".join(parts[:k]) for k in range(len(parts), 0, -1)]
    return out


def expand_modules(graph, ops: Mapping[str, str], modules: Mapping[str, str]) -> dict[str, str]:
    """op -> device from a module -> device map plus op entries for what no module covers (ops win)."""
    known = {p for op in graph.ops for p in _module_prefixes(op)}
    for path in modules:
        if path not in known:
            raise _unknown(f"module {path!r} holds no op of the model's graph", path, sorted(known),
                           "Use module paths such as layer1 or layer1.0.conv1")
    out = {}
    for op in graph.ops:
        if op.name in ops:
            out[op.name] = ops[op.name]
            continue
        device = next((modules[p] for p in _module_prefixes(op) if p in modules), None)
        if device is not None:
            out[op.name] = device
    out.update({k: v for k, v in ops.items() if k not in out})  # unknown names: check_assignment says so
    return out


def short_placement(graph, assignment: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(modules, ops): :func:`module_devices`, plus the ops it does not cover; they expand to ``assignment``."""
    full = {op.name: assignment[op.name] for op in graph.ops}
    first: dict[str, int] = {}
    for i, op in enumerate(graph.ops):
        for p in _module_prefixes(op):
            first.setdefault(p, i)
    found = module_devices(graph, assignment)
    modules = {p: found[p] for p in sorted(found, key=lambda p: (first[p], p.count(".")))}  # in graph order
    covered = expand_modules(graph, {}, modules)
    ops = {name: device for name, device in full.items() if covered.get(name) != device}
    if expand_modules(graph, ops, modules) != full:  # cannot happen (a listed module's ops share a device)
        return {}, full
    return modules, ops


def torch_placement_dict(graph, assignment: Mapping[str, str], *, source: str, input_shape) -> dict:
    """``placement-torch/1``: op -> torch device (authoritative) and module -> device (for reading)."""
    return {"format": TORCH_FORMAT, "model": source, "input_shape": list(input_shape),
            "ops": {op.name: assignment[op.name] for op in graph.ops},
            "modules": module_devices(graph, assignment)}


def placement_snippet(graph, assignment: Mapping[str, str], *, source: str, input_shape) -> str:
    """Python a user can paste to run the model with this placement."""
    from .sources import parse_source
    src = parse_source(source)
    if src.kind == "torchvision":
        args = "".join(f", {k}={v!r}" for k, v in src.kwargs.items())
        build = f"import torchvision\n\nmodel = torchvision.models.get_model({src.target!r}, weights=None{args})"
    else:
        build = f"from placement_core.torch.sources import load_model\n\nmodel = load_model({source!r})"
    devices = sorted(set(assignment.values()))
    modules, ops = short_placement(graph, assignment)
    lines = [f"# {graph.name} placed on {', '.join(devices)} ({len(graph)} ops), written by placement "
             f"export-placement.",
             "# MODULES puts every op of a module (by its path) on one device; OPS places the ops no module",
             "# covers, by the names `placement import-model` gives them.",
             "from placement_core.torch.apply import place", build, "", "MODULES = {"]
    lines += [f"    {path!r}: {device!r}," for path, device in modules.items()]
    lines += ["}", "OPS = {"]
    lines += [f"    {name!r}: {device!r}," for name, device in ops.items()]
    lines += ["}", f"model = place(model, OPS, input_shape={tuple(input_shape)!r}, modules=MODULES)",
              "# train as usual: optimizer = torch.optim.SGD(model.parameters(), lr=0.01); outputs stay on the "
              "device of the last op", ""]
    return "\n".join(lines)
