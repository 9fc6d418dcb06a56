"""Experiment E1 of the thesis (§4.3.1): message size against practical bandwidth, and the link model it gives.

The thesis sent tensors of 10^3..10^9 bytes from the CPU to GPU 0 ten times each and found the practical
bandwidth far below PCIe's nominal 128 Gbit/s and strongly dependent on the size; it then charged every
transfer at 25 % of the nominal bandwidth. Here: every sample of a few bytes to hundreds of MB between two
local devices (:mod:`placement_core.torch.transfers`), the median and spread per size, the effective
bandwidth against the nominal link, and two link models fitted to the medians: latency + size / bandwidth
(what a channel's ``latency`` and ``bandwidth`` express) and the measured transfer curve (a channel's
``transfer_curve``, which the simulator interpolates). Writes ``samples.csv``, ``summary.csv``,
``devices.json`` (a device graph whose channel carries the fitted models), ``e1.png`` and the markdown.
"""

from __future__ import annotations

import csv
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ..model.devices import Channel, Device, DeviceGraph, curve_time, devices_to_dict
from ..analysis.calibration_fit import ETA_COMM, ETA_COMP, fit_curve, fit_link
from ..base.jsonio import write_json
from .e3 import kept_discussion, write_text
from .plotting import pyplot, skipped


@dataclass
class E1Result:
    rows: list[dict]  # per size: n, median, quartiles, min, max, bandwidths, model errors
    latency: float
    bandwidth: float
    curve: tuple
    devices: DeviceGraph
    load: tuple = ()
    files: dict = field(default_factory=dict)


def summarize(samples: dict[int, list[float]], latency: float, bandwidth: float, curve) -> list[dict]:
    rows = []
    for size in sorted(samples):
        xs = sorted(samples[size])
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else (xs[0],) * 3
        med = statistics.median(xs)
        linear = latency + size / bandwidth
        rows.append({"bytes": size, "n": len(xs), "median_s": med, "q1_s": q1, "q3_s": q3, "min_s": xs[0],
                     "max_s": xs[-1], "bandwidth_median": size / med, "bandwidth_q1": size / q3,
                     "bandwidth_q3": size / q1, "bandwidth_best": size / xs[0],
                     "linear_s": linear, "linear_error": linear / med - 1,
                     "curve_s": curve_time(curve, size) if curve else None,
                     "curve_error": curve_time(curve, size) / med - 1 if curve else None})
    return rows


def link_graph(measured, latency: float, bandwidth: float, curve) -> DeviceGraph:
    """The two devices (their GEMM rate, copy bandwidth and memory) and the link, as a device graph. Rates
    are stored divided by the default efficiencies, as calibration stores them; the curve as measured."""
    devs = []
    for d in measured.devices:
        f = measured.device_figures.get(d.name, {})
        devs.append(Device(d.name, d.kind, peak_flops=max(f.get("gemm_flops", 1.0) / ETA_COMP, 1.0),
                           memory_bytes=max(f.get("memory_bytes", 1.0), 1.0),
                           mem_bandwidth=max(f.get("copy_bandwidth", 1.0), 1.0),
                           model=f"{f.get('model', d.torch)}, {f.get('threads') or 'default'} thread(s), E1"))
    a, b = (d.name for d in measured.devices)
    link = Channel(f"{a}-{b}", bandwidth=bandwidth / ETA_COMM, latency=latency, routes=((a, b), (b, a)),
                   transfer_curve=curve)
    return DeviceGraph("local-e1", devs, [link])


def run_e1(devices: str, *, sizes, runner: str = "ranks", repeats: int = 10, rounds: int = 5,
           out_dir: str | Path = "docs/e1", markdown_path: str | Path | None = "docs/e1.md",
           nominal: float | None = None, command: str = "", timeout: float = 1800.0,
           progress=None) -> E1Result:
    from ..torch.transfers import measure_transfers

    load_before = os.getloadavg()
    measured = measure_transfers(devices, sizes=sizes, runner=runner, repeats=repeats, rounds=rounds,
                                 timeout=timeout, progress=progress)
    load = (load_before, os.getloadavg())
    medians = {s: statistics.median(v) for s, v in measured.samples.items()}
    latency, bandwidth = fit_link(list(medians), list(medians.values()))
    curve = fit_curve(list(medians), list(medians.values()))
    rows = summarize(measured.samples, latency, bandwidth, curve)
    graph = link_graph(measured, latency, bandwidth, curve)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"samples": out / "samples.csv", "summary": out / "summary.csv", "devices": out / "devices.json",
             "png": out / "e1.png"}
    with open(files["samples"], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["bytes", "round", "seconds"])
        for s in sorted(measured.samples):
            w.writerows([s, r, f"{t:.9g}"] for r, t in zip(measured.rounds[s], measured.samples[s]))
    with open(files["summary"], "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()} for r in rows)
    write_json(files["devices"], devices_to_dict(graph))
    copy = measured.device_figures.get(measured.devices[0].name, {}).get("copy_bandwidth")
    plot(rows, latency, bandwidth, curve, nominal, copy, files["png"],
         title=f"{measured.devices[0].name} ({measured.devices[0].torch}) -> {measured.devices[1].name} "
               f"({measured.devices[1].torch}), {runner} runner")
    result = E1Result(rows, latency, bandwidth, curve, graph, load, {k: str(v) for k, v in files.items()})
    if markdown_path is not None:
        path = Path(markdown_path)
        text = report(result, measured, devices, repeats, rounds, nominal, copy, command,
                      os.path.relpath(files["png"], path.parent), os.path.relpath(out, path.parent))
        write_text(path, text + kept_discussion(path))
        result.files["markdown"] = str(path)
    return result


def plot(rows, latency, bandwidth, curve, nominal, copy, path: Path, title: str) -> None:
    """Effective bandwidth (size / one-way time) against size, with the nominal link, and the time itself."""
    plt = pyplot()
    if plt is None:
        skipped(path)
        return
    import numpy as np

    sizes = np.array([r["bytes"] for r in rows], dtype=float)
    grid = np.geomspace(sizes[0], sizes[-1], 200)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.8))
    ax.fill_between(sizes, [r["bandwidth_q1"] / 1e9 for r in rows], [r["bandwidth_q3"] / 1e9 for r in rows],
                    color="tab:blue", alpha=0.25, label="measured, interquartile range")
    ax.plot(sizes, [r["bandwidth_median"] / 1e9 for r in rows], "o-", color="tab:blue", label="measured, median")
    ax.plot(grid, grid / (latency + grid / bandwidth) / 1e9, color="tab:orange",
            label=f"latency + size / bandwidth ({latency * 1e6:.0f} µs, {bandwidth / 1e9:.2f} GB/s)")
    if curve:
        ax.plot(grid, grid / np.array([curve_time(curve, g) for g in grid]) / 1e9, color="tab:green", ls="--",
                label="transfer curve (the simulator's model)")
    if nominal:
        ax.axhline(nominal / 1e9, color="black", ls="--", lw=1, label=f"nominal link ({nominal / 1e9:.3g} GB/s)")
    if copy:
        ax.axhline(copy / 1e9, color="gray", ls=":", lw=1.2,
                   label=f"memory copy on the sender ({copy / 1e9:.3g} GB/s)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("effective bandwidth (GB/s)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7.5, loc="lower right")
    bx.errorbar(sizes, [r["median_s"] * 1e3 for r in rows],
                yerr=[[(r["median_s"] - r["q1_s"]) * 1e3 for r in rows], [(r["q3_s"] - r["median_s"]) * 1e3
                                                                           for r in rows]],
                fmt="o", color="tab:blue", ms=4, capsize=2, label="measured median, IQR")
    bx.plot(grid, (latency + grid / bandwidth) * 1e3, color="tab:orange", label="latency + size / bandwidth")
    if curve:
        bx.plot(grid, [curve_time(curve, g) * 1e3 for g in grid], color="tab:green", ls="--", label="transfer curve")
    bx.set_xscale("log")
    bx.set_yscale("log")
    bx.set_xlabel("message size (bytes)")
    bx.set_ylabel("one-way time (ms)")
    bx.grid(alpha=0.3, which="both")
    bx.legend(fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(result: E1Result, measured, devices: str, repeats: int, rounds: int, nominal, copy, command: str,
           png: str, folder: str) -> str:
    from ..base.units import fmt_bytes, fmt_seconds
    rows = result.rows
    (b1, b5, b15), (a1, a5, a15) = result.load
    peak = max(rows, key=lambda r: r["bandwidth_median"])
    lines = ["# Experiment E1: message size against practical bandwidth", "",
             f"Reproduce with:\n\n```bash\n{command}\n```\n" if command else "",
             f"Devices `{devices}` ({measured.runner} runner"
             + (f"; cores {measured.cores}" if measured.cores else "") + f"): {rounds} rounds × {repeats} "
             f"samples per size, sizes interleaved (ascending, then descending); one-way time of each message "
             f"({'a ping-pong halved' if measured.runner == 'ranks' else 'tensor.to(dst), synchronised'}). "
             f"Load average (1, 5, 15 min) before: {b1:.2f}, {b5:.2f}, {b15:.2f}; after: {a1:.2f}, {a5:.2f}, "
             f"{a15:.2f}.", "",
             f"![effective bandwidth and one-way time against message size]({png})", "",
             f"Files: [samples.csv]({folder}/samples.csv) (every sample), [summary.csv]({folder}/summary.csv), "
             f"[devices.json]({folder}/devices.json) (a `placement-devices/1` graph whose channel carries both "
             f"models: `latency` and `bandwidth` divided by the default η_comm 0.25, and the `transfer_curve`).",
             "", "| size | samples | median | IQR | min | bandwidth (median) | latency + size / bandwidth | "
                 "transfer curve |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        curve = f"{r['curve_error'] * 100:+.1f} %" if r["curve_error"] is not None else "–"
        lines.append(f"| {fmt_bytes(r['bytes'])} | {r['n']} | {fmt_seconds(r['median_s'])} | "
                     f"{fmt_seconds(r['q1_s'])} – {fmt_seconds(r['q3_s'])} | {fmt_seconds(r['min_s'])} | "
                     f"{fmt_bytes(r['bandwidth_median'])}/s | {r['linear_error'] * 100:+.1f} % | {curve} |")
    worst = max(rows, key=lambda r: abs(r["linear_error"]))
    lines += ["", "The last two columns: each model's time against the measured median (+ = the model is slower).",
              "", f"- Fitted latency + size / bandwidth (least squares on relative error): latency "
              f"{fmt_seconds(result.latency)}, bandwidth {result.bandwidth / 1e9:.3g} GB/s; its worst size is "
              f"{fmt_bytes(worst['bytes'])} ({worst['linear_error'] * 100:+.0f} %).",
              f"- Transfer curve: the {len(result.curve)} medians, made non-decreasing; the simulator "
              "interpolates between them (docs/formats.md, `transfer_curve`).",
              f"- Peak effective bandwidth {peak['bandwidth_median'] / 1e9:.3g} GB/s at {fmt_bytes(peak['bytes'])}"
              + (f": {peak['bandwidth_median'] / nominal * 100:.0f} % of the nominal {nominal / 1e9:.3g} GB/s"
                 if nominal else "")
              + (f"; the sender's memory copy runs at {copy / 1e9:.3g} GB/s" if copy else "") + ".", ""]
    return "\n".join(lines)
