"""Exports of what users make: placements, PyTorch device maps and snippets, archives, histories.

Pure functions over core objects (no torch needed): the device map names, for
every op, the torch device its module should live on, so a placement found
here can be pasted into a training script.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Iterable

import numpy as np

from .devices import DeviceGraph
from .errors import InputError
from .graph import Graph


def torch_device(name: str, kind: str) -> str:
    """``gpu2`` -> ``cuda:2``, ``cpu0`` -> ``cpu``; names that already are torch devices stay."""
    if re.fullmatch(r"(cuda(:\d+)?|cpu(:\d+)?|mps)", name):
        return name.split(":")[0] if name.startswith("cpu") else name
    m = re.fullmatch(r"(?:gpu|cuda)(\d+)", name)
    if m:
        return f"cuda:{m.group(1)}"
    return "cpu" if kind == "cpu" else f"cuda:{name[-1] if name[-1:].isdigit() else 0}"


def torch_device_map(placement: np.ndarray, graph: Graph, devices: DeviceGraph) -> dict[str, str]:
    """Op (or, where the op came from a module, the module path) -> torch device string."""
    out: dict[str, str] = {}
    for op, d in zip(graph.ops, placement):
        dev = devices.devices[int(d)]
        key = op.module or op.name
        out.setdefault(key, torch_device(dev.name, dev.kind))
    return out


def torch_snippet(placement: np.ndarray, graph: Graph, devices: DeviceGraph) -> str:
    """A pasteable Python snippet that moves each submodule of ``model`` to its device."""
    mapping = {k: v for k, v in torch_device_map(placement, graph, devices).items()
               if any(o.module == k for o in graph.ops)}
    lines = [f"# Placement of {graph.name} on {devices.name}: move each submodule to its device.",
             "# Tensors must follow: wrap the model with placement_core.torch (apply_placement) or move inputs",
             "# in forward(); see docs/torch.md.",
             "DEVICE_MAP = {"]
    lines += [f"    {k!r}: {v!r}," for k, v in mapping.items()]
    lines += ["}", "", "", "def place(model):",
              "    for name, module in model.named_modules():",
              "        if name in DEVICE_MAP:",
              "            module.to(DEVICE_MAP[name])",
              "    return model", ""]
    return "\n".join(lines)


def rows_to_csv(rows: Iterable[dict], path: str | Path | None = None) -> str:
    rows = list(rows)
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    text = buf.getvalue()
    if path is not None:
        Path(path).write_text(text)
    return text


def rows_to_parquet(rows: list[dict], path: str | Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError("Parquet export needs pyarrow", field="--format",
                         fix='Install it (pip install -e ".[app]") or export CSV') from None
    if not rows:
        raise InputError("there is nothing to export", field="--what")
    columns = {k: [r[k] for r in rows] for k in rows[0]}
    pq.write_table(pa.table(columns), str(path))


def archive_rows(elites, graph: Graph, devices: DeviceGraph, descriptor_names: list[str]) -> list[dict]:
    """Flat rows for an archive: niche bins, descriptor values, objective, devices used, assignment."""
    rows = []
    names = devices.names
    for e in sorted(elites, key=lambda e: e["objective"]):
        row = {f"{n}_bin": int(b) for n, b in zip(descriptor_names, e["niche"])}
        row.update({n: float(v) for n, v in zip(descriptor_names, e["descriptors"])})
        row["objective_s"] = float(e["objective"])
        row["assignment"] = " ".join(names[int(i)] for i in e["placement"])
        rows.append(row)
    return rows
