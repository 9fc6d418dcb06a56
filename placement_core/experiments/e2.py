"""Experiment E2 of the thesis (§4.3.2): how stable are training-step times, and how should a benchmark read them?

The thesis ran 75 AlexNet configurations for 50 batches each, normalised each run's batch times by its
mean and averaged the residuals per batch index: apart from the first batch, only noise below 1.5 %, so it
dropped the first batch and averaged the rest. Here: ``configurations`` placements of a model (every single
device, then random contiguous zones and random mixes), each run for ``steps`` steps in ``rounds``
interleaved rounds by the benchmark's own workers (:mod:`placement_core.torch.benchmark`, ``ranks``
runner, with the first step timed as it is: no memory tracking). Every step's time is kept.

What it answers, from the numbers:

* **Warm-up**: the residual (step / the run's median − 1) per step index, averaged over runs, with its 95 %
  confidence interval, and its median over runs; the recommended warm-up is the first index from which the
  median residual of every later one of the first ten stays within the steady state's own scatter (see
  :func:`recommended_warmup`).
* **Statistic**: each run after the warm-up is cut into windows of ``window`` steps (the benchmark's default
  10); per statistic (mean, median, min, 20 % trimmed mean), how much one configuration's estimate moves
  between windows (relative spread) and how well two windows order the configurations alike (Kendall τ,
  what E5 needs). Neither needs a "true" time, so no statistic is favoured by the yardstick.
* **Outliers**: steps above Q3 + 3 IQR of their run, and where they fall.
"""

from __future__ import annotations

import csv
import itertools
import math
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis.stats import kendall_tau
from ..base.jsonio import write_json
from ..analysis.stats import mean_ci
from .e3 import kept_discussion, write_text
from .plotting import pyplot, skipped

STATISTICS = ("mean", "median", "min", "trimmed")
WARMUPS = (0, 1, 2, 3, 5)
PROFILE_STEPS = 10  # step indices shown and searched for the warm-up


def estimate(xs: list[float], stat: str) -> float:
    xs = sorted(xs)
    if stat == "mean":
        return statistics.fmean(xs)
    if stat == "median":
        return statistics.median(xs)
    if stat == "min":
        return xs[0]
    if stat == "trimmed":  # drop the slowest and the fastest 20 %
        k = int(len(xs) * 0.2)
        return statistics.fmean(xs[k:len(xs) - k] if len(xs) > 2 * k else xs)
    raise ValueError(f"unknown statistic {stat!r}")


def residuals(run: list[float]) -> list[float]:
    """Each step against the run's median (the thesis used the mean, which one 3x outlier in 50 steps moves
    by 4 %)."""
    m = statistics.median(run)
    return [t / m - 1 for t in run]


def profile(runs: list[list[float]], steps: int = PROFILE_STEPS) -> list[dict]:
    """Per step index: mean residual over runs with its 95 % CI, and how often that step is its run's slowest."""
    res = [residuals(r) for r in runs]
    out = []
    for i in range(min(steps, min(len(r) for r in runs))):
        vals = [r[i] for r in res]
        m, h = mean_ci(vals)
        out.append({"step": i, "mean_residual": m, "ci95": h, "median_residual": statistics.median(vals),
                    "slowest_share": sum(1 for r in runs if r[i] == max(r)) / len(runs)})
    return out


def steady_scatter(runs: list[list[float]], start: int = PROFILE_STEPS) -> tuple[float, float]:
    """The steady state's median residual per step index from ``start`` on: its mean and standard deviation
    over indices (how far one index's typical residual wanders by chance)."""
    res = [residuals(r) for r in runs]
    n = min(len(r) for r in runs)
    typical = [statistics.median(r[i] for r in res) for i in range(start, n)]
    if len(typical) < 2:
        return (typical[0] if typical else 0.0), 0.0
    return statistics.fmean(typical), statistics.stdev(typical)


def slowest_p_value(runs: list[list[float]], step: int) -> float:
    """How likely it is that step ``step`` is its run's slowest in as many runs as it is, were every step of a
    run equally likely to be the slowest (binomial tail, p = 1 / steps per run)."""
    k = sum(1 for r in runs if r[step] == max(r))
    n, p = len(runs), 1 / min(len(r) for r in runs)
    if k == 0:
        return 1.0
    return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1))


def recommended_warmup(runs: list[list[float]], floor: float = 0.005, alpha: float = 0.001) -> int:
    """The first index w from which no index of the first ten is a warm-up step. Index i is one when its
    median residual over runs (a warm-up slows most runs, a disturbance of the machine a few) is more than 3
    standard deviations of the steady state's (indices 10 on; at least ``floor``, half a per cent) away from
    it, or when it is its run's slowest step far more often than chance allows (p < ``alpha``), as happens
    when a warm-up slows only some runs but those by much."""
    rows = profile(runs)
    centre, sd = steady_scatter(runs)
    tol = max(3 * sd, floor)
    w = 0
    for row in rows:
        if abs(row["median_residual"] - centre) > tol or slowest_p_value(runs, row["step"]) < alpha:
            w = row["step"] + 1
    return w


def windows(run: list[float], warmup: int, size: int) -> list[list[float]]:
    return [run[a:a + size] for a in range(warmup, len(run) - size + 1, size)]


def statistic_table(configs: list[list[list[float]]], warmup: int, size: int) -> list[dict]:
    """Per statistic: the median over configurations of the estimate's relative spread across windows, and
    the mean Kendall τ between the configurations' orders in two windows (windows of one round and of
    different rounds alike: the k-th window of every configuration is one 'benchmark')."""
    out = []
    for stat in STATISTICS:
        per_config = []  # per configuration: its estimates, window by window (rounds one after another)
        for runs in configs:
            per_config.append([estimate(w, stat) for r in runs for w in windows(r, warmup, size)])
        k = min(len(e) for e in per_config)
        spreads = [statistics.stdev(e) / statistics.fmean(e) for e in per_config if len(e) > 1]
        taus = [kendall_tau([e[a] for e in per_config], [e[b] for e in per_config])
                for a, b in itertools.combinations(range(k), 2)]
        taus = [t for t in taus if not math.isnan(t)]
        out.append({"statistic": stat, "windows": k, "spread": statistics.median(spreads) if spreads else 0.0,
                    "tau": statistics.fmean(taus) if taus else float("nan")})
    return out


def first_window_bias(configs: list[list[list[float]]], size: int, stat: str) -> list[dict]:
    """Per warm-up w: how far the first window after w reads from the later windows (same statistic),
    median over runs. A warm-up that is too short reads slow."""
    out = []
    for w in WARMUPS:
        biases = []
        for runs in configs:
            for r in runs:
                later = [estimate(x, stat) for x in windows(r, max(WARMUPS) + size, size)]
                if later and len(r) >= w + size:
                    biases.append(estimate(r[w:w + size], stat) / statistics.median(later) - 1)
        out.append({"warmup": w, "bias": statistics.median(biases) if biases else float("nan"),
                    "p90": sorted(biases)[int(0.9 * (len(biases) - 1))] if biases else float("nan")})
    return out


def outliers(runs: list[list[float]]) -> dict:
    """Steps above Q3 + 3 IQR of their own run: how many, at which indices, how large."""
    found = []
    for r in runs:
        q1, _, q3 = statistics.quantiles(r, n=4, method="inclusive")
        m = statistics.median(r)
        found += [(i, t / m) for i, t in enumerate(r) if t > q3 + 3 * (q3 - q1)]
    total = sum(len(r) for r in runs)
    first = [i for i, _ in found if i < 3]
    return {"count": len(found), "share": len(found) / total if total else 0.0, "in_first_three": len(first),
            "largest": max((x for _, x in found), default=1.0),
            "indices": sorted({i for i, _ in found})}


@dataclass
class E2Result:
    labels: list[str]
    runs: list[list[list[float]]]  # configuration -> round -> step times (step 0 first)
    warmup: int
    statistic: str
    tables: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)


def analyse(labels, configs, window: int) -> E2Result:
    runs = [r for c in configs for r in c]
    w = recommended_warmup(runs)
    table = statistic_table(configs, max(w, 1), window)
    best = max(table, key=lambda t: (round(t["tau"], 2), -t["spread"]))
    return E2Result(labels, configs, w, best["statistic"], {
        "profile": profile(runs), "steady": steady_scatter(runs), "statistics": table,
        "bias": first_window_bias(configs, window, best["statistic"]), "outliers": outliers(runs),
        "window": window})


# -- the experiment ---------------------------------------------------------------------------------

def run_e2(source: str, input_shape, devices: str, *, batch_size: int | None, configurations: int = 12,
           steps: int = 50, rounds: int = 2, window: int = 10, seed: int = 0, timeout: float = 600.0,
           out_dir: str | Path = "docs/e2", markdown_path: str | Path | None = "docs/e2.md", command: str = "",
           progress=None) -> E2Result:
    from ..base.errors import InputError
    from ..analysis.calibration_fit import fit_placements
    from ..torch.benchmark import BenchmarkSettings, benchmark
    from ..torch.devspec import parse_devices
    from ..torch.model_import import trace_model
    from ..torch.sources import load_model, parse_input_shape, parse_source

    say = progress or (lambda _: None)
    if steps < max(WARMUPS) + 3 * window:
        raise InputError(f"{steps} steps leave too few windows of {window} after a warm-up of up to "
                         f"{max(WARMUPS)}", field="--steps", fix=f"Use at least {max(WARMUPS) + 3 * window} steps")
    shape = parse_input_shape(input_shape)
    batch = int(batch_size or shape[0])
    devs = parse_devices(devices)
    src = parse_source(source)
    graph = trace_model(load_model(src, seed=seed), shape, name=src.default_name).graph
    names = [d.name for d in devs]
    placements = [[i] * len(graph) for i in range(len(devs))][:configurations]
    if len(devs) > 1 and configurations > len(placements):
        placements += [x.tolist() for x in fit_placements(len(graph), len(devs), configurations - len(placements),
                                                          seed + 1)]
    labels = [f"single:{names[p[0]]}" if len(set(p)) == 1 else f"mix #{k - len(devs)}"
              for k, p in enumerate(placements)]
    say(f"{len(placements)} configurations x {rounds} rounds x {steps} steps of {graph.name} (batch {batch}) ...")
    load_before = os.getloadavg()
    results = benchmark(source, shape, [{op.name: names[i] for op, i in zip(graph.ops, p)} for p in placements],
                        devs, runner="ranks", batch_size=batch, name=graph.name,
                        settings=BenchmarkSettings(steps=steps - 1, warmup=1, rounds=rounds, seed=seed,
                                                   timeout=timeout, track_memory=False),
                        progress=lambda done, total: say(f"  {done}/{total} runs"))
    load = (load_before, os.getloadavg())
    configs, kept = [], []
    for label, r in zip(labels, results):
        if not r.ok:
            say(f"{label}: {r.status}: {r.message}")
            continue
        n = steps - 1
        configs.append([[r.warmup_s[k]] + r.steps_s[k * n:(k + 1) * n] for k in range(rounds)])
        kept.append(label)
    if len(configs) < 3:
        raise InputError(f"only {len(configs)} configurations could be run", field="e2",
                         fix="Check that the model trains on these devices (placement benchmark)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "steps.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["configuration", "round", "step", "seconds"])
        for label, runs in zip(kept, configs):
            for k, run in enumerate(runs):
                w.writerows([label, k, i, f"{t:.9g}"] for i, t in enumerate(run))
    meta = {"source": source, "input_shape": list(shape), "batch_size": batch, "devices": devices, "steps": steps,
            "rounds": rounds, "network": graph.name, "load": [list(load[0]), list(load[1])], "command": command}
    write_json(out / "run.json", meta)
    return write_e2(out, window, markdown_path)


def write_e2(out_dir: str | Path, window: int = 10, markdown_path: str | Path | None = "docs/e2.md") -> E2Result:
    """Analyse the steps an E2 run recorded in ``out_dir`` (steps.csv, run.json); write e2.png and the report.
    ``placement experiment e2 --reanalyse DIR`` calls this alone: a change of analysis needs no new run."""
    from ..base.errors import InputError
    from ..base.jsonio import read_json
    out = Path(out_dir)
    if not (out / "steps.csv").is_file() or not (out / "run.json").is_file():
        raise InputError(f"{out} holds no recorded E2 run (steps.csv and run.json)", field="--reanalyse",
                         fix="Give the --out folder of an earlier placement experiment e2")
    meta = read_json(out / "run.json")
    runs: dict[str, dict[int, list[tuple[int, float]]]] = {}
    with open(out / "steps.csv", newline="") as f:
        for row in csv.DictReader(f):
            runs.setdefault(row["configuration"], {}).setdefault(int(row["round"]), []).append(
                (int(row["step"]), float(row["seconds"])))
    labels = list(runs)
    configs = [[[t for _, t in sorted(runs[c][k])] for k in sorted(runs[c])] for c in labels]
    result = analyse(labels, configs, window)
    files = {"steps": out / "steps.csv", "run": out / "run.json", "png": out / "e2.png"}
    plot(result, files["png"], title=f"{meta['network']} (batch {meta['batch_size']}) on {meta['devices']}: "
                                     f"{len(configs)} configurations x {meta['rounds']} rounds x {meta['steps']} steps")
    result.files = {k: str(v) for k, v in files.items()}
    if markdown_path is not None:
        path = Path(markdown_path)
        load = tuple(tuple(x) for x in meta["load"])
        text = report(result, meta["source"], meta["input_shape"], meta["batch_size"], meta["devices"], meta["steps"],
                      meta["rounds"], load, meta["command"], os.path.relpath(files["png"], path.parent),
                      os.path.relpath(files["steps"], path.parent))
        write_text(path, text + kept_discussion(path))
        result.files["markdown"] = str(path)
    return result


def plot(result: E2Result, path: Path, title: str) -> None:
    plt = pyplot()
    if plt is None:
        skipped(path)
        return
    import numpy as np

    runs = [r for c in result.runs for r in c]
    res = np.array([residuals(r) for r in runs]) * 100
    n = res.shape[1]
    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(15, 4.4))
    rows = profile(runs, n)
    mean = np.array([r["mean_residual"] for r in rows]) * 100
    half = np.array([r["ci95"] for r in rows]) * 100
    ax.fill_between(range(n), mean - half, mean + half, color="tab:blue", alpha=0.25, label="95 % CI")
    ax.plot(range(n), mean, "o-", ms=3, color="tab:blue", label="mean over runs")
    ax.axhline(0, color="black", lw=0.8)
    ax.axvline(result.warmup - 0.5, color="tab:red", ls="--", lw=1, label=f"recommended warm-up: {result.warmup}")
    ax.set_xlabel("step index")
    ax.set_ylabel("residual: step / run's median - 1 (%)")
    ax.set_title("Average residual per step (thesis Fig. 4.3)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    after = res[:, max(result.warmup, 1):].ravel()
    bx.hist(np.clip(after, -20, 50), bins=70, color="tab:gray")
    bx.set_yscale("log")
    bx.set_xlabel("residual after the warm-up (%, clipped to -20..50)")
    bx.set_ylabel("steps")
    bx.set_title(f"Distribution: median |residual| {np.median(np.abs(after)):.1f} %, "
                 f"{(after > 10).mean() * 100:.1f} % of steps > +10 %", fontsize=10)
    bx.grid(alpha=0.3)
    for k, (label, c) in enumerate(zip(result.labels, result.runs)):
        for r in c:
            cx.plot(np.array(r) * 1e3, lw=0.8, color=plt.get_cmap("tab20")(k % 20), alpha=0.8,
                    label=label if r is c[0] else None)
    cx.set_yscale("log")
    cx.set_xlabel("step index")
    cx.set_ylabel("step time (ms, log)")
    cx.set_title("Every run", fontsize=10)
    cx.grid(alpha=0.3, which="both")
    cx.legend(fontsize=6, ncol=2)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(result: E2Result, source, shape, batch, devices, steps, rounds, load, command, png, csv_path) -> str:
    t = result.tables
    (b1, b5, b15), (a1, a5, a15) = load
    centre, sd = t["steady"]
    o = t["outliers"]
    lines = ["# Experiment E2: stability of training-step times", "",
             f"Reproduce with:\n\n```bash\n{command}\n```\n" if command else "",
             f"Model `{source}`, input {'x'.join(map(str, shape[1:]))}, batch {batch}, devices `{devices}` (ranks "
             f"runner, each rank pinned to its own cores); {len(result.runs)} configurations × {rounds} rounds "
             f"(interleaved) × {steps} steps, every step kept ([steps.csv]({csv_path})). Load average (1, 5, "
             f"15 min) before: {b1:.2f}, {b5:.2f}, {b15:.2f}; after: {a1:.2f}, {a5:.2f}, {a15:.2f}.", "",
             f"![residual per step, distribution and every run]({png})", "",
             "## Warm-up", "",
             "Residual = step time / its run's median − 1, averaged over all runs per step index.", "",
             "| step | mean residual | 95 % CI | median residual | runs whose slowest step it is | chance of that |",
             "|---|---|---|---|---|---|"]
    runs = [r for c in result.runs for r in c]
    for r in t["profile"]:
        lines.append(f"| {r['step']} | {r['mean_residual'] * 100:+.1f} % | ± {r['ci95'] * 100:.1f} % | "
                     f"{r['median_residual'] * 100:+.1f} % | {r['slowest_share'] * 100:.0f} % | "
                     f"{slowest_p_value(runs, r['step']):.2g} |")
    lines += ["", f"From step {PROFILE_STEPS} on the median residual per index averages {centre * 100:+.2f} % "
              f"and wanders by {sd * 100:.2f} % (standard deviation over indices). **Recommended warm-up: "
              f"{result.warmup} step(s)**: from there on the median residual of every index of the first "
              f"{PROFILE_STEPS} is within {max(3 * sd, 0.005) * 100:.1f} % (3 standard deviations, at least 0.5 %) "
              "of the steady state's (a warm-up slows most runs; a disturbance of the machine, a few), and none is "
              "its run's slowest step more often than chance allows (the last column: the probability of so many "
              f"runs or more, were each of a run's {min(len(r) for r in runs)} steps equally likely to be its "
              "slowest; below 0.001 counts).", "",
              f"Outliers (above Q3 + 3 IQR of their run): {o['count']} of "
              f"{sum(len(r) for c in result.runs for r in c)} steps ({o['share'] * 100:.1f} %), "
              f"{o['in_first_three']} of them among the first three steps; the largest is "
              f"{o['largest']:.2f}× its run's median.", "",
              "## Statistic", "",
              f"After {max(result.warmup, 1)} warm-up step(s), each run is cut into windows of {t['window']} steps "
              "(one benchmark each). Spread: how much one configuration's estimate moves between windows "
              "(standard deviation / mean, median over configurations). τ: how alike two windows order the "
              "configurations (Kendall τ-b, mean over pairs of windows).", "",
              "| statistic | windows | spread | τ between windows |", "|---|---|---|---|"]
    for r in t["statistics"]:
        lines.append(f"| {r['statistic']} | {r['windows']} | {r['spread'] * 100:.2f} % | {r['tau']:.3f} |")
    lines += ["", f"**The steadiest statistic here: {result.statistic}** (the highest τ to two decimals, then the "
              "smallest spread). The first window against the later ones with it (median over runs, and the 90th "
              "percentile), by warm-up:", "",
              "| warm-up | bias of the first window | 90th percentile |", "|---|---|---|"]
    for r in t["bias"]:
        lines.append(f"| {r['warmup']} | {r['bias'] * 100:+.2f} % | {r['p90'] * 100:+.2f} % |")
    return "\n".join(lines) + "\n"
