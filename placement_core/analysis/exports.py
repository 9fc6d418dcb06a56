"""Exports of what users make: placements, PyTorch device maps and snippets, archives, histories.

Pure functions over core objects (no torch needed): the device map names, for
every op, the torch device its module should live on, so a placement found
here can be pasted into a training script.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from ..model.devices import DeviceGraph
from ..model.sharding import gene_label
from ..base.errors import InputError
from ..model.graph import Graph


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
    # Names come from users' files: written with repr, a newline in one cannot end the comment and become code.
    lines = [f"# Placement of {graph.name!r} on {devices.name!r}: move each submodule to its device.",
             "# Tensors must follow: run it with placement_core.torch.apply.place (which inserts the copies),",
             "# or move inputs in forward(); see docs/torch.md.",
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


def rows_to_parquet(rows: list[dict], path: str | Path | io.BytesIO) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError("Parquet export needs pyarrow", field="--format",
                         fix='Install it (.venv/bin/pip install -e ".[app]") or export CSV') from None
    if not rows:
        raise InputError("there is nothing to export", field="--what")
    columns = {k: [r[k] for r in rows] for k in rows[0]}
    pq.write_table(pa.table(columns), path if isinstance(path, io.BytesIO) else str(path))


def archive_rows(elites, graph: Graph, devices: DeviceGraph, descriptor_names: list[str], splits=()) -> list[dict]:
    """Flat rows for an archive: niche bins, descriptor values, objective, devices used, assignment."""
    rows = []
    names = devices.names
    for e in sorted(elites, key=lambda e: e["objective"]):
        row = {f"{n}_bin": int(b) for n, b in zip(descriptor_names, e["niche"])}
        row.update({n: float(v) for n, v in zip(descriptor_names, e["descriptors"])})
        row["objective_s"] = float(e["objective"])
        row["assignment"] = " ".join(gene_label(int(i), names, splits) for i in e["placement"])
        rows.append(row)
    return rows


# -- exports of stored runs (the CLI's `placement runs export` and the dashboard's Runs page) -------------

RUN_EXPORTS = {"placement": ("json",), "torch": ("json",), "snippet": ("py",), "archive": ("csv", "parquet"),
               "history": ("csv",), "trace": ("json",), "benchmarks": ("csv",)}
_MIME = {"json": "application/json", "py": "text/x-python", "csv": "text/csv",
         "parquet": "application/vnd.apache.parquet"}


@dataclass(frozen=True)
class Export:
    data: bytes
    filename: str  # a suggested file name
    mime: str


def export_run(store, run_id: int, what: str, fmt: str | None = None) -> Export:
    """One export of a stored run, as bytes; InputError says why when the run has nothing of that kind."""
    from ..model.placement import placement_to_dict

    if what not in RUN_EXPORTS:
        raise InputError(f"unknown export {what!r}", field="--what", fix="Use one of: " + ", ".join(RUN_EXPORTS))
    allowed = RUN_EXPORTS[what]
    fmt = fmt or allowed[0]
    if fmt not in allowed:
        raise InputError(f"{what} exports as {' or '.join(allowed)}, not {fmt}", field="--format")
    r = store.get(run_id)
    if r.algorithm == "plan-archive" and what != "benchmarks":  # placement_core.store.plan_runs
        raise InputError(f"run {r.id} is a plan archive: cluster plans, not placements of one network", field="run",
                         fix="Browse it on the dashboard's Archive page (each plan's trace downloads there), or "
                             "export a plan with `placement plan ... --export megatron|nemo|stages`")
    if what in ("placement", "torch", "snippet", "trace") and r.best_placement is None:
        raise InputError(f"run {r.id} has no placement yet", field="run", fix="Wait for its first checkpoint")
    problem = store.problem(r.id) if what in ("placement", "torch", "snippet", "trace", "archive") else None
    if what == "placement":
        text = json.dumps(placement_to_dict(r.best_placement, problem.graph, problem.devices, problem.splits), indent=1)
    elif what == "torch":
        text = json.dumps(torch_device_map(r.best_placement, problem.graph, problem.devices), indent=1)
    elif what == "snippet":
        text = torch_snippet(r.best_placement, problem.graph, problem.devices)
    elif what == "trace":
        from ..simulate.chrome import chrome_trace
        ev = problem.simulate(r.best_placement, trace=True)
        text = json.dumps(chrome_trace(ev.result, problem.devices.names, [c.name for c in problem.devices.channels],
                                       title=f"run {r.id}: {r.network_name} on {r.devices_name}",
                                       graph=problem.graph))
    elif what == "archive":
        elites = store.archive_rows(r.id)
        if not elites:
            raise InputError(f"run {r.id} ({r.algorithm}) has no archive", field="--what",
                             fix="Archives come from map-elites runs")
        dims = [d["name"] for d in r.extras.get("archive_dimensions", [])] or \
            [f"dim{i}" for i in range(len(elites[0]["niche"]))]
        rows = archive_rows(elites, problem.graph, problem.devices, dims, problem.splits)
        if fmt == "parquet":
            buf = io.BytesIO()
            rows_to_parquet(rows, buf)
            return Export(buf.getvalue(), f"run{r.id}-archive.parquet", _MIME[fmt])
        text = rows_to_csv(rows)
    elif what == "history":
        text = rows_to_csv([{"evaluations": int(e), "best_s": b, "current_s": c}
                            for e, b, c in store.history(r.id).tolist()])
    else:  # benchmarks
        rows = benchmark_rows(store.benchmarks(run_id=r.id))
        if not rows:
            raise InputError(f"run {r.id} has no benchmarks", field="--what",
                             fix="Benchmark its placement from the dashboard's Benchmark page")
        text = rows_to_csv(rows)
    suffix = {"placement": "placement", "torch": "torch-devices", "snippet": "placement", "trace": "trace",
              "archive": "archive", "history": "history", "benchmarks": "benchmarks"}[what]
    return Export(text.encode(), f"run{r.id}-{suffix}.{fmt}", _MIME[fmt])


# -- benchmark comparisons: every stored measurement, or those of one network ------------------------------

BENCHMARK_COLUMNS = ("benchmark", "created", "network", "batch_size", "run", "placement", "runner", "devices",
                     "status", "simulated_s", "measured_median_s", "iqr_s", "host")


def benchmark_rows(benchmarks: list[dict]) -> list[dict]:
    """One flat row per stored measurement (``RunStore.benchmarks()``), columns :data:`BENCHMARK_COLUMNS`.

    ``simulated_s`` is empty for measurements from ``placement benchmark`` (it simulates nothing);
    ``run`` is the stored run the placement came from, if any.
    """
    rows = []
    for b in benchmarks:
        result = b.get("result") or {}
        rows.append({"benchmark": b["id"], "created": _when(b["created"]),
                     "network": b["network_name"], "batch_size": b.get("batch_size"), "run": b.get("run_id"),
                     "placement": b.get("label"), "runner": b["runner"], "devices": b["devices_spec"],
                     "status": result.get("status"), "simulated_s": b["simulated_s"],
                     "measured_median_s": b["measured_median_s"], "iqr_s": result.get("iqr_s"),
                     "host": (b.get("machine") or {}).get("host")})
    return rows


def export_benchmarks(store, network: str | None = None) -> Export:
    """Every stored benchmark (of one network, by name) as CSV: the comparison of placements measured for real."""
    rows = benchmark_rows(store.benchmarks(network_name=network))
    if not rows:
        where = f" of network {network!r}" if network else ""
        names = sorted({b["network_name"] for b in store.benchmarks()}) if network else []
        fix = ("Stored benchmarks are of: " + ", ".join(names)) if names else \
            "Record some with `placement benchmark` or the dashboard's Benchmark page"
        raise InputError(f"there are no benchmarks{where} in {store.path}", field="--network" if network else None,
                         fix=fix)
    name = f"benchmarks-{re.sub(r'[^A-Za-z0-9_.-]+', '_', network)}.csv" if network else "benchmarks.csv"
    return Export(rows_to_csv(rows).encode(), name, _MIME["csv"])


def _when(timestamp) -> str:
    """A stored time as local date and second; '?' for one no calendar holds (a damaged cell)."""
    import time
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))
    except (OverflowError, OSError, ValueError, TypeError):
        return "?"
