"""E5 repeated: consecutive runs of one model, each with its own calibration and benchmarks, and a summary.

One E5 run can pass or miss τ ≥ 0.8 by chance on a shared machine; three consecutive runs show whether
the figure holds. Run k writes its own folder ``runK`` (report, scatter, results) and ``summary.md``
gathers the headline figures of every run so far (it is rewritten after each run, so a stopped series
keeps what it measured).
"""

from __future__ import annotations

from pathlib import Path

from .e3 import write_text
from .e5 import WHOLE, E5Result, E5Settings, run_e5

TARGET_TAU = 0.8


def run_series(source: str, input_shape, devices: str, *, batch_size: int | None, out_dir: str | Path, runs: int,
               settings: E5Settings, calibration_dir=None, command: str = "", progress=None) -> list[E5Result]:
    say = progress or (lambda _: None)
    out = Path(out_dir)
    results: list[E5Result] = []
    for k in range(1, runs + 1):
        say(f"E5 run {k}/{runs}")
        results.append(run_e5(source, input_shape, devices, batch_size=batch_size, out_dir=out / f"run{k}",
                              settings=settings, calibration_dir=calibration_dir, progress=say, command=command))
        write_text(out / "summary.md", summary(results, source, devices, settings, command))
    return results


def summary(results: list[E5Result], source: str, devices: str, settings: E5Settings, command: str) -> str:
    stat = settings.statistic
    lines = [f"# E5, {len(results)} consecutive run(s): `{source}` on `{devices}`", "",
             f"Command: `{command}`" if command else "", "",
             f"Each run calibrates afresh and benchmarks every placement; a placement's measured step is the "
             f"{stat} of its steps. Kendall τ and MAPE of the calibrated profile against it; the other "
             "statistics and the default profile for comparison.", "",
             "| run | placements | τ (calibrated) | Pearson r | MAPE | τ, other statistics | τ (default) | "
             "τ, placements that split no op | load average before → after |", "|---|---|---|---|---|---|---|---|---|"]
    for k, r in enumerate(results, 1):
        m = r.metrics["calibrated"][stat]
        others = ", ".join(f"{s} {v['kendall_tau']:.3f}" for s, v in r.metrics["calibrated"].items() if s != stat)
        load = f"{r.load[0][0]:.2f} → {r.load[1][0]:.2f}" if r.load else "–"
        whole = r.metrics.get(WHOLE, {}).get(stat)
        whole = f"{whole['kendall_tau']:.3f} ({whole['n']})" if whole else "–"
        lines.append(f"| [{k}](run{k}/report.md) | {m['n']} | **{m['kendall_tau']:.3f}** | {m['pearson_r']:.3f} | "
                     f"{m['mape_pct']:.1f} % | {others} | {r.metrics['default'][stat]['kendall_tau']:.3f} | {whole} | "
                     f"{load} |")
    taus = [r.metrics["calibrated"][stat]["kendall_tau"] for r in results]
    held = all(t >= TARGET_TAU for t in taus)
    lines += ["", f"τ over the runs: {min(taus):.3f} – {max(taus):.3f}; τ ≥ {TARGET_TAU} "
              + ("in every run." if held else f"in {sum(t >= TARGET_TAU for t in taus)} of {len(taus)} runs.")]
    return "\n".join(lines) + "\n"
