"""E5's outputs (:mod:`.e5`): the scatter of simulated against measured step times and ``report.md``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .plotting import pyplot, skipped

WHOLE = "calibrated, whole ops"  # the calibrated profile on the placements that split no op


def plot(rows: list[dict], result_metrics: dict, path: Path, title: str, statistic: str = "median") -> None:
    """Simulated against measured step time (``statistic`` of the steps), one panel per profile, y = x and the
    fitted line."""
    plt = pyplot()
    if plt is None:
        skipped(path)
        return

    colors = {"ga": "tab:blue", "random": "tab:red", "zones": "tab:orange", "split": "tab:green",
              "single": "black"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    measured = np.array([r[f"measured_{statistic}_s"] for r in rows]) * 1e3
    for ax, profile in zip(axes, ("calibrated", "default")):
        sim = np.array([r[f"sim_{profile}_s"] for r in rows]) * 1e3
        for kind, color in colors.items():
            sel = [i for i, r in enumerate(rows) if r["kind"] == kind]
            if sel:
                ax.scatter(measured[sel], sim[sel], s=22, color=color, label=kind, alpha=0.8)
        if profile == "calibrated" and any(r.get("sim_low_s") is not None for r in rows):  # the 90 % intervals
            has = [i for i, r in enumerate(rows) if r.get("sim_low_s") is not None]
            low = np.array([rows[i]["sim_low_s"] for i in has]) * 1e3
            high = np.array([rows[i]["sim_high_s"] for i in has]) * 1e3
            ax.errorbar(measured[has], sim[has], yerr=[sim[has] - low, high - sim[has]], fmt="none",
                        ecolor="gray", elinewidth=1, capsize=2, label="90 % interval (calibration spread)")
        lo = float(min(measured.min(), sim.min())) * 0.9
        hi = float(max(measured.max(), sim.max())) * 1.05
        ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="y = x")
        slope, intercept = np.polyfit(measured, sim, 1)
        xs = np.array([lo, hi])
        ax.plot(xs, slope * xs + intercept, color="gray", lw=1.2,
                label=f"fit: y = {slope:.2f} x {'+' if intercept >= 0 else '-'} {abs(intercept):.1f} ms")
        m = result_metrics[profile][statistic]
        ax.set_title(f"{profile}: r = {m['pearson_r']:.3f}, τ = {m['kendall_tau']:.3f}, "
                     f"MAPE = {m['mape_pct']:.1f} %", fontsize=10)
        ax.set_xlabel(f"measured step time, {statistic} (ms)")
        ax.set_ylabel("simulated step time (ms)")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(network, source, shape, batch, devices, rows, result_metrics, timings_doc, settings,
           command: str, load: tuple = ()) -> str:
    """report.md: the statistics of each profile, the calibration, and every placement (``settings``: the run's
    :class:`.e5.E5Settings`)."""
    ok = [r for r in rows if r["status"] == "ok"]
    failed = len(rows) - len(ok)
    kinds = {}
    for r in ok:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    lines = [f"# E5 on this machine: {network}, batch {batch}, input {'x'.join(map(str, shape[1:]))}, {devices}",
             "", f"Command: `{command}`" if command else "", "",
             f"Model `{source}`; {len(ok)} placements benchmarked ({', '.join(f'{v} {k}' for k, v in kinds.items())})"
             + (f", {failed} failed" if failed else "") + f"; {settings.rounds} interleaved rounds "
             + ("(each in its own random order) " if settings.shuffle else "") + f"of "
             f"{settings.steps} timed steps after {settings.warmup} warm-up steps each; a placement's measured "
             f"step time is the **{settings.statistic}** of its steps (the others for comparison; trimmed: the "
             f"mean without the fastest and slowest 20 %)."
             + (" Load average (1, 5, 15 min) before: {:.2f}, {:.2f}, {:.2f}; after: {:.2f}, {:.2f}, {:.2f}."
                .format(*load[0], *load[1]) if load else ""), "",
             "| profile | measured statistic | Pearson r | Kendall τ | MAPE |", "|---|---|---|---|---|"]
    for profile in [p for p in ("calibrated", "default", WHOLE) if p in result_metrics]:
        for stat in sorted(result_metrics[profile], key=lambda k: (k != settings.statistic, k)):
            m = result_metrics[profile][stat]
            name = f"**{stat}**" if stat == settings.statistic else stat
            lines.append(f"| {profile} | {name} | {m['pearson_r']:.3f} | {m['kendall_tau']:.3f} | "
                         f"{m['mape_pct']:.1f} % |")
    meas = timings_doc.get("measured", {})
    lines += ["", "Calibration (per device: measured single-device step, sum of per-op times, scale applied):", ""]
    for name, m in meas.items():
        lines.append(f"- {name}: step {m['step_s'] * 1e3:.1f} ms, ops {m['ops_sum_s'] * 1e3:.1f} ms, x{m['scale']:.2f}, "
                     f"GEMM {m['gemm_flops'] / 1e9:.1f} GFLOP/s, copy {m['copy_bandwidth'] / 1e9:.1f} GB/s"
                     + (f", {m['fixed_share']:.0%} of the ops' time fixed (measured at batch {m['half_batch']} too)"
                        if "fixed_share" in m else ""))
    lines += overhead_lines(timings_doc)
    pooled = [", ".join(g) for g in timings_doc.get("pooled") or []]
    if pooled:
        lines.append(f"- identical devices share the fastest of their measurements: {'; '.join(pooled)}")
    for name, c in timings_doc.get("channels", {}).items():
        # calibrations before the message overhead fitted the links' latency instead ("latency_fit")
        fitted = (f" (fitted to {timings_doc['latency_fit']['placements']} whole-step runs of calibration "
                  f"placements; ping-pong: {c['ping_pong_latency_s'] * 1e6:.0f} us)"
                  if "ping_pong_latency_s" in c and "latency_fit" in timings_doc else " (ping-pong)")
        fit = timings_doc.get("overhead_fit") or {}
        curve = c.get("transfer_curve") if fit.get("link_model", "curve") == "curve" else None
        lines.append(f"- {name}: latency {c['latency_s'] * 1e6:.0f} us{fitted}, bandwidth "
                     f"{c['bandwidth'] / 1e9:.3f} GB/s (ping-pong, 1e3..1e8 bytes)"
                     + (f"; the simulator uses the measured transfer curve ({len(curve)} sizes, "
                        f"{curve[0][1] * 1e6:.0f} us at {curve[0][0]:.0f} B to {curve[-1][1] * 1e3:.1f} ms at "
                        f"{curve[-1][0] / 1e6:.0f} MB)" if curve else ""))
    intervals = any(r.get("sim_low_s") is not None for r in ok)
    if intervals:
        ties = sum(bool(r.get("tied_with_next")) for r in ok)
        lines += ["", f"Simulated times carry a 90 % interval from the calibration's spread (how much each op time "
                      f"moved between calibration rounds; docs/e5.md, \"Uncertainty\"). {ties} of {len(ok)} placements "
                      "cannot be told from the next faster one by the simulator (the interval of their paired "
                      "difference contains zero)."]
    lines += ["", f"| placement | kind | measured {settings.statistic} (ms) | IQR (ms) | calibrated (ms) | "
                  + ("calibrated, 90 % (ms) | " if intervals else "")
                  + "default (ms) | messages/step |", "|---|---|---|---|---|---|---|" + ("---|" if intervals else "")]
    for r in sorted(ok, key=lambda r: r[f"measured_{settings.statistic}_s"]):
        band = ""
        if intervals:
            band = ("– | " if r.get("sim_low_s") is None
                    else f"{r['sim_low_s'] * 1e3:.1f} – {r['sim_high_s'] * 1e3:.1f} | ")
        lines.append(f"| {r['label']} | {r['kind']} | {r[f'measured_{settings.statistic}_s'] * 1e3:.1f} | "
                     f"{(r['q3_s'] - r['q1_s']) * 1e3:.1f} | {r['sim_calibrated_s'] * 1e3:.1f} | {band}"
                     f"{r['sim_default_s'] * 1e3:.1f} | {r['messages_per_step']:.0f} |")
    return "\n".join(lines) + "\n"


def overhead_lines(timings_doc: dict) -> list[str]:
    """The fitted message overhead, as report.md states it (nothing for a calibration without one)."""
    fit = timings_doc.get("overhead_fit")
    if not fit:
        return []
    return [f"- message overhead: {fit['message_overhead_s'] * 1e6:.0f} us of device time per message sent and per "
            f"message received on {', '.join(fit['devices'])} (send and receive tasks in the simulator, which the "
            f"device cannot spend computing), fitted to {fit['placements']} whole-step runs of calibration "
            f"placements (squared log error {fit['log_error_before']:.3g} without it, "
            f"{fit['log_error_after']:.3g} with it); both profiles simulate with it"] + _link_model_lines(fit)


def _link_model_lines(fit: dict) -> list[str]:
    models = fit.get("link_models")
    if not models:
        return []
    names = {"curve": "the measured transfer curve", "affine": "ping-pong latency + bytes / bandwidth"}
    return [f"- links: {names[fit['link_model']]}, the better of the two at reproducing those runs ("
            + "; ".join(f"{names[m]}: {v['message_overhead_s'] * 1e6:.0f} us, squared log error {v['log_error_after']:.3g}"
                        for m, v in models.items()) + ")"]
